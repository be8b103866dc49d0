"""Vitis RTL-kernel packaging and the link configurations, written as text (no Vivado, Vitis
or SLASH needed to write them).

The kernel is described by ``hw.lib.kernel_interface.KernelInterface`` (what the hardware
exposes: its ``m_axi`` ports, which memory each one's data lives in, its scalar arguments and
its control registers, ``hw.lib.axi_lite.register_map(interface.arguments)``); this module
only renders it. ``write_vitis_package`` writes

* ``kernel.xml``: the RTL kernel description (ports, arguments and their register offsets;
  ``hwControlProtocol``: the interface's ``control_protocol``);
* ``package_xo.tcl``: Vivado packages the Verilog as an IP (bus interfaces associated with
  ``ap_clk``, ``ap_rst_n`` active-low, each ``m_axi`` interface's AXI4 parameters, the control
  register map), checks it (``ipx::check_integrity -kernel`` and ``-xrt``) and ``package_xo``
  makes ``<kernel>.xo`` from it and ``kernel.xml``;
* ``link_<board>.cfg``: one link configuration per board, by the board's ``LINK_TARGETS``
  entry: a ``v++ --link`` configuration (``VitisTarget``: the U55C) or a ``slashkit link``
  one (``boards.slash.SlashTarget``: the V80). Either has one compute unit, maps the ports of
  each memory (ports that share data) to one memory range, and sets the board's clock;
* ``build.sh``: ``vivado -mode batch -source package_xo.tcl``, then per board ``v++ --link``
  with the platform in ``$PLATFORM_<BOARD>`` or ``slashkit link`` on ``ip/component.xml``.

The layout of the files follows AMD's UG1393/UG1702 (RTL Kernel XML File, package_xo,
--connectivity and --clock options), the Vitis RTL-kernel examples (``package_kernel.tcl``)
and SLASH's linker; see docs/vitis.md.
"""

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from xml.etree import ElementTree

from boards.alveo import Board, board
from boards.slash import SlashTarget, connectivity_lines, slash_config
from hw.lib.axi_lite import (
    AP_CONTINUE,
    AP_DONE,
    AP_IDLE,
    AP_READY,
    AP_START,
    AUTO_RESTART,
    DATA_WIDTH,
)
from hw.lib.kernel_interface import KernelInterface

__all__ = ["VitisTarget", "LINK_TARGETS", "VitisPackage", "CONTROL_REGISTER_NAMES",
           "kernel_xml", "package_xo_tcl", "vitis_compute_unit", "vitis_memories",
           "link_config", "build_script", "register_table", "write_vitis_package"]


@dataclass(frozen=True)
class VitisTarget:
    """What the Vitis flow (``v++ --link``) needs of a board beyond its ``Board`` record.

    Attributes
    ----------
    platform : str
        Default ``v++ --platform`` (``build.sh`` reads ``$<platform_variable>`` first).
    platform_variable : str
        Environment variable that overrides ``platform``.
    hbm_channels : int
        HBM pseudo-channels (``HBM[0]`` .. ``HBM[hbm_channels - 1]``); the kernel's memories
        share them out as contiguous ranges (``vitis_memories``).
    note : str
        Where the figures come from, and what is unsure.
    """

    platform: str
    platform_variable: str
    hbm_channels: int
    note: str


#: Board name -> how its kernel is linked.
LINK_TARGETS = MappingProxyType({
    "alveo-u55c": VitisTarget(
        platform="xilinx_u55c_gen3x16_xdma_3_202210_1",
        platform_variable="PLATFORM_ALVEO_U55C",
        hbm_channels=32,
        note="The U55C's XRT platform; 16 GB of HBM2 in 32 pseudo-channels of 512 MB, every "
             "AXI port of the platform's HBM switch reaching any of them.",
    ),
    "alveo-v80": SlashTarget(
        shell="amd_v80_gen5x8_25.1",
        platform_variable="SLASH_PLATFORM_ALVEO_V80",
        hbm_channels=64,
        memory="MEM",
        note="No Vitis (.xpfm) platform for the V80: its shell is the AVED design "
             "amd_v80_gen5x8_25.1, which SLASH runs; slashkit links the IP's component.xml "
             "with sp=<instance>.<port>:HBM<n>|MEM over 64 HBM pseudo-channels (SLASH linker "
             "and memory model). Not tried: no Vivado, SLASH or card here.",
    ),
})

