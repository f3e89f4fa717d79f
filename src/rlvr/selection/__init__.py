"""Prompt selection; importing this package registers the selectors."""

from rlvr.selection.base import Selector
from rlvr.selection import uniform  # noqa: F401
from rlvr.selection import curriculum  # noqa: F401  (registers curriculum, CVPO)
from rlvr.selection import active, kgps  # noqa: F401  (DE-Venus active selection, KGPS)

__all__ = ["Selector"]
