# amaranth: UnusedElaboratable=no
"""K1 score + top-k kernel: parameter records and checks, Amaranth-simulator unit tests of every
part, and the Verilator regressions of ``make sim KERNEL=score`` / ``score_k1`` and of case
replays against the golden op.

(The header above: the sorter checks build ``BitonicSorter`` instances without elaborating
them.)
"""

import numpy as np
import pytest
from amaranth.back import verilog

from golden.cases import CAPTURES_DIR
from golden.sort import SORT_PAD, bitonic_sort_desc, sort_network_stages
from hw.kernels.gather import GatherParams, HiddenStateGather
from hw.kernels.score import (
    ScoreKernel,
    ScoreParams,
    synthesis_configuration,
    synthesis_parameters,
)
from hw.kernels.score_sort import ScoreSortParams, ScoreSortPipeline
from hw.kernels.token_remap import HotTokenRemap, TokenRemapParams
from hw.lib.bitonic import BitonicSorter, bitonic_stages
from hw.lib.float32 import Float32Multiply
from hw.lib.params import ParameterError
from sim.amaranth_tb import simulate
from sim.harness import BUILD_ROOT
from sim.score import K1_PARAMETERS, PARAMETERS, TARGET, TARGET_K1
from sim.score.pysim import run_case, run_gather, run_kernel, run_pipeline, run_remap
from sim.score.vectors import (
    SPEC_TIE_EXAMPLES,
    compare,
    decode_hidden,
    directed_batches,
    golden_outputs,
    hidden_words,
    hot_table,
    random_batch,
    write_case_file,
)

TRAFFIC = [(0.0, 0.0), (0.3, 0.3)]


# --------------------------------------------------------------------------------------------
# Parameters.

@pytest.mark.parametrize(("kwargs", "message", "parameter"), [
    ({"node_top_k": 0, "max_tree_width": 1}, "`node_top_k` must be between 1 and 16, not 0",
     "node_top_k"),
    ({"node_top_k": 17, "max_tree_width": 1}, "`node_top_k` must be between 1 and 16, not 17",
     "node_top_k"),
    ({"node_top_k": 8, "max_tree_width": 12},
     "`max_tree_width` must be between 1 and `node_top_k`, not 12", "max_tree_width"),
    ({"node_top_k": 8, "max_tree_width": 0},
     "`max_tree_width` must be between 1 and `node_top_k`, not 0", "max_tree_width"),
    ({"node_top_k": 10, "max_tree_width": 7},
     r"`max_tree_width \* node_top_k` must be at most `sort_width` \(64\), not 70",
     "max_tree_width"),
    ({"node_top_k": 8, "max_tree_width": 8, "sort_width": 32},
     "`sort_width` must be one of 64, 128, not 32", "sort_width"),
    ({"node_top_k": 8, "max_tree_width": 8, "count_width": 64},
     "`count_width` must be between 8 and 63, not 64", "count_width"),
    ({"node_top_k": 8, "max_tree_width": 8, "stages_per_register": 22},
     "`stages_per_register` must be between 1 and 21, not 22", "stages_per_register"),
    ({"node_top_k": 2.0, "max_tree_width": 1}, "`node_top_k` must be an integer, not 2.0",
     "node_top_k"),
])
def test_score_pipeline_parameter_validation(kwargs, message, parameter):
    for record in (ScoreSortParams, ScoreParams):  # the kernel's record checks the same
        with pytest.raises(ParameterError, match=message) as error:
            record(**kwargs)
        assert error.value.parameter == parameter


@pytest.mark.parametrize(("part", "kwargs", "message"), [
    (TokenRemapParams, {"hot_vocab_size": 0}, "`hot_vocab_size` must be at least 1, not 0"),
    (TokenRemapParams, {"token_width": 65}, "`token_width` must be between 2 and 64, not 65"),
    (GatherParams, {"lanes": 6}, "`lanes` must be a power of two, not 6"),
    (GatherParams, {"element_width": 0}, "`element_width` must be at least 1, not 0"),
    (ScoreParams, {"hidden_lanes": 12}, "`hidden_lanes` must be a power of two, not 12"),
    (BitonicSorter, {"width": 48}, "`width` must be a power of two >= 2, not 48"),
    (BitonicSorter, {"width": 128, "stages_per_register": 0},
     "`stages_per_register` must be between 1 and 28"),
])
def test_parts_parameter_validation(part, kwargs, message):
    # The records raise ParameterError (a ValueError); the sorter, a library part, ValueError.
    with pytest.raises(ValueError if part is BitonicSorter else ParameterError, match=message):
        part(**kwargs)


