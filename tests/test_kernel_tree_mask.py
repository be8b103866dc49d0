"""K4 ``TreeMask``: parameter validation, Amaranth-simulator unit tests and the Verilator
regression against ``golden.fused_tree_mask_operator`` on trees grown by the golden draft
round and on directed trees."""

import numpy as np
import pytest
from amaranth.hdl import Fragment, Module, Signal

import hw.kernels.tree_mask as tree_mask_module
from hw.kernels.tree_mask import (
    TreeMask,
    TreeMaskParams,
    synthesis_parameters,
)
from hw.lib.logic import lowest_set_bit
from sim.amaranth_tb import simulate
from sim.harness import BUILD_ROOT
from sim.targets import NotMeasured, contract_spec
from sim.tree_mask import PARAMETERS, TARGET
from sim.tree_mask.pysim import run_on_amaranth
from sim.tree_mask.vectors import (
    EXAMPLE_CASE,
    call_from_case,
    directed_calls,
    expected,
    grown_call,
    manual_call,
    random_call,
    write_case_file,
)

# The test-tier parameter set: rows of up to 20 columns in 8-column words (multi-word rows in
# every layout), the byte edges n = 8, 9, 16, 17 and the word edges 7, 8, 9.
SMALL = {"max_node_count": 40, "max_verify_num": 20, "mask_lanes": 8, "token_width": 16,
         "seq_len_width": 12, "max_batch_size": 15}
SMALL_PERF = {"batch_size": 6, "verify_num": 8, "node_top_k": 3, "tree_width": 3,
              "depths": 5, "mode": 2}


# --- parameters -----------------------------------------------------------------------------


def test_parameters_and_layouts():
    dut = TreeMask(max_node_count=200, max_verify_num=100, mask_lanes=128, token_width=20,
                   seq_len_width=24, max_batch_size=1000)
    assert (dut.max_node_count, dut.max_verify_num, dut.mask_lanes, dut.token_width,
            dut.seq_len_width, dut.max_batch_size) == (200, 100, 128, 20, 24, 1000)
    with pytest.raises(AttributeError):
        dut.max_verify_num = 3
    Fragment.get(dut, None)  # elaborates
    params = dut.params
    assert (params.node_bits, params.position_bits) == (8, 7)
    assert params.cmd_layout.size == 10 + 8 + 32 + 2
    assert params.node_layout.size == 20 + 32 + 8 + 2
    assert params.seq_layout.size == 24
    # retrive_index < 1000 * 100, links signed 8 bits, position 25 bits, token, invalid
    assert params.tree_layout.size == 17 + 8 + 8 + 25 + 20 + 1 + 2
    assert params.mask_layout.size == 128 + 1 + 2
    assert set(params.ports) == {"cmd", "nodes", "seq_lens", "tree", "mask"}
    assert {name: getattr(TreeMaskParams(), name) for name in PARAMETERS} == \
        {**PARAMETERS, "max_verify_num": 64}
    config, wide = synthesis_parameters(), synthesis_parameters(mask_lanes=128)
    assert (config.max_verify_num, config.max_node_count) == (64, 256)
    assert wide.mask_lanes == 128


@pytest.mark.parametrize("width", [1, 2, 3, 5, 8, 13])
def test_lowest_set_bit_is_a_priority_encoder(width):
    value = Signal(width)
    m = Module()
    index, found = lowest_set_bit(value)
    out_index, out_found = Signal(len(index)), Signal()
    m.d.comb += [out_index.eq(index), out_found.eq(found)]

    async def testbench(ctx):
        for sample in range(1 << width):
            ctx.set(value, sample)
            assert ctx.get(out_found) == (sample != 0)
            if sample:
                assert ctx.get(out_index) == (sample & -sample).bit_length() - 1, sample

    simulate(m, testbench, clocked=False)


# --- Amaranth simulator ---------------------------------------------------------------------


def test_a_small_tree_by_hand():
    """Root, two children, a grandchild under the second: verify_num 3 keeps the root, node
    2 (0.75) and node 1 (0.5, tied with node 3 and ahead of it on the lower id), i.e. nodes
    {0, 1, 2}; mask rows [1], [1, 1], [1, 0, 1]."""
    call = manual_call("by hand", [-1, 0, 0, 2], [1.001, 0.5, 0.75, 0.5], verify_num=3,
                       mode=1, seq_len=10)
    want = expected(call, 8)
    assert want["tree_mask"].astype(int).tolist() == [[[1, 0, 0], [1, 1, 0], [1, 0, 1]]]
    assert want["retrive_next_token"].tolist() == [[1, -1, -1]]
    assert want["retrive_next_sibling"].tolist() == [[-1, 2, -1]]
    assert want["positions"].tolist() == [10, 11, 11]
    run_on_amaranth({**SMALL, "max_verify_num": 8}, [call, call.with_mode(0),
                                                     call.with_mode(2)])


