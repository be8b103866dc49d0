"""K2 ``update_cumu_draft_state`` hardware (``hw.kernels.update_state``) vs the golden model.

Parameter validation, Amaranth-simulator unit tests at small parameters (directed cases, back
to back requests, framing, the host port, a mutant that must be caught), and the Verilator
regression: the default target (the CUDA capture's parameters: capture, directed and random
vectors, cycles per request), a K = 1 build, and a ``CASE=`` replay of a written case file.
"""

import dataclasses

import numpy as np
import pytest
from amaranth.hdl import Fragment

import hw.kernels.update_state as kernel_module
from hw.kernels.update_state import (
    Region,
    UpdateCumuDraftState,
    UpdateStateParams,
    synthesis_parameters,
)
from hw.lib.float32 import Float32Multiply, float32_less
from sim.harness import BUILD_ROOT
from sim.payload import pack
from sim.targets import NotMeasured
from sim.update_state import PARAMETERS, TARGET
from sim.update_state.host import (
    check_request,
    compare_states,
    golden_apply,
    load_commands,
    params_from,
    request_beats,
)
from sim.update_state.pysim import run_steps
from sim.update_state.vectors import (
    directed_cases,
    random_request,
    random_state,
    read_update_case,
    sentinel_state,
    write_update_case,
)

SMALL = {"node_top_k": 3, "max_tree_width": 2, "max_node_count": 16, "max_verify_num": 6,
         "max_input_size": 4, "max_batch": 3, "token_width": 16, "index_width": 12}
K1 = {"node_top_k": 1, "max_tree_width": 1, "max_node_count": 40, "max_verify_num": 12,
      "max_input_size": 6, "max_batch": 3, "token_width": 12, "index_width": 8}


def run_directed(params, *, idle=0.0, backpressure=0.0, seed=0, only=None):
    """Every directed case (load, request, dump) in one simulation; returns the failures."""
    p = params_from(params)
    cases = [case for case in directed_cases(p) if only is None or case[0] in only]
    steps = []
    for _, slot, state, request in cases:
        steps += [("load", slot, state), ("requests", [(slot, request)]), ("dump", slot)]
    results = run_steps(p, steps, idle=idle, backpressure=backpressure, seed=seed)
    failures = []
    for index, (name, slot, state, request) in enumerate(cases):
        expected, dropped = golden_apply(p, state, request)
        (record,), _ = results[3 * index + 1]
        if record != {"slot": slot, "dropped": dropped, "framing_error": 0, "refused": 0}:
            failures.append(f"{name}: done record {record}")
        failures += compare_states(results[3 * index + 2], expected, context=f"{name}: ")
    return cases, failures


# --- parameters --------------------------------------------------------------------------------


def test_parameters_are_read_only_properties_and_shape_the_ports():
    dut = UpdateCumuDraftState(**SMALL)
    for name, value in SMALL.items():
        assert getattr(dut, name) == value
        with pytest.raises(AttributeError):
            setattr(dut, name, value)
    p = dut.params
    assert p == UpdateStateParams(**SMALL)
    assert p.max_candidates == 6 and p.work_size == 9 and p.mask_row_width == 5
    assert [p.region_size(r) for r in Region] == [16, 3, 9, 6]
    assert set(dut.signature.members) == {"req", "done", "host_cmd", "host_rsp", "work_write"}
    assert dict(p.work_write_layout.members)["addr"] == range(3 * 9)
    request = dict(p.request_layout.members)
    assert request["token"].width == 16 and request["token"].signed
    assert request["topk_index"].width == 12 and request["topk_index"].signed
    assert request["mask"].width == 4 and "first" in request and "last" in request
    assert dict(p.host_response_layout.members)["mask"].width == 5
    assert dict(p.done_layout.members)["dropped"].width == 3
    assert set(p.ports) == {"req", "done", "host_cmd", "host_rsp"}
    assert p.ports["host_rsp"] == p.host_response_layout
    assert synthesis_parameters().max_batch == 8
    assert synthesis_parameters(index_width=20).index_width == 20
    Fragment.get(dut, None)  # elaborated: no UnusedElaboratable warning


# --- host API ------------------------------------------------------------------------------------


