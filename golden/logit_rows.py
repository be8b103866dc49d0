"""The arithmetic of the fused verify (docs/kernels.md §10): one logits row to the exact
fixed-point distribution the hardware samples from (docs/tree_verify.md).

Bit-accurate model of the hardware's lanes, independent of how many lanes or memory ports
read the row: every element is turned into its exponential on its own (integer operations
only), and the normaliser is an exact integer sum, so the order of accumulation cannot
change a bit.

Per request, with temperature ``T`` (``>= 1e-6``; smaller is greedy and never comes here):

1. ``c = log2(e) / T`` as ``C * 2**e_c`` with a 26-bit ``C`` (round to nearest) from an
   exact integer division (``temperature_scale``).
2. The row's grid ``2**L``, ``L = -e_c - 52``: every logit is aligned to it,
   ``A = trunc(x / 2**L) mod 2**40``; ``D = (A - A_max) mod 2**40`` (signed) is
   ``x - max`` on the grid. A token is in range when ``x >= fl32(max - 2**(L+35))`` (a float
   compare that rules out wrap-around) and ``D >= -2**33``; a token equal to the maximum has
   ``D = 0`` (so an all ``-inf`` row is uniform, and ``+inf`` tokens share the mass).
3. ``y = -((-D * C) >> 26)`` (toward zero): ``log2`` of the exponential with 26 fraction bits,
   ``-128 < y <= 0``.
4. ``2**y = 2**-k * 2**-r``: ``2**-r`` from a 1024-entry table of 31-bit values at the
   nearest table point and the first-order correction ``1 - a``, ``a = r2 * ln 2`` for the
   signed rest ``r2`` (``|r2| <= 2**-11``): ``e = E * 2**(-31 - k)``, ``E`` about
   ``(2**30, 2**31]``.
5. The normaliser's terms are ``e`` on the grid ``2**-48`` (floor): ``term = (E << 17) >> k``;
   the sum is exact. Out-of-range tokens have ``e = 0``.

The row's ranking is ``y`` (the scaled logit on the grid, exactly monotone in the logit):
top-k keeps the tokens whose ``y`` is at least the k-th largest (ties kept); top-p then keeps
those whose ``y`` is at least ``tau``, the ``y`` at which the descending cumulative term sum
reaches ``top_p`` times the kept sum (ties kept). A decision's probability of token ``j`` is
``e_j / (sum of kept terms * 2**-48)`` rounded once to float32; the residual draw is an
inverse CDF over the kept terms (exact integers) in token order.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass

import numpy as np

__all__ = ["GREEDY_TEMPERATURE", "TemperatureScale", "RowConstants", "RowDistribution",
           "temperature_scale", "row_constants", "lane_exponentials", "normaliser_terms",
           "row_distribution", "exp2_fixed", "align_to_grid", "EXP_TABLE", "ratio_to_float32"]

#: Requests below this temperature are greedy (argmax), as §7.
GREEDY_TEMPERATURE = 1e-6

SCALE_BITS = 26  # bits of C
Y_FRACTION_BITS = 26  # fraction bits of y
GRID_OFFSET = 52  # L = -e_c - GRID_OFFSET: y = D * C * 2**-(26 + 26)
ALIGN_BITS = 40  # width of the aligned logits A (wrap-around arithmetic)
RANGE_BITS = 33  # D >= -2**RANGE_BITS is in range (|y| < 128)
COARSE_BITS = RANGE_BITS + 2  # the float pre-check's margin
TABLE_BITS = 10  # 2**-r: 1024-entry table indexed by the top fraction bits
MANTISSA_BITS = 31  # E in (2**30, 2**31]
TERM_BITS = 48  # the normaliser's grid: 2**-48
LN2_Q18 = 181704  # round(ln 2 * 2**18)

_MASK40 = (1 << ALIGN_BITS) - 1
_FRACTION_MASK = (1 << Y_FRACTION_BITS) - 1


def _log2e_q64() -> int:
    with decimal.localcontext() as context:
        context.prec = 50
        return int((decimal.Decimal(2) ** 64 / decimal.Decimal(2).ln()).to_integral_value(
            rounding=decimal.ROUND_HALF_EVEN))


LOG2E_Q64 = _log2e_q64()  # round(log2(e) * 2**64)

#: ``round(2**(31 - i/1024))``: the ROM of every lane's exponential.
EXP_TABLE = np.array([round(2.0 ** (MANTISSA_BITS - i / (1 << TABLE_BITS)))
                      for i in range(1 << TABLE_BITS)], dtype=np.int64)


@dataclass(frozen=True)
class TemperatureScale:
    """``c = log2(e) / T = mantissa * 2**exponent`` (``mantissa`` 26 bits, top bit set)."""

    mantissa: int
    exponent: int

    @property
    def grid(self) -> int:
        """``L``: logits are aligned to multiples of ``2**L``."""
        return -self.exponent - GRID_OFFSET


def _float32_parts(value) -> tuple[int, int]:
    """``(m, e)`` with ``value = m * 2**e`` exactly (``m`` the 24-bit integer significand, or
    fewer bits for a subnormal); ``value`` finite."""
    bits = int(np.float32(value).view(np.uint32))
    field, fraction = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    mantissa = fraction | (1 << 23) if field else fraction
    return (-mantissa if bits >> 31 else mantissa), max(field, 1) - 150


def temperature_scale(temperature) -> TemperatureScale:
    """The request's scale for a float32 temperature ``T >= 1e-6`` (round to nearest, ties
    to even, of ``LOG2E_Q64 / T`` to 26 bits: what a restoring divider with one extra
    quotient bit and a sticky remainder gives)."""
    t_mantissa, t_exponent = _float32_parts(temperature)
    if t_mantissa <= 0:
        raise ValueError(f"temperature must be positive, not {temperature}")

    def divide(shift):  # LOG2E_Q64 * 2**shift / t_mantissa: (quotient, remainder != 0)
        numerator = LOG2E_Q64 << max(shift, 0)
        quotient, remainder = divmod(numerator, t_mantissa << max(-shift, 0))
        return quotient, remainder != 0

    # The quotient in [2**26, 2**27): 26 bits and a guard bit.
    shift = SCALE_BITS + 1 - (LOG2E_Q64.bit_length() - t_mantissa.bit_length())
    if divide(shift)[0] >> (SCALE_BITS + 1):
        shift -= 1
    quotient, sticky = divide(shift)
    assert quotient >> SCALE_BITS == 1
    mantissa, guard = quotient >> 1, quotient & 1
    if guard and (sticky or mantissa & 1):
        mantissa += 1
    exponent = -64 - shift + 1 - t_exponent
    if mantissa >> SCALE_BITS:
        mantissa, exponent = mantissa >> 1, exponent + 1
    return TemperatureScale(mantissa, exponent)


def align_to_grid(x: np.ndarray, grid: int) -> np.ndarray:
    """``x / 2**grid`` rounded toward zero, modulo ``2**40``, of finite float32 ``x`` (int64 in
    ``[0, 2**40)``)."""
    bits = x.view(np.uint32).astype(np.int64)
    field, fraction = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    mantissa = np.where(field > 0, fraction | (1 << 23), fraction)
    shift = np.maximum(field, 1) - 150 - grid
    left = np.where(shift >= ALIGN_BITS, 0, mantissa << np.clip(shift, 0, ALIGN_BITS - 1))
    magnitude = np.where(shift >= 0, left, mantissa >> np.clip(-shift, 0, 63))
    return np.where(bits >> 31 == 1, -magnitude, magnitude) & _MASK40


def exp2_fixed(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``2**(-z / 2**26)`` for int64 ``0 <= z < 2**33`` as ``(E, k)``: ``E * 2**(-31 - k)``,
    ``E`` within ``4e-4`` of ``(2**30, 2**31]``.

    The fraction of ``z`` rounds to the nearest of 1024 table points (the last one is the next
    ``k``), and the signed rest ``r2`` (``|r2| <= 2**-11``) is the first-order correction
    ``2**-r2 = 1 - a``, ``a = r2 ln 2`` (the dropped ``a**2 / 2`` is below ``5.8e-8``)."""
    low_bits = Y_FRACTION_BITS - TABLE_BITS
    k = z >> Y_FRACTION_BITS
    fraction = z & _FRACTION_MASK
    index = (fraction + (1 << (low_bits - 1))) >> low_bits
    low = fraction - (index << low_bits)  # signed, |low| <= 2**15
    wrap = index >> TABLE_BITS  # rounded up to the next integer: 2**-(k + 1)
    a = (low * LN2_Q18) >> 12  # a * 2**32
    table = EXP_TABLE[index & ((1 << TABLE_BITS) - 1)]
    return table - (((table >> 15) * a) >> 17), k + wrap


