"""K3 ``calculate_work_deltas`` and the width policy: directed cases, exact-arithmetic property."""

from fractions import Fraction

import numpy as np
import pytest

from golden.work_deltas import calculate_work_deltas, width_policy

F32 = np.float32


def work_rows(rows, k, maxv, fill=-123.0):
    """[B, MAXV+K] work_scores with each row's prefix given by ``rows`` (A then C)."""
    out = np.full((len(rows), maxv + k), fill, F32)
    for b, row in enumerate(rows):
        out[b, : len(row)] = row
    return out


def run(work_scores, k, cumu_count, verify_num, maxv, b=None):
    """Call K3 with a garbage-filled output buffer and return it."""
    deltas = np.full(k + 1, np.nan, F32)
    b = work_scores.shape[0] if b is None else b
    assert calculate_work_deltas(work_scores, deltas, b, k, cumu_count, verify_num, maxv) is None
    return deltas


def dyadic_desc(rng, size, denominator=1024):
    """Descending multiples of 2**-10 in [0, 1] (exact in float32 and in sums below)."""
    return np.sort(rng.integers(0, denominator + 1, size))[::-1] / denominator


# --- directed -------------------------------------------------------------------------------


def test_empty_set_every_new_node_enters_free():
    c = [0.5, 0.25, 0.125, 0.0625]
    deltas = run(work_rows([c], 4, 8), 4, cumu_count=0, verify_num=8, maxv=8)
    assert deltas.tolist() == [0.0, 0.5, 0.75, 0.875, 0.9375]


def test_free_slots_then_displacement_then_nothing():
    # v = 4, A = [0.875, 0.5, 0.3125] (ws0 = 3): node 1 enters free, node 2 displaces
    # 0.3125, node 3 (0.375) is not above A[1] = 0.5, node 4 neither.
    row = [0.875, 0.5, 0.3125, 0.75, 0.625, 0.375, 0.25]
    deltas = run(work_rows([row], 4, 8), 4, cumu_count=3, verify_num=4, maxv=8)
    assert deltas.tolist() == [0.0, 0.75, 1.0625, 1.0625, 1.0625]


def test_full_set_full_displacement():
    a = [0.25, 0.125, 0.0625]  # ws0 = v = 3
    c = [1.0, 0.75, 0.5]
    deltas = run(work_rows([a + c], 3, 8), 3, cumu_count=10, verify_num=3, maxv=8)
    assert deltas.tolist() == [0.0, 1.0 - 0.0625, 1.0 - 0.0625 + 0.75 - 0.125,
                               1.0 - 0.0625 + 0.75 - 0.125 + 0.5 - 0.25]


def test_full_set_no_displacement_and_ties_do_not_displace():
    a = [0.9, 0.5, 0.25]
    c = [0.25, 0.125, 0.0]  # equal to A[-1] does not displace (strict >)
    deltas = run(work_rows([a + c], 3, 8), 3, cumu_count=3, verify_num=3, maxv=8)
    assert deltas.view(np.uint32).tolist() == [0, 0, 0, 0]  # all +0.0


def test_requests_summed_in_ascending_b_with_float32_adds():
    # D_0 = 1, D_1 = D_2 = 2**-24: (1 + 2**-24) + 2**-24 rounds to 1 twice (ties to even);
    # summing in another order or in float64 would give 1 + 2**-23.
    tiny = 2.0**-24
    rows = [[1.0], [tiny], [tiny]]
    deltas = run(work_rows(rows, 1, 4), 1, cumu_count=0, verify_num=4, maxv=4)
    assert deltas.tolist() == [0.0, 1.0]
    reverse = run(work_rows(rows[::-1], 1, 4), 1, cumu_count=0, verify_num=4, maxv=4)
    assert reverse.tolist() == [0.0, 1.0 + 2.0**-23]


def test_per_request_running_sum_is_float32():
    tiny = 2.0**-24
    deltas = run(work_rows([[1.0, tiny, tiny]], 3, 4), 3, cumu_count=0, verify_num=4, maxv=4)
    assert deltas.tolist() == [0.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize(("verify_num", "expected"), [(0, [0.0, 0.0, 0.0]), (-3, [0.0, 0.0, 0.0]),
                                                      (100, [0.0, 0.5, 0.75])])
def test_verify_num_is_clamped(verify_num, expected):
    # v = 1 (clamped from below): the root 1.0 fills the set and is never displaced.
    # v = MAXV = 4 (clamped from above): A = [1.0] plus both new nodes fit.
    deltas = run(work_rows([[1.0, 0.5, 0.25]], 2, 4), 2, cumu_count=1, verify_num=verify_num,
                 maxv=4)
    assert deltas.tolist() == expected


def test_batch_size_zero_gives_zeros():
    deltas = run(np.zeros((0, 12), F32), 4, cumu_count=3, verify_num=8, maxv=8)
    assert deltas.view(np.uint32).tolist() == [0] * 5


def test_flat_work_scores_accepted():
    rows = work_rows([[0.5, 0.25], [0.75, 0.125]], 2, 4)
    shaped = run(rows, 2, cumu_count=0, verify_num=4, maxv=4)
    flat = run(rows.reshape(-1), 2, cumu_count=0, verify_num=4, maxv=4, b=2)
    assert shaped.tolist() == flat.tolist() == [0.0, 1.25, 1.625]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"node_top_k": 0}, "`node_top_k` must be between 1 and 16, not 0"),
        ({"cumu_count": -1}, "`cumu_count` must be at least 0, not -1"),
        ({"max_verify_num": 0}, "`max_verify_num` must be at least 1, not 0"),
        ({"work_deltas": np.zeros(4, np.float64)}, "`work_deltas` must have dtype float32"),
        ({"work_deltas": np.zeros(3, F32)}, "`work_deltas` must have 4 elements"),
        ({"work_scores": np.zeros((2, 10), F32)}, "`work_scores` must have 22 elements"),
    ],
)
def test_invalid_arguments(args, message):
    call = {"work_scores": np.zeros((2, 11), F32), "work_deltas": np.zeros(4, F32),
            "batch_size": 2, "node_top_k": 3, "cumu_count": 2, "verify_num": 4,
            "max_verify_num": 8}
    call.update(args)
    with pytest.raises(ValueError, match=message):
        calculate_work_deltas(**call)


