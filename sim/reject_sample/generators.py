"""K6 calls for the testbenches: random, directed, the figures' and the measurement's.

Random calls (:func:`random_call`: random trees, probability rows, coins, thresholds and
modes), the directed cases (:func:`directed_calls`), the golden's lossless-check tree with LFSR
coins (:func:`lossless_call`), the figures' workloads (:func:`perf_call`, :func:`worst_call`,
:func:`row_call`) and one verify step of a benchmark contract point
(:func:`verify_step_call`). Every generator is deterministic in its ``rng`` or seed.
"""

import numpy as np

from sim.targets import draft_round_node_count

from .call import F32, MODES, Call

__all__ = ["random_tree", "random_probs", "random_call", "directed_calls", "lossless_call",
           "perf_call", "worst_call", "row_call", "tree_from_children", "verify_step_tree",
           "verify_step_call"]


def random_tree(rng, n: int, *, max_depth: int = 8, style: str | None = None):
    """SGLang-format links of one tree of ``n`` positions (children in ascending position).

    ``style``: ``uniform`` (parent uniform among shallow enough nodes), ``deep`` (mostly the
    latest node: chains), ``wide`` (mostly the root or its children), ``mixed`` (any).
    """
    style = style or rng.choice(["uniform", "deep", "wide", "mixed"])
    nxt = np.full(n, -1, np.int64)
    sib = np.full(n, -1, np.int64)
    depth = np.zeros(n, np.int64)
    last_child = {}
    for i in range(1, n):
        allowed = np.nonzero(depth[:i] < max_depth)[0]
        if style == "deep" and rng.random() < 0.8 and depth[i - 1] < max_depth:
            parent = i - 1
        elif style == "wide" and rng.random() < 0.8:
            shallow = allowed[depth[allowed] <= 1]
            parent = int(rng.choice(shallow))
        elif style == "mixed" and rng.random() < 0.5:
            parent = int(allowed[-min(len(allowed), 3):][rng.integers(0, min(len(allowed), 3))])
        else:
            parent = int(rng.choice(allowed))
        depth[i] = depth[parent] + 1
        if parent in last_child:
            sib[last_child[parent]] = i
        else:
            nxt[parent] = i
        last_child[parent] = i
    return nxt, sib


def random_probs(rng, shape, *, kind: str | None = None) -> np.ndarray:
    """float32 probability rows: smooth, peaked, sparse, dyadic (ties), one-hot, tiny."""
    kind = kind or rng.choice(["smooth", "peaked", "sparse", "dyadic", "onehot", "tiny"])
    if kind == "smooth":
        p = rng.random(shape)
    elif kind == "peaked":
        p = rng.random(shape) ** 12
    elif kind == "sparse":
        p = rng.random(shape) * (rng.random(shape) < 0.15)
    elif kind == "dyadic":
        p = rng.integers(0, 4, shape) / 8.0
    elif kind == "onehot":
        p = np.zeros(shape)
        flat = p.reshape(-1, shape[-1])
        flat[np.arange(flat.shape[0]), rng.integers(0, shape[-1], flat.shape[0])] = 1.0
    else:
        p = rng.random(shape) * 2.0 ** -rng.integers(100, 149, shape)
    p = p.astype(np.float64)
    if kind not in ("dyadic", "onehot", "tiny"):
        total = p.sum(axis=-1, keepdims=True)
        p = np.where(total > 0, p / np.where(total > 0, total, 1), 0)
    return p.astype(F32)


def _coins(rng, target, candidates, nxt, shape, *, edges: bool):
    coins = rng.random(shape, dtype=np.float32)
    if edges:
        b, n = shape
        for req in range(b):
            for i in range(n):
                pick = rng.random()
                child = nxt[req, i]
                if pick < 0.25 and child >= 0:
                    # Exactly the first child's probability: coin == prob_acc.
                    coins[req, i] = target[req, i, candidates[req, child]]
                elif pick < 0.3:
                    coins[req, i] = 0.0
                elif pick < 0.35:
                    coins[req, i] = 1.0
    return coins


