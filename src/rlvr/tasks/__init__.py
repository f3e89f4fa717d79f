"""The testbed's verifiable tasks; importing this package registers them under kind "task" (the
environment-backed tasks register with ``rlvr.envs``, which the registry imports by name)."""

from rlvr.tasks.base import SPLITS, Task, TaskConfig, answer_after_marker, prompt_hash
from rlvr.sandbox.safe import safe_verify
from rlvr.sandbox.verify import verify_all
from rlvr.tasks import arithmetic, countdown, dataset  # noqa: F401  (registers the tasks)
from rlvr.tasks import chess_puzzles  # noqa: F401  (registers chess_puzzles; python-chess is imported on use)
from rlvr.tasks import code_synthesis  # noqa: F401  (registers code_synthesis; verified in the sandbox)
from rlvr.tasks import rgym  # noqa: F401  (registers reasoning_gym; the package is imported on use)
from rlvr.tasks.arithmetic import Arithmetic
from rlvr.tasks.countdown import Countdown
from rlvr.tasks.dataset import Dataset, read_table

__all__ = [
    "SPLITS", "Arithmetic", "Countdown", "Dataset", "Task", "TaskConfig", "answer_after_marker",
    "prompt_hash", "read_table", "safe_verify", "verify_all",
]
