"""The verify-side ops of one point on a device: SGLang's chain and the visited-rows kernel.

:class:`VerifyOps` holds the point's tensors on the device (bfloat16 logits ``[B*n, V]``, the
trees, coins, SGLang's tree inputs) and one method per op; :meth:`VerifyOps.ops` lists them
with their bytes from tensor sizes, :meth:`VerifyOps.chains` the chains timed as one call
(eager: the ops back to back; graph: one CUDA graph).

SGLang's chain at a contract point (temperature 1, top-k/top-p off): ``softmax(logits / T)``
over all rows, a zero-filled ``draft_probs``, tree speculative sampling. With top-k/top-p on it
adds ``top_k_renorm_prob`` and ``top_p_renorm_prob`` over all rows (torch here, with
:data:`TOP_K` and :data:`TOP_P`). Greedy: ``argmax`` over all rows and ``verify_tree_greedy``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import verify_kernels as vk
from .verify_inputs import VerifyInputs

__all__ = ["TOP_K", "TOP_P", "Op", "VerifyOps", "softmax_rows", "top_k_renorm", "top_p_renorm"]

#: top-k and top-p of the renormalisation ops (timed as SGLang runs them when they are on).
TOP_K = 20
TOP_P = 0.9


@dataclass
class Op:
    """An op to time: its name, the call, and the bytes it moves (from tensor sizes)."""

    name: str
    fn: object
    bytes: int
    note: str = ""


def softmax_rows(logits: torch.Tensor, row_temperatures: torch.Tensor) -> torch.Tensor:
    """``softmax(logits / T)`` per row in float32 (SGLang's ``target_probs``)."""
    return torch.softmax(logits.float() / row_temperatures, dim=-1)


def top_k_renorm(probs: torch.Tensor, k: int) -> torch.Tensor:
    """``top_k_renorm_prob``: keep the probabilities ``>=`` the k-th largest of each row (ties
    kept), renormalise."""
    threshold = torch.topk(probs, k, dim=-1).values[:, -1:]
    kept = torch.where(probs >= threshold, probs, 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)


def top_p_renorm(probs: torch.Tensor, p: float) -> torch.Tensor:
    """``top_p_renorm_prob``: keep the probabilities ``>= tau`` (``tau`` the largest value
    whose kept mass is ``>= p``, ties kept), renormalise."""
    ordered = torch.sort(probs, dim=-1, descending=True).values
    mass = torch.cumsum(ordered, dim=-1)
    at = torch.searchsorted(mass, torch.full((probs.shape[0], 1), p, device=probs.device,
                                             dtype=mass.dtype))
    tau = torch.gather(ordered, 1, at.clamp(max=probs.shape[1] - 1))
    kept = torch.where(probs >= tau, probs, 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)


def _tensor(array, device, dtype=None) -> torch.Tensor:
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor.to(device=device, dtype=dtype) if dtype else tensor.to(device)


class VerifyOps:
    """One point's verify ops on ``device`` (see the module)."""

    def __init__(self, inputs: VerifyInputs, device: torch.device):
        call, tree = inputs.call, inputs.tree
        b, n, v = inputs.batch, inputs.nodes, inputs.vocab
        self.inputs, self.device = inputs, device
        self.b, self.n, self.v, self.s = b, n, v, call.steps
        # bfloat16 is exact: every logit of the call is a widened bfloat16.
        self.logits = _tensor(call.target_logits.reshape(b * n, v), device, torch.bfloat16)
        self.temperatures = _tensor(call.temperatures, device)
        self.row_temperatures = self.temperatures.repeat_interleave(n).reshape(b * n, 1)
        self.tree_arrays = [_tensor(a, device) for a in (
            call.candidates, call.retrive_index, call.retrive_next_token,
            call.retrive_next_sibling)]
        self.coins = _tensor(call.uniform_samples, device)
        self.coin_final = _tensor(call.uniform_samples_for_final_sampling, device)
        self.sglang = [_tensor(a, device) for a in (tree.parent_list, tree.selected_index,
                                                     tree.verified_seq_len)]
        self.max_children = max(1, _max_children(call.retrive_next_token,
                                                 call.retrive_next_sibling))
        self.probs = softmax_rows(self.logits, self.row_temperatures)

    # --- outputs ---------------------------------------------------------------------------

    def fresh_outputs(self) -> dict[str, torch.Tensor]:
        """``predicts`` [B*n] and ``accept_index`` [B, S] filled with -1,
        ``accept_token_num`` [B] zero (int32, SGLang's)."""
        return {"predicts": torch.full((self.b * self.n,), -1, dtype=torch.int32,
                                       device=self.device),
                "accept_index": torch.full((self.b, self.s), -1, dtype=torch.int32,
                                           device=self.device),
                "accept_token_num": torch.zeros(self.b, dtype=torch.int32, device=self.device)}

    def fresh_tree_outputs(self) -> dict[str, torch.Tensor]:
        """``build_tree_kernel_efficient``'s outputs, pre-filled as SGLang does (mask zero,
        links -1)."""
        tree, b, n = self.inputs.tree, self.b, self.n
        mask = (torch.zeros(b * n * _packed_stride(n), dtype=torch.uint8, device=self.device)
                if tree.mode == 2 else torch.zeros(b * n * n, dtype=torch.bool,
                                                   device=self.device))
        return {"tree_mask": mask,
                "positions": torch.zeros(b * n, dtype=torch.int64, device=self.device),
                "retrive_index": torch.zeros((b, n), dtype=torch.int64, device=self.device),
                "retrive_next_token": torch.full((b, n), -1, dtype=torch.int64,
                                                 device=self.device),
                "retrive_next_sibling": torch.full((b, n), -1, dtype=torch.int64,
                                                   device=self.device)}

    # --- the ops ---------------------------------------------------------------------------

    def softmax(self) -> torch.Tensor:
        """SGLang's ``target_probs`` over all ``B*n`` rows."""
        return softmax_rows(self.logits, self.row_temperatures)

    def draft_zero(self) -> torch.Tensor:
        """SGLang's zero-filled ``draft_probs`` [B*n, V]."""
        return torch.zeros((self.b * self.n, self.v), dtype=torch.float32, device=self.device)

    def tree_sampling(self, probs, draft, out) -> None:
        """``tree_speculative_sampling_target_only`` on ``probs`` into ``out``."""
        vk.tree_sampling_target_only(out["predicts"], out["accept_index"],
                                     out["accept_token_num"], *self.tree_arrays, self.coins,
                                     self.coin_final, probs, draft)

    def argmax(self) -> torch.Tensor:
        """``target_predict``: the argmax of every row (int64 [B*n])."""
        return torch.argmax(self.logits, dim=-1)

    def greedy(self, target_predict, out) -> None:
        """``verify_tree_greedy`` into ``out``."""
        vk.verify_tree_greedy(out["predicts"], out["accept_index"], out["accept_token_num"],
                              *self.tree_arrays, target_predict)

    def build_tree(self, out) -> None:
        """``build_tree_kernel_efficient`` into ``out``."""
        tree = self.inputs.tree
        vk.build_tree(*self.sglang, out["tree_mask"], out["positions"], out["retrive_index"],
                      out["retrive_next_token"], out["retrive_next_sibling"], tree.topk,
                      tree.depth, tree.n, tree.mode)

    def visited_rows(self, out) -> None:
        """The visited-rows kernel into ``out``."""
        vk.visited_rows_verify(out["predicts"], out["accept_index"], out["accept_token_num"],
                               *self.tree_arrays, self.coins, self.coin_final, self.logits,
                               self.temperatures, max_children=self.max_children)

    # --- what is timed ---------------------------------------------------------------------

    def ops(self, visited_rows: int, decisions: int) -> list[Op]:
        """Every op with its bytes: full passes count their tensors (bfloat16 logits 2 bytes,
        float32 probabilities 4); the walks count the rows they read (``visited_rows``: the
        golden's rows read, ``decisions``: children decided) — the visited-rows kernel reads
        each visited row once and re-reads the final row (counted whole, an upper bound); the
        tree sampler reads the final row twice, with its draft row unless all S-1 accepted
        (counted with it)."""
        rows, v, b = self.b * self.n, self.v, self.b
        probs, draft = self.probs, self.draft_zero()
        out, tree_out = self.fresh_outputs(), self.fresh_tree_outputs()
        target_predict = self.argmax()
        walk = decisions * (8 * 3 + 4 + 4) + b * self.s * 8
        tree_bytes = sum(t.numel() * t.element_size() for t in self.sglang) + sum(
            t.numel() * t.element_size() for t in tree_out.values())
        return [
            Op("softmax", self.softmax, rows * v * (2 + 4)),
            Op("top_k_renorm", lambda: top_k_renorm(probs, TOP_K), rows * v * 4 * 3,
               f"k = {TOP_K}; torch topk + mask + normalise"),
            Op("top_p_renorm", lambda: top_p_renorm(probs, TOP_P), rows * v * 4 * 5,
               f"p = {TOP_P}; torch sort + cumsum + mask + normalise"),
            Op("draft_probs_zero", self.draft_zero, rows * v * 4),
            Op("tree_sampling", lambda: self.tree_sampling(probs, draft, out),
               walk + b * 2 * v * 4 * 2),
            Op("argmax", self.argmax, rows * v * 2 + rows * 8),
            Op("verify_tree_greedy", lambda: self.greedy(target_predict, out), walk),
            Op("build_tree", lambda: self.build_tree(tree_out), tree_bytes,
               f"mask mode {self.inputs.tree.mode}"),
            Op("visited_rows", lambda: self.visited_rows(out),
               (visited_rows + b) * v * 2 + walk),
        ]

    def chains(self, op_bytes: dict[str, int]) -> list[Op]:
        """The chains timed as one call: SGLang's sampling chain at the contract setting
        (softmax, zero-filled draft, tree sampling), with top-k/top-p renormalisation, and the
        greedy chain (argmax, ``verify_tree_greedy``)."""

        def sampling():
            out = self.fresh_outputs()
            self.tree_sampling(self.softmax(), self.draft_zero(), out)

        def renorm():
            out = self.fresh_outputs()
            probs = top_p_renorm(top_k_renorm(self.softmax(), TOP_K), TOP_P)
            self.tree_sampling(probs, self.draft_zero(), out)

        def greedy():
            self.greedy(self.argmax(), self.fresh_outputs())

        def total(*names):
            return sum(op_bytes[name] for name in names)

        return [
            Op("sglang_chain", sampling, total("softmax", "draft_probs_zero", "tree_sampling"),
               "softmax + zero-filled draft_probs + tree sampling (top-k/top-p off)"),
            Op("sglang_chain_renorm", renorm,
               total("softmax", "top_k_renorm", "top_p_renorm", "draft_probs_zero",
                     "tree_sampling"), f"with top-k {TOP_K} and top-p {TOP_P}"),
            Op("greedy_chain", greedy, total("argmax", "verify_tree_greedy"),
               "argmax over all rows + verify_tree_greedy"),
        ]


def _packed_stride(n: int) -> int:
    from golden.tree_mask import sglang_packed_row_bytes

    return sglang_packed_row_bytes(n)


def _max_children(next_token: np.ndarray, next_sibling: np.ndarray) -> int:
    """The most children of any node of the trees (a sibling walk's length)."""
    most = 0
    for nxt, sib in zip(next_token, next_sibling, strict=True):
        for node in range(len(nxt)):
            count, child = 0, int(nxt[node])
            while child >= 0:
                count, child = count + 1, int(sib[child])
            most = max(most, count)
    return most
