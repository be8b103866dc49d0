"""K4 verify-tree build (``fused_tree_mask_operator``, docs/kernels.md §6) in hardware.

The kernel reads the cumulative tree of each request as a stream of node records (node id
order, one per clock: the order in which K2's ``node`` memory is read out), selects the verify
set and writes what the target model's tree-attention forward needs: the retrive arrays, the
positions and draft tokens (``tree``, one record per position) and the tree mask (``mask``,
one row per clock when a row fits in a word), in any of the three layouts. Bit-exact with
``golden.fused_tree_mask_operator``.

One call is one ``cmd`` beat (``batch_size``, ``cumu_count``, ``verify_num``,
``tree_mask_mode``), then per request ``b`` (ascending): ``cumu_count`` beats on ``nodes`` and
one beat on ``seq_lens``; the kernel answers with ``n`` beats on ``tree`` and the ``n`` mask
rows on ``mask``, ``n = min(clamp(verify_num, 1, MAXV), cumu_count)``. Two stages (ingest +
select, build + emit) work on different requests: a request costs ``cumu_count + 1`` clocks
once the pipeline is full, as long as the build (about ``2n + 6`` clocks plus one per mask
word beyond the first of a row, and one if no node of ``1 .. group - 1`` is selected, below)
is not longer. Every register-to-register path is pipelined for the 300 MHz logic-depth rule
(docs/timing.md) without a clock on the per-node path. The datapath (sorted insertion array of
``MAXV - 1`` slots, membership bitmap, ancestor-row build) is described in docs/decisions.md
("K4 verify-tree build").

Mask stream format (``mask``): every row starts a new word; bit ``k`` of word ``w`` of a row
is column ``w * mask_lanes + k`` of the layout's row; bits past the row end are 0; ``row_last``
marks a row's last word, ``first``/``last`` the first and last word of a request.

* FULL (0): ``seq_len + n`` columns, the prefix all ones, then the ``n`` tree columns;
* QLEN_ONLY (1): the ``n`` tree columns;
* QLEN_ONLY_BITPACKING (2): the row's ``ceil(n/8)`` bytes are the row words' bytes in
  little-endian order (bit ``c mod 8`` of byte ``c div 8`` = column ``c``; padding bits 0).

So modes 1 and 2 have the same bits on the wire (one bit per column); a bool layout's host
writer expands a bit to a byte, a packed one stores ``ceil(n/8)`` bytes of each row.
"""

from dataclasses import asdict, dataclass

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory

from hw.lib.component import KernelComponent
from hw.lib.float32 import float32_order_key
from hw.lib.logic import (
    at_least_two,
    lowest_one_hot,
    lowest_set_bit,
    one_hot,
    one_hot_index,
    or_tree,
    predecode,
)
from hw.lib.params import ParameterRecord, index_bits, parameter
from hw.lib.stream import RegisterSlice, packet_layout

__all__ = ["TreeMaskParams", "TreeMask", "TreeMaskMode", "MAX_MASK_LANES",
           "synthesis_parameters", "synthesis_configuration"]

MAX_MASK_LANES = 1024


class TreeMaskMode:
    """``tree_mask_mode`` values (SGLang's ``TreeMaskMode``)."""

    FULL_MASK = 0
    QLEN_ONLY = 1
    QLEN_ONLY_BITPACKING = 2


def at_least_late(m: Module, value: Value, constants, name: str) -> dict:
    """``{k: value >= k}`` for each constant ``k``, one clock late: the compares of
    ``value``'s high and low halves with the halves of the constants are registered, and each
    result is one LUT of them. (A thermometer of plain compares maps to a chain of LUTs.)"""
    value = Value.cast(value)
    half = (len(value) + 1) // 2
    high, low = value[half:], value[:half]
    parts, prefix = {}, name

    def part(key, expression):
        name = f"{prefix}_{key}"
        if name not in parts:
            parts[name] = Signal(name=name)
            m.d.sync += parts[name].eq(expression)
        return parts[name]
    result = {}
    for k in constants:
        if k <= 0:
            result[k] = Const(1, 1)
        elif k >= 1 << len(value):
            result[k] = Const(0, 1)
        else:
            k_high, k_low = k >> half, k & ((1 << half) - 1)
            high_greater = part(f"high_gt_{k_high}", high > k_high)
            high_equal = part(f"high_eq_{k_high}", high == k_high)
            low_at_least = part(f"low_ge_{k_low}", low >= k_low)
            result[k] = high_greater | (high_equal & low_at_least)
    return result


