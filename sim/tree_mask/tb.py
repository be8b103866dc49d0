"""cocotb testbench: K4 ``TreeMask`` against ``golden.fused_tree_mask_operator``.

Configuration: ``parameters`` (the DUT's), ``vectors`` (random calls: trees grown by the
golden draft round), ``idle``/``backpressure`` (the stressed phases), ``perf`` (the throughput
call), ``seed``, ``case`` (the ``case`` test) and ``measure`` (the ``measurement`` test).

Tests (phases): ``figures`` (the throughput call without idle or back-pressure: cycles per
request, first-output latency), ``directed`` (the directed calls, unstressed), ``random`` (the
random calls with random idle cycles on the three inputs and back-pressure on both outputs),
``stress_directed`` (the directed calls again, stressed), ``case`` (the case's call alone:
RTL == golden == the case's ``expected_*``), ``measurement`` (one verify step of a benchmark
contract point). Every call's ``tree`` records and ``mask`` words are turned back into the
golden's output tensors (``vectors.decode``: packet markers, words per row and zero padding
checked on the way) and compared whole.
"""

import cocotb
import numpy as np

from hw.kernels.tree_mask import TreeMaskParams
from sim.bench import KernelBench, write_summary
from sim.targets import draft_round_node_count
from sim.tree_mask.vectors import (
    OUTPUT_NAMES,
    call_from_case,
    check_calls,
    directed_calls,
    expected,
    grown_call,
    input_fields,
    output_counts,
    perf_call,
    random_call,
    request_starts,
)

INPUTS, OUTPUTS = ("cmd", "nodes", "seq_lens"), ("tree", "mask")
SIGNED = ("next_token", "next_sibling", "draft_token")


async def run_calls(bench, calls, *, idle=0.0, backpressure=0.0):
    """Drive ``calls`` back to back, check each against the golden; returns the
    ``Transfers``."""
    maxv, lanes = bench.params.max_verify_num, bench.params.mask_lanes
    feeds = {port: bench.pack(port, **fields) for port, fields in input_fields(calls).items()}
    counts = output_counts(calls, maxv, lanes)
    work = len(feeds["nodes"]) + sum(c.batch_size * (2 * c.n(maxv) + 12) for c in calls) \
        + counts["mask"] + 10 * len(calls)
    run = await bench.run(feeds, counts, work=work, idle=idle, backpressure=backpressure)
    check_calls(calls, maxv, lanes, bench.unpack("tree", run.items["tree"], signed=SIGNED),
                bench.unpack("mask", run.items["mask"]))
    return run


def _request_at(run, calls) -> list[int]:
    """Acceptance cycle of every request's first node beat."""
    return [run.at["nodes"][i] for i in request_starts(calls)]


@cocotb.test()
async def figures(dut):
    """The throughput call (``perf``) without idle or back-pressure."""
    bench = await KernelBench.start(dut, TreeMaskParams)
    maxn, maxv = bench.params.max_node_count, bench.params.max_verify_num
    perf = perf_call(maxn, **bench.cfg["perf"])
    run = await run_calls(bench, [perf])
    at, request_at = run.at, _request_at(run, [perf])
    per_request = ((request_at[-1] - request_at[0]) / (len(request_at) - 1)
                   if len(request_at) > 1 else float("nan"))
    call_cycles = max(at["tree"][-1], at["mask"][-1]) - at["cmd"][0] + 1
    bench.log(f"throughput call: {perf.batch_size} requests, cumu_count {perf.cumu_count}, "
              f"n {perf.n(maxv)}: {per_request:.2f} cycles/request")
    point = (f"verify_num={perf.verify_num} cumu_count={perf.cumu_count} "
             f"MAXN={maxn} MAXV={maxv} mode={perf.mode}")
    write_summary(
        vectors=1, requests=perf.batch_size, cycles=call_cycles,
        latency_cycles=at["tree"][0] - at["nodes"][0],  # first node in -> first record out
        initiation_interval=per_request,
        extra={f"cycles/request (verify_num={perf.verify_num}, MAXN={maxn})":
               f"{per_request:.2f} ({point})",
               "call": f"{call_cycles} cycles for {perf.batch_size} requests incl. fill and "
                       "drain"})


