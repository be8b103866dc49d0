"""K6 goldens (docs/kernels.md §8): tree sampling, greedy verify, LFSR coins, losslessness."""

import math

import numpy as np
import pytest

import golden.reject_sample as reject_sample
from golden.lfsr import GaloisLFSR32Model
from golden.reject_sample import (
    draft_tree_reject_sample,
    lfsr_coins,
    tree_speculative_sampling_target_only,
    verify_tree_greedy,
)

F32 = np.float32


# --- helpers ----------------------------------------------------------------------------------


def random_tree(rng, b, n):
    """SGLang-format links of ``b`` random trees of ``n`` positions (children by position)."""
    nxt = np.full((b, n), -1, np.int64)
    sib = np.full((b, n), -1, np.int64)
    for req in range(b):
        last_child = {}
        for i in range(1, n):
            parent = int(rng.integers(0, i))
            if parent in last_child:
                sib[req, last_child[parent]] = i
            else:
                nxt[req, parent] = i
            last_child[parent] = i
    ridx = np.arange(b * n, dtype=np.int64).reshape(b, n)
    return ridx, nxt, sib


def random_probs(rng, shape):
    """float32 probability rows with exact zeros and dyadic values mixed in."""
    p = rng.random(shape) ** 3
    p[rng.random(shape) < 0.2] = 0.0
    p = p / np.maximum(p.sum(axis=-1, keepdims=True), 1e-30)
    dyadic = rng.random(shape[:-1]) < 0.3
    p[dyadic] = np.round(p[dyadic] * 8) / 8
    return p.astype(np.float32)


def make_case(rng, b, n, s, vocab, *, coin_kind="random"):
    ridx, nxt, sib = random_tree(rng, b, n)
    target = random_probs(rng, (b, n, vocab))
    candidates = rng.integers(0, vocab, size=(b, n), dtype=np.int64)
    # Coins equal to accumulated probabilities, 0 and 1 exercise the <= edge.
    coins = rng.random((b, n), dtype=np.float32)
    if coin_kind == "edges":
        pick = rng.random((b, n))
        coins[pick < 0.3] = rng.choice(target.reshape(-1), size=int((pick < 0.3).sum()))
        coins[pick > 0.9] = 0.0
        coins[(pick > 0.8) & (pick <= 0.9)] = 1.0
    return {
        "predicts": np.full(b * n, -1, np.int32),
        "accept_index": np.full((b, s), -1, np.int32),
        "accept_token_num": np.full(b, -7, np.int32),
        "candidates": candidates,
        "retrive_index": ridx,
        "retrive_next_token": nxt,
        "retrive_next_sibling": sib,
        "uniform_samples": coins,
        "uniform_samples_for_final_sampling": rng.random(b, dtype=np.float32),
        "target_probs": target,
        "draft_probs": np.zeros_like(target),
    }


SAMPLING_ARGS = (
    "predicts", "accept_index", "accept_token_num", "candidates", "retrive_index",
    "retrive_next_token", "retrive_next_sibling", "uniform_samples",
    "uniform_samples_for_final_sampling", "target_probs", "draft_probs",
)
OUTPUTS = ("predicts", "accept_index", "accept_token_num", "draft_probs")


def call_sampling(case, **kw):
    tree_speculative_sampling_target_only(*(case[name] for name in SAMPLING_ARGS), **kw)


def copy_case(case):
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in case.items()}


def assert_same(actual, expected, name=""):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, name
    if actual.dtype == np.float32:
        actual, expected = actual.view(np.uint32), expected.view(np.uint32)
    np.testing.assert_array_equal(actual, expected, err_msg=name)


