"""`trionsq stat` end to end: an nsqlookupd and two nsqds, the app run as a process, its table
summing the channel over both nodes."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx

from trionsq.testing import DaemonProcess, pythonpath_env


def wait_for(check, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_stat_sums_a_channel_over_the_topics_nsqds(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with DaemonProcess("nsqlookupd") as lookupd:
        lookupd_tcp = "{}:{}".format(*lookupd.tcp_address)
        lookupd_http = "{}:{}".format(*lookupd.http_address)  # type: ignore[misc]
        nsqds = []
        try:
            for i in range(2):
                (tmp_path / f"n{i}").mkdir()
                nsqds.append(
                    DaemonProcess(
                        "nsqd",
                        args=[
                            f"--lookupd-tcp-address={lookupd_tcp}",
                            "--broadcast-address=127.0.0.1",
                        ],
                        data_path=str(tmp_path / f"n{i}"),
                    )
                )
            for i, nsqd in enumerate(nsqds):
                base = "http://{}:{}".format(*nsqd.http_address)  # type: ignore[misc]
                assert httpx.post(f"{base}/topic/create?topic=t").status_code == 200
                assert httpx.post(f"{base}/channel/create?topic=t&channel=c").status_code == 200
                for n in range(3 + i):
                    assert httpx.post(f"{base}/pub?topic=t", content=b"m%d" % n).status_code == 200

            def registered() -> bool:
                data = httpx.get(f"http://{lookupd_http}/lookup?topic=t").json()
                return len(data["producers"]) == 2

            wait_for(registered)
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "trionsq",
                    "stat",
                    "--topic=t",
                    "--channel=c",
                    f"--lookupd-http-address={lookupd_http}",
                    "--interval=0.2s",
                    "--count=2",
                ],
                capture_output=True,
                text=True,
                timeout=30,
                env=pythonpath_env(),
            )
        finally:
            for nsqd in nsqds:
                nsqd.close()
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("------rate------+")
    assert lines[1].split() == [
        "ingress", "egress", "|", "total", "mem", "disk", "inflt", "def", "|",
        "req", "t-o", "msgs", "clients",
    ]  # fmt: skip
    rows = [line.split() for line in lines[2:]]
    assert len(rows) == 2
    for row in rows:
        # nothing published while polling: zero rates; 3 + 4 messages queued over both nodes
        assert row == ["0", "0", "|", "7", "7", "0", "0", "0", "|", "0", "0", "7", "0"]
