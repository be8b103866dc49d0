# amaranth: UnusedElaboratable=no
"""cocotb testbench: K3 ``WorkDeltas`` against ``golden.calculate_work_deltas`` and
``golden.width_policy``.

Configuration (from the harness): ``parameters`` (the DUT's ``WorkDeltas`` arguments),
``vectors`` (random calls), ``idle``/``backpressure`` probabilities, ``perf`` (the call the
throughput is measured on), ``seed``, and ``case`` when ``CASE=`` was given.

Without a case: the throughput call and the directed calls run without idle or back-pressure
(the figures come from the throughput call), then the random calls with random idle cycles on
both inputs and back-pressure on the output. Each call's ``K + 1`` output beats are compared
with the golden result by bit pattern, ``W'`` and the packet markers exactly.

With ``measure`` (``sim.work_deltas.measure``): one call per depth of a draft round, back to
back without idle or back-pressure, checked against the golden; the summary's
``measurement`` holds cycles, port bytes and operations.

With a case: the case's call runs alone; the RTL must equal the golden, and the golden must
equal the case's ``expected_work_deltas`` (and ``expected_next_tree_width`` when present).
"""

import random

import cocotb
import numpy as np

from hw.kernels.work_deltas import WorkDeltas
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
from sim.work_deltas.vectors import (
    call_from_case,
    check,
    command,
    directed_calls,
    expected,
    perf_call,
    random_call,
    score_beats,
)


def _score_words(call, lanes, rng):
    """``scores`` payload integers and the beat index where each request starts."""
    beats = score_beats(call, lanes, rng)
    words = [sum(int(bits) << (32 * lane) for lane, bits in enumerate(beat["scores"]))
             for beat in beats]
    starts = [index for index, beat in enumerate(beats) if beat["first"]]
    return words, [beat["first"] for beat in beats], [beat["last"] for beat in beats], starts


async def _run_calls(dut, kernel, calls, *, idle, backpressure, rng, np_rng):
    """Drive ``calls`` back to back, check every result; return the acceptance cycles
    ``(cmd, scores, deltas)`` and the first beat of every request (indices into scores)."""
    k = kernel.node_top_k
    commands = [command(call, kernel.max_verify_num) for call in calls]
    cmd_words = pack(kernel.cmd_layout, len(commands),
                     **{name: [c[name] for c in commands] for name in commands[0]}) \
        if commands else []
    words, firsts, lasts, starts = [], [], [], []
    for call in calls:
        w, f, la, s = _score_words(call, kernel.lanes, np_rng)
        starts += [len(words) + index for index in s]
        words += w
        firsts += f
        lasts += la
    score_words = pack(kernel.scores_layout, len(words), scores=np.array(words, dtype=object),
                       first=firsts, last=lasts) if words else []

    cmd_source = StreamSource(dut, "cmd", idle=idle, rng=rng)
    score_source = StreamSource(dut, "scores", idle=idle, rng=rng)
    sink = StreamSink(dut, "deltas", backpressure=backpressure, rng=rng)
    cmd_source.send(cmd_words)
    score_source.send(score_words)
    bench = StreamBench(dut, [cmd_source, score_source, sink])
    total = (k + 1) * len(calls)
    work = len(words) + sum(call.batch_size * max(k, 5) + 8 * k + 40 for call in calls)
    await bench.run(lambda: len(sink.items) == total and score_source.done,
                    timeout_cycles=int(work / (1 - max(idle, backpressure))) * 4 + 1000)

    fields = unpack(kernel.output_layout, sink.items)
    beats = [{name: int(values[i]) for name, values in fields.items()} for i in range(total)]
    for index, call in enumerate(calls):
        check(call, beats[index * (k + 1):(index + 1) * (k + 1)])
    return cmd_source.accepted_at, score_source.accepted_at, sink.accepted_at, starts


def _check_ports(dut, kernel):
    for name, layout in (("cmd", kernel.cmd_layout), ("scores", kernel.scores_layout),
                         ("deltas", kernel.output_layout)):
        width = len(getattr(dut, f"{name}__payload"))
        assert width == layout.size, (
            f"port {name}: {width} bits, but {kernel.__class__.__name__}(**parameters) has "
            f"{layout.size}: the configuration does not describe this model")


async def _replay_case(dut, kernel, case_path, rng, np_rng):
    call, file_deltas, file_width = call_from_case(case_path)
    if call.node_top_k != kernel.node_top_k:
        raise AssertionError(f"the case has node_top_k = {call.node_top_k}; this model is "
                             f"built with node_top_k = {kernel.node_top_k}")
    limit = (1 << kernel.cmd_layout["batch_size"].width) - 1
    if call.batch_size > limit:
        raise AssertionError(f"the case has batch_size = {call.batch_size}; this model takes "
                             f"at most {limit}")
    deltas, width = expected(call)
    if file_deltas is not None:
        assert np.array_equal(deltas.view(np.uint32), file_deltas.view(np.uint32)), (
            f"golden {deltas.tolist()} differs from the case's expected_work_deltas "
            f"{file_deltas.tolist()}")
    if file_width is not None:
        assert width == file_width, f"golden W' {width}, the case expects {file_width}"
    _, _, out_at, _ = await _run_calls(dut, kernel, [call], idle=0.0, backpressure=0.0,
                                       rng=rng, np_rng=np_rng)
    dut._log.info(f"case {case_path}: RTL == golden"
                  + (" == expected_work_deltas" if file_deltas is not None else "")
                  + f" (B={call.batch_size}, K={call.node_top_k}, W'={width})")
    write_summary(vectors=1, cycles=out_at[-1] if out_at else 0,
                  extra={"case": str(case_path), "requests": call.batch_size,
                         "next_width": width,
                         "expected_work_deltas": "checked" if file_deltas is not None
                         else "absent"})


