"""The engine as a Vitis RTL kernel (docs/vitis.md, "The engine's kernel").

``EngineKernel`` wraps ``PersistentEngine`` for XRT: ``ap_clk``/``ap_rst_n`` (active low), the
AXI4-Lite control slave ``s_axi_control`` (``hw.lib.axi_lite.ControlRegisters``: the
``ap_ctrl_chain`` register layout, driven by the host as a user-managed kernel,
``CONTROL_PROTOCOL``) and one AXI4 master ``m_axi_<port>`` per memory port, all with the names
Vivado's IP packager infers the interfaces from. Commands come from a ring in card memory
(``CommandRing``) and completions go to another (``CompletionRing``), both on the port
``m_axi_ring``: the command ring uses its read channels and the completion ring its write
channels, so the two share the port without an arbiter. The engine's own ports (``read``,
``result_write``, ``mask_write``, ``table_write``, ``logits<i>``) each get an m_axi port.

Addresses: every m_axi address is the port's 64-bit pointer argument plus the engine's byte
address (``address_width`` bits): the engine's addresses (the commands' ``address0..4``,
``req_to_token``, the ring bases) are offsets from the pointers. Pointers of 0 make them
absolute device addresses; equal pointers put every port in one buffer.

``vitis_interface(params)`` is the ``hw.lib.kernel_interface.KernelInterface`` of the kernel
(its arguments are the control registers' ``arguments``, so ``kernel.xml`` and the hardware
read one register map; ``boards`` renders it as text). Every m_axi port's data lives in one
memory, ``card``: the host hands the kernel one buffer for all of them (the engine reads on
``m_axi_read`` what the host and ``m_axi_table`` wrote, the host reads what ``m_axi_result``,
``m_axi_mask`` and ``m_axi_ring`` wrote), so every link configuration maps them to one range.

The control word on the persistent engine: ``ap_start`` clears both rings' indices and starts
the engine (``ap_ready``); it then runs commands while the command ring holds any; with
``drain`` set it finishes (``ap_done``) once the command ring is empty, no command is in
flight and every completion record is in memory, and waits in ``ap_done`` for
``ap_continue``.
"""

from dataclasses import asdict

from amaranth.hdl import Array, Cat, ClockDomain, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.lib.axi import axi4_master_members
from hw.lib.axi_lite import AXI4LiteSignature, ControlRegisters
from hw.lib.kernel_interface import KernelInterface, MemoryPort

from .command_counters import COMMAND_COUNTERS, CommandCounters
from .engine import EngineParams, PersistentEngine
from .memory_ports import READ_BURST
from .params import counter_layout
from .ring import CommandRing, CompletionRing

__all__ = ["KERNEL_NAME", "KERNEL_PARAMETERS", "RING_SCALARS", "COUNTER_SCALARS", "READ_ONLY",
           "MEMORY", "CONTROL_PROTOCOL", "EngineKernel", "vitis_interface", "counter_names",
           "kernel_parameters", "kernel_configuration"]

#: The kernel's name, also its Verilog top module (``python -m hw.build --kernel dataflow``).
KERNEL_NAME = "dataflow"

#: The parameter set ``python -m hw.build --kernel dataflow`` builds by default: the small
#: build of ``make sim KERNEL=dataflow`` (4 slots, K = 2, W <= 2, MI = 6, MAXV 6) on 256-bit
#: ports with 64-bit addresses; ``--param dataflow.<name>=<value>`` grows it (the default V80
#: build is ``hw.kernels.dataflow.V80_PARAMETERS``, whose Verilog takes far longer to write).
KERNEL_PARAMETERS = {"node_top_k": 2, "max_tree_width": 2, "max_depths": 4,
                     "max_verify_num": 6, "max_node_count": 24, "max_input_size": 6,
                     "max_batch": 4, "max_pool_rows": 16, "address_width": 64,
                     "port_bits": 256, "max_seq_len": 64, "max_vocab_size": 128,
                     "logit_port_bits": 256}

