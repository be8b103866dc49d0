# amaranth: UnusedElaboratable=no
"""cocotb testbench: ``ActiveSlots`` against ``golden.compact_active_slots``.

Configuration: ``parameters`` (the DUT's arguments), ``vectors`` (random calls, half of them
uniform draws, half the ``finished`` flags of K7 golden calls on draft-round trees),
``idle``/``backpressure``, ``perf`` (the throughput call), ``seed``, and ``case`` when
``CASE=`` was given (the case's call runs alone; RTL == golden == the case's ``expected_*``).

The throughput call and the directed calls run without idle or back-pressure, then the random
and directed calls with random idle on both inputs and back-pressure on the three outputs.
Each call's three outputs are compared whole with the golden's, and ``active_inverse`` is
checked to invert ``active_slots`` on the kernel's own outputs.

With ``measure`` (``sim.active_slots.measure``): only the ``measurement`` test runs, one
verify step of a benchmark contract point, checked against the golden; the summary's
``measurement`` holds cycles, port bytes and operations.
"""

import random

import cocotb
import numpy as np

from hw.kernels.active_slots import ActiveSlots
from sim.active_slots.vectors import (
    OUTPUT_NAMES,
    Call,
    call_from_case,
    check,
    directed_calls,
    expected,
    k7_call,
    perf_call,
    random_call,
)
from sim.cocotb_tb import (
    StreamBench,
    StreamSink,
    StreamSource,
    config,
    start_clock_and_reset,
    write_summary,
)
from sim.payload import pack, unpack
from sim.targets import port_bytes


async def run_calls(dut, kernel, calls, *, idle, backpressure, rng, transfers=None):
    """Drive ``calls`` back to back, check each; returns the acceptance cycles
    ``(cmd, finished, slots, count)``; ``transfers`` (a dict, optional) receives the
    acceptance cycles of every port by name."""
    cmd_words = pack(kernel.cmd_layout, len(calls),
                     batch_size=[c.batch_size for c in calls])
    flags = np.concatenate([c.finished for c in calls]).astype(np.int64)
    position = np.concatenate([np.arange(c.batch_size) for c in calls]).astype(np.int64)
    sizes = np.concatenate([np.full(c.batch_size, c.batch_size) for c in calls])
    finished_words = pack(kernel.finished_layout, len(flags), finished=flags,
                          first=position == 0, last=position == sizes - 1) if len(flags) else []
    total = len(flags)

    cmd = StreamSource(dut, "cmd", idle=idle, rng=rng)
    finished = StreamSource(dut, "finished", idle=idle, rng=rng)
    inverse = StreamSink(dut, "inverse", backpressure=backpressure, rng=rng)
    slots = StreamSink(dut, "slots", backpressure=backpressure, rng=rng)
    count = StreamSink(dut, "count", backpressure=backpressure, rng=rng)
    cmd.send(cmd_words)
    finished.send(finished_words)
    bench = StreamBench(dut, [cmd, finished, inverse, slots, count])
    await bench.run(lambda: (len(inverse.items) == total and len(slots.items) == total
                             and len(count.items) == len(calls) and cmd.done and finished.done),
                    timeout_cycles=int((3 * total + 5 * len(calls))
                                       / (1 - max(idle, backpressure)) ** 2) * 2 + 1000)
    if transfers is not None:
        transfers.update({endpoint.name: endpoint.accepted_at
                          for endpoint in (cmd, finished, inverse, slots, count)})
    inv = unpack(kernel.inverse_layout, inverse.items, signed=("active_inverse",))
    slt = unpack(kernel.slot_layout, slots.items, signed=("active_slot",))
    cnt = unpack(kernel.count_layout, count.items)
    k = 0
    for index, c in enumerate(calls):
        b = c.batch_size
        check(c, {key: v[k:k + b] for key, v in inv.items()},
              {key: v[k:k + b] for key, v in slt.items()},
              {key: v[index:index + 1] for key, v in cnt.items()})
        k += b
    return cmd.accepted_at, finished.accepted_at, slots.accepted_at, count.accepted_at


async def _replay_case(dut, kernel, path, rng):
    call, file_expected = call_from_case(path)
    if call.batch_size > (1 << kernel.batch_bits) - 1:
        raise AssertionError(f"the case has batch_size = {call.batch_size}; this model takes "
                             f"at most {(1 << kernel.batch_bits) - 1}")
    want = expected(call)
    for name, values in file_expected.items():
        assert np.array_equal(want[name], values), \
            f"golden `{name}` differs from the case's expected_{name}"
    _, _, _, count_at = await run_calls(dut, kernel, [call], idle=0.0, backpressure=0.0,
                                        rng=rng)
    checked = sorted(file_expected)
    dut._log.info(f"case {path}: RTL == golden" + (f" == expected_* ({', '.join(checked)})"
                                                   if checked else ""))
    write_summary(vectors=1, cycles=count_at[-1],
                  extra={"case": str(path), "requests": call.batch_size,
                         "expected tensors": f"{len(checked)} of {len(OUTPUT_NAMES)} checked"})


