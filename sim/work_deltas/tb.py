"""cocotb testbench: K3 ``WorkDeltas`` against ``golden.calculate_work_deltas`` and
``golden.width_policy``.

Configuration: ``parameters`` (the DUT's), ``vectors`` (random calls), ``idle``/``backpressure``
(the random phase), ``perf`` (the call the throughput is measured on), ``seed``, ``case`` (the
``case`` test) and ``measure`` (the ``measurement`` test).

Tests (phases): ``figures`` (the throughput call, no idle or back-pressure), ``directed`` (the
directed calls, no idle or back-pressure), ``random`` (random calls with random idle cycles on
both inputs and back-pressure on the output), ``case`` (the case's call alone: RTL == golden
== the case's ``expected_work_deltas`` and ``expected_next_tree_width`` when present),
``measurement`` (one call per depth of a draft round, back to back). Each call's ``K + 1``
output beats are compared with the golden result by bit pattern, ``W'`` and the packet markers
exactly.
"""

import cocotb
import numpy as np

from hw.kernels.work_deltas import WorkDeltasParams
from sim.bench import KernelBench, golden_matches_case, write_summary
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

INPUTS, OUTPUTS = ("cmd", "scores"), ("deltas",)


def _max_batch(params) -> int:
    """The largest ``batch_size`` the ``cmd`` field holds."""
    return (1 << params.batch_bits) - 1


def _requests(calls) -> int:
    return sum(call.batch_size for call in calls)


async def run_calls(bench, calls, *, idle=0.0, backpressure=0.0):
    """Drive ``calls`` back to back and check every result against the golden; returns the
    ``Transfers`` and the index of each request's first ``scores`` beat."""
    p = bench.params
    k = p.node_top_k
    commands = [command(call, p.max_verify_num) for call in calls]
    beats = [beat for call in calls for beat in score_beats(call, p.lanes, bench.np_rng)]
    words = [sum(int(bits) << (32 * lane) for lane, bits in enumerate(beat["scores"]))
             for beat in beats]
    starts = [index for index, beat in enumerate(beats) if beat["first"]]
    feeds = {
        "cmd": bench.pack("cmd", len(commands),
                          **{name: [c[name] for c in commands] for name in commands[0]})
        if commands else [],
        "scores": bench.pack("scores", len(words), scores=np.array(words, dtype=object),
                             first=[beat["first"] for beat in beats],
                             last=[beat["last"] for beat in beats]) if words else [],
    }
    total = (k + 1) * len(calls)
    work = len(words) + sum(call.batch_size * max(k, 5) + 8 * k + 40 for call in calls)
    run = await bench.run(feeds, {"deltas": total}, work=work, idle=idle,
                          backpressure=backpressure)
    fields = bench.unpack("deltas", run.items["deltas"])
    out = [{name: int(values[i]) for name, values in fields.items()} for i in range(total)]
    for index, call in enumerate(calls):
        check(call, out[index * (k + 1):(index + 1) * (k + 1)])
    return run, starts


@cocotb.test()
async def figures(dut):
    """The throughput call (``perf``): one large call without idle or back-pressure."""
    bench = await KernelBench.start(dut, WorkDeltasParams)
    p = bench.params
    perf = perf_call(p.node_top_k, p.max_verify_num, _max_batch(p), **bench.cfg["perf"])
    run, starts = await run_calls(bench, [perf])
    at = run.at
    request_at = [at["scores"][i] for i in starts]
    per_request = ((request_at[-1] - request_at[0]) / (len(request_at) - 1)
                   if len(request_at) > 1 else float("nan"))
    call_cycles = at["deltas"][-1] - at["cmd"][0] + 1
    drain = at["deltas"][0] - (at["scores"][-1] if at["scores"] else at["cmd"][0])
    bench.log(f"{per_request:.2f} cycles/request at {perf.name}")
    write_summary(
        vectors=1, requests=perf.batch_size, cycles=call_cycles, latency_cycles=drain,
        initiation_interval=per_request,
        extra={"cycles/request": f"{per_request:.2f} at {perf.name} lanes={p.lanes}",
               "call": f"{call_cycles} cycles for {perf.batch_size} requests "
                       f"({call_cycles / perf.batch_size:.2f}/request incl. drain and output)"})


