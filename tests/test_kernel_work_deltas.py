"""K3 ``WorkDeltas``: parameter validation, Amaranth-simulator unit tests and the Verilator
regression against ``golden.calculate_work_deltas`` + ``golden.width_policy``."""

from dataclasses import asdict

import numpy as np
import pytest
from amaranth.hdl import Fragment, Module, Signal

import hw.kernels.work_deltas as work_deltas_module
import hw.lib.float32 as float32
from golden.cases import read_case
from hw.kernels.work_deltas import (
    WorkDeltas,
    WorkDeltasParams,
    synthesis_parameters,
    uint_to_float32,
)
from sim.amaranth_tb import simulate
from sim.harness import BUILD_ROOT
from sim.targets import NotMeasured
from sim.work_deltas import PARAMETERS, TARGET, draft_round_cumu_counts
from sim.work_deltas.pysim import run_on_amaranth
from sim.work_deltas.vectors import (
    EXAMPLE_CASE,
    Call,
    call_from_case,
    directed_calls,
    expected,
    perf_call,
    random_call,
    write_case_file,
)

F32 = np.float32


# --- parameters -----------------------------------------------------------------------------


def test_parameters_and_layouts():
    params = WorkDeltasParams(node_top_k=10, max_verify_num=48, lanes=4, max_batch_size=1000)
    assert (params.node_top_k, params.max_verify_num, params.lanes, params.max_batch_size) == \
        (10, 48, 4, 1000)
    with pytest.raises(AttributeError):
        params.node_top_k = 3
    assert params.cmd_layout.size == 10 + 32 + 32 + 32
    assert params.scores_layout.size == 4 * 32 + 2
    assert params.output_layout.size == 32 + 4 + 2
    assert set(params.ports) == {"cmd", "scores", "deltas"}
    assert asdict(WorkDeltasParams()) == PARAMETERS
    assert synthesis_parameters() == WorkDeltasParams()
    assert synthesis_parameters(lanes=4).scores_layout.size == 4 * 32 + 2
    dut = WorkDeltas(**SMALL)
    assert dut.params == WorkDeltasParams(**SMALL)
    assert {name: getattr(dut, name) for name in SMALL} == SMALL
    with pytest.raises(AttributeError):
        dut.node_top_k = 3
    assert dut.output_layout == dut.params.output_layout
    Fragment.get(dut, None)  # elaborated: no UnusedElaboratable warning


def test_uint_to_float32_is_exact():
    value = Signal(24)
    bits = Signal(32)
    m = Module()
    m.d.comb += bits.eq(uint_to_float32(value))
    samples = [0, 1, 2, 3, 5, 255, 256, 1000, (1 << 23) + 1, (1 << 24) - 1,
               *np.random.default_rng(3).integers(0, 1 << 24, 40).tolist()]

    async def testbench(ctx):
        for sample in samples:
            ctx.set(value, sample)
            assert ctx.get(bits) == int(np.array(sample, F32).view(np.uint32)), sample

    simulate(m, testbench, clocked=False)


# --- Amaranth simulator ---------------------------------------------------------------------

SMALL = {"node_top_k": 3, "max_verify_num": 5, "lanes": 2, "max_batch_size": 7}
K1 = {"node_top_k": 1, "max_verify_num": 4, "lanes": 1, "max_batch_size": 7}


def test_a_few_requests_on_amaranth_simulator():
    # v = 4, ws0 = 3: C[0] enters free, C[1] displaces A[2], C[2] ties A[1] (no displacement).
    rows = np.array([[0.875, 0.5, 0.3125, 0.75, 0.625, 0.5, -123, -123],
                     [0.25, 0.125, 0.0625, 1.0, 0.75, 0.5, -123, -123]], F32)
    # Row 1: A = [0.25, 0.125, 0.0625], C = [1.0, 0.75, 0.5]: free, then two displacements.
    # Marginals 1.75, 1.0, 0.375 against the threshold 0.25 * B = 0.5: W' = 2.
    call = Call(rows, 2, 3, cumu_count=3, verify_num=4, max_verify_num=5, cost_per_node=0.25)
    deltas, width = expected(call)
    assert deltas.tolist() == [0.0, 1.75, 2.75, 3.125] and width == 2
    run_on_amaranth(SMALL, [call])


@pytest.mark.parametrize("parameters", [SMALL, K1], ids=["K3-lanes2", "K1-lanes1"])
def test_directed_calls_on_amaranth_simulator(parameters):
    k, maxv = parameters["node_top_k"], parameters["max_verify_num"]
    run_on_amaranth(parameters, directed_calls(k, maxv, parameters["max_batch_size"]))


