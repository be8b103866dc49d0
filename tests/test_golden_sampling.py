"""golden.sampling: FlashInfer's top-k/top-p renormalisation and sampling on probability rows,
sgl-kernel's rejection-mask tree sampler and its fused accept-index compaction.

Expected values are worked by hand (rows of exactly representable probabilities) or come from
straightforward references written here per token, from the definitions in the module
docstring (not from the golden's sorted-prefix implementation), and are compared bit for bit.
"""

import numpy as np
import pytest

import golden

F32 = np.float32


# --- independent references --------------------------------------------------------------------


def descending(row, indices):
    """``indices`` in the sorted order: value descending, ties by index."""
    return sorted(indices, key=lambda j: (-float(row[j]), j))


def float32_sum(values):
    total = F32(0)
    for value in values:
        total = F32(total + value)
    return total


def ref_keep(row, k, p):
    """Token indices kept by top-k ``k`` and top-p ``p``, token by token: the count and the
    float32 mass (in the sorted order) of the values strictly above it."""
    size, top = len(row), max(row)
    kept = []
    for i in range(size):
        if not row[i] > 0:
            continue
        above = descending(row, [j for j in range(size) if row[j] > row[i]])
        if 0 < k < size and len(above) >= k:
            continue
        if p < 1 and not (float32_sum(row[j] for j in above) < p or row[i] == top):
            continue
        kept.append(i)
    return kept


def ref_renorm(row, k, p):
    if not 0 < k < len(row) and p >= 1:
        return row.copy()
    kept = ref_keep(row, k, p)
    total = float32_sum(row[j] for j in descending(row, kept))
    out = np.zeros(len(row), F32)
    for j in kept:
        out[j] = row[j] / total  # float32 / float32: correctly rounded float32
    return out


def ref_sample(row, k, p, coin, order):
    if order == "top_k_first":
        row, k = ref_renorm(row, k, F32(1)), 0
    kept = set(ref_keep(row, k, p))
    weights = [row[j] if j in kept else F32(0) for j in range(len(row))]
    u = F32(coin) * float32_sum(weights)
    prefix, last = F32(0), None
    for j, weight in enumerate(weights):
        prefix = F32(prefix + weight)
        if weight > 0:
            last = j
            if prefix > u:
                return j
    return last


def bits(array):
    return np.ascontiguousarray(array).view(np.uint32).tolist()


def random_rows(rng, rows, vocab, kind):
    """Rows with ties and zeros (``"ties"``), normalised random rows (``"smooth"``), or peaked
    softmax-like rows (``"peaked"``), float32 in [0, 1]."""
    if kind == "ties":
        return (rng.integers(0, 5, (rows, vocab)) / 16).astype(F32)
    raw = rng.random((rows, vocab)).astype(F32)
    if kind == "peaked":
        raw = np.exp(8 * raw).astype(F32)
    return (raw / raw.sum(axis=1, keepdims=True, dtype=F32)).astype(F32)


def renorm_k(probs, k, arr=None):
    out = np.full(probs.shape, 7.0, F32)
    golden.top_k_renorm_probs(probs, out, arr, k)
    return out


def renorm_p(probs, p, arr=None):
    out = np.full(probs.shape, 7.0, F32)
    golden.top_p_renorm_probs(probs, out, arr, p)
    return out


def sample(probs, coins, k=0, p=1.0, order="joint", indices=None, k_arr=None, p_arr=None):
    batch = probs.shape[0] if indices is None else len(indices)
    out = np.full(batch, -5, np.int32)
    golden.top_k_top_p_sampling_from_probs(probs, out, indices, k_arr, k, p_arr, p, True,
                                           np.asarray(coins, F32), filter_apply_order=order)
    return out.tolist()


ROW = np.array([0.125, 0.5, 0.25, 0.125], F32)  # sums to 1 exactly
TWO_THIRDS, ONE_THIRD = F32(2 / 3), F32(1 / 3)  # 0.5 / 0.75 and 0.25 / 0.75, correctly rounded


