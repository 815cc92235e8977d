"""Runs a cluster described by a JSON spec inside a network namespace of its own (`unshare -n`),
so the deployment files' fixed addresses (NSQ's default ports) bind whatever the host runs;
used by test_deploy.py. Run as ``python deploy_cluster.py SPEC.json``; prints a JSON report.

The spec: ``daemons`` {name: {"argv": [...], "ping": url}} started in order; ``loopback``
extra 127.x addresses to bring up (one per "container"); ``publish`` nsqd HTTP URLs that each
get one message on topic ``deploy``; ``lookupd`` and ``nsqadmin`` HTTP URLs asked about that
topic; ``health`` {name: argv} health-check commands run while the cluster serves. Then every
daemon gets SIGTERM; the report has what each URL answered and each exit status."""

from __future__ import annotations

import fcntl
import json
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from typing import Any


def _loopback_up() -> None:
    # ip link set lo up (SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP), without iproute2
    import socket

    with socket.socket() as s:
        packed = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, packed))[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))


def _get(url: str, data: bytes | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, data=data, timeout=2) as answer:
            return answer.status, answer.read().decode()
    except OSError as exc:
        return 0, repr(exc)


def _until(predicate: Any, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        result = predicate()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    _loopback_up()
    report: dict[str, Any] = {"ping": {}, "published": [], "health": {}}
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for name, daemon in spec["daemons"].items():
            procs[name] = subprocess.Popen(daemon["argv"], stderr=subprocess.PIPE, text=True)
            report["ping"][name] = _until(lambda d=daemon: _get(d["ping"]) == (200, "OK"))
        for url in spec.get("publish", []):
            report["published"].append(_get(f"{url}/pub?topic=deploy", b"hello")[1])
        if "lookupd" in spec:
            url = f"{spec['lookupd']}/lookup?topic=deploy"
            want = len(spec.get("publish", []))

            def producers() -> list[str]:
                status, body = _get(url)
                found = json.loads(body).get("producers", []) if status == 200 else []
                addresses = [f"{p['broadcast_address']}:{p['tcp_port']}" for p in found]
                return sorted(addresses) if len(addresses) == want else []

            report["producers"] = _until(producers)
        if "nsqadmin" in spec:
            status, body = _get(f"{spec['nsqadmin']}/api/topics/deploy")
            report["nsqadmin"] = json.loads(body) if status == 200 else body
        for name, argv in spec.get("health", {}).items():
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            report["health"][name] = [done.returncode, done.stderr.strip()]
    finally:
        for proc in reversed(list(procs.values())):
            proc.send_signal(signal.SIGTERM)
        report["exit"], report["logs"] = {}, {}
        for name, proc in procs.items():
            try:
                report["exit"][name] = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                report["exit"][name] = "killed after 60 s"
            report["logs"][name] = (proc.stderr.read() if proc.stderr else "")[-2000:]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
