# amaranth: UnusedElaboratable=no
"""cocotb testbench: K4 ``TreeMask`` against ``golden.fused_tree_mask_operator``.

Configuration (from the harness): ``parameters`` (the DUT's ``TreeMask`` arguments),
``vectors`` (random calls), ``idle``/``backpressure`` probabilities, ``stress_directed``
(run the directed calls again under idle/back-pressure), ``perf`` (the throughput call),
``seed``, and ``case`` when ``CASE=`` was given.

Without a case: the throughput call and the directed calls run without idle or back-pressure
(the figures come from the throughput call), then the random calls (trees grown by the golden
draft round) with random idle cycles on the three inputs and back-pressure on both outputs,
then (``stress_directed``) the directed calls again, stressed. Every call's ``tree`` records
and ``mask`` words are turned back into the golden's output tensors (``vectors.decode``:
packet markers, words per row and zero padding checked on the way) and compared whole.

With a case: the case's call runs alone; the RTL must equal the golden, and the golden must
equal the case's ``expected_*`` tensors (those present).

With ``measure`` (``sim.tree_mask.measure``): only the ``measurement`` test runs, one verify
step of a benchmark contract point, checked against the golden; the summary's
``measurement`` holds cycles, port bytes and operations.
"""

import random

import cocotb
import numpy as np

from hw.kernels.tree_mask import TreeMask
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
from sim.tree_mask.vectors import (
    OUTPUT_NAMES,
    call_from_case,
    check,
    command,
    directed_calls,
    expected,
    grown_call,
    mask_words_expected,
    node_fields,
    perf_call,
    random_call,
    seq_fields,
)

SIGNED = ("next_token", "next_sibling", "draft_token")


def _cat(parts):
    keys = parts[0].keys()
    return {key: np.concatenate([np.asarray(p[key]).reshape(-1) for p in parts]) for key in keys}


async def run_calls(dut, kernel, calls, *, idle, backpressure, rng, transfers=None):
    """Drive ``calls`` back to back and check each against the golden. Returns the
    acceptance cycles ``(cmd, nodes, tree, mask)`` and the beat index where each request's
    nodes start; ``transfers`` (a dict, optional) receives the acceptance cycles of every
    port by name."""
    maxv, lanes = kernel.max_verify_num, kernel.mask_lanes
    cmd_words = pack(kernel.cmd_layout, len(calls),
                     **{k: [command(c)[k] for c in calls] for k in command(calls[0])})
    node_parts = [node_fields(c) for c in calls if c.batch_size]
    node_words = pack(kernel.node_layout, **_cat(node_parts)) if node_parts else []
    seq_parts = [seq_fields(c) for c in calls if c.batch_size]
    seq_words = pack(kernel.seq_layout, **_cat(seq_parts)) if seq_parts else []
    starts, beat = [], 0
    for c in calls:
        for _ in range(c.batch_size):
            starts.append(beat)
            beat += c.cumu_count
    tree_total = sum(c.batch_size * c.n(maxv) for c in calls)
    mask_total = sum(mask_words_expected(c, maxv, lanes) for c in calls)

    cmd = StreamSource(dut, "cmd", idle=idle, rng=rng)
    nodes = StreamSource(dut, "nodes", idle=idle, rng=rng)
    seqs = StreamSource(dut, "seq_lens", idle=idle, rng=rng)
    tree = StreamSink(dut, "tree", backpressure=backpressure, rng=rng)
    mask = StreamSink(dut, "mask", backpressure=backpressure, rng=rng)
    cmd.send(cmd_words)
    nodes.send(node_words)
    seqs.send(seq_words)
    bench = StreamBench(dut, [cmd, nodes, seqs, tree, mask])
    work = len(node_words) + sum(c.batch_size * (2 * c.n(maxv) + 12) for c in calls) \
        + mask_total + 10 * len(calls)
    await bench.run(lambda: (len(tree.items) == tree_total and len(mask.items) == mask_total
                             and cmd.done and nodes.done and seqs.done),
                    timeout_cycles=int(work / (1 - max(idle, backpressure)) ** 2) * 2 + 2000)
    if transfers is not None:
        transfers.update({endpoint.name: endpoint.accepted_at
                          for endpoint in (cmd, nodes, seqs, tree, mask)})
    tree_fields = unpack(kernel.tree_layout, tree.items, signed=SIGNED)
    mask_fields = unpack(kernel.mask_layout, mask.items)
    t = w = 0
    for c in calls:
        count = c.batch_size * c.n(maxv)
        words = mask_words_expected(c, maxv, lanes)
        check(c, maxv, lanes, {k: v[t:t + count] for k, v in tree_fields.items()},
              {k: v[w:w + words] for k, v in mask_fields.items()})
        t += count
        w += words
    return cmd.accepted_at, nodes.accepted_at, tree.accepted_at, mask.accepted_at, starts


