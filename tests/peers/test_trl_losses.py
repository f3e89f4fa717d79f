"""Peer equivalence: rlvr ppo_clip + aggregation (+ KL, entropy) vs TRL 1.16 ``GRPOTrainer._compute_loss``.

TRL's loss is a method of the trainer. We call the real method on a bare instance
(``GRPOTrainer.__new__``) holding only the attributes ``_compute_loss`` reads, with a stub model
whose forward returns chosen per-token log-probs and entropies (TRL asks the model for
``log_probs`` / ``entropy`` via ``fused_lm_head=True``), so TRL runs its own clipping, KL,
normalisation and entropy code. No training run, no model, no download.

Verified mapping, TRL ``loss_type`` → rlvr (``ppo_clip`` with ``clip_ratio_c=None``,
``log_ratio_clamp=None`` — TRL has no dual clip and no ±20 clamp — and the aggregation below):
  * ``grpo``    → ``seq-mean-token-mean``. TRL's mean runs over *all* rows, rlvr's over rows with a
                  trained token; pass ``num_seqs=N`` when a row is fully masked. With gradient
                  accumulation TRL divides each micro-batch by the step count, which equals rlvr's
                  global ``num_seqs`` when micro-batches have equal row counts.
  * ``dr_grpo`` → ``seq-mean-token-sum-norm`` with ``norm=max_completion_length`` (TRL divides by
                  rows × max_completion_length; rows again counts fully masked rows).
  * ``dapo``    → ``token-mean`` with ``num_tokens`` = TRL's ``num_items_in_batch`` (the trained-token
                  count of the whole generation batch); TRL divides it by ``num_processes``, which is
                  rlvr's ``dp_size``.
  * ``bnpo``    → ``token-mean`` over the local (micro-)batch (default normalisers).
  * ``cispo`` (extra) → rlvr ``cispo`` with ``eps_low=1`` (no lower bound) and ``eps_high = ε_TRL − 1``
                  (TRL caps the weight at ε_high itself), normalised like ``dapo``.
KL: TRL adds ``beta`` × unclamped k3 per token before aggregating → rlvr ``Objective(kl_coef=beta,
kl_estimator='k3', kl_clamp=None)``. Entropy: TRL's bonus is always a token mean over the
micro-batch whatever the loss type, while rlvr aggregates it like the policy term; they coincide for
``bnpo`` (and ``dapo`` when ``num_items_in_batch`` is the local count), which is what is tested.
"""

from __future__ import annotations

import collections
import contextlib
import types

import pytest
import torch

pytest.importorskip("trl")
from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: E402

from rlvr.aggregation import Aggregation  # noqa: E402
from rlvr.losses import Objective  # noqa: E402
from rlvr.registry import build  # noqa: E402
from rlvr.types import LossInputs  # noqa: E402

pytestmark = pytest.mark.peers

N, T, P = 6, 5, 3
EPS_LOW, EPS_HIGH = 0.2, 0.28


class _StubModel(torch.nn.Module):
    """Returns the given per-token log-probs / entropies at the completion positions."""

    def __init__(self, logps: torch.Tensor, entropy: torch.Tensor) -> None:
        super().__init__()
        self.logps, self.entropy = logps, entropy

    def forward(self, input_ids, attention_mask, labels=None, fused_lm_head=None, **_):
        pad = torch.zeros(input_ids.shape[0], input_ids.shape[1] - self.logps.shape[1])
        return types.SimpleNamespace(log_probs=torch.cat([pad, self.logps], 1),
                                     entropy=torch.cat([pad, self.entropy], 1))


class _Accelerator:
    """Single process: gathers and reductions are the identity."""

    is_main_process = True
    sync_gradients = True

    def __init__(self, num_processes: int = 1) -> None:
        self.num_processes = num_processes

    def autocast(self):
        return contextlib.nullcontext()

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


