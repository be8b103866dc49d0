"""The simulation harness and ``make sim`` entry point: caching, failure detection, CLI."""

import subprocess
import sys

import pytest

from sim.float32.dut import Float32OpStream
from sim.harness import (
    BUILD_ROOT,
    COCOTB_TESTS_RUN,
    SimulationError,
    build_model,
    elaborate,
    model_directory,
    run_testbench,
)
from sim.targets import UnknownTargetError, discover_targets, run_target, target


def test_model_is_built_once_per_parameter_set():
    first = build_model(Float32OpStream("cmp"), name="fp32_cmp")
    stamp = first.build_dir / "model.stamp"
    built_at = stamp.stat().st_mtime_ns
    second = build_model(Float32OpStream("cmp"), name="fp32_cmp")
    assert second.build_dir == first.build_dir
    assert stamp.stat().st_mtime_ns == built_at


def test_cache_key_covers_hardware_and_tracing():
    cmp_text = elaborate(Float32OpStream("cmp"), name="dut")
    mul_text = elaborate(Float32OpStream("mul"), name="dut")
    directories = {model_directory(text, name="dut", waves=waves)
                   for text in (cmp_text, mul_text) for waves in (False, True)}
    assert len(directories) == 4


def test_failing_cocotb_test_raises():
    """The add DUT checked against the multiply reference (same port widths) must fail on
    its results, not pass silently."""
    model = build_model(Float32OpStream("add"), name="fp32_add")
    config = {**discover_targets()["fp32_add"].config, "parameters": {"operation": "mul"},
              "vectors": 50}
    with pytest.raises(SimulationError, match="1 of 1 cocotb tests"):
        run_testbench(model, "sim.float32.tb", config, seed=3,
                      log_file=BUILD_ROOT / "pytest-expected-failure.log")


def test_named_tests_must_run():
    """A run naming a cocotb test the module lacks fails instead of passing with nothing run."""
    model = build_model(Float32OpStream("cmp"), name="fp32_cmp")
    config = {**discover_targets()["fp32_cmp"].config, "vectors": 50}
    with pytest.raises(SimulationError, match="ran no test"):
        run_testbench(model, "sim.float32.tb", config, seed=3, tests=("no_such_phase",),
                      log_file=BUILD_ROOT / "pytest-no-such-phase.log")


def test_cocotb_tests_are_counted():
    before = COCOTB_TESTS_RUN.get("sim.float32.tb", 0)
    run_target("fp32_cmp", overrides={"vectors": 20}, seed=6,
               log_file=BUILD_ROOT / "pytest-fp32_cmp-count.log")
    assert COCOTB_TESTS_RUN["sim.float32.tb"] > before


def test_run_target_returns_summary(sim_report):
    summary = run_target("fp32_cmp", overrides={"vectors": 500}, seed=5,
                         log_file=BUILD_ROOT / "pytest-fp32_cmp-small.log")
    assert summary["random_vectors"] == 500
    assert summary["cycles"] > summary["vectors"]


def test_unknown_target_lists_known_ones():
    with pytest.raises(UnknownTargetError) as error:
        target("nope")
    assert "fp32_mul" in str(error.value)


def test_case_refused_by_target_without_case_replay(tmp_path):
    case = tmp_path / "x.txt"
    case.write_text("")
    with pytest.raises(ValueError, match="does not replay case files"):
        run_target("fp32_cmp", case=case)


def test_cli_unknown_kernel_exits_nonzero_with_listing():
    result = subprocess.run([sys.executable, "-m", "sim", "no_such_kernel"],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "unknown simulation target 'no_such_kernel'" in result.stderr
    for name in discover_targets():
        assert name in result.stderr


def test_cli_without_kernel_exits_nonzero():
    result = subprocess.run([sys.executable, "-m", "sim"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "fp32_add" in result.stderr


def test_cli_malformed_case_fails_on_the_console_before_any_build(tmp_path):
    """The case file is parsed in ``make sim`` itself: its error (file, line, field) is on the
    console with a non-zero exit, not only inside a cocotb results file."""
    case = tmp_path / "broken.txt"
    case.write_text("# a case\nfinished 3 1 0\n")
    result = subprocess.run([sys.executable, "-m", "sim", "active_slots", "--case", str(case)],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert f"active_slots: FAIL — {case}:2: tensor 'finished'" in result.stderr
    assert "building Verilator model" not in result.stdout


def test_make_sim_unknown_kernel_exits_nonzero():
    result = subprocess.run(["make", "--no-print-directory", "sim", "KERNEL=no_such_kernel"],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "known targets" in result.stderr
