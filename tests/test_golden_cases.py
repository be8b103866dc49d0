"""Tests of golden/cases.py: the case-file reader and writer."""

import numpy as np
import pytest

from golden.cases import CAPTURES_DIR, Case, read_case, write_case


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def _special_f32() -> np.ndarray:
    bits = [
        0x00000000,  # +0.0
        0x80000000,  # -0.0
        0x00000001,  # smallest subnormal
        0x807FFFFF,  # largest negative subnormal
        0x00400000,  # mid subnormal
        0x00800000,  # smallest normal
        0x7F7FFFFF,  # max finite
        0xFF7FFFFF,  # min finite
        0x7F800000,  # +inf
        0xFF800000,  # -inf
        0x7FC00000,  # canonical quiet NaN
        0xD01502F9,  # -1e10f, the sort pad
        0x3F7FF972,  # 0.9999f
        0x3F8020C5,  # 1.001f
    ]
    return np.array(bits, dtype=np.uint32).view(np.float32)


def _random_f32(rng, n: int) -> np.ndarray:
    bits = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
    nan = (bits & 0x7F800000 == 0x7F800000) & (bits & 0x007FFFFF != 0)
    bits[nan] = 0x7FC00000  # only the canonical NaN round-trips (documented)
    return bits.view(np.float32)


def test_float32_round_trip_bit_exact(tmp_path):
    rng = np.random.default_rng(1)
    values = np.concatenate([_special_f32(), _random_f32(rng, 5000)])
    path = tmp_path / "f.txt"
    write_case(path, {"x": values})
    back = read_case(path).f32("x")
    assert back.dtype == np.float32
    np.testing.assert_array_equal(_bits(back), _bits(values))


def test_float_tokens_are_shortest_repr(tmp_path):
    path = tmp_path / "f.txt"
    write_case(path, {"x": np.array([-3.0, 0.1, np.inf, -np.inf, np.nan, -0.0], np.float32)})
    assert path.read_text().split() == [
        "x", "6", "-3.0", "0.10000000149011612", "inf", "-inf", "nan", "-0.0",
    ]


def test_negative_nan_reads_back_as_nan(tmp_path):
    path = tmp_path / "f.txt"
    write_case(path, {"x": np.array([0xFFC00001], np.uint32).view(np.float32)})
    assert np.isnan(read_case(path).f32("x")[0])


