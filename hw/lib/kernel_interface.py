"""What a card's tools see of an RTL kernel: its AXI4 master (``m_axi``) ports, its scalar
arguments and its AXI4-Lite control port, as plain records (docs/vitis.md, "The kernel
interface").

The hardware builds its ports from these records (``hw.lib.axi.axi4_master_members``,
``hw.lib.axi_lite.ControlRegisters(interface.arguments)``); ``boards`` renders them as text
(``kernel.xml``, ``package_xo.tcl``, the link configurations) and never the other way round.

A ``KernelInterface``'s control registers are ``hw.lib.axi_lite.register_map(
interface.arguments)``: one 64-bit pointer argument per m_axi port, bound to it, then the
scalars. A ``MemoryPort`` says, besides its name and widths, which **memory** its data lives
in: ports with the same ``memory`` exchange data through it (one writes what another reads,
or the host fills one buffer for all of them), so every link configuration must map them to
the same memory range; and the AXI4 facts the IP packager records about it
(``axi_parameters``: ``HAS_BURST``, ``MAX_BURST_LENGTH``, ...).
"""

from dataclasses import dataclass, field

from .axi import ACCESS, MAX_ID_WIDTH
from .axi_lite import check_arguments, minimum_address_width, register_map
from .params import ParameterError, check_choice, check_int, check_power_of_two

__all__ = ["MemoryPort", "KernelInterface", "HIDDEN_GATHER_MIN_WIDTH", "CONTROL_PROTOCOLS"]

#: How a host starts and stops a kernel, as ``kernel.xml``'s ``hwControlProtocol`` and
#: ``package_xo``'s ``ctrl_protocol`` name it: XRT drives ``ap_ctrl_hs``/``ap_ctrl_chain``
#: kernels itself (``xrt::run``); a ``user_managed`` kernel's registers are the host's to
#: write and read whenever it likes (``xrt::ip``), in a protocol of the kernel's own.
CONTROL_PROTOCOLS = ("ap_ctrl_hs", "ap_ctrl_chain", "user_managed")

#: The issue's floor for the hidden-state gather port's data width (bits).
HIDDEN_GATHER_MIN_WIDTH = 512


def _check_name(parameter: str, value) -> str:
    if not isinstance(value, str) or not value.isidentifier():
        raise ParameterError(parameter, f"`{parameter}` must be a Verilog-safe identifier, "
                                        f"not {value!r}")
    return value


@dataclass(frozen=True)
class MemoryPort:
    """One AXI4 master port of the kernel and its pointer argument.

    Attributes
    ----------
    name : str
        Interface name (``m_axi_<x>``: the Verilog ports are ``<name>_araddr``, ...).
    data_width : int, 32..1024, a power of two
        Data bits per beat.
    access : one of "read", "write", "readwrite"
        The channels the port has: AR/R, AW/W/B, or all five.
    argument : str
        Name of the 64-bit pointer argument bound to the port (default ``<name>_ptr``).
    min_data_width : int
        Narrowest ``data_width`` this port may have (32: any); the hidden-state gather port
        sets ``HIDDEN_GATHER_MIN_WIDTH``.
    address_width : int
        Address bits: 64, as Vitis requires of an RTL kernel's AXI4 masters.
    id_width : int, 0..16
        ID bits (``arid``/``rid``/``awid``/``bid``); 0: no ID signals.
    max_burst : int, 1..256, a power of two
        Longest burst the port issues, in beats (``MAX_BURST_LENGTH``).
    outstanding : int, 1..256
        Bursts the port may have in flight per direction, as a hint to the interconnect
        (``NUM_READ_OUTSTANDING``/``NUM_WRITE_OUTSTANDING``).
    memory : str
        The memory the port's data lives in; ports with the same ``memory`` share data and
        are linked to the same memory range (see the module).
    """

    name: str
    data_width: int = 512
    access: str = "readwrite"
    argument: str = ""
    min_data_width: int = 32
    address_width: int = 64
    id_width: int = 0
    max_burst: int = 1
    outstanding: int = 16
    memory: str = "card"

    def __post_init__(self):
        name = _check_name("name", self.name)
        if not self.argument:
            object.__setattr__(self, "argument", f"{name}_ptr")
        _check_name(f"{name}.argument", self.argument)
        check_power_of_two(f"{name}.min_data_width", self.min_data_width, 32, 1024)
        check_power_of_two(f"{name}.data_width", self.data_width, self.min_data_width, 1024)
        check_choice(f"{name}.access", self.access, ACCESS)
        check_int(f"{name}.address_width", self.address_width, 64, 64)
        check_int(f"{name}.id_width", self.id_width, 0, MAX_ID_WIDTH)
        check_power_of_two(f"{name}.max_burst", self.max_burst, 1, 256)
        check_int(f"{name}.outstanding", self.outstanding, 1, 256)
        _check_name(f"{name}.memory", self.memory)

    @property
    def reads(self) -> bool:
        return self.access in ("read", "readwrite")

    @property
    def writes(self) -> bool:
        return self.access in ("write", "readwrite")

    def axi_parameters(self) -> dict[str, str]:
        """The AXI4 bus-interface parameters of the port, as Vivado's IP packager names them
        (``PROTOCOL``, ``READ_WRITE_MODE``, ``ID_WIDTH``, ``HAS_*``, ``MAX_BURST_LENGTH``,
        ``NUM_*_OUTSTANDING``): INCR bursts with AxLEN, AxSIZE and AxBURST, byte strobes and
        responses where the port has the channel, no lock, cache, protection, QoS or region
        signals, no narrow bursts."""
        mode = {"read": "READ_ONLY", "write": "WRITE_ONLY", "readwrite": "READ_WRITE"}
        parameters = {
            "PROTOCOL": "AXI4", "READ_WRITE_MODE": mode[self.access],
            "ID_WIDTH": str(self.id_width), "HAS_BURST": "1", "HAS_LOCK": "0",
            "HAS_CACHE": "0", "HAS_PROT": "0", "HAS_QOS": "0", "HAS_REGION": "0",
            "HAS_WSTRB": str(int(self.writes)), "HAS_BRESP": str(int(self.writes)),
            "HAS_RRESP": str(int(self.reads)), "SUPPORTS_NARROW_BURST": "0",
            "MAX_BURST_LENGTH": str(self.max_burst),
        }
        if self.reads:
            parameters["NUM_READ_OUTSTANDING"] = str(self.outstanding)
        if self.writes:
            parameters["NUM_WRITE_OUTSTANDING"] = str(self.outstanding)
        return parameters


