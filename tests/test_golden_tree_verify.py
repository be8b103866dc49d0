"""Fused verify goldens (docs/kernels.md §10): the fixed-point row arithmetic against exact and
float64 references, the op against K6 and its float64 reference, edge cases, losslessness."""

import math
from fractions import Fraction

import numpy as np
import pytest
from test_golden_reject_sample import (
    LOSSLESS_N,
    LOSSLESS_V,
    lossless_pvalues,
    lossless_tree,
    random_tree,
)

import golden.logit_rows as logit_rows
from golden.logit_rows import (
    EXP_TABLE,
    align_to_grid,
    exp2_fixed,
    ratio_to_float32,
    row_distribution,
    temperature_scale,
)
from golden.reject_sample import (
    lfsr_coins,
    tree_speculative_sampling_target_only,
    verify_tree_greedy,
)
from golden.tree_verify import (
    draft_tree_reject_sample_from_logits,
    reference_probabilities,
    tree_speculative_sampling_from_logits,
    tree_speculative_sampling_from_logits_reference,
    visited_rows,
)

F32 = np.float32
OUTPUTS = ("predicts", "accept_index", "accept_token_num")


# --- the arithmetic ---------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1e-6, 3e-4, 0.05, 0.7, 1.0, 1.5, 10.0, 1e6, 3e38])
def test_temperature_scale_is_log2e_over_t_rounded_to_26_bits(temperature):
    t = F32(temperature)
    scale = temperature_scale(t)
    assert 1 << 25 <= scale.mantissa < 1 << 26
    exact = Fraction(logit_rows.LOG2E_Q64, 1 << 64) / Fraction(float(t))
    ulp = Fraction(2) ** scale.exponent
    assert abs(scale.mantissa * ulp - exact) <= ulp / 2


def test_exp2_fixed_is_within_7e_8_of_exp2():
    z = np.unique(np.concatenate([np.arange(0, 1 << 33, 8191, dtype=np.int64),
                                  np.array([0, 1, (1 << 26) - 1, 1 << 26, (1 << 33) - 1])]))
    mantissa, shift = exp2_fixed(z)
    assert mantissa.min() > (1 << 30) * (1 - 4e-4) and mantissa.max() < (1 << 31) * (1 + 4e-4)
    value = mantissa * np.exp2(-31.0 - shift)
    assert np.abs(value / np.exp2(-z / 2.0**26) - 1).max() < 7e-8
    assert EXP_TABLE[0] == 1 << 31


def test_align_to_grid_is_truncation_modulo_2_40():
    rng = np.random.default_rng(3)
    x = np.concatenate([(rng.standard_normal(2000) * 10.0 ** rng.integers(-8, 9, 2000)),
                        [0.0, -0.0, 1e-45, -1e-45, 3e38, -3e38]]).astype(np.float32)
    for grid in (-60, -30, -3, 0, 5, 40):
        got = align_to_grid(x, grid)
        want = [math.trunc(Fraction(float(v)) / Fraction(2) ** grid) % (1 << 40) for v in x]
        assert got.tolist() == want


def test_ratio_to_float32_rounds_once_to_nearest_even():
    rng = np.random.default_rng(4)
    for _ in range(3000):
        num, den = int(rng.integers(1, 1 << 62)), int(rng.integers(1, 1 << 62))
        num <<= int(rng.integers(0, 40))
        exact = Fraction(num, den)
        got = ratio_to_float32(num, den)
        # the nearest float32: compare with both neighbours exactly
        below, above = np.nextafter(got, F32(0)), np.nextafter(got, F32(np.inf))
        error = abs(Fraction(float(got)) - exact)
        assert error <= abs(Fraction(float(below)) - exact)
        assert error <= abs(Fraction(float(above)) - exact)
    assert ratio_to_float32(1, 1 << 160) == F32(0.0) and ratio_to_float32(1, 1 << 149) == \
        np.nextafter(F32(0), F32(1))  # 2**-149, the smallest subnormal
    assert ratio_to_float32(0, 5) == 0 and ratio_to_float32(3, 3) == 1


def _probabilities64(distribution):
    """float64 ``e / total`` of every kept token (the value ``probability`` rounds)."""
    scaled = distribution.mantissa * np.exp2(float(logit_rows.TERM_BITS - logit_rows.MANTISSA_BITS)
                                             - distribution.shift)
    return np.where(distribution.kept, scaled / float(distribution.total), 0.0)


