"""Numpy golden models of the EAGLE tree-speculation control kernels.

Each op follows the in-place ABI of docs/kernels.md §0: the same arguments, in the same
order, as the CUDA/torch op it mirrors; outputs are written into the given arrays and the op
returns ``None``. Every op of the project is importable from here.
"""

from .active_slots import compact_active_slots
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
from .tree_mask import (
    MAX_PACKED_VERIFY_NUM,
    SGLANG_MAX_PACKED_DRAFT_TOKENS,
    TreeMaskMode,
    build_tree_kernel_efficient,
    fused_tree_mask_operator,
    pack_tree_mask,
    packed_row_bytes,
    select_verify_nodes,
    sglang_packed_row_bytes,
    tree_mask_size,
    unpack_tree_mask,
    verify_set_size,
)
from .update_state import (
    CUMU_SCORE_SCALE,
    NodeBudgetError,
    NodeBudgetWarning,
    clamp_verify_num,
    node_budget_overflow,
    update_cumu_draft_state,
)
from .verify_result import update_verify_result
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
    "build_tree_kernel_efficient",
    "fused_tree_mask_operator",
    "TreeMaskMode",
    "select_verify_nodes",
    "verify_set_size",
    "tree_mask_size",
    "packed_row_bytes",
    "sglang_packed_row_bytes",
    "pack_tree_mask",
    "unpack_tree_mask",
    "MAX_PACKED_VERIFY_NUM",
    "SGLANG_MAX_PACKED_DRAFT_TOKENS",
    "update_verify_result",
    "compact_active_slots",
]
