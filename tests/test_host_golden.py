"""host.Engine on the golden backend: draft rounds identical to golden.draft_round, verify
trees and results identical to the kernel chain (§6, §10, §9), and every argument checked
before a command reaches the backend."""

import dataclasses

import numpy as np
import pytest

import host
from golden import (
    DraftRoundConfig,
    draft_round,
    fused_tree_mask_operator,
    synthetic_sampler,
    tree_speculative_sampling_from_logits,
    update_verify_result,
)
from golden.update_state import clamp_verify_num

V = 40
CONFIG = DraftRoundConfig(batch_size=3, node_top_k=4, max_tree_width=3, depths=4,
                          verify_num=10, max_verify_num=12, max_node_count=64,
                          max_input_size=12, hidden_size=5)


def same_bits(a, b) -> bool:
    """Equal dtype, shape and bytes."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def assert_same_round(got, expected):
    """Every array of the round bit for bit; per depth, every field that crosses the
    engine's boundary (the rest, K1/K2/K3's internals, is None)."""
    assert got.config == expected.config
    assert got.cumu_count == expected.cumu_count
    assert got.stop_reason == expected.stop_reason
    for name in ("cumu_tokens", "cumu_scores", "cumu_deltas", "prev_indexs", "next_indexs",
                 "side_indexs", "sort_scores", "work_scores", "mask_nodes"):
        assert same_bits(getattr(got, name), getattr(expected, name)), name
    assert len(got.depths) == len(expected.depths)
    for mine, theirs in zip(got.depths, expected.depths, strict=True):
        for name in ("depth", "tree_width", "cumu_count", "input_count", "next_tree_width"):
            assert getattr(mine, name) == getattr(theirs, name), name
        assert same_bits(mine.input_tree_mask, theirs.input_tree_mask)
        assert mine.frontier.depth == theirs.frontier.depth
        for name in ("node_ids", "tokens", "scores", "hidden_states"):
            assert same_bits(getattr(mine.frontier, name), getattr(theirs.frontier, name)), \
                f"depth {mine.depth} frontier.{name}"
        for name in ("probas", "tokens"):
            assert same_bits(getattr(mine.sample, name), getattr(theirs.sample, name))
        for name in ("curr_layer_scores", "sort_layer_indices", "work_deltas",
                     "output_tree_mask"):
            assert getattr(mine, name) is None


def new_engine(config=CONFIG, **kwargs):
    return host.Engine(config, vocab_size=V, context_len=64, seed=3, **kwargs)


def run_both(config, seed, *, widths=None, hot_token_id=None, draft_vocab=V, batch=None):
    batch = config.batch_size if batch is None else batch
    rng = np.random.default_rng(seed)
    roots = rng.integers(0, V, batch).astype(np.int64)
    hidden = rng.standard_normal((batch, 1, config.hidden_size)).astype(np.float32)
    engine = new_engine(config, hot_token_id=hot_token_id)
    sampler = synthetic_sampler(seed, draft_vocab, config.node_top_k,
                                hidden_size=config.hidden_size)
    got = engine.draft_round(sampler, roots, root_hidden_states=hidden, widths=widths,
                             hot_token_id=hot_token_id)
    sampler = synthetic_sampler(seed, draft_vocab, config.node_top_k,
                                hidden_size=config.hidden_size)
    expected = draft_round(dataclasses.replace(config, batch_size=batch), sampler, roots,
                           root_hidden_states=hidden, widths=widths, hot_token_id=hot_token_id)
    return engine, got, expected


# --- draft rounds ------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_draft_round_equals_golden_with_the_width_policy(seed):
    _, got, expected = run_both(CONFIG, seed)
    assert_same_round(got, expected)


@pytest.mark.parametrize("widths", [[3, 1, 2], [2, 0], [1, 3, 3, 3, 3], [], [0]])
def test_draft_round_equals_golden_with_forced_widths(widths):
    _, got, expected = run_both(CONFIG, 11, widths=widths)
    assert_same_round(got, expected)


def test_draft_round_at_k1_w1_b1():
    config = DraftRoundConfig(batch_size=1, node_top_k=1, max_tree_width=1, depths=5,
                              verify_num=4, max_verify_num=4, max_node_count=8,
                              max_input_size=6)
    for seed in range(3):
        _, got, expected = run_both(config, seed)
        assert_same_round(got, expected)
        assert got.cumu_count == 6 and got.stop_reason == "depths"
    _, got, expected = run_both(config, 5, widths=[1, 1])
    assert_same_round(got, expected)


def test_draft_round_on_fewer_requests_than_slots():
    _, got, expected = run_both(CONFIG, 7, batch=2)
    assert got.config.batch_size == 2
    assert_same_round(got, expected)


def test_draft_round_with_a_hot_token_map():
    hot = np.random.default_rng(0).permutation(V)[:20].astype(np.int64)
    _, got, expected = run_both(CONFIG, 2, hot_token_id=hot, draft_vocab=20)
    assert_same_round(got, expected)
    assert set(got.cumu_tokens[:, 1:got.cumu_count].ravel()) <= set(hot.tolist())


@pytest.mark.parametrize("stop, changes", [
    ("node_budget", {"max_node_count": 20}),
    ("input_budget", {"max_input_size": 4}),
    ("depths", {"depths": 2}),
])
def test_draft_round_stop_rules_equal_golden(stop, changes):
    config = dataclasses.replace(CONFIG, **changes)
    _, got, expected = run_both(config, 4, widths=[3, 3, 3])
    assert expected.stop_reason == stop
    assert_same_round(got, expected)


def test_draft_round_at_a_contract_tree_with_the_wide_sort():
    config = host.TREES["eagle2"].round_config(2, hidden_size=2)
    assert config.sort_width == 128
    _, got, expected = run_both(config, 1, widths=host.TREES["eagle2"].static_widths())
    assert_same_round(got, expected)
    assert got.cumu_count == 1 + 10 + 4 * 100


# --- build_verify and verify against the kernel chain --------------------------------------------

def chain(result, seq_lens, table, pools, locs, mode, logits, temperatures, coins, final,
          max_seq_lens, eos, top_k=None, top_p=None):
    """§6, §10 and §9 on golden.draft_round's tree, as the engine's conventions wire them."""
    b, c = result.config.batch_size, result.config
    n = min(clamp_verify_num(c.verify_num, c.max_verify_num), result.cumu_count)
    tree = {"positions": np.zeros(b * n, np.int64),
            **{name: np.zeros((b, n), np.int64) for name in (
                "retrive_index", "retrive_next_token", "retrive_next_sibling")},
            "draft_tokens": np.zeros(b * n, np.int64)}
    mask = np.zeros((b * n * ((n + 7) // 8),), np.uint8) if mode == 2 else None
    fused_tree_mask_operator(
        result.cumu_tokens, result.cumu_scores, result.cumu_deltas, result.prev_indexs,
        result.next_indexs, result.side_indexs, seq_lens, b, result.cumu_count,
        clamp_verify_num(c.verify_num, c.max_verify_num), c.max_node_count, mode, mask,
        *tree.values())
    s = len(result.depths) + 1
    out = {"predicts": np.zeros(b * n, np.int32), "accept_index": np.zeros((b, s), np.int32),
           "accept_token_num": np.zeros(b, np.int32)}
    tree_speculative_sampling_from_logits(
        *out.values(), tree["draft_tokens"].reshape(b, n), tree["retrive_index"],
        tree["retrive_next_token"], tree["retrive_next_sibling"], coins, final, logits,
        temperatures, 1.0, 1.0, top_k, top_p)
    seq = seq_lens.copy()
    k7 = {"accept_length": np.zeros(b, np.int32), "verified_id": np.zeros(b * s, np.int32),
          "next_root": np.zeros(b, np.int64), "evict_mask": np.zeros(b * n, np.bool_),
          "finished": np.zeros(b, np.bool_)}
    update_verify_result(out["accept_index"], out["accept_token_num"], out["predicts"], locs,
                         pools, max_seq_lens, b, n, s, table.shape[1], eos, seq, table,
                         *k7.values())
    k7["verified_id"] = k7["verified_id"][:int(k7["accept_length"].sum())]
    return n, {**tree, "tree_mask": mask}, {**out, **k7, "seq_lens": seq}


@pytest.mark.parametrize("seed", range(3))
def test_round_equals_the_kernel_chain(seed):
    rng = np.random.default_rng(seed)
    engine = new_engine()
    b = CONFIG.batch_size
    roots = rng.integers(0, V, b).astype(np.int64)
    seq_lens = rng.integers(0, 20, b).astype(np.int64)
    draft_locs = rng.integers(0, 1000, (b, CONFIG.max_input_size + 1)).astype(np.int64)
    result = engine.draft_round(synthetic_sampler(seed, V, 4, hidden_size=5), roots,
                                seq_lens=seq_lens, draft_cache_locs=draft_locs)
    expected = draft_round(CONFIG, synthetic_sampler(seed, V, 4, hidden_size=5), roots)
    assert_same_round(result, expected)
    n = engine.verify_size()
    locs = rng.integers(1000, 2000, b * n).astype(np.int64)
    tree = engine.build_verify(2, locs)
    logits = (rng.standard_normal((b, n, V)) * 3).astype(np.float32)
    logits[0, 0, :3] = np.nan  # §10: -inf and flagged, no error
    temperatures = np.array([0.0, 0.8, 1.3], np.float32)
    coins = rng.random((b, n), dtype=np.float32)
    final = rng.random(b, dtype=np.float32)
    top_k = np.array([0, 3, 0], np.int32)
    top_p = np.array([1.0, 1.0, 0.7], np.float32)
    max_seq_lens = seq_lens + rng.integers(1, 6, b)
    got = engine.verify(logits, temperatures, max_seq_lens=max_seq_lens, eos_token_id=5,
                        uniform_samples=coins, uniform_samples_for_final_sampling=final,
                        top_k=top_k, top_p=top_p)
    table = np.full((CONFIG.batch_size, 64), -1, np.int64)
    table[np.arange(b)[:, None], seq_lens[:, None] + np.arange(CONFIG.max_input_size + 1)] = \
        draft_locs
    table[np.arange(b)[:, None], seq_lens[:, None] + np.arange(n)] = locs.reshape(b, n)
    kv_expected = np.concatenate([table[r, :seq_lens[r] + n] for r in range(b)])
    n_chain, tree_expected, verify_expected = chain(
        expected, seq_lens, table, np.arange(b, dtype=np.int64), locs, 2, logits,
        temperatures, coins, final, max_seq_lens, 5, top_k, top_p)
    assert tree.n == n == n_chain
    for name, value in tree_expected.items():
        assert same_bits(getattr(tree, name), value), name
    assert same_bits(tree.kv_indices, kv_expected)
    for name, value in verify_expected.items():
        assert same_bits(getattr(got, name), value), name
    assert got.nan_flags.tolist() == [True, False, False]
    assert same_bits(engine.req_to_token, table)
    assert np.array_equal(engine.seq_lens, verify_expected["seq_lens"])
    assert [len(t) for t in got.accepted_tokens()] == got.accept_length.tolist()


def test_round_convenience_and_command_records():
    engine = new_engine()
    models = host.BigramModels(V, seed=1)
    roots = np.array([1, 2, 3], np.int64)
    result = engine.round(models.sampler(4), roots, models.verify_logits,
                          np.ones(3, np.float32), seeds=np.array([1, 2, 3], np.int64))
    names = [record.command for record in result.commands]
    assert names[0] == "begin_round" and names[-2:] == ["build_verify", "verify"]
    assert set(names[1:-2]) == {"draft_depth"} and len(names) - 3 == len(result.draft.depths)
    assert result.cycles is None and result.bytes is None  # golden: unmeasured
    assert all(record.status == "OK" for record in engine.commands)
    assert [r.command for r in engine.commands].count("read_state") == 3
    assert np.array_equal(engine.seq_lens, result.verify.seq_lens)


def test_verify_draws_coins_from_the_seed():
    runs = []
    for _ in range(2):
        engine = new_engine()
        models = host.BigramModels(V, seed=4, agreement=0.9)
        result = engine.round(models.sampler(4), np.array([5, 6, 7], np.int64),
                              models.verify_logits, np.ones(3, np.float32))
        runs.append(result.verify.verified_id)
    assert same_bits(*runs)


# --- backends ----------------------------------------------------------------------------------

def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="`backend`"):
        new_engine(backend="fpga")


def test_a_backend_instance_is_used_as_given():
    engine = host.engine_config(CONFIG, V)
    backend = host.GoldenBackend(engine, np.full((3, 64), -1, np.int64))
    assert new_engine(backend=backend).backend is backend


# --- argument checks ---------------------------------------------------------------------------

def drafted_engine(seed=0):
    engine = new_engine()
    engine.draft_round(synthetic_sampler(seed, V, 4, hidden_size=5),
                       np.array([1, 2, 3], np.int64))
    return engine


def built_engine():
    engine = drafted_engine()
    engine.build_verify(1)
    return engine


def verify_arguments(engine, **changes):
    n = engine.verify_size()
    args = {"target_logits": np.zeros((3, n, V), np.float32),
            "temperatures": np.ones(3, np.float32)}
    args.update(changes)
    return args


def refused(engine, call, match):
    """``call`` raises ValueError matching ``match`` and sends nothing to the backend."""
    before = len(engine.commands)
    with pytest.raises(ValueError, match=match):
        call()
    assert len(engine.commands) == before


def sampler_returning(**changes):
    good = synthetic_sampler(0, V, 4, hidden_size=5)

    def sample(depth, frontier):
        answer = good(depth, frontier)
        return dataclasses.replace(answer, **{
            name: change(getattr(answer, name)) for name, change in changes.items()})
    return sample


ROOTS = np.array([1, 2, 3], np.int64)
SAMPLER = synthetic_sampler(0, V, 4, hidden_size=5)


@pytest.mark.parametrize("arguments, match", [
    ({"root_tokens": ROOTS.astype(np.float32)}, "`root_tokens` must be int64"),
    ({"root_tokens": ROOTS.reshape(3, 1)}, "`root_tokens`"),
    ({"root_tokens": np.array([1, V, 3], np.int64)}, "`root_tokens` holds token 40"),
    ({"root_tokens": np.array([1, -1, 3], np.int64)}, "`root_tokens` holds token -1"),
    ({"root_tokens": np.arange(4, dtype=np.int64)}, "`root_tokens` must hold 1 .. 3"),
    ({"root_tokens": np.zeros(0, np.int64)}, "`root_tokens` must hold 1 .. 3"),
    ({"root_hidden_states": np.zeros((3, 1, 4), np.float32)}, "`root_hidden_states`"),
    ({"root_hidden_states": np.zeros((3, 1, 5), np.float64)}, "`root_hidden_states`"),
    ({"widths": [2, 4]}, r"`widths\[1\]` must be between 0 and 3"),
    ({"widths": [-1]}, r"`widths\[0\]`"),
    ({"widths": 2}, "`widths` must be a sequence"),
    ({"widths": [1.5]}, r"`widths\[0\]` must be an integer"),
    ({"slots": np.array([0, 0, 1], np.int64)}, "`slots` must not repeat"),
    ({"slots": np.array([0, 1, 3], np.int64)}, "`slots` values"),
    ({"seq_lens": np.array([0, 60, 0], np.int64)}, "`seq_lens` must leave room"),
    ({"seq_lens": np.array([0, -1, 0], np.int64)}, "`seq_lens` values"),
    ({"draft_cache_locs": np.zeros((3, 12), np.int64)}, "`draft_cache_locs`"),
    ({"hot_token_id": np.arange(V, dtype=np.int64)}, "`hot_token_id`"),
    ({"sampler": "draft model"}, "`sampler` must be callable"),
])
def test_draft_round_arguments_are_checked(arguments, match):
    engine = new_engine()
    args = {"sampler": SAMPLER, "root_tokens": ROOTS, **arguments}
    refused(engine, lambda: engine.draft_round(args.pop("sampler"), args.pop("root_tokens"),
                                               **args), match)


@pytest.mark.parametrize("changes, match", [
    ({"probas": lambda p: p[:, :-1].copy()}, "`DraftSample.probas`"),
    ({"probas": lambda p: p.astype(np.float64)}, "`DraftSample.probas`"),
    ({"probas": lambda p: np.where(p == p.max(), np.nan, p).astype(np.float32)},
     "`DraftSample.probas` must be finite"),
    ({"probas": lambda p: -p}, "`DraftSample.probas` values must be at least 0"),
    ({"tokens": lambda t: t + V}, "`DraftSample.tokens` holds token"),
    ({"tokens": lambda t: t.astype(np.int32)}, "`DraftSample.tokens` must be int64"),
    ({"hidden_states": lambda h: h[:, :, :2].copy()}, "`DraftSample.hidden_states`"),
])
def test_sampler_answers_are_checked(changes, match):
    engine = new_engine()
    before = len(engine.commands)
    with pytest.raises(ValueError, match=match):
        engine.draft_round(sampler_returning(**changes), ROOTS)
    assert [r.command for r in engine.commands[before:]] == ["begin_round"]


def test_a_sampler_that_returns_something_else_is_refused():
    engine = new_engine()
    with pytest.raises(ValueError, match="DraftSample"):
        engine.draft_round(lambda depth, frontier: (1, 2), ROOTS)


def test_draft_tokens_are_checked_against_the_hot_vocabulary():
    hot = np.arange(10, dtype=np.int64)
    engine = new_engine(hot_token_id=hot)
    with pytest.raises(ValueError, match="`DraftSample.tokens` holds token .* draft vocab"):
        engine.draft_round(synthetic_sampler(0, V, 4, hidden_size=5), ROOTS)


@pytest.mark.parametrize("arguments, match", [
    ((3, None), "`tree_mask_mode` must be one of"),
    (("2", None), "`tree_mask_mode`"),
    ((2, np.zeros(5, np.int64)), "`verify_cache_locs` must be int64"),
    ((2, "locs"), "`verify_cache_locs` must be a numpy array"),
])
def test_build_verify_arguments_are_checked(arguments, match):
    engine = drafted_engine()
    refused(engine, lambda: engine.build_verify(*arguments), match)


@pytest.mark.parametrize("changes, match", [
    ({"target_logits": "logits"}, "`target_logits` must be a numpy array"),
    ({"target_logits": np.zeros((3, 2, V), np.float32)}, "`target_logits` must be float32"),
    ({"target_logits": np.zeros((3, 10, V), np.float64)}, "`target_logits`"),
    ({"temperatures": np.array([1, np.nan, 1], np.float32)},
     "`temperatures` must be finite, not nan"),
    ({"temperatures": np.array([1, np.inf, 1], np.float32)}, "`temperatures` must be finite"),
    ({"temperatures": np.array([1, -0.5, 1], np.float32)}, "`temperatures` values must be"),
    ({"temperatures": np.ones(2, np.float32)}, "`temperatures`"),
    ({"top_p": np.array([1, 1.5, 1], np.float32)}, "`top_p` values must be at most 1"),
    ({"top_p": np.array([1, np.nan, 1], np.float32)}, "`top_p` must be finite"),
    ({"top_k": np.ones(3, np.int64)}, "`top_k` must be int32"),
    ({"max_seq_lens": np.zeros(3, np.int64)}, "`max_seq_lens`"),
    ({"max_seq_lens": np.full(3, 65, np.int64)}, "`max_seq_lens` values"),
    ({"eos_token_id": V}, "`eos_token_id` must be between -1"),
    ({"threshold_acc": float("nan")}, "`threshold_acc`"),
    ({"threshold_single": 1.5}, "`threshold_single`"),
    ({"uniform_samples": np.zeros((3, 10), np.float32)},
     "`uniform_samples_for_final_sampling` must be given"),
    ({"uniform_samples": np.zeros((3, 9), np.float32),
      "uniform_samples_for_final_sampling": np.zeros(3, np.float32)}, "`uniform_samples`"),
    ({"uniform_samples": np.full((3, 10), 2, np.float32),
      "uniform_samples_for_final_sampling": np.zeros(3, np.float32)},
     "`uniform_samples` values must be at most 1"),
    ({"seeds": np.ones(3, np.int64), "uniform_samples": np.zeros((3, 10), np.float32)},
     "either `seeds` or `uniform_samples`"),
    ({"seeds": np.array([1, 1 << 32, 1], np.int64)}, "`seeds` values"),
    ({"seeds": np.ones(3, np.float32)}, "`seeds` must be int64"),
])
def test_verify_arguments_are_checked(changes, match):
    engine = built_engine()
    assert engine.verify_size() == 10
    refused(engine, lambda: engine.verify(**verify_arguments(engine, **changes)), match)


def test_nan_logits_are_not_an_error():
    engine = built_engine()
    logits = np.full((3, 10, V), np.nan, np.float32)
    result = engine.verify(**verify_arguments(engine, target_logits=logits))
    assert result.nan_flags.all()


@pytest.mark.parametrize("arguments, match", [
    ({"config": "small"}, "`config` must be a golden.DraftRoundConfig"),
    ({"vocab_size": 3}, "`vocab_size` must be between 4 and"),
    ({"req_to_token": np.zeros((3, 64), np.int32)}, "`req_to_token` must be int64"),
    ({"req_to_token": np.zeros((2, 64), np.int64)}, "`req_to_token` must have at least 3"),
    ({"context_len": 10}, "`context_len` must be between"),
    ({"hot_token_id": np.array([0, V], np.int64)}, "`hot_token_id` holds token 40"),
])
def test_engine_arguments_are_checked(arguments, match):
    args = {"config": CONFIG, "vocab_size": V, **arguments}
    with pytest.raises(ValueError, match=match):
        host.Engine(args.pop("config"), **args)


def test_commands_out_of_order_raise_engine_errors():
    engine = new_engine()
    with pytest.raises(host.EngineError, match="build_verify needs a drafted round"):
        engine.build_verify(2)
    engine = drafted_engine()
    with pytest.raises(host.EngineError, match="verify needs a built verify tree"):
        engine.verify(np.zeros((3, 10, V), np.float32), np.ones(3, np.float32))
    engine.build_verify(2)
    with pytest.raises(host.EngineError, match="BAD_PHASE"):
        engine.build_verify(2)


def test_read_state_checks_the_slot():
    engine = new_engine()
    result = engine.draft_round(synthetic_sampler(0, V, 4, hidden_size=5), ROOTS)
    state = engine.read_state(1)
    assert state.cumu_count == result.cumu_count and state.phase.name == "DRAFTED"
    with pytest.raises(ValueError, match="`slot` must be between 0 and 2"):
        engine.read_state(3)


# --- decoding ----------------------------------------------------------------------------------

def test_finished_requests_leave_the_batch():
    models = host.BigramModels(V, seed=2)
    engine = host.Engine(host.TREES["small"].round_config(3), vocab_size=V, seed=2,
                         context_len=64)
    seen = []
    run = host.decode(engine, models, [1, 2, 3], 20, max_seq_len=7, eos_token_id=-1,
                      progress=lambda done, total: seen.append((done, total)))
    assert run.finished == [True, True, True]
    assert [len(tokens) for tokens in run.tokens] == [7, 7, 7]  # seq_len 0 -> 7
    assert run.metrics.rounds < 20 and seen[-1] == (run.metrics.rounds, run.metrics.rounds)
    assert run.metrics.request_rounds < 3 * run.metrics.rounds  # smaller batches at the end
