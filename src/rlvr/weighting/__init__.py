"""Token weightings (the reweight stage); importing this package registers them."""

from rlvr.weighting.base import TokenWeighting, WeightingInputs, WeightingOutput
from rlvr.weighting import answer_mask, taco  # noqa: F401  (registers the built-ins)
from rlvr.weighting.answer_mask import answer_mask_from_ids, answer_token_mask

__all__ = ["TokenWeighting", "WeightingInputs", "WeightingOutput", "answer_mask_from_ids", "answer_token_mask"]
