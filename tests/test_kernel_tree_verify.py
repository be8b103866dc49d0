# amaranth: UnusedElaboratable=no
"""The fused verify's hardware (docs/tree_verify.md): one lane against the golden arithmetic,
the kernel's parameters, the kernel on Amaranth's simulator and under Verilator against
``golden.tree_speculative_sampling_from_logits``."""

import random

import numpy as np
import pytest
from test_golden_tree_verify import random_row

from golden.logit_rows import (
    lane_exponentials,
    normaliser_terms,
    row_constants,
    temperature_scale,
)
from hw.kernels.tree_verify import TreeVerify
from hw.kernels.tree_verify_lane import KEY_TOP, LogitLane
from hw.kernels.tree_verify_params import TreeVerifyParams, chunk_words
from hw.lib.params import ParameterError
from sim.amaranth_tb import simulate
from sim.harness import BUILD_ROOT
from sim.targets import NotMeasured
from sim.tree_verify import PARAMETERS, TARGET
from sim.tree_verify.call import Call
from sim.tree_verify.cases import EXAMPLE_CASE
from sim.tree_verify.generators import _directed, directed_calls, random_call, verify_step_call
from sim.tree_verify.pysim import run_on_amaranth
from sim.tree_verify.results import compare, expected
from sim.tree_verify.schedule import call_cycles
from sim.tree_verify.streams import outputs_from_dut

F32 = np.float32


def lane_rows(seed, rows=120):
    """Rows of several styles and temperatures (NaN, ``-inf``, ``+inf`` and all ``-inf`` rows
    among them), each with its constants."""
    rng = np.random.default_rng(seed)
    out = []
    for index in range(rows):
        x = random_row(rng, int(rng.integers(1, 40)))
        if index % 7 == 3:
            x[rng.integers(0, x.size)] = np.nan
        if index % 11 == 5:
            x[:] = -np.inf
        if index % 13 == 6:
            x[rng.integers(0, x.size)] = np.inf
        t = F32(np.exp(rng.uniform(np.log(1e-5), np.log(1e4))))
        clean = np.where(np.isnan(x), -np.inf, x).astype(np.float32)
        out.append((x, row_constants(clean, temperature_scale(t))))
    return out


def run_lane(rows, *, stall=0.0, seed=0):
    """Every row through one ``LogitLane``: a row's logits back to back, ``LATENCY`` empty
    clocks between rows (the constants change only then; ``stall``: probability of a clock
    with ``en`` low); returns per row the lane's ``(in_range, mantissa, shift, term, z)``
    arrays."""
    dut = LogitLane()
    feed = []
    for index, (x, _) in enumerate(rows):
        feed += [(index, value) for value in x]
        feed += [None] * LogitLane.LATENCY
    outputs = {index: [] for index in range(len(rows))}
    rand = random.Random(seed)

    async def bench(ctx):
        history = []  # per enabled clock: the row fed then, or None
        while len(history) < len(feed) + LogitLane.LATENCY:
            enable = rand.random() >= stall
            fed = None
            if enable and len(history) < len(feed) and feed[len(history)] is not None:
                index, value = feed[len(history)]
                constants = rows[index][1]
                for name, bits in (("peak", constants.peak), ("threshold", constants.threshold),
                                   ("logit", value)):
                    ctx.set(getattr(dut, name), int(np.float32(bits).view(np.uint32)))
                ctx.set(dut.grid, constants.grid)
                ctx.set(dut.peak_aligned, constants.peak_aligned)
                ctx.set(dut.scale, constants.scale)
                fed = index
            ctx.set(dut.valid, fed is not None)
            ctx.set(dut.en, enable)
            await ctx.tick()
            if not enable:
                continue
            history.append(fed)
            if len(history) >= LogitLane.LATENCY and history[-LogitLane.LATENCY] is not None:
                index = history[-LogitLane.LATENCY]
                assert ctx.get(dut.out_valid)
                outputs[index].append((ctx.get(dut.in_range), ctx.get(dut.mantissa),
                                       ctx.get(dut.shift), ctx.get(dut.term), ctx.get(dut.z)))

    simulate(dut, bench)
    return {index: np.array(values, dtype=np.int64).T for index, values in outputs.items()}


@pytest.mark.parametrize(("seed", "stall"), [(1, 0.0), (2, 0.3)])
def test_lane_matches_the_golden_arithmetic(seed, stall):
    rows = lane_rows(seed)
    outputs = run_lane(rows, stall=stall, seed=seed)
    for index, (x, constants) in enumerate(rows):
        clean = np.where(np.isnan(x), -np.inf, x).astype(np.float32)
        mantissa, shift, z = lane_exponentials(clean, constants)
        terms = normaliser_terms(mantissa, shift)
        got_range, got_mantissa, got_shift, got_terms, got_z = outputs[index]
        in_range = mantissa > 0  # the golden's E is 0 out of range
        np.testing.assert_array_equal(got_range, in_range, err_msg=f"row {index}: in range")
        for what, got, want in (("E", got_mantissa, mantissa), ("k", got_shift, shift),
                                ("term", got_terms, terms), ("z", got_z, z)):
            np.testing.assert_array_equal(got[in_range], want[in_range],
                                          err_msg=f"row {index}: {what}")
        keys = np.where(in_range, KEY_TOP - got_z, 0)
        assert (keys[in_range] > 1 << 33).all() and (keys <= KEY_TOP).all()


