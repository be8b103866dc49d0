"""K7 (§9): ``update_verify_result`` and ``compact_active_slots``.

The K6 inputs are synthesised from verify trees built by the K4 golden on trees grown by the
golden draft round: an accepted path walks ``retrive_next_token``/``retrive_next_sibling``
from the root, and ``predicts`` holds the next accepted draft token after each accepted node
and a bonus token after the last one, as K6 writes them.
"""

import numpy as np
import pytest

from golden.active_slots import compact_active_slots
from golden.draft_round import DraftRoundConfig, draft_round, synthetic_sampler
from golden.reject_sample import verify_tree_greedy
from golden.tree_mask import fused_tree_mask_operator, tree_mask_size
from golden.verify_result import update_verify_result

I32, I64 = np.int32, np.int64
SENTINEL = -777


# --- helpers --------------------------------------------------------------------------------


def verify_tree(seed, batch, verify_num=48):
    """K4 outputs (QLEN layout) for a round grown by the golden draft round."""
    cfg = DraftRoundConfig(batch_size=batch, node_top_k=4, max_tree_width=4, depths=5,
                           verify_num=verify_num, max_verify_num=verify_num,
                           max_node_count=256, max_input_size=64)
    r = draft_round(cfg, synthetic_sampler(seed, 1000, 4), np.arange(batch, dtype=I64))
    n = min(verify_num, r.cumu_count)
    seq = np.zeros(batch, I64)
    out = {
        "mask": np.zeros(tree_mask_size(1, seq, n), bool),
        "positions": np.zeros(batch * n, I64),
        "retrive_index": np.zeros((batch, n), I64),
        "next": np.zeros((batch, n), I64),
        "side": np.zeros((batch, n), I64),
        "tokens": np.zeros(batch * n, I64),
    }
    fused_tree_mask_operator(r.cumu_tokens, r.cumu_scores, r.cumu_deltas, r.prev_indexs,
                             r.next_indexs, r.side_indexs, seq, batch, r.cumu_count, verify_num,
                             256, 1, *out.values())
    return out, n


def height(tree, b, node):
    """Edges on the longest downward path from ``node`` (retrive links)."""
    best, c = 0, tree["next"][b, node]
    while c != -1:
        best = max(best, 1 + height(tree, b, int(c)))
        c = tree["side"][b, c]
    return best


def accept_paths(tree, n, spec_tokens, rng, *, lengths=None):
    """K6-shaped ``accept_index``, ``accept_token_num``, ``predicts`` for random paths.

    ``lengths[b]`` (optional) asks for a path of exactly that many accepted draft tokens
    (the walk then always descends while it can).
    """
    batch = tree["next"].shape[0]
    accept_index = np.full((batch, spec_tokens), -1, I32)
    accept_num = np.zeros(batch, I32)
    predicts = np.full(batch * n, -1, I32)
    for b in range(batch):
        path, cur = [0], 0
        while len(path) < spec_tokens:
            kids = []
            c = tree["next"][b, cur]
            while c != -1:
                kids.append(int(c))
                c = tree["side"][b, c]
            want = None if lengths is None else lengths[b]
            if not kids or (want is None and rng.random() < 0.3) or (
                    want is not None and len(path) > want):
                break
            if want is None:
                cur = kids[rng.integers(len(kids))]
            else:  # the child with the deepest subtree
                cur = max(kids, key=lambda c, b=b: height(tree, b, c))
            path.append(cur)
        if lengths is not None:
            assert len(path) - 1 == lengths[b], "tree too shallow for the requested length"
        flat = [b * n + p for p in path]
        accept_index[b, : len(path)] = flat
        accept_num[b] = len(path) - 1
        for here, nxt in zip(flat, flat[1:], strict=False):
            predicts[here] = tree["tokens"][nxt]
        predicts[flat[-1]] = 5000 + b  # bonus token
    return accept_index, accept_num, predicts


