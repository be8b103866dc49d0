"""The engine's command-level golden (golden/engine.py) against the kernel chain it wires up,
its bad-command completions, and the P1 metadata goldens (golden/verify_metadata.py)."""

import numpy as np
import pytest

from golden import (
    compact_active_slots,
    draft_round,
    fused_tree_mask_operator,
    synthetic_sampler,
    tree_speculative_sampling_from_logits,
    update_verify_result,
)
from golden.engine import Engine, EngineConfig, Phase, Status
from golden.update_state import clamp_verify_num
from golden.verify_metadata import (
    assign_draft_cache_locs,
    assign_req_to_token_pool,
    compute_kv_indices,
    verify_forward_indptrs,
)

CONFIG = EngineConfig(node_top_k=4, max_tree_width=3, max_depths=5, max_verify_num=12,
                      max_node_count=64, max_input_size=16, vocab_size=50, max_batch=6)
POOL_ROWS, CONTEXT = 8, 96


def new_engine():
    return Engine(CONFIG, np.full((POOL_ROWS, CONTEXT), -1, np.int64))


def round_inputs(rng, slots):
    b = len(slots)
    return dict(
        slots=np.array(slots, np.int64),
        root_tokens=rng.integers(0, CONFIG.vocab_size, b).astype(np.int64),
        seq_lens=rng.integers(0, 40, b).astype(np.int64),
        req_pool_indices=rng.permutation(POOL_ROWS)[:b].astype(np.int64),
        draft_cache_locs=rng.integers(0, 10_000, (b, CONFIG.max_input_size + 1)).astype(np.int64),
    )


def reference_round(seed, inputs, verify_num, depths, widths):
    """The draft round by ``golden.draft_round`` (what the engine must reproduce)."""
    config = CONFIG.round_config(len(inputs["slots"]), verify_num, depths)
    sampler = synthetic_sampler(seed, CONFIG.vocab_size, CONFIG.node_top_k)
    return draft_round(config, sampler, inputs["root_tokens"], widths=widths)