def test_reads_inf_and_nan_tokens(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("x 4 inf -inf nan -0.0\n")
    x = read_case(path).f32("x")
    assert list(_bits(x)) == [0x7F800000, 0xFF800000, 0x7FC00000, 0x80000000]


def test_int64_and_bool_round_trip(tmp_path):
    info = np.iinfo(np.int64)
    ints = np.array([info.min, info.min + 1, -1, 0, 1, info.max - 1, info.max], np.int64)
    bools = np.array([[True, False, True], [False, False, True]])
    path = tmp_path / "c.txt"
    write_case(path, {"ints": ints, "mask": bools})
    case = read_case(path)
    np.testing.assert_array_equal(case.i64("ints"), ints)
    assert case.i64("ints").dtype == np.int64
    np.testing.assert_array_equal(case.bool_("mask"), bools.reshape(-1))
    assert case["mask"] == ("1", "0", "1", "0", "0", "1")


def test_scalars_and_multi_dim_row_major(tmp_path):
    grid = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    path = tmp_path / "c.txt"
    write_case(
        path,
        {"grid": grid, "batch_size": 2, "flag": True, "big": np.int64(-5), "x": 1.5},
    )
    case = read_case(path)
    np.testing.assert_array_equal(case.i64("grid"), grid.reshape(-1))
    assert case.scalar("batch_size") == 2
    assert case.scalar("flag") == 1
    assert case.scalar("big") == -5
    assert case["x"] == ("1.5",)
    assert list(case) == ["grid", "batch_size", "flag", "big", "x"]


def test_empty_tensor(tmp_path):
    path = tmp_path / "c.txt"
    write_case(path, {"e": np.zeros(0, np.float32)})
    assert path.read_text() == "e 0\n"
    assert read_case(path).f32("e").shape == (0,)


def test_header_and_meta_with_count(tmp_path):
    path = tmp_path / "c.txt"
    write_case(path, {"meta": np.array([4, 5, 6]), "x": 1}, header="my case v1\nsecond line")
    lines = path.read_text().splitlines()
    assert lines[:3] == ["# my case v1", "# second line", "meta 3 4 5 6"]
    case = read_case(path)
    assert case.meta == (4, 5, 6)
    assert "meta" not in case
    assert case.path == path


def test_meta_without_count_inferred(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("# some case\nmeta 7 8 9\nx 1 0\n")
    assert read_case(path).meta == (7, 8, 9)


def test_meta_of_score_capture_never_counted(tmp_path):
    path = tmp_path / "c.txt"
    # 3 == number of values after it, but the header marks a score capture: no count.
    path.write_text("# foo score kernel capture v9\n# meta 3 ...\nmeta 3 1 2 3\n")
    assert read_case(path).meta == (3, 1, 2, 3)
    path.write_text("# foo other capture\n# score kernel capture\nmeta 3 1 2 3\n")
    assert read_case(path).meta == (1, 2, 3)


def test_meta_forced(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("meta 2 8 8\n")
    assert read_case(path).meta == (8, 8)
    assert read_case(path, meta_has_count=False).meta == (2, 8, 8)
    assert read_case(path, meta_has_count=True).meta == (8, 8)
    path.write_text("meta 3 8 8\n")
    with pytest.raises(ValueError, match="meta declares 3 values but has 2"):
        read_case(path, meta_has_count=True)


def test_no_meta_line(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("x 1 5\n")
    assert read_case(path).meta == ()


def test_malformed_count_names_file_line_and_tensor(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("# header\n\nok 2 1 2\nbroken 3 1 2\n")
    with pytest.raises(ValueError) as info:
        read_case(path)
    message = str(info.value)
    assert f"{path}:4" in message
    assert "'broken'" in message
    assert "declares 3 values but has 2" in message


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("x\n", "has no count"),
        ("x two 1 2\n", "non-integer count"),
        ("x 1 1\nx 1 2\n", "duplicate tensor 'x'"),
        ("meta 1 1\nmeta 1 1\n", "duplicate meta"),
        ("meta 1 a\n", "meta values must be integers"),
    ],
)
def test_malformed_files(tmp_path, text, match):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_case(path)


def test_unknown_names_and_comments(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("# c\nsome_trace 2 1 2\n   \n#x 1 9\nx 1 3\n")
    case = read_case(path)
    assert list(case) == ["some_trace", "x"]
    assert case["some_trace"] == ("1", "2")
    assert len(case) == 2


def test_missing_name_keyerror(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("x 1 3\n")
    case = read_case(path)
    with pytest.raises(KeyError, match="nope") as info:
        case.f32("nope")
    assert str(path) in str(info.value)
    assert case.get("nope") is None


def test_bad_values(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("f 2 1.5 x\nb 2 0 2\ni 1 1.5\nv 2 1 2\nhuge 1 9223372036854775808\n")
    case = read_case(path)
    # Every message names the file, the line and the tensor.
    with pytest.raises(ValueError, match=r"c.txt:1: tensor 'f': value 1 \('x'\) is not a float"):
        case.f32("f")
    with pytest.raises(ValueError, match="c.txt:2: tensor 'b' must hold 0/1"):
        case.bool_("b")
    with pytest.raises(ValueError, match="c.txt:3: tensor 'i': .*not an integer"):
        case.i64("i")
    with pytest.raises(ValueError, match="c.txt:4: tensor 'v' must hold one value"):
        case.scalar("v")
    with pytest.raises(ValueError, match="c.txt:5: tensor 'huge' has a value outside int64"):
        case.i64("huge")


def test_write_rejects_bad_names_and_dtypes(tmp_path):
    with pytest.raises(ValueError, match="invalid tensor name"):
        write_case(tmp_path / "c.txt", {"a b": 1})
    with pytest.raises(TypeError, match="dtype"):
        write_case(tmp_path / "c.txt", {"z": np.array([1 + 2j])})


def test_read_score_capture_by_bare_name():
    for name in ("cost_draft_tree_score_case", "cost_draft_tree_score_case.txt"):
        case = read_case(name)
        assert isinstance(case, Case)
        assert case.path == CAPTURES_DIR / "cost_draft_tree_score_case.txt"
        assert case.meta == (2, 8, 8, 64, 17)
        assert case.f32("topk_probas_sampling").shape == (128,)
        assert case.f32("input_hidden_states").shape == (2 * 8 * 64,)
        assert case.i64("expected_sort_layer_indices").shape == (128,)


def test_read_update_capture_by_bare_name():
    case = read_case("cost_draft_tree_update_case")
    assert case.meta == (2, 8, 8, 17, 21, 64, 3, 64, 1024, 64)
    assert case.bool_("input_tree_mask").shape == (2 * 8 * 16,)
    assert case.i64("initial_cumu_tokens").shape == (2 * 1024,)
    assert "topk_tokens_sampling_input" in case  # a trace line is kept


def test_capture_floats_rewrite_identically(tmp_path):
    case = read_case("cost_draft_tree_score_case")
    x = case.f32("expected_output_hidden_states")
    path = tmp_path / "c.txt"
    write_case(path, {"x": x})
    np.testing.assert_array_equal(_bits(read_case(path).f32("x")), _bits(x))