#: Scalar arguments of the rings and the run, before the engine's ``config`` fields:
#: name, bits (docs/vitis.md, "The engine's kernel").
RING_SCALARS = (("command_ring", 64), ("command_entries", 32), ("command_head", 32),
                ("command_tail", 32), ("completion_ring", 64), ("completion_entries", 32),
                ("completion_tail", 32), ("completion_head", 32), ("drain", 32))

#: Scalar arguments after the engine's ``config`` fields: the counter window (a host writes
#: ``counter_select``, then reads ``counter_value``, low word first; ``counter_names``).
COUNTER_SCALARS = (("counter_select", 32), ("counter_value", 64))

#: Arguments the hardware writes: a read returns the hardware's value, a host write is
#: ignored.
READ_ONLY = ("command_tail", "completion_head", "counter_value")

#: The kernel's control protocol (``KernelInterface.control_protocol``): the host writes the
#: ring indices and ``drain`` while the kernel runs, which XRT allows a user-managed kernel
#: only (``xrt::ip``); docs/vitis.md, "The control model".
CONTROL_PROTOCOL = "user_managed"

#: The memory every m_axi port's data lives in (``MemoryPort.memory``): one buffer for all.
MEMORY = "card"

#: ID bits of every m_axi port: the masters issue every burst with ID 0 (so the memory answers
#: in order, as the engine's ports expect) and ignore RID/BID; the signals are there because
#: AXI4 slaves and verification models (cocotbext-axi) expect them.
ID_WIDTH = 1

#: AXI4's 4 KiB boundary, which no burst crosses.
_BOUNDARY = 4096


