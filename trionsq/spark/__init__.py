"""trionsq.spark: NSQ as a PySpark data source (format ``nsq``: a streaming source with
at-least-once delivery, a batch and streaming sink publishing with MPUB) and the
``trionsq spark archive`` / ``replay`` pipeline. pyspark is imported only when used.

    import trionsq.spark
    trionsq.spark.register(spark)
    spark.readStream.format("nsq").option("nsqd", "127.0.0.1:4150")
        .option("topic", "events").option("channel", "spark").load()
"""

from __future__ import annotations

from typing import Any

__all__ = ["archive", "register", "replay"]


def register(spark: Any) -> None:
    """Register the ``nsq`` data source with a SparkSession."""
    from .datasource import NSQDataSource

    spark.dataSource.register(NSQDataSource)


def archive(*args: Any, **kwargs: Any) -> Any:
    """See `trionsq.spark.pipeline.archive`."""
    from .pipeline import archive as run

    return run(*args, **kwargs)


def replay(*args: Any, **kwargs: Any) -> Any:
    """See `trionsq.spark.pipeline.replay`."""
    from .pipeline import replay as run

    return run(*args, **kwargs)
