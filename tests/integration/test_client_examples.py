"""docs/client.md's examples run: each file of docs/examples/ against real daemons, its output
checked; and every example docs/client.md shows is that file, word for word, so the guide
cannot drift from code that runs."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.child_lines import ChildLines
from trionsq.testing import DaemonProcess, pythonpath_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
GUIDE = ROOT / "docs" / "client.md"
_INCLUDED = re.compile(r"<!-- example: (docs/examples/\S+) -->\n```python\n(.*?)```", re.S)


def tcp(daemon: DaemonProcess) -> str:
    host, port = daemon.tcp_address
    return f"{host}:{port}"


def run_example(name: str, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        env={**pythonpath_env(), **env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(EXAMPLES),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def nsqd() -> Iterator[DaemonProcess]:
    with DaemonProcess("nsqd") as daemon:
        yield daemon


def test_the_guide_shows_each_example_as_it_is() -> None:
    guide = GUIDE.read_text()
    shown = _INCLUDED.findall(guide)
    assert {Path(path).name for path, _ in shown} == {p.name for p in EXAMPLES.glob("*.py")}
    for path, code in shown:
        assert code == (ROOT / path).read_text(), f"docs/client.md shows an old {path}"


def test_asyncio_app(nsqd: DaemonProcess) -> None:
    out = run_example("asyncio_app.py", {"NSQD_TCP_ADDRESS": tcp(nsqd)})
    assert out == "handled: order 1, order 2, order 3\n"


def test_trio_app(tmp_path: Path) -> None:
    with DaemonProcess("nsqd") as daemon:  # its own: the topic and channel are asyncio_app's
        out = run_example("trio_app.py", {"NSQD_TCP_ADDRESS": tcp(daemon)})
    assert out == "handled: order 1, order 2, order 3, order 4\n"


@pytest.mark.parametrize("library", ["asyncio", "trio"])
def test_iterate(library: str) -> None:
    with DaemonProcess("nsqd") as daemon:
        args = ["--trio"] if library == "trio" else []
        out = run_example("iterate.py", {"NSQD_TCP_ADDRESS": tcp(daemon)}, *args)
    assert out == "seen: login, logout, signup\n"


def test_lookupd_consume() -> None:
    with DaemonProcess("nsqlookupd") as lookupd:
        host, port = lookupd.tcp_address
        registered = [f"--lookupd-tcp-address={host}:{port}", "--broadcast-address=127.0.0.1"]
        with DaemonProcess("nsqd", args=registered) as daemon:
            assert lookupd.http_address is not None
            env = {
                "NSQD_TCP_ADDRESS": tcp(daemon),
                "NSQLOOKUPD_HTTP_ADDRESS": "{}:{}".format(*lookupd.http_address),
            }
            out = run_example("lookupd_consume.py", env)
    assert out == f"from {tcp(daemon)} got click\n"


def test_tls_and_errors(tmp_path: Path) -> None:
    ca = trustme.CA()
    pem = tmp_path / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with DaemonProcess("nsqd", args=[f"--tls-cert={pem}", f"--tls-key={pem}"]) as daemon:
        out = run_example(
            "tls_and_errors.py", {"NSQD_TCP_ADDRESS": tcp(daemon), "NSQ_CA_FILE": str(ca_file)}
        )
    assert out.splitlines() == [
        "refused: E_BAD_TOPIC",
        "TLS error: True",
        "not connected: dial tcp 127.0.0.1:1: connect: connection refused",
    ]


def test_asyncio_worker_stops_gracefully_on_sigterm(nsqd: DaemonProcess) -> None:
    worker = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "asyncio_worker.py")],
        env={**pythonpath_env(), "NSQD_TCP_ADDRESS": tcp(nsqd)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None and worker.stderr is not None
    said, err_lines = ChildLines(worker.stdout, "the worker"), ChildLines(worker.stderr)
    try:
        assert said.next(timeout=60) == "ready\n"
        assert nsqd.http_address is not None
        url = "http://{}:{}/mpub?topic=jobs".format(*nsqd.http_address)
        urllib.request.urlopen(url, data=b"job 1\njob 2\njob 3", timeout=10).close()
        for _ in range(3):
            assert (said.next(timeout=60) or "").startswith("working on job ")
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
        out, err = said.rest(timeout=10), err_lines.rest(timeout=10)
    finally:
        worker.kill()
        worker.wait()
    assert worker.returncode == 0, err
    assert re.search(r"^stopped after \d+ messages$", out, re.M), out
