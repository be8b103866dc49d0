"""Fused-verify calls for the testbench: random (:func:`random_call`), directed
(:func:`directed_calls`) and one verify step of a benchmark contract point
(:func:`verify_step_call`). Every generator is deterministic in its ``rng`` or seed.

Logits rows come in the styles of :data:`STYLES` (:func:`logit_row`). Candidates are drafted
from the row they are verified against (the parent position's): a node's children mostly
carry that row's top tokens in rank order (the draft model ranks like the target), so that
acceptance happens and the accepted depth varies from 0 to ``S - 1``.
"""

import numpy as np

from golden.logit_rows import row_distribution, temperature_scale
from sim.reject_sample.generators import random_tree, tree_from_children, verify_step_tree

from .call import F32, MODES, Call, to_bfloat16

__all__ = ["STYLES", "NAN_PATTERNS", "logit_row", "parents", "draft_candidates",
           "random_call", "directed_calls", "verify_step_call"]

#: Logits row styles: peaked, heavy-tailed (Student t / Cauchy), typical (N(0, 4)), flat (all
#: equal), few distinct values (ties at the max and at top-k/top-p thresholds), many ``-inf``,
#: NaN entries, all ``-inf``, ``+inf`` entries, huge ranges (up to 1e30), tiny (subnormals).
STYLES = ("peaked", "heavy", "typical", "flat", "few", "neginf", "nan", "allneginf", "posinf",
          "huge", "tiny")
#: float32 NaN bit patterns the ``nan`` style uses (quiet, negative, all ones, signalling).
NAN_PATTERNS = np.array([0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0x7F800001], np.uint32)
_BELOW_ONE = np.nextafter(F32(1), F32(0))  # 0.99999994
_GREEDY_TEMPERATURES = (0.0, 1e-7, float(np.nextafter(F32(1e-6), F32(0))))


def logit_row(rng, vocab: int, style: str) -> np.ndarray:
    """One float32 logits row of ``vocab`` elements in ``style`` (one of :data:`STYLES`)."""
    if style == "peaked":
        x = rng.standard_normal(vocab) * 2
        x[rng.integers(0, vocab, int(rng.integers(1, 3)))] += rng.uniform(5, 25)
    elif style == "heavy":
        x = (rng.standard_t(2, vocab) if rng.random() < 0.5 else rng.standard_cauchy(vocab)) * 3
    elif style == "flat":
        x = np.full(vocab, rng.choice([0.0, -3.5, 17.25, 1e4]))
    elif style == "few":
        values = rng.choice([-4.0, -1.5, 0.0, 0.5, 1.0, 2.0, 3.0], int(rng.integers(2, 5)),
                            replace=False)
        x = rng.choice(values, vocab)
    elif style == "huge":
        x = rng.standard_normal(vocab) * 10.0 ** rng.integers(3, 31)
    elif style == "tiny":
        x = rng.standard_normal(vocab) * rng.choice([1e-39, 1e-42, 1e-45])
    elif style == "allneginf":
        x = np.full(vocab, -np.inf)
    else:  # typical LLM logits, and the styles built on them
        x = rng.standard_normal(vocab) * 4
    x = x.astype(F32)
    spots = rng.random(vocab)
    if style == "neginf":
        x[spots < rng.uniform(0.3, 0.95)] = -np.inf
    elif style == "nan":
        hit = spots < rng.uniform(0.02, 0.3)
        hit[rng.integers(0, vocab)] = True
        x.view(np.uint32)[hit] = rng.choice(NAN_PATTERNS, int(hit.sum()))
    elif style == "posinf":
        x[rng.integers(0, vocab, int(rng.integers(1, 3)))] = np.inf
        x[spots < 0.1] = -np.inf
    return x


def parents(nxt: np.ndarray, sib: np.ndarray) -> dict[int, list[int]]:
    """Children of every node with children, in sibling order, of one request's links."""
    children = {}
    for node in range(len(nxt)):
        child = int(nxt[node])
        while child >= 0 and len(children.get(node, ())) < len(nxt):
            children.setdefault(node, []).append(child)
            child = int(sib[child])
    return children


def _rank_order(row: np.ndarray) -> np.ndarray:
    """Tokens by decreasing logit (NaN as ``-inf``, lowest index first on ties)."""
    return np.argsort(-np.where(np.isnan(row), -np.inf, row), kind="stable")


