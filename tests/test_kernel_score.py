# amaranth: UnusedElaboratable=no
"""K1 score + top-k kernel: parameter checks, Amaranth-simulator unit tests of every part, and
the Verilator regression of ``make sim KERNEL=score`` (and its variants) against the golden op.
"""

import random

import numpy as np
import pytest
from amaranth.back import verilog

from golden.cases import CAPTURES_DIR
from golden.sort import SORT_PAD, bitonic_sort_desc, sort_network_stages
from hw.kernels.gather import HiddenStateGather
from hw.kernels.score import (
    HotTokenRemap,
    ScoreKernel,
    ScoreSortPipeline,
    synthesis_configuration,
)
from hw.lib.bitonic import BitonicSorter, bitonic_stages
from sim.amaranth_tb import collect, feed, simulate
from sim.harness import BUILD_ROOT
from sim.payload import pack
from sim.score.vectors import (
    SPEC_TIE_EXAMPLES,
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
)
from sim.targets import run_target

TRAFFIC = [(0.0, 0.0), (0.3, 0.3)]


# --------------------------------------------------------------------------------------------
# Parameters.

@pytest.mark.parametrize(("kwargs", "message"), [
    ({"node_top_k": 0, "max_tree_width": 1}, "`node_top_k` must be between 1 and 16, not 0"),
    ({"node_top_k": 17, "max_tree_width": 1}, "`node_top_k` must be between 1 and 16, not 17"),
    ({"node_top_k": 8, "max_tree_width": 12},
     "`max_tree_width` must be between 1 and `node_top_k`, not 12"),
    ({"node_top_k": 8, "max_tree_width": 0}, "`max_tree_width` must be at least 1, not 0"),
    ({"node_top_k": 10, "max_tree_width": 7},
     r"`max_tree_width \* node_top_k` must be at most `sort_width` \(64\), not 70"),
    ({"node_top_k": 8, "max_tree_width": 8, "sort_width": 32},
     "`sort_width` must be 64 or 128, not 32"),
    ({"node_top_k": 8, "max_tree_width": 8, "count_width": 64},
     "`count_width` must be between 8 and 63, not 64"),
    ({"node_top_k": 8, "max_tree_width": 8, "stages_per_register": 22},
     "`stages_per_register` must be between 1 and 21, not 22"),
])
def test_score_pipeline_parameter_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ScoreSortPipeline(**kwargs)


def test_parts_parameter_validation():
    with pytest.raises(ValueError, match="`hot_vocab_size` must be at least 1, not 0"):
        HotTokenRemap(hot_vocab_size=0)
    with pytest.raises(ValueError, match="`token_width` must be between 2 and 64, not 65"):
        HotTokenRemap(token_width=65)
    with pytest.raises(ValueError, match="`lanes` must be a power of two, not 6"):
        HiddenStateGather(lanes=6)
    with pytest.raises(ValueError, match="`element_width` must be a positive integer"):
        HiddenStateGather(element_width=0)
    with pytest.raises(ValueError, match="`width` must be a power of two >= 2, not 48"):
        BitonicSorter(width=48)
    with pytest.raises(ValueError, match="`stages_per_register` must be between 1 and 28"):
        BitonicSorter(width=128, stages_per_register=0)


def test_parameters_are_read_only_properties():
    kernel = ScoreKernel(node_top_k=10, max_tree_width=6, hot_vocab_size=100, remap_lanes=3,
                         element_width=16, hidden_lanes=4)
    assert (kernel.node_top_k, kernel.max_tree_width, kernel.sort_width, kernel.count_width,
            kernel.hot_vocab_size, kernel.remap_lanes, kernel.element_width,
            kernel.hidden_lanes, kernel.max_candidates) == (10, 6, 64, 32, 100, 3, 16, 4, 60)
    assert kernel.score_latency == 4 + 21 + 1 + 1
    with pytest.raises(AttributeError):
        kernel.node_top_k = 4
    assert ScoreSortPipeline(node_top_k=10, max_tree_width=10, sort_width=128).latency == 33


