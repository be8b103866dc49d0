"""Which registers the reset net reaches (issue 35, item 2; docs/timing.md, "The reset net"):
datapath registers declared ``reset_less`` stay without a reset through Amaranth's RTLIL and
Yosys (``opt_dff`` finds no synchronous reset on them), control registers keep theirs. Checked
on ``RegisterSlice`` (payloads are datapath, valid flags control), on the float cores (every
stage is datapath: the stream wrapper around them holds the valid flags) and on the fused
verify's logit lane (its stages are datapath but for the ``valid`` flag beside them)."""

import pytest

from flow.reset_net import flip_flops as flip_flop_cells
from flow.reset_net import main as reset_net_main
from hw.kernels.tree_verify_lane import LogitLane
from hw.lib.float32 import Float32Add, Float32Multiply
from hw.lib.float32_divide import Float32Divide
from hw.lib.stream import RegisterSlice


def flip_flops(component, work) -> dict:
    """``{register name: Yosys cell type}`` of ``component`` (``flow.reset_net.flip_flops``:
    ``$sdff`` a synchronous reset, ``$dff`` none)."""
    return {name: kind for name, kind, _, _ in flip_flop_cells(component, work)}


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


def test_reset_net_counts_the_valid_flags_only(tmp_path):
    cells = flip_flop_cells(RegisterSlice(12), tmp_path)
    assert sum(bits for *_, bits, on_net in cells if on_net) == 2, cells
    assert sum(bits for *_, bits, _ in cells) == 2 * 12 + 2, cells


def test_reset_net_command_refuses_a_negative_count(capsys):
    with pytest.raises(SystemExit) as exit_info:
        reset_net_main(["--top", "-1"])
    assert exit_info.value.code == 2
    assert "--top must be 0 or more, not -1" in capsys.readouterr().err