def _engine_ports(p: EngineParams):
    """``(port name, data bits, access, longest burst)`` of every m_axi port, in argument
    order: the word readers issue bursts of up to ``READ_BURST`` beats, the word writers
    one-beat bursts, the fused verify's logits loaders bursts of up to ``max_burst`` beats;
    none crosses a 4 KiB page."""
    logit_burst = min(p.verify.max_burst, _BOUNDARY // (p.logit_port_bits // 8))
    return [("ring", p.port_bits, "readwrite", READ_BURST),
            ("read", p.port_bits, "read", READ_BURST),
            ("result", p.port_bits, "write", 1), ("mask", p.port_bits, "write", 1),
            ("table", p.port_bits, "write", 1),
            *((f"logits{i}", p.logit_port_bits, "read", logit_burst)
              for i in range(p.logit_ports))]


def vitis_interface(params: EngineParams) -> KernelInterface:
    """The kernel's ``KernelInterface``: m_axi ports ``m_axi_ring`` (the rings),
    ``m_axi_read``, ``m_axi_result``, ``m_axi_mask``, ``m_axi_table`` and
    ``m_axi_logits<i>``, each with its pointer ``<port>_ptr``, all in the memory ``MEMORY``;
    then ``RING_SCALARS`` and the fields of ``config_layout`` (64 bits where wider than
    32)."""
    config = tuple((name, 64 if field.width > 32 else 32)
                   for name, field in params.config_layout)
    return KernelInterface(
        kernel_name=KERNEL_NAME, top=KERNEL_NAME,
        memory_ports=[MemoryPort(f"m_axi_{name}", bits, access, argument=f"{name}_ptr",
                                 max_burst=burst, memory=MEMORY, id_width=ID_WIDTH)
                      for name, bits, access, burst in _engine_ports(params)],
        scalars=RING_SCALARS + config + COUNTER_SCALARS, control_protocol=CONTROL_PROTOCOL)


def counter_names(params: EngineParams) -> list[str]:
    """The counters behind ``counter_value``, by ``counter_select``: per engine port (in
    ``params.port_names`` order) ``<port>.beats``, ``.bytes``, ``.busy_cycles``,
    ``.stall_cycles`` (``hw.dataflow.memory_ports.PortCounters``), then
    ``command.<name>`` for each of ``COMMAND_COUNTERS`` (``CommandCounters``). A select past
    the last reads 0."""
    return [f"{port}.{field}" for port in params.port_names for field, _ in counter_layout] \
        + [f"command.{name}" for name in COMMAND_COUNTERS]


#: Registers between ``ap_rst_n`` and the design's reset net: the pin drives one flip-flop,
#: and the net's fan-out (every control register of the engine) hangs off the last stage, as
#: AMD's RTL-kernel guidance has it, so the pin's routing is not on a timing path.
RESET_STAGES = 2


def pipelined_reset(m, clk, rst_n, stages=RESET_STAGES):
    """The active-high reset of the ``sync`` domain from the active-low pin ``rst_n``, through
    ``stages`` registers clocked by ``clk`` in a reset-less domain ``reset_pipeline`` (their
    power-up value asserts the reset). Returns the last stage."""
    m.domains.reset_pipeline = domain = ClockDomain("reset_pipeline", reset_less=True)
    pipe = Signal(stages, init=(1 << stages) - 1, name="reset_pipe")
    m.d.comb += domain.clk.eq(clk)
    m.d.reset_pipeline += pipe.eq(Cat(~rst_n, pipe[:-1]))
    return pipe[-1]


class EngineKernel(wiring.Component):
    """``PersistentEngine`` with its rings and control registers as a Vitis RTL kernel (see the
    module).

    Parameters: the fields of :class:`EngineParams`.

    Members
    -------
    ap_clk : In(1)
        The kernel clock (the design's ``sync`` domain).
    ap_rst_n : In(1)
        Synchronous reset, active low, registered in :data:`RESET_STAGES` stages before it
        reaches the design (which is held in reset from power-up until the stages fill).
    interrupt : Out(1)
        ``ControlRegisters.interrupt`` (``ap_done``/``ap_ready`` through GIER, IER, ISR).
    s_axi_control_<signal> : AXI4-Lite slave
        ``awvalid``, ``awready``, ``awaddr``, ``wvalid``, ``wready``, ``wdata``, ``wstrb``,
        ``bvalid``, ``bready``, ``bresp``, ``arvalid``, ``arready``, ``araddr``, ``rvalid``,
        ``rready``, ``rdata``, ``rresp`` (``vitis_interface(params).registers``).
    m_axi_<port>_<signal> : AXI4 masters
        Per port of ``vitis_interface(params).memory_ports`` (``axi4_master_members``):
        ``AxSIZE`` is the port's bytes per beat (log2), ``AxBURST`` the masters' (INCR); the
        readers' bursts are up to ``READ_BURST`` beats, the logits ports' up to
        ``max_burst``, the writers' single beats.
    """

    def __init__(self, **parameters):
        self._params = p = EngineParams(**parameters)
        self._interface = interface = vitis_interface(p)
        members = {"ap_clk": In(1), "ap_rst_n": In(1), "interrupt": Out(1)}
        for name, member in AXI4LiteSignature(interface.control_address_width).members.items():
            members[f"{interface.control_port}_{name}"] = member.flip()
        for port in interface.memory_ports:
            members.update(axi4_master_members(port.name, port.data_width, port.access,
                                               address_width=port.address_width,
                                               id_width=port.id_width))
        super().__init__(members)

    @property
    def params(self) -> EngineParams:
        return self._params

    @property
    def vitis_interface(self) -> KernelInterface:
        """``vitis_interface(self.params)``."""
        return self._interface

    def elaborate(self, platform):
        p, interface = self._params, self._interface
        m = Module()
        m.domains.sync = sync = ClockDomain("sync")
        m.d.comb += [sync.clk.eq(self.ap_clk),
                     sync.rst.eq(pipelined_reset(m, self.ap_clk, self.ap_rst_n))]

        m.submodules.control = ctrl = ControlRegisters(
            interface.arguments, address_width=interface.control_address_width)
        m.submodules.engine = engine = PersistentEngine(**asdict(p))
        ring_args = dict(address_width=p.address_width, port_bits=p.port_bits)
        m.submodules.command_ring = commands = CommandRing(p.command_layout, **ring_args)
        m.submodules.completion_ring = completions = CompletionRing(p.completion_layout,
                                                                    **ring_args)
        wiring.connect(m, commands.command, engine.command)
        wiring.connect(m, engine.completion, completions.completion)
        m.d.comb += [engine.config[name].eq(getattr(ctrl, name))
                     for name, _ in p.config_layout]
        m.d.comb += [
            commands.base.eq(ctrl.command_ring), commands.entries.eq(ctrl.command_entries),
            commands.head.eq(ctrl.command_head),
            completions.base.eq(ctrl.completion_ring),
            completions.entries.eq(ctrl.completion_entries),
            completions.tail.eq(ctrl.completion_tail),
            self.interrupt.eq(ctrl.interrupt),
        ]

        counter_value = self._counters(m, engine, ctrl.counter_select)
        self._control_bus(m, ctrl, {"command_tail": commands.tail,
                                    "completion_head": completions.head,
                                    "counter_value": counter_value})
        # The m_axi ports: the rings share m_axi_ring (reads and writes are separate channels).
        ports = {"ring": (commands.port, completions.port), "read": (engine.read,),
                 "result": (engine.result_write,), "mask": (engine.mask_write,),
                 "table": (engine.table_write,),
                 **{f"logits{i}": (engine.logits[i],) for i in range(p.logit_ports)}}
        for port in interface.memory_ports:
            name = port.name.removeprefix("m_axi_")
            for inner in ports[name]:
                self._connect_master(m, port, inner, getattr(ctrl, port.argument))

        # ap_ctrl_chain: a start clears the rings and runs the engine until drained.
        in_flight = Signal(range(3))  # commands taken by the engine, not yet completed
        taken = engine.command.valid & engine.command.ready
        done = engine.completion.valid & engine.completion.ready
        m.d.sync += in_flight.eq(in_flight + taken - done)
        drained = ~commands.pending & ~commands.busy & (in_flight == 0) & ~completions.busy
        with m.FSM(name="control"):
            with m.State("IDLE"):
                m.d.comb += ctrl.ap_idle.eq(1)
                with m.If(ctrl.ap_start):
                    m.d.comb += [ctrl.ap_ready.eq(1), commands.clear.eq(1),
                                 completions.clear.eq(1)]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += commands.enable.eq(1)
                with m.If(ctrl.drain[0] & drained):
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += ctrl.ap_done.eq(1)
                with m.If(ctrl.ap_continue):
                    m.next = "IDLE"
        return m

    def _counters(self, m, engine, select):
        """The counter window: ``CommandCounters`` on the engine's ports, and the counter
        ``select`` names (``counter_names``) registered, a clock after the select."""
        p = self._params
        reads = [engine.read, *engine.logits]
        writes = [engine.result_write, engine.mask_write, engine.table_write]
        m.submodules.command_counters = counters = CommandCounters(
            ports=len(reads) + len(writes))

        def handshake(channel):
            return channel.valid & channel.ready

        offered = [port.ar for port in reads] + [c for port in writes for c in (port.aw, port.w)]
        m.d.comb += [
            counters.command_taken.eq(handshake(engine.command)),
            counters.completion_taken.eq(handshake(engine.completion)),
            counters.refused.eq(Cat(c.valid & ~c.ready for c in offered).any()),
            counters.beat.eq(Cat(handshake(port.r) for port in reads).any()
                             | Cat(handshake(port.w) for port in writes).any()),
            counters.issued.eq(Cat(*(handshake(port.ar) for port in reads),
                                   *(handshake(port.aw) for port in writes))),
            counters.retired.eq(Cat(*(handshake(port.r) & port.r.payload.last
                                      for port in reads),
                                    *(handshake(port.b) for port in writes))),
        ]
        sources = [engine.counters[index][field] for index in range(len(p.port_names))
                   for field, _ in counter_layout]
        sources += [getattr(counters, name) for name in COMMAND_COUNTERS]
        assert len(sources) == len(counter_names(p))
        value = Signal(64)
        m.d.sync += value.eq(Mux(select < len(sources), Array(sources)[select], 0))
        return value

    def _control_bus(self, m, ctrl, read_only):
        """``s_axi_control_*`` to the control registers; reads of the ``read_only`` registers
        return the hardware's values, sampled on the read's ``ar`` handshake (a 64-bit one
        whole on its low word's read: its high word reads what was sampled then)."""
        prefix = self._interface.control_port
        offsets = {row.name: row.offset for row in self._interface.registers}
        for name, member in AXI4LiteSignature(ctrl.address_width).members.items():
            top = getattr(self, f"{prefix}_{name}")
            inner = getattr(ctrl.bus, name)
            if member.flow == Out:  # driven by the host
                m.d.comb += inner.eq(top)
            elif name != "rdata":
                m.d.comb += top.eq(inner)
        hit, value = Signal(), Signal(32)
        word = ctrl.bus.araddr[2:]
        with m.If(ctrl.bus.arvalid & ctrl.bus.arready):
            m.d.sync += hit.eq(0)
            for name, signal in read_only.items():
                with m.If(word == offsets[name] >> 2):
                    m.d.sync += [hit.eq(1), value.eq(signal[:32])]
                if len(signal) > 32:
                    high = Signal(len(signal) - 32, name=f"{name}_high")
                    with m.If(word == offsets[name] >> 2):
                        m.d.sync += high.eq(signal[32:])
                    with m.If(word == (offsets[name] >> 2) + 1):
                        m.d.sync += [hit.eq(1), value.eq(high)]
        m.d.comb += getattr(self, f"{prefix}_rdata").eq(Mux(hit, value, ctrl.bus.rdata))

    def _connect_master(self, m, port: MemoryPort, inner, pointer):
        """The engine-side AXI4-style port ``inner`` (``hw.lib.axi``: read, write or both) to
        the m_axi port's signals, with ``pointer`` added to its addresses."""
        def top(signal):
            return getattr(self, f"{port.name}_{signal}")

        size = (port.data_width // 8).bit_length() - 1
        members = inner.signature.members
        for channel, response in (("ar", "r"), ("aw", "b")):
            if channel not in members:
                continue
            a, r = getattr(inner, channel), getattr(inner, response)
            m.d.comb += [top(f"{channel}valid").eq(a.valid), a.ready.eq(top(f"{channel}ready")),
                         top(f"{channel}addr").eq(pointer + a.payload.address),
                         top(f"{channel}len").eq(a.payload.length),
                         top(f"{channel}size").eq(size),
                         top(f"{channel}burst").eq(a.payload.burst),
                         r.valid.eq(top(f"{response}valid")),
                         top(f"{response}ready").eq(r.ready)]
            if port.id_width and "id" in a.payload.shape().members:
                m.d.comb += [top(f"{channel}id").eq(a.payload.id),
                             r.payload.id.eq(top(f"{response}id"))]
            elif port.id_width:  # an ID-less master: every burst ID 0, in order
                m.d.comb += top(f"{channel}id").eq(0)
            if response == "r":
                m.d.comb += [r.payload.data.eq(top("rdata")), r.payload.last.eq(top("rlast"))]
            else:
                m.d.comb += r.payload.resp.eq(top("bresp"))
        if "w" in members:
            w = inner.w
            m.d.comb += [top("wvalid").eq(w.valid), w.ready.eq(top("wready")),
                         top("wdata").eq(w.payload.data), top("wstrb").eq(w.payload.strobe),
                         top("wlast").eq(w.payload.last)]


def kernel_parameters(**overrides) -> EngineParams:
    """``KERNEL_PARAMETERS`` with ``overrides``."""
    return EngineParams(**{**KERNEL_PARAMETERS, **overrides})


def kernel_configuration(**overrides) -> EngineKernel:
    return EngineKernel(**asdict(kernel_parameters(**overrides)))