# --- top_k_renorm_probs ------------------------------------------------------------------------


def test_top_k_hand_worked():
    probs = np.stack([ROW, [0.5, 0.125, 0.125, 0.25]]).astype(F32)
    out = renorm_k(probs, 2)
    assert out[0].tolist() == [0, TWO_THIRDS, ONE_THIRD, 0]
    assert out[1].tolist() == [TWO_THIRDS, 0, 0, ONE_THIRD]
    assert renorm_k(probs, 1).tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]


def test_top_k_keeps_ties_at_the_threshold():
    probs = np.array([[0.25, 0.25, 0.25, 0.25], [0.5, 0.125, 0.125, 0.25]], F32)
    assert bits(renorm_k(probs[:1], 1)) == bits(probs[:1])  # one tie group: all kept
    # k = 3: the third largest is 0.125, shared by two tokens: all four kept, sum 1
    assert renorm_k(probs[1:], 3).tolist() == probs[1:].tolist()


@pytest.mark.parametrize("k", [4, 5, 1 << 30, 0, -1])
def test_top_k_off_copies_the_row_bit_for_bit(k):
    probs = np.array([[0.3, -0.0, 0.3, 0.1]], F32)  # unnormalised, a negative zero
    assert bits(renorm_k(probs, k)) == bits(probs)


def test_top_k_zero_row_and_negative_zero():
    probs = np.array([[0.0, -0.0, 0.0], [-0.0, 0.5, 0.25]], F32)
    out = renorm_k(probs, 1)
    assert bits(out[0]) == [0, 0, 0]  # +0.0 everywhere
    assert bits(out[1]) == bits(np.array([0, 1, 0], F32))


def test_top_k_per_row_array_int32_and_column_shape():
    probs = np.stack([ROW, ROW, ROW])
    for arr in (np.array([1, 2, 4], np.int32), np.array([[1], [2], [4]], np.int32)):
        out = renorm_k(probs, 99, arr)  # the scalar is ignored when an array is given
        assert out[0].tolist() == [0, 1, 0, 0]
        assert out[1].tolist() == [0, TWO_THIRDS, ONE_THIRD, 0]
        assert bits(out[2]) == bits(ROW)


@pytest.mark.parametrize("kind", ["ties", "smooth", "peaked"])
def test_top_k_equals_reference(kind):
    rng = np.random.default_rng(len(kind))
    probs = random_rows(rng, 6, 24, kind)
    for k in (1, 2, 3, 7, 23):
        out = renorm_k(probs, k)
        for r in range(len(probs)):
            assert bits(out[r]) == bits(ref_renorm(probs[r], k, F32(1)))
            kept = out[r][out[r] > 0]
            assert abs(float(kept.sum(dtype=np.float64)) - 1) < 1e-5  # sanity only
            assert np.count_nonzero(out[r]) >= min(k, np.count_nonzero(probs[r]))


# --- top_p_renorm_probs ------------------------------------------------------------------------


def test_top_p_hand_worked():
    probs = ROW[None]
    assert renorm_p(probs, 0.5).tolist() == [[0, 1, 0, 0]]  # 0.5 alone reaches 0.5
    assert renorm_p(probs, 0.6).tolist() == [[0, TWO_THIRDS, ONE_THIRD, 0]]
    # mass above the 0.125 pair is 0.75: not below p = 0.75, below p = 0.8 (both kept)
    assert renorm_p(probs, 0.75).tolist() == [[0, TWO_THIRDS, ONE_THIRD, 0]]
    assert renorm_p(probs, 0.8).tolist() == [ROW.tolist()]


@pytest.mark.parametrize("p", [0.0, 1e-30, 1e-7])
def test_top_p_tiny_keeps_the_most_probable_tie_group(p):
    probs = np.array([[0.25, 0.375, 0.375, 0.0]], F32)
    assert renorm_p(probs, p).tolist() == [[0, 0.5, 0.5, 0]]


