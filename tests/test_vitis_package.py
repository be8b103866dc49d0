"""The Vitis RTL-kernel packaging files (``boards.vitis``), written without Vivado or Vitis, and
the register table of docs/vitis.md against ``hw.lib.axi_lite.register_map``."""

import os
import re
from xml.etree import ElementTree

import pytest

from boards import board
from boards.vitis import VITIS_TARGETS, link_config, register_table, write_vitis_package
from hw.lib.axi_lite import register_map
from hw.lib.kernel_interface import HIDDEN_GATHER_MIN_WIDTH, KernelInterface, MemoryPort
from hw.lib.params import ParameterError
from sim.harness import REPO_ROOT

#: The example interface of docs/vitis.md.
EXAMPLE = KernelInterface(
    kernel_name="dataflow",
    top="dataflow",
    memory_ports=[
        MemoryPort("m_axi_io", 512, "readwrite", argument="io"),
        MemoryPort("m_axi_hidden", 512, "read", argument="hidden",
                   min_data_width=HIDDEN_GATHER_MIN_WIDTH),
        MemoryPort("m_axi_logits", 512, "read", argument="logits"),
    ],
    scalars=[("batch_size", 32), ("seed", 64)],
)
BOARDS = ["alveo-v80", "alveo-u55c"]


@pytest.fixture
def package(tmp_path):
    verilog = tmp_path / "rtl" / "dataflow.v"
    verilog.parent.mkdir()
    verilog.write_text("module dataflow(); endmodule\n")
    return write_vitis_package(tmp_path / "vitis", EXAMPLE, verilog_file=verilog,
                               boards=[board(name) for name in BOARDS])


def test_every_file_is_written(package):
    assert sorted(path.name for path in package.directory.iterdir()) == [
        "build.sh", "kernel.xml", "link_alveo-u55c.cfg", "link_alveo-v80.cfg",
        "package_xo.tcl"]
    assert package.link_configs == {name: package.directory / f"link_{name}.cfg"
                                    for name in BOARDS}
    assert os.access(package.build_sh, os.X_OK)
    assert package.xo == package.directory / "dataflow.xo"


def test_kernel_xml_ports_args_and_offsets(package):
    root = ElementTree.parse(package.kernel_xml).getroot()
    assert (root.tag, root.get("versionMajor"), root.get("versionMinor")) == ("root", "1", "6")
    (kernel,) = root.findall("kernel")
    assert {key: kernel.get(key) for key in ("name", "language", "vlnv", "interrupt",
                                             "hwControlProtocol", "workGroupSize")} == {
        "name": "dataflow", "language": "ip_c", "vlnv": "eagletree:kernel:dataflow:1.0",
        "interrupt": "true", "hwControlProtocol": "ap_ctrl_chain", "workGroupSize": "1"}
    ports = {port.get("name"): port.attrib for port in kernel.find("ports")}
    assert ports["s_axi_control"] == {
        "name": "s_axi_control", "mode": "slave", "range": "0x1000", "dataWidth": "32",
        "portType": "addressable", "base": "0x0"}
    for name in ("m_axi_io", "m_axi_hidden", "m_axi_logits"):
        assert ports[name]["mode"] == "master" and ports[name]["dataWidth"] == "512"
        assert ports[name]["range"] == "0xFFFFFFFFFFFFFFFF"
    args = [arg.attrib for arg in kernel.find("args")]
    assert [(a["name"], a["id"], a["port"], a["offset"], a["size"], a["addressQualifier"],
             a["type"]) for a in args] == [
        ("io", "0", "m_axi_io", "0x010", "0x8", "1", "int*"),
        ("hidden", "1", "m_axi_hidden", "0x018", "0x8", "1", "int*"),
        ("logits", "2", "m_axi_logits", "0x020", "0x8", "1", "int*"),
        ("batch_size", "3", "s_axi_control", "0x028", "0x4", "0", "uint"),
        ("seed", "4", "s_axi_control", "0x030", "0x8", "0", "ulong"),
    ]
    rows = register_map(EXAMPLE.arguments)[4:]
    assert [int(a["offset"], 16) for a in args] == [row.offset for row in rows]
    assert [int(a["size"], 16) * 8 for a in args] == [row.bits for row in rows]


@pytest.mark.parametrize("name", BOARDS)
def test_link_config_spreads_the_ports_over_hbm(package, name):
    text = package.link_configs[name].read_text()
    sections = re.findall(r"^\[(\w+)\]$", text, re.MULTILINE)
    assert sections == ["connectivity", "clock"]
    assert re.findall(r"^nk=.*$", text, re.MULTILINE) == ["nk=dataflow:1:dataflow_1"]
    sp = re.findall(r"^sp=dataflow_1\.(\w+):HBM\[(\d+)\]$", text, re.MULTILINE)
    channels = VITIS_TARGETS[name].hbm_channels
    stride = channels // 3
    assert sp == [("m_axi_io", "0"), ("m_axi_hidden", str(stride)),
                  ("m_axi_logits", str(2 * stride))]
    assert len(re.findall(r"^sp=", text, re.MULTILINE)) == len(EXAMPLE.memory_ports)
    hz = round(board(name).clock_mhz * 1e6)
    assert f"\nfreqHz={hz}:dataflow_1.ap_clk\n" in text


