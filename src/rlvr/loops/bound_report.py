"""The report of ``rlvr bound``: the Occam bound (``rlvr.analysis.bounds``) on a trained TinyLoRA
adapter's accuracy. It loads a run (``rlvr.loops.progressive``, ``rlvr.train``), so it sits above both
(``rlvr.layers``)."""

from __future__ import annotations

from rlvr.analysis.bounds import example_seed, gumbel_generate, occam_bound
from rlvr.models import render_prompt
from rlvr.loops.progressive import load_adapter_policy
from rlvr.rollout import generate
from rlvr.tasks import verify_all
from rlvr.train.build import build_task
from rlvr.train.run import heldout


def bound_report(path: str, *, problems: int = 200, delta: float = 0.05, seed: int = 0,
                 decode: str = "gumbel", max_new_tokens: int | None = None, chunk: int = 64) -> dict:
    """Bits of a TinyLoRA adapter (a run folder or its ``adapter/``) and the Occam bound on its
    accuracy over ``problems`` held-out (test split) problems, decoded with Gumbel-max noise
    (``example_seed(seed, i)`` for problem i) or greedily."""
    if decode not in ("gumbel", "greedy"):
        raise ValueError(f"bound: decode must be 'gumbel' or 'greedy', got '{decode}'")
    model, tokenizer, cfg, info = load_adapter_policy(path)
    task = build_task(cfg)
    items = heldout(task, problems, seed)
    tokens = max_new_tokens or cfg.rollout.max_new_tokens
    texts: list[str] = []
    for lo in range(0, len(items), chunk):
        part = items[lo:lo + chunk]
        prompts = [render_prompt(tokenizer, p) for p in part]
        if decode == "gumbel":
            seeds = [example_seed(seed, lo + i) for i in range(len(part))]
            texts += gumbel_generate(model, tokenizer, prompts, seeds, max_new_tokens=tokens,
                                     temperature=cfg.rollout.temperature)[1]
        else:
            texts += generate(model, tokenizer, prompts, max_new_tokens=tokens, do_sample=False).texts
    scores = verify_all(task, items, texts, cfg.rollout.verify_timeout_s)
    n = len(items)
    errors = n - sum(s.value == 1.0 for s in scores)
    bits = int(info["code_bits"])
    risk = occam_bound(errors, n, bits, delta, "kl_inverse")
    return {"adapter": str(path), "params": int(info["num_values"]), "quant_bits": int(info["bits"]),
            "bits": bits, "problems": n, "errors": errors, "decode": decode, "delta": delta,
            "empirical_accuracy": 1 - errors / n, "risk_bound": risk, "accuracy_lower_bound": 1 - risk,
            "hoeffding_risk_bound": occam_bound(errors, n, bits, delta, "hoeffding")}
