"""Multi-turn environments (see ``rlvr.envs.base``); importing this package registers them."""

from rlvr.envs.base import (EPISODE_KEY, EnvError, Environment, build_env, env_names, episode_of, episode_score,
                            get_env, register_env)

__all__ = ["EPISODE_KEY", "EnvError", "Environment", "build_env", "env_names", "episode_of", "episode_score",
           "get_env", "register_env"]

from rlvr.envs import refine  # noqa: E402,F401  (registers refine_arithmetic: environment and task)
from rlvr.envs import bidding  # noqa: E402,F401  (registers auto_bidding: environment and task)
from rlvr.envs import lure  # noqa: E402,F401  (registers lure_arithmetic, lure_countdown)
from rlvr.envs import python_tool  # noqa: E402,F401  (registers python_tool: tool calls in rollouts)
from rlvr.envs import calculator  # noqa: E402,F401  (registers tool_arithmetic; the calc tool)
