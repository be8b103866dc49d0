"""Vitis RTL-kernel packaging, written as text (no Vivado or Vitis needed to write it).

The kernel is described by ``hw.lib.kernel_interface.KernelInterface`` (what the hardware
exposes: its name and Verilog top module, its AXI4 master (``m_axi``) ports, its scalar
arguments and the AXI4-Lite control port ``s_axi_control``, whose registers are
``hw.lib.axi_lite.register_map(interface.arguments)``); this module only renders it as text.

``write_vitis_package`` writes

* ``kernel.xml``: the RTL kernel description (ports, arguments and their register offsets;
  ``hwControlProtocol="ap_ctrl_chain"``);
* ``package_xo.tcl``: Vivado packages the Verilog as an IP (bus interfaces associated with
  ``ap_clk``, ``ap_rst_n`` active-low) and ``package_xo`` makes ``<kernel>.xo`` from it and
  ``kernel.xml``;
* ``link_<board>.cfg``: one ``v++ --link`` configuration per board (one compute unit, each
  m_axi port on its own HBM pseudo-channel, spread evenly over the card's channels, and the
  board's kernel clock);
* ``build.sh``: ``vivado -mode batch -source package_xo.tcl``, then ``v++ --link`` per board
  with the platform in ``$PLATFORM_<BOARD>`` (defaults in ``VITIS_TARGETS``).

The layout of the files follows AMD's UG1393/UG1702 (RTL Kernel XML File, package_xo,
--connectivity and --clock options) and the Vitis RTL-kernel tutorials; see docs/vitis.md.
"""

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from xml.etree import ElementTree

from boards.alveo import Board, board
from hw.lib.axi_lite import DATA_WIDTH
from hw.lib.kernel_interface import KernelInterface

__all__ = ["VitisTarget", "VITIS_TARGETS", "VitisPackage", "kernel_xml", "package_xo_tcl",
           "link_config", "build_script", "register_table", "write_vitis_package"]

@dataclass(frozen=True)
class VitisTarget:
    """What the Vitis flow needs of a board beyond its ``Board`` record.

    Attributes
    ----------
    platform : str
        Default ``v++ --platform`` (``build.sh`` reads ``$<platform_variable>`` first).
    platform_variable : str
        Environment variable that overrides ``platform``.
    hbm_channels : int
        HBM pseudo-channels the link configuration spreads the m_axi ports over
        (``HBM[0]`` .. ``HBM[hbm_channels - 1]``).
    note : str
        Where the figures come from, and what is unsure.
    """

    platform: str
    platform_variable: str
    hbm_channels: int
    note: str


#: Board name -> Vitis facts.
VITIS_TARGETS = MappingProxyType({
    "alveo-u55c": VitisTarget(
        platform="xilinx_u55c_gen3x16_xdma_3_202210_1",
        platform_variable="PLATFORM_ALVEO_U55C",
        hbm_channels=32,
        note="The U55C's XRT platform; 16 GB of HBM2 in 32 pseudo-channels of 512 MB.",
    ),
    "alveo-v80": VitisTarget(
        platform="amd_v80_gen5x8_25.1",
        platform_variable="PLATFORM_ALVEO_V80",
        hbm_channels=64,
        note="No XRT v++ platform for the V80 was found: its shell is the AVED design "
             "amd_v80_gen5x8_25.1 (AMD AVED build scripts), which SLASH programs; SLASH's "
             "slashkit linker takes `sp=<cu>.<port>:HBM<n>` over 64 HBM pseudo-channels "
             "(SLASH memory model). Set PLATFORM_ALVEO_V80 to a v++ platform (.xpfm) for the "
             "card before running build.sh.",
    ),
})


def _target(record: Board) -> VitisTarget:
    try:
        return VITIS_TARGETS[record.name]
    except KeyError:
        raise ValueError(f"`boards` must be boards with a Vitis target ("
                         f"{', '.join(VITIS_TARGETS)}), not {record.name!r}") from None


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
        "interrupt": "true", "hwControlProtocol": "ap_ctrl_chain",
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