def random_call(rng, *, name: str, max_nodes: int = 64, max_steps: int = 8, lanes: int = 8,
                max_vocab: int = 300, mode: str | None = None, batch: int | None = None,
                nodes: int | None = None) -> Call:
    """A random call: random trees (depth <= 8), distributions, coins, thresholds."""
    mode = mode or rng.choice(MODES, p=[0.5, 0.3, 0.2])
    b = batch or int(rng.integers(1, 4))
    n = nodes or int(rng.choice([1, 2, 3, int(rng.integers(1, max_nodes + 1)), max_nodes]))
    s = int(rng.integers(1, max_steps + 1))
    vocab = max(1, int(rng.choice([1, 2, lanes - 1, lanes, lanes + 1,
                                   int(rng.integers(1, max_vocab + 1))])))
    nxt = np.empty((b, n), np.int64)
    sib = np.empty((b, n), np.int64)
    for req in range(b):
        nxt[req], sib[req] = random_tree(rng, n)
    ridx = np.arange(b * n, dtype=np.int64).reshape(b, n)
    if rng.random() < 0.2:
        ridx = rng.permutation(b * n).astype(np.int64).reshape(b, n)
    if mode == "greedy":
        token_space = int(rng.choice([4, 50, 2**31 - 1]))
        candidates = rng.integers(0, token_space, (b, n), dtype=np.int64)
        predict = rng.integers(0, token_space, b * n, dtype=np.int64)
        # Make acceptances likely: the target's argmax at a node is often a child's token.
        for req in range(b):
            for i in range(n):
                child = nxt[req, i]
                if child >= 0 and rng.random() < 0.6:
                    kids = [child]
                    while sib[req, kids[-1]] >= 0:
                        kids.append(sib[req, kids[-1]])
                    predict[ridx[req, i]] = candidates[req, rng.choice(kids)]
        return Call(name, mode, candidates, ridx, nxt, sib, s, target_predict=predict)
    target = random_probs(rng, (b, n, vocab))
    if rng.random() < 0.2:  # subnormals and infinities
        spots = rng.random(target.shape) < 0.05
        target[spots] = rng.choice(np.array([np.inf, 1e-42, 3e38, 0.0], F32), spots.sum())
    candidates = rng.integers(0, vocab, (b, n), dtype=np.int64)
    if rng.random() < 0.3:  # sibling ties: repeated tokens
        candidates = rng.integers(0, min(vocab, 3), (b, n), dtype=np.int64)
    single, acc = [(1.0, 1.0), (0.0, 0.0), (0.3, 0.7), (1.0, 0.5), (0.9, 1.0),
                   (1.0, 1e-12), (0.05, 0.999)][int(rng.integers(0, 7))]
    call = Call(name, mode, candidates, ridx, nxt, sib, s, target_probs=target,
                threshold_single=single, threshold_acc=acc, row_pad=int(rng.integers(0, 3)))
    if mode == "lfsr":
        call.seeds = rng.integers(0, 2**32, b, dtype=np.uint64).astype(np.int64)
    else:
        call.uniform_samples = _coins(rng, target, candidates, nxt, (b, n),
                                      edges=rng.random() < 0.5)
        finals = rng.random(b, dtype=np.float32)
        for req in range(b):
            if rng.random() < 0.2:
                finals[req] = rng.choice(np.array([0.0, 1.0, -0.5, np.nan, 0.999999], F32))
        call.final_coins = finals
    return call


def tree_from_children(n: int, children: dict):
    """SGLang-format links ``(retrive_next_token, retrive_next_sibling)`` of a tree of ``n``
    positions given as ``{parent: [children in order]}``."""
    nxt = np.full(n, -1, np.int64)
    sib = np.full(n, -1, np.int64)
    for parent, kids in children.items():
        nxt[parent] = kids[0]
        for a, c in zip(kids, kids[1:], strict=False):
            sib[a] = c
    return nxt, sib


