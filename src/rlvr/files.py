"""Writing a file so that a reader, or a crash, never leaves it half written: the content goes to a
sibling ``NAME.tmp`` first, which ``os.replace`` then puts in place in one step."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable


def write_atomic(path: str | Path, write: Callable[[Path], None], *, fsync: bool = False) -> Path:
    """Call ``write(tmp)`` on ``PATH.tmp``, then rename it to ``path``; ``fsync``: flush the temporary
    file to disk before the rename (a checkpoint's files), so the name never points at data still only
    in the page cache."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    if fsync:
        _fsync(tmp)
    os.replace(tmp, path)
    return path


def write_text_atomic(path: str | Path, text: str, *, fsync: bool = False) -> Path:
    """``write_atomic`` of a text file (the platform's default encoding, as ``Path.write_text``)."""
    return write_atomic(path, lambda tmp: tmp.write_text(text), fsync=fsync)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