def reference_sampling(case, threshold_single=1.0, threshold_acc=1.0):
    """The §8 pseudo-code, transcribed literally (in place, float32 scalars, plain loops)."""
    pred, acc_idx, acc_num = case["predicts"], case["accept_index"], case["accept_token_num"]
    cand, ridx = case["candidates"], case["retrive_index"]
    nxt, sib = case["retrive_next_token"], case["retrive_next_sibling"]
    coins, coins_final = case["uniform_samples"], case["uniform_samples_for_final_sampling"]
    b_count, n = cand.shape
    s = acc_idx.shape[1]
    vocab = case["target_probs"].shape[-1]
    target = case["target_probs"].reshape(b_count * n, vocab)
    draft = case["draft_probs"].reshape(b_count * n, vocab)
    t_single = F32(threshold_single)
    t_acc = F32(max(float(F32(threshold_acc)), 1e-9))
    for b in range(b_count):
        prob_acc = F32(0)
        row = b * n
        coin = coins[b, 0]
        last = ridx[b, 0]
        acc_idx[b, 0] = last
        accepted = 0
        cur = 0
        for _step in range(1, s):
            cur = nxt[b, cur]
            while cur != -1:
                tok = cand[b, cur]
                q = target[row, tok]
                prob_acc = F32(prob_acc + q)
                if q > 0 and (coin <= F32(prob_acc / t_acc) or q >= t_single):
                    prob_acc = F32(0)
                    row = b * n + cur
                    coin = coins[b, cur]
                    pred[last] = tok
                    accepted += 1
                    acc_idx[b, accepted] = ridx[b, cur]
                    last = ridx[b, cur]
                    break
                draft[row, tok] = q
                cur = sib[b, cur]
            if cur == -1:
                break
        acc_num[b] = accepted
        r = []
        for j in range(vocab):
            sub = F32(0) if accepted == s - 1 else draft[row, j]
            diff = F32(target[row, j] - sub)
            r.append(diff if diff > 0 else F32(0))
        total = F32(0)
        for x in r:
            total = F32(total + x)
        u = F32(coins_final[b] * total)
        pick, prefix = None, F32(0)
        for j, x in enumerate(r):
            prefix = F32(prefix + x)
            if x > 0 and prefix > u:
                pick = j
                break
        if pick is None:
            positive = [j for j, x in enumerate(r) if x > 0]
            pick = positive[-1] if positive else vocab - 1
        pred[last] = pick


def reference_greedy(case, target_predict):
    pred, acc_idx, acc_num = case["predicts"], case["accept_index"], case["accept_token_num"]
    cand, ridx = case["candidates"], case["retrive_index"]
    nxt, sib = case["retrive_next_token"], case["retrive_next_sibling"]
    b_count, n = cand.shape
    s = acc_idx.shape[1]
    for b in range(b_count):
        last = ridx[b, 0]
        acc_idx[b, 0] = last
        accepted = 0
        cur = 0
        for _step in range(1, s):
            cur = nxt[b, cur]
            while cur != -1:
                if cand[b, cur] == target_predict[last]:
                    pred[last] = target_predict[last]
                    accepted += 1
                    acc_idx[b, accepted] = ridx[b, cur]
                    last = ridx[b, cur]
                    break
                cur = sib[b, cur]
            if cur == -1:
                break
        acc_num[b] = accepted
        pred[last] = target_predict[last]


# --- bit-exact behaviour ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "b", "n", "s", "vocab", "thresholds", "coin_kind"),
    [
        (1, 6, 8, 4, 16, (1.0, 1.0), "random"),
        (2, 5, 12, 6, 5, (1.0, 1.0), "edges"),
        (3, 4, 10, 3, 32, (0.3, 0.7), "random"),
        (4, 4, 9, 9, 4, (0.0, 0.0), "edges"),
        (5, 3, 16, 2, 64, (0.5, 0.25), "random"),
        (6, 3, 1, 1, 7, (1.0, 1.0), "random"),
    ],
)
def test_matches_literal_pseudo_code(seed, b, n, s, vocab, thresholds, coin_kind):
    rng = np.random.default_rng(seed)
    for _ in range(3):
        case = make_case(rng, b, n, s, vocab, coin_kind=coin_kind)
        expected = copy_case(case)
        reference_sampling(expected, *thresholds)
        call_sampling(case, threshold_single=thresholds[0], threshold_acc=thresholds[1])
        for name in OUTPUTS:
            assert_same(case[name], expected[name], name)