def draft_candidates(rng, logits, nxt, sib, *, off_rank: float = 0.25) -> np.ndarray:
    """Candidates of one request (int64 [n]): each node's children carry its row's tokens in
    rank order (largest logit first, NaN as ``-inf``, lowest index on ties); with probability
    ``off_rank`` a child takes a random token or repeats its elder sibling's instead."""
    n, vocab = logits.shape
    cand = rng.integers(0, vocab, n)
    for node, kids in parents(nxt, sib).items():
        order = _rank_order(logits[node])
        for rank, kid in enumerate(kids):
            pick = rng.random()
            if pick >= off_rank:
                cand[kid] = order[min(rank, vocab - 1)]
            elif pick < off_rank / 2 and rank:
                cand[kid] = cand[kids[rank - 1]]
    return cand.astype(np.int64)


def _coin_edges(rng, call: Call, share: float) -> None:
    """Replace a ``share`` of the coins by 0, 0.99999994, 1 or the first child's probability
    (the coin equals ``prob_acc``: accepted)."""
    coins = call.uniform_samples
    for b in np.nonzero(~call.greedy)[0]:
        kids = parents(call.retrive_next_token[b], call.retrive_next_sibling[b])
        scale = temperature_scale(call.temperatures[b])
        top_k = 0 if call.top_k is None else int(call.top_k[b])
        top_p = 1.0 if call.top_p is None else call.top_p[b]
        for node in range(call.nodes):
            pick = rng.random() / share
            if pick < 0.4 and node in kids:
                row = row_distribution(call.target_logits[b, node], scale, top_k, top_p)
                coins[b, node] = row.probability(int(call.candidates[b, kids[node][0]]))
            elif pick < 1:
                coins[b, node] = rng.choice([0.0, _BELOW_ONE, 1.0])


def _vocab(rng, max_vocab: int) -> int:
    choices = [v for v in (1, 2, 3, 7, 9, 15, 17, 31, 33, 63) if v <= max_vocab]
    return int(rng.choice(choices + [int(rng.integers(1, max_vocab + 1)), max_vocab] * 3))


def random_call(rng, *, max_nodes: int, max_steps: int, max_vocab: int,
                batch: int | None = None, logit_format: str = "float32",
                mode: str | None = None, name: str = "random call") -> Call:
    """A random call: ``B`` (1..4) random trees of ``n`` (2..``max_nodes``) positions and depth
    <= 8 in the styles of ``random_tree``; ``S`` 2..``max_steps``; ``V`` 1..``max_vocab``
    (small and non-multiples of the port width often); rows of one style or of mixed styles
    (``notes["styles"]``); per request greedy (T = 0, 1e-7, just below 1e-6) or T log-uniform
    in 0.05..10 (or exactly 1e-6 or 1); ``top_k``/``top_p`` per request on or off (None in a
    quarter of the calls); coins with edge values in half the calls; thresholds mostly 1.0;
    ``row_pad`` 0..2; ``mode`` random when None (``sampling`` 70 %)."""
    mode = mode or str(rng.choice(MODES, p=[0.7, 0.3]))
    b = batch or int(rng.integers(1, 5))
    n = int(rng.choice([2, 3, int(rng.integers(2, max_nodes + 1)), max_nodes]))
    s = int(rng.integers(2, max_steps + 1))
    vocab = _vocab(rng, max_vocab)
    nxt, sib = np.full((b, n), -1, np.int64), np.full((b, n), -1, np.int64)
    one_style = rng.random() < 0.4
    styles = np.full((b, n), rng.choice(STYLES)) if one_style else rng.choice(STYLES, (b, n))
    logits = np.empty((b, n, vocab), F32)
    candidates = np.empty((b, n), np.int64)
    for req in range(b):
        nxt[req], sib[req] = random_tree(rng, n, max_depth=int(rng.integers(1, 9)))
        for i in range(n):
            row = logit_row(rng, vocab, str(styles[req, i]))
            logits[req, i] = to_bfloat16(row) if logit_format == "bfloat16" else row
        candidates[req] = draft_candidates(rng, logits[req], nxt[req], sib[req],
                                           off_rank=rng.choice([0.1, 0.25, 0.6]))
    ridx = np.arange(b * n, dtype=np.int64).reshape(b, n)
    if rng.random() < 0.2:
        ridx = rng.permutation(b * n).astype(np.int64).reshape(b, n)
    temps = np.exp(rng.uniform(np.log(0.05), np.log(10.0), b)).astype(F32)
    pick = rng.random(b)
    temps[pick < 0.4] = rng.choice([1e-6, 1.0], int((pick < 0.4).sum()))
    temps[pick < 0.3] = rng.choice(_GREEDY_TEMPERATURES, int((pick < 0.3).sum()))
    top_k = None if rng.random() < 0.25 else np.where(
        rng.random(b) < 0.6,
        rng.choice([1, 2, vocab - 1, vocab, vocab + 3, 0, -2, int(rng.integers(1, vocab + 1))],
                   b), 0).astype(np.int32)
    top_p = None if rng.random() < 0.25 else np.where(
        rng.random(b) < 0.6, rng.choice([0.0, 0.5, 0.8, 0.999, 1.0, rng.uniform(0.1, 1)], b),
        1.0).astype(F32)
    thresholds = [(1.0, 1.0)] * 6 + [(0.5, 1.0), (1.0, 0.5), (0.9, 0.3), (0.0, 0.0),
                                     (1.0, 1e-12)]
    single, acc = thresholds[int(rng.integers(0, len(thresholds)))]
    call = Call(name, mode, candidates, ridx, nxt, sib, s, logits, temps, top_k=top_k,
                top_p=top_p, threshold_single=single, threshold_acc=acc,
                logit_format=logit_format, row_pad=int(rng.integers(0, 3)),
                notes={"styles": styles})
    if mode == "lfsr":
        call.seeds = rng.integers(0, 2**32, b, dtype=np.uint64).astype(np.int64)
        call.seeds[rng.random(b) < 0.1] = 0
    else:
        call.uniform_samples = rng.random((b, n), dtype=F32)
        finals = rng.random(b, dtype=F32)
        edge = rng.random(b) < 0.2
        finals[edge] = rng.choice(np.array([0.0, _BELOW_ONE, 1.0], F32), int(edge.sum()))
        call.uniform_samples_for_final_sampling = finals
        if rng.random() < 0.5:
            _coin_edges(rng, call, share=0.3)
    return call


