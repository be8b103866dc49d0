"""The inputs of one verify step at a point: the cycle budget's own generators.

``sim.tree_verify.generators.verify_step_call`` (the fused verify's measurement: the K4
golden's verify trees of full-width draft rounds, EAGLE-like bfloat16 logits, uniform coins,
temperature 1, top-k/top-p off, the contract's seed) gives the walk's inputs. The verify-tree
build needs SGLang's form of the same trees (``parent_list``, ``selected_index``): they are
derived from the draft round that ``sim.tree_mask.vectors.grown_call`` grows with the same
arguments as the measurement's ``verify_step_tree``, and the golden
``build_tree_kernel_efficient`` on them must give the measurement's retrive arrays
(:func:`sglang_tree`), which proves both are the same trees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from golden.tree_mask import SGLANG_MAX_PACKED_DRAFT_TOKENS, TreeMaskMode, verify_set_size
from sim.targets import draft_round_node_count
from sim.tree_mask.vectors import grown_call, verify_set
from sim.tree_verify.call import Call
from sim.tree_verify.generators import verify_step_call

__all__ = ["SglangTree", "VerifyInputs", "verify_inputs", "sglang_tree", "mask_mode"]


@dataclass
class SglangTree:
    """``build_tree_kernel_efficient``'s inputs for the point's trees: ``parent_list`` [B, L],
    ``selected_index`` [B, n-1], ``verified_seq_len`` [B] (int64), ``topk``, ``depth``
    (SGLang's ``spec_steps``), ``n`` and the mask mode (:func:`mask_mode`)."""

    parent_list: np.ndarray
    selected_index: np.ndarray
    verified_seq_len: np.ndarray
    topk: int
    depth: int
    n: int
    mode: int


@dataclass
class VerifyInputs:
    """One point's verify step: the fused verify's measurement call and SGLang's tree."""

    point: dict
    call: Call
    tree: SglangTree

    @property
    def batch(self) -> int:
        """B."""
        return self.call.candidates.shape[0]

    @property
    def nodes(self) -> int:
        """n, the verify tree's positions."""
        return self.call.candidates.shape[1]

    @property
    def vocab(self) -> int:
        """V."""
        return self.call.target_logits.shape[2]


def mask_mode(n: int) -> int:
    """The mask mode SGLang would run at ``n`` nodes: bit-packed rows up to 32 nodes (its
    limit), the ``n x n`` bool tree mask (``QLEN_ONLY``) above."""
    return int(TreeMaskMode.QLEN_ONLY_BITPACKING if n <= SGLANG_MAX_PACKED_DRAFT_TOKENS
               else TreeMaskMode.QLEN_ONLY)


def sglang_tree(point: dict, seed: int) -> SglangTree:
    """SGLang's ``build_tree_kernel_efficient`` inputs for the point's verify trees.

    The draft round is full width (``W = K`` at every depth, as the measurement asserts), so
    SGLang's flattened ``score_list`` index of node ``g`` is ``g - 1`` (K first-depth scores,
    then ``K * K`` per depth) and block row ``r >= 1`` holds nodes ``r*K + 1 ..``, whose parent
    is ``parent_list[b, r] = prev_indexs[b, r*K + 1] - 1``; ``selected_index`` lists the verify
    set without the root, ascending, minus one.
    """
    k, width, depth = point["node_top_k"], point["tree_width"], point["depth"]
    if width != k:
        raise ValueError(f"SGLang's tree layout needs tree_width == node_top_k, not {width} "
                         f"and {k} (point {point['id']})")
    nodes = draft_round_node_count(k, width, depth)
    call = grown_call(f"verify step tree K={k} W={width} depth={depth}", seed=seed,
                      batch=point["batch"], k=k, width=width, depths=depth, maxn=nodes,
                      verify_num=point["verify_num"], mode=1, vocab=point["vocab"])
    if call.cumu_count != nodes:
        raise ValueError(f"the draft round stopped at {call.cumu_count} nodes, not {nodes}")
    rows = k * (depth - 1) + 1
    parent_list = np.full((point["batch"], rows), -1, np.int64)
    parent_list[:, 1:] = call.prev_indexs[:, np.arange(1, rows) * k + 1] - 1
    selected = np.stack([ids[1:] - 1 for ids in verify_set(call, point["verify_num"])])
    n = verify_set_size(point["verify_num"], nodes)
    return SglangTree(parent_list, selected.astype(np.int64), call.seq_lens.astype(np.int64),
                      k, depth, n, mask_mode(n))


def verify_inputs(point: dict, seed: int) -> VerifyInputs:
    """The point's verify step (see the module)."""
    call = verify_step_call(seed=seed, batch=point["batch"], node_top_k=point["node_top_k"],
                            tree_width=point["tree_width"], depth=point["depth"],
                            verify_num=point["verify_num"], vocab=point["vocab"],
                            logit_format="bfloat16")
    return VerifyInputs(point, call, sglang_tree(point, seed))
