"""nsqd's flag and TOML config parsing (trionsq.options, trionsq.nsqd.options): a fuzzed
command line (NUL-separated arguments) and optionally a fuzzed TOML file given as --config, run
through `parse_nsqd_args` and `NSQDOptions.validate`.

What must hold: only the `OptionsError` family (`FlagError`, `ValidationError`) and
`HelpRequested` escape. (``/`` is removed from the arguments so that no path outside the
scratch directory is read.)
"""

from __future__ import annotations

import os
import tempfile

from trionsq.nsqd.options import parse_nsqd_args
from trionsq.options import HelpRequested, OptionsError

_dir: str | None = None


def _scratch() -> str:
    global _dir
    if _dir is None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        _dir = tempfile.mkdtemp(prefix="trionsq-fuzz-opts-", dir=base)
    return _dir


def test_one_input(data: bytes) -> None:
    if not data:
        return
    selector, rest = data[0], data[1:]
    args_part, _, config = rest.partition(b"\x00\x00\x00")
    argv = [
        a.decode("utf-8", "surrogateescape") for a in args_part.replace(b"/", b"").split(b"\x00")
    ]
    if not args_part:
        argv = []
    if selector & 1:
        path = os.path.join(_scratch(), "nsqd.toml")
        with open(path, "wb") as f:
            f.write(config)
        argv.append(f"--config={path}")
    try:
        opts = parse_nsqd_args(argv)
        opts.validate()
    except (OptionsError, HelpRequested):
        pass


def seeds() -> list[bytes]:
    toml = (
        b'mem_queue_size = 100\nmax_msg_size = "1024"\nnsqlookupd_tcp_addresses = ["a:1"]\n'
        b'msg_timeout = "60s"\nverbose = true\nlog_level = "debug"\nsync_timeout = 2000\n'
        b'e2e_processing_latency_percentiles = [0.5, "0.99"]\ntls_required = true\n'
    )
    args = b"\x00".join(
        [
            b"--mem-queue-size=5",
            b"-max-msg-size",
            b"2048",
            b"--msg-timeout=1m30s",
            b"--lookupd-tcp-address=127.0.0.1:4160",
            b"--snappy=false",
            b"-deflate",
            b"--max-deflate-level=9",
            b"--e2e-processing-latency-percentile=0.99",
            b"--tls-min-version=tls1.2",
        ]
    )
    return [
        b"\x00" + args,
        b"\x01" + args + b"\x00\x00\x00" + toml,
        b"\x01\x00\x00\x00" + toml,
        b"\x00--help",
        b"\x00--version",
        b"\x00--max-rdy-count=-1\x00--worker-id=2000",
    ]
