"""K6 tree rejection sampling and greedy tree verify in hardware (docs/kernels.md §8).

Bit-exact with ``golden.tree_speculative_sampling_target_only``,
``golden.draft_tree_reject_sample`` (LFSR coins) and ``golden.verify_tree_greedy``. One request
is one ``cmd`` beat and ``n`` ``tree`` beats (positions ``0..n-1``); the kernel reads
``target_probs`` through the variable-latency, in-order ``read_address``/``read_data`` port and
answers with one ``result`` packet (``accept_index``/``predicts`` pairs) and, in sampling mode,
the ``draft_probs`` writes on ``draft_write``. Requests are processed one after the other: load
(overlapping the walk), the §8 walk (``State.ROOT``/``WALK``), the final row (``State.ROW`` ..
``PASS2``: the residual streamed once through ``hw.kernels.reject_scan.ExactSumScanner``, plus
one rescanned segment) and the last result beat (``EMIT``).

``target_probs`` is word-addressed, ``lanes`` float32 per word: element ``(node, j)`` of a
request is lane ``j % lanes`` of word ``row_address + node * row_words + j // lanes``;
``draft_write`` names elements the same way. The design (speculative epochs, the residual
without reading ``draft_probs``, the exact final-row sum) and the cycle figures are in
docs/reject_sample.md.
"""

from dataclasses import asdict, dataclass

import numpy as np
from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from hw.lib.component import KernelComponent
from hw.lib.float32 import (
    Float32Add,
    Float32Multiply,
    float32_fields,
    float32_less,
    float32_less_equal,
)
from hw.lib.float32_divide import Float32Divide
from hw.lib.lfsr import GaloisLFSR32
from hw.lib.logic import first_set, or_tree
from hw.lib.params import ParameterError, ParameterRecord, index_bits, parameter
from hw.lib.pipeline import stage
from hw.lib.stream import RegisterSlice, packet_layout, stalling_handshake

from .reject_scan import ExactSumScanner

__all__ = ["RejectSampleParams", "RejectSample", "State", "synthesis_parameters",
           "synthesis_configuration", "ONE", "MIN_THRESHOLD_ACC"]

#: float32 bit pattern of 1.0.
ONE = 0x3F80_0000
#: ``float32(1e-9)``: the golden divides by ``float32(max(threshold_acc, 1e-9))``, which is
#: ``max(float32(threshold_acc), MIN_THRESHOLD_ACC)`` for every float32 threshold.
MIN_THRESHOLD_ACC = int(np.array(1e-9, np.float32).view(np.uint32))
#: Epoch tag bits of speculative walker work (one bump per accept).
EPOCH_BITS = 3
#: Depth of the FIFO of returned probabilities waiting for the serial adder.
Q_DEPTH = 8


class State(enum.Enum, shape=4):
    """The request sequencer's states, in request order."""

    IDLE = 0  # waiting for `cmd`
    ROOT = 1  # the root is stored: take its row
    WALK = 2  # the §8 traversal
    ROW = 3  # greedy or error: emit; sampling: start the final row's first pass
    PASS1 = 4  # first pass: total, segment sums, first and last positive residual
    SUM = 5  # u = final_coin * total
    DECIDE = 6  # NaN or negative u: pick at once; else search
    SEARCH = 7  # binary search over the stored segment sums
    COMPARE = 8  # (its compare clock)
    FOUND = 9  # start the rescan of the segment holding the pick
    PASS2 = 10  # the rescan
    EMIT = 11  # the last result beat
    DRAIN = 12  # the rest of the request's tree beats


#: The states counted in ``status.row_cycles`` (end of the walk to the last result beat).
_FINAL_ROW_STATES = (State.ROW, State.PASS1, State.SUM, State.DECIDE, State.SEARCH,
                     State.COMPARE, State.FOUND, State.PASS2, State.EMIT)


