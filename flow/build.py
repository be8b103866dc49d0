"""Board build flow: ``python -m hw.build --board alveo[-v80|-u55c] [--kernel NAME|all] ...``

For every kernel (a module ``hw/kernels/<name>.py`` defining ``synthesis_configuration``; new
ones are picked up without edits here) and the board's parameter set it:

1. elaborates the kernel and writes ``<out>/<kernel>/<kernel>.v``;
2. writes an out-of-context Vivado build (``vivado/<kernel>.tcl``, ``.xdc``, ``build.sh``:
   synth, opt, place, route, utilisation and timing reports) and, when the component has a
   ``vitis_interface`` (a Vitis RTL kernel: ``dataflow``), its packaging in ``vitis/``
   (``kernel.xml``, ``package_xo.tcl``, ``link_<board>.cfg``, ``build.sh``; docs/vitis.md);
3. runs Vivado when it is on PATH and ``--synth vivado`` (the default), and says that it is
   skipping it otherwise;
4. with ``--synth yosys``: Yosys ``synth_xilinx`` resource estimates;
5. runs the kernel's simulation target (``sim/<kernel>/``, the target named like the kernel)
   for the first-output latency and the initiation interval (``--sim auto``, the default: only
   when its Verilator model is already built, so that a fresh clone finishes in minutes;
   ``--sim run``: always; ``--sim none``: never);
6. writes ``<out>/<kernel>/report.json`` (schema: ``boards/schemas/kernel_report.schema.json``).

Progress is numbered on the console and logged to ``<out>/build.log``. Exit status: 0 on
success (also when Vivado is missing or there is no kernel), 1 when a step fails (the message
names the step, the kernel and, for a rejected parameter, the parameter), 2 for argument
errors.
"""

import argparse
import ast
import json
import math
import os
import re
import sys
import time
from pathlib import Path

from boards import RESOURCES, Board, board, board_names, load_schema
from boards import vivado as vivado_scripts

from .common import (
    REPO_ROOT,
    Console,
    FlowError,
    configure_kernel,
    find_sim_target,
    kernel_module_names,
    load_kernel,
    tool_versions,
)

__all__ = ["main", "build_parser", "parse_param", "REPORT_SCHEMA_ID", "SYNTH_MODES",
           "SIM_MODES"]

