"""What ``rlvr compare`` prints while its runs go: a line when a run starts and one when it ends.

The end line says how long that run took, how many of the phase's runs have ended (a phase: the
warm starts, then the runs), the time since the phase began and, from the pace so far, about how
long the rest will take. A finished run that is reused, or a cached warm start, leaves the count.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable


class Console:
    """Thread-safe progress lines for one phase of ``total`` runs (``enabled=False`` prints nothing).
    ``clock``: seconds, monotonic; ``write``: where a line goes (stdout by default, one whole line per
    write, so lines of runs ending at once never interleave)."""

    def __init__(self, phase: str, total: int, enabled: bool = True,
                 clock: Callable[[], float] = time.monotonic, write: Callable[[str], None] | None = None):
        self.phase, self.total, self.enabled, self.clock = phase, total, enabled, clock
        self.write = write or _stdout
        self.ended = 0
        self.began = clock()
        self._started: dict[str, float] = {}
        self._lock = threading.Lock()

    def skip(self) -> None:
        """One run of the phase needs no running (a finished run reused, a cached warm start)."""
        with self._lock:
            self.total -= 1

    def start(self, label: str) -> None:
        with self._lock:
            self._started[label] = self.clock()
            self._say(f"start  {label}")

    def end(self, label: str, ok: bool) -> None:
        with self._lock:
            now = self.clock()
            took = now - self._started.pop(label, now)
            self.ended += 1
            elapsed, left = now - self.began, max(self.total - self.ended, 0)
            pace = f", about {duration(elapsed / self.ended * left)} to go" if left else ""
            tally = f"{self.ended} of {self.total} {self.phase} ended; {duration(elapsed)} elapsed"
            self._say(f"{'done  ' if ok else 'FAILED'} {label} in {duration(took)} ({tally}{pace})")

    def _say(self, text: str) -> None:
        if self.enabled:
            self.write(f"[rlvr compare] {text}")


def _stdout(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def duration(seconds: float) -> str:
    """``42s``, ``3m05s`` or ``2h07m``: a length of time as a person reads it."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