@dataclass(frozen=True)
class RejectSampleParams(ParameterRecord):
    """Validated build parameters of :class:`RejectSample` and the port layouts they give
    (testbenches and the host read layouts here without building the component)."""

    max_nodes: int = parameter(64, "Largest ``n`` (draft tree positions per request).",
                               hi=1024)
    max_steps: int = parameter(8, "Largest ``S`` (``num_speculative_tokens``).", hi=256)
    max_vocab_size: int = parameter(131072, "Largest ``V``.", hi=1 << 31)
    lanes: int = parameter(
        8, "float32 elements per memory word and per clock of the final-row stream.", hi=64,
        power_of_two=True)
    read_slots: int = parameter(
        32, "Memory reads in flight and the final-row buffer: covers the memory latency at full "
            "streaming rate.", lo=4, hi=4096, power_of_two=True)
    segment_words: int = parameter(
        64, "Words per stored running sum of the final row: the pick rescans one segment.",
        hi=1 << 20, power_of_two=True)
    token_width: int = parameter(
        32, "Bits of token ids (candidates, ``predict``; 32: SGLang's int32 ``predicts``); "
            "must hold every token below ``max_vocab_size``.", lo=2, hi=32)
    index_width: int = parameter(32, "Bits of ``retrive_index`` values.", hi=64)
    address_width: int = parameter(32, "Bits of word addresses.", hi=64)
    divider_bits_per_stage: int = parameter(
        1, "``Float32Divide.bits_per_stage`` of the ``threshold_acc`` divider (two break the "
           "300 MHz rule of docs/timing.md).", hi=25)

    def check(self):
        if (self.max_vocab_size - 1) >> self.token_width:
            raise ParameterError(
                "token_width", f"`token_width` must hold every token below `max_vocab_size` "
                               f"({self.max_vocab_size}), not {self.token_width} bits")

    @property
    def max_row_words(self) -> int:
        """``ceil(max_vocab_size / lanes)``: the longest final-row stream."""
        return -(-self.max_vocab_size // self.lanes)

    @property
    def max_segments(self) -> int:
        return -(-self.max_row_words // self.segment_words)

    @property
    def node_bits(self) -> int:
        return index_bits(self.max_nodes)

    @property
    def cmd_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "greedy": 1,
            "lfsr": 1,
            "nodes": range(self.max_nodes + 1),
            "steps": range(self.max_steps + 1),
            "vocab_size": range(self.max_vocab_size + 1),
            "row_address": unsigned(self.address_width),
            "row_words": unsigned(self.address_width),
            "seed": 32,
            "final_coin": 32,
            "threshold_single": 32,
            "threshold_acc": 32,
        })

    @property
    def tree_layout(self) -> data.StructLayout:
        link = signed(self.node_bits + 2)
        return packet_layout({
            "candidate": unsigned(self.token_width),
            "index": unsigned(self.index_width),
            "next_token": link,
            "next_sibling": link,
            "coin": 32,
            "predict": unsigned(self.token_width),
        })

    @property
    def read_data_layout(self) -> data.ArrayLayout:
        return data.ArrayLayout(32, self.lanes)

    @property
    def draft_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "address": unsigned(self.address_width),
            "lane": range(max(self.lanes, 2)),
            "value": 32,
        })

    @property
    def result_layout(self) -> data.StructLayout:
        return packet_layout({
            "index": unsigned(self.index_width),
            "token": unsigned(self.token_width),
            "error": 1,
        })

    @property
    def status_layout(self) -> data.StructLayout:
        return data.StructLayout({"walk_cycles": 32, "row_cycles": 32})

    @property
    def node_layout(self) -> data.StructLayout:
        """An entry of the on-chip node memory."""
        return data.StructLayout({
            "candidate": unsigned(self.token_width),
            "index": unsigned(self.index_width),
            "next": unsigned(self.node_bits),
            "next_none": 1,
            "sibling": unsigned(self.node_bits),
            "sibling_none": 1,
            "coin": 32,
            "predict": unsigned(self.token_width),
            "address": unsigned(self.address_width),
        })

    @property
    def ports(self) -> dict:
        """Stream port name -> payload layout (``read_address`` carries a plain
        ``unsigned(address_width)``; ``status`` is not a stream)."""
        return {"cmd": self.cmd_layout, "tree": self.tree_layout,
                "read_data": self.read_data_layout, "draft_write": self.draft_layout,
                "result": self.result_layout}


def _delay_line(m: Module, en: Value, first: dict, latency: int, *, name: str) -> dict:
    """``first`` (field -> value) through ``latency`` clock-enabled registers
    ``<name>_<field><i>`` beside a pipelined core; returns field -> the last register."""
    last = {}
    for field, value in first.items():
        for i in range(latency):
            value = stage(m, en, value, name=f"{name}_{field}{i}")
        last[field] = value
    return last


def float32_positive(bits: Value) -> Value:
    """``bits > 0`` as a float32 comparison (false for zeros, negatives and NaN)."""
    fields = float32_fields(bits)
    return ~fields.sign & ~fields.is_zero & ~fields.is_nan