def test_directed_calls_on_amaranth_simulator():
    """Each directed tree in one of its layouts (all three run under Verilator)."""
    calls = directed_calls(40, 20, 8)
    run_on_amaranth(SMALL, [c for i, c in enumerate(calls) if i % 3 == 0 or "mode" not in
                            c.name])


def test_random_calls_with_idle_and_backpressure_on_amaranth_simulator():
    rng = np.random.default_rng(11)
    calls = [random_call(rng, 40, 20, 8) for _ in range(10)]
    run_on_amaranth(SMALL, calls, idle=0.4, backpressure=0.4, seed=5)


@pytest.mark.parametrize(("maxn", "maxv"), [(1, 1), (5, 2), (9, 9)])
def test_tiny_kernels_on_amaranth_simulator(maxn, maxv):
    params = {**SMALL, "max_node_count": maxn, "max_verify_num": maxv}
    run_on_amaranth(params, directed_calls(maxn, maxv, 8), idle=0.3, backpressure=0.3, seed=2)


def test_raw_bit_compare_is_caught(monkeypatch):
    """A selection that orders raw bit patterns (so -0.0 sorts above every positive score and
    differs from +0.0) must fail the signed-zero directed calls."""
    monkeypatch.setattr(tree_mask_module, "float32_order_key", lambda bits: bits.as_signed())
    monkeypatch.setattr(tree_mask_module, "key_at_least",
                        lambda key, bits: key >= bits.as_signed())
    calls = [c for c in directed_calls(40, 20, 8) if "+0.0/-0.0" in c.name]
    assert calls
    with pytest.raises(AssertionError, match="differs from the golden"):
        run_on_amaranth(SMALL, calls)


# --- example case file ----------------------------------------------------------------------


def test_example_case_matches_golden():
    call, want = call_from_case(EXAMPLE_CASE)
    assert len(want) == 6 and call.cumu_count <= SMALL["max_node_count"]
    golden = expected(call, SMALL["max_verify_num"])
    for name, values in want.items():
        assert np.array_equal(np.asarray(golden[name]).reshape(-1), values), name


# --- benchmark points and case parameters (no build) ---------------------------------------


def _point(**tree):
    return {"id": "test", "batch": 1, "vocab": 32000, **tree}


SMALL_TREE = {"node_top_k": 4, "tree_width": 4, "depth": 3, "verify_num": 8}


def test_measure_parameters():
    """The contract's trees: ``PARAMETERS`` where the round fits in 256 nodes, else
    ``max_node_count`` raised to the next power of two (eagle2: 411 nodes, serving: 265)."""
    small = _point(**SMALL_TREE)
    assert TARGET.measure_parameters(small) == (PARAMETERS, contract_spec(small))
    for tree in ({"node_top_k": 10, "tree_width": 10, "depth": 5, "verify_num": 60},
                 {"node_top_k": 8, "tree_width": 8, "depth": 5, "verify_num": 64}):
        parameters, _ = TARGET.measure_parameters(_point(**tree))
        assert parameters == {**PARAMETERS, "max_node_count": 512}
    with pytest.raises(NotMeasured, match=r"verify set n = 200 exceeds `max_verify_num` 128 "
                                          r"\(the packed layout's limit\)"):
        TARGET.measure_parameters(_point(node_top_k=10, tree_width=10, depth=5,
                                         verify_num=200))
    with pytest.raises(NotMeasured, match="B = 300 exceeds `max_batch_size` 256"):
        TARGET.measure_parameters({**_point(**SMALL_TREE), "batch": 300})


def test_case_parameters_cover_the_case(tmp_path):
    """A case's tokens and ``seq_lens`` wider than the build's widen the model; a case that
    fits leaves the parameters alone."""
    assert TARGET.case_parameters(EXAMPLE_CASE, SMALL) == SMALL
    call = manual_call("wide", [-1, 0, 0], [1.001, 0.5, 0.25], verify_num=2, mode=0,
                       seq_len=5000)
    call.cumu_tokens[0, 1] = -40000
    path = tmp_path / "wide.txt"
    write_case_file(call, path)
    assert TARGET.case_parameters(path, SMALL) == {**SMALL, "token_width": 17,
                                                   "seq_len_width": 13}


# --- Verilator ------------------------------------------------------------------------------


