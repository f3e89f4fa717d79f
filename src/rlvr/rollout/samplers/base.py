"""The sampler protocol: problems in, a group of completions per problem out (docs/design.md §2, rollout).

A sampler may condition generation on a context the trainer never sees (a weak model's prefix, a
hint, another policy), while the loss is defined on the original prompt. Every token it returns
carries an ``Origin`` (``Rollouts.token_origin``) and the loss mask follows it: prefix and hint
tokens are never trained; off-policy tokens (reference anchors, guided continuations) are trained
against ``Rollouts.behaviour_logprobs``, the log-probs of the policy and context that produced them.

The helpers here build such batches: contexts from token ids (prompt ⊕ prefix), completions joined
from a fixed part and a sampled part, and the parts of a group put back in group order.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import torch
from torch import Tensor

from rlvr.batching import concat_rollouts
from rlvr.models import render_prompt
from rlvr.plugin import Plugin
from rlvr.rollout.hf import Generation, generate
from rlvr.rollout.scoring import sequence_logprobs
from rlvr.types import Origin, Problem, Rollouts

Verify = Callable[[list[Problem], list[str]], list[float]]  # correctness reward per (problem, text)


@dataclass
class GenerationCount:
    """Everything a sampler generated in one call, kept in the batch or not (the rollout budget's
    unit): ``completions`` sampled sequences — discarded plain rows, hinted or prefixed rows, a weak
    model's drafts, counterfactual alternatives, MCMC proposals — and ``tokens`` generated in them."""

    completions: int = 0
    tokens: int = 0

    def add(self, gen: Generation, rows: bool = True) -> None:
        """Count one engine call: its tokens, and its rows as completions unless ``rows`` is False
        (the later turns of a multi-turn episode continue a completion already counted)."""
        self.completions += int(gen.completion_ids.shape[0]) if rows else 0
        self.tokens += int(gen.completion_mask.sum())


@dataclass
class SampleContext:
    """What the collector hands a sampler for one call."""

    tokenizer: Any
    rollout: Any  # RolloutConfig: max_new_tokens, temperature, top_p, top_k
    seed: int  # this call's sampling seed (distinct per step, rank and refill round)
    group_offset: int = 0  # added to the group index b of each problem (ranks and rounds stay distinct)
    reference: torch.nn.Module | None = None  # frozen reference policy, for samplers that need one
    verify: Verify | None = None  # the task's verifier, for samplers that decide after a first look
    spent: GenerationCount = field(default_factory=GenerationCount)  # samplers add every engine call here


class Sampler(Plugin, ABC):
    """Samples ``group_size`` completions for each problem; rows of problem b get group id
    ``ctx.group_offset + b``. Every engine call is added to ``ctx.spent`` (``sample_plain`` does it),
    kept rows or not, so the rollout budget counts all generation."""

    needs_reference: ClassVar[bool] = False  # the trainer keeps a frozen reference copy for it
    needs_verifier: ClassVar[bool] = False
    produces_off_policy: ClassVar[bool] = False  # trains tokens whose behaviour policy is not pi_old
    runs_in_worker: ClassVar[bool] = False  # needs nothing of the trainer's (verifier, reference): it may
    # run in the generator process of asynchronous generation (rollout.async_rollout)
    testbed_only: ClassVar[str] = ""  # why this setting needs the tiny testbed model (and what to set
    # instead with model.path): a run on a pretrained model refuses it at validation; "" = any model

    @abstractmethod
    def sample(self, policy: torch.nn.Module, problems: list[Problem], group_size: int,
               ctx: SampleContext) -> Rollouts:
        """The batch of ``len(problems) * group_size`` rows, every token's origin recorded."""

    def prepare(self, cfg: Any, tokenizer: Any, run_dir: Any, is_main: bool = True) -> None:
        """Build, once before training, what the sampler needs from the run's config (e.g. a weak
        model); ``is_main``: this process writes shared files. Default: nothing."""


# --- building blocks ----------------------------------------------------------------------------

