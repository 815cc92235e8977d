"""The pytest plugin `trionsq.testing.pytest` (docs/testing.md), from throwaway projects.

Each test writes a small project with `pytester` and runs pytest on it in a subprocess, so
that its daemons, plugins and event loops stay out of this process: the ``nsqd``,
``nsqlookupd`` and ``nsq_cluster`` fixtures, their markers, TLS (a client trusting the
fixture's CA) and AUTH, an unmodified pynsq Reader, async tests of pytest-trio and anyio, the
errors for a bad marker or a missing trustme, and the clean-up: the throwaway tests record
their daemons' pids and data paths, and this module checks that none is left afterwards.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

#: Seconds a throwaway run may take before pytester kills it.
RUN_TIMEOUT = 120

#: The throwaway project's conftest: the plugin, a fixture recording each daemon (pid, data
#: path) in daemons.jsonl, and helpers over HTTP.
CONFTEST = """
import json
import os
import time
import urllib.request

import pytest

pytest_plugins = ["trionsq.testing.pytest"]

RECORD = os.path.join(os.path.dirname(__file__), "daemons.jsonl")


@pytest.fixture
def record():
    def record(*daemons):
        with open(RECORD, "a") as f:
            for d in daemons:
                f.write(json.dumps({"name": d.name, "pid": d.pid, "data_path": d.data_path}))
                f.write("\\n")
    return record


def get(address, path):
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as response:
        return response.read()


def get_json(address, path):
    return json.loads(get(address, path))


def publish(address, topic, body):
    request = urllib.request.Request(f"http://{address}/pub?topic={topic}", data=body)
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.read() == b"OK"


