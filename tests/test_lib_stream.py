# amaranth: UnusedElaboratable=no
"""Stream framing helpers: register slice and stalling pipeline handshake, with idle and
back-pressure, on Amaranth's simulator."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.pipeline import stage
from hw.lib.stream import RegisterSlice, packet_layout, stalling_handshake
from sim.amaranth_tb import collect, feed, simulate

TRAFFIC = [(0.0, 0.0), (0.5, 0.0), (0.0, 0.5), (0.4, 0.4)]


class AddOnePipeline(wiring.Component):
    """A 3-stage ``x + 1`` pipeline behind ``stalling_handshake`` (test fixture)."""

    def __init__(self):
        super().__init__({"i": In(stream.Signature(16)), "o": Out(stream.Signature(16))})

    def elaborate(self, platform):
        m = Module()
        en = stalling_handshake(m, latency=3, source=self.i, sink=self.o)
        s1 = stage(m, en, self.i.payload + 1, name="s1")
        s2 = stage(m, en, s1, name="s2")
        m.d.comb += self.o.payload.eq(stage(m, en, s2, name="s3"))
        return m


def run_stream(dut, payloads, *, idle, backpressure, seed=0):
    rng = random.Random(seed)
    received = []
    cycles = []

    async def producer(ctx):
        await feed(ctx, dut.i, payloads, idle=idle, rng=rng)

    async def consumer(ctx):
        received.extend(await collect(ctx, dut.o, len(payloads), backpressure=backpressure,
                                      rng=random.Random(seed + 1)))

    async def clock_counter(ctx):
        count = 0
        while len(received) < len(payloads):
            await ctx.tick()
            count += 1
        cycles.append(count)

    simulate(dut, producer, consumer, clock_counter)
    return received, cycles[0]


@pytest.mark.parametrize(("idle", "backpressure"), TRAFFIC)
def test_register_slice_passes_everything_in_order(idle, backpressure):
    payloads = list(range(300))
    received, _ = run_stream(RegisterSlice(16), payloads, idle=idle, backpressure=backpressure)
    assert received == payloads


def test_register_slice_full_throughput():
    payloads = list(range(200))
    _, cycles = run_stream(RegisterSlice(16), payloads, idle=0.0, backpressure=0.0)
    assert cycles <= len(payloads) + 3


def test_register_slice_carries_struct_payloads():
    layout = packet_layout({"value": 8})
    payloads = [{"value": v, "first": v == 0, "last": v == 9} for v in range(10)]
    received, _ = run_stream(RegisterSlice(layout), payloads, idle=0.3, backpressure=0.3)
    assert [(p.value, p.first, p.last) for p in received] == \
        [(p["value"], int(p["first"]), int(p["last"])) for p in payloads]


@pytest.mark.parametrize(("idle", "backpressure"), TRAFFIC)
def test_stalling_handshake_keeps_order_and_values(idle, backpressure):
    payloads = list(range(400))
    received, _ = run_stream(AddOnePipeline(), payloads, idle=idle, backpressure=backpressure)
    assert received == [p + 1 for p in payloads]


def test_stalling_handshake_one_item_per_clock():
    payloads = list(range(200))
    _, cycles = run_stream(AddOnePipeline(), payloads, idle=0.0, backpressure=0.0)
    assert cycles <= len(payloads) + 4


def test_packet_layout_reserves_marker_names():
    layout = packet_layout({"value": 8})
    assert isinstance(layout, data.StructLayout)
    assert {name for name, _ in layout} == {"value", "first", "last"}
    with pytest.raises(ValueError, match="`first` is a reserved packet field name"):
        packet_layout({"first": 1})


def test_stalling_handshake_rejects_bad_latency():
    source, sink = stream.Signature(16).create(), stream.Signature(16).create()
    with pytest.raises(ValueError, match="`latency` must be a positive integer, not 0"):
        stalling_handshake(Module(), latency=0, source=source, sink=sink)