def sample_plain(model: torch.nn.Module, rows: list[Problem], ctx: SampleContext, seed: int, *,
                 keep_hidden: bool = False) -> Generation:
    """One completion per row from the formatted prompt, with the run's sampling settings
    (``keep_hidden``: also the output layer's inputs, ``Generation.hidden``)."""
    r = ctx.rollout
    prompts = [render_prompt(ctx.tokenizer, p) for p in rows]
    gen = generate(model, ctx.tokenizer, prompts, max_new_tokens=r.max_new_tokens, temperature=r.temperature,
                   top_p=r.top_p, top_k=r.top_k, do_sample=True, seed=seed, keep_hidden=keep_hidden,
                   **engine_kwargs(r))
    ctx.spent.add(gen)
    return gen


def engine_kwargs(rollout: Any) -> dict[str, Any]:
    """The engine, its options, the micro-batch size and the sampling knobs beyond temperature /
    top-p / top-k of the run's RolloutConfig, for ``generate`` / ``generate_ids`` (defaults for
    configs that predate them)."""
    engine = getattr(rollout, "engine", "loop")  # RolloutConfig's {name, params} spec, or a bare name
    name, params = (engine, getattr(rollout, "engine_params", None)) if isinstance(engine, str) else (
        engine.name, engine.params)
    return {"engine": name, "engine_params": params,
            "micro_batch_size": getattr(rollout, "micro_batch_size", 0), "min_p": getattr(rollout, "min_p", 0.0),
            "repetition_penalty": getattr(rollout, "repetition_penalty", 1.0)}


def mixed_groups(policy: torch.nn.Module, problems: list[Problem], plain_n: int, extra_n: int,
                 extra: Callable[[list[Problem]], Rollouts], ctx: SampleContext) -> Rollouts:
    """Groups of ``plain_n`` plain rows then ``extra_n`` rows from ``extra`` (called once with every
    problem repeated ``extra_n`` times), in group order; only the plain rows when ``extra_n`` is 0
    (so a guidance fraction of 0 is the plain sampler, token for token)."""
    b, parts, order = len(problems), [], []
    if plain_n:
        rows = [p for p in problems for _ in range(plain_n)]
        parts.append(generation_rollouts(rows, sample_plain(policy, rows, ctx, ctx.seed),
                                         row_group_ids(plain_n, b, ctx.group_offset)))
    if not extra_n:
        return parts[0]
    parts.append(extra([p for p in problems for _ in range(extra_n)]))
    k = len(parts) - 1
    for i in range(b):
        order += [(0, i * plain_n + j) for j in range(plain_n)] + [(k, i * extra_n + j) for j in range(extra_n)]
    out = assemble(parts, order, ctx.tokenizer.pad_token_id)
    out.meta["sampler_metrics"] = dict(parts[k].meta.get("sampler_metrics", {}))
    return out


def generation_rollouts(rows: list[Problem], gen: Generation, group_ids: Tensor) -> Rollouts:
    """A plain batch: every generated token is on-policy and trained (engine statistics, e.g.
    SpecRoll's acceptance, go to ``meta["sampler_metrics"]``)."""
    batch = Rollouts(problems=rows, prompt_ids=gen.prompt_ids, prompt_mask=gen.prompt_mask,
                     completion_ids=gen.completion_ids, completion_mask=gen.completion_mask,
                     group_ids=group_ids.to(gen.completion_ids.device), rollout_logprobs=gen.logprobs,
                     texts=list(gen.texts))
    if getattr(gen, "stats", None):
        batch.meta["sampler_metrics"] = dict(gen.stats)
    return batch


def row_group_ids(per_problem: int, n_problems: int, offset: int) -> Tensor:
    """(n_problems * per_problem,) group ids ``offset + b``, ``per_problem`` rows per problem."""
    return torch.arange(n_problems).repeat_interleave(per_problem) + offset


def with_origin(batch: Rollouts) -> Rollouts:
    """The batch with explicit all-POLICY origins and zero behaviour log-probs where unset, so it
    can be joined with guided parts (concat needs every per-row field in every part)."""
    if batch.completion_attention is None:
        batch.completion_attention = batch.completion_mask.clone()
    if batch.token_origin is None:
        batch.token_origin = torch.full_like(batch.completion_ids, int(Origin.POLICY), dtype=torch.uint8)
    if batch.behaviour_logprobs is None:
        batch.behaviour_logprobs = torch.zeros_like(batch.completion_ids, dtype=torch.float32)
    return batch