def _sampling_call(name, children, n, steps, target, candidates, coins, finals, *,
                   single=1.0, acc=1.0, row_pad=0) -> Call:
    nxt, sib = tree_from_children(n, children)
    b = target.shape[0]
    return Call(name, "sampling", np.asarray(candidates, np.int64).reshape(b, n),
                np.arange(b * n, dtype=np.int64).reshape(b, n),
                np.tile(nxt, (b, 1)), np.tile(sib, (b, 1)), steps,
                target_probs=target.astype(F32),
                uniform_samples=np.asarray(coins, F32).reshape(b, n),
                final_coins=np.asarray(finals, F32).reshape(b),
                threshold_single=single, threshold_acc=acc, row_pad=row_pad)


def directed_calls(lanes: int = 8, max_nodes: int = 64, max_steps: int = 8) -> list[Call]:
    """The directed cases: single node, chain, star, all rejected, all accepted, ties,
    probability equal to the coin, ``V`` not a multiple of ``lanes``, threshold corners,
    final-coin corners (0, 1, negative, NaN), empty and infinite residuals, greedy."""
    rng = np.random.default_rng(1234)
    calls = []
    vocab = 3 * lanes + 3  # not a multiple of the lanes
    s = min(max_steps, 8)

    # Single-node trees: the root row's residual straight away (S = 1 and S = 5).
    for steps in (1, min(5, max_steps)):
        target = random_probs(rng, (2, 1, vocab), kind="smooth")
        calls.append(_sampling_call(f"single node S={steps}", {}, 1, steps, target,
                                    [[3], [vocab - 1]], [[0.5], [0.2]], [0.3, 0.9]))

    # Chain 0 -> 1 -> ... : coins 0 accept every node (all accepted, S - 1 of them).
    n = min(max_nodes, 10)
    chain = {i: [i + 1] for i in range(n - 1)}
    target = random_probs(rng, (1, n, vocab), kind="smooth")
    calls.append(_sampling_call("chain, all accepted", chain, n, s, target,
                                rng.integers(0, vocab, n), np.zeros(n), [0.7]))
    # The same chain, coins 1: the first child is rejected, the residual masks it.
    calls.append(_sampling_call("chain, all rejected", chain, n, s, target,
                                rng.integers(0, vocab, n), np.ones(n), [0.7]))

    # Star: root with n - 1 children, all rejected (coin 1 above every partial sum).
    n = min(max_nodes, 12)
    star = {0: list(range(1, n))}
    target = random_probs(rng, (1, n, vocab), kind="peaked") * np.float32(0.5)
    candidates = np.arange(n) % vocab
    calls.append(_sampling_call("star, all rejected", star, n, s, target, candidates,
                                np.ones(n), [0.4]))
    # Star with the last child accepted through a coin equal to the partial sum.
    partial = np.add.accumulate(target[0, 0, candidates[1:]])
    coins = np.ones(n, F32)
    coins[0] = partial[-1]
    calls.append(_sampling_call("star, coin == prob_acc", star, n, s, target, candidates,
                                coins, [0.6]))

    # Ties: a dyadic row, repeated candidate tokens, equal partial sums.
    n = min(max_nodes, 7)
    tree = {0: [1, 2, 3], 1: [4, 5], 2: [6]} if n >= 7 else {0: list(range(1, n))}
    target = np.tile(np.float32(1 / 8), (1, n, vocab)).astype(F32)
    target[0, :, :2] = 0.25
    calls.append(_sampling_call("ties", tree, n, s, target, [0, 1, 1, 1, 0, 0, 2][:n],
                                np.full(n, 0.375), [0.5]))

    # q == coin exactly (the first child's own probability).
    target = random_probs(rng, (1, n, vocab), kind="dyadic")
    target[0, 0, 5] = 0.375
    calls.append(_sampling_call("q == coin", tree, n, s, target, [5] * n,
                                [0.375] * n, [0.25]))

    # Thresholds: (1, 1), (0, 0) and in between, same random tree and coins.
    n = min(max_nodes, 16)
    nxt, sib = random_tree(rng, n, style="uniform")
    children = {}
    for i in range(n):
        kid = nxt[i]
        while kid >= 0:
            children.setdefault(i, []).append(int(kid))
            kid = sib[kid]
    target = random_probs(rng, (2, n, vocab), kind="smooth")
    coins = rng.random((2, n), dtype=np.float32)
    cands = rng.integers(0, vocab, (2, n))
    for single, acc in ((1.0, 1.0), (0.0, 0.0), (0.5, 0.25), (1.0, 0.75), (0.02, 1.0),
                        (1.0, 1e-12)):
        calls.append(_sampling_call(f"thresholds ({single}, {acc})", children, n, s, target,
                                    cands, coins, [0.5, 0.8], single=single, acc=acc))

    # Final coins: 0, 1 (fallback: last positive), negative (first positive), NaN.
    target = random_probs(rng, (4, 1, vocab), kind="sparse")
    calls.append(_sampling_call("final coin corners", {}, 1, 1, target, [[0]] * 4,
                                np.zeros((4, 1)), [0.0, 1.0, -0.5, np.nan]))
    # Residual all zero (V - 1), with infinities, subnormals; V = 1; V = lanes.
    target = np.zeros((3, 1, vocab), F32)
    target[1, 0, 3] = np.inf
    target[1, 0, 7] = 2.0
    target[2, 0, ::3] = np.float32(1e-44)
    calls.append(_sampling_call("empty, infinite and subnormal residuals", {}, 1, 1, target,
                                [[0]] * 3, np.zeros((3, 1)), [0.5, 0.5, 0.7]))
    for v in (1, lanes, lanes + 1):
        target = random_probs(rng, (1, 3, v), kind="smooth")
        calls.append(_sampling_call(f"V = {v}", {0: [1, 2]}, 3, s, target, [0, 0, v - 1],
                                    [0.9, 0.1, 0.5], [0.5], row_pad=1))
    # Running sums that round up into the next binade and tie exactly (half an ulp).
    row = np.zeros((1, 1, vocab), F32)
    row[0, 0, :10] = [1 - 2**-24, 2**-25 + 2**-40, 2**-24, 2**-24, 2**-23, 2**-24, 0.5,
                      2**-24, 2**-25, 3 * 2**-25]
    calls.append(_sampling_call("binade roll and sum ties", {}, 1, 1, np.tile(row, (2, 1, 1)),
                                [[0], [0]], np.zeros((2, 1)), [0.99999994, 0.6]))
    # A rejected sibling that is the only positive element: the residual must mask it.
    target = np.zeros((1, 3, vocab), F32)
    target[0, 0, 4] = 0.25
    calls.append(_sampling_call("masked only positive", {0: [1, 2]}, 3, s, target, [4, 4, 4],
                                [0.75, 0.5, 0.5], [0.3]))

    # Greedy: chain accepted to S - 1, star with the match last, no match.
    n = min(max_nodes, 9)
    chain = {i: [i + 1] for i in range(n - 1)}
    nxt, sib = tree_from_children(n, chain)
    cands = np.arange(100, 100 + n, dtype=np.int64)
    predict = np.append(cands[1:], 7)
    calls.append(Call("greedy chain", "greedy", cands[None], np.arange(n)[None], nxt[None],
                      sib[None], s, target_predict=predict))
    star = {0: list(range(1, n))}
    nxt, sib = tree_from_children(n, star)
    predict = np.full(n, 2**31 - 1, np.int64)
    predict[0] = cands[-1]
    calls.append(Call("greedy star, match last", "greedy", cands[None], np.arange(n)[None],
                      nxt[None], sib[None], s, target_predict=predict))
    predict[0] = 5
    calls.append(Call("greedy star, no match", "greedy", cands[None], np.arange(n)[None],
                      nxt[None], sib[None], s, target_predict=predict))
    calls.append(Call("greedy single node", "greedy", np.array([[9]]), np.array([[0]]),
                      np.array([[-1]]), np.array([[-1]]), s, target_predict=np.array([4])))
    return calls


