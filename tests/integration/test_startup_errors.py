"""Every command's start-up failures (issue 29): one line on stderr, never a traceback, in Go's
words, with Go's exit status. Each row runs ``trionsq <command>`` with one bad input: a taken or
unbindable TCP/HTTP/HTTPS address, a missing or unusable TLS file, an nsqd or lookupd nobody
listens on, an address without a port. With ``--nsq-bin-dir`` (or ``NSQ_BIN_DIR``) each row that
Go has also runs Go's program and checks its last line is the one the row records for Go.

Ports: ``{taken}`` is a port this test holds listening, ``{dead}`` one it holds bound without
listening (a connection to it is refused)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from tests.child_lines import ChildLines
from trionsq.testing import pythonpath_env


@dataclass(frozen=True)
class Row:
    """`args` after ``trionsq``, the one line it must print (after a daemon's ``[nsqd] <date>
    <time> FATAL: ``), Go's program and line when Go has one (`go_line` None: the same)."""

    args: str
    line: str
    go: str | None = None
    go_line: str | None = None
    stdin: str = ""
    code: int = 1


_LISTEN_TAKEN = "listen tcp {taken}: bind: address already in use"

ROWS = {
    # -- nsqd ------------------------------------------------------------------------------
    "nsqd-tcp-taken": Row(
        "nsqd --tcp-address={taken} --http-address=127.0.0.1:0 --data-path={tmp}",
        f"failed to instantiate nsqd - listen ({{taken}}) failed - {_LISTEN_TAKEN}",
        go="nsqd",
    ),
    "nsqd-http-taken": Row(
        "nsqd --tcp-address=127.0.0.1:0 --http-address={taken} --data-path={tmp}",
        f"failed to instantiate nsqd - listen ({{taken}}) failed - {_LISTEN_TAKEN}",
        go="nsqd",
    ),
    "nsqd-https-taken": Row(
        "nsqd --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 --https-address={taken} "
        "--tls-cert={cert} --tls-key={cert} --data-path={tmp}",
        f"failed to instantiate nsqd - listen ({{taken}}) failed - {_LISTEN_TAKEN}",
        go="nsqd",
    ),
    "nsqd-tcp-unassignable": Row(
        "nsqd --tcp-address=192.0.2.1:0 --http-address=127.0.0.1:0 --data-path={tmp}",
        "failed to instantiate nsqd - listen (192.0.2.1:0) failed - "
        "listen tcp 192.0.2.1:0: bind: cannot assign requested address",
        go="nsqd",
    ),
    "nsqd-tcp-bad-port": Row(
        "nsqd --tcp-address=127.0.0.1:abc --http-address=127.0.0.1:0 --data-path={tmp}",
        "failed to instantiate nsqd - listen (127.0.0.1:abc) failed - "
        "listen tcp: address tcp/abc: unknown port",
        go="nsqd",
    ),
    "nsqd-http-bad-port": Row(
        "nsqd --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:99999 --data-path={tmp}",
        "failed to instantiate nsqd - listen (127.0.0.1:99999) failed - "
        "listen tcp: address 99999: invalid port",
        go="nsqd",
    ),
    "nsqd-unix-socket-in-missing-dir": Row(
        "nsqd --tcp-address={tmp}/missing/nsqd.sock --http-address=127.0.0.1:0 --data-path={tmp}",
        "failed to instantiate nsqd - listen ({tmp}/missing/nsqd.sock) failed - "
        "listen unix {tmp}/missing/nsqd.sock: bind: no such file or directory",
        go="nsqd",
    ),
    "nsqd-tls-cert-missing": Row(
        "nsqd --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 --tls-cert={missing} "
        "--tls-key={cert} --data-path={tmp}",
        "failed to instantiate nsqd - failed to build TLS config - "
        "open {missing}: no such file or directory",
        go="nsqd",
    ),
    "nsqd-tls-key-garbage": Row(
        "nsqd --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 --tls-cert={garbage} "
        "--tls-key={garbage} --data-path={tmp}",
        "failed to instantiate nsqd - failed to build TLS config - "
        "tls: failed to find any PEM data in certificate input",
        go="nsqd",
    ),
    "nsqd-tls-root-ca-missing": Row(
        "nsqd --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 --tls-root-ca-file={missing} "
        "--data-path={tmp}",
        "failed to instantiate nsqd - failed to build client TLS config - "
        "open {missing}: no such file or directory",
        go="nsqd",
    ),
    "nsqd-data-path-missing": Row(
        "nsqd --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 --data-path={tmp}/missing",
        "failed to instantiate nsqd - failed to lock data-path: "
        "open {tmp}/missing: no such file or directory",
        go="nsqd",
    ),
    # -- nsqlookupd: Go prints the same error through a format bug ------------------------
    "nsqlookupd-tcp-taken": Row(
        "nsqlookupd --tcp-address={taken} --http-address=127.0.0.1:0",
        f"failed to instantiate nsqlookupd - listen ({{taken}}) failed - {_LISTEN_TAKEN}",
        go="nsqlookupd",
        go_line="failed to instantiate nsqlookupd%!(EXTRA *errors.errorString="
        f"listen ({{taken}}) failed - {_LISTEN_TAKEN})",
    ),
    "nsqlookupd-http-taken": Row(
        "nsqlookupd --tcp-address=127.0.0.1:0 --http-address={taken}",
        f"failed to instantiate nsqlookupd - listen ({{taken}}) failed - {_LISTEN_TAKEN}",
        go="nsqlookupd",
        go_line="failed to instantiate nsqlookupd%!(EXTRA *errors.errorString="
        f"listen ({{taken}}) failed - {_LISTEN_TAKEN})",
    ),
    "nsqlookupd-http-bad-port": Row(
        "nsqlookupd --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:abc",
        "failed to instantiate nsqlookupd - listen (127.0.0.1:abc) failed - "
        "listen tcp: address tcp/abc: unknown port",
    ),
    # -- nsqadmin -------------------------------------------------------------------------
    "nsqadmin-http-taken": Row(
        "nsqadmin --http-address={taken} --nsqd-http-address={dead}",
        f"failed to instantiate nsqadmin - listen ({{taken}}) failed - {_LISTEN_TAKEN}",
        go="nsqadmin",
    ),
    "nsqadmin-ca-missing": Row(
        "nsqadmin --http-address=127.0.0.1:0 --nsqd-http-address={dead} "
        "--http-client-tls-root-ca-file={missing}",
        "failed to instantiate nsqadmin - failed to read TLS root CA file {missing} - "
        "open {missing}: no such file or directory",
        go="nsqadmin",
    ),
    "nsqadmin-client-cert-missing": Row(
        "nsqadmin --http-address=127.0.0.1:0 --nsqd-http-address={dead} "
        "--http-client-tls-cert={missing} --http-client-tls-key={cert}",
        "failed to instantiate nsqadmin - failed to LoadX509KeyPair {missing}, {cert} - "
        "open {missing}: no such file or directory",
        go="nsqadmin",
    ),
    # -- the apps: go-nsq's words, as Go's log.Fatal(err) prints them ---------------------
    "tail-nsqd-refused": Row(
        "tail --nsqd-tcp-address={dead} --topic=t",
        "dial tcp {dead}: connect: connection refused",
        go="nsq_tail",
    ),
    "tail-nsqd-without-port": Row(
        "tail --nsqd-tcp-address=nsqd.example --topic=t",
        "dial tcp: address nsqd.example: missing port in address",
        go="nsq_tail",
    ),
    "tail-lookupd-bad-port": Row(
        "tail --lookupd-http-address=127.0.0.1:abc --topic=t",
        'parse "http://127.0.0.1:abc": invalid port ":abc" after host',
        go="nsq_tail",
    ),
    "to_nsq-nsqd-refused": Row(
        "to_nsq --nsqd-tcp-address={dead} --topic=t",
        "dial tcp {dead}: connect: connection refused",
        go="to_nsq",
        stdin="hello\n",
    ),
    "to_http-nsqd-refused": Row(
        "to_http --nsqd-tcp-address={dead} --topic=t --channel=c --get=http://{dead}/%s",
        "dial tcp {dead}: connect: connection refused",
        go="nsq_to_http",
    ),
    "nsq_to_nsq-nsqd-refused": Row(
        "nsq_to_nsq --nsqd-tcp-address={dead} --topic=t --channel=c "
        "--destination-nsqd-tcp-address={dead}",
        "dial tcp {dead}: connect: connection refused",
        go="nsq_to_nsq",
    ),
    "nsq_to_nsq-destination-without-port": Row(
        "nsq_to_nsq --nsqd-tcp-address={dead} --topic=t --channel=c "
        "--destination-nsqd-tcp-address=nsqd.example",
        "dial tcp: address nsqd.example: missing port in address",
    ),
    "stat-nsqd-refused": Row(
        "stat --nsqd-http-address={dead} --topic=t --channel=c",
        "ERROR: failed to get topic producers - failed to query any nsqd: "
        'Get "http://{dead}/stats?format=json&topic=t&include_clients=false": '
        "dial tcp {dead}: connect: connection refused",
        go="nsq_stat",
    ),
    "stat-lookupd-refused": Row(
        "stat --lookupd-http-address={dead} --topic=t --channel=c",
        "ERROR: failed to get topic producers - failed to query any nsqlookupd: "
        'Get "http://{dead}/lookup?topic=t": dial tcp {dead}: connect: connection refused',
        go="nsq_stat",
    ),
    "bench-nsqd-refused": Row(
        "bench writer --procs=1 --runfor=1s --nsqd-tcp-address={dead}",
        "bench: worker 0: dial tcp {dead}: connect: connection refused",
    ),
    "bench-own-nsqd-cannot-listen": Row(
        "bench writer --procs=1 --runfor=1s --nsqd-arg=--tcp-address={taken}",
        f"bench: nsqd exited with 1: failed to instantiate nsqd - listen ({{taken}}) failed - "
        f"{_LISTEN_TAKEN}",
    ),
}

