"""Privileged hints: part of a group is generated with guidance the trained prompt does not contain."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.models import render_prompt
from rlvr.registry import param, register
from rlvr.rollout.hf import encode_prompts, generate_ids
from rlvr.rollout.samplers.base import (SampleContext, Sampler, assemble, check_range, engine_kwargs,
                                        extend_contexts, generation_rollouts, hinted_rollouts, row_group_ids,
                                        sample_plain, text_cut_at_boundary, uniform_fractions)
from rlvr.types import Problem, Rollouts

GUIDE_WHEN = ("all_zero_groups", "fixed_ratio")
PLACEMENTS = ("response", "prompt")
HINT_IN_TARGET = ("drop", "masked")


@dataclass(frozen=True)
class HintConfig:
    guide_when: str = param("all_zero_groups", "which groups get guided rows: 'all_zero_groups' (a first plain "
                                               "group scored all zero, as in Guide) or 'fixed_ratio' (every group)")
    guide_ratio: float | None = param(None, "fraction of a guided group's G rows generated with the hint "
                                            "(round(ratio*G); required, docs/methods.md §2.19); 0 = the plain sampler exactly")
    hint_len_range: tuple = param((0.3, 0.7), "the hint is the first lambda ~ U[low, high] of the problem's "
                                              "solution text, cut back to a step boundary (RECONSTRUCTION)")
    step_separators: tuple = param((";", "\n"), "strings that end a solution step")
    placement: str = param("response", "'response': the hint continues the formatted prompt (a solution "
                                       "prefix); 'prompt': it is written into the prompt text via `template`")
    template: str = param("{hint}", "text of the guidance; with placement 'prompt' it must contain {prompt}")
    hint_in_target: str = param("drop", "'drop': the trainer sees [x][y] without the hint (off-context, origin "
                                        "GUIDED, importance-corrected); 'masked': [x][hint ⊕ y] with the hint "
                                        "tokens masked (origin HINT; y is then on-policy)")

    def __post_init__(self) -> None:
        for name, value, valid in (("guide_when", self.guide_when, GUIDE_WHEN),
                                   ("placement", self.placement, PLACEMENTS),
                                   ("hint_in_target", self.hint_in_target, HINT_IN_TARGET)):
            if value not in valid:
                raise ValueError(f"hint: unknown {name} '{value}'; valid: {', '.join(valid)}")
        if self.guide_ratio is None:
            raise ValueError("hint: guide_ratio is required (the share of a guided group's rows generated with "
                             "the hint; 0 = the plain sampler)")
        if not 0.0 <= self.guide_ratio <= 1.0:
            raise ValueError(f"hint: guide_ratio must be in [0, 1], got {self.guide_ratio}")
        object.__setattr__(self, "hint_len_range", check_range("hint_len_range", self.hint_len_range, "hint"))
        object.__setattr__(self, "step_separators", tuple(self.step_separators))
        if self.placement == "prompt" and "{prompt}" not in self.template:
            raise ValueError("hint: with placement 'prompt' the template must contain {prompt}")
        if self.placement == "prompt" and self.hint_in_target == "masked":
            raise ValueError("hint: hint_in_target 'masked' needs placement 'response' (a prompt-side hint "
                             "is not part of the completion)")
        if "{hint}" not in self.template:
            raise ValueError("hint: the template must contain {hint}")


@register("sampler", "hint")
class HintSampler(Sampler):
    """Off-context rollouts for OC-GRPO: guided generation, training toward the unguided prompt.

    Paper: "OC-GRPO: Off-Context GRPO" (seed abstract; arXiv id unknown); closest published form:
    Guide-GRPO, "Learning to Reason under Off-Policy Guidance"-style guidance (arXiv:2506.13923).
    Hint selection, cut and placement are RECONSTRUCTION choices (docs/methods.md §2.19), each an option.

    For a guided row of problem x with hint h (a prefix of ``problem.solution``, or
    ``problem.meta["hint"]`` when a label-free method supplies one): ``y ~ pi_old(·|x ⊕ h)``; the
    sampler records ``behaviour_logprobs = log pi_old(y_t | x, h, y_<t)`` by a forward in the guided
    context. With ``hint_in_target: drop`` the trainer's ids are ``[x][y]`` (h excluded), y has origin
    GUIDED, and a loss such as ``oc_grpo`` uses ``rho = exp(log pi_theta(y_t|x, y_<t) − behaviour)``.
    The reward is the verifier on the response as produced (``h ⊕ y`` for a response-side hint).

    Differs from the plain sampler:
      * guided groups (all-zero groups, or every group) get round(ratio·G) rows generated with a hint;
      * those rows carry their guided-context log-probs for importance correction;
      * ``guide_ratio = 0`` (or no hint available) is the plain sampler, token for token.

    Shapes: B problems → N = B·G rows; completion (N, T') ; behaviour_logprobs (N, T').
    """

    Config = HintConfig
    paper = "OC-GRPO: Off-Context GRPO (seed abstract; arXiv id unknown)"

    @property
    def produces_off_policy(self) -> bool:  # type: ignore[override]
        return self.config.hint_in_target == "drop" and self.config.guide_ratio > 0

    @property
    def needs_verifier(self) -> bool:  # type: ignore[override]
        return self.config.guide_when == "all_zero_groups"

    def sample(self, policy: torch.nn.Module, problems: list[Problem], group_size: int,
               ctx: SampleContext) -> Rollouts:
        m = round(self.config.guide_ratio * group_size)
        b = len(problems)
        rows = [p for p in problems for _ in range(group_size)]
        plain = generation_rollouts(rows, sample_plain(policy, rows, ctx, ctx.seed),
                                    row_group_ids(group_size, b, ctx.group_offset))
        guided = [i for i in self._guided_problems(problems, plain, group_size, ctx) if self.hint_of(problems[i], 1.0)]
        metrics = {"rollout/guided_groups_frac": len(guided) / max(b, 1) if m else 0.0}
        if not m or not guided:
            plain.meta["sampler_metrics"] = metrics
            return plain
        g_rows = [problems[i] for i in guided for _ in range(m)]
        g_ids = torch.tensor([ctx.group_offset + i for i in guided]).repeat_interleave(m)
        part = self._guided_rows(policy, g_rows, g_ids, ctx)
        order, slot = [], {i: k for k, i in enumerate(guided)}
        for i in range(b):  # each guided group: its first G − m plain rows, then m guided rows
            keep = group_size - m if i in slot else group_size
            order += [(0, i * group_size + j) for j in range(keep)]
            if i in slot:
                order += [(1, slot[i] * m + j) for j in range(m)]
        out = assemble([plain, part], order, ctx.tokenizer.pad_token_id)
        metrics["rollout/guided_rows_frac"] = len(g_rows) / out.num_rows
        out.meta["sampler_metrics"] = metrics
        return out

    def hint_of(self, problem: Problem, fraction: float) -> str:
        """The guidance text for ``problem`` at length fraction ``fraction`` ('' when there is none)."""
        if problem.meta.get("hint"):
            return str(problem.meta["hint"])
        sol = problem.solution or ""
        return text_cut_at_boundary(sol, int(fraction * len(sol)), self.config.step_separators)

    def _guided_problems(self, problems: list[Problem], plain: Rollouts, group_size: int,
                         ctx: SampleContext) -> list[int]:
        if self.config.guide_when == "fixed_ratio":
            return list(range(len(problems)))
        if ctx.verify is None:
            raise ValueError("hint: guide_when 'all_zero_groups' needs the task's verifier in the sample context")
        scores = torch.tensor(ctx.verify(plain.problems, plain.texts), dtype=torch.float32).view(-1, group_size)
        return (scores <= 0).all(dim=1).nonzero().flatten().tolist()

    def _guided_rows(self, policy: torch.nn.Module, rows: list[Problem], group_ids: torch.Tensor,
                     ctx: SampleContext) -> Rollouts:
        cfg, tok, r = self.config, ctx.tokenizer, ctx.rollout
        lams = uniform_fractions(len(rows), *cfg.hint_len_range, seed=ctx.seed + 53)
        hints = [self.hint_of(p, lam) for p, lam in zip(rows, lams)]
        base_ids, base_mask = encode_prompts(tok, [render_prompt(tok, p) for p in rows])
        if cfg.placement == "prompt":
            texts = [render_prompt(tok, p, cfg.template.format(prompt=p.prompt, hint=h)) if h else render_prompt(tok, p)
                     for p, h in zip(rows, hints)]
            ctx_ids, ctx_mask = encode_prompts(tok, texts)
            hint_ids = [[] for _ in rows]
        else:
            hint_ids = [tok(cfg.template.format(hint=h), add_special_tokens=False)["input_ids"] if h else []
                        for h in hints]
            ctx_ids, ctx_mask = extend_contexts(base_ids, base_mask, hint_ids, tok.pad_token_id)
        gen = generate_ids(policy, tok, ctx_ids, ctx_mask, max_new_tokens=r.max_new_tokens, temperature=r.temperature,
                           top_p=r.top_p, top_k=r.top_k, do_sample=True, seed=ctx.seed + 7_919, **engine_kwargs(r))
        ctx.spent.add(gen)
        has_hint = torch.tensor([bool(h) for h in hints])  # (N_g,) a prompt-side hint has no hint tokens
        return hinted_rollouts(policy, tok, rows, group_ids, (base_ids, base_mask), (ctx_ids, ctx_mask), hint_ids,
                               has_hint, gen, cfg.hint_in_target, r.temperature)