def eventually(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
"""

#: A raw NSQ V2 client over a socket: IDENTIFY, the TLS upgrade (python's ssl), commands.
NSQ_CLIENT = """
import json
import socket
import ssl
import struct


class NSQConn:
    def __init__(self, address, cafile=None, certfile=None, keyfile=None):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.sendall(b"  V2")
        body = json.dumps({"feature_negotiation": True, "tls_v1": cafile is not None})
        frame_type, data = self.command(b"IDENTIFY", body.encode())
        assert frame_type == 0, data
        self.features = json.loads(data)
        if cafile is not None:
            context = ssl.create_default_context(cafile=cafile)
            if certfile is not None:
                context.load_cert_chain(certfile, keyfile)
            self.sock = context.wrap_socket(self.sock, server_hostname=host)
            assert self.read() == (0, b"OK")

    def command(self, line, body=None):
        data = line + b"\\n"
        if body is not None:
            data += struct.pack(">I", len(body)) + body
        self.sock.sendall(data)
        return self.read()

    def read(self):
        size = struct.unpack(">I", self._exactly(4))[0]
        frame = self._exactly(size)
        return struct.unpack(">i", frame[:4])[0], frame[4:]

    def _exactly(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("nsqd closed the connection")
            data += chunk
        return data

    def close(self):
        self.sock.close()
"""


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=RUN_TIMEOUT)


def _project(pytester: pytest.Pytester, **modules: str) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(nsq_client=NSQ_CLIENT, **modules)


def _alive(pid: int) -> bool:
    """Whether `pid` is a live (not zombie) trionsq process."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return b"trionsq" in cmdline and state != "Z"


def _assert_cleaned_up(pytester: pytest.Pytester, names: set[str]) -> None:
    """Every daemon the throwaway tests recorded has exited and its data path is gone."""
    path = pytester.path / "daemons.jsonl"
    recorded = [json.loads(line) for line in path.read_text().splitlines()]
    assert {r["name"] for r in recorded} == names
    assert [r for r in recorded if _alive(r["pid"])] == []
    paths = [r["data_path"] for r in recorded if r["data_path"]]
    assert [p for p in paths if os.path.exists(p)] == []


def test_nsqd_and_nsqlookupd_fixtures(pytester: pytest.Pytester) -> None:
    _project(
        pytester,
        test_single="""
        import os

        import pytest

        from conftest import get, get_json, publish


        def test_nsqd_publishes_over_http_and_reports_stats(nsqd, record):
            record(nsqd)
            assert nsqd.tcp_address.startswith("127.0.0.1:")
            assert nsqd.http_address.startswith("127.0.0.1:")
            assert nsqd.https_address is None and nsqd.tls is None and nsqd.auth is None
            assert os.path.isdir(nsqd.data_path)
            assert get(nsqd.http_address, "/ping") == b"OK"
            publish(nsqd.http_address, "orders", b"hello")
            stats = get_json(nsqd.http_address, "/stats?format=json&topic=orders")
            assert [(t["topic_name"], t["message_count"]) for t in stats["topics"]] == [
                ("orders", 1)
            ]
            assert "TOPIC(orders): created" in nsqd.log


        def test_nsqd_restarts_on_the_same_addresses_and_data(nsqd, record):
            record(nsqd)
            publish(nsqd.http_address, "orders", b"kept")
            tcp, http, pid = nsqd.tcp_address, nsqd.http_address, nsqd.pid
            nsqd.restart()
            record(nsqd)
            assert (nsqd.tcp_address, nsqd.http_address) == (tcp, http)
            assert nsqd.pid != pid and nsqd.running
            stats = get_json(nsqd.http_address, "/stats?format=json&topic=orders")
            assert stats["topics"][0]["depth"] == 1
            assert nsqd.stop() == 0
            assert not nsqd.running


        @pytest.mark.nsqd(args=["--mem-queue-size=0"])
        def test_the_nsqd_marker_passes_flags(nsqd, record):
            record(nsqd)
            publish(nsqd.http_address, "orders", b"to disk")
            stats = get_json(nsqd.http_address, "/stats?format=json&topic=orders")
            assert stats["topics"][0]["backend_depth"] == 1


        def test_nsqlookupd(nsqlookupd, record):
            record(nsqlookupd)
            assert nsqlookupd.data_path is None
            assert get(nsqlookupd.http_address, "/ping") == b"OK"
            assert get_json(nsqlookupd.http_address, "/nodes")["producers"] == []
        """,
    )
    result = _run(pytester, "--strict-markers", "-W", "error::pytest.PytestUnknownMarkWarning")
    result.assert_outcomes(passed=4)
    _assert_cleaned_up(pytester, {"nsqd", "nsqlookupd"})


def test_nsq_cluster_registers_every_nsqd_with_lookupd(pytester: pytest.Pytester) -> None:
    _project(
        pytester,
        test_cluster="""
        import pytest

        from conftest import get_json


        def nodes(cluster):
            producers = get_json(cluster.nsqlookupd.http_address, "/nodes")["producers"]
            return sorted(f"{p['broadcast_address']}:{p['tcp_port']}" for p in producers)


        def test_two_nsqds_by_default(nsq_cluster, record):
            record(nsq_cluster.nsqlookupd, *nsq_cluster.nsqds)
            assert len(nsq_cluster.nsqds) == 2
            assert nodes(nsq_cluster) == sorted(nsq_cluster.nsqd_tcp_addresses)
            assert nsq_cluster.tls is None and nsq_cluster.auth is None


        @pytest.mark.nsq_cluster(nsqds=3, nsqd_args=["--max-rdy-count=7"])
        def test_the_marker_sets_the_count_and_flags(nsq_cluster, record):
            record(nsq_cluster.nsqlookupd, *nsq_cluster.nsqds)
            assert len(nodes(nsq_cluster)) == 3
            for nsqd in nsq_cluster.nsqds:
                lookupds = get_json(nsqd.http_address, "/config/nsqlookupd_tcp_addresses")
                assert lookupds == [nsq_cluster.nsqlookupd.tcp_address]
                assert get_json(nsqd.http_address, "/config/max_rdy_count") == 7
        """,
    )
    result = _run(pytester, "--strict-markers")
    result.assert_outcomes(passed=2)
    _assert_cleaned_up(pytester, {"nsqd", "nsqlookupd"})


def test_tls_and_auth(pytester: pytest.Pytester) -> None:
    _project(
        pytester,
        test_security="""
        import json
        import ssl
        import urllib.request

        import pytest

        from nsq_client import NSQConn
        from trionsq.testing.pytest import ALLOW_ALL

        SUBSCRIBE_ONLY = [{"topic": ".*", "channels": [".*"], "permissions": ["subscribe"]}]


        def auth(conn, secret):
            return conn.command(b"AUTH", secret.encode())


        @pytest.mark.nsqd(tls=True)
        def test_a_client_trusting_the_ca_upgrades_to_tls(nsqd, record):
            record(nsqd)
            conn = NSQConn(nsqd.tcp_address, cafile=nsqd.tls.ca_path)
            assert conn.features["tls_v1"] is True
            assert conn.command(b"PUB orders", b"secret message") == (0, b"OK")
            context = ssl.create_default_context(cafile=nsqd.tls.ca_path)
            url = f"https://{nsqd.https_address}/ping"
            with urllib.request.urlopen(url, context=context, timeout=10) as response:
                assert response.read() == b"OK"
            with pytest.raises(ssl.SSLCertVerificationError):
                # a client that does not trust the CA (but a certificate it issued)
                NSQConn(nsqd.tcp_address, cafile=nsqd.tls.client_cert_path)


        @pytest.mark.nsqd(auth={"s3cret": ALLOW_ALL, "reader": SUBSCRIBE_ONLY})
        def test_auth_allows_one_secret_and_refuses_others(nsqd, record):
            record(nsqd)
            conn = NSQConn(nsqd.tcp_address)
            assert conn.features["auth_required"] is True
            frame_type, reply = auth(conn, "s3cret")
            assert frame_type == 0
            assert json.loads(reply) == {
                "identity": "s3cret", "identity_url": "", "permission_count": 1
            }
            assert conn.command(b"PUB orders", b"allowed") == (0, b"OK")

            refused = NSQConn(nsqd.tcp_address)
            assert auth(refused, "wrong") == (1, b"E_AUTH_FAILED AUTH failed")

            reader = NSQConn(nsqd.tcp_address)
            assert auth(reader, "reader")[0] == 0
            frame_type, error = reader.command(b"PUB orders", b"not allowed")
            assert frame_type == 1 and error.startswith(b"E_UNAUTHORIZED"), error
            assert [r["secret"] for r in nsqd.auth.requests] == ["s3cret", "wrong", "reader"]


        @pytest.mark.nsq_cluster(
            nsqds=2, tls_client_auth_policy="require-verify", auth={"s3cret": ALLOW_ALL}
        )
        def test_a_cluster_with_client_certificates_and_auth(nsq_cluster, record):
            record(nsq_cluster.nsqlookupd, *nsq_cluster.nsqds)
            tls = nsq_cluster.tls
            for nsqd in nsq_cluster.nsqds:
                assert nsqd.tls == tls and nsqd.auth is nsq_cluster.auth
                conn = NSQConn(
                    nsqd.tcp_address,
                    cafile=tls.ca_path,
                    certfile=tls.client_cert_path,
                    keyfile=tls.client_key_path,
                )
                assert auth(conn, "s3cret")[0] == 0
                assert conn.command(b"PUB orders", b"x") == (0, b"OK")
            assert [(r["tls"], r["common_name"]) for r in nsq_cluster.auth.requests] == [
                ("true", "client"), ("true", "client")
            ]
        """,
    )
    result = _run(pytester, "--strict-markers")
    result.assert_outcomes(passed=3)
    _assert_cleaned_up(pytester, {"nsqd", "nsqlookupd"})


def test_an_unmodified_pynsq_reader(pytester: pytest.Pytester) -> None:
    pytest.importorskip("nsq")
    _project(
        pytester,
        test_pynsq="""
        import nsq
        import pytest
        import tornado.ioloop

        from conftest import eventually, get_json, publish


        def consume(count, **reader_options):
            loop = tornado.ioloop.IOLoop.current()
            received = []

            def handler(message):
                received.append(bytes(message.body))
                if len(received) == count:
                    loop.call_later(0.3, loop.stop)  # let the FINs go out
                return True

            reader = nsq.Reader(
                topic="orders",
                channel="billing",
                message_handler=handler,
                max_in_flight=10,
                **reader_options,
            )
            give_up = loop.call_later(20, loop.stop)
            loop.start()
            loop.remove_timeout(give_up)
            reader.close()
            return sorted(received)


        def test_a_reader_consumes_from_the_nsqd_fixture(nsqd, record):
            record(nsqd)
            publish(nsqd.http_address, "orders", b"hello pynsq")
            assert consume(1, nsqd_tcp_addresses=[nsqd.tcp_address]) == [b"hello pynsq"]

            def finished():
                stats = get_json(nsqd.http_address, "/stats?format=json&topic=orders")
                channel = stats["topics"][0]["channels"][0]
                assert (channel["channel_name"], channel["depth"]) == ("billing", 0)
                assert channel["in_flight_count"] == 0

            eventually(finished)


        @pytest.mark.nsq_cluster(nsqds=2)
        def test_a_reader_finds_the_cluster_through_lookupd(nsq_cluster, record):
            record(nsq_cluster.nsqlookupd, *nsq_cluster.nsqds)
            for i, nsqd in enumerate(nsq_cluster.nsqds):
                publish(nsqd.http_address, "orders", b"from nsqd %d" % i)
            lookupd = nsq_cluster.nsqlookupd.http_address

            def registered():
                assert len(get_json(lookupd, "/lookup?topic=orders")["producers"]) == 2

            eventually(registered)
            received = consume(
                2,
                lookupd_http_addresses=[f"http://{lookupd}"],
                lookupd_poll_interval=1,
                lookupd_poll_jitter=0.0,
            )
            assert received == [b"from nsqd 0", b"from nsqd 1"]
        """,
    )
    result = _run(pytester, "--strict-markers")
    result.assert_outcomes(passed=2)
    _assert_cleaned_up(pytester, {"nsqd", "nsqlookupd"})


def test_async_tests_use_the_sync_fixtures(pytester: pytest.Pytester) -> None:
    """The fixtures in pytest-trio and anyio tests, the plugin enabled with ``-p``."""
    pytest.importorskip("pytest_trio")
    pytest.importorskip("anyio")
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        test_async="""
        import anyio
        import pytest
        import trio

        REQUEST = b"GET /ping HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n"


        @pytest.mark.trio
        async def test_trio(nsqd):
            host, _, port = nsqd.http_address.rpartition(":")
            stream = await trio.open_tcp_stream(host, int(port))
            await stream.send_all(REQUEST)
            data = b""
            while chunk := await stream.receive_some():
                data += chunk
            assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"OK")


        @pytest.fixture
        def anyio_backend():
            return "asyncio"


        @pytest.mark.anyio
        async def test_anyio_on_asyncio(nsqlookupd):
            host, _, port = nsqlookupd.http_address.rpartition(":")
            async with await anyio.connect_tcp(host, int(port)) as stream:
                await stream.send(REQUEST)
                data = b""
                try:
                    while True:
                        data += await stream.receive()
                except anyio.EndOfStream:
                    pass
            assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"OK")
        """
    )
    result = _run(pytester, "-p", "trionsq.testing.pytest", "-p", "trio", "-p", "anyio")
    result.assert_outcomes(passed=2)


def test_a_failed_test_still_stops_its_daemons_and_shows_their_logs(
    pytester: pytest.Pytester,
) -> None:
    _project(
        pytester,
        test_failing="""
        import pytest


        def test_fails(nsqd, nsqlookupd, record):
            record(nsqd, nsqlookupd)
            assert False, "the test failed"


        @pytest.mark.nsq_cluster(nsqds=1)
        def test_raises_with_a_killed_daemon(nsq_cluster, record):
            record(nsq_cluster.nsqlookupd, *nsq_cluster.nsqds)
            nsq_cluster.nsqds[0].kill()
            raise RuntimeError("boom")
        """,
    )
    result = _run(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*- trionsq nsqd 127.0.0.1:* (pid *) log -*",
            "*TCP: listening on 127.0.0.1:*",
            "*- trionsq nsqlookupd 127.0.0.1:* (pid *) log -*",
        ]
    )
    _assert_cleaned_up(pytester, {"nsqd", "nsqlookupd"})


def test_usage_errors_are_one_line(pytester: pytest.Pytester) -> None:
    """A marker's unknown option, and TLS without trustme (hidden from the throwaway run)."""
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(
        """
        import sys

        sys.modules["trustme"] = None  # as if it were not installed
        pytest_plugins = ["trionsq.testing.pytest"]
        """
    )
    pytester.makepyfile(
        test_errors="""
        import pytest


        @pytest.mark.nsqd(tls=True)
        def test_tls_without_trustme(nsqd):
            pass


        @pytest.mark.nsq_cluster(nsqd=3)
        def test_a_misspelt_option(nsq_cluster):
            pass
        """
    )
    result = _run(pytester)
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "trionsq.testing.pytest: TLS needs the trustme package: pip install trustme",
            "@pytest.mark.nsq_cluster: unknown option(s) nsqd; expected nsqds, *",
        ]
    )
    result.stdout.no_fnmatch_line("*Traceback*")