def hand_case():
    """Root -> {1: token 2, 2: token 0}; 1 -> {3: token 3}. V = 4, S = 3."""
    target = np.array(
        [[[0.25, 0.125, 0.5, 0.125],
          [0.5, 0.25, 0.125, 0.125],
          [0.125, 0.375, 0.25, 0.25],
          [0.0, 0.0, 0.5, 0.5]]], np.float32)
    return {
        "predicts": np.full(4, -1, np.int32),
        "accept_index": np.full((1, 3), -1, np.int32),
        "accept_token_num": np.full(1, -1, np.int32),
        "candidates": np.array([[9, 2, 0, 3]], np.int64) % 4,
        "retrive_index": np.arange(4, dtype=np.int64)[None],
        "retrive_next_token": np.array([[1, 3, -1, -1]], np.int64),
        "retrive_next_sibling": np.array([[-1, 2, -1, -1]], np.int64),
        "uniform_samples": np.zeros((1, 4), np.float32),
        "uniform_samples_for_final_sampling": np.zeros(1, np.float32),
        "target_probs": target,
        "draft_probs": np.zeros_like(target),
    }


@pytest.mark.parametrize(
    ("coins", "final", "predicts", "accept_index", "accepted", "draft_entries"),
    [
        # Reject 1 (0.75 > 0.5, q[2] = 0.5 -> draft), accept 2 (0.75 <= 0.5 + 0.25); node 2
        # is a leaf; bonus from row 2: u = 0.5, prefix [.125, .5, .75, 1] -> token 2.
        ([0.75, 0, 0, 0], 0.5, [0, -1, 2, -1], [0, 2, -1], 1, [((0, 2), 0.5)]),
        # Accept 1; reject 3 (0.9 > 0.125); residual row 1 minus q[3]: [.5, .25, .125, 0],
        # u = 0.5 * 0.875 -> token 0.
        ([0.25, 0.9, 0, 0], 0.5, [2, 0, -1, -1], [0, 1, -1], 1, [((1, 3), 0.125)]),
        # Accept 1 then 3 (S - 1 accepted): plain row 3, u = 0.99 -> last token 3.
        ([0.25, 0.1, 0, 0], 0.99, [2, 3, -1, 3], [0, 1, 3], 2, []),
        # Reject both children: residual row 0 minus {2: .5, 0: .25} = [0, .125, 0, .125];
        # u = 0.5 * 0.25 = 0.125: prefix[1] = 0.125 is not > u -> token 3.
        ([0.99, 0, 0, 0], 0.5, [3, -1, -1, -1], [0, -1, -1], 0, [((0, 2), 0.5), ((0, 0), 0.25)]),
    ],
)
def test_hand_worked_tree(coins, final, predicts, accept_index, accepted, draft_entries):
    case = hand_case()
    case["uniform_samples"][0] = coins
    case["uniform_samples_for_final_sampling"][0] = final
    call_sampling(case)
    assert case["predicts"].tolist() == predicts
    assert case["accept_index"].tolist() == [accept_index]
    assert case["accept_token_num"].tolist() == [accepted]
    expected_draft = np.zeros_like(case["draft_probs"])
    for (row, tok), q in draft_entries:
        expected_draft[0, row, tok] = q
    assert_same(case["draft_probs"], expected_draft)