def test_check_call_refuses_what_the_hardware_cannot_represent():
    kernel = ScoreKernel(node_top_k=8, max_tree_width=4, hot_vocab_size=100, hidden_lanes=8,
                         max_hidden_size=64)
    ok = {"batch_size": 2, "node_top_k": 8, "tree_width": 4, "cumu_count": 2 ** 32 - 32}
    kernel.check_call(**ok)
    for change, message in [
        ({"node_top_k": 4}, r"`node_top_k` must be 8 \(this kernel's K\), not 4"),
        ({"tree_width": 5}, "`tree_width` must be between 1 and 4, not 5"),
        ({"cumu_count": 2 ** 32 - 31}, "`cumu_count` must be between 0 and 2\\*\\*32 - N"),
        ({"cumu_count": -1}, "`cumu_count` must be between 0"),
        ({"hidden_size": 65}, "`hidden_size` must be between 0 and 64, not 65"),
        ({"use_hot_token_id": True, "topk_tokens_sampling": np.array([2 ** 31]),
          "hot_token_id": np.zeros(4, np.int64)}, "`topk_tokens_sampling` must hold 32-bit"),
        ({"use_hot_token_id": True, "topk_tokens_sampling": np.array([0]),
          "hot_token_id": np.zeros(101, np.int64)}, "at most 100 entries, not 101"),
    ]:
        with pytest.raises(ValueError, match=message):
            kernel.check_call(**{**ok, **change})


def test_synthesis_configuration_is_the_capture_configuration():
    kernel = synthesis_configuration()
    assert (kernel.node_top_k, kernel.max_tree_width, kernel.sort_width) == (8, 8, 64)
    assert kernel.score_latency <= 30


@pytest.mark.slow
def test_synthesis_configuration_elaborates_to_verilog():
    text = verilog.convert(synthesis_configuration(), name="score_k8", emit_src=False)
    assert "module score_k8(" in text


# --------------------------------------------------------------------------------------------
# The network.

@pytest.mark.parametrize("width", [64, 128])
def test_stage_list_is_the_golden_one(width):
    assert bitonic_stages(width) == sort_network_stages(width)
    assert BitonicSorter(width=width).stages == sort_network_stages(width)


def _sort_rows(sorter, keys):
    """Run rows of float32 bit patterns through a sorter, one per clock; return its outputs."""
    rows = []

    async def testbench(ctx):
        for index in range(len(keys) + sorter.latency):
            if index < len(keys):
                for lane in range(sorter.width):
                    ctx.set(sorter.keys[lane], int(keys[index][lane]))
                    ctx.set(sorter.payloads[lane], lane)
            await ctx.tick()
            if index >= sorter.latency - 1 and len(rows) < len(keys):
                rows.append(([ctx.get(sorter.sorted_keys[lane]) for lane in range(sorter.width)],
                             [ctx.get(sorter.sorted_payloads[lane])
                              for lane in range(sorter.width)]))

    simulate(sorter, testbench)
    return (np.array([r[0] for r in rows], np.uint32), np.array([r[1] for r in rows], np.int64))


