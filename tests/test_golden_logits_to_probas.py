"""K5 golden (docs/kernels.md §7): op-sequence transcription, error bounds vs float64, semantics."""

import math
from fractions import Fraction

import numpy as np
import pytest

import golden.logits_to_probas as k5
from golden.logits_to_probas import (
    GREEDY_TEMPERATURE,
    MAX_REL_ERROR,
    MAX_SUM_ERROR,
    MAX_ULP_ERROR,
    convert_logits_to_probas,
    logits_to_probas,
    softmax_reference,
)

F32 = np.float32
TINY = 2.0**-126  # outputs whose reference is below this (subnormal) are "tiny"


# --- the documented op sequence, transcribed element by element --------------------------------


def round_f32(x: Fraction) -> np.float32:
    """float32 nearest to the rational ``x`` (ties to even), subnormals included."""
    if x == 0:
        return F32(0.0)
    sign, x = (-1 if x < 0 else 1), abs(x)
    exponent = x.numerator.bit_length() - x.denominator.bit_length()
    if x < Fraction(2) ** exponent:
        exponent -= 1
    quantum = Fraction(2) ** (max(exponent, -126) - 23)
    return F32(sign * float(round(x / quantum) * quantum))


def two_sum(a, b):
    s = F32(a + b)
    bb = F32(s - a)
    return s, F32(F32(a - F32(s - bb)) + F32(b - bb))


def fast_two_sum(a, b):
    s = F32(a + b)
    return s, F32(b - F32(s - a))


def split(a):
    c = F32(F32(4097) * a)
    hi = F32(c - F32(c - a))
    return hi, F32(a - hi)


def two_prod(a, b):
    p = F32(a * b)
    ah, al = split(a)
    bh, bl = split(b)
    inner = F32(F32(F32(p - F32(ah * bh)) - F32(al * bh)) - F32(ah * bl))
    return p, F32(F32(al * bl) - inner)


def recip(x_hi, x_lo):
    bits = int(np.array([x_hi], np.float32).view(np.uint32)[0])
    exponent = ((bits >> 23) & 0xFF) - 127
    r = F32(k5.RECIP_SEED[(bits >> 16) & 0x7F] * F32(2.0**-exponent))
    for _ in range(2):
        r = F32(r + F32(r * F32(F32(1) - F32(x_hi * r))))
    p, p_err = two_prod(x_hi, r)
    c = F32(F32(F32(F32(1) - p) - p_err) - F32(x_lo * r))
    return r, F32(r * c)


def element_exp(logit, m, c_hi, c_lo):
    d_hi, d_lo = two_sum(logit, F32(-m))
    big, small = two_prod(d_hi, c_hi)
    tail = F32(small + F32(F32(d_hi * c_lo) + F32(d_lo * c_hi)))
    t_hi, t_lo = fast_two_sum(big, tail)
    if not t_hi >= -160:
        return F32(0)
    y = F32(t_hi * F32(64))
    kf = F32(F32(y + F32(12582912)) - F32(12582912))
    k = int(kf)
    f = F32(F32(F32(y - kf) * F32(1 / 64)) + t_lo)
    n, j = k >> 6, k & 63
    q = F32(f * F32(k5.EXP_C1 + F32(f * F32(k5.EXP_C2 + F32(f * k5.EXP_C3)))))
    s = F32(k5.EXP2_HI[j] + F32(k5.EXP2_LO[j] + F32(k5.EXP2_HI[j] * q)))
    return round_f32(Fraction(float(s)) * Fraction(2) ** n)


