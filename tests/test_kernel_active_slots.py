# amaranth: UnusedElaboratable=no
"""``ActiveSlots``: parameter validation, Amaranth-simulator unit tests and the Verilator
regression against ``golden.compact_active_slots``."""

import numpy as np
import pytest

from hw.kernels.active_slots import ActiveSlots, synthesis_parameters
from sim.active_slots import TARGET
from sim.active_slots.pysim import run_on_amaranth
from sim.active_slots.vectors import (
    EXAMPLE_CASE,
    Call,
    call_from_case,
    directed_calls,
    expected,
    k7_call,
    random_call,
    write_case_file,
)
from sim.harness import BUILD_ROOT

SMALL = {"max_batch_size": 13}


def test_parameters_and_layouts():
    dut = ActiveSlots(max_batch_size=1000)
    assert dut.max_batch_size == 1000 and dut.batch_bits == 10
    with pytest.raises(AttributeError):
        dut.max_batch_size = 3
    params = dut.params
    assert params.cmd_layout.size == 10 and params.finished_layout.size == 3
    assert params.inverse_layout.size == params.slot_layout.size == 11 + 2
    assert params.count_layout.size == 10
    assert synthesis_parameters().max_batch_size == 256
    assert synthesis_parameters(max_batch_size=8).batch_bits == 4


def test_golden_of_a_batch_finishing_in_the_middle():
    want = expected(Call("mid", np.array([False, True, False, True, True, False])))
    assert want["active_slots"].tolist() == [0, 2, 5, -1, -1, -1]
    assert want["active_inverse"].tolist() == [0, -1, 1, -1, -1, 2]
    assert want["active_count"].tolist() == [3]


def test_directed_calls_on_amaranth_simulator():
    run_on_amaranth(SMALL, directed_calls(13))


def test_random_calls_with_idle_and_backpressure_on_amaranth_simulator():
    rng = np.random.default_rng(6)
    calls = [random_call(rng, 13) if i % 2 else k7_call(rng, 13) for i in range(16)]
    run_on_amaranth(SMALL, calls + directed_calls(13), idle=0.4, backpressure=0.4, seed=1)


def test_one_row_kernel_on_amaranth_simulator():
    run_on_amaranth({"max_batch_size": 1}, directed_calls(1), idle=0.3, backpressure=0.3)


def test_example_case_matches_golden():
    call, want = call_from_case(EXAMPLE_CASE)
    assert len(want) == 3 and call.batch_size <= SMALL["max_batch_size"]
    golden = expected(call)
    for name, values in want.items():
        assert np.array_equal(golden[name], values), name


def test_matches_golden_under_verilator(sim_report):
    summary = TARGET.run(SMALL, overrides={"vectors": 60,
                                           "perf": {"batch_size": 13, "finished_fraction": 0.3}},
                         log_file=BUILD_ROOT / "pytest-active_slots.log")
    assert summary["random_vectors"] == 60
    assert summary["initiation_interval"] == 1.0  # a row a clock
    sim_report(f"active_slots {SMALL}: {summary['vectors']} calls ({summary['requests']} "
               "requests) bit-exact with the golden")


def test_case_replay_under_verilator():
    summary = TARGET.run(SMALL, case=EXAMPLE_CASE,
                         log_file=BUILD_ROOT / "pytest-active_slots-case.log")
    assert summary["vectors"] == 1 and summary["extra"]["expected tensors"] == "3 of 3 checked"


def test_case_with_a_larger_batch_builds_a_larger_model(tmp_path):
    """A case whose batch exceeds the build's ``max_batch_size`` replays on a model built for
    it (``case_parameters``)."""
    rng = np.random.default_rng(11)
    call = Call("batch 40", rng.random(40) < 0.4)
    path = tmp_path / "batch40.txt"
    write_case_file(call, path)
    assert TARGET.case_parameters(path, SMALL) == {"max_batch_size": 40}
    summary = TARGET.run(SMALL, case=path, log_file=BUILD_ROOT / "pytest-active_slots-b40.log")
    assert summary["extra"]["batch_size"] == 40
    assert summary["extra"]["expected tensors"] == "3 of 3 checked"


@pytest.mark.slow
def test_make_sim_target_under_verilator(sim_report):
    summary = TARGET.run(log_file=BUILD_ROOT / "pytest-active_slots-full.log")
    assert summary["initiation_interval"] == 1.0
    sim_report(f"active_slots (make sim): {summary['vectors']} calls bit-exact")
