"""`NSQDataSource`: the PySpark data source registered as format ``nsq``; it parses the options
and hands out the streaming reader (`source`: the staged one when ``stagingLocation`` is given,
else the driver-side one) and the batch/streaming writers (`sink`)."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from .options import SinkOptions, SourceOptions
from .sink import NSQStreamWriter, NSQWriter
from .source import SOURCE_SCHEMA, NSQStagedStreamReader, NSQStreamReader

__all__ = ["NSQDataSource"]


class NSQDataSource(DataSource):
    """``nsq``: read a topic/channel as a stream, publish a DataFrame (batch or stream)."""

    @classmethod
    def name(cls) -> str:
        return "nsq"

    def schema(self) -> StructType:
        return SOURCE_SCHEMA

    def streamReader(self, schema: StructType) -> Any:
        options = SourceOptions.parse(self.options)
        if options.staging_location:
            return NSQStagedStreamReader(options)
        return NSQStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        return NSQWriter(SinkOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        return NSQStreamWriter(SinkOptions.parse(self.options), schema)