def drive_round(engine, rng, seed, slots, *, force_widths):
    """One round through the engine, checked step by step against the kernel chain; returns
    the verify completion."""
    inputs = round_inputs(rng, slots)
    b = len(slots)
    verify_num = int(rng.integers(1, 16))
    depths = int(rng.integers(1, CONFIG.max_depths + 1))
    widths = ([int(w) for w in rng.integers(0, CONFIG.max_tree_width + 1, depths)]
              if force_widths else None)
    result = reference_round(seed, inputs, verify_num, depths, widths)
    table = engine.req_to_token.copy()
    assert engine.begin_round(**inputs, verify_num=verify_num, depths=depths).ok
    assign_draft_cache_locs(table, inputs["req_pool_indices"], inputs["seq_lens"],
                            inputs["draft_cache_locs"].reshape(-1), CONFIG.max_input_size + 1)
    assert np.array_equal(engine.req_to_token, table)

    for i, record in enumerate(result.depths):
        done = engine.draft_depth(record.sample.probas, record.sample.tokens,
                                  width=None if widths is None else widths[i])
        assert done.ok, done.message
        out = done.outputs
        assert out["next_tree_width"] == record.next_tree_width
        if i + 1 < len(result.depths):
            nxt = result.depths[i + 1]
            assert out["stop_reason"] == ""
            assert np.array_equal(out["tokens"], nxt.frontier.tokens)
            assert np.array_equal(out["node_ids"], nxt.frontier.node_ids)
            assert np.array_equal(out["tree_mask"], nxt.input_tree_mask)
            assert np.array_equal(out["parent_indices"],
                                  record.parent_indices_in_layer[:, :nxt.tree_width])
            assert np.array_equal(out["positions"], np.repeat(
                inputs["seq_lens"][:, None] + record.depth, nxt.tree_width, axis=1))
            first = nxt.input_count - nxt.tree_width
            assert np.array_equal(out["kv_slots"],
                                  inputs["draft_cache_locs"][:, first:nxt.input_count])
        else:
            assert out["stop_reason"] == result.stop_reason
    for row, slot in enumerate(slots):
        state = engine.read_state(slot).outputs["state"]
        assert state.phase == Phase.DRAFTED and state.cumu_count == result.cumu_count
        for name, values in state.tree.items():
            assert np.array_equal(values.view(np.uint8),
                                  getattr(result, name)[row].view(np.uint8)), name

    # K4 and the verify-forward metadata.
    n = engine.verify_size()
    mode = int(rng.integers(0, 3))
    locs = rng.integers(0, 10_000, b * n).astype(np.int64)
    built = engine.build_verify(mode, locs)
    assert built.ok, built.message
    v = built.outputs
    expected = {name: np.zeros_like(v[name]) for name in (
        "tree_mask", "positions", "retrive_index", "retrive_next_token",
        "retrive_next_sibling", "draft_tokens")}
    fused_tree_mask_operator(
        result.cumu_tokens, result.cumu_scores, result.cumu_deltas, result.prev_indexs,
        result.next_indexs, result.side_indexs, inputs["seq_lens"], b, result.cumu_count,
        clamp_verify_num(verify_num, CONFIG.max_verify_num), CONFIG.max_node_count, mode,
        *expected.values())
    for name, values in expected.items():
        assert np.array_equal(v[name], values), name
    assign_req_to_token_pool(inputs["req_pool_indices"], table, inputs["seq_lens"],
                             inputs["seq_lens"] + n, locs)
    assert np.array_equal(engine.req_to_token, table)
    qo, kv, mask_indptr = verify_forward_indptrs(inputs["seq_lens"], n, mode)
    assert np.array_equal(v["qo_indptr"], qo) and np.array_equal(v["kv_indptr"], kv)
    assert np.array_equal(v["mask_indptr"], mask_indptr)
    assert mask_indptr[-1] == v["tree_mask"].size
    kv_indices = np.concatenate([table[p, :s + n] for p, s in zip(
        inputs["req_pool_indices"], inputs["seq_lens"], strict=True)] + [np.zeros(0, np.int64)])
    assert np.array_equal(v["kv_indices"], kv_indices)

    # The fused verify, K7 and the compaction.
    logits = (rng.standard_normal((b, n, CONFIG.vocab_size)) * 3).astype(np.float32)
    temperatures = rng.choice([0.0, 0.7, 1.0], b).astype(np.float32)
    coins = rng.random((b, n), dtype=np.float32)
    final = rng.random(b, dtype=np.float32)
    max_seq_lens = inputs["seq_lens"] + rng.integers(1, 8, b)
    verified = engine.verify(logits, temperatures, max_seq_lens, eos_token_id=3,
                             uniform_samples=coins, uniform_samples_for_final_sampling=final)
    assert verified.ok, verified.message
    out = verified.outputs
    s = len(result.depths) + 1
    predicts, accept_index = np.zeros(b * n, np.int32), np.zeros((b, s), np.int32)
    accept_token_num = np.zeros(b, np.int32)
    tree_speculative_sampling_from_logits(
        predicts, accept_index, accept_token_num, v["draft_tokens"].reshape(b, n),
        v["retrive_index"], v["retrive_next_token"], v["retrive_next_sibling"], coins, final,
        logits, temperatures)
    seq_lens = inputs["seq_lens"].copy()
    k7 = [np.zeros(b, np.int32), np.zeros(b * s, np.int32), np.zeros(b, np.int64),
          np.zeros(b * n, np.bool_), np.zeros(b, np.bool_)]
    update_verify_result(accept_index, accept_token_num, predicts, locs,
                         inputs["req_pool_indices"], max_seq_lens, b, n, s, CONTEXT, 3,
                         seq_lens, table, *k7)
    active = [np.zeros(b, np.int64), np.zeros(b, np.int64), np.zeros(1, np.int64)]
    compact_active_slots(k7[4], b, *active)
    assert np.array_equal(out["predicts"], predicts)
    assert np.array_equal(out["accept_index"], accept_index)
    assert np.array_equal(out["accept_token_num"], accept_token_num)
    assert np.array_equal(out["verified_id"], k7[1][:k7[0].sum()])
    for name, values in zip(("accept_length", "next_root", "evict_mask", "finished"),
                            (k7[0], k7[2], k7[3], k7[4]), strict=True):
        assert np.array_equal(out[name], values), name
    for name, values in zip(("active_slots", "active_inverse", "active_count"), active,
                            strict=True):
        assert np.array_equal(out[name], values), name
    assert np.array_equal(out["seq_lens"], seq_lens)
    assert np.array_equal(engine.req_to_token, table)
    for row, slot in enumerate(slots):
        state = engine.read_state(slot).outputs["state"]
        assert state.phase == Phase.IDLE and state.seq_len == seq_lens[row]
    return verified


