# amaranth: UnusedElaboratable=no
"""The AXI4-Lite control slave (``hw.lib.axi_lite``) on Amaranth's simulator: every register,
byte strobes, aw/w ordering, the ``ap_ctrl_chain`` handshakes, interrupts, unmapped addresses
and back-pressure on the responses."""

import re

import pytest

from hw.lib.axi_lite import (
    ARGUMENT_BASE,
    CONTROL,
    GIER,
    IER,
    ISR,
    AXI4LiteSignature,
    ControlRegisters,
    register_map,
)
from hw.lib.params import ParameterError
from sim.amaranth_tb import simulate

ARGUMENTS = [("logits", 64), ("vocab", 32), ("seed", 64)]
LOGITS, VOCAB, SEED = (ARGUMENT_BASE + 8 * index for index in range(3))
OKAY = 0
PATIENCE = 100  # clocks a handshake may take before the test fails instead of hanging


class Bench:
    """Drives the slave's bus and the kernel-side inputs from one async testbench."""

    def __init__(self, ctx, dut):
        self.ctx, self.dut, self.bus = ctx, dut, dut.bus

    async def offer(self, channels):
        """Offer every ``(valid, ready, [(signal, value), ...])`` channel at once; return when
        each has been accepted."""
        for valid, _, fields in channels:
            for signal, value in fields:
                self.ctx.set(signal, value)
            self.ctx.set(valid, 1)
        pending = list(channels)
        for _ in range(PATIENCE):
            if not pending:
                return
            _, _, *readies = await self.ctx.tick().sample(*(ready for _, ready, _ in pending))
            for channel, ready in zip(list(pending), readies, strict=True):
                if ready:
                    self.ctx.set(channel[0], 0)
                    pending.remove(channel)
        assert not pending, f"not accepted within {PATIENCE} clocks"

    async def accept(self, valid, ready, fields, *, delay=0):
        """Take one transfer from a response channel, refusing it for ``delay`` clocks once it
        is offered; returns ``fields`` as sampled and how many clocks it was offered."""
        self.ctx.set(ready, delay == 0)
        offered = 0
        for _ in range(PATIENCE):
            _, _, is_valid, is_ready, *values = await self.ctx.tick().sample(valid, ready,
                                                                              *fields)
            if is_valid and is_ready:
                self.ctx.set(ready, 0)
                return values, offered + 1
            if is_valid:
                offered += 1
                if offered >= delay:
                    self.ctx.set(ready, 1)
        raise AssertionError(f"no response within {PATIENCE} clocks")

    def aw(self, address):
        return (self.bus.awvalid, self.bus.awready, [(self.bus.awaddr, address)])

    def w(self, data, strb):
        return (self.bus.wvalid, self.bus.wready,
                [(self.bus.wdata, data), (self.bus.wstrb, strb)])

    async def write(self, address, data, *, strb=0xF, order="together", gap=0, delay=0):
        """One write; ``order``: ``together``, ``aw_first`` or ``w_first`` (the second
        ``gap`` clocks after the first). Returns ``bresp``."""
        aw, w = self.aw(address), self.w(data, strb)
        if order == "together":
            await self.offer([aw, w])
        else:
            first, second = (aw, w) if order == "aw_first" else (w, aw)
            await self.offer([first])
            for _ in range(gap):
                _, _, bvalid = await self.ctx.tick().sample(self.bus.bvalid)
                assert not bvalid, "a write was answered before its address and data"
            await self.offer([second])
        (bresp,), _ = await self.accept(self.bus.bvalid, self.bus.bready, [self.bus.bresp],
                                         delay=delay)
        return bresp

    async def read(self, address, *, delay=0, with_response=False):
        """One read; returns ``rdata`` (and ``rresp`` with ``with_response``)."""
        await self.offer([(self.bus.arvalid, self.bus.arready, [(self.bus.araddr, address)])])
        (rdata, rresp), _ = await self.accept(self.bus.rvalid, self.bus.rready,
                                               [self.bus.rdata, self.bus.rresp], delay=delay)
        return (rdata, rresp) if with_response else rdata

    async def pulse(self, signal, clocks=1):
        """Hold a kernel-side input high for ``clocks`` clocks."""
        self.ctx.set(signal, 1)
        await self.ctx.tick().repeat(clocks)
        self.ctx.set(signal, 0)

    def get(self, signal):
        return self.ctx.get(signal)


def run(body, arguments=ARGUMENTS, **parameters):
    """Simulate ``body(bench)`` on a fresh slave."""
    dut = ControlRegisters(arguments, **parameters)

    async def testbench(ctx):
        await body(Bench(ctx, dut))

    simulate(dut, testbench)


