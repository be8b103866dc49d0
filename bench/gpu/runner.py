"""The loop both sides of the bench share: launch costs once, then per point the side's checks
and timings, the CSV and the summary rewritten after every point (so a run stopped at its time
limit keeps the points it finished)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable
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


def run_side(side: str, points: list[dict], timer: Timer, seed: int, csv_path: Path,
             md_path: Path, command: str,
             per_point: Callable[[dict, dict], tuple[list[Check], list[dict]]],
             render: Callable[[Path, dict], str], log=print) -> bool:
    """Run ``per_point(point, env) -> (checks, rows)`` at every point; write the CSV (checks in
    its header) and ``render(csv_path, budget)`` to ``md_path``. Returns whether every check
    passed."""
    env = environment(timer)
    header = [f"bench.gpu {side}: {command}", f"device {env['device']}; gpu {env['gpu']}; "
              f"driver {env['driver']}; torch {env['torch']}; triton {env['triton']}; "
              f"cuda {env['cuda']}", f"seed {seed}; CoV gate {MAX_COV:.0%}; "
              f"runs per op {timer.runs}"]
    rows, passed, begin = [], True, time.time()
    for launch in launch_costs(timer):
        rows += measurement_rows("-", launch, 0, env)
    for point in points:
        started = time.time()
        checks, point_rows = per_point(point, env)
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
