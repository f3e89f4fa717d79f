"""Per-row data lives in typed ``Rollouts`` fields that ``select``, ``concat_rollouts`` and
``trim_padding`` carry along; ``meta`` never holds a tensor or per-row data (rlvr.types, rlvr.batching)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlvr.batching import concat_rollouts, trim_padding
from rlvr.types import ROW_FIELDS, TOKEN_FIELDS, BatchError, Problem, Rollouts


def _batch(n: int = 4, t: int = 5, p: int = 3, seed: int = 0, width: int | None = None) -> Rollouts:
    """``n`` rows with every optional per-row field set to distinct values; ``width`` real completion
    columns (the rest padding)."""
    g = torch.Generator().manual_seed(seed)
    width = t if width is None else width
    mask = torch.zeros(n, t, dtype=torch.bool)
    mask[:, :width] = True
    token = {name: torch.rand(n, t, generator=g) for name in TOKEN_FIELDS}
    for name in ("role_mask", "answer_mask"):
        token[name] = torch.rand(n, t, generator=g) < 0.5
    token["completion_attention"] = mask.clone()
    token["token_origin"] = torch.zeros(n, t, dtype=torch.uint8)
    row = {name: torch.randint(0, 100, (n,), generator=g) for name in ROW_FIELDS}
    return Rollouts(problems=[Problem(prompt=f"q{i}") for i in range(n)],
                    prompt_ids=torch.randint(1, 9, (n, p), generator=g), prompt_mask=torch.ones(n, p, dtype=torch.bool),
                    completion_ids=torch.randint(1, 9, (n, t), generator=g), completion_mask=mask,
                    group_ids=torch.arange(n) // 2, rewards=torch.rand(n, 1, generator=g), texts=[str(i) for i in range(n)],
                    parsed=[f"a{i}" for i in range(n)], verifier_errors=["" if i % 2 else f"e{i}" for i in range(n)],
                    hidden=torch.rand(n, t, 2, generator=g), value_prompt_ids=torch.randint(1, 9, (n, p + 1), generator=g),
                    value_prompt_mask=torch.rand(n, p + 1, generator=g) < 0.5,
                    row_stats={"consensus": torch.rand(n, generator=g)}, **token, **row)


def _per_row_fields() -> list[str]:
    return [*TOKEN_FIELDS, *ROW_FIELDS, "hidden", "value_prompt_ids", "value_prompt_mask"]


def test_select_slices_every_per_row_field():
    batch = _batch()
    rows = torch.tensor([3, 1])
    part = batch.select(rows)
    for name in _per_row_fields():
        assert torch.equal(getattr(part, name), getattr(batch, name)[rows]), name
    assert torch.equal(part.row_stats["consensus"], batch.row_stats["consensus"][rows])
    assert part.texts == ["3", "1"] and [q.prompt for q in part.problems] == ["q3", "q1"]
    assert part.parsed == ["a3", "a1"] and part.verifier_errors == ["", ""]
    assert batch.select(torch.tensor([2])).verifier_errors == ["e2"]  # a row's error stays on its row


def test_concat_pads_and_stacks_every_per_row_field():
    a, b = _batch(n=2, t=5, seed=1), _batch(n=3, t=3, seed=2)
    both = concat_rollouts([a, b], pad_id=0)
    assert both.num_rows == 5 and both.hidden.shape == (5, 5, 2)
    for name in _per_row_fields():
        x = getattr(both, name)
        assert torch.equal(x[:2], getattr(a, name)), name
        width = getattr(b, name).shape[1] if getattr(b, name).dim() > 1 else None
        if width is None:
            assert torch.equal(x[2:], getattr(b, name)), name
        elif name == "value_prompt_ids" or name == "value_prompt_mask":  # left-padded like prompts
            assert torch.equal(x[2:, -width:], getattr(b, name)), name
        else:  # right-padded like completions
            assert torch.equal(x[2:, :width], getattr(b, name)), name
    assert torch.isnan(both.turn_baselines[2:, 3:]).all()  # padding is "no counterfactual", not a baseline of 0
    assert torch.equal(both.row_stats["consensus"], torch.cat([a.row_stats["consensus"], b.row_stats["consensus"]]))
    with pytest.raises(BatchError, match="row_stats"):
        concat_rollouts([a, dataclasses.replace(b, row_stats={})], pad_id=0)
    with pytest.raises(BatchError, match="plan_ids"):
        concat_rollouts([a, dataclasses.replace(b, plan_ids=None)], pad_id=0)


def test_concat_joins_the_per_row_lists_of_every_part():
    a, b = _batch(n=2, seed=1), _batch(n=3, seed=2)
    both = concat_rollouts([a, b], pad_id=0)
    assert both.parsed == ["a0", "a1", "a0", "a1", "a2"]
    assert both.verifier_errors == ["e0", "", "e0", "", "e2"]  # refill rounds keep every round's errors
    empty = a.select(torch.zeros(0, dtype=torch.long))
    assert concat_rollouts([empty, b], pad_id=0).verifier_errors == b.verifier_errors  # a part with no rows
    with pytest.raises(BatchError, match="'parsed' is set in some batches"):
        concat_rollouts([a, dataclasses.replace(b, parsed=[])], pad_id=0)


def test_a_per_row_list_of_the_wrong_length_names_the_field():
    with pytest.raises(BatchError, match="verifier_errors has 3 entries for 4 rows"):
        dataclasses.replace(_batch(), verifier_errors=["", "", ""])


def test_trim_padding_cuts_the_per_token_fields_with_the_completions():
    batch = _batch(width=2)
    cut = trim_padding(batch)
    assert cut.completion_ids.shape == (4, 2)
    for name in (*TOKEN_FIELDS, "hidden"):
        assert torch.equal(getattr(cut, name), getattr(batch, name)[:, :2]), name
    for name in (*ROW_FIELDS, "value_prompt_ids"):
        assert torch.equal(getattr(cut, name), getattr(batch, name)), name


@pytest.mark.parametrize("value", [torch.zeros(4), (torch.zeros(4, 2), torch.zeros(4, 2)),
                                   {"rollout": torch.arange(4)}, [torch.zeros(1)]])
def test_a_tensor_in_meta_is_an_error(value):
    batch = _batch()
    with pytest.raises(BatchError, match="meta\\['x'\\] holds a tensor"):
        dataclasses.replace(batch, meta={"x": value})
    batch.meta["x"] = value  # set after construction: the next copy (a filter's select) refuses it
    with pytest.raises(BatchError, match="meta\\['x'\\] holds a tensor"):
        batch.select(torch.arange(2))


def test_meta_keeps_what_is_not_per_row():
    batch = dataclasses.replace(_batch(), meta={"shaper_metrics": {"reward/x": 1.0}, "notes": [{"uid": "q0"}],
                                                "generated": {"completions": 4, "tokens": 9}})
    assert batch.select(torch.tensor([0])).meta["shaper_metrics"] == {"reward/x": 1.0}


@pytest.mark.parametrize("key, value, home", [
    ("parsed", ["1"] * 4, "Rollouts.parsed"), ("verifier_errors", {}, "Rollouts.verifier_errors"),
    ("turn_spans", [[(0, 1)]] * 4, "episode"), ("turn_scores", [[1.0]] * 4, "episode"),
    ("turn_roles", [["policy"]] * 4, "episode"), ("errors_by_row", {2: "boom"}, "a Rollouts field"),
])
def test_per_row_data_in_meta_is_an_error_naming_the_key(key, value, home):
    batch = _batch()
    with pytest.raises(BatchError, match=f"meta\\['{key}'\\] holds per-row data.*{home}"):
        dataclasses.replace(batch, meta={key: value})
    batch.meta[key] = value  # set after construction: the next copy (a filter's select) refuses it
    with pytest.raises(BatchError, match=f"meta\\['{key}'\\] holds per-row data"):
        batch.select(torch.arange(2))


@pytest.mark.parametrize("field, value, match", [
    ("plan_ids", torch.zeros(3, dtype=torch.long), "plan_ids has shape"),
    ("role_mask", torch.zeros(4, 4, dtype=torch.bool), "role_mask has shape"),
    ("hidden", torch.zeros(4, 5), "hidden has shape"),
    ("value_prompt_mask", None, "set together"),
    ("value_prompt_mask", torch.zeros(4, 4), "must be a bool"),
    ("row_stats", {"c": torch.zeros(5)}, "row_stats\\['c'\\] has shape"),
])
def test_misshapen_per_row_fields_name_the_field(field, value, match):
    with pytest.raises(BatchError, match=match):
        dataclasses.replace(_batch(), **{field: value})