@pytest.mark.parametrize("parameters", [SMALL, K1], ids=["K3-lanes2", "K1-lanes1"])
def test_random_calls_with_idle_and_backpressure_on_amaranth_simulator(parameters):
    rng = np.random.default_rng(11)
    k, maxv = parameters["node_top_k"], parameters["max_verify_num"]
    calls = [random_call(rng, k, maxv, parameters["max_batch_size"]) for _ in range(12)]
    run_on_amaranth(parameters, calls, idle=0.4, backpressure=0.4, seed=5)


def test_full_gain_buffer_holds_the_input(monkeypatch):
    """With two gain vectors the walker waits for the running sums: back-pressure inside."""
    monkeypatch.setattr(work_deltas_module, "G_BUFFERS", 2)
    calls = [c for c in directed_calls(3, 5, 7) if c.batch_size >= 3][:4]
    run_on_amaranth(SMALL, calls, idle=0.2, backpressure=0.2)


def test_ties_displacing_is_caught(monkeypatch):
    """A walker that displaces on ties (``<=`` instead of ``<``) must fail the directed calls."""

    def less_or_equal(a_key, a_nan, b_key, b_nan):
        return ~a_nan & ~b_nan & (a_key <= b_key)

    monkeypatch.setattr(work_deltas_module, "_ordered_less", less_or_equal)
    with pytest.raises(AssertionError, match="ties"):
        run_on_amaranth(SMALL, [c for c in directed_calls(3, 5, 7) if "ties" in c.name])


def test_truncating_adder_is_caught(monkeypatch):
    """The random calls must expose adds that truncate instead of rounding to nearest even."""

    def truncate(exponent_field, significand, guard, sticky):
        return float32.Cat(significand[:23], exponent_field[:8])

    monkeypatch.setattr(float32, "_round_to_nearest_even", truncate)
    rng = np.random.default_rng(2)
    calls = [random_call(rng, 3, 5, 7) for _ in range(6)]
    with pytest.raises(AssertionError, match="work_deltas expected"):
        run_on_amaranth(SMALL, calls)


# --- example case file ----------------------------------------------------------------------


def test_example_case_matches_golden():
    call, deltas, width = call_from_case(EXAMPLE_CASE)
    golden_deltas, golden_width = expected(call)
    assert golden_deltas.view(np.uint32).tolist() == deltas.view(np.uint32).tolist()
    assert golden_width == width == read_case("work_deltas_example_case").scalar(
        "expected_next_tree_width")
    assert 0 < width < call.node_top_k and call.kept == 64


# --- Verilator ------------------------------------------------------------------------------


def test_matches_golden_under_verilator(sim_report):
    """Default parameters (K = 8, MAXV = 64, 8 lanes): the throughput call, the directed
    calls, and random calls with idle and back-pressure."""
    summary = TARGET.run(overrides={"vectors": 40},
                         log_file=BUILD_ROOT / "pytest-work_deltas.log")
    assert summary["random_vectors"] == 40
    # K = 8, verify_num = 64, ws0 = 64: a row is 72 scores = 9 beats of 8 lanes.
    assert summary["initiation_interval"] == 9.0
    sim_report(f"work_deltas: {summary['vectors']} calls ({summary['requests']} requests) "
               f"bit-exact with the golden, {summary['initiation_interval']:.2f} "
               "cycles/request at K=8 verify_num=64 ws0=64 lanes=8")


def test_case_replay_under_verilator():
    summary = TARGET.run(case=EXAMPLE_CASE, log_file=BUILD_ROOT / "pytest-work_deltas-case.log")
    assert summary["vectors"] == 1 and summary["extra"]["expected_work_deltas"] == "checked"


def _k2_case(path):
    """A case with another ``node_top_k``, a larger ``max_verify_num`` and a larger batch than
    the SMALL build; returns its call."""
    call = perf_call(2, 6, 9, batch_size=9, verify_num=6, cumu_count=20, seed=3)
    deltas, _ = expected(call)
    call.cost_per_node = float(F32((deltas[2] - deltas[1]) / F32(call.batch_size)))
    write_case_file(call, path)
    return call


def test_case_with_other_parameters_derives_its_build(tmp_path):
    """``case_parameters`` on that case, and its call on the derived build under Amaranth's
    simulator (the Verilator replay is in the slow tier)."""
    path = tmp_path / "k2_case.txt"
    call = _k2_case(path)
    parameters = TARGET.case_parameters(path, SMALL)
    assert parameters == {"node_top_k": 2, "max_verify_num": 6, "lanes": 2, "max_batch_size": 9}
    run_on_amaranth(parameters, [call])


