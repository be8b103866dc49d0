"""The recorded 15-depth draft rounds (``tests/record_draft_round.py``: the sizes of the spec's
15-depth capture, docs/kernels.md §4, with a width per depth; and a real run's shape, 229
nodes filling the node budget exactly, 157 draft inputs) replayed through
``host.Engine.draft_round(..., widths=...)`` on the rtl backend: the same round as on the
golden backend, bit for bit, and the tree the record holds; then every slot's ``read_state``,
``build_verify`` and ``verify`` equal on both backends.

Slow tier: each build (K = W = 8, 1,024 nodes, 64 draft inputs; K = W = 4, 229 nodes, 157
draft inputs) takes Verilator several minutes; it is cached under build/verilated/ like every
model."""

import ast

import numpy as np
import pytest

import host
from golden import DraftRoundConfig, DraftSample
from tests.record_draft_round import RECORDS, TREE_ARRAYS
from tests.test_host_rtl import assert_same, assert_same_state, same_bits

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=list(RECORDS), ids=lambda path: path.stem)
def recorded(request):
    with np.load(request.param) as data:
        return {name: data[name] for name in data.files}


def replay(recorded):
    """The draft model of the record: depth d answers with the recorded sample, after checking
    that the engine asks for it with the recorded frontier width."""
    def sample(depth, frontier):
        probas, tokens = recorded[f"probas_{depth}"], recorded[f"tokens_{depth}"]
        k = recorded["probas_1"].shape[1]
        assert probas.shape[1] == frontier.node_ids.shape[1] * k, f"depth {depth}"
        return DraftSample(probas.copy(), tokens.copy())
    return sample


def test_recorded_round_with_widths_equals_golden_and_the_record(recorded):
    config = DraftRoundConfig(**ast.literal_eval(str(recorded["config"])))
    vocab = int(recorded["vocab_size"])
    widths = recorded["widths"].tolist()
    engines, results = {}, {}
    for backend in ("rtl", "golden"):
        engine = engines[backend] = host.Engine(config, vocab_size=vocab, backend=backend,
                                                context_len=256, seed=7)
        results[backend] = engine.draft_round(replay(recorded), recorded["root_tokens"],
                                              widths=widths)
    got, expected = results["rtl"], results["golden"]
    assert_same(got, expected, "draft_round")
    assert [d.tree_width for d in got.depths] == recorded["tree_widths"].tolist()
    assert len(got.depths) == config.depths == 15
    assert got.stop_reason == str(recorded["stop_reason"])
    assert got.cumu_count == int(recorded["cumu_count"])
    count = got.cumu_count
    for name in TREE_ARRAYS:
        mine, theirs = getattr(got, name), recorded[name]
        if name in ("sort_scores", "work_scores", "mask_nodes"):
            assert same_bits(mine, theirs), name
        else:
            assert same_bits(mine[:, :count], theirs[:, :count]), name
    _verify_and_read_back(engines, config, vocab)


def _verify_and_read_back(engines, config, vocab):
    """Every slot's state, then the verify tree and the fused verify on seeded logits (coins
    from the engines' equal seeds), then the states again: equal on both backends."""
    def each(call):
        return [call(engines[backend]) for backend in ("rtl", "golden")]

    def same_states(where):
        for slot in range(config.batch_size):
            got, expected = (engines[name].read_state(slot) for name in ("rtl", "golden"))
            assert_same_state(got, expected, f"read_state({slot}) {where}")

    same_states("after drafting")
    assert_same(*each(lambda engine: engine.build_verify()), "build_verify")
    n = engines["golden"].verify_size()
    logits = np.random.default_rng(39).standard_normal(
        (config.batch_size, n, vocab)).astype(np.float32)
    temperatures = np.ones(config.batch_size, np.float32)
    assert_same(*each(lambda engine: engine.verify(logits, temperatures)), "verify")
    same_states("after verify")
