"""One-line notices to the user on stderr (a skipped checkpoint, a truncated log line, skipped rows)."""

from __future__ import annotations

import sys


def notice(message: str) -> None:
    """Print ``rlvr: message`` on stderr at once (it must survive a crash that follows)."""
    print(f"rlvr: {message}", file=sys.stderr, flush=True)
