"""K2 ``update_cumu_draft_state`` (docs/kernels.md §3) as a streaming hardware kernel.

The cumulative draft tree of every request slot lives on chip, in memories addressed by
``{slot, index}`` (all eleven in/out buffers of §3; integer buffers stored as two's-complement
``token_width``/``index_width`` values and returned sign-extended, float buffers as their 32
bits). One request (one depth of one draft round) arrives as a packet of ``N = W*K`` beats, is
applied in place exactly as §3 says (bit-exact with ``golden.update_cumu_draft_state``, CUDA
partial update on node-budget overflow), and is acknowledged on ``done``. A host port loads
and dumps every state buffer element by element. Storage, engine schedule, write order and
cycle figures: docs/decisions.md, "K2 hardware". A request takes
``4..5 + max(N + W, N + 5, ws0 + K + 1, ws1 + 3)`` cycles without idle or back-pressure
(``N + 5``: the last append leaves ``Float32Multiply``'s 6-clock pipeline).

Host port protocol: every command on ``host_cmd`` is answered by exactly one ``host_rsp`` in
order (a write's answer is all zeros; so is a read outside the buffer or of a slot
``>= max_batch``, whose writes are ignored). Host commands are served only between requests
and take priority over a waiting request; a host must wait for the answers of its loads before
it sends the request that depends on them, and for ``done`` before it dumps.

Request framing: the header fields are taken from the beat marked ``first`` (beats before a
``first`` beat are discarded); exactly ``N = tree_width * K`` beats follow, counting the first.
A ``first``/``last`` marker in the wrong place sets ``framing_error`` in the ``done`` record. A
request with ``slot >= max_batch`` or ``tree_width`` outside ``1..max_tree_width`` is consumed
(``N`` beats with ``tree_width`` clamped into range) without any write, ``refused`` set.
``sorted_indexs >= N`` or ``parent_indexs >= tree_width`` are outside the contract (the host API
refuses them); the hardware then copies unspecified data but never hangs.
"""

import enum
from dataclasses import asdict, dataclass
from functools import cached_property

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from hw.lib.component import KernelComponent
from hw.lib.float32 import Float32Multiply, float32_less_equal
from hw.lib.params import ParameterError, ParameterRecord, check_int, index_bits, parameter
from hw.lib.pipeline import data_stage, stage
from hw.lib.stream import packet_layout, stalling_handshake

__all__ = ["CUMU_SCORE_SCALE_BITS", "Region", "UpdateStateParams", "UpdateCumuDraftState",
           "synthesis_parameters", "synthesis_configuration"]

# 0.9999f: every appended score is topk_probas * this constant, one float32 multiply.
CUMU_SCORE_SCALE_BITS = 0x3F7F_F972
MAX_NODE_TOP_K = 16
MAX_CANDIDATES = 128


class Region(enum.IntEnum):
    """Buffer groups of the host port (``host_cmd.region``) and the fields each one uses."""

    #: ``index < MAXN``: ``tok``/``score``/``delta``/``prev``/``next``/``side`` =
    #: ``cumu_tokens``/``cumu_scores``/``cumu_deltas``/``prev_indexs``/``next_indexs``/
    #: ``side_indexs``.
    NODE = 0
    #: ``index < K``: ``score`` = ``output_scores``, ``tok`` = ``output_tokens``, ``mask`` =
    #: row ``index`` of ``output_tree_mask``.
    OUTPUT = 1
    #: ``index < MAXV + K``: ``score`` = ``work_scores``.
    WORK = 2
    #: ``index < MAXV``: ``score`` = ``sort_scores``.
    SORT = 3


