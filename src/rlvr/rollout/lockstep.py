"""Lock-step forwards under sharded training (docs/design.md §6: "ranks generate in lock-step").

Under FSDP2 (and DeepSpeed ZeRO-3) every forward of the policy gathers parameter shards with a
collective, so every rank must run the same number of forwards: a rank whose rows have all finished
decoding keeps stepping (on a finished row, output unused) until every rank is done, and a scoring
pass with fewer micro-batches on this rank runs extra throw-away forwards.

The trainer opens ``lockstep(group)`` around generation and scoring when its backend shards
parameters (``rlvr.train.sharding``); ``group`` answers two all-reduces. Outside it (one process,
DDP) both helpers are the identity, so decoding is unchanged there.

Generation gathers instead: ``gathered(model)`` (opened by ``rlvr.rollout.hf.generate_ids`` around its
engine calls) asks the group to hold ``model``'s parameters whole on this rank for one generate call,
one all-gather per parameter group on entry and a reshard on exit, rather than one per forward. While
they are whole each forward is local, so lock-step is lifted inside: every rank decodes as one process
does, stopping when its own rows are done, with no per-token all-reduce. Only the entry's gather is a
collective, so every rank must make the same generate calls (they already had to make the same
forwards). A backend that cannot gather (DeepSpeed ZeRO-3 here) yields False and the forwards stay in
lock-step; there the per-token all-reduce stays too: checking every k tokens would cost up to k - 1
extra forwards, each a full parameter all-gather, to save a one-number all-reduce.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any, Protocol


class RankGroup(Protocol):
    """What lock-step needs of the process group (``rlvr.train.sharding.Sharding`` provides it)."""

    def any_rank(self, flag: bool) -> bool:
        """True when ``flag`` is True on at least one rank (every rank must call it)."""

    def max_over_ranks(self, n: int) -> int:
        """The largest ``n`` over ranks (every rank must call it)."""

    def gathered(self, model: Any) -> AbstractContextManager[bool]:
        """Hold ``model``'s parameters whole on this rank inside (every rank must enter it); yields True
        when the forwards inside are then local, False when they stay collectives (nothing gathered)."""


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


@contextmanager
def gathered(model: Any) -> Iterator[None]:
    """Under lock-step: ``model``'s parameters gathered once for the block (and resharded after), and
    lock-step lifted inside when that makes its forwards local; else nothing."""
    group = _GROUP.get()
    if group is None:
        yield
        return
    with group.gathered(model) as local:
        token = _GROUP.set(None) if local else None
        try:
            yield
        finally:
            if token is not None:
                _GROUP.reset(token)