def run_k7(accept_index, accept_num, predicts, seq_lens, max_seq_lens, *, n, eos=-1,
           ctx=64, pool_rows=None, pool_idx=None, out_cache_loc=None):
    batch, spec = accept_index.shape
    pool_rows = pool_rows or batch + 2
    pool_idx = np.arange(batch, dtype=I64)[::-1] + 1 if pool_idx is None else pool_idx
    out_cache_loc = (1000 + np.arange(batch * n, dtype=I64) if out_cache_loc is None
                     else out_cache_loc)
    out = {
        "seq_lens": np.array(seq_lens, I64),
        "req_to_token": np.full((pool_rows, ctx), SENTINEL, I64),
        "accept_length": np.full(batch, SENTINEL, I32),
        "verified_id": np.full(batch * spec, SENTINEL, I32),
        "next_root": np.full(batch, SENTINEL, I64),
        "evict_mask": np.zeros(batch * n, bool),
        "finished": np.ones(batch, bool),
    }
    update_verify_result(accept_index, accept_num, predicts, out_cache_loc,
                         np.ascontiguousarray(pool_idx), np.array(max_seq_lens, I64), batch, n,
                         spec, ctx, eos, *out.values())
    out["pool_idx"], out["out_cache_loc"] = pool_idx, out_cache_loc
    return out


def compact(finished):
    b = len(finished)
    slots, inverse, count = (np.full(b, SENTINEL, I64), np.full(b, SENTINEL, I64),
                             np.full(1, SENTINEL, I64))
    compact_active_slots(np.asarray(finished, bool), b, slots, inverse, count)
    return slots, inverse, int(count[0])


def check_k7(out, accept_index, accept_num, predicts, seq_before, max_lens, n, eos):
    """§9 properties of one call, request by request."""
    batch, spec = accept_index.shape
    offset = 0
    for b in range(batch):
        full = accept_index[b, : accept_num[b] + 1].astype(I64)
        tokens = predicts[full]
        length = int(out["accept_length"][b])
        assert 1 <= length <= accept_num[b] + 1
        # finished exactly at the first EOS / length-limit token, else all accepted
        stop = [j for j, t in enumerate(tokens)
                if (eos >= 0 and t == eos) or seq_before[b] + j + 1 >= max_lens[b]]
        assert out["finished"][b] == bool(stop)
        assert length == (stop[0] + 1 if stop else accept_num[b] + 1)
        kept = full[:length]
        assert out["verified_id"][offset : offset + length].tolist() == tokens[:length].tolist()
        assert out["next_root"][b] == tokens[length - 1]
        row = out["req_to_token"][out["pool_idx"][b]]
        s0 = seq_before[b]
        assert row[s0 : s0 + length].tolist() == out["out_cache_loc"][kept].tolist()
        assert (row[:s0] == SENTINEL).all() and (row[s0 + length :] == SENTINEL).all()
        evict = out["evict_mask"][b * n : (b + 1) * n]
        assert (~evict).sum() == length and not evict[kept - b * n].any()
        assert out["seq_lens"][b] == s0 + length <= max_lens[b]
        offset += length
    assert (out["verified_id"][offset:] == SENTINEL).all()
    used = set(out["pool_idx"].tolist())
    others = [r for r in range(out["req_to_token"].shape[0]) if r not in used]
    assert (out["req_to_token"][others] == SENTINEL).all()


def check_compaction(finished, slots, inverse, count):
    alive = np.flatnonzero(~np.asarray(finished, bool))
    assert count == len(alive)
    assert slots[:count].tolist() == alive.tolist()  # ascending, stable
    assert (slots[count:] == -1).all()
    for i in range(count):
        assert inverse[slots[i]] == i  # active_inverse inverts active_slots
    assert (inverse[np.asarray(finished, bool)] == -1).all()


# --- hand-computed --------------------------------------------------------------------------


def test_hand_computed_batch():
    n, spec = 4, 3
    accept_index = np.array([[0, 2, 3], [4, -1, -1], [8, 9, -1]], I32)
    accept_num = np.array([2, 0, 1], I32)
    predicts = np.full(12, -1, I32)
    predicts[[0, 2, 3, 4, 8, 9]] = [11, 12, 13, 21, 2, 31]
    out = run_k7(accept_index, accept_num, predicts, [5, 0, 7], [60, 60, 50], n=n, eos=2,
                 pool_idx=np.array([2, 0, 1], I64))
    assert out["accept_length"].tolist() == [3, 1, 1]  # request 2 stops at its EOS
    assert out["verified_id"].tolist() == [11, 12, 13, 21, 2] + [SENTINEL] * 4
    assert out["next_root"].tolist() == [13, 21, 2]
    assert out["seq_lens"].tolist() == [8, 1, 8]
    assert out["finished"].tolist() == [False, False, True]
    assert out["req_to_token"][2, 5:8].tolist() == [1000, 1002, 1003]
    assert out["req_to_token"][0, 0] == 1004 and out["req_to_token"][1, 7] == 1008
    assert (out["req_to_token"] != SENTINEL).sum() == 5
    assert out["evict_mask"].astype(int).tolist() == [0, 1, 0, 0, 0, 1, 1, 1, 0, 1, 1, 1]
    assert spec == accept_index.shape[1]
    slots, inverse, count = compact(out["finished"])
    assert (slots.tolist(), inverse.tolist(), count) == ([0, 1, -1], [0, 1, -1], 2)


