"""The GPU bench (bench/gpu) validated on the CPU: the Triton kernels under TRITON_INTERPRET=1
against the goldens at the CPU validation points, the timing harness's CoV gate, and every
kernel compiled for an H100 (sm_90) by Triton's real backend. Slow tier; needs the optional
``gpu`` group (torch, triton)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before bench.gpu's kernels are defined

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch", reason="bench.gpu needs the optional `gpu` group: "
                                    "pip install -e '.[gpu]' (torch and triton)")
pytest.importorskip("triton", reason="bench.gpu needs the optional `gpu` group: "
                                     "pip install -e '.[gpu]' (torch and triton)")

import torch  # noqa: E402

from bench.gpu.csvio import CPU_DEVICE, header_lines, measurement_rows, read_csv  # noqa: E402
from bench.gpu.timing import MIN_RUNS, Timer, environment  # noqa: E402
from sim.harness import REPO_ROOT  # noqa: E402

pytestmark = pytest.mark.slow

VERIFY_OPS = {"softmax", "top_k_renorm", "top_p_renorm", "draft_probs_zero", "tree_sampling",
              "argmax", "verify_tree_greedy", "build_tree", "visited_rows", "sglang_chain",
              "sglang_chain_renorm", "greedy_chain", "empty_kernel_launch"}


def _bench(*args, interpret=True, timeout=900):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-m", "bench.gpu", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _runs_per_op(rows):
    counts = {}
    for row in rows:
        key = (row["point"], row["op"], row["mode"])
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_verify_side_matches_the_goldens_on_the_cpu(tmp_path):
    done = _bench("verify", "--cpu", "--points", "small-b1", "serving-b1", "--out",
                  str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    csv_path = tmp_path / "cpu_validation_verify_raw.csv"
    checks = [line for line in header_lines(csv_path) if line.startswith("check ")]
    assert len(checks) == 2 * 8  # softmax, top-k, top-p, sampling, argmax, greedy, tree, walk
    assert all(": PASS " in line for line in checks), checks
    rows = read_csv(csv_path)
    assert {row["device"] for row in rows} == {CPU_DEVICE}
    assert {row["op"] for row in rows} == VERIFY_OPS
    assert min(_runs_per_op(rows).values()) >= MIN_RUNS
    assert read_csv(csv_path, gpu_only=True) == []
    summary = (tmp_path / "cpu_validation_verify_summary.md").read_text()
    assert "not GPU figures" in summary


def test_draft_side_matches_the_goldens_on_the_cpu(tmp_path):
    # eagle2 (K = W = 10) takes the 128-lane sort network, small the 64-lane one.
    # two worker processes prepare the golden rounds (the pool path of bench.gpu.runner)
    done = _bench("draft", "--cpu", "--workers", "2", "--points", "small-b1", "eagle2-b1",
                  "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    csv_path = tmp_path / "cpu_validation_draft_raw.csv"
    checks = [line for line in header_lines(csv_path) if line.startswith("check ")]
    # 3 depths (small) + 5 depths (eagle2), three kernels each, and each final tree
    assert len(checks) == 3 * (3 + 5) + 2
    assert all(": PASS bit-exact" in line for line in checks), checks
    rows = read_csv(csv_path)
    assert {"draft_round", "score_d1", "update_state_d5", "work_deltas_d3"} <= {
        row["op"] for row in rows}
    assert min(_runs_per_op(rows).values()) >= MIN_RUNS


def test_every_kernel_compiles_for_sm90():
    done = _bench("compile", interpret=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for kernel in ("_tree_sampling_kernel", "_greedy_kernel", "_build_tree_kernel",
                   "_visited_rows_kernel", "_score_kernel", "_update_kernel",
                   "_work_deltas_kernel"):
        assert f"\n{kernel} " in "\n" + done.stdout, kernel
    assert "bytes of sm_90 cubin" in done.stdout


def test_the_visited_rows_check_fails_on_a_wrong_walk():
    from bench.gpu.points import cpu_validation_points
    from bench.gpu.verify import check_point, golden_walk
    from bench.gpu.verify_inputs import verify_inputs
    from bench.gpu.verify_ops import VerifyOps

    point = next(p for p in cpu_validation_points() if p["id"] == "serving-b3-v9000")
    inputs = verify_inputs(point, 1)
    golden, rows, _ = golden_walk(inputs)
    assert golden["accept_token_num"].sum() > 0
    ops = VerifyOps(inputs, torch.device("cpu"))
    ops.coins.fill_(1.0)  # the device now rejects (almost) every child
    checks = {check.op: check for check in check_point(ops, golden, rows)}
    assert not checks["visited_rows"].passed
    assert "differs" in checks["visited_rows"].detail


def test_timer_reruns_a_point_that_misses_the_cov_gate(monkeypatch):
    timer = Timer(torch.device("cpu"), warmup=0)
    scripted = iter([1.0] + [100, 200, 100, 200, 100] + [100, 101, 100, 99, 100])
    monkeypatch.setattr(timer, "_elapsed_us", lambda fn, iters: float(next(scripted)))
    measured = timer.measure("op", "eager", lambda: None)
    assert measured.attempts == 2
    assert measured.runs == [100, 101, 100, 99, 100]
    assert measured.met_gate
    rows = measurement_rows("p", measured, 10, environment(timer))
    assert [row["gate"] for row in rows] == ["ok"] * 5
    assert {row["device"] for row in rows} == {CPU_DEVICE}


def test_timer_marks_a_point_that_never_meets_the_gate(monkeypatch):
    timer = Timer(torch.device("cpu"), warmup=0, retries=2)
    noisy = iter([1.0] + [100, 300] * 20)
    monkeypatch.setattr(timer, "_elapsed_us", lambda fn, iters: float(next(noisy)))
    measured = timer.measure("op", "eager", lambda: None)
    assert measured.attempts == 3
    assert not measured.met_gate
    rows = measurement_rows("p", measured, 0, environment(timer))
    assert {row["gate"] for row in rows} == {"cov-miss"}
    assert np.isclose(float(rows[0]["cov"]), measured.cov, atol=1e-4)


def test_timer_refuses_fewer_than_five_runs():
    with pytest.raises(ValueError, match="`runs` must be at least 5, not 4"):
        Timer(torch.device("cpu"), runs=4)


def test_graph_mode_is_gpu_only():
    timer = Timer(torch.device("cpu"))
    assert timer.modes == ("eager",)
    with pytest.raises(RuntimeError, match="CUDA graphs need a GPU"):
        timer.graph(lambda: None)


def test_the_verify_ops_hold_at_another_temperature():
    from bench.gpu.points import cpu_validation_points
    from bench.gpu.verify import check_point, golden_walk
    from bench.gpu.verify_inputs import verify_inputs
    from bench.gpu.verify_ops import VerifyOps

    point = next(p for p in cpu_validation_points() if p["id"] == "serving-b3-v9000")
    inputs = verify_inputs(point, 1)
    inputs.call.temperatures[:] = np.float32([0.7, 1.6, 0.3])
    golden, rows, _ = golden_walk(inputs)
    checks = check_point(VerifyOps(inputs, torch.device("cpu")), golden, rows)
    assert all(check.passed for check in checks), [check.line() for check in checks]
