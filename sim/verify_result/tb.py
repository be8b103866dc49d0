# amaranth: UnusedElaboratable=no
"""cocotb testbench: K7 ``VerifyResult`` against ``golden.update_verify_result``.

Configuration (from the harness): ``parameters`` (the DUT's ``VerifyResult`` arguments),
``vectors`` (random calls), ``idle``/``backpressure`` probabilities, ``perf`` (the throughput
call), ``seed``, and ``case`` when ``CASE=`` was given (the case's call runs alone; RTL ==
golden == the case's ``expected_*`` tensors, those present).

The throughput call and the directed calls run without idle or back-pressure (the figures
come from the throughput call), then the random calls and the directed calls again with
random idle cycles on the three inputs and back-pressure on both outputs. Every call's
``commit`` writes are applied to copies of the initial ``verified_id`` / ``req_to_token``
buffers and its ``result`` beats read back (``vectors.decode``), then every output tensor is
compared whole with the golden's.

With ``measure`` (``sim.verify_result.measure``): only the ``measurement`` test runs, one
verify step of a benchmark contract point, checked against the golden; the summary's
``measurement`` holds cycles, port bytes and operations.
"""

import random

import cocotb
import numpy as np

from hw.kernels.verify_result import VerifyResult
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


def _cat(parts):
    return {key: np.concatenate([np.asarray(p[key], dtype=object if key == "accept_index"
                                            else None).reshape(-1) for p in parts])
            for key in parts[0]}


async def run_calls(dut, kernel, calls, *, idle, backpressure, rng):
    """Drive ``calls`` back to back and check each against the golden. Returns the
    acceptance cycles ``(cmd, nodes, request, commit, result)``."""
    lengths = [expected(c)["accept_length"] for c in calls]
    cmd_words = pack(kernel.cmd_layout, len(calls),
                     **{k: [command(c)[k] for c in calls] for k in command(calls[0])})
    live = [c for c in calls if c.batch_size]
    node_words = pack(kernel.node_layout, **_cat([node_fields(c) for c in live])) \
        if live else []
    request_words = pack(kernel.request_layout, **_cat(
        [request_fields(c, kernel.flat_bits, kernel.max_speculative_tokens) for c in live])) \
        if live else []
    commit_total = int(sum(int(np.sum(x)) for x in lengths))
    result_total = sum(c.batch_size for c in calls)

    cmd = StreamSource(dut, "cmd", idle=idle, rng=rng)
    nodes = StreamSource(dut, "nodes", idle=idle, rng=rng)
    requests = StreamSource(dut, "request", idle=idle, rng=rng)
    commit = StreamSink(dut, "commit", backpressure=backpressure, rng=rng)
    result = StreamSink(dut, "result", backpressure=backpressure, rng=rng)
    cmd.send(cmd_words)
    nodes.send(node_words)
    requests.send(request_words)
    bench = StreamBench(dut, [cmd, nodes, requests, commit, result])
    work = len(node_words) + commit_total + 6 * result_total + 10 * len(calls)
    await bench.run(lambda: (len(commit.items) == commit_total
                             and len(result.items) == result_total
                             and cmd.done and nodes.done and requests.done),
                    timeout_cycles=int(work / (1 - max(idle, backpressure)) ** 2) * 2 + 2000)
    commits = unpack(kernel.commit_layout, commit.items, signed=("verified_id",))
    results = unpack(kernel.result_layout, result.items, signed=("next_root",))
    k = r = 0
    for c, length in zip(calls, lengths, strict=True):
        total = int(np.sum(length))
        check(c, {key: v[k:k + total] for key, v in commits.items()},
              {key: v[r:r + c.batch_size] for key, v in results.items()})
        k += total
        r += c.batch_size
    return (cmd.accepted_at, nodes.accepted_at, requests.accepted_at, commit.accepted_at,
            result.accepted_at)


def _check_ports(dut, kernel):
    for name, layout in (("cmd", kernel.cmd_layout), ("nodes", kernel.node_layout),
                         ("request", kernel.request_layout), ("commit", kernel.commit_layout),
                         ("result", kernel.result_layout)):
        width = len(getattr(dut, f"{name}__payload"))
        assert width == layout.size, (
            f"port {name}: {width} bits, but VerifyResult(**parameters) has {layout.size}: "
            "the configuration does not describe this model")


async def _replay_case(dut, kernel, path, rng):
    call, file_expected = call_from_case(path)
    limits = {"n": (call.n, kernel.max_draft_tokens),
              "S": (call.s, kernel.max_speculative_tokens),
              "batch_size": (call.batch_size, kernel.max_batch_size)}
    for name, (value, limit) in limits.items():
        if value > limit:
            raise AssertionError(f"the case has {name} = {value}; this model takes at most "
                                 f"{limit}")
    want = expected(call)
    for name, values in file_expected.items():
        assert np.array_equal(np.asarray(want[name]).reshape(-1).astype(np.int64), values), (
            f"golden `{name}` differs from the case's expected_{name}")
    _, _, _, _, result_at = await run_calls(dut, kernel, [call], idle=0.0, backpressure=0.0,
                                            rng=rng)
    checked = sorted(file_expected)
    dut._log.info(f"case {path}: RTL == golden" + (f" == expected_* ({', '.join(checked)})"
                                                   if checked else ""))
    write_summary(vectors=1, cycles=result_at[-1] if result_at else 0,
                  extra={"case": str(path), "requests": call.batch_size,
                         "expected tensors": f"{len(checked)} of {len(OUTPUT_NAMES)} checked"})


