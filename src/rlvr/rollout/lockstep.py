"""Lock-step forwards under sharded training (docs/design.md §6: "ranks generate in lock-step").

Under FSDP2 (and DeepSpeed ZeRO-3) every forward of the policy gathers parameter shards with a
collective, so every rank must run the same number of forwards: a rank whose rows have all finished
decoding keeps stepping (on a finished row, output unused) until every rank is done, and a scoring
pass with fewer micro-batches on this rank runs extra throw-away forwards.

The trainer opens ``lockstep(group)`` around generation and scoring when its backend shards
parameters (``rlvr.train.sharding``); ``group`` answers two all-reduces. Outside it (one process,
DDP) both helpers are the identity, so decoding is unchanged there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class RankGroup(Protocol):
    """What lock-step needs of the process group (``rlvr.train.sharding.Sharding`` provides it)."""

    def any_rank(self, flag: bool) -> bool:
        """True when ``flag`` is True on at least one rank (every rank must call it)."""

    def max_over_ranks(self, n: int) -> int:
        """The largest ``n`` over ranks (every rank must call it)."""


_GROUP: ContextVar[RankGroup | None] = ContextVar("rlvr_lockstep_group", default=None)


@contextmanager
def lockstep(group: RankGroup | None) -> Iterator[None]:
    """Forwards inside run in lock-step across the ranks of ``group`` (None: no lock-step)."""
    token = _GROUP.set(group)
    try:
        yield
    finally:
        _GROUP.reset(token)


def active() -> bool:
    """Whether forwards must line up across ranks here."""
    return _GROUP.get() is not None


def any_running(running: bool) -> bool:
    """Under lock-step: whether any rank is still running (an all-reduce); else ``running`` itself."""
    group = _GROUP.get()
    return running if group is None else group.any_rank(running)


def forward_count(n: int) -> int:
    """Under lock-step: the most forwards any rank needs for its ``n`` micro-batches; else ``n``."""
    group = _GROUP.get()
    return n if group is None else group.max_over_ranks(n)
