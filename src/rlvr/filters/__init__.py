"""Batch filters (drop whole groups); importing this package registers them."""

from rlvr.filters.base import BatchFilter
from rlvr.filters.zero_std import ZeroStd, keep_groups_mask
from rlvr.filters import de_venus  # noqa: F401  (DE-Venus low-confidence filter)

__all__ = ["BatchFilter", "ZeroStd", "keep_groups_mask"]