def _trainer(model, loss_type, *, beta=0.0, entropy_coef=0.0, max_completion_length=T, gas=1,
             num_processes=1, eps_high=EPS_HIGH):
    trainer = GRPOTrainer.__new__(GRPOTrainer)  # no __init__: no model loading, no data
    trainer.model = model
    trainer.accelerator = _Accelerator(num_processes)
    trainer.args = types.SimpleNamespace(delta=None, use_bias_correction_kl=False, report_to=[],
                                         steps_per_generation=gas)
    trainer.state = types.SimpleNamespace(global_step=0)
    trainer.loss_type, trainer.beta = loss_type, beta
    trainer.epsilon_low, trainer.epsilon_high = EPS_LOW, eps_high
    trainer.importance_sampling_level = "token"
    trainer.max_completion_length = max_completion_length
    trainer.current_gradient_accumulation_steps = gas
    trainer.top_entropy_quantile, trainer.off_policy_mask_threshold = 1.0, None
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = False, False
    trainer.aux_loss_enabled = False
    trainer._entropy_bonus_enabled = entropy_coef > 0
    trainer.entropy_coef, trainer.use_adaptive_entropy = entropy_coef, False
    trainer._metrics = {"train": collections.defaultdict(list), "eval": collections.defaultdict(list)}
    return trainer


def _batch(seed: int, lengths=(5, 3, 1, 4, 5, 2)):
    g = torch.Generator().manual_seed(seed)
    old = torch.empty(N, T).uniform_(0.05, 0.95, generator=g).log()
    new = (old + 0.3 * torch.randn(N, T, generator=g)).clamp(max=-1e-3)  # some ratios leave [0.8, 1.28]
    ref = old + 0.2 * torch.randn(N, T, generator=g)
    entropy = torch.rand(N, T, generator=g) * 2
    adv = torch.randn(N, generator=g)  # TRL: one advantage per sequence
    mask = torch.arange(T) < torch.tensor(lengths).unsqueeze(-1)
    return dict(old=old, new=new, ref=ref, entropy=entropy, adv=adv, mask=mask)


def _run_trl(batch, rows, loss_type, num_items=None, **trainer_kwargs):
    logp = batch["new"][rows].clone().requires_grad_(True)
    ent = batch["entropy"][rows].clone().requires_grad_(True)
    model = _StubModel(logp, ent)
    n = logp.shape[0]
    inputs = {
        "prompt_ids": torch.ones(n, P, dtype=torch.long), "prompt_mask": torch.ones(n, P, dtype=torch.long),
        "completion_ids": torch.ones(n, T, dtype=torch.long), "completion_mask": batch["mask"][rows].long(),
        "advantages": batch["adv"][rows], "old_per_token_logps": batch["old"][rows],
        "ref_per_token_logps": batch["ref"][rows],
    }
    if num_items is not None:
        inputs["num_items_in_batch"] = torch.tensor(float(num_items))
    loss = _trainer(model, loss_type, **trainer_kwargs)._compute_loss(model, inputs)
    return (loss.detach(), *torch.autograd.grad(loss, (logp, ent), allow_unused=True))


def _run_rlvr(batch, rows, objective, **normalisers):
    logp = batch["new"][rows].clone().requires_grad_(True)
    ent = batch["entropy"][rows].clone().requires_grad_(True)
    mask = batch["mask"][rows]
    inputs = LossInputs(logprobs=logp, old_logprobs=batch["old"][rows], mask=mask,
                        advantages=batch["adv"][rows].unsqueeze(-1).expand(-1, T),
                        ref_logprobs=batch["ref"][rows], entropy=ent)
    loss, _ = objective(inputs, **normalisers)
    return (loss.detach(), *torch.autograd.grad(loss, (logp, ent), allow_unused=True))


def _objective(mode, *, norm=None, beta=0.0, entropy_coef=0.0, loss="ppo_clip", **loss_params):
    params = {"clip_ratio_c": None, "log_ratio_clamp": None, "eps_low": EPS_LOW, "eps_high": EPS_HIGH}
    params = loss_params or params
    return Objective(build("loss", loss, **params), aggregation=Aggregation(mode=mode, norm=norm),
                     kl_coef=beta, kl_estimator="k3", kl_clamp=None, entropy_coef=entropy_coef)


def _assert_same(ours, theirs):
    assert torch.allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-7), (ours[0], theirs[0])
    assert torch.allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-7)
    # entropy gradients (None where the entropy does not enter the loss)
    a = ours[2] if ours[2] is not None else torch.zeros_like(ours[1])
    b = theirs[2] if theirs[2] is not None else torch.zeros_like(theirs[1])
    assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)


