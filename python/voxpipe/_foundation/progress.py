"""The progress report of voxpipe's long calls on ``sys.stderr``: ``progress="auto"``, ``"bar"``,
``"log"`` or ``"none"``, the modes of the command line's ``--progress`` with the same lines
(docs/cli.md "Progress").

A foundation module: it imports nothing from voxpipe, so that any module may use it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Literal, TextIO

Mode = Literal["auto", "bar", "log", "none"]
MODES: tuple[Mode, ...] = ("auto", "bar", "log", "none")

LOG_INTERVAL = 5.0
"""Seconds between two log lines: often enough that a job's log shows it alive, rarely enough
that an hour's run writes about 700 lines (cli/progress.hpp's kProgressLogInterval)."""

BAR_INTERVAL = 0.1
"""Seconds between two redraws of the bar (but the last)."""

_SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def log_interval() -> float:
    """Seconds between log lines: ``$VOXPIPE_PROGRESS_INTERVAL`` (a number >= 0; 0 writes a line
    at every step), else LOG_INTERVAL. Another value is ignored: it tunes a report, not a
    result."""
    try:
        seconds = float(os.environ.get("VOXPIPE_PROGRESS_INTERVAL", ""))
    except ValueError:
        return LOG_INTERVAL
    return seconds if 0 <= seconds <= 86400 else LOG_INTERVAL


def _duration(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _size_unit(n: float) -> tuple[str, float]:
    u, scale = 0, 1.0
    while u < 4 and n >= 1024 * scale:
        scale *= 1024
        u += 1
    return _SIZE_UNITS[u], scale


class Progress:
    """The report of ``total`` steps of the call ``name`` (e.g. "voxpipe.resample") in ``mode``
    (one of MODES): as cli/progress.hpp's Progress, with the same text.

    - bar: ``NAME [#####.....] 42% 3/7 volumes, ETA 0:12``, redrawn with ``\\r`` at most every
      BAR_INTERVAL; erased by ``end()`` and ``abandon()``.
    - log: ``NAME: 3/7 volumes (42%), 1.5 volumes/s, ETA 0:03``, a line when a step comes at
      least ``log_interval()`` after the previous line (the first one after the construction),
      and at ``end()``: ``NAME: 7/7 volumes (100%), 1.6 volumes/s, done in 0:04``.
    - auto: the bar when ``stream`` is a terminal; otherwise log, but ``end()`` writes its line
      only when an interval line was written (a short call stays quiet).
    - none: nothing.

    ``unit`` "bytes" shows sizes ("1.2/3.4 MiB"). ``stream``: default ``sys.stderr``. Called as
    ``progress(done, total)``, the callback form the long calls take; ``done`` never goes back
    (calls from several threads may arrive out of order). Thread-safe.
    """

    def __init__(self, mode: str, total: int, name: str, unit: str,
                 stream: TextIO | None = None):
        if mode not in MODES:
            raise ValueError(f"expected one of {', '.join(map(repr, MODES))}, but received "
                             f"{mode!r}")
        self._stream = sys.stderr if stream is None else stream
        if mode == "auto":
            try:
                terminal = self._stream.isatty()
            except (AttributeError, ValueError):  # no isatty, or closed
                terminal = False
            mode = "bar" if terminal else "quiet-log"
        self._mode = mode
        self._total = max(int(total), 1)
        self._name = name
        self._unit = unit
        self._done = 0
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._lines = 0
        self._width = 0
        self._last_draw = -float("inf")
        self._interval = log_interval() if mode in ("log", "quiet-log") else BAR_INTERVAL
        self._next_line = self._start + self._interval
        if mode == "bar":  # at 0 before the first step, which may take long
            self._draw(self._start)

    @property
    def active(self) -> bool:
        """Whether anything is reported (False for "none", and after end())."""
        return self._mode != "none"

    def __call__(self, done: int, total: int | None = None) -> None:
        with self._lock:
            if self._mode == "none":
                return
            if total is not None:
                self._total = max(int(total), 1)
            self._done = max(self._done, int(done))
            now = time.monotonic()
            if self._mode == "bar":
                if now - self._last_draw >= BAR_INTERVAL or self._done >= self._total:
                    self._last_draw = now
                    self._draw(now)
            elif now >= self._next_line:
                self._next_line = now + self._interval
                self._lines += 1
                self._write(f"{self._head(now)}, ETA {self._eta(now)}\n")

    def end(self) -> None:
        """The call's work is done: erases the bar, or writes the closing log line."""
        with self._lock:
            if self._mode == "bar":
                self._erase()
            elif self._mode == "log" or (self._mode == "quiet-log" and self._lines):
                now = time.monotonic()
                self._write(f"{self._head(now)}, done in {_duration(now - self._start)}\n")
            self._mode = "none"

    def abandon(self) -> None:
        """The call failed: erases the bar; its error is the last word."""
        with self._lock:
            if self._mode == "bar":
                self._erase()
            self._mode = "none"

    # ---- text

    def _counts(self, done: int) -> str:
        if self._unit != "bytes":
            return f"{done}/{self._total} {self._unit}"
        unit, scale = _size_unit(self._total)
        if scale == 1:
            return f"{done}/{self._total} B"
        return f"{done / scale:.1f}/{self._total / scale:.1f} {unit}"

    def _rate(self, now: float) -> str:
        elapsed = now - self._start
        r = min(self._done, self._total) / elapsed if elapsed > 0 else 0.0
        if self._unit == "bytes":
            unit, scale = _size_unit(r)
            return f"{r / scale:.1f} {unit}/s"
        return f"{r:.1f} {self._unit}/s"

    def _eta(self, now: float) -> str:
        done = min(self._done, self._total)
        if not done:
            return "?"
        return _duration((now - self._start) * (self._total - done) / done)

    def _head(self, now: float) -> str:
        done = min(self._done, self._total)
        return (f"{self._name}: {self._counts(done)} ({done * 100 // self._total}%), "
                f"{self._rate(now)}")

    def _draw(self, now: float) -> None:
        done = min(self._done, self._total)
        filled = done * 30 // self._total
        line = (f"{self._name} [{'#' * filled}{'.' * (30 - filled)}] {done * 100 // self._total}% "
                f"{self._counts(done)}, ETA {self._eta(now)}")
        shown = len(line)
        line = line.ljust(self._width)
        self._width = max(self._width, shown)
        self._write("\r" + line)

    def _erase(self) -> None:
        if self._width:
            self._write("\r" + " " * self._width + "\r")
        self._width = 0

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr ends the report, not the call
            self._mode = "none"


def reporter(progress: object, total: int, name: str, unit: str
             ) -> tuple[Callable[[int, int], object] | None, Progress | None]:
    """What a long call does with its ``progress=`` argument: (the callback to pass on, the
    Progress to end() or abandon(), or None). None and "none": no callback; a callable: itself;
    "auto", "bar", "log": a Progress of ``total`` steps. ValueError for another string,
    TypeError for anything else."""
    if progress is None:
        return None, None
    if isinstance(progress, str):
        if progress not in MODES:
            raise ValueError("progress: expected a callable, None or one of "
                             f"{', '.join(map(repr, MODES))}, "
                             f"but received {progress!r}")
        if progress == "none":
            return None, None
        p = Progress(progress, total, name, unit)
        return p, p
    if callable(progress):
        return progress, None
    raise TypeError("progress: expected a callable, None or one of "
                    f"{', '.join(map(repr, MODES))}, but received {type(progress).__name__}")
