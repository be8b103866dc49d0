"""Draft-round driver (§4): a hand-computed round, tree invariants over 15 synthetic depths."""

import numpy as np
import pytest

from golden.draft_round import (
    DraftRoundConfig,
    DraftSample,
    draft_round,
    synthetic_sampler,
)

F32 = np.float32
SCALE = np.array([0x3F7FF972], dtype=np.uint32).view(F32)[0]
ROOT = np.array([0x3F8020C5], dtype=np.uint32).view(F32)[0]


def config(**changes):
    base = dict(batch_size=2, node_top_k=8, max_tree_width=8, depths=15, verify_num=64,
                max_verify_num=64, max_node_count=1024, max_input_size=128, hidden_size=4)
    base.update(changes)
    return DraftRoundConfig(**base)


def replay(probas, tokens):
    """Sampler answering depth d with the first W*K columns of ``probas[d]``/``tokens[d]``."""

    k = probas[1].shape[1]  # depth 1 has one frontier node

    def sample(depth, frontier):
        n = frontier.node_ids.shape[1] * k
        return DraftSample(np.array(probas[depth][:, :n], F32),
                           np.array(tokens[depth][:, :n], np.int64))

    return sample


# --- a round small enough to compute by hand ------------------------------------------------

HAND_PROBAS = {1: [[0.5, 0.25]], 2: [[0.5, 0.25, 0.75, 0.125]]}
HAND_TOKENS = {1: [[10, 11]], 2: [[20, 21, 22, 23]]}


def hand_round(cost):
    cfg = config(batch_size=1, node_top_k=2, max_tree_width=2, depths=2, verify_num=4,
                 max_verify_num=8, max_node_count=16, max_input_size=8, hidden_size=0,
                 cost_per_node=cost)
    probas = {d: np.array(p, F32) for d, p in HAND_PROBAS.items()}
    tokens = {d: np.array(t, np.int64) for d, t in HAND_TOKENS.items()}
    return draft_round(cfg, replay(probas, tokens), np.array([7], np.int64))


def test_hand_computed_round_full_width():
    r = hand_round(0.0)
    assert r.stop_reason == "depths" and r.cumu_count == 7
    assert [d.tree_width for d in r.depths] == [1, 2]
    n = slice(0, 7)
    assert r.cumu_tokens[0, n].tolist() == [7, 10, 11, 20, 21, 22, 23]
    # depth 1 raw; depth 2: parent path (0.5 / 0.25) * prob, then one multiply by 0.9999f
    expected = [ROOT, F32(0.5), F32(0.25)] + [F32(F32(x) * SCALE)
                                              for x in (0.25, 0.125, 0.1875, 0.03125)]
    assert r.cumu_scores[0, n].view(np.uint32).tolist() == np.array(expected, F32).view(
        np.uint32).tolist()
    assert r.cumu_deltas[0, n].tolist() == [0, 1, 1, 2, 2, 2, 2]
    assert r.prev_indexs[0, n].tolist() == [-1, 0, 0, 1, 1, 2, 2]
    assert r.next_indexs[0, n].tolist() == [1, 3, 5, -1, -1, -1, -1]
    assert r.side_indexs[0, n].tolist() == [-1, 2, -1, 4, -1, 6, -1]
    assert r.sort_scores[0, :4].tolist() == [ROOT, 0.5, 0.25, 0.25]
    assert r.work_scores[0, :6].tolist() == [ROOT, 0.5, 0.25, 0.25, 0.1875, 0.0]
    d1, d2 = r.depths
    assert d1.work_deltas.tolist() == [0.0, 0.5, 0.75]  # v = 4: both enter free
    assert d2.work_deltas.tolist() == [0.0, 0.25, 0.25]  # second (0.1875) < A[2] = 0.25
    assert d2.frontier.node_ids.tolist() == [[1, 2]]
    assert d2.frontier.scores.tolist() == [[0.5, 0.25]]
    assert d2.cache_topk_indices.tolist() == [[3, 5]]
    assert d2.output_tokens.tolist() == [[20, 22]]
    assert d1.input_tree_mask.shape == (1, 1, 0) and d2.input_count == 3
    assert d2.input_tree_mask.tolist() == [[[True, False], [False, True]]]
    assert r.mask_nodes.tolist() == [[1, 2]]


