# amaranth: UnusedElaboratable=no
"""The command and completion rings (hw/dataflow/ring.py) on the card-memory model: a host
that fills the command ring with wrap-around and drains the completion ring, under memory
latency and stalls, idle cycles and back-pressure on the streams."""

import random

import pytest
from amaranth.lib import data

from hw.dataflow.engine import EngineParams
from hw.dataflow.ring import CommandRing, CompletionRing, payload_words
from hw.lib.params import ParameterError, ParameterTypeError
from sim.amaranth_tb import collect, feed, simulate
from sim.dataflow.memory import CardMemory

PATIENCE = 20_000  # clocks a testbench waits for the design before failing instead of hanging
SMALL = data.StructLayout({"opcode": 4, "tag": 16, "value": 12})  # exactly one word
ODD = data.StructLayout({"a": 33, "b": 7})  # two words, 24 padding bits


def _layout(name):
    p = EngineParams(address_width=40)
    return {"small": SMALL, "odd": ODD, "command": p.command_layout,
            "completion": p.completion_layout}[name]


def _words(value, count):
    return [(value >> (32 * k)) & 0xFFFF_FFFF for k in range(count)]


async def _until(ctx, condition, what):
    for _ in range(PATIENCE):
        if condition():
            return
        await ctx.tick()
    raise AssertionError(f"{what}: not within {PATIENCE} clocks")


@pytest.mark.parametrize("layout_name,port_bits,entries,stall", [
    ("small", 32, 2, 0.0), ("odd", 64, 3, 0.3), ("command", 256, 5, 0.3),
    ("command", 64, 4, 0.5)])
