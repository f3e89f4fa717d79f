"""Importing this module registers every rlvr estimator and loss in verl (``register_with_verl()``).

verl 0.9.1 imports it on ``import verl``, in every process, through the ``verl.plugins`` entry point
that rlvr's ``pyproject.toml`` declares, or through ``VERL_USE_EXTERNAL_MODULES=rlvr.integrations.verl_plugin``
where rlvr is not installed as a package. docs/scaling.md says which names run inside verl's trainer.
"""

from rlvr.integrations.verl import register_with_verl

VERL_NAMES = register_with_verl()