def key_at_least(key: Value, bits: Value) -> Value:
    """``key >= float32_order_key(bits)`` for a signed 32-bit order key, in one compare.

    The order key of a negative float is ``-magnitude``, and ``key >= -m`` is ``m > ~key``:
    so compare ``m`` with ``key`` or ``~key`` (the sign selects: a LUT in front of the carry
    chain) instead of negating the magnitude in a chain of its own first.
    """
    bits = Value.cast(bits)
    sign, magnitude = bits[31], bits[:31]
    flipped = (Value.cast(key).as_unsigned() ^ sign.replicate(32)).as_signed()
    greater = Cat(magnitude, Const(0, 1)).as_signed() > flipped
    return greater ^ ~sign


@dataclass(frozen=True)
class TreeMaskParams(ParameterRecord):
    """Validated build parameters of :class:`TreeMask` and the port layouts they give
    (testbenches and the host read layouts here without building the component)."""

    max_node_count: int = parameter(
        256, "``MAXN``: largest ``cumu_count``; sets the node-id width.")
    max_verify_num: int = parameter(
        64, "``MAXV``: largest verify set ``n``; ``verify_num`` is clamped to ``1..MAXV``. The "
            "insertion array has ``MAXV - 1`` slots.", hi="max_node_count")
    mask_lanes: int = parameter(
        64, "Bits (mask columns) per ``mask`` word. Rows of up to ``mask_lanes`` columns go out "
            "at one row per clock.", lo=8, hi=MAX_MASK_LANES, power_of_two=True)
    token_width: int = parameter(32, "Token width, signed two's complement.", lo=2, hi=64)
    seq_len_width: int = parameter(32, "Width of ``seq_lens``; ``position`` has one bit more.",
                                   hi=62)
    max_batch_size: int = parameter(
        256, "Sets the width of ``batch_size`` (``max_batch_size.bit_length()`` bits) and of "
             "``retrive_index`` (``b*n + i`` for ``b < max_batch_size``).")

    @property
    def node_bits(self) -> int:
        """Width of a node id (``0 .. MAXN - 1``)."""
        return index_bits(self.max_node_count)

    @property
    def position_bits(self) -> int:
        """Width of a position in the verify set (``0 .. MAXV - 1``)."""
        return index_bits(self.max_verify_num)

    @property
    def batch_bits(self) -> int:
        """Width of ``batch_size`` (``0 .. max_batch_size``)."""
        return self.max_batch_size.bit_length()

    @property
    def retrive_index_bits(self) -> int:
        """Width of ``retrive_index`` (``b*n + i < max_batch_size * MAXV``)."""
        return index_bits(self.max_batch_size * self.max_verify_num)

    @property
    def cmd_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "batch_size": unsigned(self.batch_bits),
            "cumu_count": unsigned(self.max_node_count.bit_length()),
            "verify_num": signed(32),
            "tree_mask_mode": unsigned(2),
        })

    @property
    def node_layout(self) -> data.StructLayout:
        return packet_layout({"token": signed(self.token_width), "score": unsigned(32),
                              "prev": unsigned(self.node_bits)})

    @property
    def seq_layout(self) -> data.StructLayout:
        return data.StructLayout({"seq_len": unsigned(self.seq_len_width)})

    @property
    def tree_layout(self) -> data.StructLayout:
        link = signed(self.position_bits + 1)
        return packet_layout({
            "retrive_index": unsigned(self.retrive_index_bits),
            "next_token": link,
            "next_sibling": link,
            "position": unsigned(self.seq_len_width + 1),
            "draft_token": signed(self.token_width),
            "invalid": 1,
        })

    @property
    def mask_layout(self) -> data.StructLayout:
        return packet_layout({"bits": unsigned(self.mask_lanes), "row_last": 1})

    @property
    def ports(self) -> dict:
        """Port name -> payload layout."""
        return {"cmd": self.cmd_layout, "nodes": self.node_layout, "seq_lens": self.seq_layout,
                "tree": self.tree_layout, "mask": self.mask_layout}


