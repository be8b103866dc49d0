"""K4 verify-tree build (§6): the SGLang-compatible op, the fused op, and their agreement.

Expectations come from hand-computed trees, from Python-int bit arithmetic for the packed
layout, and from node-id walks over ``prev_indexs``/``cumu_deltas`` (never from the ops'
own per-position recurrences).
"""

import numpy as np
import pytest

from golden.draft_round import DraftRoundConfig, DraftSample, draft_round, synthetic_sampler
from golden.tree_mask import (
    TreeMaskMode,
    build_tree_kernel_efficient,
    fused_tree_mask_operator,
    packed_row_bytes,
    select_verify_nodes,
    sglang_packed_row_bytes,
    tree_mask_size,
    unpack_tree_mask,
)

F32 = np.float32
FULL, QLEN, PACKED = (TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY,
                      TreeMaskMode.QLEN_ONLY_BITPACKING)
MODES = (FULL, QLEN, PACKED)


# --- helpers --------------------------------------------------------------------------------


class Tree:
    """Cumulative-tree arrays [B, MAXN] (§0 order) plus ``cumu_count``."""

    def __init__(self, tokens, scores, deltas, prev, count):
        self.tokens, self.scores, self.deltas, self.prev = tokens, scores, deltas, prev
        b, maxn = tokens.shape
        self.next = np.full((b, maxn), -1, np.int64)  # not read by the op
        self.side = np.full((b, maxn), -1, np.int64)
        self.count = count

    @classmethod
    def from_parents(cls, parents, scores, maxn=None):
        """One tree per request from parent lists (root parent -1) and scores."""
        parents = [list(p) for p in parents]
        count = len(parents[0])
        maxn = maxn or count + 3
        b = len(parents)
        tokens = np.full((b, maxn), -5, np.int64)
        deltas = np.full((b, maxn), -1, np.int64)
        prev = np.full((b, maxn), -1, np.int64)
        s = np.zeros((b, maxn), F32)
        for r, (p, sc) in enumerate(zip(parents, scores, strict=True)):
            prev[r, :count] = p
            s[r, :count] = np.asarray(sc, F32)
            tokens[r, :count] = 1000 * (r + 1) + np.arange(count)
            for i in range(count):
                deltas[r, i] = 0 if i == 0 else deltas[r, p[i]] + 1
        return cls(tokens, s, deltas, prev, count)

    @classmethod
    def from_round(cls, r):
        return cls(r.cumu_tokens, r.cumu_scores, r.cumu_deltas, r.prev_indexs, r.cumu_count)

    @property
    def arrays(self):
        return (self.tokens, self.scores, self.deltas, self.prev, self.next, self.side)


def run_fused(tree, seq_lens, verify_num, mode):
    """Call the fused op on sentinel-filled buffers; return the outputs (shaped)."""
    seq = np.asarray(seq_lens, np.int64)
    b, maxn = tree.tokens.shape
    n = min(verify_num, tree.count)
    size = tree_mask_size(mode, seq, n)
    if mode == PACKED:
        mask = np.full(size, 0xA5, np.uint8)
    else:
        mask = np.arange(size) % 3 == 1  # neither all true nor all false
    out = {
        "mask": mask,
        "positions": np.full(b * n, -777, np.int64),
        "retrive_index": np.full((b, n), -777, np.int64),
        "retrive_next_token": np.full((b, n), -777, np.int64),
        "retrive_next_sibling": np.full((b, n), -777, np.int64),
        "draft_tokens": np.full(b * n, -777, np.int64),
    }
    fused_tree_mask_operator(*tree.arrays, seq, b, tree.count, verify_num, maxn, int(mode),
                             *out.values())
    if mode == QLEN:
        out["mask"] = mask.reshape(b, n, n)
    elif mode == PACKED:
        out["mask"] = mask.reshape(b, n, packed_row_bytes(n))
    out["n"] = n
    return out


def full_mask_blocks(mask, seq_lens, n):
    """Split a FULL_MASK buffer into per-request [n, seq_len + n] matrices."""
    blocks, offset = [], 0
    for s in seq_lens:
        blocks.append(mask[offset : offset + n * (s + n)].reshape(n, s + n))
        offset += n * (s + n)
    assert offset == mask.size
    return blocks