def random_row(rng, vocab):
    """A logits row in one of several styles."""
    style = rng.integers(0, 6)
    if style == 0:  # peaked
        x = rng.standard_normal(vocab) * 2
        x[rng.integers(0, vocab)] += 25
    elif style == 1:  # heavy-tailed
        x = rng.standard_cauchy(vocab) * 3
    elif style == 2:  # flat with ties
        x = np.round(rng.standard_normal(vocab) * 0.5, 1)
    elif style == 3:  # huge range
        x = rng.standard_normal(vocab) * 10.0 ** rng.integers(0, 4) + rng.uniform(-1e4, 1e4)
    else:  # typical LLM logits, some masked
        x = rng.standard_normal(vocab) * 4
    if style >= 4:
        x[rng.random(vocab) < 0.1] = -np.inf
    return x.astype(np.float32)


def test_row_probabilities_against_float64_on_10000_rows(sim_report):
    """§10 accuracy: every probability of at least 2**-32 within 1e-6 of float64 (relative,
    before the one float32 rounding of a decision, which adds at most 6e-8), and the kept mass
    within 1e-6 of 1, with top-k and top-p on a third of the rows."""
    rng = np.random.default_rng(10)
    worst, worst_sum, checked = 0.0, 0.0, 0
    for _ in range(10_000):
        vocab = int(rng.integers(2, 600))
        x = random_row(rng, vocab)
        t = F32(np.exp(rng.uniform(np.log(0.05), np.log(10.0))))
        top_k = int(rng.integers(1, vocab + 1)) if rng.random() < 0.3 else 0
        top_p = F32(rng.uniform(0.3, 1.0)) if rng.random() < 0.3 else F32(1.0)
        ours = row_distribution(x, temperature_scale(t), top_k, top_p)
        ref = reference_probabilities(x, float(t), top_k, float(top_p))
        mine = _probabilities64(ours)
        same_set = ours.kept == (ref > 0) | (mine == 0) & (ref == 0)
        used = (ref >= 2.0**-32) & same_set
        checked += int(used.sum())
        worst = max(worst, float(np.max(np.abs(mine[used] / ref[used] - 1), initial=0)))
        worst_sum = max(worst_sum, abs(float(np.sum(mine)) - 1))
    sim_report(f"tree_verify rows: max relative error {worst:.2e} over {checked} probabilities "
               f">= 2**-32 of 10,000 rows; max |sum - 1| {worst_sum:.1e}")
    assert worst <= 1e-6 - 6e-8 and worst_sum <= 1e-6


def test_special_rows():
    scale = temperature_scale(F32(1.0))
    uniform = row_distribution(np.full(5, -np.inf, np.float32), scale)
    assert (uniform.term == uniform.term[0]).all() and uniform.probability(3) == F32(0.2)
    with_nan = row_distribution(np.array([0, np.nan, 1], np.float32), scale)
    assert with_nan.nan and with_nan.probability(1) == 0 and with_nan.probability(2) > 0.5
    infinite = row_distribution(np.array([np.inf, 3, np.inf, -np.inf], np.float32), scale)
    assert [infinite.probability(j) for j in range(4)] == [0.5, 0, 0.5, 0]
    single = row_distribution(np.array([-7.5], np.float32), scale)
    assert single.probability(0) == 1 and single.pick(F32(0.99)) == 0
    far = row_distribution(np.array([0, -200, -1e30], np.float32), scale)
    assert far.probability(0) == 1 and far.mantissa[2] == 0  # beyond 2**-128: zero


def test_top_k_and_top_p_keep_ties():
    scale = temperature_scale(F32(1.0))
    x = np.array([2, 1, 1, 0, 1, -1], np.float32)
    assert row_distribution(x, scale, top_k=2).kept.tolist() == [1, 1, 1, 0, 1, 0]
    assert row_distribution(x, scale, top_k=1).kept.tolist() == [1, 0, 0, 0, 0, 0]
    assert row_distribution(x, scale, top_p=F32(0.0)).kept.tolist() == [1, 0, 0, 0, 0, 0]
    # p = e^2, e, e, 1, e, 1/e over their sum: the top token alone holds 0.42 of the mass.
    assert row_distribution(x, scale, top_p=F32(0.4)).kept.tolist() == [1, 0, 0, 0, 0, 0]
    assert row_distribution(x, scale, top_p=F32(0.5)).kept.tolist() == [1, 1, 1, 0, 1, 0]
    kept = row_distribution(x, scale, top_k=4, top_p=F32(0.99))
    assert kept.kept.tolist() == [1, 1, 1, 0, 1, 0]  # top-k first, then top-p of the rest
    assert sum(kept.probability(j) for j in range(6)) == pytest.approx(1, abs=1e-6)