def test_length_limit_truncates_the_accepted_tokens():
    accept_index = np.array([[0, 1, 2, 3]], I32)
    predicts = np.array([10, 11, 12, 13], I32)
    out = run_k7(accept_index, np.array([3], I32), predicts, [5], [7], n=4)
    assert out["accept_length"].tolist() == [2] and out["finished"].tolist() == [True]
    assert out["seq_lens"].tolist() == [7] and out["next_root"].tolist() == [11]
    assert out["evict_mask"].tolist() == [False, False, True, True]
    # one short of the limit after everything: not finished
    out = run_k7(accept_index, np.array([3], I32), predicts, [5], [10], n=4)
    assert out["accept_length"].tolist() == [4] and not out["finished"][0]
    assert out["seq_lens"].tolist() == [9]


def test_negative_eos_disables_the_eos_check():
    accept_index = np.array([[0, 1]], I32)
    predicts = np.array([-1 + 1, 7], I32)  # token 0 would be EOS 0
    out = run_k7(accept_index, np.array([1], I32), predicts, [0], [64], n=2, eos=-1)
    assert out["accept_length"].tolist() == [2] and not out["finished"][0]
    out = run_k7(accept_index, np.array([1], I32), predicts, [0], [64], n=2, eos=0)
    assert out["accept_length"].tolist() == [1] and out["finished"][0]


# --- trees grown by the draft round ---------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_random_accept_paths(seed):
    rng = np.random.default_rng(seed)
    tree, n = verify_tree(seed, batch=6)
    spec = 5
    accept_index, accept_num, predicts = accept_paths(tree, n, spec, rng)
    seq = rng.integers(0, 30, size=6)
    max_lens = seq + rng.integers(1, 8, size=6)
    eos = int(tree["tokens"][rng.integers(6 * n)])  # some draft token may be the EOS
    out = run_k7(accept_index, accept_num, predicts, seq, max_lens, n=n, eos=eos)
    check_k7(out, accept_index, accept_num, predicts, seq, max_lens, n, eos)
    check_compaction(out["finished"], *compact(out["finished"]))


def test_accept_length_one_everywhere():
    rng = np.random.default_rng(5)
    tree, n = verify_tree(5, batch=4)
    accept_index, accept_num, predicts = accept_paths(tree, n, 4, rng, lengths=[0] * 4)
    out = run_k7(accept_index, accept_num, predicts, [3] * 4, [64] * 4, n=n)
    assert out["accept_length"].tolist() == [1] * 4
    assert out["verified_id"][:4].tolist() == [5000, 5001, 5002, 5003]  # bonus tokens only
    assert out["seq_lens"].tolist() == [4] * 4
    assert out["evict_mask"].reshape(4, n)[:, 1:].all()
    check_k7(out, accept_index, accept_num, predicts, [3] * 4, [64] * 4, n, -1)


def test_everything_accepted():
    rng = np.random.default_rng(6)
    tree, n = verify_tree(6, batch=3)
    spec = 5  # the deepest paths: S - 1 = 4 accepted draft tokens, depth labels 1..4
    accept_index, accept_num, predicts = accept_paths(tree, n, spec, rng, lengths=[4] * 3)
    out = run_k7(accept_index, accept_num, predicts, [0, 10, 20], [64] * 3, n=n)
    assert out["accept_length"].tolist() == [spec] * 3
    assert (out["verified_id"] != SENTINEL).all()  # B*S entries, all used
    assert out["next_root"].tolist() == [5000, 5001, 5002]
    check_k7(out, accept_index, accept_num, predicts, [0, 10, 20], [64] * 3, n, -1)


def test_every_request_finishes():
    rng = np.random.default_rng(7)
    tree, n = verify_tree(7, batch=4)
    accept_index, accept_num, predicts = accept_paths(tree, n, 4, rng)
    predicts[accept_index[:, 0]] = 2  # the first token of every request is EOS
    out = run_k7(accept_index, accept_num, predicts, [1, 2, 3, 4], [64] * 4, n=n, eos=2)
    assert out["finished"].all() and out["accept_length"].tolist() == [1] * 4
    assert out["next_root"].tolist() == [2] * 4
    slots, inverse, count = compact(out["finished"])
    assert count == 0 and (slots == -1).all() and (inverse == -1).all()


