"""K2 ``update_cumu_draft_state`` golden: CUDA capture, directed cases, loop reference."""

import numpy as np
import pytest

from golden.cases import read_case
from golden.update_state import (
    NodeBudgetError,
    NodeBudgetWarning,
    node_budget_overflow,
    update_cumu_draft_state,
)

SCALE = np.array([0x3F7FF972], dtype=np.uint32).view(np.float32)[0]
STATE_NAMES = (
    "cumu_tokens", "cumu_scores", "cumu_deltas", "prev_indexs", "next_indexs", "side_indexs",
    "output_scores", "output_tokens", "work_scores", "sort_scores", "output_tree_mask",
)
FLOAT_NAMES = {"cumu_scores", "output_scores", "work_scores", "sort_scores"}
INPUT_NAMES = (
    "topk_probas", "topk_tokens", "sorted_scores", "sorted_indexs", "parent_indexs",
    "topk_indexs", "input_tree_mask",
)
SCALAR_NAMES = (
    "batch_size", "node_top_k", "tree_width", "input_count", "cumu_count", "verify_num",
    "curr_depth", "max_input_size", "max_node_count", "max_verify_num",
)


def call(case, **kwargs):
    """Run the op on ``case`` (dict with inputs, scalars and state buffers) in ABI order."""
    return update_cumu_draft_state(
        *(case[n] for n in INPUT_NAMES),
        *(case[n] for n in SCALAR_NAMES),
        *(case[n] for n in STATE_NAMES),
        **kwargs,
    )


def assert_same(actual, expected, name):
    """Bit-exact equality (float bit patterns, ints, bools)."""
    actual, expected = np.asarray(actual).reshape(-1), np.asarray(expected).reshape(-1)
    assert actual.dtype == expected.dtype, name
    if actual.dtype == np.float32:
        actual, expected = actual.view(np.uint32), expected.view(np.uint32)
    mismatch = np.flatnonzero(actual != expected)
    assert mismatch.size == 0, f"{name}: first mismatch at {mismatch[:5]}"


# --- the CUDA capture ------------------------------------------------------------------------


def load_capture():
    """The update capture as (case dict of flat arrays, expected dict)."""
    cap = read_case("cost_draft_tree_update_case")
    case = dict(zip(SCALAR_NAMES, cap.meta, strict=True))
    case["batch_size"], case["node_top_k"], case["tree_width"] = cap.meta[:3]
    for name in ("topk_probas", "sorted_scores"):
        case[name] = cap.f32(name)
    for name in ("topk_tokens", "sorted_indexs", "parent_indexs", "topk_indexs"):
        case[name] = cap.i64(name)
    case["input_tree_mask"] = cap.bool_("input_tree_mask")
    expected = {}
    for name in STATE_NAMES:
        read = cap.f32 if name in FLOAT_NAMES else cap.i64
        if name == "output_tree_mask":
            read = cap.bool_
        case[name] = read(f"initial_{name}")
        expected[name] = read(f"expected_{name}")
    return case, expected


def test_capture_meta_is_as_documented():
    case, _ = load_capture()
    assert [case[n] for n in SCALAR_NAMES] == [2, 8, 8, 17, 21, 64, 3, 64, 1024, 64]


def test_capture_reproduced_exactly_flat():
    case, expected = load_capture()
    assert call(case) is None
    for name in STATE_NAMES:
        assert_same(case[name], expected[name], name)


def test_capture_reproduced_exactly_shaped():
    case, expected = load_capture()
    b, k, w, ic, mi, maxn, maxv = 2, 8, 8, 17, 64, 1024, 64
    n = w * k
    shapes = {
        "topk_probas": (b, n), "topk_tokens": (b, n), "sorted_scores": (b, n),
        "sorted_indexs": (b, n), "parent_indexs": (b, k), "topk_indexs": (b, w),
        "input_tree_mask": (b, w, ic - 1), "output_scores": (b, k), "output_tokens": (b, k),
        "work_scores": (b, maxv + k), "sort_scores": (b, maxv),
        "output_tree_mask": (b, k, mi + 1),
    }
    for name in STATE_NAMES[:6]:
        shapes[name] = (b, maxn)
    for name, shape in shapes.items():
        case[name] = case[name].reshape(shape)
    call(case)
    for name in STATE_NAMES:
        assert case[name].shape == shapes[name]
        assert_same(case[name], expected[name], name)


