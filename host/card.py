"""The ``card`` backend: the engine as a card runs it, through its Vitis kernel's registers and
rings (docs/host.md, "The card backend"; docs/vitis.md, "The control model").

:class:`CardBackend` speaks to a :class:`CardDevice` exactly as a host speaks to a card:
one buffer of card memory holds the rings, the arrays and ``req_to_token``; the kernel's
arguments go into its control registers; ``ap_start`` opens a ring session; each command is a
descriptor in the command ring and a ``command_head`` write; its completion is polled on
``completion_head`` and read from the completion ring; the cycles and bytes come from the
kernel's counter window (``command.cycles``, the ports' ``bytes``).

Devices:

* :class:`SimulatedCard` — the Verilated ``EngineKernel`` (``sim.dataflow.vitis_card``) with
  card memory behind its m_axi ports, in this process; the default.
* :class:`XrtCard` — a card through XRT (``xrt::ip`` registers, one ``xrt::bo``), by a small
  native shim (``host/xrt_shim.cpp``) built against the installed XRT; it says clearly when
  XRT is not installed.
"""

import os
import subprocess
from abc import ABC, abstractmethod
from dataclasses import asdict
from pathlib import Path

import numpy as np

from golden.engine import EngineConfig, Status
from sim.dataflow.verilated import verilated_library

from .checks import check_real
from .rtl import RtlBackend, _Round

__all__ = ["CardDevice", "SimulatedCard", "XrtCard", "CardUnavailable", "DeviceMemory",
           "KernelRegisters", "CardBackend"]

#: Entries of each ring (the backend runs one command at a time; a ring of n holds n - 1).
RING_ENTRIES = 4
#: The simulated card's buffer lies at this device address (above 4 GiB: the ports' 64-bit
#: pointer adds are exercised).
SIMULATED_BASE = 0x1_2340_0000


class CardUnavailable(RuntimeError):
    """The card (or its runtime) cannot be reached from this machine."""


class CardDevice(ABC):
    """What the card backend needs of a card: the kernel's control registers, and one buffer
    of card memory that every m_axi port of the kernel reaches.

    Attributes
    ----------
    buffer_address : int
        The buffer's device address (what the kernel's pointer arguments hold).
    buffer_size : int
        Its bytes.
    """

    buffer_address: int
    buffer_size: int

    @abstractmethod
    def write_register(self, offset: int, value: int) -> None:
        """Write the 32-bit ``value`` to the control register at byte ``offset``."""

    @abstractmethod
    def read_register(self, offset: int) -> int:
        """Read the 32-bit control register at byte ``offset``."""

    @abstractmethod
    def write(self, offset: int, data: np.ndarray) -> None:
        """Store the bytes ``data`` (uint8) at byte ``offset`` of the buffer, on the card
        (written and synced to the device) before returning."""

    @abstractmethod
    def read(self, offset: int, size: int) -> np.ndarray:
        """``size`` bytes (uint8) from byte ``offset`` of the buffer as the card holds them
        (synced from the device)."""

    def close(self) -> None:  # noqa: B027 (a device with nothing to release keeps this)
        """Release the device."""


class SimulatedCard(CardDevice):
    """The Verilated ``EngineKernel`` of ``params`` with a card memory of ``size`` bytes at
    :data:`SIMULATED_BASE` behind every m_axi port (``sim.dataflow.vitis_card``).

    Parameters
    ----------
    params : hw.dataflow.engine.EngineParams
    size : int
        Bytes of the buffer.
    latency : int
        Clocks from a memory request to its answer (every port, fixed).
    stall : float
        Probability that a memory channel stalls on a clock.
    seed : int
        Seed of the stalls.
    log : callable
        Progress of the model's build (a cached build says nothing).
    """

    def __init__(self, params, size: int, *, latency: int = 4, stall: float = 0.0,
                 seed: int = 0, log=print):
        from hw.dataflow.vitis_top import vitis_interface
        from sim.dataflow.memory import CardMemory
        from sim.dataflow.vitis_card import VerilatedKernel

        self.memory = CardMemory(size, seed=seed, latency=(latency, latency), stall=stall)
        self.buffer_address, self.buffer_size = SIMULATED_BASE, size
        library = verilated_library("kernel", tuple(sorted(asdict(params).items())), log)
        self.kernel = VerilatedKernel(library, vitis_interface(params), self.memory,
                                      base=SIMULATED_BASE)

    @property
    def cycle(self) -> int:
        """The kernel's clocks so far."""
        return self.kernel.cycle

    def write_register(self, offset, value):
        self.kernel.write_register(offset, value)

    def read_register(self, offset):
        return self.kernel.read_register(offset)

    def write(self, offset, data):
        self.memory.write_bytes(offset, np.asarray(data, np.uint8))

    def read(self, offset, size):
        return self.memory.read_bytes(offset, size)

    @property
    def ports_idle(self) -> bool:
        """No burst in flight on any m_axi port."""
        return all(port.done for port in self.kernel.ports)