@dataclass(frozen=True)
class KernelInterface:
    """What the card's tools see of an RTL kernel.

    Attributes
    ----------
    kernel_name : str
        Kernel name (``v++``, SLASH and the host refer to it).
    top : str
        Verilog top module (ports ``ap_clk``, ``ap_rst_n``, ``interrupt``,
        ``s_axi_control_*``, ``<m_axi port>_*``).
    memory_ports : tuple of MemoryPort
        The m_axi ports, in argument order.
    scalars : tuple of (str, int)
        Scalar arguments after the pointers: name and bits (32 or 64).
    vendor, library, version : str
        The IP's VLNV is ``<vendor>:<library>:<kernel_name>:<version>``.
    control_address_width : int
        Address bits of ``s_axi_control`` (range ``2 ** control_address_width`` bytes).
    control_protocol : one of ``CONTROL_PROTOCOLS``
        How the host starts and stops the kernel (``kernel.xml``'s ``hwControlProtocol``).
    clock, reset, control_port : str
        ``ap_clk``, ``ap_rst_n`` (active-low) and ``s_axi_control``, as Vitis names them.
    """

    kernel_name: str
    top: str
    memory_ports: tuple[MemoryPort, ...]
    scalars: tuple[tuple[str, int], ...] = ()
    vendor: str = "eagletree"
    library: str = "kernel"
    version: str = "1.0"
    control_address_width: int = 12
    control_protocol: str = "ap_ctrl_chain"
    clock: str = field(default="ap_clk", init=False)
    reset: str = field(default="ap_rst_n", init=False)
    control_port: str = field(default="s_axi_control", init=False)

    def __post_init__(self):
        _check_name("kernel_name", self.kernel_name)
        _check_name("top", self.top)
        object.__setattr__(self, "memory_ports", tuple(self.memory_ports))
        object.__setattr__(self, "scalars", tuple(tuple(s) for s in self.scalars))
        for port in self.memory_ports:
            if not isinstance(port, MemoryPort):
                raise ParameterError("memory_ports", "`memory_ports` must hold MemoryPort "
                                                     f"records, not {port!r}")
        names = [port.name for port in self.memory_ports]
        for name in names:
            if names.count(name) > 1 or name in (self.control_port, self.clock, self.reset):
                raise ParameterError("memory_ports", "`memory_ports` names must be unique and "
                                                     "not a control, clock or reset name, not "
                                                     f"{name!r}")
        arguments = check_arguments(self.arguments)
        check_int("control_address_width", self.control_address_width,
                  minimum_address_width(arguments), 32)
        check_choice("control_protocol", self.control_protocol, CONTROL_PROTOCOLS)

    @property
    def arguments(self) -> tuple[tuple[str, int], ...]:
        """``(name, bits)`` of every argument: the m_axi pointers (64 bits), then the
        scalars; the ``arguments`` of ``hw.lib.axi_lite.ControlRegisters``."""
        return tuple((port.argument, 64) for port in self.memory_ports) + self.scalars

    @property
    def registers(self):
        """``hw.lib.axi_lite.register_map(self.arguments)``."""
        return register_map(self.arguments)

    @property
    def vlnv(self) -> str:
        return f"{self.vendor}:{self.library}:{self.kernel_name}:{self.version}"

    @property
    def memories(self) -> dict[str, tuple[MemoryPort, ...]]:
        """Memory name -> its ports, in order of first use: the ports of one entry share
        data and must reach the same memory range."""
        groups: dict[str, list[MemoryPort]] = {}
        for port in self.memory_ports:
            groups.setdefault(port.memory, []).append(port)
        return {name: tuple(ports) for name, ports in groups.items()}

    def port_of(self, argument: str) -> str:
        """The interface an argument belongs to: its m_axi port, or ``s_axi_control``."""
        for port in self.memory_ports:
            if port.argument == argument:
                return port.name
        return self.control_port
