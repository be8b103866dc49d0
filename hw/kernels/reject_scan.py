"""K6's final-row summation: :class:`ExactSumScanner`, the sequential float32 prefix sums of
non-negative values at ``lanes`` values per clock, bit for bit (model:
``hw.kernels.reject_scan_model``; why it is exact: docs/reject_sample.md).
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.lib.float32 import POSITIVE_INFINITY, Float32Add, float32_fields
from hw.lib.logic import first_set, prefix_sums, wire
from hw.lib.params import check_int, check_power_of_two
from hw.lib.pipeline import shift_right_sticky, stage

from .reject_scan_model import TOP

__all__ = ["ExactSumScanner", "state_bits"]


def state_bits(i: Value, e: Value, inf: Value) -> Value:
    """float32 bits of the scanner state ``(i, e, inf)`` for ``i <= 2^24`` (combinational;
    ``hw.kernels.reject_scan_model.scan_bits`` in hardware)."""
    i = Value.cast(i)
    top = Mux(e == 0xFE, POSITIVE_INFINITY, Cat(Const(0, 23), (e + 1)[:8], Const(0, 1)))
    inside = Cat(i[:23], Mux(i[23], e, 0)[:8], Const(0, 1))
    return Mux(inf, POSITIVE_INFINITY, Mux(i[24], top, inside))


class ExactSumScanner(wiring.Component):
    """Sequential float32 prefix sums of non-negative values, ``lanes`` values per clock,
    bit-exact with ``np.add.accumulate`` in float32.

    Inside the running sum's binade a word is integer arithmetic on the sum's ulp grid (a
    pipelined shift, tie-parity and prefix-sum datapath; only the loop stage depends on the
    previous word). A *roll* (the sum rounds up to the next binade) or a *cross* (the exact sum
    leaves the binade: that one addition goes through a ``Float32Add``) ends the word early;
    it is then rescanned from the next lane with the new exponent (about 4 clocks per roll, 10
    per cross). ``+inf`` absorbs everything after it.

    Parameters
    ----------
    lanes : int
        Values per word (power of two, 1..64).
    buffer_words : int
        Input buffer (words received but not finished; power of two, >= 4).
    max_words : int
        Largest pass (words).

    Members
    -------
    start : In(1)
        Starts a pass (only while ``busy`` is low) of ``words`` words from the sum ``init``.
    init : In(32)
        Running sum before the first value (float32 bits, ``>= +0``, not NaN).
    words : In(range(max_words + 1))
        Words of the pass, at least 1.
    pick : In(1)
        Look for the first lane with a positive value and a prefix sum ``> threshold``.
    threshold : In(32)
        ``u`` of the pick (float32 bits, ``>= -0.0``, not NaN: the kernel handles the other
        cases without a pick pass); read while ``busy``.
    i : In(stream.Signature(ArrayLayout(32, lanes)))
        The values, ``words`` words, lane ``l`` of word ``w`` is element ``w * lanes + l``.
    busy : Out(1)
        A pass is running.
    total : Out(32)
        The running sum (after the pass: the total).
    freed : Out(1)
        Pulses the clock after a word left the input buffer (one pulse per word).
    word_start : Out(1)
        The loop stage starts word ``word_index`` with running sum ``word_sum``.
    word_index : Out(range(max_words))
    word_sum : Out(32)
    hit : Out(1)
        (pick) A hit was found: the first at ``hit_word``/``hit_lane``.
    hit_word : Out(range(max_words))
    hit_lane : Out(range(lanes))
    """

    def __init__(self, *, lanes: int = 8, buffer_words: int = 32, max_words: int = 16384):
        self._lanes = check_power_of_two("lanes", lanes, 1, 64)
        self._buffer_words = check_power_of_two("buffer_words", buffer_words, 4, 1 << 16)
        self._max_words = check_int("max_words", max_words, 1)
        super().__init__({
            "start": In(1),
            "init": In(32),
            "words": In(range(max_words + 1)),
            "pick": In(1),
            "threshold": In(32),
            "i": In(stream.Signature(data.ArrayLayout(32, lanes))),
            "busy": Out(1),
            "total": Out(32),
            "freed": Out(1),
            "word_start": Out(1),
            "word_index": Out(range(max_words)),
            "word_sum": Out(32),
            "hit": Out(1),
            "hit_word": Out(range(max_words)),
            "hit_lane": Out(range(max(lanes, 2))),
        })

    @property
    def lanes(self):
        return self._lanes

    @property
    def buffer_words(self):
        return self._buffer_words

    @property
    def max_words(self):
        return self._max_words

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        one = Const(1)
        index_shape = range(self._max_words + 1)
        delta_width = 24 + lanes.bit_length() + 1

        m.submodules.buffer = buffer = Memory(shape=unsigned(32 * lanes),
                                              depth=self._buffer_words, init=[])
        buffer_write = buffer.write_port()
        buffer_read = buffer.read_port(domain="sync")
        m.submodules.slow_add = slow_add = Float32Add()

        busy = self.busy
        pick = Signal()
        words = Signal(index_shape)
        write_index = Signal(index_shape)  # next word to receive
        commit_index = Signal(index_shape)  # word the loop stage is on
        fetch_index = Signal(index_shape)  # next word to read from the buffer
        resume_lane = Signal(range(max(lanes, 2)))
        st_i = Signal(25)
        st_e = Signal(8, init=1)
        st_inf = Signal()
        slow_busy = Signal()
        slow_count = Signal(range(Float32Add.latency + 2))
        slow_a = Signal(32)
        slow_b = Signal(32)
        m.d.comb += [slow_add.a.eq(slow_a), slow_add.b.eq(slow_b),
                     self.total.eq(state_bits(st_i, st_e, st_inf))]

        # --- input buffer --------------------------------------------------------------------
        m.d.comb += [
            self.i.ready.eq(busy & ((write_index - commit_index) < self._buffer_words)),
            buffer_write.addr.eq(write_index),
            buffer_write.data.eq(self.i.payload.as_value()),
            buffer_write.en.eq(self.i.valid & self.i.ready),
        ]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += write_index.eq(write_index + 1)

        # --- fetch -------------------------------------------------------------------------
        fetch = Signal()
        m.d.comb += [
            fetch.eq(busy & (fetch_index != write_index) & ~slow_busy),
            buffer_read.addr.eq(fetch_index),
            buffer_read.en.eq(1),
        ]
        f_valid = Signal()
        f_index = Signal(index_shape)
        f_start = Signal.like(resume_lane)
        m.d.sync += [f_valid.eq(fetch), f_index.eq(fetch_index),
                     f_start.eq(Mux(fetch_index == commit_index, resume_lane, 0))]
        with m.If(fetch):
            m.d.sync += fetch_index.eq(fetch_index + 1)

        # --- D1: each lane on the grid of the current exponent -------------------------------
        word = [buffer_read.data[32 * j:32 * (j + 1)] for j in range(lanes)]
        d1_valid = stage(m, one, f_valid, name="d1_valid")
        d1_index = stage(m, one, f_index, name="d1_index")
        d1_start = stage(m, one, f_start, name="d1_start")
        d1_x, d1_big, d1_floor, d1_half, d1_sticky = [], [], [], [], []
        for j in range(lanes):
            x = wire(m, Mux(j >= f_start, word[j], 0), name=f"f_x{j}")
            fields = float32_fields(x)
            distance = wire(m, (st_e - fields.exponent_eff)[:8], name=f"f_distance{j}")
            mantissa = wire(m, Cat(Const(0, 1), fields.mantissa), name=f"f_mantissa{j}")
            shifted, lost = shift_right_sticky(mantissa, distance, max_shift=32)
            shifted = wire(m, shifted, name=f"f_shifted{j}")
            d1_x.append(stage(m, one, x, name=f"d1_x{j}"))
            d1_big.append(stage(m, one, fields.exponent > st_e, name=f"d1_big{j}"))
            d1_floor.append(stage(m, one, shifted[1:25], name=f"d1_floor{j}"))
            d1_half.append(stage(m, one, shifted[0], name=f"d1_half{j}"))
            d1_sticky.append(stage(m, one, lost, name=f"d1_sticky{j}"))

        # --- D2: tie parities for both incoming parities, prefix sums of the floors ----------
        d2_valid = stage(m, one, d1_valid, name="d2_valid")
        d2_index = stage(m, one, d1_index, name="d2_index")
        d2_start = stage(m, one, d1_start, name="d2_start")
        d2_x = [stage(m, one, d1_x[j], name=f"d2_x{j}") for j in range(lanes)]
        d2_big = [stage(m, one, d1_big[j], name=f"d2_big{j}") for j in range(lanes)]
        floors = prefix_sums(m, d1_floor, width=delta_width, name="floor_sum")
        d2_floor_sum = [stage(m, one, floors[j], name=f"d2_fsum{j}") for j in range(lanes)]
        d2_round = {}
        d2_round_count = {}
        count_width = lanes.bit_length() + 1
        for parity in (0, 1):
            odd_chain = Const(parity)
            count = Const(0, count_width)
            for j in range(lanes):
                odd = wire(m, odd_chain ^ d1_floor[j][0], name=f"odd{parity}_{j}")
                round_up = wire(m, d1_half[j] & (d1_sticky[j] | odd), name=f"rb{parity}_{j}")
                odd_chain = wire(m, odd ^ round_up, name=f"parity{parity}_{j}")
                count = wire(m, (count + round_up)[:count_width], name=f"rc{parity}_{j}")
                d2_round[parity, j] = stage(m, one, round_up, name=f"d2_rb{parity}_{j}")
                d2_round_count[parity, j] = stage(m, one, count, name=f"d2_rc{parity}_{j}")

        # --- D3: delta_j(p) = sum of (floor + round_up) over lanes <= j ----------------------
        d3_valid = stage(m, one, d2_valid, name="d3_valid")
        d3_index = stage(m, one, d2_index, name="d3_index")
        d3_start = stage(m, one, d2_start, name="d3_start")
        d3_x = [stage(m, one, d2_x[j], name=f"d3_x{j}") for j in range(lanes)]
        d3_big = [stage(m, one, d2_big[j], name=f"d3_big{j}") for j in range(lanes)]
        d3_delta = {(p, j): stage(m, one, (d2_floor_sum[j] + d2_round_count[p, j])
                                  [:delta_width], name=f"d3_delta{p}_{j}")
                    for p in (0, 1) for j in range(lanes)}
        d3_round = {(p, j): stage(m, one, d2_round[p, j], name=f"d3_rb{p}_{j}")
                    for p in (0, 1) for j in range(lanes)}

        # --- loop stage ----------------------------------------------------------------------
        act = d3_valid & ~slow_busy
        parity = st_i[0]
        sums, events, crosses, rolls = [], [], [], []
        for j in range(lanes):
            delta = Mux(parity, d3_delta[1, j], d3_delta[0, j])
            round_up = wire(m, Mux(parity, d3_round[1, j], d3_round[0, j]), name=f"ls_rb{j}")
            total = wire(m, (st_i + delta)[:delta_width + 1], name=f"ls_sum{j}")
            active = d3_start <= j
            at_top = wire(m, total == TOP, name=f"ls_top{j}")
            cross = wire(m, active & (d3_big[j] | (total > TOP) | (at_top & ~round_up)),
                          name=f"ls_cross{j}")
            roll = wire(m, active & ~d3_big[j] & at_top & round_up, name=f"ls_roll{j}")
            sums.append(total)
            crosses.append(cross)
            rolls.append(roll)
            events.append(~st_inf & (cross | roll))
        any_event, first = first_set(m, events, name="ls_event")
        sums_array = Array(sums)
        x_array = Array(d3_x)
        before = wire(m, Mux(first == 0, st_i, sums_array[(first - 1)[:len(first)]])[:25],
                       name="ls_before")
        is_cross = wire(m, Array(crosses)[first], name="ls_is_cross")
        last_lane = wire(m, first == lanes - 1, name="ls_last_lane")
        flush = Signal()
        next_commit = Signal(index_shape)
        m.d.comb += next_commit.eq(commit_index + 1)

        m.d.comb += [
            self.word_start.eq(act & (d3_start == 0)),
            self.word_index.eq(d3_index),
            self.word_sum.eq(self.total),
        ]

        # Hit check inputs (registered: the pick does not feed back into the loop).
        h_valid = Signal()
        h_index = Signal(index_shape)
        h_sum = [Signal(25, name=f"h_sum{j}") for j in range(lanes)]
        h_e = Signal(8)
        h_inf = Signal()
        h_mask = Signal(lanes)
        h_positive = Signal(lanes)
        single_valid = Signal()
        single_index = Signal(index_shape)
        single_lane = Signal.like(self.hit_lane)
        single_bits = Signal(32)
        slow_index = Signal(index_shape)
        slow_lane = Signal.like(self.hit_lane)
        m.d.sync += [h_valid.eq(0), single_valid.eq(0)]

        with m.If(act):
            m.d.sync += [
                h_valid.eq(pick), h_index.eq(d3_index), h_e.eq(st_e), h_inf.eq(st_inf),
                h_positive.eq(Cat(*(x.any() for x in d3_x))),
                *(h_sum[j].eq(sums[j][:25]) for j in range(lanes)),
            ]
            started = Cat(*(d3_start <= j for j in range(lanes)))
            with m.If(~any_event):
                m.d.sync += [h_mask.eq(started), commit_index.eq(next_commit),
                             resume_lane.eq(0)]
                with m.If(~st_inf):
                    m.d.sync += st_i.eq(sums[-1][:25])
            with m.Else():
                m.d.comb += flush.eq(1)
                below_first = Cat(*(first > j for j in range(lanes)))
                with m.If(last_lane):
                    m.d.sync += [commit_index.eq(next_commit), resume_lane.eq(0),
                                 fetch_index.eq(next_commit)]
                with m.Else():
                    m.d.sync += [resume_lane.eq(first + 1), fetch_index.eq(commit_index)]
                with m.If(is_cross):
                    m.d.sync += [h_mask.eq(started & below_first), st_i.eq(before)]
                    x_first = wire(m, x_array[first], name="ls_x_first")
                    with m.If(before == 0):
                        # +0 + x = x: the sum starts (or restarts) at x itself.
                        x_fields = float32_fields(x_first)
                        m.d.sync += [
                            st_i.eq(Cat(x_fields.fraction, ~(x_fields.exponent == 0))),
                            st_e.eq(x_fields.exponent_eff), st_inf.eq(x_fields.is_inf),
                            single_valid.eq(pick), single_index.eq(d3_index),
                            single_lane.eq(first), single_bits.eq(x_first),
                        ]
                    with m.Else():
                        m.d.sync += [
                            slow_busy.eq(1), slow_count.eq(0),
                            slow_a.eq(state_bits(before, st_e, 0)), slow_b.eq(x_first),
                            slow_index.eq(d3_index), slow_lane.eq(first),
                        ]
                with m.Else():  # roll: exactly 2^24 units, the bottom of the next binade
                    m.d.sync += [h_mask.eq(started & (below_first | (1 << first))),
                                 st_i.eq(1 << 23), st_e.eq(st_e + 1)]
                    with m.If(st_e == 0xFE):
                        m.d.sync += st_inf.eq(1)

        with m.If(slow_busy):
            m.d.sync += slow_count.eq(slow_count + 1)
            with m.If(slow_count == Float32Add.latency):
                result = float32_fields(slow_add.result)
                m.d.sync += [
                    slow_busy.eq(0),
                    st_i.eq(Cat(result.fraction, ~(result.exponent == 0))),
                    st_e.eq(result.exponent_eff), st_inf.eq(result.is_inf),
                    single_valid.eq(pick), single_index.eq(slow_index),
                    single_lane.eq(slow_lane), single_bits.eq(slow_add.result),
                ]

        # Pipeline flush after an event (the fetch index was reset above).
        with m.If(flush):
            m.d.sync += [f_valid.eq(0), d1_valid.eq(0), d2_valid.eq(0), d3_valid.eq(0)]

        # One clock after the loop stage finishes a word, its buffer slot is free again.
        m.d.sync += self.freed.eq(act & (~any_event | last_lane))

        # --- hit check ------------------------------------------------------------------------
        # prefix > threshold for a prefix >= +0 and a threshold >= -0.0: magnitudes.
        threshold = self.threshold[:31]
        hit_bits = [wire(m, h_mask[j] & h_positive[j]
                          & (state_bits(h_sum[j], h_e, h_inf)[:31] > threshold),
                          name=f"hit{j}") for j in range(lanes)]
        any_hit, hit_first = first_set(m, hit_bits, name="hit")
        single_hit = single_valid & (single_bits[:31] > threshold)
        with m.If(~self.hit):
            with m.If(h_valid & any_hit):
                m.d.sync += [self.hit.eq(1), self.hit_word.eq(h_index),
                             self.hit_lane.eq(hit_first)]
            with m.Elif(single_hit):
                m.d.sync += [self.hit.eq(1), self.hit_word.eq(single_index),
                             self.hit_lane.eq(single_lane)]

        # --- pass control ---------------------------------------------------------------------
        with m.If(busy & (commit_index == words) & ~slow_busy & ~h_valid & ~single_valid
                  & ~d3_valid):
            m.d.sync += busy.eq(0)
        with m.If(self.start & ~busy):
            init = float32_fields(self.init)
            m.d.sync += [
                busy.eq(1), pick.eq(self.pick), words.eq(self.words),
                write_index.eq(0), commit_index.eq(0), fetch_index.eq(0), resume_lane.eq(0),
                st_i.eq(Cat(init.fraction, ~(init.exponent == 0))),
                st_e.eq(init.exponent_eff), st_inf.eq(init.is_inf),
                self.hit.eq(0), slow_busy.eq(0),
                f_valid.eq(0), d1_valid.eq(0), d2_valid.eq(0), d3_valid.eq(0),
            ]
        return m
