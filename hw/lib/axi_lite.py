"""AXI4-Lite control slave with the Vitis ``ap_ctrl_chain`` register map of an RTL kernel.

``register_map(arguments)`` is the one source of the register layout: the component, the
Vitis ``kernel.xml`` writer (``boards.vitis``) and ``docs/vitis.md`` all read it.

======  ==========  =====  ==============================================================
offset  name        bits   meaning
======  ==========  =====  ==============================================================
0x00    control     32     bit 0 ``ap_start`` (R/W: set by the host, cleared by hardware on
                           ``ap_ready``, or kept set with ``auto_restart``), bit 1 ``ap_done``
                           (R, clear on read), bit 2 ``ap_idle`` (R), bit 3 ``ap_ready`` (R,
                           clear on read), bit 4 ``ap_continue`` (W, one-clock pulse; reads
                           0), bit 7 ``auto_restart`` (R/W); other bits read 0
0x04    gier        32     bit 0: global interrupt enable (R/W)
0x08    ier         32     bit 0: ``ap_done`` interrupt enable, bit 1: ``ap_ready`` (R/W)
0x0C    isr         32     bit 0: ``ap_done`` seen, bit 1: ``ap_ready`` seen; writing 1 to a
                           bit toggles it (write 1 to clear)
0x10    argument 0  32/64  then one 8-byte slot per argument, in order: argument ``i`` at
                           ``0x10 + 8 * i`` (a 64-bit one: low word there, high word at
                           ``+ 0x4``; a 32-bit one leaves ``+ 0x4`` unmapped)
======  ==========  =====  ==============================================================

Events win over clearing: an ``ap_done``/``ap_ready`` in the clock of the read (or ISR
write) that would clear its bit leaves the bit set, so no event is lost. Reads of unmapped
addresses return 0, writes to them are ignored, and every response is OKAY.
"""

from typing import NamedTuple

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.lib.params import ParameterError, check_int

__all__ = ["Register", "register_map", "check_arguments", "minimum_address_width",
           "AXI4LiteSignature", "ControlRegisters", "CONTROL", "GIER", "IER", "ISR",
           "ARGUMENT_BASE", "ARGUMENT_STRIDE", "DATA_WIDTH"]

#: Offsets of the four control registers.
CONTROL, GIER, IER, ISR = 0x00, 0x04, 0x08, 0x0C
#: Offset of the first argument and the slot of each.
ARGUMENT_BASE, ARGUMENT_STRIDE = 0x10, 8
#: Data bits of the control bus (Vitis: 32).
DATA_WIDTH = 32

#: Bits of the control register.
AP_START, AP_DONE, AP_IDLE, AP_READY, AP_CONTINUE, AUTO_RESTART = 0, 1, 2, 3, 4, 7

_KERNEL_PORTS = ("bus", "ap_start", "ap_continue", "ap_ready", "ap_done", "ap_idle",
                 "interrupt")
_CONTROL_ROWS = (
    (CONTROL, "control", "RW",
     "bit 0 ap_start (R/W, cleared by hardware on ap_ready unless auto_restart), bit 1 "
     "ap_done (R, clear on read), bit 2 ap_idle (R), bit 3 ap_ready (R, clear on read), "
     "bit 4 ap_continue (W, pulse), bit 7 auto_restart (R/W)"),
    (GIER, "gier", "RW", "bit 0 global interrupt enable"),
    (IER, "ier", "RW", "bit 0 ap_done interrupt enable, bit 1 ap_ready interrupt enable"),
    (ISR, "isr", "R/TOW", "bit 0 ap_done, bit 1 ap_ready interrupt status (write 1 toggles)"),
)


class Register(NamedTuple):
    """One row of the register map."""

    offset: int
    name: str
    bits: int
    access: str
    description: str


