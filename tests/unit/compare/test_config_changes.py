"""``rlvr compare`` reuses a run folder whose saved config is the same experiment: a config saved in an
older spelling (a bare ``rollout.engine`` name beside ``rollout.engine_params``) is no change, a changed
value still is."""

from __future__ import annotations

from rlvr.compare.runner import config_changes
from rlvr.train.config import load_config, to_dict


def test_an_older_spelling_of_the_same_config_is_no_change(tmp_path):
    tree = to_dict(load_config(None, [f"run.out_dir={tmp_path}", "rollout.engine={name: hf}"]))
    saved = {**tree, "rollout": {**tree["rollout"], "engine": "hf", "engine_params": {}}}  # as written before
    assert saved != tree and config_changes(saved, tree, cfg=None, seed=0) == []
    changed = {**saved, "rollout": {**saved["rollout"], "group_size": 3}}
    assert config_changes(changed, tree, cfg=None, seed=0) == ["rollout.group_size"]
    unloadable = {**saved, "rollout": {**saved["rollout"], "no_such_key": 1}}  # compared as saved
    assert "rollout.no_such_key" in config_changes(unloadable, tree, cfg=None, seed=0)