@pytest.mark.parametrize("force_widths", [False, True])
def test_rounds_equal_the_kernel_chain(force_widths):
    rng = np.random.default_rng(7 + force_widths)
    engine = new_engine()
    for round_index in range(12):
        b = int(rng.integers(1, CONFIG.max_batch + 1))
        slots = [int(s) for s in rng.permutation(CONFIG.max_batch)[:b]]
        drive_round(engine, rng, 100 + round_index, slots, force_widths=force_widths)


def test_zero_batch_round_is_a_no_op():
    engine = new_engine()
    before = engine.req_to_token.copy()
    empty = np.zeros(0, np.int64)
    assert engine.begin_round(empty, empty, empty, empty,
                              np.zeros((0, CONFIG.max_input_size + 1), np.int64),
                              verify_num=4).ok
    done = engine.draft_depth(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.int64))
    assert done.ok and done.outputs["tokens"].shape == (0, 0)
    built = engine.build_verify(1, empty)
    assert built.ok and built.outputs["n"] == 0
    verified = engine.verify(np.zeros((0, 0, CONFIG.vocab_size), np.float32),
                             np.zeros(0, np.float32), empty, seeds=empty)
    assert verified.ok and verified.outputs["active_count"].tolist() == [0]
    assert np.array_equal(engine.req_to_token, before)


def snapshot(engine):
    states = [engine.read_state(s).outputs["state"] for s in range(engine.config.max_batch)]
    return states, engine.req_to_token.copy()


def assert_unchanged(engine, before):
    states, table = snapshot(engine)
    assert np.array_equal(table, before[1])
    for old, new in zip(before[0], states, strict=True):
        assert (old.phase, old.seq_len, old.req_pool_index, old.cumu_count) == (
            new.phase, new.seq_len, new.req_pool_index, new.cumu_count)
        assert old.tree.keys() == new.tree.keys()
        for name in old.tree:
            assert np.array_equal(old.tree[name], new.tree[name])


def sample(engine, rng, width):
    b = len(engine._round.slots)
    k = CONFIG.node_top_k
    return (rng.random((b, width * k), dtype=np.float32),
            rng.integers(0, CONFIG.vocab_size, (b, width * k)).astype(np.int64))


def test_bad_commands_complete_with_errors_and_change_nothing():
    rng = np.random.default_rng(3)
    engine = new_engine()
    drive_round(engine, rng, 1, [0, 1], force_widths=True)  # slots 0 and 1 hold a round
    inputs = round_inputs(rng, [2, 4])

    def expect(status, completion):
        assert completion.status == status, completion
        assert completion.message and completion.outputs == {}

    before = snapshot(engine)
    expect(Status.BAD_PHASE, engine.draft_depth(*[np.zeros((0, 0), t) for t in (
        np.float32, np.int64)]))
    expect(Status.BAD_SLOT, engine.begin_round(**{**inputs, "slots": np.array([2, 6])},
                                               verify_num=8))
    expect(Status.BAD_SLOT, engine.begin_round(**{**inputs, "slots": np.array([2, 2])},
                                               verify_num=8))
    expect(Status.BAD_SLOT, engine.read_state(-1))
    expect(Status.BAD_ARGUMENT, engine.begin_round(
        **{**inputs, "root_tokens": np.array([1, CONFIG.vocab_size])}, verify_num=8))
    assert_unchanged(engine, before)

    assert engine.begin_round(**inputs, verify_num=8, depths=3).ok
    before = snapshot(engine)
    expect(Status.BAD_PHASE, engine.build_verify(0, np.zeros(0, np.int64)))
    expect(Status.BAD_PHASE, engine.verify(
        np.zeros((2, 0, CONFIG.vocab_size), np.float32), np.zeros(2, np.float32),
        np.full(2, 99), seeds=np.ones(2, np.int64)))
    expect(Status.BAD_WIDTH, engine.draft_depth(*sample(engine, rng, 1),
                                                width=CONFIG.max_tree_width + 1))
    probas, tokens = sample(engine, rng, 1)
    tokens[1, 2] = CONFIG.vocab_size + 5
    expect(Status.BAD_ARGUMENT, engine.draft_depth(probas, tokens))
    assert_unchanged(engine, before)

    # Node budget: depths of full width until the stop rule ends drafting.
    while True:
        done = engine.draft_depth(*sample(engine, rng, engine._round.frontier.tokens.shape[1]),
                                  width=CONFIG.max_tree_width)
        assert done.ok
        if done.outputs["stop_reason"]:
            break
    before = snapshot(engine)
    status = (Status.NODE_BUDGET if done.outputs["stop_reason"] in ("node_budget",
                                                                   "input_budget")
              else Status.BAD_PHASE)
    expect(status, engine.draft_depth(*sample(engine, rng, 1)))
    assert_unchanged(engine, before)
    assert engine.build_verify(2, np.arange(2 * engine.verify_size(), dtype=np.int64)).ok


