"""Operand sets for the float32 cores and their numpy reference results.

``random_operands`` mixes random bit patterns, ordinary normals, subnormals, zeros, infinities,
NaNs, operand pairs whose product or sum overflows or underflows, and pairs whose exact result
lies exactly halfway between two float32 values (round-to-even ties), near cancellations, and
sums whose smaller addend has one or two ones placed around the alignment's sticky bit.
``divide_operands`` adds division-specific pairs to that mix: subnormal quotients with exact
rounding ties, quotients near the overflow and underflow thresholds, and the K6 operating range
(``prob_acc`` in ``[0, 2]`` over ``max(threshold_acc, 1e-9)`` in ``[1e-9, 1]``).
``directed_operands`` is every pair of a list of corner values. The reference is numpy float32
arithmetic.
"""

import numpy as np

__all__ = ["CORNER_VALUES", "OPERATIONS", "random_operands", "divide_operands", "operands",
           "directed_operands", "reference", "mismatches"]

# Bit patterns of corner values: zeros, subnormal extremes, normal extremes, ones and their
# neighbours, infinities, NaNs (quiet, signalling, negative).
CORNER_VALUES = np.array([
    0x0000_0000, 0x8000_0000, 0x0000_0001, 0x8000_0001, 0x0000_0002, 0x0000_0003,
    0x007F_FFFF, 0x807F_FFFF, 0x0040_0000, 0x0080_0000, 0x8080_0000, 0x0080_0001,
    0x3F80_0000, 0xBF80_0000, 0x3F80_0001, 0x3F7F_FFFF, 0x3FC0_0000, 0x4000_0000,
    0x3F00_0000, 0x3400_0000, 0x3380_0000, 0x3380_0001, 0x4B00_0000, 0x4B80_0000,
    0x7F7F_FFFF, 0xFF7F_FFFF, 0x7F00_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000,
    0xFFC0_0000, 0x7F80_0001, 0x7FFF_FFFF, 0x3F7F_F972, 0x3F80_20C5, 0xD015_02F9,
    0x2000_0000, 0x1F80_0000, 0x5F80_0000, 0x6000_0000,
], dtype=np.uint32)

OPERATIONS = ("mul", "add", "sub", "cmp", "div")


def _uniform_bits(rng, n):
    return rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32)


def _with_exponent(rng, n, low, high):
    """Random sign and fraction with a biased exponent drawn from ``low..high``."""
    bits = _uniform_bits(rng, n) & np.uint32(0x807F_FFFF)
    exponents = rng.integers(low, high + 1, size=n).astype(np.uint32)
    return bits | (exponents << np.uint32(23))


def _scaled(rng, integers, exponent_offsets):
    """float32 patterns of ``±integer * 2**offset`` (exact: the integers have <= 24 bits)."""
    values = integers.astype(np.float64) * np.exp2(exponent_offsets.astype(np.float64))
    signs = np.where(rng.random(integers.size) < 0.5, -1.0, 1.0)
    return (values * signs).astype(np.float32).view(np.uint32)


