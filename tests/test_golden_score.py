"""Tests of golden/score.py: K1 draft_tree_layer_score_index_gen_op (docs/kernels.md §2)."""

import numpy as np
import pytest

from golden import draft_tree_layer_score_index_gen_op
from golden.cases import read_case
from golden.score import score_layer
from golden.sort import bitonic_sort_desc

F_SENTINEL = np.float32(-777.0)
I_SENTINEL = -777
U16_SENTINEL = 0xBEEF  # bfloat16 bits of output_hidden_states
OUTPUTS = (
    "curr_layer_scores",
    "sort_layer_scores",
    "sort_layer_indices",
    "cache_topk_indices",
    "parent_indices_in_layer",
    "output_hidden_states",
)


def _bits(a):
    a = np.asarray(a)
    views = {8: np.uint64, 4: np.uint32, 2: np.uint16}
    return a.view(views[a.dtype.itemsize]) if a.dtype.kind == "f" else a


def _outputs(b, k, w, h, hidden_dtype=np.float32, flat=False, f_fill=F_SENTINEL, i_fill=I_SENTINEL):
    n = w * k
    shapes = {
        "curr_layer_scores": ((b, n), np.float32),
        "sort_layer_scores": ((b, n), np.float32),
        "sort_layer_indices": ((b, n), np.int64),
        "cache_topk_indices": ((b, k), np.int64),
        "parent_indices_in_layer": ((b, k), np.int64),
        "output_hidden_states": ((b, k, h), hidden_dtype),
    }
    out = {}
    for name, (shape, dtype) in shapes.items():
        fill = {"i": i_fill, "u": U16_SENTINEL, "f": f_fill}[np.dtype(dtype).kind]
        out[name] = np.full(shape, fill, dtype=dtype)
        if flat:
            out[name] = out[name].reshape(-1)
    return out


def _call(inputs, out, b, k, w, cumu, use_hot, **kw):
    return draft_tree_layer_score_index_gen_op(
        inputs["topk_probas_sampling"], inputs.get("topk_tokens_sampling"),
        inputs["last_layer_scores"], out["curr_layer_scores"], out["sort_layer_scores"],
        out["sort_layer_indices"], out["cache_topk_indices"], out["parent_indices_in_layer"],
        inputs["input_hidden_states"], out["output_hidden_states"], inputs.get("hot_token_id"),
        b, k, w, cumu, use_hot, **kw,
    )


def _random_inputs(rng, b, k, w, h, hidden_dtype=np.float32, v_hot=50):
    n = w * k
    # Quantised probabilities and parent scores so that products tie often.
    probas = rng.choice(np.array([0.0, 0.125, 0.25, 0.5, 0.75, 1.0], np.float32), size=(b, n))
    probas[:, ::3] = rng.random((b, len(range(0, n, 3))), dtype=np.float32)
    last = rng.choice(np.array([1.0, 0.5, 0.3], np.float32), size=(b, w))
    # Random bit patterns (NaN payloads included): the gather must copy bits, not values.
    bits_dtype = np.uint32 if np.dtype(hidden_dtype).itemsize == 4 else np.uint16
    hidden_bits = rng.integers(0, np.iinfo(bits_dtype).max, size=(b, w, h), dtype=bits_dtype)
    hidden = hidden_bits.view(hidden_dtype)
    return {
        "topk_probas_sampling": probas,
        "topk_tokens_sampling": rng.integers(-2, v_hot + 2, size=(b, n), dtype=np.int64),
        "last_layer_scores": last,
        "input_hidden_states": hidden,
        "hot_token_id": rng.integers(10**6, 2 * 10**6, size=v_hot, dtype=np.int64),
    }


