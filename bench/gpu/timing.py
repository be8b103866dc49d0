"""Timing of GPU ops: CUDA events, warm-up, eager and CUDA-graph replay, repeated runs with a
coefficient-of-variation gate, launch costs, and the environment every CSV row names.

A *run* times ``iters`` back-to-back calls (eager) or graph replays between two CUDA events and
reports the mean µs per call; ``iters`` is calibrated once per op so that a run lasts about
:data:`RUN_TARGET_US`. An op is measured as ``runs`` (>= 5) independent runs; when their CoV
exceeds :data:`MAX_COV` the whole set is measured again (up to ``retries`` times) and the
attempt count is kept, so a point that needed a re-run says so, and one that never met the
gate is marked ``cov-miss``.

Without a GPU the same code runs on the CPU with ``time.perf_counter_ns`` around the calls:
the rows' device is :data:`CPU_DEVICE` ("cpu-validation"), graph mode is not available, and
no such figure may be presented as a GPU figure (the summaries refuse them).
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import triton

from .csvio import CPU_DEVICE, MAX_COV

__all__ = ["CPU_DEVICE", "MAX_COV", "MIN_RUNS", "RUN_TARGET_US", "Measurement", "Timer",
           "environment", "launch_costs", "cov"]

#: Runs per op and point (the issue's floor).
MIN_RUNS = 5
#: The length of one run (µs) that ``iters`` is calibrated to.
RUN_TARGET_US = 2000.0
_MAX_ITERS = 500


def cov(values: list[float]) -> float:
    """Coefficient of variation of ``values`` (population stdev / mean; 0 for one value)."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean > 0 else 0.0


@dataclass
class Measurement:
    """One op at one point in one mode: ``runs`` µs per call, ``iters`` calls per run, the
    attempts it took to meet the CoV gate (1 = first time) and whether it met it."""

    op: str
    mode: str
    runs: list[float]
    iters: int
    attempts: int
    all_attempts: list[list[float]] = field(default_factory=list)

    @property
    def cov(self) -> float:
        """CoV of the kept runs."""
        return cov(self.runs)

    @property
    def met_gate(self) -> bool:
        """Whether the kept runs meet :data:`MAX_COV`."""
        return self.cov <= MAX_COV

    @property
    def median_us(self) -> float:
        """Median µs per call over the kept runs."""
        return statistics.median(self.runs)


class Timer:
    """Times callables on ``device`` (a ``torch.device``): CUDA events on a GPU, the wall
    clock on the CPU (``device_label`` is then :data:`CPU_DEVICE`)."""

    def __init__(self, device: torch.device, *, runs: int = MIN_RUNS, warmup: int = 3,
                 retries: int = 2, run_target_us: float = RUN_TARGET_US):
        if runs < MIN_RUNS:
            raise ValueError(f"`runs` must be at least {MIN_RUNS}, not {runs}")
        self.device = device
        self.cuda = device.type == "cuda"
        self.runs, self.warmup, self.retries = runs, warmup, retries
        self.run_target_us = run_target_us

    @property
    def device_label(self) -> str:
        """The CSV's device column: the GPU's name, or :data:`CPU_DEVICE`."""
        return torch.cuda.get_device_name(self.device) if self.cuda else CPU_DEVICE

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes this timer can measure: eager and (on a GPU) graph."""
        return ("eager", "graph") if self.cuda else ("eager",)

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def _elapsed_us(self, fn: Callable[[], object], iters: int) -> float:
        """Mean µs per call of ``iters`` back-to-back calls."""
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1000.0 / iters
        begin = time.perf_counter_ns()
        for _ in range(iters):
            fn()
        return (time.perf_counter_ns() - begin) / 1000.0 / iters

    def graph(self, fn: Callable[[], object]) -> Callable[[], object]:
        """``fn`` captured as one CUDA graph; returns its replay. GPU only."""
        if not self.cuda:
            raise RuntimeError("CUDA graphs need a GPU (graph mode is not measured on the CPU)")
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm-up on a side stream, as torch asks before a capture
                fn()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return graph.replay

    def calibrate(self, fn: Callable[[], object]) -> int:
        """Calls per run so that a run lasts about ``run_target_us`` (1 .. 500)."""
        for _ in range(self.warmup):
            fn()
        self._sync()
        once = max(self._elapsed_us(fn, 1), 1e-3)
        return int(min(_MAX_ITERS, max(1, self.run_target_us // once)))

    def measure(self, op: str, mode: str, fn: Callable[[], object]) -> Measurement:
        """``runs`` runs of ``fn`` (already the graph replay in graph mode), re-measured while
        the CoV exceeds :data:`MAX_COV`, at most ``retries`` more times; the attempt with the
        lowest CoV is kept."""
        iters = self.calibrate(fn)
        attempts = []
        for _ in range(1 + self.retries):
            runs = []
            for _ in range(self.runs):
                self._sync()
                runs.append(self._elapsed_us(fn, iters))
            attempts.append(runs)
            if cov(runs) <= MAX_COV:
                break
        best = min(attempts, key=cov)
        return Measurement(op, mode, best, iters, len(attempts), attempts)


@triton.jit
def _empty_kernel(x_ptr):
    """A kernel that does nothing (its launch is the cost measured)."""
    pass


def launch_costs(timer: Timer, *, graph_nodes: int = 100) -> list[Measurement]:
    """The empty-kernel launch cost (a Triton kernel with no body, eager) and, on a GPU, the
    cost of one graph node: a graph of ``graph_nodes`` empty kernels against a graph of one,
    ``(t(M) - t(1)) / (M - 1)`` per node (its runs are the per-run differences)."""
    buffer = torch.zeros(1, device=timer.device)

    def one():
        _empty_kernel[(1,)](buffer)

    out = [timer.measure("empty_kernel_launch", "eager", one)]
    if timer.cuda:
        def many():
            for _ in range(graph_nodes):
                _empty_kernel[(1,)](buffer)

        single = timer.measure("empty_graph_1_node", "graph", timer.graph(one))
        multi = timer.measure(f"empty_graph_{graph_nodes}_nodes", "graph", timer.graph(many))
        per_node = [(m - s) / (graph_nodes - 1) for m, s in zip(multi.runs, single.runs,
                                                                strict=True)]
        out += [single, multi, Measurement("graph_node", "graph", per_node, multi.iters,
                                           max(single.attempts, multi.attempts))]
    return out


def _nvidia_smi(query: str) -> str:
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() \
        else "unknown"


def environment(timer: Timer) -> dict[str, str]:
    """The columns every CSV row carries: device, GPU, driver, torch, triton and CUDA
    versions (``none`` where there is no GPU)."""
    if timer.cuda:
        gpu = torch.cuda.get_device_name(timer.device)
        capability = ".".join(map(str, torch.cuda.get_device_capability(timer.device)))
        return {"device": gpu, "gpu": f"{gpu} (sm {capability})",
                "driver": _nvidia_smi("driver_version"), "torch": torch.__version__,
                "triton": triton.__version__, "cuda": str(torch.version.cuda)}
    return {"device": CPU_DEVICE, "gpu": f"none ({platform.processor() or platform.machine()})",
            "driver": "none", "torch": torch.__version__, "triton": triton.__version__,
            "cuda": f"none (torch built for {torch.version.cuda})"}