def test_top_p_one_copies_the_row_bit_for_bit():
    probs = np.array([[0.3, -0.0, 0.3, 0.1], [0, 0, 0, 0]], F32)
    assert bits(renorm_p(probs, 1.0)) == bits(probs)
    assert bits(renorm_p(probs, 0.5)[1]) == [0, 0, 0, 0]


def test_top_p_per_row_array_and_column_shape():
    probs = np.stack([ROW, ROW])
    for arr in (np.array([0.6, 1.0], F32), np.array([[0.6], [1.0]], F32)):
        out = renorm_p(probs, 0.0, arr)
        assert out.tolist() == [[0, TWO_THIRDS, ONE_THIRD, 0], ROW.tolist()]


@pytest.mark.parametrize("kind", ["ties", "smooth", "peaked"])
def test_top_p_equals_reference(kind):
    rng = np.random.default_rng(10 + len(kind))
    probs = random_rows(rng, 6, 24, kind)
    for p in (F32(0.05), F32(0.3), F32(0.5), F32(0.9), F32(0.999)):
        out = renorm_p(probs, float(p))
        for r in range(len(probs)):
            assert bits(out[r]) == bits(ref_renorm(probs[r], 0, p))
            assert abs(float(out[r].sum(dtype=np.float64)) - 1) < 1e-5  # sanity only


def test_zero_rows_and_empty_batch():
    for op in (renorm_k, renorm_p):
        assert op(np.zeros((0, 5), F32), 1).shape == (0, 5)
    assert sample(np.zeros((0, 3), F32), []) == []


# --- top_k_top_p_sampling_from_probs -----------------------------------------------------------


@pytest.mark.parametrize(("coin", "token"), [(0.0, 0), (0.1, 0), (0.125, 1), (0.2, 1),
                                             (0.7, 2), (0.9, 3), (1.0, 3)])
def test_sampling_hand_worked_no_filter(coin, token):
    # prefix sums 0.125, 0.625, 0.875, 1: the first one above the coin; coin 1 -> last
    assert sample(ROW[None], [coin]) == [token]


def test_sampling_joint_and_top_k_first_differ():
    probs = ROW[None]
    # joint, k=2, p=0.6: {0.5, 0.25} (mass above 0.25 is 0.5 < 0.6); u = 0.9*0.75
    assert sample(probs, [0.9], k=2, p=0.6, order="joint") == [2]
    assert sample(probs, [0.5], k=2, p=0.6, order="joint") == [1]
    # top_k_first: renormalised to (2/3, 1/3); mass above 1/3 is 2/3 >= 0.6: only token 1
    assert sample(probs, [0.9], k=2, p=0.6, order="top_k_first") == [1]


def test_sampling_k1_and_ties():
    probs = np.array([[0.25, 0.25, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]], F32)
    assert sample(probs, [0.99, 0.99], k=1) == [2, 3]  # row 1: the whole tie group kept
    assert sample(probs, [0.0, 0.0], k=1) == [2, 0]


def test_sampling_indices_reuse_rows_and_read_parameters_by_row():
    probs = np.stack([ROW, np.array([0, 0, 0, 1], F32)])
    indices = np.array([1, 0, 0], np.int64)
    got = sample(probs, [0.0, 0.99, 0.99], indices=indices, k_arr=np.array([2, 4], np.int32))
    assert got == [3, 2, 2]  # outputs 1 and 2 sample row 0 with row 0's k = 2
    assert sample(probs, [0.99], indices=np.array([0], np.int32),
                  p_arr=np.array([[0.5], [1.0]], F32)) == [1]


@pytest.mark.parametrize("order", ["joint", "top_k_first"])
@pytest.mark.parametrize("kind", ["ties", "smooth", "peaked"])
def test_sampling_equals_reference(order, kind):
    rng = np.random.default_rng(20 + len(kind))
    probs = random_rows(rng, 4, 16, kind)
    probs[0, :3] = 0  # zeros before the first positive token
    for k, p in ((0, 1.0), (3, 1.0), (0, 0.5), (2, 0.7), (5, 0.2), (16, 0.95)):
        coins = rng.random(4, dtype=F32)
        coins[0], coins[1] = 0.0, 1.0
        got = sample(probs, coins, k=k, p=p, order=order)
        assert got == [ref_sample(probs[r], k, F32(p), coins[r], order) for r in range(4)]


