"""A pass of the fused verify's lanes over a row held on chip (docs/tree_verify.md).

The row sits in the read ports' banks (``hw.kernels.tree_verify_loader``): bank ``p`` word
``i`` is row word ``p * chunk + i``. A pass reads word ``i`` of every bank at once for
``i = 0 .. chunk - 1`` and turns its ``lanes`` logits into exponentials, keys and terms
(``hw.kernels.tree_verify_lane``); it sums the terms of the tokens it counts (in range, key at
least ``filter``, and in a pick pass not removed) per bank and over the row, and counts them.
A sum pass also stores every bank's block sums (``block_words`` words each) for the draw; a
pick pass rescans one block and streams bank ``pick_bank``'s word sums.

The removed-token bitmap (one bit per token, a bank word's bits together) belongs here too: a
pass with ``clear_removed`` zeroes it, the walk sets bits of rejected siblings (and takes their
terms off their blocks), a pick pass leaves their terms out.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from golden.logit_rows import ALIGN_BITS, SCALE_BITS

from .tree_verify_lane import GRID_BITS, KEY_BITS, KEY_TOP, SUM_BITS, LogitLane, counted_term
from .tree_verify_params import TreeVerifyParams

__all__ = ["RowPass", "sum_tree", "widen_logit"]


def widen_logit(bits, logit_bits: int):
    """A logit of ``logit_bits`` (32: float32; 16: bfloat16) as float32 bits."""
    return bits if logit_bits == 32 else Cat(Const(0, 32 - logit_bits), bits)


def sum_tree(m: Module, values: list, *, name: str) -> list[list[Signal]]:
    """Registered pairwise sums of ``values`` (a power-of-two count), one level per clock;
    returns every level, ``levels[0]`` the registered inputs and ``levels[-1]`` the total.
    Datapath registers: no reset (docs/timing.md, "The reset net")."""
    level = []
    for j, value in enumerate(values):
        register = Signal(len(value), name=f"{name}_l0_{j}", reset_less=True)
        m.d.sync += register.eq(value)
        level.append(register)
    levels = [level]
    while len(level) > 1:
        nxt = []
        for j in range(0, len(level), 2):
            register = Signal(max(len(level[j]), len(level[j + 1])) + 1,
                              name=f"{name}_l{len(levels)}_{j // 2}", reset_less=True)
            m.d.sync += register.eq(level[j] + level[j + 1])
            nxt.append(register)
        levels.append(nxt)
        level = nxt
    return levels


class RowPass(wiring.Component):
    """Lanes over the row banks: sums, counts and the pick pass's word sums.

    Parameters
    ----------
    params : TreeVerifyParams
        The kernel's parameters (``lanes``, ``read_ports``, ``port_logits``, ...).

    Members
    -------
    start : In(1)
        Begin a pass (only while not ``busy``); the inputs below are read while the pass runs
        and must hold until ``done``.
    chunk : In(range(bank_words + 1))
        Words per bank (the row's ``chunk_words``): bank ``p`` word ``i`` is row word
        ``p * chunk + i``.
    first_word, words : In
        The pass reads bank words ``first_word .. first_word + words - 1`` (at most
        ``chunk``).
    full_words, tail_lanes : In
        The row's whole words (``V // port_logits``) and the logits of the partial word after
        them (``V % port_logits``): lanes past ``V`` are not counted.
    peak, threshold, grid, peak_aligned, scale : In
        The row constants of ``LogitLane``.
    filter : In(KEY_BITS)
        Count the in-range tokens whose key is at least ``filter``.
    clear_removed : In(1)
        The pass zeroes the removed bitmap.
    apply_removed : In(1)
        Leave removed tokens out (the pick pass); without it the pass stores its block sums.
    pick_bank : In(range(read_ports))
        The bank whose word sums ``word_valid``/``word_sum`` stream.
    bank_address : Out(range(bank_words))
    bank_data : In(ArrayLayout(port_bits, read_ports))
        Every bank's read port: the words of ``bank_address`` one clock later.
    busy, done : Out(1)
        A pass is running; it ended (one clock; the results hold until the next ``start``).
    total : Out(SUM_BITS)
        Sum of the counted terms.
    count : Out(25)
        Counted tokens.
    bank_sums : Out(ArrayLayout(SUM_BITS, read_ports))
        Sum of the counted terms per bank.
    word_valid, word_sum : Out
        Per word of the pass, in order, bank ``pick_bank``'s sum of counted terms.
    remove_word : In(range(bank_words)), removed_word : Out(lanes)
        The removed bitmap's word ``remove_word`` (one clock later).
    remove : In(1), remove_lane : In(range(lanes))
        Set bit ``remove_lane`` of word ``remove_word`` (``removed_word`` must be current:
        ``remove_word`` set at least one clock before).
    block_address : In(range(max_blocks)), block_data : Out(ArrayLayout(SUM_BITS, read_ports))
        Every bank's block sum ``block_address`` (one clock later).
    block_remove : In(1), block_remove_bank : In(range(read_ports)), block_remove_term : In
        Take ``block_remove_term`` off bank ``block_remove_bank``'s block ``block_address``
        (``block_data`` must be current), while no pass runs.
    """

    def __init__(self, params: TreeVerifyParams):
        self._params = p = params
        word = range(max(p.bank_words, 2))
        super().__init__({
            "start": In(1), "chunk": In(range(p.bank_words + 1)),
            "first_word": In(word), "words": In(range(p.bank_words + 1)),
            "full_words": In(range(p.max_row_words + 1)),
            "tail_lanes": In(range(p.port_logits)),
            "peak": In(32), "threshold": In(32), "grid": In(signed(GRID_BITS)),
            "peak_aligned": In(ALIGN_BITS), "scale": In(SCALE_BITS), "filter": In(KEY_BITS),
            "clear_removed": In(1), "apply_removed": In(1),
            "pick_bank": In(range(p.read_ports)),
            "bank_address": Out(word),
            "bank_data": In(data.ArrayLayout(p.port_bits, p.read_ports)),
            "busy": Out(1), "done": Out(1), "total": Out(SUM_BITS), "count": Out(25),
            "bank_sums": Out(data.ArrayLayout(SUM_BITS, p.read_ports)),
            "word_valid": Out(1), "word_sum": Out(SUM_BITS),
            "remove_word": In(word), "removed_word": Out(p.lanes),
            "remove": In(1), "remove_lane": In(range(p.lanes)),
            "block_address": In(range(max(p.max_blocks, 2))),
            "block_data": Out(data.ArrayLayout(SUM_BITS, p.read_ports)),
            "block_remove": In(1), "block_remove_bank": In(range(max(p.read_ports, 2))),
            "block_remove_term": In(SUM_BITS),
        })

    #: Clocks from a word's address to its masked terms: bank read, lane, mask register.
    TERMS_DELAY = 1 + LogitLane.LATENCY + 1

    @property
    def bank_levels(self) -> int:
        return (self._params.port_logits - 1).bit_length()

    @property
    def total_levels(self) -> int:
        return (self._params.lanes - 1).bit_length()

    def elaborate(self, platform):
        p = self._params
        m = Module()

        removed = Memory(shape=p.lanes, depth=max(p.bank_words, 2), init=[])
        m.submodules.removed = removed
        pass_read = removed.read_port()
        query = removed.read_port()
        write = removed.write_port()
        m.d.comb += [query.addr.eq(self.remove_word), self.removed_word.eq(query.data)]

        # Issue: one word address per clock.
        issuing = Signal()
        index = Signal(range(max(p.bank_words, 2)))
        last_index = Signal.like(index)
        draining = Signal(range(self.TERMS_DELAY + self.total_levels + 3))
        # `draining != 0`, registered: `busy` gates the block sums' write (7 LUT levels with
        # the compare in front of it)
        drain_live = Signal()
        m.d.comb += [self.bank_address.eq(index), pass_read.addr.eq(index)]
        with m.If(self.start & ~self.busy):
            m.d.sync += [index.eq(self.first_word), issuing.eq(self.words != 0),
                         last_index.eq(self.first_word + self.words - 1),
                         draining.eq(self.TERMS_DELAY + self.total_levels + 2), drain_live.eq(1)]
        with m.Elif(issuing):
            m.d.sync += index.eq(index + 1)
            with m.If(index == last_index):
                m.d.sync += issuing.eq(0)
        with m.Elif(drain_live):
            m.d.sync += [draining.eq(draining - 1), drain_live.eq(draining != 1)]
        m.d.comb += [self.busy.eq(issuing | drain_live),
                     self.done.eq(~issuing & (draining == 1))]
        with m.If(issuing & self.clear_removed):
            m.d.comb += [write.addr.eq(index), write.data.eq(0), write.en.eq(1)]
        with m.Elif(self.remove & ~self.busy):
            m.d.comb += [write.addr.eq(self.remove_word), write.en.eq(1),
                         write.data.eq(query.data | (1 << self.remove_lane))]

        # The word at the banks' outputs (one clock after its address).
        word_live = Signal()
        word_index = Signal.like(index)
        m.d.sync += [word_live.eq(issuing), word_index.eq(index)]
        lanes = []
        for bank in range(p.read_ports):
            # The word's place in the row, compared in the clock its address is issued (the
            # compare's carry chain was in front of the lanes' valid).
            bank_first = Signal(range(p.max_row_words + p.bank_words + 1),
                                name=f"bank_first{bank}")  # bank * chunk, a request constant
            row_word = Signal(range(p.max_row_words + p.bank_words + 1), name=f"row_word{bank}")
            full, tail = Signal(name=f"full{bank}"), Signal(name=f"tail{bank}")
            m.d.comb += row_word.eq(bank_first + index)
            m.d.sync += [bank_first.eq(bank * self.chunk), full.eq(row_word < self.full_words),
                         tail.eq(row_word == self.full_words)]
            for lane in range(p.port_logits):
                unit = LogitLane()
                m.submodules[f"lane{bank}_{lane}"] = unit
                logit = self.bank_data[bank][lane * p.logit_bits:(lane + 1) * p.logit_bits]
                m.d.comb += [
                    unit.en.eq(1), unit.peak.eq(self.peak), unit.threshold.eq(self.threshold),
                    unit.grid.eq(self.grid), unit.peak_aligned.eq(self.peak_aligned),
                    unit.scale.eq(self.scale), unit.logit.eq(widen_logit(logit, p.logit_bits)),
                    unit.valid.eq(word_live & (full | (tail & (lane < self.tail_lanes)))),
                ]
                lanes.append(unit)

        # The removed bits travel beside the lanes (the bitmap read is one clock like a bank).
        removed_bits = pass_read.data
        for i in range(LogitLane.LATENCY):
            delayed = Signal(p.lanes, name=f"removed_d{i}")
            m.d.sync += delayed.eq(removed_bits)
            removed_bits = delayed
        word_done = word_live
        for i in range(LogitLane.LATENCY):
            delayed = Signal(name=f"word_d{i}")
            m.d.sync += delayed.eq(word_done)
            word_done = delayed
        done_index = Cat(word_index, word_index == last_index)  # the word's index, last flag
        for i in range(LogitLane.LATENCY + 1 + self.bank_levels):
            delayed = Signal(len(done_index), name=f"index_d{i}")
            m.d.sync += delayed.eq(done_index)
            done_index = delayed

        # key >= filter is z <= KEY_TOP - filter (one subtraction a pass, none a lane;
        # negative, so nothing counts, for a filter above every key).
        z_limit = Signal(signed(KEY_BITS + 1))
        m.d.sync += z_limit.eq(KEY_TOP - self.filter)
        counted, masked = zip(*(counted_term(unit, z_limit, removed_bits[j], self.apply_removed)
                                for j, unit in enumerate(lanes)), strict=True)
        terms = sum_tree(m, list(masked), name="terms")
        counts = sum_tree(m, list(counted), name="counts")
        words = [word_done]
        for level in range(self.total_levels + 1):
            delayed = Signal(name=f"word_l{level}")
            m.d.sync += delayed.eq(words[-1])
            words.append(delayed)

        # Accumulate: per bank at its level of the tree, the row at the root.
        start = self.start & ~self.busy
        bank_level = terms[self.bank_levels]
        bank_word = words[1 + self.bank_levels]
        for bank in range(p.read_ports):
            with m.If(start):
                m.d.sync += self.bank_sums[bank].eq(0)
            with m.Elif(bank_word):
                m.d.sync += self.bank_sums[bank].eq(self.bank_sums[bank] + bank_level[bank])
        self._blocks(m, bank_level, bank_word, done_index, start)
        pick = Signal(SUM_BITS)
        m.d.comb += pick.eq(Cat(*bank_level).word_select(self.pick_bank, len(bank_level[0]))
                            if p.read_ports > 1 else bank_level[0])
        m.d.comb += [self.word_valid.eq(bank_word), self.word_sum.eq(pick)]
        root = words[1 + self.total_levels]
        with m.If(start):
            m.d.sync += [self.total.eq(0), self.count.eq(0)]
        with m.Elif(root):
            m.d.sync += [self.total.eq(self.total + terms[-1][0]),
                         self.count.eq(self.count + counts[-1][0])]
        return m

    def _blocks(self, m, bank_level, bank_word, done_index, start):
        """Every bank's block sums: accumulated from the bank's word sums, written at each
        block's last word (or the pass's); read and decreased by the walk."""
        p = self._params
        block_bits = (p.block_words - 1).bit_length()
        index, last = done_index[:-1], done_index[-1]
        block_end = last | (index[:block_bits] == p.block_words - 1) if block_bits else 1
        for bank in range(p.read_ports):
            table = Memory(shape=SUM_BITS, depth=max(p.max_blocks, 2), init=[])
            m.submodules[f"blocks{bank}"] = table
            read, write = table.read_port(), table.write_port()
            m.d.comb += [read.addr.eq(self.block_address),
                         self.block_data[bank].eq(read.data)]
            running = Signal(SUM_BITS, name=f"block_sum{bank}", reset_less=True)  # from `start`
            total = running + bank_level[bank]
            with m.If(start):
                m.d.sync += running.eq(0)
            with m.Elif(bank_word):
                m.d.sync += running.eq(Mux(block_end, 0, total))
            with m.If(bank_word & block_end & ~self.apply_removed):
                m.d.comb += [write.addr.eq(index >> block_bits), write.data.eq(total),
                             write.en.eq(1)]
            with m.Elif(self.block_remove & (self.block_remove_bank == bank) & ~self.busy):
                m.d.comb += [write.addr.eq(self.block_address), write.en.eq(1),
                             write.data.eq(read.data - self.block_remove_term)]
