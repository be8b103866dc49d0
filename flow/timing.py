"""Logic depth of a Yosys ``synth_xilinx`` netlist: the timing proxy behind the 300 MHz rule.

There is no vendor timer here, and Yosys' ``ltp -noff`` does not measure register-to-register
depth on a mapped netlist: it counts every cell of the longest topological path and walks
through the ``FDRE`` primitives (``-noff`` only knows Yosys' internal flip-flop cells). This
module walks the flattened netlist that ``flow.synth`` writes with ``write_json`` instead:

* boundaries (where paths start and end): flip-flops, block and ultra RAMs, DSP slices with
  internal registers, shift registers, LUT-RAM, any other primitive, and the top-level ports
  (taken as registered on the other side); clock pins are not endpoints;
* combinational cells: ``LUT1``-``LUT6`` and ``INV``, one LUT level each; ``MUXF7``-``MUXF9``,
  no level of their own (the slice's wide-function multiplexers extend the LUT level that feeds
  them) but their own delay; ``CARRY4``/``CARRY8`` at bit level (a path counts the carry bits
  it ripples through, and pays an entry delay each time it enters a chain from the fabric);
  the read-address pins of LUT-RAM and shift registers, one LUT level; DSP slices that Yosys
  leaves without internal registers (its usual mapping here), as one multiply stage whose
  neighbouring flip-flops Vivado would pull into the slice;
* every path gets the estimated delay of ``DelayModel`` (figures and sources: docs/timing.md).
  The *critical* path has the largest estimate, the *deepest* path the most LUT levels; the
  longest carry chain counts cascaded carry cells (``CARRY4`` = 4 bits, ``CARRY8`` = 8); the
  *violations* are the worst paths into each kind of register (or port) that breaks the rule
  (``mul3.s3_lost`` and ``mul9.s3_lost`` are one kind), so that all the places to pipeline
  show, not only the worst.

The rule (``RULE``): a kernel meets the clock when its critical path's estimate fits the clock
period. For the default model that is at most ``RULE.max_lut_levels`` LUT levels on a path of
LUTs only, and a carry chain of at most ``RULE.max_carry_bits`` bits behind one LUT level.
"""

import json
import math
import re
import time
from collections import Counter, defaultdict, deque
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["DelayModel", "RULE", "analyse", "analyse_file", "clock_it_meets", "render_table",
           "VIOLATIONS_LISTED"]

#: How many kinds of breaking registers a report lists (worst first).
VIOLATIONS_LISTED = 12

LUTS = frozenset({"LUT1", "LUT2", "LUT3", "LUT4", "LUT5", "LUT6", "INV"})
MUXES = frozenset({"MUXF7", "MUXF8", "MUXF9"})
CARRY_BITS = {"CARRY4": 4, "CARRY8": 8}
CLOCK_PINS = frozenset({"C", "CLK", "CLKARDCLK", "CLKBWRCLK", "WCLK", "CLKA", "CLKB"})
# Read-address pins of LUT-RAM (RAM32M, RAM64X1D, ...) and dynamic shift registers (SRL16E,
# SRLC32E): combinational to the cell's data outputs.
_ADDRESS_PIN = re.compile(r"A\d*|ADDR[A-H]|DPRA\d*")
# DSP slice cascade inputs (from the neighbouring slice, dedicated routing).
_DSP_CASCADE = re.compile(r"PCIN|ACIN|BCIN|CARRYCASCIN|MULTSIGNIN")
# Block RAM output pins and the port whose output register (DOA_REG / DOB_REG) drives them.
_BRAM_OUTPUT = re.compile(r"DOUTP?([AB])")


