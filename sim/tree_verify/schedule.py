"""The fused verify's schedule: the cycles of one request as a formula of the build, the memory
latency and the request's walk (docs/tree_verify.md, "Schedule").

``request_cycles`` counts the clocks from the ``cmd`` transfer to the request's last
``result`` beat (inclusive, as ``status.cycles`` reads the clock after it) without idle or
back-pressure and with every read port answering each burst after a fixed ``latency``
clocks. It follows the kernel's states one by one; the tests hold it equal to the simulated
cycles, so the formula extends the measured builds to ones too large to simulate.
"""

from dataclasses import dataclass

import numpy as np

from hw.kernels.tree_verify import MUL_PIECES, ROOT_START, TOKEN_LANE_LATENCY
from hw.kernels.tree_verify_lane import KEY_BITS, LogitLane
from hw.kernels.tree_verify_loader import merge_latency
from hw.kernels.tree_verify_params import TreeVerifyParams, chunk_words
from hw.lib.float32 import Float32Add
from hw.lib.float32_divide import divide_latency

__all__ = ["Costs", "request_cycles", "call_cycles"]

_ONE = 0x3F80_0000


@dataclass(frozen=True)
class Costs:
    """The clocks of the kernel's states for a build (constants of its sub-units)."""

    params: TreeVerifyParams
    latency: int  # the memory's fixed latency per burst

    # Units (hw.lib.wide_divide, hw.lib.float32, hw.kernels.tree_verify_lane).
    temperature: int = 30  # TemperatureScale.latency
    ratio: int = 32  # RatioToFloat32.latency
    add: int = Float32Add.latency
    divide: int = divide_latency()  # Float32Divide().latency
    lane: int = LogitLane.LATENCY
    token_lane: int = TOKEN_LANE_LATENCY  # the token lane behind its input register
    multiply: int = MUL_PIECES + 1  # MULTIPLY, then SCALE (hw.kernels.tree_verify)

    @property
    def tree_levels(self) -> int:
        return (self.params.lanes - 1).bit_length()

    def words(self, vocab: int) -> tuple[int, int]:
        """``(chunk, port 0's words)`` of a row of ``vocab`` logits."""
        chunk = chunk_words(vocab, self.params)
        row_words = -(-vocab // self.params.port_logits)
        return chunk, min(chunk, row_words)

    def read(self, vocab: int) -> int:
        """Clocks from the loaders' start to their last one busy: the bursts out, the
        latency, port 0's words, the max pipeline."""
        _, first = self.words(vocab)
        return first + self.latency + 4 + (self.params.port_logits.bit_length() - 1)

    def load(self, vocab: int, *, row_at: int = ROOT_START) -> int:
        """ROW, LOADING (the read, the merge) and LOADED, from ROW at clock ``row_at`` of the
        request; the root's read starts at clock ``ROOT_START`` whatever ``row_at`` (at
        least ``ROOT_START``), other rows' at ROW (the default)."""
        waited = max(1, self.read(vocab) + ROOT_START + 1 - row_at)
        return 1 + waited + merge_latency(self.params.read_ports) + 1

    def pass_(self, words: int) -> int:
        """A lane pass over ``words`` bank words: issue, lanes, adder tree, drain."""
        return words + self.tree_levels + self.lane + 4

    def row(self, vocab: int, *, greedy: bool, top_k: bool, top_p: bool,
            row_at: int = ROOT_START) -> int:
        """One visited row up to its first decision (STEP included), its ROW at clock
        ``row_at`` of the request (see ``load``)."""
        cycles = self.load(vocab, row_at=row_at) + 1  # + STEP
        if greedy:
            return cycles
        chunk, _ = self.words(vocab)
        one = self.pass_(chunk)
        cycles += self.add + 1 + 1 + one + 1  # CONSTANTS, PASS_ALL, its pass, KEPT
        if top_k:
            cycles += KEY_BITS * (2 + one) + 1 + 1 + one  # SEARCH..., TOPK_PASS, its pass
        if top_p:
            # TOP_P, MULTIPLY, SCALE, TOP_P_ROUND, TOP_P_CEIL, the search, FINAL_PASS
            cycles += 1 + self.multiply + 1 + 2 + KEY_BITS * (2 + one) + 1 + 1 + one
        return cycles

    def decision(self, *, greedy: bool, kept: bool, accepted: bool, divide: bool) -> int:
        """One child: its node, its test, ACCEPT (and the accepted node's read) or REJECT."""
        end = 3 if accepted else 1
        if greedy:
            return 2 + 1 + end
        ratio = 1 + self.ratio if kept else 0
        wait = self.add + 1 + (self.divide if divide else 0)
        return 2 + 2 + self.token_lane + 1 + ratio + 1 + wait + end

    def draw(self, vocab: int, bank: int, block: int) -> int:
        """DRAW_BANK .. DRAW_LANES: banks up to ``bank``, its blocks up to ``block``, the
        block's pass, the word's tokens through the token lane."""
        p = self.params
        chunk, _ = self.words(vocab)
        return ((bank + 1) + (block + 3) + 1 + self.pass_(min(p.block_words, chunk)) + 1
                + (p.port_logits + self.token_lane + 1))


def _draw_place(costs: Costs, trace: dict, vocab: int):
    """``(bank, block)`` the draw scans to, or None when it needs no scan (no residual mass
    left, or a negative coin)."""
    p = costs.params
    distribution = trace["distribution"]
    terms = np.where(distribution.kept, distribution.term, 0)
    terms[list(trace["removed"])] = 0
    coin = np.float32(trace["coin_final"])
    if not terms.any() or (np.signbit(coin) and coin != 0):
        return None
    chunk, _ = costs.words(vocab)
    word = trace["bonus"] // p.port_logits
    bank, bank_word = divmod(word, chunk)
    return bank, bank_word // p.block_words


def request_cycles(costs: Costs, call, b: int, trace: dict) -> int:
    """The cycles of request ``b`` of ``call`` (its golden ``trace``, see the module)."""
    vocab, n = call.vocab_size, call.nodes
    greedy = trace["greedy"]
    top_k = call.top_k is not None and 0 < int(call.top_k[b]) < vocab
    top_p = call.top_p is not None and np.float32(call.top_p[b]) < 1
    threshold_acc = np.float32(max(np.float32(call.threshold_acc), np.float32(1e-9)))
    divide = int(threshold_acc.view(np.uint32)) != _ONE
    cycles = 1 + (n + 1) + 1 + 1 + (1 if greedy else costs.temperature - 1)
    passes = dict(greedy=greedy, top_k=top_k, top_p=top_p)
    children = sum(accepted for *_, accepted in trace["decisions"])
    cycles += costs.row(vocab, row_at=cycles, **passes) + children * costs.row(vocab, **passes)
    cycles += sum(costs.decision(greedy=greedy, kept=kept, accepted=accepted, divide=divide)
                  for _, _, kept, accepted in trace["decisions"])
    cycles += 1  # FINAL
    if not greedy:
        cycles += costs.multiply + 1 + 1  # MULTIPLY, SCALE, DRAW
        place = _draw_place(costs, trace, vocab)
        if place is not None:
            cycles += costs.draw(vocab, *place)
    return cycles + 1  # EMIT


def call_cycles(params: TreeVerifyParams, call, traces, *, latency: int) -> list[int]:
    """``request_cycles`` of every request of ``call`` (``traces``: the golden's)."""
    costs = Costs(params, latency)
    return [request_cycles(costs, call, b, trace) for b, trace in enumerate(traces)]

