"""The host side of the fused-verify testbench (``sim/tree_verify``), without hardware: the
generators, the memory image, the streams, the outputs rebuilt from result packets and the
case files."""

import time

import numpy as np
import pytest

from hw.kernels.tree_verify_params import TreeVerifyParams
from sim.targets import verify_tree_size
from sim.tree_verify.call import F32, is_bfloat16, to_bfloat16
from sim.tree_verify.cases import (
    EXAMPLE_CASE,
    call_from_case,
    example_call,
    main,
    write_case_file,
)
from sim.tree_verify.generators import STYLES, directed_calls, random_call, verify_step_call
from sim.tree_verify.memory import GARBAGE, MemoryImage
from sim.tree_verify.results import OUTPUTS, compare, expected
from sim.tree_verify.streams import (
    beats,
    commands,
    feeds,
    outputs_from_dut,
    result_packets,
    tree_beats,
)

LIMITS = {"max_nodes": 64, "max_steps": 8, "max_vocab": 300}
SERVING = {"node_top_k": 8, "tree_width": 8, "depth": 5, "verify_num": 64, "vocab": 128256}
ARRAYS = ("candidates", "retrive_index", "retrive_next_token", "retrive_next_sibling",
          "target_logits", "temperatures", "top_k", "top_p", "uniform_samples",
          "uniform_samples_for_final_sampling", "seeds")


def same_calls(a, b) -> bool:
    """Whether two calls hold the same inputs (floats by bit pattern, NaN as any NaN)."""
    for key in ARRAYS:
        x, y = getattr(a, key), getattr(b, key)
        if x is None or y is None:
            if x is not y:
                return False
            continue
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype.kind == "f":
            if x.shape != y.shape or not (np.isnan(x) == np.isnan(y)).all():
                return False
            x, y = x[~np.isnan(x)].view(np.uint32), y[~np.isnan(y)].view(np.uint32)
        if x.shape != y.shape or not np.array_equal(x, y):
            return False
    return all(getattr(a, key) == getattr(b, key) for key in (
        "mode", "steps", "threshold_single", "threshold_acc", "logit_format"))


def random_calls(count=40, **kw):
    return [random_call(np.random.default_rng(seed), **LIMITS, name=f"seed {seed}",
                        logit_format="bfloat16" if seed % 4 == 3 else "float32", **kw)
            for seed in range(count)]


# --- generators --------------------------------------------------------------------------------


def test_generators_are_deterministic():
    assert all(same_calls(a, b) for a, b in zip(random_calls(8), random_calls(8), strict=True))
    assert not same_calls(*random_calls(2))
    assert all(same_calls(a, b) for a, b in zip(directed_calls(), directed_calls(), strict=True))
    point = {**SERVING, "vocab": 1000, "batch": 2}
    assert same_calls(verify_step_call(seed=3, **point), verify_step_call(seed=3, **point))


def test_random_calls_cover_their_styles():
    calls = random_calls()
    outputs = [expected(call) for call in calls]
    styles = {str(style) for call in calls for style in call.notes["styles"].ravel()}
    assert styles == set(STYLES)
    greedy = np.concatenate([call.greedy for call in calls])
    assert greedy.any() and (~greedy).any()
    assert {call.mode for call in calls} == {"sampling", "lfsr"}
    assert {call.top_k is None for call in calls} == {True, False}
    assert {call.top_p is None for call in calls} == {True, False}
    top_k_on = [0 < k < call.vocab_size for call in calls if call.top_k is not None
                for k in call.top_k]
    top_p_on = [p < 1 for call in calls if call.top_p is not None for p in call.top_p]
    assert set(top_k_on) == {True, False} and set(top_p_on) == {True, False}
    accepted = {(int(a), call.steps - 1) for call, out in zip(calls, outputs, strict=True)
                for a in out["accept_token_num"]}
    assert any(a == 0 for a, _ in accepted) and any(a == full for a, full in accepted)
    assert {call.vocab_size for call in calls} & {1, 2, 3}
    assert any(call.vocab_size % 8 and call.vocab_size > 8 for call in calls)
    flags = np.concatenate([out["nan_flags"] for out in outputs])
    assert flags.any() and (~flags).any()
    assert all(is_bfloat16(call.target_logits) for call in calls
               if call.logit_format == "bfloat16")
    for call in calls:
        assert 2 <= call.nodes <= 64 and 2 <= call.steps <= 8 and 1 <= call.vocab_size <= 300


def test_directed_calls_fit_and_do_what_they_say():
    for limits in (LIMITS, {"max_nodes": 8, "max_steps": 3, "max_vocab": 16}):
        calls = directed_calls(**limits)
        for call in calls:
            assert call.nodes <= limits["max_nodes"] and call.steps <= limits["max_steps"]
            assert call.vocab_size <= limits["max_vocab"]
            expected(call)
    out = {call.name: expected(call) for call in directed_calls()}
    steps = {call.name: call.steps for call in directed_calls()}
    chain = "chain: accepted to S-1, final row whole"
    assert (out[chain]["accept_token_num"] == steps[chain] - 1).all()
    assert (out["K=1 chain: rejected at the root"]["accept_token_num"] == 0).all()
    assert out["NaN in every row"]["nan_flags"].all()
    assert out["zero siblings rejected vs all rejected"]["accept_token_num"].tolist() == [1, 0]
    assert out["n=2, S=2: accepted, rejected, greedy"]["accept_token_num"].tolist() == [1, 0, 1]
    assert out["coin == prob_acc"]["accept_index"][:, 1].tolist() == [1, 5]
    bf16 = directed_calls(logit_format="bfloat16")
    assert all(is_bfloat16(call.target_logits) for call in bf16)


