"""tests/child_lines.py: a test waiting for a child's line fails when the line does not come,
rather than hanging the suite."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.child_lines import ChildLines

_SAYS_THEN_SLEEPS = "import time; print('one'); print('two', flush=True); time.sleep(60)"


def _child(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )


def test_lines_come_in_order_and_a_line_that_never_comes_fails_in_time() -> None:
    proc = _child(_SAYS_THEN_SLEEPS)
    try:
        assert proc.stdout is not None
        lines = ChildLines(proc.stdout, "the sleeper")
        assert lines.until(lambda line: line == "two", timeout=30) == ["one", "two"]
        with pytest.raises(AssertionError, match=r"no line from the sleeper within 0\.2 s"):
            lines.until(lambda line: line == "three", timeout=0.2)
    finally:
        proc.kill()
        proc.wait()
    assert lines.rest(timeout=30) == ""  # killed: the stream ends


def test_a_stream_that_ends_first_fails_and_shows_what_was_written() -> None:
    proc = _child("print('only this')")
    try:
        assert proc.stdout is not None
        lines = ChildLines(proc.stdout, "the child")
        with pytest.raises(AssertionError, match=r"ended before the line awaited(.|\n)*only this"):
            lines.until(lambda line: line == "never", timeout=30)
        assert lines.next(timeout=30) is None  # and stays ended
    finally:
        proc.kill()
        proc.wait()


def test_rest_is_everything_after_the_lines_taken() -> None:
    proc = _child("print('a'); print('b'); print('c')")
    try:
        assert proc.stdout is not None
        lines = ChildLines(proc.stdout)
        assert lines.next(timeout=30) == "a\n"
        assert lines.rest(timeout=30) == "b\nc\n"
    finally:
        proc.wait()