@dataclass(frozen=True)
class DelayModel:
    """Delays (ns) of the timing proxy; docs/timing.md gives the source of each figure.

    Attributes
    ----------
    clock_mhz : float
        The clock of the rule.
    clock_uncertainty : float
        Jitter and skew taken off every path.
    launch_ff, setup_ff : float
        Flip-flop clock-to-Q and setup (also used for the top-level ports).
    lut_level : float
        One LUT and the routed net behind it.
    muxf : float
        One ``MUXF7``/``MUXF8``/``MUXF9``.
    carry_entry : float
        Entering a carry chain from the fabric and leaving it (``S``/``DI`` to ``CO``/``O``).
    carry_bit : float
        Each carry bit rippled through.
    launch_bram, launch_bram_reg : float
        Block RAM clock to data out, without and with its output register.
    dsp, dsp_cascade : float
        A DSP slice without internal registers, from its fabric inputs and from its cascade
        inputs (``PCIN``, ``ACIN``, ...) to its outputs.
    launch_dsp, launch_dsp_mreg, launch_dsp_comb : float
        A registered DSP slice's clock to ``P`` with ``PREG``; without ``PREG`` but with
        ``MREG``; with input registers only.
    launch_lutram : float
        LUT-RAM and shift register clock to data out.
    setup_block : float
        Setup of the inputs of block RAM, DSP, LUT-RAM and shift registers.
    """

    clock_mhz: float = 300.0
    clock_uncertainty: float = 0.25
    launch_ff: float = 0.10
    setup_ff: float = 0.10
    lut_level: float = 0.45
    muxf: float = 0.10
    carry_entry: float = 0.30
    carry_bit: float = 0.01
    launch_bram: float = 0.90
    launch_bram_reg: float = 0.26
    dsp: float = 1.84
    dsp_cascade: float = 0.50
    launch_dsp: float = 0.40
    launch_dsp_mreg: float = 1.29
    launch_dsp_comb: float = 2.44
    launch_lutram: float = 0.70
    setup_block: float = 0.40

    @property
    def period(self) -> float:
        return 1000.0 / self.clock_mhz

    @property
    def register_overhead(self) -> float:
        """What a flip-flop to flip-flop path pays besides its logic."""
        return self.clock_uncertainty + self.launch_ff + self.setup_ff

    @property
    def max_lut_levels(self) -> int:
        """The most LUT levels a flip-flop to flip-flop path of LUTs only may have."""
        return math.floor((self.period - self.register_overhead) / self.lut_level + 1e-9)

    @property
    def max_carry_bits(self) -> int:
        """The longest carry chain a flip-flop -> LUT -> carry chain -> flip-flop path may
        have."""
        spare = self.period - self.register_overhead - self.lut_level - self.carry_entry
        return math.floor(spare / self.carry_bit + 1e-9)

    def summary(self) -> dict:
        """The rule as report data: clock, period, both limits and every delay."""
        return {"clock_mhz": self.clock_mhz, "period_ns": round(self.period, 3),
                "max_lut_levels": self.max_lut_levels, "max_carry_bits": self.max_carry_bits,
                "delays_ns": asdict(self), "source": "docs/timing.md"}


#: The 300 MHz rule for UltraScale+ and Versal, speed grade -2.
RULE = DelayModel()


def _parameter(cell: dict, name: str) -> int:
    """An integer cell parameter (Yosys writes them as binary strings); 0 when absent."""
    value = cell.get("parameters", {}).get(name, 0)
    if isinstance(value, str):
        return int(value, 2) if value and set(value) <= {"0", "1"} else 0
    return int(value)


def _is_address_cell(kind: str) -> bool:
    return kind.startswith(("SRL", "RAM")) and not kind.startswith("RAMB")


def _dsp_registers(cell: dict) -> tuple[int, int, int, int]:
    """``AREG``, ``BREG``, ``MREG``, ``PREG`` of a DSP slice."""
    return tuple(_parameter(cell, name) for name in ("AREG", "BREG", "MREG", "PREG"))


def _is_combinational(cell: dict) -> bool:
    """LUTs, wide multiplexers, carry cells and DSP slices without internal registers."""
    kind = cell["type"]
    if kind.startswith("DSP"):
        return not any(_dsp_registers(cell))
    return kind in LUTS or kind in MUXES or kind in CARRY_BITS


