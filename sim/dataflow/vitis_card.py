"""The engine's Vitis kernel (``hw.dataflow.vitis_top.EngineKernel``) Verilated, as a card
would hold it: card memory behind every m_axi port, a host on ``s_axi_control``.

``VerilatedKernel`` steps the model one clock at a time. Each clock it answers every m_axi
port from one ``CardMemory`` (``AxiMemoryPort``: the ``ReadServer``/``WriteServer`` of
``sim.dataflow.memory`` on the flat AXI4 signals ``<port>_arvalid`` ...), which the card's
address space holds at ``base`` (the buffer's device address: the ports' addresses are the
pointer arguments plus the engine's offsets). ``write_register``/``read_register`` are
AXI4-Lite transfers on ``s_axi_control``, clocked until they complete (a few clocks each),
so a host polling a register lets the kernel run.
"""

from hw.lib.axi_lite import AXI4LiteSignature

from .memory import CardMemory, ReadServer, WriteServer

__all__ = ["AxiMemoryPort", "VerilatedKernel"]

#: Clocks an AXI4-Lite transfer may take before the kernel is called hung.
_PATIENCE = 1_000


class AxiMemoryPort:
    """A ``ReadServer`` and/or ``WriteServer`` on the m_axi port ``name`` of a model clocked
    by the caller: ``drive()`` with the clock low, the model evaluated, ``sample()``, the
    edge. Addresses are taken relative to ``base``; AxSIZE must be the port's width and
    AxBURST INCR.

    Parameters
    ----------
    memory : CardMemory
    model : sim.verilated.Model (or any object with ``set``/``get`` by port name)
    port : hw.lib.kernel_interface.MemoryPort
    base : int
        The device address of ``memory``'s byte 0.
    """

    def __init__(self, memory: CardMemory, model, port, *, base: int):
        self.name, self.model, self.base = port.name, model, base
        self.reader = ReadServer(memory, port.data_width) if port.reads else None
        self.writer = WriteServer(memory, port.data_width) if port.writes else None
        self._size = (port.data_width // 8).bit_length() - 1
        self._now = None
        for signal in (["arready", "rvalid"] if self.reader else []) + \
                (["awready", "wready", "bvalid", "bresp"] if self.writer else []):
            model.set(self._signal(signal), 0)

    def _signal(self, name: str) -> str:
        return f"{self.name}_{name}"

    def _get(self, name: str) -> int:
        return self.model.get(self._signal(name))

    @property
    def done(self) -> bool:
        """No burst in flight."""
        return all(server.idle for server in (self.reader, self.writer) if server)

    def drive(self) -> None:
        set_ = self.model.set
        reads = writes = None
        if self.reader:
            ar_ready, beat = reads = self.reader.drive()
            set_(self._signal("arready"), int(ar_ready))
            if beat is not None:
                set_(self._signal("rdata"), beat["data"])
                set_(self._signal("rlast"), beat["last"])
            set_(self._signal("rvalid"), int(beat is not None))
        if self.writer:
            writes = self.writer.drive()
            for signal, value in zip(("awready", "wready", "bvalid"), writes, strict=True):
                set_(self._signal(signal), int(value))
        self._now = reads, writes

    def _request(self, channel: str):
        """The address and length of an ``ar``/``aw`` handshake (AxSIZE and AxBURST
        checked)."""
        size, burst = self._get(f"{channel}size"), self._get(f"{channel}burst")
        if (size, burst) != (self._size, 1):
            raise AssertionError(f"{self.name}: {channel}size {size}, {channel}burst {burst} "
                                 f"(expected {self._size}, INCR)")
        address = self._get(f"{channel}addr") - self.base
        if address < 0:
            raise AssertionError(f"{self.name}: address {self._get(f'{channel}addr'):#x} "
                                 f"below the card memory at {self.base:#x}")
        return address, self._get(f"{channel}len")

    def sample(self) -> None:
        reads, writes = self._now
        if reads:
            ar_ready, beat = reads
            request = self._request("ar") if ar_ready and self._get("arvalid") else None
            self.reader.clock(request=request,
                              taken=beat is not None and bool(self._get("rready")))
        if writes:
            aw_ready, w_ready, respond = writes
            request = self._request("aw") if aw_ready and self._get("awvalid") else None
            beat = (self._get("wdata"), self._get("wstrb"), self._get("wlast")) \
                if w_ready and self._get("wvalid") else None
            self.writer.clock(request=request, beat=beat,
                              taken=respond and bool(self._get("bready")))


class VerilatedKernel:
    """The Verilated ``EngineKernel`` with card memory behind its m_axi ports (see the
    module).

    Parameters
    ----------
    library : Path
        The shared library of the kernel's model (``sim.verilated.build``).
    interface : hw.lib.kernel_interface.KernelInterface
        The kernel's interface (``EngineKernel.vitis_interface``).
    memory : CardMemory
        The card memory every port reaches (its latency and stalls apply to every port).
    base : int
        The device address of the memory's byte 0.
    """

    def __init__(self, library, interface, memory: CardMemory, *, base: int):
        from sim.verilated import Model

        self.interface, self.memory, self.base = interface, memory, base
        self.model = model = Model(library, clock="ap_clk", reset="ap_rst_n")
        self.ports = [AxiMemoryPort(memory, model, port, base=base)
                      for port in interface.memory_ports]
        self._bus = f"{interface.control_port}_"
        self._bus_inputs = [name for name, member in AXI4LiteSignature(
            interface.control_address_width).members.items() if member.flow.name == "Out"]
        self.reset()

    @property
    def cycle(self) -> int:
        """Clocks since the model was made."""
        return self.model.cycle

    def reset(self) -> None:
        """``ap_rst_n`` low for two clocks, then high until the design is out of its reset
        pipeline (a few clocks more)."""
        from hw.dataflow.vitis_top import RESET_STAGES

        for name in self._bus_inputs:
            self.model.set(self._bus + name, 0)
        self.model.set("ap_rst_n", 0)
        self.step(2)
        self.model.set("ap_rst_n", 1)
        self.step(RESET_STAGES + 1)

    def step(self, count: int = 1) -> None:
        """``count`` clocks, every m_axi port answered."""
        for _ in range(count):
            self._drive()
            self._edge()

    def _drive(self) -> None:
        """The clock low: the ports' answers set, the model evaluated."""
        for port in self.ports:
            port.drive()
        self.model.eval()

    def _edge(self) -> None:
        """The ports' handshakes sampled, then the rising edge."""
        for port in self.ports:
            port.sample()
        self.model.tick()

    # --- AXI4-Lite --------------------------------------------------------------------------

    def _until(self, pairs) -> None:
        """Clock until each (driven, answer) pair of control signals has had a clock with
        both high; each driven signal drops after its handshake's edge."""
        model, bus = self.model, self._bus
        pending = list(pairs)
        for _ in range(_PATIENCE):
            self._drive()
            done = [pair for pair in pending
                    if model.get(bus + pair[0]) and model.get(bus + pair[1])]
            self._edge()
            for pair in done:
                model.set(bus + pair[0], 0)
                pending.remove(pair)
            if not pending:
                return
        raise RuntimeError(f"the kernel's control bus did not answer {pending} within "
                           f"{_PATIENCE} clocks")

    def write_register(self, offset: int, value: int) -> None:
        """An AXI4-Lite write of the 32-bit ``value`` to ``offset``."""
        model, bus = self.model, self._bus
        model.set(bus + "awaddr", offset)
        model.set(bus + "wdata", value & 0xFFFF_FFFF)
        model.set(bus + "wstrb", 0xF)
        model.set(bus + "awvalid", 1)
        model.set(bus + "wvalid", 1)
        self._until([("awvalid", "awready"), ("wvalid", "wready")])
        model.set(bus + "bready", 1)
        self._until([("bready", "bvalid")])

    def read_register(self, offset: int) -> int:
        """An AXI4-Lite read of ``offset``: the 32-bit word."""
        model, bus = self.model, self._bus
        model.set(bus + "araddr", offset)
        model.set(bus + "arvalid", 1)
        self._until([("arvalid", "arready")])
        model.set(bus + "rready", 1)
        for _ in range(_PATIENCE):
            self._drive()
            value = model.get(bus + "rdata") if model.get(bus + "rvalid") else None
            self._edge()
            if value is not None:
                model.set(bus + "rready", 0)
                return value
        raise RuntimeError(f"the kernel's control bus gave no read response for {offset:#x} "
                           f"within {_PATIENCE} clocks")