def test_sampling_frequencies_follow_the_filtered_distribution():
    # evenly spaced coins: each kept token is drawn in proportion to its weight (within 1)
    probs = np.array([[0.1, 0.4, 0.05, 0.3, 0.15]], F32)
    coins = ((np.arange(2000) + 0.5) / 2000).astype(F32)
    got = sample(np.repeat(probs, 2000, axis=0), coins, k=3, p=0.75)
    kept = {1: 0.4, 3: 0.3}  # top-3 {0.4, 0.3, 0.15}; mass above 0.15 is 0.7 < 0.75 -> kept
    kept[4] = 0.15
    counts = np.bincount(got, minlength=5)
    assert counts[0] == counts[2] == 0
    for token, weight in kept.items():
        assert abs(counts[token] - 2000 * weight / 0.85) <= 1


# --- refusals: ValueError naming the argument, nothing written ----------------------------------


@pytest.mark.parametrize(("change", "match"), [
    ({"probs": np.array([[0.5, np.nan]], F32)}, "`probs` values must be probabilities"),
    ({"probs": np.array([[0.5, -0.25]], F32)}, "`probs` values must be probabilities"),
    ({"probs": np.array([[0.5, 1.5]], F32)}, "`probs` values must be probabilities"),
    ({"probs": np.array([[0.5, 0.5]])}, "`probs` must be a float32 numpy array"),
    ({"probs": np.array([0.5, 0.5], F32)}, "`probs` must be a float32 numpy array"),
    ({"top_k_val": 2.0}, "`top_k_val` must be an integer"),
    ({"top_k_val": True}, "`top_k_val` must be an integer"),
    ({"maybe_top_k_arr": np.array([1], np.int64)}, "`maybe_top_k_arr` must have dtype int32"),
    ({"maybe_top_k_arr": np.array([1, 2], np.int32)}, "`maybe_top_k_arr` must have 1"),
])
def test_top_k_refusals_write_nothing(change, match):
    args = {"probs": np.array([[0.5, 0.5]], F32), "maybe_top_k_arr": None, "top_k_val": 1,
            **change}
    out = np.full((1, 2), 7.0, F32)
    with pytest.raises(ValueError, match=match):
        golden.top_k_renorm_probs(args["probs"], out, args["maybe_top_k_arr"], args["top_k_val"])
    assert out.tolist() == [[7.0, 7.0]]


@pytest.mark.parametrize(("arr", "val", "match"), [
    (None, 1.5, "`top_p_val` must be between 0 and 1"),
    (None, -0.1, "`top_p_val` must be between 0 and 1"),
    (None, float("nan"), "`top_p_val` must be between 0 and 1"),
    (None, "0.5", "`top_p_val` must be a real number"),
    (np.array([0.5], np.float64), 0.0, "`maybe_top_p_arr` must have dtype float32"),
    (np.array([np.nan], F32), 0.0, "`maybe_top_p_arr` must be between 0 and 1"),
])
def test_top_p_refusals_write_nothing(arr, val, match):
    out = np.full((1, 2), 7.0, F32)
    with pytest.raises(ValueError, match=match):
        golden.top_p_renorm_probs(np.array([[0.5, 0.5]], F32), out, arr, val)
    assert out.tolist() == [[7.0, 7.0]]


def test_renorm_output_must_be_writable_contiguous_float32():
    probs = np.array([[0.5, 0.5]], F32)
    with pytest.raises(ValueError, match="`renorm_probs` must have dtype float32"):
        golden.top_k_renorm_probs(probs, np.zeros((1, 2)), None, 1)
    wide = np.zeros((1, 4), F32)
    with pytest.raises(ValueError, match="`renorm_probs` must be C-contiguous"):
        golden.top_k_renorm_probs(probs, wide[:, ::2], None, 1)


