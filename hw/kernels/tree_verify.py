"""The fused verify (docs/kernels.md §10): tree speculative sampling from logits, reading only
the rows the traversal visits, bit-exact with ``golden.tree_speculative_sampling_from_logits``
and ``golden.draft_tree_reject_sample_from_logits`` (LFSR coins).

One request is one ``cmd`` beat and ``n`` ``tree`` beats (positions ``0..n-1``); the kernel
answers with one ``result`` packet (``accept_index``/``predicts`` pairs). Requests run one
after the other: the tree into the node memory, then the §8 walk, which for every row it
visits (the root's, then each accepted node's):

1. reads the row once from memory through the ``read_ports`` ports into their banks, finding
   the row's maximum on the way (``hw.kernels.tree_verify_loader``);
2. greedy requests (``temperature < 1e-6``) decide on the argmax; sampling requests compute
   the row constants and run passes of the lanes over the banks (``hw.kernels.tree_verify_row``):
   the normaliser, then, with top-k or top-p, a bit-serial search of the keep threshold (one
   pass per key bit) and the kept normaliser;
3. decides the candidate children one by one: the child's token through one more lane, its
   probability ``e / total`` (``hw.lib.wide_divide.RatioToFloat32``), §8's ``prob_acc`` add,
   division and compares; a rejected child's token leaves the residual.

The final draw finds the bank, then (one pick pass) the word, then the token whose prefix sum
of residual terms passes ``coin * residual``. Memory layout, schedule and cycle formula:
docs/tree_verify.md; parameters and layouts: ``hw.kernels.tree_verify_params``.
"""

import numpy as np
from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from golden.logit_rows import ALIGN_BITS, GREEDY_TEMPERATURE, GRID_OFFSET, SCALE_BITS
from hw.lib.component import KernelComponent
from hw.lib.float32 import Float32Add, float32_fields, float32_less, float32_less_equal
from hw.lib.float32_divide import Float32Divide
from hw.lib.fsm import OneHotFSM
from hw.lib.lfsr import GaloisLFSR32
from hw.lib.wide_divide import RatioToFloat32, TemperatureScale

from .tree_verify_lane import (
    GRID_BITS,
    KEY_BITS,
    KEY_TOP,
    SUM_BITS,
    LogitLane,
    align_magnitude,
)
from .tree_verify_loader import (
    RowLoader,
    drive_row_addresses,
    merge_latency,
    merge_peaks,
    row_split,
)
from .tree_verify_params import TreeVerifyParams
from .tree_verify_row import RowPass, widen_logit

__all__ = ["TreeVerify", "TreeVerifyParams", "V80_BUILD", "synthesis_parameters",
           "synthesis_configuration"]