def test_parameter_records_and_layouts():
    params = ScoreParams(node_top_k=10, max_tree_width=6, hot_vocab_size=100, remap_lanes=3,
                         element_width=16, hidden_lanes=4)
    assert (params.node_top_k, params.max_tree_width, params.sort_width, params.count_width,
            params.hot_vocab_size, params.remap_lanes, params.element_width,
            params.hidden_lanes, params.max_candidates) == (10, 6, 64, 32, 100, 3, 16, 4, 60)
    # multiply, the network's input register, its 21 stages, index arithmetic, output slice
    assert params.score_latency == Float32Multiply.latency + 1 + 21 + 1 + 1
    with pytest.raises(AttributeError):
        params.node_top_k = 4
    assert ScoreSortParams(node_top_k=10, max_tree_width=10,
                           sort_width=128).latency == Float32Multiply.latency + 1 + 28 + 1
    assert params.request_layout.size == 60 * 32 + 6 * 32 + 3 + 32 + 2
    assert params.table_layout.size == 7 + 32 and params.hidden_word_layout.size == 64
    assert set(params.ports) == {"requests", "results", "tokens", "remapped_tokens",
                                 "hot_table", "hidden_read_address", "hidden_read_data",
                                 "hidden"}
    assert params.ports["hidden_read_address"].size == 32
    assert params.words_per_row(9) == 3


def test_check_call_refuses_what_the_hardware_cannot_represent():
    params = ScoreParams(node_top_k=8, max_tree_width=4, hot_vocab_size=100, hidden_lanes=8,
                         max_hidden_size=64)
    ok = {"batch_size": 2, "node_top_k": 8, "tree_width": 4, "cumu_count": 2 ** 32 - 32}
    params.check_call(**ok)
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
        with pytest.raises(ValueError, match=message) as error:
            params.check_call(**{**ok, **change})
        assert error.value.parameter in change