def check_arguments(arguments) -> tuple[tuple[str, int], ...]:
    """``arguments`` as a tuple of ``(name, bits)`` pairs, or ``ParameterError``.

    Names must be Python identifiers (they name ports), unique, and none of the control
    registers' or the component's other port names; ``bits`` must be 32 or 64.
    """
    if isinstance(arguments, str | bytes) or not hasattr(arguments, "__iter__"):
        raise ParameterError("arguments", "`arguments` must be a sequence of (name, bits) "
                                          f"pairs, not {arguments!r}")
    checked = []
    reserved = {row[1] for row in _CONTROL_ROWS} | set(_KERNEL_PORTS)
    for index, argument in enumerate(arguments):
        where = f"arguments[{index}]"
        if not isinstance(argument, tuple | list) or len(argument) != 2:
            raise ParameterError("arguments", f"`{where}` must be a (name, bits) pair, not "
                                              f"{argument!r}")
        name, bits = argument
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise ParameterError("arguments", f"`{where}` name must be an identifier not "
                                              f"starting with '_', not {name!r}")
        if name in reserved or name in {n for n, _ in checked}:
            raise ParameterError("arguments", f"`{where}` name must be unique and not one of "
                                              f"the control ports' names, not {name!r}")
        if isinstance(bits, bool) or bits not in (32, 64):
            raise ParameterError("arguments", f"`{where}` bits must be 32 or 64, not "
                                              f"{bits!r}")
        checked.append((name, bits))
    return tuple(checked)


def register_map(arguments) -> list[Register]:
    """The register map of a kernel with ``arguments`` (a sequence of ``(name, bits)``, bits
    32 or 64): the four control registers, then one row per argument at
    ``ARGUMENT_BASE + ARGUMENT_STRIDE * i``. Each row is ``(offset, name, bits, access,
    description)``."""
    rows = [Register(offset, name, 32, access, description)
            for offset, name, access, description in _CONTROL_ROWS]
    for index, (name, bits) in enumerate(check_arguments(arguments)):
        words = "low word first, high word at +0x4" if bits == 64 else "one word"
        rows.append(Register(ARGUMENT_BASE + ARGUMENT_STRIDE * index, name, bits, "RW",
                             f"kernel argument `{name}` ({bits} bits, {words})"))
    return rows


