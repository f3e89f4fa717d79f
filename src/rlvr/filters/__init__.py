"""Batch filters (drop whole groups); importing this package registers them."""

from rlvr.filters.base import BatchFilter

__all__ = ["BatchFilter"]