def test_hand_computed_round_cost_narrows_the_frontier():
    r = hand_round(0.3)  # depth-1 marginals 0.5, 0.25 -> W' = 1
    assert [d.tree_width for d in r.depths] == [1, 1]
    assert r.cumu_count == 5
    assert r.next_indexs[0, :5].tolist() == [1, 3, -1, -1, -1]
    assert r.cumu_tokens[0, 3:5].tolist() == [20, 21]
    assert r.depths[1].input_tree_mask.tolist() == [[[True]]]


# --- invariants over a synthetic 15-depth round ---------------------------------------------


def children(r, b, p):
    c = r.next_indexs[b, p]
    out = []
    while c != -1:
        out.append(int(c))
        c = r.side_indexs[b, c]
    return out


def path_scores(r, b):
    """Unscaled left-to-right float32 path products per node (root: 1.0), from the samples."""
    path = {0: F32(1.0)}
    for rec in r.depths:
        k = r.config.node_top_k
        for t, p in enumerate(rec.sample.probas[b]):
            parent = int(rec.frontier.node_ids[b, t // k])
            path[rec.cumu_count + t] = F32(path[parent] * p)
    return path


def ancestors(r, b, n):
    out = set()
    while n > 0:
        out.add(n)
        n = int(r.prev_indexs[b, n])
    return out


def check_invariants(r):
    cfg = r.config
    k, count = cfg.node_top_k, r.cumu_count
    for b in range(cfg.batch_size):
        # every node reached exactly once from the root through next/side links
        seen, stack = [], [0]
        while stack:
            p = stack.pop()
            seen.append(p)
            for c in children(r, b, p):
                assert r.prev_indexs[b, c] == p
                stack.append(c)
        assert sorted(seen) == list(range(count))
        assert r.prev_indexs[b, 0] == -1 and r.cumu_deltas[b, 0] == 0
        nodes = np.arange(1, count)
        parents = r.prev_indexs[b, nodes]
        assert (r.cumu_deltas[b, nodes] == r.cumu_deltas[b, parents] + 1).all()
        assert (r.cumu_scores[b, nodes] <= r.cumu_scores[b, parents]).all()
        path = path_scores(r, b)
        for rec in r.depths:
            block = slice(rec.cumu_count, rec.cumu_count + rec.tree_width * k)
            assert (r.cumu_deltas[b, block] == rec.depth).all()
            assert (r.cumu_tokens[b, block] == rec.sample.tokens[b]).all()
            ids = range(block.start, block.stop)
            stored = [path[n] if rec.depth == 1 else F32(path[n] * SCALE) for n in ids]
            assert r.cumu_scores[b, block].tolist() == stored
            check_frontier_and_mask(r, b, rec, path)
        unscaled = sorted([ROOT] + [path[n] for n in range(1, count)], reverse=True)
        v = min(cfg.verify_num, count)
        assert r.sort_scores[b, :v].tolist() == unscaled[:v]


def check_frontier_and_mask(r, b, rec, path):
    ids = rec.frontier.node_ids[b]
    assert rec.frontier.scores[b].tolist() == [path[int(n)] for n in ids]
    assert (rec.frontier.tokens[b] == r.cumu_tokens[b, ids]).all()
    if rec.depth > 1:
        # the frontier is the W best of the previous depth (by unscaled path score)
        prev = r.depths[rec.depth - 2]
        layer = range(prev.cumu_count, rec.cumu_count)
        rest = [path[n] for n in layer if n not in set(ids.tolist())]
        assert min(path[int(n)] for n in ids) >= max(rest, default=-1.0)
        slots = [prev.frontier.node_ids[b].tolist().index(r.prev_indexs[b, n]) for n in ids]
        if prev.sample.hidden_states is not None:
            assert (rec.frontier.hidden_states[b] == prev.sample.hidden_states[b, slots]).all()
    columns = r.mask_nodes[b, : rec.input_count - 1]
    for w, n in enumerate(ids):
        expect = [int(c) in ancestors(r, b, int(n)) for c in columns]
        assert rec.input_tree_mask[b, w].tolist() == expect


@pytest.mark.parametrize(("seed", "cost"), [(0, 0.0), (1, 0.0), (2, 0.001), (3, 0.001)])
def test_synthetic_round_invariants(seed, cost):
    cfg = config(cost_per_node=cost)
    r = draft_round(cfg, synthetic_sampler(seed, 32_000, 8, hidden_size=4),
                    np.array([101, 202], np.int64),
                    root_hidden_states=np.ones((2, 1, 4), F32))
    if cost == 0.0:
        # zero cost: every marginal >= 0, so the frontier stays at full width
        assert r.stop_reason == "depths" and len(r.depths) == 15
        assert r.cumu_count == 1 + 8 + 14 * 64
    else:
        assert r.stop_reason == "width_zero" and 1 < len(r.depths) < 15
        assert len({d.tree_width for d in r.depths[1:]}) > 1
    assert r.depths[0].tree_width == 1 and r.cumu_tokens[:, 0].tolist() == [101, 202]
    assert r.cumu_scores[:, 1:9].tolist() == r.depths[0].sample.probas.tolist()  # raw layer 1
    assert (r.depths[0].frontier.hidden_states == 1.0).all()
    check_invariants(r)


def test_paper_point_k10_w10_on_the_128_lane_sort():
    cfg = config(node_top_k=10, max_tree_width=10, depths=4, sort_width=128, hidden_size=0)
    r = draft_round(cfg, synthetic_sampler(5, 1000, 10), np.array([1, 2], np.int64))
    assert [d.tree_width for d in r.depths] == [1, 10, 10, 10]
    check_invariants(r)


def test_hot_token_remap_stores_target_ids():
    hot = (np.arange(50, dtype=np.int64) * 7 + 3)
    cfg = config(node_top_k=4, max_tree_width=4, depths=3, hidden_size=0)
    r = draft_round(cfg, synthetic_sampler(6, 50, 4), np.array([0, 1], np.int64),
                    hot_token_id=hot)
    for rec in r.depths:
        block = slice(rec.cumu_count, rec.cumu_count + rec.tree_width * 4)
        assert (r.cumu_tokens[:, block] == hot[rec.sample.tokens]).all()
        assert rec.sample.tokens.max() < 50  # the sampler's own array is not remapped
    assert (r.depths[1].frontier.tokens == r.depths[0].output_tokens).all()


# --- stop rules -----------------------------------------------------------------------------


def run(**changes):
    cfg = config(**{"node_top_k": 4, "max_tree_width": 4, "hidden_size": 0, **changes})
    return draft_round(cfg, synthetic_sampler(9, 100, 4), np.array([0, 0], np.int64))


def test_stop_when_width_is_zero():
    r = run(cost_per_node=10.0)
    assert r.stop_reason == "width_zero" and len(r.depths) == 1 and r.cumu_count == 5
    assert r.depths[0].next_tree_width == 0


def test_stop_after_the_configured_depths():
    r = run(depths=3)
    assert r.stop_reason == "depths" and [d.depth for d in r.depths] == [1, 2, 3]


@pytest.mark.parametrize(("max_node_count", "depths_run"),
                         [(1 + 4 + 16 - 1, 1), (1 + 4 + 16, 2), (1 + 4 + 32 - 1, 2),
                          (1 + 4 + 32, 3)])
def test_stop_before_the_node_budget_overflows(max_node_count, depths_run):
    r = run(max_node_count=max_node_count)
    assert r.stop_reason == "node_budget" and len(r.depths) == depths_run
    assert r.cumu_count <= max_node_count


@pytest.mark.parametrize(("max_input_size", "depths_run"), [(3, 1), (4, 2), (8, 3)])
def test_stop_before_the_mask_columns_overflow(max_input_size, depths_run):
    r = run(max_input_size=max_input_size)
    assert r.stop_reason == "input_budget" and len(r.depths) == depths_run
    assert r.depths[-1].input_count <= max_input_size + 1


def test_max_tree_width_caps_the_policy():
    r = run(max_tree_width=2, depths=4)
    assert [d.tree_width for d in r.depths] == [1, 2, 2, 2]
    assert all(d.next_tree_width == 2 for d in r.depths)


def test_widths_replace_the_policy_and_end_the_round():
    cfg = config(node_top_k=4, max_tree_width=4, hidden_size=0, depths=6, cost_per_node=10.0)
    r = draft_round(cfg, synthetic_sampler(9, 100, 4), np.array([0, 0], np.int64),
                    widths=[3, 1, 4])
    # cost_per_node = 10 would stop after depth 1; the widths keep the round going
    assert [d.tree_width for d in r.depths] == [1, 3, 1, 4]
    assert [d.next_tree_width for d in r.depths] == [3, 1, 4, 0]
    assert r.stop_reason == "width_zero" and r.cumu_count == 1 + 4 * (1 + 3 + 1 + 4)
    stopped = draft_round(cfg, synthetic_sampler(9, 100, 4), np.array([0, 0], np.int64),
                          widths=[2, 0, 4])
    assert [d.tree_width for d in stopped.depths] == [1, 2]


@pytest.mark.parametrize(("widths", "message"), [
    ([1, 5], "`widths\\[1\\]` must be between 0 and `max_tree_width`, not 5"),
    ([-1], "`widths\\[0\\]` must be between 0 and `max_tree_width`, not -1"),
    ([1.5], "`widths\\[0\\]` must be an integer, not 1.5"),
    (3, "`widths` must be a sequence of integers, not 3"),
])
def test_widths_are_checked(widths, message):
    cfg = config(node_top_k=4, max_tree_width=4, hidden_size=0)
    with pytest.raises(ValueError, match=message):
        draft_round(cfg, synthetic_sampler(9, 100, 4), np.array([0, 0], np.int64),
                    widths=widths)


# --- sampler and validation -----------------------------------------------------------------


def test_synthetic_sampler_distributions():
    sampler = synthetic_sampler(3, 20, 8, hidden_size=2)
    cfg = config(batch_size=3, max_tree_width=5, hidden_size=2)
    r = draft_round(cfg, sampler, np.zeros(3, np.int64))
    for rec in r.depths:
        p = rec.sample.probas.reshape(-1, 8)
        assert (np.diff(p, axis=1) <= 0).all() and (p >= 0).all()
        assert (p.astype(np.float64).sum(axis=1) <= 1.0).all()
        t = rec.sample.tokens.reshape(-1, 8)
        assert all(len(set(row)) == 8 for row in t.tolist()) and t.min() >= 0 and t.max() < 20
        assert rec.sample.hidden_states.shape == (3, rec.tree_width, 2)
    again = draft_round(cfg, synthetic_sampler(3, 20, 8, hidden_size=2), np.zeros(3, np.int64))
    assert (again.cumu_scores == r.cumu_scores).all()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_tree_width": 9}, "`max_tree_width` must be between 1 and `node_top_k`, not 9"),
        ({"node_top_k": 16, "max_tree_width": 5},
         "`node_top_k` \\* `max_tree_width` must be at most `sort_width` \\(64\\), not 80"),
        ({"max_node_count": 8}, "`max_node_count` must be at least 1 \\+ `node_top_k`, not 8"),
        ({"batch_size": 0}, "`batch_size` must be at least 1, not 0"),
        ({"depths": 0}, "`depths` must be at least 1, not 0"),
        ({"sort_width": 32}, "`sort_width` must be 64 or 128, not 32"),
        ({"verify_num": 1.5}, "`verify_num` must be an integer"),
    ],
)
def test_config_validation(changes, message):
    with pytest.raises(ValueError, match=message):
        config(**changes)


def test_malformed_sampler_answer_is_rejected():
    def bad(depth, frontier):
        return DraftSample(np.zeros((2, 8), np.float64), np.zeros((2, 8), np.int64))

    with pytest.raises(ValueError, match="`DraftSample.probas` must be float32 of shape"):
        draft_round(config(), bad, np.zeros(2, np.int64))


def test_root_tokens_shape_is_checked():
    with pytest.raises(ValueError, match="`root_tokens` must be int64 of shape \\(2,\\)"):
        draft_round(config(), synthetic_sampler(0, 100, 8), np.zeros(3, np.int64))