def test_host_api_reports_overflow_and_refuses_what_the_storage_cannot_hold():
    p = params_from(SMALL)
    rng = np.random.default_rng(0)
    request = random_request(rng, p, tree_width=2, cumu_count=14)
    assert check_request(p, request) == 4            # slots 16..19 of 14..19 are dropped
    assert check_request(p, {**request, "cumu_count": 10}) == 0
    with pytest.raises(ValueError, match="`tree_width` must be between 1 and `max_tree_width`"):
        check_request(p, random_request(rng, params_from({**SMALL, "max_tree_width": 3}),
                                        tree_width=3))
    with pytest.raises(ValueError, match="`topk_tokens` value 40000 does not fit"):
        check_request(p, {**request, "topk_tokens": np.full(6, 40000, np.int64)})
    with pytest.raises(ValueError, match="`sorted_indexs` values must be between 0 and N - 1"):
        check_request(p, {**request, "sorted_indexs": np.full(6, 6, np.int64)})
    with pytest.raises(ValueError, match="`cumu_count` \\+ N must be at most 2047"):
        check_request(p, {**request, "cumu_count": 2045})
    state = sentinel_state(p)
    state["prev_indexs"][3] = 5000
    with pytest.raises(ValueError, match="`prev_indexs` value 5000 does not fit"):
        load_commands(p, 0, state)


# --- Amaranth simulator ---------------------------------------------------------------------


def test_directed_cases_on_amaranth_simulator():
    cases, failures = run_directed(SMALL)
    assert len(cases) >= 20
    assert not failures, "\n".join(failures)


def test_directed_cases_with_idle_and_backpressure():
    _, failures = run_directed(SMALL, idle=0.3, backpressure=0.3, seed=5)
    assert not failures, "\n".join(failures)


def test_k1_directed_cases_side_links_all_minus_one():
    cases, failures = run_directed(K1, idle=0.1, backpressure=0.1)
    assert not failures, "\n".join(failures)
    p = params_from(K1)
    for _, _, state, request in cases:
        after, _ = golden_apply(p, state, request)
        start, fit = request["cumu_count"], max(0, min(1, p.max_node_count - request["cumu_count"]))
        assert (after["side_indexs"][start:start + fit] == -1).all()


def test_back_to_back_requests_chain_on_every_slot():
    """Requests sent without pause, several on the same slot, dumps only at the end."""
    p = params_from(SMALL)
    rng = np.random.default_rng(11)
    states = {slot: (random_state(rng, p) if slot else sentinel_state(p))
              for slot in range(p.max_batch)}
    expected = dict(states)
    plan, counts = [], dict.fromkeys(states, 2)
    for index in range(9):
        slot = index % p.max_batch if index < 6 else 1
        request = random_request(rng, p, cumu_count=counts[slot])
        counts[slot] = min(request["cumu_count"] + 3 * request["tree_width"], 14)
        expected[slot], _ = golden_apply(p, expected[slot], request)
        plan.append((slot, request))
    steps = [("load", slot, state) for slot, state in states.items()]
    steps += [("requests", plan)] + [("dump", slot) for slot in states]
    results = run_steps(p, steps)
    records, _ = results[len(states)]
    assert [r["slot"] for r in records] == [slot for slot, _ in plan]
    for slot, dump in zip(states, results[len(states) + 1:], strict=True):
        assert not compare_states(dump, expected[slot], context=f"slot {slot}: ")


def test_work_write_is_every_write_of_the_work_rows():
    """A copy kept from ``work_write`` alone (the host's loads and the requests' copies)
    equals the ``work_scores`` rows the host port reads back, bit for bit."""
    p = params_from(SMALL)
    rng = np.random.default_rng(5)
    states = {slot: random_state(rng, p) for slot in range(p.max_batch)}
    plan = [(slot, random_request(rng, p, cumu_count=2)) for slot in (0, 2, 0, 1)]
    steps = [("load", slot, state) for slot, state in states.items()]
    steps += [("requests", plan)] + [("dump", slot) for slot in states]
    copy = {}
    results = run_steps(p, steps, work_copy=copy)
    for slot, dump in zip(states, results[len(states) + 1:], strict=True):
        row = [copy[slot * p.work_size + x] for x in range(p.work_size)]
        assert row == list(dump["work_scores"].view(np.uint32)), f"slot {slot}"