#: IP-XACT names of the four control registers (the names the AMD RTL-kernel examples give
#: them, and the ones SLASH's linker recognises as control and status registers).
CONTROL_REGISTER_NAMES = MappingProxyType({"control": "CTRL", "gier": "GIER", "ier": "IP_IER",
                                           "isr": "IP_ISR"})

#: The fields of CTRL: name, bit, IP-XACT access, description (``hw.lib.axi_lite``'s bits).
_CONTROL_FIELDS = (
    ("AP_START", AP_START, "read-write", "ap_start: set by the host, cleared by the kernel "
                                         "on ap_ready unless auto_restart"),
    ("AP_DONE", AP_DONE, "read-only", "ap_done: clear on read"),
    ("AP_IDLE", AP_IDLE, "read-only", "ap_idle"),
    ("AP_READY", AP_READY, "read-only", "ap_ready: clear on read"),
    ("AP_CONTINUE", AP_CONTINUE, "write-only", "ap_continue: a one-clock pulse, reads 0"),
    ("AUTO_RESTART", AUTO_RESTART, "read-write", "auto_restart"),
)

#: ``register_map`` access -> IP-XACT register access.
_ACCESS = {"RW": "read-write", "R/TOW": "read-write", "R": "read-only", "W": "write-only"}


def _target(record: Board) -> VitisTarget | SlashTarget:
    try:
        return LINK_TARGETS[record.name]
    except KeyError:
        raise ValueError(f"`boards` must be boards with a link target ("
                         f"{', '.join(LINK_TARGETS)}), not {record.name!r}") from None


def _boards(boards) -> list[Board]:
    if isinstance(boards, str | Board):
        boards = [boards]
    records = [item if isinstance(item, Board) else board(item) for item in boards]
    if not records:
        raise ValueError("`boards` must name at least one board, not none")
    for record in records:
        _target(record)
    return records


def kernel_xml(interface: KernelInterface) -> str:
    """The ``kernel.xml`` of ``interface`` (Vitis RTL kernel description, version 1.6)."""
    root = ElementTree.Element("root", versionMajor="1", versionMinor="6")
    kernel = ElementTree.SubElement(root, "kernel", {
        "name": interface.kernel_name, "language": "ip_c", "vlnv": interface.vlnv,
        "attributes": "", "preferredWorkGroupSizeMultiple": "0", "workGroupSize": "1",
        "interrupt": "true", "hwControlProtocol": interface.control_protocol,
    })
    ports = ElementTree.SubElement(kernel, "ports")
    ElementTree.SubElement(ports, "port", {
        "name": interface.control_port, "mode": "slave",
        "range": f"0x{1 << interface.control_address_width:X}", "dataWidth": str(DATA_WIDTH),
        "portType": "addressable", "base": "0x0",
    })
    for port in interface.memory_ports:
        ElementTree.SubElement(ports, "port", {
            "name": port.name, "mode": "master", "range": f"0x{(1 << port.address_width) - 1:X}",
            "dataWidth": str(port.data_width), "portType": "addressable", "base": "0x0",
        })
    args = ElementTree.SubElement(kernel, "args")
    pointers = {port.argument for port in interface.memory_ports}
    rows = interface.registers[4:]
    for index, row in enumerate(rows):
        pointer = row.name in pointers
        size = f"0x{row.bits // 8:X}"
        ElementTree.SubElement(args, "arg", {
            "name": row.name, "addressQualifier": "1" if pointer else "0", "id": str(index),
            "port": interface.port_of(row.name), "size": size, "offset": f"0x{row.offset:03X}",
            "type": "int*" if pointer else ("uint" if row.bits == 32 else "ulong"),
            "hostOffset": "0x0", "hostSize": size,
        })
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + \
        ElementTree.tostring(root, encoding="unicode") + "\n"


def _tcl_text(text: str) -> str:
    """``text`` as a braced Tcl word (braces and backslashes dropped: descriptions only)."""
    return "{" + "".join(c for c in text if c not in "{}\\") + "}"


