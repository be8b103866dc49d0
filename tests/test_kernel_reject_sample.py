# amaranth: UnusedElaboratable=no
"""K6 ``RejectSample``: parameter validation, the final-row algorithm against the golden (Python
model), ``ExactSumScanner`` and the kernel on Amaranth's simulator, and the Verilator
regression against ``golden.tree_speculative_sampling_target_only`` /
``draft_tree_reject_sample`` / ``verify_tree_greedy``."""

import random

import numpy as np
import pytest

import hw.kernels.reject_sample as reject_sample_module
import hw.lib.float32 as float32
from golden.reject_sample import tree_speculative_sampling_target_only
from hw.kernels.reject_sample import (
    MIN_THRESHOLD_ACC,
    RejectSample,
    RejectSampleParams,
    synthesis_parameters,
)
from hw.kernels.reject_scan import ExactSumScanner
from hw.kernels.reject_scan_model import final_row_model, scan_bits, scan_state
from hw.lib.params import ParameterError
from sim.amaranth_tb import simulate
from sim.harness import BUILD_ROOT
from sim.reject_sample import PARAMETERS, TARGET
from sim.reject_sample.cases import call_from_case, write_case_file
from sim.reject_sample.generators import (
    _sampling_call,
    directed_calls,
    perf_call,
    random_call,
    random_probs,
)
from sim.reject_sample.pysim import run_on_amaranth
from sim.reject_sample.results import compare, expected
from sim.targets import NotMeasured

F32 = np.float32
SMALL = {"max_nodes": 16, "max_steps": 6, "max_vocab_size": 64, "lanes": 4, "read_slots": 8,
         "segment_words": 2}


# --- parameters ----------------------------------------------------------------------------


def test_scanner_parameters():
    with pytest.raises(ParameterError, match="`buffer_words` must be a power of two, not 6"):
        ExactSumScanner(buffer_words=6)


def test_parameters_and_layouts():
    dut = RejectSample(max_nodes=20, max_steps=5, max_vocab_size=1000, lanes=4, read_slots=16,
                       segment_words=8, token_width=20, index_width=24, address_width=28)
    assert (dut.max_nodes, dut.max_steps, dut.max_vocab_size, dut.lanes, dut.read_slots,
            dut.segment_words, dut.token_width, dut.index_width, dut.address_width) == \
        (20, 5, 1000, 4, 16, 8, 20, 24, 28)
    with pytest.raises(AttributeError):
        dut.lanes = 8
    assert dut.max_row_words == 250 and dut.max_segments == 32 and dut.node_bits == 5
    params = dut.params
    assert params.result_layout.size == 24 + 20 + 1 + 2
    assert params.draft_layout.size == 28 + 2 + 32
    assert params.tree_layout.size == 20 + 24 + 7 + 7 + 32 + 20 + 2
    assert params.read_data_layout.size == 4 * 32
    assert set(params.ports) == {"cmd", "tree", "read_data", "draft_write", "result"}
    assert {name: getattr(RejectSample(), name) for name in PARAMETERS} == PARAMETERS
    assert {name: getattr(RejectSampleParams(), name) for name in PARAMETERS} == PARAMETERS


def test_synthesis_parameters():
    params, narrow = synthesis_parameters(), synthesis_parameters(lanes=8)
    assert (params.max_nodes, params.max_steps, params.max_vocab_size, params.lanes) == \
        (64, 8, 131072, 16)
    assert params.max_vocab_size >= 128256 and narrow.lanes == 8


def test_minimum_threshold_is_the_golden_clamp():
    assert MIN_THRESHOLD_ACC == int(np.array(1e-9, F32).view(np.uint32))
    below = np.array(MIN_THRESHOLD_ACC - 1, np.uint32).view(F32)
    assert F32(max(float(below), 1e-9)) == np.array(MIN_THRESHOLD_ACC, np.uint32).view(F32)
    above = np.array(MIN_THRESHOLD_ACC + 1, np.uint32).view(F32)
    assert F32(max(float(above), 1e-9)) == above


# --- the final-row algorithm (Python model) against the golden -----------------------------