def test_cycles_per_request_on_amaranth_simulator():
    """Without idle input or back-pressure a request takes (first beat offered to ``done``
    accepted) at most ``5 + max(N + W, N + L - 1, ws0 + K + 1, ws1 + 3)`` cycles, ``L`` the
    multiply's latency."""
    p = params_from({**SMALL, "max_node_count": 40, "max_verify_num": 10})
    rng = np.random.default_rng(3)
    combos = [(w, c, v) for w in (1, 2) for c in (0, 5, 30) for v in (1, 6, 10)]
    requests = [random_request(rng, p, tree_width=w, cumu_count=c, verify_num=v)
                for w, c, v in combos]
    results = run_steps(p, [("requests", [(0, r)]) for r in requests])
    for (w, c, v), (_, cycles) in zip(combos, results, strict=True):
        n, ws0, ws1 = 3 * w, min(v, c), min(v, c + 3 * w)
        bound = 5 + max(n + w, n + Float32Multiply.latency - 1, ws0 + 3 + 1, ws1 + 3)
        assert bound - 1 <= cycles <= bound, (w, c, v, cycles, bound)


def test_framing_errors_refusals_and_stray_beats():
    p = params_from(SMALL)
    rng = np.random.default_rng(4)
    state = sentinel_state(p)
    request = random_request(rng, p, tree_width=2, cumu_count=3)
    layout = p.request_layout
    good = request_beats(p, 1, request)
    stray = [word & ~(1 << layout["first"].offset) for word in good[:2]]  # no `first`: dropped
    early_last = list(good)
    early_last[2] |= 1 << layout["last"].offset
    refused = [word | (3 << layout["slot"].offset)                      # slot 3 >= max_batch
               for word in request_beats(p, 0, request)]
    steps = [("load", 0, state), ("load", 1, state),
             ("beats", stray + early_last, 1), ("dump", 1),
             ("beats", refused, 1), ("dump", 0)]
    results = run_steps(p, steps)
    (record,), _ = results[2]
    assert record == {"slot": 1, "dropped": 0, "framing_error": 1, "refused": 0}
    expected, _ = golden_apply(p, state, request)
    assert not compare_states(results[3], expected)      # the N beats are still applied
    (record,), _ = results[4]
    assert record == {"slot": 3, "dropped": 0, "framing_error": 0, "refused": 1}
    assert not compare_states(results[5], state)         # nothing written anywhere


def test_host_port_ignores_and_zeroes_out_of_range_accesses():
    p = params_from(SMALL)
    state = sentinel_state(p)
    layout = p.host_command_layout
    data = {"tok": 5, "score": 7, "delta": 1, "prev": 1, "next": 1, "side": 1, "mask": 3}
    bad_writes = pack(layout, 4, write=1,  # (the index field holds 0..15 here)
                      region=[Region.NODE, Region.SORT, Region.OUTPUT, Region.WORK],
                      slot=[3, 0, 0, 0], index=[0, 6, 3, 9], **data)
    bad_reads = pack(layout, 4, write=0,
                     region=[Region.WORK, Region.NODE, Region.OUTPUT, Region.SORT],
                     slot=[0, 3, 0, 0], index=[9, 0, 3, 6], **data)
    good_read = pack(layout, 1, write=0, region=Region.NODE, slot=0, index=15, **data)
    results = run_steps(p, [("load", 0, state), ("host", bad_writes + bad_reads + good_read),
                            ("dump", 0)])
    answers = results[1]
    assert not any(answers[:8])                          # write acks and refused reads: zeros
    assert answers[8] != 0                               # node 15 holds the -777 token etc.
    assert not compare_states(results[2], state)


def test_mutant_taking_new_scores_on_ties_is_caught(monkeypatch):
    """A merge that takes C when A == C must fail the tie case (the vectors are sharp)."""
    monkeypatch.setattr(kernel_module, "float32_less_equal", float32_less)
    _, failures = run_directed(SMALL, only={"ties_take_old_first"})
    assert any("sort_scores" in failure for failure in failures)


# --- Verilator ---------------------------------------------------------------------------------


