"""Guided samplers on a tiny model: reductions to the plain sampler, origins and masks, the prefix cut,
OC-GRPO's two contexts, anchors from the frozen reference, and zero gradient on masked tokens."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from rlvr.models import build_char_tokenizer, build_tiny_model, format_prompt
from rlvr.registry import build
from rlvr.rollout import encode_prompts, sequence_logprobs
from rlvr.rollout.samplers import SampleContext
from rlvr.rollout.samplers.base import cut_at_boundary, text_cut_at_boundary
from rlvr.train.config import ConfigError
from rlvr.train.logging import read_metrics
from rlvr.train.trainer import Trainer
from rlvr.types import LossInputs, Origin, Problem
from tests.helpers.tiny import tiny_config
from tests.helpers.tiny_models import logit_grads

ROLLOUT = SimpleNamespace(max_new_tokens=12, temperature=1.0, top_p=1.0, top_k=0)
DIGITS = tuple("0123456789")  # with digits as "step ends", an untrained model cuts often


@pytest.fixture(scope="module")
def reference(tok):
    return build_tiny_model(tok, hidden=32, layers=1, heads=2, seed=1).eval()


def _problems(n: int = 3, solution: bool = True) -> list[Problem]:
    return [Problem(prompt=f"{11 * i + 3}+{i}=", answer=str(12 * i + 3),
                    solution=f"{11 * i}+3;{11 * i + 3}+{i};{12 * i + 3}" if solution else None) for i in range(n)]


def _ctx(tok, seed: int = 5, **kw) -> SampleContext:
    return SampleContext(tokenizer=tok, rollout=ROLLOUT, seed=seed, group_offset=100, **kw)


def _same_batch(a, b) -> None:
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert torch.equal(a.completion_mask, b.completion_mask)
    assert torch.equal(a.prompt_ids, b.prompt_ids)
    assert torch.equal(a.group_ids, b.group_ids)
    assert a.texts == b.texts


@pytest.mark.parametrize("name,params", [("prefix", {"weak_model": "reference", "prefix_fraction": 0.0}),
                                         ("hint", {"guide_ratio": 0.0}),
                                         ("hint", {"guide_when": "fixed_ratio", "guide_ratio": 0.0}),
                                         ("anchor", {"anchors": 0})])
def test_guidance_fraction_zero_is_the_plain_sampler(tok, policy, reference, name, params):
    plain = build("sampler", "plain").sample(policy, _problems(), 4, _ctx(tok))
    verify = lambda problems, texts: [0.0] * len(texts)  # noqa: E731  (every group "unsolved")
    guided = build("sampler", name, **params).sample(policy, _problems(), 4,
                                                     _ctx(tok, reference=reference, verify=verify))
    _same_batch(plain, guided)


def test_empty_hint_is_the_plain_sampler(tok, policy):
    plain = build("sampler", "plain").sample(policy, _problems(solution=False), 4, _ctx(tok))
    hinted = build("sampler", "hint", guide_when="fixed_ratio", guide_ratio=0.5).sample(
        policy, _problems(solution=False), 4, _ctx(tok))
    _same_batch(plain, hinted)


def test_fraction_zero_trains_identically(tmp_path):
    """Same seed, same tokens, same loss, same weights after a step: plain vs guided samplers at 0."""
    def run(name: str, overrides: list[str]):
        t = Trainer(tiny_config(tmp_path / name, ["run.steps=2", *overrides]))
        t.train()
        return read_metrics(tmp_path / name), {k: v.clone() for k, v in t.policy.state_dict().items()}

    base_rows, base_w = run("plain", [])
    for name, overrides in [("prefix", ["rollout.sampler.name=prefix", "rollout.sampler.params.weak_model=reference",
                                        "rollout.sampler.params.prefix_fraction=0"]),
                            ("anchor", ["rollout.sampler.name=anchor", "rollout.sampler.params.anchors=0"])]:
        rows, w = run(name, overrides)
        assert [r["loss/total"] for r in rows] == [r["loss/total"] for r in base_rows]
        assert [r["reward/mean"] for r in rows] == [r["reward/mean"] for r in base_rows]
        assert all(torch.equal(w[k], base_w[k]) for k in base_w)


def test_prefix_rows_record_origin_and_mask_and_cut_at_steps(tok, policy, reference):
    sampler = build("sampler", "prefix", weak_model="reference", prefix_fraction=0.5, prefix_len_range=[0.5, 0.9],
                    step_separators=DIGITS)
    batch = sampler.sample(policy, _problems(), 4, _ctx(tok, reference=reference))
    assert batch.num_rows == 12 and batch.group_ids.tolist() == [100] * 4 + [101] * 4 + [102] * 4
    origin, real = batch.token_origin, batch.attention
    prefixed = 0
    for i in range(batch.num_rows):
        n_pref = int((origin[i] == int(Origin.PREFIX)).sum())
        if i % 4 < 2:  # the first G − m rows of each group are plain
            assert n_pref == 0
        if n_pref:
            prefixed += 1
            assert bool((origin[i, :n_pref] == int(Origin.PREFIX)).all())  # a prefix is a leading block
            last = tok.decode([int(batch.completion_ids[i, n_pref - 1])])
            assert last[-1] in DIGITS  # the cut lands right after a step end
        assert torch.equal(batch.completion_mask[i], real[i] & (origin[i] != int(Origin.PREFIX)))
        text = tok.decode(batch.completion_ids[i][real[i]].tolist(), skip_special_tokens=True)
        assert batch.texts[i] == text  # the verifier sees prefix ⊕ continuation
    assert prefixed > 0
    assert batch.rollout_logprobs[origin == int(Origin.PREFIX)].abs().sum() == 0


def test_prefix_comes_from_the_weak_model(tok, policy, reference):
    """Prefix tokens are the weak model's own sample (same seed) up to the cut."""
    from rlvr.rollout.samplers.base import sample_plain
    sampler = build("sampler", "prefix", weak_model="reference", prefix_fraction=1.0, prefix_len_range=[1.0, 1.0],
                    cut_at_step_boundary=False)
    problems = _problems(2)
    batch = sampler.sample(policy, problems, 2, _ctx(tok, reference=reference))
    weak = sample_plain(reference, [p for p in problems for _ in range(2)], _ctx(tok), 5 + 104_729)
    for i in range(4):
        n_pref = int((batch.token_origin[i] == int(Origin.PREFIX)).sum())
        ws = [t for t in weak.completion_ids[i][weak.completion_mask[i]].tolist() if t != tok.eos_token_id]
        assert batch.completion_ids[i, :n_pref].tolist() == ws