@dataclass(frozen=True)
class UpdateStateParams(ParameterRecord):
    """Validated compile-time parameters of :class:`UpdateCumuDraftState` and derived layouts
    (testbenches and the host read layouts here without building the component)."""

    node_top_k: int = parameter(8, "``K``, children per expanded node.", hi=MAX_NODE_TOP_K)
    max_tree_width: int = parameter(
        8, f"Largest ``W`` a request may use, with ``K * max_tree_width <= {MAX_CANDIDATES}``.",
        hi="node_top_k")
    max_node_count: int = parameter(1024, "``MAXN``: nodes per request slot.")
    max_verify_num: int = parameter(
        64, "``MAXV``: ``sort_scores`` length; ``work_scores`` holds ``MAXV + K``.")
    max_input_size: int = parameter(
        64, "``MI``: ``output_tree_mask`` rows have ``MI + 1`` columns.", lo=0)
    max_batch: int = parameter(2, "Request slots whose state is held on chip.")
    token_width: int = parameter(
        32, "Stored token width, signed two's complement (tokens and loaded values outside "
            "``[-2**(w-1), 2**(w-1))`` do not round-trip; the host driver refuses them).",
        lo=2, hi=64)
    index_width: int = parameter(
        32, "Stored width of ``cumu_deltas`` and the links, signed, at least "
            "``bit_length(MAXN + K*max_tree_width) + 1``. ``cumu_count`` and ``curr_depth`` are "
            "carried in ``index_width - 1`` bits; ``cumu_count + N`` must stay below "
            "``2**(index_width-1)``.", hi=64)

    def check(self):
        k, w = self.node_top_k, self.max_tree_width
        if k * w > MAX_CANDIDATES:
            raise ParameterError("max_tree_width", f"`node_top_k` * `max_tree_width` must be at "
                                                   f"most {MAX_CANDIDATES}, not {k * w}")
        # Links reach start + N - 1 <= MAXN + N - 1 in a normal round; keep room for the sign.
        min_index = (self.max_node_count + k * w).bit_length() + 1
        check_int("index_width", self.index_width, min_index, 64,
                   lo_name=f"{min_index} (to hold `max_node_count` + N and a sign)")

    # --- derived sizes ------------------------------------------------------------------------

    @property
    def max_candidates(self):
        """``N`` at ``max_tree_width``: the depth of the per-request candidate buffers."""
        return self.node_top_k * self.max_tree_width

    @property
    def work_size(self):
        """Elements of one ``work_scores`` row: ``MAXV + K``."""
        return self.max_verify_num + self.node_top_k

    @property
    def mask_row_width(self):
        """Bits of one ``output_tree_mask`` row: ``MI + 1``."""
        return self.max_input_size + 1

    @property
    def input_mask_width(self):
        """Bits of one ``input_tree_mask`` row in a request beat: ``MI`` (at least 1)."""
        return max(1, self.max_input_size)

    @property
    def max_count(self):
        """Largest ``cumu_count``/``curr_depth`` a request can carry: ``2**(index_width-1)-1``."""
        return (1 << (self.index_width - 1)) - 1

    def region_size(self, region):
        """Number of elements (or mask rows) of ``region`` per slot."""
        return {Region.NODE: self.max_node_count, Region.OUTPUT: self.node_top_k,
                Region.WORK: self.work_size, Region.SORT: self.max_verify_num}[Region(region)]

    # --- stream layouts -----------------------------------------------------------------------

    def _data_fields(self):
        return {
            "tok": signed(self.token_width),
            "score": unsigned(32),
            "delta": signed(self.index_width),
            "prev": signed(self.index_width),
            "next": signed(self.index_width),
            "side": signed(self.index_width),
            "mask": unsigned(self.mask_row_width),
        }

    @cached_property
    def request_layout(self):
        """One beat ``t`` of a request packet (header fields are read on the ``first`` beat)."""
        return packet_layout({
            # header
            "slot": unsigned(index_bits(self.max_batch)),
            "tree_width": unsigned(self.max_tree_width.bit_length()),
            "input_count": unsigned((self.max_input_size + 1).bit_length()),
            "cumu_count": unsigned(self.index_width - 1),
            "verify_num": signed(32),
            "curr_depth": unsigned(self.index_width - 1),
            # candidate t
            "proba": unsigned(32),
            "token": signed(self.token_width),
            "sorted_score": unsigned(32),
            "sorted_index": unsigned(index_bits(self.max_candidates)),
            # t < K
            "parent_index": unsigned(index_bits(self.max_tree_width)),
            # t < W
            "topk_index": signed(self.index_width),
            "mask": unsigned(self.input_mask_width),
        })

    @cached_property
    def done_layout(self):
        """The acknowledgement of one request."""
        return data.StructLayout({
            "slot": unsigned(index_bits(self.max_batch)),
            "dropped": unsigned(self.max_candidates.bit_length()),
            "framing_error": 1,
            "refused": 1,
        })

    @cached_property
    def host_command_layout(self):
        """A host-port command: read or write one element (one mask row) of a slot."""
        index_count = max(self.max_node_count, self.work_size, self.max_verify_num)
        return data.StructLayout({
            "write": 1,
            "region": unsigned(2),
            "slot": unsigned(index_bits(self.max_batch)),
            "index": unsigned(index_bits(index_count)),
            **self._data_fields(),
        })

    @cached_property
    def host_response_layout(self):
        """The answer to one host command (the element read; zeros for a write)."""
        return data.StructLayout(self._data_fields())

    @property
    def work_write_layout(self) -> data.StructLayout:
        """``work_scores``' write port (``UpdateCumuDraftState.work_write``)."""
        return data.StructLayout({"addr": range(self.max_batch * self.work_size), "data": 32,
                                  "en": 1})

    @property
    def ports(self) -> dict:
        """Port name -> payload layout."""
        return {"req": self.request_layout, "done": self.done_layout,
                "host_cmd": self.host_command_layout, "host_rsp": self.host_response_layout}


def _select(m, index, values, *, name):
    """``values[index]`` as a combinational multiplexer (``values``: same-shape values)."""
    out = Signal.like(values[0], name=name)
    with m.Switch(index):
        for position, value in enumerate(values):
            with m.Case(position):
                m.d.comb += out.eq(value)
    return out


def _float32_at_least(a, c):
    """numpy's ``a >= c`` on binary32 bit patterns: ``+0.0 >= -0.0``, false when either is
    NaN (``float32_less_equal``: one magnitude compare, no negation in front of it)."""
    return float32_less_equal(c, a)


