"""Tiny-model runs with a learned critic: warm-up trains only the critic, and a run killed mid-way
resumes exactly (policy, critic, optimizers, schedules, TETHER's EMA and the curriculum state)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from tests.e2e.resume import crash_then_resume, weights
from tests.helpers.tiny import tiny_config
from tests.helpers.tolerance import assert_same_update

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "methods"


def test_warmup_trains_only_the_critic(tmp_path):
    cfg = tiny_config(tmp_path, ["run.steps=2", "critic.warmup_steps=1", "rollout.batch_size=8"],
                      path=str(PRESETS / "bpco.yaml"))
    trainer = Trainer(cfg)
    policy0, critic0 = weights(trainer.policy), weights(trainer.critic.value_model)
    original = Trainer.train_step
    seen = {}

    def step_and_look(self):
        out = original(self)
        seen.setdefault(self.step, (weights(self.policy), weights(self.critic.value_model)))
        return out

    Trainer.train_step = step_and_look
    try:
        trainer.train()
    finally:
        Trainer.train_step = original
    policy1, critic1 = seen[0]  # after the warm-up step
    assert all(torch.equal(policy0[k], policy1[k]) for k in policy0)
    assert any(not torch.equal(critic0[k], critic1[k]) for k in critic0)
    policy2 = weights(trainer.policy)
    assert any(not torch.equal(policy1[k], policy2[k]) for k in policy1)  # step 2 trains the policy
    rows = read_metrics(tmp_path)
    assert [r["critic/warmup"] for r in rows] == [1.0, 0.0]
    assert "timing/loss" not in rows[0] and "timing/loss" in rows[1]  # no policy forward/backward while warm
    assert all(k in rows[1] for k in ("timing/advantage", "timing/update", "critic/explained_var", "critic/loss"))
    ckpt = latest_checkpoint(tmp_path)
    assert (ckpt / "critic.safetensors").exists() and (ckpt / "critic_optimizer.safetensors").exists()


@pytest.mark.parametrize("preset,extra", [
    ("bpco_privileged", ["critic.warmup_steps=1", "critic.epochs=2", "critic.micro_batch_size=5",
                         "critic.schedule=cosine"]),
    ("tether", ["algorithm.advantage.ema=true"]),
    ("cvpo", []),
])
def test_resume_with_a_critic_is_exact(tmp_path, monkeypatch, preset, extra):
    overrides = ["run.steps=4", "run.save_every=2", "optim.schedule=cosine", "optim.ppo_epochs=2",
                 "optim.micro_batch_size=6", "rollout.batch_size=12", *extra]
    path = str(PRESETS / f"{preset}.yaml")
    full = Trainer(tiny_config(tmp_path / "full", overrides, path=path))
    full.train()

    resumed = crash_then_resume(monkeypatch, lambda: Trainer(tiny_config(tmp_path / "crash", overrides, path=path)))
    for expected, got in ((full.policy, resumed.policy), (full.critic.value_model, resumed.critic.value_model)):
        want, have = weights(expected), weights(got)
        for key in want:
            assert torch.equal(want[key], have[key]), key

    def strip(rows):
        return [{k: v for k, v in r.items() if not k.startswith(("timing/", "time/", "memory/"))} for r in rows]

    rows = strip(read_metrics(tmp_path / "crash"))
    assert rows == strip(read_metrics(tmp_path / "full"))
    assert rows[-1]["critic/loss"] > 0


# --- data parallel: the critic's gradient is the single-process gradient -------------------------

def _critic_worker(out: str) -> None:
    """Run as ``torchrun -m tests.e2e.test_critic OUT`` (or one plain process): one critic update on
    this rank's share of a fixed global batch, then one full training step; writes OUT/rank<r>.json."""
    import json

    from rlvr.critic import mc_returns
    from rlvr.types import AdvantageInputs
    from tests.helpers.batches import fixed_global_batch

    cfg = tiny_config(Path(out) / "run", ["run.steps=1", "critic.warmup_steps=0", "critic.micro_batch_size=3",
                                          "rollout.batch_size=8"], path=str(PRESETS / "bpco.yaml"))
    trainer = Trainer(cfg)
    acc, critic = trainer.acc, trainer.critic
    batch = fixed_global_batch(trainer.policy.config.vocab_size)
    share = batch.num_rows // acc.num_processes
    local = batch.select(torch.arange(acc.process_index * share, (acc.process_index + 1) * share))
    initial = torch.cat([p.detach().flatten() for p in critic.value_model.parameters()]).tolist()
    critic.predict(local)
    returns = mc_returns(AdvantageInputs(rewards=local.rewards, mask=local.completion_mask, group_ids=local.group_ids))
    critic.update(local, returns, trainer.updater.normalisers(local.completion_mask))
    fixed = torch.cat([p.detach().flatten() for p in critic.value_model.parameters()]).tolist()
    trainer.train()
    trained = torch.cat([p.detach().flatten() for p in critic.value_model.parameters()]).tolist()
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank{acc.process_index}.json").write_text(
        json.dumps({"initial": initial, "fixed": fixed, "trained": trained, "world": acc.num_processes}))


def _launch(out: Path, nproc: int) -> list[dict]:
    import json
    import os
    import subprocess
    import sys
    root = PRESETS.parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    cmd = [sys.executable, "-m", "tests.e2e.test_critic", str(out)]
    if nproc > 1:
        cmd[1:3] = ["-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                    "--master_port", str(29700 + os.getpid() % 1000), "-m", "tests.e2e.test_critic"]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


def test_two_process_critic_update_equals_single_process(tmp_path):
    two, one = _launch(tmp_path / "two", 2), _launch(tmp_path / "one", 1)[0]
    assert two[0]["world"] == 2 and one["world"] == 1
    assert one["fixed"] != one["initial"]  # a non-trivial update, the same within float32 reordering
    assert_same_update(two[0]["fixed"], one["fixed"], one["initial"])
    assert two[0]["trained"] == two[1]["trained"]  # ranks stay identical through a training step
    assert two[0]["trained"] != two[0]["fixed"]


if __name__ == "__main__":
    import sys
    _critic_worker(sys.argv[1])