def test_capture_sentinels_untouched():
    """Outside the slots §3 assigns, every buffer still holds its initial sentinel."""
    case, _ = load_capture()
    initial = {n: case[n].copy() for n in STATE_NAMES}
    call(case)
    maxn, start, n = 1024, 21, 64
    for name in STATE_NAMES[:6]:
        before, after = initial[name].reshape(2, maxn), case[name].reshape(2, maxn)
        owned = np.zeros((2, maxn), bool)
        owned[:, start : start + n] = True
        if name == "next_indexs":
            owned[0, :8] = True  # topk_indexs of request 0 are 0..7
            owned[1, 8:16] = True  # and of request 1 are 8..15
        assert_same(after[~owned], before[~owned], name)
    work_before = initial["work_scores"].reshape(2, 72)
    assert_same(case["work_scores"].reshape(2, 72)[:, 29:], work_before[:, 29:], "work")
    mask_after = case["output_tree_mask"].reshape(2, 8, 65)
    assert_same(mask_after[:, :, 16:], initial["output_tree_mask"].reshape(2, 8, 65)[:, :, 16:],
                "mask columns >= input_count-1")


def test_scale_constant_is_0_9999f():
    assert np.float32(0.9999).view(np.uint32) == 0x3F7FF972
    assert SCALE == np.float32(0.9999)


# --- independent loop reference ---------------------------------------------------------------