def _reference(inputs, b, k, w, cumu, use_hot, sort_width):
    """The §2 steps as plain loops over requests, candidates and the K best."""
    n = w * k
    probas = inputs["topk_probas_sampling"].reshape(b, n)
    last = inputs["last_layer_scores"].reshape(b, w)
    hidden = inputs["input_hidden_states"].reshape(b, w, -1)
    tokens = inputs["topk_tokens_sampling"].reshape(b, n).copy()
    hot = inputs["hot_token_id"]
    ref = _outputs(b, k, w, hidden.shape[2], hidden.dtype)
    for bi in range(b):
        for t in range(n):
            ref["curr_layer_scores"][bi, t] = np.float32(probas[bi, t]) * np.float32(
                last[bi, t // k]
            )
            if use_hot and 0 <= tokens[bi, t] < len(hot):
                tokens[bi, t] = hot[tokens[bi, t]]
        s, idx = bitonic_sort_desc(ref["curr_layer_scores"][bi : bi + 1], sort_width=sort_width)
        ref["sort_layer_scores"][bi] = s[0]
        ref["sort_layer_indices"][bi] = idx[0]
        for kk in range(k):
            t = int(idx[0, kk])
            ref["cache_topk_indices"][bi, kk] = cumu + t
            ref["parent_indices_in_layer"][bi, kk] = t // k
            ref["output_hidden_states"][bi, kk, :] = hidden[bi, t // k, :]
    ref["topk_tokens_sampling"] = tokens
    return ref


def _assert_same(got, expected):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(_bits(got).reshape(-1), _bits(expected).reshape(-1))


def _capture():
    case = read_case("cost_draft_tree_score_case")
    b, k, w, h, cumu = case.meta
    inputs = {
        "topk_probas_sampling": case.f32("topk_probas_sampling"),
        "last_layer_scores": case.f32("last_layer_scores"),
        "input_hidden_states": case.f32("input_hidden_states"),
    }
    return case, inputs, (b, k, w, h, cumu)


@pytest.mark.parametrize(("f_fill", "i_fill"), [(F_SENTINEL, I_SENTINEL), (np.nan, -3)])
def test_cuda_capture_reproduced_exactly(f_fill, i_fill):
    # Run twice with different sentinels: every output element is written (the capture's
    # outputs hold no sentinel) and equals the CUDA value bit for bit.
    case, inputs, (b, k, w, h, cumu) = _capture()
    out = _outputs(b, k, w, h, flat=True, f_fill=f_fill, i_fill=i_fill)
    _call(inputs, out, b, k, w, cumu, False)
    for name in OUTPUTS:
        expected = case.i64 if "indices" in name else case.f32
        _assert_same(out[name], expected(f"expected_{name}"))


def test_capture_expected_outputs_hold_no_sentinel():
    case, _, (b, k, w, h, cumu) = _capture()
    for name in OUTPUTS:
        values = np.array(case[f"expected_{name}"], dtype=np.float64)
        assert not np.isin(values, [-777.0, -3.0, -123.0]).any(), name
    n = w * k
    idx = case.i64("expected_sort_layer_indices").reshape(b, n)
    for row in idx:
        assert sorted(row.tolist()) == list(range(n))


def test_capture_with_shaped_arrays_and_functional_wrapper():
    case, inputs, (b, k, w, h, cumu) = _capture()
    n = w * k
    shaped = {
        "topk_probas_sampling": inputs["topk_probas_sampling"].reshape(b, n),
        "last_layer_scores": inputs["last_layer_scores"].reshape(b, w),
        "input_hidden_states": inputs["input_hidden_states"].reshape(b, w, h),
    }
    out = _outputs(b, k, w, h)
    _call(shaped, out, b, k, w, cumu, False)
    result = score_layer(
        inputs["topk_probas_sampling"], inputs["last_layer_scores"],
        inputs["input_hidden_states"], k, w, cumu,
    )
    for name in OUTPUTS:
        expected = case.i64 if "indices" in name else case.f32
        _assert_same(out[name], expected(f"expected_{name}"))
        _assert_same(result[name], out[name])
        assert result[name].shape == out[name].shape


@pytest.mark.parametrize("use_hot", [True, False, 1, 0])
def test_token_remap_edges(use_hot):
    rng = np.random.default_rng(3)
    b, k, w, h, v_hot = 2, 4, 2, 3, 6
    inputs = _random_inputs(rng, b, k, w, h, v_hot=v_hot)
    hot = np.array([100, 101, 102, 103, 104, 105], np.int64)
    tokens = np.array([[0, v_hot - 1, v_hot, -1, 3, 2**40, -(2**62), 0]] * b, np.int64)
    inputs["hot_token_id"] = hot
    inputs["topk_tokens_sampling"] = tokens
    original = tokens.copy()
    out = _outputs(b, k, w, h)
    _call(inputs, out, b, k, w, 5, use_hot)
    if use_hot:
        expected = [[100, 105, v_hot, -1, 103, 2**40, -(2**62), 100]] * b
        assert tokens.tolist() == expected
    else:
        np.testing.assert_array_equal(tokens, original)
    ref = _reference({**inputs, "topk_tokens_sampling": original}, b, k, w, 5, use_hot, 64)
    np.testing.assert_array_equal(tokens, ref["topk_tokens_sampling"])
    for name in OUTPUTS:
        _assert_same(out[name], ref[name])


def test_remap_with_empty_table_and_flat_tokens():
    rng = np.random.default_rng(4)
    inputs = _random_inputs(rng, 1, 2, 1, 1)
    tokens = np.array([0, -1], np.int64)
    inputs["topk_tokens_sampling"] = tokens
    inputs["hot_token_id"] = np.zeros(0, np.int64)
    _call(inputs, _outputs(1, 2, 1, 1), 1, 2, 1, 0, True)
    assert tokens.tolist() == [0, -1]
    tokens[:] = [1, 0]
    inputs["hot_token_id"] = np.array([7, 8], np.int64)
    _call(inputs, _outputs(1, 2, 1, 1, flat=True), 1, 2, 1, 0, True)
    assert tokens.tolist() == [8, 7]


def test_functional_wrapper_remaps_a_copy():
    rng = np.random.default_rng(5)
    inputs = _random_inputs(rng, 2, 3, 2, 4)
    before = inputs["topk_tokens_sampling"].copy()
    result = score_layer(
        inputs["topk_probas_sampling"], inputs["last_layer_scores"],
        inputs["input_hidden_states"], 3, 2, 9,
        topk_tokens_sampling=inputs["topk_tokens_sampling"], hot_token_id=inputs["hot_token_id"],
    )
    np.testing.assert_array_equal(inputs["topk_tokens_sampling"], before)
    ref = _reference(inputs, 2, 3, 2, 9, True, 64)
    np.testing.assert_array_equal(result["topk_tokens_sampling"], ref["topk_tokens_sampling"])


def test_batch_zero_writes_nothing():
    rng = np.random.default_rng(6)
    inputs = _random_inputs(rng, 1, 4, 2, 3)
    tokens_before = inputs["topk_tokens_sampling"].copy()
    out = _outputs(1, 4, 2, 3)
    before = {name: a.copy() for name, a in out.items()}
    _call(inputs, out, 0, 4, 2, 0, True)
    for name in OUTPUTS:
        _assert_same(out[name], before[name])
    np.testing.assert_array_equal(inputs["topk_tokens_sampling"], tokens_before)
    # Empty arrays are fine too: accepted, and the (non-empty) hot_token_id map untouched.
    empty = _random_inputs(rng, 0, 4, 2, 3)
    hot_before = empty["hot_token_id"].copy()
    assert empty["hot_token_id"].size > 0
    empty_out = _outputs(0, 4, 2, 3)
    assert _call(empty, empty_out, 0, 4, 2, 0, True) is None
    np.testing.assert_array_equal(empty["hot_token_id"], hot_before)
    assert {name: a.shape for name, a in empty_out.items()} == \
        {name: a.shape for name, a in _outputs(0, 4, 2, 3).items()}


@pytest.mark.parametrize("k", [1, 4, 8, 10])
def test_every_width_against_reference(k):
    rng = np.random.default_rng(k)
    dtypes = [np.float32, np.float16, np.uint16]
    for w in range(1, k + 1):
        sort_width = 64 if w * k <= 64 else 128
        for use_hot in (False, True):
            b, h = 3, 5
            dtype = dtypes[(w + use_hot) % 3]
            inputs = _random_inputs(rng, b, k, w, h, dtype)
            ref = _reference(inputs, b, k, w, 17 * w, use_hot, sort_width)
            out = _outputs(b, k, w, h, dtype, flat=bool(w % 2))
            _call(inputs, out, b, k, w, 17 * w, use_hot, sort_width=sort_width)
            for name in OUTPUTS:
                _assert_same(out[name], ref[name])
            np.testing.assert_array_equal(
                inputs["topk_tokens_sampling"], ref["topk_tokens_sampling"]
            )
            if w * k <= 64:  # the wider network gives the same result
                out128 = _outputs(b, k, w, h, dtype)
                inputs["topk_tokens_sampling"] = ref["topk_tokens_sampling"]
                _call(inputs, out128, b, k, w, 17 * w, False, sort_width=128)
                for name in OUTPUTS:
                    _assert_same(out128[name], ref[name])


def test_float32_product_is_one_rounded_multiply():
    # 1/3 * 3 rounds to 1.0 in float32 (RNE); a subnormal product, 3 * 2**-130, is kept
    # exactly (no flush-to-zero).
    third = np.float32(1) / np.float32(3)
    probas = np.array([[third, np.float32(2.0**-130), 0.5, 0.25]], np.float32)
    last = np.array([[3.0, 0.5]], np.float32)
    result = score_layer(probas, last, np.zeros((1, 2, 1), np.float32), 2, 2, 0)
    curr = result["curr_layer_scores"][0]
    assert curr[0] == np.float32(third) * np.float32(3.0)
    assert curr[1] == np.float32(3 * 2.0**-130) and curr[1] != 0
    assert result["sort_layer_indices"][0].tolist() == [0, 2, 3, 1]


def _valid_call_args(rng):
    b, k, w, h = 2, 4, 2, 3
    inputs = _random_inputs(rng, b, k, w, h)
    out = _outputs(b, k, w, h)
    args = {
        "topk_probas_sampling": inputs["topk_probas_sampling"],
        "topk_tokens_sampling": inputs["topk_tokens_sampling"],
        "last_layer_scores": inputs["last_layer_scores"],
        **{name: out[name] for name in OUTPUTS[:5]},
        "input_hidden_states": inputs["input_hidden_states"],
        "output_hidden_states": out["output_hidden_states"],
        "hot_token_id": inputs["hot_token_id"],
        "batch_size": b,
        "node_top_k": k,
        "tree_width": w,
        "cumu_count": 3,
        "use_hot_token_id": True,
    }
    return args


INVALID = [
    ({"node_top_k": 0}, "`node_top_k` must be between 1 and 16, not 0"),
    ({"node_top_k": 17}, "`node_top_k` must be between 1 and 16, not 17"),
    ({"tree_width": 12}, "`tree_width` must be between 1 and `node_top_k`, not 12"),
    ({"tree_width": 0}, "`tree_width` must be between 1 and `node_top_k`, not 0"),
    ({"batch_size": -1}, "`batch_size` must be non-negative, not -1"),
    ({"cumu_count": -2}, "`cumu_count` must be non-negative, not -2"),
    ({"node_top_k": 2.0}, "`node_top_k` must be an integer, not float"),
    ({"use_hot_token_id": 2}, "`use_hot_token_id` must be a bool or 0/1, not 2"),
    (
        {"batch_size": 3},
        r"`topk_probas_sampling` must have shape \(3, 8\) or \(24,\), not \(2, 8\)",
    ),
    (
        {"sort_layer_indices": np.zeros((2, 8), np.int32)},
        "`sort_layer_indices` must be int64, not int32",
    ),
    (
        {"curr_layer_scores": np.zeros((2, 7), np.float32)},
        r"`curr_layer_scores` must have shape \(2, 8\) or \(16,\), not \(2, 7\)",
    ),
    (
        {"parent_indices_in_layer": np.zeros((2, 8), np.int64)[:, ::2]},
        "`parent_indices_in_layer` must be C-contiguous and writeable",
    ),
    (
        {"output_hidden_states": np.zeros((2, 4, 3), np.float16)},
        "`output_hidden_states` must be float32, not float16",
    ),
    (
        {"input_hidden_states": np.zeros((2, 2, 3), np.float64)},
        "`input_hidden_states` must be float32 or float16 or uint16, not float64",
    ),
    (
        {"input_hidden_states": np.zeros(13, np.float32)},
        "`input_hidden_states` must have shape",
    ),
    ({"last_layer_scores": [[1.0, 1.0]] * 2}, "`last_layer_scores` must be a numpy array"),
    ({"topk_tokens_sampling": None}, "`topk_tokens_sampling` must be a numpy array, not NoneType"),
    ({"hot_token_id": np.zeros(3, np.int32)}, "`hot_token_id` must be a 1-D int64"),
    (
        {"node_top_k": 16, "tree_width": 5},
        r"`tree_width \* node_top_k` must be at most `sort_width` \(64\), not 80",
    ),
]


def _assert_rejected_untouched(args, match, **kw):
    before = {name: a.copy() for name, a in args.items() if isinstance(a, np.ndarray)}
    with pytest.raises(ValueError, match=match):
        draft_tree_layer_score_index_gen_op(*args.values(), **kw)
    for name, a in args.items():
        if isinstance(a, np.ndarray):
            _assert_same(a, before[name])


@pytest.mark.parametrize(("change", "match"), INVALID)
def test_invalid_calls_raise_before_writing(change, match):
    args = _valid_call_args(np.random.default_rng(8))
    args.update(change)
    _assert_rejected_untouched(args, match)


def test_invalid_sort_width():
    args = _valid_call_args(np.random.default_rng(9))
    _assert_rejected_untouched(args, "`sort_width` must be 64 or 128, not 32", sort_width=32)


def test_readonly_output_rejected():
    args = _valid_call_args(np.random.default_rng(10))
    args["sort_layer_scores"].setflags(write=False)
    _assert_rejected_untouched(args, "`sort_layer_scores` must be C-contiguous and writeable")


@pytest.mark.parametrize("bad", [np.nan, -np.inf, np.float32(-2e10)])
def test_unrankable_scores_raise_before_writing(bad):
    args = _valid_call_args(np.random.default_rng(11))
    args["topk_probas_sampling"][1, 3] = bad
    args["last_layer_scores"][1, 0] = 1.0
    _assert_rejected_untouched(args, "NaN|sort pad")


def test_unused_token_arguments_ignored_without_remap():
    args = _valid_call_args(np.random.default_rng(12))
    args["use_hot_token_id"] = False
    args["topk_tokens_sampling"] = "not read"
    args["hot_token_id"] = None
    draft_tree_layer_score_index_gen_op(*args.values())
    assert (args["cache_topk_indices"] >= 3).all()
