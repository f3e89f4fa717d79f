"""Records of runs that are not on this machine: a committed ``results.json`` stands in for them.

A comparison's report pairs every arm seed by seed, so an arm added later (issue 47: Dr. GRPO beside
MMPO in the long regime) needs the other arms' numbers at the same seeds. Their run folders may be
gone (another machine, a cleaned disk), but the committed ``results.json`` holds each finished run's
record: accuracies, pass@k, final reward and length, and its per-problem outcomes (``outcomes``),
everything the paired table, the problem pairs and the power section read. ``rlvr compare CONFIG
--records docs/results/FAMILY/results.json --only NEW_ARM`` runs the new arm and takes every run that is
missing here from that file; the learning curves of those runs are not in it, so their plots are not
redrawn.

A stored record stands in only for the same run: method, seed, RL seed and role as the plan says, and
``done``. Anything else is an error naming the run, so records never cross comparisons by accident.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlvr.train.config import ConfigError

MATCHED = ("method", "seed", "rl_seed", "role")  # what a stored record must agree with the plan on


def load_records(path: str | Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The finished runs' records of a committed results.json, by (method, seed)."""
    try:
        runs = json.loads(Path(path).read_text())["runs"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"--records {path}: not a comparison's results.json ({err})") from err
    return {(r["method"], int(r["seed"])): r for r in runs if r.get("status") == "done"}


def stand_in(runs: list[dict[str, Any]], path: str | Path) -> list[dict[str, Any]]:
    """``runs`` (the plan's entries) with each missing run replaced by its stored record from ``path``,
    marked ``stored_from``; runs finished here, and missing runs the file lacks, are kept as they are
    (the report lists the latter as missing). Raises ConfigError when a stored record disagrees with
    the plan on :data:`MATCHED`."""
    stored = load_records(path)
    out = []
    for run in runs:
        record = stored.get((run["method"], int(run["seed"])))
        if run["status"] != "missing" or record is None:
            out.append(run)
            continue
        differ = [k for k in MATCHED if k in run and str(record.get(k)) != str(run[k])]
        if differ:
            raise ConfigError(f"--records {path}: the stored {run['method']}:{run['seed']} differs from this "
                              f"comparison's plan in {', '.join(differ)}: "
                              + ", ".join(f"{k} {record.get(k)!r} vs {run[k]!r}" for k in differ))
        out.append({**record, "stored_from": str(path)})
    return out
