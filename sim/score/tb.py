# amaranth: UnusedElaboratable=no
"""cocotb testbench: K1 ``ScoreKernel`` (under ``ScoreBench``) against the golden op.

Configuration (from the harness): ``kernel`` and ``probes`` (the DUT parameters, see
``sim.score``), ``hot_size`` (runtime ``V_hot``), ``figures_requests``, ``gather_sizes`` (H
values of the gather measurement), ``random_batches``, ``large_batch``, ``idle``,
``backpressure``, ``memory_latency`` (largest random memory latency), ``capture`` (a case file
replayed in every run, or null), ``seed``, and ``case`` when ``CASE=`` was given (then only
that file is replayed).

Phases: (1) the shared capture (when configured), (2) figures: ``N = N_max`` requests back to
back without idle or back-pressure and no gather (latency, II), then the gather measurement
(kernel gather and probes, fixed memory latency, cycles per request for each H and lanes),
(3) directed batches (spec tie examples, every W with ties / +-0 / subnormal / wild / uniform
scores, cumu_count edges, token ids at the table edges with the remap on and off, B = 0),
(4) random batches with random idle, back-pressure and memory latency, some with the gather,
(5) one large batch streamed back to back. Every output is compared bit for bit with the
golden op.
"""

import random
from collections import deque

import cocotb
import numpy as np

from hw.lib.bitonic import bitonic_stages
from sim.cocotb_tb import (
    StreamBench,
    StreamSink,
    StreamSource,
    config,
    latency_and_interval,
    start_clock_and_reset,
    write_summary,
)
from sim.payload import pack
from sim.score import make_bench
from sim.score.vectors import (
    case_batch,
    compare,
    decode_hidden,
    decode_results,
    decode_tokens,
    directed_batches,
    golden_outputs,
    hidden_words,
    hot_table,
    random_batch,
    request_words,
    token_words,
    words_per_row,
)
from sim.targets import port_bytes


class ResponseSource(StreamSource):
    """Memory read data: each word becomes available ``latency`` clocks after its address
    was accepted, in address order; random idle cycles on top."""

    def __init__(self, dut, name, *, idle=0.0, rng=None):
        super().__init__(dut, name, idle=idle, rng=rng)
        self.due = deque()
        self.now = 0

    def drive(self):
        if self._offering:
            return
        ready_now = self._queue and self.due[0] <= self.now
        if ready_now and (self.idle <= 0 or self._rng.random() >= self.idle):
            self._payload.value = self._queue[0]
            self._valid.value = 1
            self._offering = True
        else:
            self._valid.value = 0

    def sample(self, cycle):
        if self._offering and self._ready.value:
            self.due.popleft()
        super().sample(cycle)
        self.now = cycle + 1


class AddressSink(StreamSink):
    """Memory read addresses: looks each word up in ``memory`` and schedules its answer."""

    def __init__(self, dut, name, memory, response, *, latency, backpressure=0.0, rng=None):
        super().__init__(dut, name, backpressure=backpressure, rng=rng)
        self.memory = memory
        self.response = response
        self.latency = latency  # (low, high) clocks
        self._rng_latency = rng or random.Random(2)
        self._last_due = 0

    def sample(self, cycle):
        before = len(self.items)
        super().sample(cycle)
        for address in self.items[before:]:
            assert address < len(self.memory), f"{self.name}: read of word {address} beyond " \
                f"the {len(self.memory)} words of input_hidden_states"
            due = max(cycle + self._rng_latency.randint(*self.latency), self._last_due)
            self._last_due = due
            self.response.send([self.memory[address]])
            self.response.due.append(due)


def memory_endpoints(dut, prefix, memory, *, latency, idle, backpressure, rng):
    response = ResponseSource(dut, f"{prefix}read_data", idle=idle, rng=rng)
    address = AddressSink(dut, f"{prefix}read_address", memory, response, latency=latency,
                          backpressure=backpressure, rng=rng)
    return [address, response]


class Run:
    """What the testbench has checked and measured so far."""

    def __init__(self):
        self.requests = 0
        self.token_ids = 0
        self.hidden_rows = 0
        self.cycles = 0
        self.problems = []
        self.extra = {}