def _check_ports(dut, kernel):
    for name, layout in (("cmd", kernel.cmd_layout), ("nodes", kernel.node_layout),
                         ("seq_lens", kernel.seq_layout), ("tree", kernel.tree_layout),
                         ("mask", kernel.mask_layout)):
        width = len(getattr(dut, f"{name}__payload"))
        assert width == layout.size, (
            f"port {name}: {width} bits, but TreeMask(**parameters) has {layout.size}: the "
            "configuration does not describe this model")


async def _replay_case(dut, kernel, path, rng):
    call, file_expected = call_from_case(path)
    maxn, maxv = kernel.max_node_count, kernel.max_verify_num
    if call.cumu_count > maxn:
        raise AssertionError(f"the case has cumu_count = {call.cumu_count}; this model holds "
                             f"at most max_node_count = {maxn} nodes")
    if call.verify_num > maxv and call.cumu_count > maxv:
        raise AssertionError(f"the case has verify_num = {call.verify_num}; this model is "
                             f"built with max_verify_num = {maxv}")
    want = expected(call, maxv)
    for name, values in file_expected.items():
        assert np.array_equal(np.asarray(want[name]).reshape(-1).astype(np.int64), values), (
            f"golden `{name}` differs from the case's expected_{name}")
    _, _, tree_at, _, _ = await run_calls(dut, kernel, [call], idle=0.0, backpressure=0.0,
                                          rng=rng)
    checked = sorted(file_expected)
    dut._log.info(f"case {path}: RTL == golden" + (f" == expected_* ({', '.join(checked)})"
                                                   if checked else "")
                  + f" (B={call.batch_size}, cumu_count={call.cumu_count}, "
                    f"n={call.n(maxv)}, mode={call.mode})")
    write_summary(vectors=1, cycles=tree_at[-1] if tree_at else 0,
                  extra={"case": str(path), "requests": call.batch_size,
                         "expected tensors": f"{len(checked)} of {len(OUTPUT_NAMES)} checked"})


@cocotb.test()
async def tree_mask_matches_golden(dut):
    cfg = config()
    if "measure" in cfg:  # a `measure` run (sim.tree_mask.measure): the measurement test only
        return
    kernel = TreeMask(**cfg["parameters"])
    maxn, maxv, lanes = kernel.max_node_count, kernel.max_verify_num, kernel.mask_lanes
    _check_ports(dut, kernel)
    rng = random.Random(cfg["seed"])
    np_rng = np.random.default_rng(cfg["seed"])
    await start_clock_and_reset(dut)

    if "case" in cfg:
        await _replay_case(dut, kernel, cfg["case"], rng)
        return

    # Throughput: one call of `batch_size` requests, no idle or back-pressure.
    perf = perf_call(maxn, **cfg["perf"])
    cmd_at, node_at, tree_at, mask_at, starts = await run_calls(
        dut, kernel, [perf], idle=0.0, backpressure=0.0, rng=rng)
    request_at = [node_at[i] for i in starts]
    per_request = ((request_at[-1] - request_at[0]) / (len(request_at) - 1)
                   if len(request_at) > 1 else float("nan"))
    call_cycles = max(tree_at[-1], mask_at[-1]) - cmd_at[0] + 1
    latency = tree_at[0] - node_at[0]  # first node in -> first tree record out
    n_perf = perf.n(maxv)
    dut._log.info(f"throughput call: {perf.batch_size} requests, cumu_count "
                  f"{perf.cumu_count}, n {n_perf}: {per_request:.2f} cycles/request")

    directed = directed_calls(maxn, maxv, lanes)
    await run_calls(dut, kernel, directed, idle=0.0, backpressure=0.0, rng=rng)

    random_calls = [random_call(np_rng, maxn, maxv, lanes) for _ in range(cfg["vectors"])]
    if random_calls:
        await run_calls(dut, kernel, random_calls, idle=cfg["idle"],
                        backpressure=cfg["backpressure"], rng=rng)
    if cfg.get("stress_directed"):
        await run_calls(dut, kernel, directed, idle=cfg["idle"],
                        backpressure=cfg["backpressure"], rng=rng)

    calls = 1 + len(directed) * (2 if cfg.get("stress_directed") else 1) + len(random_calls)
    requests = perf.batch_size + sum(c.batch_size for c in random_calls) + sum(
        c.batch_size for c in directed) * (2 if cfg.get("stress_directed") else 1)
    point = (f"verify_num={perf.verify_num} cumu_count={perf.cumu_count} "
             f"MAXN={maxn} MAXV={maxv} mode={perf.mode}")
    dut._log.info(f"{calls} calls ({requests} requests) bit-exact with the golden")
    write_summary(
        vectors=calls, directed_vectors=len(directed), random_vectors=len(random_calls),
        requests=requests, cycles=call_cycles, latency_cycles=latency,
        initiation_interval=per_request,
        extra={f"cycles/request (verify_num={perf.verify_num}, MAXN={maxn})":
               f"{per_request:.2f} ({point})",
               "call": f"{call_cycles} cycles for {perf.batch_size} requests incl. fill and "
                       "drain",
               "requests checked": requests})