def test_update_state_target_under_verilator(sim_report):
    """The CUDA capture exactly, the directed cases and chained random requests (default
    parameters: the capture's), and the cycles per request at K=8, W=8, verify_num=64."""
    summary = TARGET.run(log_file=BUILD_ROOT / "pytest-update_state.log")
    extra = summary["extra"]
    assert extra["case"].startswith("CUDA capture exact")
    assert extra["directed cases"] >= 30 and extra["random requests"] >= 24
    cycles = extra["cycles/request (K=8, W=8, verify_num=64)"]
    assert cycles <= 80, cycles
    sim_report(f"update_state: {summary['vectors']} requests bit-exact (capture, "
               f"{extra['directed cases']} directed, {extra['random requests']} random), "
               f"{cycles} cycles/request at K=8 W=8 verify_num=64, "
               f"latency {summary['latency_cycles']} cycles")


def test_k1_build_under_verilator(sim_report):
    """K = 1 (side links -1 everywhere), narrow storage, three slots; the CUDA capture does
    not fit this build, so its phase is left out."""
    assert TARGET.capture_misfit({**PARAMETERS, **K1}).startswith("node_top_k: case 8 vs "
                                                                 "kernel 1")
    summary = TARGET.run(K1, overrides={"figure_requests": 4, "random_requests": 30,
                                        "requests_per_batch": 3, "idle": 0.25,
                                        "backpressure": 0.25},
                         seed=7, log_file=BUILD_ROOT / "pytest-update_state_k1.log")
    assert summary["extra"]["random requests"] == 30
    assert summary["extra"]["capture"] == "skipped (parameters)"
    sim_report(f"update_state K=1: {summary['vectors']} requests bit-exact, "
               f"{summary['initiation_interval']:.1f} cycles/request")


def test_case_replay_of_a_written_case_file(tmp_path):
    """``CASE=`` replays any case file in the project format (here: overflow, duplicate and
    out-of-range parents, a full-width mask, on sentinel states)."""
    p = params_from(PARAMETERS)
    rng = np.random.default_rng(21)
    scalars = {"tree_width": 5, "cumu_count": 1000, "verify_num": 30, "input_count": 65,
               "curr_depth": 4}
    requests = [random_request(rng, p, **scalars) for _ in range(2)]
    requests[0]["topk_indexs"][:] = [7, 7, 1023, -1, 1024]
    path = tmp_path / "k2_overflow_case.txt"
    write_update_case(path, p, [sentinel_state(p), sentinel_state(p, sorted_prefix=5)],
                      requests)
    assert read_update_case(path)[0]["batch_size"] == 2
    assert TARGET.case_parameters(path, PARAMETERS) == PARAMETERS
    summary = TARGET.run(case=path, seed=4, log_file=BUILD_ROOT / "pytest-update_state-case.log")
    assert summary["extra"]["case"] == f"{path} exact (16 dropped)"


# A case of another build (the report: node_top_k 4, max_node_count 128).
CASE_BUILD = {"node_top_k": 4, "max_tree_width": 3, "max_node_count": 128, "max_verify_num": 10,
              "max_input_size": 7, "max_batch": 3, "token_width": 16, "index_width": 10}


def _k4_case(path):
    """A case written for other build parameters (``K`` 4, ``MAXN`` 128, 20-bit tokens)."""
    p = params_from(CASE_BUILD)
    rng = np.random.default_rng(5)
    scalars = {"tree_width": 3, "cumu_count": 120, "verify_num": 7, "input_count": 6,
               "curr_depth": 5}
    requests = [random_request(rng, p, **scalars) for _ in range(3)]
    wide_tokens = random_state(rng, params_from({**CASE_BUILD, "token_width": 20}))
    write_update_case(path, p, [sentinel_state(p), wide_tokens, sentinel_state(p)], requests)


def test_case_of_another_build_derives_its_build(tmp_path):
    """The target derives ``K``, ``MAXN``, ``MAXV``, ``MI``, the width, the slots and the
    storage widths from the case (the Verilator replay is in the slow tier)."""
    path = tmp_path / "k4_maxn128_case.txt"
    _k4_case(path)
    assert TARGET.case_parameters(path, PARAMETERS) == {
        **PARAMETERS, "node_top_k": 4, "max_tree_width": 4, "max_node_count": 128,
        "max_verify_num": 10, "max_input_size": 7, "max_batch": 3}
    assert TARGET.case_parameters(path, SMALL) == {
        **SMALL, "node_top_k": 4, "max_tree_width": 3, "max_node_count": 128,
        "max_verify_num": 10, "max_input_size": 7, "token_width": 20}