def test_step_cut_helpers(tok):
    ids = tok("12;34;56", add_special_tokens=False)["input_ids"]
    assert cut_at_boundary(ids, 8, tok, (";",)) == 6  # "12;34;" — the last ';' within 8 tokens
    assert cut_at_boundary(ids, 5, tok, (";",)) == 3  # "12;"
    assert cut_at_boundary(ids, 2, tok, (";",)) == 0  # no step ends within "12"
    assert text_cut_at_boundary("12;34;56", 5, (";",)) == "12;"
    assert text_cut_at_boundary("12;34;56", 6, (";",)) == "12;34;"
    assert text_cut_at_boundary("1234", 4, (";",)) == ""


def test_oc_grpo_ratio_matches_both_contexts_computed_directly(tok, policy):
    sampler = build("sampler", "hint", guide_when="fixed_ratio", guide_ratio=0.5, hint_len_range=[0.6, 0.6])
    problems = _problems(2)
    batch = sampler.sample(policy, problems, 2, _ctx(tok))
    guided = (batch.token_origin == int(Origin.GUIDED)).any(-1).nonzero().flatten().tolist()
    assert guided == [1, 3]  # the last round(0.5·2) = 1 row of each group
    for i in guided:
        p = batch.problems[i]
        hint = sampler.hint_of(p, 0.6)
        assert hint and hint.endswith(";") and p.solution.startswith(hint)
        # The trainer's ids are the unguided prompt: no hint token reaches them.
        prompt = tok.decode(batch.prompt_ids[i][batch.prompt_mask[i]].tolist(), skip_special_tokens=True)
        assert prompt == p.prompt
        y, real = batch.completion_ids[i:i + 1], batch.attention[i:i + 1]
        x_ids, x_mask = encode_prompts(tok, [format_prompt(tok, p.prompt)])
        xh_ids, xh_mask = encode_prompts(tok, [format_prompt(tok, p.prompt) + hint])
        with torch.no_grad():
            unguided, _ = sequence_logprobs(policy, x_ids, x_mask, y, real)
            guided_lp, _ = sequence_logprobs(policy, xh_ids, xh_mask, y, real)
        assert torch.allclose(batch.behaviour_logprobs[i][real[0]], guided_lp[0][real[0]], atol=1e-5)
        inputs = LossInputs(logprobs=unguided, old_logprobs=unguided, advantages=torch.ones_like(unguided),
                            mask=real, token_origin=batch.token_origin[i:i + 1],
                            behaviour_logprobs=batch.behaviour_logprobs[i:i + 1])
        from rlvr.losses.off_policy import behaviour_ratio
        expected = (unguided - guided_lp).exp()
        assert torch.allclose(behaviour_ratio(inputs, 20.0)[real], expected[real], rtol=1e-4)
        assert batch.texts[i].startswith(hint)  # the reward reads the response as produced: h ⊕ y


