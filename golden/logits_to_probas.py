"""K5 ``convert_logits_to_probas`` (docs/kernels.md §7): a bit-accurate model of the hardware.

Rows ``r = b*n + i`` of ``logits [B*n, V]`` belong to request ``b`` (temperature
``temperatures[b]``, optional ``top_ks[b]``). Every row gets its argmax (lowest index on ties)
in ``target_predict``; ``target_probs`` gets the row's probabilities:

* **greedy rows** (``T < GREEDY_TEMPERATURE = float32(1e-6)``, SGLang's sampling epsilon, so
  ``T = 0`` included): one-hot, ``1.0`` at the argmax, ``+0.0`` elsewhere;
* **sampling rows** (``1e-6 <= T <= MAX_TEMPERATURE = 1e6``): ``softmax(logits / T)``,
  restricted to the ``top_k`` largest logits when ``top_ks`` is given, computed by the
  algorithm below. An all ``-inf`` row is treated as all ties at the maximum: uniform.

The hardware has float32 multiply, add/subtract and compare cores (``hw.lib.float32``), integer
logic and small ROMs, and no divider. Below, every ``+``, ``-``, ``*`` is one float32 operation
rounded to nearest even (numpy float32, one operation at a time, no fused or float64
intermediates); ``TwoSum``, ``FastTwoSum``, ``Split`` and ``TwoProd`` are the classical
error-free transformations spelled out in this module (Knuth, Dekker; Veltkamp splitter 4097),
each a fixed sequence of those operations.

Per request (once): the float-float reciprocal of ``T`` (``recip`` below) and
``C = log2(e) / T`` as ``(C_hi, C_lo)``: ``(P, p) = TwoProd(LOG2E_HI, R_hi)``,
``p = p + (LOG2E_HI * R_lo + LOG2E_LO * R_hi)``, ``(C_hi, C_lo) = FastTwoSum(P, p)``.

Per row: ``m`` = the row maximum (comparisons). With ``top_k`` (``1 <= k < V``) the kept set
is ``{j : l_j >= tau}``, ``tau`` the k-th largest logit counted with multiplicity (ties at
``tau`` are all kept, as flashinfer's pivot search keeps every value ``>=`` the k-th largest);
otherwise every element is kept.

Per element ``l`` (the exponential ``e = 2^t``, ``t = (l - m) * log2(e) / T <= 0``):

1. ``(d_hi, d_lo) = TwoSum(l, -m)``: ``l - m`` exactly.
2. ``(P, p) = TwoProd(d_hi, C_hi)``; ``tail = p + (d_hi * C_lo + d_lo * C_hi)``;
   ``(t_hi, t_lo) = FastTwoSum(P, tail)``.
3. If not ``t_hi >= -160`` (also NaN/-inf, e.g. ``l = -inf``): ``e = +0.0``; stop.
4. ``y = t_hi * 64`` (exact); ``kf = (y + 12582912) - 12582912`` (round to nearest even
   integer, ``k = int(kf)``); ``r = y - kf`` (exact); ``f = r * 2^-6 + t_lo``, ``|f| <= 2^-7``.
5. ``n = k >> 6`` (floor), ``j = k & 63``;
   ``q = f * (EXP_C1 + f * (EXP_C2 + f * EXP_C3))`` (``2^f - 1``, Taylor, float32 Horner);
   ``s = EXP2_HI[j] + (EXP2_LO[j] + EXP2_HI[j] * q)`` with the 64-entry ROM
   ``EXP2_HI[j] + EXP2_LO[j] = 2^(j/64)`` (float-float);
6. ``e = s * 2^n`` rounded once: ``(s * 2^max(n, -100)) * 2^(n - max(n, -100))`` (the first
   product is exact), i.e. an exponent adjustment that rounds only in the subnormal range.

Row sum: exact, in fixed point: ``S = sum over kept j of floor(e_j * 2^64)`` (an integer; order
does not matter, so the hardware may add in any order and width; it needs
``ceil(log2(V)) + 1`` integer bits above the 64 fractional ones). ``S >= 2^64`` because the
maximum's ``e`` is exactly 1. ``S_hi`` = ``S * 2^-64`` rounded to float32 (nearest even),
``S_lo`` = the remainder rounded to float32: ``S_hi + S_lo`` is within ``2^-48`` of the sum.

Reciprocal ``recip(x_hi, x_lo)`` (positive normal ``x``): seed ``r = RECIP_SEED[top 7
fraction bits of x_hi] * 2^-E`` (``E`` = unbiased exponent of ``x_hi``; ROM entry
``i`` = float32(1 / (1 + (i + 0.5) / 128))); two Newton steps ``r = r + r * (1 - x_hi * r)``;
then one float-float correction: ``(P, p) = TwoProd(x_hi, r)``,
``c = ((1 - P) - p) - x_lo * r``, ``R_lo = r * c``, result ``(R_hi, R_lo) = (r, R_lo)``
(relative error about ``2^-44``). The row's ``inv = R_hi + R_lo`` (one rounding).

Output: ``p_j = e_j * inv`` for kept ``j``, ``+0.0`` otherwise.

Error against the float64 reference (:func:`softmax_reference`). ``e`` carries one rounding
(``s``) plus at most ``2^-29`` from the argument, table and polynomial; ``inv`` one rounding
plus ``2^-42``; the product one more. So on outputs whose reference is a normal float32
(``>= 2^-126``, "non-tiny") the relative error is below ``MAX_REL_ERROR = 3.1 * 2^-24``, hence
below ``MAX_ULP_ERROR = 3.1`` ulp of the reference; every row's float64 sum is within
``MAX_SUM_ERROR = 2e-7`` of 1; tiny outputs are within ``2^-147`` absolute, and a ``-inf`` or
dropped logit gives exactly ``+0.0``. Measured over 10,000 random rows
(``tests/test_golden_logits_to_probas.py``): 2.04 ulp, ``2.88 * 2^-24``, ``|sum - 1| <=
7.7e-8`` (docs/decisions.md).
"""

