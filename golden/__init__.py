"""Numpy golden models of the EAGLE tree-speculation control kernels.

Each op follows the in-place ABI of docs/kernels.md §0: the same arguments, in the same
order, as the CUDA/torch op it mirrors; outputs are written into the given arrays and the op
returns ``None``. Every op of the project is importable from here. (Functional wrappers stay in
their modules, e.g. ``golden.logits_to_probas.logits_to_probas``: a package attribute of the
same name would shadow the module.)
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
from .lfsr import GaloisLFSR32Model
from .logits_to_probas import (
    GREEDY_TEMPERATURE,
    MAX_REL_ERROR,
    MAX_SUM_ERROR,
    MAX_TEMPERATURE,
    MAX_ULP_ERROR,
    convert_logits_to_probas,
    softmax_reference,
)
from .reject_sample import (
    draft_tree_reject_sample,
    lfsr_coins,
    tree_speculative_sampling_target_only,
    verify_tree_greedy,
)
from .sampling import (
    FILTER_APPLY_ORDERS,
    REJMASK_MAX_CHILDREN,
    check_rejmask_tree,
    process_accept_index_evict_mask_fused,
    top_k_renorm_probs,
    top_k_top_p_sampling_from_probs,
    top_p_renorm_probs,
    tree_speculative_sampling_target_only_rejmask,
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
from .tree_verify import (
    draft_tree_reject_sample_from_logits,
    tree_speculative_sampling_from_logits,
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
    "GaloisLFSR32Model",
    "convert_logits_to_probas",
    "softmax_reference",
    "GREEDY_TEMPERATURE",
    "MAX_TEMPERATURE",
    "MAX_REL_ERROR",
    "MAX_ULP_ERROR",
    "MAX_SUM_ERROR",
    "tree_speculative_sampling_target_only",
    "verify_tree_greedy",
    "tree_speculative_sampling_from_logits",
    "draft_tree_reject_sample_from_logits",
    "draft_tree_reject_sample",
    "lfsr_coins",
    "top_k_renorm_probs",
    "top_p_renorm_probs",
    "top_k_top_p_sampling_from_probs",
    "FILTER_APPLY_ORDERS",
    "tree_speculative_sampling_target_only_rejmask",
    "REJMASK_MAX_CHILDREN",
    "check_rejmask_tree",
    "process_accept_index_evict_mask_fused",
]
