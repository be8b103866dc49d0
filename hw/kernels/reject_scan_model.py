"""Bit-level Python model of K6's final-row algorithm (the reference of
:class:`hw.kernels.reject_scan.ExactSumScanner` and of the kernel's pick; docs/reject_sample.md).

A running sum of non-negative float32 values is the state ``(I, E, inf)``: the value
``I * 2^(E - 150)`` with ``E = max(exponent, 1)`` and ``I`` the significand with its hidden bit,
or +infinity. :func:`scan_word` adds one word's lanes the way the scanner's loop stage does
(integer arithmetic on the sum's ulp grid, ending the word early at a *roll* or a *cross*);
:func:`final_row_model` runs the whole final row (first pass with stored segment sums, ``u =
coin * sum``, the pick with one rescanned segment). Both are bit-exact with the sequential
float32 prefix sums ``np.add.accumulate`` and the golden's pick (the K6 tests check it).
"""

import numpy as np

from hw.lib.float32 import POSITIVE_INFINITY

__all__ = ["TOP", "scan_state", "scan_bits", "scan_word", "final_row_model"]

#: Grid units at which a running sum leaves its binade (``2^24``).
TOP = 1 << 24


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
    if i == TOP:
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
        if big or total - round_up >= TOP:
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
        if total == TOP:
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