def test_hint_guides_only_all_zero_groups(tok, policy):
    verify = lambda problems, texts: [0.0 if p.prompt.startswith("3+") else 1.0 for p in problems]  # noqa: E731
    sampler = build("sampler", "hint", guide_ratio=0.5, hint_len_range=[0.6, 0.6])
    batch = sampler.sample(policy, _problems(3), 4, _ctx(tok, verify=verify))
    guided_rows = (batch.token_origin == int(Origin.GUIDED)).any(-1).nonzero().flatten().tolist()
    assert guided_rows == [2, 3]  # only problem 0 ("3+0=") failed everywhere; its last 2 rows are guided
    assert batch.meta["sampler_metrics"]["rollout/guided_groups_frac"] == pytest.approx(1 / 3)


def test_hint_masked_mode_keeps_hint_tokens_untrained(tok, policy):
    sampler = build("sampler", "hint", guide_when="fixed_ratio", guide_ratio=1.0, hint_in_target="masked",
                    hint_len_range=[0.6, 0.6])
    batch = sampler.sample(policy, _problems(1), 2, _ctx(tok))
    hint = sampler.hint_of(batch.problems[0], 0.6)
    n = len(hint)
    assert bool((batch.token_origin[:, :n] == int(Origin.HINT)).all())
    assert not bool(batch.completion_mask[:, :n].any())
    assert tok.decode(batch.completion_ids[0, :n].tolist()) == hint


def test_anchors_come_from_the_frozen_reference(tok, policy, reference):
    from rlvr.rollout.samplers.base import sample_plain
    problems = _problems(2)
    batch = build("sampler", "anchor", anchors=2).sample(policy, problems, 4, _ctx(tok, reference=reference))
    anchors = sample_plain(reference, [p for p in problems for _ in range(2)], _ctx(tok), 5 + 104_729)
    rows = [2, 3, 6, 7]  # the last G_anc rows of each group
    for k, i in enumerate(rows):
        n = int(anchors.completion_mask[k].sum())
        assert batch.completion_ids[i, :n].tolist() == anchors.completion_ids[k, :n].tolist()
        assert bool((batch.token_origin[i, :n] == int(Origin.REFERENCE)).all())
        assert bool(batch.completion_mask[i, :n].all())  # anchors are trained
    with torch.no_grad():
        ref_lp, _ = sequence_logprobs(reference, batch.prompt_ids[rows], batch.prompt_mask[rows],
                                      batch.completion_ids[rows], batch.attention[rows])
    att = batch.attention[rows]
    assert torch.allclose(batch.behaviour_logprobs[rows][att], ref_lp[att], atol=1e-5)


