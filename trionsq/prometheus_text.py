"""The Prometheus text exposition format 0.0.4 and the standard ``process_`` metrics (read
cheaply from /proc, `os` and `resource`): what the three daemons' ``/metrics`` share
(`trionsq.nsqd.prometheus`, `trionsq.nsqlookupd.metrics`, `trionsq.nsqadmin.metrics`)."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache

__all__ = [
    "CONTENT_TYPE",
    "Labels",
    "ProcessMetrics",
    "Sample",
    "family",
    "format_value",
    "process_lines",
    "read_process_metrics",
    "render",
]

#: The Content-Type of a text-format response.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = Sequence[tuple[str, str]]
Sample = tuple[Labels, float]


# --- process metrics ---------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessMetrics:
    """The standard ``process_`` metrics; ``None`` where the platform does not tell."""

    cpu_seconds: float
    start_time_seconds: float | None = None
    resident_memory_bytes: int | None = None
    virtual_memory_bytes: int | None = None
    open_fds: int | None = None
    max_fds: int | None = None


# Used when /proc cannot say when the process started: close enough for a daemon.
_IMPORT_TIME = time.time()


def _read_text(path: str) -> str | None:
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return None


@cache
def _boot_time() -> float | None:
    text = _read_text("/proc/stat")
    for line in (text or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def _start_time_seconds() -> float:
    stat = _read_text("/proc/self/stat")
    boot = _boot_time()
    if stat is None or boot is None:
        return _IMPORT_TIME
    # the command name (field 2) may hold spaces and parentheses: split after the last ")"
    fields = stat.rpartition(")")[2].split()
    start_ticks = int(fields[19])  # field 22 overall
    return boot + start_ticks / os.sysconf("SC_CLK_TCK")


def _memory_bytes() -> tuple[int | None, int | None]:
    """(resident, virtual) from /proc/self/statm."""
    statm = _read_text("/proc/self/statm")
    if statm is None:
        return None, None
    pages = statm.split()
    page_size = os.sysconf("SC_PAGE_SIZE")
    return int(pages[1]) * page_size, int(pages[0]) * page_size


def _open_fds() -> int | None:
    for directory in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(directory))
        except OSError:
            continue
    return None


def _max_fds() -> int | None:
    if sys.platform == "win32":
        return None
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def read_process_metrics() -> ProcessMetrics:
    """This process's CPU time, start time, memory and file descriptors (a few small reads)."""
    times = os.times()
    resident, virtual = _memory_bytes()
    return ProcessMetrics(
        cpu_seconds=times.user + times.system,
        start_time_seconds=_start_time_seconds(),
        resident_memory_bytes=resident,
        virtual_memory_bytes=virtual,
        open_fds=_open_fds(),
        max_fds=_max_fds(),
    )


# --- text format -------------------------------------------------------------------------


def _escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _format_labels(labels: Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{name}="{_escape_label_value(value)}"' for name, value in labels)
    return "{" + inner + "}"


def family(name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> Iterator[str]:
    """HELP and TYPE lines then one line per sample (metadata even without samples)."""
    yield f"# HELP {name} {_escape_help(help_text)}"
    yield f"# TYPE {name} {kind}"
    for labels, value in samples:
        yield f"{name}{_format_labels(labels)} {format_value(value)}"


_PROCESS_GAUGES = (
    ("process_start_time_seconds", "Start time of the process since unix epoch in seconds."),
    ("process_resident_memory_bytes", "Resident memory size in bytes."),
    ("process_virtual_memory_bytes", "Virtual memory size in bytes."),
    ("process_open_fds", "Number of open file descriptors."),
    ("process_max_fds", "Maximum number of open file descriptors."),
)


def process_lines(process: ProcessMetrics) -> Iterator[str]:
    yield from family(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        [((), process.cpu_seconds)],
    )
    values = (
        process.start_time_seconds,
        process.resident_memory_bytes,
        process.virtual_memory_bytes,
        process.open_fds,
        process.max_fds,
    )
    for (name, help_text), value in zip(_PROCESS_GAUGES, values, strict=True):
        if value is not None:
            yield from family(name, "gauge", help_text, [((), value)])


def render(lines: Iterable[str], process: ProcessMetrics | None = None) -> str:
    """`lines` then the ``process_`` metrics of `process` (read from this process when
    ``None``), as one text-format body."""
    body = [*lines, *process_lines(process if process is not None else read_process_metrics())]
    return "\n".join(body) + "\n"
