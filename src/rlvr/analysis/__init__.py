"""Analysis tools: closed forms that explain what a knob does to the gradient (no training).

* ``std_dial``: GRPO / Dr. GRPO / DAPO as one dial on the group reward std (docs/methods.md §2.30).
* ``length_bias``: per-trajectory gradient weight against length for the L^(α−1) family (§2.18).
* ``diversity``: verifier-projected Jensen–Shannon diversity of a population of policies (§2.5).
* ``sparsity``: the functional-sparsity probe, keeping the top-q fraction of an update (§2.5).
* ``gar``: GAR's prediction-error × activation decomposition at the output layer (§2.1).
"""

from rlvr.analysis.diversity import answer_distributions, bernoulli, js_diversity, population_diversity
from rlvr.analysis.gar import (
    GARDecomposition, decompose, prediction_error, weight_gradient, weight_gradient_cosine, weight_gradient_inner,
)
from rlvr.analysis.length_bias import (
    MODE_ALPHA, LengthBiasReport, length_bias_report, lengths_to_mask, per_token_weight, trajectory_weight,
)
from rlvr.analysis.sparsity import kept_fraction, sparsify_update, sparsity_probe
from rlvr.analysis.std_dial import (
    batch_coefficients, binary_std, coefficient_table, dapo_coefficient, dial_coefficient, dr_grpo_coefficient,
    group_policy_gradient, grpo_coefficient, outcome_mean_gradients,
)

__all__ = [
    "GARDecomposition", "decompose", "prediction_error", "weight_gradient", "weight_gradient_cosine",
    "weight_gradient_inner",
    "answer_distributions", "bernoulli", "js_diversity", "kept_fraction", "population_diversity",
    "sparsify_update", "sparsity_probe",
    "MODE_ALPHA", "LengthBiasReport", "batch_coefficients", "binary_std", "coefficient_table", "dapo_coefficient",
    "dial_coefficient", "dr_grpo_coefficient", "group_policy_gradient", "grpo_coefficient", "length_bias_report",
    "lengths_to_mask", "outcome_mean_gradients", "per_token_weight", "trajectory_weight",
]