def expected_set(tree, b, n):
    """Root + the n-1 best non-root nodes by (score desc, id asc), ascending ids."""
    ids = np.arange(1, tree.count)
    order = np.lexsort((ids, -tree.scores[b, 1 : tree.count].astype(np.float64)))
    return [0] + sorted(ids[order[: n - 1]].tolist())


def node_ancestors(tree, b, node):
    out = [node]
    while node != 0:
        node = int(tree.prev[b, node])
        out.append(node)
    return out


def check_verify_tree(tree, seq_lens, verify_num):
    """All §6 properties, for all three layouts, on every request."""
    outs = {mode: run_fused(tree, seq_lens, verify_num, mode) for mode in MODES}
    q = outs[QLEN]
    n = q["n"]
    assert n == min(verify_num, tree.count)
    full = full_mask_blocks(outs[FULL]["mask"], seq_lens, n)
    for mode in (FULL, PACKED):  # everything but the mask is layout-independent
        for key in ("positions", "retrive_index", "retrive_next_token", "retrive_next_sibling",
                    "draft_tokens"):
            assert (outs[mode][key] == q[key]).all()
    for b, seq_len in enumerate(seq_lens):
        nodes = expected_set(tree, b, n)
        pos = {node: i for i, node in enumerate(nodes)}
        # ancestor-closed (§4: child score <= parent score, ties to the lower id)
        assert all(int(tree.prev[b, v]) in pos for v in nodes[1:])
        assert q["draft_tokens"][b * n : (b + 1) * n].tolist() == tree.tokens[b, nodes].tolist()
        depth = tree.deltas[b, nodes]
        assert q["positions"][b * n : (b + 1) * n].tolist() == (seq_len + depth).tolist()
        assert q["retrive_index"][b].tolist() == list(range(b * n, (b + 1) * n))
        for i, v in enumerate(nodes):
            row = np.zeros(n, bool)
            row[[pos[a] for a in node_ancestors(tree, b, v)]] = True
            assert (q["mask"][b, i] == row).all(), (b, i)
            assert row.sum() == depth[i] + 1
            kids = [pos[c] for c in nodes if c != 0 and int(tree.prev[b, c]) == v]
            assert q["retrive_next_token"][b, i] == (kids[0] if kids else -1)
            for c, nxt in zip(kids, kids[1:] + [-1] if kids else [], strict=True):
                assert q["retrive_next_sibling"][b, c] == nxt
        assert q["retrive_next_sibling"][b, 0] == -1
        assert (full[b][:, :seq_len]).all() and (full[b][:, seq_len:] == q["mask"][b]).all()
    packed = outs[PACKED]["mask"]
    assert packed.shape == (len(seq_lens), n, (n + 7) // 8)
    assert (unpack_tree_mask(packed, n) == q["mask"]).all()
    pad = np.unpackbits(packed, axis=-1, bitorder="little")[..., n:]
    assert not pad.any()
    return outs


def run_round(seed, batch=2, k=4, width=4, depths=4, cost=0.0, verify_num=64, sort_width=64):
    cfg = DraftRoundConfig(batch_size=batch, node_top_k=k, max_tree_width=width, depths=depths,
                           verify_num=verify_num, max_verify_num=max(verify_num, 1),
                           max_node_count=2048, max_input_size=512, cost_per_node=cost,
                           sort_width=sort_width)
    roots = np.arange(batch, dtype=np.int64) + 7
    return draft_round(cfg, synthetic_sampler(seed, 5000, k), roots)


# --- fused op: directed cases ---------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("parents", "verify_num"), [([-1, 0, 0], 1), ([-1], 5)])
def test_verify_set_of_one_is_the_root(mode, parents, verify_num):
    tree = Tree.from_parents([parents, parents], [[1.001, 0.5, 0.4][: len(parents)]] * 2)
    out = run_fused(tree, [3, 0], verify_num, mode)
    assert out["n"] == 1
    assert out["positions"].tolist() == [3, 0]
    assert out["retrive_index"].tolist() == [[0], [1]]
    assert out["retrive_next_token"].tolist() == [[-1], [-1]]
    assert out["retrive_next_sibling"].tolist() == [[-1], [-1]]
    assert out["draft_tokens"].tolist() == [1000, 2000]
    if mode == FULL:
        assert out["mask"].tolist() == [True] * 4 + [True]
    elif mode == QLEN:
        assert out["mask"].tolist() == [[[True]], [[True]]]
    else:
        assert out["mask"].tolist() == [[[1]], [[1]]]


def test_hand_computed_tree_all_layouts():
    # root 0 -> {1, 2}; 1 -> {3, 4}; 2 -> {5}; 3 -> {6}; scores pick {1, 2, 3, 5, 6} at n = 6
    parents = [-1, 0, 0, 1, 1, 2, 3]
    scores = [1.001, 0.6, 0.5, 0.4, 0.1, 0.3, 0.2]
    tree = Tree.from_parents([parents], [scores])
    outs = check_verify_tree(tree, [5], 6)
    q = outs[QLEN]
    assert q["draft_tokens"].tolist() == [1000, 1001, 1002, 1003, 1005, 1006]
    assert q["positions"].tolist() == [5, 6, 6, 7, 7, 8]
    assert q["retrive_next_token"].tolist() == [[1, 3, 4, 5, -1, -1]]
    assert q["retrive_next_sibling"].tolist() == [[-1, 2, -1, -1, -1, -1]]
    assert q["mask"][0].astype(int).tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0],
        [1, 1, 0, 1, 0, 0],
        [1, 0, 1, 0, 1, 0],
        [1, 1, 0, 1, 0, 1],
    ]
    assert outs[PACKED]["mask"][0, :, 0].tolist() == [0b1, 0b11, 0b101, 0b1011, 0b10101, 0b101011]