async def run_batches(dut, top, batches, run: Run, *, hidden_size=0, idle=0.0,
                      backpressure=0.0, latency=(1, 1), rng=None):
    """Send ``batches`` back to back through the kernel and check every output.

    With ``hidden_size`` the kernel also gathers (then ``batches`` is one batch, whose
    ``hidden`` is the memory image). Returns the endpoints by port name (for timing
    figures and byte counts).
    """
    kernel = top.kernel
    rng = rng or random.Random(0)
    if hidden_size:
        assert len(batches) == 1, "gather runs take one batch (row numbers restart per batch)"
    for batch in batches:  # the host API's checks
        kernel.check_call(batch_size=batch.b, node_top_k=batch.k, tree_width=batch.w,
                          cumu_count=batch.cumu, hidden_size=hidden_size,
                          use_hot_token_id=batch.use_hot, topk_tokens_sampling=batch.tokens,
                          hot_token_id=np.zeros(dut.hot_table_size.value.to_unsigned(), np.int64))
    dut.hidden_size.value = hidden_size
    requests = [w for batch in batches for w in request_words(kernel, batch)]
    tokens = [w for batch in batches for w in token_words(kernel, batch)]
    request_source = StreamSource(dut, "requests", idle=idle, rng=rng)
    result_sink = StreamSink(dut, "results", backpressure=backpressure, rng=rng)
    token_source = StreamSource(dut, "tokens", idle=idle, rng=rng)
    token_sink = StreamSink(dut, "remapped_tokens", backpressure=backpressure, rng=rng)
    endpoints = [request_source, result_sink, token_source, token_sink]
    by_port = {"requests": request_source, "results": result_sink, "tokens": token_source,
               "remapped_tokens": token_sink}
    hidden_beats = 0
    hidden_sink = None
    if hidden_size:
        batch = batches[0]
        memory = hidden_words(batch.hidden, kernel.hidden_lanes, kernel.element_width)
        hidden_sink = StreamSink(dut, "hidden", backpressure=backpressure, rng=rng)
        address, response = memory_endpoints(dut, "hidden_", memory, latency=latency,
                                             idle=idle, backpressure=backpressure, rng=rng)
        endpoints += [address, response, hidden_sink]
        by_port.update(hidden_read_address=address, hidden_read_data=response,
                       hidden=hidden_sink)
        hidden_beats = batch.b * batch.k * words_per_row(hidden_size, kernel.hidden_lanes)
    request_source.send(requests)
    token_source.send(tokens)
    bench = StreamBench(dut, endpoints)

    def done():
        return (len(result_sink.items) == len(requests) and len(token_sink.items) == len(tokens)
                and (hidden_sink is None or len(hidden_sink.items) == hidden_beats))

    budget = 40 * (len(requests) + len(tokens) + hidden_beats) + 200
    run.cycles += await bench.run(done, timeout_cycles=budget)

    results = decode_results(kernel, result_sink.items)
    remapped = decode_tokens(kernel, token_sink.items, len(tokens) * kernel.remap_lanes)
    request_at, token_at = 0, 0
    for batch in batches:
        mine = {name: value[request_at:request_at + batch.b] for name, value in results.items()}
        count = batch.b * batch.n
        hidden = None
        if hidden_size:
            data = [word & ((1 << (kernel.hidden_lanes * kernel.element_width)) - 1)
                    for word in hidden_sink.items]
            hidden = decode_hidden(data, lanes=kernel.hidden_lanes,
                                   element_width=kernel.element_width, b=batch.b, k=batch.k,
                                   h=hidden_size)
            run.hidden_rows += batch.b * batch.k
        run.problems += compare(batch, mine, remapped[token_at:token_at + count], hidden)
        first, last = mine["first"], mine["last"]
        if batch.b and not (first[0] == 1 and last[-1] == 1 and first[1:].sum() == 0
                            and last[:-1].sum() == 0):
            run.problems.append(f"{batch.name}: packet marks wrong")
        request_at += batch.b
        token_at += -(-count // kernel.remap_lanes) * kernel.remap_lanes
        run.requests += batch.b
        run.token_ids += count
    assert not run.problems, "RTL differs from the golden op:\n" + "\n".join(run.problems[:12])
    return by_port


async def expect_quiet(dut, top, cycles):
    """Nothing may come out of any output while nothing goes in (e.g. after B = 0)."""
    sinks = [StreamSink(dut, name) for name in ("results", "remapped_tokens", "hidden")]
    sinks += [StreamSink(dut, f"probe{i}_o") for i in range(len(top.probes))]
    bench = StreamBench(dut, sinks)
    count = 0

    def elapsed():
        nonlocal count
        count += 1
        return count > cycles

    await bench.run(elapsed, timeout_cycles=cycles + 2)
    assert all(not sink.items for sink in sinks), "output without input"


async def load_table(dut, top, table):
    layout = top.kernel.table_layout
    source = StreamSource(dut, "hot_table")
    source.send(pack(layout, len(table), address=np.arange(len(table)), value=table))
    await StreamBench(dut, [source]).run(lambda: source.done, timeout_cycles=len(table) + 10)
    dut.hot_table_size.value = len(table)


async def gather_figures(dut, top, cfg, run: Run, hot, rng):
    """Kernel gather and probes on one batch per H, memory answering one word per clock:
    cycles per request from the first beat of request 0 to that of request B-1."""
    kernel = top.kernel
    k, w, b = kernel.node_top_k, kernel.max_tree_width, 4
    base = random_batch(rng, k=k, w=w, b=b, h=0, name="gather figures")
    for h in cfg["gather_sizes"]:
        batch = base.with_hidden(random_batch(rng, k=k, w=w, b=b, h=h).hidden,
                                 f"gather figures H={h}")
        golden_outputs(batch, hot, sort_width=kernel.sort_width)
        # Probes: rows from the golden parents, memory image in their element width.
        endpoints, probe_runs = [], []
        for index, probe in enumerate(top.probes):
            dtype = np.float32 if probe.element_width == 32 else np.uint16
            probe_batch = batch.with_hidden(
                random_batch(rng, k=k, w=w, b=b, h=h, hidden_dtype=dtype).hidden,
                f"probe{index} H={h}")
            expected = golden_outputs(probe_batch, hot, sort_width=kernel.sort_width)
            rows = (np.arange(b)[:, None] * w + expected["parent_indices_in_layer"]).reshape(-1)
            getattr(dut, f"probe{index}_hidden_size").value = h
            source = StreamSource(dut, f"probe{index}_rows")
            source.send([int(r) for r in rows])
            sink = StreamSink(dut, f"probe{index}_o")
            memory = hidden_words(probe_batch.hidden, probe.lanes, probe.element_width)
            endpoints += [source, *memory_endpoints(dut, f"probe{index}_", memory,
                                                    latency=(3, 3), idle=0.0,
                                                    backpressure=0.0,
                                                    rng=random.Random(index)), sink]
            probe_runs.append((probe, probe_batch, sink))
        probe_bench = StreamBench(dut, endpoints)
        beats = [b * k * words_per_row(h, probe.lanes) for probe, _, _ in probe_runs]
        kernel_task = cocotb.start_soon(run_batches(dut, top, [batch], run, hidden_size=h,
                                                    latency=(3, 3), rng=random.Random(3)))
        probe_sinks = [(sink, count) for (_, _, sink), count in
                       zip(probe_runs, beats, strict=True)]

        def probes_done(probe_sinks=probe_sinks):
            return all(len(sink.items) == count for sink, count in probe_sinks)

        await probe_bench.run(probes_done, timeout_cycles=40 * sum(beats) + 200)
        hidden_sink = (await kernel_task)["hidden"]
        figures = [(kernel.hidden_lanes, kernel.element_width, hidden_sink.accepted_at)]
        for probe, probe_batch, sink in probe_runs:
            data = [word & ((1 << (probe.lanes * probe.element_width)) - 1)
                    for word in sink.items]
            hidden = decode_hidden(data, lanes=probe.lanes, element_width=probe.element_width,
                                   b=b, k=k, h=h)
            run.problems += compare(probe_batch, hidden=hidden)
            run.hidden_rows += b * k
            figures.append((probe.lanes, probe.element_width, sink.accepted_at))
        assert not run.problems, "gather differs from the golden op:\n" + \
            "\n".join(run.problems[:12])
        for lanes, width, accepted in figures:
            per_request = k * words_per_row(h, lanes)
            first_beats = accepted[::per_request]
            measured = (first_beats[-1] - first_beats[0]) / (b - 1)
            key = f"gather cycles/request (K={k}, H={h}, lanes={lanes}"
            key += ", bf16/f16)" if width == 16 else ")"
            run.extra[key] = measured


@cocotb.test()
async def score_kernel_matches_golden(dut):
    cfg = config()
    if "measure" in cfg:  # a `measure` run (sim.score.measure) runs only `measurement`
        return
    top = make_bench(cfg)
    kernel = top.kernel
    rng = np.random.default_rng(cfg["seed"])
    prng = random.Random(cfg["seed"])
    await start_clock_and_reset(dut)
    dut.hidden_size.value = 0
    for index in range(len(top.probes)):
        getattr(dut, f"probe{index}_hidden_size").value = 0
    hot = hot_table(rng, cfg["hot_size"], kernel.token_width)
    await load_table(dut, top, hot)
    run = Run()
    k, w_max, sort_width = kernel.node_top_k, kernel.max_tree_width, kernel.sort_width

    async def replay(path):
        batch, expected, case_hot = case_batch(path)
        table = hot
        if case_hot is not None:
            await load_table(dut, top, case_hot)
            table = case_hot
        kernel.check_call(batch_size=batch.b, node_top_k=batch.k, tree_width=batch.w,
                          cumu_count=batch.cumu, hidden_size=batch.h,
                          use_hot_token_id=batch.use_hot, topk_tokens_sampling=batch.tokens,
                          hot_token_id=table)
        golden = golden_outputs(batch, table, sort_width=sort_width)
        if "output_tokens" in expected:
            golden["output_tokens"] = np.take_along_axis(
                golden["topk_tokens_sampling"], golden["sort_layer_indices"][:, :batch.k], 1)
        for name, wanted in expected.items():
            got = golden[name].reshape(-1)
            same = (np.array_equal(got.view(np.uint32), wanted.view(np.uint32))
                    if got.dtype == np.float32 else np.array_equal(got, wanted))
            assert same, f"golden differs from {path} in {name}"
        await run_batches(dut, top, [batch], run, hidden_size=batch.h, rng=prng)
        if case_hot is not None:
            await load_table(dut, top, hot)
        dut._log.info(f"case {path}: golden equals the capture ({len(expected)} tensors), "
                      f"RTL equals golden")
        return len(expected)

    if cfg.get("case"):
        tensors = await replay(cfg["case"])
        write_summary(vectors=run.requests, cycles=run.cycles,
                      extra={"case tensors matched": tensors})
        return

    if cfg.get("capture"):
        await replay(cfg["capture"])

    # Figures: N = N_max requests back to back, no idle, no back-pressure, no gather.
    figures = random_batch(rng, k=k, w=w_max, b=cfg["figures_requests"], use_hot=True,
                           hot_size=len(hot), name="figures")
    golden_outputs(figures, hot, sort_width=sort_width)
    ends = await run_batches(dut, top, [figures], run)
    latency, interval = latency_and_interval(ends["requests"].accepted_at,
                                             ends["results"].accepted_at)
    token_received = ends["remapped_tokens"]
    token_cycles = (token_received.accepted_at[-1] - token_received.accepted_at[0] + 1) \
        / figures.b
    await gather_figures(dut, top, cfg, run, hot, rng)

    # Directed batches, back to back, with random idle and back-pressure.
    stress = {"idle": cfg["idle"], "backpressure": cfg["backpressure"], "rng": prng}
    directed = directed_batches(rng, k=k, w_max=w_max, count_width=kernel.count_width,
                                hot_size=len(hot), token_width=kernel.token_width)
    for batch in directed:
        golden_outputs(batch, hot, sort_width=sort_width)
    await run_batches(dut, top, directed, run, **stress)
    await expect_quiet(dut, top, 2 * kernel.score_latency)

    # Random batches; every fourth one also gathers (one batch at a time).
    styles = ("uniform", "ties", "wild", "subnormal", "zeros")
    pending = []
    for index in range(cfg["random_batches"]):
        w = int(rng.integers(1, w_max + 1))
        n = w * k
        gather = index % 4 == 3
        h = int(rng.integers(1, 3 * kernel.hidden_lanes)) if gather else 0
        batch = random_batch(rng, k=k, w=w, b=int(rng.integers(0 if not gather else 1, 7)),
                             h=h, style=styles[index % len(styles)],
                             cumu=int(rng.choice([0, 17, 1000, 2 ** kernel.count_width - n])),
                             use_hot=bool(rng.integers(0, 2)), hot_size=len(hot),
                             token_width=kernel.token_width, edges=bool(index % 2))
        golden_outputs(batch, hot, sort_width=sort_width)
        if gather:
            await run_batches(dut, top, pending, run, **stress)
            pending = []
            await run_batches(dut, top, [batch], run, hidden_size=h,
                              latency=(1, cfg["memory_latency"]), **stress)
        else:
            pending.append(batch)
    await run_batches(dut, top, pending, run, **stress)

    # One large batch back to back (stressed), then one with the gather.
    large = random_batch(rng, k=k, w=w_max, b=cfg["large_batch"], style="ties",
                         cumu=12345, use_hot=True, hot_size=len(hot), edges=True,
                         name="large B")
    golden_outputs(large, hot, sort_width=sort_width)
    await run_batches(dut, top, [large], run, **stress)
    large_gather = random_batch(rng, k=k, w=w_max, b=max(2, cfg["large_batch"] // 8),
                                h=kernel.hidden_lanes + 1, style="uniform", name="large B gather")
    golden_outputs(large_gather, hot, sort_width=sort_width)
    await run_batches(dut, top, [large_gather], run, hidden_size=large_gather.h,
                      latency=(1, cfg["memory_latency"]), **stress)
    await expect_quiet(dut, top, 2 * kernel.score_latency)

    dut._log.info(f"{run.requests} requests, {run.token_ids} token ids, {run.hidden_rows} "
                  "hidden rows bit-exact with the golden op")
    extra = {
        "N": k * w_max,
        "token ids": run.token_ids,
        "hidden rows": run.hidden_rows,
        f"token remap cycles/request (N={figures.n}, {kernel.remap_lanes} lanes)": token_cycles,
        **run.extra,
    }
    write_summary(vectors=run.requests, cycles=run.cycles, latency_cycles=latency,
                  initiation_interval=interval, extra=extra)


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one draft round (``config["measure"]``), docs/contributing.md.

    Depths ``d = 1..depth``, one call each: ``B`` random requests (``W = 1`` at depth 1, then
    ``W = tree_width``; remap off), every request gathering its ``K`` parents' rows of ``H``
    elements (the point's ``hidden_bytes``) from a memory that answers each address 3 clocks
    later, one word per clock; no idle or back-pressure. Every output is checked against the
    golden op (``run_batches``). ``cycles`` sums, over the calls, first input transfer to last
    output transfer.
    """
    cfg = config()
    if "measure" not in cfg:
        return
    spec = cfg["measure"]
    top = make_bench(cfg)
    kernel = top.kernel
    rng = np.random.default_rng(cfg["seed"])
    await start_clock_and_reset(dut)
    dut.hot_table_size.value = 0
    k, h = kernel.node_top_k, spec["hidden_size"]
    dtype = {2: np.uint16, 4: np.float32}[spec["hidden_bytes"]]  # 16-bit rows as bits
    stages = len(bitonic_stages(kernel.sort_width))
    run = Run()
    cycles = operations = 0
    names = ("requests", "tokens", "hidden_read_data", "results", "remapped_tokens",
             "hidden_read_address", "hidden")
    transfers = dict.fromkeys(names, 0)
    for d in range(1, spec["depth"] + 1):
        w = 1 if d == 1 else spec["tree_width"]
        batch = random_batch(rng, k=k, w=w, b=spec["batch"], h=h, hidden_dtype=dtype,
                             cumu=1 + (d - 1) * k * w, name=f"measured depth {d}")
        golden_outputs(batch, np.zeros(1, np.int64), sort_width=kernel.sort_width)
        ends = await run_batches(dut, top, [batch], run, hidden_size=h, latency=(3, 3))
        sources = [ends[name] for name in names[:3]]
        sinks = [ends[name] for name in names[3:]]
        cycles += (max(e.accepted_at[-1] for e in sinks if e.accepted_at)
                   - min(e.accepted_at[0] for e in sources if e.accepted_at) + 1)
        for name in names:
            transfers[name] += len(ends[name].accepted_at)
        operations += batch.b * (batch.n + stages * kernel.sort_width // 2)
    ports = {name: port_bytes(count, len(getattr(dut, f"{name}__payload")))
             for name, count in transfers.items()}
    measurement = {
        "cycles": cycles,
        "bytes_in": sum(ports[name] for name in names[:3]),
        "bytes_out": sum(ports[name] for name in names[3:]),
        "operations": operations,
        "invocations": spec["depth"],
        "ports": ports,
        "notes": f"{spec['depth']} calls (one per depth) of B={spec['batch']} requests, "
                 f"K={k}, W=1 then {spec['tree_width']}, {kernel.sort_width}-lane network; "
                 f"each request gathers K rows of H={h} elements "
                 f"({kernel.hidden_lanes} per 256-bit word, one word per clock, read "
                 "latency 3): the gather sets the pace",
    }
    write_summary(vectors=run.requests, cycles=cycles, measurement=measurement)