def test_reference_weights_stay_frozen_while_the_policy_trains(tmp_path):
    cfg = tiny_config(tmp_path, ["run.steps=2"], path="configs/methods/armor.yaml")
    trainer = Trainer(cfg)
    checksum = lambda m: sum(p.double().sum().item() for p in m.parameters())  # noqa: E731
    ref_before, pol_before = checksum(trainer.ref_model), checksum(trainer.policy)
    trainer.train()
    assert checksum(trainer.ref_model) == ref_before
    if any(r["adv/abs_mean"] > 0 for r in read_metrics(tmp_path)):  # any learning signal moves the policy
        assert checksum(trainer.policy) != pol_before


def test_masked_prefix_and_hint_tokens_get_exactly_zero_gradient(tok, reference):
    model = copy.deepcopy(reference)
    prefix = build("sampler", "prefix", weak_model="reference", prefix_fraction=0.5, prefix_len_range=[0.5, 0.9],
                    step_separators=DIGITS)
    hint = build("sampler", "hint", guide_when="fixed_ratio", guide_ratio=1.0, hint_in_target="masked")
    for batch in (prefix.sample(model, _problems(), 4, _ctx(tok, reference=reference)),
                  hint.sample(model, _problems(), 2, _ctx(tok))):
        grads, _ = logit_grads(model, batch, "ppo_clip", {})
        untrained = batch.attention & ~batch.completion_mask
        assert bool(untrained.any())
        assert grads[untrained].abs().max().item() == 0.0
        assert grads[batch.completion_mask].abs().max().item() > 0.0


def test_positive_only_anchors_with_negative_advantage_get_zero_gradient(tok, policy, reference):
    model = copy.deepcopy(policy)
    batch = build("sampler", "anchor", anchors=2).sample(model, _problems(2), 4, _ctx(tok, reference=reference))
    grads, adv = logit_grads(model, batch, "armor", {"anchor_is_cap": 2.0, "anchor_positive_only": True})
    dropped = (batch.token_origin == int(Origin.REFERENCE)) & batch.completion_mask & (adv < 0)
    kept = (batch.token_origin == int(Origin.REFERENCE)) & batch.completion_mask & (adv > 0)
    assert bool(dropped.any()) and bool(kept.any())
    assert grads[dropped].abs().max().item() == 0.0
    assert grads[kept].abs().max().item() > 0.0


def test_bad_sampler_setups_are_clear_errors(tmp_path, tok, policy):
    with pytest.raises(ConfigError, match="importance-corrected loss"):
        Trainer(tiny_config(tmp_path, ["rollout.sampler.name=anchor"]))
    with pytest.raises(ConfigError, match="unknown sampler"):
        Trainer(tiny_config(tmp_path, ["rollout.sampler.name=nope"]))
    with pytest.raises(ValueError, match="needs the trainer's frozen reference"):
        build("sampler", "anchor").sample(policy, _problems(1), 4, _ctx(tok))
    with pytest.raises(ValueError, match="must contain \\{prompt\\}"):
        build("sampler", "hint", guide_ratio=0.5, placement="prompt")
    with pytest.raises(ValueError, match="prefix_len_range"):
        build("sampler", "prefix", weak_model="reference", prefix_len_range=[0.6, 0.2])