def ratio_to_float32(numerator: int, denominator: int) -> np.float32:
    """``numerator / denominator`` (non-negative integers, denominator > 0) rounded once to
    float32, nearest even, subnormals included."""
    if numerator == 0:
        return np.float32(0.0)
    # Scale so that the quotient has 24 significant bits plus guard and sticky.
    exponent = numerator.bit_length() - denominator.bit_length()
    if (numerator << max(-exponent, 0)) < (denominator << max(exponent, 0)):
        exponent -= 1  # numerator / denominator in [2**exponent, 2**(exponent + 1))
    lsb = max(exponent - 23, -149)  # weight of the last significand bit (subnormals: 2**-149)
    scaled_num = numerator << max(-lsb, 0)
    scaled_den = denominator << max(lsb, 0)
    quotient, remainder = divmod(scaled_num, scaled_den)
    twice = 2 * remainder
    if twice > scaled_den or (twice == scaled_den and quotient & 1):
        quotient += 1
    return np.float32(np.ldexp(np.float64(quotient), lsb))


def _exact_sum(values: np.ndarray) -> int:
    """Exact sum of non-negative int64 values below 2**57 (no int64 overflow)."""
    return (int((values >> 28).sum()) << 28) + int((values & ((1 << 28) - 1)).sum())