def extend_contexts(prompt_ids: Tensor, prompt_mask: Tensor, extras: Sequence[Sequence[int]],
                    pad_id: int) -> tuple[Tensor, Tensor]:
    """Left-padded contexts ``prompt_i ⊕ extra_i`` (N, P') and their bool mask, from left-padded
    prompts (N, P) and a list of token-id lists (a prefix or a hint per row)."""
    rows = [prompt_ids[i][prompt_mask[i]].tolist() + list(extra) for i, extra in enumerate(extras)]
    return left_pad(rows, pad_id, min_width=0)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, min_width: int = 1) -> tuple[Tensor, Tensor]:
    """Left-padded ids (N, W) and bool mask (N, W) from lists of token ids, W = max(longest row,
    ``min_width``)."""
    width = max(max((len(r) for r in rows), default=0), min_width)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r):] = torch.tensor(list(r), dtype=torch.long)
            mask[i, width - len(r):] = True
    return ids, mask


def join_completions(fixed: Sequence[Sequence[int]], fixed_origin: Origin, gen: Generation,
                     pad_id: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Completions ``fixed_i ⊕ generated_i``, right-padded: ids (N, T'), real-token mask (N, T'),
    origins (N, T') (``fixed_origin`` on the fixed part, POLICY on the generated part) and the
    engine's log-probs (N, T') (0 on the fixed part)."""
    lengths = gen.completion_mask.sum(-1).tolist()
    width = max((len(f) + n for f, n in zip(fixed, lengths)), default=0)
    n = len(fixed)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    real = torch.zeros((n, width), dtype=torch.bool)
    origin = torch.full((n, width), int(Origin.POLICY), dtype=torch.uint8)
    logp = torch.zeros((n, width), dtype=torch.float32)
    for i, (f, g) in enumerate(zip(fixed, lengths)):
        k = len(f)
        if k:
            ids[i, :k] = torch.tensor(list(f), dtype=torch.long)
            origin[i, :k] = int(fixed_origin)
        ids[i, k:k + g] = gen.completion_ids[i, :g].cpu()
        logp[i, k:k + g] = gen.logprobs[i, :g].cpu()
        real[i, :k + g] = True
    return ids, real, origin, logp


def trained_mask(real: Tensor, origin: Tensor) -> Tensor:
    """(N, T) bool: real tokens whose origin is trained (everything but PREFIX, HINT and ENV)."""
    untrained = (origin == int(Origin.PREFIX)) | (origin == int(Origin.HINT)) | (origin == int(Origin.ENV))
    return real & ~untrained


@torch.no_grad()
def behaviour_logprobs(model: torch.nn.Module, ctx_ids: Tensor, ctx_mask: Tensor, completion_ids: Tensor,
                       attention: Tensor, temperature: float) -> Tensor:
    """(N, T) log-probs of the completions under ``model`` in the given contexts, by the trainer's
    own forward (so a ratio against the trainer's log-probs has no engine mismatch)."""
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        logp, _ = sequence_logprobs(model, ctx_ids.to(device), ctx_mask.to(device), completion_ids.to(device),
                                    attention.to(device), temperature=temperature)
    finally:
        model.train(was_training)
    return torch.where(attention.to(logp.device), logp, torch.zeros_like(logp)).float().cpu()


HINT_MODES = ("masked", "drop")


def hinted_rollouts(policy: torch.nn.Module, tokenizer: Any, rows: list[Problem], group_ids: Tensor,
                    prompt: tuple[Tensor, Tensor], context: tuple[Tensor, Tensor],
                    hint_ids: Sequence[Sequence[int]], has_hint: Tensor, gen: Generation, mode: str,
                    temperature: float) -> Rollouts:
    """Rows generated in a hinted ``context`` (ids, mask), trained on the base ``prompt`` (ids, mask).

    ``mode`` 'masked': completion ``hint_i ⊕ y_i`` with the hint tokens of origin HINT (untrained; y is
    on-policy in [x][h ⊕ y], so zero behaviour log-probs). 'drop': completion ``y_i`` alone, origin
    GUIDED on rows with ``has_hint`` (N,) bool, with behaviour log-probs from a forward in the hinted
    context. The texts (what the verifier reads) are ``decode(hint_i) ⊕ y_i`` in both modes.
    """
    if mode not in HINT_MODES:
        raise ValueError(f"hinted_rollouts: mode must be one of {HINT_MODES}, got '{mode}'")
    texts = [(tokenizer.decode(h, skip_special_tokens=True) if h else "") + y for h, y in zip(hint_ids, gen.texts)]
    if mode == "masked":
        comp, real, origin, logp = join_completions(hint_ids, Origin.HINT, gen, tokenizer.pad_token_id)
        behaviour = torch.zeros_like(logp)  # y is on-policy in the trained context [x][h ⊕ y]
    else:
        comp, real, logp = gen.completion_ids.cpu(), gen.completion_mask.cpu(), gen.logprobs.cpu()
        origin = torch.where(has_hint[:, None] & real, int(Origin.GUIDED), int(Origin.POLICY)).to(torch.uint8)
        behaviour = behaviour_logprobs(policy, context[0], context[1], comp, real, temperature)
        behaviour = torch.where(origin == int(Origin.GUIDED), behaviour, torch.zeros_like(behaviour))
    return Rollouts(problems=rows, prompt_ids=prompt[0], prompt_mask=prompt[1], completion_ids=comp,
                    completion_mask=trained_mask(real, origin), completion_attention=real, group_ids=group_ids,
                    rollout_logprobs=logp, token_origin=origin, behaviour_logprobs=behaviour, texts=texts)


def assemble(parts: list[Rollouts], order: list[tuple[int, int]], pad_id: int) -> Rollouts:
    """Join parts and reorder rows: ``order`` lists (part index, row in part) in output order."""
    device = parts[0].completion_ids.device
    parts = [with_origin(p.to(device)) for p in parts] if len(parts) > 1 else parts
    joined = concat_rollouts(parts, pad_id)
    starts, total = [], 0
    for p in parts:
        starts.append(total)
        total += p.num_rows
    index = torch.tensor([starts[k] + i for k, i in order], dtype=torch.long)
    return joined.select(index)


def cut_at_boundary(tokens: Sequence[int], limit: int, tokenizer: Any, separators: Sequence[str]) -> int:
    """The largest ``c <= limit`` such that token ``c - 1`` ends a step (its text ends with a
    separator); 0 when no step ends within the first ``limit`` tokens."""
    for c in range(min(limit, len(tokens)), 0, -1):
        text = tokenizer.decode([tokens[c - 1]], skip_special_tokens=False)
        if any(text.endswith(s) for s in separators):
            return c
    return 0


def text_cut_at_boundary(text: str, limit: int, separators: Sequence[str]) -> str:
    """``text[:c]`` for the largest ``c <= limit`` ending right after a separator ('' if none)."""
    best = 0
    for s in separators:
        at = text.rfind(s, 0, max(limit, 0))
        if at >= 0 and at + len(s) <= limit:
            best = max(best, at + len(s))
    return text[:best]


def uniform_fractions(n: int, low: float, high: float, seed: int) -> list[float]:
    """``n`` draws from U[low, high] from a private stream (the global RNG is left alone)."""
    rng = random.Random(seed)
    return [rng.uniform(low, high) for _ in range(n)]


def check_range(name: str, value: Sequence[float], where: str) -> tuple[float, float]:
    """A (low, high) pair with 0 <= low <= high <= 1, as a tuple."""
    pair = tuple(float(v) for v in value)
    if len(pair) != 2 or not 0.0 <= pair[0] <= pair[1] <= 1.0:
        raise ValueError(f"{where}: {name} must be [low, high] with 0 <= low <= high <= 1, got {list(value)}")
    return pair  # type: ignore[return-value]