def _launch(cell: dict, pin: str, model: DelayModel) -> float:
    """Clock to output of a boundary cell's output pin."""
    kind = cell["type"]
    if kind.startswith("RAMB") or kind.startswith("URAM"):
        side = _BRAM_OUTPUT.match(pin)
        register = (_parameter(cell, f"DO{side.group(1)}_REG") if side and kind.startswith("RAMB")
                    else _parameter(cell, "OREG_A") or _parameter(cell, "OREG_B"))
        return model.launch_bram_reg if register else model.launch_bram
    if kind.startswith("DSP"):
        _, _, mreg, preg = _dsp_registers(cell)
        return model.launch_dsp if preg else (
            model.launch_dsp_mreg if mreg else model.launch_dsp_comb)
    if _is_address_cell(kind):
        return model.launch_lutram
    return model.launch_ff


def _setup(cell: dict, model: DelayModel) -> float:
    """Setup of a boundary cell's inputs (a registered DSP slice without input registers:
    its multiply stage)."""
    kind = cell["type"]
    if kind.startswith("FD"):
        return model.setup_ff
    if kind.startswith("DSP") and not any(_dsp_registers(cell)[:2]):
        return model.dsp
    return model.setup_block


def _edges(cell: dict, model: DelayModel):
    """``(output bit, input bit, (delay, LUT levels, muxes, carry bits))`` of a combinational
    cell (or of the combinational part of a LUT-RAM or shift register)."""
    kind, pins = cell["type"], cell["connections"]
    directions = cell.get("port_directions", {})
    outputs = [bit for pin, bits in pins.items() if directions.get(pin) == "output"
               for bit in bits if isinstance(bit, int)]
    if kind in CARRY_BITS:
        yield from _carry_edges(pins, model)
        return
    if kind.startswith("DSP"):
        for pin, bits in pins.items():
            if directions.get(pin) == "input" and not pin.startswith(("CLK", "CE", "RST")):
                step = (model.dsp_cascade if _DSP_CASCADE.fullmatch(pin) else model.dsp, 0, 0, 0)
                yield from ((out, bit, step) for bit in bits if isinstance(bit, int)
                            for out in outputs)
        return
    if kind in MUXES:
        step = (model.muxf, 0, 1, 0)
        inputs = [pin for pin in pins if directions.get(pin) == "input"]
    else:
        step = (model.lut_level, 1, 0, 0)
        inputs = [pin for pin in pins if directions.get(pin) == "input"
                  and (kind in LUTS or _ADDRESS_PIN.fullmatch(pin))]
    for pin in inputs:
        for bit in pins[pin]:
            if isinstance(bit, int):
                for out in outputs:
                    yield out, bit, step


def _carry_edges(pins: dict, model: DelayModel):
    """Bit-level carry chain: from input position ``j`` to output position ``i >= j`` the path
    ripples through ``i - j + 1`` bits; ``CI`` continues a chain, the other inputs enter it."""
    entries = [(pin, position, bit) for pin in ("S", "DI")
               for position, bit in enumerate(pins.get(pin, ()))]
    entries += [("CYINIT", 0, bit) for bit in pins.get("CYINIT", ())]
    entries += [("CI_TOP", 4, bit) for bit in pins.get("CI_TOP", ())]
    entries += [("CI", 0, bit) for bit in pins.get("CI", ())]
    for pin in ("CO", "O"):
        for position, out in enumerate(pins.get(pin, ())):
            if not isinstance(out, int):
                continue
            for source, start, bit in entries:
                if isinstance(bit, int) and start <= position:
                    bits = position - start + 1
                    entry = 0.0 if source == "CI" else model.carry_entry
                    yield out, bit, (entry + bits * model.carry_bit, 0, 0, bits)


