"""K6 tree rejection sampling and greedy tree verify in hardware (docs/kernels.md §8).

Bit-exact with ``golden.tree_speculative_sampling_target_only``,
``golden.draft_tree_reject_sample`` (LFSR coins) and ``golden.verify_tree_greedy``. One request
is one ``cmd`` beat and ``n`` ``tree`` beats (positions ``0..n-1``); the kernel reads
``target_probs`` through the variable-latency, in-order ``read_address``/``read_data`` port and
answers with one ``result`` packet (``accept_index``/``predicts`` pairs) and, in sampling mode,
the ``draft_probs`` writes on ``draft_write``. Requests are processed one after the other: load
(overlapping the walk), the §8 walk (states ``ROOT``/``WALK``), the final row (``ROW`` ..
``PASS2``: the residual streamed once through ``hw.kernels.reject_scan.ExactSumScanner``, plus
one rescanned segment) and the last result beat (``EMIT``).

``target_probs`` is word-addressed, ``lanes`` float32 per word: element ``(node, j)`` of a
request is lane ``j % lanes`` of word ``row_address + node * row_words + j // lanes``;
``draft_write`` names elements the same way. The design (speculative epochs, the residual
without reading ``draft_probs``, the exact final-row sum) and the cycle figures are in
docs/reject_sample.md.
"""

from dataclasses import asdict

import numpy as np
from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
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
from hw.lib.fsm import OneHotFSM
from hw.lib.lfsr import GaloisLFSR32
from hw.lib.logic import first_set, or_tree
from hw.lib.params import index_bits
from hw.lib.pipeline import data_stage, stage
from hw.lib.stream import RegisterSlice, stalling_handshake

from .reject_sample_params import RejectSampleParams
from .reject_scan import ExactSumScanner