#: A daemon's log prefix before the text (Go's and ours), and Go's log.Fatal timestamp.
_DAEMON_FATAL = re.compile(r"^\[\w+\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} FATAL: ")
_GO_STAMP = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ")
#: Lines around the error that are not about it: INFO logs, go-nsq's, bench's load line.
_CHATTER = re.compile(r" INFO: |^load average before the run: ")
_GO_CHATTER = re.compile(r" INFO: |^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d (INF|WRN|ERR) ")


@dataclass(frozen=True)
class Places:
    taken: str
    dead: str
    cert: str
    garbage: str
    missing: str


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Places]:
    """A port held listening, one held bound without listening, a usable certificate (with
    its key), a file that is no PEM, a path that does not exist."""
    directory = tmp_path_factory.mktemp("startup-errors")
    cert = directory / "server.pem"
    trustme.CA().issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(cert))
    garbage = directory / "garbage.pem"
    garbage.write_text("garbage\n")
    with socket.socket() as taken, socket.socket() as dead:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        dead.bind(("127.0.0.1", 0))
        yield Places(
            taken=f"127.0.0.1:{taken.getsockname()[1]}",
            dead=f"127.0.0.1:{dead.getsockname()[1]}",
            cert=str(cert),
            garbage=str(garbage),
            missing=str(directory / "missing.pem"),
        )