def test_thresholds():
    case = hand_case()
    case["uniform_samples"][0] = [0.99, 0.99, 0.99, 0.99]
    call_sampling(case, threshold_single=0.5)  # q = 0.5 at node 1 >= 0.5: accepted outright
    assert case["accept_index"].tolist() == [[0, 1, -1]]

    case = hand_case()
    case["uniform_samples"][0] = [0.99, 0.99, 0.99, 0.99]
    call_sampling(case, threshold_acc=0.5)  # 0.5 / 0.5 = 1 >= 0.99
    assert case["accept_index"].tolist() == [[0, 1, -1]]

    case = hand_case()
    case["uniform_samples"][0] = [0.99, 0.99, 0.99, 0.99]
    case["target_probs"][0, 0] = [0.0, 0.0, 1e-12, 1.0]
    call_sampling(case, threshold_acc=0.0)  # 1e-12 / 1e-9 = 1e-3 < 0.99: rejected
    assert case["accept_index"].tolist() == [[0, -1, -1]]
    assert case["predicts"][0] == 3


def test_residual_fallbacks():
    # All-zero residual (both draft tokens rejected with q = 0): V - 1.
    case = hand_case()
    case["uniform_samples"][0] = [0.99, 0.99, 0.99, 0.99]
    case["target_probs"][0, 0] = [0.0, 0.0, 0.0, 0.0]
    call_sampling(case)
    assert case["predicts"][0] == 3 and case["accept_token_num"][0] == 0
    # Coin 1.0: u = sum(r), no prefix exceeds it: the last positive entry, not V - 1.
    case = hand_case()
    case["uniform_samples"][0] = [0.25, 0.1, 0, 0]
    case["target_probs"][0, 3] = [0.0, 0.5, 0.5, 0.0]
    case["uniform_samples_for_final_sampling"][0] = 1.0
    call_sampling(case)
    assert case["accept_token_num"][0] == 2 and case["predicts"][3] == 2
    # Just below 1 the search still hits (u < sum(r) for every coin < 1).
    case["predicts"][:] = -1
    case["uniform_samples_for_final_sampling"][0] = np.nextafter(F32(1), F32(0))
    case["draft_probs"][:] = 0
    call_sampling(case)
    assert case["predicts"][3] == 2


def test_predicts_with_sglang_spare_element_and_shapes():
    rng = np.random.default_rng(11)
    case = make_case(rng, 3, 6, 4, 9)
    expected = copy_case(case)
    reference_sampling(expected)
    case["predicts"] = np.full(3 * 6 + 1, -1, np.int32)
    case["target_probs"] = case["target_probs"].reshape(18, 9)
    case["draft_probs"] = case["draft_probs"].reshape(18, 9)
    call_sampling(case)
    assert case["predicts"][-1] == -1
    assert_same(case["predicts"][:-1], expected["predicts"])
    assert_same(case["draft_probs"].reshape(3, 6, 9), expected["draft_probs"])


def test_empty_batch_is_a_no_op():
    """B = 0 writes nothing: with SGLang's ``B * n + 1`` predicts (one spare entry) every
    array, the spare included, is as before; the greedy variant too."""
    case = make_case(np.random.default_rng(0), 0, 4, 3, 5)
    case["predicts"] = np.full(1, -1, np.int32)
    before = copy_case(case)
    assert call_sampling(case) is None
    for name in SAMPLING_ARGS:
        assert_same(case[name], before[name], name)
    verify_tree_greedy(case["predicts"], case["accept_index"], case["accept_token_num"],
                       case["candidates"], case["retrive_index"], case["retrive_next_token"],
                       case["retrive_next_sibling"], np.zeros(0, np.int64))
    for name in SAMPLING_ARGS:
        assert_same(case[name], before[name], name)


def _bad(name, value):
    def mutate(case):
        case[name] = value(case) if callable(value) else value
    return mutate