@pytest.mark.parametrize("n", [2, 8, 9, 16, 17, 64, 65, 128])
def test_chain_packs_across_byte_boundaries(n):
    # a chain of n nodes plus a low-scored leaf under the root that is never selected
    parents = [-1] + list(range(n - 1)) + [0]
    scores = [1.001] + [1.0 - i / 1024 for i in range(1, n)] + [0.0]
    tree = Tree.from_parents([parents], [scores])
    outs = check_verify_tree(tree, [11], n)
    width = (n + 7) // 8
    for i in range(n):
        row = (2 ** (i + 1) - 1).to_bytes(width, "little")  # columns 0..i
        assert bytes(outs[PACKED]["mask"][0, i]) == row
    q = outs[QLEN]
    assert q["positions"].tolist() == list(range(11, 11 + n))
    assert q["retrive_next_token"][0].tolist() == list(range(1, n)) + [-1]
    assert (q["retrive_next_sibling"] == -1).all()


@pytest.mark.parametrize("n", [8, 9, 16, 17, 64, 65, 128])
def test_star_packs_across_byte_boundaries(n):
    parents = [-1] + [0] * (n - 1)
    scores = [1.001] + [0.9] * (n - 1)  # all tied: ascending ids
    tree = Tree.from_parents([parents, parents], [scores, scores])
    outs = check_verify_tree(tree, [0, 2], n)
    width = (n + 7) // 8
    for i in range(n):
        assert bytes(outs[PACKED]["mask"][1, i]) == (1 | (1 << i)).to_bytes(width, "little")
    q = outs[QLEN]
    assert q["retrive_next_token"][:, 0].tolist() == [1, 1]
    assert q["retrive_next_sibling"][0].tolist() == [-1] + list(range(2, n)) + [-1]
    assert q["positions"].tolist() == [0] + [1] * (n - 1) + [2] + [3] * (n - 1)


@pytest.mark.parametrize(("arity", "levels"), [(2, 6), (4, 3), (8, 2)])
def test_full_tree_selects_everything(arity, levels):
    parents, frontier = [-1], [0]
    for _ in range(levels):
        nxt = []
        for p in frontier:
            for _ in range(arity):
                parents.append(p)
                nxt.append(len(parents) - 1)
        frontier = nxt
    count = len(parents)
    scores = [1.001] + [1.0 - i / 4096 for i in range(1, count)]
    tree = Tree.from_parents([parents], [scores])
    outs = check_verify_tree(tree, [4], count + 10)  # verify_num > cumu_count: n = cumu_count
    q = outs[QLEN]
    assert q["n"] == count
    assert q["draft_tokens"].tolist() == (1000 + np.arange(count)).tolist()
    assert q["retrive_next_token"][0, 0] == 1 and q["retrive_next_token"][0, 1] == 1 + arity


