"""`ChildLines`: a child process's text output read line by line with a time limit, so a test
that waits for a line fails and says so instead of hanging the suite when the line never comes.

A thread reads the stream to its end (a blocking read cannot be given a timeout), and the test
takes the lines from a queue with one. The stream is the thread's from then on: the test reads
it only through `ChildLines`, never with `communicate` or `readline`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import IO


class ChildLines:
    """The lines of `stream`, as they come (see the module docstring)."""

    def __init__(self, stream: IO[str], name: str = "the child") -> None:
        self._name = name
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []  # every line taken so far, in order
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                self._lines.put(line)
        except (OSError, ValueError):  # closed under the thread by the test's cleanup
            pass
        finally:
            self._lines.put(None)

    def next(self, timeout: float) -> str | None:
        """The next line, None once the stream has ended; fails if neither comes within
        `timeout` seconds."""
        return self._next(time.monotonic() + timeout, timeout)

    def _next(self, deadline: float, timeout: float) -> str | None:
        try:
            line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(
                f"no line from {self._name} within {timeout:g} s; it wrote:\n"
                + "".join(self.seen[-40:])
            ) from None
        if line is None:
            self._lines.put(None)  # the end stays the end for later calls
        else:
            self.seen.append(line)
        return line

    def until(self, wanted: Callable[[str], bool], timeout: float) -> list[str]:
        """Lines (without their newline) up to and including the first that is `wanted`;
        fails if the stream ends first or no such line comes within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        taken: list[str] = []
        while True:
            line = self._next(deadline, timeout)
            if line is None:
                raise AssertionError(
                    f"{self._name} ended before the line awaited; it wrote:\n"
                    + "".join(self.seen[-40:])
                )
            taken.append(line.rstrip("\n"))
            if wanted(taken[-1]):
                return taken

    def rest(self, timeout: float) -> str:
        """Everything still to come, once the stream ends (the child has exited or closed
        it); fails if it does not end within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        rest: list[str] = []
        while (line := self._next(deadline, timeout)) is not None:
            rest.append(line)
        return "".join(rest)
