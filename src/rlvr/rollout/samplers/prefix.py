"""Weak-model prefixes: part of each group continues a partial solution written by a weaker model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlvr.registry import param, register
from rlvr.rollout.hf import generate_ids
from rlvr.rollout.samplers.base import (SampleContext, Sampler, check_range, cut_at_boundary, engine_kwargs,
                                        extend_contexts, join_completions, mixed_groups, row_group_ids,
                                        sample_plain, trained_mask, uniform_fractions)
from rlvr.rollout.warm_start import warm_started
from rlvr.types import Origin, Problem, Rollouts


WARM_START = "warm_start:"


def weak_fraction(spec: str) -> float:
    """F of a ``'warm_start:F'`` weak-model spec, checked to lie in [0, 1)."""
    try:
        f = float(spec[len(WARM_START):])
    except ValueError:
        f = -1.0
    if not 0.0 <= f < 1.0:
        raise ValueError(f"prefix: weak_model '{spec}' needs a fraction 0 <= F < 1 of the policy's warm start")
    return f


@dataclass(frozen=True)
class PrefixConfig:
    weak_model: str | None = param(None, "who writes the prefixes (required, docs/methods.md §2.4): a model folder; "
                                         "'warm_start:F' (the run's model after the first F·warm_start.steps "
                                         "supervised steps of the policy's own warm start, 0 <= F < 1, built once "
                                         "and written to <run>/weak_model); or 'reference' (the frozen starting "
                                         "policy itself, not weaker at step 0)")
    prefix_fraction: float = param(0.5, "fraction rho of each group that continues a weak-model prefix "
                                        "(round(rho*G) rows); 0 = the plain sampler exactly")
    prefix_len_range: tuple = param((0.1, 0.5), "lambda ~ U[low, high]: the prefix keeps floor(lambda*|y_weak|) "
                                                "tokens before the cut (RECONSTRUCTION)")
    cut_at_step_boundary: bool = param(True, "move the cut back to the last step boundary (an empty prefix when "
                                             "there is none)")
    step_separators: tuple = param((";", "\n"), "a token whose text ends with one of these ends a step")
    weak_temperature: float = param(1.0, "sampling temperature of the weak model")

    def __post_init__(self) -> None:
        if not 0.0 <= self.prefix_fraction <= 1.0:
            raise ValueError(f"prefix: prefix_fraction must be in [0, 1], got {self.prefix_fraction}")
        object.__setattr__(self, "prefix_len_range", check_range("prefix_len_range", self.prefix_len_range, "prefix"))
        object.__setattr__(self, "step_separators", tuple(self.step_separators))
        if not self.weak_model:
            raise ValueError("prefix: weak_model is required (docs/methods.md §2.4): a model folder, 'warm_start:F' "
                             "(a shorter warm start of the run's model) or 'reference'")
        if self.weak_model.startswith(WARM_START):
            weak_fraction(self.weak_model)  # fails on a bad fraction
        if self.weak_temperature <= 0:
            raise ValueError(f"prefix: weak_temperature must be > 0, got {self.weak_temperature}")


@register("sampler", "prefix")
class WeakPrefixSampler(Sampler):
    """Outer prefixes from a weaker model: the policy continues partial solutions it did not write.

    Paper: "Outer prefixes from a weaker model" (seed abstract; no title or arXiv id available).
    The procedure below is a RECONSTRUCTION (docs/methods.md §2.4); each reconstructed choice is an option.

    For ``m = round(rho·G)`` rows of each group: ``y_w ~ pi_weak(·|x)``, ``lambda ~ U[low, high]``,
    ``u = y_w[:c]`` with ``c <= floor(lambda·|y_w|)`` at a step boundary; ``z ~ pi_theta(·|x, u)``; the row
    is ``o = u ⊕ z``, rewarded by the verifier on ``o``. Prefix tokens have origin PREFIX and are
    masked from the loss; z is on-policy (the trainer's forward on ``[x][u ⊕ z]`` conditions on u, as
    generation did). Advantages are computed over the mixed group (prefixed and plain rows).

    Differs from the plain sampler:
      * part of each group starts from another model's partial solution (off-policy context);
      * prefix tokens are recorded (origin PREFIX) and receive no gradient;
      * with ``prefix_fraction = 0`` it is the plain sampler, token for token.
    Left out: per-sub-group advantages (the abstract does not say; only the mixed group is offered).

    Shapes: B problems → N = B·G rows; completion = prefix ⊕ continuation (N, T'), T' ≤ |u| + T.
    """

    Config = PrefixConfig
    paper = "Outer prefixes from a weaker model (seed abstract; arXiv id unknown)"

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self._weak: torch.nn.Module | None = None

    @property
    def needs_reference(self) -> bool:  # type: ignore[override]
        return self.config.weak_model == "reference"

    @property
    def testbed_only(self) -> str:  # type: ignore[override]
        spec = self.config.weak_model
        if not spec.startswith(WARM_START):
            return ""
        return (f"weak_model '{spec}' is the testbed model after {weak_fraction(spec):g} of its supervised warm "
                f"start, which a pretrained model does not have; set rollout.sampler.weak_model to 'reference' "
                f"(the frozen starting policy) or a model folder")

    def prepare(self, cfg: Any, tokenizer: Any, run_dir: Any, is_main: bool = True) -> None:
        """For ``weak_model: 'warm_start:F'``: the weak model is the run's model after the first
        round(F·warm_start.steps) steps of the same supervised warm start (same initialisation, data
        stream and schedule), i.e. an earlier point of the policy's own warm start. Built once (the
        global RNG untouched) and written to ``<run_dir>/weak_model``; a resumed run loads it."""
        spec = self.config.weak_model
        if not spec.startswith(WARM_START):
            return
        if cfg.model.path:
            raise ValueError(f"prefix: weak_model '{spec}' needs the testbed's warm-started model; with "
                             "model.path set, point weak_model at a model folder")
        from pathlib import Path

        folder = Path(run_dir) / "weak_model"
        if (folder / "config.json").exists():
            self._weak = _load_weak(str(folder), tokenizer)
            return
        steps = round(weak_fraction(spec) * cfg.warm_start.steps)
        with torch.random.fork_rng(devices=[]):
            model = warm_started(cfg, steps)  # the trainer's warm start, handed down
        if is_main:
            model.save_pretrained(folder)
        self._weak = _frozen(model)

    def sample(self, policy: torch.nn.Module, problems: list[Problem], group_size: int,
               ctx: SampleContext) -> Rollouts:
        m = round(self.config.prefix_fraction * group_size)
        return mixed_groups(policy, problems, group_size - m, m, lambda rows: self._prefixed(policy, rows, m, ctx), ctx)

    def _prefixed(self, policy: torch.nn.Module, rows: list[Problem], m: int, ctx: SampleContext) -> Rollouts:
        tok, r = ctx.tokenizer, ctx.rollout
        weak_gen = self._weak_generation(rows, ctx, next(policy.parameters()).device)
        prefixes = self._cut(weak_gen, ctx)
        ids, mask = extend_contexts(weak_gen.prompt_ids.cpu(), weak_gen.prompt_mask.cpu(), prefixes,
                                    tok.pad_token_id)
        gen = generate_ids(policy, tok, ids, mask, max_new_tokens=r.max_new_tokens, temperature=r.temperature,
                           top_p=r.top_p, top_k=r.top_k, do_sample=True, seed=ctx.seed + 7_919, **engine_kwargs(r))
        ctx.spent.add(gen)
        comp, real, origin, logp = join_completions(prefixes, Origin.PREFIX, gen, tok.pad_token_id)
        out = Rollouts(problems=rows, prompt_ids=weak_gen.prompt_ids.cpu(), prompt_mask=weak_gen.prompt_mask.cpu(),
                       completion_ids=comp, completion_mask=trained_mask(real, origin),
                       completion_attention=real, group_ids=row_group_ids(m, len(rows) // m, ctx.group_offset),
                       rollout_logprobs=logp, token_origin=origin,
                       behaviour_logprobs=torch.zeros_like(logp),
                       texts=tok.batch_decode(comp.masked_fill(~real, tok.pad_token_id), skip_special_tokens=True))
        lengths = torch.tensor([len(p) for p in prefixes], dtype=torch.float32)
        out.meta["sampler_metrics"] = {"rollout/prefix_tokens_mean": lengths.mean().item(),
                                       "rollout/prefix_empty_frac": (lengths == 0).float().mean().item()}
        return out

    def _weak_generation(self, rows: list[Problem], ctx: SampleContext, device: torch.device) -> Any:
        from dataclasses import replace
        weak_ctx = replace(ctx, rollout=_with_temperature(ctx.rollout, self.config.weak_temperature))
        return sample_plain(self._weak_model(ctx).to(device), rows, weak_ctx, ctx.seed + 104_729)

    def _cut(self, weak_gen: Any, ctx: SampleContext) -> list[list[int]]:
        """The prefix ``u_i`` of each weak completion: eos excluded, cut at a step boundary."""
        cfg = self.config
        eos = set(_eos_ids(ctx.tokenizer))
        lams = uniform_fractions(weak_gen.completion_ids.shape[0], *cfg.prefix_len_range, seed=ctx.seed + 31)
        out = []
        for i, lam in enumerate(lams):
            tokens = weak_gen.completion_ids[i][weak_gen.completion_mask[i]].tolist()
            tokens = [t for t in tokens if t not in eos]
            limit = int(lam * len(tokens))
            c = cut_at_boundary(tokens, limit, ctx.tokenizer, cfg.step_separators) if cfg.cut_at_step_boundary else limit
            out.append(tokens[:c])
        return out

    def _weak_model(self, ctx: SampleContext) -> torch.nn.Module:
        if self.config.weak_model == "reference":
            if ctx.reference is None:
                raise ValueError("prefix: weak_model 'reference' needs the trainer's frozen reference model")
            return ctx.reference
        if self._weak is None:
            self._weak = _load_weak(self.config.weak_model, ctx.tokenizer)
        return self._weak


def _with_temperature(rollout: Any, temperature: float) -> Any:
    """The sampling settings with another temperature (any object with the four fields)."""
    from types import SimpleNamespace
    return SimpleNamespace(max_new_tokens=rollout.max_new_tokens, temperature=temperature,
                           top_p=rollout.top_p, top_k=rollout.top_k)


def _eos_ids(tokenizer: Any) -> list[int]:
    return [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]


def _frozen(model: torch.nn.Module) -> torch.nn.Module:
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _load_weak(path: str, tokenizer: Any) -> torch.nn.Module:
    """A frozen weak model from a folder; its tokenizer must be the policy's (prefix ids are reused)."""
    from pathlib import Path

    from rlvr.models import load_model, load_tokenizer
    model = _frozen(load_model(path))
    if any(Path(path).glob("tokenizer*.json")):
        if load_tokenizer(path).get_vocab() != tokenizer.get_vocab():
            raise ValueError(f"prefix: the weak model at {path} uses a different tokenizer than the policy; "
                             "prefix token ids would not mean the same text")
    return model