def test_score_ties_go_to_the_lower_node_id():
    # 0 -> {1, 3, 4}; 1 -> {2}; every non-root score 0.5, so ids decide
    tree = Tree.from_parents([[-1, 0, 1, 0, 0]], [[1.001, 0.5, 0.5, 0.5, 0.5]])
    assert select_verify_nodes(tree.scores[0], 5, 3).tolist() == [0, 1, 2]
    q = check_verify_tree(tree, [0], 3)[QLEN]
    assert q["draft_tokens"].tolist() == [1000, 1001, 1002]
    # +0.0 == -0.0: still the lower id
    zeros = np.array([1.001, -0.0, 0.0, 0.0], F32)
    assert select_verify_nodes(zeros, 4, 2).tolist() == [0, 1]
    assert select_verify_nodes(zeros[[0, 2, 1, 3]], 4, 2).tolist() == [0, 1]


def test_child_tied_with_its_parent_stays_ancestor_closed():
    # node 2 (child of 1) ties node 1 and beats nothing; node 3 under the root also ties
    tree = Tree.from_parents([[-1, 0, 1, 0]], [[1.001, 0.5, 0.5, 0.5]])
    q = check_verify_tree(tree, [0], 3)[QLEN]
    assert q["draft_tokens"].tolist() == [1000, 1001, 1002]


def test_root_score_does_not_matter():
    tree = Tree.from_parents([[-1, 0, 0]], [[0.0, 0.5, 0.7]])
    assert select_verify_nodes(tree.scores[0], 3, 2).tolist() == [0, 2]


def test_selected_node_without_its_parent_is_refused():
    # node 2's score exceeds its parent's: the top-2 set {2, 3} misses node 1
    tree = Tree.from_parents([[-1, 0, 1, 0]], [[1.001, 0.3, 0.9, 0.8]])
    with pytest.raises(ValueError, match="not ancestor-closed: request 0, node 2 .* parent 1"):
        run_fused(tree, [0], 3, QLEN)
    run_fused(tree, [0], 4, QLEN)  # with every node selected the set is closed again


def test_parent_with_a_higher_id_is_refused():
    tree = Tree.from_parents([[-1, 2, 0]], [[1.001, 0.5, 0.6]])
    with pytest.raises(ValueError, match="node 1 has parent 2; a parent must be a lower"):
        run_fused(tree, [0], 3, QLEN)


def test_fused_writes_nothing_when_refused():
    tree = Tree.from_parents([[-1, 0, 0]], [[1.001, np.nan, 0.5]])
    mask = np.zeros(9, bool)
    pos = np.full(3, -3, np.int64)
    ri, rn, rs, tok = (np.full((1, 3), -3, np.int64) for _ in range(4))
    with pytest.raises(ValueError, match="`cumu_scores` must not be NaN \\(request 0, node 1\\)"):
        fused_tree_mask_operator(*tree.arrays, np.zeros(1, np.int64), 1, 3, 3, 6, 1, mask, pos,
                                 ri, rn, rs, tok.reshape(-1))
    assert not mask.any() and (pos == -3).all() and (ri == -3).all() and (tok == -3).all()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tree_mask_mode": 3}, "`tree_mask_mode` must be between 0 and 2, not 3"),
        ({"verify_num": 0}, "`verify_num` must be at least 1, not 0"),
        ({"cumu_count": 7}, "`cumu_count` must be between 1 and `max_node_count`, not 7"),
        ({"seq_lens": np.array([-1], np.int64)}, "`seq_lens` values must be non-negative, not -1"),
        ({"tree_mask": np.zeros(8, bool)}, "`tree_mask` must have 9 elements"),
        ({"positions": np.zeros(3, np.int32)}, "`positions` must have dtype int64"),
        ({"cumu_scores": np.zeros(6, np.float64)}, "`cumu_scores` must have dtype float32"),
    ],
)
def test_fused_validation(changes, message):
    tree = Tree.from_parents([[-1, 0, 0]], [[1.001, 0.5, 0.4]], maxn=6)
    args = dict(zip(["cumu_tokens", "cumu_scores", "cumu_deltas", "prev_indexs", "next_indexs",
                     "side_indexs"], tree.arrays, strict=True))
    args.update(seq_lens=np.zeros(1, np.int64), batch_size=1, cumu_count=3, verify_num=3,
                max_node_count=6, tree_mask_mode=1, tree_mask=np.zeros(9, bool),
                positions=np.zeros(3, np.int64), retrive_index=np.zeros(3, np.int64),
                retrive_next_token=np.zeros(3, np.int64),
                retrive_next_sibling=np.zeros(3, np.int64), draft_tokens=np.zeros(3, np.int64))
    args.update(changes)
    with pytest.raises(ValueError, match=message):
        fused_tree_mask_operator(**args)


