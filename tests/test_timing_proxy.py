"""The timing proxy (``flow.timing``, docs/timing.md): logic depth of a synthesised netlist
against the 300 MHz rule. Two small components through the real Yosys flow (a few seconds
each), and hand-written netlists for the carry, block RAM and multiplexer accounting."""

import json

import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from flow.common import REPO_ROOT
from flow.synth import reanalyse, synthesize, write_timing_table
from flow.timing import RULE, analyse, render_table


class RegisteredLogic(wiring.Component):
    """Two input registers, ``stages`` dependent ``(x + b) ^ (x >> 1)`` steps (or one AND
    when ``stages`` is 0), and an output register."""

    a: In(8)
    b: In(8)
    o: Out(8)

    def __init__(self, stages: int):
        self.stages = stages
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        first, second = Signal(8, name="first"), Signal(8, name="second")
        result = Signal(8, name="result")
        m.d.sync += [first.eq(self.a), second.eq(self.b)]
        x = first if self.stages else first & second
        for index in range(self.stages):
            step = Signal(8, name=f"step{index}")
            m.d.comb += step.eq((x + second) ^ (x >> 1))
            x = step
        m.d.sync += result.eq(x)
        m.d.comb += self.o.eq(result)
        return m


def _work_dir(stages: int):
    # YoWASP cannot see absolute /tmp paths: Yosys works under the repository's build/.
    return REPO_ROOT / "build" / "pytest-timing" / f"timing_proxy_{stages}"


def _synthesise(out, stages: int) -> dict:
    return synthesize(RegisteredLogic(stages), name=f"timing_proxy_{stages}", report_dir=out,
                      log=lambda _: None, work_dir=_work_dir(stages),
                      parameters={"set": "test", "values": {"stages": stages}})


@pytest.fixture(scope="module")
def synthesised(tmp_path_factory):
    """The report folder and the timing proxy of the deep (8 stages) and the shallow (0)
    component, synthesised once for the module."""
    out = tmp_path_factory.mktemp("synth")
    return out, {stages: _synthesise(out, stages)["timing"] for stages in (8, 0)}


def test_a_deep_path_breaks_the_rule(synthesised):
    deep = synthesised[1][8]
    path = deep["critical_path"]
    assert deep["verdict"] == "breaks"
    assert path["lut_levels"] > RULE.max_lut_levels
    assert path["estimate_ns"] > RULE.period
    assert path["carry_bits"] > 0 and path["cell_types"]["CARRY4"] > 0
    assert path["start"] in {f"{register}[{bit}]" for register in ("first", "second")
                             for bit in range(8)}
    assert path["end"].startswith("result[")
    assert deep["breaking_signals"] == 1  # result[0] ... result[7]
    assert [(v["end"], v["signals_alike"]) for v in deep["violations"]] == [(path["end"], 1)]


def test_a_shallow_path_meets_the_rule(synthesised):
    shallow = synthesised[1][0]
    path = shallow["critical_path"]
    assert shallow["verdict"] == "meets"
    assert (path["lut_levels"], path["carry_bits"], path["cells"]) == (1, 0, 1)
    assert path["estimate_ns"] == pytest.approx(RULE.register_overhead + RULE.lut_level)
    assert shallow["violations"] == []


def test_the_report_records_its_parameters_and_can_be_analysed_again(synthesised):
    out, timings = synthesised
    report_path = out / "timing_proxy_8.json"
    report = json.loads(report_path.read_text())
    assert report["parameters"] == {"set": "test", "values": {"stages": 8}}
    report_path.write_text(json.dumps({**report, "timing": None}))
    again = reanalyse("timing_proxy_8", _work_dir(8))
    assert again["timing"]["critical_path"] == timings[8]["critical_path"]
    assert json.loads(report_path.read_text()) == again


def test_the_table_gives_verdicts_and_where_to_pipeline(synthesised):
    out, _ = synthesised
    table_path = out / "timing_proxy.md"
    assert write_timing_table(out, table_path) == ["timing_proxy_8 (test set)"]
    table = table_path.read_text()
    assert "| timing_proxy_0 | test | 1 | 0 | 1 |" in table
    assert "**breaks** |" in table and "`stages=8`" in table
    assert "### timing_proxy_8 (test set): 1 signals break the rule" in table


class Netlist:
    """A hand-written Yosys JSON netlist: cells between numbered bits."""

    def __init__(self):
        self.cells, self.ports, self.netnames, self.bits = {}, {}, {}, 1

    def bit(self, name: str | None = None) -> int:
        self.bits += 1
        if name:
            self.netnames[name] = {"hide_name": 0, "bits": [self.bits]}
        return self.bits

    def cell(self, kind: str, outputs: dict, inputs: dict, **parameters) -> None:
        directions = {pin: "output" for pin in outputs} | {pin: "input" for pin in inputs}
        self.cells[f"c{len(self.cells)}"] = {
            "type": kind, "parameters": parameters, "port_directions": directions,
            "connections": {pin: list(bits) for pin, bits in (outputs | inputs).items()}}

    def register(self, d: int, name: str) -> int:
        q = self.bit(name)
        self.cell("FDRE", {"Q": [q]}, {"D": [d], "C": [0], "CE": ["1"], "R": ["0"]})
        return q

    def lut(self, *inputs: int, kind: str = "LUT2") -> int:
        out = self.bit()
        self.cell(kind, {"O": [out]}, {f"I{i}": [bit] for i, bit in enumerate(inputs)})
        return out

    def carry_chain(self, first: int, cells: int) -> int:
        """``cells`` cascaded CARRY4 fed by ``first`` on ``S[0]``; returns the top sum bit."""
        carry = "0"
        for _ in range(cells):
            co, o = [self.bit() for _ in range(4)], [self.bit() for _ in range(4)]
            self.cell("CARRY4", {"CO": co, "O": o},
                      {"CI": [carry], "CYINIT": ["0"], "DI": ["0"] * 4, "S": [first] * 4})
            carry = co[-1]
        return o[-1]

    def json(self) -> dict:
        return {"modules": {"top": {"attributes": {"top": 1}, "ports": self.ports,
                                    "cells": self.cells, "netnames": self.netnames}}}