def transcribed_row(logits, temperature, top_k=-1):
    """One row of K5 as the module docstring spells it, scalar float32 ops only."""
    vocab = len(logits)
    if temperature < GREEDY_TEMPERATURE:
        out = np.zeros(vocab, np.float32)
        out[int(np.argmax(logits))] = 1
        return out
    kept = [True] * vocab
    if 1 <= top_k < vocab:
        tau = sorted(logits.tolist(), reverse=True)[top_k - 1]
        kept = [x >= tau for x in logits.tolist()]
    r, r_lo = recip(temperature, F32(0))
    big, small = two_prod(k5.LOG2E_HI, r)
    small = F32(small + F32(F32(k5.LOG2E_HI * r_lo) + F32(k5.LOG2E_LO * r)))
    c_hi, c_lo = fast_two_sum(big, small)
    m = max(logits)
    with np.errstate(all="ignore"):
        if m == -np.inf:
            e = [F32(1)] * vocab
        else:
            e = [element_exp(x, m, c_hi, c_lo) for x in logits]
    pairs = zip(e, kept, strict=True)
    total = sum(math.floor(Fraction(float(x)) * 2**64) for x, keep in pairs if keep)
    exact = Fraction(total, 2**64)
    s_hi = round_f32(exact)
    s_lo = round_f32(exact - Fraction(float(s_hi)))
    r, r_lo = recip(s_hi, s_lo)
    inv = F32(r + r_lo)
    return np.array([F32(x * inv) if keep else F32(0) for x, keep in zip(e, kept, strict=True)],
                    np.float32)


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def random_rows(rng, rows, vocab, kind):
    """float32 logits of one family: normal, huge range, near ties, offset, -inf masked."""
    if kind == "normal":
        x = rng.standard_normal((rows, vocab)) * rng.choice([0.5, 2, 8, 30], size=(rows, 1))
    elif kind == "huge":
        mag = 10.0 ** rng.uniform(-5, 38, size=(rows, vocab))
        x = np.where(rng.random((rows, vocab)) < 0.5, -mag, mag)
    elif kind == "ties":
        x = 1000 + np.round(rng.standard_normal((rows, vocab)) * 8) / 64
    elif kind == "offset":
        x = rng.choice([-1e6, 3e5, 1e7], size=(rows, 1)) + rng.standard_normal((rows, vocab)) * 4
    else:
        raise AssertionError(kind)
    x = x.astype(np.float32)
    masked = rng.random((rows, vocab)) < rng.choice([0.0, 0.0, 0.3, 0.95], size=(rows, 1))
    x[masked] = -np.inf
    return x


def random_temperatures(rng, rows):
    t = np.exp(rng.uniform(math.log(0.01), math.log(10), rows))
    pick = rng.random(rows)
    t[pick < 0.03] = 1e-6
    t[(pick >= 0.03) & (pick < 0.06)] = 1e6
    return t.astype(np.float32)


# --- transcription: bit-exact ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["normal", "huge", "ties", "offset"])
def test_golden_is_the_documented_op_sequence(kind):
    rng = np.random.default_rng(["normal", "huge", "ties", "offset"].index(kind))
    rows, vocab = 12, 37
    logits = random_rows(rng, rows, vocab, kind)
    logits[0] = -np.inf  # all -inf: uniform
    temps = random_temperatures(rng, rows)
    temps[1] = 0.0
    temps[2] = 1e-6
    temps[3] = 1e6
    top_ks = rng.integers(1, vocab + 5, size=rows)
    top_ks[rng.random(rows) < 0.5] = -1
    probs, _ = logits_to_probas(logits, temps, 1, top_ks)
    for row in range(rows):
        expected = transcribed_row(logits[row], temps[row], int(top_ks[row]))
        np.testing.assert_array_equal(bits(probs[row]), bits(expected), err_msg=f"row {row}")


# --- constants ---------------------------------------------------------------------------------


def test_rom_contents():
    for j in range(64):
        value = Fraction(float(k5.EXP2_HI[j])) + Fraction(float(k5.EXP2_LO[j]))
        assert abs(float(value) - 2 ** (j / 64)) <= 2**-46 * 2 ** (j / 64)
        assert k5.EXP2_HI[j] == F32(2 ** (j / 64))
    assert abs(float(k5.LOG2E_HI) + float(k5.LOG2E_LO) - 1 / math.log(2)) < 2**-46
    for index, seed in enumerate(k5.RECIP_SEED):
        lo, hi = 1 + index / 128, 1 + (index + 1) / 128
        assert max(abs(seed * lo - 1), abs(seed * hi - 1)) < 2**-8
    for coefficient, exact in zip((k5.EXP_C1, k5.EXP_C2, k5.EXP_C3),
                                  (math.log(2), math.log(2) ** 2 / 2, math.log(2) ** 3 / 6),
                                  strict=True):
        assert coefficient == F32(exact)


def test_reciprocal_is_float_float_accurate():
    rng = np.random.default_rng(2)
    x = np.concatenate([
        (2.0 ** rng.uniform(-20, 20, 20000)), [1.0, 2.0, 3.0, 1e-6, 1e6, 131072.0]
    ]).astype(np.float32)
    lo = (x * rng.uniform(-2**-25, 2**-25, x.size)).astype(np.float32)
    r, r_lo = k5._recip_ff(x, lo)
    exact = 1 / (x.astype(np.float64) + lo)
    err = np.abs((r.astype(np.float64) + r_lo) - exact) / exact
    assert err.max() < 2**-42


# --- accuracy against float64 -------------------------------------------------------------------


# (rows, vocab or (lo, hi) range) of the 10,000-row sweep; V = 131072 and 262144 included.
SWEEP = [(4000, (1, 64)), (3000, (65, 600)), (2990, (601, 1100)), (8, 131072), (2, 262144)]