@cocotb.test()
async def verify_result_matches_golden(dut):
    cfg = config()
    if "measure" in cfg:  # a `measure` run (sim.verify_result.measure): measurement only
        return
    kernel = VerifyResult(**cfg["parameters"])
    maxd, maxs = kernel.max_draft_tokens, kernel.max_speculative_tokens
    _check_ports(dut, kernel)
    rng = random.Random(cfg["seed"])
    np_rng = np.random.default_rng(cfg["seed"])
    await start_clock_and_reset(dut)
    if "case" in cfg:
        await _replay_case(dut, kernel, cfg["case"], rng)
        return

    perf = perf_call(**cfg["perf"])
    cmd_at, node_at, request_at, commit_at, result_at = await run_calls(
        dut, kernel, [perf], idle=0.0, backpressure=0.0, rng=rng)
    per_request = ((result_at[-1] - result_at[0]) / (len(result_at) - 1)
                   if len(result_at) > 1 else float("nan"))
    call_cycles = result_at[-1] - cmd_at[0] + 1
    latency = result_at[0] - node_at[0]  # first node in -> first result out
    mean_length = float(np.mean(expected(perf)["accept_length"]))

    directed = directed_calls(maxd, maxs)
    await run_calls(dut, kernel, directed, idle=0.0, backpressure=0.0, rng=rng)
    random_calls = [random_call(np_rng, maxd, maxs) for _ in range(cfg["vectors"])]
    stressed = random_calls + directed
    await run_calls(dut, kernel, stressed, idle=cfg["idle"],
                    backpressure=cfg["backpressure"], rng=rng)

    calls = 1 + 2 * len(directed) + len(random_calls)
    requests = perf.batch_size + sum(c.batch_size for c in directed) * 2 + sum(
        c.batch_size for c in random_calls)
    dut._log.info(f"{calls} calls ({requests} requests) bit-exact with the golden; "
                  f"{per_request:.2f} cycles/request at {perf.name}")
    write_summary(
        vectors=calls, directed_vectors=len(directed), random_vectors=len(random_calls),
        requests=requests, cycles=call_cycles, latency_cycles=latency,
        initiation_interval=per_request,
        extra={f"cycles/request (verify_num={perf.n}, MAXN={cfg['perf']['max_node_count']})":
               f"{per_request:.2f} (n={perf.n}, S={perf.s}, mean accept length "
               f"{mean_length:.2f})",
               "call": f"{call_cycles} cycles for {perf.batch_size} requests incl. fill and "
                       "drain",
               "requests checked": requests})


INPUTS, OUTPUTS = ("cmd", "nodes", "request"), ("commit", "result")


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one verify step (``config["measure"]``), docs/contributing.md.

    One call of ``batch`` requests (``vectors.verify_step_call`` at the point, seed
    ``seed``) without idle or back-pressure, checked against the golden (``run_calls``).
    Cycles: first input transfer to last output transfer; bytes: ``port_bytes`` of every
    port's transfers.
    """
    cfg = config()
    if "measure" not in cfg:
        return
    spec = cfg["measure"]
    kernel = VerifyResult(**cfg["parameters"])
    _check_ports(dut, kernel)
    rng = random.Random(cfg["seed"])
    await start_clock_and_reset(dut)

    call = verify_step_call(seed=cfg["seed"], **spec)
    at = dict(zip(INPUTS + OUTPUTS, await run_calls(dut, kernel, [call], idle=0.0,
                                                    backpressure=0.0, rng=rng), strict=True))
    want = expected(call)
    lengths = want["accept_length"].astype(np.int64)
    ports = {name: port_bytes(len(at[name]), len(getattr(dut, f"{name}__payload")))
             for name in INPUTS + OUTPUTS}
    batch = call.batch_size
    measurement = {
        "cycles": max(at[name][-1] for name in OUTPUTS)
        - min(at[name][0] for name in INPUTS) + 1,
        "bytes_in": sum(ports[name] for name in INPUTS),
        "bytes_out": sum(ports[name] for name in OUTPUTS),
        "operations": 2 * int(lengths.sum()) + batch,
        "invocations": 1,
        "ports": ports,
        "notes": f"one call, B={batch}, n={call.n}, S={call.s}: greedy K6 outputs on "
                 f"draft-round verify trees, accept lengths {lengths.tolist()}, "
                 f"{int(want['finished'].sum())} finished",
    }
    if batch > 1:
        measurement["initiation_interval"] = (at["result"][-1] - at["result"][0]) / (batch - 1)
    dut._log.info(f"measurement: {measurement}")
    write_summary(vectors=1, requests=batch, cycles=measurement["cycles"],
                  measurement=measurement)