@pytest.mark.slow
def test_case_with_other_parameters_builds_its_model(tmp_path):
    """``CASE=`` on that case: it replays on a model built for it."""
    path = tmp_path / "k2_case.txt"
    call = _k2_case(path)
    summary = TARGET.run(SMALL, case=path, log_file=BUILD_ROOT / "pytest-work_deltas-k2.log")
    assert summary["extra"]["expected_work_deltas"] == "checked"
    assert summary["extra"]["requests"] == 9
    assert summary["extra"]["next_width"] == expected(call)[1] == 2


def test_measure_on_a_contract_point():
    """The cycle-budget protocol on the `serving` tree (K = 8, W = 8, depth 5, verify_num 64,
    B = 1: the default model), checked against the measurement schema."""
    import jsonschema

    from boards import load_schema

    point = {"id": "serving-b1-test", "tree": "serving", "node_top_k": 8, "tree_width": 8,
             "depth": 5, "verify_num": 64, "batch": 1, "vocab": 32000, "hidden_size": 4096,
             "hidden_dtype": "fp16", "hidden_bytes": 2, "clock_mhz": 300.0}
    result = TARGET.measure(point, seed=1,
                            log_file=BUILD_ROOT / "pytest-work_deltas-measure.log")
    jsonschema.validate(result, load_schema("measurement"))
    assert result["invocations"] == 5
    assert draft_round_cumu_counts(8, 8, 5) == [1, 9, 73, 137, 201]
    # Rows of ws0 + 8 scores (ws0 = 1, 9, 64, 64, 64): 2 + 3 + 9 + 9 + 9 beats of 33 bytes.
    assert result["ports"]["scores"] == 32 * 33
    assert result["operations"] == 3 * 8 * 5 + 9 * 5
    assert 0 < result["cycles"] < 600


def test_measure_parameters():
    """The DUT of a contract point: its ``K``, room for its verify set and batch; ``K`` above
    16 is not measured."""
    point = {"node_top_k": 10, "tree_width": 10, "depth": 3, "verify_num": 100, "batch": 300}
    parameters, spec = TARGET.measure_parameters(point)
    assert parameters == {"node_top_k": 10, "max_verify_num": 100, "lanes": 8,
                          "max_batch_size": 300}
    assert spec == {"batch_size": 300, "verify_num": 100, "cumu_counts": [1, 11, 111]}
    with pytest.raises(NotMeasured, match="K = 17 exceeds `node_top_k` 16"):
        TARGET.measure_parameters({**point, "node_top_k": 17})


@pytest.mark.slow
def test_full_regression_under_verilator(sim_report):
    for seed in (1, 2, 3):
        summary = TARGET.run(seed=seed,
                             log_file=BUILD_ROOT / f"pytest-work_deltas-seed{seed}.log")
        assert summary["initiation_interval"] == 9.0
    sim_report(f"work_deltas (3 seeds): {summary['vectors']} calls each bit-exact")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("parameters", "perf", "interval"),
    [
        ({"node_top_k": 1, "max_verify_num": 4, "lanes": 1, "max_batch_size": 7},
         {"batch_size": 7, "verify_num": 4, "cumu_count": 9}, 5.0),
        ({"node_top_k": 16, "max_verify_num": 20, "lanes": 3, "max_batch_size": 40},
         {"batch_size": 40, "verify_num": 20, "cumu_count": 100}, 16.0),
        ({"node_top_k": 8, "max_verify_num": 64, "lanes": 1, "max_batch_size": 256},
         {"batch_size": 64, "verify_num": 64, "cumu_count": 1000}, 72.0),
    ],
    ids=["K1-lanes1", "K16-lanes3", "K8-lanes1"],
)
def test_other_parameters_under_verilator(parameters, perf, interval, sim_report):
    name = "_".join(str(value) for value in parameters.values())
    summary = TARGET.run(parameters, overrides={"vectors": 300, "perf": perf},
                         log_file=BUILD_ROOT / f"pytest-work_deltas-{name}.log")
    # (t_last - t_first) / (B - 1) over the request starts: the first rows enter a little
    # faster than the steady state while the pipeline fills.
    assert interval - 0.5 <= summary["initiation_interval"] <= interval
    sim_report(f"work_deltas {parameters}: {summary['vectors']} calls bit-exact, "
               f"{interval:.2f} cycles/request")