@pytest.mark.parametrize(("change", "match"), [
    ({"coins": [1.5]}, "`uniform_samples` must be between 0 and 1"),
    ({"coins": [np.nan]}, "`uniform_samples` must be between 0 and 1"),
    ({"coins": [0.5, 0.5]}, "`uniform_samples` must have 1 elements"),
    ({"order": "top_p_first"}, "`filter_apply_order` must be one of top_k_first, joint"),
    ({"indices": np.array([2])}, "`indices` values must be between 0"),
    ({"indices": np.array([0.0])}, "`indices` must be None or a 1-D int32 or int64"),
    ({"deterministic": 1}, "`deterministic` must be a bool"),
    ({"probs": np.array([[0.0, -0.0, 0.0]], F32)}, "`probs` row 0 has no positive"),
])
def test_sampling_refusals_write_nothing(change, match):
    args = {"probs": np.array([[0.25, 0.5, 0.25]], F32), "coins": [0.5], "order": "joint",
            "indices": None, "deterministic": True, **change}
    out = np.full(1, -5, np.int32)
    with pytest.raises(ValueError, match=match):
        golden.top_k_top_p_sampling_from_probs(
            args["probs"], out, args["indices"], None, 0, None, 1.0, args["deterministic"],
            np.asarray(args["coins"], F32), filter_apply_order=args["order"])
    assert out.tolist() == [-5]


# --- tree_speculative_sampling_target_only_rejmask ---------------------------------------------

TREE_OUTPUTS = ("predicts", "accept_index", "accept_token_num")
TREE_INPUTS = ("candidates", "retrive_index", "retrive_next_token", "retrive_next_sibling",
               "uniform_samples", "uniform_samples_for_final_sampling", "target_probs")


def links(children, n):
    """``(next_token, next_sibling)`` of one request from ``{parent: [children in order]}``."""
    nxt, sib = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    for parent, kids in children.items():
        nxt[parent] = kids[0]
        for a, b in zip(kids, kids[1:], strict=False):
            sib[a] = b
    return nxt, sib


def random_children(rng, n, fan_out):
    """A random tree over positions 0..n-1 (parents before children), at most ``fan_out``
    children per node, sibling order shuffled."""
    children = {}
    for i in range(1, n):
        open_parents = [p for p in range(i) if len(children.get(p, [])) < fan_out]
        children.setdefault(int(rng.choice(open_parents)), []).append(i)
    return {p: [int(c) for c in rng.permutation(kids)] for p, kids in children.items()}


def tree_case(rng, b, n, s, vocab, fan_out):
    nxt, sib = zip(*(links(random_children(rng, n, fan_out), n) for _ in range(b)), strict=True)
    raw = np.exp(20 * rng.random((b, n, vocab))).astype(F32)  # sharply peaked rows
    target = (raw / raw.sum(axis=2, keepdims=True, dtype=F32)).astype(F32)
    candidates = rng.integers(0, vocab, (b, n))
    for req in range(b):  # a likely draft under each node, so that drafts get accepted
        for node in range(n):
            if nxt[req][node] != -1 and rng.random() < 0.7:
                candidates[req, nxt[req][node]] = target[req, node].argmax()
    candidates[0, nxt[0][0]] = target[0, 0].argmax()
    coins = rng.random((b, n), dtype=F32)
    coins[0, 0] = 0  # request 0 accepts its root's first child
    return {"predicts": np.full(b * n, -1, np.int32), "accept_index": np.full((b, s), -1, np.int32),
            "accept_token_num": np.full(b, -7, np.int32), "candidates": candidates,
            "retrive_index": np.arange(b * n).reshape(b, n), "retrive_next_token": np.stack(nxt),
            "retrive_next_sibling": np.stack(sib), "uniform_samples": coins,
            "uniform_samples_for_final_sampling": rng.random(b, dtype=F32),
            "target_probs": target}


