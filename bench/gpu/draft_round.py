"""One point's draft round on a device: inputs, the round, its per-depth ops.

Inputs (:func:`draft_inputs`): the golden draft round (``golden.draft_round``) on the verify
measurement's trees — the config and sampler of ``sim.tree_mask.vectors.grown_call`` (the
point's K, width cap and depths at full width, ``synthetic_sampler(seed, V, K)``, root tokens
from the seed) — with fp16 hidden states of ``H`` elements added to every sample from a
stream of their own (so the trees stay the measurement's) and a ``hot_token_id`` table (a
permutation of ``V``, the remap on). The golden's :class:`golden.DepthRecord` per depth is
what the device's K1, K2 and K3 are checked against.

The device round (:class:`DeviceRound`) keeps the cumulative tree in device memory across
depths, as SGLang does: ``begin_round`` (the state's initial values, §4), then per depth K1,
K2, (depth 1: the raw first-layer scores, §4), K3 and the glue that makes the next frontier
(the first ``W'`` outputs and the next tree mask). The widths are the golden's (the contract
trees are full width; K3's ``work_deltas`` are checked bit-exact, so the policy would choose
the same), so the round has static shapes and can be one CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from golden import ROOT_SCORE, DraftRoundConfig, DraftRoundResult, DraftSample, draft_round
from golden import synthetic_sampler as golden_sampler
from sim.targets import draft_round_node_count

from . import draft_kernels as dk

__all__ = ["MAX_INPUT_SIZE", "DraftInputs", "draft_inputs", "DeviceRound"]

#: ``max_input_size`` of the rounds (``grown_call``'s).
MAX_INPUT_SIZE = 4096


@dataclass
class DraftInputs:
    """A point's golden draft round and what it was run with."""

    point: dict
    config: DraftRoundConfig
    root_tokens: np.ndarray
    hot_token_id: np.ndarray
    result: DraftRoundResult


def _with_hidden(sample, hidden_size: int, seed: int):
    """``sample`` with fp16-exact hidden states [B, W, H] from a stream of their own."""
    rng = np.random.default_rng([seed, hidden_size])

    def draw(depth, frontier):
        drawn = sample(depth, frontier)
        b, w = frontier.node_ids.shape
        hidden = rng.standard_normal((b, w, hidden_size), dtype=np.float32)
        return DraftSample(drawn.probas, drawn.tokens,
                           hidden.astype(np.float16).astype(np.float32))

    return draw


def draft_inputs(point: dict, seed: int) -> DraftInputs:
    """The point's golden draft round (see the module)."""
    k, width, depth, vocab = (point[key] for key in ("node_top_k", "tree_width", "depth",
                                                     "vocab"))
    config = DraftRoundConfig(
        batch_size=point["batch"], node_top_k=k, max_tree_width=width, depths=depth,
        verify_num=point["verify_num"], max_verify_num=point["verify_num"],
        max_node_count=draft_round_node_count(k, width, depth), max_input_size=MAX_INPUT_SIZE,
        hidden_size=point["hidden_size"], sort_width=64 if k * width <= 64 else 128)
    root = np.random.default_rng(seed).integers(0, vocab, point["batch"]).astype(np.int64)
    hot = np.random.default_rng([seed, 1]).permutation(vocab).astype(np.int64)
    sample = _with_hidden(golden_sampler(seed, vocab, k), point["hidden_size"], seed)
    result = draft_round(config, sample, root, hot_token_id=hot)
    return DraftInputs(point, config, root, hot, result)


def _dev(array, device, dtype=None) -> torch.Tensor:
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    return tensor.to(device=device, dtype=dtype) if dtype else tensor.to(device)