def sweep_batches():
    rng = np.random.default_rng(2024)
    for rows, vocab in SWEEP:
        chunk = rows if isinstance(vocab, int) else 50
        for start in range(0, rows, chunk):
            count = min(chunk, rows - start)
            v = vocab if isinstance(vocab, int) else int(rng.integers(vocab[0], vocab[1] + 1))
            kind = ["normal", "huge", "ties", "offset"][int(rng.integers(0, 4))]
            logits = random_rows(rng, count, v, kind)
            temps = random_temperatures(rng, count)
            top_ks = np.where(rng.random(count) < 0.2, rng.integers(1, v + 3, count), -1)
            yield logits, temps, top_ks.astype(np.int64)


def test_error_bounds_over_10000_rows(sim_report):
    worst_ulp = worst_rel = worst_sum = worst_tiny = 0.0
    rows = 0
    for logits, temps, top_ks in sweep_batches():
        probs, predict = logits_to_probas(logits, temps, 1, top_ks)
        ref = softmax_reference(logits, temps, 1, top_ks)
        rows += logits.shape[0]
        assert (predict == logits.argmax(axis=1)).all()
        p = probs.astype(np.float64)
        normal = ref >= TINY
        err = np.abs(p - ref)
        ulp = 2.0 ** (np.floor(np.log2(ref[normal])) - 23)
        if normal.any():
            worst_ulp = max(worst_ulp, float((err[normal] / ulp).max()))
            worst_rel = max(worst_rel, float((err[normal] / ref[normal]).max()))
        worst_tiny = max(worst_tiny, float(err[~normal].max(initial=0)))
        assert (probs[ref == 0] == 0).all()  # -inf logits, dropped by top-k, underflow
        worst_sum = max(worst_sum, float(np.abs(p.sum(axis=1) - 1).max()))
    assert rows == 10_000
    sim_report(f"K5 vs float64 softmax over {rows} rows: max {worst_ulp:.3f} ulp, max relative "
               f"{worst_rel:.3e} ({worst_rel / 2**-24:.2f} * 2^-24), max |sum-1| "
               f"{worst_sum:.2e}, tiny outputs max abs error {worst_tiny:.1e}")
    assert worst_ulp <= MAX_ULP_ERROR <= 4  # spec target: 4 ulp
    assert worst_rel <= MAX_REL_ERROR
    assert worst_sum <= MAX_SUM_ERROR <= 1e-6  # spec target: 1e-6
    assert worst_tiny <= 2**-147


# --- semantics ---------------------------------------------------------------------------------


def test_greedy_rows_argmax_lowest_index_and_one_hot():
    logits = np.array([
        [0.0, 3.0, 3.0, -1.0],
        [-np.inf, -np.inf, -np.inf, -np.inf],
        [-0.0, 0.0, -np.inf, -5.0],
        [1.0, 2.0, 5.0, 5.0],
    ], np.float32)
    temps = np.array([0.0, 0.0, 9e-7, 1e-6], np.float32)
    probs, predict = logits_to_probas(logits, temps, 1)
    assert predict.tolist() == [1, 0, 0, 2]
    np.testing.assert_array_equal(probs[:3], np.eye(4, dtype=np.float32)[[1, 0, 0]])
    assert probs[3, 2] == probs[3, 3] == F32(0.5)  # T = 1e-6 samples: the tie stays a tie
    assert (probs[3, :2] == 0).all()