def package_xo_tcl(interface: KernelInterface, *, verilog: str, part: str) -> str:
    """Vivado script that packages the Verilog (``verilog``, relative to the script) as an IP
    and then as ``<kernel>.xo`` with ``kernel.xml``; ``part`` is the in-memory project's part
    (the kernel itself is portable)."""
    i = interface
    associate = "\n".join(
        f"ipx::associate_bus_interfaces -busif {name} -clock {i.clock} $core"
        for name in [i.control_port, *(port.name for port in i.memory_ports)])
    return f"""\
# Package `{i.kernel_name}` (top module `{i.top}`) as a Vitis RTL kernel: {i.kernel_name}.xo.
# Generated by boards.vitis; run ./build.sh (vivado -mode batch -source package_xo.tcl).
set script_dir [file dirname [file normalize [info script]]]
set kernel {i.kernel_name}
set top {i.top}
set ip_dir [file join $script_dir ip]
set xo_path [file join $script_dir $kernel.xo]
file delete -force $ip_dir $xo_path

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
set_property vitis_drc {{ctrl_protocol ap_ctrl_chain}} $core
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

ipx::create_xgui_files $core
ipx::update_checksums $core
ipx::save_core $core
close_project

package_xo -force -xo_path $xo_path -kernel_name $kernel -ip_directory $ip_dir \\
    -kernel_xml [file join $script_dir kernel.xml]
"""


def link_config(interface: KernelInterface, record: Board | str) -> str:
    """The ``v++ --link`` configuration of ``interface`` on one board: one compute unit,
    m_axi port ``k`` of ``n`` on ``HBM[k * (channels // n)]``, the board's clock."""
    record = record if isinstance(record, Board) else board(record)
    target = _target(record)
    ports = interface.memory_ports
    if len(ports) > target.hbm_channels:
        raise ValueError(f"`memory_ports` must be at most {target.hbm_channels} on "
                         f"{record.name} (one HBM pseudo-channel each), not {len(ports)}")
    stride = target.hbm_channels // max(1, len(ports))
    unit = f"{interface.kernel_name}_1"
    lines = [f"# v++ --link configuration of `{interface.kernel_name}` for {record.name} "
             f"({record.part}), generated by boards.vitis.",
             f"# Each m_axi port on its own HBM pseudo-channel ({target.hbm_channels} on this "
             "card), spread evenly.",
             "[connectivity]",
             f"nk={interface.kernel_name}:1:{unit}"]
    for index, port in enumerate(ports):
        lines.append(f"# {port.name}: {port.access}, {port.data_width} bits, argument "
                     f"{port.argument}")
        lines.append(f"sp={unit}.{port.name}:HBM[{index * stride}]")
    lines += ["", "[clock]", f"freqHz={round(record.clock_mhz * 1e6)}:{unit}.{interface.clock}"]
    return "\n".join(lines) + "\n"


def build_script(interface: KernelInterface, boards) -> str:
    """``build.sh``: package the kernel, then link it for each board (all by default, or the
    boards named on the command line)."""
    records = _boards(boards)
    kernel = interface.kernel_name
    names = " ".join(record.name for record in records)
    platforms = "\n".join(f"#   {_target(r).platform_variable} (default {_target(r).platform})"
                          for r in records)
    cases = "\n".join(
        f'        {r.name}) platform="${{{_target(r).platform_variable}:-'
        f'{_target(r).platform}}}" ;;' for r in records)
    return f"""\
#!/bin/sh
# Package `{kernel}` as a Vitis RTL kernel, then link it: ./build.sh [board ...]
# (default: {names}). Needs `vivado` and `v++` on PATH (Vitis settings64.sh sourced).
# Platforms, overridable in the environment:
{platforms}
# TARGET: hw (default) or hw_emu.
set -e
cd "$(dirname "$0")"
if [ $# -eq 0 ]; then
    set -- {names}
fi
vivado -mode batch -nojournal -log package_xo.log -source package_xo.tcl
for board in "$@"; do
    case "$board" in
{cases}
        *) echo "unknown board $board (known: {names})" >&2; exit 2 ;;
    esac
    mkdir -p "$board"
    v++ --link --target "${{TARGET:-hw}}" --platform "$platform" --config "link_$board.cfg" \\
        --temp_dir "$board/_x" --log_dir "$board/logs" --report_dir "$board/reports" \\
        -o "$board/{kernel}.xclbin" {kernel}.xo
done
"""


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
        Where the files go; ``build.sh`` leaves ``<kernel>.xo`` and ``<board>/<kernel>.xclbin``
        there.
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