def test_packed_mode_caps_n_at_128():
    parents = [-1] + list(range(129))
    tree = Tree.from_parents([parents], [[1.001] + [1.0 - i / 1024 for i in range(1, 130)]])
    with pytest.raises(ValueError, match="must be at most 128 in mode QLEN_ONLY_BITPACKING"):
        run_fused(tree, [0], 129, PACKED)
    assert run_fused(tree, [0], 129, QLEN)["n"] == 129  # bool layouts have no cap


@pytest.mark.parametrize("mode", [FULL, QLEN, PACKED])
def test_empty_batch_is_a_no_op(mode):
    """B = 0 in every mask layout: checked like any call (a mask buffer that is not empty is
    refused), then nothing to write; the op returns None."""
    e = np.zeros((0, 4), np.int64)
    dtype = np.uint8 if mode == PACKED else np.bool_

    def call(mask):
        return fused_tree_mask_operator(e, np.zeros((0, 4), F32), e, e, e, e,
                                        np.zeros(0, np.int64), 0, 1, 4, 4, int(mode), mask,
                                        *(np.zeros(0, np.int64),) * 5)

    assert call(np.zeros(0, dtype)) is None
    stray = np.ones(4, dtype)
    with pytest.raises(ValueError, match="`tree_mask` must have 0 elements"):
        call(stray)
    assert stray.tolist() == np.ones(4, dtype).tolist()


# --- fused op: trees grown by the golden draft round ----------------------------------------


@pytest.mark.parametrize(
    ("seed", "kwargs", "verify_nums"),
    [
        (0, {}, [1, 2, 8, 9, 16, 17, 64, 65]),
        (1, {"k": 8, "width": 8, "depths": 3}, [17, 64, 65, 128]),
        (2, {"k": 8, "width": 8, "depths": 6, "cost": 0.002, "batch": 3}, [9, 33, 128]),
        (3, {"k": 10, "width": 10, "depths": 3, "sort_width": 128}, [16, 100, 128]),
        (4, {"k": 2, "width": 1, "depths": 8}, [4, 17, 10_000]),
    ],
)
def test_draft_round_trees(seed, kwargs, verify_nums):
    r = run_round(seed, **kwargs)
    tree = Tree.from_round(r)
    b = r.config.batch_size
    for v in verify_nums:
        check_verify_tree(tree, [int(x) for x in 5 + 13 * np.arange(b)], v)


def test_draft_round_with_tied_scores():
    """Every child has probability 1/4, so whole depths tie and ids decide the boundary."""
    def sample(depth, frontier):
        bsz, w = frontier.node_ids.shape
        tokens = np.arange(bsz * w * 4, dtype=np.int64).reshape(bsz, w * 4) + 100 * depth
        return DraftSample(np.full((bsz, w * 4), 0.25, F32), tokens)

    cfg = DraftRoundConfig(batch_size=2, node_top_k=4, max_tree_width=4, depths=3,
                           verify_num=64, max_verify_num=64, max_node_count=64,
                           max_input_size=64)
    r = draft_round(cfg, sample, np.array([1, 2], np.int64))
    tree = Tree.from_round(r)
    for v in (3, 7, 12, 30):
        q = check_verify_tree(tree, [0, 9], v)[QLEN]
        n = q["n"]
        # depth 1 = nodes 1..4 (tied), then depth 2 = nodes 5..20 (tied): ids in order
        assert q["draft_tokens"][:n].tolist() == r.cumu_tokens[0, :n].tolist()