__all__ = ["RejectSampleParams", "RejectSample", "synthesis_parameters",
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


# The request sequencer's states (``hw.lib.fsm.OneHotFSM`` flags ``state_<NAME>``), in request
# order: ``IDLE`` waiting for ``cmd``; ``ROOT`` the root is stored: take its row; ``WALK`` the
# §8 traversal; ``ROW`` greedy or error: emit, sampling: start the final row's first pass;
# ``PASS1`` total, segment sums, first and last positive residual; ``SUM`` ``u = final_coin *
# total``; ``DECIDE`` NaN or negative ``u``: pick at once, else search; ``SEARCH``, ``READ``,
# ``COMPARE`` the binary search over the stored segment sums (address, read and compare
# clocks); ``FOUND`` start the rescan of the segment holding the pick; ``PASS2`` the rescan;
# ``EMIT`` the last result beat; ``DRAIN`` the rest of the request's tree beats.

#: The states counted in ``status.row_cycles`` (end of the walk to the last result beat).
_FINAL_ROW_STATES = ("ROW", "PASS1", "SUM", "DECIDE", "SEARCH", "READ", "COMPARE", "FOUND",
                     "PASS2", "EMIT")


def _delay_line(m: Module, en: Value, flush: Value, valid: Value, fields: dict, latency: int,
                *, name: str) -> tuple[Value, dict]:
    """``valid`` and ``fields`` (field -> value) through ``latency`` clock-enabled registers
    ``<name>_valid<i>``, ``<name>_<field><i>`` beside a pipelined core; ``flush`` clears every
    valid flag (the work in flight became stale). Returns the last valid flag and field -> the
    last register. The fields' registers have no reset but the last ones: a reset keeps them
    flip-flops at the end of the shift registers the others become (whose outputs are slow,
    docs/timing.md)."""
    for i in range(latency):
        flag = Signal(name=f"{name}_valid{i}")
        with m.If(flush):
            m.d.sync += flag.eq(0)
        with m.Elif(en):
            m.d.sync += flag.eq(valid)
        valid = flag
        fields = {field: stage(m, en, value, name=f"{name}_{field}{i}",
                               reset_less=i < latency - 1)
                  for field, value in fields.items()}
    return valid, fields


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
        # Slices in front of the routing of a response by its tag and in front of the adder:
        # the route and the add's issue (with its epoch compare) start at flip-flops and no
        # longer reach back into the FIFOs' pointers.
        m.submodules.response_slice = response_slice = RegisterSlice(data.StructLayout({
            "word": p.read_data_layout, "tag": tag_layout}))
        m.submodules.q_slice = q_slice = RegisterSlice(q_layout)

        fsm = OneHotFSM(m, init="IDLE", name="state")  # its block: the request sequencer
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
        threshold_acc = Signal(32)
        use_divider = Signal()
        row_count = Signal(word_shape)  # ceil(V / lanes)
        segment_count = Signal(range(p.max_segments + 1))
        epoch = Signal(EPOCH_BITS)
        walk_cycles = Signal(32)
        row_cycles = Signal(32)

        m.d.comb += self.cmd.ready.eq(fsm.ongoing("IDLE"))
        command = self.cmd.valid & self.cmd.ready
        with m.If(command):
            m.d.sync += [
                greedy.eq(cmd.greedy), use_lfsr.eq(cmd.lfsr), n.eq(cmd.nodes),
                steps.eq(Mux(cmd.steps == 0, 1, cmd.steps)), vocab.eq(cmd.vocab_size),
                row_words.eq(cmd.row_words), threshold_single.eq(cmd.threshold_single),
                threshold_acc.eq(cmd.threshold_acc), use_divider.eq(cmd.threshold_acc != ONE),
                row_count.eq((cmd.vocab_size + lanes - 1) >> shift),
                epoch.eq(epoch + 1), walk_cycles.eq(0), row_cycles.eq(0),
            ]
        # The generator is seeded a clock after the command, from a register (the tree beats
        # wait for it: `loading`).
        seeding = stage(m, 1, command, name="seeding")
        m.d.comb += [lfsr.load.eq(seeding),
                     lfsr.seed.eq(data_stage(m, command, cmd.seed, name="seed"))]
        m.d.sync += segment_count.eq((row_count + p.segment_words - 1) >> segment_shift)
        # max(threshold_acc, float32(1e-9)), a clock after the command (the divider's first
        # operands come from memory reads, many clocks later).
        minimum = Const(MIN_THRESHOLD_ACC, 32)
        threshold = data_stage(m, 1, Mux(float32_less(threshold_acc, minimum), minimum,
                                         threshold_acc), name="threshold")

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
            m.d.sync += [received.eq(0), loaded.eq(0), load_done.eq(0),
                         next_address.eq(cmd.row_address), final_coin.eq(cmd.final_coin)]
        with m.If(seeding):
            m.d.sync += loading.eq(1)

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
        pick_fallback = Signal()  # the last beat's token is `fallback`, not `picked`
        fallback = Signal(vocab_bits + 1, reset_less=True)  # the last positive residual, or V - 1
        # The rejected tokens of the current row: word index and one-hot lane (so that the
        # final row's mask is an AND-OR, without a lane decode in front).
        word_bits = max(vocab_bits, shift)
        rejected_word = [Signal(word_bits - shift, name=f"rejected_word{i}")
                         for i in range(n_max)]
        rejected_lane = [Signal(lanes, name=f"rejected_lane{i}") for i in range(n_max)]
        rejected_count = Signal(count_shape)
        rejected_slot = Signal(n_max)  # one-hot rejected_count: the entry the next reject takes
        # The walk's end tests, kept a decision ahead: accepted + 2 >= steps, rejects + 1 >= n.
        last_step = Signal()
        last_reject = Signal()
        issue_valid = Signal()
        issue_node = Signal(node_shape)
        issue_address = Signal(p.address_width)
        issue_count = Signal(count_shape)
        p_acc = Signal(32)
        chain_busy = Signal()

        # --- memory reads: the walker's element reads and the final row's word reads --------
        final_active = Signal()
        final_word = Signal(word_shape)
        credits = Signal(range(p.read_slots + 1))
        # Words left to issue, counted down beside final_word; it and `credits` are tested
        # through flags kept with them (`final_more`: final_left != 0, `has_credit`).
        final_left = Signal(word_shape)
        final_more = Signal()
        has_credit = Signal()
        # The walker may read issue_node's element: a flag registered from the issue state
        # (cleared for the clock after an issue: a sibling read every other clock, the first
        # read of a row the clock after its accept). `loaded` only grows, so the flag is
        # never early.
        issue_ready = Signal()
        walker_issue = fsm.ongoing("WALK") & ~greedy & issue_ready
        final_issue = final_active & final_more & has_credit
        # Room for a tag, a clock ahead: one write can land in between.
        tags_room = stage(m, 1, tags.level < tags.depth - 1, name="tags_room")
        tag_in = data.View(tag_layout, tags.w_data)
        candidate_a = node_a.data.candidate
        m.d.comb += [
            address_slice.i.valid.eq((walker_issue | final_issue) & tags_room),
            address_slice.i.payload.eq(Mux(final_issue, row_address + final_word,
                                           issue_address + (candidate_a >> shift))),
            tag_in.final.eq(final_issue),
            tag_in.epoch.eq(epoch),
            tag_in.lane.eq(candidate_a[:shift] if shift else 0),
            tag_in.node.eq(issue_node),
        ]
        issued = address_slice.i.valid & address_slice.i.ready
        m.d.comb += tags.w_en.eq(issued)
        m.d.sync += issue_ready.eq(issue_valid & (issue_node < loaded) & (issue_count < n))
        with m.If(issued & ~final_issue):
            m.d.sync += [issue_count.eq(issue_count + 1),
                         issue_node.eq(node_a.data.sibling),
                         issue_valid.eq(~node_a.data.sibling_none), issue_ready.eq(0)]
        with m.If(issued & final_issue):
            m.d.sync += [final_word.eq(final_word + 1), final_left.eq(final_left - 1),
                         final_more.eq(final_left != 1)]

        # Responses: each with its tag into the response slice, then routed by the tag (stale
        # walker reads too: they are dropped at the adder's head).
        response = self.read_data
        m.d.comb += [
            response_slice.i.valid.eq(response.valid & tags.r_rdy),
            response_slice.i.payload.word.eq(response.payload),
            response_slice.i.payload.tag.eq(tags.r_data),
            response.ready.eq(response_slice.i.ready & tags.r_rdy),
            tags.r_en.eq(response.valid & response.ready),
        ]
        routed = response_slice.o
        tag = routed.payload.tag
        lanes_in = [routed.payload.word[j] for j in range(lanes)]
        q_in = Array(lanes_in)[tag.lane] if lanes > 1 else lanes_in[0]
        row_in = stream.Signature(data.ArrayLayout(32, lanes)).create()
        m.d.comb += [
            routed.ready.eq(Mux(tag.final, row_in.ready, probs.w_rdy)),
            probs.w_en.eq(routed.valid & ~tag.final),
            probs.w_data.eq(Cat(tag.epoch, tag.node, q_in)),
            row_in.valid.eq(routed.valid & tag.final),
            row_in.payload.eq(routed.payload.word),
            q_slice.i.valid.eq(probs.r_rdy),
            q_slice.i.payload.eq(probs.r_data),
            probs.r_en.eq(q_slice.i.ready),
        ]

        # --- probability chain: prob_acc + q (Float32Add), then / threshold_acc --------------
        head = q_slice.o.payload
        head_current = q_slice.o.valid & (head.epoch == epoch)
        head_stale = q_slice.o.valid & (head.epoch != epoch)
        add_issue = Signal()
        # An accept (or a new request) bumps the epoch and flushes the adds and divisions in
        # flight: what leaves the delay lines is current.
        flush = Signal()
        emerge, added = _delay_line(m, run, flush, add_issue, {"node": head.node, "q": head.q},
                                    Float32Add.latency, name="add")
        m.d.comb += [
            add_issue.eq(run & fsm.ongoing("WALK") & ~greedy & head_current
                         & (~chain_busy | emerge)),
            prob_add.en.eq(run),
            prob_add.a.eq(Mux(emerge, prob_add.result, p_acc)),
            prob_add.b.eq(head.q),
            q_slice.o.ready.eq(add_issue | head_stale),
        ]
        with m.If(run):
            with m.If(emerge & ~add_issue):
                m.d.sync += [p_acc.eq(prob_add.result), chain_busy.eq(0)]
            with m.If(add_issue):
                m.d.sync += chain_busy.eq(1)

        m.d.comb += [divide.en.eq(run), divide.a.eq(prob_add.result), divide.b.eq(threshold)]
        divided, quotients = _delay_line(m, run, flush, emerge & use_divider, added,
                                         divide.latency, name="div")

        # --- decisions ----------------------------------------------------------------------
        greedy_valid = Signal()
        greedy_node = Signal(node_shape)
        walking = fsm.ongoing("WALK")
        event = Signal()
        event_node = Signal(node_shape)
        event_q = Signal(32)
        # Decisions in two registered stages, so that neither the node memory read nor a
        # compare is in series with a decision's writes: stage A (``decision_*``) takes an
        # event's node, q and quotient and holds them until the next event, stage B (decided
        # from) the compares of stage A. Sampling events are one serial add apart
        # (``Float32Add.latency`` clocks); a greedy event waits for the decision before it (its
        # node is that decision's result): three clocks per greedy node.
        captured = Signal()  # stage A holds an event
        compared = Signal()  # stage B holds its terms
        with m.If(greedy):
            m.d.comb += [event.eq(walking & greedy_valid & (greedy_node < loaded)
                                  & ~captured & ~compared),
                         event_node.eq(greedy_node)]
        with m.Elif(use_divider):
            m.d.comb += [event.eq(walking & divided), event_node.eq(quotients["node"]),
                         event_q.eq(quotients["q"])]
        with m.Else():
            m.d.comb += [event.eq(walking & emerge), event_node.eq(added["node"]),
                         event_q.eq(added["q"])]
        m.d.comb += node_b.addr.eq(Mux(fsm.ongoing("ROOT"), 0, event_node))
        node = node_b.data  # the root's entry in ROOT, the event's in WALK
        decided = Signal(node_layout, name="decision_node", reset_less=True)
        decision_row = Signal(node_shape, reset_less=True)
        decision_q = Signal(32, reset_less=True)
        decision_quotient = Signal(32, reset_less=True)
        with m.If(run & event):
            m.d.sync += [decided.eq(node), decision_row.eq(event_node), decision_q.eq(event_q),
                         decision_quotient.eq(Mux(use_divider, divide.result, prob_add.result))]
        # Greedy accepts iff the candidate is the row's predict; sampling iff q > 0 (ours, not
        # SGLang's: a token of probability 0 is never accepted) and coin <= quotient (the
        # divider's or, at threshold_acc 1, the sum itself) or q >= threshold_single.
        term = {name: data_stage(m, run, value, name=f"decision_{name}") for name, value in {
            "match": decided.candidate == predict,
            "positive": float32_less(Const(0, 32), decision_q),
            "coin": float32_less_equal(coin, decision_quotient),
            "single": float32_less_equal(threshold_single, decision_q)}.items()}
        decision_accepts = Mux(greedy, term["match"],
                               term["positive"] & (term["coin"] | term["single"]))
        decide = run & walking & compared
        accept = decide & decision_accepts
        m.d.comb += flush.eq(accept | command)
        with m.If(flush | ~walking):  # (the event behind an accept is stale)
            m.d.sync += [captured.eq(0), compared.eq(0)]
        with m.Elif(run):
            m.d.sync += [captured.eq(event), compared.eq(captured)]

        m.d.comb += [
            result_slice.i.payload.index.eq(last_index),
            result_slice.i.payload.token.eq(Mux(fsm.ongoing("EMIT"),
                                                Mux(pick_fallback, fallback, picked),
                                                decided.candidate)),
            result_slice.i.payload.first.eq(first_beat),
            result_slice.i.payload.last.eq(fsm.ongoing("EMIT")),
            result_slice.i.payload.error.eq(error & fsm.ongoing("EMIT")),
            draft_slice.i.payload.address.eq(row_address + (decided.candidate >> shift)),
            draft_slice.i.payload.lane.eq(decided.candidate[:shift] if shift else 0),
            draft_slice.i.payload.value.eq(decision_q),
        ]
        walk_end = Signal()
        with m.If(decide):
            with m.If(decision_accepts):
                m.d.comb += result_slice.i.valid.eq(1)
                m.d.sync += [
                    first_beat.eq(0), last_index.eq(decided.index), row.eq(decision_row),
                    row_address.eq(decided.address), coin.eq(decided.coin),
                    predict.eq(decided.predict), accepted.eq(accepted + 1), rejects.eq(0),
                    last_step.eq(accepted + 3 >= steps), last_reject.eq(n <= 1),
                    rejected_count.eq(0), rejected_slot.eq(1), epoch.eq(epoch + 1), p_acc.eq(0),
                    chain_busy.eq(0),
                    issue_node.eq(decided.next), issue_valid.eq(~decided.next_none),
                    issue_ready.eq(~decided.next_none & (decided.next < loaded)),
                    issue_address.eq(decided.address), issue_count.eq(0),
                    greedy_node.eq(decided.next), greedy_valid.eq(~decided.next_none),
                ]
                with m.If(last_step | decided.next_none):
                    m.d.comb += walk_end.eq(1)
            with m.Else():
                m.d.sync += [rejects.eq(rejects + 1), last_reject.eq(rejects + 2 >= n),
                             greedy_node.eq(decided.sibling),
                             greedy_valid.eq(~decided.sibling_none)]
                with m.If(~greedy):
                    m.d.comb += draft_slice.i.valid.eq(1)
                    m.d.sync += [rejected_count.eq(rejected_count + 1),
                                 rejected_slot.eq(rejected_slot << 1)]
                    for i in range(n_max):
                        with m.If(rejected_slot[i]):
                            m.d.sync += [
                                rejected_word[i].eq(decided.candidate[shift:word_bits]),
                                rejected_lane[i].eq(
                                    Const(1, lanes) << (decided.candidate[:shift] if shift else 0))]
                with m.If(decided.sibling_none):
                    m.d.comb += walk_end.eq(1)
                with m.Elif(last_reject):
                    m.d.comb += walk_end.eq(1)
                    m.d.sync += error.eq(1)

        # Greedy walker reads its node through port A.
        m.d.comb += node_a.addr.eq(Mux(greedy, greedy_node, issue_node))

        # --- final row: mask, positives, scanner ----------------------------------------------
        row_index = Signal(word_shape)  # word of the next response
        mask_sink = stream.Signature(data.ArrayLayout(32, lanes)).create()
        mask_en = stalling_handshake(m, latency=3, source=row_in, sink=mask_sink)
        with m.If(row_in.valid & row_in.ready):
            m.d.sync += row_index.eq(row_index + 1)
        # The mask's compares look at the index of the word being captured, a clock ahead.
        s1_word = data_stage(m, mask_en, row_in.payload.as_value(), name="mask_word")
        s1_index = data_stage(m, mask_en, row_index, name="mask_index")
        s1_hits = data_stage(m, mask_en, Cat(
            (i < rejected_count) & (rejected_word[i] == row_index) for i in range(n_max)),
            name="mask_hits")
        s1_eligible = data_stage(m, mask_en, Cat(  # inside the row and above zero
            (((row_index << shift) + j) < vocab)
            & float32_positive(row_in.payload[j]) for j in range(lanes)), name="mask_eligible")
        rejected_lanes = Cat(
            or_tree([s1_hits[i] & rejected_lane[i][j] for i in range(n_max)])
            for j in range(lanes))
        # Which lanes keep their value (inside the row, not rejected, above zero), registered
        # beside the word; then the masked word.
        s2_word = data_stage(m, mask_en, s1_word, name="keep_word")
        s2_index = data_stage(m, mask_en, s1_index, name="keep_index")
        s2_keep = data_stage(m, mask_en, s1_eligible & ~rejected_lanes, name="keep_lanes")
        s3_word = data_stage(m, mask_en, Cat(
            Mux(s2_keep[j], s2_word[32 * j:32 * (j + 1)], 0) for j in range(lanes)),
            name="row_word")
        s3_positive = data_stage(m, mask_en, s2_keep, name="row_positive")
        s3_index = data_stage(m, mask_en, s2_index, name="row_index")
        m.d.comb += [
            scanner.i.valid.eq(mask_sink.valid),
            mask_sink.ready.eq(scanner.i.ready),
            scanner.i.payload.eq(s3_word),
        ]
        has_positive = Signal()
        first_positive = Signal(vocab_bits + 1)
        last_positive = Signal(vocab_bits + 1)
        pass_one = Signal()
        any_positive, lowest = first_set(m, [s3_positive[j] for j in range(lanes)],
                                          name="row_first")
        highest = Signal(range(max(lanes, 2)))
        for j in range(lanes):
            with m.If(s3_positive[j]):
                m.d.comb += highest.eq(j)
        with m.If(mask_sink.valid & mask_sink.ready & pass_one & any_positive):
            m.d.sync += [last_positive.eq((s3_index << shift) | highest),
                         has_positive.eq(1)]
            with m.If(~has_positive):
                m.d.sync += first_positive.eq((s3_index << shift) | lowest)
        m.d.sync += has_credit.eq(scanner.freed | Mux(issued & final_issue, credits != 1,
                                                      has_credit))
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
        u_nan = Signal()
        u_negative = Signal()
        wait = Signal(range(Float32Multiply.latency + 2))
        segment_base = Signal(word_shape)
        search_found = Signal()
        # Registered: the first pass has ended many clocks before any state reads it.
        m.d.sync += fallback.eq(Mux(has_positive, last_positive, vocab - 1))
        sums_data = data_stage(m, 1, sums_read.data, name="sums_data")  # BRAM output register
        # The rescanned segment, from `low` (it holds from the search's last clock to FOUND).
        base = (low << segment_shift)[:len(segment_base)]
        remaining = row_count - base
        rescan_words = data_stage(m, 1, Mux(remaining > p.segment_words, p.segment_words,
                                            remaining), name="rescan_words")
        m.d.comb += [
            product.a.eq(final_coin), product.b.eq(scanner.total),
            middle.eq((low + high) >> 1),
            sums_read.addr.eq(sums_index), sums_read.en.eq(1),
            scanner.threshold.eq(u),
        ]
        with m.If(fsm.ongoing("ROOT") | fsm.ongoing("WALK")):
            m.d.sync += walk_cycles.eq(walk_cycles + 1)
        with m.If(Cat(*(fsm.ongoing(s) for s in _FINAL_ROW_STATES)).any()):
            m.d.sync += row_cycles.eq(row_cycles + 1)

        with fsm:
            with fsm.State("IDLE"):
                with m.If(command):
                    fsm.next = "ROOT"
                    m.d.sync += [error.eq(0), first_beat.eq(1),
                                 accepted.eq(0), rejects.eq(0), rejected_count.eq(0),
                                 rejected_slot.eq(1), last_step.eq(cmd.steps <= 2),
                                 last_reject.eq(cmd.nodes <= 1),
                                 issue_valid.eq(0), greedy_valid.eq(0), chain_busy.eq(0),
                                 p_acc.eq(0), has_positive.eq(0), pick_fallback.eq(0)]
            with fsm.State("ROOT"):
                with m.If(loaded != 0):
                    more = (steps >= 2) & ~node.next_none
                    m.d.sync += [
                        last_index.eq(node.index), row.eq(0), row_address.eq(node.address),
                        coin.eq(node.coin), predict.eq(node.predict),
                        issue_node.eq(node.next), issue_valid.eq(more), issue_ready.eq(0),
                        issue_address.eq(node.address), issue_count.eq(0),
                        greedy_node.eq(node.next), greedy_valid.eq(more),
                    ]
                    with m.If(more):
                        fsm.next = "WALK"
                    with m.Else():
                        fsm.next = "ROW"
            with fsm.State("WALK"):
                with m.If(walk_end):
                    fsm.next = "ROW"
                    m.d.sync += [issue_valid.eq(0), greedy_valid.eq(0)]
            with fsm.State("ROW"):
                with m.If(greedy | error):
                    fsm.next = "EMIT"
                    m.d.sync += picked.eq(Mux(error, 0, predict))
                with m.Elif(load_done & ~scanner.busy):
                    m.d.comb += [scanner.start.eq(1), scanner.init.eq(0),
                                 scanner.words.eq(row_count), scanner.pick.eq(0)]
                    fsm.next = "PASS1"
                    m.d.sync += [pass_one.eq(1), final_active.eq(1), final_word.eq(0),
                                 final_left.eq(row_count), final_more.eq(row_count != 0),
                                 row_index.eq(0), credits.eq(p.read_slots), has_credit.eq(1),
                                 wait.eq(0)]
            with fsm.State("PASS1"):
                m.d.sync += wait.eq(1)
                with m.If(wait & ~scanner.busy):
                    m.d.comb += [sums_write.en.eq(1), sums_write.addr.eq(segment_count),
                                 sums_write.data.eq(scanner.total)]
                    fsm.next = "SUM"
                    m.d.sync += [pass_one.eq(0), final_active.eq(0), wait.eq(0)]
            with fsm.State("SUM"):
                # product = final_coin * total, Float32Multiply.latency clocks.
                m.d.sync += wait.eq(wait + 1)
                with m.If(wait == Float32Multiply.latency):
                    fsm.next = "DECIDE"
                    m.d.sync += [u.eq(product.result),
                                 u_nan.eq(float32_fields(product.result).is_nan),
                                 u_negative.eq(float32_less(product.result, Const(0, 32)))]
            with fsm.State("DECIDE"):
                with m.If(u_nan):
                    fsm.next = "EMIT"
                    m.d.sync += pick_fallback.eq(1)
                with m.Elif(u_negative):
                    fsm.next = "EMIT"
                    m.d.sync += picked.eq(Mux(has_positive, first_positive, fallback))
                with m.Else():
                    fsm.next = "SEARCH"
                    m.d.sync += [low.eq(0), high.eq(segment_count)]
            with fsm.State("SEARCH"):
                # First segment s whose end sum (stored at s + 1) is above u.
                with m.If(low == high):
                    m.d.comb += sums_index.eq(low)
                    with m.If(low == segment_count):
                        fsm.next = "EMIT"
                        m.d.sync += pick_fallback.eq(1)
                    with m.Else():
                        fsm.next = "READ"
                        m.d.sync += search_found.eq(1)
                with m.Else():
                    m.d.comb += sums_index.eq(middle + 1)
                    fsm.next = "READ"
                    m.d.sync += search_found.eq(0)
            with fsm.State("READ"):
                # The sum is read this clock, `sums_data` next.
                with m.If(search_found):
                    fsm.next = "FOUND"
                with m.Else():
                    fsm.next = "COMPARE"
            with fsm.State("COMPARE"):
                # u < sum: u is neither NaN nor below -0.0 here (DECIDE) and the running sums of
                # a row of +0.0 and positive values are neither NaN nor negative, so the sign
                # and magnitude decide.
                with m.If(~sums_data[31] & (u[:31] < sums_data[:31])):
                    m.d.sync += high.eq(middle)
                with m.Else():
                    m.d.sync += low.eq(middle + 1)
                fsm.next = "SEARCH"
            with fsm.State("FOUND"):
                with m.If(~scanner.busy):
                    m.d.comb += [scanner.start.eq(1), scanner.init.eq(sums_data),
                                 scanner.words.eq(rescan_words), scanner.pick.eq(1)]
                    fsm.next = "PASS2"
                    m.d.sync += [final_active.eq(1), final_word.eq(base),
                                 final_left.eq(rescan_words), final_more.eq(rescan_words != 0),
                                 row_index.eq(base), segment_base.eq(base),
                                 credits.eq(p.read_slots), has_credit.eq(1), wait.eq(0)]
            with fsm.State("PASS2"):
                m.d.sync += wait.eq(1)
                with m.If(wait & ~scanner.busy):
                    token = ((segment_base + scanner.hit_word) << shift) | scanner.hit_lane
                    fsm.next = "EMIT"
                    m.d.sync += [picked.eq(Mux(scanner.hit, token, fallback)),
                                 final_active.eq(0)]
            with fsm.State("EMIT"):
                m.d.comb += result_slice.i.valid.eq(1)
                with m.If(result_slice.i.ready):
                    fsm.next = "DRAIN"
                    m.d.sync += [self.status.walk_cycles.eq(walk_cycles),
                                 self.status.row_cycles.eq(row_cycles + 1)]
            with fsm.State("DRAIN"):
                with m.If(load_done):
                    fsm.next = "IDLE"
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
