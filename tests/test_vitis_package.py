"""The RTL-kernel packaging files (``boards.vitis``, ``boards.slash``), written without Vivado,
Vitis or SLASH and checked as text: kernel.xml, package_xo.tcl (AXI4 parameters, register map,
integrity checks), the link configurations (every port of a memory on one memory range, for
the U55C's v++ and the V80's slashkit), build.sh; and the register table of docs/vitis.md
against ``hw.lib.axi_lite.register_map``."""

import os
import re
from xml.etree import ElementTree

import pytest

from boards import board
from boards.vitis import (
    CONTROL_REGISTER_NAMES,
    LINK_TARGETS,
    link_config,
    register_table,
    write_vitis_package,
)
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
#: Two memories: the I/O ports share one, the logits have their own.
SPLIT = KernelInterface(
    kernel_name="split", top="split",
    memory_ports=[MemoryPort("m_axi_in", 256, "read", memory="io"),
                  MemoryPort("m_axi_out", 256, "write", memory="io"),
                  MemoryPort("m_axi_logits", 512, "read", max_burst=16, memory="logits")])
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


def link_memories(text: str) -> dict[str, str]:
    """``sp=`` lines of a link configuration (v++ or slashkit): port -> memory range."""
    return dict(re.findall(r"^sp=\w+\.(\w+):(\S+)$", text, re.MULTILINE))


def test_u55c_link_config_puts_every_port_of_a_memory_on_one_range(package):
    text = package.link_configs["alveo-u55c"].read_text()
    assert re.findall(r"^\[(\w+)\]$", text, re.MULTILINE) == ["connectivity", "clock"]
    assert re.findall(r"^nk=.*$", text, re.MULTILINE) == ["nk=dataflow:1:dataflow_1"]
    assert link_memories(text) == {"m_axi_io": "HBM[0:31]", "m_axi_hidden": "HBM[0:31]",
                                   "m_axi_logits": "HBM[0:31]"}
    assert f"\nfreqHz={round(board('alveo-u55c').clock_mhz * 1e6)}:dataflow_1.ap_clk\n" in text


def test_v80_link_config_is_slashs(package):
    """SLASH's syntax (linker/slashkit/parser/config_parser.py): instances `<kernel>_0`,
    `sp=<instance>.<port>:<HBM<n>|MEM|...>`, a `[clock]` block of `krnl=` and `freqhz=`."""
    text = package.link_configs["alveo-v80"].read_text()
    assert re.findall(r"^\[(\w+)\]$", text, re.MULTILINE) == ["connectivity", "clock"]
    assert re.findall(r"^nk=.*$", text, re.MULTILINE) == ["nk=dataflow:1:dataflow_0"]
    assert re.findall(r"^sp=(\w+)\.", text, re.MULTILINE) == ["dataflow_0"] * 3
    assert set(link_memories(text).values()) == {"MEM"}
    assert text.endswith(f"\n[clock]\nkrnl=dataflow_0\n"
                         f"freqhz={round(board('alveo-v80').clock_mhz * 1e6)}\n")
    assert "HBM[" not in text and "freqHz" not in text


@pytest.mark.parametrize("name", BOARDS)
@pytest.mark.parametrize("interface", [EXAMPLE, SPLIT], ids=["one memory", "two memories"])
def test_ports_that_share_data_map_to_one_range(name, interface):
    """Every port of a memory on the same range; on the U55C distinct memories on disjoint
    channel ranges (SLASH's MEM is one range over all of HBM: memories share it)."""
    ranges = link_memories(link_config(interface, name))
    assert set(ranges) == {port.name for port in interface.memory_ports}
    by_memory = {memory: {ranges[port.name] for port in ports}
                 for memory, ports in interface.memories.items()}
    assert all(len(targets) == 1 for targets in by_memory.values()), by_memory
    if name == "alveo-u55c":
        channels = [set(range(int(a), int(b or a) + 1)) for (a, b) in
                    (re.fullmatch(r"HBM\[(\d+)(?::(\d+))?\]", target).groups()
                     for (target,) in by_memory.values())]
        assert set.union(*channels) == set(range(LINK_TARGETS[name].hbm_channels))
        assert sum(map(len, channels)) == LINK_TARGETS[name].hbm_channels  # disjoint


