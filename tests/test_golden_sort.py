"""Tests of golden/sort.py: the §1 bitonic sort network."""

import numpy as np
import pytest

from golden.sort import SORT_PAD, bitonic_sort_desc, sort_network_stages

TIE_VALUES = np.array([0.0, -0.0, 0.25, 0.5, 0.5, 1.0, -1.0, 3.0], dtype=np.float32)


def _spec_loop_sort(scores, sort_width):
    """§1 transcribed literally: nested Python loops over size, stride and tid, scalar swaps."""
    n = len(scores)
    s = [np.float32(x) for x in scores] + [np.float32(-1e10)] * (sort_width - n)
    idx = list(range(sort_width))
    size = 2
    while size <= sort_width:
        stride = size // 2
        while stride >= 1:
            for tid in range(sort_width // 2):
                i = (tid // stride) * (2 * stride) + (tid % stride)
                j = i + stride
                desc = (i & size) == 0
                if (desc and s[i] < s[j]) or (not desc and s[i] > s[j]):
                    s[i], s[j] = s[j], s[i]
                    idx[i], idx[j] = idx[j], idx[i]
            stride //= 2
        size *= 2
    return np.array(s[:n], np.float32), np.array(idx[:n], np.int64)


def _tie_rows(rng, rows, n):
    return rng.choice(TIE_VALUES, size=(rows, n))


def _check_sorted_permutation(scores, out_s, out_i):
    rows, n = scores.shape
    assert out_s.dtype == np.float32 and out_i.dtype == np.int64
    assert out_s.shape == out_i.shape == (rows, n)
    assert np.all(out_s[:, :-1] >= out_s[:, 1:])
    np.testing.assert_array_equal(np.sort(out_i, axis=1), np.tile(np.arange(n), (rows, 1)))
    gathered = np.take_along_axis(scores, out_i, axis=1)
    np.testing.assert_array_equal(gathered.view(np.uint32), out_s.view(np.uint32))


def test_pad_bits():
    assert np.array(SORT_PAD, np.float32).view(np.uint32) == 0xD01502F9


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([0.5, 0.5, 0.7, 0.5], [2, 0, 3, 1]),
        ([0.1, 0.3, 0.3, 0.1, 0.3, 0.1, 0.3, 0.1], [1, 2, 4, 6, 7, 5, 3, 0]),
    ],
)
@pytest.mark.parametrize("sort_width", [64, 128])
def test_spec_tie_examples(scores, expected, sort_width):
    s, i = bitonic_sort_desc(np.array([scores], np.float32), sort_width=sort_width)
    assert i.tolist() == [expected]
    np.testing.assert_array_equal(s[0], np.sort(np.array(scores, np.float32))[::-1])


def test_signed_zeros_are_equal():
    # Scores [-0.0, +0.0, 1.0, -0.0], n = 4. For n <= 4 only phases 2 and 4 can swap: after
    # them lanes 0..3 are descending and every later pair meets either a descending pair of
    # candidates or (candidate, pad) with the candidate on the lower, descending lane.
    # size 2, stride 1: (0,1) desc: -0 < +0 is false -> no swap;
    #                   (2,3) asc: 1.0 > -0 -> swap -> [-0(0), +0(1), -0(3), 1(2)]
    # size 4, stride 2: (0,2) desc: -0 < -0 false; (1,3) desc: +0 < 1 -> swap
    #                   -> [-0(0), 1(2), -0(3), +0(1)]
    # size 4, stride 1: (0,1) desc: -0 < 1 -> swap; (2,3) desc: -0 < +0 false
    #                   -> [1(2), -0(0), -0(3), +0(1)]
    # An implementation that ordered +0 above -0 would swap at the first pair already.
    scores = np.array([[-0.0, 0.0, 1.0, -0.0]], np.float32)
    for width in (64, 128):
        s, i = bitonic_sort_desc(scores, sort_width=width)
        assert i.tolist() == [[2, 0, 3, 1]]
        assert s.view(np.uint32).tolist() == [[0x3F800000, 0x80000000, 0x80000000, 0x00000000]]


def test_all_equal_is_identity():
    for n in (1, 5, 12, 64):
        s, i = bitonic_sort_desc(np.full((1, n), 0.5, np.float32))
        assert i.tolist() == [list(range(n))]


