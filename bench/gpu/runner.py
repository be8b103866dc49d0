"""The loop both sides of the bench share: launch costs once, then per point the side's checks
and timings, the CSV and the summary rewritten after every point (so a run stopped at its time
limit keeps the points it finished).

A point's host-side inputs (the cycle budget's generators and the goldens: seconds to tens of
seconds at B = 128, V = 128,256) can be prepared ahead in ``workers`` forked processes while
the GPU times the points before it; the pool is started before the parent touches the GPU.
"""

from __future__ import annotations

import gc
import multiprocessing
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from .checks import Check
from .csvio import MAX_COV, measurement_rows, write_csv
from .engine import load_budget
from .timing import Timer, environment, launch_costs

__all__ = ["time_ops", "run_side"]


def time_ops(timer: Timer, point: str, env: dict,
             ops: Iterable[tuple[str, Callable[[], object], int]]) -> list[dict]:
    """Every ``(name, call, bytes)`` timed in every mode of ``timer`` (a CUDA graph of the call
    in graph mode, freed after its measurement); the CSV rows."""
    rows = []
    for name, fn, nbytes in ops:
        for mode in timer.modes:
            call = fn if mode == "eager" else timer.graph(fn)
            rows += measurement_rows(point, timer.measure(name, mode, call), nbytes, env)
            del call
            gc.collect()
            if timer.cuda:
                torch.cuda.empty_cache()
    return rows


class _Prepared:
    """``prepare(point, seed)`` of every point: inline when asked for, or ahead in ``workers``
    forked processes, all submitted at construction (so the workers fork before the parent
    uses the GPU)."""

    def __init__(self, prepare: Callable[[dict, int], object], points: list[dict], seed: int,
                 workers: int):
        self.prepare, self.seed, self.pool, self.futures = prepare, seed, None, []
        if workers > 0:
            self.pool = ProcessPoolExecutor(max_workers=workers,
                                            mp_context=multiprocessing.get_context("fork"))
            self.futures = [self.pool.submit(prepare, point, seed) for point in points]

    def get(self, index: int, point: dict):
        """The prepared inputs of ``points[index]`` (the future is dropped once read)."""
        if self.pool is None:
            return self.prepare(point, self.seed)
        result = self.futures[index].result()
        self.futures[index] = None
        return result

    def close(self) -> None:
        """Stop the workers (pending points are cancelled)."""
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


def run_side(side: str, points: list[dict], timer: Timer, seed: int, csv_path: Path,
             md_path: Path, command: str, prepare: Callable[[dict, int], object],
             per_point: Callable[[object, dict], tuple[list[Check], list[dict]]],
             render: Callable[[Path, dict], str], *, workers: int = 0, log=print) -> bool:
    """Run ``per_point(prepare(point, seed), env) -> (checks, rows)`` at every point; write the
    CSV (checks in its header) and ``render(csv_path, budget)`` to ``md_path``. Returns
    whether every check passed."""
    prepared = _Prepared(prepare, points, seed, workers)
    try:
        return _run_points(side, points, timer, seed, csv_path, md_path, command, prepared,
                           per_point, render, workers, log)
    finally:
        prepared.close()


def _run_points(side, points, timer, seed, csv_path, md_path, command, prepared, per_point,
                render, workers, log) -> bool:
    env = environment(timer)
    header = [f"bench.gpu {side}: {command}", f"device {env['device']}; gpu {env['gpu']}; "
              f"driver {env['driver']}; torch {env['torch']}; triton {env['triton']}; "
              f"cuda {env['cuda']}", f"seed {seed}; CoV gate {MAX_COV:.0%}; "
              f"runs per op {timer.runs}; host workers {workers}"]
    rows, passed, begin = [], True, time.time()
    for launch in launch_costs(timer):
        rows += measurement_rows("-", launch, 0, env)
    for index, point in enumerate(points):
        started = time.time()
        checks, point_rows = per_point(prepared.get(index, point), env)
        for check in checks:
            passed &= check.passed
            header.append(f"check {point['id']}: {check.line()}")
            log(f"  {point['id']} {check.line()}")
        rows += point_rows
        log(f"{point['id']}: checked and timed in {time.time() - started:.1f} s")
        gc.collect()
        if timer.cuda:
            torch.cuda.empty_cache()
        write_csv(csv_path, header + [f"wall time {time.time() - begin:.0f} s"], rows)
        md_path.write_text(render(csv_path, load_budget()))
    return passed