def _product_ties(rng, n):
    """Pairs whose exact product has 25 significant bits ending in 1: a rounding tie.

    Exponents are spread so that some ties fall in the subnormal range and some overflow.
    """
    p = rng.integers(1 << 11, 1 << 12, size=n) | 1
    q_low = -(-(1 << 24) // p)
    q_high = ((1 << 25) - 1) // p
    q = (q_low + (rng.random(n) * (q_high - q_low)).astype(np.int64)) | 1
    q = np.where(q > q_high, q - 2, q)
    shift_a = rng.integers(-130, 100, size=n)
    product_exponent = rng.integers(-150, 130, size=n)
    shift_b = np.clip(product_exponent - 25 - shift_a, -145, 110)
    return _scaled(rng, p, shift_a), _scaled(rng, q, shift_b)


def _sum_ties(rng, n):
    """Pairs where ``b`` is exactly half an ulp of ``a`` (or half an ulp plus an ulp)."""
    exponents = rng.integers(25, 255, size=n).astype(np.uint32)
    a = (_uniform_bits(rng, n) & np.uint32(0x807F_FFFF)) | (exponents << np.uint32(23))
    half_ulp = ((exponents - np.uint32(24)) << np.uint32(23))
    odd = rng.random(n) < 0.5
    b = np.where(odd, half_ulp | np.uint32(0x0040_0000), half_ulp).astype(np.uint32)
    b |= (_uniform_bits(rng, n) & np.uint32(0x8000_0000))
    return a, b


def _near_cancellation(rng, n):
    """Pairs of close magnitudes and opposite signs: massive cancellation, exact zeros."""
    a = _with_exponent(rng, n, 1, 254)
    delta = rng.integers(-4, 5, size=n).astype(np.int64)
    b = (a.astype(np.int64) + delta).clip(0, 0xFFFF_FFFF).astype(np.uint32) ^ np.uint32(1 << 31)
    return a, b


def _sparse_alignment(rng, n):
    """Pairs whose smaller operand has one or two random fraction bits set, the one bit the
    alignment shift leaves at the sum's lowest (sticky) position, or none, at an exponent
    0..35 below the larger's (half of them 23..27, where the smaller's leading one is near
    the guard bit and the sticky bit decides a tie): the sticky bit at each boundary."""
    a = _with_exponent(rng, n, 40, 254)
    distance = np.where(rng.random(n) < 0.5, rng.integers(0, 36, size=n),
                        rng.integers(23, 28, size=n)).astype(np.uint32)
    exponents = (a >> np.uint32(23)) & np.uint32(0xFF)
    bits = [np.uint32(1) << rng.integers(0, 23, size=n).astype(np.uint32) for _ in range(2)]
    boundary = np.uint32(1) << np.clip(distance.astype(np.int64) - 3, 0, 22).astype(np.uint32)
    fraction = np.where(rng.random(n) < 0.5, bits[0], bits[0] | bits[1])
    fraction = np.where(rng.random(n) < 0.3, boundary, fraction)
    fraction = np.where(rng.random(n) < 0.1, np.uint32(0), fraction).astype(np.uint32)
    b = fraction | ((exponents - distance) << np.uint32(23))
    return a, b | (_uniform_bits(rng, n) & np.uint32(0x8000_0000))


def random_operands(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` operand pairs (uint32 bit patterns), a mix of every class the cores must handle.

    Parameters
    ----------
    rng : numpy.random.Generator
        Seeded generator.
    n : int
        Number of pairs.
    """
    generators = [
        lambda k: (_uniform_bits(rng, k), _uniform_bits(rng, k)),
        lambda k: (_with_exponent(rng, k, 100, 154), _with_exponent(rng, k, 100, 154)),
        lambda k: (_with_exponent(rng, k, 0, 0), _with_exponent(rng, k, 0, 40)),
        lambda k: (_with_exponent(rng, k, 1, 70), _with_exponent(rng, k, 1, 90)),
        lambda k: (_with_exponent(rng, k, 180, 254), _with_exponent(rng, k, 120, 254)),
        lambda k: (rng.choice(CORNER_VALUES, k), _uniform_bits(rng, k)),
        lambda k: (_with_exponent(rng, k, 1, 254), _with_exponent(rng, k, 1, 254)),
        lambda k: _product_ties(rng, k),
        lambda k: _sum_ties(rng, k),
        lambda k: _near_cancellation(rng, k),
        lambda k: _sparse_alignment(rng, k),
    ]
    counts = np.bincount(rng.integers(0, len(generators), size=n), minlength=len(generators))
    parts = [generate(int(count)) for generate, count in zip(generators, counts, strict=True)]
    a = np.concatenate([part[0] for part in parts])
    b = np.concatenate([part[1] for part in parts])
    order = rng.permutation(n)
    swap = rng.random(n) < 0.5
    a, b = a[order], b[order]
    return np.where(swap, b, a).astype(np.uint32), np.where(swap, a, b).astype(np.uint32)


def _positive_scaled(integers, exponents):
    """float32 patterns of ``integer * 2**exponent`` (exact for integers of <= 24 bits)."""
    return (integers.astype(np.float64) * np.exp2(exponents.astype(np.float64))) \
        .astype(np.float32).view(np.uint32)


def divide_operands(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` operand pairs (uint32 bit patterns) for the divider (see the module): a quarter
    ``random_operands``, a quarter each subnormal-quotient ties, overflow/underflow edges and
    the K6 range, shuffled."""
    quarter = n // 4
    a_mix, b_mix = random_operands(rng, n - 3 * quarter)
    # Subnormal quotients: (k * 2^(s - 149)) / (m * 2^e); the first half are exact ties
    # (k odd, divisor 2^(s + 1): k/2 units of 2^-149), the second half small-integer ratios.
    half = quarter // 2
    k = rng.integers(1, 1 << 12, quarter) | np.r_[np.ones(half, np.int64),
                                                  np.zeros(quarter - half, np.int64)]
    s = rng.integers(0, 30, quarter)
    mm = np.r_[np.ones(half, np.int64), rng.choice([1, 2, 3, 4, 5, 8, 16, 1 << 10],
                                                    quarter - half)]
    e = np.r_[s[:half] + 1, rng.integers(0, 40, quarter - half)]
    a_tie = _positive_scaled(k, s - 149)
    b_tie = _positive_scaled(mm, e)
    # Near overflow / underflow: exponents chosen so that the quotient's lands near the edges.
    ea = rng.integers(1, 255, quarter).astype(np.uint32)
    target = rng.choice([-150, -149, -127, -126, -125, 126, 127, 128], quarter)
    eb = np.clip(ea.astype(np.int64) - target, 1, 254).astype(np.uint32)
    fraction = rng.integers(0, 1 << 23, (2, quarter), dtype=np.uint64).astype(np.uint32)
    sign = rng.integers(0, 2, (2, quarter), dtype=np.uint64).astype(np.uint32) << np.uint32(31)
    a_edge = sign[0] | (ea << np.uint32(23)) | fraction[0]
    b_edge = sign[1] | (eb << np.uint32(23)) | fraction[1]
    # K6: prob_acc / max(threshold_acc, 1e-9).
    p = (rng.random(quarter) * 2).astype(np.float32)
    p[rng.random(quarter) < 0.1] = 0.0
    t = np.exp2(rng.uniform(-29.9, 0, quarter)).astype(np.float32)
    t[rng.random(quarter) < 0.1] = np.float32(1e-9)
    a = np.concatenate([a_mix, a_tie, a_edge, p.view(np.uint32)])
    b = np.concatenate([b_mix, b_tie, b_edge, t.view(np.uint32)])
    order = rng.permutation(n)
    return a[order].astype(np.uint32), b[order].astype(np.uint32)


def operands(operation: str, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The random operand set of ``operation``'s testbench: ``divide_operands`` for ``div``,
    else ``random_operands``."""
    return (divide_operands if operation == "div" else random_operands)(rng, n)


def directed_operands() -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair of ``CORNER_VALUES``."""
    a, b = np.meshgrid(CORNER_VALUES, CORNER_VALUES, indexing="ij")
    return a.ravel().copy(), b.ravel().copy()


def reference(operation: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's result for uint32 operand patterns: uint32 patterns for ``mul``/``add``/``sub``/
    ``div``, a ``(n, 3)`` bool array of ``(a < b, a == b, a > b)`` for ``cmp``."""
    x, y = a.view(np.float32), b.view(np.float32)
    with np.errstate(all="ignore"):
        if operation == "mul":
            return (x * y).view(np.uint32)
        if operation == "add":
            return (x + y).view(np.uint32)
        if operation == "sub":
            return (x - y).view(np.uint32)
        if operation == "div":
            return (x / y).view(np.uint32)
        if operation == "cmp":
            return np.stack([x < y, x == y, x > y], axis=1)
    raise ValueError(f"`operation` must be one of {OPERATIONS}, not {operation!r}")


def mismatches(operation: str, expected: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """Indices where ``actual`` differs from ``expected``: bit patterns, NaNs by class only."""
    if operation == "cmp":
        return np.nonzero((expected != actual).any(axis=1))[0]
    expected_nan = np.isnan(expected.view(np.float32))
    actual_nan = np.isnan(actual.view(np.float32))
    return np.nonzero(((expected != actual) & ~(expected_nan & actual_nan))
                      | (expected_nan != actual_nan))[0]