def test_command_ring_delivers_in_order_with_wrap_around(layout_name, port_bits, entries,
                                                         stall):
    layout = _layout(layout_name)
    dut = CommandRing(layout, address_width=20, port_bits=port_bits)
    words = payload_words(layout)
    assert dut.descriptor_words == words == -(-layout.size // 32)
    memory = CardMemory(1 << 14, seed=entries, latency=(0, 6), stall=stall)
    base = memory.allocate("commands", entries * words, align=4)  # any word address
    rng = random.Random(port_bits + entries)
    sent = [rng.getrandbits(layout.size) for _ in range(4 * entries + 3)]
    got = []

    async def host(ctx):
        ctx.set(dut.base, base)
        ctx.set(dut.entries, entries)
        ctx.set(dut.enable, 1)
        head = 0
        for value in sent:
            # refill a slot only once the hardware's tail has passed it
            await _until(ctx, lambda h=head: (h + 1) % entries != ctx.get(dut.tail),
                         "the ring never drained")
            memory.write_words(base + 4 * words * head, _words(value, words))
            head = (head + 1) % entries
            ctx.set(dut.head, head)
            for _ in range(rng.randrange(0, 8)):
                await ctx.tick()

    async def engine(ctx):
        for item in await collect(ctx, dut.command, len(sent), backpressure=0.4, rng=rng):
            got.append(item.as_bits())
        assert ctx.get(dut.tail) == len(sent) % entries
        await ctx.tick()
        assert not ctx.get(dut.busy) and not ctx.get(dut.pending)

    simulate(dut, host, engine, background=[memory.serve_read(dut.port, port_bits)])
    assert got == sent


def test_command_ring_back_pressure_holds_one_descriptor_and_honours_enable():
    layout = _layout("command")
    words = payload_words(layout)
    dut = CommandRing(layout, address_width=20, port_bits=64)
    memory = CardMemory(1 << 12, seed=3, latency=(1, 4), stall=0.2)
    base = 0x200
    values = [random.Random(7).getrandbits(layout.size) for _ in range(3)]
    for index, value in enumerate(values):
        memory.write_words(base + 4 * words * index, _words(value, words))

    async def bench(ctx):
        ctx.set(dut.base, base)
        ctx.set(dut.entries, 8)
        ctx.set(dut.head, 3)
        await ctx.tick().repeat(50)  # not enabled: nothing is read
        assert ctx.get(dut.tail) == 0 and not ctx.get(dut.busy) and ctx.get(dut.pending)
        ctx.set(dut.enable, 1)
        await _until(ctx, lambda: ctx.get(dut.command.valid), "no descriptor")
        for _ in range(100):  # nobody takes it: it is held, stable, and nothing else is read
            assert ctx.get(dut.command.valid) and ctx.get(dut.tail) == 1
            assert ctx.get(dut.command.payload).as_bits() == values[0]
            await ctx.tick()
        assert [item.as_bits() for item in await collect(ctx, dut.command, 3)] == values
        assert ctx.get(dut.tail) == 3
        ctx.set(dut.head, 8)  # a head outside the ring: treated as empty
        await ctx.tick().repeat(20)
        assert ctx.get(dut.tail) == 3 and not ctx.get(dut.pending)
        ctx.set(dut.head, 3)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        ctx.set(dut.enable, 0)
        assert ctx.get(dut.tail) == 0

    simulate(dut, bench, background=[memory.serve_read(dut.port, 64)])


def test_command_ring_clear_forgets_the_old_indices():
    """A clear with an empty ring (``head`` 0, the old ``tail`` elsewhere) reads nothing,
    though ``pending`` is a register: the clear resets it with ``tail``."""
    layout = _layout("small")
    dut = CommandRing(layout, address_width=16, port_bits=32)
    memory = CardMemory(1 << 10, seed=2, latency=(0, 2))
    memory.write_words(0x80, [11, 12, 13, 14])

    async def bench(ctx):
        ctx.set(dut.base, 0x80)
        ctx.set(dut.entries, 4)
        ctx.set(dut.enable, 1)
        ctx.set(dut.head, 3)
        assert [item.as_bits() for item in await collect(ctx, dut.command, 3)] == [11, 12, 13]
        ctx.set(dut.head, 0)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        for _ in range(30):
            assert not ctx.get(dut.command.valid) and not ctx.get(dut.busy)
            assert ctx.get(dut.tail) == 0 and not ctx.get(dut.pending)
            await ctx.tick()
        ctx.set(dut.head, 1)
        assert [item.as_bits() for item in await collect(ctx, dut.command, 1)] == [11]

    simulate(dut, bench, background=[memory.serve_read(dut.port, 32)])


@pytest.mark.parametrize("layout_name,port_bits,entries,stall", [
    ("completion", 32, 2, 0.0), ("completion", 256, 4, 0.3), ("odd", 64, 3, 0.5)])
def test_completion_ring_records_in_order_and_stalls_when_full(layout_name, port_bits, entries,
                                                               stall):
    layout = _layout(layout_name)
    dut = CompletionRing(layout, address_width=20, port_bits=port_bits)
    words = payload_words(layout) + 1
    assert dut.record_words == words
    memory = CardMemory(1 << 14, seed=port_bits, latency=(0, 6), stall=stall)
    base = memory.allocate("completions", entries * words, align=4)
    rng = random.Random(entries + port_bits)
    sent = [rng.getrandbits(layout.size) for _ in range(3 * entries + 2)]
    received, events = [], []

    def record(index):
        raw = [int(v) for v in memory.read_words(base + 4 * words * index, words,
                                                 signed=False)]
        return sum(w << (32 * k) for k, w in enumerate(raw[:-1])), raw[-1]

    async def engine(ctx):
        await feed(ctx, dut.completion, [data.Const(layout, v) for v in sent], idle=0.3,
                   rng=random.Random(1))

    async def host(ctx):
        ctx.set(dut.base, base)
        ctx.set(dut.entries, entries)
        tail = 0
        # Consume nothing until the ring is full: it must stall, not overwrite.
        await _until(ctx, lambda: (ctx.get(dut.head) + 1) % entries == tail, "never full")
        snapshot = record(tail)
        await ctx.tick().repeat(60)
        assert (ctx.get(dut.head) + 1) % entries == tail and not ctx.get(dut.busy)
        assert not ctx.get(dut.completion.ready) and record(tail) == snapshot
        while len(received) < len(sent):
            await _until(ctx, lambda t=tail: ctx.get(dut.head) != t, "no record")
            received.append(record(tail))
            tail = (tail + 1) % entries
            for _ in range(rng.randrange(0, 10)):
                await ctx.tick()
            ctx.set(dut.tail, tail)
        assert ctx.get(dut.sequence) == len(sent) and ctx.get(dut.error) == 0

    async def count_events(ctx):
        async for _, _, event, head in ctx.tick().sample(dut.event, dut.head):
            if event:
                events.append(head)

    simulate(dut, engine, host,
             background=[memory.serve_write(dut.port, port_bits), count_events])
    assert [value for value, _ in received] == sent
    assert [sequence for _, sequence in received] == list(range(1, len(sent) + 1))
    assert events == [(k + 1) % entries for k in range(len(sent))]


def test_completion_ring_clear_restarts_indices():
    layout = _layout("small")
    dut = CompletionRing(layout, address_width=16, port_bits=32)
    memory = CardMemory(1 << 10, seed=1, latency=(0, 2))

    async def bench(ctx):
        ctx.set(dut.base, 0x40)
        ctx.set(dut.entries, 4)
        await feed(ctx, dut.completion, [data.Const(layout, v) for v in (5, 6)])
        await _until(ctx, lambda: ctx.get(dut.head) == 2, "records not written")
        assert ctx.get(dut.sequence) == 2
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        assert (ctx.get(dut.head), ctx.get(dut.sequence)) == (0, 0)
        await feed(ctx, dut.completion, [data.Const(layout, 9)])
        await _until(ctx, lambda: ctx.get(dut.head) == 1, "record not written")
        assert list(memory.read_words(0x40, 2)) == [9, 1]

    simulate(dut, bench, background=[memory.serve_write(dut.port, 32)])


@pytest.mark.parametrize(("build", "error", "message"), [
    (lambda: CommandRing(32), ParameterTypeError,
     "`layout` must be an amaranth.lib.data.StructLayout, not 32"),
    (lambda: CompletionRing(SMALL, port_bits=48), ParameterError,
     "`port_bits` must be a power of two, not 48"),
    (lambda: CommandRing(SMALL, address_width=8), ParameterError,
     "`address_width` must be between 16 and 64, not 8"),
])
def test_bad_parameters_raise(build, error, message):
    with pytest.raises(error) as raised:
        build()
    assert str(raised.value) == message