def test_node_budget_overflow_is_refused():
    config = EngineConfig(node_top_k=4, max_tree_width=4, max_depths=8, max_verify_num=8,
                          max_node_count=1 + 4 + 16, max_input_size=16, vocab_size=50,
                          max_batch=2)
    engine = Engine(config, np.zeros((2, 64), np.int64))
    rng = np.random.default_rng(5)
    assert engine.begin_round(np.array([1]), np.array([3]), np.array([0]), np.array([0]),
                              np.zeros((1, 17), np.int64), verify_num=8).ok
    probas = rng.random((1, 4), dtype=np.float32)
    assert engine.draft_depth(probas, np.arange(4, dtype=np.int64)[None], width=4).ok
    done = engine.draft_depth(rng.random((1, 16), dtype=np.float32),
                              np.arange(16, dtype=np.int64)[None], width=4)
    assert done.ok and done.outputs["stop_reason"] == "node_budget"
    before = snapshot(engine)
    refused = engine.draft_depth(rng.random((1, 16), dtype=np.float32),
                                 np.arange(16, dtype=np.int64)[None])
    assert refused.status == Status.NODE_BUDGET
    assert_unchanged(engine, before)


def test_host_errors_name_the_argument():
    engine = new_engine()
    inputs = round_inputs(np.random.default_rng(1), [0, 1])
    with pytest.raises(ValueError, match="`seq_lens`"):
        engine.begin_round(**{**inputs, "seq_lens": np.zeros(3, np.int64)}, verify_num=4)
    with pytest.raises(ValueError, match="`draft_cache_locs`"):
        engine.begin_round(**{**inputs, "draft_cache_locs": np.zeros((2, 3), np.int64)},
                           verify_num=4)
    assert engine.begin_round(**inputs, verify_num=4).ok
    with pytest.raises(ValueError, match="`probas`"):
        engine.draft_depth(np.zeros((2, 4), np.float64), np.zeros((2, 4), np.int64))
    with pytest.raises(ValueError, match="`config`"):
        Engine(object(), np.zeros((1, 1), np.int64))


def test_verify_metadata_goldens():
    table = np.arange(3 * 10, dtype=np.int64).reshape(3, 10)
    pools = np.array([2, 0], np.int64)
    assign_draft_cache_locs(table, pools, np.array([1, 4]), np.array([90, 91, 92, 93]), 2)
    assert table[2, 1:3].tolist() == [90, 91] and table[0, 4:6].tolist() == [92, 93]
    assign_req_to_token_pool(pools, table, np.array([0, 7]), np.array([1, 10]),
                             np.array([70, 71, 72, 73]))
    assert table[2, 0] == 70 and table[0, 7:10].tolist() == [71, 72, 73]
    indptr, indices = np.zeros(3, np.int64), np.zeros(5, np.int64)
    compute_kv_indices(table, pools, np.array([1, 8]), np.array([3, 2]), indptr, indices)
    assert indptr.tolist() == [0, 3, 5]
    assert indices.tolist() == [90, 91, 23, 72, 73]
    qo, kv, mask = verify_forward_indptrs(np.array([5, 0]), 3, 0)
    assert qo.tolist() == [0, 3, 6] and kv.tolist() == [0, 8, 11]
    assert mask.tolist() == [0, 24, 33]
    assert verify_forward_indptrs(np.array([5, 0]), 9, 2)[2].tolist() == [0, 18, 36]
    with pytest.raises(ValueError, match="past the `req_to_token` row length"):
        assign_draft_cache_locs(table, pools, np.array([9, 0]), np.zeros(4, np.int64), 2)
    with pytest.raises(ValueError, match="`req_pool_indices` must lie in 0..2"):
        compute_kv_indices(table, np.array([3]), np.array([0]), np.array([1]),
                           np.zeros(2, np.int64), np.zeros(1, np.int64))


