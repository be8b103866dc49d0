"""The simulation harness and ``make sim`` entry point: caching, failure detection, CLI."""

import subprocess
import sys

import pytest

from sim.float32.dut import Float32OpStream
from sim.harness import (
    BUILD_ROOT,
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
    """The compare DUT checked against the multiply reference must fail, not pass silently."""
    model = build_model(Float32OpStream("cmp"), name="fp32_cmp")
    config = {**discover_targets()["fp32_cmp"].config, "operation": "mul", "vectors": 50}
    with pytest.raises(SimulationError, match="1 of 1 cocotb tests"):
        run_testbench(model, "sim.float32.tb", config, seed=3,
                      log_file=BUILD_ROOT / "pytest-expected-failure.log")


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


def test_make_sim_unknown_kernel_exits_nonzero():
    result = subprocess.run(["make", "--no-print-directory", "sim", "KERNEL=no_such_kernel"],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "known targets" in result.stderr