def minimum_address_width(arguments) -> int:
    """Fewest byte-address bits that reach every register of ``arguments`` (at least 3)."""
    end = ARGUMENT_BASE + ARGUMENT_STRIDE * len(check_arguments(arguments))
    return max(3, (end - 1).bit_length())


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite with 32-bit data, from the manager's side (a slave port is ``In`` of it).

    Members use the AXI names so that a top module's ports read ``<bus>_<name>``: ``aw``
    (``awvalid``, ``awready``, ``awaddr``), ``w`` (``wvalid``, ``wready``, ``wdata``,
    ``wstrb``), ``b`` (``bvalid``, ``bready``, ``bresp``), ``ar`` (``arvalid``, ``arready``,
    ``araddr``) and ``r`` (``rvalid``, ``rready``, ``rdata``, ``rresp``).

    Parameters
    ----------
    address_width : int, 3..64
        Bits of byte addresses.
    """

    def __init__(self, address_width: int):
        self._address_width = check_int("address_width", address_width, 3, 64)
        super().__init__({
            "awvalid": Out(1), "awready": In(1), "awaddr": Out(address_width),
            "wvalid": Out(1), "wready": In(1), "wdata": Out(DATA_WIDTH),
            "wstrb": Out(DATA_WIDTH // 8),
            "bvalid": In(1), "bready": Out(1), "bresp": In(2),
            "arvalid": Out(1), "arready": In(1), "araddr": Out(address_width),
            "rvalid": In(1), "rready": Out(1), "rdata": In(DATA_WIDTH), "rresp": In(2),
        })

    @property
    def address_width(self) -> int:
        return self._address_width

    def __eq__(self, other):
        return isinstance(other, AXI4LiteSignature) and \
            other.address_width == self.address_width

    def __hash__(self):
        return hash((AXI4LiteSignature, self._address_width))

    def __repr__(self):
        return f"AXI4LiteSignature({self._address_width})"


class ControlRegisters(wiring.Component):
    """AXI4-Lite slave holding the Vitis ``ap_ctrl_chain`` control registers and the kernel
    arguments (layout: ``register_map``, module docstring).

    Writes: ``aw`` and ``w`` are each taken into a holding register (``awready``/``wready``
    high while it is empty), so they may arrive in either order or together; the write
    happens the clock after both are held and no response is waiting, then ``b`` is offered
    until ``bready``. Byte lanes follow ``wstrb``. Reads: ``arready`` is high while no read
    response waits; the data is sampled (and clear-on-read bits cleared) on the ``ar``
    handshake and offered on ``r`` from the next clock until ``rready``.

    Kernel side (``ap_ctrl_chain``): ``ap_start`` is the control register's bit 0; on
    ``ap_ready`` it becomes ``auto_restart``. The kernel holds ``ap_done`` until it sees
    ``ap_continue``, which the host pulses by writing bit 4 (with ``auto_restart`` set it is
    also high whenever ``ap_done`` is, so the kernel runs without the host).

    Parameters
    ----------
    arguments : sequence of (str, int)
        Kernel arguments in register order: name (an identifier, also the port's name) and
        bits (32 or 64).
    address_width : int, ``minimum_address_width(arguments)``..32 (default 12)
        Bits of the control bus's byte addresses (Vitis's ``s_axi_control`` range is
        ``2 ** address_width``).

    Members
    -------
    bus : In(AXI4LiteSignature(address_width))
        The AXI4-Lite slave (the kernel's ``s_axi_control``).
    ap_start : Out(1)
        Start request to the kernel (control bit 0).
    ap_continue : Out(1)
        One-clock pulse per host write of control bit 4; high with ``ap_done`` while
        ``auto_restart`` is set.
    ap_ready : In(1)
        The kernel accepts the start (pulse).
    ap_done : In(1)
        The kernel has finished a task (held until ``ap_continue``).
    ap_idle : In(1)
        The kernel is idle.
    interrupt : Out(1)
        ``gier & (isr != 0)``.
    <argument name> : Out(bits)
        One per argument: its register's value.
    """

    @staticmethod
    def _checked(arguments, address_width):
        arguments = check_arguments(arguments)
        lowest = minimum_address_width(arguments)
        return arguments, check_int("address_width", address_width, lowest, 32)

    def __new__(cls, arguments=(), *, address_width=12, src_loc_at=0):
        # Validate before the object exists: Amaranth reports a component whose constructor
        # raised as "created but never used".
        cls._checked(arguments, address_width)
        return super().__new__(cls, src_loc_at=src_loc_at + 1)

    def __init__(self, arguments=(), *, address_width=12, src_loc_at=0):
        self._arguments, self._address_width = self._checked(arguments, address_width)
        super().__init__({
            "bus": In(AXI4LiteSignature(self._address_width)),
            "ap_start": Out(1),
            "ap_continue": Out(1),
            "ap_ready": In(1),
            "ap_done": In(1),
            "ap_idle": In(1),
            "interrupt": Out(1),
            **{name: Out(bits) for name, bits in self._arguments},
        }, src_loc_at=src_loc_at + 1)

    @property
    def arguments(self) -> tuple[tuple[str, int], ...]:
        return self._arguments

    @property
    def address_width(self) -> int:
        return self._address_width

    @property
    def registers(self) -> list[Register]:
        """``register_map(self.arguments)``."""
        return register_map(self._arguments)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus

        # Write channel: hold aw and w until both are here, then write and respond.
        aw_full, w_full = Signal(), Signal()
        aw_word = Signal(self._address_width - 2)
        w_data, w_strb = Signal(DATA_WIDTH), Signal(DATA_WIDTH // 8)
        write = Signal()
        m.d.comb += [
            bus.awready.eq(~aw_full),
            bus.wready.eq(~w_full),
            write.eq(aw_full & w_full & ~bus.bvalid),
            bus.bresp.eq(0),
        ]
        with m.If(bus.awvalid & bus.awready):
            m.d.sync += [aw_full.eq(1), aw_word.eq(bus.awaddr[2:])]
        with m.If(bus.wvalid & bus.wready):
            m.d.sync += [w_full.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]
        with m.If(write):
            m.d.sync += [aw_full.eq(0), w_full.eq(0), bus.bvalid.eq(1)]
        with m.Elif(bus.bready):
            m.d.sync += bus.bvalid.eq(0)
        mask = Cat(lane.replicate(8) for lane in w_strb)

        def writes(offset):
            return write & (aw_word == offset >> 2)

        # Read channel: one response at a time.
        read = Signal()
        m.d.comb += [bus.arready.eq(~bus.rvalid), read.eq(bus.arvalid & bus.arready),
                     bus.rresp.eq(0)]
        reads_control = read & (bus.araddr[2:] == CONTROL >> 2)

        # Control, interrupt enables and status.
        done, ready, auto_restart = Signal(), Signal(), Signal()
        continue_pulse, gie, ier, isr = Signal(), Signal(), Signal(2), Signal(2)
        byte0 = w_strb[0]
        with m.If(writes(CONTROL) & byte0 & w_data[AP_START]):
            m.d.sync += self.ap_start.eq(1)
        with m.Elif(self.ap_ready):
            m.d.sync += self.ap_start.eq(auto_restart)
        with m.If(writes(CONTROL) & byte0):
            m.d.sync += auto_restart.eq(w_data[AUTO_RESTART])
        m.d.sync += continue_pulse.eq(writes(CONTROL) & byte0 & w_data[AP_CONTINUE])
        for flag, event in ((done, self.ap_done), (ready, self.ap_ready)):
            with m.If(event):
                m.d.sync += flag.eq(1)
            with m.Elif(reads_control):
                m.d.sync += flag.eq(0)
        with m.If(writes(GIER) & byte0):
            m.d.sync += gie.eq(w_data[0])
        with m.If(writes(IER) & byte0):
            m.d.sync += ier.eq(w_data[:2])
        for bit, event in enumerate((self.ap_done, self.ap_ready)):
            with m.If(ier[bit] & event):
                m.d.sync += isr[bit].eq(1)
            with m.Elif(writes(ISR) & byte0):
                m.d.sync += isr[bit].eq(isr[bit] ^ w_data[bit])
        m.d.comb += [
            self.ap_continue.eq(continue_pulse | (auto_restart & self.ap_done)),
            self.interrupt.eq(gie & isr.any()),
        ]

        # Read-back words: offset -> value.
        words = {
            CONTROL: Cat(self.ap_start, done, self.ap_idle, ready, Const(0, 3), auto_restart),
            GIER: gie,
            IER: ier,
            ISR: isr,
        }
        # Arguments: one register per 32-bit word, byte lanes by wstrb.
        for row in self.registers[len(_CONTROL_ROWS):]:
            port = getattr(self, row.name)
            for word in range(row.bits // 32):
                offset, part = row.offset + 4 * word, port[32 * word:32 * (word + 1)]
                with m.If(writes(offset)):
                    m.d.sync += part.eq((part & ~mask) | (w_data & mask))
                words[offset] = part

        with m.If(read):
            m.d.sync += bus.rvalid.eq(1)
            with m.Switch(bus.araddr[2:]):
                for offset, value in words.items():
                    with m.Case(offset >> 2):
                        m.d.sync += bus.rdata.eq(value)
                with m.Default():
                    m.d.sync += bus.rdata.eq(0)
        with m.Elif(bus.rready):
            m.d.sync += bus.rvalid.eq(0)
        return m
