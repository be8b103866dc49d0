"""``host.Engine.load_tree``: verifying a tree the caller built (docs/engine.md, "Loading a
caller's tree"; docs/host.md). On the golden backend against the fused verify's golden run
directly on the same tree; on the rtl backend against the golden backend, bit for bit; and the
host's refusals (nothing sent, nothing changed)."""

import numpy as np
import pytest

import host
from golden import synthetic_sampler
from golden.engine import Status
from golden.tree_verify import tree_speculative_sampling_from_logits
from sim.dataflow.rounds import caller_tree
from tests.test_host_rtl import CONFIG, CONTEXT, TREE, V, assert_same, golden_engine


def _drafted(engine, seed, b=2):
    rng = np.random.default_rng(seed)
    roots = rng.integers(0, V, b).astype(np.int64)
    engine.draft_round(synthetic_sampler(seed, V, TREE.node_top_k), roots)
    return rng


def _verify_args(rng, b, n):
    return dict(target_logits=rng.standard_normal((b, n, V)).astype(np.float32) * 3,
                temperatures=rng.uniform(0.5, 1.5, b).astype(np.float32),
                uniform_samples=rng.random((b, n), dtype=np.float32),
                uniform_samples_for_final_sampling=rng.random(b, dtype=np.float32))


def test_a_loaded_tree_is_verified_as_the_fused_verify_golden_does():
    """The engine's verify of a loaded tree equals ``tree_speculative_sampling_from_logits``
    run on that tree directly (S = ``num_speculative_tokens``)."""
    engine = golden_engine(seed=1)
    rng = _drafted(engine, 1)
    b, n, steps = 2, 7, 4
    tree = caller_tree(rng, b, n, V)
    assert engine.load_tree(**tree, num_speculative_tokens=steps) == n
    assert engine.verify_size() == n
    args = _verify_args(rng, b, n)
    result = engine.verify(**args)
    predicts = np.zeros(b * n, np.int32)
    accept_index = np.zeros((b, steps), np.int32)
    accept_token_num = np.zeros(b, np.int32)
    tree_speculative_sampling_from_logits(
        predicts, accept_index, accept_token_num, tree["draft_tokens"].reshape(b, n),
        tree["retrive_index"], tree["retrive_next_token"], tree["retrive_next_sibling"],
        args["uniform_samples"], args["uniform_samples_for_final_sampling"],
        args["target_logits"], args["temperatures"], 1.0, 1.0, None, None)
    assert np.array_equal(result.predicts, predicts)
    assert np.array_equal(result.accept_index, accept_index)
    assert np.array_equal(result.accept_token_num, accept_token_num)


def _bad_trees(rng, b, n):
    """(what is wrong, keyword changes) of a good tree of ``b`` requests of ``n`` nodes."""
    tree = caller_tree(rng, b, n, V)

    def changed(name, index, value):
        array = tree[name].copy()
        array[index] = value
        return {**tree, name: array}

    return tree, [
        ("token", changed("draft_tokens", 1, V), "draft_tokens"),
        ("negative token", changed("draft_tokens", 0, -1), "draft_tokens"),
        ("index", changed("retrive_index", (1, 2), 0), "b\\*n \\+ i"),
        ("link past n", changed("retrive_next_token", (0, 1), n), "retrive_next_token"),
        ("link to the root", changed("retrive_next_sibling", (1, 3), 0), "node 0"),
        ("twice", {**changed("retrive_next_token", (0, 0), 1),
                   "retrive_next_sibling": np.where(np.arange(n) == 2, 1,
                                                    tree["retrive_next_sibling"])},
         "two links"),
        ("shape", {**tree, "draft_tokens": tree["draft_tokens"][:-1]}, "draft_tokens"),
    ]


@pytest.mark.parametrize("steps", [1, TREE.depth + 2, 2.0, True])
def test_host_refuses_bad_steps(steps):
    engine = golden_engine()
    rng = _drafted(engine, 2)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        engine.load_tree(**caller_tree(rng, 2, 4, V), num_speculative_tokens=steps)


def test_host_refuses_bad_trees_and_changes_nothing():
    engine = golden_engine(seed=3)
    rng = _drafted(engine, 3)
    _, bad = _bad_trees(rng, 2, 5)
    before = [engine.read_state(slot) for slot in range(CONFIG.batch_size)], \
        engine.req_to_token.copy()
    for what, tree, match in bad:
        with pytest.raises(ValueError, match=match):
            engine.load_tree(**tree, num_speculative_tokens=3)
        assert engine.verify_size() == engine.config.verify_num, what  # still drafted
    for n in (0, CONFIG.max_verify_num + 1):
        with pytest.raises(ValueError, match="n"):
            engine.load_tree(**caller_tree(rng, 2, n, V), num_speculative_tokens=3)
    assert_same(([engine.read_state(slot) for slot in range(CONFIG.batch_size)],
                 engine.req_to_token), before)


