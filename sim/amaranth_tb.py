"""Fast path on Amaranth's own simulator, for small unit tests (no Verilator build).

``simulate`` runs async testbenches on a DUT with a 100 MHz clock; ``feed`` and ``collect``
wrap ``hw.lib.stream.stream_put``/``stream_get`` with random idle cycles and back-pressure.
"""

import random

from amaranth.sim import Simulator

from hw.lib.stream import stream_get, stream_put

__all__ = ["simulate", "feed", "collect"]


def simulate(dut, *testbenches, clocked: bool = True, vcd_file=None) -> None:
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
    """
    sim = Simulator(dut)
    if clocked:
        sim.add_clock(1e-8)
    for testbench in testbenches:
        sim.add_testbench(testbench)
    if vcd_file:
        with sim.write_vcd(vcd_file):
            sim.run()
    else:
        sim.run()


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
