"""Controlled comparisons: methods × seeds under one equal budget, with tables and plots."""

from rlvr.compare.config import CompareConfig, Method, load_compare
from rlvr.compare.runner import run_comparison

__all__ = ["CompareConfig", "Method", "load_compare", "run_comparison"]