def _lut_chain(levels: int) -> dict:
    net = Netlist()
    x = net.register(net.bit(), "start")
    for _ in range(levels):
        x = net.lut(x)
    net.register(x, "end")
    return analyse(net.json())


def test_the_rule_allows_six_lut_levels_at_300_mhz():
    assert RULE.max_lut_levels == 6
    assert _lut_chain(6)["verdict"] == "meets"
    seven = _lut_chain(7)
    assert seven["verdict"] == "breaks"
    assert seven["critical_path"]["lut_levels"] == 7
    assert (seven["critical_path"]["start"], seven["critical_path"]["end"]) == ("start", "end")


@pytest.mark.parametrize("cells, verdict", [(16, "meets"), (RULE.max_carry_bits // 4 + 1,
                                                             "breaks")])
def test_carry_chains_count_bits_against_the_rule(cells, verdict):
    net = Netlist()
    top = net.carry_chain(net.lut(net.register(net.bit(), "a")), cells)
    net.register(top, "sum")
    result = analyse(net.json())
    assert result["verdict"] == verdict
    assert result["critical_path"]["carry_bits"] == 4 * cells
    assert result["critical_path"]["lut_levels"] == 1
    assert result["longest_carry_chain"] == {"bits": 4 * cells, "cells": cells, "signal": None}


@pytest.mark.parametrize("output_register, launch", [(0, RULE.launch_bram),
                                                     (1, RULE.launch_bram_reg)])
def test_block_ram_outputs_start_late_without_their_output_register(output_register, launch):
    net = Netlist()
    data = net.bit("table_data")
    net.cell("RAMB36E2", {"DOUTADOUT": [data]}, {"ADDRARDADDR": [net.bit()], "CLKARDCLK": [0]},
             DOA_REG=f"{output_register:032b}")
    net.register(net.lut(data), "looked_up")
    path = analyse(net.json())["critical_path"]
    assert path["estimate_ns"] == pytest.approx(
        RULE.clock_uncertainty + launch + RULE.lut_level + RULE.setup_ff)
    assert path["start"] == "table_data (RAMB36E2.DOUTADOUT)"


@pytest.mark.parametrize("levels, verdict", [(0, "meets"), (1, "meets"), (2, "breaks")])
def test_dsps_without_registers_are_one_multiply_stage(levels, verdict):
    """Two cascaded slices (a 24 x 24 multiply) behind ``levels`` LUT levels."""
    net = Netlist()
    x = net.register(net.bit(), "factor")
    for _ in range(levels):
        x = net.lut(x)
    low, high = net.bit(), net.bit("product")
    net.cell("DSP48E2", {"PCOUT": [low]}, {"A": [x], "CLK": [0], "CEA1": ["1"]})
    net.cell("DSP48E2", {"P": [high]}, {"PCIN": [low], "CLK": [0]})
    net.register(high, "product_q")
    path = analyse(net.json())["critical_path"]
    assert path["estimate_ns"] == pytest.approx(
        RULE.register_overhead + levels * RULE.lut_level + RULE.dsp + RULE.dsp_cascade)
    assert (path["start"], path["end"], path["cell_types"]["DSP48E2"]) == (
        "factor", "product_q", 2)
    assert analyse(net.json())["verdict"] == verdict


def test_replicated_registers_are_listed_once_per_kind():
    net = Netlist()
    start = net.register(net.bit(), "start")
    for lane in range(3):
        x = start
        for _ in range(7 + lane):
            x = net.lut(x)
        net.register(x, f"mul{lane}.s3_lost")
    net.register(net.lut(start), "fine")
    result = analyse(net.json())
    assert result["breaking_signals"] == 3
    assert result["violations"] == [{
        "estimate_ns": pytest.approx(RULE.register_overhead + 9 * RULE.lut_level),
        "lut_levels": 9, "carry_bits": 0, "start": "start", "end": "mul2.s3_lost",
        "signals_alike": 3}]


def test_wide_multiplexers_add_no_lut_level_and_loops_do_not_hang():
    net = Netlist()
    a, b = net.register(net.bit(), "a"), net.register(net.bit(), "b")
    wide = net.bit()
    net.cell("MUXF7", {"O": [wide]}, {"I0": [net.lut(a, kind="LUT6")],
                                      "I1": [net.lut(b, kind="LUT6")], "S": [a]})
    net.register(wide, "selected")
    loop_in = net.bit()
    net.cell("LUT1", {"O": [loop_in]}, {"I0": [net.lut(loop_in)]})
    result = analyse(net.json())
    path = result["critical_path"]
    assert (path["lut_levels"], path["muxes"], path["cells"]) == (1, 1, 2)
    assert result["combinational_loop_cells"] == 2


def test_a_report_without_the_proxy_is_listed_as_such():
    table = render_table([{"kernel": "score", "resources": {}}])
    assert "| score | unknown |" in table
    assert "no timing proxy (report older than flow/timing.py" in table
    assert "Breaking the rule: none." in table