class _Netlist:
    """The graph of one flattened module of a Yosys JSON netlist."""

    def __init__(self, netlist: dict, top: str | None):
        modules = netlist["modules"]
        name = top if top in modules else next(
            (n for n, m in modules.items() if m.get("attributes", {}).get("top")),
            next(iter(modules)))
        self.module = modules[name]
        self.cells = self.module["cells"]
        self.names = self._public_names()

    def _public_names(self) -> dict[int, str]:
        """Bit -> the readable name of its net: named signals before Yosys' and Amaranth's
        ``$`` names, internal signals before ports, then the shortest name."""
        ports = set(self.module.get("ports", {}))
        best: dict[int, tuple] = {}
        for name, net in self.module.get("netnames", {}).items():
            if net.get("hide_name"):
                continue
            name = name.removeprefix("\\")
            bits = net["bits"]
            offset = net.get("offset", 0)
            for index, bit in enumerate(bits):
                if isinstance(bit, int):
                    label = f"{name}[{offset + index}]" if len(bits) > 1 else name
                    rank = ("$" in name, name in ports, len(label), label)
                    if bit not in best or rank < best[bit]:
                        best[bit] = rank
        return {bit: rank[-1] for bit, rank in best.items()}

    def name(self, bit, fallback: str) -> str:
        return self.names.get(bit, fallback)


def analyse(netlist: dict, *, top: str | None = None, model: DelayModel = RULE) -> dict:
    """The timing proxy of a Yosys JSON netlist (``write_json`` after ``synth_xilinx
    -flatten``): critical and deepest path, longest carry chain, verdict against ``model``.

    Parameters
    ----------
    netlist : dict
        The parsed JSON.
    top : str or None
        The module to analyse (default: the one marked ``top``, else the first).
    model : DelayModel
        Delays and clock of the rule.
    """
    start_time = time.monotonic()
    net = _Netlist(netlist, top)
    comb, driver, arrivals, endpoints = {}, {}, {}, []
    fanout = defaultdict(int)
    for name, cell in net.cells.items():
        kind = cell["type"]
        directions = cell.get("port_directions", {})
        purely_combinational = _is_combinational(cell)
        if purely_combinational or _is_address_cell(kind):
            comb[name] = list(_edges(cell, model))
        for pin, bits in cell["connections"].items():
            direction = directions.get(pin)
            for bit in bits:
                if not isinstance(bit, int):
                    continue
                if direction == "output":
                    if name in comb:
                        driver[bit] = name
                    if not purely_combinational:
                        arrivals[bit] = _source(model, _launch(cell, pin, model), name)
                elif direction == "input" and pin not in CLOCK_PINS:
                    fanout[bit] += 1
                    if not purely_combinational:
                        endpoints.append((bit, _setup(cell, model), name, pin))
    for port, info in net.module.get("ports", {}).items():
        for bit in info["bits"]:
            if isinstance(bit, int) and info["direction"] == "input":
                arrivals.setdefault(bit, _source(model, model.launch_ff, port))
            elif isinstance(bit, int):
                fanout[bit] += 1
                endpoints.append((bit, model.setup_ff, None, port))
    by_delay, by_levels, loop_cells = _propagate(comb, driver, arrivals)
    critical = _worst(by_delay, endpoints, by_levels=False)
    deepest = _worst(by_levels, endpoints, by_levels=True)
    verdict = "no paths" if critical is None else (
        "breaks" if critical[0] > model.period + 1e-9 else "meets")
    breaking, kinds = _breaking(net, by_delay, endpoints, model.period)
    return {
        "rule": model.summary(),
        "verdict": verdict,
        "critical_path": _describe(net, by_delay, critical, fanout),
        "deepest_path": _describe(net, by_levels, deepest, fanout),
        "longest_carry_chain": _longest_chain(net),
        "breaking_signals": breaking,
        "violations": [_summary(_describe(net, by_delay, worst, fanout), len(signals))
                       for worst, signals in kinds[:VIOLATIONS_LISTED]],
        "combinational_loop_cells": loop_cells,
        "seconds": round(time.monotonic() - start_time, 1),
    }