def run_rejmask(case, *thresholds):
    got = {k: v.copy() for k, v in case.items()}
    golden.tree_speculative_sampling_target_only_rejmask(
        *(got[k] for k in TREE_OUTPUTS), *(got[k] for k in TREE_INPUTS), *thresholds)
    return got


def ref_rejmask(case, threshold_single=1.0, threshold_acc=1.0):
    """The traversal written out, the final row with the tokens rejected there set to 0."""
    out = {k: case[k].copy() for k in TREE_OUTPUTS}
    b, n = case["candidates"].shape
    s = case["accept_index"].shape[1]
    divisor = F32(max(threshold_acc, 1e-9))
    for req in range(b):
        cand, ridx = case["candidates"][req], case["retrive_index"][req]
        nxt, sib = case["retrive_next_token"][req], case["retrive_next_sibling"][req]
        probs = case["target_probs"][req]
        coin, acc, row, last, accepted = case["uniform_samples"][req, 0], F32(0), 0, ridx[0], 0
        out["accept_index"][req, 0] = last
        rejected, cur = [], 0
        for _step in range(1, s):
            cur, rejected = nxt[cur], []
            while cur != -1:
                q = probs[row, cand[cur]]
                acc = F32(acc + q)
                if q > 0 and (coin <= acc / divisor or q >= F32(threshold_single)):
                    out["predicts"][last] = cand[cur]
                    accepted += 1
                    out["accept_index"][req, accepted] = ridx[cur]
                    coin, acc, row, last = case["uniform_samples"][req, cur], F32(0), cur, ridx[cur]
                    break
                rejected.append(cand[cur])
                cur = sib[cur]
            if cur == -1:
                break
        final = probs[row].copy()
        if accepted != s - 1:
            final[rejected] = 0
        token = ref_sample(final, 0, F32(1), case["uniform_samples_for_final_sampling"][req],
                           "joint")
        out["predicts"][last] = len(final) - 1 if token is None else token
        out["accept_token_num"][req] = accepted
    return out


def test_rejmask_upstream_chain_case():
    # sgl-kernel test_speculative_sampling.py (thresholds 1, 1): one-hot target rows
    peaks = {(0, 0): 3, (0, 3): 4, (0, 4): 5, (1, 0): 11, (1, 4): 12}
    target = np.zeros((2, 6, 20), F32)
    for req in range(2):
        for row in range(6):
            target[req, row, peaks.get((req, row), 18)] = 1
    case = {"predicts": np.full(12, -1, np.int32), "accept_index": np.full((2, 4), -1, np.int32),
            "accept_token_num": np.zeros(2, np.int32),
            "candidates": np.array([[0, 1, 2, 3, 4, 5], [7, 8, 9, 10, 11, 12]]),
            "retrive_index": np.arange(12).reshape(2, 6),
            "retrive_next_token": np.array([[1, 2, -1, 4, 5, -1], [4, 2, 3, -1, 5, -1]]),
            "retrive_next_sibling": np.array([[-1, 3, -1, -1, -1, -1], [-1, -1, -1, -1, 1, -1]]),
            "uniform_samples": np.full((2, 6), 0.5, F32),
            "uniform_samples_for_final_sampling": np.array([0.3, 0.8], F32),
            "target_probs": target}
    got = run_rejmask(case)
    assert got["predicts"].tolist() == [3, -1, -1, 4, 5, 18, 11, -1, -1, -1, 12, 18]
    assert got["accept_index"].tolist() == [[0, 3, 4, 5], [6, 10, 11, -1]]
    assert got["accept_token_num"].tolist() == [3, 2]