def test_to_bfloat16_rounds_to_nearest_even_and_keeps_specials():
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 3.4e38, -np.inf, np.inf,
                  1e-40, -0.0], F32)
    want = np.array([1.0, 1.0, 1 + 2**-6, 1 + 2**-7, np.inf, -np.inf, np.inf], F32)
    got = to_bfloat16(x)
    assert got[:7].view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert is_bfloat16(got) and not is_bfloat16(x)
    assert got[8].view(np.uint32) == 0x80000000 and got[7] > 0
    nans = np.array([0x7FC00000, 0xFFFFFFFF, 0x7F800001], np.uint32).view(F32)
    assert np.isnan(to_bfloat16(nans)).all() and is_bfloat16(to_bfloat16(nans))


def test_verify_step_call_at_the_serving_point():
    n, s = verify_tree_size({**SERVING, "batch": 1})
    start = time.perf_counter()
    calls = [verify_step_call(seed=seed, batch=1, **SERVING) for seed in range(1, 5)]
    assert time.perf_counter() - start < 8
    rows = []
    for call in calls:
        assert (call.batch_size, call.nodes, call.steps, call.vocab_size) == (1, n, s, 128256)
        assert call.top_k is None and call.top_p is None and call.mode == "sampling"
        rows += [len(r) for r in expected(call)["rows_read"]]
    assert 2 <= np.mean(rows) <= 6
    memory = MemoryImage(calls[0], TreeVerifyParams())
    assert memory.read_bytes(1) == 128256 * 4 and memory.word(memory.row_address(0, n - 1))


# --- memory ------------------------------------------------------------------------------------


@pytest.mark.parametrize("port_bits", [256, 512])
@pytest.mark.parametrize("logit_format", ["float32", "bfloat16"])
def test_memory_words_decode_to_the_logits(port_bits, logit_format):
    params = TreeVerifyParams(port_bits=port_bits, logit_format=logit_format, read_ports=4)
    call = random_call(np.random.default_rng(5), **LIMITS, batch=2, logit_format=logit_format)
    call.row_pad = 2
    memory = MemoryImage(call, params, seed=1)
    lanes, bits = params.port_logits, params.logit_bits
    words = call.row_words(params)
    assert memory.size == call.batch_size * call.nodes * (words + 2) * params.port_bytes
    assert [w for p in range(4) for w in memory.chunk(p)] == list(range(words))
    garbage = set((GARBAGE >> (32 - bits)).tolist())
    for b in range(call.batch_size):
        for i in range(call.nodes):
            values = []
            for w in range(words + 2):
                address = memory.row_address(b, i) + w * params.port_bytes
                assert memory.locate(address) == (b, i, w)
                word = memory.word(address)
                values += [(word >> (bits * lane)) & ((1 << bits) - 1) for lane in range(lanes)]
            row = call.target_logits[b, i].view(np.uint32) >> (32 - bits)
            assert values[:call.vocab_size] == row.tolist()
            assert set(values[call.vocab_size:]) <= garbage
    assert memory.burst(0, 1) == [memory.word(0), memory.word(params.port_bytes)]


def test_memory_refuses_bad_reads_and_inexact_bfloat16():
    params = TreeVerifyParams()
    call = random_call(np.random.default_rng(2), **LIMITS)
    memory = MemoryImage(call, params)
    for address in (-params.port_bytes, memory.size, memory.size + 64, 4, 33):
        with pytest.raises(AssertionError, match=hex(address) if address >= 0 else "outside"):
            memory.word(address)
    with pytest.raises(AssertionError, match="max_burst"):
        memory.burst(0, params.max_burst)
    call.target_logits[0, 0, 0] = F32(1 + 2**-20)
    with pytest.raises(AssertionError, match="bfloat16"):
        MemoryImage(call, TreeVerifyParams(logit_format="bfloat16"))


# --- streams and results -----------------------------------------------------------------------


def test_streams_round_trip():
    params = TreeVerifyParams()
    for call in random_calls(12):
        words = feeds(params, call)
        cmds = beats(params.cmd_layout, words["cmd"])
        assert cmds == commands(call, params)
        memory = MemoryImage(call, params)
        for b, cmd in enumerate(cmds):
            assert cmd["row_address"] == memory.row_address(b)
            assert cmd["top_k"] == (0 if call.top_k is None else call.top_k[b])
            assert cmd["top_p"] == (0x3F800000 if call.top_p is None else
                                    int(call.top_p[b:b + 1].view(np.uint32)[0]))
            assert cmd["lfsr"] == (call.mode == "lfsr")
        tree = beats(params.tree_layout, words["tree"])
        assert tree == [beat for b in range(call.batch_size) for beat in tree_beats(call, b)]
        assert min(beat["next_token"] for beat in tree) == -1