class RejectSample(KernelComponent):
    """K6 tree speculative sampling (and the greedy verify), bit-exact with the goldens.

    Parameters
    ----------
    max_nodes, max_steps, max_vocab_size, lanes, read_slots, segment_words, token_width, \
index_width, address_width, divider_bits_per_stage
        See :class:`RejectSampleParams`.

    Members
    -------
    cmd : In(stream.Signature(cmd_layout))
        One beat per request, accepted between requests: ``greedy`` (``verify_tree_greedy``),
        ``lfsr`` (coins from the generator seeded with ``seed``, else the tree beats' ``coin``
        and ``final_coin``), ``nodes``/``steps``/``vocab_size`` (``n``, ``S``, ``V``, >= 1),
        ``row_address``/``row_words`` (word address of row 0, words between rows),
        ``threshold_single``/``threshold_acc`` (float32 bits, as the host converts them).
    tree : In(stream.Signature(tree_layout))
        ``n`` beats per request, position order: ``candidate``, ``index`` (``retrive_index``),
        ``next_token``/``next_sibling`` (signed; outside ``[0, n)``: none), ``coin``
        (``uniform_samples[b, i]``), ``predict`` (greedy: ``target_predict[retrive_index[b,
        i]]``); ``first``/``last`` are not checked.
    read_address : Out(stream.Signature(address_width))
    read_data : In(stream.Signature(ArrayLayout(32, lanes)))
        ``target_probs`` word reads; the words come back in request order, after any latency.
    draft_write : Out(stream.Signature(draft_layout))
        ``draft_probs`` element writes (word ``address``, ``lane``, ``value``), golden order.
    result : Out(stream.Signature(result_layout))
        One packet per request, ``accepted + 1`` beats: beat ``k`` is ``index =
        accept_index[b, k]`` and ``token = predicts[index]``; ``error`` on the last beat flags
        a link cycle (the outputs are then meaningless; the golden refuses such a call).
        ``accept_token_num[b]`` is the beat count minus one.
    status : Out(status_layout)
        Cycle counters of the last request: ``walk_cycles`` (``cmd`` accepted to the end of
        the walk: load and traversal) and ``row_cycles`` (to the last ``result`` beat).
    """

    Params = RejectSampleParams
    OUTPUTS = ("read_address", "draft_write", "result", "status")

    def members(self, params) -> dict:
        streams = super().members(params)
        return {"cmd": streams["cmd"], "tree": streams["tree"],
                "read_address": Out(stream.Signature(params.address_width)),
                **{name: streams[name] for name in ("read_data", "draft_write", "result")},
                "status": Out(params.status_layout)}

    def elaborate(self, platform):
        m = Module()
        p = self._params
        lanes = p.lanes
        shift = lanes.bit_length() - 1
        n_max = p.max_nodes
        node_shape = unsigned(p.node_bits)
        count_shape = range(n_max + 1)
        vocab_bits = index_bits(p.max_vocab_size)
        word_shape = range(p.max_row_words + 1)
        segment_shift = p.segment_words.bit_length() - 1
        node_layout = p.node_layout

        m.submodules.lfsr = lfsr = GaloisLFSR32()
        m.submodules.nodes = nodes = Memory(shape=node_layout, depth=n_max, init=[])
        node_write = nodes.write_port()
        node_a = nodes.read_port(domain="comb")  # issuer / greedy walker
        node_b = nodes.read_port(domain="comb")  # decisions, root
        m.submodules.prob_add = prob_add = Float32Add()
        m.submodules.divide = divide = Float32Divide(
            bits_per_stage=p.divider_bits_per_stage)
        m.submodules.product = product = Float32Multiply()
        m.submodules.scanner = scanner = ExactSumScanner(
            lanes=lanes, buffer_words=p.read_slots, max_words=p.max_row_words)
        m.submodules.sums = sums = Memory(shape=32, depth=p.max_segments + 1, init=[])
        sums_write = sums.write_port()
        sums_read = sums.read_port(domain="sync")
        m.submodules.address_slice = address_slice = RegisterSlice(p.address_width)
        wiring.connect(m, address_slice.o, wiring.flipped(self.read_address))
        m.submodules.result_slice = result_slice = RegisterSlice(p.result_layout)
        wiring.connect(m, result_slice.o, wiring.flipped(self.result))
        m.submodules.draft_slice = draft_slice = RegisterSlice(p.draft_layout)
        wiring.connect(m, draft_slice.o, wiring.flipped(self.draft_write))

        tag_layout = data.StructLayout({"final": 1, "epoch": EPOCH_BITS,
                                        "lane": range(max(lanes, 2)), "node": node_shape})
        m.submodules.tags = tags = SyncFIFO(width=tag_layout.size, depth=p.read_slots)
        q_layout = data.StructLayout({"epoch": EPOCH_BITS, "node": node_shape, "q": 32})
        m.submodules.probs = probs = SyncFIFO(width=q_layout.size, depth=Q_DEPTH)

        state = Signal(State)
        run = Signal()
        m.d.comb += run.eq(result_slice.i.ready & draft_slice.i.ready)

        # --- request parameters --------------------------------------------------------------
        cmd = self.cmd.payload
        greedy = Signal()
        use_lfsr = Signal()
        n = Signal(count_shape)
        steps = Signal(range(p.max_steps + 1))
        vocab = Signal(range(p.max_vocab_size + 1))
        row_words = Signal(p.address_width)
        final_coin = Signal(32)
        threshold_single = Signal(32)
        threshold = Signal(32)  # max(threshold_acc, float32(1e-9))
        use_divider = Signal()
        row_count = Signal(word_shape)  # ceil(V / lanes)
        segment_count = Signal(range(p.max_segments + 1))
        epoch = Signal(EPOCH_BITS)
        walk_cycles = Signal(32)
        row_cycles = Signal(32)

        m.d.comb += self.cmd.ready.eq(state == State.IDLE)
        command = self.cmd.valid & self.cmd.ready
        with m.If(command):
            acc = cmd.threshold_acc
            minimum = Const(MIN_THRESHOLD_ACC, 32)
            m.d.sync += [
                greedy.eq(cmd.greedy), use_lfsr.eq(cmd.lfsr), n.eq(cmd.nodes),
                steps.eq(Mux(cmd.steps == 0, 1, cmd.steps)), vocab.eq(cmd.vocab_size),
                row_words.eq(cmd.row_words), threshold_single.eq(cmd.threshold_single),
                threshold.eq(Mux(float32_less(acc, minimum), minimum, acc)),
                use_divider.eq(acc != ONE),
                row_count.eq((cmd.vocab_size + lanes - 1) >> shift),
                epoch.eq(epoch + 1), walk_cycles.eq(0), row_cycles.eq(0),
            ]
        m.d.comb += [lfsr.load.eq(command), lfsr.seed.eq(cmd.seed)]
        m.d.comb += segment_count.eq((row_count + p.segment_words - 1) >> segment_shift)

        # --- load ------------------------------------------------------------------------------
        loading = Signal()
        received = Signal(count_shape)  # tree beats accepted
        loaded = Signal(count_shape)  # node entries written
        load_done = Signal()
        next_address = Signal(p.address_width)
        beat = self.tree.payload
        m.d.comb += self.tree.ready.eq(loading & (received < n))
        tree_beat = self.tree.valid & self.tree.ready
        w_valid = Signal()
        w_last = Signal()
        w_entry = Signal(node_layout)
        w_coin = Signal(32)
        w_position = Signal(node_shape)
        capture = Signal()

        def link(value):
            none = (value < 0) | (value >= n)
            return value.as_unsigned()[:p.node_bits], none

        next_node, next_none = link(beat.next_token)
        sibling_node, sibling_none = link(beat.next_sibling)
        m.d.sync += [w_valid.eq(tree_beat), capture.eq(0)]
        with m.If(tree_beat):
            m.d.sync += [
                received.eq(received + 1), w_position.eq(received),
                w_last.eq(received + 1 == n), w_coin.eq(beat.coin),
                w_entry.candidate.eq(beat.candidate), w_entry.index.eq(beat.index),
                w_entry.next.eq(next_node), w_entry.next_none.eq(next_none),
                w_entry.sibling.eq(sibling_node), w_entry.sibling_none.eq(sibling_none),
                w_entry.predict.eq(beat.predict), w_entry.address.eq(next_address),
                next_address.eq(next_address + row_words),
            ]
        m.d.comb += [
            node_write.addr.eq(w_position),
            node_write.en.eq(w_valid),
            node_write.data.eq(w_entry),
            node_write.data.coin.eq(Mux(use_lfsr, lfsr.coin, w_coin)),
            # One leap per tree beat (position i stores draw i + 1), one more for the final
            # coin (draw n + 1) the clock after the last position is stored.
            lfsr.advance.eq(tree_beat | (w_valid & w_last)),
        ]
        with m.If(w_valid):
            m.d.sync += [loaded.eq(w_position + 1), capture.eq(w_last)]
        with m.If(capture):
            m.d.sync += [final_coin.eq(Mux(use_lfsr, lfsr.coin, final_coin)),
                         load_done.eq(1), loading.eq(0)]
        with m.If(command):
            m.d.sync += [loading.eq(1), received.eq(0), loaded.eq(0), load_done.eq(0),
                         next_address.eq(cmd.row_address), final_coin.eq(cmd.final_coin)]

        # --- walker state -------------------------------------------------------------------
        row = Signal(node_shape)
        row_address = Signal(p.address_width)
        last_index = Signal(p.index_width)
        coin = Signal(32)
        predict = Signal(p.token_width)
        accepted = Signal(range(p.max_steps + 1))
        rejects = Signal(count_shape)  # rejections in the current step
        error = Signal()
        first_beat = Signal()
        picked = Signal(p.token_width)
        rejected = [Signal(vocab_bits, name=f"rejected{i}") for i in range(n_max)]
        rejected_count = Signal(count_shape)
        issue_valid = Signal()
        issue_node = Signal(node_shape)
        issue_address = Signal(p.address_width)
        issue_count = Signal(count_shape)
        p_acc = Signal(32)
        chain_busy = Signal()

        # --- memory reads: the walker's element reads and the final row's word reads --------
        final_active = Signal()
        final_word = Signal(word_shape)
        final_end = Signal(word_shape)
        credits = Signal(range(p.read_slots + 1))
        walker_issue = ((state == State.WALK) & ~greedy & issue_valid & (issue_node < loaded)
                        & (issue_count < n))
        final_issue = final_active & (final_word < final_end) & (credits != 0)
        tag_in = data.View(tag_layout, tags.w_data)
        candidate_a = node_a.data.candidate
        m.d.comb += [
            address_slice.i.valid.eq((walker_issue | final_issue) & tags.w_rdy),
            address_slice.i.payload.eq(Mux(final_issue, row_address + final_word,
                                           issue_address + (candidate_a >> shift))),
            tag_in.final.eq(final_issue),
            tag_in.epoch.eq(epoch),
            tag_in.lane.eq(candidate_a[:shift] if shift else 0),
            tag_in.node.eq(issue_node),
        ]
        issued = address_slice.i.valid & address_slice.i.ready
        m.d.comb += tags.w_en.eq(issued)
        with m.If(issued & ~final_issue):
            m.d.sync += [issue_count.eq(issue_count + 1),
                         issue_node.eq(node_a.data.sibling),
                         issue_valid.eq(~node_a.data.sibling_none)]
        with m.If(issued & final_issue):
            m.d.sync += final_word.eq(final_word + 1)

        # Responses: route by tag; stale walker reads are dropped.
        tag = data.View(tag_layout, tags.r_data)
        response = self.read_data
        lanes_in = [response.payload[j] for j in range(lanes)]
        q_in = Array(lanes_in)[tag.lane] if lanes > 1 else lanes_in[0]
        current = ~tag.final & (tag.epoch == epoch)
        row_in = stream.Signature(data.ArrayLayout(32, lanes)).create()
        m.d.comb += [
            response.ready.eq(tags.r_rdy & Mux(tag.final, row_in.ready,
                                               Mux(current, probs.w_rdy, 1))),
            tags.r_en.eq(response.valid & response.ready),
            probs.w_en.eq(response.valid & response.ready & current),
            probs.w_data.eq(Cat(tag.epoch, tag.node, q_in)),
            row_in.valid.eq(response.valid & tags.r_rdy & tag.final),
            row_in.payload.eq(response.payload),
        ]

        # --- probability chain: prob_acc + q (Float32Add), then / threshold_acc --------------
        head = data.View(q_layout, probs.r_data)
        head_current = probs.r_rdy & (head.epoch == epoch)
        head_stale = probs.r_rdy & (head.epoch != epoch)
        add_issue = Signal()
        added = _delay_line(m, run, {"valid": add_issue, "epoch": epoch, "node": head.node,
                                     "q": head.q}, Float32Add.latency, name="add")
        emerge = added["valid"] & (added["epoch"] == epoch)
        m.d.comb += [
            add_issue.eq(run & (state == State.WALK) & ~greedy & head_current
                         & (~chain_busy | emerge)),
            prob_add.en.eq(run),
            prob_add.a.eq(Mux(emerge, prob_add.result, p_acc)),
            prob_add.b.eq(head.q),
            probs.r_en.eq(add_issue | head_stale),
        ]
        with m.If(run):
            with m.If(emerge & ~add_issue):
                m.d.sync += [p_acc.eq(prob_add.result), chain_busy.eq(0)]
            with m.If(add_issue):
                m.d.sync += chain_busy.eq(1)

        m.d.comb += [divide.en.eq(run), divide.a.eq(prob_add.result), divide.b.eq(threshold)]
        quotients = _delay_line(m, run, {**added, "valid": emerge & use_divider},
                                divide.latency, name="div")
        divided = quotients["valid"] & (quotients["epoch"] == epoch)

        # --- decisions ----------------------------------------------------------------------
        greedy_valid = Signal()
        greedy_node = Signal(node_shape)
        walking = state == State.WALK
        event = Signal()
        event_node = Signal(node_shape)
        event_q = Signal(32)
        quotient = Signal(32)
        with m.If(greedy):
            m.d.comb += [event.eq(walking & greedy_valid & (greedy_node < loaded)),
                         event_node.eq(greedy_node)]
        with m.Elif(use_divider):
            m.d.comb += [event.eq(walking & divided), event_node.eq(quotients["node"]),
                         event_q.eq(quotients["q"]), quotient.eq(divide.result)]
        with m.Else():
            m.d.comb += [event.eq(walking & emerge), event_node.eq(added["node"]),
                         event_q.eq(added["q"]), quotient.eq(prob_add.result)]
        m.d.comb += node_b.addr.eq(Mux(state == State.ROOT, 0, event_node))
        node = node_b.data
        coin_accepts = float32_less_equal(coin, quotient)
        single_accepts = float32_less_equal(threshold_single, event_q)
        # q > 0 (ours, not SGLang's): a token of probability 0 is never accepted.
        accept = Mux(greedy, node.candidate == predict,
                     float32_less(Const(0, 32), event_q) & (coin_accepts | single_accepts))

        m.d.comb += [
            result_slice.i.payload.index.eq(last_index),
            result_slice.i.payload.token.eq(Mux(state == State.EMIT, picked,
                                                node.candidate)),
            result_slice.i.payload.first.eq(first_beat),
            result_slice.i.payload.last.eq(state == State.EMIT),
            result_slice.i.payload.error.eq(error & (state == State.EMIT)),
            draft_slice.i.payload.address.eq(row_address + (node.candidate >> shift)),
            draft_slice.i.payload.lane.eq(node.candidate[:shift] if shift else 0),
            draft_slice.i.payload.value.eq(event_q),
        ]
        walk_end = Signal()
        with m.If(run & event):
            with m.If(accept):
                m.d.comb += result_slice.i.valid.eq(1)
                m.d.sync += [
                    first_beat.eq(0), last_index.eq(node.index), row.eq(event_node),
                    row_address.eq(node.address), coin.eq(node.coin),
                    predict.eq(node.predict), accepted.eq(accepted + 1), rejects.eq(0),
                    rejected_count.eq(0), epoch.eq(epoch + 1), p_acc.eq(0), chain_busy.eq(0),
                    issue_node.eq(node.next), issue_valid.eq(~node.next_none),
                    issue_address.eq(node.address), issue_count.eq(0),
                    greedy_node.eq(node.next), greedy_valid.eq(~node.next_none),
                ]
                with m.If((accepted + 2 >= steps) | node.next_none):
                    m.d.comb += walk_end.eq(1)
            with m.Else():
                m.d.sync += [rejects.eq(rejects + 1), greedy_node.eq(node.sibling),
                             greedy_valid.eq(~node.sibling_none)]
                with m.If(~greedy):
                    m.d.comb += draft_slice.i.valid.eq(1)
                    m.d.sync += [Array(rejected)[rejected_count].eq(node.candidate),
                                 rejected_count.eq(rejected_count + 1)]
                with m.If(node.sibling_none):
                    m.d.comb += walk_end.eq(1)
                with m.Elif(rejects + 1 >= n):
                    m.d.comb += walk_end.eq(1)
                    m.d.sync += error.eq(1)

        # Greedy walker reads its node through port A.
        m.d.comb += node_a.addr.eq(Mux(greedy, greedy_node, issue_node))

        # --- final row: mask, positives, scanner ----------------------------------------------
        row_index = Signal(word_shape)  # word of the next response
        mask_sink = stream.Signature(data.ArrayLayout(32, lanes)).create()
        mask_en = stalling_handshake(m, latency=2, source=row_in, sink=mask_sink)
        with m.If(row_in.valid & row_in.ready):
            m.d.sync += row_index.eq(row_index + 1)
        s1_word = stage(m, mask_en, row_in.payload.as_value(), name="mask_word")
        s1_index = stage(m, mask_en, row_index, name="mask_index")
        matches = [Const(0, lanes)]
        for i in range(n_max):
            hit = (i < rejected_count) & ((rejected[i] >> shift) == s1_index)
            onehot = (Const(1, lanes) << (rejected[i][:shift] if shift else 0))[:lanes]
            matches.append(Mux(hit, onehot, 0))
        rejected_lanes = Signal(lanes)
        m.d.comb += rejected_lanes.eq(or_tree(matches))
        r_word, r_positive = [], []
        for j in range(lanes):
            value = s1_word[32 * j:32 * (j + 1)]
            inside = ((s1_index << shift) + j) < vocab
            positive = inside & ~rejected_lanes[j] & float32_positive(value)
            r_positive.append(positive)
            r_word.append(Mux(positive, value, 0))
        s2_word = stage(m, mask_en, Cat(*r_word), name="row_word")
        s2_positive = stage(m, mask_en, Cat(*r_positive), name="row_positive")
        s2_index = stage(m, mask_en, s1_index, name="row_index")
        m.d.comb += [
            scanner.i.valid.eq(mask_sink.valid),
            mask_sink.ready.eq(scanner.i.ready),
            scanner.i.payload.eq(s2_word),
        ]
        has_positive = Signal()
        first_positive = Signal(vocab_bits + 1)
        last_positive = Signal(vocab_bits + 1)
        pass_one = Signal()
        any_positive, lowest = first_set(m, [s2_positive[j] for j in range(lanes)],
                                          name="row_first")
        highest = Signal(range(max(lanes, 2)))
        for j in range(lanes):
            with m.If(s2_positive[j]):
                m.d.comb += highest.eq(j)
        with m.If(mask_sink.valid & mask_sink.ready & pass_one & any_positive):
            m.d.sync += [last_positive.eq((s2_index << shift) | highest),
                         has_positive.eq(1)]
            with m.If(~has_positive):
                m.d.sync += first_positive.eq((s2_index << shift) | lowest)
        with m.If(scanner.freed):
            m.d.sync += credits.eq(credits + 1 - (issued & final_issue))
        with m.Elif(issued & final_issue):
            m.d.sync += credits.eq(credits - 1)

        # Stored running sums: one per segment start during the first pass, then the total.
        sums_index = Signal(range(p.max_segments + 1))
        m.d.comb += [
            sums_write.en.eq(pass_one & scanner.word_start
                             & ((scanner.word_index & (p.segment_words - 1)) == 0)),
            sums_write.addr.eq(scanner.word_index >> segment_shift),
            sums_write.data.eq(scanner.word_sum),
        ]

        # --- request sequencer --------------------------------------------------------------
        low = Signal(range(p.max_segments + 1))
        high = Signal(range(p.max_segments + 1))
        middle = Signal(range(p.max_segments + 1))
        u = Signal(32)
        wait = Signal(range(Float32Multiply.latency + 2))
        segment_base = Signal(word_shape)
        fallback = Mux(has_positive, last_positive, vocab - 1)
        m.d.comb += [
            product.a.eq(final_coin), product.b.eq(scanner.total),
            middle.eq((low + high) >> 1),
            sums_read.addr.eq(sums_index), sums_read.en.eq(1),
            scanner.threshold.eq(u),
        ]
        with m.If((state == State.ROOT) | (state == State.WALK)):
            m.d.sync += walk_cycles.eq(walk_cycles + 1)
        with m.If(Cat(*(state == s for s in _FINAL_ROW_STATES)).any()):
            m.d.sync += row_cycles.eq(row_cycles + 1)

        with m.Switch(state):
            with m.Case(State.IDLE):
                with m.If(command):
                    m.d.sync += [state.eq(State.ROOT), error.eq(0), first_beat.eq(1),
                                 accepted.eq(0), rejects.eq(0), rejected_count.eq(0),
                                 issue_valid.eq(0), greedy_valid.eq(0), chain_busy.eq(0),
                                 p_acc.eq(0), has_positive.eq(0)]
            with m.Case(State.ROOT):
                with m.If(loaded != 0):
                    more = (steps >= 2) & ~node.next_none
                    m.d.sync += [
                        last_index.eq(node.index), row.eq(0), row_address.eq(node.address),
                        coin.eq(node.coin), predict.eq(node.predict),
                        issue_node.eq(node.next), issue_valid.eq(more),
                        issue_address.eq(node.address), issue_count.eq(0),
                        greedy_node.eq(node.next), greedy_valid.eq(more),
                    ]
                    with m.If(more):
                        m.d.sync += state.eq(State.WALK)
                    with m.Else():
                        m.d.sync += state.eq(State.ROW)
            with m.Case(State.WALK):
                with m.If(walk_end):
                    m.d.sync += [state.eq(State.ROW), issue_valid.eq(0),
                                 greedy_valid.eq(0)]
            with m.Case(State.ROW):
                with m.If(greedy | error):
                    m.d.sync += [picked.eq(Mux(error, 0, predict)), state.eq(State.EMIT)]
                with m.Elif(load_done & ~scanner.busy):
                    m.d.comb += [scanner.start.eq(1), scanner.init.eq(0),
                                 scanner.words.eq(row_count), scanner.pick.eq(0)]
                    m.d.sync += [state.eq(State.PASS1), pass_one.eq(1), final_active.eq(1),
                                 final_word.eq(0), final_end.eq(row_count), row_index.eq(0),
                                 credits.eq(p.read_slots), wait.eq(0)]
            with m.Case(State.PASS1):
                m.d.sync += wait.eq(1)
                with m.If(wait & ~scanner.busy):
                    m.d.comb += [sums_write.en.eq(1), sums_write.addr.eq(segment_count),
                                 sums_write.data.eq(scanner.total)]
                    m.d.sync += [state.eq(State.SUM), pass_one.eq(0), final_active.eq(0),
                                 wait.eq(0)]
            with m.Case(State.SUM):
                # product = final_coin * total, Float32Multiply.latency clocks.
                m.d.sync += wait.eq(wait + 1)
                with m.If(wait == Float32Multiply.latency):
                    m.d.sync += [u.eq(product.result), state.eq(State.DECIDE)]
            with m.Case(State.DECIDE):
                u_fields = float32_fields(u)
                with m.If(u_fields.is_nan):
                    m.d.sync += [picked.eq(fallback), state.eq(State.EMIT)]
                with m.Elif(float32_less(u, Const(0, 32))):
                    m.d.sync += [picked.eq(Mux(has_positive, first_positive, fallback)),
                                 state.eq(State.EMIT)]
                with m.Else():
                    m.d.sync += [low.eq(0), high.eq(segment_count), state.eq(State.SEARCH)]
            with m.Case(State.SEARCH):
                # First segment s whose end sum (stored at s + 1) is above u.
                with m.If(low == high):
                    m.d.comb += sums_index.eq(low)
                    with m.If(low == segment_count):
                        m.d.sync += [picked.eq(fallback), state.eq(State.EMIT)]
                    with m.Else():
                        m.d.sync += state.eq(State.FOUND)
                with m.Else():
                    m.d.comb += sums_index.eq(middle + 1)
                    m.d.sync += state.eq(State.COMPARE)
            with m.Case(State.COMPARE):
                with m.If(float32_less(u, sums_read.data)):
                    m.d.sync += high.eq(middle)
                with m.Else():
                    m.d.sync += low.eq(middle + 1)
                m.d.sync += state.eq(State.SEARCH)
            with m.Case(State.FOUND):
                base = (low << segment_shift)[:len(segment_base)]
                remaining = row_count - base
                words = Mux(remaining > p.segment_words, p.segment_words, remaining)
                with m.If(~scanner.busy):
                    m.d.comb += [scanner.start.eq(1), scanner.init.eq(sums_read.data),
                                 scanner.words.eq(words), scanner.pick.eq(1)]
                    m.d.sync += [state.eq(State.PASS2), final_active.eq(1),
                                 final_word.eq(base), final_end.eq(base + words),
                                 row_index.eq(base), segment_base.eq(base),
                                 credits.eq(p.read_slots), wait.eq(0)]
            with m.Case(State.PASS2):
                m.d.sync += wait.eq(1)
                with m.If(wait & ~scanner.busy):
                    token = ((segment_base + scanner.hit_word) << shift) | scanner.hit_lane
                    m.d.sync += [picked.eq(Mux(scanner.hit, token, fallback)),
                                 final_active.eq(0), state.eq(State.EMIT)]
            with m.Case(State.EMIT):
                m.d.comb += result_slice.i.valid.eq(1)
                with m.If(result_slice.i.ready):
                    m.d.sync += [state.eq(State.DRAIN),
                                 self.status.walk_cycles.eq(walk_cycles),
                                 self.status.row_cycles.eq(row_cycles + 1)]
            with m.Case(State.DRAIN):
                with m.If(load_done):
                    m.d.sync += state.eq(State.IDLE)
        return m


def synthesis_parameters(**overrides) -> RejectSampleParams:
    """The parameters of the synthesis report: trees of up to 64 draft nodes, ``S`` up to 8,
    vocabularies up to 131072 (covers Llama 3's 128256), 512-bit HBM words (16 float32 lanes),
    128 reads in flight (HBM latency), 64-word segments."""
    return RejectSampleParams(**{"max_nodes": 64, "max_steps": 8, "max_vocab_size": 131072,
                                 "lanes": 16, "read_slots": 128, "segment_words": 64,
                                 **overrides})


def synthesis_configuration(**overrides) -> RejectSample:
    """K6 at ``synthesis_parameters(**overrides)``."""
    return RejectSample(**asdict(synthesis_parameters(**overrides)))
