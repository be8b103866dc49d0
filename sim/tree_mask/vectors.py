"""Calls of the K4 kernel (``hw.kernels.tree_mask.TreeMask``), their golden results and the
translation to and from the kernel's streams.

A :class:`Call` is one ``fused_tree_mask_operator`` call: the cumulative trees of ``B``
requests (as K2 leaves them), ``seq_lens``, ``cumu_count``, ``verify_num`` and the mask
layout. ``expected`` asks the golden model for its outputs; ``decode`` turns the kernel's
``tree`` records and ``mask`` words back into the golden's output tensors (checking the packet
markers and the zero padding on the way) and ``check`` compares whole tensors.

Trees come from the golden draft round (K1 -> K2 -> K3 -> width policy, ``golden.draft_round``
with ``synthetic_sampler`` or a tie-making variant of it) or are written by hand for the
directed cases. ``python -m sim.tree_mask.vectors`` rewrites the example case file
``sim/tree_mask/example_case.txt`` (``make sim KERNEL=tree_mask CASE=<file>``).
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from golden.cases import read_case, write_case
from golden.draft_round import ROOT_SCORE, DraftRoundConfig, draft_round, synthetic_sampler
from golden.tree_mask import (
    TreeMaskMode,
    fused_tree_mask_operator,
    packed_row_bytes,
    tree_mask_size,
    verify_set_size,
)
from golden.update_state import clamp_verify_num

__all__ = ["Call", "EXAMPLE_CASE", "OUTPUT_NAMES", "expected", "verify_set", "command",
           "node_fields", "seq_fields", "input_fields", "output_counts", "request_starts",
           "mask_words_expected", "decode", "check", "check_calls", "grown_call",
           "manual_call", "random_tree_call", "random_call", "directed_calls", "perf_call",
           "call_from_case", "example_case", "write_example_case", "write_case_file"]

F32, I64 = np.float32, np.int64
EXAMPLE_CASE = Path(__file__).resolve().parent / "example_case.txt"
# The golden's outputs, in its ABI order.
OUTPUT_NAMES = ("tree_mask", "positions", "retrive_index", "retrive_next_token",
                "retrive_next_sibling", "draft_tokens")
TREE_NAMES = ("cumu_tokens", "cumu_scores", "cumu_deltas", "prev_indexs", "next_indexs",
              "side_indexs")


@dataclass
class Call:
    """One call: the trees ``[B, M]`` (``M`` >= ``cumu_count``), ``seq_lens [B]``, scalars.

    ``verify_num`` is what the kernel receives (any int32); the golden gets
    ``clamp_verify_num(verify_num, MAXV)``, the kernel's clamp. ``invalid`` marks a call the
    golden refuses (a tree whose verify set is not ancestor-closed): the kernel must flag it.
    """

    name: str
    cumu_tokens: np.ndarray
    cumu_scores: np.ndarray
    cumu_deltas: np.ndarray
    prev_indexs: np.ndarray
    next_indexs: np.ndarray
    side_indexs: np.ndarray
    seq_lens: np.ndarray
    cumu_count: int
    verify_num: int
    mode: int
    invalid: bool = False
    notes: dict = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens)

    def tree(self):
        return tuple(getattr(self, name) for name in TREE_NAMES)

    def n(self, maxv: int) -> int:
        """Verify-set size on a kernel with ``max_verify_num = maxv``."""
        return verify_set_size(clamp_verify_num(self.verify_num, maxv), self.cumu_count)

    def with_mode(self, mode: int, suffix: str = ""):
        return Call(f"{self.name} mode {mode}{suffix}", *self.tree(), self.seq_lens.copy(),
                    self.cumu_count, self.verify_num, mode, self.invalid, dict(self.notes))


# --- golden ---------------------------------------------------------------------------------


def expected(call: Call, maxv: int) -> dict:
    """The golden outputs of ``call`` on a kernel with ``max_verify_num = maxv``.

    Raises ``ValueError`` where the golden refuses the call (invalid trees).
    """
    b, n = call.batch_size, call.n(maxv)
    if call.mode == TreeMaskMode.QLEN_ONLY_BITPACKING:
        mask = np.full((b, n, packed_row_bytes(n)), 0xA5, np.uint8)
    elif call.mode == TreeMaskMode.QLEN_ONLY:
        mask = np.zeros((b, n, n), np.bool_)
    else:
        mask = np.zeros(tree_mask_size(call.mode, call.seq_lens, n), np.bool_)
    out = {
        "tree_mask": mask,
        "positions": np.full(b * n, -777, I64),
        "retrive_index": np.full((b, n), -777, I64),
        "retrive_next_token": np.full((b, n), -777, I64),
        "retrive_next_sibling": np.full((b, n), -777, I64),
        "draft_tokens": np.full(b * n, -777, I64),
    }
    fused_tree_mask_operator(*call.tree(), call.seq_lens, b, call.cumu_count,
                             clamp_verify_num(call.verify_num, maxv), call.cumu_tokens.shape[1],
                             call.mode, *out.values())
    return out


def verify_set(call: Call, maxv: int):
    """``golden.select_verify_nodes`` of every request (for reports)."""
    from golden.tree_mask import select_verify_nodes

    n = call.n(maxv)
    return [select_verify_nodes(call.cumu_scores[b], call.cumu_count, n)
            for b in range(call.batch_size)]


# --- kernel streams -------------------------------------------------------------------------


def command(call: Call) -> dict:
    """The ``cmd`` beat of ``call``."""
    return {"batch_size": call.batch_size, "cumu_count": call.cumu_count,
            "verify_num": int(np.clip(call.verify_num, -(2**31), 2**31 - 1)),
            "tree_mask_mode": call.mode}


def node_fields(call: Call) -> dict:
    """``nodes`` beats of every request (arrays over ``B * cumu_count`` beats)."""
    c = call.cumu_count
    first = np.zeros((call.batch_size, c), np.int64)
    last = np.zeros((call.batch_size, c), np.int64)
    first[:, 0] = 1
    last[:, -1] = 1
    return {
        "token": call.cumu_tokens[:, :c].reshape(-1),
        "score": call.cumu_scores[:, :c].astype(F32).view(np.uint32).reshape(-1),
        "prev": call.prev_indexs[:, :c].reshape(-1),
        "first": first.reshape(-1),
        "last": last.reshape(-1),
    }


def seq_fields(call: Call) -> dict:
    return {"seq_len": call.seq_lens}


def input_fields(calls) -> dict[str, dict]:
    """The payload fields of ``calls`` sent back to back: input port (``cmd``, ``nodes``,
    ``seq_lens``) -> field name -> array over the port's beats."""
    commands = [command(c) for c in calls]
    nodes = [node_fields(c) for c in calls]
    return {
        "cmd": {key: np.array([cmd[key] for cmd in commands], I64)
                for key in ("batch_size", "cumu_count", "verify_num", "tree_mask_mode")},
        "nodes": {key: np.concatenate([np.zeros(0, I64), *(part[key] for part in nodes)])
                  for key in ("token", "score", "prev", "first", "last")},
        "seq_lens": {"seq_len": np.concatenate([np.zeros(0, I64),
                                                *(c.seq_lens for c in calls)])},
    }


