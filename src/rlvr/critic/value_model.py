"""The value model: a causal-LM backbone with a scalar head, V(s_t) for every completion token.

``values[i, t]`` is the critic's estimate for the state *before* completion token ``t`` (docs/methods.md
§0.1): the hidden state at the position that predicts token ``t``, i.e. the prompt's last token for
``t = 0``. Positions count real tokens only, as in generation and in ``sequence_logprobs``.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

BOUNDS = ("none", "sigmoid", "clamp")


class ValueModel(nn.Module):
    """``backbone`` (a Hugging Face base model returning hidden states) + ``Linear(hidden, 1)``.

    ``bound``: ``sigmoid`` maps the head to ``lo + (hi − lo)·sigmoid(v)`` (trained in that space);
    ``clamp`` trains the raw head and clamps only the values advantages read (``bounded``);
    ``none`` leaves them raw. The head starts at zero (V = 0, or the middle of the range for
    sigmoid), so a fresh critic predicts the same value everywhere.
    """

    def __init__(self, backbone: nn.Module, hidden: int, bound: str = "none",
                 reward_range: tuple[float, float] = (0.0, 1.0)) -> None:
        super().__init__()
        if bound not in BOUNDS:
            raise ValueError(f"ValueModel: bound must be one of {BOUNDS}, got '{bound}'")
        self.backbone = backbone
        self.head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.bound = bound
        self.lo, self.hi = float(reward_range[0]), float(reward_range[1])

    def forward(self, prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor,
                completion_attention: Tensor) -> Tensor:
        """(N, T) values in the space the loss trains (bounded for sigmoid, raw otherwise)."""
        ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (N, P + T)
        mask = torch.cat([prompt_mask, completion_attention], dim=1).long()  # (N, P + T)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        hidden = self.backbone(input_ids=ids, attention_mask=mask, position_ids=pos).last_hidden_state
        t = completion_ids.shape[1]
        states = hidden[:, -t - 1:-1]  # (N, T, H): position P-1+t sees everything before token t
        v = self.head(states.to(self.head.weight.dtype)).squeeze(-1).float()  # (N, T)
        if self.bound == "sigmoid":
            v = self.lo + (self.hi - self.lo) * torch.sigmoid(v)
        return v

    def bounded(self, values: Tensor) -> Tensor:
        """The values advantages read: clamped to the reward range when ``bound = clamp``."""
        return values.clamp(self.lo, self.hi) if self.bound == "clamp" else values


def backbone_of(causal_lm: nn.Module) -> tuple[nn.Module, int]:
    """The base model (no LM head) of a Hugging Face causal LM and its hidden size."""
    prefix = getattr(causal_lm, "base_model_prefix", "model")
    base = getattr(causal_lm, prefix, None)
    if base is None:
        raise ValueError(f"critic: cannot find the backbone '{prefix}' of {type(causal_lm).__name__}")
    return base, int(causal_lm.config.hidden_size)


def build_value_model(policy: nn.Module, *, init: str = "policy", path: str | None = None, bound: str = "none",
                      reward_range: tuple[float, float] = (0.0, 1.0)) -> ValueModel:
    """A value head on a copy of the policy backbone (``init='policy'``) or on a separate local
    checkpoint (``init='path'``). The global RNG is left untouched (the head is zero-initialised)."""
    with torch.random.fork_rng(devices=[]):
        if init == "policy":
            source = copy.deepcopy(policy)
        elif init == "path":
            from rlvr.models import load_model
            source = load_model(path, dtype=torch.float32)
        else:
            raise ValueError(f"critic: init must be 'policy' or 'path', got '{init}'")
        backbone, hidden = backbone_of(source)
        model = ValueModel(backbone, hidden, bound=bound, reward_range=reward_range)
    for p in model.parameters():
        p.requires_grad_(True)
    return model.train()