def _directed(name, children, n, steps, rows, temps, *, ranks=0, coins=0.5, finals=0.5,
              logit_format="float32", mode="sampling", seeds=None, **fields) -> Call:
    """A call of ``B = len(temps)`` requests on one tree (``children``): candidate of node
    ``c`` = the token of rank ``ranks[b, c]`` (negative: from the end) of its parent's row."""
    b = len(temps)
    nxt, sib = (np.tile(links, (b, 1)) for links in tree_from_children(n, children))
    logits = np.asarray(rows, F32).reshape(b, n, -1)
    if logit_format == "bfloat16":
        logits = to_bfloat16(logits)
    ranks = np.broadcast_to(np.asarray(ranks), (b, n))
    candidates = np.zeros((b, n), np.int64)
    for req in range(b):
        for parent, kids in children.items():
            order = _rank_order(logits[req, parent])
            for kid in kids:
                candidates[req, kid] = order[int(ranks[req, kid]) % order.size]
    call = Call(name, mode, candidates, np.arange(b * n, dtype=np.int64).reshape(b, n), nxt,
                sib, steps, logits, np.asarray(temps, F32), logit_format=logit_format, **fields)
    if mode == "lfsr":
        call.seeds = np.asarray(seeds, np.int64)
    else:
        call.uniform_samples = np.broadcast_to(np.asarray(coins, F32).reshape(-1, 1)
                                               if np.ndim(coins) == 1 else
                                               np.asarray(coins, F32), (b, n)).copy()
        call.uniform_samples_for_final_sampling = np.broadcast_to(
            np.asarray(finals, F32), (b,)).copy()
    return call


