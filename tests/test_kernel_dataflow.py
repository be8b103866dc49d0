"""The engine under Verilator (`make sim KERNEL=dataflow`): random rounds with bad
commands, the port counters and command-sequence case files against ``golden.engine`` (the
Amaranth-simulator tests are in tests/test_dataflow_engine.py)."""

import numpy as np
import pytest

from golden.engine import Status
from hw.dataflow.engine import EngineParams, Opcode
from sim.dataflow import PARAMETERS, TARGET
from sim.dataflow.cases import EXAMPLE_CASE, read_case
from sim.dataflow.host import EngineHost, run_beats
from sim.dataflow.memory import CardMemory
from sim.dataflow.rounds import Step
from sim.harness import BUILD_ROOT

#: Rounds of `make test`'s run: both phases of the default configuration.
ROUNDS = TARGET.config["figures_rounds"] + TARGET.config["random_rounds"]


def test_run_beats():
    """A run covers the port words from its first word's to its last's (64-bit ports: two
    words a beat)."""
    assert run_beats([(0, 4), (4, 1), (4, 2), (8, 0), (12, 3)], 64) == 2 + 1 + 2 + 0 + 2
    assert run_beats([(32, 9)], 256) == 2 and run_beats([(60, 2)], 256) == 2


def test_port_runs_follow_the_outcome():
    params = EngineParams(**PARAMETERS)
    host = EngineHost(params, CardMemory(1 << 18), np.zeros((12, 48), np.int64))
    locs = np.arange(2 * params.kv_slots).reshape(2, -1)
    begin = host.begin_round([0, 1], [3, 4], [5, 6], [7, 8], locs, verify_num=4, depths=2)
    assert host.port_runs(Step("begin_round", begin, Status.BAD_SLOT))["table_write"] == []
    runs = host.port_runs(Step("begin_round", begin, Status.OK))
    assert runs["read"] == [(host.arguments, 2 * params.argument_words)]
    assert runs["table_write"] == [(host.table_address + 4 * (7 * 48 + 5), params.kv_slots),
                                   (host.table_address + 4 * (8 * 48 + 6), params.kv_slots)]
    probas = np.full((2, 4), 0.25, np.float32)
    draft = host.draft_depth(probas, np.zeros((2, 4), np.int64))
    assert draft["opcode"] == Opcode.DRAFT_DEPTH
    assert not any(host.port_runs(Step("draft_depth", draft, Status.BAD_PHASE)).values())
    # every request's probabilities are read beside the tokens, before their check
    refused = host.port_runs(Step("draft_depth", draft, Status.BAD_ARGUMENT))
    assert refused["read"] == [(host.tokens, 8), (host.probas, 8)]
    assert refused["result_write"] == []
    runs = host.port_runs(Step("draft_depth", draft, Status.OK, next_tree_width=2))
    assert runs["read"] == [(host.tokens, 8), (host.probas, 8)]
    assert runs["result_write"] == [(host.frontier, 2 * 2 * params.frontier_words)]
    stopped = Step("draft_depth", draft, Status.OK, stop_reason="depths")
    assert host.port_runs(stopped)["result_write"] == []


def test_example_case_parses():
    case = read_case(EXAMPLE_CASE)
    assert (case.seed, case.commands, case.rounds) == (7, 13, 3)
    assert case.memory == {"latency": [1, 6], "stall": 0.3}


@pytest.mark.parametrize(("text", "message"), [
    ("seed x\n", r"broken.txt:1: `seed`: `x` is not an integer"),
    ("begin_round slots=0\n", r"broken.txt:1: `begin_round` lacks root_tokens, seq_lens"),
    ("draft_depth probas=1 tokens=2 depth=3\n", r"broken.txt:1: `draft_depth` has no argument "
                                                "depth"),
    ("# c\ndraft_depth probas=0.5,0.5/0.5 tokens=1,2/3,4\n",
     r"broken.txt:2: the rows of `probas` differ in length"),
    ("memory latency=3,1\nrounds 1\n", r"broken.txt:1: `latency` must be `lo,hi`"),
    ("rounds 1 2\n", r"broken.txt:1: `rounds` takes one integer"),
    ("read_state slot=1\n", r"broken.txt:1: unknown keyword `read_state`"),
    ("seed 3\n", r"broken.txt: no command and no `rounds` to replay"),
])
def test_malformed_case_files(tmp_path, text, message):
    path = tmp_path / "broken.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_case(path)


