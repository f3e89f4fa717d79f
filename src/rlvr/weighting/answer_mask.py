"""Answer-span masking (OM-GRPO): no policy-gradient credit on the tokens of the final answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlvr.ops import masked_mean
from rlvr.registry import param, register
from rlvr.types import BatchError, check_mask, check_shape
from rlvr.weighting.base import TokenWeighting, WeightingInputs, WeightingOutput

SPANS = ("after_marker", "boxed")
BOXED = "\\boxed{"


@dataclass(frozen=True)
class AnswerMaskConfig:
    span: str = param("after_marker", "RECONSTRUCTION: how the answer span is found: 'after_marker' (from the "
                                      "last marker to the end) or 'boxed' (the last \\boxed{...})")
    marker: str = param("#", "the final-answer marker for span='after_marker' (the arithmetic and "
                             "countdown tasks write '#answer')")

    def __post_init__(self) -> None:
        if self.span not in SPANS:
            raise ValueError(f"answer_mask: span must be one of {SPANS}, got '{self.span}'")
        if self.span == "after_marker" and not self.marker:
            raise ValueError("answer_mask: marker must be a non-empty string")


@register("weighting", "answer_mask")
class AnswerMask(TokenWeighting):
    """Answer-span masking: zero the advantage on the final-answer tokens, keep it on the reasoning.

    Paper: OM-GRPO, answer-masked label-free GRPO with soft consensus and a contrast-augmented
    reward (seed abstract; title and arXiv id not known to us), docs/methods.md §2.13. Only the mask
    part is here; its consensus and contrast rewards are reward shapers.

    Equation: ``A′[i, t] = 0`` for ``t ∈ S_i`` (the answer span of row i, ``answer_mask``), else
    ``A′[i, t] = A[i, t]``. The paper writes ``mask′ = mask·1[t ∉ S_i]``; zeroing the advantage
    removes the policy-gradient term on those tokens, which is what the abstract asks for.

    RECONSTRUCTION (from the abstract): how S_i is located (``span``: everything from the last
    final-answer marker to the end, marker included, or the last ``\\boxed{...}``). The trainer
    computes S_i with :func:`answer_mask_from_ids` because ``needs_answer_mask`` is True.

    Differs from the plain broadcast advantage (GRPO et al.):
      * the answer tokens get no advantage, so the answer-level reward trains the reasoning that
        led to it, not the answer string itself (OM-GRPO's remedy for consensus collapse);
      * an all-False answer mask (no answer found) is the identity.
      * KL and entropy terms of the objective, when enabled, still act on the answer tokens.

    Metrics: ``answer_token_frac`` (trained tokens in the answer span), ``answer_zeroed_frac``
    (trained tokens whose non-zero advantage was zeroed).

    Shapes: advantages, mask, answer_mask (N, T) → advantages (N, T).
    """

    Config = AnswerMaskConfig
    needs_every_row = False  # row-local; zeroes some advantages, never makes one
    paper = "OM-GRPO: answer-masked label-free GRPO (arXiv id unknown; seed abstract)"
    needs_answer_mask = True

    def __call__(self, inputs: WeightingInputs) -> WeightingOutput:
        answer = inputs.answer_mask
        if answer is None:
            raise BatchError("answer_mask needs WeightingInputs.answer_mask (N, T) bool, True on the final "
                             "answer span; the trainer fills it when a weighting sets needs_answer_mask")
        check_mask(answer, "answer_mask")
        adv, mask = inputs.advantages, inputs.mask
        out = torch.where(answer, torch.zeros_like(adv), adv)  # (N, T)
        metrics = {
            "answer_token_frac": masked_mean(answer.float(), mask),
            "answer_zeroed_frac": masked_mean((answer & (adv != 0)).float(), mask),
        }
        return WeightingOutput(out, metrics=metrics)


# --- locating the answer span -----------------------------------------------------------------

def answer_token_mask(texts_per_token: list[list[str]], marker: str = "#", span: str = "after_marker",
                      length: int | None = None) -> Tensor:
    """(N, T) bool: True on the tokens of each row's final answer span.

    ``texts_per_token[i]`` holds row i's tokens decoded one by one (in order). ``after_marker``
    marks the token holding the first character of the last ``marker`` and every later token;
    ``boxed`` marks the tokens from the last ``\\boxed{`` to its matching ``}`` (to the end when
    unclosed). A row without an answer is all False. ``T = length`` (default: the longest row).
    """
    if span not in SPANS:
        raise ValueError(f"answer_token_mask: span must be one of {SPANS}, got '{span}'")
    t = max((len(row) for row in texts_per_token), default=0) if length is None else length
    out = torch.zeros(len(texts_per_token), t, dtype=torch.bool)
    for i, pieces in enumerate(texts_per_token):
        if len(pieces) > t:
            raise ValueError(f"answer_token_mask: row {i} has {len(pieces)} tokens, more than length={t}")
        first, last = _span_tokens(pieces, marker, span)
        if first is not None:
            out[i, first:last + 1] = True
    return out


def answer_mask_from_ids(tokenizer: Any, completion_ids: Tensor, attention: Tensor, marker: str = "#",
                         span: str = "after_marker") -> Tensor:
    """(N, T) bool answer spans of tokenised completions: each attended token id is decoded on its
    own (special tokens decode to ''), then :func:`answer_token_mask` runs on the attended tokens
    of each row. Padding (attention False) is never in a span."""
    n, t = check_mask(attention, "attention")
    check_shape(completion_ids, (n, t), "completion_ids")
    cache: dict[int, str] = {}  # one decode per distinct id

    def piece(tid: int) -> str:
        if tid not in cache:
            cache[tid] = tokenizer.decode([tid], skip_special_tokens=True)
        return cache[tid]

    ids, att = completion_ids.tolist(), attention.cpu()
    out = torch.zeros(n, t, dtype=torch.bool)
    for i in range(n):
        cols = att[i].nonzero(as_tuple=True)[0]  # (L_i,) attended positions
        pieces = [piece(ids[i][c]) for c in cols.tolist()]
        row = answer_token_mask([pieces], marker=marker, span=span, length=len(pieces))[0]  # (L_i,)
        out[i, cols] = row
    return out.to(completion_ids.device)


def _span_tokens(pieces: list[str], marker: str, span: str) -> tuple[int | None, int]:
    """(first, last) token indices of the answer span in one row, or (None, -1) when absent."""
    text = "".join(pieces)
    if span == "after_marker":
        start = text.rfind(marker) if marker else -1
        end = len(text)  # through the last token
    else:
        start = text.rfind(BOXED)
        end = _closing_brace(text, start + len(BOXED)) if start >= 0 else -1
    if start < 0:
        return None, -1
    ends = _token_ends(pieces)  # ends[j] = char offset just past token j
    first = next(j for j, e in enumerate(ends) if e > start)
    last = len(pieces) - 1 if end >= len(text) else next(j for j, e in enumerate(ends) if e > end)
    return first, last


def _token_ends(pieces: list[str]) -> list[int]:
    ends, pos = [], 0
    for p in pieces:
        pos += len(p)
        ends.append(pos)
    return ends


def _closing_brace(text: str, pos: int) -> int:
    """Index of the brace closing the one opened just before ``pos``; ``len(text)`` when unclosed."""
    depth = 1
    for k in range(pos, len(text)):
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        if depth == 0:
            return k
    return len(text)