REPORT_SCHEMA_ID = "eagle-tree-hw/kernel-report/1"
SYNTH_MODES = ("vivado", "yosys", "none")
SIM_MODES = ("auto", "run", "none")
_PARAM = re.compile(r"^([a-z_][a-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def parse_param(text: str) -> tuple[str, str, object]:
    """``KERNEL.NAME=VALUE`` -> ``(kernel, name, value)``; the value is a Python literal
    (``8``, ``1.5``, ``True``, ``"fp16"``) or else taken as a string."""
    match = _PARAM.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not KERNEL.NAME=VALUE (e.g. score.node_top_k=8)")
    kernel, name, raw = match.groups()
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw
    return kernel, name, value


def _clock(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or not 0 < value <= 1000:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1000 MHz, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hw.build", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--board", required=True, choices=board_names(),
                        help="target card (alveo = alveo-v80)")
    parser.add_argument("--kernel", action="append", metavar="NAME|all",
                        help="kernel to build (repeatable; default: all)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="output directory (default: build/<board>)")
    parser.add_argument("--synth", choices=SYNTH_MODES, default="vivado",
                        help="vivado: run Vivado if it is on PATH (default); yosys: Yosys "
                             "synth_xilinx resource estimates; none: scripts only")
    parser.add_argument("--clock-mhz", type=_clock, metavar="F",
                        help="target kernel clock (default: the board's, 300 MHz)")
    parser.add_argument("--param", action="append", type=parse_param, default=[],
                        metavar="KERNEL.NAME=VALUE",
                        help="override a synthesis_configuration parameter (repeatable)")
    parser.add_argument("--sim", choices=SIM_MODES, default="auto",
                        help="latency and II from the kernel's simulation target: auto (the "
                             "default) runs it when its Verilator model is already built (by "
                             "make sim / make test), run builds the model if needed (a cold "
                             "build of a big kernel takes many minutes), none skips it")
    return parser


def _usage_error(parser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return 2


def _select_kernels(parser, requested: list[str] | None):
    """``(kernels, skipped helper modules)`` or an exit status (int) on errors."""
    requested = requested or ["all"]
    modules = kernel_module_names()
    if "all" in requested:
        if len(requested) > 1:
            return _usage_error(parser, "--kernel all cannot be combined with kernel names")
        kernels, helpers = [], []
        for name in modules:
            kernel = load_kernel(name)  # import errors: FlowError
            (helpers.append(name) if kernel is None else kernels.append(kernel))
        return kernels, helpers
    kernels = []
    for name in dict.fromkeys(requested):
        kernel = load_kernel(name) if name in modules else None
        if kernel is None:
            known = []
            for module in modules:
                try:
                    if load_kernel(module) is not None:
                        known.append(module)
                except FlowError:
                    pass
            why = ("defines no synthesis_configuration()" if name in modules
                   else "has no module in hw/kernels/")
            return _usage_error(parser, f"unknown kernel `{name}` ({name} {why}); known "
                                f"kernels: {', '.join(known) or 'none yet'}")
        kernels.append(kernel)
    return kernels, []


def _relative(path: Path | None, start: Path) -> str | None:
    if path is None:
        return None
    return Path(os.path.relpath(path, start)).as_posix()


def _usage(target: Board, used: dict) -> dict:
    usage = {}
    for resource in RESOURCES:
        value = used.get(resource)
        usage[resource] = None if value is None else {
            "used": value,
            "available": target.capacities[resource],
            "percent": round(target.share(resource, value), 4),
        }
    return usage


def _validate(report: dict) -> None:
    try:
        import jsonschema
    except ImportError:  # the `report` extra is not installed: nothing to check against
        return
    jsonschema.validate(report, load_schema("kernel_report"),
                        cls=jsonschema.Draft202012Validator)


def _figures(kernel: str, kdir: Path, console: Console, mode: str) -> dict:
    """Latency and II from the kernel's simulation target (null with a reason if none, or,
    in mode ``auto``, if its Verilator model is not built yet)."""
    sim_target, reason = find_sim_target(kernel)
    latency = {"first_output_latency_cycles": None, "initiation_interval_cycles": None,
               "source": None, "reason": reason}
    if sim_target is None:
        console.say(f"  {reason}: latency and II reported as null")
        return latency
    from sim.targets import DEFAULT_SEED

    config = {**sim_target.config, **sim_target.figures_config}
    log_file = kdir / "simulation.log"
    if mode == "auto" and not sim_target.model_built():
        latency["reason"] = (f"the Verilator model of sim target `{sim_target.name}` is not "
                             f"built yet: run `make sim KERNEL={sim_target.name}` (or "
                             "hw.build --sim run) first")
        console.say(f"  {latency['reason']}; latency and II reported as null")
        return latency
    summary = sim_target.run(overrides=sim_target.figures_config, seed=DEFAULT_SEED,
                             tests=sim_target.figures_tests, log_file=log_file,
                             log=console.say)
    first = summary.get("latency_cycles")
    if isinstance(first, float) and first.is_integer():
        first = int(first)
    interval = summary.get("initiation_interval")
    if isinstance(interval, float) and not math.isfinite(interval):
        interval = None
    latency.update({
        "first_output_latency_cycles": first,
        "initiation_interval_cycles": interval,
        "source": (f"simulation: sim target `{sim_target.name}` ({sim_target.testbench}, "
                   f"tests {', '.join(sim_target.figures_tests)}) under Verilator, the "
                   "target's default parameters, config overrides "
                   f"{sim_target.figures_config or '{}'}, seed {DEFAULT_SEED}; run without idle "
                   "or back-pressure"),
        "reason": None,
        "vectors": summary.get("vectors"),
        "cycles": summary.get("cycles"),
        "seed": DEFAULT_SEED,
        "config": config,
    })
    if first is None:
        latency["source"] = None
        latency["reason"] = (f"the testbench of `{sim_target.name}` wrote no latency_cycles "
                             "into its summary")
    elif interval is None:
        latency["reason"] = "the testbench reported no finite initiation interval"
    console.say(f"  latency {first} cycles, II {interval} cycles/item (log: {log_file})")
    return latency


def _build_kernel(kernel, *, target: Board, clock_mhz: float, synth: str, out: Path,
                  overrides: dict, origins: dict, vivado: str | None, sim: str,
                  console: Console, log_path: Path) -> Path:
    kdir = out / kernel.name
    kdir.mkdir(parents=True, exist_ok=True)
    elapsed = {}
    period = 1000.0 / clock_mhz

    # 1. Elaborate.
    shown = ", ".join(f"{k}={v!r}" for k, v in overrides.items()) or "defaults"
    console.step(f"elaborating {kernel.name} ({shown}) -> Verilog")
    start = time.monotonic()
    component = configure_kernel(kernel, overrides, origins)
    from amaranth.back import verilog

    try:
        text = verilog.convert(component, name=kernel.name, emit_src=False)
    except (ValueError, TypeError) as error:
        raise FlowError(f"kernel `{kernel.name}` failed to elaborate: {error}") from error
    verilog_file = kdir / f"{kernel.name}.v"
    verilog_file.write_text(text)
    elapsed["elaborate"] = round(time.monotonic() - start, 2)
    console.say(f"  {verilog_file} ({len(text.splitlines()):,} lines, "
                f"{elapsed['elaborate']} s)")

    # 2. Vivado scripts (and, for a Vitis RTL kernel, its packaging).
    interface = getattr(component, "vitis_interface", None)
    console.step(f"writing Vivado scripts for {kernel.name}")
    scripts = vivado_scripts.write_ooc_scripts(
        kdir / "vivado", top=kernel.name, part=target.part, verilog_file=verilog_file,
        clock_mhz=clock_mhz, board=target.name,
        clock=interface.clock if interface is not None else "clk")
    console.say(f"  {scripts.tcl}, {scripts.xdc.name}, {scripts.build_sh.name} "
                f"(out of context, {target.part}, {clock_mhz:g} MHz)")
    vitis_files = {}
    if interface is not None:
        vitis_files = _write_vitis(kernel.name, interface, kdir, verilog_file, target, console)

    # 3. Vivado.
    clock = {"target_mhz": clock_mhz, "target_period_ns": round(period, 4),
             "estimated_mhz": None, "wns_ns": None, "source": None, "reason": None}
    resources = {"source": None, "reason": None}
    used = {}
    if vivado is None:
        console.step(f"Vivado for {kernel.name}")
        message = f"Vivado not found on PATH: skipping; run {scripts.build_sh} where it is"
        status = "not found"
        clock["reason"] = ("no timing: Vivado was not found (Yosys has no timing model for "
                           "UltraScale+ or Versal)")
    elif synth != "vivado":
        console.step(f"Vivado for {kernel.name}")
        message = f"Vivado found ({vivado}) but not run (--synth {synth}); run {scripts.build_sh}"
        status = "not run"
        clock["reason"] = f"no timing: Vivado not run (--synth {synth})"
    else:
        console.step(f"running Vivado on {kernel.name} (synth, place, route; log: "
                     f"{scripts.log})")
        start = time.monotonic()
        vivado_scripts.run_vivado(scripts, vivado)
        results = vivado_scripts.read_results(scripts)
        elapsed["vivado"] = round(time.monotonic() - start, 2)
        used = results["resources"]
        resources["source"] = f"Vivado report_utilization after route_design ({target.part})"
        missing = [r for r in RESOURCES if r not in used]
        if missing:
            resources["reason"] = (f"{', '.join(missing)} not found in "
                                   f"{scripts.reports / 'utilization.rpt'}")
        wns = results["wns_ns"]
        clock["wns_ns"] = wns
        if wns is not None and period - wns > 0:
            clock["estimated_mhz"] = round(1000.0 / (period - wns), 2)
            clock["source"] = ("Vivado report_timing_summary after route_design: "
                               "1000 / (target period - WNS)")
        else:
            clock["reason"] = "Vivado reported no setup path (no clocked logic?)"
        status = "ran"
        message = f"Vivado ran ({vivado}); reports in {scripts.reports}"
    console.say(f"  {message}")

    # 4. Yosys.
    yosys_files = {}
    if synth == "yosys":
        console.step(f"synthesising {kernel.name} with Yosys synth_xilinx -family "
                     f"{target.yosys_family}")
        from .synth import synthesize

        start = time.monotonic()
        try:
            report = synthesize(component, name=kernel.name, family=target.yosys_family,
                                report_dir=kdir / "yosys", log=console.detail,
                                verilog_text=text, work_dir=kdir / "yosys" / "work")
        except FileNotFoundError as error:
            raise FlowError(str(error)) from error
        elapsed["yosys"] = round(time.monotonic() - start, 2)
        used = {r: report["resources"][r] for r in RESOURCES}
        proxy = (" (no Versal family in Yosys: UltraScale+ primitives as the proxy)"
                 if "versal" in target.family.lower() else "")
        resources["source"] = (f"Yosys synth_xilinx -family {target.yosys_family}{proxy}: "
                               "upper-bound estimate (no LUT6_2 packing)")
        resources["extra"] = {key: value for key, value in report["resources"].items()
                              if key not in RESOURCES}
        yosys_files = {"yosys_report": kdir / "yosys" / f"{kernel.name}.json",
                       "yosys_log": kdir / "yosys" / "work" / "yosys.log"}
        console.say("  " + ", ".join(f"{r} {used[r]:g}" for r in RESOURCES)
                    + f" ({elapsed['yosys']} s)")
    if resources["source"] is None:
        resources["reason"] = {
            "none": "no synthesis run (--synth none)",
            "vivado": "Vivado not found: no resource figures (use --synth yosys for "
                      "estimates)",
            "yosys": "no synthesis run",
        }[synth] if status != "ran" else resources["reason"]
    resources.update(_usage(target, used))

    # 5. Simulation figures.
    if sim != "none":
        console.step(f"simulating {kernel.name} for latency and initiation interval")
        start = time.monotonic()
        latency = _figures(kernel.name, kdir, console, sim)
        elapsed["simulation"] = round(time.monotonic() - start, 2)
    else:
        latency = {"first_output_latency_cycles": None, "initiation_interval_cycles": None,
                   "source": None, "reason": "simulation skipped (--sim none)"}

    # 6. Report.
    console.step(f"writing report for {kernel.name}")
    report_path = kdir / "report.json"
    simulation_log = kdir / "simulation.log"
    report = {
        "schema": REPORT_SCHEMA_ID,
        "kernel": kernel.name,
        "top": kernel.name,
        "module": kernel.module,
        "board": {
            "name": target.name,
            "part": target.part,
            "family": target.family,
            "hbm_bandwidth_gbps": target.hbm_bandwidth_gbps,
            "capacities": dict(target.capacities),
            "capacities_confirmed": target.capacities_confirmed,
            "source": target.source,
        },
        "parameters": {key: (value if isinstance(value, (int, float, str, bool)) else
                             repr(value)) for key, value in overrides.items()},
        "clock": clock,
        "latency": latency,
        "resources": resources,
        "vivado": {"status": status, "executable": vivado, "message": message},
        "files": {key: _relative(path, kdir) for key, path in {
            "verilog": verilog_file,
            "vivado_tcl": scripts.tcl,
            "vivado_xdc": scripts.xdc,
            "vivado_build_script": scripts.build_sh,
            "vivado_reports": scripts.reports if status == "ran" else None,
            "simulation_log": (simulation_log if simulation_log.exists() and sim != "none"
                               else None),
            **yosys_files,
            **vitis_files,
            "log": log_path,
        }.items()},
        "tools": tool_versions(),
        "elapsed_s": elapsed,
    }
    _validate(report)
    report_path.write_text(json.dumps(report, indent=1) + "\n")
    console.say(f"  {report_path}")
    return report_path


def _write_vitis(name: str, interface, kdir: Path, verilog_file: Path, target: Board,
                 console: Console) -> dict:
    """The Vitis RTL-kernel packaging of a kernel whose component has a ``vitis_interface``
    (``hw.lib.kernel_interface.KernelInterface``) into ``<kernel>/vitis/``; its files for the
    report."""
    from boards.vitis import write_vitis_package

    if interface.top != name:
        raise FlowError(f"kernel `{name}`: its vitis_interface names the top module "
                        f"`{interface.top}`, but the Verilog top is `{name}`")
    files = write_vitis_package(kdir / "vitis", interface, verilog_file=verilog_file,
                                boards=[target])
    console.say(f"  Vitis RTL kernel: {files.kernel_xml}, {files.package_tcl.name}, "
                f"{files.link_configs[target.name].name}, {files.build_sh.name}")
    return {"vitis_kernel_xml": files.kernel_xml, "vitis_package_tcl": files.package_tcl,
            "vitis_link_config": files.link_configs[target.name],
            "vitis_build_script": files.build_sh}


def _write_build_all(out: Path, kernels, target: Board) -> Path:
    path = out / "build_all.sh"
    lines = ["#!/bin/sh",
             f"# Out-of-context Vivado builds of every kernel for {target.name} "
             f"({target.part}); needs `vivado` on PATH.",
             "set -e", 'cd "$(dirname "$0")"']
    lines += [f"./{kernel.name}/vivado/build.sh" for kernel in kernels]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    target = board(args.board)
    clock_mhz = args.clock_mhz or target.clock_mhz
    out = args.out if args.out is not None else REPO_ROOT / "build" / target.name

    try:
        selection = _select_kernels(parser, args.kernel)
    except FlowError as error:
        print(f"error: discovering kernels failed: {error}", file=sys.stderr)
        return 1
    if isinstance(selection, int):
        return selection
    kernels, helpers = selection

    overrides = {k.name: dict(target.kernel_parameters.get(k.name, {})) for k in kernels}
    origins = {k.name: {name: f"board {target.name}" for name in overrides[k.name]}
               for k in kernels}
    for kernel_name, name, value in args.param:
        if kernel_name not in overrides:
            return _usage_error(parser, f"--param {kernel_name}.{name}: kernel "
                                f"`{kernel_name}` is not being built (building: "
                                f"{', '.join(overrides) or 'nothing'})")
        overrides[kernel_name][name] = value
        origins[kernel_name][name] = f"--param {kernel_name}.{name}"

    vivado = vivado_scripts.find_vivado()
    steps_per_kernel = 4 + (args.synth == "yosys") + (args.sim != "none")
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "build.log"
    console = Console(log_path, total_steps=steps_per_kernel * len(kernels))
    started = time.monotonic()
    try:
        console.say(f"hw.build: board {target.name} ({target.part}), clock {clock_mhz:g} MHz, "
                    f"--synth {args.synth}, output {out}")
        console.say(f"log: {log_path}")
        for helper in helpers:
            console.detail(f"hw/kernels/{helper}.py defines no synthesis_configuration(): "
                           "a helper module, not built")
        if not kernels:
            console.say("no kernels found: no module of hw/kernels/ defines "
                        "synthesis_configuration(); nothing to build")
            return 0
        console.say(f"kernels: {', '.join(k.name for k in kernels)}")
        reports = []
        for kernel in kernels:
            try:
                reports.append(_build_kernel(
                    kernel, target=target, clock_mhz=clock_mhz, synth=args.synth, out=out,
                    overrides=overrides[kernel.name], origins=origins[kernel.name],
                    vivado=vivado, sim=args.sim, console=console,
                    log_path=log_path))
            except Exception as error:  # every failure names its step
                console.exception()
                reason = str(error) or type(error).__name__
                if not isinstance(error, FlowError) and kernel.name not in reason:
                    reason = f"kernel `{kernel.name}`: {type(error).__name__}: {reason}"
                console.error(f"error: step {console.current_step} failed: {reason}")
                console.error(f"see {log_path}")
                return 1
        build_all = _write_build_all(out, kernels, target)
        if vivado is None:
            console.say(f"Vivado not found: scripts written to {out} (one vivado/build.sh per "
                        f"kernel; all of them: {build_all})")
        console.say(f"done: {len(reports)} report(s) in {time.monotonic() - started:.1f} s: "
                    + ", ".join(str(p) for p in reports))
        return 0
    finally:
        console.close()


if __name__ == "__main__":
    sys.exit(main())