@cocotb.test()
async def active_slots_matches_golden(dut):
    cfg = config()
    if "measure" in cfg:  # a `measure` run (sim.active_slots.measure): measurement only
        return
    kernel = ActiveSlots(**cfg["parameters"])
    for name, layout in (("cmd", kernel.cmd_layout), ("finished", kernel.finished_layout),
                         ("inverse", kernel.inverse_layout), ("slots", kernel.slot_layout),
                         ("count", kernel.count_layout)):
        assert len(getattr(dut, f"{name}__payload")) == layout.size, \
            f"port {name}: the configuration does not describe this model"
    max_batch = (1 << kernel.batch_bits) - 1
    rng = random.Random(cfg["seed"])
    np_rng = np.random.default_rng(cfg["seed"])
    await start_clock_and_reset(dut)
    if "case" in cfg:
        await _replay_case(dut, kernel, cfg["case"], rng)
        return

    perf = perf_call(**{**cfg["perf"], "batch_size": min(cfg["perf"]["batch_size"], max_batch)})
    cmd_at, finished_at, _, count_at = await run_calls(dut, kernel, [perf], idle=0.0,
                                                       backpressure=0.0, rng=rng)
    call_cycles = count_at[-1] - cmd_at[0] + 1
    per_request = call_cycles / perf.batch_size
    interval = ((finished_at[-1] - finished_at[0]) / (len(finished_at) - 1)
                if len(finished_at) > 1 else float("nan"))

    directed = directed_calls(kernel.max_batch_size)
    await run_calls(dut, kernel, directed, idle=0.0, backpressure=0.0, rng=rng)
    random_calls = [random_call(np_rng, max_batch) if i % 2 else k7_call(np_rng, max_batch)
                    for i in range(cfg["vectors"])]
    await run_calls(dut, kernel, random_calls + directed, idle=cfg["idle"],
                    backpressure=cfg["backpressure"], rng=rng)

    calls = 1 + 2 * len(directed) + len(random_calls)
    requests = perf.batch_size + 2 * sum(c.batch_size for c in directed) + sum(
        c.batch_size for c in random_calls)
    alive = int((~perf.finished).sum())
    dut._log.info(f"{calls} calls ({requests} requests) bit-exact with the golden; "
                  f"{per_request:.3f} cycles/request at {perf.name}")
    write_summary(
        vectors=calls, directed_vectors=len(directed), random_vectors=len(random_calls),
        requests=requests, cycles=call_cycles, latency_cycles=count_at[0] - finished_at[-1],
        initiation_interval=interval,
        extra={f"cycles/request (B={perf.batch_size})":
               f"{per_request:.3f} ({perf.name}: {call_cycles} cycles, "
               f"B + (B - active_count) + 2 = {2 * perf.batch_size - alive + 2})",
               "requests checked": requests})


INPUTS, OUTPUTS = ("cmd", "finished"), ("inverse", "slots", "count")


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one verify step (``config["measure"]``), docs/contributing.md.

    One call of ``batch`` rows without idle or back-pressure; ``finished`` is the K7 golden
    result of ``sim.verify_result.vectors.verify_step_call`` at the point (seed ``seed``),
    checked against the golden (``run_calls``). Cycles: first input transfer to last output
    transfer; bytes: ``port_bytes`` of every port's transfers.
    """
    from sim.verify_result.vectors import expected as k7_expected
    from sim.verify_result.vectors import verify_step_call

    cfg = config()
    if "measure" not in cfg:
        return
    kernel = ActiveSlots(**cfg["parameters"])
    for name, layout in (("cmd", kernel.cmd_layout), ("finished", kernel.finished_layout),
                         ("inverse", kernel.inverse_layout), ("slots", kernel.slot_layout),
                         ("count", kernel.count_layout)):
        assert len(getattr(dut, f"{name}__payload")) == layout.size, \
            f"port {name}: the configuration does not describe this model"
    rng = random.Random(cfg["seed"])
    await start_clock_and_reset(dut)

    finished = k7_expected(verify_step_call(seed=cfg["seed"], **cfg["measure"]))["finished"]
    call = Call(f"verify step B={len(finished)}", finished.copy())
    at = {}
    await run_calls(dut, kernel, [call], idle=0.0, backpressure=0.0, rng=rng, transfers=at)
    ports = {name: port_bytes(len(at[name]), len(getattr(dut, f"{name}__payload")))
             for name in INPUTS + OUTPUTS}
    batch = call.batch_size
    measurement = {
        "cycles": max(at[name][-1] for name in OUTPUTS)
        - min(at[name][0] for name in INPUTS) + 1,
        "bytes_in": sum(ports[name] for name in INPUTS),
        "bytes_out": sum(ports[name] for name in OUTPUTS),
        "operations": batch,
        "invocations": 1,
        "ports": ports,
        "notes": f"one call, B={batch}: finished flags of the K7 golden verify step "
                 f"({int(finished.sum())} finished, "
                 f"active_count {int(expected(call)['active_count'][0])})",
    }
    if batch > 1:
        measurement["initiation_interval"] = \
            (at["finished"][-1] - at["finished"][0]) / (batch - 1)
    dut._log.info(f"measurement: {measurement}")
    write_summary(vectors=1, requests=batch, cycles=measurement["cycles"],
                  measurement=measurement)
