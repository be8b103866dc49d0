"""K6's final-row summation: :class:`ExactSumScanner`, the sequential float32 prefix sums of
non-negative values at ``lanes`` values per clock, bit for bit (model:
``hw.kernels.reject_scan_model``; why it is exact: docs/reject_sample.md).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.lib.float32 import POSITIVE_INFINITY, Float32Add, float32_fields
from hw.lib.logic import first_set, or_tree, wire
from hw.lib.params import check_int, check_power_of_two
from hw.lib.pipeline import data_stage, stage

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
    previous word, and it only decides whether the word ends early). A *roll* (the sum rounds
    up to the next binade) or a *cross* (the exact sum leaves the binade: that one addition
    goes through a ``Float32Add``) ends the word early: four event clocks find the lane and
    apply it, then the word is rescanned from the next lane with the new exponent through the
    refilled pipeline (about 14 clocks per roll at 16 lanes, 21 per cross). ``+inf`` absorbs
    everything after it. Every stage keeps within the 300 MHz rule of docs/timing.md.

    Parameters
    ----------
    lanes : int
        Values per word (power of two, 1..64).
    buffer_words : int
        Input buffer (power of two, >= 4; it holds up to ``buffer_words - 2`` words received
        but not finished).
    max_words : int
        Largest pass (words).

    Members
    -------
    start : In(1)
        Starts a pass (only while ``busy`` is low) of ``words`` words from the sum ``init``;
        taken into registers, ``busy`` rises two clocks later.
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
        The running sum, registered (after the pass: the total).
    freed : Out(1)
        Pulses the clock after a word left the input buffer (one pulse per word).
    word_start : Out(1)
        The loop stage started word ``word_index`` with running sum ``word_sum`` (registered:
        one clock after the loop stage took the word).
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
        last = lanes - 1
        one = Const(1)
        index_shape = range(self._max_words + 1)
        lane_shape = range(max(lanes, 2))
        delta_width = 24 + lanes.bit_length() + 1
        sum_width = delta_width + 1
        count_width = lanes.bit_length() + 1

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
        resume_lane = Signal(lane_shape)
        st_i = Signal(25)
        st_e = Signal(8, init=1)
        st_inf = Signal()
        # TOP - st_i, kept beside st_i so that the loop's event test is one comparison
        # (delta >= room) instead of an add and a compare in series; recomputed the clock
        # after any write of st_i other than the loop's own (the pipeline is empty then).
        room = Signal(25)
        room_stale = Signal()
        slow_busy = Signal()
        slow_count = Signal(range(Float32Add.latency + 2))
        slow_a = Signal(32)
        slow_b = Signal(32)
        ev_busy = Signal()  # an event word is being resolved (phases 1..4)
        h_index = Signal(index_shape)  # the loop stage's last word
        # One-hot phase flags (no decoding in front of the registers they select).
        ev_phase = [None] + [Signal(name=f"ev_phase{k}") for k in range(1, 5)]
        m.d.sync += [ev_phase[k].eq(ev_phase[k - 1]) for k in range(2, 5)]
        m.d.sync += ev_phase[1].eq(0)
        m.d.comb += [slow_add.a.eq(slow_a), slow_add.b.eq(slow_b),
                     self.word_sum.eq(self.total)]
        m.d.sync += self.total.eq(state_bits(st_i, st_e, st_inf))

        # --- input buffer --------------------------------------------------------------------
        # `room_in` is registered: a word accepted this clock is not in its test yet, so one
        # slot stays spare, and one more for the event word, which the loop stage counts as
        # done before its event phases put it back.
        room_in = Signal()
        m.d.sync += room_in.eq((write_index - commit_index) < self._buffer_words - 2)
        m.d.comb += [
            self.i.ready.eq(busy & room_in),
            buffer_write.addr.eq(write_index),
            buffer_write.data.eq(self.i.payload.as_value()),
            buffer_write.en.eq(self.i.valid & self.i.ready),
        ]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += write_index.eq(write_index + 1)

        # --- fetch -------------------------------------------------------------------------
        valids = []

        def valid_reg(name):
            signal = Signal(name=name)
            valids.append(signal)
            return signal

        fetch = Signal()
        m.d.comb += [
            fetch.eq(busy & (fetch_index != write_index) & ~slow_busy & ~ev_busy),
            # Event phase 1 reads the event word again (its values for the slow add).
            buffer_read.addr.eq(Mux(ev_phase[1], h_index, fetch_index)),
            buffer_read.en.eq(1),
        ]
        f_valid = valid_reg("f_valid")
        f_index = Signal(index_shape)
        f_start = Signal(lane_shape)
        m.d.sync += [f_valid.eq(fetch), f_index.eq(fetch_index),
                     f_start.eq(Mux(fetch_index == commit_index, resume_lane, 0))]
        with m.If(fetch):
            m.d.sync += fetch_index.eq(fetch_index + 1)

        # --- W: the word out of the block RAM into flip-flops --------------------------------
        w_valid = valid_reg("w_valid")
        m.d.sync += w_valid.eq(f_valid)
        w_index = data_stage(m, one, f_index, name="w_index")
        w_start = data_stage(m, one, f_start, name="w_start")
        w_word = data_stage(m, one, buffer_read.data, name="w_word")
        # The lowest one of each fraction, isolated through a carry chain (fraction - 1).
        w_lowest = []
        for j in range(lanes):
            fraction = buffer_read.data[32 * j:32 * j + 23]
            w_lowest.append(data_stage(m, one, fraction & ~(fraction - 1)[:23],
                                       name=f"w_lowest{j}"))

        # --- A: distance of each lane to the current exponent (from the raw word: lanes before
        # the start are masked in B, not in front of the exponent arithmetic) ---------------
        a_valid = valid_reg("a_valid")
        m.d.sync += a_valid.eq(w_valid)
        a_index = data_stage(m, one, w_index, name="a_index")
        a_start = data_stage(m, one, w_start, name="a_start")
        a_active, a_distance, a_far, a_mantissa, a_big = [], [], [], [], []
        a_low, a_fraction_zero = [], []
        for j in range(lanes):
            fields = float32_fields(w_word[32 * j:32 * (j + 1)])
            distance = wire(m, (st_e - fields.exponent_eff)[:8], name=f"w_distance{j}")
            a_active.append(data_stage(m, one, j >= w_start, name=f"a_active{j}"))
            a_distance.append(data_stage(m, one, distance, name=f"a_distance{j}"))
            a_far.append(data_stage(m, one, distance[5:].any(), name=f"a_far{j}"))
            a_mantissa.append(data_stage(m, one, fields.mantissa, name=f"a_mantissa{j}"))
            a_big.append(data_stage(m, one, fields.exponent > st_e, name=f"a_big{j}"))
            # For B's sticky bit: 1 + the position of the fraction's lowest one, and whether
            # the fraction is zero.
            a_low.append(data_stage(m, one, or_tree([Mux(w_lowest[j][k], k + 1, 0)
                                                     for k in range(23)]), name=f"a_low{j}"))
            a_fraction_zero.append(data_stage(m, one, fields.fraction == 0,
                                              name=f"a_fraction_zero{j}"))

        # --- B: each lane on the grid of the current exponent (floor, half, sticky) -----------
        # shift_right_sticky with the shift split into its low five bits and `far` (>= 32,
        # from A), the sticky bit from the position of the lowest one: no clamp in series.
        b_valid = valid_reg("b_valid")
        m.d.sync += b_valid.eq(a_valid)
        b_index = data_stage(m, one, a_index, name="b_index")
        b_start = data_stage(m, one, a_start, name="b_start")
        b_big = [data_stage(m, one, a_active[j] & a_big[j], name=f"b_big{j}") for j in range(lanes)]
        b_floor, b_half, b_sticky = [], [], []
        for j in range(lanes):
            value = Cat(Const(0, 1), a_mantissa[j])
            amount = a_distance[j][:5]
            far = a_far[j]
            shifted = wire(m, Mux(far | ~a_active[j], 0, value >> amount),
                           name=f"a_shifted{j}")
            # A bit is lost when the lowest one of `value` lies below the shift distance.
            lost = a_active[j] & Mux(a_fraction_zero[j], a_mantissa[j][23] & (a_distance[j] > 24),
                                     a_distance[j] > a_low[j])
            b_floor.append(data_stage(m, one, shifted[1:25], name=f"b_floor{j}"))
            b_half.append(data_stage(m, one, shifted[0], name=f"b_half{j}"))
            b_sticky.append(data_stage(m, one, lost, name=f"b_sticky{j}"))

        # --- P: prefix sums of the floors and prefix compositions of the tie-parity steps,
        # two Kogge-Stone levels per clock. A lane maps the running integer's parity before it
        # to the parity after it (odd = p ^ floor[0], round_up = half & (sticky | odd), out =
        # odd ^ round_up): one of four functions of a bit, kept as (f(0), f(1)); composing
        # them is associative, so the parity before every lane is a prefix, for either p.
        def tie(p, j):
            odd = p ^ floor0[j]
            return odd ^ (half[j] & (sticky[j] | odd))

        def compose(later, earlier):  # later ∘ earlier
            return Cat(Mux(earlier[0], later[1], later[0]), Mux(earlier[1], later[1], later[0]))

        valid, index, start = b_valid, b_index, b_start
        floor0 = [b_floor[j][0] for j in range(lanes)]
        half, sticky, big = b_half, b_sticky, b_big
        positive = None
        fsum = [Value.cast(b_floor[j]) for j in range(lanes)]
        steps = None
        distances = []
        while (1 << len(distances)) < lanes:
            distances.append(1 << len(distances))
        for number, first_level in enumerate(range(0, len(distances), 2)):
            name = f"p{number + 1}"
            if steps is None:
                steps = [Cat(tie(0, j), tie(1, j)) for j in range(lanes)]
                positive = [b_floor[j].any() | b_half[j] | b_sticky[j] for j in range(lanes)]
            for level in distances[first_level:first_level + 2]:
                steps = [wire(m, compose(steps[j], steps[j - level]) if j >= level
                              else steps[j], name=f"{name}_tie{level}_{j}")
                         for j in range(lanes)]
                fsum = [wire(m, (fsum[j] + fsum[j - level])[:delta_width] if j >= level
                             else fsum[j], name=f"{name}_fsum{level}_{j}")
                        for j in range(lanes)]
            next_valid = valid_reg(f"{name}_valid")
            m.d.sync += next_valid.eq(valid)
            valid = next_valid
            index = data_stage(m, one, index, name=f"{name}_index")
            start = data_stage(m, one, start, name=f"{name}_start")
            steps = [data_stage(m, one, steps[j], name=f"{name}_tie{j}") for j in range(lanes)]
            fsum = [data_stage(m, one, fsum[j], name=f"{name}_fsum{j}") for j in range(lanes)]
            floor0 = [data_stage(m, one, floor0[j], name=f"{name}_floor0_{j}")
                      for j in range(lanes)]
            half = [data_stage(m, one, half[j], name=f"{name}_half{j}") for j in range(lanes)]
            sticky = [data_stage(m, one, sticky[j], name=f"{name}_sticky{j}") for j in range(lanes)]
            big = [data_stage(m, one, big[j], name=f"{name}_big{j}") for j in range(lanes)]
            positive = [data_stage(m, one, positive[j], name=f"{name}_positive{j}")
                        for j in range(lanes)]
        if positive is None:  # one lane: no prefix stage
            positive = [b_floor[0].any() | b_half[0] | b_sticky[0]]

        # --- R: round-up bits for both incoming parities and their prefix counts -------------
        rounds = {(p, j): half[j] & (sticky[j] | (floor0[j] ^ (p if j == 0 else steps[j - 1][p])))
                  for p in (0, 1) for j in range(lanes)}
        counts = {key: Value.cast(bit) for key, bit in rounds.items()}
        # The first clock: the round-up bits and two levels (a few bits wide), then two a clock.
        groups = [distances[:2]] + [distances[k:k + 2] for k in range(2, len(distances), 2)]
        for number, group in enumerate(groups):
            name = f"r{number + 1}"
            for level in group:
                counts = {(p, j): wire(m, (counts[p, j] + counts[p, j - level])[:count_width]
                                       if j >= level else counts[p, j],
                                       name=f"{name}_count{p}_{level}_{j}")
                          for p in (0, 1) for j in range(lanes)}
            next_valid = valid_reg(f"{name}_valid")
            m.d.sync += next_valid.eq(valid)
            valid = next_valid
            index = data_stage(m, one, index, name=f"{name}_index")
            start = data_stage(m, one, start, name=f"{name}_start")
            counts = {(p, j): data_stage(m, one, counts[p, j], name=f"{name}_count{p}_{j}")
                      for p in (0, 1) for j in range(lanes)}
            rounds = {(p, j): data_stage(m, one, rounds[p, j], name=f"{name}_rb{p}_{j}")
                      for p in (0, 1) for j in range(lanes)}
            fsum = [data_stage(m, one, fsum[j], name=f"{name}_fsum{j}") for j in range(lanes)]
            big = [data_stage(m, one, big[j], name=f"{name}_big{j}") for j in range(lanes)]
            positive = [data_stage(m, one, positive[j], name=f"{name}_positive{j}")
                        for j in range(lanes)]

        # --- D: delta_j(p) = sum of (floor + round_up) over lanes <= j ------------------------
        d_valid = valid_reg("d_valid")
        m.d.sync += d_valid.eq(valid)
        d_index = data_stage(m, one, index, name="d_index")
        d_start = data_stage(m, one, start, name="d_start")
        d_delta = {(p, j): data_stage(m, one, (fsum[j] + counts[p, j])[:delta_width],
                                      name=f"d_delta{p}_{j}")
                   for p in (0, 1) for j in range(lanes)}
        d_round = {(p, j): data_stage(m, one, rounds[p, j], name=f"d_rb{p}_{j}")
                   for p in (0, 1) for j in range(lanes)}
        d_big = Cat(*(data_stage(m, one, big[j], name=f"d_big{j}") for j in range(lanes)))
        d_big_any = data_stage(m, one, Cat(*big).any(), name="d_big_any")
        d_positive = data_stage(m, one, Cat(*positive), name="d_positive")

        # --- loop stage ----------------------------------------------------------------------
        # Only "does the word end early" is decided here: a lane is an event when it is big or
        # its sum reaches TOP, and the deltas grow with the lane (lanes before the start have
        # delta 0 < room), so that is the last lane's delta against `room`. Which lane, and
        # whether it rolls or crosses, is worked out in the event phases below (the pipeline
        # is flushed and refilled after an event anyway).
        act = wire(m, d_valid & ~slow_busy & ~ev_busy & ~room_stale, name="ls_act")
        parity = st_i[0]
        deltas = [wire(m, Mux(parity, d_delta[1, j], d_delta[0, j]), name=f"ls_delta{j}")
                  for j in range(lanes)]
        sums = [wire(m, (st_i + deltas[j])[:sum_width], name=f"ls_sum{j}") for j in range(lanes)]
        reach = Mux(parity, d_delta[1, last] >= room, d_delta[0, last] >= room)
        event = wire(m, ~st_inf & (d_big_any | reach), name="ls_event")
        next_commit = Signal(index_shape)
        m.d.comb += next_commit.eq(commit_index + 1)
        m.d.sync += self.word_start.eq(act & (d_start == 0))
        with m.If(act):
            m.d.sync += self.word_index.eq(d_index)

        # The word's sums, for the hit check (and the event phases).
        h_valid = Signal()
        h_sum = [Signal(sum_width, name=f"h_sum{j}") for j in range(lanes)]
        h_e = Signal(8)
        h_inf = Signal()
        h_mask = Signal(lanes)
        h_positive = Signal(lanes)
        e_round = Signal(lanes)
        e_big = Signal(lanes)
        single_valid = Signal()
        single_index = Signal(index_shape)
        single_lane = Signal(lane_shape)
        single_bits = Signal(32)
        slow_index = Signal(index_shape)
        slow_lane = Signal(lane_shape)
        m.d.sync += [h_valid.eq(0), single_valid.eq(0)]

        with m.If(room_stale):
            m.d.sync += [room.eq(TOP - st_i), room_stale.eq(0)]

        # --- event phases ---------------------------------------------------------------------
        # 1: per lane, cross or roll (from the word's sums); the word is read again.
        ev_bits = Signal(lanes)
        cross_bits = Signal(lanes)
        zero_bits = Signal(lanes)
        st_zero = Signal()
        with m.If(ev_phase[1]):
            crosses, rolls = [], []
            for j in range(lanes):
                at_top = h_sum[j] == TOP
                crosses.append(h_mask[j] & (e_big[j] | (h_sum[j] > TOP)
                                            | (at_top & ~e_round[j])))
                rolls.append(h_mask[j] & ~e_big[j] & at_top & e_round[j])
            m.d.sync += [
                ev_bits.eq(Cat(*crosses) | Cat(*rolls)), cross_bits.eq(Cat(*crosses)),
                zero_bits.eq(Cat(*(h_sum[j][:25] == 0 for j in range(lanes)))),
                st_zero.eq(st_i == 0),
            ]
        # 2: the first event lane (one-hot) and the lanes before it.
        e_onehot = Signal(lanes)
        e_below = Signal(lanes)
        e_word = Signal(32 * lanes)
        e_inf_bits = Signal(lanes)
        e_subnormal_bits = Signal(lanes)
        with m.If(ev_phase[2]):
            # The lowest set bit and the bits below it, through a carry chain (ev - 1).
            borrow = wire(m, (ev_bits - 1)[:lanes], name="ev_borrow")
            m.d.sync += [
                e_onehot.eq(ev_bits & ~borrow),
                e_below.eq(~ev_bits & borrow),
                e_word.eq(buffer_read.data),
                e_inf_bits.eq(Cat(*(float32_fields(buffer_read.data[32 * j:32 * (j + 1)]).is_inf
                                    for j in range(lanes)))),
                e_subnormal_bits.eq(Cat(*(buffer_read.data[32 * j + 23:32 * j + 31] == 0
                                          for j in range(lanes)))),
            ]
        # 3: select by the one-hot lane (AND-OR trees, no priority chain).
        e_first = Signal(lane_shape)
        e_before = Signal(25)
        e_before_zero = Signal()
        e_x = Signal(32)
        e_x_inf = Signal()
        e_x_subnormal = Signal()  # exponent field 0
        e_cross = Signal()
        e_last_lane = Signal()

        def select(values):
            return or_tree([Mux(e_onehot[j], values[j], 0) for j in range(lanes)])

        with m.If(ev_phase[3]):
            m.d.sync += [
                e_first.eq(select([Const(j, len(e_first)) for j in range(lanes)])),
                e_before.eq(select([st_i] + [h_sum[j][:25] for j in range(last)])),
                e_before_zero.eq(select([st_zero] + [zero_bits[j] for j in range(last)])),
                e_x.eq(select([e_word[32 * j:32 * (j + 1)] for j in range(lanes)])),
                e_x_inf.eq((e_onehot & e_inf_bits).any()),
                e_x_subnormal.eq((e_onehot & e_subnormal_bits).any()),
                e_cross.eq((e_onehot & cross_bits).any()),
                e_last_lane.eq(e_onehot[last]),
            ]
        # 4: apply, as `scan_word` does: the sums before the event lane count; a cross with a
        # running sum of +0 restarts at x itself, any other goes through the slow adder; a
        # roll moves to the bottom of the next binade. Then the word is rescanned.
        with m.If(ev_phase[4]):
            m.d.sync += [ev_busy.eq(0), h_valid.eq(pick), room_stale.eq(1)]
            m.d.sync += [v.eq(0) for v in valids]
            with m.If(e_last_lane):
                m.d.sync += [commit_index.eq(h_index + 1), resume_lane.eq(0),
                             fetch_index.eq(h_index + 1)]
            with m.Else():
                m.d.sync += [commit_index.eq(h_index), resume_lane.eq(e_first + 1),
                             fetch_index.eq(h_index)]
            with m.If(e_cross):
                m.d.sync += [h_mask.eq(h_mask & e_below), st_i.eq(e_before)]
                with m.If(e_before_zero):
                    # +0 + x = x: the sum starts (or restarts) at x itself.
                    m.d.sync += [
                        st_i.eq(Cat(e_x[:23], ~e_x_subnormal)),
                        st_e.eq(Mux(e_x_subnormal, 1, e_x[23:31])), st_inf.eq(e_x_inf),
                        single_valid.eq(pick), single_index.eq(h_index),
                        single_lane.eq(e_first), single_bits.eq(e_x),
                    ]
                with m.Else():
                    m.d.sync += [
                        slow_busy.eq(1), slow_count.eq(0),
                        slow_a.eq(state_bits(e_before, st_e, 0)), slow_b.eq(e_x),
                        slow_index.eq(h_index), slow_lane.eq(e_first),
                    ]
            with m.Else():  # roll: exactly 2^24 units, the bottom of the next binade
                m.d.sync += [h_mask.eq(h_mask & (e_below | e_onehot)),
                             st_i.eq(1 << 23), st_e.eq(st_e + 1)]
                with m.If(st_e == 0xFE):
                    m.d.sync += st_inf.eq(1)

        with m.If(slow_busy):
            m.d.sync += slow_count.eq(slow_count + 1)
            with m.If(slow_count == Float32Add.latency):
                result = float32_fields(slow_add.result)
                m.d.sync += [
                    slow_busy.eq(0), room_stale.eq(1),
                    st_i.eq(Cat(result.fraction, ~(result.exponent == 0))),
                    st_e.eq(result.exponent_eff), st_inf.eq(result.is_inf),
                    single_valid.eq(pick), single_index.eq(slow_index),
                    single_lane.eq(slow_lane), single_bits.eq(slow_add.result),
                ]

        # One clock after the loop stage finishes a word, its buffer slot is free again.
        m.d.sync += self.freed.eq((act & ~event) | (ev_phase[4] & e_last_lane))

        # --- hit check (three clocks: the sums' float32 bits, the comparisons, the first lane) --
        # prefix > threshold for a prefix >= +0 and a threshold >= -0.0: magnitudes.
        threshold = self.threshold[:31]
        hv0 = stage(m, one, h_valid, name="hv0")
        hi0 = data_stage(m, one, h_index, name="hi0")
        hm0 = data_stage(m, one, h_mask & h_positive, name="hm0")
        hs0 = [data_stage(m, one, state_bits(h_sum[j][:25], h_e, h_inf)[:31], name=f"hs0_{j}")
               for j in range(lanes)]
        # The single-value hit waits beside it, to keep the lane order of the hits.
        sv0 = stage(m, one, single_valid, name="sv0")
        si0 = data_stage(m, one, single_index, name="si0")
        sl0 = data_stage(m, one, single_lane, name="sl0")
        sb0 = data_stage(m, one, single_bits, name="sb0")
        hv1 = stage(m, one, hv0, name="hv1")
        hi1 = data_stage(m, one, hi0, name="hi1")
        hb1 = data_stage(m, one, Cat(*(hm0[j] & (hs0[j] > threshold) for j in range(lanes))),
                         name="hb1")
        sv1 = stage(m, one, sv0 & (sb0[:31] > threshold), name="sv1")
        si1 = data_stage(m, one, si0, name="si1")
        sl1 = data_stage(m, one, sl0, name="sl1")
        any_hit, hit_first = first_set(m, [hb1[j] for j in range(lanes)], name="hit")
        with m.If(~self.hit):
            with m.If(hv1 & any_hit):
                m.d.sync += [self.hit.eq(1), self.hit_word.eq(hi1),
                             self.hit_lane.eq(hit_first)]
            with m.Elif(sv1):
                m.d.sync += [self.hit.eq(1), self.hit_word.eq(si1), self.hit_lane.eq(sl1)]

        # --- pass control ---------------------------------------------------------------------
        with m.If(busy & (commit_index == words) & ~slow_busy & ~ev_busy & ~h_valid
                  & ~single_valid & ~hv0 & ~sv0 & ~hv1 & ~sv1
                  & ~d_valid):
            m.d.sync += busy.eq(0)
        # `start` is taken into registers first and applied a clock later (so the caller's
        # decision does not fan out into every register of the scanner in the same clock).
        start_q = Signal()
        init_q = Signal(32)
        words_q = Signal(index_shape)
        pick_q = Signal()
        m.d.sync += start_q.eq(self.start & ~busy & ~start_q)
        with m.If(~start_q):
            m.d.sync += [init_q.eq(self.init), words_q.eq(self.words), pick_q.eq(self.pick)]
        with m.If(start_q):
            init = float32_fields(init_q)
            m.d.sync += [
                busy.eq(1), pick.eq(pick_q), words.eq(words_q),
                write_index.eq(0), commit_index.eq(0), fetch_index.eq(0), resume_lane.eq(0),
                st_i.eq(Cat(init.fraction, ~(init.exponent == 0))),
                st_e.eq(init.exponent_eff), st_inf.eq(init.is_inf), room_stale.eq(1),
                self.hit.eq(0), slow_busy.eq(0), ev_busy.eq(0),
                *(ev_phase[k].eq(0) for k in range(1, 5)),
                *(v.eq(0) for v in valids),
            ]

        # The loop stage's updates come last: `act` excludes the event phases, the slow add
        # and a start, so the order changes nothing but puts the loop's late `event` into the
        # last multiplexer in front of each register.
        with m.If(act):
            m.d.sync += [
                h_index.eq(d_index), h_e.eq(st_e), h_inf.eq(st_inf), h_positive.eq(d_positive),
                h_mask.eq(Cat(*(d_start <= j for j in range(lanes)))),
                e_round.eq(Cat(*(Mux(parity, d_round[1, j], d_round[0, j])
                                 for j in range(lanes)))),
                e_big.eq(d_big),
                *(h_sum[j].eq(sums[j]) for j in range(lanes)),
            ]
            # The word counts as done at once; an event word is put back in phase 4.
            m.d.sync += [commit_index.eq(next_commit), resume_lane.eq(0)]
            with m.If(~event):
                m.d.sync += h_valid.eq(pick)
                with m.If(~st_inf):
                    m.d.sync += [st_i.eq(sums[last][:25]), room.eq(room - deltas[last])]
            with m.Else():
                m.d.sync += [ev_busy.eq(1), ev_phase[1].eq(1)]
        # An event flushes the pipeline (refetched from the event word in phase 4).
        with m.If(act & event):
            m.d.sync += [v.eq(0) for v in valids]
        return m
