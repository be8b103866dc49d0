"""cocotb testbench: ``ActiveSlots`` against ``golden.compact_active_slots``.

Configuration: ``parameters`` (the DUT's), ``vectors`` (random calls, half of them uniform
draws, half the ``finished`` flags of K7 golden calls on draft-round trees),
``idle``/``backpressure``, ``perf`` (the throughput call), ``seed``, ``case`` (the ``case``
test) and ``measure`` (the ``measurement`` test).

Tests (phases): ``figures`` (the throughput call, no idle or back-pressure), ``directed``,
``random`` (random and directed calls with random idle on both inputs and back-pressure on the
three outputs), ``case`` (RTL == golden == the case's ``expected_*``), ``measurement`` (one
verify step of a benchmark contract point). Each call's three outputs are compared whole with
the golden's, and ``active_inverse`` is checked to invert ``active_slots``.
"""

import cocotb
import numpy as np

from hw.kernels.active_slots import ActiveSlotsParams
from sim.active_slots.vectors import (
    OUTPUT_NAMES,
    Call,
    call_from_case,
    check_calls,
    directed_calls,
    expected,
    k7_call,
    perf_call,
    random_call,
)
from sim.bench import KernelBench, write_summary

INPUTS, OUTPUTS = ("cmd", "finished"), ("inverse", "slots", "count")


async def run_calls(bench, calls, *, idle=0.0, backpressure=0.0):
    """Drive ``calls`` back to back, check each against the golden; returns the
    ``Transfers``."""
    flags = np.concatenate([c.finished for c in calls]).astype(np.int64)
    position = np.concatenate([np.arange(c.batch_size) for c in calls]).astype(np.int64)
    sizes = np.concatenate([np.full(c.batch_size, c.batch_size) for c in calls])
    total = len(flags)
    feeds = {"cmd": bench.pack("cmd", len(calls), batch_size=[c.batch_size for c in calls]),
             "finished": bench.pack("finished", total, finished=flags, first=position == 0,
                                    last=position == sizes - 1) if total else []}
    run = await bench.run(feeds, {"inverse": total, "slots": total, "count": len(calls)},
                          work=3 * total + 5 * len(calls), idle=idle, backpressure=backpressure)
    check_calls(calls, bench.unpack("inverse", run.items["inverse"], signed=("active_inverse",)),
                bench.unpack("slots", run.items["slots"], signed=("active_slot",)),
                bench.unpack("count", run.items["count"]))
    return run


@cocotb.test()
async def figures(dut):
    """The throughput call (``perf``): a full batch without idle or back-pressure."""
    bench = await KernelBench.start(dut, ActiveSlotsParams)
    params = bench.params
    max_batch = (1 << params.batch_bits) - 1
    perf = perf_call(**{**bench.cfg["perf"],
                        "batch_size": min(bench.cfg["perf"]["batch_size"], max_batch)})
    at = (await run_calls(bench, [perf])).at
    call_cycles = at["count"][-1] - at["cmd"][0] + 1
    finished_at = at["finished"]
    interval = ((finished_at[-1] - finished_at[0]) / (len(finished_at) - 1)
                if len(finished_at) > 1 else float("nan"))
    alive = int((~perf.finished).sum())
    per_request = call_cycles / perf.batch_size
    bench.log(f"{per_request:.3f} cycles/request at {perf.name}")
    write_summary(
        vectors=1, requests=perf.batch_size, cycles=call_cycles,
        latency_cycles=at["count"][0] - finished_at[-1], initiation_interval=interval,
        extra={f"cycles/request (B={perf.batch_size})":
               f"{per_request:.3f} ({perf.name}: {call_cycles} cycles, "
               f"B + (B - active_count) + 2 = {2 * perf.batch_size - alive + 2})"})


@cocotb.test()
async def directed(dut):
    """The directed calls, without idle or back-pressure."""
    bench = await KernelBench.start(dut, ActiveSlotsParams)
    params = bench.params
    await bench.check_calls(run_calls, directed=directed_calls(params.max_batch_size))


@cocotb.test()
async def random(dut):
    """``vectors`` random calls, then the directed ones, under random idle and
    back-pressure."""
    bench = await KernelBench.start(dut, ActiveSlotsParams)
    params = bench.params
    max_batch = (1 << params.batch_bits) - 1
    random_calls = [random_call(bench.np_rng, max_batch) if i % 2
                    else k7_call(bench.np_rng, max_batch) for i in range(bench.cfg["vectors"])]
    await bench.check_calls(run_calls, random=random_calls,
                            directed=directed_calls(params.max_batch_size), stressed=True)


@cocotb.test()
async def case(dut):
    """The case file's call alone: RTL == golden == the case's ``expected_*``."""
    bench = await KernelBench.start(dut, ActiveSlotsParams)
    call, file_expected = call_from_case(bench.cfg["case"])
    await bench.replay_case(run_calls, call, expected(call), file_expected, OUTPUT_NAMES,
                            last_port="count", batch_size=call.batch_size)


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one verify step (``config["measure"]``), docs/contributing.md.

    One call of ``batch`` rows without idle or back-pressure; ``finished`` is the K7 golden
    result of ``sim.verify_result.vectors.verify_step_call`` at the point (seed ``seed``),
    checked against the golden.
    """
    from sim.verify_result.vectors import expected as k7_expected
    from sim.verify_result.vectors import verify_step_call

    bench = await KernelBench.start(dut, ActiveSlotsParams)
    finished = k7_expected(verify_step_call(seed=bench.seed, **bench.cfg["measure"]))["finished"]
    call = Call(f"verify step B={len(finished)}", finished.copy())
    at = (await run_calls(bench, [call])).at
    bench.measurement(
        at, INPUTS, OUTPUTS, operations=call.batch_size, interval_of=at["finished"],
        notes=f"one call, B={call.batch_size}: finished flags of the K7 golden verify step "
              f"({int(finished.sum())} finished, "
              f"active_count {int(expected(call)['active_count'][0])})")