@cocotb.test()
async def directed(dut):
    """The directed calls of §5, without idle or back-pressure."""
    bench = await KernelBench.start(dut, WorkDeltasParams)
    p = bench.params
    await bench.check_calls(run_calls,
                            directed=directed_calls(p.node_top_k, p.max_verify_num, _max_batch(p)))


@cocotb.test()
async def random(dut):
    """``vectors`` random calls under random idle and back-pressure."""
    bench = await KernelBench.start(dut, WorkDeltasParams)
    p = bench.params
    calls = [random_call(bench.np_rng, p.node_top_k, p.max_verify_num, _max_batch(p))
             for _ in range(bench.cfg["vectors"])]
    await bench.check_calls(run_calls, random=calls, stressed=True)


@cocotb.test()
async def case(dut):
    """The case file's call alone: RTL == golden == the case's ``expected_*``."""
    bench = await KernelBench.start(dut, WorkDeltasParams)
    path = bench.cfg["case"]
    call, file_deltas, file_width = call_from_case(path)
    assert call.node_top_k == bench.params.node_top_k, (
        f"the case has node_top_k = {call.node_top_k}, the model {bench.params.node_top_k}")
    deltas, width = expected(call)
    file_expected = {}
    if file_deltas is not None:
        file_expected["work_deltas"] = file_deltas.view(np.uint32).astype(np.int64)
    if file_width is not None:
        file_expected["next_tree_width"] = np.array([file_width], np.int64)
    differing = golden_matches_case({"work_deltas": deltas.view(np.uint32),
                                     "next_tree_width": width}, file_expected)
    assert not differing, (f"golden (work_deltas {deltas.tolist()}, W' {width}) differs from "
                           f"the case's expected_{', expected_'.join(differing)}")
    run, _ = await run_calls(bench, [call])
    bench.log(f"case {path}: RTL == golden"
              + (" == expected_work_deltas" if file_deltas is not None else "")
              + f" (B={call.batch_size}, K={call.node_top_k}, W'={width})")
    write_summary(vectors=1, requests=call.batch_size, cycles=run.at["deltas"][-1],
                  extra={"case": str(path), "requests": call.batch_size, "next_width": width,
                         "expected_work_deltas": "checked" if file_deltas is not None
                         else "absent"})


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one draft round (``config["measure"]``, docs/contributing.md).

    One call per depth (``cumu_counts``), each with the whole batch of random descending
    probabilities, back to back without idle or back-pressure, checked against the golden.
    ``initiation_interval``: the spacing of the last call's request starts.
    """
    bench = await KernelBench.start(dut, WorkDeltasParams)
    p = bench.params
    k, spec = p.node_top_k, bench.cfg["measure"]
    calls = [perf_call(k, p.max_verify_num, _max_batch(p), batch_size=spec["batch_size"],
                       verify_num=spec["verify_num"], cumu_count=count, seed=index)
             for index, count in enumerate(spec["cumu_counts"])]
    run, starts = await run_calls(bench, calls)
    batch = calls[-1].batch_size
    last_starts = [run.at["scores"][i] for i in starts[len(starts) - batch:]]
    bench.measurement(
        run.at, INPUTS, OUTPUTS, operations=3 * k * _requests(calls) + (k + 1) * len(calls),
        invocations=len(calls), interval_of=last_starts,
        notes=f"{len(calls)} calls (one per depth, cumu_count {spec['cumu_counts']}), "
              f"B={batch}, K={k}, verify_num={spec['verify_num']}, lanes={p.lanes}")
