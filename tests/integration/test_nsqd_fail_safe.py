"""nsqd never acknowledges what it cannot keep: it refuses to start on a data path it cannot
write (immutable, read-only, a file, missing), with one FATAL line and exit status 1; a
shutdown that could not save an accepted message exits 1 with one summary line; a publish the
disk refuses says so (``PUB_FAILED``), never ``EXITING`` unless nsqd is exiting.

The process tests need root for chattr and mount (skipped without them); the in-process tests
put a simulated or failing disk under a whole nsqd."""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from tests.nsqd_harness import Conn, start_nsqd
from tests.small_disk import fill
from trionsq.diskqueue.fs import O_CREAT, O_TRUNC, O_WRONLY, LocalFileSystem
from trionsq.diskqueue.simulated import SimulatedDisk
from trionsq.nsqd.nsqd import NSQD, StartupError
from trionsq.nsqd.options import NSQDOptions
from trionsq.protocol import dpub, mpub
from trionsq.testing import DaemonProcess

# -- start-up, as a process ----------------------------------------------------------------


def start_nsqd_process(data_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """Run nsqd until it exits by itself (it must refuse to start)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "trionsq",
            "nsqd",
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            f"--data-path={data_path}",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )


def the_fatal_line(stderr: str) -> str:
    """The one FATAL line of `stderr`'s log (and no traceback), without its timestamp."""
    assert "Traceback" not in stderr, stderr
    fatal = [line for line in stderr.splitlines() if " FATAL: " in line]
    assert len(fatal) == 1, stderr
    return fatal[0].split(" FATAL: ", 1)[1]


@pytest.fixture
def immutable_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "data"
    path.mkdir()
    result = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    if result.returncode != 0:
        pytest.skip(f"chattr +i does not work here: {result.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def test_an_immutable_data_path_stops_start_up(immutable_dir: Path) -> None:
    result = start_nsqd_process(immutable_dir)
    assert result.returncode == 1
    assert the_fatal_line(result.stderr) == (
        f"failed to instantiate nsqd - data-path {immutable_dir} is not writable - "
        f"open {immutable_dir}/nsqd.dat.write-check.tmp: operation not permitted (EPERM)"
    )
    assert "TCP: listening" not in result.stderr


def test_a_read_only_mount_stops_start_up(small_disk: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    result = start_nsqd_process(small_disk, "--mem-queue-size=0")
    assert result.returncode == 1
    assert the_fatal_line(result.stderr) == (
        f"failed to instantiate nsqd - data-path {small_disk} is not writable - "
        f"open {small_disk}/nsqd.dat.write-check.tmp: read-only file system (EROFS)"
    )


def test_a_file_in_place_of_the_data_path_stops_start_up(tmp_path: Path) -> None:
    a_file = tmp_path / "data"
    a_file.write_text("not a directory")
    result = start_nsqd_process(a_file)
    assert result.returncode == 1
    assert the_fatal_line(result.stderr) == (
        f"failed to instantiate nsqd - data-path {a_file} is not writable - "
        f"open {a_file}/nsqd.dat.write-check.tmp: not a directory (ENOTDIR)"
    )


def test_a_missing_data_path_stops_start_up_in_gos_words(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    result = start_nsqd_process(missing)
    assert result.returncode == 1
    assert the_fatal_line(result.stderr) == (
        f"failed to instantiate nsqd - failed to lock data-path: "
        f"open {missing}: no such file or directory"
    )


def test_a_locked_data_path_stops_start_up_in_gos_words(tmp_path: Path) -> None:
    with DaemonProcess("nsqd", data_path=str(tmp_path)):
        result = start_nsqd_process(tmp_path)
    assert result.returncode == 1
    assert the_fatal_line(result.stderr) == (
        f"failed to instantiate nsqd - failed to lock data-path: cannot flock directory "
        f"{tmp_path} - resource temporarily unavailable (possibly in use by another instance "
        "of nsqd)"
    )


# -- exit, as a process --------------------------------------------------------------------


def test_messages_a_full_disk_refuses_at_exit_make_the_exit_status_1(small_disk: Path) -> None:
    topic = f"t{uuid.uuid4().hex[:8]}"
    with DaemonProcess("nsqd", data_path=str(small_disk)) as daemon:
        host, port = daemon.http_address  # type: ignore[misc]
        with httpx.Client(base_url=f"http://{host}:{port}") as http:
            for i in range(3):
                assert http.post(f"/pub?topic={topic}", content=b"kept in memory %d" % i).text == (
                    "OK"
                )
        # nsqd.dat names the topic before the disk fills (else its rewrite fails at exit too).
        deadline = time.monotonic() + 10
        while topic not in (small_disk / "nsqd.dat").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        fill(small_disk)
        assert daemon.terminate() == 1
        stderr = "".join(daemon.stderr_lines)
    assert f"ERROR: TOPIC({topic}): failed to save 3 messages at exit" in stderr
    assert the_fatal_line(stderr) == (
        "NSQ: exit incomplete - 3 messages could not be saved "
        "(NOK - failed to write to disk - No space left on device); "
        # the queues' metadata files (their read and write positions) could not be written
        "the final sync of the disk queues failed"
    )
    assert stderr.splitlines()[-1].endswith(the_fatal_line(stderr))


def test_a_publish_the_disk_refuses_is_pub_failed_not_exiting(small_disk: Path) -> None:
    topic = f"t{uuid.uuid4().hex[:8]}"
    with DaemonProcess("nsqd", args=["--mem-queue-size=0"], data_path=str(small_disk)) as daemon:
        host, port = daemon.http_address  # type: ignore[misc]
        with httpx.Client(base_url=f"http://{host}:{port}") as http:
            assert http.post(f"/pub?topic={topic}", content=b"kept").text == "OK"
            filler = fill(small_disk)
            refused = http.post(f"/pub?topic={topic}", content=b"x" * 5000)
            assert (refused.status_code, refused.json()) == (503, {"message": "PUB_FAILED"})
            refused = http.post(f"/mpub?topic={topic}", content=b"x" * 5000 + b"\ny")
            assert (refused.status_code, refused.json()) == (503, {"message": "PUB_FAILED"})
            os.remove(filler)
        # Nothing accepted was lost: a clean exit.
        assert daemon.terminate() == 0


# -- in process: a simulated read-only disk, a disk that refuses at exit --------------------


class ReadOnlyDisk(SimulatedDisk):
    """A disk mounted read-only: reads work, every change fails with EROFS."""

    def _refuse(self, path: str = "") -> OSError:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), path or None)

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        if flags & (O_WRONLY | O_CREAT | O_TRUNC):
            raise self._refuse(path)
        return super().open(path, flags, mode)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        raise self._refuse()

    def rename(self, src: str, dst: str) -> None:
        raise self._refuse(src)

    def remove(self, path: str) -> None:
        raise self._refuse(path)


def options_for(data_path: str, **overrides: object) -> NSQDOptions:
    options = dataclasses.replace(
        NSQDOptions(), tcp_address="127.0.0.1:0", http_address="", data_path=data_path
    )
    return dataclasses.replace(options, **overrides)


async def test_a_simulated_read_only_disk_stops_start_up() -> None:
    nsqd = NSQD(options_for("/data"), fs=ReadOnlyDisk())
    with pytest.raises(StartupError) as raised:
        await nsqd.run()
    assert str(raised.value) == (
        "failed to instantiate nsqd - data-path /data is not writable - "
        "open /data/nsqd.dat.write-check.tmp: read-only file system (EROFS)"
    )
    assert nsqd.tcp_address is None  # it never listened


class DiskFullFromNow:
    """Every write of a message to a disk queue's segment fails with ENOSPC."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_pwrite = LocalFileSystem.pwrite

        def pwrite(fs: LocalFileSystem, fd: int, data: bytes | memoryview, offset: int) -> int:
            if re.search(r"\.diskqueue\.\d+\.dat$", os.readlink(f"/proc/self/fd/{fd}")):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_pwrite(fs, fd, data, offset)

        monkeypatch.setattr(LocalFileSystem, "pwrite", pwrite)


async def stop(nsqd: NSQD) -> None:
    nsqd.request_exit()
    await nsqd.wait_exited()


async def test_messages_only_in_memory_that_the_disk_refuses_at_exit_are_counted(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nsqd = await start_nsqd(nursery, str(tmp_path))
    consumer = await Conn.consumer(nsqd, "t", "c", ready=1)
    producer = await Conn.open(nsqd)
    await producer.send(mpub("t", [b"one", b"two", b"three"]))
    assert await producer.response() == b"OK"
    assert (await consumer.message()).body == b"one"  # in flight: from memory too
    DiskFullFromNow(monkeypatch)
    await stop(nsqd)
    assert nsqd.exit_errors == [
        "3 messages could not be saved (NOK - failed to write to disk - No space left on device)"
    ]


async def test_messages_still_on_disk_are_not_lost_when_the_disk_refuses_at_exit(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--mem-queue-size=0: in flight, a message is still in the channel's disk queue, and a
    DPUB's is in the deferred log; the refused re-writes at exit lose neither."""
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=2)
    producer = await Conn.open(nsqd)
    await producer.send(mpub("t", [b"one", b"two"]))
    assert await producer.response() == b"OK"
    await producer.send(dpub("t", 3_600_000, b"later"))
    assert await producer.response() == b"OK"
    assert sorted(m.body for m in await consumer.messages(2)) == [b"one", b"two"]
    with monkeypatch.context() as patch:
        DiskFullFromNow(patch)
        await stop(nsqd)
    assert nsqd.exit_errors == []
    nsqd = await start_nsqd(nursery, str(tmp_path), mem_queue_size=0)
    consumer = await Conn.consumer(nsqd, "t", "c", ready=2)
    assert sorted(m.body for m in await consumer.messages(2)) == [b"one", b"two"]
    deferred = nsqd.topics["t"].channels["c"].deferred
    assert len(deferred) == 1 and deferred[0][2].endswith(b"later")
