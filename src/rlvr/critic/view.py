"""The critic's view of a problem: the policy's prompt, or a privileged one (PVF, BPCO+Ans/+Sol).

A baseline may depend on anything except the scored action, so the critic may read the reference
answer or worked solution while the policy never does (docs/methods.md §2.8). The privileged prompt is
built here, from ``Problem`` fields, and only ever fed to the value model: the policy's
``Rollouts.prompt_ids`` come from the sampler, which never sees this template.
"""

from __future__ import annotations

import string
from typing import Any

from torch import Tensor

from rlvr.types import BatchError, Problem, Rollouts

FIELDS = ("prompt", "answer", "solution")
POLICY_VIEW = "{prompt}"


def template_fields(template: str) -> list[str]:
    """The ``{field}`` names a template uses; unknown names are errors."""
    names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    bad = sorted(set(names) - set(FIELDS))
    if bad:
        raise ValueError(f"critic template uses unknown field(s) {bad}; valid: {list(FIELDS)}")
    return names


def privileged_text(problem: Problem, template: str) -> str:
    """The critic's prompt text for one problem (``template`` over prompt, answer, solution)."""
    values = {"prompt": problem.prompt, "answer": problem.answer, "solution": problem.solution}
    for name in template_fields(template):
        if values[name] is None:
            raise BatchError(f"critic template needs '{name}', but problem {problem.uid or problem.prompt!r} "
                             f"has none (label-free data cannot feed a privileged critic)")
    return template.format(**values)


def critic_prompts(batch: Rollouts, tokenizer: Any, template: str) -> tuple[Tensor, Tensor]:
    """(N, P') left-padded critic prompt ids and their bool mask. The policy view reuses the batch's
    own prompt ids (exactly what the policy saw); a privileged template is formatted and rendered
    like the policy's prompt (in place of its prompt text: its conversation's last user turn)."""
    if template == POLICY_VIEW:
        return batch.prompt_ids, batch.prompt_mask
    from rlvr.models import render_prompt
    from rlvr.rollout.hf import encode_prompts
    texts = [render_prompt(tokenizer, p, privileged_text(p, template)) for p in batch.problems]
    ids, mask = encode_prompts(tokenizer, texts)
    return ids.to(batch.prompt_ids.device), mask.to(batch.prompt_ids.device)