def _source(model: DelayModel, launch: float, cell: str) -> tuple:
    """The arrival record of a path start: (delay, LUT levels, muxes, carry bits, cells,
    previous bit, cell)."""
    return (model.clock_uncertainty + launch, 0, 0, 0, 0, None, cell)


def _propagate(comb: dict, driver: dict, arrivals: dict):
    """Arrival records of every bit, once by delay and once by LUT levels, in topological
    order of the combinational cells; returns both and the number of cells on loops."""
    users, waiting = defaultdict(list), {}
    for name, edges in comb.items():
        sources = {driver[bit] for _, bit, _ in edges if bit in driver}
        waiting[name] = len(sources)
        for source in sources:
            users[source].append(name)
    ready = deque(sorted(name for name, count in waiting.items() if count == 0))
    by_delay, by_levels = dict(arrivals), dict(arrivals)
    done = 0
    while ready:
        name = ready.popleft()
        done += 1
        for out, bit, step in comb[name]:
            for table, key in ((by_delay, 0), (by_levels, 1)):
                before = table.get(bit)
                if before is None:
                    continue
                record = (before[0] + step[0], before[1] + step[1], before[2] + step[2],
                          before[3] + step[3], before[4] + 1, bit, name)
                current = table.get(out)
                if current is None or _better(record, current, key):
                    table[out] = record
        for user in users[name]:
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    return by_delay, by_levels, len(comb) - done


def _better(record: tuple, current: tuple, key: int) -> bool:
    if key == 0:
        return (record[0], record[1]) > (current[0], current[1])
    return (record[1], record[0]) > (current[1], current[0])


def _worst(table: dict, endpoints: list, by_levels: bool):
    """``(total delay, record, end bit, end cell, end pin)`` of the worst endpoint: by
    estimated delay, or by LUT levels."""
    worst, worst_key = None, None
    for bit, setup, cell, pin in endpoints:
        record = table.get(bit)
        if record is None:
            continue
        total = record[0] + setup
        key = (record[1], total) if by_levels else (total, record[1])
        if worst_key is None or key > worst_key:
            worst, worst_key = (total, record, bit, cell, pin), key
    return worst


def _breaking(net: _Netlist, table: dict, endpoints: list, period: float):
    """The signals (bit indices dropped) whose worst path exceeds ``period``, and, per kind
    of signal (digits dropped too: ``mul3.s3_lost`` and ``mul9.s3_lost`` are one kind), the
    worst path as a ``_worst`` tuple and how many signals the kind has, worst first."""
    kinds = {}
    for bit, setup, cell, pin in endpoints:
        record = table.get(bit)
        if record is None or record[0] + setup <= period + 1e-9:
            continue
        signal = re.sub(r"\[\d+\]", "", _endpoint_name(net, cell, bit, pin))
        worst, signals = kinds.setdefault(re.sub(r"\d+", "#", signal), [None, set()])
        signals.add(signal)
        if worst is None or record[0] + setup > worst[0]:
            kinds[re.sub(r"\d+", "#", signal)][0] = (record[0] + setup, record, bit, cell, pin)
    ranked = sorted(kinds.values(), key=lambda kind: (-kind[0][0], str(kind[0][3]), kind[0][2]))
    return sum(len(signals) for _, signals in ranked), ranked


def _summary(path: dict, signals: int) -> dict:
    keys = ("estimate_ns", "lut_levels", "carry_bits", "start", "end")
    return {**{key: path[key] for key in keys}, "signals_alike": signals}