# --- SGLang-compatible op -------------------------------------------------------------------


def sgl_buffers(seq_lens, n, mode, dtype=None):
    """Buffers as SGLang's ``build_tree_kernel_efficient`` (eagle_utils.py) allocates them."""
    bs = len(seq_lens)
    if mode == PACKED:
        dtype = dtype or {1: np.uint8, 2: np.uint16, 4: np.uint32}[sglang_packed_row_bytes(n)]
        itemsize = np.dtype(dtype).itemsize
        mask = np.zeros(bs * n * sglang_packed_row_bytes(n) // itemsize, dtype)
    elif mode == QLEN:
        mask = np.ones(bs * n * n, bool)
    else:
        mask = np.ones(n * sum(seq_lens) + bs * n * n, bool)
    return {
        "tree_mask": mask,
        "positions": np.empty(bs * n, np.int64),
        "retrive_index": np.full((bs, n), -1, np.int64),
        "retrive_next_token": np.full((bs, n), -1, np.int64),
        "retrive_next_sibling": np.full((bs, n), -1, np.int64),
    }


def run_sgl(parent_list, selected, seq_lens, topk, depth, n, mode, dtype=None):
    buf = sgl_buffers(seq_lens, n, mode, dtype)
    build_tree_kernel_efficient(np.asarray(parent_list, np.int64),
                                np.asarray(selected, np.int64).reshape(len(seq_lens), n - 1),
                                np.asarray(seq_lens, np.int64), *buf.values(), topk, depth, n,
                                int(mode))
    return buf


# topk 2, depth 3: flat 0,1 under the root; 2..5 under flat 0,1; 6..9 under flat 3,4.
HAND_PARENT_LIST = [-1, 0, 1, 3, 4]
HAND_SELECTED = [0, 1, 3, 7]  # positions 1..4; tree 0 -> {1, 2}, 1 -> 3, 3 -> 4
HAND_MASK = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0],
             [1, 1, 0, 1, 1]]


@pytest.mark.parametrize("mode", MODES)
def test_sgl_hand_computed_tree(mode):
    # request 1 selects flat 0, 1 (under the root) and 2, 3 (under flat 0): 0 -> {1, 2},
    # 1 -> {3, 4}
    parent_list = [HAND_PARENT_LIST, HAND_PARENT_LIST]
    selected = [HAND_SELECTED, [0, 1, 2, 3]]
    buf = run_sgl(parent_list, selected, [3, 1], 2, 3, 5, mode)
    assert buf["positions"].tolist() == [3, 4, 4, 5, 6] + [1, 2, 2, 3, 3]
    assert buf["retrive_index"].tolist() == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert buf["retrive_next_token"].tolist() == [[1, 3, -1, 4, -1], [1, 3, -1, -1, -1]]
    assert buf["retrive_next_sibling"].tolist() == [[-1, 2, -1, -1, -1], [-1, 2, -1, 4, -1]]
    mask1 = [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0],
             [1, 1, 0, 0, 1]]
    if mode == QLEN:
        assert buf["tree_mask"].reshape(2, 5, 5).astype(int).tolist() == [HAND_MASK, mask1]
    elif mode == FULL:
        blocks = full_mask_blocks(buf["tree_mask"], [3, 1], 5)
        assert blocks[0].astype(int).tolist() == [[1, 1, 1] + row for row in HAND_MASK]
        assert blocks[1].astype(int).tolist() == [[1] + row for row in mask1]
    else:
        rows = [sum(bit << c for c, bit in enumerate(row)) for row in HAND_MASK + mask1]
        assert buf["tree_mask"].dtype == np.uint8 and buf["tree_mask"].tolist() == rows


def test_sgl_full_mask_leaves_the_prefix_columns_to_the_caller():
    buf = sgl_buffers([2], 5, FULL)
    buf["tree_mask"][:] = False
    build_tree_kernel_efficient(np.array([HAND_PARENT_LIST]), np.array([HAND_SELECTED]),
                                np.array([2]), *buf.values(), 2, 3, 5, 0)
    block = buf["tree_mask"].reshape(5, 7)
    assert not block[:, :2].any()
    assert block[:, 2:].astype(int).tolist() == HAND_MASK