class _Cumulative:
    """Exact prefix sums of non-negative int64 terms (below 2**57), compared with integers."""

    def __init__(self, terms: np.ndarray):
        high = np.cumsum(terms >> 28)
        low = np.cumsum(terms & ((1 << 28) - 1))
        self.high = high + (low >> 28)
        self.low = low & ((1 << 28) - 1)

    def first_above(self, threshold: int) -> int:
        """The first index whose prefix sum is ``> threshold`` (``len`` if none)."""
        high, low = threshold >> 28, threshold & ((1 << 28) - 1)
        above = (self.high > high) | ((self.high == high) & (self.low > low))
        return int(above.argmax()) if above.any() else len(above)

    def first_at_least(self, threshold: int) -> int:
        return self.first_above(threshold - 1)


@dataclass
class RowDistribution:
    """A visited row's distribution: per token the exponential ``e = mantissa *
    2**(-31 - shift)`` (``mantissa`` 0 out of range), its rank ``key`` (``2**34 - z``, 0 out
    of range), its normaliser
    ``term`` (grid ``2**-48``), the ``kept`` tokens after top-k/top-p, their exact
    ``total``, and whether the row held a NaN."""

    mantissa: np.ndarray
    shift: np.ndarray
    key: np.ndarray
    term: np.ndarray
    kept: np.ndarray
    total: int
    nan: bool

    def probability(self, token: int) -> np.float32:
        """The float32 probability a decision uses: ``e / (total * 2**-48)`` rounded once."""
        if not self.kept[token] or self.mantissa[token] == 0:
            return np.float32(0.0)
        mantissa, shift = int(self.mantissa[token]), int(self.shift[token])
        up = TERM_BITS - MANTISSA_BITS - shift  # e / 2**-48 = mantissa * 2**up
        if up >= 0:
            return ratio_to_float32(mantissa << up, self.total)
        return ratio_to_float32(mantissa, self.total << -up)

    def pick(self, coin, removed=()) -> int:
        """Inverse-CDF draw over the kept terms in token order with ``removed`` tokens taken
        out: the first token with a positive term whose prefix sum exceeds ``coin`` times the
        sum; else the last positive one, else ``V - 1`` (§8)."""
        terms = np.where(self.kept, self.term, 0)
        if len(removed):
            terms[np.asarray(list(removed), dtype=np.int64)] = 0
        total = _exact_sum(terms)
        coin_mantissa, coin_exponent = _float32_parts(coin)
        product = coin_mantissa * total
        threshold = product >> -coin_exponent if coin_exponent < 0 else product << coin_exponent
        first = _Cumulative(terms).first_above(threshold)  # its term is positive
        positive = terms > 0
        if first < len(terms):
            return first
        if positive.any():
            return len(terms) - 1 - int(positive[::-1].argmax())
        return len(terms) - 1


