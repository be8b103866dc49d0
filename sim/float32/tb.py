"""cocotb testbench: a float32 core (``Float32OpStream``) against numpy float32.

Configuration (from the harness): ``operation`` (mul, add, cmp), ``vectors`` (random pairs),
``seed``, ``idle`` and ``backpressure`` probabilities. The corner-value pairs run first without
idle or back-pressure (they also give latency and initiation interval), then the random pairs
with random idle and back-pressure. For ``add`` every pair is sent twice, as ``a + b`` and
``a - b``.
"""

import random

import cocotb
import numpy as np

from sim.cocotb_tb import (
    StreamBench,
    StreamSink,
    StreamSource,
    config,
    latency_and_interval,
    start_clock_and_reset,
    write_summary,
)
from sim.float32.dut import OPERAND_LAYOUT, RESULT_LAYOUTS
from sim.float32.vectors import directed_operands, mismatches, random_operands, reference
from sim.payload import pack, unpack


def _operations(operation, a, b):
    """Operands, subtract flags and numpy's results of every item of a phase."""
    if operation == "add":
        subtract = np.repeat([0, 1], a.size)
        expected = np.concatenate([reference("add", a, b), reference("sub", a, b)])
        return np.concatenate([a, a]), np.concatenate([b, b]), subtract, expected
    return a, b, np.zeros(a.size, dtype=np.int64), reference(operation, a, b)


def _results(operation, words):
    fields = unpack(RESULT_LAYOUTS[operation], words)
    if operation == "cmp":
        return np.stack([fields["less"], fields["equal"], fields["greater"]], axis=1).astype(bool)
    return fields["result"].astype(np.uint32)


async def _run_phase(dut, operation, a, b, *, idle, backpressure, rng):
    a, b, subtract, expected = _operations(operation, a, b)
    payloads = pack(OPERAND_LAYOUT, a=a, b=b, subtract=subtract)
    source = StreamSource(dut, "i", idle=idle, rng=rng)
    sink = StreamSink(dut, "o", backpressure=backpressure, rng=rng)
    source.send(payloads)
    bench = StreamBench(dut, [source, sink])
    cycles = await bench.run(lambda: len(sink.items) == len(payloads),
                             timeout_cycles=20 * len(payloads) + 100)
    actual = _results(operation, sink.items)
    bad = mismatches(operation, expected, actual)
    report = [f"  a={int(a[i]):08x} b={int(b[i]):08x} subtract={subtract[i]} "
              f"expected={expected[i]} actual={actual[i]}" for i in bad[:8]]
    assert bad.size == 0, f"{operation}: {bad.size} of {len(payloads)} results differ from " \
        "numpy:\n" + "\n".join(report)
    return len(payloads), cycles, source.accepted_at, sink.accepted_at


@cocotb.test()
async def float32_core_matches_numpy(dut):
    cfg = config()
    operation = cfg["operation"]
    rng = random.Random(cfg["seed"])
    await start_clock_and_reset(dut)

    directed_a, directed_b = directed_operands()
    n_directed, cycles_directed, sent, received = await _run_phase(
        dut, operation, directed_a, directed_b, idle=0.0, backpressure=0.0, rng=rng)
    latency, interval = latency_and_interval(sent, received)

    random_a, random_b = random_operands(np.random.default_rng(cfg["seed"]), cfg["vectors"])
    n_random, cycles_random, _, _ = await _run_phase(
        dut, operation, random_a, random_b, idle=cfg["idle"], backpressure=cfg["backpressure"],
        rng=rng)

    dut._log.info(f"{operation}: {n_directed} directed + {n_random} random vectors "
                  "bit-exact with numpy")
    write_summary(vectors=n_directed + n_random, directed_vectors=n_directed,
                  random_vectors=n_random, cycles=cycles_directed + cycles_random,
                  latency_cycles=latency, initiation_interval=interval)