class XrtCard(CardDevice):
    """A card through XRT: the user-managed kernel's registers by ``xrt::ip``, one buffer
    ``xrt::bo`` in the memory bank the xclbin links the kernel to (docs/vitis.md, "The host's
    calls, XRT"). XRT's Python bindings have no ``xrt::ip``, so the calls go through a small
    shim (``host/xrt_shim.cpp``) compiled once against ``$XILINX_XRT``.

    Parameters
    ----------
    xclbin : str or Path
        The linked design (``v++ --link`` of ``python -m hw.build --board alveo-u55c
        --kernel dataflow``'s package).
    size : int
        Bytes of the buffer.
    device_index : int
        The card's XRT index.
    kernel : str
        The compute unit, as ``xrt::ip`` names it.

    Raises ``CardUnavailable`` when XRT is not installed or the shim does not build.
    """

    def __init__(self, xclbin, size: int, *, device_index: int = 0,
                 kernel: str = "dataflow:{dataflow_1}"):
        import ctypes

        self._lib = lib = ctypes.CDLL(str(_xrt_shim()))
        lib.eagle_open.restype = ctypes.c_void_p
        lib.eagle_open.argtypes = [ctypes.c_uint, ctypes.c_char_p, ctypes.c_char_p,
                                   ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
        for name in ("eagle_write_register", "eagle_read_register", "eagle_write",
                     "eagle_read"):
            getattr(lib, name).restype = ctypes.c_int
        lib.eagle_write_register.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32]
        lib.eagle_read_register.argtypes = [ctypes.c_void_p, ctypes.c_uint32,
                                            ctypes.POINTER(ctypes.c_uint32)]
        lib.eagle_write.argtypes = lib.eagle_read.argtypes = [
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
        lib.eagle_address.restype = ctypes.c_uint64
        lib.eagle_address.argtypes = [ctypes.c_void_p]
        lib.eagle_close.argtypes = [ctypes.c_void_p]
        self._ctypes = ctypes
        error = ctypes.create_string_buffer(1024)
        self._handle = lib.eagle_open(device_index, str(xclbin).encode(), kernel.encode(),
                                      size, error, len(error))
        if not self._handle:
            raise CardUnavailable(f"XRT: {error.value.decode(errors='replace')}")
        self.buffer_address, self.buffer_size = lib.eagle_address(self._handle), size

    def _check(self, status: int, what: str) -> None:
        if status:
            raise RuntimeError(f"XRT: {what} failed")

    def write_register(self, offset, value):
        self._check(self._lib.eagle_write_register(self._handle, offset, value & 0xFFFF_FFFF),
                    f"register write at {offset:#x}")

    def read_register(self, offset):
        value = self._ctypes.c_uint32()
        self._check(self._lib.eagle_read_register(self._handle, offset,
                                                  self._ctypes.byref(value)),
                    f"register read at {offset:#x}")
        return value.value

    def write(self, offset, data):
        data = np.ascontiguousarray(data, np.uint8)
        self._check(self._lib.eagle_write(self._handle, offset, data.ctypes.data, data.size),
                    f"buffer write of {data.size} bytes at {offset:#x}")

    def read(self, offset, size):
        data = np.empty(size, np.uint8)
        self._check(self._lib.eagle_read(self._handle, offset, data.ctypes.data, size),
                    f"buffer read of {size} bytes at {offset:#x}")
        return data

    def close(self):
        if self._handle:
            self._lib.eagle_close(self._handle)
            self._handle = None


def _xrt_shim() -> Path:
    """The shim's shared library, compiled once (next to its source, under ``build/``)
    against ``$XILINX_XRT``; ``CardUnavailable`` when XRT is missing or the build fails."""
    from sim.harness import REPO_ROOT

    root = os.environ.get("XILINX_XRT", "")
    if not root or not (Path(root) / "include" / "xrt" / "xrt_device.h").exists():
        raise CardUnavailable(
            "XRT is not installed here (no $XILINX_XRT with include/xrt/xrt_device.h): the "
            "xrt card needs AMD's XRT and a card; use the simulated card "
            "(host.card.SimulatedCard, the default of --backend card)")
    source = Path(__file__).with_name("xrt_shim.cpp")
    library = REPO_ROOT / "build" / "xrt" / "libeagle_xrt.so"
    if not library.exists() or library.stat().st_mtime < source.stat().st_mtime:
        library.parent.mkdir(parents=True, exist_ok=True)
        command = ["g++", "-std=c++17", "-O2", "-shared", "-fPIC", str(source),
                   f"-I{root}/include", f"-L{root}/lib", "-lxrt_coreutil", "-o", str(library)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise CardUnavailable(f"the XRT shim did not build ({' '.join(command)}):\n"
                                  f"{done.stderr[-2000:]}")
    return library


class DeviceMemory:
    """The host's view of a :class:`CardDevice`'s buffer with the interface
    ``sim.dataflow.host.EngineHost`` lays its records out through (``allocate``,
    ``write_words``, ``write_bytes``, ``read_words``, ``read_bytes``): offsets into the buffer,
    every write on the card when it returns, every read from the card. The buffer is zeroed
    first."""

    def __init__(self, device: CardDevice):
        self.device = device
        self._next = 0
        device.write(0, np.zeros(device.buffer_size, np.uint8))

    def allocate(self, name, words, *, align=64):
        """Reserve ``words`` 32-bit words; return the byte offset."""
        offset = -(-self._next // align) * align
        if offset + 4 * words > self.device.buffer_size:
            raise RuntimeError(f"card buffer full: {name} needs {4 * words} bytes")
        self._next = offset + 4 * max(words, 1)
        return offset

    def write_words(self, offset, values):
        from sim.dataflow.memory import word_bytes

        self.device.write(offset, word_bytes(values))

    def write_bytes(self, offset, values):
        self.device.write(offset, np.asarray(values, np.uint8))

    def read_bytes(self, offset, count):
        return self.device.read(offset, count)

    def read_words(self, offset, count, *, signed=True):
        from sim.dataflow.memory import bytes_words

        return bytes_words(self.device.read(offset, 4 * count), signed=signed)


class KernelRegisters:
    """The kernel's control registers by name (``vitis_interface(params).registers``): 64-bit
    ones as two words, low first; ``counter(name)`` reads one counter of the window."""

    def __init__(self, device: CardDevice, params):
        from hw.dataflow.vitis_top import counter_names, vitis_interface

        self.device = device
        self.rows = {row.name: row for row in vitis_interface(params).registers}
        self.counters = {name: index for index, name in enumerate(counter_names(params))}

    def write(self, name: str, value: int) -> None:
        row = self.rows[name]
        for word in range(row.bits // 32):
            self.device.write_register(row.offset + 4 * word, value >> (32 * word))

    def read(self, name: str) -> int:
        row = self.rows[name]
        return sum(self.device.read_register(row.offset + 4 * word) << (32 * word)
                   for word in range(row.bits // 32))  # low word first: it samples

    def counter(self, name: str) -> int:
        self.write("counter_select", self.counters[name])
        return self.read("counter_value")


class CardBackend(RtlBackend):
    """The engine through its Vitis kernel on a :class:`CardDevice` (see the module).

    Parameters: those of :class:`host.rtl.RtlBackend`, and

    device : CardDevice or None
        The card; None: a :class:`SimulatedCard` of the build (``memory_latency`` its
        memory's latency).
    memory_stall : float, 0 .. 0.9
        The simulated card's probability of a stalled memory channel per clock.
    every_counter : bool
        Read every counter of the window around each command (about thirty register reads
        more per command) and keep ``(command, changes)`` in :attr:`counter_log`
        (``python -m host.counters``); else only the two figures are read.

    The buffer holds the layout of ``sim.dataflow.host.EngineHost`` and the two rings
    (:data:`RING_ENTRIES` entries each). Each command's ``cycles`` and ``bytes`` are the
    changes of the kernel's ``command.cycles`` counter and of its ports' ``bytes`` counters.
    """

    name = "card"

    def __init__(self, config: EngineConfig, req_to_token, *, device: CardDevice | None = None,
                 memory_stall: float = 0.0, every_counter: bool = False, **kwargs):
        if device is not None and not isinstance(device, CardDevice):
            raise ValueError(f"`device` must be a host.card.CardDevice or None, not "
                             f"{type(device).__name__}")
        self._device = device
        self._memory_stall = check_real("memory_stall", memory_stall, 0.0, 0.9)
        self._every_counter = every_counter
        self.last_counters: dict[str, int] = {}  # counter -> its change over the last command
        self.counter_log: list[tuple[str, dict[str, int]]] = []
        self._session = False
        super().__init__(config, req_to_token, **kwargs)

    def _open(self, parameters, table_shape, log) -> None:
        from hw.dataflow.ring import payload_words
        from sim.dataflow.host import card_memory_bytes, record_words

        if self._device is None:
            rows, context = table_shape
            size = card_memory_bytes(self.params, rows, context, self.config.vocab_size) \
                + 2 * 64 + 4 * RING_ENTRIES * (payload_words(self.params.command_layout)
                                                + record_words(self.params))
            self._device = SimulatedCard(self.params, size, latency=self._memory_latency,
                                         stall=self._memory_stall, log=log)
        self.device = self._device
        self.registers = KernelRegisters(self.device, self.params)

    def _start(self, table: np.ndarray):
        """A fresh ring session: the kernel stopped if it ran, the buffer zeroed and laid out
        with ``table``, the arguments written, ``ap_start``."""
        from hw.dataflow.ring import payload_words
        from sim.dataflow.host import EngineHost, record_words

        params, config, registers = self.params, self.config, self.registers
        if self._session:
            self._stop()
        self.memory = DeviceMemory(self.device)
        self.host = EngineHost(params, self.memory, table)
        self._words = payload_words(params.command_layout)
        self._record_words = record_words(params)
        self._command_ring = self.memory.allocate("command_ring", self._words * RING_ENTRIES)
        self._completion_ring = self.memory.allocate("completion_ring",
                                                     self._record_words * RING_ENTRIES)
        for row in registers.rows.values():
            if row.name.endswith("_ptr"):
                registers.write(row.name, self.device.buffer_address)
        arguments = {"command_ring": self._command_ring, "command_entries": RING_ENTRIES,
                     "command_head": 0, "completion_ring": self._completion_ring,
                     "completion_entries": RING_ENTRIES, "completion_tail": 0, "drain": 0,
                     **self.host.config(config.vocab_size, config.cost_per_node,
                                        self._watchdog_cycles)}
        for name, value in arguments.items():
            registers.write(name, value)
        if not self.device.read_register(0) & 0b100:
            raise RuntimeError("card backend: the kernel is not idle before its start")
        self.device.write_register(0, 1)  # ap_start: the indices restart at 0
        self._head = self._tail = self._sequence = 0
        self._session = True
        self._round = _Round()
        self._table = self.host.req_to_token()

    @property
    def completed(self) -> int:
        """Completions read in this ring session (the records' last sequence number)."""
        return self._sequence

    def _stop(self) -> None:
        """``drain``, then ``ap_done`` awaited and ``ap_continue``: the kernel idle."""
        self.registers.write("drain", 1)
        for _ in range(1_000):
            if self.device.read_register(0) & 0b10:
                break
        else:
            raise RuntimeError("card backend: no ap_done after drain")
        self.device.write_register(0, 1 << 4)  # ap_continue
        self._session = False

    def close(self) -> None:
        """Stop the ring session and release the device."""
        if self._session:
            self._stop()
        self.device.close()

    def _counters(self) -> dict[str, int]:
        """The counters the backend reads around a command, as they stand: every one with
        ``every_counter``, else ``command.cycles`` and the ports' ``bytes``."""
        names = self.registers.counters if self._every_counter else \
            ["command.cycles", *(f"{port}.bytes" for port in self.params.port_names)]
        return {name: self.registers.counter(name) for name in names}

    def _run(self, name, command) -> tuple[dict, int, int]:
        """The descriptor into the command ring and ``command_head`` written; the completion
        polled on ``completion_head`` and read from its ring."""
        from sim.dataflow.host import completion_record, descriptor_words

        before = self._counters()
        self.memory.write_words(self._command_ring + 4 * self._words * self._head,
                                descriptor_words(self.params, command))
        self._head = (self._head + 1) % RING_ENTRIES
        self.registers.write("command_head", self._head)
        for _ in range(self.timeout_cycles // 4 + 1):  # a register read takes a few clocks
            if self.registers.read("completion_head") != self._tail:
                break
        else:
            raise RuntimeError(f"card backend: {name} did not complete within "
                               f"{self.timeout_cycles} clocks")
        raw = self.memory.read_words(self._completion_ring + 4 * self._record_words * self._tail,
                                     self._record_words, signed=False)
        fields, sequence = completion_record(self.params, raw)
        self._sequence += 1
        if sequence != self._sequence & 0xFFFF_FFFF:
            raise RuntimeError(f"card backend: completion record {sequence} for {name}, "
                               f"expected {self._sequence}")
        self._tail = (self._tail + 1) % RING_ENTRIES
        self.registers.write("completion_tail", self._tail)
        if fields["tag"] != command["tag"]:
            raise RuntimeError(f"card backend: completion tag {fields['tag']} for {name}, "
                               f"sent {command['tag']}")
        after = self._counters()
        self.last_counters = {key: after[key] - before[key] for key in after}
        if self._every_counter:
            self.counter_log.append((name, self.last_counters))
        self._table = self.host.req_to_token()
        if isinstance(self.device, SimulatedCard) and not self.device.ports_idle \
                and fields["status"] != Status.WATCHDOG:
            raise RuntimeError(f"card backend: {name} completed with memory bursts in flight")
        data = sum(self.last_counters[f"{port}.bytes"] for port in self.params.port_names)
        return fields, self.last_counters["command.cycles"], data