def decoded_packets(params, call, outputs):
    return [beats(params.result_layout, packet)
            for packet in result_packets(params, call, outputs)]


def test_outputs_from_dut_rebuild_the_golden_outputs():
    params = TreeVerifyParams()
    for call in random_calls(20) + directed_calls():
        want = expected(call)
        got = outputs_from_dut(call, decoded_packets(params, call, want))
        assert compare(call, want, got) == []
        assert set(got) == {*OUTPUTS, "nan_flags"}


@pytest.mark.parametrize("damage, message", [
    (lambda first: None, "result packets"),
    (lambda first: [{**first[0], "first": 0}, *first[1:]], "`first` framing"),
    (lambda first: [{**beat, "last": 1} for beat in first], "`last` framing"),
    (lambda first: first[:-1] + [{**first[-1], "error": 1}], "link cycle"),
    (lambda first: first + first, "result beats"),
])
def test_outputs_from_dut_rejects_bad_framing(damage, message):
    call = directed_calls()[0]  # two requests accepted to S - 1: S beats each
    packets = decoded_packets(TreeVerifyParams(), call, expected(call))
    first = damage(packets[0])
    with pytest.raises(AssertionError, match=message):
        outputs_from_dut(call, packets[1:] if first is None else [first, packets[1]])


def test_compare_names_the_differences():
    call = directed_calls()[0]
    want = expected(call)
    got = {**want, "predicts": want["predicts"].copy(), "nan_flags": ~want["nan_flags"]}
    got["predicts"][want["accept_index"][0, 0]] += 1
    problems = compare(call, want, got)
    assert len(problems) == 2 and "predicts differs at 1 places" in problems[0]
    assert "nan_flags" in problems[1] and call.name in problems[0]
    assert "missing" in compare(call, want, {"predicts": want["predicts"]})[0]


# --- case files --------------------------------------------------------------------------------


def test_case_files_round_trip(tmp_path):
    calls = random_calls(8) + [directed_calls()[6]]  # with an all-LFSR call
    for index, call in enumerate(calls):
        path = tmp_path / f"case{index}.txt"
        write_case_file(path, call)
        back = call_from_case(path)
        assert same_calls(call, back), call.name
        file_expected = back.notes["expected"]
        assert set(file_expected) == {*OUTPUTS, "nan_flags"}
        assert compare(back, file_expected, expected(back)) == []
    write_case_file(tmp_path / "bare.txt", calls[0], expected=False)
    assert call_from_case(tmp_path / "bare.txt").notes["expected"] == {}


@pytest.mark.parametrize("edit, where", [
    (lambda t: t.replace("vocab_size 1 ", "vocab_size 2 1 "), "vocab_size"),
    (lambda t: "\n".join(ln for ln in t.splitlines() if not ln.startswith("temperatures")),
     "temperatures"),
    (lambda t: t.replace("candidates 16 1 ", "candidates 16 99999 "), "candidates"),
    (lambda t: t.replace("candidates 16 ", "candidates 15 "), "candidates"),
    (lambda t: t.replace("temperatures 2 0.0", "temperatures 2 -1.0"), "temperatures"),
    (lambda t: t.replace("logit_bits 1 32", "logit_bits 1 16"), "target_logits"),
    (lambda t: t.replace("top_p 2 1.0", "top_p 2 nan"), "top_p"),
    (lambda t: t.replace("retrive_next_token 16 1", "retrive_next_token 16 8"),
     "retrive_next_token"),
    (lambda t: t.replace("num_speculative_tokens 1 4", "num_speculative_tokens 1 0"),
     "num_speculative_tokens"),
])
def test_malformed_case_files_are_refused_naming_the_file(tmp_path, edit, where):
    path = tmp_path / "bad_case.txt"
    text = EXAMPLE_CASE.read_text()
    path.write_text(edit(text))
    assert path.read_text() != text
    with pytest.raises(ValueError, match="bad_case.txt") as error:
        call_from_case(path)
    assert where in str(error.value)


def test_example_case_is_current(tmp_path):
    path = tmp_path / "example.txt"
    write_case_file(path, example_call())
    assert path.read_text() == EXAMPLE_CASE.read_text(), \
        "regenerate it: python -m sim.tree_verify.cases --example"
    call = call_from_case(EXAMPLE_CASE)
    assert call.batch_size == 2 and call.nodes <= 8 and call.vocab_size <= 40
    assert call.greedy.tolist() == [True, False]
    assert call.top_k is not None and call.top_p is not None
    assert (call.notes["expected"]["accept_token_num"] > 0).all()


def test_main_writes_a_random_case(tmp_path, capsys):
    path = tmp_path / "sub" / "case.txt"
    assert main([str(path), "--seed", "4", "--mode", "lfsr"]) == 0
    call = call_from_case(path)
    assert call.mode == "lfsr" and call.batch_size == 2 and "wrote" in capsys.readouterr().out
