"""Adapters that put rlvr's plug-ins into other frameworks' registries and hooks.

``rlvr.integrations.verl``: ``register_with_verl()`` makes every rlvr advantage estimator and
policy loss selectable by name in verl (``rlvr_<name>``). Each adapter imports its framework only
when used, so ``import rlvr`` never needs verl or TRL.
"""