# --- the kernel ------------------------------------------------------------------------------

#: A small build for Amaranth's simulator: four 64-bit ports of bfloat16 (16 lanes, 4 banks).
SMALL = {"max_nodes": 10, "max_steps": 5, "max_vocab_size": 64, "read_ports": 4,
         "port_bits": 64, "logit_format": "bfloat16", "max_burst": 4}


def test_parameters_and_layouts():
    dut = TreeVerify(**SMALL)
    assert (dut.lanes, dut.port_logits, dut.bank_words, dut.max_row_words) == (16, 4, 4, 16)
    assert set(dut.params.ports) == {"cmd", "tree", "result"}
    assert len(dut.read) == 4 and dut.status_layout.size == 32 + 16 + 48
    params = TreeVerifyParams()
    assert (params.lanes, params.bank_words) == (16, 8192)
    assert chunk_words(128256, params) == 8192 and chunk_words(40, params) == 4
    assert chunk_words(1, params) == 1
    with pytest.raises(ParameterError, match="`token_width` must hold every token below "
                                             r"`max_vocab_size` \(131072\), not 16 bits"):
        TreeVerifyParams(token_width=16)
    with pytest.raises(ParameterError, match="`logit_format` must be one of 'float32', "
                                             "'bfloat16', not 'fp8'"):
        TreeVerify(logit_format="fp8")


def test_random_calls_on_amaranth_simulator():
    """Random calls (greedy and sampling requests, top-k/top-p, LFSR coins, NaN and -inf
    rows) on the small build, under random idle, back-pressure and memory latency."""
    rng = np.random.default_rng(3)
    calls = [random_call(rng, max_nodes=SMALL["max_nodes"], max_steps=SMALL["max_steps"],
                         max_vocab=SMALL["max_vocab_size"], logit_format="bfloat16",
                         name=f"random {i}") for i in range(3)]
    report = run_on_amaranth(TreeVerify(**SMALL), calls, idle=0.3, backpressure=0.3,
                             latency=(1, 6), seed=3)
    assert report["beats"] > 0


def test_measure_parameters():
    point = {"batch": 8, "node_top_k": 8, "tree_width": 8, "depth": 5, "verify_num": 64,
             "vocab": 128256}
    parameters, spec = TARGET.measure_parameters(point)
    assert parameters == {**PARAMETERS, "logit_format": "bfloat16"}
    assert spec == {**point, "logit_format": "bfloat16"}
    with pytest.raises(NotMeasured, match="V = 262144 exceeds `max_vocab_size` 131072"):
        TARGET.measure_parameters({**point, "vocab": 262144})


# --- Verilator -------------------------------------------------------------------------------

FAST = {"random_calls": 24}


def test_kernel_matches_golden_under_verilator(sim_report):
    """Figures (the serving tree at V = 32000), every directed call and random calls under
    random idle, back-pressure and memory latency on the ``make sim`` model (two 256-bit
    ports of float32, 16 lanes), bit-exact with the golden."""
    summary = TARGET.run(overrides=FAST, log_file=BUILD_ROOT / "pytest-tree_verify.log")
    assert summary["random_vectors"] == FAST["random_calls"]
    assert summary["directed_vectors"] == len(directed_calls(max_nodes=64, max_steps=8,
                                                             max_vocab=300))
    figures = summary["extra"]["serving tree, V = 32000"]
    sim_report(f"tree_verify: {summary['requests']:,} requests bit-exact with the golden; "
               f"serving tree at V=32000: {figures['cycles per request']} cycles, "
               f"{figures['rows per request']} rows")


@pytest.mark.slow
def test_narrow_bfloat16_ports_under_verilator(sim_report):
    """A second lane/port setting under Verilator: four 64-bit ports of bfloat16 (16 lanes over
    4 banks; ``make test`` runs this build on Amaranth's simulator)."""
    summary = TARGET.run({**SMALL, "max_nodes": 64, "max_steps": 8, "max_vocab_size": 512},
                         overrides={**FAST, "max_vocab": 300}, tests=("directed", "random"),
                         log_file=BUILD_ROOT / "pytest-tree_verify-bf16.log")
    assert summary["random_vectors"] == FAST["random_calls"]
    sim_report(f"tree_verify 4 x 64-bit bfloat16 ports: {summary['requests']:,} requests "
               "bit-exact with the golden")


