"""``python -m flow.reset_net [--v80]``: the flip-flops the engine's reset net reaches (issue 35,
item 2; docs/timing.md, "The reset net").

Converts ``PersistentEngine`` (the small build of ``make sim KERNEL=dataflow`` and
``tests/test_dataflow_engine.py``, or the V80 set of ``python -m hw.synth --v80 dataflow``) to
RTLIL, runs Yosys ``proc; flatten; opt_dff`` and counts flip-flop bits: all of them, those
with a synchronous reset (``$sdff``: the reset net or a reset-like condition of the logic,
such as a register cleared by a start strobe), and those whose reset input is reached from the
``rst`` port: the reset net. Prints a JSON line and the registers with the most bits on it.
"""

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from amaranth.back import rtlil

from sim.dataflow import PARAMETERS as SMALL_ENGINE  # tests/test_dataflow_engine.py's SMALL

from .common import REPO_ROOT
from .synth import _yosys

__all__ = ["reset_net"]

_FLOPS = ("$dff", "$sdff", "$adff")


def _on_reset_net(module: dict, rst_bit) -> callable:
    """A test of whether a net bit's combinational fan-in reaches ``rst_bit``."""
    driver = {}
    for name, cell in module["cells"].items():
        for pin, direction in cell.get("port_directions", {}).items():
            if direction == "output":
                for bit in cell["connections"][pin]:
                    driver[bit] = name
    memo = {}

    def reaches(bit) -> bool:
        pending, seen = [bit], set()
        while pending:
            bit = pending.pop()
            if bit == rst_bit:
                return True
            if bit in seen or bit in memo or not isinstance(bit, int) or bit not in driver:
                if memo.get(bit):
                    return True
                continue
            seen.add(bit)
            cell = module["cells"][driver[bit]]
            if cell["type"].startswith((*_FLOPS, "$mem")):
                continue
            pending += [b for pin, direction in cell["port_directions"].items()
                        if direction == "input" for b in cell["connections"][pin]]
        memo.update(dict.fromkeys(seen, False))
        return False
    return reaches


def reset_net(parameters: dict, work: Path) -> tuple[dict, Counter]:
    """``({"flip_flops", "sdff", "reset_net"}, bits on the net per register)`` of the engine
    built with ``parameters`` (Yosys runs in ``work``)."""
    from hw.dataflow.engine import PersistentEngine  # the flow layer imports hw lazily
    work.mkdir(parents=True, exist_ok=True)
    (work / "top.il").write_text(rtlil.convert(PersistentEngine(**parameters), name="top",
                                               emit_src=False))
    subprocess.run([_yosys(), "-q", "-p", "read_rtlil top.il; hierarchy -top top; proc; flatten; "
                    "opt_clean; opt_dff -nodffe; opt_clean; write_json cells.json"],
                   cwd=work, check=True)
    module = json.loads((work / "cells.json").read_text())["modules"]["top"]
    names = {}
    for name, net in module["netnames"].items():
        for bit in net["bits"]:
            names.setdefault(bit, name)
    reaches = _on_reset_net(module, module["ports"]["rst"]["bits"][0])
    counts, registers = Counter(), Counter()
    for cell in module["cells"].values():
        if not cell["type"].startswith(_FLOPS):
            continue
        width = len(cell["connections"]["Q"])
        counts["flip_flops"] += width
        if cell["type"].startswith("$sdff"):
            counts["sdff"] += width
            if reaches(cell["connections"]["SRST"][0]):
                counts["reset_net"] += width
                registers[names[cell["connections"]["Q"][0]]] += width
    return dict(counts), registers


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flow.reset_net", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--v80", action="store_true",
                        help="the V80 set of `python -m hw.synth --v80 dataflow` (slow)")
    parser.add_argument("--top", type=int, default=20, help="registers to list")
    args = parser.parse_args(argv)
    if args.v80:
        from hw.kernels.dataflow import V80_PARAMETERS
        parameters, label = V80_PARAMETERS, "v80"
    else:
        parameters, label = SMALL_ENGINE, "small"
    counts, registers = reset_net(parameters, REPO_ROOT / "build" / "reset_net" / label)
    print(json.dumps({"build": label, **counts}))
    for name, bits in registers.most_common(args.top):
        print(f"{bits:6} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