from __future__ import annotations

import operator
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

from ._abi import in_view, out_view

__all__ = [
    "convert_logits_to_probas",
    "logits_to_probas",
    "softmax_reference",
    "GREEDY_TEMPERATURE",
    "MAX_TEMPERATURE",
    "MAX_REL_ERROR",
    "MAX_ULP_ERROR",
    "MAX_SUM_ERROR",
]

_F32 = np.float32
GREEDY_TEMPERATURE = np.float32(1e-6)
MAX_TEMPERATURE = np.float32(1e6)
#: Error bounds against the float64 reference on outputs whose reference is >= 2^-126 (see
#: the module docstring); checked by the tests over 10,000 random rows.
MAX_REL_ERROR = 3.1 * 2.0**-24
MAX_ULP_ERROR = 3.1
MAX_SUM_ERROR = 2e-7

EXP2_TABLE_BITS = 6
T_CUTOFF = np.float32(-160.0)
SUM_FRAC_BITS = 64
RECIP_TABLE_BITS = 7
_SPLITTER = np.float32(4097.0)
_ROUND_MAGIC = np.float32(12582912.0)  # 1.5 * 2^23
_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)
_CHUNK_ELEMENTS = 1 << 21  # rows are processed in chunks of about this many elements


# --- constants, rounded exactly from high-precision values ------------------------------------


def _f32_nearest(x) -> np.float32:
    """float32 nearest to the exact rational ``x`` (ties to even), normal range only."""
    x = Fraction(x)
    if x == 0:
        return _ZERO
    sign, x = (-1 if x < 0 else 1), abs(x)
    exponent = x.numerator.bit_length() - x.denominator.bit_length()
    if x < Fraction(2) ** exponent:
        exponent -= 1
    mantissa = round(x * Fraction(2) ** (23 - exponent))  # round() on Fraction: half to even
    return np.float32(sign * float(Fraction(mantissa) * Fraction(2) ** (exponent - 23)))


def _float_float(x: Decimal) -> tuple[np.float32, np.float32]:
    hi = _f32_nearest(x)
    return hi, _f32_nearest(x - Decimal(float(hi)))


def _constants():
    with localcontext() as ctx:
        ctx.prec = 60
        ln2 = Decimal(2).ln()
        table = [_float_float(Decimal(2) ** (Decimal(j) / 2**EXP2_TABLE_BITS))
                 for j in range(2**EXP2_TABLE_BITS)]
        log2e = _float_float(1 / ln2)
        poly = (_f32_nearest(ln2), _f32_nearest(ln2**2 / 2), _f32_nearest(ln2**3 / 6))
    seeds = [_f32_nearest(1 / (1 + Fraction(2 * i + 1, 2 ** (RECIP_TABLE_BITS + 1))))
             for i in range(2**RECIP_TABLE_BITS)]
    return (
        np.array([hi for hi, _ in table], np.float32),
        np.array([lo for _, lo in table], np.float32),
        log2e,
        poly,
        np.array(seeds, np.float32),
    )