async def _measure(dut, kernel, spec, rng, np_rng, max_batch):
    k = kernel.node_top_k
    calls = [perf_call(k, kernel.max_verify_num, max_batch, batch_size=spec["batch_size"],
                       verify_num=spec["verify_num"], cumu_count=count, seed=index)
             for index, count in enumerate(spec["cumu_counts"])]
    cmd_at, score_at, out_at, starts = await _run_calls(
        dut, kernel, calls, idle=0.0, backpressure=0.0, rng=rng, np_rng=np_rng)
    batch = calls[-1].batch_size
    last_starts = [score_at[i] for i in starts[len(starts) - batch:]]
    interval = ((last_starts[-1] - last_starts[0]) / (batch - 1)) if batch > 1 else None
    ports = {"cmd": port_bytes(len(cmd_at), len(dut.cmd__payload)),
             "scores": port_bytes(len(score_at), len(dut.scores__payload)),
             "deltas": port_bytes(len(out_at), len(dut.deltas__payload))}
    requests = sum(call.batch_size for call in calls)
    measurement = {
        "cycles": out_at[-1] - cmd_at[0] + 1,
        "bytes_in": ports["cmd"] + ports["scores"],
        "bytes_out": ports["deltas"],
        "operations": 3 * k * requests + (k + 1) * len(calls),
        "initiation_interval": interval,
        "invocations": len(calls),
        "ports": ports,
        "notes": f"{len(calls)} calls (one per depth, cumu_count {spec['cumu_counts']}), "
                 f"B={batch}, K={k}, verify_num={spec['verify_num']}, lanes={kernel.lanes}",
    }
    write_summary(vectors=len(calls), cycles=measurement["cycles"], measurement=measurement)


@cocotb.test()
async def work_deltas_matches_golden(dut):
    cfg = config()
    kernel = WorkDeltas(**cfg["parameters"])
    k, maxv, lanes = kernel.node_top_k, kernel.max_verify_num, kernel.lanes
    max_batch = (1 << kernel.cmd_layout["batch_size"].width) - 1
    _check_ports(dut, kernel)
    rng = random.Random(cfg["seed"])
    np_rng = np.random.default_rng(cfg["seed"])
    await start_clock_and_reset(dut)

    if "case" in cfg:
        await _replay_case(dut, kernel, cfg["case"], rng, np_rng)
        return
    if "measure" in cfg:
        await _measure(dut, kernel, cfg["measure"], rng, np_rng, max_batch)
        return

    # Throughput: one large call without idle or back-pressure.
    perf = perf_call(k, maxv, max_batch, **cfg["perf"])
    cmd_at, score_at, out_at, starts = await _run_calls(
        dut, kernel, [perf], idle=0.0, backpressure=0.0, rng=rng, np_rng=np_rng)
    request_at = [score_at[i] for i in starts]
    per_request = ((request_at[-1] - request_at[0]) / (len(request_at) - 1)
                   if len(request_at) > 1 else float("nan"))
    call_cycles = out_at[-1] - cmd_at[0] + 1
    drain = out_at[0] - score_at[-1] if score_at else out_at[0] - cmd_at[0]

    directed = directed_calls(k, maxv, max_batch)
    await _run_calls(dut, kernel, directed, idle=0.0, backpressure=0.0, rng=rng,
                     np_rng=np_rng)

    random_calls = [random_call(np_rng, k, maxv, max_batch) for _ in range(cfg["vectors"])]
    cmd_r, _, out_r, _ = await _run_calls(dut, kernel, random_calls, idle=cfg["idle"],
                                          backpressure=cfg["backpressure"], rng=rng,
                                          np_rng=np_rng)
    calls = 1 + len(directed) + len(random_calls)
    requests = perf.batch_size + sum(c.batch_size for c in directed + random_calls)
    dut._log.info(f"{calls} calls ({requests} requests) bit-exact with the golden; "
                  f"{per_request:.2f} cycles/request at {perf.name}")
    write_summary(
        vectors=calls, directed_vectors=len(directed), random_vectors=len(random_calls),
        requests=requests, cycles=call_cycles + (out_r[-1] - cmd_r[0] if out_r else 0),
        latency_cycles=drain, initiation_interval=per_request,
        extra={"cycles/request": f"{per_request:.2f} at {perf.name} lanes={lanes}",
               "call": f"{call_cycles} cycles for {perf.batch_size} requests "
                       f"({call_cycles / perf.batch_size:.2f}/request incl. drain and output)",
               "requests checked": requests})