def test_pick_is_inverse_cdf_in_token_order_without_removed_tokens():
    scale = temperature_scale(F32(1.0))
    row = row_distribution(np.array([0, 0, 0, 0], np.float32), scale)
    assert [row.pick(F32(c)) for c in (0, 0.2, 0.25, 0.3, 0.74, 0.75, 0.99, 1)] == \
        [0, 0, 1, 1, 2, 3, 3, 3]
    assert [row.pick(F32(c), removed=[0, 2]) for c in (0, 0.49, 0.5, 1)] == [1, 1, 3, 3]
    assert row.pick(F32(0.5), removed=[0, 1, 2, 3]) == 3  # nothing left: V - 1


# --- the op -----------------------------------------------------------------------------------


def make_case(rng, b, n, s, vocab, *, greedy_fraction=0.0, top=False, nan=False):
    """Random trees whose candidates are drawn from the target rows (so drafts get
    accepted), EAGLE-like logits, random temperatures (some greedy)."""
    ridx, nxt, sib = random_tree(rng, b, n)
    logits = np.array([[random_row(rng, vocab) for _ in range(n)] for _ in range(b)],
                      np.float32).reshape(b, n, vocab)
    temps = np.exp(rng.uniform(np.log(0.05), np.log(10.0), b)).astype(np.float32)
    temps[rng.random(b) < greedy_fraction] = 0
    parent = np.zeros((b, n), np.int64)
    for req in range(b):
        for i in range(n):
            child = nxt[req, i]
            while child != -1:
                parent[req, child] = i
                child = sib[req, child]
    candidates = np.zeros((b, n), np.int64)
    for req in range(b):
        for i in range(1, n):
            p = reference_probabilities(logits[req, parent[req, i]], max(temps[req], 0.05))
            candidates[req, i] = rng.choice(vocab, p=p)
    if nan:
        logits[rng.random(logits.shape) < 0.01] = np.nan
    case = {
        "predicts": np.full(b * n, -1, np.int32),
        "accept_index": np.full((b, s), -1, np.int32),
        "accept_token_num": np.zeros(b, np.int32),
        "candidates": candidates, "retrive_index": ridx, "retrive_next_token": nxt,
        "retrive_next_sibling": sib,
        "uniform_samples": rng.random((b, n), dtype=np.float32),
        "uniform_samples_for_final_sampling": rng.random(b, dtype=np.float32),
        "target_logits": logits, "temperatures": temps,
    }
    if top:
        case["top_k"] = np.where(rng.random(b) < 0.5, rng.integers(1, vocab + 1, b),
                                 0).astype(np.int32)
        case["top_p"] = np.where(rng.random(b) < 0.5, rng.uniform(0.2, 1, b),
                                 1).astype(np.float32)
    return case


def copy_case(case):
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in case.items()}


def per_request(case):
    b = case["accept_index"].shape[0]
    return np.concatenate([case["predicts"].reshape(b, -1)[:, :case["candidates"].shape[1]],
                           case["accept_index"], case["accept_token_num"][:, None]], axis=1)


def run(op, case, **kw):
    out = copy_case(case)
    op(**out, **kw)
    return out


