"""The K4 kernel on Amaranth's own simulator (unit tests; no Verilator build).

``run_on_amaranth`` drives calls through ``TreeMask(**parameters)`` with optional random idle
cycles on the inputs and back-pressure on the outputs, and checks every call against the
golden (``vectors.check``). ``run_streams`` (also used by the K7 and active-slot unit tests)
steps every stream of a DUT in one clocked loop, like ``sim.cocotb_tb.StreamBench``, and
fails after a cycle budget instead of hanging when a design sends fewer items than expected.
"""

import random

import numpy as np
from amaranth.sim import Simulator

from hw.kernels.tree_mask import TreeMask

from .vectors import check, command, mask_words_expected, node_fields

__all__ = ["run_on_amaranth", "run_streams"]


def run_streams(dut, sources, sinks, *, idle=0.0, backpressure=0.0, seed=0,
                max_cycles=100_000) -> list[list]:
    """Simulate ``dut`` (``sync`` domain), feeding and collecting streams cycle by cycle.

    Parameters
    ----------
    sources : list of (stream, payloads)
        Input streams and the payloads (dicts or ints) to send, in order; before each item a
        source idles with probability ``idle``.
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


def _records(items, layout):
    return {name: np.array([int(getattr(item, name)) for item in items], dtype=object)
            for name, _ in layout}


def run_on_amaranth(parameters: dict, calls, *, idle=0.0, backpressure=0.0, seed=0) -> None:
    """Run ``calls`` back to back on ``TreeMask(**parameters)``; raise ``AssertionError``
    on the first difference from the golden."""
    dut = TreeMask(**parameters)
    maxv, lanes = dut.max_verify_num, dut.mask_lanes
    commands = [command(c) for c in calls]
    nodes, seqs = [], []
    for c in calls:
        fields = node_fields(c)
        nodes += [{k: int(v[i]) for k, v in fields.items()} for i in range(len(fields["token"]))]
        seqs += [{"seq_len": int(s)} for s in c.seq_lens]
    tree_total = sum(c.batch_size * c.n(maxv) for c in calls)
    mask_total = sum(mask_words_expected(c, maxv, lanes) for c in calls)
    work = len(nodes) + 3 * tree_total + mask_total + 20 * len(calls)
    trees, masks = run_streams(
        dut, [(dut.cmd, commands), (dut.nodes, nodes), (dut.seq_lens, seqs)],
        [(dut.tree, tree_total), (dut.mask, mask_total)], idle=idle, backpressure=backpressure,
        seed=seed, max_cycles=int(work / (1 - max(idle, backpressure)) ** 2) * 2 + 1000)
    tree, mask = _records(trees, dut.tree_layout), _records(masks, dut.mask_layout)
    t = w = 0
    for c in calls:
        count, words = c.batch_size * c.n(maxv), mask_words_expected(c, maxv, lanes)
        check(c, maxv, lanes, {k: v[t:t + count] for k, v in tree.items()},
              {k: v[w:w + words] for k, v in mask.items()})
        t, w = t + count, w + words
