"""Lock-step forwards (rlvr.rollout.lockstep): under sharding every rank runs the same forwards, so a
rank that has finished decoding keeps stepping until every rank is done, and a scoring pass with fewer
micro-batches here runs extra ones; the tokens, log-probs and scores are those of the plain loop. A
backend that gathers a generate call's parameters once lifts lock-step inside it: the loop decodes as
one process does, with no per-token poll of the other ranks."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import generate
from rlvr.rollout.lockstep import active, any_running, forward_count, lockstep

PROMPTS = ["347+285=", "9*3=", "12+7=", "1"]


class OtherRankRunsLonger:
    """A stand-in process group: another rank samples ``tokens`` tokens (it is still running at the
    polls after its first ``tokens - 1``) and needs ``forwards`` scoring forwards."""

    def __init__(self, tokens: int, forwards: int = 0) -> None:
        self.tokens, self.forwards, self.polls = tokens, forwards, 0

    def any_rank(self, flag: bool) -> bool:
        self.polls += 1
        return flag or self.polls < self.tokens

    def max_over_ranks(self, n: int) -> int:
        return max(n, self.forwards)

    @contextmanager
    def gathered(self, model):  # a backend that cannot hold the parameters whole (DeepSpeed ZeRO-3 here)
        yield False


class GathersOnce(OtherRankRunsLonger):
    """A backend that holds a generate call's parameters whole (FSDP2): forwards inside are local."""

    def __init__(self, tokens: int) -> None:
        super().__init__(tokens)
        self.gathers = 0

    @contextmanager
    def gathered(self, model):
        self.gathers += 1
        assert active()  # entered under lock-step; lifted for the block it guards
        yield True


@pytest.fixture(scope="module")
def small():
    """A tiny model whose eos row is scaled up, so every row ends before 24 tokens (lengths 8, 11, 12, 3)."""
    tok = build_char_tokenizer("0123456789+*=#;")
    model = build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=1)
    with torch.no_grad():
        model.get_output_embeddings().weight[tok.eos_token_id] *= 3
    return model, tok


def _counted(model: torch.nn.Module) -> list[int]:
    calls = [0]
    model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_helpers_are_the_identity_without_lockstep():
    assert not active() and any_running(False) is False and any_running(True) is True and forward_count(3) == 3
    with lockstep(OtherRankRunsLonger(tokens=5, forwards=7)):
        assert active() and any_running(False) is True and forward_count(3) == 7
    assert not active()


def test_a_finished_rank_keeps_stepping_with_the_same_output(small):
    model, tok = small
    calls = _counted(model)
    # the model's own forward, whose calls the hook counts (lock-step uses it anyway; the lean one does not call it)
    kw = dict(max_new_tokens=24, temperature=0.8, top_k=8, seed=5, engine_params={"lean": False})
    plain = generate(model, tok, PROMPTS, **kw)
    alone = calls[0]
    calls[0] = 0
    with lockstep(OtherRankRunsLonger(tokens=24)):  # the other rank decodes all 24 tokens
        synced = generate(model, tok, PROMPTS, **kw)
    assert alone == 12  # the longest row here ends at 12 tokens: the plain loop stops there
    assert calls[0] == 24  # the prompt forward + one per further token of the longest rank
    assert synced.completion_ids.tolist() == plain.completion_ids.tolist()
    assert torch.equal(synced.logprobs, plain.logprobs)


def test_a_gathered_call_decodes_as_one_process_without_polling(small):
    model, tok = small
    calls = _counted(model)
    kw = dict(max_new_tokens=24, temperature=0.8, top_k=8, seed=5, micro_batch_size=2, engine_params={"lean": False})
    plain = generate(model, tok, PROMPTS, **kw)  # two engine calls of 2 rows
    alone, calls[0] = calls[0], 0
    group = GathersOnce(tokens=24)  # the other rank would decode all 24 tokens
    with lockstep(group):
        gathered = generate(model, tok, PROMPTS, **kw)
        assert active()  # lock-step is back after the call
    assert group.gathers == 1 and group.polls == 0  # one gather for both engine calls, no per-token all-reduce
    assert calls[0] == alone < 2 * 24  # each engine call stops when its own rows are done
    assert gathered.completion_ids.tolist() == plain.completion_ids.tolist()
    assert torch.equal(gathered.logprobs, plain.logprobs)


def _fixed_update(tmp_path, group) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Scores and one update (micro-batches of 8 rows: 2 passes) of the fixed batch; and the forwards run."""
    from rlvr.train.trainer import Trainer
    from rlvr.types import AdvantageInputs
    from tests.helpers.batches import fixed_global_batch
    from tests.helpers.tiny import tiny_config
    trainer = Trainer(tiny_config(tmp_path, ["optim.micro_batch_size=8", "rollout.micro_batch_size=8"]))
    calls = _counted(trainer.policy)
    batch = fixed_global_batch(trainer.policy.config.vocab_size)
    batch.advantages = trainer.parts.advantage(AdvantageInputs(
        rewards=batch.rewards, mask=batch.completion_mask, group_ids=batch.group_ids)).advantages
    with lockstep(group):
        scores = trainer.scorer(batch)[0]
        trainer.update(batch)
    weights = torch.cat([p.detach().flatten() for p in trainer.policy.parameters()])
    return scores, weights, calls[0]


def test_extra_scoring_and_update_passes_change_nothing(tmp_path):
    """Another rank with 5 micro-batches: this rank (2) runs 3 more scoring and 3 more zero-loss
    forward/backward passes; the scores and the updated weights are bit for bit those without."""
    scores, weights, forwards = _fixed_update(tmp_path / "plain", None)
    padded_scores, padded_weights, padded_forwards = _fixed_update(tmp_path / "padded", OtherRankRunsLonger(0, 5))
    assert forwards == 2 + 2 and padded_forwards == 5 + 5
    assert torch.equal(scores, padded_scores) and torch.equal(weights, padded_weights)