def test_case_replay_under_verilator():
    summary = TARGET.run(case=EXAMPLE_CASE, log_file=BUILD_ROOT / "pytest-tree_verify-case.log")
    assert summary["requests"] == 2


def test_schedule_formula_matches_the_simulated_cycles():
    """``sim.tree_verify.schedule`` against the kernel's cycles: greedy and sampling requests,
    top-k and top-p searches, the divider in the loop, two memory latencies (the Verilator
    testbench checks every unstressed call of its build the same way)."""
    kernel = TreeVerify(**SMALL)
    step = verify_step_call(seed=1, batch=2, node_top_k=4, tree_width=4, depth=3, verify_num=8,
                            vocab=64, logit_format="bfloat16")
    step.temperatures[1] = 0.0
    searched = verify_step_call(seed=2, batch=1, node_top_k=2, tree_width=2, depth=2,
                                verify_num=4, vocab=40, logit_format="bfloat16")
    searched.top_k, searched.top_p = np.array([5], np.int32), np.array([0.9], F32)
    searched.threshold_acc = 0.5
    for call, latency in ((step, 3), (searched, 7)):
        report = run_on_amaranth(kernel, [call], latency=(latency, latency))
        want = expected(call)
        assert [s["cycles"] for s in report["status"]] == \
            call_cycles(kernel.params, call, want["traces"], latency=latency), call.name


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_link_cycle_ends_the_request_with_error(temperature):
    """A sibling cycle (node 1 is its own next sibling; the golden refuses such a call) ends
    the request after ``n`` rejected tries with ``error`` on its last beat, and the next
    request runs normally."""
    links = np.array([[1, -1, -1]]), np.array([[-1, 1, -1]])
    logits = np.zeros((1, 3, 8), F32)
    logits[0, :, 0] = 5.0  # token 0 is the argmax; the child's token 3 is rejected
    broken = Call("cycle", "sampling", np.array([[0, 3, 4]]), np.arange(3)[None], *links, 3,
                  logits, np.array([temperature], F32),
                  uniform_samples=np.full((1, 3), 0.5, F32),
                  uniform_samples_for_final_sampling=np.array([0.5], F32),
                  threshold_single=2.0 ** 100, threshold_acc=2.0 ** 100,
                  logit_format="bfloat16")
    kernel = TreeVerify(**SMALL)
    report = run_on_amaranth(kernel, [broken], check=False)
    (packet,) = report["packets"][0]
    assert [beat["error"] for beat in packet] == [0] * (len(packet) - 1) + [1]
    rng = np.random.default_rng(9)
    healthy = random_call(rng, max_nodes=6, max_steps=3, max_vocab=30, batch=1,
                          logit_format="bfloat16")
    report = run_on_amaranth(kernel, [broken, healthy], check=False)
    assert not compare(healthy, expected(healthy),
                       outputs_from_dut(healthy, report["packets"][1]))


def test_top_k_one_searches_past_the_largest_key():
    """``top_k = 1`` (and ties at the maximum): the search tries filters above every key, which
    must count nothing (a kernel that wrapped ``2**34 - filter`` kept every token)."""
    calls = [call for call in directed_calls(max_nodes=SMALL["max_nodes"],
                                             max_steps=SMALL["max_steps"],
                                             max_vocab=SMALL["max_vocab_size"],
                                             logit_format="bfloat16")
             if call.name == "top_k = 1"]
    assert calls
    run_on_amaranth(TreeVerify(**SMALL), calls)


def _zero_probability_calls():
    """Root -> child 1 whose candidate has target probability 0, coin exactly 0.0: request 0
    through a ``-inf`` logit, request 1 through ``top_k = 2`` (the candidate ranks last); with
    thresholds (1, 1) and (0, 0) (``q >= threshold_single`` holds for q = 0 there)."""
    rows = np.tile(np.arange(8, dtype=F32), (4, 1))
    rows[0, 0] = -np.inf
    return [_directed(f"coin 0, q 0, thresholds ({single}, {acc})", {0: [1]}, 2, 2, rows,
                      [1.0, 1.0], ranks=-1, coins=0.0, finals=0.5,
                      top_k=np.array([0, 2], np.int32), threshold_single=single,
                      threshold_acc=acc)
            for single, acc in ((1.0, 1.0), (0.0, 0.0))]


def test_zero_probability_token_is_never_accepted_on_amaranth_simulator():
    """A candidate of probability 0 (a ``-inf`` logit, a token outside top-k) is rejected even
    with a coin of exactly 0.0: the ``q > 0`` guard of docs/decisions.md. The golden's outputs
    are checked against the hand answer first, then the kernel against the golden."""
    calls = _zero_probability_calls()
    for call in calls:
        assert call.candidates[:, 1].tolist() == [0, 0], call.name
        out = expected(call)
        assert out["accept_token_num"].tolist() == [0, 0], call.name
        assert (out["predicts"][[0, 2]] != 0).all(), call.name
    run_on_amaranth(TreeVerify(**SMALL), calls, seed=7)