def test_case_of_wrong_shapes_is_refused_before_any_build(tmp_path, monkeypatch):
    """The sequence runs on the golden before the build: an argument of the wrong shape fails
    with the file and line."""
    monkeypatch.setattr(TARGET, "model", lambda *args, **kwargs: pytest.fail("model built"))
    path = tmp_path / "shapes.txt"
    path.write_text("rounds 1\nbegin_round slots=0 root_tokens=1 seq_lens=2 req_pool_indices=3 "
                    "draft_cache_locs=1,2 verify_num=2 depths=1\n")
    with pytest.raises(ValueError, match=r"shapes.txt:2: begin_round: `draft_cache_locs` must "
                                         r"be an integer array of shape \(1, 7\)"):
        TARGET.run(case=path)


def test_engine_matches_golden_under_verilator(sim_report):
    """``figures`` (rounds at a fixed memory latency, no stalls) and ``random`` (random memory
    latency and stalls on every channel, idle on ``command``, back-pressure on
    ``completion``): every completion, frontier, ``req_to_token`` and port counter."""
    summary = TARGET.run(log_file=BUILD_ROOT / "pytest-dataflow.log")
    assert summary["random_vectors"] == ROUNDS >= 200
    extra = summary["extra"]
    assert extra["rounds in all"] == ROUNDS
    sim_report(f"dataflow: {summary['random_vectors']} random rounds, {summary['vectors']:,} "
               f"commands bit-exact with golden.engine, port counters exact; unstressed "
               f"{extra['cycles per begin_round (unstressed)']} cycles per begin_round, "
               f"{extra['cycles per draft_depth (unstressed)']} per draft_depth")


def test_case_replay_under_verilator():
    """``sim/dataflow/example_case.txt``: its commands (bad ones among them), then random
    rounds, on the model of the run above."""
    summary = TARGET.run(case=EXAMPLE_CASE, log_file=BUILD_ROOT / "pytest-dataflow-case.log")
    assert summary["extra"]["random rounds"] == 3 and summary["vectors"] > 13


@pytest.mark.slow
def test_soak_under_verilator(sim_report):
    """2,000 rounds under stress (another seed), on the same model."""
    summary = TARGET.run(overrides={"random_rounds": 2000}, seed=2, tests=("random",),
                         log_file=BUILD_ROOT / "pytest-dataflow-soak.log")
    assert summary["random_vectors"] == 2000
    sim_report(f"dataflow soak: 2,000 stressed rounds, {summary['vectors']:,} commands "
               "bit-exact with golden.engine")


@pytest.mark.slow
@pytest.mark.parametrize("tree", ["small", "serving", "eagle2"])
def test_contract_trees_under_verilator(tree, sim_report):
    """Random rounds on the cycle budget's build of each contract tree (K = 4, 8, 10; W up to
    K): ``figures`` and ``random`` at V = 32, every command against the golden."""
    from flow.report import contract_points, load_contract

    point = next(p for p in contract_points(load_contract()) if p["tree"] == tree)
    parameters, _ = TARGET.measure_parameters(point)
    summary = TARGET.run(parameters, overrides={"figures_rounds": 10, "random_rounds": 30,
                                                "memory_bytes": 1 << 22, "context_len": 160},
                         log_file=BUILD_ROOT / f"pytest-dataflow-{tree}.log")
    assert summary["random_vectors"] == 40
    sim_report(f"dataflow at the {tree} tree (K = {parameters['node_top_k']}, "
               f"W <= {parameters['max_tree_width']}, MAXV {parameters['max_verify_num']}): "
               f"40 random rounds, {summary['vectors']:,} commands bit-exact with golden.engine")