def _merge_input(m, side, *, en, head, valid, pending, port_data, pop, readable, bypass,
                 bypass_data):
    """One input of the merge: ``head[0..2]`` in registers (``valid``: a thermometer code,
    bit ``i`` set when ``head[i]`` holds an element), refilled in order from the element
    waiting in the read port (``pending``) or, when none waits, from ``bypass_data`` where
    ``bypass`` offers the element being written to the buffer that port reads (saving the
    port's round trip: the merge sees it as soon as the old single-head design did). ``pop``
    (only with ``valid[0]``) consumes ``head[0]``.

    Returns ``(read, bypassed)``: enable of the read port this clock, bypass taken; either
    consumes one element of the buffer (``readable`` and ``bypass`` must exclude each other).
    Both depend on registers only, not on ``pop``: with a free head the element in hand surely
    moves into a head this clock, and three heads keep one pop per clock going.
    """
    depth = len(head)
    kept = Signal(depth, name=f"{side}_kept")  # the heads left after the pop
    m.d.comb += kept.eq(Mux(pop, valid[1:], valid))
    room = ~valid[-1]
    bypassed = en & bypass & ~pending & room
    fill = en & (pending | bypassed) & ~kept[-1]
    read = en & (~pending | room) & readable
    source = Mux(pending, port_data, bypass_data)
    with m.If(en):
        m.d.sync += [valid.eq(kept | (fill & ~kept[-1]).replicate(depth) & ~kept & Cat(1, kept)),
                     pending.eq(read | (pending & ~fill))]
        for i in range(depth):
            # head i takes head i + 1 on a pop, the new element where it lands
            lands = ~kept[i] & (kept[i - 1] if i else 1)
            with m.If(lands):
                m.d.sync += head[i].eq(source)
            if i + 1 < depth:
                with m.Elif(pop):
                    m.d.sync += head[i].eq(head[i + 1])
    return read, bypassed