def test_requests_finish_in_the_middle_of_the_batch():
    rng = np.random.default_rng(8)
    tree, n = verify_tree(8, batch=6)
    accept_index, accept_num, predicts = accept_paths(tree, n, 5, rng, lengths=[3] * 6)
    predicts[accept_index[1, 1]] = 2  # request 1: EOS as its second token
    seq = np.array([4, 4, 4, 4, 4, 4])
    max_lens = np.array([64, 64, 64, 64, 6, 64])  # request 4: limit after two tokens
    out = run_k7(accept_index, accept_num, predicts, seq, max_lens, n=n, eos=2)
    assert out["finished"].tolist() == [False, True, False, False, True, False]
    assert out["accept_length"].tolist() == [4, 2, 4, 4, 2, 4]
    assert out["verified_id"][4:6].tolist() == [predicts[accept_index[1, 0]], 2]
    check_k7(out, accept_index, accept_num, predicts, seq, max_lens, n, 2)
    slots, inverse, count = compact(out["finished"])
    assert slots.tolist() == [0, 2, 3, 5, -1, -1]
    assert inverse.tolist() == [0, -1, 1, 2, -1, 3]
    check_compaction(out["finished"], slots, inverse, count)


def test_pipeline_with_the_greedy_k6_golden():
    """K4 -> K6 (``verify_tree_greedy``) -> K7 -> compaction on a grown tree."""
    rng = np.random.default_rng(9)
    tree, n = verify_tree(9, batch=5)
    batch, spec = 5, 5
    # the target agrees with a random child of every node (or with nothing, at random)
    target = rng.integers(0, 1000, size=batch * n).astype(I64)
    for b in range(batch):
        for i in range(n):
            c, kids = tree["next"][b, i], []
            while c != -1:
                kids.append(int(c))
                c = tree["side"][b, c]
            if kids and rng.random() < 0.8:
                target[b * n + i] = tree["tokens"][b * n + kids[rng.integers(len(kids))]]
    predicts = np.full(batch * n + 1, -1, I32)  # SGLang's allocation
    accept_index = np.full((batch, spec), -1, I32)
    accept_num = np.zeros(batch, I32)
    verify_tree_greedy(predicts, accept_index, accept_num,
                          tree["tokens"].reshape(batch, n), tree["retrive_index"],
                          tree["next"], tree["side"], target)
    seq = np.array([0, 5, 9, 1, 2])
    max_lens = np.array([64, 7, 64, 64, 3])
    eos = int(predicts[accept_index[2, 0]])  # request 2 stops at its first token
    out = run_k7(accept_index, accept_num, predicts, seq, max_lens, n=n, eos=eos)
    check_k7(out, accept_index, accept_num, predicts, seq, max_lens, n, eos)
    assert out["finished"][2] and out["accept_length"][2] == 1
    slots, inverse, count = compact(out["finished"])
    check_compaction(out["finished"], slots, inverse, count)
    # the next round's roots, in the compacted order
    assert out["next_root"][slots[:count]].tolist() == [
        predicts[accept_index[b, out["accept_length"][b] - 1]] for b in slots[:count]]


# --- compaction -----------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 2, 7, 64])
def test_active_inverse_inverts_active_slots(batch):
    rng = np.random.default_rng(batch)
    for p in (0.0, 0.3, 0.7, 1.0):
        finished = rng.random(batch) < p
        check_compaction(finished, *compact(finished))


def test_no_request_finished():
    slots, inverse, count = compact(np.zeros(5, bool))
    assert slots.tolist() == inverse.tolist() == [0, 1, 2, 3, 4] and count == 5


def test_empty_batches_are_no_ops():
    """B = 0: compaction reports 0 active rows (the count is written, as for any batch) and
    K7 leaves ``req_to_token`` (and SGLang's spare predicts entry) untouched."""
    count = np.full(1, -5, I64)
    assert compact_active_slots(np.zeros(0, bool), 0, np.zeros(0, I64), np.zeros(0, I64),
                                count) is None
    assert count.tolist() == [0]
    z32, z64 = np.zeros(0, I32), np.zeros(0, I64)
    table = np.arange(16, dtype=I64).reshape(2, 8)
    spare = np.full(1, -1, I32)
    assert update_verify_result(np.zeros((0, 3), I32), z32, spare, z64, z64, z64, 0, 4, 3, 8,
                                2, z64, table, z32, z32, z64, np.zeros(0, bool),
                                np.zeros(0, bool)) is None
    assert table.tolist() == np.arange(16).reshape(2, 8).tolist()
    assert spare.tolist() == [-1]