def test_decisions_match_k6_on_float64_probabilities(sim_report):
    """>= 5,000 requests: the op against K6 (``tree_speculative_sampling_target_only``) on the
    float64 softmax rounded to float32, and against the float64 reference."""
    rng = np.random.default_rng(11)
    b, n, s, vocab = 5000, 8, 5, 48
    case = make_case(rng, b, n, s, vocab)
    ours = run(tree_speculative_sampling_from_logits, case)
    reference = run(tree_speculative_sampling_from_logits_reference, case)
    probs = np.stack([[reference_probabilities(case["target_logits"][r, i],
                                               float(case["temperatures"][r]))
                       for i in range(n)] for r in range(b)]).astype(np.float32)
    k6 = copy_case(case)
    del k6["target_logits"], k6["temperatures"]
    tree_speculative_sampling_target_only(**k6, target_probs=probs,
                                          draft_probs=np.zeros_like(probs))
    differ_k6 = (per_request(ours) != per_request(k6)).any(axis=1)
    differ_ref = (per_request(ours) != per_request(reference)).any(axis=1)
    accepted = float(ours["accept_token_num"].mean())
    sim_report(f"tree_verify decisions: {b - differ_k6.sum()} of {b} requests identical to K6 on "
               f"float64 probabilities, {b - differ_ref.sum()} to the float64 reference "
               f"(mean accepted {accepted:.2f})")
    assert accepted > 1  # the drafts do get accepted
    assert differ_k6.sum() <= 0.005 * b and differ_ref.sum() <= 0.005 * b
    for r in np.flatnonzero(differ_ref):
        assert _near_a_threshold(case, r), f"request {r} differs without a close coin"


def _near_a_threshold(case, r, tolerance=2e-6):
    """Whether a coin of request ``r`` lies within ``tolerance`` (relative) of the quantity
    it is compared with, in the float64 reference's traversal or final draw."""
    n = case["candidates"].shape[1]
    t = float(case["temperatures"][r])
    probs = [reference_probabilities(case["target_logits"][r, i], t) for i in range(n)]
    coins, final = case["uniform_samples"][r], float(case["uniform_samples_for_final_sampling"][r])
    for row in range(n):  # every comparison a traversal could make at this row
        acc = 0.0
        child = case["retrive_next_token"][r, row]
        while child != -1:
            acc += probs[row][case["candidates"][r, child]]
            if abs(float(coins[row]) - acc) <= tolerance * max(acc, 1e-30):
                return True
            child = case["retrive_next_sibling"][r, child]
        cdf = np.cumsum(probs[row])
        if np.min(np.abs(cdf - final * cdf[-1])) <= tolerance:
            return True
    return False


def test_greedy_requests_match_verify_tree_greedy():
    rng = np.random.default_rng(12)
    case = make_case(rng, 300, 8, 5, 40, greedy_fraction=1.0, nan=True)
    ours = run(tree_speculative_sampling_from_logits, case)
    argmax = np.where(np.isnan(case["target_logits"]), -np.inf,
                      case["target_logits"]).argmax(axis=-1).reshape(-1)
    greedy = copy_case(case)
    for name in ("uniform_samples", "uniform_samples_for_final_sampling", "target_logits",
                 "temperatures"):
        del greedy[name]
    verify_tree_greedy(**greedy, target_predict=argmax.astype(np.int64))
    for name in OUTPUTS:
        np.testing.assert_array_equal(ours[name], greedy[name])


def test_top_k_top_p_and_nan_requests_match_the_reference():
    rng = np.random.default_rng(13)
    case = make_case(rng, 1500, 8, 5, 32, greedy_fraction=0.1, top=True, nan=True)
    flags = np.zeros(1500, bool)
    ours = run(tree_speculative_sampling_from_logits, case, nan_flags=flags)
    reference = run(tree_speculative_sampling_from_logits_reference, case)
    differ = (per_request(ours) != per_request(reference)).any(axis=1)
    assert differ.sum() <= 0.005 * 1500
    assert flags.any() and not flags.all()


def test_rows_read_once_each_and_only_visited():
    rng = np.random.default_rng(14)
    case = make_case(rng, 400, 10, 6, 24, greedy_fraction=0.3)
    rows = []
    ours = run(tree_speculative_sampling_from_logits, case, rows_read=rows)
    accepted = ours["accept_token_num"]
    for r, read in enumerate(rows):
        nodes = ours["accept_index"][r, :accepted[r] + 1] - r * 10
        assert read == sorted(nodes.tolist())  # root and the accepted nodes' rows
    assert visited_rows(rows) == int((accepted + 1).sum())