async def _directed(dut, *, stressed: bool):
    bench = await KernelBench.start(dut, TreeMaskParams)
    params = bench.params
    calls = directed_calls(params.max_node_count, params.max_verify_num, params.mask_lanes)
    await bench.check_calls(run_calls, directed=calls, stressed=stressed)


@cocotb.test()
async def directed(dut):
    """The directed calls, without idle or back-pressure."""
    await _directed(dut, stressed=False)


@cocotb.test()
async def random(dut):
    """``vectors`` random calls under random idle and back-pressure."""
    bench = await KernelBench.start(dut, TreeMaskParams)
    params = bench.params
    calls = [random_call(bench.np_rng, params.max_node_count, params.max_verify_num,
                         params.mask_lanes) for _ in range(bench.cfg["vectors"])]
    await bench.check_calls(run_calls, random=calls, stressed=True)


@cocotb.test()
async def stress_directed(dut):
    """The directed calls once more, under random idle and back-pressure."""
    await _directed(dut, stressed=True)


@cocotb.test()
async def case(dut):
    """The case file's call alone: RTL == golden == the case's ``expected_*``."""
    bench = await KernelBench.start(dut, TreeMaskParams)
    maxn, maxv = bench.params.max_node_count, bench.params.max_verify_num
    call, file_expected = call_from_case(bench.cfg["case"])
    assert call.cumu_count <= maxn and call.n(maxv) == call.n(max(call.verify_num, 1)), (
        f"the case (cumu_count {call.cumu_count}, verify_num {call.verify_num}) needs a "
        f"larger model than max_node_count = {maxn}, max_verify_num = {maxv} "
        "(sim.tree_mask.TARGET.case_parameters)")
    await bench.replay_case(
        run_calls, call, expected(call, maxv), file_expected, OUTPUT_NAMES, last_port="tree",
        tree=f"B={call.batch_size}, cumu_count={call.cumu_count}, n={call.n(maxv)}, "
             f"mode={call.mode}",
        model=f"MAXN={maxn}, MAXV={maxv}, B<={bench.params.max_batch_size}")


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one verify step (``config["measure"]``), docs/contributing.md.

    One call of ``batch`` requests, without idle or back-pressure: each request's cumulative
    tree is grown by the golden draft round (``vectors.grown_call``, seed ``seed``) at the
    point's ``K``, ``tree_width`` (cost 0: every depth as wide as the cap) and ``depth``,
    tokens below the point's ``vocab``, ``seq_lens`` 1000 + b; ``verify_num`` of the point, the
    packed layout; checked against the golden.
    """
    bench = await KernelBench.start(dut, TreeMaskParams)
    spec, params = bench.cfg["measure"], bench.params
    maxn, maxv = params.max_node_count, params.max_verify_num
    batch, k, width, depth = spec["batch"], spec["node_top_k"], spec["tree_width"], \
        spec["depth"]
    call = grown_call(f"verify step B={batch} K={k} W={width} depth={depth}",
                      seed=bench.seed, batch=batch, k=k, width=width, depths=depth,
                      maxn=maxn, verify_num=spec["verify_num"], mode=2,
                      seq_lens=1000 + np.arange(batch), vocab=spec["vocab"])
    full = draft_round_node_count(k, width, depth)
    assert call.cumu_count == full, (
        f"the draft round stopped at cumu_count {call.cumu_count} "
        f"({call.notes['stop']}), not the full {full}")
    n = call.n(maxv)
    run = await run_calls(bench, [call])
    write_summary(requests=batch)
    bench.measurement(
        run.at, INPUTS, OUTPUTS, operations=batch * ((call.cumu_count - 1) * (n - 1) + n),
        interval_of=_request_at(run, [call]),
        notes=f"one call, B={batch}: draft-round trees of cumu_count {call.cumu_count} "
              f"(K={k}, W={width}, depth {depth}), n={n}, packed mask layout "
              f"(QLEN_ONLY_BITPACKING), {len(run.at['mask'])} mask words of "
              f"{params.mask_lanes} bits; DUT MAXN={maxn}, MAXV={maxv}")