def test_register_map_offsets_and_rows():
    rows = register_map(ARGUMENTS)
    assert [(row.offset, row.name, row.bits, row.access) for row in rows] == [
        (0x00, "control", 32, "RW"), (0x04, "gier", 32, "RW"), (0x08, "ier", 32, "RW"),
        (0x0C, "isr", 32, "R/TOW"), (0x10, "logits", 64, "RW"), (0x18, "vocab", 32, "RW"),
        (0x20, "seed", 64, "RW")]
    assert all(isinstance(row.description, str) and row.description for row in rows)
    assert ControlRegisters(ARGUMENTS).registers == rows


def test_ports_of_the_component():
    dut = ControlRegisters(ARGUMENTS, address_width=8)
    assert dut.signature.members["bus"].signature == AXI4LiteSignature(8)
    assert dut.signature.members["bus"].flow.name == "In"
    assert {name: len(getattr(dut, name)) for name, _ in ARGUMENTS} == \
        {"logits": 64, "vocab": 32, "seed": 64}
    assert dut.arguments == tuple(ARGUMENTS) and dut.address_width == 8
    names = set(AXI4LiteSignature(8).members)
    assert names == {f"{channel}{field}" for channel, fields in (
        ("aw", ("valid", "ready", "addr")), ("w", ("valid", "ready", "data", "strb")),
        ("b", ("valid", "ready", "resp")), ("ar", ("valid", "ready", "addr")),
        ("r", ("valid", "ready", "data", "resp"))) for field in fields}


@pytest.mark.parametrize(("arguments", "parameters", "message"), [
    ([("x", 16)], {}, "`arguments[0]` bits must be 32 or 64, not 16"),
    ([("x", 32), ("x", 64)], {},
     "`arguments[1]` name must be unique and not one of the control ports' names, not 'x'"),
    ([("ap_start", 32)], {},
     "`arguments[0]` name must be unique and not one of the control ports' names, not "
     "'ap_start'"),
    ([("a b", 32)], {}, "`arguments[0]` name must be an identifier not starting with '_', not "
                        "'a b'"),
    ([("x", 32, 1)], {}, "`arguments[0]` must be a (name, bits) pair, not ('x', 32, 1)"),
    ("x", {}, "`arguments` must be a sequence of (name, bits) pairs, not 'x'"),
    ([("x", 32)], {"address_width": 4}, "`address_width` must be between 5 and 32, not 4"),
    ([(f"a{i}", 64) for i in range(511)], {},
     "`address_width` must be between 13 and 32, not 12"),
])
def test_bad_parameters_raise_with_the_parameter_named(arguments, parameters, message):
    with pytest.raises(ParameterError, match=f"^{re.escape(message)}$"):
        ControlRegisters(arguments, **parameters)


def test_every_register_writes_and_reads_back():
    async def body(bench):
        assert [await bench.read(offset) for offset in (CONTROL, GIER, IER, ISR)] == [0] * 4
        assert await bench.write(GIER, 0xFFFF_FFFF) == OKAY
        assert await bench.write(IER, 0xFFFF_FFFF) == OKAY
        assert await bench.write(CONTROL, 0x80) == OKAY
        for offset, value in ((LOGITS, 0x89AB_CDEF), (LOGITS + 4, 0x0123_4567),
                              (VOCAB, 151_936), (SEED, 0xDEAD_BEEF), (SEED + 4, 0xFEED_F00D)):
            assert await bench.write(offset, value) == OKAY
        assert await bench.read(GIER) == 1
        assert await bench.read(IER) == 3
        assert await bench.read(CONTROL) == 0x80  # auto_restart only
        assert await bench.read(ISR) == 0
        assert [await bench.read(offset) for offset in (LOGITS, LOGITS + 4, VOCAB, SEED,
                                                        SEED + 4)] == \
            [0x89AB_CDEF, 0x0123_4567, 151_936, 0xDEAD_BEEF, 0xFEED_F00D]
        assert bench.get(bench.dut.logits) == 0x0123_4567_89AB_CDEF
        assert bench.get(bench.dut.vocab) == 151_936
        assert bench.get(bench.dut.seed) == 0xFEED_F00D_DEAD_BEEF
        assert bench.get(bench.dut.ap_start) == 0
        assert await bench.read(VOCAB, with_response=True) == (151_936, OKAY)

    run(body)