def _describe(net: _Netlist, table: dict, worst, fanout: dict) -> dict | None:
    """A path as report data: estimate, LUT levels, muxes, carry bits, cells, the cell types
    in order, the named signals it passes, the largest fanout on it, start and end."""
    if worst is None:
        return None
    total, record, end_bit, end_cell, end_pin = worst
    kinds, bits, bit = [], [end_bit], end_bit
    while table[bit][5] is not None:
        kinds.append(net.cells[table[bit][6]]["type"])
        bit = table[bit][5]
        bits.append(bit)
    through = [net.names[b] for b in reversed(bits[1:-1]) if b in net.names]
    return {
        "estimate_ns": round(total, 3),
        "lut_levels": record[1],
        "muxes": record[2],
        "carry_bits": record[3],
        "cells": record[4],
        "cell_types": dict(sorted(Counter(kinds).items())),
        "sequence": " ".join(reversed(kinds)),
        "through": list(dict.fromkeys(through)),
        "max_fanout": max(fanout.get(b, 0) for b in bits),
        "start": _endpoint_name(net, table[bit][6], bit, None),
        "end": _endpoint_name(net, end_cell, end_bit, end_pin),
    }


def _endpoint_name(net: _Netlist, cell_name, bit, pin) -> str:
    """A readable name for a path end: the register's own signal for flip-flops, the port
    name for ports, else the net's name and ``TYPE.PIN``."""
    cell = net.cells.get(cell_name)
    if cell is None:  # a top-level port
        return net.name(bit, str(cell_name))
    kind = cell["type"]
    if kind.startswith("FD"):
        q = cell["connections"].get("Q", [None])[0]
        return net.name(q, f"{kind} {cell_name}")
    if pin is None:  # a path start: the output pin that launches it
        pin = next(p for p, bits in cell["connections"].items() if bit in bits)
    name = net.names.get(bit)
    return f"{name} ({kind}.{pin})" if name else f"{kind}.{pin} {cell_name}"


def _longest_chain(net: _Netlist) -> dict:
    """The longest cascade of carry cells (``CO`` of the top bit into the next ``CI``)."""
    carries = {name: cell for name, cell in net.cells.items() if cell["type"] in CARRY_BITS}
    top_out = {}
    for name, cell in carries.items():
        outs = cell["connections"].get("CO", [])
        if outs and isinstance(outs[-1], int):
            top_out[outs[-1]] = name
    following = {}
    for name, cell in carries.items():
        ci = cell["connections"].get("CI", [None])[0]
        if ci in top_out:
            following[top_out[ci]] = name
    heads = set(carries) - set(following.values())
    best = (0, 0, None)
    for head in sorted(heads):
        chain = [head]
        while chain[-1] in following:
            chain.append(following[chain[-1]])
        bits = sum(CARRY_BITS[carries[name]["type"]] for name in chain)
        if bits > best[0]:
            best = (bits, len(chain), chain)
    if best[2] is None:
        return {"bits": 0, "cells": 0, "signal": None}
    named = [net.names[bit] for name in reversed(best[2])
             for bit in carries[name]["connections"].get("O", []) if bit in net.names]
    return {"bits": best[0], "cells": best[1], "signal": named[0] if named else None}


def analyse_file(path: Path, *, top: str | None = None, model: DelayModel = RULE) -> dict:
    """``analyse`` of a JSON netlist file."""
    with open(path) as f:
        return analyse(json.load(f), top=top, model=model)


def clock_it_meets(estimate_ns: float) -> int:
    """The clock in MHz, rounded down, whose period holds a path of ``estimate_ns``."""
    return int(1000.0 / estimate_ns)


