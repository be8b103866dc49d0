"""``make report`` (``python -m hw.report``): the generated reports, from measurements only.

* ``reports/benchmark_contract.md``: the operating points of ``benchmarks/contract.toml``
  (validated against ``boards/schemas/benchmark_contract.schema.json``).
* ``reports/env_manifest.txt``: tool versions and the git revision (no timestamps).
* ``reports/cycle_budget.{json,md,png}``: for every kernel of the contract and every point, the
  cycles, bytes in/out and operations measured by the kernel's ``measure`` (an optional field of
  its ``sim.targets.SimTarget``: docs/contributing.md), microseconds at the contract clock and
  the HBM time of the bytes at the board's peak bandwidth. Kernels without a measurement are
  listed with the reason. Every measurement runs with the contract's seed, so a second run
  gives the same numbers (and the same files). Each row carries the kernel's verdict against
  the 300 MHz logic-depth rule (docs/timing.md), read from ``reports/synth/<kernel>.json``
  (``python -m hw.synth`` writes it; ``make report`` never runs Yosys); the µs figure of a
  kernel that breaks the rule is marked.
* ``reports/fusion_design.md`` (once the dataflow engine is measured): what moves through memory
  per round, the engine's ports and commands against the unfused kernels, and the round against
  batch size next to its memory-bound floor (plotted in ``reports/fusion_batches.png``;
  ``flow.fusion``).

Progress is numbered on the console and logged to ``build/report/report.log``; the
simulator output of each measurement goes to ``build/report/<kernel>-<point>.log``.
"""

import argparse
import hashlib
import itertools
import json
import platform
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from boards import BOARDS, RESOURCES, Board, board, board_names, load_schema

from .common import REPO_ROOT, Console, FlowError, find_sim_target, git_revision, tool_versions
from .fusion import BATCH_PLOT, plot_batches, render_engine_resources, render_fusion_design
from .timing import clock_it_meets

__all__ = ["CONTRACT", "REPORT_DIR", "LOG_DIR", "SYNTH_DIR", "load_contract",
           "contract_points", "timing_rule", "proxy_clock", "measure_kernels", "budget_sheet",
           "render_contract", "render_env_manifest", "render_budget", "plot_budget", "main"]

CONTRACT = REPO_ROOT / "benchmarks" / "contract.toml"
REPORT_DIR = REPO_ROOT / "reports"
LOG_DIR = REPO_ROOT / "build" / "report"
SYNTH_DIR = REPORT_DIR / "synth"
#: The mark of a µs figure whose kernel breaks the 300 MHz logic-depth rule.
BREAKS_MARK = "✗"
BUDGET_SCHEMA_ID = "eagle-tree-hw/cycle-budget/1"
PHASES = ("draft", "verify", "fused", "round")
PHASE_TITLES = {"draft": "draft round", "verify": "verify step (unfused kernels)",
                "fused": "verify step (fused verify)",
                "round": "draft round + verify step (dataflow top)"}


def _validator(name: str):
    import jsonschema

    return jsonschema.Draft202012Validator(load_schema(name))