def output_counts(calls, maxv: int, lanes: int) -> dict[str, int]:
    """Beats the kernel sends on ``tree`` and ``mask`` for ``calls``."""
    return {"tree": sum(c.batch_size * c.n(maxv) for c in calls),
            "mask": sum(mask_words_expected(c, maxv, lanes) for c in calls)}


def request_starts(calls) -> list[int]:
    """Index of the first ``nodes`` beat of every request of ``calls`` sent back to back."""
    starts, beat = [], 0
    for c in calls:
        for _ in range(c.batch_size):
            starts.append(beat)
            beat += c.cumu_count
    return starts


def _row_columns(call: Call, b: int, n: int) -> int:
    """Columns of a mask row of request b on the wire (the layout's row length)."""
    if call.mode == TreeMaskMode.FULL_MASK:
        return int(call.seq_lens[b]) + n
    return n


def mask_words_expected(call: Call, maxv: int, lanes: int) -> int:
    """Number of ``mask`` words the kernel sends for ``call``."""
    n = call.n(maxv)
    return sum(n * -(-_row_columns(call, b, n) // lanes) for b in range(call.batch_size))


def _word_bits(word: int, lanes: int) -> np.ndarray:
    raw = np.frombuffer(int(word).to_bytes(lanes // 8, "little"), np.uint8)
    return np.unpackbits(raw, bitorder="little").astype(np.bool_)


def decode(call: Call, maxv: int, lanes: int, tree: dict, mask: dict) -> dict:
    """Rebuild the golden's output tensors from the kernel's streams.

    ``tree``: ``sim.payload.unpack`` of the call's ``tree`` records (``next_token``,
    ``next_sibling`` and ``draft_token`` signed); ``mask``: of its ``mask`` words. Checks the
    packet markers, the words per row and the zero padding (``AssertionError``); returns the
    tensors plus ``invalid`` (the records' flags, ``[B, n]``).
    """
    b_count, n = call.batch_size, call.n(maxv)
    count = b_count * n
    assert len(tree["first"]) == count, f"{call.name}: {len(tree['first'])} tree records, " \
                                        f"expected {count}"
    position = np.tile(np.arange(n), b_count)
    assert np.array_equal(tree["first"], position == 0), f"{call.name}: tree `first` markers"
    assert np.array_equal(tree["last"], position == n - 1), f"{call.name}: tree `last` markers"
    out = {
        "positions": tree["position"].astype(I64),
        "retrive_index": tree["retrive_index"].astype(I64).reshape(b_count, n),
        "retrive_next_token": tree["next_token"].astype(I64).reshape(b_count, n),
        "retrive_next_sibling": tree["next_sibling"].astype(I64).reshape(b_count, n),
        "draft_tokens": tree["draft_token"].astype(I64),
        "invalid": tree["invalid"].astype(np.bool_).reshape(b_count, n),
    }

    words = list(mask["bits"])
    row_last, first, last = mask["row_last"], mask["first"], mask["last"]
    assert len(words) == mask_words_expected(call, maxv, lanes), (
        f"{call.name}: {len(words)} mask words, expected "
        f"{mask_words_expected(call, maxv, lanes)}")
    rows, w = [], 0
    for b in range(b_count):
        columns = _row_columns(call, b, n)
        per_row = -(-columns // lanes)
        request = []
        for i in range(n):
            span = range(w, w + per_row)
            assert [int(row_last[k]) for k in span] == [0] * (per_row - 1) + [1], (
                f"{call.name}: request {b} row {i}: `row_last` markers")
            assert [int(first[k]) for k in span] == [int(i == 0)] + [0] * (per_row - 1), (
                f"{call.name}: request {b} row {i}: `first` markers")
            assert [int(last[k]) for k in span] == \
                [0] * (per_row - 1) + [int(i == n - 1)], (
                f"{call.name}: request {b} row {i}: `last` markers")
            bits = np.concatenate([_word_bits(words[k], lanes) for k in span])
            assert not bits[columns:].any(), (
                f"{call.name}: request {b} row {i}: padding bits past column {columns} set")
            request.append(bits[:columns])
            w += per_row
        rows.append(request)
    if call.mode == TreeMaskMode.FULL_MASK:
        out["tree_mask"] = (np.concatenate([np.concatenate(r) for r in rows])
                            if count else np.zeros(0, np.bool_))
    elif call.mode == TreeMaskMode.QLEN_ONLY:
        out["tree_mask"] = np.array(rows, np.bool_).reshape(b_count, n, n)
    else:
        used = 8 * packed_row_bytes(n)
        packed = [[np.packbits(np.concatenate([row, np.zeros(used - n, np.bool_)]),
                               bitorder="little") for row in r] for r in rows]
        out["tree_mask"] = np.array(packed, np.uint8).reshape(b_count, n, packed_row_bytes(n))
    return out


def check(call: Call, maxv: int, lanes: int, tree: dict, mask: dict) -> None:
    """Compare the kernel's outputs for ``call`` with the golden (whole tensors)."""
    got = decode(call, maxv, lanes, tree, mask)
    if call.invalid:
        try:
            expected(call, maxv)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{call.name}: the golden accepts a call marked invalid")
        assert got["invalid"].any(), f"{call.name}: the golden refuses the tree " \
                                     "but no record is flagged `invalid`"
        return
    want = expected(call, maxv)
    assert not got["invalid"].any(), (
        f"{call.name}: records flagged `invalid` at "
        f"{np.argwhere(got['invalid']).tolist()[:8]}")
    for name in OUTPUT_NAMES:
        if not np.array_equal(got[name], want[name]):
            diff = np.argwhere(np.asarray(got[name]).reshape(-1)
                               != np.asarray(want[name]).reshape(-1)).reshape(-1)
            raise AssertionError(
                f"{call.name}: `{name}` differs from the golden at {diff.size} of "
                f"{want[name].size} elements, first at flat index {diff[:6].tolist()}: "
                f"got {np.asarray(got[name]).reshape(-1)[diff[:6]].tolist()}, "
                f"expected {np.asarray(want[name]).reshape(-1)[diff[:6]].tolist()}")


def check_calls(calls, maxv: int, lanes: int, tree: dict, mask: dict) -> None:
    """``check`` every call of ``calls`` (run back to back) on its share of the unpacked
    ``tree`` records and ``mask`` words."""
    t = w = 0
    for c in calls:
        count, words = c.batch_size * c.n(maxv), mask_words_expected(c, maxv, lanes)
        check(c, maxv, lanes, {k: v[t:t + count] for k, v in tree.items()},
              {k: v[w:w + words] for k, v in mask.items()})
        t, w = t + count, w + words


# --- trees ----------------------------------------------------------------------------------


def _tie_sampler(seed, vocab, k, *, zeros=False):
    """``synthetic_sampler`` with probabilities rounded up to multiples of 1/4 (many exact
    score ties, and child scores equal to their parents' at p = 1.0) or, with ``zeros``, half
    of them replaced by +0.0 / -0.0 (ties between signed zeros)."""
    base = synthetic_sampler(seed, vocab, k)
    rng = np.random.default_rng(seed + 1)

    def sample(depth, frontier):
        drawn = base(depth, frontier)
        p = drawn.probas.astype(np.float64)
        if zeros:
            zero = rng.random(p.shape) < 0.5
            sign = np.where(rng.random(p.shape) < 0.5, -0.0, 0.0)
            probas = np.where(zero, sign, p).astype(F32)
        else:
            probas = (np.ceil(p * 4) / 4).astype(F32)
        return type(drawn)(probas=probas, tokens=drawn.tokens, hidden_states=None)

    return sample


def grown_call(name, *, seed, batch, k, width, depths, maxn, verify_num, mode, seq_lens=None,
               cost=0.0, sampler="synthetic", vocab=32000):
    """A call on trees grown by the golden draft round (``DraftRoundConfig`` with the given
    K, width cap, depths, ``max_node_count = maxn``; ``sort_width`` 128 where ``K * width``
    exceeds 64, e.g. EAGLE-2's K = W = 10)."""
    cfg = DraftRoundConfig(batch_size=batch, node_top_k=k, max_tree_width=width,
                           depths=depths, verify_num=max(1, min(verify_num, 1 << 16)),
                           max_verify_num=max(1, min(verify_num, 1 << 16)),
                           max_node_count=maxn, max_input_size=4096, cost_per_node=cost,
                           sort_width=64 if k * width <= 64 else 128)
    if sampler == "synthetic":
        sample = synthetic_sampler(seed, vocab, k)
    else:
        sample = _tie_sampler(seed, vocab, k, zeros=sampler == "zeros")
    rng = np.random.default_rng(seed)
    r = draft_round(cfg, sample, rng.integers(0, vocab, batch).astype(I64))
    if seq_lens is None:
        seq_lens = rng.integers(0, 200, batch)
    return Call(name, r.cumu_tokens, r.cumu_scores, r.cumu_deltas, r.prev_indexs,
                r.next_indexs, r.side_indexs, np.asarray(seq_lens, I64).reshape(batch),
                r.cumu_count, verify_num, mode,
                notes={"stop": r.stop_reason, "widths": [d.tree_width for d in r.depths]})


def manual_call(name, parents, scores, *, verify_num, mode, seq_len=0, invalid=False, seed=0):
    """One request on a hand-made tree: ``parents[j]`` (-1 for the root), ``scores[j]``."""
    count = len(parents)
    rng = np.random.default_rng(seed)
    prev = np.asarray(parents, I64).reshape(1, count)
    deltas = np.zeros((1, count), I64)
    for j in range(1, count):
        p = int(parents[j])
        deltas[0, j] = deltas[0, p] + 1 if 0 <= p < j else 1
    return Call(name, rng.integers(0, 32000, (1, count)).astype(I64),
                np.asarray(scores, F32).reshape(1, count), deltas, prev,
                np.full((1, count), -1, I64), np.full((1, count), -1, I64),
                np.array([seq_len], I64), count, verify_num, mode, invalid)


def random_tree_call(name, *, count, verify_num, seed, mode=0, seq_len=0):
    """One request on a random tree of ``count`` nodes: node j's parent is uniform over
    ``0..j-1`` and its score is the parent's times a float32 factor in (0.25, 1], so a
    child never outscores its parent (ties where the factor is 1)."""
    rng = np.random.default_rng(seed)
    parents = [-1] + [int(rng.integers(0, j)) for j in range(1, count)]
    scores = [ROOT_SCORE]
    for j in range(1, count):
        factor = F32(1.0) if rng.random() < 0.1 else F32(rng.uniform(0.25, 1.0))
        parent_score = F32(0.9) if parents[j] == 0 else scores[parents[j]]
        scores.append(F32(parent_score * factor))
    return manual_call(name, parents, scores, verify_num=verify_num, mode=mode,
                       seq_len=seq_len, seed=seed)


def random_call(rng: np.random.Generator, maxn: int, maxv: int, lanes: int) -> Call:
    """A random call: a tree grown by the draft round with random K, width cap, depths and
    width-policy cost (a third of them with the tie-making sampler), 1..3 requests, a random
    ``verify_num`` (sometimes above ``cumu_count`` or ``MAXV``), layout and ``seq_lens``."""
    k = int(rng.integers(1, min(8, maxn - 1) + 1))
    width = int(rng.integers(1, k + 1))
    depths = int(rng.integers(1, 9))
    batch = int(rng.integers(1, 4))
    sampler = rng.choice(["synthetic", "synthetic", "ties", "zeros"])
    roll = rng.random()
    if roll < 0.1:
        verify_num = int(rng.integers(maxv, maxv + 50))
    elif roll < 0.15:
        verify_num = int(rng.integers(-3, 2))
    else:
        verify_num = int(rng.integers(1, maxv + 1))
    mode = int(rng.integers(0, 3))
    if mode == TreeMaskMode.QLEN_ONLY_BITPACKING and min(verify_num, maxv) > 128:
        mode = TreeMaskMode.QLEN_ONLY  # the packed layout serves n <= 128
    seq_lens = rng.integers(0, 4 * lanes, batch) if rng.random() < 0.8 else \
        rng.integers(0, 3, batch)
    return grown_call(f"random K={k} W<={width} depths<={depths} {sampler}",
                      seed=int(rng.integers(1 << 30)), batch=batch, k=k, width=width,
                      depths=depths, maxn=maxn, verify_num=verify_num, mode=mode,
                      seq_lens=seq_lens, cost=float(rng.choice([0.0, 0.0, 0.02, 0.1])),
                      sampler=str(sampler))


def _all_modes(call: Call) -> list[Call]:
    """``call`` in the three layouts (the packed one only where ``n <= 128``)."""
    modes = (0, 1, 2) if call.verify_num <= 128 else (0, 1)
    return [call.with_mode(mode) for mode in modes]


def directed_calls(maxn: int, maxv: int, lanes: int) -> list[Call]:
    """Directed calls for a kernel with ``MAXN``, ``MAXV``, ``mask_lanes``, each tree in the
    three layouts: verify set of the root only, chains, stars and signed zeros (score ties),
    full trees, verify-set sizes on the byte and word edges of the packed mask (n = 8, 9, 16,
    17, 64, 65, 128 and ``mask_lanes`` +- 1 where they fit), FULL prefixes across word
    boundaries, ``verify_num`` clamping, an empty batch and two trees the golden refuses."""
    calls: list[Call] = []
    root = float(ROOT_SCORE)

    # The root alone: cumu_count = 1, and verify_num = 1 on a grown tree.
    calls += _all_modes(manual_call("root only (cumu_count 1)", [-1], [root], verify_num=maxv,
                                    mode=0, seq_len=lanes + 3))
    if maxn >= 5:
        calls += _all_modes(grown_call("verify_num 1", seed=3, batch=2, k=2, width=2, depths=3,
                                       maxn=maxn, verify_num=1, mode=0, seq_lens=[0, 5]))

    # Chains: strictly decreasing scores, and all equal (ties along the chain).
    length = min(maxn, maxv + 3, 70)
    chain = [-1] + list(range(length - 1))
    falling = [root] + [0.9 ** j for j in range(1, length)]
    calls += _all_modes(manual_call(f"chain of {length}", chain, falling, verify_num=maxv,
                                    mode=0, seq_len=2))
    calls += _all_modes(manual_call(f"chain of {length}, equal scores", chain,
                                    [root] + [0.5] * (length - 1),
                                    verify_num=min(maxv, 6), mode=0, seq_len=9))
    if maxn >= 8:
        calls += _all_modes(grown_call("chain grown with K=1", seed=5, batch=2, k=1, width=1,
                                       depths=min(maxn - 1, 12), maxn=maxn,
                                       verify_num=min(maxv, 9), mode=0))

    # Stars: ties between siblings go to the lower node id; signed zeros tie.
    m = min(maxn - 1, 40)
    if m >= 2:
        calls += _all_modes(manual_call(f"star of {m}, equal scores", [-1] + [0] * m,
                                        [root] + [0.5] * m, verify_num=min(maxv, 7), mode=0,
                                        seq_len=1))
        zero_scores = [root] + [[0.0, -0.0, 0.25][j % 3] for j in range(m)]
        calls += _all_modes(manual_call(f"star of {m}, +0.0/-0.0 ties", [-1] + [0] * m,
                                        zero_scores, verify_num=min(maxv, m // 2 + 1), mode=0,
                                        seq_len=lanes))
    if maxn >= 9:
        # A deep node equal to its parent (p = 1.0), cousins tied with each other.
        parents = [-1, 0, 0, 1, 1, 2, 3, 3, 6]
        scores = [root, 0.5, 0.5, 0.5, 0.25, 0.5, 0.25, 0.25, 0.25]
        calls += _all_modes(manual_call("ties across levels", parents, scores,
                                        verify_num=min(maxv, 6), mode=0, seq_len=3))
    if maxn >= 6:
        calls += _all_modes(grown_call("grown with score ties", seed=8, batch=3, k=4,
                                       width=min(4, maxn - 5) if maxn < 9 else 4, depths=6,
                                       maxn=maxn, verify_num=min(maxv, 20), mode=0,
                                       sampler="ties"))
        calls += _all_modes(grown_call("grown with signed zeros", seed=9, batch=2, k=4,
                                       width=min(4, maxn - 5) if maxn < 9 else 4, depths=5,
                                       maxn=maxn, verify_num=maxv, mode=0, sampler="zeros"))

    # Full trees: verify_num >= cumu_count, every node in the set.
    for k, width, depths in ((2, 2, 3), (3, 2, 4), (4, 4, 8)):
        if min(maxn, maxv) < 1 + k:
            continue
        call = grown_call(f"full tree K={k}", seed=11 + k, batch=2, k=k, width=width,
                          depths=depths, maxn=min(maxn, maxv), verify_num=maxv, mode=0)
        assert call.n(maxv) == call.cumu_count
        calls += _all_modes(call)

    # Verify-set sizes on the byte / word edges of the packed mask.
    edges = sorted({8, 9, 16, 17, 64, 65, 128, lanes - 1, lanes, lanes + 1})
    for n in edges:
        if not 2 <= n <= min(maxv, maxn):
            continue
        if maxn >= 5:
            call = grown_call(f"n={n}", seed=20 + n, batch=2, k=4, width=4, depths=64,
                              maxn=maxn, verify_num=n, mode=0,
                              seq_lens=[lanes - 1, 2 * lanes + 1])
            if call.n(maxv) == n:
                calls += _all_modes(call)
        calls += _all_modes(random_tree_call(f"n={n} (full random tree)", count=n,
                                             verify_num=n, seed=50 + n, seq_len=lanes + 1))

    # FULL prefixes: every alignment of the tree part inside a word, and a long prefix.
    if maxn >= 7:
        seqs = [0, 1, 7, 8, lanes - 1, lanes, lanes + 1, 3 * lanes + 5, 1000]
        calls.append(grown_call("FULL prefix alignments", seed=31, batch=len(seqs), k=3,
                                width=2, depths=4, maxn=maxn, verify_num=min(maxv, 9),
                                mode=0, seq_lens=seqs))

    # verify_num clamping (the kernel clamps to 1..MAXV, as K2 and K3 do).
    if maxn >= 4:
        for v in (maxv + 100, 0, -5, 2**31 - 1):
            calls.append(grown_call(f"verify_num {v} (clamped)", seed=41, batch=2, k=3,
                                    width=3, depths=5, maxn=maxn, verify_num=v, mode=2))

    # An empty batch.
    empty = manual_call("batch_size 0", [-1, 0], [root, 0.5], verify_num=2, mode=0)
    empty.seq_lens = np.zeros(0, I64)
    for name in ("cumu_tokens", "cumu_scores", "cumu_deltas", "prev_indexs", "next_indexs",
                 "side_indexs"):
        setattr(empty, name, getattr(empty, name)[:0])
    calls.append(empty)

    # Trees the golden refuses: the kernel flags them.
    if maxv >= 2 and maxn >= 3:
        calls.append(manual_call("invalid: parent not selected", [-1, 0, 1],
                                 [root, 0.1, 0.9], verify_num=2, mode=1, invalid=True))
    if maxv >= 3 and maxn >= 3:
        calls.append(manual_call("invalid: parent id above the node", [-1, 2, 0],
                                 [root, 0.4, 0.5], verify_num=3, mode=2, invalid=True))
    return calls


def perf_call(maxn: int, *, batch_size: int, verify_num: int, node_top_k: int,
              tree_width: int, depths: int, mode: int = 2, seed: int = 2026) -> Call:
    """The throughput call: ``batch_size`` requests of a draft-round tree with the given K,
    width and depths (cost 0: every depth is as wide as allowed), ``mode`` (default the packed
    layout), seq_lens around 1000."""
    return grown_call(f"perf B={batch_size} verify_num={verify_num}", seed=seed,
                      batch=batch_size, k=node_top_k, width=tree_width, depths=depths,
                      maxn=maxn, verify_num=verify_num, mode=mode,
                      seq_lens=1000 + np.arange(batch_size))


# --- case files -----------------------------------------------------------------------------


def call_from_case(path) -> tuple[Call, dict]:
    """Read a case file: the call and its ``expected_*`` tensors (those present)."""
    case = read_case(path)
    batch = case.scalar("batch_size")
    maxn = case.scalar("max_node_count")
    arrays = {}
    for name in TREE_NAMES:
        values = case.f32(name) if name == "cumu_scores" else case.i64(name)
        if values.size != batch * maxn:
            raise ValueError(f"{path}: {name} has {values.size} values, batch_size * "
                             f"max_node_count = {batch * maxn}")
        arrays[name] = values.reshape(batch, maxn)
    call = Call(f"case {Path(path).name}", *(arrays[name] for name in TREE_NAMES),
                case.i64("seq_lens"), case.scalar("cumu_count"), case.scalar("verify_num"),
                case.scalar("tree_mask_mode"))
    want = {}
    for name in OUTPUT_NAMES:
        key = f"expected_{name}"
        if key in case:
            want[name] = case.i64(key)
    return call, want


def example_case() -> Call:
    """The call of ``sim/tree_mask/example_case.txt``: two requests of a draft-round tree
    (K = 3, width cap 3, 4 depths, MAXN = 40, quarter-step probabilities: score ties),
    verify_num 12, the packed layout."""
    return grown_call("example", seed=77, batch=2, k=3, width=3, depths=4, maxn=40,
                      verify_num=12, mode=2, seq_lens=[37, 4], sampler="ties")


def write_example_case(path=EXAMPLE_CASE) -> None:
    """Write ``example_case()`` with its golden results in the project's case format."""
    write_case_file(example_case(), path)


CASE_HEADER = ("K4 fused_tree_mask_operator case (golden/tree_mask.py)\n"
               "tree [batch_size, max_node_count] per line, seq_lens [batch_size]; expected_* "
               "are the golden outputs\n"
               "(tree_mask: uint8 [B, n, ceil(n/8)] in mode 2, bool in modes 0/1)\n"
               "written by `python -m sim.tree_mask.vectors`")


def write_case_file(call: Call, path) -> None:
    """Write ``call`` and its golden results (on a kernel whose ``max_verify_num`` holds its
    verify set) as a case file; ``call_from_case`` reads it back."""
    want = expected(call, max(call.verify_num, 1))
    tensors = {name: getattr(call, name) for name in TREE_NAMES}
    tensors.update({"seq_lens": call.seq_lens, "batch_size": call.batch_size,
                    "cumu_count": call.cumu_count, "verify_num": call.verify_num,
                    "max_node_count": call.cumu_tokens.shape[1],
                    "tree_mask_mode": call.mode})
    write_case(path, tensors, expected={name: want[name] for name in OUTPUT_NAMES},
               header=CASE_HEADER)


if __name__ == "__main__":
    write_example_case()
    print(f"wrote {EXAMPLE_CASE}")