def lossless_call(rng, trials: int) -> Call:
    """The golden's lossless-check tree (root -> 1, 2, 3; 1 -> 4, 5; 2 -> 6; V = 8, S = 3,
    distinct sibling tokens), ``trials`` requests with LFSR coins from distinct random seeds
    and random rows."""
    children = {0: [1, 2, 3], 1: [4, 5], 2: [6]}
    nxt, sib = tree_from_children(7, children)
    target = random_probs(rng, (trials, 7, 8), kind="smooth")
    cands = np.array([0, 1, 2, 3, 4, 5, 6], np.int64)
    seeds = rng.choice(2**32, size=trials, replace=False).astype(np.int64)
    return Call("lossless tree, LFSR coins", "lfsr", np.tile(cands, (trials, 1)),
                np.arange(trials * 7, dtype=np.int64).reshape(trials, 7),
                np.tile(nxt, (trials, 1)), np.tile(sib, (trials, 1)), 3,
                target_probs=target, seeds=seeds)


def perf_call(rng, *, requests: int, nodes: int = 64, steps: int = 8, vocab: int = 64,
              acc: float = 1.0) -> Call:
    """The traversal figure: ``requests`` random trees of ``nodes`` positions (depth <= 8) drafted
    like EAGLE: a node's children carry the most probable tokens of its target row, in
    descending order (peaked softmax rows), uniform coins; so acceptances happen at realistic
    rates."""
    b, n = requests, nodes
    nxt = np.empty((b, n), np.int64)
    sib = np.empty((b, n), np.int64)
    logits = rng.standard_normal((b, n, vocab)) * 2.5
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    target = (p / p.sum(axis=-1, keepdims=True)).astype(F32)
    candidates = np.zeros((b, n), np.int64)
    for req in range(b):
        nxt[req], sib[req] = random_tree(rng, n, style="uniform")
        for parent in range(n):
            order = np.argsort(-target[req, parent], kind="stable")
            child, rank = nxt[req, parent], 0
            while child >= 0:
                candidates[req, child] = order[rank % vocab]
                child, rank = sib[req, child], rank + 1
    return Call(f"traversal n={n}", "sampling", candidates,
                np.arange(b * n, dtype=np.int64).reshape(b, n), nxt, sib, steps,
                target_probs=target, uniform_samples=rng.random((b, n), dtype=np.float32),
                final_coins=rng.random(b, dtype=np.float32), threshold_acc=acc)