def _fill(text: str, places: Places, tmp: Path) -> str:
    return text.format(tmp=tmp, **vars(places))


def _run(argv: list[str], stdin: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=pythonpath_env(),
    )


def _the_line(stderr: str) -> str:
    """The one line of `stderr` that is not chatter, without a daemon's FATAL log prefix."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if not _CHATTER.search(line)]
    assert len(lines) == 1, stderr
    return _DAEMON_FATAL.sub("", lines[0])


@pytest.mark.parametrize("name", list(ROWS))
def test_one_line_and_the_exit_status(name: str, places: Places, tmp_path: Path) -> None:
    row = ROWS[name]
    argv = [sys.executable, "-m", "trionsq", *_fill(row.args, places, tmp_path).split()]
    result = _run(argv, row.stdin, tmp_path)
    assert result.returncode == row.code, result.stderr
    assert _the_line(result.stderr) == _fill(row.line, places, tmp_path)
    assert result.stdout == ""


def _go_bin(config: pytest.Config) -> str | None:
    return config.getoption("nsq_bin_dir", default=None) or os.environ.get("NSQ_BIN_DIR")


@pytest.mark.parametrize("name", [name for name, row in ROWS.items() if row.go])
def test_go_prints_the_line_the_row_records(
    name: str, places: Places, tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    """The table's texts are Go's: its program's last line (go-nsq may log an ERR line
    before it), without its timestamp, and its exit status."""
    bin_dir = _go_bin(pytestconfig)
    if not bin_dir:
        pytest.skip("Go's programs: --nsq-bin-dir or NSQ_BIN_DIR")
    row = ROWS[name]
    assert row.go is not None
    _, *args = _fill(row.args, places, tmp_path).split()
    result = _run([os.path.join(bin_dir, row.go), *args], row.stdin, tmp_path)
    assert result.returncode == row.code, result.stderr
    lines = [line for line in result.stderr.splitlines() if not _GO_CHATTER.search(line)]
    assert lines, result.stderr
    last = _GO_STAMP.sub("", _DAEMON_FATAL.sub("", lines[-1]))
    assert last == _fill(row.go_line or row.line, places, tmp_path)


@pytest.mark.parametrize(
    ("args", "wanted"),
    [
        pytest.param(
            "to_file --nsqd-tcp-address={dead} --topic=t --output-dir={tmp}",
            " ERROR: couldn't create logger for new topic t: "
            "dial tcp {dead}: connect: connection refused",
            id="to_file-nsqd-refused",
        ),
        pytest.param(
            "tail --lookupd-http-address={dead} --topic=t",
            " ERROR: error querying nsqlookupd (http://{dead}/lookup?topic=t) - "
            'Get "http://{dead}/lookup?topic=t": dial tcp {dead}: connect: connection refused',
            id="tail-lookupd-refused",
        ),
    ],
)
def test_what_go_survives_is_one_error_line_then_a_clean_exit(
    args: str, wanted: str, places: Places, tmp_path: Path
) -> None:
    """Go's nsq_to_file logs an unreachable nsqd and goes on; go-nsq logs an unreachable
    lookupd at each poll and keeps polling: the same line, and SIGTERM exits 0."""
    argv = [sys.executable, "-m", "trionsq", *_fill(args, places, tmp_path).split()]
    wanted = _fill(wanted, places, tmp_path)
    with subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=pythonpath_env(),
    ) as proc:
        try:
            assert proc.stderr is not None
            logged = ChildLines(proc.stderr, args.split()[0])
            lines = logged.until(lambda line: line.endswith(wanted), timeout=60)
            assert proc.poll() is None, lines  # still running
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            rest = logged.rest(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, rest
    assert "Traceback" not in "\n".join(lines) + rest