def test_wstrb_writes_only_the_enabled_byte_lanes():
    async def body(bench):
        await bench.write(VOCAB, 0xFFFF_FFFF)
        await bench.write(VOCAB, 0x1234_5678, strb=0b0101)
        assert await bench.read(VOCAB) == 0xFF34_FF78
        await bench.write(VOCAB, 0, strb=0)
        assert await bench.read(VOCAB) == 0xFF34_FF78
        await bench.write(SEED + 4, 0xAB00_0000, strb=0b1000)
        assert bench.get(bench.dut.seed) == 0xAB00_0000_0000_0000
        # Control bits live in byte 0: a write without lane 0 neither starts nor configures.
        await bench.write(CONTROL, 0x81, strb=0b1110)
        assert await bench.read(CONTROL) == 0 and bench.get(bench.dut.ap_start) == 0
        await bench.write(GIER, 1, strb=0b0010)
        assert await bench.read(GIER) == 0

    run(body)


@pytest.mark.parametrize("order", ["together", "aw_first", "w_first"])
@pytest.mark.parametrize("gap", [0, 3])
def test_address_and_data_in_either_order(order, gap):
    async def body(bench):
        await bench.write(VOCAB, 0x0102_0304, order=order, gap=gap)
        await bench.write(LOGITS, 0x0506_0708, order=order, gap=gap)
        await bench.write(LOGITS + 4, 0x090A_0B0C, order=order, gap=gap)
        assert await bench.read(VOCAB) == 0x0102_0304
        assert bench.get(bench.dut.logits) == 0x090A_0B0C_0506_0708

    run(body)


def test_a_held_address_waits_for_its_data():
    async def body(bench):
        bus = bench.bus
        await bench.offer([bench.aw(VOCAB)])
        for _ in range(4):  # the address is held: no second address, no response yet
            _, _, awready, bvalid = await bench.ctx.tick().sample(bus.awready, bus.bvalid)
            assert not awready and not bvalid
        await bench.offer([bench.w(77, 0xF)])
        (bresp,), _ = await bench.accept(bus.bvalid, bus.bready, [bus.bresp])
        assert bresp == OKAY and await bench.read(VOCAB) == 77

    run(body)


def test_ap_start_is_cleared_by_ap_ready():
    async def body(bench):
        dut = bench.dut
        await bench.write(CONTROL, 0x01)
        assert bench.get(dut.ap_start) == 1
        await bench.write(CONTROL, 0x00)  # the host cannot withdraw a start
        assert bench.get(dut.ap_start) == 1
        assert await bench.read(CONTROL) == 0x01
        await bench.pulse(dut.ap_ready)
        assert bench.get(dut.ap_start) == 0
        assert await bench.read(CONTROL) == 0x08  # ap_ready seen, clear on read
        assert await bench.read(CONTROL) == 0x00

    run(body)


def test_ap_done_is_clear_on_read_and_ap_continue_a_pulse():
    async def body(bench):
        dut = bench.dut
        await bench.pulse(dut.ap_done)
        assert bench.get(dut.ap_continue) == 0  # no auto_restart: the host continues
        assert await bench.read(CONTROL) == 0x02
        assert await bench.read(CONTROL) == 0x00
        bench.ctx.set(dut.ap_idle, 1)
        assert await bench.read(CONTROL) == 0x04
        bench.ctx.set(dut.ap_idle, 0)
        await bench.offer([bench.aw(CONTROL), bench.w(0x10, 0xF)])
        highs = []
        for _ in range(6):
            _, _, value = await bench.ctx.tick().sample(dut.ap_continue)
            highs.append(value)
        assert highs.count(1) == 1  # exactly one clock
        await bench.accept(bench.bus.bvalid, bench.bus.bready, [bench.bus.bresp])
        assert await bench.read(CONTROL) == 0x00  # ap_continue reads 0

    run(body)


def test_an_event_in_the_clock_of_the_clearing_read_is_kept():
    async def body(bench):
        dut, bus = bench.dut, bench.bus
        bench.ctx.set(bus.araddr, CONTROL)
        bench.ctx.set(bus.arvalid, 1)
        bench.ctx.set(dut.ap_done, 1)
        _, _, arready = await bench.ctx.tick().sample(bus.arready)
        assert arready  # the read and the event in the same clock
        bench.ctx.set(bus.arvalid, 0)
        bench.ctx.set(dut.ap_done, 0)
        (rdata,), _ = await bench.accept(bus.rvalid, bus.rready, [bus.rdata])
        assert rdata == 0x00  # sampled before the event
        assert await bench.read(CONTROL) == 0x02  # the event was kept
        assert await bench.read(CONTROL) == 0x00

    run(body)