# --- property: exact arithmetic equals the brute-force gain ---------------------------------


def brute_force_gains(rows, k, cumu_count, verify_num, maxv):
    """Sum over requests of (top-v sum of A + C[:w]) - (sum of A), in exact fractions."""
    v = min(max(verify_num, 1), maxv)
    ws0 = min(v, cumu_count)
    gains = [Fraction(0)] * (k + 1)
    for row in rows:
        a = [Fraction(float(x)) for x in row[:ws0]]
        c = [Fraction(float(x)) for x in row[ws0 : ws0 + k]]
        for w in range(k + 1):
            best = sorted(a + c[:w], reverse=True)[:v]
            gains[w] += sum(best) - sum(a)
    return gains


@pytest.mark.parametrize("seed", range(60))
def test_gain_equals_brute_force_top_v_sum(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 17))
    maxv = int(rng.integers(1, 65))
    b = int(rng.integers(1, 5))
    verify_num = int(rng.integers(-1, maxv + 3))
    v = min(max(verify_num, 1), maxv)
    # Cover ws0 = 0, ws0 = v and everything between.
    cumu_count = int(rng.choice([0, v, 10 * v, int(rng.integers(0, v + 1))]))
    ws0 = min(v, cumu_count)
    rows = []
    for _ in range(b):
        a = dyadic_desc(rng, ws0)
        c = dyadic_desc(rng, k)
        if rng.random() < 0.3:  # all new nodes above all old ones: full displacement
            a = a / 4
            c = 0.5 + c / 2
        rows.append(np.concatenate([a, c]))
    work = work_rows(rows, k, maxv)
    deltas = run(work, k, cumu_count, verify_num, maxv)
    assert [Fraction(float(x)) for x in deltas] == brute_force_gains(
        rows, k, cumu_count, verify_num, maxv
    )


# --- width policy ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cost", "expected"), [(0.0, 3), (0.25, 2), (0.3, 1), (0.5, 1), (0.6, 0), (10.0, 0)]
)
def test_width_policy_examples(cost, expected):
    deltas = np.array([0.0, 0.5, 0.75, 0.75], F32)  # marginals 0.5, 0.25, 0
    assert width_policy(deltas, 3, 1, cost) == expected


def test_width_policy_scales_cost_by_batch():
    deltas = np.array([0.0, 1.0, 1.5, 1.75], F32)  # marginals 1, 0.5, 0.25 over B = 4
    assert width_policy(deltas, 3, 4, 0.125) == 2  # threshold 0.5
    assert width_policy(deltas, 3, 4, 0.0625) == 3  # threshold 0.25
    assert width_policy(deltas, 3, 4, 0.3) == 0  # threshold 1.2


def test_width_policy_takes_the_largest_passing_width():
    deltas = np.array([0.0, 0.125, 0.625], F32)  # marginals 0.125, 0.5: w=1 fails, w=2 passes
    assert width_policy(deltas, 2, 1, 0.25) == 2


def test_width_policy_threshold_is_a_rounded_float32_product():
    # Find (cost, B) whose float32 product rounds *down*; a marginal equal to that rounded
    # product passes, although it is below the exact product cost * B.
    for cost in (0.1, 0.3, 0.7, 0.01, 0.013):
        c32 = F32(cost)
        for b in range(3, 64):
            t32 = F32(c32 * F32(b))
            if Fraction(float(t32)) < Fraction(float(c32)) * b:
                break
        else:
            continue
        break
    else:
        pytest.fail("no rounding-down product found")
    passing = np.array([0.0, t32], F32)
    failing = np.array([0.0, np.nextafter(t32, F32(0))], F32)
    assert width_policy(passing, 1, b, cost) == 1
    assert width_policy(failing, 1, b, cost) == 0


def test_width_policy_marginal_is_a_float32_subtraction():
    # 1.0 - 2**-30 rounds to 1.0 in float32, so marginal(2) meets a threshold of 1.0; the
    # exact (or float64) difference would not.
    deltas = np.array([0.0, 2.0**-30, 1.0], F32)
    assert width_policy(deltas, 2, 1, 1.0) == 2


def test_width_policy_validation():
    with pytest.raises(ValueError, match="`work_deltas` must have 4 elements"):
        width_policy(np.zeros(3, F32), 3, 1)
    with pytest.raises(ValueError, match="`batch_size` must be at least 0, not -1"):
        width_policy(np.zeros(4, F32), 3, -1)