def test_synthesis_parameters_are_the_capture_configuration():
    params = synthesis_parameters()
    assert (params.node_top_k, params.max_tree_width, params.sort_width) == (8, 8, 64)
    assert (params.hot_vocab_size, params.element_width, params.hidden_lanes) == (32000, 16, 16)
    assert params.score_latency <= 30
    assert synthesis_parameters(node_top_k=4, max_tree_width=2).max_candidates == 8


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
    assert sorter.latency == 1 + -(-21 // stages_per_register)  # input register + stages
    scores, indices = _sort_rows(sorter, keys)
    expected_scores, expected_indices = bitonic_sort_desc(keys.view(np.float32))
    np.testing.assert_array_equal(scores, expected_scores.view(np.uint32))  # NaN bits too
    np.testing.assert_array_equal(indices, expected_indices)


# --------------------------------------------------------------------------------------------
# Score + sort pipeline on Amaranth's simulator (the K = 1 and K = 4 models of the contract).

def _check_batches(batches, results):
    """Compare the decoded results of ``batches`` (back to back) with their golden outputs."""
    at, problems = 0, []
    for batch in batches:
        problems += compare(batch, {name: value[at:at + batch.b]
                                    for name, value in results.items()})
        at += batch.b
    assert not problems, "\n".join(problems)


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
    results, _ = run_pipeline(pipeline, batches, idle=0.3, backpressure=0.3)
    _check_batches(batches, results)


@pytest.mark.slow
def test_score_pipeline_initiation_interval_and_latency():
    pipeline = ScoreSortPipeline(node_top_k=2, max_tree_width=2)
    batch = random_batch(np.random.default_rng(5), k=2, w=2, b=12, style="ties")
    golden_outputs(batch, np.zeros(1, np.int64))
    results, accepted = run_pipeline(pipeline, [batch])
    _check_batches([batch], results)
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
    ids = run_remap(remap, batches, table, idle=idle, backpressure=backpressure)
    at = 0
    for batch in batches:
        count = batch.b * batch.n
        assert not compare(batch, tokens=ids[at:at + count])
        at += -(-count // 3) * 3


@pytest.mark.parametrize(("idle", "backpressure", "h"), [(0.0, 0.0, 13), (0.3, 0.3, 16),
                                                         (0.3, 0.3, 1)])
def test_gather_copies_rows_bit_for_bit(idle, backpressure, h):
    """Rows of float16 bits through the gather; the memory stalls (random latency) and the
    output is back-pressured with probability ``backpressure``."""
    gather = HiddenStateGather(element_width=16, lanes=4, max_hidden_size=64)
    rng = np.random.default_rng(h)
    batch = random_batch(rng, k=4, w=3, b=3, h=h, hidden_dtype=np.uint16)
    expected = golden_outputs(batch, np.zeros(1, np.int64))
    rows = (np.arange(3)[:, None] * 3 + expected["parent_indices_in_layer"]).reshape(-1)
    beats = run_gather(gather, h, rows, hidden_words(batch.hidden, 4, 16), idle=idle,
                       backpressure=backpressure)
    hidden = decode_hidden([beat & ((1 << 64) - 1) for beat in beats], lanes=4,
                           element_width=16, b=3, k=4, h=h)
    assert not compare(batch, hidden=hidden)
    per_row = gather.words_per_row(h)
    marks = [beat >> 64 for beat in beats]  # first | last << 1
    assert marks == ([1] + [0] * (per_row - 2) + [2] if per_row > 1 else [3]) * len(rows)


# --------------------------------------------------------------------------------------------
# The whole K1 kernel on Amaranth's simulator.

@pytest.mark.parametrize(("idle", "backpressure"), [
    pytest.param(0.0, 0.0, marks=pytest.mark.slow), (0.3, 0.3)])
def test_kernel_forks_results_to_the_gather(idle, backpressure):
    """K = 2 kernel: results, remapped tokens and gathered rows of a batch, W = 1 and 2."""
    parameters = {"node_top_k": 2, "max_tree_width": 2, "hot_vocab_size": 8,
                  "remap_lanes": 3, "element_width": 32, "hidden_lanes": 4,
                  "max_hidden_size": 64}
    rng = np.random.default_rng(7)
    table = hot_table(rng, 7)
    for w, h in ((2, 9), (1, 4)):
        kernel = ScoreKernel(**parameters)
        assert kernel.params == ScoreParams(**parameters) and kernel.max_candidates == 4
        with pytest.raises(AttributeError):
            kernel.node_top_k = 4
        batch = random_batch(rng, k=2, w=w, b=5, h=h, style="ties", use_hot=True, hot_size=7,
                             edges=True, cumu=2 ** 32 - 2 * w)
        golden_outputs(batch, table)
        results, ids, hidden = run_kernel(kernel, batch, table, idle=idle,
                                          backpressure=backpressure)
        assert not compare(batch, results, ids, hidden)


def test_cuda_capture_through_the_kernel_on_amaranth_simulator():
    """The shared CUDA capture (B=2, K=8, W=8, N=64, H=64): golden equals the capture, RTL
    (the full 64-multiplier, 64-lane K1 kernel, gather included) equals golden."""
    assert run_case(CAPTURES_DIR / "cost_draft_tree_score_case.txt",
                    {"node_top_k": 8, "max_tree_width": 8, "hot_vocab_size": 4}) == 6


# --------------------------------------------------------------------------------------------
# Case files: the build parameters a case needs, malformed files.

def _case(tmp_path, name, *, k, w, b=3, h=0, table_size=4096, use_hot=True, cumu=100, seed=3):
    """A case file written by the golden: a random batch and a ``table_size`` table."""
    rng = np.random.default_rng(seed)
    table = hot_table(rng, table_size) if table_size else None
    batch = random_batch(rng, k=k, w=w, b=b, h=h, style="ties", use_hot=use_hot,
                         hot_size=table_size or 1, edges=True, cumu=cumu, name=name)
    path = tmp_path / f"{name}.txt"
    write_case_file(batch, table, path, sort_width=64 if k * w <= 64 else 128)
    return path


def test_case_parameters_follow_the_case(tmp_path):
    """The issue's report: a capture with a 4,096-entry hot-token table (and an EAGLE-3 draft
    vocabulary of 32,000) replays on a model whose table holds it; K, W and the network come
    from the case; H, cumu_count and the table only ever raise the run's parameters."""
    k8 = _case(tmp_path, "k8_w4", k=8, w=4, h=16)
    assert TARGET.case_parameters(k8, PARAMETERS) == {**PARAMETERS, "hot_vocab_size": 4096}
    eagle = _case(tmp_path, "eagle3", k=8, w=8, table_size=32000)
    assert TARGET.case_parameters(eagle, PARAMETERS)["hot_vocab_size"] == 32000
    k3 = _case(tmp_path, "k3_w2", k=3, w=2, h=5000, cumu=2 ** 33)
    derived = TARGET.case_parameters(k3, PARAMETERS)
    assert {key: derived[key] for key in ("node_top_k", "max_tree_width", "sort_width",
                                          "max_hidden_size", "count_width")} == \
        {"node_top_k": 3, "max_tree_width": 3, "sort_width": 64, "max_hidden_size": 5000,
         "count_width": 34}
    assert TARGET_K1.case_parameters(k3, K1_PARAMETERS)["max_tree_width"] == 2
    wide = _case(tmp_path, "k10_w6", k=10, w=6, table_size=0, use_hot=False)
    assert {key: TARGET.case_parameters(wide, PARAMETERS)[key]
            for key in ("node_top_k", "max_tree_width", "sort_width")} == \
        {"node_top_k": 10, "max_tree_width": 6, "sort_width": 64}  # N_max 60: 64 lanes
    wider = _case(tmp_path, "k16_w5", k=16, w=5, table_size=0, use_hot=False)
    assert {key: TARGET.case_parameters(wider, PARAMETERS)[key]
            for key in ("node_top_k", "max_tree_width", "sort_width")} == \
        {"node_top_k": 16, "max_tree_width": 8, "sort_width": 128}


# --------------------------------------------------------------------------------------------
# Verilator regressions (``make sim KERNEL=<target>``, ``CASE=``).

def _report(sim_report, name, summary):
    extra = summary.get("extra", {})
    sim_report(f"{name}: {summary['vectors']:,} requests bit-exact with the golden op "
               f"({extra.get('token ids', 0):,} token ids, {extra.get('hidden rows', 0):,} "
               f"hidden rows), latency {summary.get('latency_cycles')}, "
               f"II {summary.get('initiation_interval', float('nan')):.2f}")


def test_k1_kernel_under_verilator(sim_report):
    """K = 1 (N = 1, the full 64-lane network): every phase, random idle and back-pressure,
    memory latency, B = 0 and a large B, II = 1."""
    summary = TARGET_K1.run(log_file=BUILD_ROOT / "pytest-score_k1.log")
    assert summary["initiation_interval"] == 1.0
    assert summary["latency_cycles"] == ScoreSortParams(node_top_k=1, max_tree_width=1).latency + 1
    assert summary["random_vectors"] == 24 and summary["extra"]["hidden rows"] > 0
    _report(sim_report, "score_k1", summary)


def test_case_with_a_larger_table_and_other_k_replays_on_amaranth_simulator(tmp_path):
    """A golden case with a 4,096-entry table (the targets' builds hold 1,024), K = 3,
    W = 2, H = 5 (gathered): the parameters ``case_parameters`` derives for ``score_k1``
    replay it (RTL == golden == the file) on Amaranth's simulator, stressed."""
    path = _case(tmp_path, "k3_table4096", k=3, w=2, b=4, h=5)
    parameters = TARGET_K1.case_parameters(path, K1_PARAMETERS)
    assert (parameters["node_top_k"], parameters["max_tree_width"],
            parameters["hot_vocab_size"]) == (3, 2, 4096)
    assert run_case(path, parameters, idle=0.3, backpressure=0.3) == 7


@pytest.mark.slow
def test_case_with_a_larger_table_and_other_k_builds_its_model(tmp_path, sim_report):
    """The same case through ``make sim KERNEL=score_k1 CASE=``: the model is built for the
    case (``case_parameters``; one more model of the 64-lane network, 7 to 10 minutes here)
    and RTL == golden == the file."""
    path = _case(tmp_path, "k3_table4096", k=3, w=2, b=4, h=5)
    summary = TARGET_K1.run(case=path, log_file=BUILD_ROOT / "pytest-score_k1-case.log")
    assert summary["vectors"] == 4 and summary["extra"]["case tensors matched"] == 7
    assert summary["extra"]["hidden rows"] == 4 * 3
    sim_report("score_k1 CASE=k3_table4096 (K=3, W=2, 4,096-entry table): RTL == golden "
               "== file")


@pytest.mark.slow
def test_k8_kernel_under_verilator(sim_report):
    """``make sim KERNEL=score``: the K = 8, W <= 8 model (the capture, every W, the gather
    table with its probes). It has 64 float32 multipliers: the first build of the model takes
    about 7 minutes on two cores (docs/decisions.md, K1 hardware)."""
    summary = TARGET.run(log_file=BUILD_ROOT / "pytest-score.log")
    assert summary["initiation_interval"] == 1.0
    assert summary["latency_cycles"] <= 30
    assert summary["extra"]["gather cycles/request (K=8, H=64, lanes=8)"] == 64
    assert summary["extra"]["capture tensors matched"] == 6
    _report(sim_report, "score", summary)


@pytest.mark.slow
def test_case_replay_of_the_shared_capture_under_verilator(sim_report):
    summary = TARGET.run(case=CAPTURES_DIR / "cost_draft_tree_score_case.txt",
                         log_file=BUILD_ROOT / "pytest-score-case.log")
    assert summary["vectors"] == 2 and summary["extra"]["case tensors matched"] == 6
    sim_report("score CASE=cost_draft_tree_score_case.txt: golden == capture, RTL == golden")