INVALID = [
    ("predicts dtype", _bad("predicts", lambda c: c["predicts"].astype(np.int64)), "predicts"),
    ("predicts size", _bad("predicts", lambda c: c["predicts"][:-1]), "predicts"),
    ("accept_index 1-D", _bad("accept_index", lambda c: c["accept_index"][:, 0]), "accept_index"),
    ("accept_token_num dtype", _bad("accept_token_num",
                                    lambda c: c["accept_token_num"].astype(np.int64)),
     "accept_token_num"),
    ("candidates dtype", _bad("candidates", lambda c: c["candidates"].astype(np.int32)),
     "candidates"),
    ("candidates range", _bad("candidates", lambda c: c["candidates"] + 100), "candidates"),
    ("retrive_index range", _bad("retrive_index", lambda c: c["retrive_index"] - 1),
     "retrive_index"),
    ("next_token range", _bad("retrive_next_token", lambda c: c["retrive_next_token"] * 0 + 99),
     "retrive_next_token"),
    ("sibling range", _bad("retrive_next_sibling", lambda c: c["retrive_next_sibling"] - 1),
     "retrive_next_sibling"),
    ("coins dtype", _bad("uniform_samples", lambda c: c["uniform_samples"].astype(np.float64)),
     "uniform_samples"),
    ("final coins shape", _bad("uniform_samples_for_final_sampling",
                               lambda c: c["uniform_samples_for_final_sampling"][:1]),
     "uniform_samples_for_final_sampling"),
    ("target NaN", _bad("target_probs",
                        lambda c: np.where(c["target_probs"] >= 0, np.nan, 0).astype(F32)),
     "NaN"),
    ("draft not zero", _bad("draft_probs", lambda c: c["draft_probs"] + F32(0.5)), "zero"),
    ("draft read-only", _bad("draft_probs",
                             lambda c: np.lib.stride_tricks.as_strided(c["draft_probs"],
                                                                       writeable=False)),
     "draft_probs"),
    ("target shape", _bad("target_probs", lambda c: c["target_probs"][:, :2]), "target_probs"),
]


@pytest.mark.parametrize(("label", "mutate", "match"), INVALID, ids=[i[0] for i in INVALID])
def test_invalid_arguments_raise_before_any_write(label, mutate, match):
    case = make_case(np.random.default_rng(9), 3, 5, 3, 6)
    mutate(case)
    before = copy_case(case)
    with pytest.raises(ValueError, match=match):
        call_sampling(case)
    for name in OUTPUTS:
        np.testing.assert_array_equal(case[name], before[name])


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"threshold_single": 1.5}, "threshold_single"), ({"threshold_acc": -0.1}, "threshold_acc"),
     ({"threshold_acc": True}, "threshold_acc"), ({"deterministic": 1}, "deterministic")],
)
def test_invalid_scalars(kw, match):
    case = make_case(np.random.default_rng(9), 2, 5, 3, 6)
    with pytest.raises(ValueError, match=match):
        call_sampling(case, **kw)


def test_sibling_cycle_raises_before_any_write():
    case = make_case(np.random.default_rng(10), 3, 6, 4, 8)
    case["retrive_next_token"][2] = [1, -1, -1, -1, -1, -1]
    case["retrive_next_sibling"][2] = [-1, 2, 1, -1, -1, -1]  # 1 -> 2 -> 1 -> ...
    case["target_probs"][2] = 0.0  # never accepted
    case["uniform_samples"][2] = 0.5
    before = copy_case(case)
    with pytest.raises(ValueError, match="cycle"):
        call_sampling(case)
    for name in OUTPUTS:
        np.testing.assert_array_equal(case[name], before[name])


# --- greedy -----------------------------------------------------------------------------------


GREEDY_ARGS = SAMPLING_ARGS[:7]


def call_greedy(case, target_predict):
    verify_tree_greedy(*(case[name] for name in GREEDY_ARGS), target_predict)


def test_greedy_hand_worked():
    case = hand_case()
    call_greedy(case, np.array([2, 3, 1, 0], np.int64))  # accept 1 (token 2), then 3 (token 3)
    assert case["predicts"].tolist() == [2, 3, -1, 0]
    assert case["accept_index"].tolist() == [[0, 1, 3]]
    assert case["accept_token_num"].tolist() == [2]
    case = hand_case()
    call_greedy(case, np.array([[0, 3, 1, 0]], np.int64))  # node 2 (token 0); leaf
    assert case["predicts"].tolist() == [0, -1, 1, -1]
    assert case["accept_index"].tolist() == [[0, 2, -1]]
    case = hand_case()
    call_greedy(case, np.array([1, 3, 1, 0], np.int64))  # nothing matches: bonus only
    assert case["predicts"].tolist() == [1, -1, -1, -1]
    assert case["accept_token_num"].tolist() == [0]