def test_sgl_packed_row_writes():
    """Byte 0 of a row is assigned (root bit), later bytes are OR-ed, padding bytes untouched."""
    n = 17  # 4-byte rows, 3 used
    chain_parents = [-1] + list(range(16))  # topk 1: flat x's parent block is x
    selected = list(range(16))
    buf = sgl_buffers([0], n, PACKED)
    buf["tree_mask"][:] = 0xF0F0F0F0
    build_tree_kernel_efficient(np.array([chain_parents]), np.array([selected]),
                                np.array([0]), *buf.values(), 1, 17, n, 2)
    for i, word in enumerate(buf["tree_mask"].tolist()):
        chain = 2 ** (i + 1) - 1
        expect = (0xF0F0F0F0 & 0xFFFFFF00) | 0x01 | (chain & 0xFF) | (chain & 0xFFFF00)
        assert word == expect, i
    assert buf["positions"].tolist() == list(range(17))


@pytest.mark.parametrize(("n", "row_bytes"), [(1, 1), (8, 1), (9, 2), (16, 2), (17, 4),
                                              (24, 4), (25, 4), (32, 4)])
def test_sgl_packed_row_bytes(n, row_bytes):
    assert sglang_packed_row_bytes(n) == row_bytes
    # depth 1: every selected node is a child of the root, parent_list is not read
    star = run_sgl(np.zeros((1, 0)), list(range(n - 1)), [0], max(n - 1, 1), 1, n, PACKED)
    rows = star["tree_mask"].view(np.uint8).reshape(n, row_bytes)
    expect = np.eye(n, dtype=bool)
    expect[:, 0] = True
    assert (unpack_tree_mask(rows, n) == expect).all()
    assert not np.unpackbits(rows, axis=-1, bitorder="little")[:, n:].any()


@pytest.mark.parametrize(("mask", "message"),
                         [(np.zeros(2, np.uint32), "`tree_mask` must have 5 bytes, not 8"),
                          (np.zeros(5, ">u1"), None),
                          (np.zeros(5, np.int8), "little-endian unsigned integer dtype"),
                          (np.zeros(5, np.bool_), "little-endian unsigned integer dtype")])
def test_sgl_packed_mask_buffer_checks(mask, message):
    rest = list(sgl_buffers([0], 5, PACKED).values())[1:]
    args = (np.array([HAND_PARENT_LIST]), np.array([HAND_SELECTED]), np.array([0]), mask,
            *rest, 2, 3, 5, 2)
    if message is None:  # a single byte has no byte order
        build_tree_kernel_efficient(*args)
        assert mask.tolist() == [1, 3, 5, 11, 27]
    else:
        with pytest.raises(ValueError, match=message):
            build_tree_kernel_efficient(*args)


def test_sgl_packed_rows_in_a_big_endian_buffer_are_refused():
    rest = list(sgl_buffers([0], 9, PACKED).values())[1:]
    with pytest.raises(ValueError, match="little-endian unsigned integer dtype"):
        build_tree_kernel_efficient(np.zeros((1, 0)), np.arange(8).reshape(1, 8), np.array([0]),
                                    np.zeros(9, ">u2"), *rest, 8, 1, 9, 2)


def test_sgl_depth_one_ignores_an_empty_parent_list():
    buf = run_sgl(np.zeros((1, 0)), [0, 1, 2], [4], 3, 1, 4, QLEN)
    assert buf["positions"].tolist() == [4, 5, 5, 5]
    assert buf["retrive_next_sibling"].tolist() == [[-1, 2, 3, -1]]


