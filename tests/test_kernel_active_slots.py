# amaranth: UnusedElaboratable=no
"""``ActiveSlots``: parameter validation, Amaranth-simulator unit tests and the Verilator
regression against ``golden.compact_active_slots``."""

import numpy as np
import pytest

from hw.kernels.active_slots import ActiveSlots, synthesis_configuration
from sim.active_slots import run_parameters
from sim.active_slots.pysim import run_on_amaranth
from sim.active_slots.vectors import (
    EXAMPLE_CASE,
    Call,
    call_from_case,
    directed_calls,
    expected,
    k7_call,
    random_call,
    write_example_case,
)
from sim.harness import BUILD_ROOT
from sim.targets import run_target

SMALL = {"max_batch_size": 13}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"max_batch_size": 0}, "`max_batch_size` must be at least 1, not 0"),
        ({"max_batch_size": 2.5}, "`max_batch_size` must be an integer, not 2.5"),
        ({"max_batch_size": False}, "`max_batch_size` must be an integer, not False"),
    ],
)
def test_invalid_parameters(arguments, message):
    with pytest.raises(ValueError, match=message):
        ActiveSlots(**arguments)


def test_parameters_and_layouts():
    dut = ActiveSlots(max_batch_size=1000)
    assert dut.max_batch_size == 1000 and dut.batch_bits == 10
    with pytest.raises(AttributeError):
        dut.max_batch_size = 3
    assert dut.cmd_layout.size == 10 and dut.finished_layout.size == 3
    assert dut.inverse_layout.size == dut.slot_layout.size == 11 + 2
    assert dut.count_layout.size == 10
    config = synthesis_configuration()
    config._MustUse__silence = True  # built in hw/kernels, never elaborated here
    assert config.max_batch_size == 256


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


def test_example_case_is_current_and_matches_golden(tmp_path):
    regenerated = tmp_path / "case.txt"
    write_example_case(regenerated)
    assert regenerated.read_text() == EXAMPLE_CASE.read_text(), \
        "rerun `python -m sim.active_slots.vectors`"
    call, want = call_from_case(EXAMPLE_CASE)
    assert len(want) == 3 and call.batch_size <= SMALL["max_batch_size"]
    golden = expected(call)
    for name, values in want.items():
        assert np.array_equal(golden[name], values), name


def test_matches_golden_under_verilator(sim_report):
    summary = run_parameters(SMALL, overrides={"vectors": 60,
                                               "perf": {"batch_size": 13,
                                                        "finished_fraction": 0.3}},
                             log_file=BUILD_ROOT / "pytest-active_slots.log")
    assert summary["random_vectors"] == 60
    assert summary["initiation_interval"] == 1.0  # a row a clock
    sim_report(f"active_slots {SMALL}: {summary['vectors']} calls ({summary['requests']} "
               "requests) bit-exact with the golden")


def test_case_replay_under_verilator():
    summary = run_parameters(SMALL, case=EXAMPLE_CASE,
                             log_file=BUILD_ROOT / "pytest-active_slots-case.log")
    assert summary["vectors"] == 1 and summary["extra"]["expected tensors"] == "3 of 3 checked"


@pytest.mark.slow
def test_make_sim_target_under_verilator(sim_report):
    summary = run_target("active_slots", log_file=BUILD_ROOT / "pytest-active_slots-full.log")
    assert summary["initiation_interval"] == 1.0
    sim_report(f"active_slots (make sim): {summary['vectors']} calls bit-exact")
