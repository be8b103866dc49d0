"""Numpy golden models of the EAGLE tree-speculation control kernels.

Each op follows the in-place ABI of docs/kernels.md §0: the same arguments, in the same
order, as the CUDA/torch op it mirrors; outputs are written into the given arrays and the op
returns ``None``. Every op of the project is importable from here.
"""

from .draft_round import (
    ROOT_SCORE,
    DepthRecord,
    DraftRoundConfig,
    DraftRoundResult,
    DraftSample,
    Frontier,
    draft_round,
    synthetic_sampler,
)
from .score import draft_tree_layer_score_index_gen_op
from .update_state import (
    CUMU_SCORE_SCALE,
    NodeBudgetError,
    NodeBudgetWarning,
    clamp_verify_num,
    node_budget_overflow,
    update_cumu_draft_state,
)
from .work_deltas import calculate_work_deltas, request_work_deltas, width_policy

__all__ = [
    "draft_tree_layer_score_index_gen_op",
    "update_cumu_draft_state",
    "node_budget_overflow",
    "clamp_verify_num",
    "NodeBudgetError",
    "NodeBudgetWarning",
    "CUMU_SCORE_SCALE",
    "calculate_work_deltas",
    "request_work_deltas",
    "width_policy",
    "draft_round",
    "DraftRoundConfig",
    "DraftRoundResult",
    "DepthRecord",
    "DraftSample",
    "Frontier",
    "synthetic_sampler",
    "ROOT_SCORE",
]