def golden_pick(row, coin):
    """The golden's residual draw for one row: a single-node request (S = 1)."""
    vocab = row.size
    predicts = np.full(1, -1, np.int32)
    zeros = np.zeros((1, 1), np.int64)
    none = np.full((1, 1), -1, np.int64)
    with np.errstate(all="ignore"):
        tree_speculative_sampling_target_only(
            predicts, np.full((1, 1), -1, np.int32), np.zeros(1, np.int32), zeros,
            zeros.copy(), none, none.copy(), np.zeros((1, 1), F32), np.array([coin], F32),
            row.reshape(1, 1, vocab).copy(), np.zeros((1, 1, vocab), F32))
    return int(predicts[0])


def random_row(rng, vocab):
    kind = rng.integers(0, 7)
    if kind == 0:
        x = rng.random(vocab)
    elif kind == 1:
        x = rng.random(vocab) ** 8
    elif kind == 2:
        x = np.exp2(rng.uniform(-149, 10, vocab))
    elif kind == 3:
        x = rng.integers(0, 4, vocab) * 2.0**-149
    elif kind == 4:
        x = np.round(rng.random(vocab) * 8) / 8
    elif kind == 5:
        x = np.exp2(rng.uniform(100, 128, vocab))
    else:
        x = rng.random(vocab)
        x[rng.random(vocab) < 0.1] = np.inf
    x = x.astype(F32)
    x[rng.random(vocab) < rng.random() * 0.5] = 0
    if rng.random() < 0.2:
        x[rng.random(vocab) < 0.3] *= -1
    return x


def test_scan_state_round_trip():
    for bits in (0, 1, 0x007F_FFFF, 0x0080_0000, 0x3F80_0000, 0x7F7F_FFFF, 0x7F80_0000):
        assert scan_bits(scan_state(bits)) == bits
    assert scan_bits((1 << 24, 5, False)) == 6 << 23
    assert scan_bits((1 << 24, 254, False)) == 0x7F80_0000


def test_final_row_model_matches_golden():
    """Prefix sums bit for bit with ``np.add.accumulate``, and the pick with the golden's, for
    rows with subnormals, infinities, huge and tiny values, ties; coins 0, 1, -0.5, NaN."""
    rng = np.random.default_rng(2024)
    events = {"cross": 0, "roll": 0}
    for trial in range(600):
        vocab = int(rng.integers(1, 200))
        row = random_row(rng, vocab)
        r = np.where(row > 0, row, F32(0)).astype(F32)
        coin = F32(rng.choice([rng.random(), 0.0, 1.0, -0.5, np.nan, 0.999999,
                               float(rng.choice(r)), 2.0]))
        lanes = int(rng.choice([1, 2, 4, 8, 16]))
        with np.errstate(all="ignore"):
            model = final_row_model(r, coin, lanes=lanes,
                                    segment_words=int(rng.choice([1, 2, 64])))
        with np.errstate(all="ignore"):
            wanted = np.add.accumulate(r).view(np.uint32)
        assert np.array_equal(model["prefix"], wanted), trial
        assert model["token"] == golden_pick(row, coin), trial
        for key in events:
            events[key] += model["events"].get(key, 0)
    assert events["cross"] > 1000


#: A running sum that rounds up into the next binade (1 - 2^-24 plus a bit more than half its
#: ulp gives exactly 1.0: a *roll*), then sums that tie exactly (half an ulp: to even).
ROLL_AND_TIES = np.array([1 - 2**-24, 2**-25 + 2**-40, 2**-24, 2**-24, 2**-23, 2**-24, 0.5,
                          2**-24, 2**-25, 3 * 2**-25], F32)


@pytest.mark.parametrize("lanes", [1, 2, 4, 8])
def test_final_row_model_rolls_and_ties(lanes):
    model = final_row_model(ROLL_AND_TIES, F32(0.75), lanes=lanes, segment_words=1)
    assert np.array_equal(model["prefix"], np.add.accumulate(ROLL_AND_TIES).view(np.uint32))
    assert model["prefix"][1] == 0x3F80_0000
    assert model["events"].get("roll", 0) >= 1
    assert model["token"] == golden_pick(ROLL_AND_TIES, F32(0.75))