class UpdateCumuDraftState(KernelComponent):
    """K2 ``update_cumu_draft_state`` with the cumulative tree state held on chip.

    Parameters: the fields of :class:`UpdateStateParams`.

    Members
    -------
    req : In(stream.Signature(params.request_layout))
        Request packets: ``N = tree_width * K`` beats, beat ``t`` carrying candidate ``t``
        (``proba`` = ``topk_probas``, ``token``, ``sorted_score``, ``sorted_index``),
        ``parent_index`` (``parent_indexs[t]``, read for ``t < K``), ``topk_index`` and
        ``mask`` (``topk_indexs[t]`` and ``input_tree_mask`` row ``t``, bit ``j`` = column
        ``j``, read for ``t < W``); the header (``slot``, ``tree_width``, ``input_count``,
        ``cumu_count``, ``verify_num`` (any int32, clamped to ``1..MAXV``), ``curr_depth``) is
        read from the ``first`` beat.
    done : Out(stream.Signature(params.done_layout))
        One record per request once every write is done: ``slot``, ``dropped`` (appends at
        slots ``>= MAXN``: the node-budget overflow report), ``framing_error``, ``refused``.
    host_cmd : In(stream.Signature(params.host_command_layout))
        ``{write, region, slot, index, tok, score, delta, prev, next, side, mask}``: read or
        write one element of a slot (see :class:`Region` for the fields each region uses).
    host_rsp : Out(stream.Signature(params.host_response_layout))
        One answer per command, in order.
    work_write : Out(params.work_write_layout)
        The ``work_scores`` memory's write port as it is driven (``addr``: ``slot * (MAXV + K)
        + index``, ``data``, ``en``), the request's and the host port's writes alike: a user
        keeps a copy of the rows that it reads wider than the host port's element a clock.
    """

    Params = UpdateStateParams
    OUTPUTS = ("done", "host_rsp")

    def members(self, params):
        return {**super().members(params), "work_write": Out(params.work_write_layout)}

    def elaborate(self, platform):
        p = self._params
        K, WM, NM = p.node_top_k, p.max_tree_width, p.max_candidates
        MAXN, MAXV, B = p.max_node_count, p.max_verify_num, p.max_batch
        TW, IW, ROW = p.token_width, p.index_width, p.mask_row_width
        WS = p.work_size
        m = Module()

        # --- state memories ---------------------------------------------------------------
        node_layout = data.StructLayout({"tok": signed(TW), "score": unsigned(32),
                                         "delta": signed(IW), "prev": signed(IW),
                                         "side": signed(IW)})
        mems = {
            "node": Memory(shape=node_layout, depth=B * MAXN, init=[]),
            "next": Memory(shape=signed(IW), depth=B * MAXN, init=[]),
            "out_score": Memory(shape=unsigned(32), depth=B * K, init=[]),
            "out_token": Memory(shape=signed(TW), depth=B * K, init=[]),
            "out_mask": Memory(shape=unsigned(ROW), depth=B * K, init=[]),
            "work": Memory(shape=unsigned(32), depth=B * WS, init=[]),
            "sort": Memory(shape=unsigned(32), depth=B * MAXV, init=[]),
            # per-request buffers
            "cand_score": Memory(shape=unsigned(32), depth=NM, init=[]),
            "cand_token": Memory(shape=signed(TW), depth=NM, init=[]),
            "in_mask": Memory(shape=unsigned(p.input_mask_width), depth=WM, init=[]),
        }
        rd, wr = {}, {}
        for name, mem in mems.items():
            m.submodules[f"{name}_mem"] = mem
            rd[name] = mem.read_port()
            wr[name] = mem.write_port()

        # --- host port (served in IDLE only) -----------------------------------------------
        cmd = self.host_cmd.payload
        host_open = Signal()  # IDLE and no request being started
        gated = stream.Signature(p.host_command_layout).create(path=("host_gated",))
        m.d.comb += [
            gated.valid.eq(self.host_cmd.valid & host_open),
            gated.payload.eq(cmd),
            self.host_cmd.ready.eq(gated.ready & host_open),
        ]
        host_en = stalling_handshake(m, latency=1, source=gated, sink=self.host_rsp)
        host_accept = gated.valid & gated.ready
        slot_ok = cmd.slot < B
        region_ok = Signal()
        with m.Switch(cmd.region):
            for region in Region:
                with m.Case(region):
                    m.d.comb += region_ok.eq(cmd.index < p.region_size(region))
        host_ok = slot_ok & region_ok
        # The index is cut to the bits of its region (an index beyond it writes nothing and
        # reads zeros): no adder in front of the write enables where a size is a power of 2.
        host_addr = {region: cmd.slot * p.region_size(region)
                     + cmd.index[:index_bits(p.region_size(region))] for region in Region}
        host_write = {region: host_accept & cmd.write & host_ok & (cmd.region == region)
                      for region in Region}
        rsp_region = data_stage(m, host_en, cmd.region, name="rsp_region")
        rsp_zero = stage(m, host_en, cmd.write | ~host_ok, name="rsp_zero")

        rsp = self.host_rsp.payload
        with m.If(~rsp_zero):
            with m.Switch(rsp_region):
                with m.Case(Region.NODE):
                    node = rd["node"].data
                    m.d.comb += [rsp.tok.eq(node.tok), rsp.score.eq(node.score),
                                 rsp.delta.eq(node.delta), rsp.prev.eq(node.prev),
                                 rsp.side.eq(node.side), rsp.next.eq(rd["next"].data)]
                with m.Case(Region.OUTPUT):
                    m.d.comb += [rsp.tok.eq(rd["out_token"].data),
                                 rsp.score.eq(rd["out_score"].data),
                                 rsp.mask.eq(rd["out_mask"].data)]
                with m.Case(Region.WORK):
                    m.d.comb += rsp.score.eq(rd["work"].data)
                with m.Case(Region.SORT):
                    m.d.comb += rsp.score.eq(rd["sort"].data)

        # --- request header ----------------------------------------------------------------
        req = self.req.payload
        slot = Signal.like(req.slot, name="slot")
        width = Signal(range(WM + 1), name="tree_width")
        input_count = Signal.like(req.input_count, name="input_count")
        start = Signal(IW - 1, name="start")           # cumu_count
        verify_num = Signal(signed(32), name="verify_num")
        # verify_num < 1 and verify_num > MAXV, compared as the header is latched, so that
        # SETUP's clamp is one multiplexer in front of ws0/ws1's comparisons.
        verify_low = Signal(name="verify_low")
        verify_high = Signal(name="verify_high")
        depth = Signal(IW - 1, name="curr_depth")
        refused = Signal()
        framing_error = Signal()

        # Derived per-request values (registered in SETUP).
        n = Signal(range(NM + 1), name="n")
        ws0 = Signal(range(MAXV + 1), name="ws0")
        ws1 = Signal(range(MAXV + 1), name="ws1")
        fit = Signal(range(NM + 1), name="fit")
        column_mask = Signal(ROW, name="column_mask")
        node_base = Signal(range(B * MAXN), name="node_base")
        out_base = Signal(range(B * K), name="out_base")
        work_base = Signal(range(B * WS), name="work_base")
        sort_base = Signal(range(B * MAXV), name="sort_base")
        write_ok = ~refused                            # every state write is gated by it

        # --- engine state ------------------------------------------------------------------
        t = Signal(range(NM + 1), name="beats")       # beats received
        beat_w = Signal(range(WM), name="beat_w")     # t div K
        beat_k = Signal(range(K), name="beat_k")      # t mod K
        g = Signal(IW, name="g")                      # start + t
        append_addr = Signal(range(B * MAXN + 1), name="append_addr")
        rx_done = Signal(name="rx_done")
        topk = [Signal(signed(IW), name=f"topk_index_{i}") for i in range(WM)]
        sorted_index = [Signal.like(req.sorted_index, name=f"sorted_index_{i}")
                        for i in range(K)]
        parent = [Signal.like(req.parent_index, name=f"parent_index_{i}") for i in range(K)]

        link_w = Signal(range(WM + 1), name="link_w")
        link_value = Signal(IW, name="link_value")
        tok_issued = Signal(K, name="token_issued")  # lookups done, one bit per output i
        tok_pending = Signal(name="token_pending")
        tok_addr = Signal(range(B * K), name="token_addr")
        mask_i = Signal(range(K + 1), name="mask_i")
        mask_pending = Signal(name="mask_pending")
        mask_addr = Signal(range(B * K), name="mask_addr")
        copy_x = Signal(range(MAXV + K + 1), name="copy_x")          # work elements issued
        copy_i = Signal(range(K + 1), name="copy_i")                 # of which outputs
        copy_pending = Signal(name="copy_pending")
        copy_from_output = Signal(name="copy_from_output")
        copy_addr = Signal(range(B * WS), name="copy_addr")
        copied = Signal(range(MAXV + K + 1), name="copied")           # work elements written
        # (i < t) & (sorted_index[i] < t), resp. (i < t) & (parent_index[i] < t), as registers
        tok_arrived = Signal(K, name="token_arrived")
        mask_arrived = Signal(K, name="mask_arrived")
        a_read = Signal(range(MAXV + 1), name="a_read")     # A elements fetched
        a_taken = Signal(range(MAXV + 1), name="a_taken")
        c_read = Signal(range(NM + 1), name="c_read")       # C elements fetched
        c_taken = Signal(range(NM + 1), name="c_taken")
        merged = Signal(range(MAXV + 1), name="merged")
        # Merge inputs: three registered heads each and an element waiting in the read port
        # (pending); see _merge_input.
        a_head = [Signal(32, name=f"a_head{i}") for i in range(3)]
        c_head = [Signal(32, name=f"c_head{i}") for i in range(3)]
        a_valid = Signal(3, name="a_valid")  # thermometer: head i valid
        c_valid = Signal(3, name="c_valid")
        a_pending = Signal(name="a_pending")
        c_pending = Signal(name="c_pending")
        a_ge_c = Signal(name="a_ge_c")        # a_head0 >= c_head0, computed a clock early
        a_ge_c_ok = Signal(name="a_ge_c_ok")  # both heads were registers when it was computed
        a_left = Signal(name="a_left")        # a_taken < ws0
        c_left = Signal(name="c_left")        # c_taken < n
        out_left = Signal(name="out_left")    # merged < ws1
        guard = Signal(name="guard")          # sort_scores[merged] may be written (see below)

        m.submodules.scale = mul = Float32Multiply()
        m.d.comb += [mul.en.eq(1), mul.b.eq(CUMU_SCORE_SCALE_BITS), mul.a.eq(req.proba)]

        beat = Signal()
        running = Signal()  # in RUN, as a register of its own
        finished = Signal()

        # --- control -----------------------------------------------------------------------
        with m.FSM(name="control"):
            with m.State("IDLE"):
                with m.If(self.host_cmd.valid):
                    m.d.comb += host_open.eq(1)
                with m.Elif(self.req.valid & ~self.host_rsp.valid):
                    # Header beats are latched without being consumed; stray beats are dropped.
                    m.d.comb += self.req.ready.eq(~req.first)
                    with m.If(req.first):
                        clamped_width = Mux(req.tree_width > WM, WM,
                                            Mux(req.tree_width == 0, 1, req.tree_width))
                        m.d.sync += [
                            slot.eq(req.slot), width.eq(clamped_width),
                            input_count.eq(req.input_count), start.eq(req.cumu_count),
                            verify_num.eq(req.verify_num), depth.eq(req.curr_depth),
                            verify_low.eq(req.verify_num < 1),
                            verify_high.eq(req.verify_num > MAXV),
                            refused.eq((req.slot >= B) | (req.tree_width == 0)
                                       | (req.tree_width > WM)),
                            framing_error.eq(0),
                        ]
                        m.next = "SETUP"
                with m.Else():
                    m.d.comb += host_open.eq(1)

            with m.State("SETUP"):
                count = width * K
                clamped = Signal(range(MAXV + 1), name="v")  # clamp(verify_num, 1, MAXV)
                m.d.comb += clamped.eq(
                    Mux(verify_low, 1, Mux(verify_high, MAXV, verify_num)))
                m.d.sync += [
                    n.eq(count),
                    ws0.eq(Mux(start < clamped, start, clamped)),
                    ws1.eq(Mux(start + count < clamped, start + count, clamped)),
                    fit.eq(Mux(start >= MAXN, 0,
                               Mux(MAXN - start > count, count, MAXN - start))),
                    node_base.eq(slot * MAXN),
                    append_addr.eq(slot * MAXN + start[:max(1, (MAXN - 1).bit_length())]),
                    out_base.eq(slot * K),
                    work_base.eq(slot * WS),
                    sort_base.eq(slot * MAXV),
                    # Thermometer code: bit j set iff j < input_count - 1.
                    column_mask.eq(Cat(*(input_count > j + 1 for j in range(ROW)))),
                    g.eq(start),
                    t.eq(0), beat_w.eq(0), beat_k.eq(0), rx_done.eq(0),
                    link_w.eq(0), link_value.eq(start),
                    tok_issued.eq(0), mask_i.eq(0), copy_x.eq(0), copy_i.eq(0), copied.eq(0),
                    tok_arrived.eq(0), mask_arrived.eq(0),
                    a_read.eq(0), a_taken.eq(0), a_valid.eq(0), a_pending.eq(0),
                    c_read.eq(0), c_taken.eq(0), c_valid.eq(0), c_pending.eq(0),
                    merged.eq(0), a_ge_c_ok.eq(0),
                    # ws0 = min(start, v) with v >= 1, ws1 >= 1, copy_x = 0
                    a_left.eq(start != 0), c_left.eq(1), out_left.eq(1), guard.eq(start == 0),
                ]
                m.d.sync += running.eq(1)
                m.next = "RUN"

            with m.State("RUN"):
                with m.If(finished):
                    m.d.sync += running.eq(0)
                    m.next = "DONE"

            with m.State("DONE"):
                m.d.comb += [
                    self.done.valid.eq(1),
                    self.done.payload.slot.eq(slot),
                    self.done.payload.dropped.eq(n - fit),
                    self.done.payload.framing_error.eq(framing_error),
                    self.done.payload.refused.eq(refused),
                ]
                with m.If(self.done.ready):
                    m.next = "IDLE"

        # --- receive / append ---------------------------------------------------------------
        m.d.comb += beat.eq(running & ~rx_done & self.req.valid)
        with m.If(running & ~rx_done):
            m.d.comb += self.req.ready.eq(1)

        in_fit = t < fit
        prev_now = Mux(beat_w == t, req.topk_index, _select(m, beat_w, topk, name="topk_sel"))
        side_now = Mux(beat_k == K - 1, -1, (g + 1)[:IW])
        append_valid = beat & in_fit & write_ok
        # Side band of the multiply: registers with the core's (always-on) clock enable.
        always = Const(1)
        s_valid, s_addr, s_tok, s_prev, s_side = (
            append_valid, append_addr, req.token, prev_now, side_now)
        in_flight = []
        for index in range(1, Float32Multiply.latency + 1):
            s_valid = stage(m, always, s_valid, name=f"append{index}_valid")
            s_addr = data_stage(m, always, s_addr, name=f"append{index}_addr")
            s_tok = data_stage(m, always, s_tok, name=f"append{index}_tok")
            s_prev = data_stage(m, always, s_prev, name=f"append{index}_prev")
            s_side = data_stage(m, always, s_side, name=f"append{index}_side")
            in_flight.append(s_valid)
        append_busy = Cat(*in_flight).any()

        with m.If(beat):
            m.d.sync += [
                t.eq(t + 1), g.eq(g + 1),
                rx_done.eq(t + 1 == n),
                framing_error.eq(framing_error | (req.first != (t == 0))
                                 | (req.last != (t + 1 == n))),
            ]
            with m.If(beat_k == K - 1):
                m.d.sync += [beat_k.eq(0), beat_w.eq(beat_w + 1)]
            with m.Else():
                m.d.sync += beat_k.eq(beat_k + 1)
            with m.If(in_fit):
                m.d.sync += append_addr.eq(append_addr + 1)
            for i in range(K):
                with m.If(t == i):
                    m.d.sync += [sorted_index[i].eq(req.sorted_index),
                                 parent[i].eq(req.parent_index)]
            for i in range(WM):
                with m.If(t == i):
                    m.d.sync += topk[i].eq(req.topk_index)
        m.d.comb += [
            wr["cand_score"].addr.eq(t), wr["cand_score"].data.eq(req.sorted_score),
            wr["cand_score"].en.eq(beat),
            wr["cand_token"].addr.eq(t), wr["cand_token"].data.eq(req.token),
            wr["cand_token"].en.eq(beat),
            wr["in_mask"].addr.eq(t), wr["in_mask"].data.eq(req.mask),
            wr["in_mask"].en.eq(beat & (t < width)),
        ]

        # --- first-child links (after the last beat) ----------------------------------------
        link_parent = _select(m, link_w, topk, name="link_parent")
        link_go = running & rx_done & (link_w < width)
        links_done = rx_done & (link_w == width)
        with m.If(link_go):
            m.d.sync += [link_w.eq(link_w + 1), link_value.eq(link_value + K)]
        # The link's write is registered (its condition and the parent's lookup would be too
        # deep for the block RAM's write enable): the last one lands in the clock `finished`
        # is decided, while `running` still holds the write port.
        link_write = stage(m, always, link_go & (link_parent >= 0) & (link_parent < MAXN),
                           name="link_write")
        link_addr = data_stage(m, always, node_base + link_parent[:len(node_base)],
                               name="link_addr")
        link_data = data_stage(m, always, link_value, name="link_data")

        # Arrival flags for the beat counts after this clock (kept in registers: comparing the
        # beat count in front of the pick and the lookup would be too deep for one clock).
        def arrivals(flags, values, incoming):
            with m.If(beat):
                m.d.sync += flags.eq(Cat(*(
                    Mux(t == i, incoming <= t, (t > i) & (flags[i] | (value == t)))
                    for i, value in enumerate(values))))

        arrivals(tok_arrived, sorted_index, req.sorted_index)
        arrivals(mask_arrived, parent, req.parent_index)

        # --- output tokens: output_tokens[i] = topk_tokens[sorted_indexs[i]] -----------------
        # Out of order: each clock the lowest i whose sorted index and token have arrived
        # (all have once rx_done: t = N >= K).
        tok_ready = ~tok_issued & (tok_arrived | rx_done.replicate(K))
        tok_pick = Signal(range(K), name="token_pick")
        for i in reversed(range(K)):
            with m.If(tok_ready[i]):
                m.d.comb += tok_pick.eq(i)
        tok_issue = running & tok_ready.any()
        # The pick is registered before it addresses cand_token (one more clock of latency,
        # one lookup per clock as before).
        tok_read = stage(m, always, tok_issue, name="token_read")
        tok_picked = stage(m, always, tok_pick, name="token_picked")
        tok_index = _select(m, tok_picked, sorted_index, name="token_index")
        tok_out = data_stage(m, always, out_base + tok_pick, name="token_out")
        m.d.comb += [rd["cand_token"].addr.eq(tok_index), rd["cand_token"].en.eq(tok_read)]
        m.d.sync += [tok_pending.eq(tok_read), tok_addr.eq(tok_out)]
        with m.If(tok_issue):
            m.d.sync += tok_issued.eq(tok_issued | (1 << tok_pick)[:K])
        tokens_done = tok_issued.all() & ~tok_read & ~tok_pending

        # --- mask rows: read-modify-write keeping columns >= input_count - 1 -----------------
        mask_parent = _select(m, mask_i, parent + [parent[0]], name="mask_parent")
        mask_issue = running & (mask_i < K) & (Cat(mask_arrived, 0).bit_select(mask_i, 1)
                                               | rx_done)
        m.d.sync += [mask_pending.eq(mask_issue), mask_addr.eq(out_base + mask_i)]
        with m.If(mask_issue):
            m.d.sync += mask_i.eq(mask_i + 1)
        masks_done = (mask_i == K) & ~mask_pending
        new_row = ((rd["in_mask"].data & column_mask)
                   | (rd["out_mask"].data & ~column_mask))[:ROW]

        # --- work_scores: old sort_scores[0..ws0-1], then output_scores[0..K-1] --------------
        copy_sort = copy_x < ws0
        copy_out = ~copy_sort & (copy_i < K) & (copy_i < t)
        copy_issue = running & (copy_sort | copy_out)
        m.d.sync += [copy_pending.eq(copy_issue), copy_from_output.eq(~copy_sort),
                     copy_addr.eq(work_base + copy_x)]
        with m.If(copy_issue):
            m.d.sync += copy_x.eq(copy_x + 1)
            with m.If(~copy_sort):
                m.d.sync += copy_i.eq(copy_i + 1)
        with m.If(copy_pending):
            m.d.sync += copied.eq(copied + 1)
        copy_done = (copy_i == K) & ~copy_pending

        # --- merge: A = work_scores[0..ws0-1] (the copy), C = sorted_scores, as they arrive ----
        # One output per clock from registers only: the heads of both inputs and a_ge_c, their
        # comparison, are computed a clock early for every way this clock can pop.
        a_has, c_has = a_valid[0], c_valid[0]
        fire = running & out_left & guard & Mux(
            a_left & c_left, a_has & c_has & a_ge_c_ok, Mux(a_left, a_has, c_left & c_has))
        take_a = a_left & (~c_left | a_ge_c)
        pop_a = fire & take_a
        pop_c = fire & ~take_a
        # A element a is readable once copied (a < copied); the one being copied this clock is
        # taken from the sort_scores read itself. C element c once beat c has arrived (c < t);
        # the one arriving this clock is taken from the beat.
        a_issue, a_bypassed = _merge_input(
            m, "a", en=running, head=a_head, valid=a_valid, pending=a_pending,
            port_data=rd["work"].data, pop=pop_a,
            readable=(a_read < ws0) & (a_read < copied),
            bypass=copy_pending & ~copy_from_output & (a_read == copied),
            bypass_data=rd["sort"].data)
        c_issue, c_bypassed = _merge_input(
            m, "c", en=running, head=c_head, valid=c_valid, pending=c_pending,
            port_data=rd["cand_score"].data, pop=pop_c,
            readable=(c_read < n) & (c_read < t),
            bypass=beat & (c_read == t), bypass_data=req.sorted_score)
        with m.If(running):  # (SETUP initialises these; these statements must not override it)
            m.d.sync += [
                a_ge_c.eq(Mux(pop_a, _float32_at_least(a_head[1], c_head[0]),
                              Mux(pop_c, _float32_at_least(a_head[0], c_head[1]),
                                  _float32_at_least(a_head[0], c_head[0])))),
                # valid when the heads after this clock are registers now (not being refilled)
                a_ge_c_ok.eq(Mux(pop_a, a_valid[1] & c_has,
                                 Mux(pop_c, c_valid[1] & a_has, a_has & c_has))),
                a_left.eq(Mux(pop_a, a_taken + 1 < ws0, a_taken < ws0)),
                c_left.eq(Mux(pop_c, c_taken + 1 < n, c_taken < n)),
                out_left.eq(Mux(fire, merged + 1 < ws1, merged < ws1)),
                # sort_scores[o] may be overwritten once the copy has read it (o < copy_x); as
                # a register, for both merged and merged + 1 (copy_x only grows).
                guard.eq((merged >= ws0) | (merged + 1 < copy_x)),
            ]
        with m.If(a_issue | a_bypassed):
            m.d.sync += a_read.eq(a_read + 1)
        with m.If(c_issue | c_bypassed):
            m.d.sync += c_read.eq(c_read + 1)
        with m.If(pop_a):
            m.d.sync += a_taken.eq(a_taken + 1)
        with m.If(pop_c):
            m.d.sync += c_taken.eq(c_taken + 1)
        with m.If(fire):
            m.d.sync += merged.eq(merged + 1)
        merge_done = ~out_left
        m.d.comb += [rd["cand_score"].addr.eq(c_read), rd["cand_score"].en.eq(c_issue)]

        m.d.comb += finished.eq(rx_done & links_done & tokens_done & masks_done & copy_done
                                & merge_done & ~append_busy)

        # --- memory port multiplexing: engines while running, the host port otherwise -------
        with m.If(running):
            m.d.comb += [
                wr["node"].addr.eq(s_addr), wr["node"].en.eq(s_valid),
                wr["node"].data.tok.eq(s_tok), wr["node"].data.score.eq(mul.result),
                wr["node"].data.delta.eq(depth), wr["node"].data.prev.eq(s_prev),
                wr["node"].data.side.eq(s_side),
                wr["next"].addr.eq(Mux(rx_done, link_addr, append_addr)),
                wr["next"].data.eq(Mux(rx_done, link_data, -1)),
                wr["next"].en.eq(write_ok & Mux(rx_done, link_write, append_valid)),
                wr["out_score"].addr.eq(out_base + t), wr["out_score"].data.eq(req.sorted_score),
                wr["out_score"].en.eq(beat & (t < K) & write_ok),
                rd["out_score"].addr.eq(out_base + copy_i), rd["out_score"].en.eq(1),
                wr["out_token"].addr.eq(tok_addr), wr["out_token"].data.eq(rd["cand_token"].data),
                wr["out_token"].en.eq(tok_pending & write_ok),
                rd["in_mask"].addr.eq(mask_parent), rd["in_mask"].en.eq(mask_issue),
                rd["out_mask"].addr.eq(out_base + mask_i), rd["out_mask"].en.eq(mask_issue),
                wr["out_mask"].addr.eq(mask_addr), wr["out_mask"].data.eq(new_row),
                wr["out_mask"].en.eq(mask_pending & write_ok),
                rd["sort"].addr.eq(sort_base + copy_x), rd["sort"].en.eq(copy_issue & copy_sort),
                wr["work"].addr.eq(copy_addr),
                wr["work"].data.eq(Mux(copy_from_output, rd["out_score"].data,
                                       rd["sort"].data)),
                wr["work"].en.eq(copy_pending & write_ok),
                rd["work"].addr.eq(work_base + a_read), rd["work"].en.eq(a_issue),
                wr["sort"].addr.eq(sort_base + merged),
                wr["sort"].data.eq(Mux(take_a, a_head[0], c_head[0])),
                wr["sort"].en.eq(fire & write_ok),
            ]
        with m.Else():
            region_mems = {
                Region.NODE: ("node", "next"),
                Region.OUTPUT: ("out_score", "out_token", "out_mask"),
                Region.WORK: ("work",),
                Region.SORT: ("sort",),
            }
            for region, names in region_mems.items():
                for name in names:
                    m.d.comb += [rd[name].addr.eq(host_addr[region]), rd[name].en.eq(host_en),
                                 wr[name].addr.eq(host_addr[region])]
            node = wr["node"].data
            m.d.comb += [
                node.tok.eq(cmd.tok), node.score.eq(cmd.score), node.delta.eq(cmd.delta),
                node.prev.eq(cmd.prev), node.side.eq(cmd.side),
                wr["next"].data.eq(cmd.next),
                wr["out_score"].data.eq(cmd.score), wr["out_token"].data.eq(cmd.tok),
                wr["out_mask"].data.eq(cmd.mask),
                wr["work"].data.eq(cmd.score), wr["sort"].data.eq(cmd.score),
            ]
        # A host write (IDLE only) overrides the engines' write enables instead of sharing a
        # multiplexer with `running`: one LUT level less behind host_rsp.ready.
        for region, names in region_mems.items():
            for name in names:
                with m.If(host_write[region]):
                    m.d.comb += wr[name].en.eq(1)
        m.d.comb += [self.work_write.addr.eq(wr["work"].addr),
                     self.work_write.data.eq(wr["work"].data),
                     self.work_write.en.eq(wr["work"].en)]
        return m


def synthesis_parameters(**overrides) -> UpdateStateParams:
    """The parameters of the synthesis report: the serving point of the benchmark contract
    (``K = 8``, ``W <= 8``), ``MAXN = 1024`` nodes, ``MAXV = 64``, ``MI = 64``, 8 request slots
    (the contract's largest batch), 32-bit tokens and 16-bit links/depths."""
    return UpdateStateParams(**{"node_top_k": 8, "max_tree_width": 8, "max_node_count": 1024,
                                "max_verify_num": 64, "max_input_size": 64, "max_batch": 8,
                                "token_width": 32, "index_width": 16, **overrides})


def synthesis_configuration(**overrides) -> UpdateCumuDraftState:
    """K2 at ``synthesis_parameters(**overrides)``."""
    return UpdateCumuDraftState(**asdict(synthesis_parameters(**overrides)))