@pytest.mark.parametrize(("seed", "b", "n", "s", "vocab"),
                         [(1, 8, 10, 5, 3), (2, 4, 16, 3, 2), (3, 5, 7, 7, 4)])
def test_greedy_matches_literal_pseudo_code(seed, b, n, s, vocab):
    rng = np.random.default_rng(seed)
    case = make_case(rng, b, n, s, vocab)
    target_predict = rng.integers(0, vocab, size=(b, n), dtype=np.int64)
    expected = copy_case(case)
    reference_greedy(expected, target_predict.reshape(-1))
    call_greedy(case, target_predict)
    for name in OUTPUTS[:3]:
        assert_same(case[name], expected[name], name)


def test_greedy_invalid_arguments():
    case = make_case(np.random.default_rng(3), 2, 4, 3, 5)
    before = copy_case(case)
    with pytest.raises(ValueError, match="target_predict"):
        call_greedy(case, np.zeros(8, np.int32))
    with pytest.raises(ValueError, match="target_predict"):
        call_greedy(case, np.full(8, 2**31, np.int64))
    with pytest.raises(ValueError, match="target_predict"):
        call_greedy(case, np.zeros(7, np.int64))
    for name in OUTPUTS:
        np.testing.assert_array_equal(case[name], before[name])


# --- LFSR coins -------------------------------------------------------------------------------


def test_lfsr_coins_are_the_generator_draws():
    seeds = np.array([0, 1, 77, 2**32 - 1], np.uint32)
    coins, final = lfsr_coins(seeds, 5)
    assert coins.shape == (4, 5) and final.shape == (4,)
    for row, seed in enumerate(seeds.tolist()):
        draws = GaloisLFSR32Model.model_coins(seed, 6)
        assert_same(coins[row], draws[:5])
        assert_same(final[row], draws[5])


def test_draft_tree_reject_sample_is_target_only_with_lfsr_coins():
    rng = np.random.default_rng(21)
    case = make_case(rng, 6, 9, 4, 12)
    seeds = rng.integers(0, 2**32, size=6, dtype=np.int64)
    expected = copy_case(case)
    expected["uniform_samples"], expected["uniform_samples_for_final_sampling"] = lfsr_coins(
        seeds, 9)
    reference_sampling(expected)
    draft_tree_reject_sample(*(case[name] for name in SAMPLING_ARGS[:7]), seeds,
                             case["target_probs"], case["draft_probs"])
    for name in OUTPUTS:
        assert_same(case[name], expected[name], name)
    with pytest.raises(ValueError, match="seeds"):
        draft_tree_reject_sample(*(case[name] for name in SAMPLING_ARGS[:7]), seeds[:3],
                                 case["target_probs"], case["draft_probs"])
    with pytest.raises(ValueError, match="seeds"):
        draft_tree_reject_sample(*(case[name] for name in SAMPLING_ARGS[:7]), seeds + 2**32,
                                 case["target_probs"], case["draft_probs"])


# --- losslessness (chi-square) ----------------------------------------------------------------