def directed_calls(*, max_nodes: int = 64, max_steps: int = 8, max_vocab: int = 300,
                   logit_format: str = "float32") -> list[Call]:
    """The directed cases (each fits the limits given): width-1 chains accepted to ``S - 1``
    (the final row whole) and rejected at the root (K = 1), n = 2 with S = 2, V = 1, S = 1,
    all greedy with ties at the max, all LFSR (seed 0 included), NaN in every row, all rows
    ``-inf``, top_k = 1, top_p = 0, top-k/top-p edge values, the greedy temperature boundary,
    ``+inf``/huge/tiny rows, threshold corners, coin == prob_acc, final-coin corners, zero
    siblings rejected at the final row vs all rejected, and the largest tree of the build."""
    rng = np.random.default_rng(2024)
    v = min(37, max_vocab)  # not a multiple of any port width
    s = min(max_steps, 6)
    fmt = {"logit_format": logit_format}

    def rows(b, n, style, vocab=v):
        return [[logit_row(rng, vocab, style) for _ in range(n)] for _ in range(b)]

    def tree(n, *, style="uniform", depth=8):
        return parents(*random_tree(rng, n, max_depth=depth, style=style))

    chain = {i: [i + 1] for i in range(s - 1)}
    calls = [
        _directed("chain: accepted to S-1, final row whole", chain, s, s, rows(2, s, "peaked"),
                  [1.0, 0.0], coins=0.0, **fmt),
        _directed("K=1 chain: rejected at the root", chain, s, s, rows(2, s, "typical"),
                  [0.7, 0.0], ranks=-1, coins=_BELOW_ONE, **fmt),
        _directed("n=2, S=2: accepted, rejected, greedy", {0: [1]}, 2, 2, rows(3, 2, "peaked"),
                  [1.0, 1.0, 0.0], ranks=[[0, 0], [0, -1], [0, 0]], coins=[0.0, 1.0, 0.5],
                  **fmt),
        _directed("V=1: finite, -inf, NaN rows", {0: [1, 2], 1: [3]}, 4, min(s, 3),
                  [rows(1, 4, style, 1)[0] for style in ("typical", "allneginf", "nan")],
                  [1.0, 0.0, 2.5], **fmt),
        _directed("S=1: final draw at the root", {0: [1, 2]}, 3, 1, rows(2, 3, "typical"),
                  [0.9, 0.0], **fmt),
        _directed("all greedy, ties at the max", tree(min(max_nodes, 12)), min(max_nodes, 12),
                  s, rows(4, min(max_nodes, 12), "few"), _GREEDY_TEMPERATURES + (0.0,), **fmt),
        _directed("all LFSR, seed 0 included", tree(min(max_nodes, 16)), min(max_nodes, 16), s,
                  rows(4, min(max_nodes, 16), "peaked"), [1.0, 1.0, 0.5, 0.0], mode="lfsr",
                  seeds=[0, 1, 2**32 - 1, 123456789], **fmt),
        _directed("NaN in every row", chain, s, s, rows(2, s, "nan"), [1.0, 0.0], coins=0.0,
                  **fmt),
        _directed("all rows -inf (uniform)", {0: [1, 2, 3]}, 4, s, rows(2, 4, "allneginf"),
                  [1.0, 0.0], ranks=[0, 5, 0, 1], **fmt),
        _directed("top_k = 1", {0: [1, 2], 2: [3]}, 4, s, rows(2, 4, "typical"), [1.0, 3.0],
                  ranks=[0, 1, 0, 0], top_k=np.array([1, 1], np.int32), **fmt),
        _directed("top_p = 0, ties at the max", tree(min(max_nodes, 10)), min(max_nodes, 10), s,
                  rows(2, min(max_nodes, 10), "few"), [1.0, 0.5], coins=[0.0, 0.5],
                  top_p=np.zeros(2, F32), **fmt),
        _directed("top_k and top_p edges", tree(min(max_nodes, 10)), min(max_nodes, 10), s,
                  rows(4, min(max_nodes, 10), "typical"), [1.0] * 4,
                  top_k=np.array([0, -5, v, v + 10], np.int32),
                  top_p=np.array([1.0, 0.999, 0.5, 0.8], F32), **fmt),
        _directed("temperature at the greedy boundary", chain, s, s, rows(2, s, "typical"),
                  [1e-6, _GREEDY_TEMPERATURES[2]], **fmt),
        _directed("+inf, huge and tiny rows", {0: [1, 2], 1: [3], 3: [4]}, 5, s,
                  [rows(1, 5, style)[0] for style in ("posinf", "huge", "tiny")],
                  [1.0, 1.0, 0.3], **fmt),
        _directed("zero siblings rejected vs all rejected", {0: [1, 2, 3, 4, 5]}, 6, min(s, 4),
                  rows(2, 6, "typical"), [1.0, 2.0], ranks=[[0] * 6, [0, -1, -2, -3, -4, -5]],
                  coins=[0.0, 1.0], **fmt),
        _directed("final coin corners", {0: [1]}, 2, 2, rows(3, 2, "typical"), [1.0] * 3,
                  ranks=-1, coins=1.0, finals=[0.0, _BELOW_ONE, 1.0], **fmt),
    ]
    shared = tree(min(max_nodes, 16))
    base = rows(2, min(max_nodes, 16), "typical")
    for single, acc in ((0.0, 0.0), (1.0, 1e-12), (0.5, 1.0)):
        calls.append(_directed(f"thresholds ({single}, {acc})", shared, min(max_nodes, 16), s,
                               base, [1.0, 0.8], ranks=[[0], [-1]], coins=0.99,
                               threshold_single=single,
                               threshold_acc=acc, **fmt))
    # coin == prob_acc: the first child accepted exactly at the coin; one ulp above: rejected.
    equal = _directed("coin == prob_acc", {0: [1, 2]}, 3, 2, rows(1, 3, "typical") * 2,
                      [1.0, 1.0], **fmt)
    q = row_distribution(equal.target_logits[0, 0], temperature_scale(F32(1.0))) \
        .probability(int(equal.candidates[0, 1]))
    equal.uniform_samples[:, 0] = [q, np.nextafter(q, F32(1))]
    calls.append(equal)
    n, deep = max_nodes, max_steps
    big = _directed("largest tree", tree(n, style="deep"), n, deep,
                    rows(2, n, "peaked", min(max_vocab, 300)), [1.0, 0.0], coins=0.0,
                    row_pad=1, **fmt)
    big.retrive_index = rng.permutation(2 * n).astype(np.int64).reshape(2, n)
    return calls + [big]


