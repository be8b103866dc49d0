"""K6 tree rejection sampling and greedy tree verify in hardware (docs/kernels.md §8).

One request is one ``cmd`` beat and ``n`` ``tree`` beats (positions ``0..n-1``); the kernel
answers with one ``result`` packet (``accept_index``/``predicts`` pairs) and, in sampling
mode, the ``draft_probs`` writes on ``draft_write``. It is bit-exact with
``golden.tree_speculative_sampling_target_only``, ``golden.draft_tree_reject_sample`` (LFSR
coins) and ``golden.verify_tree_greedy``. Requests are processed one after the other.

Phases of a request
-------------------

**Load.** Tree beats go into a node memory (candidate, retrive_index, links, coin, the
greedy ``predict`` and the word address of the node's ``target_probs`` row). With
``lfsr = 1`` the on-chip generator (``hw.lib.lfsr.GaloisLFSR32``) is seeded from ``cmd`` and
leaps once per tree beat, so position ``i`` stores draw ``i + 1`` and the final coin is draw
``n + 1``, exactly ``golden.lfsr_coins``. The walk starts as soon as the root is stored and
only waits when it reaches a node that has not arrived yet.

**Walk** (the §8 traversal). Sampling: an *issuer* follows the sibling chain of the current
row and reads ``target_probs[row, tok]`` for every sibling ahead of the decisions (one read
per clock on the variable-latency ``read_address``/``read_data`` port, in order). Returned
probabilities ``q`` enter a serial chain of ``Float32Add`` (``prob_acc + q``, one add per
sibling, 5 clocks); each sum goes either straight to the decision (``threshold_acc == 1``:
``x / 1.0 == x`` exactly in IEEE arithmetic) or through ``Float32Divide`` (correctly rounded,
``hw.lib.float32_divide``), and the decision is ``coin <= quotient or q >= threshold_single``
(IEEE comparisons). Work after an undecided sibling is speculative: an accept bumps an
*epoch* number and every read, sum or quotient tagged with an older epoch is dropped. A
rejected sibling is written out (``draft_write``) and remembered (its token) while its row is
current; an accept emits one ``result`` beat and restarts the issuer on the accepted node's
children. Greedy: no memory reads; one node per clock, accept iff ``candidate ==
predict[row]``. A sibling walk longer than ``n`` (a link cycle, refused by the golden) ends the
request with ``error`` set.

**Final row** (sampling). The residual ``r[j] = max(target[row, j] - draft[row, j], 0)`` is
computed without reading ``draft_probs``: ``draft_probs`` is zero on entry (the golden refuses
anything else), so the final row's draft values are exactly this request's writes to it,
``draft[row, tok] = target[row, tok]`` for the rejected tokens of the final row (the remembered
list; the row of an accept at step ``S - 1`` has none). For those ``d = t - t`` is ``+0`` (or
NaN for an infinite ``t``), elsewhere ``d = t - 0 = t``; either way ``r[j] = +0`` for a
rejected token and ``r[j] = t if t > 0 else +0`` otherwise, which is what the row stream
applies (a mask built from the remembered tokens, ``lanes`` comparisons per remembered token).

The row is read ``lanes`` elements per clock and summed by :class:`ExactSumScanner`, which
produces the *sequential* float32 prefix sums of §8 bit for bit at ``lanes`` elements per
clock (see its docstring: non-negative summands, block rounding on the running sum's ulp grid,
a ``Float32Add`` only when the sum leaves its binade). The same pass stores the running sum
at the start of every ``segment_words`` words. Then ``u = coin_final * sum`` (one
``Float32Multiply``) and the pick: the first ``j`` with ``r[j] > 0`` and ``prefix[j] > u``.
For ``u >= -0.0`` it is the first ``j`` with ``prefix[j] > u`` (the prefix sums never
decrease, and where they first exceed ``u >= 0`` they have just grown, so ``r[j] > 0``); a
binary search over the stored segment sums finds its segment and only that segment is read
again and rescanned from its stored sum. For ``u < 0`` it is the first positive ``r``, for a
NaN ``u`` the fallback; both are tracked in the first pass. Fallback: the last positive
``r``, else ``V - 1``. So the row is streamed once, plus one segment.

Memory layout
-------------

``target_probs`` is word-addressed, ``lanes`` float32 per word: element ``(node, j)`` of a
request is lane ``j % lanes`` of word ``row_address + node * row_words + j // lanes``
(``row_words >= ceil(V / lanes)``; lanes past ``V`` are ignored). ``draft_write`` beats name
the element the same way (``address``, ``lane``), in the ``draft_probs`` buffer of the same
layout.

Cycle figures (``make sim KERNEL=reject_sample`` prints the measured ones): per rejected
sibling 5 clocks (the serial add), per accepted node the memory round trip plus about 9
clocks (plus ``Float32Divide.latency`` when ``threshold_acc != 1``): 367 clocks for the
longest walk a 64-node tree allows at ``S = 8`` (63 visits, 7 accepts, memory latency 4).
The final row takes ``ceil(V / lanes)`` clocks plus about 10 per binade the running sum
crosses (~15 for a softmax row), the search and one segment: 7.87 elements per clock at
``V = 128256``, 8 lanes.
"""

import numpy as np
from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.lib.float32 import (
    Float32Add,
    Float32Multiply,
    float32_equal,
    float32_fields,
    float32_less,
)
from hw.lib.float32_divide import Float32Divide
from hw.lib.lfsr import GaloisLFSR32
from hw.lib.pipeline import shift_right_sticky, stage
from hw.lib.stream import RegisterSlice, packet_layout, stalling_handshake

__all__ = [
    "RejectSample", "ExactSumScanner", "synthesis_configuration",
    "ONE", "MIN_THRESHOLD_ACC", "POSITIVE_INFINITY",
    "scan_state", "scan_bits", "scan_word", "final_row_model",
]