def render_table(reports: list[dict], model: DelayModel = RULE) -> str:
    """``reports/timing_proxy.md`` from the synthesis reports (``reports/synth/*.json``): one
    row per report, then the registers that break the rule, then the parameter sets."""
    lines = [
        "# Timing proxy: logic depth against the 300 MHz rule",
        "",
        "Generated by `python -m hw.synth` (`make synth`) from `reports/synth/*.json`; do not "
        "edit. Yosys `synth_xilinx -family xcup` netlists walked by `flow/timing.py`; the rule "
        f"and its delays: `docs/timing.md`. At {model.clock_mhz:g} MHz (period "
        f"{model.period:.3f} ns) a path of LUTs only may have at most {model.max_lut_levels} "
        f"LUT levels, a carry chain behind one LUT level at most {model.max_carry_bits} bits; "
        "the verdict compares the critical path's estimate with the period; the clock it "
        "meets is the one whose period holds that estimate (rounded down).",
        "",
        "| kernel | parameter set | LUT levels | carry bits | cells on path | estimate (ns) "
        "| start | end | max fanout | deepest (LUT levels) | longest carry chain (bits) "
        "| Yosys (s) | verdict | clock it meets (MHz) |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: "
        "| --- | ---: |",
    ]
    parameter_rows, details = [], []
    for report in reports:
        kernel = report["kernel"]
        parameters = report.get("parameters") or {}
        label = parameters.get("set", "unknown")
        values = ", ".join(f"`{k}={v}`" for k, v in parameters.get("values", {}).items())
        if not values:
            values = ("the defaults of `synthesis_configuration()` (the module has no "
                      "`synthesis_parameters()`)" if parameters else "not recorded")
        parameter_rows.append(f"| {kernel} | {label} | {values} |")
        timing = report.get("timing")
        path = timing and timing["critical_path"]
        if not path:
            why = ("no timing proxy (report older than flow/timing.py: synthesise again)"
                   if timing is None else timing["verdict"])
            lines.append(f"| {kernel} | {label} | " + " | ".join(["–"] * 10)
                         + f" | {why} | – |")
            continue
        deepest = timing["deepest_path"]
        verdict = "**breaks**" if timing["verdict"] == "breaks" else timing["verdict"]
        lines.append(
            f"| {kernel} | {label} | {path['lut_levels']} | {path['carry_bits']} | "
            f"{path['cells']} | {path['estimate_ns']:.2f} | `{path['start']}` | "
            f"`{path['end']}` | {path['max_fanout']:,} | {deepest['lut_levels']} | "
            f"{timing['longest_carry_chain']['bits']} | {report.get('seconds', '–')} | "
            f"{verdict} | {clock_it_meets(path['estimate_ns'])} |")
        if timing.get("violations"):
            details += [
                "", f"### {kernel} ({label} set): {timing['breaking_signals']} signals break "
                f"the rule", "", "| end | signals alike | LUT levels | carry bits | estimate (ns) "
                "| start |", "| --- | ---: | ---: | ---: | ---: | --- |",
                *(f"| `{v['end']}` | {v['signals_alike']} | {v['lut_levels']} | "
                  f"{v['carry_bits']} | {v['estimate_ns']:.2f} | `{v['start']}` |"
                  for v in timing["violations"])]
    breaking = [r["kernel"] for r in reports
                if (r.get("timing") or {}).get("verdict") == "breaks"]
    lines += ["", "Breaking the rule: " + (", ".join(breaking) if breaking else "none") + "."]
    if details:
        lines += ["", "## Where to pipeline", "",
                  "Per kernel, the worst path into each kind of register or port that breaks "
                  "the rule, worst first (at most "
                  f"{VIOLATIONS_LISTED}): bit indices dropped, and signals that differ only in "
                  "digits (`mul3.s3_lost`, `mul9.s3_lost`: replicated lanes) are one kind, "
                  "counted under *signals alike*.", *details]
    lines += ["", "## Parameter sets", "",
              "`synthesis`: the kernel's `synthesis_parameters()`; `quick`: the smaller set of "
              "`python -m hw.synth --quick` (`flow/synth.py`), same logic per pipeline stage "
              "but fewer lanes: width-dependent depth (wide multiplexers, priority encoders) "
              "can be larger at the full set.", "",
              "| kernel | set | parameters |", "| --- | --- | --- |", *parameter_rows, ""]
    return "\n".join(lines)
