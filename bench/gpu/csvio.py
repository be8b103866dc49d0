"""The raw CSVs of the GPU bench: one row per run, ``#`` header lines for the checks.

Columns (:data:`COLUMNS`): point, op, mode (eager / graph), run (1..), us (mean µs per call of
the run), iters (calls per run), bytes (per call, from tensor sizes), cov (of the op's kept
runs), attempts (1 = met the CoV gate first time), gate (``ok`` / ``cov-miss``), then the
environment: device (the GPU's name or ``cpu-validation``), gpu, driver, torch, triton, cuda.
"""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the timing module needs torch; reading CSVs must not
    from .timing import Measurement

__all__ = ["CPU_DEVICE", "MAX_COV", "COLUMNS", "measurement_rows", "write_csv", "read_csv",
           "header_lines", "medians", "op_sections"]

#: The device column of rows measured without a GPU (never a GPU figure).
CPU_DEVICE = "cpu-validation"
#: The largest coefficient of variation (stdev / mean over the runs) a measurement may have.
MAX_COV = 0.05

COLUMNS = ("point", "op", "mode", "run", "us", "iters", "bytes", "cov", "attempts", "gate",
           "device", "gpu", "driver", "torch", "triton", "cuda")


def measurement_rows(point: str, measurement: Measurement, nbytes: int,
                     env: dict[str, str]) -> list[dict]:
    """One row per kept run of ``measurement``."""
    gate = "ok" if measurement.cov <= MAX_COV else "cov-miss"
    return [{"point": point, "op": measurement.op, "mode": measurement.mode, "run": i + 1,
             "us": f"{us:.3f}", "iters": measurement.iters, "bytes": nbytes,
             "cov": f"{measurement.cov:.4f}", "attempts": measurement.attempts, "gate": gate,
             **{key: env[key] for key in COLUMNS[10:]}}
            for i, us in enumerate(measurement.runs)]


def write_csv(path: Path, header: list[str], rows: list[dict]) -> None:
    """``header`` as ``#`` lines, then the column names and ``rows``."""
    text = io.StringIO()
    for line in header:
        text.write(f"# {line}\n")
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.getvalue())


def header_lines(path: Path) -> list[str]:
    """The ``#`` lines of a bench CSV (without the ``# ``)."""
    return [line[2:] for line in path.read_text().splitlines() if line.startswith("# ")]


def read_csv(path: Path, *, gpu_only: bool = False) -> list[dict]:
    """The rows of a bench CSV (``#`` lines skipped); with ``gpu_only`` the
    ``cpu-validation`` rows are dropped (they are never GPU figures)."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    rows = list(csv.DictReader(lines))
    return [row for row in rows if row["device"] != CPU_DEVICE] if gpu_only else rows


def medians(rows: list[dict]) -> dict[tuple[str, str, str], dict]:
    """``(point, op, mode) -> {us, cov, bytes, gate, attempts, runs}`` over the CSV rows."""
    grouped: dict[tuple[str, str, str], list[dict]] = {}
    for row in rows:
        grouped.setdefault((row["point"], row["op"], row["mode"]), []).append(row)
    return {key: {"us": statistics.median(float(r["us"]) for r in group),
                  "cov": float(group[0]["cov"]), "bytes": int(group[0]["bytes"]),
                  "gate": group[0]["gate"], "attempts": int(group[0]["attempts"]),
                  "runs": len(group)}
            for key, group in grouped.items()}


def op_sections(figures: dict, csv_path: Path) -> list[str]:
    """The summaries' tail: every op's median, CoV, runs and bytes, then the checks against
    the goldens from the CSV's header."""
    lines = ["", "## Every op", "", "| point | op | mode | µs | CoV | runs | bytes |",
             "|---|---|---|---:|---:|---:|---:|"]
    for (point, op, mode), fig in sorted(figures.items()):
        lines.append(f"| {point} | {op} | {mode} | {fig['us']:.2f} | {fig['cov']:.3f} | "
                     f"{fig['runs']} | {fig['bytes']:,} |")
    lines += ["", "## Checks against the goldens (from the CSV's header)", ""]
    lines += [f"- {line[len('check '):]}" for line in header_lines(csv_path)
              if line.startswith("check ")]
    return lines
