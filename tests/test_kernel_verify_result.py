# amaranth: UnusedElaboratable=no
"""K7 ``VerifyResult``: parameter validation, Amaranth-simulator unit tests and the
Verilator regression against ``golden.update_verify_result`` (K6 outputs from the golden
chain draft round -> K4 -> greedy K6)."""

import numpy as np
import pytest

import hw.kernels.verify_result as verify_result_module
from hw.kernels.verify_result import VerifyResult, synthesis_parameters
from sim.harness import BUILD_ROOT
from sim.verify_result import PARAMETERS, TARGET
from sim.verify_result.pysim import run_on_amaranth
from sim.verify_result.vectors import (
    EXAMPLE_CASE,
    call_from_case,
    directed_calls,
    expected,
    greedy_call,
    random_call,
    write_case_file,
)

SMALL = {"max_draft_tokens": 12, "max_speculative_tokens": 5, "max_batch_size": 40,
         "token_width": 24, "loc_width": 26, "seq_len_width": 13, "pool_index_width": 6}
SMALL_PERF = {"batch_size": 8, "verify_num": 12, "max_node_count": 256, "s": 5}


def test_parameters_and_layouts():
    dut = VerifyResult(**SMALL)
    assert {name: getattr(dut, name) for name in SMALL} == SMALL
    with pytest.raises(AttributeError):
        dut.max_draft_tokens = 3
    params = dut.params
    assert params.flat_bits == 9  # flat ids < 40 * 12
    assert params.cmd_layout.size == 6 + 4 + 3 + 24
    assert params.request_layout.size == 3 + 5 * 9 + 6 + 13 + 13
    assert params.node_layout.size == 24 + 26 + 2
    assert params.commit_layout.size == 8 + 24 + 6 + 13 + 26 + 2  # index < 40 * 5
    assert params.result_layout.size == 3 + 24 + 1 + 13 + 8 + 12
    assert {name: getattr(VerifyResult(), name) for name in PARAMETERS} == PARAMETERS
    config = synthesis_parameters()
    assert (config.max_draft_tokens, config.max_speculative_tokens) == (64, 16)


def test_directed_calls_on_amaranth_simulator():
    calls = directed_calls(12, 5)
    assert [c.name for c in calls if c.want]  # the scenario checks ran in `expected`
    run_on_amaranth(SMALL, calls)


def test_random_calls_with_idle_and_backpressure_on_amaranth_simulator():
    rng = np.random.default_rng(4)
    calls = [random_call(rng, 12, 5) for _ in range(12)] + directed_calls(12, 5)
    run_on_amaranth(SMALL, calls, idle=0.4, backpressure=0.4, seed=3)


def test_smallest_kernel_on_amaranth_simulator():
    params = {**SMALL, "max_draft_tokens": 1, "max_speculative_tokens": 1}
    run_on_amaranth(params, directed_calls(1, 1), idle=0.3, backpressure=0.3)


def test_late_length_limit_is_caught(monkeypatch):
    """A walk that finishes one token late on the length limit (``>`` instead of ``>=``)
    must fail the directed calls that finish by length."""
    calls = [c for c in directed_calls(12, 5) if "by length" in c.name]
    assert calls and all(expected(c)["finished"].all() for c in calls)
    run_on_amaranth(SMALL, calls)

    def late(length, max_seq_len):
        return length > max_seq_len

    monkeypatch.setattr(verify_result_module, "reaches_length_limit", late)
    with pytest.raises(AssertionError, match="differs from the golden|did not finish|announce"):
        run_on_amaranth(SMALL, calls)


def test_example_case_matches_golden():
    call, want = call_from_case(EXAMPLE_CASE)
    assert len(want) == 7 and call.n <= SMALL["max_draft_tokens"]
    golden = expected(call)
    for name, values in want.items():
        assert np.array_equal(np.asarray(golden[name]).reshape(-1), values), name
    assert golden["finished"].tolist() == [True, False, True, False]  # EOS, -, length, -


def test_matches_golden_under_verilator(sim_report):
    """The test-tier model: the throughput call, the directed calls (unstressed and
    stressed), random calls with idle and back-pressure."""
    summary = TARGET.run(SMALL, overrides={"vectors": 40, "perf": SMALL_PERF},
                         log_file=BUILD_ROOT / "pytest-verify_result.log")
    assert summary["random_vectors"] == 40
    # n = 12 node records a request, plus the hand-over clock.
    assert 12.5 <= summary["initiation_interval"] <= 13.5
    sim_report(f"verify_result {SMALL}: {summary['vectors']} calls ({summary['requests']} "
               "requests) bit-exact with the golden")


def test_case_replay_under_verilator():
    summary = TARGET.run(SMALL, case=EXAMPLE_CASE,
                         log_file=BUILD_ROOT / "pytest-verify_result-case.log")
    assert summary["vectors"] == 1 and summary["extra"]["expected tensors"] == "7 of 7 checked"


def test_case_beyond_the_build_replays_on_a_model_built_for_it(tmp_path):
    """A case with n = 16, S = 6 and B = 6 (the test build holds n <= 12, S <= 5) replays
    on the model ``case_parameters`` derives from it."""
    from sim.tree_mask.vectors import grown_call

    tree = grown_call("wide tree", seed=5, batch=6, k=4, width=4, depths=5, maxn=80,
                      verify_num=16, mode=1)
    call = greedy_call("beyond", tree, s=6, rng=np.random.default_rng(5), follow=0.9,
                       eos="random", context=200)
    path = tmp_path / "beyond.txt"
    write_case_file(call, path)
    derived = TARGET.case_parameters(path, SMALL)
    assert (derived["max_draft_tokens"], derived["max_speculative_tokens"]) == (16, 6)
    summary = TARGET.run(SMALL, case=path, log_file=BUILD_ROOT / "pytest-verify_result-big.log")
    assert summary["extra"]["expected tensors"] == "7 of 7 checked"


@pytest.mark.slow
def test_make_sim_target_under_verilator(sim_report):
    """``make sim KERNEL=verify_result``: n = 64, S = 16: n + 1 clocks a request."""
    summary = TARGET.run(log_file=BUILD_ROOT / "pytest-verify_result-full.log")
    assert 64.5 <= summary["initiation_interval"] <= 65.5
    sim_report(f"verify_result (make sim): {summary['vectors']} calls bit-exact, "
               f"{summary['initiation_interval']:.2f} cycles/request at n=64")