def test_sgl_invalid_tree_is_refused_before_any_write():
    buf = sgl_buffers([0], 5, QLEN)
    with pytest.raises(ValueError, match="invalid eagle tree: request 0, .* entry 3 \\(8\\)"):
        build_tree_kernel_efficient(np.array([HAND_PARENT_LIST]), np.array([[0, 1, 3, 8]]),
                                    np.array([0]), *buf.values(), 2, 3, 5, 1)
    assert buf["tree_mask"].all() and (buf["retrive_index"] == -1).all()
    cyclic = [-1, 0, 4, 3, 4]  # the block of flat 4 (block 2) names flat 4 as its parent
    with pytest.raises(ValueError, match="invalid eagle tree: request 0, .* form a cycle"):
        build_tree_kernel_efficient(np.array([cyclic]), np.array([[0, 1, 3, 4]]),
                                    np.array([0]), *buf.values(), 2, 3, 5, 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"draft_token_num": 33, "tree_mask_mode": 2}, "must be at most 32 in mode"),
        ({"tree_mask_mode": -1}, "`tree_mask_mode` must be between 0 and 2, not -1"),
        ({"topk": 0}, "`topk` must be at least 1, not 0"),
        ({"selected_index": np.array([[0, 1, 3, 10]])}, "`selected_index` values must be"),
        ({"parent_list": np.zeros((1, 4), np.int64)}, "`parent_list` must have 5 elements"),
    ],
)
def test_sgl_validation(args, message):
    base = dict(parent_list=np.array([HAND_PARENT_LIST]), selected_index=np.array([HAND_SELECTED]),
                verified_seq_len=np.array([0]), **sgl_buffers([0], 5, QLEN), topk=2, depth=3,
                draft_token_num=5, tree_mask_mode=1)
    base.update(args)
    with pytest.raises(ValueError, match=message):
        build_tree_kernel_efficient(**base)


# --- both ops agree on trees SGLang can express (full width at every depth) ------------------


def sglang_inputs(r, n):
    """SGLang's ``parent_list``/``selected_index`` for a round with W = K at every depth.

    Node id g is SGLang's flat ``score_list`` index g - 1; the ``topk`` block of flat
    ``1 + (d-2)*K + w`` (depth-d candidates of frontier slot w) has parent flat
    ``frontier_d.node_ids[w] - 1``.
    """
    k = r.config.node_top_k
    assert all(rec.tree_width == (1 if rec.depth == 1 else k) for rec in r.depths)
    frontiers = [rec.frontier.node_ids - 1 for rec in r.depths[1:]]
    b = r.config.batch_size
    parent_list = np.concatenate([np.full((b, 1), -1, np.int64)] + frontiers, axis=1)
    tree = Tree.from_round(r)
    selected = np.array([np.array(expected_set(tree, i, n)[1:]) - 1 for i in range(b)],
                        np.int64).reshape(b, n - 1)
    return parent_list, selected, len(r.depths)


@pytest.mark.parametrize(("seed", "k", "depths", "ns"),
                         [(10, 2, 8, [1, 2, 8, 9, 16, 17, 24, 25, 31]),
                          (11, 4, 3, [8, 9, 16, 17, 32, 37]),
                          (12, 8, 3, [17, 32, 64, 65, 128])])
def test_fused_op_matches_sglang_op(seed, k, depths, ns):
    r = run_round(seed, batch=3, k=k, width=k, depths=depths, verify_num=128)
    tree = Tree.from_round(r)
    seq_lens = [3, 0, 20]
    for n in ns:
        parent_list, selected, depth = sglang_inputs(r, n)
        modes = MODES if n <= 32 else (FULL, QLEN)
        for mode in modes:
            ours = run_fused(tree, seq_lens, n, mode)
            theirs = run_sgl(parent_list, selected, seq_lens, k, depth, n, mode)
            for key in ("positions", "retrive_index", "retrive_next_token",
                        "retrive_next_sibling"):
                assert (ours[key].reshape(-1) == theirs[key].reshape(-1)).all(), (n, mode, key)
            if mode == PACKED:
                sgl_rows = theirs["tree_mask"].view(np.uint8).reshape(3, n, -1)
                assert (unpack_tree_mask(sgl_rows, n) == unpack_tree_mask(ours["mask"], n)).all()
                if packed_row_bytes(n) == sglang_packed_row_bytes(n):  # n <= 16, 25..32
                    assert (sgl_rows == ours["mask"]).all()
            else:
                assert (ours["mask"].reshape(-1) == theirs["tree_mask"]).all(), (n, mode)