def test_rows_map_to_requests():
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((3, 4, 50)).astype(np.float32)
    temps = np.array([0.0, 0.7, 2.0], np.float32)
    top_ks = np.array([3, 5, -1], np.int32)
    probs, predict = logits_to_probas(logits, temps, 4, top_ks)
    flat = logits.reshape(12, 50)
    for row in range(12):
        expected = transcribed_row(flat[row], temps[row // 4], int(top_ks[row // 4]))
        np.testing.assert_array_equal(bits(probs[row]), bits(expected))
    assert (predict == flat.argmax(axis=1)).all()


def test_neg_inf_gives_exact_zero_and_all_neg_inf_row_is_uniform():
    for vocab in (1, 3, 7, 1000, 262144):
        logits = np.full((2, vocab), -np.inf, np.float32)
        logits[1, vocab // 2] = 2.5
        probs, predict = logits_to_probas(logits, np.ones(2, np.float32), 1)
        assert (probs[0] == F32(1 / vocab)).all()
        assert predict.tolist() == [0, vocab // 2]
        assert probs[1, vocab // 2] == 1 and np.count_nonzero(probs[1]) == 1


def test_top_k_keeps_ties_at_the_threshold_and_renormalises():
    logits = np.array([[1.0, 3.0, 2.0, 2.0, 0.5, 2.0]], np.float32)
    ones = np.ones(1, np.float32)
    probs, _ = logits_to_probas(logits, ones, 1, np.array([2], np.int64))
    kept = probs[0] > 0
    assert kept.tolist() == [False, True, True, True, False, True]  # 3 and every 2
    ref = softmax_reference(logits, ones, 1, np.array([2], np.int64))
    assert np.abs(probs[0] - ref[0]).max() < 1e-7
    assert ref[0, kept].sum() == pytest.approx(1)
    probs1, _ = logits_to_probas(logits, ones, 1, np.array([1], np.int64))
    assert probs1[0].tolist() == [0, 1, 0, 0, 0, 0]
    tie = np.array([[5.0, 1.0, 5.0]], np.float32)
    probs_tie, _ = logits_to_probas(tie, ones, 1, np.array([1], np.int64))
    assert probs_tie[0].tolist() == [0.5, 0, 0.5]
    plain, _ = logits_to_probas(logits, ones, 1)
    for k in (-1, 6, 7, 10**9):
        same, _ = logits_to_probas(logits, ones, 1, np.array([k], np.int64))
        np.testing.assert_array_equal(bits(same), bits(plain))


def test_in_place_outputs_and_optional_outputs():
    rng = np.random.default_rng(8)
    logits = rng.standard_normal((2, 3, 20)).astype(np.float32)
    temps = np.array([0.5, 1.5], np.float32)
    probs_expected, predict_expected = logits_to_probas(logits, temps, 3)
    probs = np.full((2, 3, 20), -7, np.float32)
    predict = np.full((2, 3), -7, np.int64)
    assert convert_logits_to_probas(logits, temps, 3, probs, predict) is None
    np.testing.assert_array_equal(bits(probs.reshape(6, 20)), bits(probs_expected))
    np.testing.assert_array_equal(predict.reshape(-1), predict_expected)
    only_predict = np.zeros(6, np.int64)
    convert_logits_to_probas(logits, temps, 3, None, only_predict)
    np.testing.assert_array_equal(only_predict, predict_expected)
    only_probs = np.zeros((6, 20), np.float32)
    convert_logits_to_probas(logits, temps, 3, only_probs, None)
    np.testing.assert_array_equal(bits(only_probs), bits(probs_expected))
    empty_probs, empty_predict = logits_to_probas(np.zeros((0, 5), np.float32),
                                                  np.zeros(0, np.float32), 2)
    assert empty_probs.shape == (0, 5) and empty_predict.shape == (0,)


def _call(logits=None, temps=None, n=1, probs="default", predict="default", top_ks=None):
    logits = np.zeros((2, 4), np.float32) if logits is None else logits
    temps = np.ones(2, np.float32) if temps is None else temps
    probs = np.full((2, 4), -7, np.float32) if isinstance(probs, str) else probs
    predict = np.full(2, -7, np.int64) if isinstance(predict, str) else predict
    before = (None if probs is None else probs.copy(), None if predict is None else predict.copy())
    try:
        convert_logits_to_probas(logits, temps, n, probs, predict, top_ks)
    finally:
        for out, saved in zip((probs, predict), before, strict=True):
            if out is not None:
                np.testing.assert_array_equal(out, saved)  # nothing written on error


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"logits": np.array([[0, np.nan, 0, 0], [0, 0, 0, 0]], np.float32)}, "NaN"),
        ({"logits": np.array([[0, np.inf, 0, 0], [0, 0, 0, 0]], np.float32)}, r"\+inf"),
        ({"logits": np.zeros((2, 4), np.float64)}, "logits"),
        ({"logits": np.zeros((3, 4), np.float32)}, "logits"),
        ({"temps": np.array([1, -1], np.float32)}, "temperatures"),
        ({"temps": np.array([1, np.nan], np.float32)}, "temperatures"),
        ({"temps": np.array([1, 2e6], np.float32)}, "temperatures"),
        ({"temps": np.ones(2, np.float64)}, "temperatures"),
        ({"n": 0}, "num_draft_tokens"),
        ({"n": 1.0}, "num_draft_tokens"),
        ({"probs": np.zeros((2, 4), np.float64)}, "target_probs"),
        ({"probs": np.zeros((4, 2), np.float32).T}, "target_probs"),
        ({"predict": np.zeros(2, np.int32)}, "target_predict"),
        ({"probs": None, "predict": None}, "at least one"),
        ({"top_ks": np.array([0, 1], np.int64)}, "top_ks"),
        ({"top_ks": np.array([1, 2], np.float32)}, "top_ks"),
        ({"top_ks": np.array([1], np.int64)}, "top_ks"),
    ],
)
def test_invalid_arguments_raise_before_any_write(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _call(**kwargs)
