"""Parameters docs/methods.md marks *required* have no default: leaving one out is a clear error, and the
presets that use the plug-ins set them (issue 18, item 12)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlvr.registry import build
from rlvr.rewards.teacher import build_teacher
from rlvr.rollout.engines.specroll import SpecRollConfig

PRESETS = Path(__file__).resolve().parents[2] / "configs" / "methods"


@pytest.mark.parametrize("make,missing", [
    (lambda: build_teacher("llm", {"model": "m"}), "sees_gt"),
    (lambda: build("loop", "grpo_then_es"), "grpo_steps"),
    (lambda: SpecRollConfig(), "reflex_eta and reflex_eps"),
    (lambda: build("sampler", "multi_turn"), "cf_samples"),
    (lambda: build("sampler", "multi_turn", cf_samples=2, cf_selector="credit_threshold"), "cf_threshold"),
    (lambda: build("sampler", "hint"), "guide_ratio"),
    (lambda: build("shaper", "om_grpo"), "contrast_pairs"),
])
def test_missing_required_parameter_is_named(make, missing):
    with pytest.raises(ValueError, match=f"{missing}.*required|required.*{missing}"):
        make()


def test_given_values_build():
    assert build_teacher("llm", {"model": "m", "sees_gt": True}).config.sees_gt is True
    assert build("loop", "grpo_then_es", grpo_steps=3).config.grpo_steps == 3
    assert SpecRollConfig(reflex=False).reflex_eta is None  # only required with reflex
    assert build("sampler", "multi_turn", cf_samples=2, cf_selector="credit_threshold",
                 cf_threshold=0.5).config.cf_threshold == 0.5
    assert build("sampler", "hint", guide_ratio=0.0).config.guide_ratio == 0.0


@pytest.mark.parametrize("preset,path,keys", [
    ("grpo_then_es", ("optim", "params"), ["grpo_steps"]),
    ("specroll", ("rollout", "engine"), ["reflex_eta", "reflex_eps"]),
    ("tcpo", ("rollout", "sampler"), ["cf_samples"]),
    ("oc_grpo", ("rollout", "sampler"), ["guide_ratio"]),
    ("om_grpo", ("algorithm", "shapers", 0), ["contrast_pairs"]),
])
def test_presets_set_the_required_parameters(preset, path, keys):
    node = yaml.safe_load((PRESETS / f"{preset}.yaml").read_text())
    for part in path:
        node = node[part]
    assert all(node.get(k) is not None for k in keys), (preset, keys)
