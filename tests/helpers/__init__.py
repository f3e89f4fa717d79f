"""Builders shared by the unit and end-to-end tiers (tests/README.md): tiny run configs and the toy task
(``tiny``), fixed batches (``batches``), tiny-model gradients (``tiny_models``), TRL-signature reward
functions (``reward_fns``) and the float tolerances for "same update" checks (``tolerance``)."""
