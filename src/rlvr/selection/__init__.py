"""Prompt selection; importing this package registers the selectors."""

from rlvr.selection.base import Selector
from rlvr.selection import uniform  # noqa: F401
from rlvr.selection import curriculum  # noqa: F401  (registers curriculum, CVPO)

__all__ = ["Selector"]