def test_rejmask_masks_the_rejected_token_in_the_final_draw():
    # sgl-kernel's rejmask test: node 1 (token 3) accepted by threshold_single, node 2
    # (token 5) rejected; the final draw at row 1 must skip token 5 and give token 31
    target = np.zeros((1, 3, 32), F32)
    target[0, 0, [0, 3]] = [0.05, 0.95]
    target[0, 1, [5, 31]] = [0.9, 0.1]
    target[0, 2, 0] = 1
    case = {"predicts": np.full(3, -1, np.int32), "accept_index": np.full((1, 3), -1, np.int32),
            "accept_token_num": np.zeros(1, np.int32), "candidates": np.array([[0, 3, 5]]),
            "retrive_index": np.array([[0, 1, 2]]), "retrive_next_token": np.array([[1, 2, -1]]),
            "retrive_next_sibling": np.full((1, 3), -1),
            "uniform_samples": np.array([[0.0, 0.99, 0.0]], F32),
            "uniform_samples_for_final_sampling": np.array([0.5], F32), "target_probs": target}
    got = run_rejmask(case, 0.91, 1.0)
    assert got["predicts"].tolist() == [3, 31, -1]
    assert got["accept_index"].tolist() == [[0, 1, -1]]
    assert got["accept_token_num"].tolist() == [1]


@pytest.mark.parametrize("fan_out", [1, 2, 3, 4])
@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (0.9, 0.7), (0.3, 0.5)])
def test_rejmask_equals_reference_and_the_draft_probs_kernel(fan_out, thresholds):
    rng = np.random.default_rng(fan_out * 10 + int(thresholds[0] * 10))
    case = tree_case(rng, 3, 9, 5, 12, fan_out)
    got = run_rejmask(case, *thresholds)
    ref = ref_rejmask(case, *thresholds)
    tree = {k: v.copy() for k, v in case.items()}
    golden.tree_speculative_sampling_target_only(
        *(tree[k] for k in TREE_OUTPUTS), *(tree[k] for k in TREE_INPUTS),
        np.zeros_like(case["target_probs"]), *thresholds)
    for name in TREE_OUTPUTS:
        assert got[name].tolist() == ref[name].tolist() == tree[name].tolist(), name
    assert (got["accept_token_num"] > 0).any()


def test_rejmask_refuses_more_than_four_children_writing_nothing():
    case = tree_case(np.random.default_rng(3), 2, 7, 3, 8, 1)
    nxt, sib = links({0: [1, 2, 3, 4, 5], 5: [6]}, 7)
    case["retrive_next_token"][1], case["retrive_next_sibling"][1] = nxt, sib
    before = {k: case[k].copy() for k in TREE_OUTPUTS}
    with pytest.raises(ValueError, match="request 1, position 0 has 5 children; the "
                                         "rejection-mask kernel takes at most 4"):
        run_rejmask_in_place(case)
    for name in TREE_OUTPUTS:
        assert case[name].tolist() == before[name].tolist()


def run_rejmask_in_place(case, *thresholds):
    golden.tree_speculative_sampling_target_only_rejmask(
        *(case[k] for k in TREE_OUTPUTS), *(case[k] for k in TREE_INPUTS), *thresholds)


def test_rejmask_refuses_a_sibling_cycle_and_bad_target():
    case = tree_case(np.random.default_rng(4), 1, 5, 3, 8, 2)
    case["retrive_next_token"][0] = [1, -1, -1, -1, -1]
    case["retrive_next_sibling"][0] = [-1, 2, 1, -1, -1]
    with pytest.raises(ValueError, match="`retrive_next_sibling` of request 0 has a cycle"):
        run_rejmask_in_place(case)
    case = tree_case(np.random.default_rng(4), 1, 5, 3, 8, 2)
    with pytest.raises(ValueError, match="`target_probs` must be a numpy array"):
        run_rejmask_in_place({**case, "target_probs": case["target_probs"].tolist()})
    with pytest.raises(ValueError, match="`target_probs` must have dtype float32"):
        run_rejmask_in_place({**case, "target_probs": case["target_probs"].astype(np.float64)})
    assert (case["accept_token_num"] == -7).all()


# --- process_accept_index_evict_mask_fused -----------------------------------------------------