def _register_map_tcl(interface: KernelInterface) -> str:
    """The ``ipx::add_register`` lines of ``interface``'s control registers, one per row of
    ``interface.registers`` (the offsets and sizes of ``kernel.xml`` and the hardware)."""
    i = interface
    pointers = {port.argument: port.name for port in i.memory_ports}
    lines = [
        f"set mem_map [ipx::add_memory_map -quiet {i.control_port} $core]",
        "set addr_block [ipx::add_address_block -quiet reg0 $mem_map]",
        f"set_property range 0x{1 << i.control_address_width:X} $addr_block",
        f"set_property width {DATA_WIDTH} $addr_block",
        "set_property usage register $addr_block",
    ]
    for row in i.registers:
        name = CONTROL_REGISTER_NAMES.get(row.name, row.name)
        busif = f" {pointers[row.name]}" if row.name in pointers else ""
        lines.append(f"set reg [add_register $addr_block {name} 0x{row.offset:03X} {row.bits} "
                     f"{_ACCESS[row.access]} {_tcl_text(row.description)}{busif}]")
        if row.name == "control":
            lines += [f"add_field $reg {field} {bit} 1 {access} {_tcl_text(text)}"
                      for field, bit, access, text in _CONTROL_FIELDS]
    lines.append(f"set_property slave_memory_map_ref {i.control_port} "
                 f"[ipx::get_bus_interfaces {i.control_port} -of_objects $core]")
    return "\n".join(lines)


def package_xo_tcl(interface: KernelInterface, *, verilog: str, part: str) -> str:
    """Vivado script that packages the Verilog (``verilog``, relative to the script) as an IP
    (bus interfaces on ``ap_clk``, the m_axi interfaces' AXI4 parameters, the control register
    map), checks it and packages it as ``<kernel>.xo`` with ``kernel.xml``; ``part`` is the
    in-memory project's part (the kernel itself is portable)."""
    i = interface
    associate = "\n".join(
        f"ipx::associate_bus_interfaces -busif {name} -clock {i.clock} $core"
        for name in [i.control_port, *(port.name for port in i.memory_ports)])
    bus_parameters = "\n".join(
        f"set_bus_parameters $core {port.name} {{"
        + " ".join(f"{name} {value}" for name, value in port.axi_parameters().items()) + "}"
        for port in i.memory_ports)
    return f"""\
# Package `{i.kernel_name}` (top module `{i.top}`) as a Vitis RTL kernel: {i.kernel_name}.xo.
# Generated by boards.vitis; run ./build.sh (vivado -mode batch -source package_xo.tcl).
set script_dir [file dirname [file normalize [info script]]]
set kernel {i.kernel_name}
set top {i.top}
set ip_dir [file join $script_dir ip]
set xo_path [file join $script_dir $kernel.xo]
file delete -force $ip_dir $xo_path

# A bus interface parameter, added where the packager did not infer it, as a constant.
proc set_bus_parameters {{core busif parameters}} {{
    set bif [ipx::get_bus_interfaces $busif -of_objects $core]
    foreach {{name value}} $parameters {{
        set parameter [ipx::get_bus_parameters $name -of_objects $bif]
        if {{$parameter eq ""}} {{
            set parameter [ipx::add_bus_parameter $name $bif]
        }}
        set_property value $value $parameter
        set_property value_source constant $parameter
    }}
}}

# A control register (offset, bits, access; an m_axi pointer names its interface).
proc add_register {{block name offset bits access description {{busif ""}}}} {{
    set reg [ipx::add_register -quiet $name $block]
    set_property address_offset $offset $reg
    set_property size $bits $reg
    set_property access $access $reg
    set_property description $description $reg
    if {{$busif ne ""}} {{
        set parameter [ipx::add_register_parameter -quiet ASSOCIATED_BUSIF $reg]
        set_property value $busif $parameter
    }}
    return $reg
}}

# A field of a control register.
proc add_field {{reg name offset bits access description}} {{
    set field [ipx::add_field $name $reg]
    set_property bit_offset $offset $field
    set_property bit_width $bits $field
    set_property access $access $field
    set_property description $description $field
    return $field
}}

create_project -in_memory -part {part}
read_verilog [file normalize [file join $script_dir {verilog}]]
set_property top $top [current_fileset]
update_compile_order -fileset sources_1

ipx::package_project -root_dir $ip_dir -vendor {i.vendor} -library {i.library} \\
    -taxonomy /KernelIP -import_files -set_current true
set core [ipx::current_core]
set_property name $kernel $core
set_property version {i.version} $core
set_property sdx_kernel true $core
set_property sdx_kernel_type rtl $core
set_property vitis_drc {{ctrl_protocol {i.control_protocol}}} $core
set_property ipi_drc {{ignore_freq_hz true}} $core
set_property auto_family_support_level level_2 $core

# Clock, active-low reset, interrupt, and every bus interface on ap_clk.
ipx::infer_bus_interface {i.clock} xilinx.com:signal:clock_rtl:1.0 $core
ipx::infer_bus_interface {i.reset} xilinx.com:signal:reset_rtl:1.0 $core
ipx::infer_bus_interface interrupt xilinx.com:signal:interrupt_rtl:1.0 $core
{associate}
ipx::associate_bus_interfaces -clock {i.clock} -reset {i.reset} $core
set reset_if [ipx::get_bus_interfaces {i.reset} -of_objects $core]
set polarity [ipx::get_bus_parameters POLARITY -of_objects $reset_if]
if {{$polarity eq ""}} {{
    set polarity [ipx::add_bus_parameter POLARITY $reset_if]
}}
set_property value ACTIVE_LOW $polarity

# The m_axi interfaces' AXI4 parameters (hw.lib.kernel_interface.MemoryPort.axi_parameters).
{bus_parameters}

# The control registers (hw.lib.axi_lite.register_map: the offsets of kernel.xml and the
# hardware).
{_register_map_tcl(i)}

ipx::create_xgui_files $core
ipx::update_checksums $core
ipx::check_integrity -kernel $core
ipx::check_integrity -xrt $core
ipx::save_core $core
close_project

package_xo -force -xo_path $xo_path -kernel_name $kernel -ip_directory $ip_dir \\
    -kernel_xml [file join $script_dir kernel.xml]
"""