def worst_call(*, nodes: int = 64, steps: int = 8, vocab: int = 64) -> Call:
    """The longest walk ``nodes`` positions allow at ``S = steps``: ``steps - 1`` levels of
    ``(nodes - 1) / (steps - 1)`` siblings where every sibling but the last is rejected and the
    last is accepted (dyadic probabilities 1/64, coin = siblings/64: the sums are exact), so
    every node is visited and ``steps - 1`` are accepted."""
    levels = steps - 1
    width = (nodes - 1) // levels
    n = 1 + levels * width
    children, parent = {}, 0
    for level in range(levels):
        first = 1 + level * width
        children[parent] = list(range(first, first + width))
        parent = first + width - 1
    target = np.full((1, n, vocab), 1 / 64, F32)
    coins = np.full(n, width / 64, F32)
    candidates = np.arange(n) % vocab
    return _sampling_call(f"worst case: {n - 1} visits, {levels} accepted", children, n, steps,
                          target, candidates, coins, [0.5])


def row_call(rng, *, vocab: int) -> Call:
    """The final-row figure: one single-node request whose residual is a softmax row of
    ``vocab`` elements (every element positive)."""
    logits = rng.standard_normal(vocab) * 3.0
    p = np.exp(logits - logits.max())
    target = (p / p.sum()).astype(F32).reshape(1, 1, vocab)
    return Call(f"final row V={vocab}", "sampling", np.zeros((1, 1), np.int64),
                np.zeros((1, 1), np.int64), np.full((1, 1), -1), np.full((1, 1), -1), 1,
                target_probs=target, uniform_samples=np.zeros((1, 1), F32),
                final_coins=np.array([0.6180339], F32))