def test_host_load_tree_needs_a_drafted_round():
    engine = golden_engine()
    tree = caller_tree(np.random.default_rng(4), 2, 3, V)
    with pytest.raises(host.EngineError, match="BAD_PHASE"):
        engine.load_tree(**tree, num_speculative_tokens=2)


@pytest.fixture(scope="module", params=["rtl", "card"])
def rtl_engines(request):
    """Engines on the build of tests/test_host_rtl.py, on the rtl backend and on the card
    backend (the engine's Vitis kernel through its registers and rings)."""
    def make(**kwargs):
        return host.Engine(CONFIG, vocab_size=V, backend=request.param, context_len=CONTEXT,
                           **kwargs)
    make()
    return make


@pytest.mark.parametrize("n, steps", [(1, 2), (5, 3), (CONFIG.max_verify_num, TREE.depth + 1)])
def test_rtl_loaded_trees_equal_golden(rtl_engines, n, steps):
    """draft_round, load_tree of a caller's tree, verify (coins and LFSR seeds), three rounds
    on both backends: every result, ``req_to_token`` and each slot's state equal."""
    engines = {"rtl": rtl_engines(seed=n), "golden": golden_engine(seed=n)}
    results = {}
    for name, engine in engines.items():
        rng = np.random.default_rng(n)
        out = []
        for index in range(3):
            roots = rng.integers(0, V, 2).astype(np.int64)
            engine.draft_round(synthetic_sampler(index, V, TREE.node_top_k), roots)
            engine.load_tree(**caller_tree(rng, 2, n, V), num_speculative_tokens=steps)
            args = _verify_args(rng, 2, n)
            if index == 1:
                for key in ("uniform_samples", "uniform_samples_for_final_sampling"):
                    del args[key]
                args["seeds"] = rng.integers(0, 1 << 32, 2, dtype=np.int64)
            out.append(engine.verify(**args))
        results[name] = (out, engine.req_to_token.copy(),
                         [engine.read_state(slot) for slot in range(CONFIG.batch_size)])
    assert_same(results["rtl"][0], results["golden"][0], "verify results")
    assert_same(results["rtl"][1], results["golden"][1], "req_to_token")
    for got, expected in zip(results["rtl"][2], results["golden"][2], strict=True):
        for name in ("phase", "seq_len", "req_pool_index", "cumu_count"):
            assert getattr(got, name) == getattr(expected, name)


def test_rtl_refuses_what_the_golden_refuses(rtl_engines):
    """Bad trees sent straight to the backends (past the host's checks): the same status, and
    the round stays as it was (a good tree then loads and verifies the same)."""
    table = np.full((CONFIG.batch_size, CONTEXT), -1, np.int64)
    config = host.engine_config(CONFIG, V)
    backends = {"rtl": host.RtlBackend(config, table.copy()),
                "golden": host.GoldenBackend(config, table.copy())}
    rng = np.random.default_rng(6)
    tree, bad = _bad_trees(rng, 2, 5)
    locs = np.arange(10, dtype=np.int64)
    for backend in backends.values():
        assert backend.load_tree(**tree, verify_cache_locs=locs, num_speculative_tokens=3) \
            .completion.status == Status.BAD_PHASE
        assert backend.begin_round(np.arange(2), np.array([1, 2]), np.array([3, 4]),
                                   np.arange(2), np.zeros((2, config.max_input_size + 1),
                                                          np.int64), verify_num=8,
                                   depths=3).completion.ok
    for what, changed, _ in bad[:-1]:
        statuses = {name: backend.load_tree(**changed, verify_cache_locs=locs,
                                            num_speculative_tokens=3).completion.status
                    for name, backend in backends.items()}
        assert statuses == {"rtl": Status.BAD_ARGUMENT, "golden": Status.BAD_ARGUMENT}, what
    for steps in (1, config.max_depths + 2, 300):
        assert {name: backend.load_tree(**tree, verify_cache_locs=locs,
                                        num_speculative_tokens=steps).completion.status
                for name, backend in backends.items()} == \
            {"rtl": Status.BAD_ARGUMENT, "golden": Status.BAD_ARGUMENT}
    args = _verify_args(rng, 2, 5)
    outputs = {}
    for name, backend in backends.items():
        assert backend.load_tree(**tree, verify_cache_locs=locs,
                                 num_speculative_tokens=3).completion.ok
        outputs[name] = backend.verify(max_seq_lens=np.full(2, CONTEXT), **args) \
            .completion.outputs
    assert_same(outputs["rtl"], outputs["golden"])