#: float32 bit patterns.
ONE = 0x3F80_0000
POSITIVE_INFINITY = 0x7F80_0000
#: ``float32(1e-9)``: the golden divides by ``float32(max(threshold_acc, 1e-9))``, which is
#: ``max(float32(threshold_acc), MIN_THRESHOLD_ACC)`` for every float32 threshold.
MIN_THRESHOLD_ACC = int(np.array(1e-9, np.float32).view(np.uint32))
_TOP = 1 << 24
#: Epoch tag bits of speculative walker work (one bump per accept).
EPOCH_BITS = 3
#: Depth of the FIFO of returned probabilities waiting for the serial adder.
Q_DEPTH = 8

_STATE_IDLE, _STATE_ROOT, _STATE_WALK, _STATE_ROW, _STATE_PASS1, _STATE_SUM, \
    _STATE_DECIDE, _STATE_SEARCH, _STATE_COMPARE, _STATE_FOUND, _STATE_PASS2, _STATE_EMIT, \
    _STATE_DRAIN = range(13)


def _check_int(name, value, lo, hi=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"`{name}` must be an integer, not {value!r}")
    if hi is None and value < lo:
        raise ValueError(f"`{name}` must be at least {lo}, not {value}")
    if hi is not None and not lo <= value <= hi:
        raise ValueError(f"`{name}` must be between {lo} and {hi}, not {value}")
    return value


def _check_power_of_two(name, value, lo, hi):
    _check_int(name, value, lo, hi)
    if value & (value - 1):
        raise ValueError(f"`{name}` must be a power of two, not {value}")
    return value


# --- bit-level model of the final-row algorithm (used by the tests and the docs) -------------


def scan_state(bits: int) -> tuple[int, int, bool]:
    """Running-sum state ``(I, E, inf)`` of a non-negative float32 ``bits``: the value is
    ``I * 2^(E - 150)`` with ``E = max(exponent, 1)`` and ``I`` the significand with its
    hidden bit (``I < 2^24``); ``inf`` for +infinity."""
    exponent, fraction = (bits >> 23) & 0xFF, bits & 0x7F_FFFF
    if exponent == 0xFF:
        return 0, 1, True
    return fraction | (int(exponent != 0) << 23), max(exponent, 1), False


def scan_bits(state: tuple[int, int, bool]) -> int:
    """float32 bits of a state; ``I == 2^24`` (rounded up to the next binade) included."""
    i, e, inf = state
    if inf:
        return POSITIVE_INFINITY
    if i == _TOP:
        return POSITIVE_INFINITY if e + 1 == 0xFF else (e + 1) << 23
    return ((e if i >> 23 else 0) << 23) | (i & 0x7F_FFFF)


def _decompose(x: int, e: int) -> tuple[bool, int, int, int]:
    """``x`` on the grid of exponent ``e``: ``(big, floor, half, sticky)``; ``big`` when ``x``
    has a larger exponent (then ``x >= 2^24`` grid units)."""
    exponent = (x >> 23) & 0xFF
    if exponent > e:
        return True, 0, 0, 0
    m = (x & 0x7F_FFFF) | (int(exponent != 0) << 23)
    d = e - max(exponent, 1)
    shifted = (m << 1) >> d
    lost = (m << 1) & ((1 << d) - 1)
    return False, shifted >> 1, shifted & 1, int(lost != 0)


def scan_word(state, word, start: int):
    """One clock of :class:`ExactSumScanner`'s loop: lanes ``start..`` of ``word`` (float32
    bits, all non-negative) added to ``state`` in order.

    Returns ``(state, next_start, prefixes, event)``: ``next_start`` is None when the word is
    finished, ``prefixes`` maps each lane handled to its prefix sum (float32 bits), ``event``
    is None, ``"roll"`` (the sum rounded up to the next binade) or ``"cross"`` (the exact sum
    left the binade: that lane is added by a float32 adder).
    """
    lanes = len(word)
    i0, e, inf = state
    if inf:
        return state, None, {j: POSITIVE_INFINITY for j in range(start, lanes)}, None
    prefixes = {}
    parity, delta = i0 & 1, 0
    for j in range(start, lanes):
        big, floor, half, sticky = _decompose(int(word[j]), e)
        odd = parity ^ (floor & 1)
        round_up = half & (sticky | odd)
        total = i0 + delta + floor + round_up
        after = j + 1 if j + 1 < lanes else None
        if big or total - round_up >= _TOP:
            before = scan_bits((i0 + delta, e, False))
            if i0 + delta == 0:
                result = int(word[j])
            else:
                with np.errstate(over="ignore"):
                    result = int((np.array(before, np.uint32).view(np.float32)
                                  + np.array(word[j], np.uint32).view(np.float32))
                                 .view(np.uint32))
            prefixes[j] = result
            return scan_state(result), after, prefixes, "cross"
        prefixes[j] = scan_bits((total, e, False))
        if total == _TOP:
            rolled = (1 << 23, e + 1, False) if e + 1 < 0xFF else (0, 1, True)
            return rolled, after, prefixes, "roll"
        delta += floor + round_up
        parity = odd ^ round_up
    return (i0 + delta, e, False), None, prefixes, None


def _scan(state, words, *, on_word=None, on_prefix=None, events=None):
    for index, word in enumerate(words):
        if on_word is not None:
            on_word(index, state)
        start = 0
        while start is not None:
            state, start, prefixes, event = scan_word(state, word, start)
            if events is not None and event is not None:
                events[event] = events.get(event, 0) + 1
            if on_prefix is not None:
                for lane in sorted(prefixes):
                    if on_prefix(index, lane, prefixes[lane]):
                        return state
    return state


