"""cocotb testbench: ``Float32Divide`` (``sim.reject_sample.divide.Float32DivideStream``)
against numpy float32 division.

Configuration: ``vectors`` (random pairs), ``seed``, ``idle`` and ``backpressure``
probabilities. Every ordered pair of ``sim.float32.vectors.CORNER_VALUES`` runs first without
idle or back-pressure (latency and initiation interval), then ``divide_operands`` with random
idle and back-pressure. Results compare by bit pattern, NaNs by class.
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
from sim.float32.vectors import directed_operands, mismatches
from sim.payload import pack, unpack
from sim.reject_sample.divide import OPERAND_LAYOUT, RESULT_LAYOUT, divide_operands, quotients


async def _run_phase(dut, a, b, *, idle, backpressure, rng):
    wanted = quotients(a, b)
    payloads = pack(OPERAND_LAYOUT, a=a, b=b)
    source = StreamSource(dut, "i", idle=idle, rng=rng)
    sink = StreamSink(dut, "o", backpressure=backpressure, rng=rng)
    source.send(payloads)
    bench = StreamBench(dut, [source, sink])
    cycles = await bench.run(lambda: len(sink.items) == len(payloads),
                             timeout_cycles=20 * len(payloads) + 200)
    actual = unpack(RESULT_LAYOUT, sink.items)["result"].astype(np.uint32)
    bad = mismatches("div", wanted, actual)
    report = [f"  a={int(a[i]):08x} b={int(b[i]):08x} expected={int(wanted[i]):08x} "
              f"actual={int(actual[i]):08x}" for i in bad[:8]]
    assert bad.size == 0, f"div: {bad.size} of {len(payloads)} quotients differ from numpy:\n" \
        + "\n".join(report)
    return len(payloads), cycles, source.accepted_at, sink.accepted_at


@cocotb.test()
async def float32_divide_matches_numpy(dut):
    cfg = config()
    rng = random.Random(cfg["seed"])
    await start_clock_and_reset(dut)
    directed_a, directed_b = directed_operands()
    n_directed, cycles_directed, sent, received = await _run_phase(
        dut, directed_a, directed_b, idle=0.0, backpressure=0.0, rng=rng)
    latency, interval = latency_and_interval(sent, received)
    random_a, random_b = divide_operands(np.random.default_rng(cfg["seed"]), cfg["vectors"])
    n_random, cycles_random, _, _ = await _run_phase(
        dut, random_a, random_b, idle=cfg["idle"], backpressure=cfg["backpressure"], rng=rng)
    dut._log.info(f"div: {n_directed} directed + {n_random} random vectors bit-exact with numpy")
    write_summary(vectors=n_directed + n_random, directed_vectors=n_directed,
                  random_vectors=n_random, cycles=cycles_directed + cycles_random,
                  latency_cycles=latency, initiation_interval=interval)