def reference(case):
    """Straight-line transcription of §3 with flat indices; returns the expected buffers."""
    b_count, k, w = case["batch_size"], case["node_top_k"], case["tree_width"]
    n, cols, start = w * k, max(case["input_count"] - 1, 0), case["cumu_count"]
    mi, maxn, maxv = case["max_input_size"], case["max_node_count"], case["max_verify_num"]
    out = {name: np.array(case[name], copy=True).reshape(-1) for name in STATE_NAMES}
    flat = {name: np.asarray(case[name]).reshape(-1) for name in INPUT_NAMES}
    v = min(max(case["verify_num"], 1), maxv)
    for b in range(b_count):
        for i in range(k):
            out["output_scores"][b * k + i] = flat["sorted_scores"][b * n + i]
            src = flat["sorted_indexs"][b * n + i]
            out["output_tokens"][b * k + i] = flat["topk_tokens"][b * n + src]
            parent = flat["parent_indexs"][b * k + i]
            for j in range(cols):
                out["output_tree_mask"][(b * k + i) * (mi + 1) + j] = flat["input_tree_mask"][
                    (b * w + parent) * cols + j
                ]
        for t in range(n):
            g = start + t
            if g >= maxn:
                continue
            at = b * maxn + g
            out["cumu_tokens"][at] = flat["topk_tokens"][b * n + t]
            out["cumu_scores"][at] = np.float32(flat["topk_probas"][b * n + t] * SCALE)
            out["cumu_deltas"][at] = case["curr_depth"]
            out["prev_indexs"][at] = flat["topk_indexs"][b * w + t // k]
            out["next_indexs"][at] = -1
            out["side_indexs"][at] = -1 if t % k == k - 1 else g + 1
        for slot in range(w):
            p = flat["topk_indexs"][b * w + slot]
            if 0 <= p < maxn:
                out["next_indexs"][b * maxn + p] = start + slot * k
        ws0, ws1 = min(v, start), min(v, start + n)
        a = [out["sort_scores"][b * maxv + i] for i in range(ws0)]
        c = [flat["sorted_scores"][b * n + i] for i in range(n)]
        row = b * (maxv + k)
        for i in range(ws0):
            out["work_scores"][row + i] = a[i]
        for i in range(k):
            out["work_scores"][row + ws0 + i] = out["output_scores"][b * k + i]
        i = j = 0
        for o in range(ws1):
            if j == n or (i < ws0 and a[i] >= c[j]):
                out["sort_scores"][b * maxv + o] = a[i]
                i += 1
            else:
                out["sort_scores"][b * maxv + o] = c[j]
                j += 1
    return out


def random_case(rng, *, b=2, k=4, w=3, cumu_count=10, verify_num=16, input_count=5,
                max_input_size=8, max_node_count=64, max_verify_num=16, topk_indexs=None):
    """Sentinel-filled random case; scores include +0.0/-0.0 and repeated values."""
    n = w * k
    pool = np.array([0.0, -0.0, 0.125, 0.25, 0.5], np.float32)

    def scores(shape):
        values = rng.random(shape).astype(np.float32)
        return np.where(rng.random(shape) < 0.3, rng.choice(pool, shape), values)

    sorted_scores = -np.sort(-scores((b, n)), axis=1)
    sorted_scores[sorted_scores == 0] = rng.choice(pool[:2], (sorted_scores == 0).sum())
    sorted_indexs = np.stack([rng.permutation(n) for _ in range(b)]).astype(np.int64)
    if topk_indexs is None:
        topk_indexs = rng.integers(-2, max_node_count + 2, (b, w))
    old_best = -np.sort(-scores((b, max_verify_num)), axis=1)
    old_best[:, min(cumu_count, max_verify_num):] = -1234.0
    case = {
        "topk_probas": scores((b, n)),
        "topk_tokens": rng.integers(0, 50_000, (b, n)).astype(np.int64),
        "sorted_scores": sorted_scores,
        "sorted_indexs": sorted_indexs,
        "parent_indexs": sorted_indexs[:, :k] // k,
        "topk_indexs": np.asarray(topk_indexs, np.int64).reshape(b, w),
        "input_tree_mask": rng.random((b, w, max(input_count - 1, 0))) < 0.5,
        "batch_size": b, "node_top_k": k, "tree_width": w, "input_count": input_count,
        "cumu_count": cumu_count, "verify_num": verify_num, "curr_depth": 4,
        "max_input_size": max_input_size, "max_node_count": max_node_count,
        "max_verify_num": max_verify_num,
        "cumu_tokens": np.full((b, max_node_count), -777, np.int64),
        "cumu_scores": np.full((b, max_node_count), -3.0, np.float32),
        "cumu_deltas": np.full((b, max_node_count), -1, np.int64),
        "prev_indexs": np.full((b, max_node_count), -5, np.int64),
        "next_indexs": np.full((b, max_node_count), -2, np.int64),
        "side_indexs": np.full((b, max_node_count), -3, np.int64),
        "output_scores": np.full((b, k), -7.0, np.float32),
        "output_tokens": np.full((b, k), -9, np.int64),
        "work_scores": np.full((b, max_verify_num + k), -123.0, np.float32),
        "sort_scores": old_best.astype(np.float32),
        "output_tree_mask": rng.random((b, k, max_input_size + 1)) < 0.5,
    }
    return case


def check_against_reference(case, **kwargs):
    expected = reference(case)
    call(case, **kwargs)
    for name in STATE_NAMES:
        assert_same(case[name], expected[name], name)


@pytest.mark.parametrize("seed", range(40))
def test_random_cases_match_loop_reference(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 17))
    w = int(rng.integers(1, min(k, 128 // k) + 1))
    mi = int(rng.integers(0, 20))
    maxv = int(rng.integers(1, 40))
    case = random_case(
        rng, b=int(rng.integers(1, 4)), k=k, w=w, cumu_count=int(rng.integers(0, 60)),
        verify_num=int(rng.integers(-2, maxv + 5)), input_count=int(rng.integers(0, mi + 2)),
        max_input_size=mi, max_node_count=int(rng.integers(60, 200)), max_verify_num=maxv,
    )
    if node_budget_overflow(case["cumu_count"], k, w, case["max_node_count"]):
        with pytest.warns(NodeBudgetWarning):
            check_against_reference(case)
    else:
        check_against_reference(case)


@pytest.mark.parametrize("w", range(1, 9))
def test_every_width_links_blocks_under_their_parents(w):
    rng = np.random.default_rng(100 + w)
    parents = (np.arange(w) * 3 + 1).reshape(1, w)  # distinct node ids 1, 4, 7, ...
    case = random_case(rng, b=1, k=8, w=w, cumu_count=30, topk_indexs=parents,
                       max_node_count=128)
    check_against_reference(case)
    start = 30
    for slot in range(w):
        first = start + slot * 8
        assert case["next_indexs"][0, parents[0, slot]] == first
        block = np.arange(first, first + 8)
        assert (case["prev_indexs"][0, block] == parents[0, slot]).all()
        assert case["side_indexs"][0, block].tolist() == [*range(first + 1, first + 8), -1]
    assert (case["next_indexs"][0, start : start + 8 * w] == -1).all()


# --- directed cases ---------------------------------------------------------------------------


def test_new_scores_outrank_old_sort_scores():
    rng = np.random.default_rng(1)
    case = random_case(rng, b=1, k=2, w=2, cumu_count=3, verify_num=5, max_verify_num=8)
    case["sort_scores"][0, :3] = [0.3, 0.2, 0.1]
    case["sorted_scores"][0] = [0.9, 0.25, 0.2, 0.05]
    call(case)
    f = np.float32
    assert_same(case["sort_scores"][0, :5], np.array([0.9, 0.3, 0.25, 0.2, 0.2], f), "merge")
    assert_same(case["sort_scores"][0, 5:], np.full(3, -1234.0, f), "past ws1")
    assert_same(case["work_scores"][0, :5], np.array([0.3, 0.2, 0.1, 0.9, 0.25], f), "work")
    assert_same(case["work_scores"][0, 5:], np.full(5, -123.0, f), "work tail")


def test_merge_tie_takes_old_score_first_and_zero_signs_tie():
    rng = np.random.default_rng(2)
    case = random_case(rng, b=1, k=2, w=1, cumu_count=2, verify_num=4, max_verify_num=4)
    case["sort_scores"][0, :2] = [0.5, -0.0]
    case["sorted_scores"][0] = [0.0, -0.0]
    call(case)
    bits = case["sort_scores"][0].view(np.uint32).tolist()
    # A = [0.5, -0.0], C = [+0.0, -0.0]: -0.0 >= +0.0 holds, so A's -0.0 comes first.
    assert bits == [np.float32(0.5).view(np.uint32), 0x80000000, 0x00000000, 0x80000000]


@pytest.mark.parametrize(("verify_num", "ws0", "ws1"), [(4, 4, 4), (12, 10, 12), (40, 10, 16)])
def test_verify_num_below_and_above_cumu_count(verify_num, ws0, ws1):
    rng = np.random.default_rng(verify_num)
    case = random_case(rng, b=2, k=3, w=2, cumu_count=10, verify_num=verify_num,
                       max_verify_num=20)
    old = case["sort_scores"].copy()
    check_against_reference(case)
    for b in range(2):
        assert_same(case["work_scores"][b, :ws0], old[b, :ws0], "A copied")
        assert_same(case["work_scores"][b, ws0 : ws0 + 3], case["output_scores"][b], "C")
        assert (case["work_scores"][b, ws0 + 3 :] == -123.0).all()
        # Stable: equal keys (+0.0 / -0.0) keep A before C, as the merge does; numpy's
        # default sort orders them differently on different CPUs.
        merged = -np.sort(-np.concatenate([old[b, :ws0], case["sorted_scores"][b]]),
                          kind="stable")[:ws1]
        assert_same(case["sort_scores"][b, :ws1], merged, "top ws1")
        assert_same(case["sort_scores"][b, ws1:], old[b, ws1:], "beyond ws1")


@pytest.mark.parametrize(("verify_num", "v"), [(0, 1), (-5, 1), (99, 20)])
def test_verify_num_is_clamped(verify_num, v):
    rng = np.random.default_rng(7)
    case = random_case(rng, b=1, k=2, w=2, cumu_count=30, verify_num=verify_num,
                       max_verify_num=20)
    old = case["sort_scores"].copy()
    call(case)
    assert_same(case["work_scores"][0, v : v + 2], case["output_scores"][0], "C at v")
    assert_same(case["sort_scores"][0, v:], old[0, v:], "untouched past v")


def guarded(array, guard=5, fill=-999):
    """A contiguous view of ``array`` inside a bigger buffer with sentinel guards."""
    backing = np.full(array.size + 2 * guard, fill, dtype=array.dtype)
    view = backing[guard : guard + array.size]
    view[...] = array.reshape(-1)
    return backing, view


def test_node_budget_overflow_drops_appends_and_reports():
    rng = np.random.default_rng(3)
    case = random_case(rng, b=2, k=2, w=2, cumu_count=5, max_node_count=8,
                       topk_indexs=[[1, 2], [3, 4]])
    assert node_budget_overflow(5, 2, 2, 8) == 1
    backings = {}
    for name in STATE_NAMES[:6]:
        backings[name], case[name] = guarded(case[name])
    expected = reference(case)
    with pytest.warns(NodeBudgetWarning, match="1 appends per request are dropped"):
        call(case)
    for name in STATE_NAMES:
        assert_same(case[name], expected[name], name)
    for name, backing in backings.items():
        assert (backing[:5] == -999).all() and (backing[-5:] == -999).all(), name
    tokens = case["cumu_tokens"].reshape(2, 8)
    assert_same(tokens[:, 5:], case["topk_tokens"][:, :3], "kept appends")
    side = case["side_indexs"].reshape(2, 8)
    assert side[:, 7].tolist() == [8, 8]  # §3: g+1 even when it names a dropped slot
    assert case["next_indexs"].reshape(2, 8)[0, [1, 2]].tolist() == [5, 7]


def test_node_budget_strict_raises_before_writing():
    rng = np.random.default_rng(4)
    case = random_case(rng, b=1, k=4, w=2, cumu_count=60, max_node_count=64)
    before = {name: case[name].copy() for name in STATE_NAMES}
    with pytest.raises(NodeBudgetError, match="exceeds `max_node_count`"):
        call(case, strict=True)
    for name in STATE_NAMES:
        assert_same(case[name], before[name], name)


@pytest.mark.parametrize(("cumu", "k", "w", "maxn", "dropped"),
                         [(0, 8, 8, 64, 0), (1, 8, 8, 64, 1), (60, 4, 2, 64, 4), (70, 2, 1, 64, 2)])
def test_node_budget_overflow_counts(cumu, k, w, maxn, dropped):
    assert node_budget_overflow(cumu, k, w, maxn) == dropped


def test_cumu_count_at_or_past_budget_appends_nothing():
    rng = np.random.default_rng(5)
    case = random_case(rng, b=1, k=2, w=2, cumu_count=70, max_node_count=64,
                       topk_indexs=[[3, 90]])
    before = {name: case[name].copy() for name in STATE_NAMES[:6]}
    with pytest.warns(NodeBudgetWarning):
        check_against_reference(case)
    changed = case["next_indexs"] != before["next_indexs"]
    assert np.flatnonzero(changed).tolist() == [3]
    assert case["next_indexs"][0, 3] == 70
    for name in ("cumu_tokens", "cumu_scores", "prev_indexs", "side_indexs"):
        assert_same(case[name], before[name], name)


def test_k1_has_no_sibling_links():
    rng = np.random.default_rng(6)
    case = random_case(rng, b=2, k=1, w=1, cumu_count=7, topk_indexs=[[3], [6]])
    check_against_reference(case)
    assert (case["side_indexs"][:, 7] == -1).all()
    assert case["next_indexs"][:, [3, 6]].tolist() == [[7, -2], [-2, 7]]
    assert (case["side_indexs"][:, 8:] == -3).all()


@pytest.mark.parametrize("input_count", [0, 1])
def test_input_count_0_and_1_copy_no_mask_columns(input_count):
    rng = np.random.default_rng(input_count)
    case = random_case(rng, input_count=input_count)
    assert case["input_tree_mask"].shape == (2, 3, 0)
    before = case["output_tree_mask"].copy()
    check_against_reference(case)
    assert_same(case["output_tree_mask"], before, "mask untouched")


def test_mask_rows_copied_from_parents_up_to_input_count_minus_1():
    rng = np.random.default_rng(8)
    case = random_case(rng, input_count=9, max_input_size=8)  # the widest: MI columns
    before = case["output_tree_mask"].copy()
    call(case)
    for b in range(2):
        for i in range(4):
            parent = case["parent_indexs"][b, i]
            assert_same(case["output_tree_mask"][b, i, :8], case["input_tree_mask"][b, parent],
                        "row")
    assert_same(case["output_tree_mask"][:, :, 8], before[:, :, 8], "self column not set")


def test_duplicate_frontier_parents_last_write_wins():
    rng = np.random.default_rng(9)
    case = random_case(rng, b=1, k=3, w=3, cumu_count=12, topk_indexs=[[5, 5, 2]])
    check_against_reference(case)
    assert case["next_indexs"][0, 5] == 12 + 1 * 3  # slot 1 (the higher w) wins
    assert case["next_indexs"][0, 2] == 12 + 2 * 3
    assert case["prev_indexs"][0, 12:18].tolist() == [5] * 6  # both blocks keep parent 5
    assert case["side_indexs"][0, 12:15].tolist() == [13, 14, -1]


def test_batch_size_zero_is_a_no_op():
    rng = np.random.default_rng(10)
    case = random_case(rng, b=1)
    zero = {name: np.zeros((0,) + np.shape(case[name])[1:], np.asarray(case[name]).dtype)
            for name in (*INPUT_NAMES, *STATE_NAMES)}
    case.update(zero, batch_size=0)
    assert call(case) is None


def test_scores_are_one_float32_multiply_by_0_9999f():
    rng = np.random.default_rng(11)
    case = random_case(rng, b=1, k=4, w=4, cumu_count=0)
    probas = np.array([[1.0, 0.5, 3e-39, 0.7, *rng.random(12)]], np.float32)  # incl. subnormal
    case["topk_probas"] = probas
    call(case)
    expected = (probas.astype(np.float64) * np.float64(SCALE)).astype(np.float32)
    assert_same(case["cumu_scores"][0, :16], expected, "scaled")  # exact product, rounded once


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tree_width": 12}, "`tree_width` must be between 1 and `node_top_k`, not 12"),
        ({"tree_width": 0}, "`tree_width` must be between 1 and `node_top_k`, not 0"),
        ({"node_top_k": 17}, "`node_top_k` must be between 1 and 16, not 17"),
        ({"batch_size": -1}, "`batch_size` must be at least 0, not -1"),
        ({"cumu_count": -1}, "`cumu_count` must be at least 0, not -1"),
        ({"input_count": 10},
         "`input_count` must be between 0 and `max_input_size` \\+ 1, not 10"),
        ({"max_node_count": 0}, "`max_node_count` must be at least 1, not 0"),
        ({"verify_num": 2.0}, "`verify_num` must be an integer"),
        ({"curr_depth": True}, "`curr_depth` must be an integer"),
    ],
)
def test_invalid_scalars_raise_before_writing(change, message):
    rng = np.random.default_rng(12)
    case = random_case(rng)
    before = {name: case[name].copy() for name in STATE_NAMES}
    case.update(change)
    with pytest.raises(ValueError, match=message):
        call(case)
    for name in STATE_NAMES:
        assert_same(case[name], before[name], name)


def test_n_above_128_is_rejected():
    rng = np.random.default_rng(13)
    case = random_case(rng, k=12, w=11)
    with pytest.raises(ValueError, match="must be at most 128, not 132"):
        call(case)


@pytest.mark.parametrize(
    ("name", "bad", "message"),
    [
        ("cumu_scores", lambda a: a.astype(np.float64), "must have dtype float32"),
        ("topk_tokens", lambda a: a.astype(np.int32), "must have dtype int64"),
        ("sort_scores", lambda a: a[:, :-1], "must have 32 elements"),
        ("next_indexs", lambda a: np.asfortranarray(a), "must be C-contiguous"),
        ("work_scores", lambda a: a.tolist(), "must be a numpy array"),
        ("sorted_indexs", lambda a: a + 12, "`sorted_indexs` values must be between 0 and N - 1"),
        ("parent_indexs", lambda a: a - 1 - a.max(),
         "`parent_indexs` values must be between 0 and `tree_width` - 1"),
    ],
)
def test_invalid_arrays_raise_before_writing(name, bad, message):
    rng = np.random.default_rng(14)
    case = random_case(rng)
    case[name] = bad(case[name])
    before = {n: np.array(case[n], copy=True) for n in STATE_NAMES}
    with pytest.raises(ValueError, match=message):
        call(case)
    for n in STATE_NAMES:
        assert_same(np.asarray(case[n]), before[n], n)


def test_read_only_output_is_rejected():
    rng = np.random.default_rng(15)
    case = random_case(rng)
    case["output_scores"].flags.writeable = False
    with pytest.raises(ValueError, match="`output_scores` must be writable"):
        call(case)