@pytest.mark.parametrize("stages_per_register", [1, pytest.param(5, marks=pytest.mark.slow)])
def test_sorter_matches_golden_network_ties_zeros_nan(stages_per_register):
    rng = np.random.default_rng(stages_per_register)
    rows = [rng.random(64, dtype=np.float32),
            rng.choice(np.array([0.0, -0.0, 0.5, 0.5, 1.0, -1.0, np.inf, -np.inf], np.float32),
                       64),
            np.full(64, SORT_PAD, np.float32),
            rng.integers(0, 2 ** 32, 64, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    rows[3][:3] = np.array([0x7FC00000, 0xFF800001, 0x7F812345], np.uint32).view(np.float32)
    keys = np.stack(rows).view(np.uint32)
    sorter = BitonicSorter(width=64, payload_width=6, stages_per_register=stages_per_register)
    assert sorter.latency == -(-21 // stages_per_register)
    scores, indices = _sort_rows(sorter, keys)
    expected_scores, expected_indices = bitonic_sort_desc(keys.view(np.float32))
    np.testing.assert_array_equal(scores, expected_scores.view(np.uint32))  # NaN bits too
    np.testing.assert_array_equal(indices, expected_indices)


# --------------------------------------------------------------------------------------------
# Score + sort pipeline on Amaranth's simulator (the K = 1 and K = 4 models of the contract).

def _run_pipeline(pipeline, batches, *, idle=0.0, backpressure=0.0, seed=0):
    words = [w for batch in batches for w in request_words(pipeline, batch)]
    layout = pipeline.request_layout
    received, accepted = [], []

    async def producer(ctx):
        await feed(ctx, pipeline.i, [layout.from_bits(w) for w in words], idle=idle,
                   rng=random.Random(seed))

    async def consumer(ctx):
        received.extend(await collect(ctx, pipeline.o, len(words), backpressure=backpressure,
                                      rng=random.Random(seed + 1)))

    async def timer(ctx):
        cycle = 0
        while len(received) < len(words):
            if ctx.get(pipeline.o.valid) and ctx.get(pipeline.o.ready):
                accepted.append(cycle)
            await ctx.tick()
            cycle += 1

    simulate(pipeline, producer, consumer, timer)
    results = decode_results(pipeline, [r.as_bits() for r in received])
    at, problems = 0, []
    for batch in batches:
        mine = {name: value[at:at + batch.b] for name, value in results.items()}
        problems += compare(batch, mine)
        at += batch.b
    assert not problems, "\n".join(problems)
    return accepted


@pytest.mark.parametrize(("k", "w_max", "sort_width"), [
    (4, 4, 64),
    pytest.param(1, 1, 64, marks=pytest.mark.slow),  # the score_k1 Verilator model covers K=1
    pytest.param(10, 6, 64, marks=pytest.mark.slow),  # N = 10 .. 60, not powers of two
    pytest.param(10, 10, 128, marks=pytest.mark.slow),  # N up to 100: the 128-lane network
])
def test_score_pipeline_matches_golden(k, w_max, sort_width):
    """Every W from 1 to max_tree_width: the spec's tie examples where N fits, ties, +-0,
    subnormals, wild signs and magnitudes, cumu_count edges, B = 0, with random idle and
    back-pressure (the score path of the kernel; remap and gather do not depend on K)."""
    pipeline = ScoreSortPipeline(node_top_k=k, max_tree_width=w_max, sort_width=sort_width)
    rng = np.random.default_rng(k)
    batches = directed_batches(rng, k=k, w_max=w_max, count_width=32, hot_size=1, b=2)
    for batch in batches:
        golden_outputs(batch, np.zeros(1, np.int64), sort_width=sort_width)
    if k == 4:
        assert any(b.spec_indices == SPEC_TIE_EXAMPLES[0][1] for b in batches)
    _run_pipeline(pipeline, batches, idle=0.3, backpressure=0.3)


@pytest.mark.slow
def test_score_pipeline_initiation_interval_and_latency():
    pipeline = ScoreSortPipeline(node_top_k=2, max_tree_width=2)
    batch = random_batch(np.random.default_rng(5), k=2, w=2, b=12, style="ties")
    golden_outputs(batch, np.zeros(1, np.int64))
    accepted = _run_pipeline(pipeline, [batch])
    assert accepted[-1] - accepted[0] == len(accepted) - 1  # one result per clock
    assert accepted[0] == pipeline.latency  # the first request is offered at clock 0


# --------------------------------------------------------------------------------------------
# Token remap and gather on Amaranth's simulator.

@pytest.mark.parametrize(("idle", "backpressure"), TRAFFIC)
def test_hot_token_remap_edges(idle, backpressure):
    """Ids -1, 0, V-1, V, the int32 extremes; table entries at the int32 extremes; runtime
    V_hot below the capacity; remap on and off per beat."""
    remap = HotTokenRemap(hot_vocab_size=16, remap_lanes=3, token_width=32)
    rng = np.random.default_rng(1)
    table = hot_table(rng, 13)
    batches = [random_batch(rng, k=4, w=2, b=3, use_hot=hot, hot_size=13, edges=True)
               for hot in (True, False, True)]
    for batch in batches:
        golden_outputs(batch, table)
    words = [w for batch in batches for w in token_words(remap, batch)]
    received = []

    async def producer(ctx):
        ctx.set(remap.table_size, 13)
        writes = pack(remap.table_layout, len(table), address=np.arange(13), value=table)
        await feed(ctx, remap.table, [remap.table_layout.from_bits(w) for w in writes])
        await feed(ctx, remap.i, [remap.token_layout.from_bits(w) for w in words], idle=idle)

    async def consumer(ctx):
        received.extend(await collect(ctx, remap.o, len(words), backpressure=backpressure))

    simulate(remap, producer, consumer)
    ids = decode_tokens(remap, [r.as_bits() for r in received], 3 * len(words))
    at = 0
    for batch in batches:
        count = batch.b * batch.n
        assert not compare(batch, tokens=ids[at:at + count])
        at += -(-count // 3) * 3


def _simulate_gather(gather, h, rows, memory, *, idle, backpressure, latency, seed=0):
    """Rows into ``gather`` with a memory model (random latency, in order); returns beats."""
    rng = random.Random(seed)
    expected_beats = len(rows) * gather.words_per_row(h)
    beats = []

    async def producer(ctx):
        ctx.set(gather.hidden_size, h)
        await feed(ctx, gather.rows, [int(r) for r in rows], idle=idle, rng=rng)

    async def memory_model(ctx):
        clock, offered, pending = 0, None, []
        while len(beats) < expected_beats:
            if offered is None and pending and pending[0][0] <= clock:
                offered = pending.pop(0)[1]
            address_ready = int(rng.random() >= backpressure)
            ctx.set(gather.read_address.ready, address_ready)
            ctx.set(gather.read_data.valid, int(offered is not None))
            if offered is not None:
                ctx.set(gather.read_data.payload, gather.word_layout.from_bits(offered))
            if address_ready and ctx.get(gather.read_address.valid):
                address = ctx.get(gather.read_address.payload)
                due = max([clock + rng.randint(*latency)] + [d for d, _ in pending[-1:]])
                pending.append((due, memory[address]))
            if offered is not None and ctx.get(gather.read_data.ready):
                offered = None
            await ctx.tick()
            clock += 1

    async def consumer(ctx):
        beats.extend(await collect(ctx, gather.o, expected_beats, backpressure=backpressure,
                                   rng=random.Random(seed + 1)))

    simulate(gather, producer, memory_model, consumer)
    return [beat.as_bits() for beat in beats]


@pytest.mark.parametrize(("idle", "backpressure", "h"), [(0.0, 0.0, 13), (0.3, 0.3, 16),
                                                         (0.3, 0.3, 1)])
def test_gather_copies_rows_bit_for_bit(idle, backpressure, h):
    gather = HiddenStateGather(element_width=16, lanes=4, max_hidden_size=64)
    rng = np.random.default_rng(h)
    batch = random_batch(rng, k=4, w=3, b=3, h=h, hidden_dtype=np.uint16)
    expected = golden_outputs(batch, np.zeros(1, np.int64))
    rows = (np.arange(3)[:, None] * 3 + expected["parent_indices_in_layer"]).reshape(-1)
    beats = _simulate_gather(gather, h, rows, hidden_words(batch.hidden, 4, 16), idle=idle,
                             backpressure=backpressure, latency=(1, 6))
    hidden = decode_hidden([beat & ((1 << 64) - 1) for beat in beats], lanes=4,
                           element_width=16, b=3, k=4, h=h)
    assert not compare(batch, hidden=hidden)
    per_row = gather.words_per_row(h)
    marks = [beat >> 64 for beat in beats]  # first | last << 1
    assert marks == ([1] + [0] * (per_row - 2) + [2] if per_row > 1 else [3]) * len(rows)


# --------------------------------------------------------------------------------------------
# The whole K1 kernel on Amaranth's simulator.

def _run_kernel(kernel, batch, table, *, idle=0.0, backpressure=0.0, latency=(1, 1), seed=0):
    """One batch through ``ScoreKernel`` (results, remapped tokens and, when ``batch.h``, the
    gathered rows); returns the RTL outputs decoded, and the clocks of result handshakes."""
    rng = random.Random(seed)
    requests = request_words(kernel, batch)
    tokens = token_words(kernel, batch)
    memory = hidden_words(batch.hidden, kernel.hidden_lanes, kernel.element_width)
    beats = batch.b * batch.k * -(-batch.h // kernel.hidden_lanes) if batch.h else 0
    got = {"results": [], "tokens": [], "hidden": []}
    result_clocks = []

    async def loader(ctx):
        ctx.set(kernel.hidden_size, batch.h)
        ctx.set(kernel.hot_table_size, len(table))
        writes = pack(kernel.table_layout, len(table), address=np.arange(len(table)),
                      value=table)
        await feed(ctx, kernel.hot_table, [kernel.table_layout.from_bits(w) for w in writes])
        await feed(ctx, kernel.tokens, [kernel.token_layout.from_bits(w) for w in tokens],
                   idle=idle, rng=random.Random(seed + 2))

    async def producer(ctx):
        await feed(ctx, kernel.requests, [kernel.request_layout.from_bits(w) for w in requests],
                   idle=idle, rng=random.Random(seed + 3))

    async def result_consumer(ctx):
        got["results"] = await collect(ctx, kernel.results, len(requests),
                                       backpressure=backpressure, rng=random.Random(seed + 4))

    async def token_consumer(ctx):
        got["tokens"] = await collect(ctx, kernel.remapped_tokens, len(tokens),
                                      backpressure=backpressure, rng=random.Random(seed + 5))

    async def hidden_consumer(ctx):
        got["hidden"] = await collect(ctx, kernel.hidden, beats, backpressure=backpressure,
                                      rng=random.Random(seed + 6))

    async def memory_model(ctx):
        clock, offered, pending = 0, None, []
        while len(got["hidden"]) < beats:
            if offered is None and pending and pending[0][0] <= clock:
                offered = pending.pop(0)[1]
            address_ready = int(rng.random() >= backpressure)
            ctx.set(kernel.hidden_read_address.ready, address_ready)
            ctx.set(kernel.hidden_read_data.valid, int(offered is not None))
            if offered is not None:
                ctx.set(kernel.hidden_read_data.payload,
                        kernel.hidden_word_layout.from_bits(offered))
            if address_ready and ctx.get(kernel.hidden_read_address.valid):
                due = max([clock + rng.randint(*latency)] + [d for d, _ in pending[-1:]])
                pending.append((due, memory[ctx.get(kernel.hidden_read_address.payload)]))
            if offered is not None and ctx.get(kernel.hidden_read_data.ready):
                offered = None
            if ctx.get(kernel.results.valid) and ctx.get(kernel.results.ready):
                result_clocks.append(clock)
            await ctx.tick()
            clock += 1

    simulate(kernel, loader, producer, result_consumer, token_consumer, hidden_consumer,
             memory_model)
    results = decode_results(kernel, [r.as_bits() for r in got["results"]])
    ids = decode_tokens(kernel, [t.as_bits() for t in got["tokens"]], batch.b * batch.n)
    mask = (1 << (kernel.hidden_lanes * kernel.element_width)) - 1
    hidden = (decode_hidden([h.as_bits() & mask for h in got["hidden"]],
                            lanes=kernel.hidden_lanes, element_width=kernel.element_width,
                            b=batch.b, k=batch.k, h=batch.h) if batch.h else None)
    return results, ids, hidden, result_clocks


@pytest.mark.parametrize(("idle", "backpressure", "latency"), [
    pytest.param(0.0, 0.0, (1, 1), marks=pytest.mark.slow), (0.3, 0.3, (1, 7))])
def test_kernel_forks_results_to_the_gather(idle, backpressure, latency):
    """K = 2 kernel: results, remapped tokens and gathered rows of a batch, W = 1 and 2."""
    kernel = ScoreKernel(node_top_k=2, max_tree_width=2, hot_vocab_size=8, remap_lanes=3,
                         element_width=32, hidden_lanes=4, max_hidden_size=64)
    rng = np.random.default_rng(7)
    table = hot_table(rng, 7)
    for w, h in ((2, 9), (1, 4)):
        batch = random_batch(rng, k=2, w=w, b=5, h=h, style="ties", use_hot=True, hot_size=7,
                             edges=True, cumu=2 ** 32 - 2 * w)
        golden_outputs(batch, table)
        results, ids, hidden, _ = _run_kernel(kernel, batch, table, idle=idle,
                                              backpressure=backpressure, latency=latency)
        assert not compare(batch, results, ids, hidden)


def test_cuda_capture_through_the_kernel_on_amaranth_simulator():
    """The shared CUDA capture (B=2, K=8, W=8, N=64, H=64): golden equals the capture, RTL
    (the full 64-multiplier, 64-lane K1 kernel, gather included) equals golden."""
    batch, expected, _ = case_batch("cost_draft_tree_score_case")
    golden = golden_outputs(batch, np.zeros(1, np.int64))
    for name, values in expected.items():
        got = golden[name].reshape(-1)
        assert np.array_equal(got.view(np.uint32) if got.dtype == np.float32 else got,
                              values.view(np.uint32) if values.dtype == np.float32 else values)
    kernel = ScoreKernel(node_top_k=8, max_tree_width=8, hot_vocab_size=4)
    results, ids, hidden, clocks = _run_kernel(kernel, batch, np.zeros(4, np.int64))
    assert not compare(batch, results, ids, hidden)


# --------------------------------------------------------------------------------------------
# Verilator regressions (``make sim KERNEL=<target>``).

def _report(sim_report, name, summary):
    extra = summary.get("extra", {})
    sim_report(f"{name}: {summary['vectors']:,} requests bit-exact with the golden op "
               f"({extra.get('token ids', 0):,} token ids, {extra.get('hidden rows', 0):,} "
               f"hidden rows), latency {summary.get('latency_cycles')}, "
               f"II {summary.get('initiation_interval', float('nan')):.2f}")


def test_k1_kernel_under_verilator(sim_report):
    """K = 1 (N = 1, the full 64-lane network): the whole testbench, random idle and
    back-pressure, memory latency, B = 0 and a large B, II = 1."""
    summary = run_target("score_k1", log_file=BUILD_ROOT / "pytest-score_k1.log")
    assert summary["initiation_interval"] == 1.0
    assert summary["latency_cycles"] == ScoreSortPipeline(
        node_top_k=1, max_tree_width=1).latency + 1
    _report(sim_report, "score_k1", summary)


@pytest.mark.slow
def test_k8_kernel_under_verilator(sim_report):
    """``make sim KERNEL=score``: the K = 8, W <= 8 model (the capture, every W, the gather
    table with its probes). It has 64 float32 multipliers: the first build of the model takes
    about 7 minutes on two cores (docs/decisions.md, K1 hardware)."""
    summary = run_target("score", log_file=BUILD_ROOT / "pytest-score.log")
    assert summary["initiation_interval"] == 1.0
    assert summary["latency_cycles"] <= 30
    assert summary["extra"]["gather cycles/request (K=8, H=64, lanes=8)"] == 64
    _report(sim_report, "score", summary)


@pytest.mark.slow
def test_case_replay_of_the_shared_capture_under_verilator(sim_report):
    summary = run_target("score", case=CAPTURES_DIR / "cost_draft_tree_score_case.txt",
                         log_file=BUILD_ROOT / "pytest-score-case.log")
    assert summary["vectors"] == 2 and summary["extra"]["case tensors matched"] == 6
    sim_report("score CASE=cost_draft_tree_score_case.txt: golden == capture, RTL == golden")