INPUTS, OUTPUTS = ("cmd", "nodes", "seq_lens"), ("tree", "mask")


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one verify step (``config["measure"]``), docs/contributing.md.

    One call of ``batch`` requests, without idle or back-pressure: each request's cumulative
    tree is grown by the golden draft round (``vectors.grown_call``, seed ``seed``) at the
    point's ``K``, ``tree_width`` (cost 0: every depth as wide as the cap) and ``depth``,
    tokens below the point's ``vocab``, ``seq_lens`` 1000 + b; ``verify_num`` of the point, the
    packed layout. Checked against the golden like every call (``run_calls``). Cycles: first
    input transfer to last output transfer; bytes: ``port_bytes`` of every port's transfers.
    """
    cfg = config()
    if "measure" not in cfg:
        return
    spec = cfg["measure"]
    kernel = TreeMask(**cfg["parameters"])
    maxn, maxv = kernel.max_node_count, kernel.max_verify_num
    _check_ports(dut, kernel)
    rng = random.Random(cfg["seed"])
    await start_clock_and_reset(dut)

    batch, k, width, depth = spec["batch"], spec["node_top_k"], spec["tree_width"], \
        spec["depth"]
    call = grown_call(f"verify step B={batch} K={k} W={width} depth={depth}",
                      seed=cfg["seed"], batch=batch, k=k, width=width, depths=depth,
                      maxn=maxn, verify_num=spec["verify_num"], mode=2,
                      seq_lens=1000 + np.arange(batch), vocab=spec["vocab"])
    full = 1 + k + (depth - 1) * width * k
    assert call.cumu_count == full, (
        f"the draft round stopped at cumu_count {call.cumu_count} "
        f"({call.notes['stop']}), not the full {full}")
    n = call.n(maxv)
    transfers = {}
    _, node_at, _, _, starts = await run_calls(dut, kernel, [call], idle=0.0,
                                               backpressure=0.0, rng=rng,
                                               transfers=transfers)
    first = min(transfers[name][0] for name in INPUTS)
    last = max(transfers[name][-1] for name in OUTPUTS)
    ports = {name: port_bytes(len(transfers[name]), len(getattr(dut, f"{name}__payload")))
             for name in INPUTS + OUTPUTS}
    request_at = [node_at[i] for i in starts]
    measurement = {
        "cycles": last - first + 1,
        "bytes_in": sum(ports[name] for name in INPUTS),
        "bytes_out": sum(ports[name] for name in OUTPUTS),
        "operations": batch * ((call.cumu_count - 1) * (n - 1) + n),
        "invocations": 1,
        "ports": ports,
        "notes": f"one call, B={batch}: draft-round trees of cumu_count {call.cumu_count} "
                 f"(K={k}, W={width}, depth {depth}), n={n}, packed mask layout "
                 f"(QLEN_ONLY_BITPACKING), {len(transfers['mask'])} mask words of "
                 f"{kernel.mask_lanes} bits; DUT MAXN={maxn}, MAXV={maxv}",
    }
    if batch > 1:
        measurement["initiation_interval"] = (request_at[-1] - request_at[0]) / (batch - 1)
    dut._log.info(f"measurement: {measurement}")
    write_summary(vectors=1, requests=batch, cycles=measurement["cycles"],
                  measurement=measurement)