def vitis_compute_unit(interface: KernelInterface) -> str:
    """The kernel's one compute unit, as v++ names the first: ``<kernel>_1``."""
    return f"{interface.kernel_name}_1"


def vitis_memories(interface: KernelInterface, target: VitisTarget) -> dict[str, str]:
    """Memory name -> its ``sp=`` target: the HBM pseudo-channels shared out evenly as
    contiguous ranges, memory ``k`` of ``n`` on ``HBM[k * c / n : (k + 1) * c / n - 1]`` (one
    memory: every channel, ``HBM[0:31]`` on the U55C)."""
    memories = list(interface.memories)
    channels = target.hbm_channels
    if len(memories) > channels:
        raise ValueError(f"`memory_ports` must name at most {channels} memories (one HBM "
                         f"pseudo-channel each at least), not {len(memories)}")
    share = channels // max(1, len(memories))
    return {name: f"HBM[{k * share}]" if share == 1 else
            f"HBM[{k * share}:{(k + 1) * share - 1}]" for k, name in enumerate(memories)}


def link_config(interface: KernelInterface, record: Board | str) -> str:
    """The link configuration of ``interface`` on one board: ``v++ --link --config`` for a
    ``VitisTarget`` (one compute unit, every port of a memory on that memory's channel range,
    the board's clock), ``slashkit link --config`` for a ``SlashTarget``
    (``boards.slash.slash_config``)."""
    record = record if isinstance(record, Board) else board(record)
    target = _target(record)
    if isinstance(target, SlashTarget):
        return slash_config(interface, record, target)
    unit = vitis_compute_unit(interface)
    lines = connectivity_lines(interface, record, title="v++ --link configuration", unit=unit,
                               memories=vitis_memories(interface, target))
    lines += ["", "[clock]", f"freqHz={round(record.clock_mhz * 1e6)}:{unit}.{interface.clock}"]
    return "\n".join(lines) + "\n"