def verify_step_tree(*, seed: int, batch: int, node_top_k: int, tree_width: int, depth: int,
                     verify_num: int, vocab: int):
    """The verify trees of one verify step at a benchmark contract point: the K4 golden's
    trees (``sim.tree_mask.vectors``) of ``batch`` full-width draft rounds at ``K =
    node_top_k``, width cap ``tree_width`` and ``depth`` depths, ``n = min(verify_num,
    cumu_count)``. Returns ``(retrive_next_token, retrive_next_sibling, retrive_index,
    candidates)``, int64 [B, n] (candidates: the draft tokens modulo ``vocab``)."""
    from sim.tree_mask.vectors import expected as tree_expected
    from sim.tree_mask.vectors import grown_call

    nodes = draft_round_node_count(node_top_k, tree_width, depth)
    tree_call = grown_call(f"verify step tree K={node_top_k} W={tree_width} depth={depth}",
                           seed=seed, batch=batch, k=node_top_k, width=tree_width,
                           depths=depth, maxn=nodes, verify_num=verify_num, mode=1,
                           vocab=vocab)
    if tree_call.cumu_count != nodes:
        raise AssertionError(f"the draft round stopped at cumu_count {tree_call.cumu_count} "
                             f"({tree_call.notes['stop']}), not the full {nodes}")
    n = tree_call.n(verify_num)
    tree = tree_expected(tree_call, verify_num)
    nxt, sib, ridx = (np.asarray(tree[key], np.int64).reshape(batch, n) for key in
                      ("retrive_next_token", "retrive_next_sibling", "retrive_index"))
    candidates = np.asarray(tree["draft_tokens"], np.int64).reshape(batch, n) % vocab
    return nxt, sib, ridx, candidates


def verify_step_call(*, batch: int, node_top_k: int, tree_width: int, depth: int,
                     verify_num: int, vocab: int, seed: int, head_mass: float = 0.9) -> Call:
    """One verify step at a benchmark contract point (the K6 measurement), ``sampling`` mode.

    Trees: the K4 golden's verify trees (``n = min(verify_num, nodes)`` positions) of
    ``batch`` cumulative trees grown by the golden draft round at ``K = node_top_k``, width
    cap ``tree_width`` and ``depth`` depths at full width (``sim.tree_mask.vectors``);
    ``S = depth + 1`` (the root plus one token per depth). Target rows ``[B, n, V]``, drafted
    like EAGLE (as ``perf_call``'s): each row is a mixture of a *head*, ``K`` distinct random
    tokens sharing ``head_mass`` by ``softmax(2 * N(0, 1))``, and a *tail*
    ``softmax(2.5 * N(0, 1))`` over the whole vocabulary carrying the rest; a node's children
    carry the head tokens of its row in descending probability (the draft model ranks the
    target's top K alike), so a step accepts with about ``head_mass`` times the children's
    share of the head. Uniform coins, thresholds 1.0 (SGLang's defaults). Deterministic in
    ``seed``.
    """
    rng = np.random.default_rng(seed)
    nxt, sib, ridx, candidates = verify_step_tree(
        seed=seed, batch=batch, node_top_k=node_top_k, tree_width=tree_width, depth=depth,
        verify_num=verify_num, vocab=vocab)
    n = nxt.shape[1]
    target = np.empty((batch, n, vocab), F32)
    k = min(node_top_k, vocab)
    for req in range(batch):
        for i in range(n):
            tail = np.exp(rng.standard_normal(vocab) * 2.5)
            row = tail * ((1.0 - head_mass) / tail.sum())
            head = rng.choice(vocab, size=k, replace=False)
            share = np.exp(rng.standard_normal(k) * 2.0)
            share = np.sort(share / share.sum())[::-1]
            row[head] += head_mass * share
            target[req, i] = row
            child, rank = nxt[req, i], 0
            while child >= 0:
                candidates[req, child] = head[rank % k]
                child, rank = sib[req, child], rank + 1
    return Call(f"verify step B={batch} n={n} S={depth + 1} V={vocab}", "sampling",
                candidates, ridx, nxt, sib, depth + 1, target_probs=target,
                uniform_samples=rng.random((batch, n), dtype=np.float32),
                final_coins=rng.random(batch, dtype=np.float32))