def verify_step_call(*, seed: int, batch: int, node_top_k: int, tree_width: int, depth: int,
                     verify_num: int, vocab: int, logit_format: str = "float32",
                     head_mass: float = 0.95) -> Call:
    """One verify step at a benchmark contract point (the measurement), ``sampling`` mode.

    Trees: those of ``sim.reject_sample.generators.verify_step_call`` (the K4 golden's verify
    trees, ``n = min(verify_num, cumu_count)``, of ``batch`` full-width draft rounds at
    ``K = node_top_k``, width cap ``tree_width``, ``depth`` depths); ``S = depth + 1``.
    EAGLE-like target logits for a softmax at temperature 1 (top-k/top-p off, thresholds
    1.0): every row is a cheap noise *tail* (a rotation of one of four ``N(0, 2.5**2)`` rows)
    plus a *head* of ``K`` distinct tokens whose logits give them ``head_mass`` of the row's
    mass, shared by ``softmax(N(0, 1.5**2))`` in decreasing order; a node's children carry its
    row's head tokens in that order. A step then accepts about ``head_mass`` times the
    children's share of the head: mostly the first, second or third sibling. The golden reads
    ``accept_token_num + 1`` rows per request (the root and each accepted node; the final draw
    reuses the last one): about 3 to 4 of ``S = 6`` at the serving point (``notes``). Uniform
    coins; deterministic in ``seed``.
    """
    rng = np.random.default_rng(seed)
    nxt, sib, ridx, candidates = verify_step_tree(
        seed=seed, batch=batch, node_top_k=node_top_k, tree_width=tree_width, depth=depth,
        verify_num=verify_num, vocab=vocab)
    n = nxt.shape[1]
    pool = rng.standard_normal((4, vocab), dtype=F32) * F32(2.5)
    tails = np.concatenate([pool, pool], axis=1)
    tail_mass = np.exp(pool.astype(np.float64)).sum(axis=1)
    k = min(node_top_k, vocab)
    logits = np.empty((batch, n, vocab), F32)
    for req in range(batch):
        children = parents(nxt[req], sib[req])
        for i in range(n):
            which, shift = int(rng.integers(0, 4)), int(rng.integers(0, vocab))
            row = logits[req, i]
            row[:] = tails[which, shift:shift + vocab]
            head = rng.integers(0, vocab, k)
            while np.unique(head).size < k:
                head = rng.integers(0, vocab, k)
            share = np.exp(rng.standard_normal(k) * 1.5)
            share = np.sort(share / share.sum())[::-1]
            row[head] = np.log(head_mass / (1 - head_mass) * tail_mass[which] * share)
            if logit_format == "bfloat16":
                row[:] = to_bfloat16(row)
            for rank, kid in enumerate(children.get(i, ())):
                candidates[req, kid] = head[rank % k]
    return Call(f"verify step B={batch} n={n} S={depth + 1} V={vocab}", "sampling",
                candidates, ridx, nxt, sib, depth + 1, logits, np.ones(batch, F32),
                uniform_samples=rng.random((batch, n), dtype=F32),
                uniform_samples_for_final_sampling=rng.random(batch, dtype=F32),
                logit_format=logit_format,
                notes={"point": {"node_top_k": node_top_k, "tree_width": tree_width,
                                 "depth": depth, "verify_num": verify_num}})