def test_weak_model_from_a_folder(tmp_path, tok, policy, reference):
    reference.save_pretrained(tmp_path / "weak")
    tok.save_pretrained(tmp_path / "weak")
    sampler = build("sampler", "prefix", weak_model=str(tmp_path / "weak"), prefix_fraction=1.0,
                    prefix_len_range=[1.0, 1.0], cut_at_step_boundary=False)
    assert not sampler.needs_reference
    from_folder = sampler.sample(policy, _problems(2), 2, _ctx(tok))
    from_reference = build("sampler", "prefix", weak_model="reference", prefix_fraction=1.0,
                           prefix_len_range=[1.0, 1.0], cut_at_step_boundary=False).sample(policy, _problems(2), 2, _ctx(tok, reference=reference))
    _same_batch(from_folder, from_reference)  # the same weights give the same prefixes and continuations
    other = build_char_tokenizer("abc;")
    other.save_pretrained(tmp_path / "other")
    reference.save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match="different tokenizer"):
        build("sampler", "prefix", weak_model=str(tmp_path / "other")).sample(policy, _problems(1), 2, _ctx(tok))


def test_weak_model_is_required_and_named():
    with pytest.raises(ValueError, match="weak_model is required"):
        build("sampler", "prefix")
    with pytest.raises(ValueError, match="fraction 0 <= F < 1"):
        build("sampler", "prefix", weak_model="warm_start:1.5")


def test_warm_start_weak_model_is_an_earlier_point_of_the_policys_warm_start(tmp_path):
    # weak_model 'warm_start:0.25' with warm_start.steps = 8: the weak model is the run's model after
    # 2 of the same 8 supervised steps, written into the run and reloaded on resume.
    from rlvr.train.run import warm_start_model
    from rlvr.train.config import replace
    overrides = ["rollout.sampler={name: prefix, weak_model: 'warm_start:0.25', prefix_fraction: 0.5}",
                 "warm_start.steps=8", "warm_start.batch_size=8"]
    cfg = tiny_config(tmp_path, overrides)
    trainer = Trainer(cfg)
    after_weak = torch.get_rng_state()
    Trainer(tiny_config(tmp_path / "ref", [*overrides, "rollout.sampler.weak_model=reference"]))
    assert torch.equal(after_weak, torch.get_rng_state())  # building the weak model left the RNG alone
    weak = trainer.parts.sampler._weak
    assert (tmp_path / "weak_model" / "config.json").exists()
    short, _, info = warm_start_model(replace(cfg, warm_start={"steps": 2}))
    full, _, _ = warm_start_model(cfg)
    assert info["warm_start_steps"] == 2
    weak_w, short_w, full_w = weak.state_dict(), short.state_dict(), full.state_dict()
    assert all(torch.equal(weak_w[k], short_w[k]) for k in weak_w)
    assert any(not torch.equal(weak_w[k], full_w[k]) for k in weak_w)
    assert not any(p.requires_grad for p in weak.parameters())
    again = Trainer(cfg).parts.sampler._weak  # a second start reads <run>/weak_model
    assert all(torch.equal(again.state_dict()[k], weak_w[k]) for k in weak_w)


def test_a_sampler_parameter_set_both_flat_and_under_params_is_an_error():
    """A preset writes `sampler: {name: prefix, weak_model: A}`; an override `sampler.params.weak_model=B`
    used to lose silently to the flat key (a comparison file's outer_prefix ran with the preset's weak
    model). Now it names the key; the flat form overrides as expected."""
    from rlvr.train.config import load_config
    with pytest.raises(ConfigError, match=r"rollout.sampler.weak_model'\] set twice"):
        load_config("configs/methods/outer_prefix.yaml", ["rollout.sampler.params.weak_model=reference"])
    cfg = load_config("configs/methods/outer_prefix.yaml", ["rollout.sampler.weak_model=reference"])
    assert cfg.rollout.sampler.params["weak_model"] == "reference"
