"""algorithm.mask_truncated_completions on a tiny run: rows cut by the length cap leave the loss."""

from __future__ import annotations

import copy
import math

import torch

from rlvr.train.logging import read_metrics
from rlvr.train.run import warm_start_model
from rlvr.train.trainer import Trainer

from tests.helpers.tiny import tiny_config

# A short warm start teaches "7<eos>"; with 2 new tokens and a hot sampler a row ends with eos or is cut
# (0.45-0.66 of them are cut over seeds 0-3). 8 x 8 = 64 rows: a batch with no cut row, or only cut rows,
# is below 0.66^64 ≈ 3e-12 whatever a machine's rounding samples (the 16 rows before: ~1e-3). The
# mixed-reward task (rewards 1, 0, 1, 0 in every group) gives every row an advantage, so masking the cut
# rows must change the loss whichever rows they are.
SETUP = ["task.name=toy_mixed_test", "rollout.max_new_tokens=2", "rollout.temperature=1.5",
         "rollout.prompts_per_step=8", "rollout.group_size=8", "warm_start.steps=25", "warm_start.batch_size=32",
         "warm_start.lr=0.01", "run.steps=2"]


def test_truncated_rows_leave_the_loss_and_the_run_trains(tmp_path):
    cfg = tiny_config(tmp_path / "on", [*SETUP, "algorithm.mask_truncated_completions=true"])
    model, tok, _ = warm_start_model(cfg)
    off = Trainer(tiny_config(tmp_path / "off", SETUP), model=copy.deepcopy(model), tokenizer=tok)
    on = Trainer(cfg, model=model, tokenizer=tok)
    m_on, b_on = on.train_step()
    m_off, b_off = off.train_step()
    assert torch.equal(b_on.completion_ids, b_off.completion_ids)  # same seed: the same sampled batch
    lengths = b_off.attention.sum(-1)  # (N,)
    last = b_off.completion_ids[torch.arange(b_off.num_rows), lengths - 1]
    cut = last != tok.eos_token_id  # (N,) ended by the cap, found independently
    assert 0 < cut.float().mean().item() < 1
    assert m_on["rollout/masked_truncated_frac"] == cut.float().mean().item()
    assert torch.equal(~b_on.completion_mask.any(-1), cut)  # exactly the truncated rows are masked
    assert torch.equal(b_on.completion_mask, b_off.completion_mask & ~cut.unsqueeze(1))
    assert torch.equal(b_on.attention, b_off.attention)  # the forward pass is unchanged
    assert torch.equal(b_on.rewards, b_off.rewards) and torch.equal(b_on.advantages, b_off.advantages)
    assert m_on["loss/total"] != m_off["loss/total"]
    assert "rollout/masked_truncated_frac" not in m_off  # knob off: nothing masked, no metric

    summary = on.train()  # the loop (train_step does not count steps): 2 logged steps
    assert summary["steps"] == 2 and all(math.isfinite(r["loss/total"]) for r in read_metrics(tmp_path / "on"))
    assert "rollout/masked_truncated_frac" in read_metrics(tmp_path / "on")[-1]
