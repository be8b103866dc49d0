"""Fast path on Amaranth's own simulator, for small unit tests (no Verilator build).

``simulate`` runs async testbenches on a DUT with a 100 MHz clock. ``run_streams`` is the one
stream driver of these tests: it steps every input and output stream of a DUT in one clocked
loop (like ``sim.cocotb_tb.StreamBench`` under Verilator), with random idle cycles on the
inputs and back-pressure on the outputs, and fails after a cycle budget instead of hanging
when a design sends fewer items than expected. ``feed`` and ``collect`` wrap
``hw.lib.stream.stream_put``/``stream_get`` for testbenches that interleave other work.
"""

import random

from amaranth.sim import Simulator

from hw.lib.stream import stream_get, stream_put

__all__ = ["simulate", "run_streams", "records", "feed", "collect"]


def simulate(dut, *testbenches, clocked: bool = True, vcd_file=None, background=()) -> None:
    """Run ``testbenches`` (async functions of ``ctx``) on ``dut`` until all return.

    Parameters
    ----------
    dut : Elaboratable
        The design, clocked by the ``sync`` domain.
    *testbenches : async callables
        Amaranth testbenches, run concurrently.
    clocked : bool
        Whether the design has a ``sync`` domain to clock (False for combinational logic).
    vcd_file : str or None
        Optional waveform dump.
    background : async callables
        Testbenches that run forever beside the others (models of memories and peers); the
        simulation ends when ``testbenches`` have returned.
    """
    sim = Simulator(dut)
    if clocked:
        sim.add_clock(1e-8)
    for testbench in testbenches:
        sim.add_testbench(testbench)
    for testbench in background:
        sim.add_testbench(testbench, background=True)
    if vcd_file:
        with sim.write_vcd(vcd_file):
            sim.run()
    else:
        sim.run()


def run_streams(dut, sources, sinks, *, idle=0.0, backpressure=0.0, seed=0,
                max_cycles=100_000) -> list[list]:
    """Simulate ``dut`` (``sync`` domain), feeding and collecting streams cycle by cycle.

    Parameters
    ----------
    sources : list of (stream, payloads)
        Input streams and the payloads to send, in order (dicts of field values for layout
        payloads, ints for plain ones); before each item a source idles with probability
        ``idle``.
    sinks : list of (stream, count)
        Output streams and the number of items to collect; each clock a sink refuses with
        probability ``backpressure``.
    max_cycles : int
        Budget; ``AssertionError`` when the items have not all been moved by then.

    Returns the collected payloads of every sink.
    """
    rng = random.Random(seed)
    collected = [[] for _ in sinks]

    async def bench(ctx):
        queues = [list(payloads) for _, payloads in sources]
        offering = [False] * len(sources)
        for cycle in range(max_cycles + 1):
            done = not any(queues) and not any(offering) and all(
                len(items) >= count for items, (_, count) in zip(collected, sinks,
                                                                 strict=True))
            if done:
                break
            if cycle == max_cycles:
                raise AssertionError(
                    f"the streams did not finish within {max_cycles} clocks: "
                    f"{[len(q) for q in queues]} items left to send, "
                    f"{[len(c) for c in collected]} of {[n for _, n in sinks]} received")
            for index, (stream, _) in enumerate(sources):
                if not offering[index] and queues[index] and rng.random() >= idle:
                    ctx.set(stream.payload, queues[index][0])
                    offering[index] = True
                ctx.set(stream.valid, offering[index])
            ready = []
            for items, (stream, count) in zip(collected, sinks, strict=True):
                ready.append(len(items) < count and rng.random() >= backpressure)
                ctx.set(stream.ready, ready[-1])
            signals = [stream.ready for stream, _ in sources]
            for stream, _ in sinks:
                signals += [stream.valid, stream.payload]
            _, _, *values = await ctx.tick().sample(*signals)
            for index in range(len(sources)):
                if offering[index] and values[index]:
                    queues[index].pop(0)
                    offering[index] = False
            values = values[len(sources):]
            for index, items in enumerate(collected):
                if ready[index] and values[2 * index]:
                    items.append(values[2 * index + 1])
        for stream, _ in sources:
            ctx.set(stream.valid, 0)
        for stream, _ in sinks:
            ctx.set(stream.ready, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return collected


def records(items, layout, dtype=object) -> dict:
    """Field name -> numpy array of that field over ``items`` (views of ``layout`` collected
    by ``run_streams``)."""
    import numpy as np

    return {name: np.array([int(getattr(item, name)) for item in items], dtype=dtype)
            for name, _ in layout}


async def feed(ctx, stream, payloads, *, idle: float = 0.0, rng: random.Random | None = None):
    """Send every payload on ``stream``, idling before each with probability ``idle``."""
    rng = rng or random.Random(0)
    for payload in payloads:
        while idle > 0 and rng.random() < idle:
            await ctx.tick()
        await stream_put(ctx, stream, payload)


async def collect(ctx, stream, count: int, *, backpressure: float = 0.0,
                  rng: random.Random | None = None) -> list:
    """Receive ``count`` payloads from ``stream``, refusing with probability ``backpressure``."""
    rng = rng or random.Random(1)
    items = []
    while len(items) < count:
        while backpressure > 0 and rng.random() < backpressure:
            await ctx.tick()
        items.append(await stream_get(ctx, stream))
    return items
