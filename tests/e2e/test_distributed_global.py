"""Global-batch statistics under data parallelism (issue 18, items 1–2): two gloo processes against one.

Every preset below keeps something that spans the batch — a fixed length normaliser (dr_grpo,
length_power, fade), a selector's state and selections (kgps, de_venus, cvpo's curriculum and its loss
weights), a batch statistic inside the advantage (sa_mrpo's saturation, tether's w, cvpo's mean value
variance, fade's entropy, the batch whitening of sa_mrpo (``batch_whiten``), gae and reinforce_pp), and
the filters' all-filtered fallback (decided on the global batch: a rank left empty trains on no rows; only
when no rank kept a row do all fall back to their unfiltered batches). Two real train steps, completions that depend only on the problem and are cut
to problem-dependent lengths (so the ranks' padded widths differ): the 2-rank advantages, selections,
selector states and updated weights must equal the 1-process run's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ["dr_grpo", "length_power", "kgps", "de_venus", "cvpo", "sa_mrpo", "tether", "fade",
           "gae", "reinforce_pp", "filtered_rank1", "filtered_all"]
# Batch statistics each rank must compute on the global batch (logged means over ranks = the 1-process value).
STATS = {"sa_mrpo": ["adv/saturation_0", "adv/saturation_1", "adv/weight_0", "adv/weight_1"],
         "tether": ["adv/tether_w", "adv/tether_mse_v", "adv/tether_var_grp"],
         "cvpo": ["adv/value_var_mean", "select/loss_weight_min", "select/loss_weight_max"],
         "fade": ["adv/entropy", "adv/eta", "adv/entropy_target"],
         "kgps": ["optim/policy_kl", "select/kgps_q", "select/kgps_var_mean"],
         "filtered_rank1": ["rollout/all_filtered"],
         "filtered_all": ["rollout/all_filtered"]}


def _run(out: Path, nproc: int) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                 "--master_port", str(30500 + os.getpid() % 1000)] if nproc > 1 else [sys.executable])
    proc = subprocess.run([*launcher, "-m", "tests.e2e.global_worker", str(out), *PRESETS], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("global")
    return _run(base / "two", 2), _run(base / "one", 1)[0]


def _close(a, b, tol: float = 1e-5) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], tol) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return abs(a - b) <= tol * max(1.0, abs(a), abs(b))
    return a == b


@pytest.mark.parametrize("preset", PRESETS)
def test_two_ranks_equal_one_process(runs, preset):
    (r0, r1), one = runs
    a, b, single = r0[preset], r1[preset], one[preset]
    assert a["world"] == 2 and single["world"] == 1
    for step in range(len(single["uids"])):
        assert a["uids"][step] + b["uids"][step] == single["uids"][step]  # the same global selection
        assert _close(a["adv"][step] + b["adv"][step], single["adv"][step])
        for key in STATS.get(preset, []):
            assert a["metrics"][step][key] == pytest.approx(single["metrics"][step][key], rel=1e-5, abs=1e-6), key
    assert a["state"] == b["state"]  # one selector state, identical on every rank
    assert _close(a["state"], single["state"], 1e-6)
    assert a["flat"] == b["flat"]
    assert _close(a["flat"], single["flat"])
    assert any(abs(x) > 1e-6 for step in single["adv"] for row in step for x in row)  # a non-trivial update


def test_ranks_had_different_padded_widths(runs):
    (r0, r1), _ = runs
    differing = [(p, s) for p in PRESETS for s in range(len(r0[p]["width"])) if r0[p]["width"][s] != r1[p]["width"][s]]
    assert len(differing) >= len(PRESETS)  # most steps: the normaliser would differ if it were the padded width


def test_an_empty_rank_trains_on_no_rows_and_the_fallback_is_global(runs):
    (r0, r1), one = runs
    part = r0["filtered_rank1"], r1["filtered_rank1"], one["filtered_rank1"]
    assert all(part[1]["uids"][s] == [] and part[0]["uids"][s] for s in range(2))  # rank 1: no rows
    assert all(m["rollout/all_filtered"] == 0.0 for r in part for m in r["metrics"])
    for s in range(2):  # kept groups, k on rank 0 and none on rank 1, average to half the one-process count
        assert part[0]["metrics"][s]["rollout/kept_groups"] == part[2]["metrics"][s]["rollout/kept_groups"] / 2
    every = r0["filtered_all"], r1["filtered_all"], one["filtered_all"]
    assert all(r["uids"][s] for r in every for s in range(2))  # every rank falls back to its own rows
    assert all(m["rollout/all_filtered"] == 1.0 for r in every for m in r["metrics"])