def test_package_script_and_build_script(package):
    tcl = package.package_tcl.read_text()
    assert "create_project -in_memory -part xcv80-lsva4737-2MHP-e-S" in tcl
    assert "read_verilog [file normalize [file join $script_dir ../rtl/dataflow.v]]" in tcl
    assert "ipx::package_project" in tcl and "ipx::save_core" in tcl
    for interface in ("s_axi_control", "m_axi_io", "m_axi_hidden", "m_axi_logits"):
        assert f"ipx::associate_bus_interfaces -busif {interface} -clock ap_clk $core" in tcl
    assert "ipx::associate_bus_interfaces -clock ap_clk -reset ap_rst_n $core" in tcl
    assert "set_property value ACTIVE_LOW $polarity" in tcl
    assert ("package_xo -force -xo_path $xo_path -kernel_name $kernel -ip_directory $ip_dir "
            "\\\n    -kernel_xml [file join $script_dir kernel.xml]") in tcl
    script = package.build_sh.read_text()
    assert script.startswith("#!/bin/sh\n")
    assert "vivado -mode batch -nojournal -log package_xo.log -source package_xo.tcl" in script
    assert 'platform="${PLATFORM_ALVEO_U55C:-xilinx_u55c_gen3x16_xdma_3_202210_1}"' in script
    assert 'platform="${PLATFORM_ALVEO_V80:-amd_v80_gen5x8_25.1}"' in script
    assert script.count("v++ --link") == 1 and '--config "link_$board.cfg"' in script


def test_a_single_board_by_name(tmp_path):
    verilog = tmp_path / "top.v"
    verilog.write_text("")
    files = write_vitis_package(tmp_path / "out", EXAMPLE, verilog_file=verilog,
                                boards="alveo-u55c")
    assert list(files.link_configs) == ["alveo-u55c"]
    assert "-part xcu55c-fsvh2892-2L-e" in files.package_tcl.read_text()


@pytest.mark.parametrize(("build", "message"), [
    (lambda: MemoryPort("m_axi_x", 48), "`m_axi_x.data_width` must be a power of two, not 48"),
    (lambda: MemoryPort("m_axi_x", 2048),
     "`m_axi_x.data_width` must be between 32 and 1024, not 2048"),
    (lambda: MemoryPort("m_axi_x", 16), "`m_axi_x.data_width` must be between 32 and 1024, "
                                        "not 16"),
    (lambda: MemoryPort("m_axi_hidden", 256, min_data_width=HIDDEN_GATHER_MIN_WIDTH),
     "`m_axi_hidden.data_width` must be between 512 and 1024, not 256"),
    (lambda: MemoryPort("m_axi_x", address_width=32),
     "`m_axi_x.address_width` must be between 64 and 64, not 32"),
    (lambda: MemoryPort("m_axi_x", access="rw"),
     "`m_axi_x.access` must be one of 'read', 'write', 'readwrite', not 'rw'"),
    (lambda: MemoryPort("m-axi"), "`name` must be a Verilog-safe identifier, not 'm-axi'"),
    (lambda: KernelInterface("k", "k", [MemoryPort("a"), MemoryPort("a")]),
     "`memory_ports` names must be unique and not a control, clock or reset name, not 'a'"),
    (lambda: KernelInterface("k", "k", [MemoryPort("a")], scalars=[("a_ptr", 32)]),
     "`arguments[1]` name must be unique and not one of the control ports' names, not "
     "'a_ptr'"),
    (lambda: KernelInterface("k", "k", [], scalars=[("n", 16)]),
     "`arguments[0]` bits must be 32 or 64, not 16"),
    (lambda: KernelInterface("k", "k", [], control_address_width=3),
     "`control_address_width` must be between 4 and 32, not 3"),
])
def test_bad_interfaces_raise(build, message):
    with pytest.raises(ParameterError) as error:
        build()
    assert str(error.value) == message


def test_bad_boards_and_too_many_ports(tmp_path):
    with pytest.raises(ValueError, match="`boards` must name at least one board, not none"):
        write_vitis_package(tmp_path, EXAMPLE, verilog_file=tmp_path / "x.v", boards=[])
    wide = KernelInterface("k", "k", [MemoryPort(f"m{i}") for i in range(33)])
    with pytest.raises(ValueError, match="`memory_ports` must be at most 32 on alveo-u55c"):
        link_config(wide, "alveo-u55c")
    assert link_config(wide, "alveo-v80").count("\nsp=") == 33


def test_docs_register_table_matches_register_map():
    text = (REPO_ROOT / "docs" / "vitis.md").read_text()
    begin, end = "<!-- register table: begin -->\n", "<!-- register table: end -->"
    assert begin in text and end in text, "docs/vitis.md lost its register table markers"
    table = text.split(begin, 1)[1].split(end, 1)[0]
    assert table == register_table(EXAMPLE), \
        "docs/vitis.md's register table is stale: paste boards.vitis.register_table(EXAMPLE)"