def chi2_sf(stat: float, df: int) -> float:
    """Upper tail of the chi-square distribution: regularised gamma Q(df/2, stat/2)."""
    a, x = df / 2.0, stat / 2.0
    if x <= 0:
        return 1.0
    log_prefix = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # series for P(a, x)
        term = total = 1.0 / a
        ap = a
        for _ in range(100_000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    tiny = 1e-300  # continued fraction for Q(a, x), modified Lentz
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 100_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-16:
            break
    return math.exp(log_prefix) * h


@pytest.mark.parametrize(
    ("stat", "df", "expected"),
    [(3.841458820694124, 1, 0.05), (10.827566170662733, 1, 0.001), (2.0, 2, math.exp(-1)),
     (18.307038053275146, 10, 0.05), (0.0, 4, 1.0), (124.34211340400408, 100, 0.05),
     (1.0, 30, 1.0 - 1.6e-20)],
)
def test_chi2_sf(stat, df, expected):
    assert chi2_sf(stat, df) == pytest.approx(expected, rel=1e-9, abs=1e-15)


def chi2_pvalue(observed, probs):
    """p-value of counts ``observed`` against the distribution ``probs`` (zero cells must be
    empty; they are left out of the statistic)."""
    observed = np.asarray(observed, np.float64)
    probs = np.asarray(probs, np.float64) / np.sum(probs, dtype=np.float64)
    zero = probs == 0
    if observed[zero].any():
        return 0.0
    expected = observed.sum() * probs[~zero]
    assert expected.min() >= 5, "cells too small for the chi-square approximation"
    stat = float((((observed[~zero] - expected) ** 2) / expected).sum())
    return chi2_sf(stat, int((~zero).sum()) - 1)


# Fixed tree: root -> 1, 2, 3; 1 -> 4, 5; 2 -> 6. Distinct tokens among siblings.
LOSSLESS_N, LOSSLESS_V, LOSSLESS_S = 7, 8, 3
LOSSLESS_NEXT = [1, 4, 6, -1, -1, -1, -1]
LOSSLESS_SIBLING = [-1, 2, 3, -1, 5, -1, -1]
LOSSLESS_TOKENS = [0, 2, 5, 0, 1, 2, 7]
ROOT_CHILDREN = (1, 2, 3)


def lossless_tree(trials, seed):
    """``trials`` requests on the fixed tree (outputs, tree arrays and distinct per-trial LFSR
    ``seeds`` in random order), for any sampler of the tree."""
    n = LOSSLESS_N
    case = {
        "predicts": np.full(trials * n, -1, np.int32),
        "accept_index": np.full((trials, LOSSLESS_S), -1, np.int32),
        "accept_token_num": np.zeros(trials, np.int32),
        "candidates": np.tile(np.array(LOSSLESS_TOKENS, np.int64), (trials, 1)),
        "retrive_index": np.arange(trials * n, dtype=np.int64).reshape(trials, n),
        "retrive_next_token": np.tile(np.array(LOSSLESS_NEXT, np.int64), (trials, 1)),
        "retrive_next_sibling": np.tile(np.array(LOSSLESS_SIBLING, np.int64), (trials, 1)),
    }
    seeds = np.random.default_rng(seed).integers(1, 2**32, size=2 * trials, dtype=np.int64)
    _, first_at = np.unique(seeds, return_index=True)
    case["seeds"] = seeds[np.sort(first_at)[:trials]]
    assert case["seeds"].size == trials
    return case


def lossless_batch(trials, seed):
    """One K6 call of ``trials`` requests on the fixed tree with per-trial LFSR seeds."""
    rng = np.random.default_rng(20240601)
    rows = 0.2 / LOSSLESS_V + 0.8 * rng.dirichlet(np.full(LOSSLESS_V, 1.5), size=LOSSLESS_N)
    rows = rows.astype(np.float32)
    case = lossless_tree(trials, seed)
    case["target_probs"] = np.ascontiguousarray(
        np.broadcast_to(rows, (trials, LOSSLESS_N, LOSSLESS_V)))
    case["draft_probs"] = np.zeros((trials, LOSSLESS_N, LOSSLESS_V), np.float32)
    return case, rows


def lossless_pvalues(case, rows):
    """p-values: first token vs the root row; second token given child c vs row c."""
    n = LOSSLESS_N
    predicts = case["predicts"].reshape(-1, n)
    first = predicts[:, 0]
    pvalues = {"first": chi2_pvalue(np.bincount(first, minlength=LOSSLESS_V), rows[0])}
    for c in ROOT_CHILDREN:
        taken = first == LOSSLESS_TOKENS[c]
        if rows[0][LOSSLESS_TOKENS[c]] == 0:  # a token of probability 0 never comes out
            pvalues[f"first is {LOSSLESS_TOKENS[c]}"] = 0.0 if taken.any() else 1.0
            continue
        second = predicts[taken, c]
        if (second < 0).any():  # child c's token came out although c was not accepted
            pvalues[f"second|{c}"] = 0.0
            continue
        pvalues[f"second|{c}"] = chi2_pvalue(np.bincount(second, minlength=LOSSLESS_V), rows[c])
    return pvalues


def run_lossless(trials, seed, sampler="lfsr"):
    case, rows = lossless_batch(trials, seed)
    args = [case[name] for name in SAMPLING_ARGS[:7]]
    if sampler == "lfsr":
        draft_tree_reject_sample(*args, case["seeds"], case["target_probs"], case["draft_probs"])
    elif sampler == "squashed":  # biased: coins squared, so early siblings win too often
        coins, final = lfsr_coins(case["seeds"], LOSSLESS_N)
        tree_speculative_sampling_target_only(*args, coins * coins, final, case["target_probs"],
                                              case["draft_probs"])
    assert (case["accept_index"][:, 0] == case["retrive_index"][:, 0]).all()
    return lossless_pvalues(case, rows)


def _no_subtract(target_row, draft_row, subtract, coin):
    return ORIGINAL_RESIDUAL(target_row, draft_row, False, coin)


ORIGINAL_RESIDUAL = reject_sample._residual_sample


def check_lossless(trials, seed):
    pvalues = run_lossless(trials, seed)
    assert all(p > 0.001 for p in pvalues.values()), pvalues
    return pvalues


def test_lossless_sampling_100k(sim_report):
    pvalues = check_lossless(100_000, 2)
    sim_report("K6 lossless (100,000 LFSR trials): p = "
               + ", ".join(f"{k} {v:.3f}" for k, v in pvalues.items()))


@pytest.mark.slow
def test_lossless_sampling_400k(sim_report):
    pvalues = check_lossless(400_000, 3)
    sim_report("K6 lossless (400,000 LFSR trials): p = "
               + ", ".join(f"{k} {v:.3f}" for k, v in pvalues.items()))


def test_biased_sampler_with_squashed_coins_fails(sim_report):
    pvalues = run_lossless(20_000, 1, sampler="squashed")
    sim_report(f"K6 biased (coins squared, 20,000 trials): first-token p = {pvalues['first']:.1e}")
    assert pvalues["first"] < 0.001, pvalues


def test_biased_sampler_without_draft_subtraction_fails(monkeypatch, sim_report):
    monkeypatch.setattr(reject_sample, "_residual_sample", _no_subtract)
    pvalues = run_lossless(20_000, 1)
    sim_report(f"K6 biased (residual without draft, 20,000 trials): first-token p = "
               f"{pvalues['first']:.1e}")
    assert pvalues["first"] < 0.001, pvalues


def test_zero_probability_is_never_accepted_even_with_a_zero_coin():
    """Coin exactly 0.0 against a candidate of target probability 0: SGLang's ``0 <= 0``
    would accept it; the ``q > 0`` guard (docs/decisions.md) rejects it, also with
    ``threshold_single`` 0, and the residual draw does not pick it."""
    for single, acc in ((1.0, 1.0), (0.0, 0.0)):
        case = hand_case()
        case["target_probs"][0, 0] = [0.0, 0.5, 0.5, 0.0]  # child 1's token 2 -> q = 0.5
        case["candidates"][0, 1] = 3  # child 1 now proposes token 3, q = 0
        case["candidates"][0, 2] = 0  # child 2: token 0, q = 0
        call_sampling(case, threshold_single=single, threshold_acc=acc)
        assert case["accept_token_num"].tolist() == [0]
        assert case["accept_index"].tolist() == [[0, -1, -1]]
        assert case["predicts"][0] in (1, 2)
