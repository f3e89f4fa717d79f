"""Learned critics: value models, privileged critic inputs, value targets and the value loss."""

from rlvr.critic.critic import Critic
from rlvr.critic.value_loss import clipped_value_loss, explained_variance, mc_returns
from rlvr.critic.value_model import ValueModel, build_value_model
from rlvr.critic.view import POLICY_VIEW, critic_prompts, privileged_text

__all__ = ["Critic", "POLICY_VIEW", "ValueModel", "build_value_model", "clipped_value_loss", "critic_prompts",
           "explained_variance", "mc_returns", "privileged_text"]
