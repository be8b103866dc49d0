"""``python -m sim NAME [--seed N] [--waves] [--case FILE]`` (what ``make sim`` runs).

Runs one simulation target (or ``--all``) under Verilator against its golden model and prints
a summary: vectors checked, cycles, first-output latency, initiation interval.
"""

import argparse
import sys
import time
from pathlib import Path

from .harness import BUILD_ROOT, SimulationError
from .targets import UnknownTargetError, discover_targets, run_target


def _listing() -> str:
    targets = discover_targets()
    width = max(map(len, targets))
    return "\n".join(f"  {name:<{width}}  {t.description}" for name, t in sorted(targets.items()))


def _summary_line(name: str, summary: dict, seconds: float) -> str:
    parts = [f"{summary.get('vectors', 0):,} vectors checked"]
    if "cycles" in summary:
        parts.append(f"{summary['cycles']:,} cycles")
    if "latency_cycles" in summary:
        parts.append(f"latency {summary['latency_cycles']} cycles")
    if "initiation_interval" in summary:
        parts.append(f"II {summary['initiation_interval']:.2f} cycles/item")
    for key, value in summary.get("extra", {}).items():
        parts.append(f"{key} {value}")
    return f"{name}: PASS — " + ", ".join(parts) + f" ({seconds:.1f} s)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="make sim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel", nargs="?", help="simulation target (see --list)")
    parser.add_argument("--all", action="store_true", help="run every target")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    parser.add_argument("--seed", type=int, help="seed of the random vectors")
    parser.add_argument("--waves", action="store_true", help="dump an FST trace")
    parser.add_argument("--case", type=Path, help="case file to replay through RTL and golden")
    args = parser.parse_args(argv)

    if args.list:
        print(_listing())
        return 0
    if args.all == bool(args.kernel):
        print("error: name one simulation target (KERNEL=<name>) or --all; targets:\n"
              + _listing(), file=sys.stderr)
        return 2
    names = sorted(discover_targets()) if args.all else [args.kernel]
    results = []
    for name in names:
        start = time.monotonic()
        try:
            log_file = None if not args.all else BUILD_ROOT / f"{name}.log"
            summary = run_target(name, seed=args.seed, waves=args.waves, case=args.case,
                                 log_file=log_file)
        except UnknownTargetError as error:
            print(f"error: {error}\nknown targets:\n{_listing()}", file=sys.stderr)
            return 2
        except (SimulationError, ValueError, FileNotFoundError) as error:
            # Case files are parsed before anything is built: a malformed one fails here with
            # its file, line and field.
            print(f"{name}: FAIL — {error}", file=sys.stderr)
            return 1
        except KeyError as error:  # a field the case file lacks
            print(f"{name}: FAIL — {error.args[0]}", file=sys.stderr)
            return 1
        results.append(_summary_line(name, summary, time.monotonic() - start))
        if "waves" in summary:
            results.append(f"  waves: {summary['waves']}")
        print(results[-1], flush=True)
    if len(results) > 1:
        print("\nsummary\n" + "\n".join(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