@dataclass(frozen=True)
class RowConstants:
    """What every lane needs of a row besides its own logit: the row's maximum ``peak``
    (float32), the grid ``L``, ``trunc(peak / 2**L) mod 2**40`` (``peak_aligned``; 0 for an
    infinite peak), the coarse threshold ``fl32(peak - 2**(L+35))`` and the scale ``C``."""

    peak: np.float32
    grid: int
    peak_aligned: int
    threshold: np.float32
    scale: int


def row_constants(x: np.ndarray, scale: TemperatureScale) -> RowConstants:
    """The constants of a float32 row without NaN (NaN already read as ``-inf``)."""
    peak = x.max()
    grid = scale.grid
    margin = np.float32(np.inf) if grid + COARSE_BITS > 127 else np.float32(
        2.0 ** (grid + COARSE_BITS))
    with np.errstate(invalid="ignore"):
        threshold = np.float32(peak - margin)
    peak_aligned = int(align_to_grid(np.array([peak if np.isfinite(peak) else 0], np.float32),
                                     grid)[0])
    return RowConstants(peak, grid, peak_aligned, threshold, scale.mantissa)


def lane_exponentials(x: np.ndarray, row: RowConstants) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
    """What the lanes compute per logit (float32 without NaN): the exponential ``(E, k)``,
    ``E * 2**(-31 - k)`` (``E = 0`` out of range), and ``z = -y`` (the order of the
    exponentials: the row's ranking for top-k and top-p)."""
    with np.errstate(invalid="ignore"):
        coarse = x >= row.threshold
    equal = x == row.peak
    finite = np.isfinite(x) & np.isfinite(row.peak)
    aligned = align_to_grid(np.where(finite, x, 0).astype(np.float32), row.grid)
    half = 1 << (ALIGN_BITS - 1)
    difference = ((aligned - row.peak_aligned + half) & _MASK40) - half
    valid = equal | (coarse & finite & (difference >= -(1 << RANGE_BITS)))
    difference = np.where(valid & ~equal, difference, 0)
    z = (-difference * row.scale) >> Y_FRACTION_BITS
    mantissa, shift = exp2_fixed(z)
    return np.where(valid, mantissa, 0), shift, z


def normaliser_terms(mantissa: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``floor(e * 2**48)`` of the exponentials ``(E, k)``: ``(E << 17) >> k``."""
    up = TERM_BITS - MANTISSA_BITS - shift
    return np.where(up >= 0, mantissa << np.clip(up, 0, 62), mantissa >> np.clip(-up, 0, 63))


def row_distribution(logits: np.ndarray, scale: TemperatureScale, top_k: int = 0,
                     top_p: float = 1.0) -> RowDistribution:
    """The distribution of one float32 logits row (see the module docstring); ``top_k``
    (off when ``<= 0`` or ``>= V``) and ``top_p`` (a float32 value, off at 1)."""
    top_p = np.float32(top_p)
    x = np.array(logits, dtype=np.float32)
    nan = np.isnan(x)
    x[nan] = -np.inf
    vocab = x.size
    mantissa, shift, distance = lane_exponentials(x, row_constants(x, scale))
    key = np.where(mantissa > 0, (1 << 34) - distance, 0)
    term = normaliser_terms(mantissa, shift)
    kept = np.ones(vocab, dtype=bool)
    if 0 < top_k < vocab:
        kept &= key >= np.partition(key, vocab - top_k)[vocab - top_k]
    if top_p < 1:
        order = np.argsort(-key[kept], kind="stable")
        sorted_keys, sorted_terms = key[kept][order], term[kept][order]
        p_mantissa, p_exponent = _float32_parts(top_p)
        # cumulative * 2**-p_exponent >= p_mantissa * kept_total (p_exponent < 0 here).
        needed = -(-(p_mantissa * _exact_sum(sorted_terms)) >> -p_exponent)
        at = min(_Cumulative(sorted_terms).first_at_least(needed), sorted_keys.size - 1)
        kept &= key >= sorted_keys[at]
    total = _exact_sum(np.where(kept, term, 0))
    return RowDistribution(mantissa, shift, key, term, kept, total, bool(nan.any()))
