"""``python -m bench.gpu verify|draft|summary``: the GPU baseline's commands.

* ``verify`` / ``draft``: check every op against the goldens and time it at the points
  (``--points`` ids or prefixes; default all of ``bench.gpu.points.gpu_points``), writing
  ``reports/h100_{verify,draft}_raw.csv`` and ``_summary.md``. On a GPU the timer uses CUDA
  events. Without one, ``--cpu`` runs the small CPU validation points under
  ``TRITON_INTERPRET=1`` and writes to ``build/bench-gpu/`` (never to ``reports/``), every row
  marked ``cpu-validation``.
* ``summary``: ``reports/fpga_vs_h100_summary.md`` from whatever GPU CSVs exist and the cycle
  budget (``bench.gpu.summary``); it needs neither torch nor a GPU.
* ``compile``: every Triton kernel compiled for an H100 (sm_90) without a GPU
  (``bench.gpu.compile_check``).

Exit status: 0, or 1 when a check against the goldens failed (the files are still written).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from flow.common import REPO_ROOT

REPORTS = REPO_ROOT / "reports"
CPU_OUT = REPO_ROOT / "build" / "bench-gpu"


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module)."""
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("verify", "draft"):
        side = sub.add_parser(name, help=f"the {name} side: check and time every op")
        side.add_argument("--points", nargs="*", default=[],
                          help="point ids or prefixes (e.g. serving-b8); default all")
        side.add_argument("--cpu", action="store_true",
                          help="CPU validation (TRITON_INTERPRET=1, small points, build/)")
        side.add_argument("--runs", type=int, default=5, help="runs per op (>= 5)")
        side.add_argument("--workers", type=int, default=None,
                          help="processes preparing the points' host-side inputs ahead "
                               "(default 6 on a GPU, 0 with --cpu)")
        side.add_argument("--out", type=Path, default=None,
                          help="output folder (default reports/, or build/bench-gpu with "
                               "--cpu)")
    sub.add_parser("compile", help="compile every kernel for sm_90 (no GPU needed)")
    summary = sub.add_parser("summary", help="reports/fpga_vs_h100_summary.md")
    summary.add_argument("--out", type=Path, default=REPORTS / "fpga_vs_h100_summary.md")
    summary.add_argument("--reports", type=Path, default=REPORTS,
                         help="where the GPU CSVs and the cycle budget are")
    return parser


def _side(args) -> int:
    if args.cpu and os.environ.get("TRITON_INTERPRET") != "1":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch

    from .points import contract_seed, cpu_validation_points, gpu_points, select_points
    from .timing import Timer

    if not args.cpu and not torch.cuda.is_available():
        print("no GPU here: run with --cpu for the CPU validation (its figures are not GPU "
              "figures), or bash bench/gpu/run_on_device.sh on an H100", file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.cpu else "cuda")
    points = select_points(cpu_validation_points() if args.cpu else gpu_points(), args.points)
    # smallest batches first: a run stopped at its time limit loses the largest points only
    points.sort(key=lambda point: (point["batch"], point["vocab"]))
    out = args.out or (CPU_OUT if args.cpu else REPORTS)
    prefix = "h100" if not args.cpu else "cpu_validation"
    timer = Timer(device, runs=args.runs, warmup=1 if args.cpu else 3,
                  run_target_us=20000.0 if args.cpu else 2000.0)
    command = "python -m bench.gpu " + " ".join(sys.argv[1:])
    if args.command == "verify":
        from .verify import run_verify as run
    else:
        from .draft import run_draft as run
    workers = args.workers if args.workers is not None else (0 if args.cpu else 6)
    passed = run(points, timer, contract_seed(), out / f"{prefix}_{args.command}_raw.csv",
                 out / f"{prefix}_{args.command}_summary.md", command, workers=workers)
    print(f"wrote {out / f'{prefix}_{args.command}_raw.csv'} and the summary; checks "
          f"{'passed' if passed else 'FAILED'}")
    return 0 if passed else 1


def main(argv=None) -> int:
    """Run the command; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "summary":
        from .summary import write_summary

        path = write_summary(args.reports, args.out)
        print(f"wrote {path}")
        return 0
    if args.command == "compile":
        from .compile_check import main as compile_main

        return compile_main()
    return _side(args)


if __name__ == "__main__":
    sys.exit(main())