def build_script(interface: KernelInterface, boards) -> str:
    """``build.sh``: package the kernel, then link it for each board (all by default, or the
    boards named on the command line): ``v++ --link`` for a Vitis board, ``slashkit link`` on
    the packaged IP's ``component.xml`` for a SLASH board."""
    records = _boards(boards)
    kernel = interface.kernel_name
    names = " ".join(record.name for record in records)
    vitis = [r for r in records if isinstance(_target(r), VitisTarget)]
    slash = [r for r in records if isinstance(_target(r), SlashTarget)]
    tools = ["`vivado`"] + [tool for tool, used in (("`v++` (Vitis settings64.sh sourced)", vitis),
                                                    ("`slashkit` (SLASH's linker)", slash)) if used]
    tools = ", ".join(tools[:-1]) + " and " + tools[-1]
    header = []
    if vitis:
        header += ["# Vitis platforms, overridable in the environment:"]
        header += [f"#   {_target(r).platform_variable} (default {_target(r).platform})"
                   for r in vitis]
        header += ["# TARGET: hw (default) or hw_emu."]
    if slash:
        header += ["# SLASH boards: slashkit link -p hw (default), emu or sim, from:"]
        header += [f"#   {_target(r).platform_variable} ({r.name}; AVED shell "
                   f"{_target(r).shell})" for r in slash]
        header += ["# SLASHKIT: the linker command (default slashkit)."]
    cases = [f'        {r.name}) tool=vitis; platform="${{{_target(r).platform_variable}:-'
             f'{_target(r).platform}}}" ;;' for r in vitis]
    cases += [f'        {r.name}) tool=slash; platform="${{{_target(r).platform_variable}:-hw}}" ;;'
              for r in slash]
    link_vitis = f"""\
        v++ --link --target "${{TARGET:-hw}}" --platform "$platform" --config "link_$board.cfg" \\
            --temp_dir "$board/_x" --log_dir "$board/logs" --report_dir "$board/reports" \\
            -o "$board/{kernel}.xclbin" {kernel}.xo"""
    link_slash = f"""\
        "${{SLASHKIT:-slashkit}}" link --config "link_$board.cfg" --kernels ip/component.xml \\
            --platform "$platform" --out "$board/{kernel}.vbin\""""
    if vitis and slash:
        link = (f'    if [ "$tool" = vitis ]; then\n{link_vitis}\n    else\n{link_slash}\n'
                "    fi")
    else:
        link = "\n".join(line[4:] for line in (link_vitis if vitis else link_slash).split("\n"))
    return "\n".join([
        "#!/bin/sh",
        f"# Package `{kernel}` as an RTL kernel, then link it: ./build.sh [board ...]",
        f"# (default: {names}). Needs {tools} on PATH.",
        *header,
        "set -e",
        'cd "$(dirname "$0")"',
        "if [ $# -eq 0 ]; then",
        f"    set -- {names}",
        "fi",
        "vivado -mode batch -nojournal -log package_xo.log -source package_xo.tcl",
        'for board in "$@"; do',
        '    case "$board" in',
        *cases,
        f'        *) echo "unknown board $board (known: {names})" >&2; exit 2 ;;',
        "    esac",
        '    mkdir -p "$board"',
        link,
        "done",
    ]) + "\n"


def register_table(interface: KernelInterface) -> str:
    """The register map of ``interface`` as a Markdown table (offset, name, bits, access,
    interface, description), as docs/vitis.md shows it."""
    lines = ["| offset | name | bits | access | port | description |",
             "|---|---|---|---|---|---|"]
    for row in interface.registers:
        port = interface.port_of(row.name) if row.offset >= 0x10 else "-"
        lines.append(f"| 0x{row.offset:02X} | `{row.name}` | {row.bits} | {row.access} | "
                     f"{port} | {row.description} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class VitisPackage:
    """The files ``write_vitis_package`` wrote (all in ``directory``)."""

    directory: Path
    kernel_xml: Path
    package_tcl: Path
    link_configs: dict[str, Path]
    build_sh: Path
    xo: Path


def write_vitis_package(directory: Path, interface: KernelInterface, *, verilog_file: Path,
                        boards: Iterable[Board | str] | Board | str) -> VitisPackage:
    """Write ``kernel.xml``, ``package_xo.tcl``, ``link_<board>.cfg`` per board and
    ``build.sh`` into ``directory`` (created if needed).

    Parameters
    ----------
    directory : Path
        Where the files go; ``build.sh`` leaves ``<kernel>.xo``, ``ip/`` (the packaged IP,
        ``ip/component.xml``) and ``<board>/<kernel>.xclbin`` (v++) or
        ``<board>/<kernel>.vbin`` (slashkit) there.
    interface : KernelInterface
        The kernel's ports and arguments.
    verilog_file : Path
        The kernel's Verilog (top module ``interface.top``); the scripts refer to it relative
        to ``directory``.
    boards : Board records or names
        The cards to link for (``board("alveo-v80")``, ``"alveo-u55c"``); the first one's part
        is the packaging project's.
    """
    records = _boards(boards)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    verilog = Path(os.path.relpath(Path(verilog_file).resolve(), directory.resolve())).as_posix()
    files = VitisPackage(
        directory=directory, kernel_xml=directory / "kernel.xml",
        package_tcl=directory / "package_xo.tcl",
        link_configs={r.name: directory / f"link_{r.name}.cfg" for r in records},
        build_sh=directory / "build.sh", xo=directory / f"{interface.kernel_name}.xo")
    files.kernel_xml.write_text(kernel_xml(interface))
    files.package_tcl.write_text(package_xo_tcl(interface, verilog=verilog,
                                                part=records[0].part))
    for record in records:
        files.link_configs[record.name].write_text(link_config(interface, record))
    files.build_sh.write_text(build_script(interface, records))
    files.build_sh.chmod(0o755)
    return files
