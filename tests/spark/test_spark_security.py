"""The source's and sink's TLS (with a CA), snappy/deflate and AUTH options, against an nsqd
that requires TLS and AUTH (trustme CA, a local auth server); option validation."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import trustme

from trionsq.spark.options import OptionError, SinkOptions, SourceOptions
from trionsq.testing import DaemonProcess, pythonpath_env

from .conftest import channel_stats, http, tcp


class _Auth(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        secret = parse_qs(urlsplit(self.path).query).get("secret", [""])[0]
        granted = {
            "ttl": 60,
            "identity": "spark",
            "authorizations": [
                {"topic": ".*", "channels": [".*"], "permissions": ["publish", "subscribe"]}
            ],
        }
        body = json.dumps(granted if secret == "s3cret" else {"message": "denied"}).encode()
        self.send_response(200 if secret == "s3cret" else 403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def secure_nsqd(tmp_path: Path) -> Iterator[tuple[DaemonProcess, str]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca_file, cert_file, key_file = (str(tmp_path / n) for n in ("ca.pem", "c.pem", "k.pem"))
    ca.cert_pem.write_to_path(ca_file)
    cert.cert_chain_pems[0].write_to_path(cert_file)
    cert.private_key_pem.write_to_path(key_file)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Auth)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    flags = [
        f"--tls-cert={cert_file}",
        f"--tls-key={key_file}",
        "--tls-required=tcp-https",  # TCP needs TLS; plain HTTP (/stats) allowed
        f"--auth-http-address=127.0.0.1:{server.server_address[1]}",
    ]
    try:
        with DaemonProcess("nsqd", flags, env=pythonpath_env()) as daemon:
            yield daemon, ca_file
    finally:
        server.shutdown()
        server.server_close()


def test_tls_compression_and_auth_on_the_sink_and_the_staged_source(
    spark: Any, secure_nsqd: tuple[DaemonProcess, str], tmp_dir: str
) -> None:
    nsqd, ca_file = secure_nsqd
    bodies = [f"secure {i}" for i in range(700)]
    common = {"nsqd": tcp(nsqd), "tlsCaFile": ca_file, "authSecret": "s3cret"}
    df = spark.createDataFrame([(b,) for b in bodies], "body string").repartition(2)
    writer = df.write.format("nsq").mode("append").option("topic", "sec").option("snappy", "true")
    for key, value in common.items():
        writer = writer.option(key, value)
    writer.save()

    reader = (
        spark.readStream.format("nsq")
        .option("topic", "sec")
        .option("channel", "spark")
        .option("deflate", "true")
        .option("nsqdHttp", http(nsqd))
        .option("stagingLocation", f"{tmp_dir}/staging")
    )
    for key, value in common.items():
        reader = reader.option(key, value)
    rows: list[Any] = []
    query = (
        reader.load()
        .writeStream.foreachBatch(lambda b, _: rows.extend(b.collect()))
        .option("checkpointLocation", f"{tmp_dir}/ck")
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120) and query.exception() is None
    assert sorted(r.body for r in rows) == sorted(b.encode() for b in bodies)
    assert channel_stats(nsqd, "sec", "spark")["depth"] == 0

    # A secret the auth server refuses fails the write with nsqd's error.
    bad = df.write.format("nsq").mode("append").option("topic", "sec")
    for key, value in {**common, "authSecret": "wrong"}.items():
        bad = bad.option(key, value)
    with pytest.raises(Exception, match="E_AUTH_FAILED"):
        bad.save()


def test_security_options_parse_and_validate() -> None:
    base = {"topic": "t", "channel": "c", "nsqd": "127.0.0.1:4150"}
    opts = SourceOptions.parse({**base, "tlsCaFile": "/ca.pem", "snappy": "true"})
    conn = opts.connection_options()
    assert conn.tls_v1 and conn.tls_cafile == "/ca.pem" and conn.snappy and not conn.deflate
    sink = SinkOptions.parse({"nsqd": "127.0.0.1:4150", "authSecret": "x", "deflate": "1"})
    assert sink.security.auth_secret == "x" and sink.security.deflate
    assert not SourceOptions.parse(base).connection_options().tls_v1
    with pytest.raises(OptionError, match="choose one"):
        SourceOptions.parse({**base, "snappy": "true", "deflate": "true"})
    with pytest.raises(OptionError, match="not true or false"):
        SourceOptions.parse({**base, "tls": "maybe"})
    with pytest.raises(OptionError, match="tlsCertFile"):
        SinkOptions.parse({"nsqd": "127.0.0.1:4150", "tlsKeyFile": "/k.pem"})
    with pytest.raises(OptionError, match="nsqdHttp"):
        SourceOptions.parse({**base, "nsqdHttp": "127.0.0.1:1,127.0.0.1:2"})
