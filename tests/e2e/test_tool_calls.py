"""The tool-call preset trains: configs/examples/tool_calls_grpo.yaml builds, the warm start runs on
episodes with a masked tool reply, and GRPO steps run on rows whose tool-output tokens are masked
out of the loss. A scripted generator forces the tool call (no sampled tokens are pinned)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

import rlvr.rollout.samplers.multi_turn as multi_turn
from rlvr.envs.calculator import calc
from rlvr.rollout.engines.base import Generation
from rlvr.train.config import load_config
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from rlvr.train.warm_start import warm_start_model
from rlvr.types import Origin
from tests.helpers.tiny_models import logit_grads

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "examples" / "tool_calls_grpo.yaml"


def forced_tool_calls(tok):
    """A stand-in for generate_ids: a row that has no tool reply yet calls ``<calc>expr</calc>``; after
    the reply, even rows copy it (``#value``) and odd rows answer ``#0`` (so groups have mixed rewards)."""

    def generate(model, tokenizer, ids, mask, **kw):
        texts = []
        for k, row in enumerate(ids.tolist()):
            context = tok.decode(row, skip_special_tokens=True)
            reply = re.search(r"<out>(.*?)</out>", context)
            if reply is None:
                expr = re.search(r"(\d+[+*]\d+)=", context).group(1)
                texts.append(f"<calc>{expr}</calc>")
            else:
                texts.append(f"#{reply.group(1)}" if k % 2 == 0 else "#0")
        rows = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
        width = max(len(r) for r in rows)
        comp = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
        real = torch.tensor([[j < len(r) for j in range(width)] for r in rows])
        with torch.no_grad():  # the policy's own log-probs of the forced tokens, so PPO ratios start at 1
            full = torch.cat([ids, comp], 1)
            att = torch.cat([mask.bool(), real], 1).long()
            logits = model(input_ids=full, attention_mask=att).logits[:, ids.shape[1] - 1:-1].float()
            lp = torch.log_softmax(logits, -1).gather(-1, comp[..., None])[..., 0]
        return Generation(prompt_ids=ids, prompt_mask=mask, completion_ids=comp, completion_mask=real,
                          logprobs=lp * real, texts=texts)

    return generate


def test_tool_call_preset_warm_starts_and_trains_with_tool_output_masked(tmp_path, monkeypatch):
    cfg = load_config(str(CONFIG), ["model.hidden=32", "model.layers=1", "model.heads=2", "warm_start.steps=2",
                                    "warm_start.batch_size=4", "rollout.prompts_per_step=2", "rollout.group_size=4",
                                    "run.steps=2", "run.threads=1", f"run.out_dir={tmp_path}"])
    model, tok, info = warm_start_model(cfg)  # demonstrations with a masked tool reply
    assert info["warm_start_steps"] == 2 and math.isfinite(info["warm_start_loss"])
    monkeypatch.setattr(multi_turn, "generate_ids", forced_tool_calls(tok))
    batches = []
    real_rollouts = multi_turn.MultiTurnSampler._rollouts

    def keep(self, eps, baselines, ctx):
        batches.append(real_rollouts(self, eps, baselines, ctx))
        return batches[-1]

    monkeypatch.setattr(multi_turn.MultiTurnSampler, "_rollouts", keep)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(cfg, model=model, tokenizer=tok)
    trainer.train()
    assert len(batches) == 2
    for batch in batches:
        env = batch.token_origin == int(Origin.ENV)
        assert not bool((batch.completion_mask & env).any())  # tool output never in the loss
        for i, p in enumerate(batch.problems):
            reply = tok.decode(batch.completion_ids[i][env[i]].tolist(), skip_special_tokens=True)
            assert reply == f"\n<out>{calc(p.prompt[:-1])}</out>\n"  # the calc tool's own answer, masked
            episode = p.meta["episode"]
            assert episode["info"]["calls"] == 1 and episode["reward"] == float(i % 2 == 0)
    rows = read_metrics(str(tmp_path))
    assert [r["reward/mean"] for r in rows if "reward/mean" in r] == [0.5, 0.5]
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.parameters()))
    grads, _ = logit_grads(trainer.policy, batches[-1], "ppo_clip", {})
    env = batches[-1].token_origin == int(Origin.ENV)
    assert grads[env].abs().max().item() == 0.0 and grads[batches[-1].completion_mask].abs().max().item() > 0.0
