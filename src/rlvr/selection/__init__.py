"""Prompt selection; importing this package registers the selectors."""

from rlvr.selection.base import Selector
from rlvr.selection import uniform  # noqa: F401

__all__ = ["Selector"]
