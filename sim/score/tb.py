"""cocotb testbench: K1 ``ScoreKernel`` (under ``ScoreBench``) against the golden op.

Configuration: ``parameters`` (the DUT's: the kernel's and ``probes``), ``hot_size`` (runtime
``V_hot``), ``figures_requests``, ``gather_sizes`` (H values of the gather figures),
``random_batches``, ``large_batch``, ``idle``, ``backpressure``, ``memory_latency`` (largest
random memory latency), ``capture`` (the ``capture`` test's case file), ``seed``, ``case``
(the ``case`` test) and ``measure`` (the ``measurement`` test).

Tests (phases): ``capture`` (the shared CUDA capture), ``figures`` (``N = N_max`` requests
back to back without idle, back-pressure or gather: latency, II, token remap rate),
``gather`` (kernel gather and probes, fixed memory latency: cycles per request for each H and
lanes), ``directed`` (spec tie examples, every W with ties / +-0 / subnormal / wild / uniform
scores, cumu_count edges, token ids at the table edges with the remap on and off, B = 0),
``random`` (random batches with random idle, back-pressure and memory latency, some with the
gather), ``large`` (one large batch streamed back to back, one with the gather), ``case``
(a case file: golden == the file's expected tensors, RTL == golden) and ``measurement`` (one
draft round of a benchmark contract point). Every output is compared bit for bit with the
golden op.
"""

import json
import os

import cocotb
import numpy as np

from hw.lib.bitonic import bitonic_stages
from sim.bench import KernelBench, Transfers, write_summary
from sim.cocotb_tb import ReadPortMemory, latency_and_interval
from sim.score.dut import ScoreBenchParams
from sim.score.vectors import (
    case_batch,
    compare,
    decode_hidden,
    decode_results,
    decode_tokens,
    directed_batches,
    golden_of_case,
    golden_outputs,
    hidden_words,
    hot_table,
    random_batch,
    request_words,
    token_words,
    words_per_row,
)

KERNEL_OUTPUTS = ("results", "remapped_tokens", "hidden")


class Run:
    """What one test has checked and measured."""

    def __init__(self):
        self.requests = 0
        self.token_ids = 0
        self.hidden_rows = 0
        self.cycles = 0
        self.extra = {}

    def write(self, bench: KernelBench, **summary) -> None:
        """Add this test's counts to the run's summary (requests as ``vectors``; ``cycles``,
        token ids and hidden rows summed over the tests as well) with ``summary``."""
        path = bench.cfg["summary_path"]
        before = {}
        if os.path.exists(path):
            with open(path) as f:
                before = json.load(f)
        extra = before.get("extra", {})
        write_summary(vectors=self.requests, cycles=before.get("cycles", 0) + self.cycles,
                      **summary,
                      extra={"token ids": extra.get("token ids", 0) + self.token_ids,
                             "hidden rows": extra.get("hidden rows", 0) + self.hidden_rows,
                             **self.extra})


async def start(dut) -> KernelBench:
    """The bench, with the clock running, the DUT reset, every gather off and an empty
    ``hot_token_id`` table (``bench.table``: the table loaded, see ``load_table``)."""
    bench = await KernelBench.start(dut, ScoreBenchParams.of)
    bench.table = np.zeros(0, np.int64)
    dut.hidden_size.value = 0
    dut.hot_table_size.value = 0
    for index in range(len(bench.params.probes)):
        getattr(dut, f"probe{index}_hidden_size").value = 0
    return bench


def _memory(bench, prefix: str, words: list[int], *, latency, idle=0.0,
            backpressure=0.0) -> ReadPortMemory:
    """The read port ``<prefix>read_address`` / ``<prefix>read_data`` answering from
    ``words`` (the memory image of ``input_hidden_states``)."""
    def lookup(address):
        assert address < len(words), (f"{prefix}read_address: read of word {address} beyond "
                                      f"the {len(words)} words of input_hidden_states")
        return words[address]

    return ReadPortMemory(bench.dut, lookup, address=f"{prefix}read_address",
                          data=f"{prefix}read_data", latency=latency, idle=idle,
                          backpressure=backpressure, rng=bench.rng)


