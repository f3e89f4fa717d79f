"""Supervised warm start: completion-only labels, loss definition, and the loss falls."""

import pytest
import torch
import torch.nn.functional as F

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.registry import build
from rlvr.sft import IGNORE, completion_loss, demonstration_batch, lr_factor, warm_start
from rlvr.types import Problem


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def test_demonstration_batch_labels_completion_only(tok):
    task = build("task", "arithmetic")
    probs = [Problem("9*3=", "27", "9*3=27;#27"), Problem("12+34=", "46", "2+4=6;1+3=4;#46")]
    b = demonstration_batch(tok, task, probs)
    ids, mask, labels = b["input_ids"], b["attention_mask"], b["labels"]
    prompt0 = tok("9*3=")["input_ids"]  # <bos> 9 * 3 =
    comp0 = tok("9*3=27;#27", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    n0 = len(prompt0) + len(comp0)
    assert ids[0, :n0].tolist() == prompt0 + comp0
    assert labels[0, :n0].tolist() == [IGNORE] * len(prompt0) + comp0
    assert mask[0].tolist() == [1] * n0 + [0] * (ids.shape[1] - n0)  # right padding
    assert (labels[0, n0:] == IGNORE).all() and (ids[0, n0:] == tok.pad_token_id).all()
    assert int(mask[1].sum()) == ids.shape[1]  # the longer row fills the width


def test_demonstration_suffix_teaches_a_stated_confidence(tok):
    # C3RL's format: every demonstration gets " conf: c", c uniform in 0.1..0.9 per row (seeded), and
    # the completion labels cover it; parse_confidence reads c back and the verdict ignores it.
    import random
    from rlvr.rewards.answer import parse_confidence
    task = build("task", "arithmetic")
    probs = [Problem("9*3=", "27", "9*3=27;#27")] * 40
    b = demonstration_batch(tok, task, probs, " conf: {confidence}", random.Random(3))
    texts = [tok.decode([t for t in row.tolist() if t != IGNORE], skip_special_tokens=True) for row in b["labels"]]
    confs = [parse_confidence(t) for t in texts]
    assert all(t.startswith("9*3=27;#27 conf: 0.") for t in texts)
    assert set(confs) <= {k / 10 for k in range(1, 10)} and len(set(confs)) >= 5  # spread, not one value
    assert all(task.verify(probs[0], t).value == 1.0 for t in texts)
    again = demonstration_batch(tok, task, probs, " conf: {confidence}", random.Random(3))
    assert torch.equal(again["input_ids"], b["input_ids"])
    plain = demonstration_batch(tok, task, probs[:1], " done")
    assert tok.decode([t for t in plain["labels"][0].tolist() if t != IGNORE], skip_special_tokens=True) == \
        "9*3=27;#27 done"


def test_completion_loss_is_mean_over_completion_tokens(tok):
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2)
    task = build("task", "arithmetic")
    b = demonstration_batch(tok, task, task.problems(3, 0))
    with torch.no_grad():
        loss = completion_loss(model, **b)
        logp = torch.log_softmax(model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, -1)
    # manual: −mean over positions t with labels[t] ≠ IGNORE of log p(labels[t] | tokens < t)
    terms = [-logp[i, t - 1, b["labels"][i, t]] for i in range(3) for t in range(1, b["labels"].shape[1])
             if b["labels"][i, t] != IGNORE]
    assert loss.item() == pytest.approx(torch.stack(terms).mean().item(), rel=1e-5)
    # changing prompt tokens' labels cannot change the loss: they are ignored
    other = dict(b, labels=b["labels"].clone())
    assert loss.item() == pytest.approx(F.cross_entropy(
        model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits[:, :-1].flatten(0, 1),
        other["labels"][:, 1:].flatten(), ignore_index=IGNORE).item(), rel=1e-5)


def test_warm_start_loss_falls_and_mode_restored(tok):
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2, seed=0)
    model.eval()
    before = model.model.embed_tokens.weight.clone()
    out = warm_start(model, tok, build("task", "arithmetic"), steps=40, batch_size=16, lr=3e-3, warmup=5,
                     progress=False)
    # the first loss is near ln(100) ≈ 4.6 (a fresh model is near uniform); 40 steps learn at least
    # the character statistics of the demonstrations (digits, '+', '=', ';', '#')
    assert out["loss_first"] == pytest.approx(4.6, abs=0.4)
    assert out["loss"] < out["loss_first"] - 1.5
    assert not torch.equal(before, model.model.embed_tokens.weight)
    assert not model.training  # the caller's mode is restored
    assert out["steps"] == 40


def test_warm_start_is_reproducible(tok):
    task = build("task", "arithmetic")
    runs = []
    for _ in range(2):
        model = build_tiny_model(tok, hidden=16, layers=1, heads=2, seed=3)
        runs.append(warm_start(model, tok, task, steps=3, batch_size=4, seed=5, progress=False)["loss_last"])
    assert runs[0] == runs[1]


def test_warm_start_rejects_bad_arguments(tok):
    model = build_tiny_model(tok, hidden=16, layers=1, heads=2)
    with pytest.raises(ValueError, match="steps"):
        warm_start(model, tok, build("task", "arithmetic"), steps=0, progress=False)


def test_lr_schedules_golden():
    # warm-up 2 of 6 steps: factors (s+1)/2 for s < 2, then over the 4 remaining steps frac = (s−2)/4
    assert [lr_factor("constant", 2, 6)(s) for s in range(6)] == [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert [lr_factor("linear", 2, 6)(s) for s in range(6)] == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]
    cos = [lr_factor("cosine", 2, 6)(s) for s in range(6)]
    assert cos[:3] == [0.5, 1.0, 1.0] and cos[4] == pytest.approx(0.5)  # cos(π/2) midpoint
    assert lr_factor("linear", 0, 4)(0) == 1.0  # no warm-up: full rate at once
    with pytest.raises(ValueError, match="schedule"):
        lr_factor("step", 2, 6)