class TreeMask(KernelComponent):
    """K4 verify-tree build: verify-set selection, retrive arrays, positions and tree mask.

    Parameters
    ----------
    max_node_count, max_verify_num, mask_lanes, token_width, seq_len_width, max_batch_size
        See :class:`TreeMaskParams` (``params``; read-only properties of the same names).

    Members
    -------
    cmd : In(stream.Signature(cmd_layout))
        One beat per call: ``batch_size``; ``cumu_count`` (1..MAXN, 0 is read as 1);
        ``verify_num`` (signed 32 bits, clamped to ``1..MAXV``); ``tree_mask_mode`` (0 FULL,
        1 QLEN_ONLY, 2 QLEN_ONLY_BITPACKING; 3 is read as 2). Taken between calls only.
    nodes : In(stream.Signature(node_layout))
        Per request, ``cumu_count`` beats in node-id order: ``token`` (``cumu_tokens``),
        ``score`` (``cumu_scores``, float32 bits), ``prev`` (``prev_indexs``, not read for the
        root). ``first``/``last`` mark the packet but are not checked (the count comes from
        ``cmd``).
    seq_lens : In(stream.Signature(seq_layout))
        One beat per request: ``seq_len``.
    tree : Out(stream.Signature(tree_layout))
        Per request, ``n`` records in position order: ``retrive_index`` (``b*n + i``),
        ``next_token`` / ``next_sibling`` (``retrive_next_token`` / ``retrive_next_sibling``,
        -1 none), ``position`` (``seq_len + depth``), ``draft_token``, ``invalid`` (the
        position's parent is not a selected lower node id: the golden refuses such a tree and
        the other fields are then unspecified), ``first`` on ``i = 0``, ``last`` on
        ``i = n - 1``.
    mask : Out(stream.Signature(mask_layout))
        The ``n`` mask rows of each request as words of ``mask_lanes`` bits (format in the
        module docstring): ``bits``, ``row_last``, ``first``, ``last``.
    """

    Params = TreeMaskParams
    OUTPUTS = ("tree", "mask")

    def elaborate(self, platform):
        m = Module()
        params = self._params
        maxn, maxv, lanes = params.max_node_count, params.max_verify_num, params.mask_lanes
        node_bits, pos_bits = params.node_bits, params.position_bits
        token_width, seq_len_width = params.token_width, params.seq_len_width
        slots = maxv - 1
        batch_bits = params.batch_bits
        retrive_bits = params.retrive_index_bits

        # --- memories ---------------------------------------------------------------------
        node_shape = data.StructLayout({"token": signed(token_width),
                                        "prev": unsigned(node_bits)})
        m.submodules.node_mem = node_mem = Memory(shape=node_shape, depth=2 << node_bits, init=[])
        node_write = node_mem.write_port()
        node_read = node_mem.read_port()  # synchronous, enabled by the build pipeline
        # pos_of also holds the position's predecode, so that C1 has the parent's one-hot
        # position one AND behind the read.
        pos_shape = data.StructLayout({"position": unsigned(pos_bits),
                                       "predecoded": len(predecode(Const(0, pos_bits)))})
        m.submodules.pos_of = pos_of = Memory(shape=pos_shape, depth=maxn, init=[])
        pos_write = pos_of.write_port()
        pos_read = pos_of.read_port(domain="comb")
        # Rows shifted by up to mask_lanes - 1 columns (the serializer below).
        row_shape = data.StructLayout({"row": unsigned(maxv + lanes - 1),
                                       "depth": unsigned(pos_bits)})
        m.submodules.row_mem = row_mem = Memory(shape=row_shape, depth=maxv, init=[])
        row_write = row_mem.write_port()
        row_read = row_mem.read_port(domain="comb")
        rec_shape = data.StructLayout({"token": signed(token_width),
                                       "depth": unsigned(pos_bits), "invalid": 1})
        m.submodules.rec_mem = rec_mem = Memory(shape=rec_shape, depth=maxv, init=[])
        rec_write = rec_mem.write_port()
        rec_read = rec_mem.read_port(domain="comb")
        link_mems = {}
        for name in ("first_child", "last_child", "next_sibling"):
            mem = Memory(shape=unsigned(pos_bits), depth=maxv, init=[])
            m.submodules[name] = mem
            link_mems[name] = (mem.write_port(), mem.read_port(domain="comb"))
        first_write, first_read = link_mems["first_child"]
        last_write, last_read = link_mems["last_child"]
        sibling_write, sibling_read = link_mems["next_sibling"]

        # --- call parameters (stage 1) ----------------------------------------------------
        # The clamps are registered on the cmd beat; n and the slot decodes come from them the
        # clock after (the root beat's, which neither inserts nor ends a request), so no chain
        # of 32-bit compares ends in one register.
        command = self.cmd.payload
        verify_clamped = Mux(command.verify_num < 1, 1,
                             Mux(command.verify_num > maxv, maxv, command.verify_num))
        count_new = Mux(command.cumu_count == 0, 1,
                        Mux(command.cumu_count > maxn, maxn, command.cumu_count))
        call_verify = Signal(range(maxv + 1))  # verify_num clamped to 1..MAXV
        call_batch = Signal(batch_bits)
        call_count = Signal(range(maxn + 1))
        call_last_node = Signal(range(maxn))  # cumu_count - 1
        call_n = Signal(range(maxv + 1))
        call_last = Signal(range(maxv))  # n - 1
        call_mode = Signal(2)
        # The n - 1 slots in use are the last ones (slot_enabled[s]: s >= slots - (n - 1)),
        # so an insertion always evicts the last slot, whatever n.
        # (n >= maxv - s, from halves registered the clock after the cmd beat.)
        verify_at_least = at_least_late(m, call_verify, range(2, maxv + 1), "verify")
        count_at_least = at_least_late(m, call_count, range(2, maxv + 1), "count")
        slot_enabled = Cat(verify_at_least[maxv - s] & count_at_least[maxv - s]
                           for s in range(slots))
        has_slots = slot_enabled[-1] if slots else Const(0, 1)  # n >= 2
        n_now = Mux(call_verify < call_count, call_verify, call_count)
        m.d.sync += [call_n.eq(n_now), call_last.eq(n_now - 1)]

        # --- stage 1: ingest + select -----------------------------------------------------
        s1_node = Signal(range(maxn + 1))  # node id of the next beat
        s1_request = Signal(batch_bits)
        s1_base = Signal(retrive_bits)  # b * n
        bank = Signal()  # node-memory bank written by stage 1
        member = Signal(maxn, init=1)  # verify-set bitmap, one beat behind (pending below)
        slot_valid = [Signal(name=f"slot{s}_valid") for s in range(slots)]
        slot_key = [Signal(signed(32), name=f"slot{s}_key") for s in range(slots)]
        slot_id = [Signal(node_bits, name=f"slot{s}_id") for s in range(slots)]

        ingesting = Signal()
        beat = self.nodes.valid & self.nodes.ready
        m.d.comb += self.nodes.ready.eq(ingesting)
        m.d.comb += [
            node_write.addr.eq(Cat(s1_node[:node_bits], bank)),
            node_write.data.token.eq(self.nodes.payload.token),
            node_write.data.prev.eq(self.nodes.payload.prev),
            node_write.en.eq(beat),
        ]

        score = self.nodes.payload.score
        new_key = float32_order_key(score)
        new_id = s1_node[:node_bits]
        insert_beat = beat & (s1_node != 0)
        # The membership update of a beat lands one clock later, from one-hot registers: the
        # eviction comes out of a 32-bit compare, and a decode of the ids behind it would not
        # fit the clock. ``member_final`` is the bitmap with the pending update applied.
        pend_insert = Signal()
        pend_evict = Signal()
        pend_new = Signal(maxn)  # one-hot: the inserted node
        pend_old = Signal(maxn)  # one-hot: the evicted node
        member_final = (member | Mux(pend_insert, pend_new, 0)) & ~Mux(pend_evict, pend_old, 0)
        m.d.sync += member.eq(member_final)
        if slots:
            # A slot not in use keeps (so the first slot in use takes a newcomer that beats
            # it, and the slots before it never change).
            keeps = [~slot_enabled[s] | (slot_valid[s] & key_at_least(slot_key[s], score))
                     for s in range(slots)]
            with m.If(insert_beat & has_slots):
                for s in range(slots):
                    with m.If(~keeps[s]):
                        if s == 0:
                            takes_new = Const(1)
                        else:
                            takes_new = keeps[s - 1]
                        with m.If(takes_new):
                            m.d.sync += [slot_valid[s].eq(1), slot_key[s].eq(new_key),
                                         slot_id[s].eq(new_id)]
                        with m.Else():
                            m.d.sync += [slot_valid[s].eq(slot_valid[s - 1]),
                                         slot_key[s].eq(slot_key[s - 1]),
                                         slot_id[s].eq(slot_id[s - 1])]
            inserted = insert_beat & has_slots & ~keeps[-1]
            m.d.sync += [pend_insert.eq(inserted), pend_evict.eq(inserted & slot_valid[-1]),
                         pend_new.eq(Cat(new_id == j for j in range(maxn))),
                         pend_old.eq(Cat(slot_id[-1] == j for j in range(maxn)))]

        # --- handshake between the stages -------------------------------------------------
        s1_hold = Signal()  # stage 1 has a finished request for stage 2
        s2_idle = Signal()
        handoff = s1_hold & s2_idle

        def clear_selection():
            return [member.eq(1), pend_insert.eq(0), pend_evict.eq(0),
                    *[v.eq(0) for v in slot_valid]]

        with m.FSM(name="ingest"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.sync += [
                        call_batch.eq(command.batch_size),
                        call_count.eq(count_new),
                        call_last_node.eq(count_new - 1),
                        call_verify.eq(verify_clamped),
                        call_mode.eq(Mux(command.tree_mask_mode == 3, 2,
                                         command.tree_mask_mode)),
                        s1_node.eq(0),
                        s1_request.eq(0),
                        s1_base.eq(0),
                        *clear_selection(),
                    ]
                    with m.If(command.batch_size != 0):
                        m.next = "INGEST"
            with m.State("INGEST"):
                m.d.comb += ingesting.eq(1)
                with m.If(beat):
                    m.d.sync += s1_node.eq(s1_node + 1)
                    with m.If(s1_node == call_last_node):
                        m.next = "HOLD"
            with m.State("HOLD"):
                m.d.comb += s1_hold.eq(1)
                with m.If(handoff):
                    m.d.sync += [bank.eq(~bank), s1_node.eq(0), s1_request.eq(s1_request + 1),
                                 s1_base.eq(s1_base + call_n), *clear_selection()]
                    with m.If(s1_request == call_batch - 1):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "INGEST"

        # --- stage 2: build ---------------------------------------------------------------
        s2_member = Signal(maxn)
        s2_bank = Signal()
        s2_n = Signal(range(maxv + 1))
        s2_last = Signal(range(maxv))  # n - 1
        s2_mode = Signal(2)
        s2_base = Signal(retrive_bits)
        s2_seq = Signal(seq_len_width)
        has_child = Signal(maxv)
        has_sibling = Signal(maxv)
        build_en = Signal()

        # C0: the members in ascending node id, one a clock, from a two-level scan of the
        # bitmap (groups of ``group`` ids): ``grp_left`` marks the groups not yet fetched,
        # ``fetch_hot`` the next one (chosen a clock ahead), ``nxt`` holds its word, and the
        # consumer takes the lowest id of ``cur`` (or of ``nxt`` once ``cur`` is spent). Each
        # loop is a ``group``-bit pick, not a ``MAXN``-bit one. Position 0 is the root without
        # a scan and group 0 goes to ``cur`` at the handoff; the feeder's first word arrives
        # two clocks after it, a bubble only when group 0 holds no member but the root.
        group_bits = ((maxn - 1).bit_length() + 1) // 2
        group = 1 << group_bits
        group_count = -(-maxn // group)
        group_index_bits = index_bits(group_count)

        def group_words(bitmap):  # non-root members, zero-padded to whole groups
            bits = Cat(Const(0, 1), bitmap[1:], Const(0, group * group_count - maxn))
            return [bits[i * group:(i + 1) * group] for i in range(group_count)]
        words = group_words(s2_member)
        grp_left = Signal(group_count)
        fetch_hot = Signal(group_count)  # one-hot: the next group to fetch, chosen a clock ahead
        fetch_valid = Signal()
        nxt = Signal(group)
        nxt_group = Signal(group_index_bits)
        nxt_valid = Signal()
        cur = Signal(group)
        cur_group = Signal(group_index_bits)
        cur_more = Signal()  # cur is not spent
        c0_issue = Signal()  # position c0_position is to be issued
        c0_position = Signal(range(maxv + 1))
        c0_node = Signal(node_bits)  # the member at position c0_position
        c0_have = Signal()  # c0_node is loaded
        pick_valid = cur_more | nxt_valid
        advance = build_en & c0_issue & c0_have
        load = (advance | ~c0_have) & pick_valid
        fill = ~nxt_valid | (load & ~cur_more)

        with m.If(fill):
            m.d.sync += [nxt.eq(or_tree(Mux(fetch_hot[i], words[i], 0)
                                        for i in range(group_count))),
                         nxt_group.eq(one_hot_index(fetch_hot, group_index_bits)),
                         nxt_valid.eq(fetch_valid)]
        with m.If(~fetch_valid | fill):
            fetch_low = lowest_one_hot(grp_left)
            m.d.sync += [fetch_hot.eq(fetch_low), fetch_valid.eq(grp_left.any()),
                         grp_left.eq(grp_left & ~fetch_low)]
        pick = Mux(cur_more, cur, nxt)
        pick_bit, _ = lowest_set_bit(pick)
        pick_group = Mux(cur_more, cur_group, nxt_group)
        with m.If(load):
            m.d.sync += [c0_node.eq(Cat(pick_bit[:group_bits], pick_group)[:node_bits]),
                         c0_have.eq(1), cur.eq(pick & (pick - 1)), cur_group.eq(pick_group),
                         cur_more.eq(at_least_two(pick))]
        with m.Elif(advance):
            m.d.sync += c0_have.eq(0)
        m.d.comb += [
            node_read.addr.eq(Cat(c0_node, s2_bank)),
            node_read.en.eq(build_en),
            pos_write.addr.eq(c0_node),
            pos_write.data.position.eq(c0_position),
            pos_write.data.predecoded.eq(predecode(c0_position[:pos_bits])),
            pos_write.en.eq(advance),
        ]
        c1_valid = Signal()
        c1_position = Signal(range(maxv))
        c1_node = Signal(node_bits)
        with m.If(build_en):
            m.d.sync += [c1_valid.eq(advance), c1_position.eq(c0_position),
                         c1_node.eq(c0_node)]
        with m.If(advance):
            m.d.sync += [c0_position.eq(c0_position + 1),
                         c0_issue.eq(c0_position != s2_last)]

        # C1: parent id -> parent position (the parent checks wait for C2: the ids come out
        # of block RAM late).
        c1_prev = node_read.data.prev
        m.d.comb += pos_read.addr.eq(c1_prev)
        c2_valid = Signal()
        c2_position = Signal(range(maxv))
        c2_parent = Signal(pos_bits)
        c2_parent_hot = Signal(maxv)
        c2_is_root = Signal()
        c2_token = Signal(signed(token_width))
        c2_prev_low = Signal(group_bits)
        c2_prev_word = Signal(group)  # the parent's group of the membership bitmap
        c2_prev_order = Signal()  # the parent's id is not below the node's
        member_words = Cat(s2_member, Const(0, group * group_count - maxn))
        with m.If(build_en):
            m.d.sync += [c2_valid.eq(c1_valid), c2_position.eq(c1_position),
                         c2_parent.eq(pos_read.data.position),
                         c2_token.eq(node_read.data.token),
                         c2_parent_hot.eq(one_hot(pos_read.data.position, maxv,
                                                  pos_read.data.predecoded)),
                         c2_is_root.eq(c1_position == 0),
                         c2_prev_low.eq(c1_prev[:group_bits]),
                         c2_prev_word.eq(member_words.word_select(c1_prev[group_bits:], group)),
                         c2_prev_order.eq(c1_prev >= c1_node)]

        # C2: depth, ancestor row, links. Rows are kept shifted by ``s2_align`` columns (the
        # FULL prefix's columns in the first word) with the prefix's ones below the root
        # column, so a row's mask words are plain slices of it.
        row_width = maxv + lanes - 1
        align_bits = (lanes - 1).bit_length()
        s2_align = Signal(align_bits)  # FULL: seq_len mod mask_lanes, else 0
        s2_root_row = Signal(row_width)  # ones up to and including the root's column
        own_bit = Signal(row_width)  # one-hot: the column of position c2_position
        own_bit_load = Signal()
        align_at_least = at_least_late(m, s2_align, range(lanes), "align")  # two clocks after SEQ
        m.d.sync += s2_root_row.eq(Cat(align_at_least[j] for j in range(lanes)))
        with m.If(own_bit_load):  # the clock after SEQ: no position is in C2 yet
            m.d.sync += [own_bit.eq(Const(1, row_width) << s2_align), own_bit_load.eq(0)]
        is_root = c2_is_root
        c2_invalid = ~is_root & (c2_prev_order | ~c2_prev_word.bit_select(c2_prev_low, 1))
        row = Mux(is_root, s2_root_row, row_read.data.row | own_bit)
        depth = Mux(is_root, 0, row_read.data.depth + 1)[:pos_bits]
        parent_has_child = (has_child & c2_parent_hot).any()
        c2_fire = build_en & c2_valid
        link_fire = c2_fire & ~is_root
        m.d.comb += [
            row_read.addr.eq(c2_parent),
            row_write.addr.eq(c2_position),
            row_write.data.row.eq(row),
            row_write.data.depth.eq(depth),
            row_write.en.eq(c2_fire),
            rec_write.addr.eq(c2_position),
            rec_write.data.token.eq(c2_token),
            rec_write.data.depth.eq(depth),
            rec_write.data.invalid.eq(c2_invalid),
            rec_write.en.eq(c2_fire),
            last_read.addr.eq(c2_parent),
            last_write.addr.eq(c2_parent),
            last_write.data.eq(c2_position),
            last_write.en.eq(link_fire),
        ]
        # C3: the first_child/next_sibling writes, a clock behind C2 (parent_has_child, a
        # 64-input AND-OR, gated their LUT-RAM write enables). Nothing reads them before EMIT,
        # whose first clock may meet the last node's write: the root's first child is
        # forwarded then (a sibling link is never written at the root, position 0).
        c3_first_en = Signal()
        c3_sibling_en = Signal()
        c3_parent = Signal(pos_bits, reset_less=True)
        c3_last_child = Signal(pos_bits, reset_less=True)
        c3_position = Signal(range(maxv), reset_less=True)
        c3_root_child = Signal(reset_less=True)  # the first_child write is the root's
        m.d.sync += [c3_first_en.eq(link_fire & ~parent_has_child),
                     c3_sibling_en.eq(link_fire & parent_has_child),
                     c3_parent.eq(c2_parent), c3_last_child.eq(last_read.data),
                     c3_position.eq(c2_position), c3_root_child.eq(c2_parent == 0)]
        m.d.comb += [
            first_write.addr.eq(c3_parent),
            first_write.data.eq(c3_position),
            first_write.en.eq(c3_first_en),
            sibling_write.addr.eq(c3_last_child),
            sibling_write.data.eq(c3_position),
            sibling_write.en.eq(c3_sibling_en),
        ]
        with m.If(c2_fire):
            m.d.sync += own_bit.eq(own_bit << 1)
        with m.If(link_fire):
            with m.If(parent_has_child):
                m.d.sync += has_sibling.eq(has_sibling | one_hot(last_read.data, maxv))
            with m.Else():
                m.d.sync += has_child.eq(has_child | c2_parent_hot)

        # Mask-row serializer: a row in, its words out; the build pipeline waits for it.
        # Whether the next word is a prefix word or its row's last is kept a clock ahead.
        m.submodules.mask_slice = mask_slice = RegisterSlice(params.mask_layout)
        wiring.connect(m, mask_slice.o, wiring.flipped(self.mask))
        offset_shape = signed(max(seq_len_width, (maxv + lanes).bit_length()) + 2)
        ser_busy = Signal()
        ser_window = Signal(row_width)  # the row's words not yet sent, from bit 0
        ser_offset = Signal(offset_shape)  # row column of the word's bit 0, minus the prefix
        ser_n = Signal(range(maxv + 1))
        ser_first = Signal()  # the word is the request's first
        ser_last_row = Signal()
        ser_prefix = Signal()  # the word is all prefix
        last_word = Signal()  # the word is its row's last
        s2_offset = Signal(offset_shape)  # -prefix: a row's first ser_offset
        s2_prefix = Signal()  # a row's first word is all prefix
        s2_one_word = Signal()  # a row's first word is its last
        m.d.sync += [s2_prefix.eq(s2_offset <= -lanes), s2_one_word.eq(s2_offset + lanes >= s2_n)]
        word = Mux(ser_prefix, Const((1 << lanes) - 1, lanes), ser_window[:lanes])
        m.d.comb += [
            mask_slice.i.valid.eq(ser_busy),
            mask_slice.i.payload.bits.eq(word),
            mask_slice.i.payload.row_last.eq(last_word),
            mask_slice.i.payload.first.eq(ser_first),
            mask_slice.i.payload.last.eq(ser_last_row & last_word),
        ]
        word_taken = ser_busy & mask_slice.i.ready
        ser_free = ~ser_busy | (word_taken & last_word)
        m.d.comb += build_en.eq(~c2_valid | ser_free)
        with m.If(word_taken):
            m.d.sync += [ser_offset.eq(ser_offset + lanes), ser_first.eq(0),
                         ser_prefix.eq(ser_offset + 2 * lanes <= 0),
                         last_word.eq(ser_offset + 2 * lanes >= ser_n)]
            with m.If(~ser_prefix):
                m.d.sync += ser_window.eq(ser_window >> lanes)
            with m.If(last_word):
                m.d.sync += ser_busy.eq(0)
        with m.If(c2_fire):
            m.d.sync += [ser_busy.eq(1), ser_window.eq(row), ser_offset.eq(s2_offset),
                         ser_prefix.eq(s2_prefix), last_word.eq(s2_one_word),
                         ser_n.eq(s2_n), ser_first.eq(is_root),
                         ser_last_row.eq(c2_position == s2_last)]

        # Tree records, in position order once the build is done.
        m.submodules.tree_slice = tree_slice = RegisterSlice(params.tree_layout)
        wiring.connect(m, tree_slice.o, wiring.flipped(self.tree))
        emitting = Signal()
        emit_position = Signal(range(maxv + 1))
        emit_index = Signal(retrive_bits)  # s2_base + emit_position
        m.d.comb += [
            rec_read.addr.eq(emit_position),
            first_read.addr.eq(emit_position),
            sibling_read.addr.eq(emit_position),
        ]
        record = tree_slice.i.payload
        m.d.comb += [
            tree_slice.i.valid.eq(emitting),
            record.retrive_index.eq(emit_index),
            record.next_token.eq(Mux(has_child[0],
                                     Mux(c3_first_en & c3_root_child, c3_position,
                                         first_read.data), -1)),
            record.next_sibling.eq(Mux(has_sibling[0], sibling_read.data, -1)),
            record.position.eq(s2_seq + rec_read.data.depth),
            record.draft_token.eq(rec_read.data.token),
            record.invalid.eq(rec_read.data.invalid),
            record.first.eq(emit_position == 0),
            record.last.eq(emit_position == s2_last),
        ]

        with m.FSM(name="build"):
            with m.State("IDLE"):
                m.d.comb += s2_idle.eq(1)
                with m.If(handoff):
                    m.d.sync += [s2_member.eq(member_final), s2_bank.eq(bank), s2_n.eq(call_n),
                                 s2_last.eq(call_last), s2_mode.eq(call_mode),
                                 s2_base.eq(s1_base), has_child.eq(0), has_sibling.eq(0),
                                 # group 0 goes straight to cur; the feeder takes the rest
                                 grp_left.eq(Cat(0, *(word.any() for word
                                                      in group_words(member_final)[1:]))),
                                 cur.eq(group_words(member_final)[0]), cur_group.eq(0),
                                 cur_more.eq(group_words(member_final)[0].any()),
                                 fetch_valid.eq(0), nxt_valid.eq(0), c0_node.eq(0),
                                 c0_have.eq(1), c0_position.eq(0)]
                    m.next = "SEQ"
            with m.State("SEQ"):
                m.d.comb += self.seq_lens.ready.eq(1)
                with m.If(self.seq_lens.valid):
                    seq_len = self.seq_lens.payload.seq_len
                    full = s2_mode == TreeMaskMode.FULL_MASK
                    m.d.sync += [s2_seq.eq(seq_len), c0_issue.eq(1),
                                 s2_offset.eq(-Mux(full, seq_len, 0)),
                                 s2_align.eq(Mux(full, seq_len[:align_bits], 0)),
                                 own_bit_load.eq(1)]
                    m.next = "BUILD"
            with m.State("BUILD"):
                with m.If(c2_fire & (c2_position == s2_last)):
                    m.d.sync += [emitting.eq(1), emit_position.eq(0), emit_index.eq(s2_base)]
                    m.next = "EMIT"
            with m.State("EMIT"):
                with m.If(tree_slice.i.ready):
                    # has_child/has_sibling shift so that bit 0 is the emitted position's.
                    m.d.sync += [emit_position.eq(emit_position + 1),
                                 emit_index.eq(emit_index + 1),
                                 has_child.eq(has_child >> 1), has_sibling.eq(has_sibling >> 1)]
                    with m.If(emit_position == s2_last):
                        m.d.sync += emitting.eq(0)
                        m.next = "IDLE"
        return m


def synthesis_parameters(**overrides) -> TreeMaskParams:
    """The parameters of the synthesis report: verify sets of up to 64 nodes out of 256
    (``max_verify_num=64``, ``max_node_count=256``), 64-column mask words (one row per clock
    in the QLEN layouts), 32-bit tokens and sequence lengths, batches of up to 256."""
    return TreeMaskParams(**{"max_node_count": 256, "max_verify_num": 64, "mask_lanes": 64,
                             "token_width": 32, "seq_len_width": 32, "max_batch_size": 256,
                             **overrides})


def synthesis_configuration(**overrides) -> TreeMask:
    """K4 at ``synthesis_parameters(**overrides)``."""
    return TreeMask(**asdict(synthesis_parameters(**overrides)))