class DeviceRound:
    """The draft round of :class:`DraftInputs` on ``device`` (see the module)."""

    def __init__(self, inputs: DraftInputs, device: torch.device):
        cfg = inputs.config
        self.inputs, self.device, self.cfg = inputs, device, cfg
        self.records = inputs.result.depths
        self.hot = _dev(inputs.hot_token_id, device)
        self.root = _dev(inputs.root_tokens, device)
        self.samples = [(_dev(r.sample.probas, device), _dev(r.sample.tokens, device),
                         _dev(r.sample.hidden_states, device, torch.float16))
                        for r in self.records]
        b, k, maxn, maxv = cfg.batch_size, cfg.node_top_k, cfg.max_node_count, \
            cfg.max_verify_num

        def zeros(*shape, dtype=torch.int64):
            return torch.zeros(shape, dtype=dtype, device=device)

        self.state = {
            "cumu_tokens": zeros(b, maxn), "cumu_scores": zeros(b, maxn, dtype=torch.float32),
            "cumu_deltas": zeros(b, maxn), "prev_indexs": zeros(b, maxn),
            "next_indexs": zeros(b, maxn), "side_indexs": zeros(b, maxn),
            "output_scores": zeros(b, k, dtype=torch.float32), "output_tokens": zeros(b, k),
            "work_scores": zeros(b, maxv + k, dtype=torch.float32),
            "sort_scores": zeros(b, maxv, dtype=torch.float32),
            "output_tree_mask": zeros(b, k, cfg.max_input_size + 1, dtype=torch.bool)}
        self.depth_out = [self._depth_buffers(r.tree_width) for r in self.records]

    def _depth_buffers(self, w: int) -> dict[str, torch.Tensor]:
        b, k, h, dev = self.cfg.batch_size, self.cfg.node_top_k, self.cfg.hidden_size, \
            self.device
        n = w * k
        return {"tokens": torch.zeros((b, n), dtype=torch.int64, device=dev),
                "curr": torch.zeros((b, n), dtype=torch.float32, device=dev),
                "sorted_s": torch.zeros((b, n), dtype=torch.float32, device=dev),
                "sorted_i": torch.zeros((b, n), dtype=torch.int64, device=dev),
                "cache": torch.zeros((b, k), dtype=torch.int64, device=dev),
                "parents": torch.zeros((b, k), dtype=torch.int64, device=dev),
                "hidden": torch.zeros((b, k, h), dtype=torch.float16, device=dev),
                "deltas": torch.zeros(k + 1, dtype=torch.float32, device=dev)}

    # --- the round's steps -----------------------------------------------------------------

    def begin_round(self) -> None:
        """The state before depth 1 (§4): only the root valid, scores 1.001f."""
        s = self.state
        for name in ("cumu_tokens", "cumu_deltas", "prev_indexs", "next_indexs",
                     "side_indexs", "output_tokens"):
            s[name].fill_(-1)
        for name in ("cumu_scores", "output_scores", "work_scores", "sort_scores"):
            s[name].zero_()
        s["output_tree_mask"].zero_()
        s["cumu_tokens"][:, 0] = self.root
        s["cumu_scores"][:, 0] = float(ROOT_SCORE)
        s["cumu_deltas"][:, 0] = 0
        s["sort_scores"][:, 0] = float(ROOT_SCORE)
        s["work_scores"][:, 0] = float(ROOT_SCORE)

    def frontier(self, d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """Depth ``d``'s frontier (node ids, scores), tree mask and input count: the root at
        depth 0, else the first W of the previous depth's outputs (the glue between depths)."""
        b, w = self.cfg.batch_size, self.records[d].tree_width
        if d == 0:
            return (torch.zeros((b, 1), dtype=torch.int64, device=self.device),
                    torch.ones((b, 1), dtype=torch.float32, device=self.device),
                    torch.zeros((b, 1, 0), dtype=torch.bool, device=self.device), 1)
        previous, old_cols = self.depth_out[d - 1], self.records[d - 1].input_count - 1
        mask = torch.zeros((b, w, old_cols + w), dtype=torch.bool, device=self.device)
        mask[:, :, :old_cols] = self.state["output_tree_mask"][:, :w, :old_cols]
        diagonal = torch.arange(w, device=self.device)
        mask[:, diagonal, old_cols + diagonal] = True
        return (previous["cache"][:, :w].contiguous(),
                self.state["output_scores"][:, :w].contiguous(), mask, old_cols + 1 + w)

    def k1(self, d: int, last_scores: torch.Tensor) -> None:
        """K1 at depth ``d`` (the sampled tokens copied first: the remap is in place)."""
        rec, out = self.records[d], self.depth_out[d]
        probas, tokens, hidden = self.samples[d]
        out["tokens"].copy_(tokens)
        dk.score(probas, out["tokens"], last_scores, out["curr"], out["sorted_s"],
                 out["sorted_i"], out["cache"], out["parents"], hidden, out["hidden"],
                 self.hot, self.cfg.batch_size, self.cfg.node_top_k, rec.tree_width,
                 rec.cumu_count, True, sort_width=self.cfg.sort_width)

    def k2(self, d: int, node_ids: torch.Tensor, mask: torch.Tensor, input_count: int) -> None:
        """K2 at depth ``d`` (and, at depth 1, the raw first-layer scores of §4)."""
        rec, out, cfg, s = self.records[d], self.depth_out[d], self.cfg, self.state
        dk.update_state(out["curr"], out["tokens"], out["sorted_s"], out["sorted_i"],
                        out["parents"], node_ids, mask, cfg.batch_size, cfg.node_top_k,
                        rec.tree_width, input_count, rec.cumu_count, cfg.verify_num,
                        rec.depth, cfg.max_input_size, cfg.max_node_count,
                        cfg.max_verify_num, *(s[name] for name in (
                            "cumu_tokens", "cumu_scores", "cumu_deltas", "prev_indexs",
                            "next_indexs", "side_indexs", "output_scores", "output_tokens",
                            "work_scores", "sort_scores", "output_tree_mask")))
        if rec.depth == 1:
            n = rec.tree_width * cfg.node_top_k
            s["cumu_scores"][:, rec.cumu_count:rec.cumu_count + n] = self.samples[d][0]

    def k3(self, d: int) -> None:
        """K3 at depth ``d``."""
        rec, cfg = self.records[d], self.cfg
        dk.work_deltas(self.state["work_scores"], self.depth_out[d]["deltas"], cfg.batch_size,
                       cfg.node_top_k, rec.cumu_count, cfg.verify_num, cfg.max_verify_num)

    def depth(self, d: int) -> None:
        """One whole depth: the frontier glue, K1, K2, K3."""
        node_ids, scores, mask, input_count = self.frontier(d)
        self.k1(d, scores)
        self.k2(d, node_ids, mask, input_count)
        self.k3(d)

    def run(self) -> None:
        """The whole round: ``begin_round`` and every depth."""
        self.begin_round()
        for d in range(len(self.records)):
            self.depth(d)