# --- validation -----------------------------------------------------------------------------


def base_args():
    return dict(
        accept_index=np.array([[0, 1], [2, -1]], I32), accept_token_num=np.array([1, 0], I32),
        predicts=np.array([5, 6, 7, 8], I32), out_cache_loc=np.arange(4, dtype=I64),
        req_pool_indices=np.array([0, 1], I64), max_seq_lens=np.array([8, 8], I64),
        batch_size=2, num_draft_tokens=2, num_speculative_tokens=2, max_context_len=8,
        eos_token_id=-1, seq_lens=np.array([0, 3], I64), req_to_token=np.full(16, -9, I64),
        accept_length=np.zeros(2, I32), verified_id=np.zeros(4, I32),
        next_root=np.zeros(2, I64), evict_mask=np.zeros(4, bool), finished=np.zeros(2, bool))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"accept_token_num": np.array([2, 0], I32)},
         "`accept_token_num` values must be between 0 and `num_speculative_tokens` - 1"),
        ({"accept_index": np.array([[1, 0], [2, -1]], I32)},
         "`accept_index`\\[0, 0\\] must be the root's flat id 0, not 1"),
        ({"accept_index": np.array([[0, 2], [2, -1]], I32)},
         "`accept_index` of request 0 must lie in 0..1, not 2"),
        ({"accept_index": np.array([[0, 0], [2, -1]], I32)},
         "`accept_index` of request 0 repeats a flat id"),
        ({"predicts": np.array([5, -1, 7, 8], I32)}, "must be token ids \\(>= 0\\), not -1"),
        ({"req_pool_indices": np.array([1, 1], I64)}, "`req_pool_indices` must be distinct"),
        ({"req_pool_indices": np.array([0, 2], I64)}, "`req_pool_indices` values must be"),
        ({"max_seq_lens": np.array([8, 9], I64)},
         "`max_seq_lens` values must be between 1 and `max_context_len` \\(8\\), not 9"),
        ({"seq_lens": np.array([0, 8], I64)}, "`seq_lens`\\[1\\] must be between 0 and"),
        ({"req_to_token": np.zeros(15, I64)}, "multiple of `max_context_len` \\(8\\)"),
        ({"predicts": np.zeros(4, I64)}, "`predicts` must have dtype int32"),
        ({"verified_id": np.zeros(3, I32)}, "`verified_id` must have 4 elements"),
        ({"num_draft_tokens": 0}, "`num_draft_tokens` must be at least 1, not 0"),
    ],
)
def test_update_validation_writes_nothing(changes, message):
    args = base_args()
    args.update(changes)
    table_before = args["req_to_token"].copy()
    with pytest.raises(ValueError, match=message):
        update_verify_result(**args)
    assert (args["req_to_token"] == table_before).all()
    assert (args["seq_lens"] == base_args()["seq_lens"]).all() or "seq_lens" in changes
    assert not args["accept_length"].any() and not args["evict_mask"].any()


def test_base_args_are_valid():
    args = base_args()
    update_verify_result(**args)
    assert args["accept_length"].tolist() == [2, 1]
    assert args["verified_id"].tolist() == [5, 6, 7, 0]
    assert args["req_to_token"].reshape(2, 8)[1, 3] == 2


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"finished": np.zeros(3, bool)}, "`finished` must have 2 elements"),
        ({"active_slots": np.zeros(2, I32)}, "`active_slots` must have dtype int64"),
        ({"active_count": np.zeros(2, I64)}, "`active_count` must have 1 elements"),
        ({"batch_size": -1}, "`batch_size` must be at least 0, not -1"),
    ],
)
def test_compact_validation(changes, message):
    args = dict(finished=np.zeros(2, bool), batch_size=2, active_slots=np.zeros(2, I64),
                active_inverse=np.zeros(2, I64), active_count=np.zeros(1, I64))
    args.update(changes)
    with pytest.raises(ValueError, match=message):
        compact_active_slots(**args)