@pytest.mark.parametrize("sort_width", [64, 128])
def test_stage_list(sort_width):
    stages = sort_network_stages(sort_width)
    assert len(stages) == {64: 21, 128: 28}[sort_width]
    for stage in stages:
        assert len(stage) == sort_width // 2
        lanes = [lane for i, j, _ in stage for lane in (i, j)]
        assert sorted(lanes) == list(range(sort_width))
        assert all(i < j for i, j, _ in stage)
    # The first stage pairs neighbours, alternately descending and ascending.
    assert stages[0][:3] == [(0, 1, True), (2, 3, False), (4, 5, True)]
    # The last phase (size == sort_width) is descending everywhere.
    assert all(d for stage in stages[-(sort_width.bit_length() - 1):] for _, _, d in stage)


def test_matches_literal_spec_loop():
    rng = np.random.default_rng(7)
    for width in (64, 128):
        for n in (1, 2, 3, 4, 7, 12, 24, 33, 48, 63, 64, 100, 127, 128):
            if n > width:
                continue
            rows = np.concatenate([_tie_rows(rng, 3, n), rng.random((2, n), np.float32)])
            s, i = bitonic_sort_desc(rows, sort_width=width)
            for r in range(rows.shape[0]):
                ref_s, ref_i = _spec_loop_sort(rows[r], width)
                np.testing.assert_array_equal(i[r], ref_i)
                np.testing.assert_array_equal(s[r].view(np.uint32), ref_s.view(np.uint32))


@pytest.mark.parametrize("n", range(1, 65))
def test_random_rows_sort(n):
    rng = np.random.default_rng(n)
    scores = np.concatenate(
        [rng.random((20, n), dtype=np.float32), _tie_rows(rng, 20, n)], axis=0
    )
    s, i = bitonic_sort_desc(scores)
    _check_sorted_permutation(scores, s, i)


@pytest.mark.parametrize("n", range(1, 65))
def test_width_128_equals_width_64_with_ties(n):
    rng = np.random.default_rng(1000 + n)
    scores = np.concatenate(
        [_tie_rows(rng, 200, n), rng.random((10, n), dtype=np.float32)], axis=0
    )
    s64, i64 = bitonic_sort_desc(scores, sort_width=64)
    s128, i128 = bitonic_sort_desc(scores, sort_width=128)
    np.testing.assert_array_equal(i128, i64)
    np.testing.assert_array_equal(s128.view(np.uint32), s64.view(np.uint32))


@pytest.mark.parametrize("n", range(65, 129))
def test_width_128_sorts_large_n(n):
    rng = np.random.default_rng(n)
    scores = np.concatenate(
        [rng.random((10, n), dtype=np.float32), _tie_rows(rng, 10, n)], axis=0
    )
    s, i = bitonic_sort_desc(scores, sort_width=128)
    _check_sorted_permutation(scores, s, i)


def test_negative_and_extreme_scores():
    scores = np.array([[-1e9, np.inf, -5.0, 3.0e38, 1e-45, -1e-45]], np.float32)
    s, i = bitonic_sort_desc(scores)
    _check_sorted_permutation(scores, s, i)
    assert i.tolist() == [[1, 3, 4, 5, 2, 0]]


def test_input_not_modified_and_zero_rows():
    scores = np.array([[0.1, 0.9]], np.float32)
    before = scores.copy()
    bitonic_sort_desc(scores)
    np.testing.assert_array_equal(scores, before)
    s, i = bitonic_sort_desc(np.zeros((0, 5), np.float32))
    assert s.shape == i.shape == (0, 5)


def test_nan_keeps_a_permutation():
    # Outside the contract: NaN never swaps, but lanes still move as a permutation.
    scores = np.array([[0.1, np.nan, 0.9, 0.5]], np.float32)
    s, i = bitonic_sort_desc(scores)
    assert sorted(i[0].tolist()) == [0, 1, 2, 3]
    assert np.isnan(s[0][i[0] == 1]).all()


@pytest.mark.parametrize(
    ("scores", "width", "match"),
    [
        (np.zeros((1, 4), np.float32), 32, "`sort_width` must be 64 or 128, not 32"),
        (np.zeros((1, 65), np.float32), 64, r"between 1 and `sort_width` \(64\), not 65"),
        (np.zeros((1, 129), np.float32), 128, r"between 1 and `sort_width` \(128\), not 129"),
        (np.zeros((1, 0), np.float32), 64, "not 0"),
        (np.zeros(4, np.float32), 64, r"shape \(rows, n\)"),
        (np.zeros((1, 4), np.float64), 64, "float32"),
        ([[1.0, 2.0]], 64, "float32 numpy array, not list"),
    ],
)
def test_invalid_arguments(scores, width, match):
    with pytest.raises(ValueError, match=match):
        bitonic_sort_desc(scores, sort_width=width)


def test_invalid_stage_width():
    with pytest.raises(ValueError, match="not 256"):
        sort_network_stages(256)