def test_final_row_model_on_softmax_rows_crosses_few_binades():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal(32000) * 3
    p = np.exp(logits - logits.max())
    p = (p / p.sum()).astype(F32)
    model = final_row_model(p, F32(0.5), lanes=8, segment_words=64)
    assert model["token"] == golden_pick(p, F32(0.5))
    assert sum(model["events"].values()) < 40


# --- ExactSumScanner on Amaranth's simulator -----------------------------------------------


def run_scanner(lanes, rows, *, seed=0):
    """Each row: one sum pass from +0 and one pick pass; returns (total, starts, hit) lists."""
    dut = ExactSumScanner(lanes=lanes, buffer_words=8, max_words=64)
    out = []

    async def testbench(ctx):
        rnd = random.Random(seed)
        for row, u in rows:
            words = -(-row.size // lanes)
            padded = np.zeros(words * lanes, F32)
            padded[:row.size] = row
            data = padded.view(np.uint32).reshape(words, lanes)
            for pick in (0, 1):
                ctx.set(dut.init, 0)
                ctx.set(dut.words, words)
                ctx.set(dut.pick, pick)
                ctx.set(dut.threshold, int(np.array(u, F32).view(np.uint32)))
                ctx.set(dut.start, 1)
                await ctx.tick()
                ctx.set(dut.start, 0)
                sent, starts = 0, {}
                while True:
                    offer = sent < words and rnd.random() < 0.8
                    ctx.set(dut.i.valid, offer)
                    if offer:
                        ctx.set(dut.i.payload, [int(v) for v in data[sent]])
                    if ctx.get(dut.word_start):
                        starts[ctx.get(dut.word_index)] = ctx.get(dut.word_sum)
                    accepted = offer and ctx.get(dut.i.ready)
                    await ctx.tick()
                    sent += accepted
                    if not ctx.get(dut.busy):
                        break
                ctx.set(dut.i.valid, 0)
                hit = (ctx.get(dut.hit_word), ctx.get(dut.hit_lane)) if ctx.get(dut.hit) \
                    else None
                out.append((ctx.get(dut.total), starts, hit))

    simulate(dut, testbench)
    return out


@pytest.mark.parametrize("lanes", [1, 4])
def test_scanner_matches_model(lanes):
    rng = np.random.default_rng(lanes)
    rows = [(ROLL_AND_TIES, F32(0.9999))]
    for _ in range(8):
        r = np.where((row := random_row(rng, int(rng.integers(1, 12 * lanes)))) > 0, row,
                     F32(0)).astype(F32)
        finite = r[np.isfinite(r)]
        u = F32(rng.random() * float(finite.sum() if finite.size else 1.0))
        rows.append((r, u))
    results = run_scanner(lanes, rows)
    for index, (r, u) in enumerate(rows):
        model = final_row_model(r, F32(0), lanes=lanes, segment_words=1)
        total, starts, _ = results[2 * index]
        assert total == model["total"], index
        prefix = model["prefix"]
        words = -(-r.size // lanes)
        for word in range(1, words):
            assert starts[word] == prefix[word * lanes - 1], (index, word)
        _, _, hit = results[2 * index + 1]
        above = np.nonzero((r > 0) & (prefix.view(F32) > u))[0]
        assert hit == ((int(above[0]) // lanes, int(above[0]) % lanes) if above.size else None)


# --- the kernel on Amaranth's simulator ----------------------------------------------------


def _directed(names):
    calls = {call.name: call for call in directed_calls(SMALL["lanes"], SMALL["max_nodes"],
                                                        SMALL["max_steps"])}
    return [calls[name] for name in names]


def test_directed_calls_on_amaranth_simulator():
    calls = _directed(["single node S=1", "star, coin == prob_acc", "ties",
                       "thresholds (0.5, 0.25)", "masked only positive", "greedy chain",
                       "final coin corners"])
    run_on_amaranth(RejectSample(**SMALL), calls, latency=(1, 3), seed=2)


def test_random_calls_with_stress_on_amaranth_simulator():
    rng = np.random.default_rng(77)
    calls = [random_call(rng, name=f"random {i}", max_nodes=SMALL["max_nodes"],
                         max_steps=SMALL["max_steps"], lanes=SMALL["lanes"], max_vocab=40,
                         mode=mode)
             for i, mode in enumerate(["sampling", "lfsr", "greedy", "sampling"])]
    run_on_amaranth(RejectSample(**SMALL), calls, idle=0.3, backpressure=0.3, latency=(1, 6),
                    seed=3)


def test_strict_coin_comparison_is_caught(monkeypatch):
    """A kernel testing ``coin < prob_acc`` instead of ``<=`` must fail "q == coin"."""
    monkeypatch.setattr(reject_sample_module, "float32_less_equal", float32.float32_less)
    with pytest.raises(AssertionError, match="differs"):
        run_on_amaranth(RejectSample(**SMALL), _directed(["q == coin"]), seed=4)


def test_unmasked_residual_is_caught(monkeypatch):
    """A residual that ignores the rejected tokens (draft_probs) must fail."""
    monkeypatch.setattr(reject_sample_module, "or_tree", lambda values: 0)
    with pytest.raises(AssertionError, match="predicts differs"):
        run_on_amaranth(RejectSample(**SMALL), _directed(["masked only positive"]), seed=5)


# --- vectors ------------------------------------------------------------------------------


def test_case_file_round_trip(tmp_path):
    rng = np.random.default_rng(9)
    for mode in ("sampling", "lfsr", "greedy"):
        call = random_call(rng, name="case", max_nodes=12, max_steps=5, lanes=8, mode=mode)
        path = tmp_path / f"{mode}.txt"
        write_case_file(path, call)
        again = call_from_case(path)
        assert again.mode == mode
        assert not compare(again, expected(again), again.notes["expected"])
        assert not compare(again, expected(again), expected(call))


def test_random_probabilities_are_rows():
    rng = np.random.default_rng(1)
    for kind in ("smooth", "peaked", "sparse"):
        p = random_probs(rng, (3, 4, 50), kind=kind)
        assert p.dtype == F32 and np.allclose(p.sum(axis=-1)[p.sum(axis=-1) > 0], 1, atol=1e-5)


# --- Verilator -----------------------------------------------------------------------------

FAST = {"random_calls": 24, "lfsr_trials": 2000, "perf_requests": 6, "row_vocab": 8192}


def test_kernel_matches_golden_under_verilator(sim_report):
    """Figures, every directed case, random calls (random idle, back-pressure and memory
    latency) and 2,000 LFSR-coin trials, all bit-exact with the goldens."""
    summary = TARGET.run(overrides=FAST, log_file=BUILD_ROOT / "pytest-reject_sample.log")
    assert summary["random_vectors"] == FAST["random_calls"]
    assert summary["directed_vectors"] == len(directed_calls(PARAMETERS["lanes"],
                                                             PARAMETERS["max_nodes"],
                                                             PARAMETERS["max_steps"]))
    extra = summary["extra"]
    traversal = extra["traversal cycles/request (n=64)"]
    mean = int(traversal.split()[1].rstrip(","))
    assert mean < 1000, traversal
    rate = float(extra["final-row elements/clock"].split()[0])
    assert rate > PARAMETERS["lanes"] * 0.6, extra["final-row elements/clock"]
    sim_report(f"reject_sample: {summary['vectors']:,} requests bit-exact with the golden; "
               f"traversal {traversal}; final row {extra['final-row elements/clock']}")


def test_case_replay_under_verilator(tmp_path):
    rng = np.random.default_rng(21)
    call = random_call(rng, name="replay", max_nodes=64, max_steps=8, lanes=8, mode="sampling",
                       batch=2)
    path = tmp_path / "k6_case.txt"
    write_case_file(path, call)
    summary = TARGET.run(case=path, log_file=BUILD_ROOT / "pytest-reject_sample-case.log")
    assert summary["vectors"] == 2
    assert summary["extra"]["expected tensors"] == \
        "accept_index, accept_token_num, draft_probs, predicts"


def _beyond_case(path):
    """A case whose n, S and V all exceed the small unit-test build."""
    write_case_file(path, perf_call(np.random.default_rng(5), requests=2, nodes=20, steps=7,
                                    vocab=80))


def test_case_beyond_the_build_derives_its_build(tmp_path):
    """``case_parameters`` on that case, and its call on the derived build under Amaranth's
    simulator (the Verilator replay is in the slow tier)."""
    path = tmp_path / "k6_beyond.txt"
    _beyond_case(path)
    derived = TARGET.case_parameters(path, {**PARAMETERS, **SMALL})
    assert derived == \
        {**PARAMETERS, **SMALL, "max_nodes": 20, "max_steps": 7, "max_vocab_size": 80}
    assert TARGET.case_parameters(path, PARAMETERS) == PARAMETERS  # never lowered
    run_on_amaranth(RejectSample(**derived), [call_from_case(path)])


@pytest.mark.slow
def test_case_beyond_the_build_gets_a_model_built_for_it(tmp_path):
    """``CASE=`` on that case: it replays on a model built for it."""
    path = tmp_path / "k6_beyond.txt"
    _beyond_case(path)
    summary = TARGET.run(SMALL, case=path,
                         log_file=BUILD_ROOT / "pytest-reject_sample-case-beyond.log")
    assert summary["vectors"] == 2 and summary["extra"]["n, S, V"] == [20, 7, 80]
    assert summary["extra"]["expected tensors"] == \
        "accept_index, accept_token_num, draft_probs, predicts"


def test_measure_parameters():
    point = {"batch": 8, "node_top_k": 8, "tree_width": 8, "depth": 5, "verify_num": 64,
             "vocab": 128256}
    parameters, spec = TARGET.measure_parameters(point)
    assert parameters == PARAMETERS and spec == point
    with pytest.raises(NotMeasured, match="V = 262144 exceeds `max_vocab_size` 131072"):
        TARGET.measure_parameters({**point, "vocab": 262144})
    with pytest.raises(NotMeasured, match="S = 9 exceeds `max_steps` 8"):
        TARGET.measure_parameters({**point, "depth": 8})


@pytest.mark.slow
def test_kernel_sweep_under_verilator(sim_report):
    """A longer random sweep on the default model (different seed, more calls)."""
    summary = TARGET.run(seed=7, overrides={"random_calls": 600, "lfsr_trials": 5000},
                         log_file=BUILD_ROOT / "pytest-reject_sample-sweep.log")
    sim_report(f"reject_sample sweep: {summary['vectors']:,} requests bit-exact")


@pytest.mark.slow
def test_sixteen_lanes_under_verilator(sim_report):
    """The synthesis configuration's 16 lanes, with short segments and a small read window."""
    summary = TARGET.run({"lanes": 16, "read_slots": 8, "segment_words": 4,
                          "max_vocab_size": 4096},
                         overrides={**FAST, "random_calls": 60, "row_vocab": 4096},
                         log_file=BUILD_ROOT / "pytest-reject_sample-16.log")
    sim_report(f"reject_sample lanes=16: {summary['vectors']:,} requests bit-exact; "
               f"final row {summary['extra']['final-row elements/clock']}")


def _zero_probability_calls():
    """Root -> child 1 whose candidate (token 3) has target probability 0, coin exactly 0.0:
    with thresholds (1, 1) and (0, 0) (``q >= threshold_single`` holds for q = 0 there)."""
    target = np.full((2, 2, 8), 0.125, F32)
    target[:, :, 3] = 0.0
    target[:, :, 4] = 0.25
    return [_sampling_call(f"coin 0, q 0, thresholds ({single}, {acc})", {0: [1]}, 2, 2,
                           target, [[0, 3], [0, 3]], np.zeros((2, 2)), [0.0, 0.5],
                           single=single, acc=acc)
            for single, acc in ((1.0, 1.0), (0.0, 0.0))]


def test_zero_probability_token_is_never_accepted_on_amaranth_simulator():
    """A candidate of target probability 0 is rejected even with a coin of exactly 0.0 (and
    with ``threshold_single`` 0): the ``q > 0`` guard of docs/decisions.md. The golden's
    outputs are checked against the hand answer first, then the kernel against the golden."""
    calls = _zero_probability_calls()
    for call in calls:
        out = expected(call)
        assert out["accept_token_num"].tolist() == [0, 0], call.name
        assert (out["predicts"][[0, 2]] != 3).all(), call.name  # the residual skips it too
    run_on_amaranth(RejectSample(**SMALL), calls, seed=6)
