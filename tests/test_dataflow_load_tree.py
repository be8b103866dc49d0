"""The engine's ``load_tree`` (hw/dataflow/load_tree.py, docs/engine.md "Loading a caller's
tree"): rounds whose verify tree is a caller's, random and defective ones, against
golden.engine in Amaranth's simulator (small build), and the golden's own rules."""

import numpy as np
import pytest

from golden.engine import Engine, Status
from hw.dataflow.engine import EngineParams
from sim.dataflow.rounds import caller_tree, engine_config
from tests.test_dataflow_engine import SMALL, run_scenario


def test_rounds_with_caller_trees_match_golden():
    """Every round verifies a caller's tree (half of them after a refused one: a token, an
    index, a link out of range or to the root, a node linked twice, ``n`` or ``S`` out of
    range), under memory stalls."""
    assert run_scenario(SMALL, seed=11, rounds=3, stall=0.3, load_trees=1.0,
                        bad_commands=0.5) >= 12


def test_caller_trees_of_one_node_and_width_one():
    """``n = 1`` trees and chains on a K = 1, W = 1 build of one slot."""
    parameters = dict(SMALL, node_top_k=1, max_tree_width=1, max_batch=1, max_verify_num=1)
    assert run_scenario(parameters, seed=12, rounds=2, load_trees=1.0) >= 6


def _golden(vocab=50):
    params = EngineParams(**SMALL)
    table = np.zeros((8, 48), np.int64)
    engine = Engine(engine_config(params, vocab), table)
    return params, engine


def _begin(engine, b):
    return engine.begin_round(np.arange(b), np.zeros(b, np.int64), np.full(b, 3),
                              np.arange(b), np.zeros((b, SMALL["max_input_size"] + 1),
                                                     np.int64), verify_num=4)


def test_golden_load_tree_phases_and_rules():
    params, engine = _golden()
    tree = caller_tree(np.random.default_rng(0), 2, 5, 50)
    locs = np.arange(10)
    load = lambda t=tree, steps=3: engine.load_tree(  # noqa: E731
        **t, verify_cache_locs=locs, num_speculative_tokens=steps)
    assert load().status == Status.BAD_PHASE  # no round
    assert _begin(engine, 2).ok
    for steps in (1, params.max_depths + 2, True, 2.0):
        assert load(steps=steps).status == Status.BAD_ARGUMENT
    # a sibling chain 1 -> 2 -> 1 under the root: node 1 is linked twice
    cyclic = {name: value.copy() for name, value in tree.items()}
    cyclic["retrive_next_token"][0] = [1, -1, -1, -1, -1]
    cyclic["retrive_next_sibling"][0] = [-1, 2, 1, -1, -1]
    assert load(cyclic).status == Status.BAD_ARGUMENT
    done = load()
    assert done.ok and done.outputs == {"n": 5} and engine.verify_size() == 5
    assert load().status == Status.BAD_PHASE  # built: a second tree waits for the verify
    state = engine.read_state(0).outputs["state"]
    assert state.phase.name == "BUILT"


def test_golden_load_tree_host_errors():
    """Arrays of the wrong shape are host errors (``ValueError``), as for the other commands."""
    _, engine = _golden()
    assert _begin(engine, 2).ok
    tree = caller_tree(np.random.default_rng(1), 2, 3, 50)
    with pytest.raises(ValueError, match="retrive_index"):
        engine.load_tree(**dict(tree, retrive_index=tree["retrive_index"][:1]),
                         verify_cache_locs=np.zeros(6), num_speculative_tokens=2)
    with pytest.raises(ValueError, match="verify_cache_locs"):
        engine.load_tree(**tree, verify_cache_locs=np.zeros(5, np.int64),
                         num_speculative_tokens=2)