def test_lfsr_variant_is_the_op_with_lfsr_coins():
    rng = np.random.default_rng(15)
    case = make_case(rng, 50, 6, 4, 16)
    seeds = rng.integers(0, 2**32, 50, dtype=np.int64)
    coins, final = lfsr_coins(seeds, 6)
    ours = run(tree_speculative_sampling_from_logits,
               {**case, "uniform_samples": coins, "uniform_samples_for_final_sampling": final})
    lfsr = copy_case(case)
    del lfsr["uniform_samples"], lfsr["uniform_samples_for_final_sampling"]
    draft_tree_reject_sample_from_logits(**lfsr, seeds=seeds)
    for name in OUTPUTS:
        np.testing.assert_array_equal(ours[name], lfsr[name])


def test_empty_batch_and_width_one():
    rng = np.random.default_rng(16)
    empty = run(tree_speculative_sampling_from_logits, make_case(rng, 0, 4, 3, 8))
    assert empty["predicts"].size == 0
    single = make_case(rng, 3, 1, 1, 1)
    out = run(tree_speculative_sampling_from_logits, single)
    assert out["predicts"].tolist() == [0, 0, 0] and out["accept_token_num"].tolist() == [0] * 3


@pytest.mark.parametrize(("change", "match"), [
    ({"temperatures": np.array([1, -1], np.float32)}, "temperatures"),
    ({"temperatures": np.array([1, np.nan], np.float32)}, "temperatures"),
    ({"temperatures": np.array([np.inf, 1], np.float32)}, "`temperatures` .* not inf"),
    ({"top_p": np.array([0.5, 1.5], np.float32)}, "top_p"),
    ({"top_k": np.array([1, 2], np.int64)}, "top_k"),
    ({"target_logits": np.zeros((2, 4, 8), np.float64)}, "target_logits"),
    ({"candidates": np.full((2, 4), 8, np.int64)}, "candidates"),
    ({"threshold_acc": 2.0}, "threshold_acc"),
    ({"nan_flags": np.zeros(3, bool)}, "nan_flags"),
    ({"rows_read": ()}, "`rows_read` must be a list"),
    ({"traces": {}}, "`traces` must be a list"),
])
def test_invalid_arguments_raise_before_any_write(change, match):
    case = make_case(np.random.default_rng(17), 2, 4, 3, 8)
    bad = {**copy_case(case), **change}
    with pytest.raises(ValueError, match=match):
        tree_speculative_sampling_from_logits(**bad)
    assert (bad["predicts"] == -1).all() and (bad["accept_index"] == -1).all()


# --- losslessness (chi-square) ----------------------------------------------------------------

LOSSLESS_TEMPERATURE = F32(0.8)


def run_lossless(trials, seed, *, top_p=1.0, squash=False):
    """``trials`` requests on K6's fixed lossless tree with LFSR coins (squared when
    ``squash``: a biased sampler) and fixed logits rows: the chi-square p-values of the first
    token and of the second token given each root child (``lossless_pvalues``)."""
    rows = np.random.default_rng(20240602).standard_normal((LOSSLESS_N, LOSSLESS_V)) * 0.5
    rows = rows.astype(np.float32)
    case = lossless_tree(trials, seed)
    coins, final = lfsr_coins(case.pop("seeds"), LOSSLESS_N)
    tree_speculative_sampling_from_logits(
        **case, uniform_samples=coins * coins if squash else coins,
        uniform_samples_for_final_sampling=final,
        target_logits=np.ascontiguousarray(np.broadcast_to(rows, (trials, *rows.shape))),
        temperatures=np.full(trials, LOSSLESS_TEMPERATURE, np.float32),
        top_p=np.full(trials, top_p, np.float32))
    return lossless_pvalues(case, [reference_probabilities(row, float(LOSSLESS_TEMPERATURE),
                                                           0, top_p) for row in rows])


@pytest.mark.parametrize("trials", [30_000, pytest.param(100_000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_lossless(trials, top_p, sim_report):
    pvalues = run_lossless(trials, trials + 5, top_p=top_p)
    sim_report(f"tree_verify lossless ({trials:,} trials, top_p {top_p}): p = "
               + ", ".join(f"{k} {v:.3f}" for k, v in pvalues.items()))
    assert all(p > 0.001 for p in pvalues.values()), pvalues


def test_biased_sampler_fails_the_chi_square(sim_report):
    pvalues = run_lossless(20_000, 7, squash=True)
    sim_report(f"tree_verify biased (coins squared, 20,000 trials): first-token p = "
               f"{pvalues['first']:.1e}")
    assert pvalues["first"] < 0.001, pvalues