def test_matches_golden_under_verilator(sim_report):
    """The test-tier model: the throughput call, the directed calls (unstressed and
    stressed), random draft-round calls with idle and back-pressure."""
    summary = TARGET.run(SMALL, overrides={"vectors": 25, "perf": SMALL_PERF},
                         log_file=BUILD_ROOT / "pytest-tree_mask.log")
    assert summary["random_vectors"] == 25
    # 6 requests of 40 nodes, n = 8 (one mask word a row): the node stream sets the pace,
    # cumu_count + 1 clocks a request.
    assert summary["initiation_interval"] == 41.0
    sim_report(f"tree_mask {SMALL}: {summary['vectors']} calls ({summary['requests']} "
               f"requests) bit-exact with the golden")


def test_case_replay_under_verilator():
    summary = TARGET.run(SMALL, case=EXAMPLE_CASE,
                         log_file=BUILD_ROOT / "pytest-tree_mask-case.log")
    assert summary["vectors"] == 1 and summary["extra"]["expected tensors"] == "6 of 6 checked"


def _larger_case(path):
    """A case whose tree (49 nodes), verify set (24) and batch (16) exceed the SMALL build;
    returns the build ``case_parameters`` derives for it."""
    call = grown_call("larger", seed=5, batch=16, k=3, width=3, depths=6, maxn=64,
                      verify_num=24, mode=0, vocab=30000)
    assert call.cumu_count == 49 and call.n(24) == 24
    write_case_file(call, path)
    return {**SMALL, "max_node_count": 64, "max_verify_num": 24, "max_batch_size": 16}


def test_case_with_a_larger_tree_derives_a_larger_build(tmp_path):
    """``case_parameters`` on a case beyond the SMALL build, and the case's call on the derived
    build under Amaranth's simulator (the Verilator replay is in the slow tier)."""
    path = tmp_path / "larger.txt"
    parameters = _larger_case(path)
    assert TARGET.case_parameters(path, SMALL) == parameters
    call, _ = call_from_case(path)
    run_on_amaranth(parameters, [call])


@pytest.mark.slow
def test_case_with_a_larger_tree_builds_a_larger_model(tmp_path):
    """``CASE=`` on that case: it replays on a model built for it."""
    path = tmp_path / "larger.txt"
    _larger_case(path)
    summary = TARGET.run(SMALL, case=path, log_file=BUILD_ROOT / "pytest-tree_mask-larger.log")
    assert summary["extra"]["model"] == "MAXN=64, MAXV=24, B<=16"
    assert summary["extra"]["expected tensors"] == "6 of 6 checked"


def test_measurement_on_the_test_tier_model():
    """The ``measurement`` test at the contract's small tree, B = 8, on the SMALL model (the
    tree fits): the cycles, interval and operations of the cycle budget sheet."""
    point = {**_point(**SMALL_TREE), "batch": 8}
    summary = TARGET.run(SMALL, overrides={"measure": contract_spec(point)},
                         tests=("measurement",),
                         log_file=BUILD_ROOT / "pytest-tree_mask-measure.log")
    measurement = summary["measurement"]
    assert (measurement["cycles"], measurement["initiation_interval"],
            measurement["operations"]) == (325, 38.0, 2080)


@pytest.mark.slow
def test_make_sim_target_under_verilator(sim_report):
    """``make sim KERNEL=tree_mask``: MAXN = 256, MAXV = 128; verify_num = 64 on 256-node
    trees costs cumu_count + 1 clocks a request."""
    summary = TARGET.run(log_file=BUILD_ROOT / "pytest-tree_mask-full.log")
    assert summary["initiation_interval"] == 257.0
    sim_report(f"tree_mask (make sim): {summary['vectors']} calls bit-exact, "
               f"{summary['initiation_interval']:.2f} cycles/request at verify_num=64 MAXN=256")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("parameters", "perf"),
    [
        ({"max_node_count": 130, "max_verify_num": 128, "mask_lanes": 128},
         {"batch_size": 4, "verify_num": 128, "node_top_k": 3, "tree_width": 3, "depths": 15,
          "mode": 2}),
        ({"max_node_count": 64, "max_verify_num": 64, "mask_lanes": 16},
         {"batch_size": 4, "verify_num": 64, "node_top_k": 4, "tree_width": 4, "depths": 5,
          "mode": 0}),
    ],
    ids=["lanes128-n128", "maxv=maxn-lanes16"],
)
def test_other_parameters_under_verilator(parameters, perf, sim_report):
    summary = TARGET.run(parameters, overrides={"vectors": 40, "perf": perf},
                         log_file=BUILD_ROOT / "pytest-tree_mask-params.log")
    sim_report(f"tree_mask {parameters}: {summary['vectors']} calls bit-exact, "
               f"{summary['initiation_interval']:.2f} cycles/request")