EXP2_HI, EXP2_LO, (LOG2E_HI, LOG2E_LO), (EXP_C1, EXP_C2, EXP_C3), RECIP_SEED = _constants()


# --- float32 building blocks (numpy float32 arrays, one rounding per operation) ---------------


def _two_sum(a, b):
    """Knuth: ``s + err == a + b`` exactly, ``s = fl(a + b)``."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a, b):
    """Dekker: ``s + err == a + b`` exactly when ``|a| >= |b|``."""
    s = a + b
    return s, b - (s - a)


def _split(a):
    """Veltkamp: ``a == hi + lo`` with 12-bit halves."""
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def _two_prod(a, b):
    """Dekker: ``p + err == a * b`` exactly, ``p = fl(a * b)`` (no FMA)."""
    p = a * b
    a_hi, a_lo = _split(a)
    b_hi, b_lo = _split(b)
    err = a_lo * b_lo - (((p - a_hi * b_hi) - a_lo * b_hi) - a_hi * b_lo)
    return p, err


# float32 2^k for k in [-126, 127], from its bit pattern: _POW2[k + 126].
_POW2 = ((np.arange(-126, 128, dtype=np.int64) + 127) << 23).astype(np.uint32).view(np.float32)


def _pow2(k):
    """float32 ``2^k`` for integer ``k`` in [-126, 127] (array)."""
    return _POW2[np.asarray(k) + 126]


def _recip_ff(x_hi, x_lo):
    """``(r, r_lo)`` with ``r + r_lo ~ 1 / (x_hi + x_lo)`` (float32 arrays, ``x_hi`` normal)."""
    bits = x_hi.view(np.uint32).astype(np.int64)
    exponent = ((bits >> 23) & 0xFF) - 127
    index = (bits >> (23 - RECIP_TABLE_BITS)) & (2**RECIP_TABLE_BITS - 1)
    r = RECIP_SEED[index] * _pow2(-exponent)
    for _ in range(2):
        r = r + r * (_ONE - x_hi * r)
    p, p_err = _two_prod(x_hi, r)
    c = ((_ONE - p) - p_err) - x_lo * r
    return r, r * c


def _scale_c(temperature):
    """``(C_hi, C_lo) ~ log2(e) / T`` for float32 temperatures (array)."""
    r, r_lo = _recip_ff(temperature, np.zeros_like(temperature))
    p, p_err = _two_prod(np.full_like(r, LOG2E_HI), r)
    p_err = p_err + (LOG2E_HI * r_lo + LOG2E_LO * r)
    return _fast_two_sum(p, p_err)


def _exp_elements(logits, row_max, c_hi, c_lo):
    """``e = 2^((l - m) * C)`` per element (steps 1-6 of the module docstring).

    ``logits`` [R, V] float32; ``row_max``, ``c_hi``, ``c_lo`` [R, 1] float32.
    """
    with np.errstate(all="ignore"):
        d_hi, d_lo = _two_sum(logits, -row_max)
        p, p_err = _two_prod(d_hi, np.broadcast_to(c_hi, d_hi.shape))
        tail = p_err + (d_hi * c_lo + d_lo * c_hi)
        t_hi, t_lo = _fast_two_sum(p, tail)
        valid = t_hi >= T_CUTOFF
    t_hi = np.where(valid, t_hi, _ZERO)
    t_lo = np.where(valid, t_lo, _ZERO)
    y = t_hi * _F32(2**EXP2_TABLE_BITS)
    kf = (y + _ROUND_MAGIC) - _ROUND_MAGIC
    r = y - kf
    f = r * _F32(2.0**-EXP2_TABLE_BITS) + t_lo
    k = kf.astype(np.int64)
    n, j = k >> EXP2_TABLE_BITS, k & (2**EXP2_TABLE_BITS - 1)
    q = f * (EXP_C1 + f * (EXP_C2 + f * EXP_C3))
    s = EXP2_HI[j] + (EXP2_LO[j] + EXP2_HI[j] * q)
    n1 = np.maximum(n, -100)
    e = (s * _pow2(n1)) * _pow2(n - n1)
    return np.where(valid, e, _ZERO)


def _rne_int(x: int, bits: int = 24) -> int:
    """``x`` (a Python int >= 0) rounded to ``bits`` significant bits, ties to even."""
    shift = x.bit_length() - bits
    if shift <= 0:
        return x
    q, rem = divmod(x, 1 << shift)
    half = 1 << (shift - 1)
    if rem > half or (rem == half and q & 1):
        q += 1
    return q << shift


def _fixed_sum(e, kept):
    """Per row ``(S_hi, S_lo)`` float32: the exact fixed-point sum of the kept ``e``."""
    scaled = np.where(kept, e, _ZERO).astype(np.float64) * 2.0**32
    high = np.floor(scaled)
    low = np.floor((scaled - high) * 2.0**32)
    high_sum = high.astype(np.int64).sum(axis=1)
    low_sum = low.astype(np.int64).sum(axis=1)
    s_hi = np.empty(e.shape[0], np.float32)
    s_lo = np.empty(e.shape[0], np.float32)
    scale = 2.0**-SUM_FRAC_BITS
    for row, (hs, ls) in enumerate(zip(high_sum.tolist(), low_sum.tolist(), strict=True)):
        total = (hs << 32) + ls
        top = _rne_int(total)
        rest = total - top
        s_hi[row] = np.float32(float(top) * scale)
        s_lo[row] = np.float32((1 if rest >= 0 else -1) * float(_rne_int(abs(rest))) * scale)
    return s_hi, s_lo


def _kept_mask(logits, top_k):
    """Per element: kept by ``top_k`` (int64 [R]; -1 or >= V keep all)."""
    vocab = logits.shape[1]
    kept = np.ones(logits.shape, dtype=bool)
    active = np.flatnonzero((top_k >= 1) & (top_k < vocab))
    if active.size:
        rows = np.sort(logits[active], axis=1)
        tau = rows[np.arange(active.size), vocab - top_k[active]]
        kept[active] = logits[active] >= tau[:, None]
    return kept


def _sampling_probs(logits, temperature, top_k):
    """Probabilities of sampling rows: ``logits`` [R, V], ``temperature``/``top_k`` [R]."""
    kept = _kept_mask(logits, top_k)
    row_max = logits.max(axis=1, keepdims=True)
    c_hi, c_lo = _scale_c(temperature)
    e = _exp_elements(logits, row_max, c_hi[:, None], c_lo[:, None])
    e[row_max[:, 0] == -np.inf] = _ONE
    s_hi, s_lo = _fixed_sum(e, kept)
    r, r_lo = _recip_ff(s_hi, s_lo)
    inv = r + r_lo
    return np.where(kept, e * inv[:, None], _ZERO)


# --- host API --------------------------------------------------------------------------------


def _check_args(logits, temperatures, num_draft_tokens, top_ks):
    """Validate the inputs; return ``(logits [R, V], T per row, top_k per row, B, n)``."""
    try:
        n = operator.index(num_draft_tokens)
    except TypeError:
        raise ValueError(
            f"`num_draft_tokens` must be an integer, not {num_draft_tokens!r}") from None
    if n < 1:
        raise ValueError(f"`num_draft_tokens` must be at least 1, not {n}")
    if not isinstance(temperatures, np.ndarray) or temperatures.ndim != 1:
        raise ValueError("`temperatures` must be a 1-D numpy array [B]")
    b = temperatures.shape[0]
    temps = in_view("temperatures", temperatures, (b,), np.float32)
    if not isinstance(logits, np.ndarray) or logits.ndim not in (2, 3):
        raise ValueError("`logits` must be a numpy array [B*n, V] or [B, n, V]")
    vocab = logits.shape[-1]
    if vocab < 1:
        raise ValueError("`logits` must have a vocabulary dimension V >= 1")
    rows = in_view("logits", logits, (b * n, vocab), np.float32)
    if np.isnan(rows).any() or (rows == np.inf).any():
        raise ValueError("`logits` must not contain NaN or +inf")
    if not (np.isfinite(temps) & (temps >= 0) & (temps <= MAX_TEMPERATURE)).all():
        raise ValueError(f"`temperatures` must be between 0 and {float(MAX_TEMPERATURE):g}")
    if top_ks is None:
        top_k = np.full(b, -1, np.int64)
    else:
        if not isinstance(top_ks, np.ndarray) or top_ks.dtype not in (np.int32, np.int64):
            raise ValueError("`top_ks` must be an int32 or int64 numpy array [B]")
        top_k = in_view("top_ks", top_ks, (b,), top_ks.dtype).astype(np.int64)
        if ((top_k < 1) & (top_k != -1)).any():
            raise ValueError("`top_ks` values must be -1 (disabled) or at least 1")
    return rows, np.repeat(temps, n), np.repeat(top_k, n), b, n


def convert_logits_to_probas(
    logits,
    temperatures,
    num_draft_tokens,
    target_probs,
    target_predict,
    top_ks=None,
) -> None:
    """K5: target probabilities and argmax of every row (§7), in place.

    Parameters:
        logits: in, float32 [B*n, V] (or [B, n, V]); no NaN or +inf (-inf allowed).
        temperatures: in, float32 [B], each 0 or in ``[0, 1e6]``; below 1e-6 the request is
            greedy.
        num_draft_tokens: ``n`` >= 1, rows per request.
        target_probs: out, float32 with ``B*n*V`` elements (C-contiguous), or None to skip:
            one-hot argmax rows for greedy requests, the modelled softmax otherwise.
        target_predict: out, int64 with ``B*n`` elements, or None to skip: the argmax of
            every row (lowest index on ties; an all -inf row gives 0).
        top_ks: optional int32/int64 [B]: keep the k largest logits (ties at the k-th all
            kept) and renormalise; -1 or ``k >= V`` keeps all. Greedy rows ignore it.

    Returns None. Raises ValueError before writing anything for invalid arguments.
    """
    rows, temps, top_k, b, n = _check_args(logits, temperatures, num_draft_tokens, top_ks)
    if target_probs is None and target_predict is None:
        raise ValueError("at least one of `target_probs` and `target_predict` must be given")
    vocab = rows.shape[1]
    probs_out = (None if target_probs is None
                 else out_view("target_probs", target_probs, (b * n, vocab), np.float32))
    predict_out = (None if target_predict is None
                   else out_view("target_predict", target_predict, (b * n,), np.int64))

    argmax = rows.argmax(axis=1) if rows.shape[0] else np.zeros(0, np.int64)
    if probs_out is not None:
        probs = np.zeros(rows.shape, np.float32)
        greedy = temps < GREEDY_TEMPERATURE
        probs[np.flatnonzero(greedy), argmax[greedy]] = _ONE
        sampling = np.flatnonzero(~greedy)
        chunk = max(1, _CHUNK_ELEMENTS // vocab)
        for start in range(0, sampling.size, chunk):
            part = sampling[start : start + chunk]
            probs[part] = _sampling_probs(rows[part], temps[part], top_k[part])
        probs_out[...] = probs
    if predict_out is not None:
        predict_out[...] = argmax


def logits_to_probas(logits, temperatures, num_draft_tokens, top_ks=None):
    """Functional K5: returns ``(target_probs float32 [B*n, V], target_predict int64 [B*n])``."""
    logits = np.asarray(logits)
    vocab = logits.shape[-1] if logits.ndim else 0
    rows = logits.size // vocab if vocab else 0
    probs = np.zeros((rows, vocab), np.float32)
    predict = np.zeros(rows, np.int64)
    convert_logits_to_probas(logits, temperatures, num_draft_tokens, probs, predict, top_ks)
    return probs, predict


def softmax_reference(logits, temperatures, num_draft_tokens, top_ks=None):
    """The ideal K5 result in float64 ([B*n, V]), the yardstick of the golden's error.

    Same row semantics (greedy one-hot, top-k kept set, all -inf rows uniform), computed as
    ``exp((l - m) / T)`` normalised by its sum, all in float64 from the float32 inputs.
    """
    rows, temps, top_k, _, _ = _check_args(logits, temperatures, num_draft_tokens, top_ks)
    out = np.zeros(rows.shape, np.float64)
    if not rows.shape[0]:
        return out
    greedy = temps < GREEDY_TEMPERATURE
    argmax = rows.argmax(axis=1)
    out[np.flatnonzero(greedy), argmax[greedy]] = 1.0
    sampling = np.flatnonzero(~greedy)
    if sampling.size:
        sub = rows[sampling].astype(np.float64)
        kept = _kept_mask(rows[sampling], top_k[sampling])
        m = sub.max(axis=1, keepdims=True)
        with np.errstate(all="ignore"):
            x = (sub - m) / temps[sampling].astype(np.float64)[:, None]
            e = np.where(kept, np.exp(x), 0.0)
        e[m[:, 0] == -np.inf] = 1.0
        e = np.where(kept, e, 0.0)
        out[sampling] = e / e.sum(axis=1, keepdims=True)
    return out