def test_auto_restart_keeps_the_kernel_running():
    async def body(bench):
        dut = bench.dut
        await bench.write(CONTROL, 0x81)
        for _ in range(3):
            await bench.pulse(dut.ap_ready)
            assert bench.get(dut.ap_start) == 1
        bench.ctx.set(dut.ap_done, 1)
        assert bench.get(dut.ap_continue) == 1  # done is continued without the host
        await bench.ctx.tick()
        bench.ctx.set(dut.ap_done, 0)
        assert bench.get(dut.ap_continue) == 0
        await bench.write(CONTROL, 0x00)  # clear auto_restart: the next ap_ready stops it
        assert bench.get(dut.ap_start) == 1
        await bench.pulse(dut.ap_ready)
        assert bench.get(dut.ap_start) == 0
        assert await bench.read(CONTROL) == 0x0A  # done and ready seen

    run(body)


def test_isr_toggles_on_write_and_drives_the_interrupt():
    async def body(bench):
        dut = bench.dut
        await bench.write(IER, 0x1)  # ap_done only
        await bench.pulse(dut.ap_ready)
        await bench.pulse(dut.ap_done)
        assert await bench.read(ISR) == 0x1
        assert bench.get(dut.interrupt) == 0  # global enable off
        await bench.write(GIER, 1)
        assert bench.get(dut.interrupt) == 1
        await bench.write(ISR, 0x1)  # write 1 to clear
        assert await bench.read(ISR) == 0 and bench.get(dut.interrupt) == 0
        await bench.write(IER, 0x3)
        await bench.pulse(dut.ap_ready)
        assert await bench.read(ISR) == 0x2 and bench.get(dut.interrupt) == 1
        await bench.write(ISR, 0x3)  # toggles: bit 1 cleared, bit 0 set
        assert await bench.read(ISR) == 0x1
        await bench.write(ISR, 0x1, strb=0b1110)  # lane 0 off: ignored
        assert await bench.read(ISR) == 0x1
        await bench.write(ISR, 0x1)
        assert await bench.read(ISR) == 0 and bench.get(dut.interrupt) == 0

    run(body)


def test_unmapped_addresses_read_zero_and_ignore_writes():
    async def body(bench):
        await bench.write(VOCAB, 0x5555_5555)
        for offset in (VOCAB + 4, SEED + 8, 0x7C, 0xFFC, 0x103):
            assert await bench.write(offset, 0xFFFF_FFFF) == OKAY
        for offset in (VOCAB + 4, SEED + 8, 0x7C, 0xFFC):
            assert await bench.read(offset, with_response=True) == (0, OKAY)
        assert await bench.read(VOCAB) == 0x5555_5555
        assert [await bench.read(offset) for offset in (CONTROL, GIER, IER, ISR, LOGITS,
                                                        SEED)] == [0] * 6
        assert await bench.read(VOCAB + 2) == 0x5555_5555  # byte offset within a word

    run(body)


def test_back_pressure_on_b_and_r():
    async def body(bench):
        bus = bench.bus
        await bench.offer([bench.aw(VOCAB), bench.w(11, 0xF)])
        # A second write is taken in while the first response waits, and done after it.
        await bench.offer([bench.aw(SEED), bench.w(22, 0xF)])
        for _ in range(3):
            _, _, bvalid = await bench.ctx.tick().sample(bus.bvalid)
            assert bvalid
        assert await bench.read(SEED) == 0
        (bresp,), offered = await bench.accept(bus.bvalid, bus.bready, [bus.bresp], delay=5)
        assert (bresp, offered) == (OKAY, 6)
        (bresp,), _ = await bench.accept(bus.bvalid, bus.bready, [bus.bresp])
        assert bresp == OKAY and await bench.read(SEED) == 22
        await bench.offer([(bus.arvalid, bus.arready, [(bus.araddr, VOCAB)])])
        for _ in range(4):  # response refused: rdata holds, no second read is taken
            _, _, rvalid, rdata, arready = await bench.ctx.tick().sample(bus.rvalid, bus.rdata,
                                                                         bus.arready)
            assert (rvalid, rdata, arready) == (1, 11, 0)
        (rdata,), _ = await bench.accept(bus.rvalid, bus.rready, [bus.rdata])
        assert rdata == 11
        assert await bench.read(SEED, delay=3) == 22
        assert await bench.write(VOCAB, 33, order="w_first", gap=2, delay=4) == OKAY
        assert await bench.read(VOCAB) == 33

    run(body)
