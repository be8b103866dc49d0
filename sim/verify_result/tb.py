"""cocotb testbench: K7 ``VerifyResult`` against ``golden.update_verify_result``.

Configuration: ``parameters`` (the DUT's), ``vectors`` (random calls), ``idle``/``backpressure``,
``perf`` (the throughput call), ``seed``, ``case`` (the ``case`` test) and ``measure`` (the
``measurement`` test).

Tests (phases): ``figures`` (the throughput call, no idle or back-pressure), ``directed``,
``random`` (random and directed calls with random idle cycles on the three inputs and
back-pressure on both outputs), ``case`` (the case's call alone; RTL == golden == the case's
``expected_*`` tensors, those present), ``measurement`` (one verify step of a benchmark contract
point). Every call's ``commit`` writes are applied to copies of the initial ``verified_id`` /
``req_to_token`` buffers and its ``result`` beats read back (``vectors.decode``), then every
output tensor is compared whole with the golden's.
"""

import cocotb
import numpy as np

from hw.kernels.verify_result import VerifyResultParams
from sim.bench import KernelBench, write_summary
from sim.verify_result.vectors import (
    OUTPUT_NAMES,
    call_from_case,
    check,
    command,
    directed_calls,
    expected,
    node_fields,
    perf_call,
    random_call,
    request_fields,
    verify_step_call,
)

INPUTS, OUTPUTS = ("cmd", "nodes", "request"), ("commit", "result")


def _cat(parts):
    return {key: np.concatenate([np.asarray(p[key], dtype=object if key == "accept_index"
                                            else None).reshape(-1) for p in parts])
            for key in parts[0]}


async def run_calls(bench, calls, *, idle=0.0, backpressure=0.0):
    """Drive ``calls`` back to back and check each against the golden; returns the
    ``Transfers``."""
    params = bench.params
    lengths = [expected(c)["accept_length"] for c in calls]
    live = [c for c in calls if c.batch_size]
    feeds = {
        "cmd": bench.pack("cmd", len(calls),
                          **{k: [command(c)[k] for c in calls] for k in command(calls[0])}),
        "nodes": bench.pack("nodes", **_cat([node_fields(c) for c in live])) if live else [],
        "request": bench.pack("request", **_cat(
            [request_fields(c, params.flat_bits, params.max_speculative_tokens)
             for c in live])) if live else [],
    }
    commit_total = int(sum(int(np.sum(x)) for x in lengths))
    result_total = sum(c.batch_size for c in calls)
    run = await bench.run(feeds, {"commit": commit_total, "result": result_total},
                          work=len(feeds["nodes"]) + commit_total + 6 * result_total
                          + 10 * len(calls), idle=idle, backpressure=backpressure)
    commits = bench.unpack("commit", run.items["commit"], signed=("verified_id",))
    results = bench.unpack("result", run.items["result"], signed=("next_root",))
    k = r = 0
    for c, length in zip(calls, lengths, strict=True):
        total = int(np.sum(length))
        check(c, {key: v[k:k + total] for key, v in commits.items()},
              {key: v[r:r + c.batch_size] for key, v in results.items()})
        k += total
        r += c.batch_size
    return run


@cocotb.test()
async def figures(dut):
    """The throughput call (``perf``), no idle or back-pressure."""
    bench = await KernelBench.start(dut, VerifyResultParams)
    perf = perf_call(**bench.cfg["perf"])
    at = (await run_calls(bench, [perf])).at
    result_at = at["result"]
    per_request = ((result_at[-1] - result_at[0]) / (len(result_at) - 1)
                   if len(result_at) > 1 else float("nan"))
    call_cycles = result_at[-1] - at["cmd"][0] + 1
    mean_length = float(np.mean(expected(perf)["accept_length"]))
    bench.log(f"{per_request:.2f} cycles/request at {perf.name}")
    write_summary(
        vectors=1, requests=perf.batch_size, cycles=call_cycles,
        latency_cycles=result_at[0] - at["nodes"][0],  # first node in -> first result out
        initiation_interval=per_request,
        extra={f"cycles/request (verify_num={perf.n}, "
               f"MAXN={bench.cfg['perf']['max_node_count']})":
               f"{per_request:.2f} (n={perf.n}, S={perf.s}, mean accept length "
               f"{mean_length:.2f})",
               "call": f"{call_cycles} cycles for {perf.batch_size} requests incl. fill and "
                       "drain"})


@cocotb.test()
async def directed(dut):
    """The directed calls, no idle or back-pressure."""
    bench = await KernelBench.start(dut, VerifyResultParams)
    params = bench.params
    await bench.check_calls(run_calls, directed=directed_calls(params.max_draft_tokens,
                                                               params.max_speculative_tokens))


@cocotb.test()
async def random(dut):
    """``vectors`` random calls, then the directed ones, under random idle and
    back-pressure."""
    bench = await KernelBench.start(dut, VerifyResultParams)
    maxd, maxs = bench.params.max_draft_tokens, bench.params.max_speculative_tokens
    random_calls = [random_call(bench.np_rng, maxd, maxs) for _ in range(bench.cfg["vectors"])]
    await bench.check_calls(run_calls, random=random_calls, directed=directed_calls(maxd, maxs),
                            stressed=True)


@cocotb.test()
async def case(dut):
    """The case file's call alone: RTL == golden == the case's ``expected_*``."""
    bench = await KernelBench.start(dut, VerifyResultParams)
    call, file_expected = call_from_case(bench.cfg["case"])
    await bench.replay_case(run_calls, call, expected(call), file_expected, OUTPUT_NAMES,
                            last_port="result", batch_size=call.batch_size)


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one verify step (``config["measure"]``), docs/contributing.md:
    one call of ``batch`` requests (``vectors.verify_step_call`` at the point, seed
    ``seed``) without idle or back-pressure, checked against the golden."""
    bench = await KernelBench.start(dut, VerifyResultParams)
    call = verify_step_call(seed=bench.seed, **bench.cfg["measure"])
    at = (await run_calls(bench, [call])).at
    want = expected(call)
    lengths = want["accept_length"].astype(np.int64)
    bench.measurement(
        at, INPUTS, OUTPUTS, operations=2 * int(lengths.sum()) + call.batch_size,
        interval_of=at["result"],
        notes=f"one call, B={call.batch_size}, n={call.n}, S={call.s}: greedy K6 outputs on "
              f"draft-round verify trees, accept lengths {lengths.tolist()}, "
              f"{int(want['finished'].sum())} finished")
