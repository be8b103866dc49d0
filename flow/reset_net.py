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

__all__ = ["flip_flops", "reset_net"]

_FLOPS = ("$dff", "$sdff", "$adff")


def _reaches(module: dict, target) -> callable:
    """A test of whether a net bit's combinational fan-in (back to flip-flops, memories and
    ports) reaches the bit ``target``."""
    driver = {bit: name for name, cell in module["cells"].items()
              for pin, direction in cell.get("port_directions", {}).items()
              if direction == "output" for bit in cell["connections"][pin]}
    unreached = set()  # bits known not to reach it

    def reaches(bit) -> bool:
        pending, seen = [bit], set()
        while pending:
            bit = pending.pop()
            if bit == target:
                return True
            if bit in seen or bit in unreached or bit not in driver:
                continue
            seen.add(bit)
            cell = module["cells"][driver[bit]]
            if not cell["type"].startswith((*_FLOPS, "$mem")):
                pending += [b for pin, direction in cell["port_directions"].items()
                            if direction == "input" for b in cell["connections"][pin]]
        unreached.update(seen)
        return False
    return reaches


def flip_flops(component, work: Path) -> list[tuple[str, str, int, bool]]:
    """``(register name, Yosys cell type, bits, on the reset net)`` of every flip-flop cell of
    ``component`` (top module ``top``, ports ``clk``/``rst``) after Yosys ``proc; flatten;
    opt_dff -nodffe`` (Yosys runs in ``work``). ``$sdff`` is a synchronous reset (the net's
    or a reset-like condition of the logic), ``$dff`` none; on the net: a ``$sdff`` whose reset
    input is reached from ``rst``."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "top.il").write_text(rtlil.convert(component, name="top", emit_src=False))
    subprocess.run([_yosys(), "-q", "-p", "read_rtlil top.il; hierarchy -top top; proc; flatten; "
                    "opt_clean; opt_dff -nodffe; opt_clean; write_json cells.json"],
                   cwd=work, check=True, capture_output=True, text=True)
    module = json.loads((work / "cells.json").read_text())["modules"]["top"]
    names = {}
    for name, net in module["netnames"].items():
        for bit in net["bits"]:
            names.setdefault(bit, name)
    reaches = _reaches(module, module["ports"]["rst"]["bits"][0])
    return [(names[cell["connections"]["Q"][0]], cell["type"], len(cell["connections"]["Q"]),
             cell["type"].startswith("$sdff") and reaches(cell["connections"]["SRST"][0]))
            for cell in module["cells"].values() if cell["type"].startswith(_FLOPS)]


def reset_net(component, work: Path) -> tuple[dict, Counter]:
    """``({"flip_flops", "sdff", "reset_net"}, bits on the net per register)`` of
    ``component`` (see :func:`flip_flops`)."""
    counts, registers = Counter(flip_flops=0, sdff=0, reset_net=0), Counter()
    for name, kind, bits, on_net in flip_flops(component, work):
        counts["flip_flops"] += bits
        counts["sdff"] += bits if kind.startswith("$sdff") else 0
        if on_net:
            counts["reset_net"] += bits
            registers[name] += bits
    return dict(counts), registers


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flow.reset_net", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--v80", action="store_true",
                        help="the V80 set of `python -m hw.synth --v80 dataflow` (slow)")
    parser.add_argument("--top", type=int, default=20, help="registers to list")
    args = parser.parse_args(argv)
    if args.top < 0:
        parser.error(f"--top must be 0 or more, not {args.top}")
    from hw.dataflow.engine import PersistentEngine  # the flow layer imports hw lazily
    if args.v80:
        from hw.kernels.dataflow import V80_PARAMETERS
        parameters, label = V80_PARAMETERS, "v80"
    else:
        parameters, label = SMALL_ENGINE, "small"
    counts, registers = reset_net(PersistentEngine(**parameters),
                                  REPO_ROOT / "build" / "reset_net" / label)
    print(json.dumps({"build": label, **counts}))
    for name, bits in registers.most_common(args.top):
        print(f"{bits:6} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