def fused(accept_index, predict, capacity=None, fill=-9):
    """Run the golden on buffers holding ``fill``; returns the outputs as lists."""
    index, tokens = np.array(accept_index, np.int32), np.array(predict, np.int32)
    capacity = index.size if capacity is None else capacity
    out = {"accept_length": np.full(len(index), fill, np.int32),
           "verified_id": np.full(capacity, fill, np.int32),
           "evict_mask": np.zeros(len(tokens), bool),
           "filtered_accept_index": np.full(capacity, fill, np.int32),
           "output_size": np.full(1, fill, np.int32)}
    golden.process_accept_index_evict_mask_fused(index, tokens, *out.values())
    return {k: v.tolist() for k, v in out.items()}


def test_fused_upstream_cases():
    # sgl-kernel tests/speculative/test_process_accept_index_evict_mask_fused.py
    got = fused([[0, 1, -1]], [12366, 11, 3967])
    assert got["accept_length"] == [1] and got["output_size"] == [2]
    assert got["verified_id"][:2] == [12366, 11] and got["filtered_accept_index"][:2] == [0, 1]
    assert got["evict_mask"] == [False, False, True]
    got = fused([[0, 1, -1], [3, 4, 5]], [100, 101, 102, 200, 201, 202])
    assert got["accept_length"] == [1, 2] and got["output_size"] == [5]
    assert got["verified_id"] == [100, 101, 200, 201, 202, -9]
    assert got["evict_mask"] == [False, False, True, False, False, False]
    got = fused([[-1, -1, -1]], [100, 101, 102])
    assert got["accept_length"] == [-1] and got["output_size"] == [0]
    assert got["evict_mask"] == [True, True, True]
    assert got["verified_id"] == [-9, -9, -9] and got["filtered_accept_index"] == [-9] * 3


def test_fused_counts_every_entry_and_leaves_the_tail():
    # a -1 in the middle of a row: every other entry still counts (the CUDA loop does)
    got = fused([[2, -1, 0], [-1, -1, -1], [5, 4, -1]], [10, 11, 12, 13, 14, 15, 16], capacity=6)
    assert got["accept_length"] == [1, -1, 1]
    assert got["filtered_accept_index"] == [2, 0, 5, 4, -9, -9]
    assert got["verified_id"] == [12, 10, 15, 14, -9, -9]
    assert got["evict_mask"] == [False, True, False, True, False, False, True]
    assert got["output_size"] == [4]


def test_fused_zero_requests():
    got = fused(np.zeros((0, 3), np.int32), [1, 2], capacity=0)
    assert got["accept_length"] == [] and got["output_size"] == [0]
    assert got["evict_mask"] == [True, True]


@pytest.mark.parametrize(("index", "capacity", "match"), [
    ([[0, 3]], 2, "`accept_index` values must be -1 or between 0 and 2"),
    ([[0, -2]], 2, "`accept_index` values must be -1 or between 0 and 2"),
    ([[0, 1], [2, -1]], 2, "`verified_id` must hold the 3 accepted entries, not 2"),
])
def test_fused_refusals_write_nothing(index, capacity, match):
    out = {"accept_length": np.full(len(index), -9, np.int32),
           "verified_id": np.full(capacity, -9, np.int32), "evict_mask": np.zeros(3, bool),
           "filtered_accept_index": np.full(capacity, -9, np.int32),
           "output_size": np.full(1, -9, np.int32)}
    with pytest.raises(ValueError, match=match):
        golden.process_accept_index_evict_mask_fused(
            np.array(index, np.int32), np.array([7, 8, 9], np.int32), *out.values())
    assert all((v == (False if v.dtype == bool else -9)).all() for v in out.values())


def test_fused_dtypes_are_cuda_int32():
    with pytest.raises(ValueError, match="`accept_index` must have dtype int32"):
        golden.process_accept_index_evict_mask_fused(
            np.zeros((1, 2), np.int64), np.zeros(2, np.int32), np.zeros(1, np.int32),
            np.zeros(2, np.int32), np.zeros(2, bool), np.zeros(2, np.int32),
            np.zeros(1, np.int32))