class KernelTraffic:
    """The port traffic of ``batches`` through the kernel (with ``hidden_size``: one batch,
    whose ``hidden`` is the memory image) and the check of what came back."""

    def __init__(self, bench, batches, *, hidden_size=0, latency=(1, 1), idle=0.0,
                 backpressure=0.0):
        params = bench.params.kernel
        for batch in batches:  # the host API's checks
            params.check_call(batch_size=batch.b, node_top_k=batch.k, tree_width=batch.w,
                              cumu_count=batch.cumu, hidden_size=hidden_size,
                              use_hot_token_id=batch.use_hot,
                              topk_tokens_sampling=batch.tokens, hot_token_id=bench.table)
        self.params, self.batches = params, batches
        self.hidden_size = hidden_size
        requests = [w for batch in batches for w in request_words(params, batch)]
        tokens = [w for batch in batches for w in token_words(params, batch)]
        self.feeds = {"requests": requests, "tokens": tokens}
        self.counts = {"results": len(requests), "remapped_tokens": len(tokens)}
        self.endpoints = []
        self.memory = None
        if hidden_size:
            assert len(batches) == 1, "gather runs take one batch (row numbers restart)"
            batch = batches[0]
            self.memory = _memory(bench, "hidden_", hidden_words(
                batch.hidden, params.hidden_lanes, params.element_width), latency=latency,
                idle=idle, backpressure=backpressure)
            self.endpoints.append(self.memory)
            self.counts["hidden"] = batch.b * batch.k * params.words_per_row(hidden_size)
        self.work = (len(requests) + len(tokens) + 2 * self.counts.get("hidden", 0)
                     + params.score_latency + latency[1])

    def check(self, transfers: Transfers, run: Run) -> None:
        """Compare every output with the golden op (``batch.expected``); count the run."""
        params, items = self.params, transfers.items
        if self.memory is not None:
            transfers.at.update(hidden_read_address=self.memory.address_at,
                                hidden_read_data=self.memory.data_at)
        results = decode_results(params, items["results"])
        remapped = decode_tokens(params, items["remapped_tokens"],
                                 len(self.feeds["tokens"]) * params.remap_lanes)
        problems, request_at, token_at = [], 0, 0
        for batch in self.batches:
            mine = {name: value[request_at:request_at + batch.b]
                    for name, value in results.items()}
            count = batch.b * batch.n
            hidden = None
            if self.hidden_size:
                mask = (1 << (params.hidden_lanes * params.element_width)) - 1
                hidden = decode_hidden([word & mask for word in items["hidden"]],
                                       lanes=params.hidden_lanes,
                                       element_width=params.element_width, b=batch.b,
                                       k=batch.k, h=self.hidden_size)
                run.hidden_rows += batch.b * batch.k
            problems += compare(batch, mine, remapped[token_at:token_at + count], hidden)
            first, last = mine["first"], mine["last"]
            if batch.b and not (first[0] == 1 and last[-1] == 1 and first[1:].sum() == 0
                                and last[:-1].sum() == 0):
                problems.append(f"{batch.name}: packet marks wrong")
            request_at += batch.b
            token_at += -(-count // params.remap_lanes) * params.remap_lanes
            run.requests += batch.b
            run.token_ids += count
        run.cycles += transfers.cycles
        assert not problems, "RTL differs from the golden op:\n" + "\n".join(problems[:12])


async def run_batches(bench, batches, run: Run, *, hidden_size=0, idle=0.0,
                      backpressure=0.0, latency=(1, 1)) -> Transfers:
    """Send ``batches`` back to back through the kernel and check every output (see
    ``KernelTraffic``); returns the transfers (every port's acceptance cycles)."""
    traffic = KernelTraffic(bench, batches, hidden_size=hidden_size, latency=latency,
                            idle=idle, backpressure=backpressure)
    bench.dut.hidden_size.value = hidden_size
    transfers = await bench.run(traffic.feeds, traffic.counts, work=traffic.work, idle=idle,
                                backpressure=backpressure, endpoints=traffic.endpoints)
    traffic.check(transfers, run)
    return transfers


async def expect_quiet(bench, cycles: int) -> None:
    """Nothing may come out of any output while nothing goes in (e.g. after B = 0)."""
    outputs = [*KERNEL_OUTPUTS, *(f"probe{i}_o" for i in range(len(bench.params.probes)))]
    count = 0

    def elapsed():
        nonlocal count
        count += 1
        return count > cycles

    await bench.run({}, dict.fromkeys(outputs, 0), work=cycles, until=elapsed)


async def load_table(bench, table) -> None:
    """Write ``table`` into the kernel's ``hot_token_id`` memory; ``V_hot = len(table)``."""
    words = bench.pack("hot_table", len(table), address=np.arange(len(table)), value=table)
    await bench.run({"hot_table": words}, {}, work=len(table))
    bench.dut.hot_table_size.value = len(table)
    bench.table = table


async def load_random_table(bench) -> np.ndarray:
    """A random table of ``hot_size`` entries (at most ``hot_vocab_size``), loaded."""
    params = bench.params.kernel
    hot = hot_table(bench.np_rng, min(bench.cfg["hot_size"], params.hot_vocab_size),
                    params.token_width)
    await load_table(bench, hot)
    return hot


async def replay(bench, path, run: Run) -> int:
    """A case file through golden and RTL (its own table, else a random one); returns the
    number of the file's expected tensors the golden matched."""
    params = bench.params.kernel
    batch, expected, table = case_batch(path)
    if table is None:
        table = await load_random_table(bench)
    else:
        await load_table(bench, table)
    params.check_call(batch_size=batch.b, node_top_k=batch.k, tree_width=batch.w,
                      cumu_count=batch.cumu, hidden_size=batch.h,
                      use_hot_token_id=batch.use_hot, topk_tokens_sampling=batch.tokens,
                      hot_token_id=table)
    golden_of_case(batch, expected, table, sort_width=params.sort_width)
    await run_batches(bench, [batch], run, hidden_size=batch.h)
    bench.log(f"case {path}: golden equals the file ({len(expected)} tensors), RTL equals "
              "golden")
    return len(expected)


@cocotb.test()
async def capture(dut):
    """The shared CUDA capture (``capture``): golden == capture, RTL == golden."""
    bench = await start(dut)
    run = Run()
    tensors = await replay(bench, bench.cfg["capture"], run)
    run.extra["capture tensors matched"] = tensors
    run.write(bench)


@cocotb.test()
async def figures(dut):
    """``figures_requests`` requests of ``N = N_max`` back to back, remap on, no idle,
    back-pressure or gather: first-result latency, II, token remap cycles per request."""
    bench = await start(dut)
    params = bench.params.kernel
    hot = await load_random_table(bench)
    run = Run()
    batch = random_batch(bench.np_rng, k=params.node_top_k, w=params.max_tree_width,
                         b=bench.cfg["figures_requests"], use_hot=True, hot_size=len(hot),
                         name="figures")
    golden_outputs(batch, hot, sort_width=params.sort_width)
    at = (await run_batches(bench, [batch], run)).at
    latency, interval = latency_and_interval(at["requests"], at["results"])
    token_cycles = (at["remapped_tokens"][-1] - at["remapped_tokens"][0] + 1) / batch.b
    run.extra.update({"N": params.max_candidates,
                      f"token remap cycles/request (N={batch.n}, {params.remap_lanes} lanes)":
                      token_cycles})
    run.write(bench, latency_cycles=latency, initiation_interval=interval)


@cocotb.test()
async def gather(dut):
    """The kernel's gather and every probe on one batch of 4 requests per H of
    ``gather_sizes``, memory answering one word per clock 3 clocks after the address: cycles
    per request from the first beat of request 0 to that of request 3."""
    bench = await start(dut)
    params, rng = bench.params.kernel, bench.np_rng
    k, w, b = params.node_top_k, params.max_tree_width, 4
    run = Run()
    table = np.zeros(1, np.int64)  # the remap is off
    base = random_batch(rng, k=k, w=w, b=b, name="gather figures")
    for h in bench.cfg["gather_sizes"]:
        batch = base.with_hidden(random_batch(rng, k=k, w=w, b=b, h=h).hidden,
                                 f"gather figures H={h}")
        golden_outputs(batch, table, sort_width=params.sort_width)
        traffic = KernelTraffic(bench, [batch], hidden_size=h, latency=(3, 3))
        feeds, counts = dict(traffic.feeds), dict(traffic.counts)
        endpoints = list(traffic.endpoints)
        probes = []
        for index, probe in enumerate(bench.params.probes):
            # Rows from the golden parents, memory image in the probe's element width.
            dtype = np.float32 if probe.element_width == 32 else np.uint16
            probe_batch = batch.with_hidden(
                random_batch(rng, k=k, w=w, b=b, h=h, hidden_dtype=dtype).hidden,
                f"probe{index} H={h}")
            expected = golden_outputs(probe_batch, table, sort_width=params.sort_width)
            rows = (np.arange(b)[:, None] * w + expected["parent_indices_in_layer"]).reshape(-1)
            getattr(dut, f"probe{index}_hidden_size").value = h
            feeds[f"probe{index}_rows"] = [int(r) for r in rows]
            counts[f"probe{index}_o"] = b * k * probe.words_per_row(h)
            endpoints.append(_memory(bench, f"probe{index}_", hidden_words(
                probe_batch.hidden, probe.lanes, probe.element_width), latency=(3, 3)))
            probes.append((index, probe, probe_batch))
        dut.hidden_size.value = h
        transfers = await bench.run(feeds, counts, endpoints=endpoints,
                                    work=traffic.work + 2 * sum(counts.values()))
        traffic.check(transfers, run)
        figures = [(params.hidden_lanes, params.element_width, transfers.at["hidden"])]
        for index, probe, probe_batch in probes:
            mask = (1 << (probe.lanes * probe.element_width)) - 1
            hidden = decode_hidden([word & mask for word in transfers.items[f"probe{index}_o"]],
                                   lanes=probe.lanes, element_width=probe.element_width,
                                   b=b, k=k, h=h)
            problems = compare(probe_batch, hidden=hidden)
            assert not problems, "gather differs from the golden op:\n" + "\n".join(problems)
            run.hidden_rows += b * k
            figures.append((probe.lanes, probe.element_width, transfers.at[f"probe{index}_o"]))
        for lanes, width, accepted in figures:
            first_beats = accepted[::k * words_per_row(h, lanes)]
            key = f"gather cycles/request (K={k}, H={h}, lanes={lanes}"
            key += ", bf16/f16)" if width == 16 else ")"
            run.extra[key] = (first_beats[-1] - first_beats[0]) / (b - 1)
    run.write(bench)


@cocotb.test()
async def directed(dut):
    """The directed batches back to back, with random idle and back-pressure."""
    bench = await start(dut)
    params = bench.params.kernel
    hot = await load_random_table(bench)
    run = Run()
    batches = directed_batches(bench.np_rng, k=params.node_top_k, w_max=params.max_tree_width,
                               count_width=params.count_width, hot_size=len(hot),
                               token_width=params.token_width)
    for batch in batches:
        golden_outputs(batch, hot, sort_width=params.sort_width)
    await run_batches(bench, batches, run, **bench.stress)
    await expect_quiet(bench, 2 * params.score_latency)
    bench.log(f"{len(batches)} directed batches ({run.requests} requests) bit-exact")
    run.write(bench, directed_vectors=len(batches))


@cocotb.test()
async def random(dut):
    """``random_batches`` random batches (every W, score style, cumu_count edges, remap on
    and off) with random idle and back-pressure; every fourth one alone with the gather and
    random memory latency up to ``memory_latency``."""
    bench = await start(dut)
    params, rng = bench.params.kernel, bench.np_rng
    k, w_max = params.node_top_k, params.max_tree_width
    hot = await load_random_table(bench)
    run = Run()
    styles = ("uniform", "ties", "wild", "subnormal", "zeros")
    pending = []
    for index in range(bench.cfg["random_batches"]):
        w = int(rng.integers(1, w_max + 1))
        n = w * k
        gathers = index % 4 == 3
        h = int(rng.integers(1, 3 * params.hidden_lanes)) if gathers else 0
        batch = random_batch(rng, k=k, w=w, b=int(rng.integers(0 if not gathers else 1, 7)),
                             h=h, style=styles[index % len(styles)],
                             cumu=int(rng.choice([0, 17, 1000, 2 ** params.count_width - n])),
                             use_hot=bool(rng.integers(0, 2)), hot_size=len(hot),
                             token_width=params.token_width, edges=bool(index % 2))
        golden_outputs(batch, hot, sort_width=params.sort_width)
        if gathers:
            await run_batches(bench, pending, run, **bench.stress)
            pending = []
            await run_batches(bench, [batch], run, hidden_size=h,
                              latency=(1, bench.cfg["memory_latency"]), **bench.stress)
        else:
            pending.append(batch)
    await run_batches(bench, pending, run, **bench.stress)
    bench.log(f"{bench.cfg['random_batches']} random batches ({run.requests} requests) "
              "bit-exact, stressed")
    run.write(bench, random_vectors=bench.cfg["random_batches"])


@cocotb.test()
async def large(dut):
    """One batch of ``large_batch`` requests back to back (stressed), then one of an eighth
    of that with the gather."""
    bench = await start(dut)
    params, rng = bench.params.kernel, bench.np_rng
    k, w_max = params.node_top_k, params.max_tree_width
    hot = await load_random_table(bench)
    run = Run()
    large_batch = random_batch(rng, k=k, w=w_max, b=bench.cfg["large_batch"], style="ties",
                               cumu=12345, use_hot=True, hot_size=len(hot), edges=True,
                               name="large B")
    golden_outputs(large_batch, hot, sort_width=params.sort_width)
    await run_batches(bench, [large_batch], run, **bench.stress)
    large_gather = random_batch(rng, k=k, w=w_max, b=max(2, bench.cfg["large_batch"] // 8),
                                h=params.hidden_lanes + 1, style="uniform",
                                name="large B gather")
    golden_outputs(large_gather, hot, sort_width=params.sort_width)
    await run_batches(bench, [large_gather], run, hidden_size=large_gather.h,
                      latency=(1, bench.cfg["memory_latency"]), **bench.stress)
    await expect_quiet(bench, 2 * params.score_latency)
    bench.log(f"{run.requests} requests, {run.token_ids} token ids, {run.hidden_rows} hidden "
              "rows bit-exact")
    run.write(bench)


@cocotb.test()
async def case(dut):
    """The case file (``case``): golden == the file's expected tensors, RTL == golden."""
    bench = await start(dut)
    run = Run()
    tensors = await replay(bench, bench.cfg["case"], run)
    run.extra.update({"case": str(bench.cfg["case"]), "case tensors matched": tensors})
    run.write(bench)


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one draft round (``config["measure"]``), docs/contributing.md.

    Depths ``d = 1..depth``, one call each: ``B`` random requests (``W = 1`` at depth 1, then
    ``W = tree_width``; remap off), every request gathering its ``K`` parents' rows of ``H``
    elements (the point's ``hidden_bytes``) from a memory that answers each address 3 clocks
    later, one word per clock; no idle or back-pressure. Every output is checked against the
    golden op. ``cycles`` sums, over the calls, first input transfer to last output transfer
    (the calls' transfers are laid end to end for ``bench.measurement``).
    """
    bench = await start(dut)
    spec = bench.cfg["measure"]
    params = bench.params.kernel
    k, h = params.node_top_k, spec["hidden_size"]
    dtype = {2: np.uint16, 4: np.float32}[spec["hidden_bytes"]]  # 16-bit rows as bits
    stages = len(bitonic_stages(params.sort_width))
    inputs = ("requests", "tokens", "hidden_read_data")
    outputs = ("results", "remapped_tokens", "hidden_read_address", "hidden")
    run = Run()
    at = {name: [] for name in inputs + outputs}
    span = operations = 0
    for d in range(1, spec["depth"] + 1):
        w = 1 if d == 1 else spec["tree_width"]
        batch = random_batch(bench.np_rng, k=k, w=w, b=spec["batch"], h=h, hidden_dtype=dtype,
                             cumu=1 + (d - 1) * k * w, name=f"measured depth {d}")
        golden_outputs(batch, np.zeros(1, np.int64), sort_width=params.sort_width)
        call = (await run_batches(bench, [batch], run, hidden_size=h, latency=(3, 3))).at
        begin = min(call[name][0] for name in inputs if call[name])
        end = max(call[name][-1] for name in outputs if call[name])
        for name in inputs + outputs:  # this call after the previous ones, no gap
            at[name] += [cycle - begin + span for cycle in call[name]]
        span += end - begin + 1
        operations += batch.b * (batch.n + stages * params.sort_width // 2)
    bench.measurement(
        at, inputs, outputs, operations=operations, invocations=spec["depth"],
        notes=f"{spec['depth']} calls (one per depth) of B={spec['batch']} requests, "
              f"K={k}, W=1 then {spec['tree_width']}, {params.sort_width}-lane network; "
              f"each request gathers K rows of H={h} elements "
              f"({params.hidden_lanes} per 256-bit word, one word per clock, read "
              "latency 3): the gather sets the pace")
    write_summary(requests=run.requests)