def final_row_model(r, coin, *, lanes: int, segment_words: int) -> dict:
    """The final-row algorithm of :class:`RejectSample`, in Python.

    Parameters
    ----------
    r : array-like of float32
        The residual row (all ``>= +0``, no NaN).
    coin : float32
        ``uniform_samples_for_final_sampling[b]``.
    lanes, segment_words : int
        As the kernel's parameters.

    Returns a dict: ``token`` (the pick), ``prefix`` (uint32 bits of every prefix sum),
    ``total`` (bits of the sum), ``events`` (counts of ``roll``/``cross`` in the first pass)
    and ``segment`` (the segment rescanned, or None).
    """
    r = np.asarray(r, np.float32)
    vocab = r.size
    words = -(-vocab // lanes)
    padded = np.zeros(words * lanes, np.float32)
    padded[:vocab] = r
    rows = padded.view(np.uint32).reshape(words, lanes)
    segments = -(-words // segment_words)
    stored = [0] * (segments + 1)
    prefix = np.zeros(words * lanes, np.uint32)
    events = {}

    def on_word(index, state):
        if index % segment_words == 0:
            stored[index // segment_words] = scan_bits(state)

    def record(index, lane, bits):
        prefix[index * lanes + lane] = bits
        return False

    total = scan_bits(_scan(scan_state(0), rows, on_word=on_word, on_prefix=record,
                            events=events))
    stored[segments] = total
    positive = np.nonzero(r > 0)[0]
    fallback = int(positive[-1]) if positive.size else vocab - 1
    with np.errstate(invalid="ignore", over="ignore"):
        u = np.float32(coin) * np.array(total, np.uint32).view(np.float32)
    result = {"prefix": prefix[:vocab], "total": total, "events": events, "segment": None}
    if np.isnan(u):
        return {**result, "token": fallback}
    if u < 0:
        return {**result, "token": int(positive[0]) if positive.size else fallback}
    sums = np.array(stored, np.uint32).view(np.float32)
    above = [s for s in range(segments) if sums[s + 1] > u]
    if not above:
        return {**result, "token": fallback}
    segment = above[0]
    found = []

    def pick(index, lane, bits):
        token = (segment * segment_words + index) * lanes + lane
        if token < vocab and r[token] > 0 and np.array(bits, np.uint32).view(np.float32) > u:
            found.append(token)
            return True
        return False

    _scan(scan_state(stored[segment]),
          rows[segment * segment_words:(segment + 1) * segment_words], on_prefix=pick)
    if not found:
        raise AssertionError("the rescanned segment holds no prefix sum above u")
    return {**result, "token": found[0], "segment": segment}


# --- hardware helpers --------------------------------------------------------------------------


def _state_bits(i: Value, e: Value, inf: Value) -> Value:
    """float32 bits of the scanner state ``(i, e, inf)`` for ``i <= 2^24`` (combinational)."""
    i = Value.cast(i)
    top = Mux(e == 0xFE, POSITIVE_INFINITY, Cat(Const(0, 23), (e + 1)[:8], Const(0, 1)))
    inside = Cat(i[:23], Mux(i[23], e, 0)[:8], Const(0, 1))
    return Mux(inf, POSITIVE_INFINITY, Mux(i[24], top, inside))


def _float32_positive(bits: Value) -> Value:
    """``bits > 0`` as a float32 comparison (false for zeros, negatives and NaN)."""
    fields = float32_fields(bits)
    return ~fields.sign & ~fields.is_zero & ~fields.is_nan


def _first_set(m: Module, bits: list, *, name: str) -> tuple[Value, Value]:
    """``(any, index)`` of the lowest set bit of ``bits`` (combinational priority encoder)."""
    index = Signal(range(max(len(bits), 2)), name=f"{name}_index")
    for position in reversed(range(len(bits))):
        with m.If(bits[position]):
            m.d.comb += index.eq(position)
    return Cat(*bits).any(), index


def _wire(m: Module, value, *, name: str) -> Signal:
    """``value`` in a combinational signal: an expression referenced more than once must be a
    signal, or every reference copies the whole expression tree into the netlist."""
    value = Value.cast(value)
    signal = Signal(value.shape(), name=name)
    m.d.comb += signal.eq(value)
    return signal


def _prefix_sums(m: Module, values: list, *, width: int, name: str) -> list:
    """Inclusive prefix sums (Kogge-Stone, logarithmic adder depth), ``width``-bit."""
    sums = [_wire(m, Value.cast(v) + Const(0, width), name=f"{name}_l0_{j}")
            for j, v in enumerate(values)]
    distance, level = 1, 1
    while distance < len(sums):
        sums = [_wire(m, (sums[j] + sums[j - distance])[:width], name=f"{name}_l{level}_{j}")
                if j >= distance else sums[j] for j in range(len(sums))]
        distance *= 2
        level += 1
    return sums


class ExactSumScanner(wiring.Component):
    """Sequential float32 prefix sums of non-negative values, ``lanes`` values per clock,
    bit-exact with ``np.add.accumulate`` in float32.

    Why it is exact: the running sum ``P`` (``>= +0``) never decreases, so its binade only
    grows. While ``P`` stays in binade ``E`` (ulp ``2^(E - 150)``, subnormals sharing the grid
    of ``E = 1``), ``RN(P + x)`` is ``P`` plus ``x`` rounded to that grid, ties to even on the
    running integer: with ``P = I`` grid units and ``x = floor + f`` (``f`` in ``[0, 1)``,
    known from the half and sticky bits of ``x`` shifted to the grid), the next ``I`` is
    ``I + floor + round_up`` with ``round_up = half & (sticky | (I + floor) odd)`` — as long as
    ``I + floor < 2^24`` (the exact sum below the next binade). So a word of ``lanes`` values is
    integer arithmetic: per-lane shifts, a 1-bit parity chain for the ties (computed for both
    parities of the incoming ``I``) and prefix sums, all pipelined; only the loop stage
    (``I + delta`` per lane, compare with ``2^24``, select) depends on the previous word.

    Events end a word early: *roll* (the sum rounds up to exactly ``2^24`` units: the next
    binade, ``E + 1``, exact) and *cross* (the exact sum leaves the binade, or ``x`` has a
    larger exponent: that one addition goes through a ``Float32Add``; from ``P = +0`` the sum is
    ``x`` itself). After an event the word is rescanned from the next lane with the new
    ``E`` (the pipeline is refilled from the input buffer): about 4 clocks per roll, 10 per
    cross, a few dozen per row. ``+inf`` absorbs everything after it.

    Parameters
    ----------
    lanes : int
        Values per word (power of two).
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
        self._lanes = _check_power_of_two("lanes", lanes, 1, 64)
        self._buffer_words = _check_power_of_two("buffer_words", buffer_words, 4, 1 << 16)
        self._max_words = _check_int("max_words", max_words, 1)
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
                     self.total.eq(_state_bits(st_i, st_e, st_inf))]

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
            x = _wire(m, Mux(j >= f_start, word[j], 0), name=f"f_x{j}")
            fields = float32_fields(x)
            distance = _wire(m, (st_e - fields.exponent_eff)[:8], name=f"f_distance{j}")
            mantissa = _wire(m, Cat(Const(0, 1), fields.mantissa), name=f"f_mantissa{j}")
            shifted, lost = shift_right_sticky(mantissa, distance, max_shift=32)
            shifted = _wire(m, shifted, name=f"f_shifted{j}")
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
        floors = _prefix_sums(m, d1_floor, width=delta_width, name="floor_sum")
        d2_floor_sum = [stage(m, one, floors[j], name=f"d2_fsum{j}") for j in range(lanes)]
        d2_round = {}
        d2_round_count = {}
        count_width = lanes.bit_length() + 1
        for parity in (0, 1):
            odd_chain = Const(parity)
            count = Const(0, count_width)
            for j in range(lanes):
                odd = _wire(m, odd_chain ^ d1_floor[j][0], name=f"odd{parity}_{j}")
                round_up = _wire(m, d1_half[j] & (d1_sticky[j] | odd), name=f"rb{parity}_{j}")
                odd_chain = _wire(m, odd ^ round_up, name=f"parity{parity}_{j}")
                count = _wire(m, (count + round_up)[:count_width], name=f"rc{parity}_{j}")
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
            round_up = _wire(m, Mux(parity, d3_round[1, j], d3_round[0, j]), name=f"ls_rb{j}")
            total = _wire(m, (st_i + delta)[:delta_width + 1], name=f"ls_sum{j}")
            active = d3_start <= j
            at_top = _wire(m, total == _TOP, name=f"ls_top{j}")
            cross = _wire(m, active & (d3_big[j] | (total > _TOP) | (at_top & ~round_up)),
                          name=f"ls_cross{j}")
            roll = _wire(m, active & ~d3_big[j] & at_top & round_up, name=f"ls_roll{j}")
            sums.append(total)
            crosses.append(cross)
            rolls.append(roll)
            events.append(~st_inf & (cross | roll))
        any_event, first = _first_set(m, events, name="ls_event")
        sums_array = Array(sums)
        x_array = Array(d3_x)
        before = _wire(m, Mux(first == 0, st_i, sums_array[(first - 1)[:len(first)]])[:25],
                       name="ls_before")
        is_cross = _wire(m, Array(crosses)[first], name="ls_is_cross")
        last_lane = _wire(m, first == lanes - 1, name="ls_last_lane")
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
                    x_first = _wire(m, x_array[first], name="ls_x_first")
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
                            slow_a.eq(_state_bits(before, st_e, 0)), slow_b.eq(x_first),
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
        hit_bits = [_wire(m, h_mask[j] & h_positive[j]
                          & (_state_bits(h_sum[j], h_e, h_inf)[:31] > threshold),
                          name=f"hit{j}") for j in range(lanes)]
        any_hit, hit_first = _first_set(m, hit_bits, name="hit")
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


# --- the kernel --------------------------------------------------------------------------------


class RejectSample(wiring.Component):
    """K6 tree speculative sampling (and the greedy verify), bit-exact with the goldens.

    Parameters
    ----------
    max_nodes : int
        Largest ``n`` (draft tree positions per request, 1..1024).
    max_steps : int
        Largest ``S`` (``num_speculative_tokens``, 1..256).
    max_vocab_size : int
        Largest ``V``.
    lanes : int
        float32 elements per memory word and per clock of the final-row stream (power of two,
        1..64).
    read_slots : int
        Memory reads in flight and the final-row buffer (power of two, >= 4): covers the
        memory latency at full streaming rate.
    segment_words : int
        Words per stored running sum of the final row (power of two): the pick rescans one
        segment.
    token_width : int
        Bits of token ids (candidates, ``predict``), 2..32 (32: SGLang's int32 ``predicts``).
    index_width : int
        Bits of ``retrive_index`` values.
    address_width : int
        Bits of word addresses.
    divider_bits_per_stage : int
        ``Float32Divide.bits_per_stage`` of the ``threshold_acc`` divider.

    Members
    -------
    cmd : In(stream.Signature(cmd_layout))
        One beat per request, accepted between requests: ``greedy`` (``verify_tree_greedy``),
        ``lfsr`` (coins from the generator seeded with ``seed``, else the tree beats'
        ``coin`` and ``final_coin``), ``nodes`` (``n``, >= 1), ``steps`` (``S``, >= 1),
        ``vocab_size`` (``V``, >= 1), ``row_address`` (word address of the request's row 0),
        ``row_words`` (words between rows), ``seed``, ``final_coin``, ``threshold_single``,
        ``threshold_acc`` (float32 bits, as the host converts them).
    tree : In(stream.Signature(tree_layout))
        ``n`` beats per request, position order: ``candidate``, ``index``
        (``retrive_index``), ``next_token``/``next_sibling`` (signed, -1 none; values outside
        ``[0, n)`` count as none), ``coin`` (``uniform_samples[b, i]``, float32 bits),
        ``predict`` (greedy: ``target_predict[retrive_index[b, i]]``); ``first``/``last`` are
        not checked.
    read_address : Out(stream.Signature(address_width))
        Word addresses of ``target_probs`` reads.
    read_data : In(stream.Signature(ArrayLayout(32, lanes)))
        The words, in request order, after any latency.
    draft_write : Out(stream.Signature(draft_layout))
        ``draft_probs`` element writes: word ``address``, ``lane``, ``value`` (float32 bits),
        in the golden's order.
    result : Out(stream.Signature(result_layout))
        One packet per request, ``accepted + 1`` beats: beat ``k`` is ``index =
        accept_index[b, k]`` and ``token = predicts[index]``; ``first``/``last`` frame it, and
        ``error`` on the last beat flags a link cycle (the outputs are then meaningless, as the
        golden refuses such a call). ``accept_token_num[b]`` is the beat count minus one.
    status : Out(status_layout)
        Cycle counters of the last finished request: ``walk_cycles`` (``cmd`` accepted to the
        end of the walk: load and traversal, the final row excluded) and ``row_cycles`` (end
        of the walk to the last ``result`` beat).
    """

    def __init__(self, *, max_nodes=64, max_steps=8, max_vocab_size=131072, lanes=8,
                 read_slots=32, segment_words=64, token_width=32, index_width=32,
                 address_width=32, divider_bits_per_stage=2):
        self._max_nodes = _check_int("max_nodes", max_nodes, 1, 1024)
        self._max_steps = _check_int("max_steps", max_steps, 1, 256)
        self._max_vocab_size = _check_int("max_vocab_size", max_vocab_size, 1, 1 << 31)
        self._lanes = _check_power_of_two("lanes", lanes, 1, 64)
        self._read_slots = _check_power_of_two("read_slots", read_slots, 4, 4096)
        self._segment_words = _check_power_of_two("segment_words", segment_words, 1, 1 << 20)
        self._token_width = _check_int("token_width", token_width, 2, 32)
        self._index_width = _check_int("index_width", index_width, 1, 64)
        self._address_width = _check_int("address_width", address_width, 1, 64)
        self._divider_bits_per_stage = _check_int("divider_bits_per_stage",
                                                  divider_bits_per_stage, 1, 25)
        if (max_vocab_size - 1) >> token_width:
            raise ValueError(f"`token_width` must hold every token below `max_vocab_size` "
                             f"({max_vocab_size}), not {token_width} bits")
        super().__init__({
            "cmd": In(stream.Signature(self.cmd_layout)),
            "tree": In(stream.Signature(self.tree_layout)),
            "read_address": Out(stream.Signature(address_width)),
            "read_data": In(stream.Signature(data.ArrayLayout(32, lanes))),
            "draft_write": Out(stream.Signature(self.draft_layout)),
            "result": Out(stream.Signature(self.result_layout)),
            "status": Out(self.status_layout),
        })

    # --- parameters ----------------------------------------------------------------------

    @property
    def max_nodes(self):
        return self._max_nodes

    @property
    def max_steps(self):
        return self._max_steps

    @property
    def max_vocab_size(self):
        return self._max_vocab_size

    @property
    def lanes(self):
        return self._lanes

    @property
    def read_slots(self):
        return self._read_slots

    @property
    def segment_words(self):
        return self._segment_words

    @property
    def token_width(self):
        return self._token_width

    @property
    def index_width(self):
        return self._index_width

    @property
    def address_width(self):
        return self._address_width

    @property
    def divider_bits_per_stage(self):
        return self._divider_bits_per_stage

    @property
    def max_row_words(self) -> int:
        """``ceil(max_vocab_size / lanes)``: the longest final-row stream."""
        return -(-self._max_vocab_size // self._lanes)

    @property
    def max_segments(self) -> int:
        return -(-self.max_row_words // self._segment_words)

    @property
    def node_bits(self) -> int:
        return max(1, (self._max_nodes - 1).bit_length())

    # --- layouts -------------------------------------------------------------------------

    @property
    def cmd_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "greedy": 1,
            "lfsr": 1,
            "nodes": range(self._max_nodes + 1),
            "steps": range(self._max_steps + 1),
            "vocab_size": range(self._max_vocab_size + 1),
            "row_address": unsigned(self._address_width),
            "row_words": unsigned(self._address_width),
            "seed": 32,
            "final_coin": 32,
            "threshold_single": 32,
            "threshold_acc": 32,
        })

    @property
    def tree_layout(self) -> data.StructLayout:
        return packet_layout({
            "candidate": unsigned(self._token_width),
            "index": unsigned(self._index_width),
            "next_token": self._link_shape(),
            "next_sibling": self._link_shape(),
            "coin": 32,
            "predict": unsigned(self._token_width),
        })

    def _link_shape(self):
        return signed(self.node_bits + 2)

    @property
    def draft_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "address": unsigned(self._address_width),
            "lane": range(max(self._lanes, 2)),
            "value": 32,
        })

    @property
    def result_layout(self) -> data.StructLayout:
        return packet_layout({
            "index": unsigned(self._index_width),
            "token": unsigned(self._token_width),
            "error": 1,
        })

    @property
    def status_layout(self) -> data.StructLayout:
        return data.StructLayout({"walk_cycles": 32, "row_cycles": 32})

    def _node_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "candidate": unsigned(self._token_width),
            "index": unsigned(self._index_width),
            "next": unsigned(self.node_bits),
            "next_none": 1,
            "sibling": unsigned(self.node_bits),
            "sibling_none": 1,
            "coin": 32,
            "predict": unsigned(self._token_width),
            "address": unsigned(self._address_width),
        })

    # --- hardware ------------------------------------------------------------------------

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        shift = lanes.bit_length() - 1
        n_max = self._max_nodes
        node_shape = unsigned(self.node_bits)
        count_shape = range(n_max + 1)
        vocab_bits = max(1, (self._max_vocab_size - 1).bit_length())
        word_shape = range(self.max_row_words + 1)
        segment_shift = self._segment_words.bit_length() - 1
        node_layout = self._node_layout()

        m.submodules.lfsr = lfsr = GaloisLFSR32()
        m.submodules.nodes = nodes = Memory(shape=node_layout, depth=n_max, init=[])
        node_write = nodes.write_port()
        node_a = nodes.read_port(domain="comb")  # issuer / greedy walker
        node_b = nodes.read_port(domain="comb")  # decisions, root
        m.submodules.prob_add = prob_add = Float32Add()
        m.submodules.divide = divide = Float32Divide(
            bits_per_stage=self._divider_bits_per_stage)
        m.submodules.product = product = Float32Multiply()
        m.submodules.scanner = scanner = ExactSumScanner(
            lanes=lanes, buffer_words=self._read_slots, max_words=self.max_row_words)
        m.submodules.sums = sums = Memory(shape=32, depth=self.max_segments + 1, init=[])
        sums_write = sums.write_port()
        sums_read = sums.read_port(domain="sync")
        m.submodules.address_slice = address_slice = RegisterSlice(self._address_width)
        wiring.connect(m, address_slice.o, wiring.flipped(self.read_address))
        m.submodules.result_slice = result_slice = RegisterSlice(self.result_layout)
        wiring.connect(m, result_slice.o, wiring.flipped(self.result))
        m.submodules.draft_slice = draft_slice = RegisterSlice(self.draft_layout)
        wiring.connect(m, draft_slice.o, wiring.flipped(self.draft_write))

        tag_layout = data.StructLayout({"final": 1, "epoch": EPOCH_BITS,
                                        "lane": range(max(lanes, 2)), "node": node_shape})
        m.submodules.tags = tags = SyncFIFO(width=tag_layout.size, depth=self._read_slots)
        q_layout = data.StructLayout({"epoch": EPOCH_BITS, "node": node_shape, "q": 32})
        m.submodules.probs = probs = SyncFIFO(width=q_layout.size, depth=Q_DEPTH)

        state = Signal(range(_STATE_DRAIN + 1))
        run = Signal()
        m.d.comb += run.eq(result_slice.i.ready & draft_slice.i.ready)

        # --- request parameters --------------------------------------------------------------
        cmd = self.cmd.payload
        greedy = Signal()
        use_lfsr = Signal()
        n = Signal(count_shape)
        steps = Signal(range(self._max_steps + 1))
        vocab = Signal(range(self._max_vocab_size + 1))
        row_words = Signal(self._address_width)
        final_coin = Signal(32)
        threshold_single = Signal(32)
        threshold = Signal(32)  # max(threshold_acc, float32(1e-9))
        use_divider = Signal()
        row_count = Signal(word_shape)  # ceil(V / lanes)
        segment_count = Signal(range(self.max_segments + 1))
        epoch = Signal(EPOCH_BITS)
        walk_cycles = Signal(32)
        row_cycles = Signal(32)

        m.d.comb += self.cmd.ready.eq(state == _STATE_IDLE)
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
        m.d.comb += segment_count.eq((row_count + self._segment_words - 1) >> segment_shift)

        # --- load ------------------------------------------------------------------------------
        loading = Signal()
        received = Signal(count_shape)  # tree beats accepted
        loaded = Signal(count_shape)  # node entries written
        load_done = Signal()
        next_address = Signal(self._address_width)
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
            return value.as_unsigned()[:self.node_bits], none

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
        row_address = Signal(self._address_width)
        last_index = Signal(self._index_width)
        coin = Signal(32)
        predict = Signal(self._token_width)
        accepted = Signal(range(self._max_steps + 1))
        rejects = Signal(count_shape)  # rejections in the current step
        error = Signal()
        first_beat = Signal()
        picked = Signal(self._token_width)
        rejected = [Signal(vocab_bits, name=f"rejected{i}") for i in range(n_max)]
        rejected_count = Signal(count_shape)
        issue_valid = Signal()
        issue_node = Signal(node_shape)
        issue_address = Signal(self._address_width)
        issue_count = Signal(count_shape)
        p_acc = Signal(32)
        chain_busy = Signal()

        # --- memory reads: the walker's element reads and the final row's word reads --------
        final_active = Signal()
        final_word = Signal(word_shape)
        final_end = Signal(word_shape)
        credits = Signal(range(self._read_slots + 1))
        walker_issue = ((state == _STATE_WALK) & ~greedy & issue_valid & (issue_node < loaded)
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
        shadow_valid = [Signal(name=f"add_valid{i}") for i in range(Float32Add.latency)]
        shadow_epoch = [Signal(EPOCH_BITS, name=f"add_epoch{i}")
                        for i in range(Float32Add.latency)]
        shadow_node = [Signal(node_shape, name=f"add_node{i}")
                       for i in range(Float32Add.latency)]
        shadow_q = [Signal(32, name=f"add_q{i}") for i in range(Float32Add.latency)]
        emerge = shadow_valid[-1] & (shadow_epoch[-1] == epoch)
        add_issue = run & (state == _STATE_WALK) & ~greedy & head_current & (~chain_busy
                                                                              | emerge)
        m.d.comb += [
            prob_add.en.eq(run),
            prob_add.a.eq(Mux(emerge, prob_add.result, p_acc)),
            prob_add.b.eq(head.q),
            probs.r_en.eq(add_issue | head_stale),
        ]
        with m.If(run):
            m.d.sync += [
                shadow_valid[0].eq(add_issue), shadow_epoch[0].eq(epoch),
                shadow_node[0].eq(head.node), shadow_q[0].eq(head.q),
            ]
            for i in range(1, Float32Add.latency):
                m.d.sync += [shadow_valid[i].eq(shadow_valid[i - 1]),
                             shadow_epoch[i].eq(shadow_epoch[i - 1]),
                             shadow_node[i].eq(shadow_node[i - 1]),
                             shadow_q[i].eq(shadow_q[i - 1])]
            with m.If(emerge & ~add_issue):
                m.d.sync += [p_acc.eq(prob_add.result), chain_busy.eq(0)]
            with m.If(add_issue):
                m.d.sync += chain_busy.eq(1)

        divider_latency = divide.latency
        d_valid = [Signal(name=f"div_valid{i}") for i in range(divider_latency)]
        d_epoch = [Signal(EPOCH_BITS, name=f"div_epoch{i}") for i in range(divider_latency)]
        d_node = [Signal(node_shape, name=f"div_node{i}") for i in range(divider_latency)]
        d_q = [Signal(32, name=f"div_q{i}") for i in range(divider_latency)]
        m.d.comb += [divide.en.eq(run), divide.a.eq(prob_add.result), divide.b.eq(threshold)]
        with m.If(run):
            m.d.sync += [d_valid[0].eq(emerge & use_divider), d_epoch[0].eq(shadow_epoch[-1]),
                         d_node[0].eq(shadow_node[-1]), d_q[0].eq(shadow_q[-1])]
            for i in range(1, divider_latency):
                m.d.sync += [d_valid[i].eq(d_valid[i - 1]), d_epoch[i].eq(d_epoch[i - 1]),
                             d_node[i].eq(d_node[i - 1]), d_q[i].eq(d_q[i - 1])]
        divided = d_valid[-1] & (d_epoch[-1] == epoch)

        # --- decisions ----------------------------------------------------------------------
        greedy_valid = Signal()
        greedy_node = Signal(node_shape)
        walking = state == _STATE_WALK
        event = Signal()
        event_node = Signal(node_shape)
        event_q = Signal(32)
        quotient = Signal(32)
        with m.If(greedy):
            m.d.comb += [event.eq(walking & greedy_valid & (greedy_node < loaded)),
                         event_node.eq(greedy_node)]
        with m.Elif(use_divider):
            m.d.comb += [event.eq(walking & divided), event_node.eq(d_node[-1]),
                         event_q.eq(d_q[-1]), quotient.eq(divide.result)]
        with m.Else():
            m.d.comb += [event.eq(walking & emerge), event_node.eq(shadow_node[-1]),
                         event_q.eq(shadow_q[-1]), quotient.eq(prob_add.result)]
        m.d.comb += node_b.addr.eq(Mux(state == _STATE_ROOT, 0, event_node))
        node = node_b.data
        coin_accepts = float32_less(coin, quotient) | float32_equal(coin, quotient)
        single_accepts = (float32_less(threshold_single, event_q)
                          | float32_equal(threshold_single, event_q))
        accept = Mux(greedy, node.candidate == predict, coin_accepts | single_accepts)

        m.d.comb += [
            result_slice.i.payload.index.eq(last_index),
            result_slice.i.payload.token.eq(Mux(state == _STATE_EMIT, picked,
                                                node.candidate)),
            result_slice.i.payload.first.eq(first_beat),
            result_slice.i.payload.last.eq(state == _STATE_EMIT),
            result_slice.i.payload.error.eq(error & (state == _STATE_EMIT)),
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
        m.d.comb += rejected_lanes.eq(_or_tree(matches))
        r_word, r_positive = [], []
        for j in range(lanes):
            value = s1_word[32 * j:32 * (j + 1)]
            inside = ((s1_index << shift) + j) < vocab
            positive = inside & ~rejected_lanes[j] & _float32_positive(value)
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
        any_positive, lowest = _first_set(m, [s2_positive[j] for j in range(lanes)],
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
        sums_index = Signal(range(self.max_segments + 1))
        m.d.comb += [
            sums_write.en.eq(pass_one & scanner.word_start
                             & ((scanner.word_index & (self._segment_words - 1)) == 0)),
            sums_write.addr.eq(scanner.word_index >> segment_shift),
            sums_write.data.eq(scanner.word_sum),
        ]

        # --- request sequencer --------------------------------------------------------------
        low = Signal(range(self.max_segments + 1))
        high = Signal(range(self.max_segments + 1))
        middle = Signal(range(self.max_segments + 1))
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
        with m.If((state == _STATE_ROOT) | (state == _STATE_WALK)):
            m.d.sync += walk_cycles.eq(walk_cycles + 1)
        with m.If((state >= _STATE_ROW) & (state <= _STATE_EMIT)):
            m.d.sync += row_cycles.eq(row_cycles + 1)

        with m.Switch(state):
            with m.Case(_STATE_IDLE):
                with m.If(command):
                    m.d.sync += [state.eq(_STATE_ROOT), error.eq(0), first_beat.eq(1),
                                 accepted.eq(0), rejects.eq(0), rejected_count.eq(0),
                                 issue_valid.eq(0), greedy_valid.eq(0), chain_busy.eq(0),
                                 p_acc.eq(0), has_positive.eq(0)]
            with m.Case(_STATE_ROOT):
                with m.If(loaded != 0):
                    more = (steps >= 2) & ~node.next_none
                    m.d.sync += [
                        last_index.eq(node.index), row.eq(0), row_address.eq(node.address),
                        coin.eq(node.coin), predict.eq(node.predict),
                        issue_node.eq(node.next), issue_valid.eq(more),
                        issue_address.eq(node.address), issue_count.eq(0),
                        greedy_node.eq(node.next), greedy_valid.eq(more),
                        state.eq(Mux(more, _STATE_WALK, _STATE_ROW)),
                    ]
            with m.Case(_STATE_WALK):
                with m.If(walk_end):
                    m.d.sync += [state.eq(_STATE_ROW), issue_valid.eq(0),
                                 greedy_valid.eq(0)]
            with m.Case(_STATE_ROW):
                with m.If(greedy | error):
                    m.d.sync += [picked.eq(Mux(error, 0, predict)), state.eq(_STATE_EMIT)]
                with m.Elif(load_done & ~scanner.busy):
                    m.d.comb += [scanner.start.eq(1), scanner.init.eq(0),
                                 scanner.words.eq(row_count), scanner.pick.eq(0)]
                    m.d.sync += [state.eq(_STATE_PASS1), pass_one.eq(1), final_active.eq(1),
                                 final_word.eq(0), final_end.eq(row_count), row_index.eq(0),
                                 credits.eq(self._read_slots), wait.eq(0)]
            with m.Case(_STATE_PASS1):
                m.d.sync += wait.eq(1)
                with m.If(wait & ~scanner.busy):
                    m.d.comb += [sums_write.en.eq(1), sums_write.addr.eq(segment_count),
                                 sums_write.data.eq(scanner.total)]
                    m.d.sync += [state.eq(_STATE_SUM), pass_one.eq(0), final_active.eq(0),
                                 wait.eq(0)]
            with m.Case(_STATE_SUM):
                # product = final_coin * total, Float32Multiply.latency clocks.
                m.d.sync += wait.eq(wait + 1)
                with m.If(wait == Float32Multiply.latency):
                    m.d.sync += [u.eq(product.result), state.eq(_STATE_DECIDE)]
            with m.Case(_STATE_DECIDE):
                u_fields = float32_fields(u)
                with m.If(u_fields.is_nan):
                    m.d.sync += [picked.eq(fallback), state.eq(_STATE_EMIT)]
                with m.Elif(float32_less(u, Const(0, 32))):
                    m.d.sync += [picked.eq(Mux(has_positive, first_positive, fallback)),
                                 state.eq(_STATE_EMIT)]
                with m.Else():
                    m.d.sync += [low.eq(0), high.eq(segment_count), state.eq(_STATE_SEARCH)]
            with m.Case(_STATE_SEARCH):
                # First segment s whose end sum (stored at s + 1) is above u.
                with m.If(low == high):
                    m.d.comb += sums_index.eq(low)
                    with m.If(low == segment_count):
                        m.d.sync += [picked.eq(fallback), state.eq(_STATE_EMIT)]
                    with m.Else():
                        m.d.sync += state.eq(_STATE_FOUND)
                with m.Else():
                    m.d.comb += sums_index.eq(middle + 1)
                    m.d.sync += state.eq(_STATE_COMPARE)
            with m.Case(_STATE_COMPARE):
                with m.If(float32_less(u, sums_read.data)):
                    m.d.sync += high.eq(middle)
                with m.Else():
                    m.d.sync += low.eq(middle + 1)
                m.d.sync += state.eq(_STATE_SEARCH)
            with m.Case(_STATE_FOUND):
                base = (low << segment_shift)[:len(segment_base)]
                remaining = row_count - base
                words = Mux(remaining > self._segment_words, self._segment_words, remaining)
                with m.If(~scanner.busy):
                    m.d.comb += [scanner.start.eq(1), scanner.init.eq(sums_read.data),
                                 scanner.words.eq(words), scanner.pick.eq(1)]
                    m.d.sync += [state.eq(_STATE_PASS2), final_active.eq(1),
                                 final_word.eq(base), final_end.eq(base + words),
                                 row_index.eq(base), segment_base.eq(base),
                                 credits.eq(self._read_slots), wait.eq(0)]
            with m.Case(_STATE_PASS2):
                m.d.sync += wait.eq(1)
                with m.If(wait & ~scanner.busy):
                    token = ((segment_base + scanner.hit_word) << shift) | scanner.hit_lane
                    m.d.sync += [picked.eq(Mux(scanner.hit, token, fallback)),
                                 final_active.eq(0), state.eq(_STATE_EMIT)]
            with m.Case(_STATE_EMIT):
                m.d.comb += result_slice.i.valid.eq(1)
                with m.If(result_slice.i.ready):
                    m.d.sync += [state.eq(_STATE_DRAIN),
                                 self.status.walk_cycles.eq(walk_cycles),
                                 self.status.row_cycles.eq(row_cycles + 1)]
            with m.Case(_STATE_DRAIN):
                with m.If(load_done):
                    m.d.sync += state.eq(_STATE_IDLE)
        return m


def _or_tree(values: list) -> Value:
    """Bitwise OR of ``values`` as a balanced tree."""
    values = list(values)
    while len(values) > 1:
        values = [values[i] | values[i + 1] if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def synthesis_configuration(**overrides) -> RejectSample:
    """K6 for the synthesis report: trees of up to 64 draft nodes, ``S`` up to 8, vocabularies
    up to 131072 (covers Llama 3's 128256), 512-bit HBM words (16 float32 lanes), 128 reads
    in flight (HBM latency), 64-word segments."""
    parameters = {"max_nodes": 64, "max_steps": 8, "max_vocab_size": 131072, "lanes": 16,
                  "read_slots": 128, "segment_words": 64}
    return RejectSample(**{**parameters, **overrides})