def test_two_memories_split_the_u55c_channels():
    assert link_memories(link_config(SPLIT, "alveo-u55c")) == {
        "m_axi_in": "HBM[0:15]", "m_axi_out": "HBM[0:15]", "m_axi_logits": "HBM[16:31]"}


def tcl_registers(tcl: str) -> list[tuple[str, int, int, str]]:
    """``add_register`` lines of package_xo.tcl: (name, offset, bits, pointer's interface)."""
    return [(name, int(offset, 16), int(bits), busif) for name, offset, bits, busif in
            re.findall(r"^set reg \[add_register \$addr_block (\w+) (0x[0-9A-F]+) (\d+) "
                       r"[\w-]+ \{[^{}]*\}(?: (\w+))?\]$", tcl, re.MULTILINE)]


def test_package_script_registers_are_kernel_xml_and_register_map(package):
    """The register map of package_xo.tcl: one `ipx::add_register` per row of the register
    map, with kernel.xml's names, offsets and sizes for the arguments and each pointer bound
    to its m_axi interface; CTRL's fields at hw.lib.axi_lite's bits."""
    tcl = package.package_tcl.read_text()
    rows = register_map(EXAMPLE.arguments)
    registers = tcl_registers(tcl)
    assert [(name, offset, bits) for name, offset, bits, _ in registers] == [
        (CONTROL_REGISTER_NAMES.get(row.name, row.name), row.offset, row.bits) for row in rows]
    assert [name for name, *_ in registers[:4]] == ["CTRL", "GIER", "IP_IER", "IP_ISR"]
    args = [arg.attrib for arg in ElementTree.parse(package.kernel_xml).getroot().iter("arg")]
    assert [(name, offset, bits // 8) for name, offset, bits, _ in registers[4:]] == [
        (a["name"], int(a["offset"], 16), int(a["size"], 16)) for a in args]
    assert [busif or "s_axi_control" for *_, busif in registers[4:]] == [a["port"] for a in args]
    fields = re.findall(r"^add_field \$reg (\w+) (\d+) 1 ([\w-]+) ", tcl, re.MULTILINE)
    assert fields == [("AP_START", "0", "read-write"), ("AP_DONE", "1", "read-only"),
                      ("AP_IDLE", "2", "read-only"), ("AP_READY", "3", "read-only"),
                      ("AP_CONTINUE", "4", "write-only"), ("AUTO_RESTART", "7", "read-write")]
    assert "set_property range 0x1000 $addr_block" in tcl
    assert ("set_property slave_memory_map_ref s_axi_control "
            "[ipx::get_bus_interfaces s_axi_control -of_objects $core]") in tcl


def tcl_bus_parameters(tcl: str) -> dict[str, dict[str, str]]:
    """``set_bus_parameters`` lines of package_xo.tcl: interface -> parameter -> value."""
    found = {}
    for busif, pairs in re.findall(r"^set_bus_parameters \$core (\w+) \{([^{}]*)\}$", tcl,
                                   re.MULTILINE):
        words = pairs.split()
        found[busif] = dict(zip(words[::2], words[1::2], strict=True))
    return found


def test_package_script_axi_parameters_and_integrity_check():
    tcl = write_tcl(SPLIT)
    parameters = tcl_bus_parameters(tcl)
    common = {"PROTOCOL": "AXI4", "ID_WIDTH": "0", "HAS_BURST": "1", "HAS_LOCK": "0",
              "HAS_CACHE": "0", "HAS_PROT": "0", "HAS_QOS": "0", "HAS_REGION": "0",
              "SUPPORTS_NARROW_BURST": "0"}
    assert parameters == {
        "m_axi_in": {**common, "READ_WRITE_MODE": "READ_ONLY", "HAS_WSTRB": "0",
                     "HAS_BRESP": "0", "HAS_RRESP": "1", "MAX_BURST_LENGTH": "1",
                     "NUM_READ_OUTSTANDING": "16"},
        "m_axi_out": {**common, "READ_WRITE_MODE": "WRITE_ONLY", "HAS_WSTRB": "1",
                      "HAS_BRESP": "1", "HAS_RRESP": "0", "MAX_BURST_LENGTH": "1",
                      "NUM_WRITE_OUTSTANDING": "16"},
        "m_axi_logits": {**common, "READ_WRITE_MODE": "READ_ONLY", "HAS_WSTRB": "0",
                         "HAS_BRESP": "0", "HAS_RRESP": "1", "MAX_BURST_LENGTH": "16",
                         "NUM_READ_OUTSTANDING": "16"}}
    # The checks run on the finished core, before it is saved and packaged.
    order = ["set_bus_parameters $core m_axi_in", "set reg [add_register $addr_block CTRL",
             "ipx::update_checksums $core", "ipx::check_integrity -kernel $core",
             "ipx::check_integrity -xrt $core", "ipx::save_core $core", "package_xo -force"]
    positions = [tcl.index(line) for line in order]
    assert positions == sorted(positions)


def write_tcl(interface) -> str:
    from boards.vitis import package_xo_tcl

    return package_xo_tcl(interface, verilog="top.v", part="xcu55c-fsvh2892-2L-e")


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
    assert ('alveo-u55c) tool=vitis; '
            'platform="${PLATFORM_ALVEO_U55C:-xilinx_u55c_gen3x16_xdma_3_202210_1}"') in script
    assert 'alveo-v80) tool=slash; platform="${SLASH_PLATFORM_ALVEO_V80:-hw}"' in script
    assert "amd_v80_gen5x8_25.1" not in script.split("set -e")[1]  # not a v++ platform
    assert script.count("v++ --link") == 1 and script.count('--config "link_$board.cfg"') == 2
    assert ('"${SLASHKIT:-slashkit}" link --config "link_$board.cfg" --kernels '
            'ip/component.xml \\\n            --platform "$platform" --out '
            '"$board/dataflow.vbin"') in script


def test_a_single_board_by_name(tmp_path):
    verilog = tmp_path / "top.v"
    verilog.write_text("")
    files = write_vitis_package(tmp_path / "out", EXAMPLE, verilog_file=verilog,
                                boards="alveo-u55c")
    assert list(files.link_configs) == ["alveo-u55c"]
    assert "-part xcu55c-fsvh2892-2L-e" in files.package_tcl.read_text()
    script = files.build_sh.read_text()
    assert "slashkit" not in script and "tool=vitis" in script and 'if [ "$tool"' not in script


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
    (lambda: MemoryPort("m_axi_x", id_width=17),
     "`m_axi_x.id_width` must be between 0 and 16, not 17"),
    (lambda: MemoryPort("m_axi_x", max_burst=3), "`m_axi_x.max_burst` must be a power of two, "
                                                 "not 3"),
    (lambda: MemoryPort("m_axi_x", outstanding=0),
     "`m_axi_x.outstanding` must be between 1 and 256, not 0"),
    (lambda: MemoryPort("m_axi_x", memory="HBM[0]"),
     "`m_axi_x.memory` must be a Verilog-safe identifier, not 'HBM[0]'"),
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
    (lambda: KernelInterface("k", "k", [], control_protocol="ap_ctrl_none"),
     "`control_protocol` must be one of 'ap_ctrl_hs', 'ap_ctrl_chain', 'user_managed', not "
     "'ap_ctrl_none'"),
])
def test_bad_interfaces_raise(build, message):
    with pytest.raises(ParameterError) as error:
        build()
    assert str(error.value) == message


def test_bad_boards_and_too_many_memories(tmp_path):
    with pytest.raises(ValueError, match="`boards` must name at least one board, not none"):
        write_vitis_package(tmp_path, EXAMPLE, verilog_file=tmp_path / "x.v", boards=[])
    many = KernelInterface("k", "k", [MemoryPort(f"m{i}", memory=f"m{i}") for i in range(33)])
    with pytest.raises(ValueError, match="must name at most 32 memories"):
        link_config(many, "alveo-u55c")
    assert link_config(many, "alveo-v80").count("\nsp=") == 33
    ports = KernelInterface("k", "k", [MemoryPort(f"m{i}") for i in range(33)])
    assert link_config(ports, "alveo-u55c").count(":HBM[0:31]\n") == 33


def test_docs_register_table_matches_register_map():
    text = (REPO_ROOT / "docs" / "vitis.md").read_text()
    begin, end = "<!-- register table: begin -->\n", "<!-- register table: end -->"
    assert begin in text and end in text, "docs/vitis.md lost its register table markers"
    table = text.split(begin, 1)[1].split(end, 1)[0]
    assert table == register_table(EXAMPLE), \
        "docs/vitis.md's register table is stale: paste boards.vitis.register_table(EXAMPLE)"