def built_round(rng):
    """An engine with a round on slots 1 and 3 whose verify tree is built; ``(engine, n)``."""
    engine = new_engine()
    inputs = round_inputs(rng, [1, 3])
    assert engine.begin_round(**inputs, verify_num=6, depths=2).ok
    assert engine.draft_depth(*sample(engine, rng, 1), width=2).ok
    n = engine.verify_size()
    assert engine.build_verify(1, np.arange(2 * n, dtype=np.int64)).ok
    return engine, n


def test_bad_verify_side_arguments():
    rng = np.random.default_rng(9)
    engine = new_engine()
    inputs = round_inputs(rng, [0, 2])
    assert engine.begin_round(**inputs, verify_num=6).ok
    assert engine.draft_depth(*sample(engine, rng, 1)).ok
    before = snapshot(engine)
    refused = engine.build_verify(3, np.zeros(2 * engine.verify_size(), np.int64))
    assert refused.status == Status.BAD_ARGUMENT and "`tree_mask_mode`" in refused.message
    assert_unchanged(engine, before)
    with pytest.raises(ValueError, match="`verify_cache_locs`"):
        engine.build_verify(0, np.zeros(1, np.int64))

    engine, n = built_round(rng)
    good = dict(target_logits=np.zeros((2, n, CONFIG.vocab_size), np.float32),
                temperatures=np.ones(2, np.float32), max_seq_lens=np.full(2, 90))
    with pytest.raises(ValueError, match="`target_logits`"):
        engine.verify(**{**good, "target_logits": np.zeros((2, n + 1, CONFIG.vocab_size),
                                                           np.float32)}, seeds=np.ones(2))
    with pytest.raises(ValueError, match="`temperatures`"):
        engine.verify(**{**good, "temperatures": np.ones(2)}, seeds=np.ones(2, np.int64))
    with pytest.raises(ValueError, match="give either `seeds` or `uniform_samples`"):
        engine.verify(**good)
    before = snapshot(engine)
    refused = engine.verify(**{**good, "temperatures": np.array([1, np.nan], np.float32)},
                            seeds=np.ones(2, np.int64))
    assert refused.status == Status.BAD_ARGUMENT and "temperatures" in refused.message
    assert_unchanged(engine, before)
    assert engine.verify(**good, seeds=np.ones(2, np.int64)).ok


@pytest.mark.parametrize(("changes", "message"), [
    ({"max_batch": 0}, "`max_batch` must be at least 1, not 0"),
    ({"vocab_size": 3}, "`vocab_size` must be at least `node_top_k`, not 3"),
    ({"max_tree_width": 5}, "`max_tree_width` must be between 1 and `node_top_k`, not 5"),
])
def test_engine_config_is_checked(changes, message):
    fields = {name: getattr(CONFIG, name) for name in CONFIG.__dataclass_fields__}
    with pytest.raises(ValueError, match=message):
        EngineConfig(**{**fields, **changes})


def test_verify_metadata_refuses_a_wrong_slot_count():
    table = np.zeros((2, 8), np.int64)
    with pytest.raises(ValueError, match="`out_cache_loc` must have 3 elements"):
        assign_req_to_token_pool(np.array([0, 1]), table, np.array([0, 2]), np.array([1, 4]),
                                 np.zeros(4, np.int64))
    assert not table.any()
