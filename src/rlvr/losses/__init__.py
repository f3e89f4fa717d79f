"""Policy losses; importing this package registers them."""

from rlvr.losses.base import PolicyLoss

__all__ = ["PolicyLoss"]