_ONE = Const(0x3F80_0000, 32)
_GREEDY = Const(int(np.array(GREEDY_TEMPERATURE, np.float32).view(np.uint32)), 32)
_MIN_THRESHOLD_ACC = Const(int(np.array(1e-9, np.float32).view(np.uint32)), 32)
_COARSE_BITS = 35  # the coarse threshold is peak - 2**(L + 35)
_TERM_UP = 17  # e / 2**-48 = E * 2**(17 - k)
#: The 24-bit x SUM_BITS products (top-p's needed mass, the draw's u) run as partial products of
#: MUL_PIECE bits of the wide operand, one DSP slice a clock (unsigned 17 bits fit its 18-bit
#: port), accumulated a clock later, top piece first: MULTIPLY takes MUL_PIECES + 1 clocks.
MUL_PIECE = 17
MUL_PIECES = -(-SUM_BITS // MUL_PIECE)
#: Clocks from a request's ``cmd`` transfer (clock 0) to the start of its root row's read when
#: the tree and the root's decode take longer: the row's address registers settle in 6.
ROOT_START = 7
#: Clocks from a token's bank word to the token lane's answer (its input register, the lane).
TOKEN_LANE_LATENCY = 1 + LogitLane.LATENCY


class TreeVerify(KernelComponent):
    """The fused verify, bit-exact with the goldens (see the module).

    Parameters
    ----------
    See :class:`hw.kernels.tree_verify_params.TreeVerifyParams`.

    Members
    -------
    cmd : In(stream.Signature(cmd_layout))
        One beat per request: ``lfsr`` (coins from the generator seeded with ``seed``, else the
        tree beats' ``coin`` and ``final_coin``), ``nodes``/``steps``/``vocab_size`` (``n``,
        ``S``, ``V``, at least 2, 2 and 1), ``row_address``/``row_pitch`` (byte address of
        row 0, bytes between rows; port-word aligned), ``temperature`` (below ``1e-6``:
        greedy), ``top_k`` (off when ``<= 0`` or ``>= V``), ``top_p`` (float32; off when
        ``>= 1``), ``threshold_single``/``threshold_acc`` (float32 bits).
    tree : In(stream.Signature(tree_layout))
        ``n`` beats per request, position order: ``candidate``, ``index`` (``retrive_index``),
        ``next_token``/``next_sibling`` (signed; outside ``[0, n)``: none), ``coin``
        (``uniform_samples[b, i]``); ``first``/``last`` are not checked.
    read : Out(read_port).array(read_ports)
        The ``target_logits`` read ports (``hw.lib.axi.read_port_signature``).
    result : Out(stream.Signature(result_layout))
        One packet per request, ``accepted + 1`` beats: beat ``k`` is ``index =
        accept_index[b, k]`` and ``token = predicts[index]``; on the last beat ``nan`` (a row
        the request read held a NaN) and ``error`` (a link cycle: the outputs are then
        meaningless; the golden refuses such a call).
    status : Out(status_layout)
        ``cycles`` (``cmd`` to the last ``result`` beat) and ``rows`` (rows read) of the last
        request; ``beats``: read-port data beats since reset (bytes: ``beats * port_bytes``).
    """

    Params = TreeVerifyParams
    OUTPUTS = ("result",)

    def members(self, params):
        return {**super().members(params),
                "read": Out(params.read_port).array(params.read_ports),
                "status": Out(params.status_layout)}

    def elaborate(self, platform):
        p = self.params
        m = Module()
        cmd, tree, result = self.cmd, self.tree, self.result

        # --- request registers (reset_less: datapath, written before it is read; docs/timing.md)
        req = Signal(p.cmd_layout, reset_less=True)
        greedy = Signal()
        row_words = Signal(range(p.max_row_words + 1))
        grid = Signal(signed(GRID_BITS))
        scale = Signal(SCALE_BITS)
        final_coin = Signal(32)
        top_k_on = Signal()
        top_p_on = Signal()
        threshold_acc = Signal(32)

        chunk_log2, chunk, chunk_mask = row_split(m, p, row_words)  # per-request constants
        last_node = Signal.like(req.nodes)
        m.d.sync += last_node.eq(req.nodes - 1)
        divide_on = Signal()  # prob_acc / threshold_acc needs the divider
        # (both behind `req`: a compare of the command's port was in front of the divider)
        m.d.sync += [divide_on.eq(threshold_acc != _ONE),
                     threshold_acc.eq(Mux(float32_less(req.threshold_acc, _MIN_THRESHOLD_ACC),
                                          _MIN_THRESHOLD_ACC, req.threshold_acc))]

        # --- node memory ---------------------------------------------------------------------
        link = signed(p.node_bits + 2)
        node_layout = data.StructLayout({
            "candidate": unsigned(p.token_width), "index": unsigned(p.index_width),
            "next": link, "sibling": link, "coin": 32})
        nodes = Memory(shape=node_layout, depth=p.max_nodes, init=[])
        m.submodules.nodes = nodes
        node_write = nodes.write_port()
        node_read = nodes.read_port()
        node = node_read.data

        m.submodules.lfsr = lfsr = GaloisLFSR32()

        # --- row units -----------------------------------------------------------------------
        loaders = []
        for port in range(p.read_ports):
            loader = RowLoader(port_bits=p.port_bits, logit_bits=p.logit_bits,
                               depth=p.bank_words, address_width=p.address_width,
                               max_burst=p.max_burst, token_width=p.token_width)
            m.submodules[f"loader{port}"] = loader
            wiring.connect(m, wiring.flipped(self.read[port]), loader.port)
            loaders.append(loader)
        merged = merge_peaks(m, loaders)
        m.submodules.row_pass = row_pass = RowPass(p)
        m.submodules.token_lane = token_lane = LogitLane()
        m.submodules.add = add = Float32Add()
        m.submodules.divide = divide = Float32Divide()
        m.submodules.ratio = ratio = RatioToFloat32(32, SUM_BITS, 10)
        m.submodules.temperature = temperature = TemperatureScale()

        peak = Signal(32, reset_less=True)
        argmax = Signal(p.token_width)
        is_argmax = Signal()  # GREEDY's test, registered with the candidate (10 LUT levels)
        nan = Signal()
        threshold = Signal(32, reset_less=True)
        peak_aligned = Signal(ALIGN_BITS, reset_less=True)
        key_filter = Signal(KEY_BITS)
        z_limit = Signal(signed(KEY_BITS + 1))  # key >= key_filter is z <= z_limit
        m.d.sync += z_limit.eq(KEY_TOP - key_filter)
        # peak_aligned in three registered steps behind ``peak`` (set in LOADING; first read
        # in PASS_ALL, after LOADED and the Float32Add.latency + 1 clocks of CONSTANTS).
        peak_fields = float32_fields(peak)
        align_shift = Signal(signed(12), reset_less=True)
        peak_magnitude = Signal(ALIGN_BITS, reset_less=True)
        m.d.sync += [
            align_shift.eq(peak_fields.exponent_eff - 150 - grid),
            peak_magnitude.eq(align_magnitude(peak_fields.mantissa, align_shift)),
            peak_aligned.eq(Mux(peak_fields.is_inf, 0,
                                Mux(peak_fields.sign, -peak_magnitude, peak_magnitude))),
        ]
        m.d.comb += [
            row_pass.chunk.eq(chunk), row_pass.first_word.eq(0), row_pass.words.eq(chunk),
            row_pass.full_words.eq(req.vocab_size >> (p.port_logits.bit_length() - 1)),
            row_pass.tail_lanes.eq(req.vocab_size[:max(p.port_logits.bit_length() - 1, 1)]),
            row_pass.peak.eq(peak), row_pass.threshold.eq(threshold), row_pass.grid.eq(grid),
            row_pass.peak_aligned.eq(peak_aligned), row_pass.scale.eq(scale),
            row_pass.filter.eq(key_filter),
            token_lane.en.eq(1), token_lane.peak.eq(peak), token_lane.threshold.eq(threshold),
            token_lane.grid.eq(grid), token_lane.peak_aligned.eq(peak_aligned),
            token_lane.scale.eq(scale),
        ]
        for port, loader in enumerate(loaders):
            m.d.comb += row_pass.bank_data[port].eq(loader.read_data)

        # A token's place in the banks: bank word, bank, lane of the bank's word. Bank word and
        # bank are registers set with ``token`` (not a variable shift behind it: set_token).
        token = Signal(p.token_width)
        lane_bits = p.port_logits.bit_length() - 1
        token_bank_word = Signal(range(max(p.bank_words, 2)))
        token_bank = Signal(range(max(p.read_ports, 2)))

        def set_token(value):
            word = value >> lane_bits
            return [token.eq(value), token_bank_word.eq(word & chunk_mask),
                    token_bank.eq(word >> chunk_log2)]
        token_lane_index = Signal(range(max(p.port_logits, 2)))
        m.d.comb += token_lane_index.eq(token[:max(lane_bits, 1)])
        reading_token = Signal()
        for loader in loaders:
            m.d.comb += loader.read_addr.eq(Mux(reading_token, token_bank_word,
                                                row_pass.bank_address))
        block_bits = (p.block_words - 1).bit_length()
        drawing_blocks = Signal()
        draw_block = Signal(range(max(p.max_blocks, 2)))
        m.d.comb += [
            row_pass.remove_word.eq(token_bank_word),
            row_pass.block_address.eq(Mux(drawing_blocks, draw_block,
                                          token_bank_word >> block_bits)),
            row_pass.block_remove_bank.eq(token_bank),
        ]
        bank_word = Signal(p.port_bits)
        m.d.comb += bank_word.eq(Array(loader.read_data for loader in loaders)[token_bank])
        token_logit = Signal(32)
        m.d.comb += token_logit.eq(widen_logit(
            bank_word.word_select(token_lane_index, p.logit_bits), p.logit_bits))
        token_valid = Signal()
        # (a clock after the banks' read: their multiplexers and the lane were 8 LUT levels)
        m.d.sync += [token_lane.logit.eq(token_logit), token_lane.valid.eq(token_valid)]
        removed_bit = Signal()
        m.d.comb += removed_bit.eq(row_pass.removed_word.bit_select(
            Cat(token_lane_index, token_bank)[:max(p.lanes.bit_length() - 1, 1)], 1))
        removed_before = Signal()  # REJECT's copy, a clock behind (current from LANE on)
        m.d.sync += removed_before.eq(removed_bit)

        # --- walk registers ------------------------------------------------------------------
        cur = Signal(range(max(p.max_nodes, 2)))
        last_next = Signal(link)  # next_token of the last accepted node
        sibling = Signal(link)
        candidate_index = Signal(p.index_width)
        pending_index = Signal(p.index_width)  # accept_index entry waiting for its token
        coin = Signal(32, reset_less=True)
        prob_acc = Signal(32, reset_less=True)
        q = Signal(32, reset_less=True)
        accepted = Signal(range(p.max_steps + 1))
        row = Signal(range(max(p.max_nodes, 2)))
        tries = Signal(range(p.max_nodes + 2))  # siblings tried in this step (cycle guard)
        kept_total = Signal(SUM_BITS, reset_less=True)
        residual = Signal(SUM_BITS, reset_less=True)
        bank_residual = Signal(data.ArrayLayout(SUM_BITS, p.read_ports), reset_less=True)
        term = Signal(len(token_lane.term), reset_less=True)
        mantissa = Signal(32, reset_less=True)
        exponent_shift = Signal(8)
        kept = Signal()
        wait = Signal(range(64))
        bit = Signal(range(KEY_BITS + 1))
        search = Signal(KEY_BITS, reset_less=True)
        search_bit = Signal(KEY_BITS)  # 1 << (bit - 1), shifted along with ``bit``
        topk_filter = Signal(KEY_BITS, reset_less=True)
        needed = Signal(SUM_BITS, reset_less=True)
        searching_p = Signal()
        product = Signal(24 + SUM_BITS, reset_less=True)
        shift = Signal(range(256))
        # The shared multiply (MULTIPLY, SCALE): scaled = mul_a * mul_b >> shift, below: the rest
        mul_a = Signal(24, reset_less=True)
        mul_b = Signal(MUL_PIECES * MUL_PIECE, reset_less=True)
        partial = Signal(24 + MUL_PIECE, reset_less=True)
        mul_count = Signal(range(MUL_PIECES + 1))
        mul_draw = Signal()  # the multiply is the draw's (else top-p's)
        scaled = Signal(24 + SUM_BITS, reset_less=True)
        below = Signal(24 + SUM_BITS, reset_less=True)
        round_up = Signal()
        limit = Signal(SUM_BITS, reset_less=True)  # residual - 1
        remaining = Signal(SUM_BITS + 1, reset_less=True)  # the draw's u less the prefix so far
        pick_bank = Signal(range(max(p.read_ports, 2)))
        pick_word = Signal(range(max(p.bank_words, 2)))
        draw_word = Signal(range(max(p.bank_words, 2)))
        scan_valid = Signal()
        scan_block = Signal(range(max(p.max_blocks, 2)))
        block_share = Signal(SUM_BITS, reset_less=True)  # the scan's block sum, a clock late
        block_share_valid = Signal()
        block_share_at = Signal(range(max(p.max_blocks, 2)))
        no_residual = Signal()  # `residual == 0`, registered: it holds from FINAL on (8 clocks)
        m.d.sync += no_residual.eq(residual == 0)
        # STEP's, REJECT's and DRAW's tests, registered ahead (8 LUT levels and a carry into
        # `cur` and `bonus`): `last_next` and `accepted` settle three clocks before STEP,
        # `sibling` two before REJECT (NODE_DATA -> GREEDY -> REJECT), the coin in FINAL_COIN.
        walk_ends, sibling_ends, coin_negative = Signal(), Signal(), Signal()
        m.d.sync += [walk_ends.eq((accepted == req.steps - 1) | (last_next < 0)
                                  | (last_next >= req.nodes)),
                     sibling_ends.eq((sibling < 0) | (sibling >= req.nodes))]
        found = Signal()
        lane_in = Signal(range(p.port_logits + 1))
        lane_out = Signal(range(p.port_logits + 1))
        bonus = Signal(p.token_width)
        draw_base = Signal(p.token_width)
        error = Signal()
        cycles = Signal(32)
        rows = Signal(16)
        busy = Signal()
        m.d.comb += [self.status.beats.eq(sum(loader.beats for loader in loaders)[:48]),
                     self.status.cycles.eq(cycles), self.status.rows.eq(rows),
                     row_pass.pick_bank.eq(pick_bank)]
        with m.If(busy):
            m.d.sync += cycles.eq(cycles + 1)
        # IDLE is exactly `~busy`: the handshake and the LFSR's load off the state's decode
        m.d.comb += [cmd.ready.eq(~busy), lfsr.load.eq(cmd.valid & ~busy),
                     lfsr.seed.eq(cmd.payload.seed)]

        # Float plumbing of a decision.
        coin_fields = float32_fields(final_coin)
        m.d.sync += coin_negative.eq(coin_fields.sign & ~coin_fields.is_zero)
        # CONSTANTS uses the adder for the threshold: peak - margin, margin =
        # 2**(L + 35) (infinite above 2**127), a register of the request's grid.
        constants_phase = Signal()
        margin = Signal(32)
        margin_exponent = grid + _COARSE_BITS + 127
        m.d.sync += margin.eq(Mux(margin_exponent >= 255, 0x7F80_0000,
                                  margin_exponent[:8] << 23))
        m.d.comb += [
            add.a.eq(Mux(constants_phase, peak, prob_acc)),
            add.b.eq(Mux(constants_phase, margin, q)), add.subtract.eq(constants_phase),
            divide.a.eq(add.result), divide.b.eq(threshold_acc),
            temperature.request.payload.eq(req.temperature),
            ratio.request.payload.numerator.eq(mantissa),
            ratio.request.payload.denominator.eq(kept_total),
            ratio.request.payload.scale.eq(_TERM_UP - exponent_shift),
        ]
        # accept = q > 0 and (coin <= prob_acc / threshold_acc or threshold_single <= q),
        # registered a clock before ADD_WAIT ends (the sum is there then: see ADD_WAIT). q > 0
        # is ours, not SGLang's: a token of probability 0 is never accepted. q's tests are
        # registered behind q (set two clocks or more before), the coin's compare is made with
        # the divider's and the adder's result side by side (no division by 1.0).
        q_positive, q_single, accept = Signal(), Signal(), Signal()
        m.d.sync += [q_positive.eq(float32_less(Const(0, 32), q)),
                     q_single.eq(float32_less_equal(req.threshold_single, q)),
                     accept.eq(q_positive & (q_single | Mux(
                         divide_on, float32_less_equal(coin, divide.result),
                         float32_less_equal(coin, add.result))))]

        drive_row_addresses(m, p, loaders, req=req, row=row, row_words=row_words,
                            chunk_log2=chunk_log2, chunk=chunk, lane_bits=lane_bits)

        def start_multiply(a, b, exponent_eff):
            """product = a * b over MULTIPLY, then scaled = a * b * 2**(exponent_eff - 150)
            rounded down (exponents of 150 and more: not shifted)."""
            return [mul_a.eq(a), mul_b.eq(b), partial.eq(0), product.eq(0),
                    mul_count.eq(MUL_PIECES),
                    shift.eq(Mux(exponent_eff >= 150, 0, 150 - exponent_eff))]

        # The tree beat of the clock before (its coin is the LFSR's after the beat's advance).
        w_valid = Signal()
        w_beat = Signal(p.tree_layout)
        m.d.sync += [w_valid.eq(tree.valid & tree.ready), w_beat.eq(tree.payload)]

        # The root's row is read while the tree comes in (its address is the request's
        # first row): the loaders start ROOT_START clocks after the command, when their
        # address registers have settled (see drive_row_addresses), unless ROW comes first.
        settle = Signal(range(ROOT_START + 1))
        root_started = Signal()
        start_row = Signal()
        with m.If(settle != ROOT_START):
            m.d.sync += settle.eq(settle + 1)
        with m.If(start_row):
            for loader in loaders:
                m.d.comb += loader.start.eq(1)
            m.d.sync += rows.eq(rows + 1)

        with OneHotFSM(m, init="IDLE", name="state") as fsm:
            with fsm.State("IDLE"):
                with m.If(cmd.valid):
                    payload = cmd.payload
                    words = (payload.vocab_size + p.port_logits - 1) >> lane_bits
                    top_p_fields = float32_fields(payload.top_p)
                    m.d.sync += [
                        req.eq(payload), row_words.eq(words),
                        greedy.eq(float32_less(payload.temperature, _GREEDY)),
                        top_k_on.eq((payload.top_k > 0) & (payload.top_k < payload.vocab_size)),
                        top_p_on.eq(top_p_fields.sign | (top_p_fields.magnitude < _ONE)),
                        final_coin.eq(payload.final_coin), cur.eq(0), nan.eq(0), rows.eq(0),
                        row.eq(0), cycles.eq(1), busy.eq(1), accepted.eq(0), error.eq(0),
                        settle.eq(0), root_started.eq(0),
                    ]
                    fsm.next = "TREE"
            with fsm.State("TREE"):
                # Node i's LFSR coin is draw i + 1: the advance of its beat happens first.
                # `last_node` is a clock behind `req`, as is the first beat (`w_valid`).
                last_beat = w_valid & (cur == last_node)
                m.d.comb += [tree.ready.eq(~last_beat),
                             lfsr.advance.eq(tree.valid & tree.ready | last_beat)]
                with m.If(w_valid):
                    m.d.comb += [
                        node_write.en.eq(1), node_write.addr.eq(cur),
                        node_write.data.candidate.eq(w_beat.candidate),
                        node_write.data.index.eq(w_beat.index),
                        node_write.data.next.eq(w_beat.next_token),
                        node_write.data.sibling.eq(w_beat.next_sibling),
                        node_write.data.coin.eq(Mux(req.lfsr, lfsr.coin, w_beat.coin)),
                    ]
                    m.d.sync += cur.eq(cur + 1)
                    with m.If(last_beat):
                        fsm.next = "FINAL_COIN"
            with fsm.State("FINAL_COIN"):
                m.d.sync += [final_coin.eq(Mux(req.lfsr, lfsr.coin, req.final_coin)), cur.eq(0)]
                m.d.comb += temperature.request.valid.eq(~greedy)
                with m.If(greedy | temperature.request.ready):
                    fsm.next = "ROOT"
            with fsm.State("ROOT"):
                # Node 0: its index starts the packet, its coin the walk, its row the first read.
                m.d.comb += node_read.addr.eq(0)
                fsm.next = "ROOT_DATA"
            with fsm.State("ROOT_DATA"):
                m.d.sync += [pending_index.eq(node.index), coin.eq(node.coin),
                             last_next.eq(node.next), prob_acc.eq(0)]
                m.d.comb += temperature.response.ready.eq(1)
                with m.If(greedy):
                    fsm.next = "ROW"
                with m.Elif(temperature.response.valid):
                    m.d.sync += [scale.eq(temperature.response.payload.mantissa),
                                 grid.eq(-temperature.response.payload.exponent - GRID_OFFSET)]
                    fsm.next = "ROW"

            # --- a row: load, constants, passes ----------------------------------------------
            with fsm.State("ROW"):
                # (The loaders' addresses follow `row` two clocks later: see drive_row_addresses.)
                with m.If(~root_started):
                    m.d.comb += start_row.eq(1)
                m.d.sync += [wait.eq(0), root_started.eq(0)]
                fsm.next = "LOADING"
            with fsm.State("LOADING"):
                with m.If(Cat(loader.busy for loader in loaders) == 0):
                    m.d.sync += wait.eq(wait + 1)
                    with m.If(wait == merge_latency(p.read_ports)):
                        m.d.sync += [peak.eq(merged.peak), argmax.eq(merged.peak_index),
                                     nan.eq(nan | merged.nan)]
                        fsm.next = "LOADED"
            with fsm.State("LOADED"):
                with m.If(greedy):
                    fsm.next = "STEP"
                with m.Else():
                    m.d.sync += [wait.eq(Float32Add.latency), constants_phase.eq(1)]
                    fsm.next = "CONSTANTS"
            with fsm.State("CONSTANTS"):
                # threshold = fl32(peak - 2**(L + 35)) (infinite above 2**127); peak_aligned settles
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.sync += [threshold.eq(add.result), key_filter.eq(0),
                                 constants_phase.eq(0)]
                    fsm.next = "PASS_ALL"
            with fsm.State("PASS_ALL"):
                m.d.comb += [row_pass.clear_removed.eq(1), row_pass.start.eq(1)]
                fsm.next = "PASS_ALL_WAIT"
            with fsm.State("PASS_ALL_WAIT"):
                m.d.comb += row_pass.clear_removed.eq(1)
                with m.If(row_pass.done):
                    m.d.sync += [bit.eq(KEY_BITS), search_bit.eq(1 << (KEY_BITS - 1)), search.eq(0),
                                 topk_filter.eq(0), searching_p.eq(0)]
                    with m.If(top_k_on):
                        fsm.next = "SEARCH"
                    with m.Elif(top_p_on):
                        fsm.next = "TOP_P"
                    with m.Else():
                        fsm.next = "KEPT"
            with fsm.State("SEARCH"):
                # One pass per key bit, from the top: keep the bit when the pass with it set
                # still counts k tokens (top-k) or the needed mass (top-p).
                candidate = search | search_bit
                m.d.sync += key_filter.eq(Mux(searching_p & (candidate < topk_filter),
                                              topk_filter, candidate))
                with m.If(bit == 0):
                    with m.If(searching_p):
                        m.d.sync += key_filter.eq(Mux(search < topk_filter, topk_filter,
                                                      search))
                        fsm.next = "FINAL_PASS"
                    with m.Else():
                        m.d.sync += [topk_filter.eq(search), key_filter.eq(search)]
                        fsm.next = "TOPK_PASS"
                with m.Else():
                    fsm.next = "SEARCH_PASS"
            with fsm.State("SEARCH_PASS"):
                m.d.comb += row_pass.start.eq(1)
                fsm.next = "SEARCH_WAIT"
            with fsm.State("SEARCH_WAIT"):
                with m.If(row_pass.done):
                    good = Mux(searching_p, row_pass.total >= needed,
                               row_pass.count >= req.top_k.as_unsigned())
                    with m.If(good):
                        m.d.sync += search.eq(search | search_bit)
                    m.d.sync += [bit.eq(bit - 1), search_bit.eq(search_bit >> 1)]
                    fsm.next = "SEARCH"
            with fsm.State("TOPK_PASS"):
                m.d.comb += row_pass.start.eq(1)
                fsm.next = "TOPK_WAIT"
            with fsm.State("TOPK_WAIT"):
                with m.If(row_pass.done):
                    with m.If(top_p_on):
                        fsm.next = "TOP_P"
                    with m.Else():
                        fsm.next = "KEPT"
            with fsm.State("TOP_P"):
                # needed = max(ceil(top_p * kept total), 1): the product, the shift (SCALE),
                # then floor + 1 unless exact and nonzero (TOP_P_ROUND, TOP_P_CEIL).
                top_p = float32_fields(req.top_p)
                m.d.sync += [*start_multiply(Mux(top_p.sign, 0, top_p.mantissa), row_pass.total,
                                             top_p.exponent_eff), mul_draw.eq(0)]
                fsm.next = "MULTIPLY"
            with fsm.State("TOP_P_ROUND"):
                m.d.sync += round_up.eq((below != 0) | (scaled == 0))
                fsm.next = "TOP_P_CEIL"
            with fsm.State("TOP_P_CEIL"):
                m.d.sync += [needed.eq(scaled[:SUM_BITS] + round_up), bit.eq(KEY_BITS),
                             search_bit.eq(1 << (KEY_BITS - 1)), search.eq(0),
                             searching_p.eq(1)]
                fsm.next = "SEARCH"

            # --- product = mul_a * mul_b, top piece first (see MUL_PIECE) ------------------
            with fsm.State("MULTIPLY"):
                m.d.sync += [partial.eq(mul_a * mul_b[-MUL_PIECE:]), mul_b.eq(mul_b << MUL_PIECE),
                             product.eq((product << MUL_PIECE) + partial),
                             mul_count.eq(mul_count - 1)]
                with m.If(mul_count == 0):
                    fsm.next = "SCALE"
            with fsm.State("SCALE"):
                m.d.sync += [scaled.eq(product >> shift),
                             below.eq(product & Cat(shift > i for i in range(len(product))))]
                with m.If(mul_draw):
                    fsm.next = "DRAW"
                with m.Else():
                    fsm.next = "TOP_P_ROUND"
            with fsm.State("FINAL_PASS"):
                m.d.comb += row_pass.start.eq(1)
                fsm.next = "FINAL_WAIT"
            with fsm.State("FINAL_WAIT"):
                with m.If(row_pass.done):
                    fsm.next = "KEPT"
            with fsm.State("KEPT"):
                m.d.sync += [kept_total.eq(row_pass.total), residual.eq(row_pass.total),
                             bank_residual.eq(row_pass.bank_sums)]
                fsm.next = "STEP"

            # --- the walk: one step's siblings ---------------------------------------------
            with fsm.State("STEP"):
                # cur = next_token[last]; none (or all S - 1 steps taken): the final draw.
                with m.If(walk_ends):
                    fsm.next = "FINAL"
                with m.Else():
                    m.d.sync += [cur.eq(last_next), tries.eq(0)]
                    fsm.next = "NODE"
            with fsm.State("NODE"):
                m.d.comb += node_read.addr.eq(cur)
                m.d.sync += tries.eq(tries + 1)
                with m.If(tries == req.nodes):
                    m.d.sync += error.eq(1)
                    fsm.next = "FINAL"
                with m.Else():
                    fsm.next = "NODE_DATA"
            with fsm.State("NODE_DATA"):
                m.d.sync += [*set_token(node.candidate), candidate_index.eq(node.index),
                             sibling.eq(node.sibling), is_argmax.eq(node.candidate == argmax)]
                with m.If(greedy):
                    fsm.next = "GREEDY"
                with m.Else():
                    fsm.next = "TOKEN"
            with fsm.State("GREEDY"):
                m.d.sync += q.eq(0)
                with m.If(is_argmax):
                    fsm.next = "ACCEPT"
                with m.Else():
                    fsm.next = "REJECT"
            with fsm.State("TOKEN"):
                m.d.comb += reading_token.eq(1)
                fsm.next = "TOKEN_DATA"
            with fsm.State("TOKEN_DATA"):
                # The bank word arrives: the token's logit into the lane.
                m.d.comb += [reading_token.eq(1), token_valid.eq(1)]
                m.d.sync += wait.eq(TOKEN_LANE_LATENCY - 1)
                fsm.next = "LANE"
            with fsm.State("LANE"):
                m.d.comb += reading_token.eq(1)
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    is_kept = token_lane.in_range & (token_lane.z <= z_limit)
                    m.d.sync += [kept.eq(is_kept), term.eq(token_lane.term), q.eq(0),
                                 mantissa.eq(token_lane.mantissa),
                                 exponent_shift.eq(token_lane.shift)]
                    fsm.next = "LANE_DONE"
            with fsm.State("LANE_DONE"):
                with m.If(kept):
                    fsm.next = "RATIO_REQUEST"
                with m.Else():
                    fsm.next = "ADD"
            with fsm.State("RATIO_REQUEST"):
                m.d.comb += ratio.request.valid.eq(1)
                with m.If(ratio.request.ready):
                    fsm.next = "RATIO"
            with fsm.State("RATIO"):
                m.d.comb += ratio.response.ready.eq(1)
                with m.If(ratio.response.valid):
                    m.d.sync += q.eq(ratio.response.payload)
                    fsm.next = "ADD"
            with fsm.State("ADD"):
                # The adder's (and divider's) inputs hold from here: its result is there the
                # clock wait reaches 1, where ``accept`` is registered; read at 0.
                m.d.sync += wait.eq(Mux(divide_on, Float32Add.latency + divide.latency,
                                        Float32Add.latency))
                fsm.next = "ADD_WAIT"
            with fsm.State("ADD_WAIT"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.sync += prob_acc.eq(add.result)
                    with m.If(accept):
                        fsm.next = "ACCEPT"
                    with m.Else():
                        fsm.next = "REJECT"
            with fsm.State("REJECT"):
                # The token leaves the residual once (a repeated token is one token).
                m.d.comb += reading_token.eq(1)
                with m.If(~greedy & kept & ~removed_before):
                    m.d.comb += [row_pass.remove.eq(1),
                                 row_pass.remove_lane.eq(Cat(token_lane_index, token_bank)),
                                 row_pass.block_remove.eq(1),
                                 row_pass.block_remove_term.eq(term)]
                    m.d.sync += [residual.eq(residual - term),
                                 bank_residual[token_bank].eq(bank_residual[token_bank] - term)]
                m.d.sync += cur.eq(sibling)
                with m.If(sibling_ends):
                    fsm.next = "FINAL"
                with m.Else():
                    fsm.next = "NODE"
            with fsm.State("ACCEPT"):
                m.d.comb += [result.valid.eq(1), result.payload.index.eq(pending_index),
                             result.payload.token.eq(token),
                             result.payload.first.eq(accepted == 0)]
                with m.If(result.ready):
                    m.d.sync += [pending_index.eq(candidate_index), accepted.eq(accepted + 1),
                                 prob_acc.eq(0), row.eq(cur)]
                    fsm.next = "ACCEPT_NODE"
            with fsm.State("ACCEPT_NODE"):
                m.d.comb += node_read.addr.eq(cur)
                fsm.next = "ACCEPT_DATA"
            with fsm.State("ACCEPT_DATA"):
                m.d.sync += [coin.eq(node.coin), last_next.eq(node.next)]
                fsm.next = "ROW"

            # --- the bonus token -------------------------------------------------------------
            with fsm.State("FINAL"):
                m.d.sync += [bonus.eq(argmax), limit.eq(residual - 1)]
                with m.If(greedy | error):
                    fsm.next = "EMIT"
                with m.Else():
                    m.d.sync += [*start_multiply(coin_fields.mantissa, residual,
                                                 coin_fields.exponent_eff), mul_draw.eq(1)]
                    fsm.next = "MULTIPLY"
            with fsm.State("DRAW"):
                # u = coin * residual on the integer grid (scaled); past the end: the last positive
                # term (the first prefix reaching the residual); a negative coin: token 0. The
                # scan keeps u - prefix (remaining): t passes u when prefix + t > u (t > remaining).
                m.d.sync += [remaining.eq(Mux(scaled > limit, limit, scaled)), pick_bank.eq(0)]
                with m.If(no_residual):
                    m.d.sync += bonus.eq(req.vocab_size - 1)
                    fsm.next = "EMIT"
                with m.Elif(coin_negative):
                    m.d.sync += bonus.eq(0)
                    fsm.next = "EMIT"
                with m.Else():
                    fsm.next = "DRAW_BANK"
            with fsm.State("DRAW_BANK"):
                share = bank_residual[pick_bank]
                with m.If(share > remaining):
                    m.d.sync += [draw_block.eq(0), scan_valid.eq(0), block_share_valid.eq(0)]
                    fsm.next = "DRAW_BLOCKS"
                with m.Else():
                    m.d.sync += [remaining.eq(remaining - share), pick_bank.eq(pick_bank + 1)]
            with fsm.State("DRAW_BLOCKS"):
                # The bank's block sums, one address a clock; the data a clock later.
                m.d.comb += drawing_blocks.eq(1)
                # (each sum registered before its compare: 8 LUT levels and a carry before)
                m.d.sync += [draw_block.eq(draw_block + 1), scan_valid.eq(1),
                             scan_block.eq(draw_block), block_share_valid.eq(scan_valid),
                             block_share_at.eq(scan_block),
                             block_share.eq(row_pass.block_data[pick_bank])]
                with m.If(block_share_valid):
                    with m.If(block_share > remaining):
                        m.d.sync += draw_block.eq(block_share_at)
                        fsm.next = "DRAW_PASS"
                    with m.Else():
                        m.d.sync += remaining.eq(remaining - block_share)
            with fsm.State("DRAW_PASS"):
                # The block's words through the lanes, removed tokens left out.
                first_word = draw_block << block_bits
                m.d.comb += [row_pass.start.eq(1), row_pass.apply_removed.eq(1),
                             row_pass.first_word.eq(first_word),
                             row_pass.words.eq(Mux(chunk < p.block_words, chunk,
                                                   p.block_words))]
                m.d.sync += [found.eq(0), draw_word.eq(first_word)]
                fsm.next = "DRAW_WORDS"
            with fsm.State("DRAW_WORDS"):
                m.d.comb += [row_pass.apply_removed.eq(1),
                             row_pass.first_word.eq(draw_block << block_bits),
                             row_pass.words.eq(Mux(chunk < p.block_words, chunk,
                                                   p.block_words))]
                with m.If(row_pass.word_valid & ~found):
                    with m.If(row_pass.word_sum > remaining):
                        m.d.sync += [found.eq(1), pick_word.eq(draw_word)]
                    with m.Else():
                        m.d.sync += remaining.eq(remaining - row_pass.word_sum)
                with m.If(row_pass.word_valid):
                    m.d.sync += draw_word.eq(draw_word + 1)
                with m.If(row_pass.done):
                    first = ((pick_bank << chunk_log2) | pick_word) << lane_bits
                    m.d.sync += [lane_in.eq(0), lane_out.eq(0), found.eq(0), token.eq(first),
                                 token_bank.eq(pick_bank), token_bank_word.eq(pick_word),
                                 draw_base.eq(first)]
                    fsm.next = "DRAW_READ"
            with fsm.State("DRAW_READ"):
                m.d.comb += reading_token.eq(1)
                fsm.next = "DRAW_LANES"
            with fsm.State("DRAW_LANES"):
                # The word's tokens one per clock through the token lane, in token order.
                m.d.comb += reading_token.eq(1)
                issue = lane_in != p.port_logits
                m.d.comb += token_valid.eq(issue & (token < req.vocab_size))
                with m.If(issue):
                    m.d.sync += [lane_in.eq(lane_in + 1), token.eq(token + 1)]
                removed_delay = [Signal(name=f"draw_removed{i}") for i in range(TOKEN_LANE_LATENCY)]
                valid_delay = [Signal(name=f"draw_valid{i}") for i in range(TOKEN_LANE_LATENCY)]
                m.d.sync += [removed_delay[0].eq(removed_bit), valid_delay[0].eq(issue)]
                for i in range(1, TOKEN_LANE_LATENCY):
                    m.d.sync += [removed_delay[i].eq(removed_delay[i - 1]),
                                 valid_delay[i].eq(valid_delay[i - 1])]
                counts = (token_lane.out_valid & token_lane.in_range
                          & (token_lane.z <= z_limit) & ~removed_delay[-1])
                # (The compare and the subtraction run beside the count, muxed at the end.)
                with m.If(valid_delay[-1]):
                    m.d.sync += lane_out.eq(lane_out + 1)
                    with m.If(~found & counts & (token_lane.term > remaining)):
                        m.d.sync += [found.eq(1), bonus.eq(draw_base + lane_out)]
                    m.d.sync += remaining.eq(Mux(counts, remaining - token_lane.term,
                                                 remaining))
                with m.If(lane_out == p.port_logits):
                    fsm.next = "EMIT"
            with fsm.State("EMIT"):
                m.d.comb += [result.valid.eq(1), result.payload.index.eq(pending_index),
                             result.payload.token.eq(bonus), result.payload.last.eq(1),
                             result.payload.first.eq(accepted == 0),
                             result.payload.nan.eq(nan), result.payload.error.eq(error)]
                with m.If(result.ready):
                    m.d.sync += busy.eq(0)
                    fsm.next = "IDLE"
        with m.If((settle == ROOT_START - 1) & ~root_started
                  & (fsm.ongoing("TREE") | fsm.ongoing("FINAL_COIN") | fsm.ongoing("ROOT")
                     | fsm.ongoing("ROOT_DATA"))):
            m.d.comb += start_row.eq(1)
            m.d.sync += root_started.eq(1)
        return m


#: The default V80 build: 32 HBM read ports of 512 bits carrying bfloat16 logits, 1,024 lanes
#: (docs/tree_verify.md). Too large to simulate on two cores: its cycle figures come from the
#: schedule formula, which equals the simulated cycles of smaller builds.
V80_BUILD = {"max_nodes": 64, "max_steps": 8, "max_vocab_size": 131072, "read_ports": 32,
             "port_bits": 512, "logit_format": "bfloat16"}


def synthesis_parameters(**overrides) -> TreeVerifyParams:
    """The record of ``python -m hw.synth tree_verify``: two ports of 256 bits (16 lanes)."""
    return TreeVerifyParams(**{"max_vocab_size": 32768, **overrides})


def synthesis_configuration(**overrides) -> TreeVerify:
    return TreeVerify(**vars(synthesis_parameters(**overrides)))