ALL = torch.arange(N)


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_grpo_is_seq_mean_token_mean(beta):
    batch = _batch(0)
    theirs = _run_trl(batch, ALL, "grpo", beta=beta)
    ours = _run_rlvr(batch, ALL, _objective("seq-mean-token-mean", beta=beta))
    _assert_same(ours, theirs)


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_dr_grpo_is_seq_mean_token_sum_norm_with_max_completion_length(beta):
    batch = _batch(1)
    theirs = _run_trl(batch, ALL, "dr_grpo", beta=beta, max_completion_length=8)  # ≠ padded T = 5
    ours = _run_rlvr(batch, ALL, _objective("seq-mean-token-sum-norm", norm=8.0, beta=beta))
    _assert_same(ours, theirs)
    padded_norm = _run_rlvr(batch, ALL, _objective("seq-mean-token-sum-norm", beta=beta))  # C = T = 5
    assert not torch.allclose(padded_norm[0], theirs[0])


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_dapo_is_token_mean_over_the_global_token_count(beta):
    batch = _batch(2)
    rows = torch.arange(3)  # one micro-batch of a 6-row generation batch
    global_tokens = int(batch["mask"].sum())
    theirs = _run_trl(batch, rows, "dapo", num_items=global_tokens, beta=beta)
    ours = _run_rlvr(batch, rows, _objective("token-mean", beta=beta), num_tokens=global_tokens)
    _assert_same(ours, theirs)
    local = _run_rlvr(batch, rows, _objective("token-mean", beta=beta))
    assert not torch.allclose(local[0], theirs[0])  # the global count matters


def test_dapo_num_processes_is_dp_size():
    batch = _batch(3)
    rows = torch.arange(3, 6)
    global_tokens = int(batch["mask"].sum())
    theirs = _run_trl(batch, rows, "dapo", num_items=global_tokens, num_processes=2)
    ours = _run_rlvr(batch, rows, _objective("token-mean"), num_tokens=global_tokens, dp_size=2)
    _assert_same(ours, theirs)


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_bnpo_is_local_token_mean(beta):
    batch = _batch(4)
    theirs = _run_trl(batch, ALL, "bnpo", beta=beta)
    ours = _run_rlvr(batch, ALL, _objective("token-mean", beta=beta))
    _assert_same(ours, theirs)


def test_entropy_bonus_matches_for_token_mean():
    batch = _batch(5)
    theirs = _run_trl(batch, ALL, "bnpo", beta=0.04, entropy_coef=0.01)
    ours = _run_rlvr(batch, ALL, _objective("token-mean", beta=0.04, entropy_coef=0.01))
    assert theirs[2] is not None and theirs[2].abs().sum() > 0
    _assert_same(ours, theirs)


def test_fully_masked_row_counts_in_trl_row_means():
    batch = _batch(6, lengths=(5, 3, 0, 4, 5, 2))
    theirs = _run_trl(batch, ALL, "grpo")
    ours = _run_rlvr(batch, ALL, _objective("seq-mean-token-mean"), num_seqs=N)
    _assert_same(ours, theirs)
    default = _run_rlvr(batch, ALL, _objective("seq-mean-token-mean"))  # S = 5 rows with tokens
    assert torch.allclose(default[0] * 5 / 6, theirs[0], rtol=1e-5)


def test_grpo_gradient_accumulation_equals_global_num_seqs():
    batch = _batch(7)
    total_theirs = torch.zeros(())
    total_ours = torch.zeros(())
    for rows in ALL.chunk(2):  # two equal micro-batches, TRL divides each by gas = 2
        total_theirs = total_theirs + _run_trl(batch, rows, "grpo", gas=2)[0]
        total_ours = total_ours + _run_rlvr(batch, rows, _objective("seq-mean-token-mean"), num_seqs=N)[0]
    full = _run_rlvr(batch, ALL, _objective("seq-mean-token-mean"))[0]
    assert torch.allclose(total_ours, total_theirs, rtol=1e-5)
    assert torch.allclose(total_ours, full, rtol=1e-5)


def test_cispo_maps_to_rlvr_cispo():
    batch = _batch(8)
    batch["new"] = (batch["old"] + 0.5 * torch.randn(N, T, generator=torch.Generator().manual_seed(9))).clamp(max=-1e-3)
    global_tokens = int(batch["mask"].sum())
    theirs = _run_trl(batch, ALL, "cispo", num_items=global_tokens, eps_high=1.5)
    ours = _run_rlvr(batch, ALL, _objective("token-mean", loss="cispo", eps_low=1.0, eps_high=0.5),
                     num_tokens=global_tokens)
    _assert_same(ours, theirs)
    ratio = (batch["new"] - batch["old"]).exp()
    assert ((ratio > 1.5) & batch["mask"]).any()  # the cap binds somewhere