def _schema_errors(name: str, instance) -> list[str]:
    errors = sorted(_validator(name).iter_errors(instance), key=lambda e: list(e.path))
    return [f"{'/'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in errors]


def load_contract(path: Path = CONTRACT) -> dict:
    """The benchmark contract, validated; ``FlowError`` says what is wrong."""
    try:
        with open(path, "rb") as f:
            contract = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise FlowError(f"cannot read the benchmark contract {path}: {error}") from error
    errors = _schema_errors("benchmark_contract", contract)
    ids = [tree.get("id") for tree in contract.get("trees", [])]
    if len(set(ids)) != len(ids):
        errors.append(f"trees: duplicate id in {ids}")
    for tree in contract.get("trees", []):
        if tree.get("tree_width", 0) > tree.get("node_top_k", 0):
            errors.append(f"trees/{tree.get('id')}: tree_width exceeds node_top_k")
    partial = contract.get("partial_batches")
    if partial is not None and not errors:
        for key, known in (("batch_sizes", contract["batch_sizes"]),
                           ("kernels", list(contract["kernels"])), ("trees", ids)):
            unknown = [x for x in partial.get(key, ()) if x not in known]
            if unknown:
                errors.append(f"partial_batches/{key}: {unknown} not in the contract's {key}")
    if errors:
        raise FlowError(f"benchmark contract {path} is invalid:\n  " + "\n  ".join(errors))
    return contract


def contract_points(contract: dict) -> list[dict]:
    """Every operating point: trees x batch sizes x vocab sizes, in that order."""
    points = []
    for tree, batch, vocab in itertools.product(contract["trees"], contract["batch_sizes"],
                                                contract["vocab_sizes"]):
        points.append({
            "id": f"{tree['id']}-b{batch}-v{vocab}",
            "tree": tree["id"],
            "description": tree["description"],
            "node_top_k": tree["node_top_k"],
            "tree_width": tree["tree_width"],
            "depth": tree["depth"],
            "verify_num": tree["verify_num"],
            "batch": batch,
            "vocab": vocab,
            "hidden_size": contract["hidden_size"],
            "hidden_dtype": contract["hidden_dtype"],
            "hidden_bytes": contract["hidden_bytes"],
            "clock_mhz": float(contract["clock_mhz"]),
        })
    return points


def out_of_scope(contract: dict, kernel: str, point: dict) -> str | None:
    """Why the contract measures ``kernel`` nowhere at ``point`` (its ``partial_batches``
    table: batch sizes measured for some kernels and trees only), or None."""
    partial = contract.get("partial_batches")
    if partial is None or point["batch"] not in partial["batch_sizes"]:
        return None
    if kernel in partial["kernels"] and point["tree"] in partial.get("trees", [point["tree"]]):
        return None
    return partial["reason"]


def _table(header: list[str], rows: list[list], align: str | None = None) -> str:
    align = align or "l" * len(header)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _sort_lanes(n: int) -> str:
    return "64" if n <= 64 else "128 (§1 extension)" if n <= 128 else "unsupported"


def render_contract(contract: dict, points: list[dict], contract_path: Path) -> str:
    """``reports/benchmark_contract.md``."""
    source = _display_path(contract_path)
    hidden = contract["hidden_size"]
    text = [
        "# Benchmark contract",
        "",
        f"Generated by `make report` from `{source}`; edit that file, not this one. Every "
        "kernel's cycle budget (`reports/cycle_budget.md`) is measured at these points.",
        "",
        "## Common parameters",
        "",
        _table(["parameter", "value"], [
            ["target clock", f"{contract['clock_mhz']:g} MHz"],
            ["hidden size H", f"{hidden:,}"],
            ["hidden states", f"{contract['hidden_dtype']} ({contract['hidden_bytes']} bytes "
                              f"per element, {hidden * contract['hidden_bytes']:,} bytes per row)"],
            ["batch sizes B", ", ".join(f"{b:,}" for b in contract["batch_sizes"])],
            ["vocabulary sizes V", ", ".join(f"{v:,}" for v in contract["vocab_sizes"])],
            ["measurement seed", contract["seed"]],
        ]),
        "",
        "## Draft trees",
        "",
        "`tree_width` is the largest W per depth (the width policy can only narrow it); the "
        "budget is measured at that bound. `verify_num` counts the draft tokens verified "
        "(n - 1 draft nodes + the root).",
        "",
        _table(["tree", "description", "top-k K", "width W", "depth", "N = W·K",
                "sort lanes", "verify_num"],
               [[t["id"], t["description"], t["node_top_k"], t["tree_width"], t["depth"],
                 t["node_top_k"] * t["tree_width"],
                 _sort_lanes(t["node_top_k"] * t["tree_width"]), t["verify_num"]]
                for t in contract["trees"]], "llrrrrlr"),
        "",
        f"## Operating points ({len(points)})",
        "",
        _table(["point", "tree", "B", "V", "K", "W", "depth", "verify_num", "H", "dtype",
                "clock (MHz)"],
               [[p["id"], p["tree"], p["batch"], f"{p['vocab']:,}", p["node_top_k"],
                 p["tree_width"], p["depth"], p["verify_num"], f"{p['hidden_size']:,}",
                 p["hidden_dtype"], f"{p['clock_mhz']:g}"] for p in points], "llrrrrrrrlr"),
        "",
        "## Kernels and phases",
        "",
        "`draft`: the kernel's cycles over one draft round (all depths); `verify`: one verify "
        "step; `round`: the dataflow top, a draft round and its verify step.",
        "",
        _table(["kernel", "phase"], [[k, phase] for k, phase in contract["kernels"].items()]),
        "",
        "## Boards",
        "",
        _table(["board", "part", "HBM", "peak bandwidth", "clock", *RESOURCES,
                "capacities"],
               [[b.name, f"`{b.part}`", f"{b.hbm_gb} GB {b.hbm_type}",
                 f"{b.hbm_bandwidth_gbps:g} GB/s", f"{b.clock_mhz:g} MHz",
                 *(f"{b.capacities[r]:,}" for r in RESOURCES),
                 "data sheet" if b.capacities_confirmed else "approximate (see boards/)"]
                for b in BOARDS.values()], "lllrr" + "r" * len(RESOURCES) + "l"),
        "",
    ]
    return "\n".join(text)


def _display_path(path: Path) -> str:
    try:
        return Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def _first_line(command: list[str]) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (result.stdout or result.stderr).strip().splitlines()
    return lines[0].strip() if lines else None


def render_env_manifest(contract_path: Path) -> str:
    """``reports/env_manifest.txt``: no timestamps, so reruns compare equal."""
    revision = git_revision()
    commit = revision["commit"] or "unknown (no commit found in .git)"
    ref = f" ({revision['ref']})" if revision["ref"] else ""
    versions = tool_versions()
    vivado = _first_line(["vivado", "-version"])
    lines = [
        "# Environment manifest: generated by `make report` (python -m hw.report); do not edit.",
        "# No timestamps: the same checkout on the same machine gives the same file.",
        "",
        f"git revision: {commit}{ref}",
        "  (read from .git without running git; uncommitted changes are not recorded)",
        f"benchmark contract: {_display_path(contract_path)} sha256 "
        f"{hashlib.sha256(Path(contract_path).read_bytes()).hexdigest()}",
        f"platform: {platform.system()} {platform.machine()}",
        f"python: {versions.pop('python')}",
        *(f"{package}: {version or 'not installed'}" for package, version in versions.items()),
        f"vivado: {vivado or 'not found on PATH'}",
        f"gcc: {_first_line(['gcc', '--version']) or 'not found on PATH'}",
        "",
    ]
    return "\n".join(lines)


def _timing(kernel: str, synth_dir: Path | None) -> tuple[dict | None, str, bool]:
    """``kernel``'s timing proxy from its synthesis reports, the first of
    ``<kernel>.json``, ``<kernel>.v80.json`` and ``<kernel>.quick.json`` that has one: the
    report's ``timing`` (None if none has it), the suffix naming the set (`` (V80 build)``,
    `` (quick set)`` or empty) and whether any report exists."""
    synth_dir = SYNTH_DIR if synth_dir is None else synth_dir
    found = False
    for stem, suffix in ((kernel, ""), (f"{kernel}.v80", " (V80 build)"),
                         (f"{kernel}.quick", " (quick set)")):
        path = synth_dir / f"{stem}.json"
        if path.is_file():
            found = True
            timing = json.loads(path.read_text()).get("timing") or {}
            if timing.get("verdict"):
                return timing, suffix, True
    return None, "", found


def timing_rule(kernel: str, synth_dir: Path | None = None) -> str:
    """``kernel``'s verdict against the 300 MHz rule (docs/timing.md) from its synthesis
    report: ``meets`` or ``breaks`` (with `` (V80 build)`` or `` (quick set)`` when only that
    report has one), ``no timing proxy`` (a report older than the proxy) or ``not
    synthesised``. Never runs Yosys."""
    timing, suffix, found = _timing(kernel, synth_dir)
    if timing is not None:
        return timing["verdict"] + suffix
    return "no timing proxy" if found else "not synthesised"


def proxy_clock(kernel: str, synth_dir: Path | None = None) -> int | None:
    """The clock in MHz (rounded down) whose period holds ``kernel``'s critical path as the
    timing proxy estimates it (docs/timing.md, "The clock a kernel meets"); None without an
    estimate. Read from the report ``timing_rule`` reads."""
    timing, _, _ = _timing(kernel, synth_dir)
    path = (timing or {}).get("critical_path") or {}
    return clock_it_meets(path["estimate_ns"]) if path.get("estimate_ns") else None


def _measured_outside_contract(contract: dict) -> list[str]:
    """Targets that measure (``SimTarget.has_measure``) whose kernel is not in the contract's
    [kernels] table."""
    from sim.targets import discover_targets

    try:
        targets = discover_targets()
    except Exception as error:
        raise FlowError(f"a simulation package failed to import: "
                        f"{type(error).__name__}: {error}") from error
    return sorted(name for name, t in targets.items()
                  if t.has_measure and name not in contract["kernels"])


def measure_kernels(contract: dict, points: list[dict], target: Board, console: Console, *,
                    kernels: list[str] | None = None, log_dir: Path | None = None):
    """``(rows, not_measured)`` for the contract's kernels (or ``kernels``) at ``points``.

    Rows follow ``boards/schemas/cycle_budget.schema.json``; ``not_measured`` lists kernels
    (point None: all points) and points without a measurement, with the reason.
    """
    from sim.targets import NotMeasured

    log_dir = LOG_DIR if log_dir is None else log_dir
    rows, missing = [], []
    seed = contract["seed"]
    validator = _validator("measurement")
    for kernel, phase in contract["kernels"].items():
        if kernels is not None and kernel not in kernels:
            continue
        console.step(f"measuring {kernel} ({phase}) at {len(points)} contract points")
        rule, rule_clock = timing_rule(kernel), proxy_clock(kernel)
        sim_target, reason = find_sim_target(kernel)
        if sim_target is not None and not sim_target.has_measure:
            reason = f"simulation target `{kernel}` has no measure() yet"
        if sim_target is None or reason:
            if not (REPO_ROOT / "hw" / "kernels" / f"{kernel}.py").exists():
                reason = f"no hw/kernels/{kernel}.py yet; {reason}"
            console.say(f"  not measured: {reason}")
            missing.append({"kernel": kernel, "point": None, "reason": reason})
            continue
        log_dir.mkdir(parents=True, exist_ok=True)
        for point in points:
            if reason := out_of_scope(contract, kernel, point):
                missing.append({"kernel": kernel, "point": point["id"], "reason": reason})
                continue
            log_file = log_dir / f"{kernel}-{point['id']}.log"
            start = time.monotonic()
            try:
                result = sim_target.measure(dict(point), seed=seed, log_file=log_file)
            except NotMeasured as error:
                missing.append({"kernel": kernel, "point": point["id"],
                                "reason": str(error) or "outside the kernel's parameters"})
                console.say(f"  {point['id']}: not measured: {error}")
                continue
            except Exception as error:
                raise FlowError(f"measuring kernel `{kernel}` at point {point['id']} failed: "
                                f"{type(error).__name__}: {error} (simulator log: {log_file})"
                                ) from error
            problems = [f"{'/'.join(map(str, e.path)) or '(top)'}: {e.message}"
                        for e in validator.iter_errors(result)]
            if problems:
                raise FlowError(f"kernel `{kernel}`: measure() at point {point['id']} returned "
                                f"an invalid measurement: {'; '.join(problems)}")
            clock = point["clock_mhz"]
            total = result["bytes_in"] + result["bytes_out"]
            microseconds = round(result["cycles"] / clock, 4)
            floor = round(target.hbm_seconds(total) * 1e6, 4)
            rows.append({
                "kernel": kernel,
                "point": point["id"],
                "phase": phase,
                "cycles": result["cycles"],
                "initiation_interval": result.get("initiation_interval"),
                "clock_mhz": clock,
                "microseconds": microseconds,
                "bytes_in": result["bytes_in"],
                "bytes_out": result["bytes_out"],
                "bytes_total": total,
                "operations": result["operations"],
                "hbm_floor_us": floor,
                "bound": "hbm" if floor > microseconds else "cycles",
                "timing_rule": rule,
                "proxy_clock_mhz": rule_clock,
                "invocations": result.get("invocations"),
                "ports": dict(sorted(result.get("ports", {}).items())),
                "notes": result.get("notes"),
                "source": result.get("source")
                or f"simulation: sim target `{kernel}` measure(), seed {seed}",
                **{key: result[key] for key in ("rows_read", "logit_bytes", "memory_latency",
                                                "at_latency", "commands") if key in result},
            })
            console.detail(f"  {point['id']}: {result} ({time.monotonic() - start:.1f} s)")
        measured = [r for r in rows if r["kernel"] == kernel]
        left_out = sum(1 for point in points if out_of_scope(contract, kernel, point))
        console.say(f"  {len(measured)} of {len(points)} points measured"
                    + (f" ({left_out} left out by the contract's partial_batches)"
                       if left_out else ""))
    if kernels is not None:
        for kernel in contract["kernels"]:
            if kernel not in kernels:
                missing.append({"kernel": kernel, "point": None,
                                "reason": "not selected (--kernel)"})
    return rows, missing


def budget_sheet(contract: dict, points: list[dict], target: Board, rows: list[dict],
                 missing: list[dict], contract_path: Path) -> dict:
    """The sheet as JSON data (``boards/schemas/cycle_budget.schema.json``)."""
    sheet = {
        "schema": BUDGET_SCHEMA_ID,
        "board": {"name": target.name, "part": target.part,
                  "hbm_bandwidth_gbps": target.hbm_bandwidth_gbps,
                  "clock_mhz": float(contract["clock_mhz"])},
        "contract": _display_path(contract_path),
        "seed": contract["seed"],
        "points": [p["id"] for p in points],
        "kernels": dict(contract["kernels"]),
        "rows": rows,
        "not_measured": missing,
    }
    errors = _schema_errors("cycle_budget", sheet)
    if errors:
        raise FlowError("cycle budget sheet does not match its schema:\n  " + "\n  ".join(errors))
    return sheet


#: Marks a cycle figure that comes from a formula (``source`` says which).
FORMULA_MARK = "†"


def render_budget(sheet: dict) -> str:
    """``reports/cycle_budget.md``."""
    b = sheet["board"]
    text = [
        "# Cycle budget sheet",
        "",
        f"Generated by `make report` from measurements only: every figure comes from a "
        f"simulation run by the kernel's `measure()` (seed {sheet['seed']}; {FORMULA_MARK}: "
        f"extended by a formula that the run checks) at the points of "
        f"`{sheet['contract']}` (`reports/benchmark_contract.md`). Board {b['name']} "
        f"(`{b['part']}`), clock {b['clock_mhz']:g} MHz, HBM peak {b['hbm_bandwidth_gbps']:g} "
        "GB/s.",
        "",
        "* bytes in / out: transfers on the kernel's stream and memory ports times the whole "
        "bytes of one beat's payload (`sim.targets.port_bytes`).",
        "* µs = cycles / fclk; HBM floor = (bytes in + bytes out) / peak HBM bandwidth; bound = "
        "`hbm` when the floor exceeds the measured time.",
        "* phase `draft`: one draft round (all depths); `verify`: one verify step of the "
        "unfused kernels; `fused`: one verify step of the fused verify (`tree_verify`, which "
        "replaces `logits_to_probas` + `reject_sample`); `round`: the dataflow top.",
        "* 300 MHz rule: the kernel's verdict against the logic-depth rule of `docs/timing.md` "
        "(`reports/timing_proxy.md`), read from `reports/synth/<kernel>.json`, else its "
        "`.v80.json` or `.quick.json` (`python -m hw.synth <kernel>`; `not synthesised`: no "
        f"report yet). {BREAKS_MARK} on a µs figure: "
        "the kernel breaks the rule, so the figure assumes a clock its netlist may not reach; the "
        "rule column then gives the clock its critical path would meet by the same estimate "
        "and the µs figure at that clock.",
        f"* {FORMULA_MARK} on a cycle figure: it comes from a schedule formula validated against "
        "the simulation of smaller builds (the source is given below the table).",
        "",
        "## Measured",
        "",
    ]
    if sheet["rows"]:
        text.append(_table(
            ["kernel", "phase", "point", "bytes in", "bytes out", "operations", "II (cycles)",
             "fclk (MHz)", "cycles", "µs", "300 MHz rule", "HBM floor (µs)", "bound"],
            [[r["kernel"], r["phase"], r["point"], f"{r['bytes_in']:,}", f"{r['bytes_out']:,}",
              f"{r['operations']:,}",
              "–" if r["initiation_interval"] is None else f"{r['initiation_interval']:g}",
              f"{r['clock_mhz']:g}", _cycles(r), _microseconds(r), _rule_cell(r),
              f"{r['hbm_floor_us']:.3f}", r["bound"]] for r in sheet["rows"]],
            "lll" + "r" * 7 + "lrl"))
        sources = {r["kernel"]: r["source"] for r in sheet["rows"] if _by_formula(r)}
        text += ["", *(f"{FORMULA_MARK} `{kernel}`: {source}." for kernel, source
                       in sources.items())]
        text += _latency_table(sheet["rows"])
    else:
        text.append("No measurements yet: no kernel's simulation target defines `measure()`.")
    text += ["", "## Not measured", ""]
    if sheet["not_measured"]:
        groups = {}  # (kernel, reason) -> points, in sheet order
        for m in sheet["not_measured"]:
            groups.setdefault((m["kernel"], m["reason"]), []).append(m["point"] or "all")
        text.append(_table(["kernel", "points", "reason"],
                           [[kernel, ", ".join(points), reason]
                            for (kernel, reason), points in groups.items()]))
    else:
        text.append("Every kernel is measured at every point.")
    text.append("")
    return "\n".join(text)


def _latency_table(rows: list[dict]) -> list[str]:
    """Lines of the section comparing the rows measured at several memory read latencies
    (``memory_latency``, ``at_latency``); none without such rows."""
    rows = [r for r in rows if r.get("at_latency")]
    if not rows:
        return []
    others = sorted({int(x) for r in rows for x in r["at_latency"]}, reverse=True)
    return ["", "## Memory read latency", "",
            "The rows measured at more than one memory read latency (every channel answering "
            "that many clocks after the request): the table's figure, then the same round at "
            "the others.", "",
            _table(["kernel", "point", "latency (clocks)", "cycles",
                    *(f"cycles at {x} clocks" for x in others)],
                   [[r["kernel"], r["point"], r["memory_latency"], f"{r['cycles']:,}",
                     *(f"{r['at_latency'][str(x)]['cycles']:,}" if str(x) in r["at_latency"]
                       else "–" for x in others)] for r in rows], "llrr" + "r" * len(others))]


def _by_formula(row: dict) -> bool:
    """Whether the row's figures come from a formula rather than plain simulation."""
    return not row["source"].startswith("simulation")


def _cycles(row: dict) -> str:
    return f"{row['cycles']:,}" + (f" {FORMULA_MARK}" if _by_formula(row) else "")


def _microseconds(row: dict) -> str:
    """The µs figure, marked when the kernel breaks the 300 MHz rule."""
    mark = f" {BREAKS_MARK}" if row["timing_rule"].startswith("breaks") else ""
    return f"{row['microseconds']:.3f}{mark}"


def _rule_cell(row: dict) -> str:
    """The verdict; for a kernel that breaks the rule, the clock its critical path would meet
    and the µs figure at that clock."""
    clock = row.get("proxy_clock_mhz")
    if not row["timing_rule"].startswith("breaks") or not clock:
        return row["timing_rule"]
    return f"{row['timing_rule']}: {clock} MHz, {row['cycles'] / clock:,.3f} µs"


def plot_budget(sheet: dict, path: Path) -> None:
    """PNG: per-kernel µs per phase and point (stacked), and bytes per step against the HBM
    rooflines of every board."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    rows = sheet["rows"]
    points = sheet["points"]
    kernels = list(sheet["kernels"])
    colours = {k: f"C{i % 10}" for i, k in enumerate(kernels)}
    fig = Figure(figsize=(24, 10), dpi=100)
    axes = fig.subplots(2, 3)
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.13, top=0.92, hspace=0.62, wspace=0.16)
    for ax, phase in zip(axes.flat[:4], PHASES, strict=True):
        phase_rows = [r for r in rows if r["phase"] == phase]
        ax.set_title(f"µs per {PHASE_TITLES[phase]} at {sheet['board']['clock_mhz']:g} MHz")
        ax.set_ylabel("µs")
        ax.set_xticks(range(len(points)), points, rotation=60, ha="right", fontsize=8)
        ax.set_xlim(-0.5, len(points) - 0.5)
        bottom = [0.0] * len(points)
        for kernel in kernels:
            values = [0.0] * len(points)
            for r in phase_rows:
                if r["kernel"] == kernel:
                    values[points.index(r["point"])] = r["microseconds"]
            if any(values):
                ax.bar(range(len(points)), values, bottom=bottom, label=kernel,
                       color=colours[kernel])
                bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        if phase_rows:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no measurement yet", transform=ax.transAxes, ha="center",
                    va="center", color="grey")
            ax.set_ylim(0, 1)
    axes.flat[5].set_axis_off()
    ax = axes.flat[4]
    ax.set_title("bytes per step vs. time, against the HBM bandwidth rooflines")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bytes in + out per step")
    ax.set_ylabel("µs")
    totals = [r["bytes_total"] for r in rows if r["bytes_total"] > 0]
    low = min([1e2, *totals]) / 2
    high = max([1e9, *totals]) * 2
    for i, b in enumerate(BOARDS.values()):
        ax.plot([low, high], [b.hbm_seconds(low) * 1e6, b.hbm_seconds(high) * 1e6],
                linestyle="--", color=f"0.{3 + 3 * i}",
                label=f"{b.name} HBM {b.hbm_bandwidth_gbps:g} GB/s")
    for kernel in kernels:
        kernel_rows = [r for r in rows if r["kernel"] == kernel and r["bytes_total"] > 0
                       and r["microseconds"] > 0]
        if kernel_rows:
            ax.scatter([r["bytes_total"] for r in kernel_rows],
                       [r["microseconds"] for r in kernel_rows], label=kernel,
                       color=colours[kernel], s=18)
    ax.text(0.98, 0.03, "below a roofline: HBM-bound at that bandwidth",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=8, color="0.3")
    ax.legend(fontsize=8, loc="upper left")
    unmeasured = sorted({m["kernel"] for m in sheet["not_measured"] if m["point"] is None})
    fig.suptitle(f"Cycle budget ({sheet['board']['name']}, measured in simulation, seed "
                 f"{sheet['seed']})" + (f" — not measured yet: {', '.join(unmeasured)}"
                                        if unmeasured else ""), fontsize=10)
    fig.savefig(path, format="png", metadata={"Software": None})


def _keep_other_kernels(path: Path, selected: list[str], rows: list[dict],
                        missing: list[dict], contract: dict, points: list[dict],
                        selected_points: list[str] | None = None) -> tuple[list, list]:
    """``rows``/``missing`` of the selected kernels (at ``selected_points``, default every
    point) merged with every other entry of the sheet at ``path`` (``--keep-others``,
    ``--point``, ``--verdicts-only``), in contract order; the kept kernels' points out of the
    contract's scope (``out_of_scope``) are listed even when the sheet predates them."""
    try:
        previous = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise FlowError(f"--keep-others and --verdicts-only need the existing sheet {path}: "
                        f"{error}") from error

    def kept(entry) -> bool:
        return entry["kernel"] not in selected or (
            selected_points is not None and entry["point"] is not None
            and entry["point"] not in selected_points)

    # (The verdicts of the kept rows are read again: the synthesis reports may be newer.)
    kept_rows = [{**r, "timing_rule": timing_rule(r["kernel"]),
                  "proxy_clock_mhz": proxy_clock(r["kernel"])}
                 for r in previous["rows"] if kept(r)]
    kept_missing = [m for m in previous["not_measured"] if kept(m)]
    listed = {(m["kernel"], m["point"]) for m in kept_missing}
    kept_missing += [{"kernel": kernel, "point": point["id"], "reason": reason}
                     for kernel in contract["kernels"] if (kernel, None) not in listed
                     for point in points
                     if kept({"kernel": kernel, "point": point["id"]})
                     and (reason := out_of_scope(contract, kernel, point))
                     and (kernel, point["id"]) not in listed]
    missing = [m for m in missing if not kept(m)]
    kernel_rank = {kernel: i for i, kernel in enumerate(contract["kernels"])}
    point_rank = {point["id"]: i for i, point in enumerate(points)}

    def order(entry):
        return (kernel_rank.get(entry["kernel"], len(kernel_rank)),
                point_rank.get(entry["point"], -1))

    return sorted(kept_rows + rows, key=order), sorted(kept_missing + missing, key=order)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hw.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--board", default="alveo", choices=board_names(),
                        help="board of the HBM floor column (default: alveo = alveo-v80)")
    parser.add_argument("--contract", type=Path, default=CONTRACT, help="benchmark contract")
    parser.add_argument("--out", type=Path, default=REPORT_DIR,
                        help="report directory (default: reports/)")
    parser.add_argument("--kernel", action="append", metavar="NAME",
                        help="measure only this kernel (repeatable; default: every kernel)")
    parser.add_argument("--keep-others", action="store_true",
                        help="with --kernel: keep the other kernels' rows of the existing "
                             "cycle_budget.json instead of listing them as not selected")
    parser.add_argument("--point", action="append", metavar="ID",
                        help="with --kernel and --keep-others: measure only this contract "
                             "point (repeatable) and keep every other row of the existing "
                             "cycle_budget.json (a long point can be measured on its own)")
    parser.add_argument("--verdicts-only", action="store_true",
                        help="measure nothing: keep every row of the existing "
                             "cycle_budget.json, read the 300 MHz verdicts again from "
                             "reports/synth/ (after python -m hw.synth) and write the sheet, "
                             "fusion_design.md and the plot again (env_manifest.txt keeps the "
                             "revision the rows were measured at)")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    target = board(args.board)
    try:
        contract = load_contract(args.contract)
    except FlowError as error:
        print(f"error: step [1] reading the benchmark contract failed: {error}",
              file=sys.stderr)
        return 1
    unknown = [k for k in args.kernel or () if k not in contract["kernels"]]
    if unknown:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: kernel {', '.join(unknown)} is not in the contract's "
              f"[kernels] table ({', '.join(contract['kernels'])})", file=sys.stderr)
        return 2
    points = contract_points(contract)
    if args.point:
        if not (args.kernel and args.keep_others):
            parser.error("--point measures part of the sheet: give --kernel and --keep-others")
        unknown = [p for p in args.point if p not in {point["id"] for point in points}]
        if unknown:
            parser.error(f"point {', '.join(unknown)} is not a contract point")
    measured_points = [p for p in points if not args.point or p["id"] in args.point]
    selected = [k for k in contract["kernels"] if args.kernel is None or k in args.kernel]
    if args.verdicts_only:
        if args.kernel:
            parser.error("--verdicts-only measures nothing: leave out --kernel")
        selected = []
    # --verdicts-only keeps env_manifest.txt: it names the revision the rows were measured at
    console = Console(LOG_DIR / "report.log",
                      total_steps=(4 if args.verdicts_only else 5) + len(selected))
    out = args.out
    started = time.monotonic()
    try:
        out.mkdir(parents=True, exist_ok=True)
        console.step(f"reading the benchmark contract {_display_path(args.contract)}")
        console.say(f"  {len(contract['trees'])} trees x {len(contract['batch_sizes'])} batch "
                    f"sizes x {len(contract['vocab_sizes'])} vocabularies = {len(points)} "
                    f"points; log: {console.log_path}")
        console.step(f"writing {out / 'benchmark_contract.md'}")
        (out / "benchmark_contract.md").write_text(render_contract(contract, points,
                                                                   args.contract))
        if not args.verdicts_only:
            console.step(f"writing {out / 'env_manifest.txt'}")
            (out / "env_manifest.txt").write_text(render_env_manifest(args.contract))
        rows, missing = ([], []) if args.verdicts_only else measure_kernels(
            contract, measured_points, target, console, kernels=args.kernel)
        if args.verdicts_only or (args.keep_others and args.kernel):
            rows, missing = _keep_other_kernels(out / "cycle_budget.json", selected, rows,
                                                missing, contract, points, args.point)
        console.step("writing the cycle budget sheet (JSON, Markdown)")
        for name in _measured_outside_contract(contract):
            missing.append({"kernel": name, "point": None,
                            "reason": "has measure() but is not in the contract's [kernels] "
                                      "table: add it with its phase"})
        sheet = budget_sheet(contract, points, target, rows, missing, args.contract)
        (out / "cycle_budget.json").write_text(json.dumps(sheet, indent=1) + "\n")
        (out / "cycle_budget.md").write_text(render_budget(sheet))
        console.say(f"  {out / 'cycle_budget.json'}, {out / 'cycle_budget.md'}: "
                    f"{len(rows)} measured rows, {len(missing)} not measured")
        fusion = render_fusion_design(sheet, render_engine_resources(SYNTH_DIR, target))
        if fusion is not None:
            (out / "fusion_design.md").write_text(fusion)
            plot_batches(sheet, out / BATCH_PLOT)
            console.say(f"  {out / 'fusion_design.md'}, {out / BATCH_PLOT}: the engine "
                        f"against the unfused kernels and against batch size")
        console.step(f"plotting {out / 'cycle_budget.png'}")
        plot_budget(sheet, out / "cycle_budget.png")
        console.say(f"done in {time.monotonic() - started:.1f} s")
        return 0
    except Exception as error:
        console.exception()
        console.error(f"error: step {console.current_step} failed: {error}")
        console.error(f"see {console.log_path}")
        return 1
    finally:
        console.close()


if __name__ == "__main__":
    sys.exit(main())