@pytest.mark.slow
def test_case_of_another_build_replays_on_its_own_model(tmp_path):
    """``CASE=`` on that case: it replays on the model built for it (a small one here)."""
    path = tmp_path / "k4_maxn128_case.txt"
    _k4_case(path)
    summary = TARGET.run(SMALL, case=path, seed=2,
                         log_file=BUILD_ROOT / "pytest-update_state-k4.log")
    assert summary["extra"]["case"] == f"{path} exact (4 dropped)"
    assert summary["vectors"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_update_state_target_more_seeds(seed):
    summary = TARGET.run(seed=seed, overrides={"random_requests": 90},
                         log_file=BUILD_ROOT / f"pytest-update_state-seed{seed}.log")
    assert summary["extra"]["random requests"] == 90


@pytest.mark.slow
@pytest.mark.parametrize("params", [
    # EAGLE-2 paper point: K = W = 10, N = 100; MI = 0 (no mask columns at all); 3 slots.
    {"node_top_k": 10, "max_tree_width": 10, "max_node_count": 300, "max_verify_num": 100,
     "max_input_size": 0, "max_batch": 3, "token_width": 24, "index_width": 11},
    # N = 128 (K = 16, W = 8), 64-bit tokens, one slot.
    {"node_top_k": 16, "max_tree_width": 8, "max_node_count": 200, "max_verify_num": 20,
     "max_input_size": 70, "max_batch": 1, "token_width": 64, "index_width": 40},
], ids=["k10w10", "k16w8"])
def test_other_parameter_sets_under_verilator(params):
    name = f"update_state_k{params['node_top_k']}w{params['max_tree_width']}"
    summary = TARGET.run(params, overrides={"figure_requests": 4, "random_requests": 40,
                                            "requests_per_batch": 4, "idle": 0.2,
                                            "backpressure": 0.2},
                         seed=9, log_file=BUILD_ROOT / f"pytest-{name}.log")
    assert summary["extra"]["random requests"] == 40


def test_params_dataclass_round_trips():
    p = params_from(PARAMETERS)
    assert dataclasses.asdict(p) == PARAMETERS
    assert params_from(p) is p


SMALL_POINT = {"id": "small-b8-v32000", "tree": "small", "node_top_k": 4, "tree_width": 4,
               "depth": 3, "verify_num": 8, "batch": 8, "vocab": 32000, "hidden_size": 4096,
               "hidden_dtype": "fp16", "hidden_bytes": 2, "clock_mhz": 300.0}


def test_measure_parameters_cover_the_round():
    params, spec = TARGET.measure_parameters({**SMALL_POINT, "node_top_k": 10,
                                              "tree_width": 10, "depth": 12,
                                              "verify_num": 100, "batch": 1})
    assert params["max_node_count"] == 1 + 10 + 11 * 100
    assert params["max_verify_num"] == 100 and params["max_input_size"] == 100
    assert params["max_batch"] == 8
    assert spec == {"batch": 1, "depth": 12, "tree_width": 10, "verify_num": 100}
    UpdateStateParams(**params)
    with pytest.raises(NotMeasured, match="N = 144 exceeds the 128 candidates"):
        TARGET.measure_parameters({**SMALL_POINT, "node_top_k": 12, "tree_width": 12})


@pytest.mark.slow
def test_measure_small_point():
    """The cycle-budget protocol at the contract's small tree (one Verilator build)."""
    result = TARGET.measure(SMALL_POINT, seed=1,
                            log_file=BUILD_ROOT / "pytest-update_state-measure.log")
    assert set(result) >= {"cycles", "bytes_in", "bytes_out", "operations"}
    assert result["invocations"] == 3 and result["cycles"] > 0
    assert result["operations"] == 8 * (4 + 5) + 2 * 8 * (16 + 8)  # N + ws1 per request
    assert result == TARGET.measure(SMALL_POINT, seed=1)  # same seed, same numbers
