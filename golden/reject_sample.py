"""K6 tree rejection sampling (docs/kernels.md §8) and the greedy tree verify, as numpy goldens.

``tree_speculative_sampling_target_only`` and ``verify_tree_greedy`` take the arguments of
sgl-kernel's Python wrappers, in the same order, with the same dtypes, and write the same
outputs in place, so SGLang code can call them instead. ``draft_tree_reject_sample`` is the
same sampler with its coins drawn from the on-chip LFSR (``golden.lfsr``), seeded per request.

Per request ``b`` the §8 pseudo-code runs exactly: each ``+``, ``-``, ``*``, ``/`` is one
numpy float32 operation (IEEE round to nearest even), comparisons are IEEE float32
comparisons, and the residual's ``sum(r)`` and prefix sums are sequential left to right
(``np.add.accumulate`` in float32, strictly in order). In particular the acceptance test is

    q > 0 and (coin <= float32(prob_acc) / float32(max(threshold_acc, 1e-9))
               or q >= float32(threshold_single))

with a correctly rounded float32 division (``q > 0`` is ours, not SGLang's: a token of
target probability 0 is never accepted, not even with a coin of exactly 0.0 or
``threshold_single == 0``; docs/decisions.md, "Zero-probability tokens"); with
``threshold_acc == 1.0`` (the default, and the lossless setting) the quotient is
``prob_acc`` itself. Hardware that has no divider must produce the same quotient (a
correctly rounded divider, or a comparison proven equivalent).

Every check runs before the first write: the op computes each request's outputs first
(which also catches a sibling cycle in the links) and then writes them, in the order the
pseudo-code would.
"""

from __future__ import annotations

import numbers

import numpy as np

from ._abi import check_index_range, in_view, out_view
from .lfsr import GaloisLFSR32Model

__all__ = [
    "tree_speculative_sampling_target_only",
    "verify_tree_greedy",
    "draft_tree_reject_sample",
    "lfsr_coins",
]

_F32 = np.float32
_ZERO = np.float32(0.0)
_MIN_THRESHOLD_ACC = 1e-9
_INT32_MAX = 2**31 - 1


# --- argument checks -------------------------------------------------------------------------


def _threshold(name, value) -> np.float32:
    """A threshold in [0, 1] as the float32 the kernel compares with."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise ValueError(f"`{name}` must be a real number, not {value!r}")
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"`{name}` must be between 0 and 1, not {value}")
    return np.float32(value)


def _check_deterministic(value) -> None:
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"`deterministic` must be a bool, not {value!r}")


def _shape_of(name, array, ndim):
    if not isinstance(array, np.ndarray):
        raise ValueError(f"`{name}` must be a numpy array, not {type(array).__name__}")
    if array.ndim != ndim:
        raise ValueError(f"`{name}` must have {ndim} dimensions, not shape {array.shape}")
    return array.shape


def _tree_views(predicts, accept_index, accept_token_num, candidates, retrive_index,
                retrive_next_token, retrive_next_sibling):
    """Check the arguments both tree kernels share; return ``(views, B, n, S)``.

    ``predicts`` may hold ``B*n`` or ``B*n + 1`` elements (SGLang allocates one spare); the
    spare is never written.
    """
    b, s = _shape_of("accept_index", accept_index, 2)
    if s < 1:
        raise ValueError("`accept_index` must have at least one column (S >= 1)")
    if not isinstance(candidates, np.ndarray) or candidates.ndim != 2:
        raise ValueError("`candidates` must be a 2-D numpy array [B, n]")
    n = candidates.shape[1]
    if n < 1:
        raise ValueError("`candidates` must have at least one column (n >= 1)")
    v = {
        "accept_index": out_view("accept_index", accept_index, (b, s), np.int32),
        "accept_token_num": out_view("accept_token_num", accept_token_num, (b,), np.int32),
    }
    if not isinstance(predicts, np.ndarray):
        raise ValueError(f"`predicts` must be a numpy array, not {type(predicts).__name__}")
    size = b * n + 1 if predicts.size == b * n + 1 else b * n
    v["predicts"] = out_view("predicts", predicts, (size,), np.int32)
    for name, array in (
        ("candidates", candidates),
        ("retrive_index", retrive_index),
        ("retrive_next_token", retrive_next_token),
        ("retrive_next_sibling", retrive_next_sibling),
    ):
        v[name] = in_view(name, array, (b, n), np.int64)
    check_index_range("retrive_index", v["retrive_index"], 0, b * n, "B*n")
    check_index_range("retrive_next_token", v["retrive_next_token"], -1, n, "n")
    check_index_range("retrive_next_sibling", v["retrive_next_sibling"], -1, n, "n")
    return v, b, n, s


# --- the shared traversal --------------------------------------------------------------------


def _walk(b, n, s, v, accept):
    """Run the §8 traversal of request ``b``; ``accept(cur, row)`` decides one node.

    ``accept`` returns True to accept node ``cur`` (the row is the last accepted node's); the
    caller keeps its own float state in the closure. Returns ``(writes, accept_row, accepted,
    last_node, last)``: the ``predicts`` writes in order, the ``accept_index`` entries after
    the first, the count, the last accepted node (0 = root) and its flat index.
    """
    nxt, sib = v["retrive_next_token"][b], v["retrive_next_sibling"][b]
    cand, ridx = v["candidates"][b], v["retrive_index"][b]
    last = int(ridx[0])
    row = 0
    writes, accept_row = [], []
    cur = 0
    for _step in range(1, s):
        cur = int(nxt[cur])
        visited = 0
        while cur != -1:
            visited += 1
            if visited > n:
                raise ValueError(
                    f"`retrive_next_sibling` of request {b} has a cycle (a sibling walk "
                    f"longer than n = {n})"
                )
            if accept(cur, row):
                row = cur
                writes.append((last, int(cand[cur])))
                last = int(ridx[cur])
                accept_row.append(last)
                break
            cur = int(sib[cur])
        if cur == -1:
            break
    return writes, accept_row, len(accept_row), row, last


def _commit(v, results):
    """Write every request's outputs (after all of them were computed and checked)."""
    for b, (writes, accept_row, accepted) in enumerate(results):
        for index, token in writes:
            v["predicts"][index] = token
        v["accept_index"][b, 0] = v["retrive_index"][b, 0]
        v["accept_index"][b, 1 : 1 + accepted] = accept_row
        v["accept_token_num"][b] = accepted


# --- K6 sampling -----------------------------------------------------------------------------


def _accepts(q, coin, quotient, threshold_single) -> bool:
    """The §8 acceptance test of a candidate of target probability ``q``: ``coin <=
    quotient`` (``prob_acc / threshold_acc``) or ``q >= threshold_single``, and never for
    ``q`` of 0 (or NaN): the ``q > 0`` guard is ours, not SGLang's (docs/decisions.md)."""
    return bool(q > 0 and (coin <= quotient or q >= threshold_single))


def _residual_sample(target_row, draft_row, subtract, coin):
    """Final draw of §8 from one row: returns the token index (int).

    ``r[j] = max(target[j] - draft[j], 0)`` (``draft`` skipped when ``subtract`` is false),
    ``u = coin * sum(r)``, answer = first ``j`` with ``r[j] > 0`` and ``prefix(r)[j] > u``;
    fallback the last ``j`` with ``r[j] > 0``, else ``V - 1``. Sums are sequential float32.
    """
    diff = target_row - draft_row if subtract else target_row
    r = np.where(diff > _ZERO, diff, _ZERO)
    prefix = np.add.accumulate(r)  # float32, strictly sequential
    u = _F32(coin) * prefix[-1]
    positive = r > _ZERO
    hit = positive & (prefix > u)
    first = int(hit.argmax())
    if hit[first]:
        return first
    if positive.any():
        return r.size - 1 - int(positive[::-1].argmax())
    return r.size - 1


def _sample_request(b, n, s, v, coins, coin_final, target, thr_single, thr_acc):
    """All outputs of request ``b`` (nothing written): ``(writes, accept_row, accepted,
    draft_writes)`` with ``draft_writes`` the ``(node_row, token, q)`` writes in order."""
    cand = v["candidates"][b]
    state = {"prob_acc": _ZERO, "coin": _F32(coins[b, 0])}
    draft_writes = []

    def accept(cur, row):
        tok = int(cand[cur])
        q = target[b, row, tok]
        state["prob_acc"] = _F32(state["prob_acc"] + q)
        if _accepts(q, state["coin"], _F32(state["prob_acc"] / thr_acc), thr_single):
            state["prob_acc"] = _ZERO
            state["coin"] = _F32(coins[b, cur])
            return True
        draft_writes.append((row, tok, q))
        return False

    writes, accept_row, accepted, row, last = _walk(b, n, s, v, accept)
    # draft_probs is zero on entry, so its row holds exactly this call's writes at ``row``
    # (subtracting an all-zero row changes nothing, so it is skipped).
    at_row = [(tok, q) for node_row, tok, q in draft_writes if node_row == row]
    draft_row = np.zeros(target.shape[2], dtype=np.float32)
    for tok, q in at_row:
        draft_row[tok] = q
    subtract = accepted != s - 1 and bool(at_row)
    token = _residual_sample(target[b, row], draft_row, subtract, coin_final[b])
    writes.append((last, token))
    return writes, accept_row, accepted, draft_writes


def tree_speculative_sampling_target_only(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    uniform_samples,
    uniform_samples_for_final_sampling,
    target_probs,
    draft_probs,
    threshold_single=1.0,
    threshold_acc=1.0,
    deterministic=True,
) -> None:
    """K6: tree speculative sampling against the target probabilities (§8), in place.

    Same arguments, order, dtypes and in-place behaviour as sgl-kernel's wrapper.

    Parameters:
        predicts: out, int32 [B*n] (or [B*n + 1], SGLang's allocation), pre-filled -1 by the
            caller: ``predicts[i]`` = the token that follows flat node ``i``; only the
            accepted nodes' entries are written.
        accept_index: out, int32 [B, S] (S = num_speculative_tokens), pre-filled -1: the
            accepted flat node ids, root first; entries past the accepted count untouched.
        accept_token_num: out, int32 [B]: accepted draft tokens (root excluded).
        candidates: in, int64 [B, n]: draft token per tree position, in ``[0, V)``.
        retrive_index: in, int64 [B, n]: flat node id (``b*n + i``) of each position.
        retrive_next_token, retrive_next_sibling: in, int64 [B, n]: first child / next
            sibling by position, -1 none.
        uniform_samples: in, float32 [B, n]: ``coins[b, i]`` is used after accepting node i
            (``coins[b, 0]`` at the root).
        uniform_samples_for_final_sampling: in, float32 [B]: the residual draw's coin.
        target_probs: in, float32 [B, n, V] (or [B*n, V]), no NaN.
        draft_probs: in/out, float32, same shape, all zero on entry: receives the target
            probability ``q`` of every rejected draft token at its parent's row.
        threshold_single: accept a token whose own target probability is ``>=`` this
            (float32), 0..1.
        threshold_acc: divisor of the accumulated probability (``max(threshold_acc, 1e-9)``
            as float32), 0..1.
        deterministic: accepted for compatibility; the golden's sums are always sequential.

    Returns None. Raises ValueError before writing anything for invalid arguments.
    """
    v, b, n, s, (coins, coin_final, target, draft, thr_single, thr_acc) = sampling_arguments(
        predicts, accept_index, accept_token_num, candidates, retrive_index,
        retrive_next_token, retrive_next_sibling, uniform_samples,
        uniform_samples_for_final_sampling, target_probs, draft_probs, threshold_single,
        threshold_acc, deterministic)

    results, all_draft_writes = [], []
    for req in range(b):
        writes, accept_row, accepted, draft_writes = _sample_request(
            req, n, s, v, coins, coin_final, target, thr_single, thr_acc)
        results.append((writes, accept_row, accepted))
        all_draft_writes.append(draft_writes)

    for req, draft_writes in enumerate(all_draft_writes):
        for node_row, tok, q in draft_writes:
            draft[req, node_row, tok] = q
    _commit(v, results)


def sampling_arguments(predicts, accept_index, accept_token_num, candidates, retrive_index,
                       retrive_next_token, retrive_next_sibling, uniform_samples,
                       uniform_samples_for_final_sampling, target_probs, draft_probs,
                       threshold_single, threshold_acc, deterministic):
    """:func:`tree_speculative_sampling_target_only`'s checks (``ValueError`` before anything
    is written), shared with its hardware runner (``host.k6_rtl``). Returns ``(views, B, n,
    S, (coins, final coins, target, draft, threshold_single, threshold_acc))``, the
    thresholds as float32, ``threshold_acc`` at least 1e-9."""
    v, b, n, s = _tree_views(predicts, accept_index, accept_token_num, candidates,
                             retrive_index, retrive_next_token, retrive_next_sibling)
    thr_single = _threshold("threshold_single", threshold_single)
    thr_acc = _F32(max(float(_threshold("threshold_acc", threshold_acc)), _MIN_THRESHOLD_ACC))
    _check_deterministic(deterministic)
    coins = in_view("uniform_samples", uniform_samples, (b, n), np.float32)
    coin_final = in_view("uniform_samples_for_final_sampling",
                         uniform_samples_for_final_sampling, (b,), np.float32)
    if not isinstance(target_probs, np.ndarray) or target_probs.ndim not in (2, 3):
        raise ValueError("`target_probs` must be a numpy array [B, n, V] or [B*n, V]")
    vocab = target_probs.shape[-1]
    if vocab < 1:
        raise ValueError("`target_probs` must have a vocabulary dimension V >= 1")
    target = in_view("target_probs", target_probs, (b, n, vocab), np.float32)
    draft = out_view("draft_probs", draft_probs, (b, n, vocab), np.float32)
    check_index_range("candidates", v["candidates"], 0, vocab, "V")
    if np.isnan(target).any():
        raise ValueError("`target_probs` must not contain NaN")
    if (draft != 0).any():
        raise ValueError("`draft_probs` must be all zero on entry")
    return v, b, n, s, (coins, coin_final, target, draft, thr_single, thr_acc)


# --- greedy ----------------------------------------------------------------------------------


def verify_tree_greedy(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    target_predict,
) -> None:
    """Greedy tree verify (sgl-kernel ``verify_tree_greedy``), in place.

    The §8 traversal with ``accept`` iff ``candidates[b, cur] == target_predict[last]``
    (``last`` = flat id of the last accepted node); afterwards ``predicts[last] =
    target_predict[last]`` (the bonus token).

    Parameters:
        predicts, accept_index, accept_token_num, candidates, retrive_index,
        retrive_next_token, retrive_next_sibling: as in
        :func:`tree_speculative_sampling_target_only`; token ids in ``[0, 2^31)``.
        target_predict: in, int64 [B, n] (or [B*n]): the target's argmax at each flat node.

    Returns None. Raises ValueError before writing anything for invalid arguments.
    """
    v, b, n, s, target = greedy_arguments(predicts, accept_index, accept_token_num, candidates,
                                          retrive_index, retrive_next_token,
                                          retrive_next_sibling, target_predict)

    results = []
    for req in range(b):
        cand, ridx = v["candidates"][req], v["retrive_index"][req]

        def accept(cur, row, cand=cand, ridx=ridx):
            return cand[cur] == target[ridx[row]]

        writes, accept_row, accepted, _row, last = _walk(req, n, s, v, accept)
        writes.append((last, int(target[last])))
        results.append((writes, accept_row, accepted))
    _commit(v, results)


def greedy_arguments(predicts, accept_index, accept_token_num, candidates, retrive_index,
                     retrive_next_token, retrive_next_sibling, target_predict):
    """:func:`verify_tree_greedy`'s checks, shared with its hardware runner
    (``host.k6_rtl``). Returns ``(views, B, n, S, target_predict as int64 [B*n])``."""
    v, b, n, s = _tree_views(predicts, accept_index, accept_token_num, candidates,
                             retrive_index, retrive_next_token, retrive_next_sibling)
    target = in_view("target_predict", target_predict, (b * n,), np.int64)
    check_index_range("candidates", v["candidates"], 0, _INT32_MAX + 1, "2**31")
    check_index_range("target_predict", target, 0, _INT32_MAX + 1, "2**31")
    return v, b, n, s, target


# --- LFSR coins ------------------------------------------------------------------------------


def lfsr_coins(seeds, num_draft_tokens):
    """The coin arrays ``draft_tree_reject_sample`` uses: ``(uniform_samples [B, n],
    uniform_samples_for_final_sampling [B])``, float32.

    Request ``b``'s generator is seeded with ``seeds[b]``; draws ``1..n`` are
    ``uniform_samples[b, 0..n-1]`` (node order) and draw ``n + 1`` is the final coin.
    """
    n = int(num_draft_tokens)
    coins = GaloisLFSR32Model.model_coins_batch(seeds, n + 1)
    return np.ascontiguousarray(coins[:, :n]), np.ascontiguousarray(coins[:, n])


def tree_lfsr_coins(candidates, seeds):
    """:func:`lfsr_coins` for a tree call: ``seeds`` checked against ``candidates`` [B, n]."""
    if not isinstance(candidates, np.ndarray) or candidates.ndim != 2:
        raise ValueError("`candidates` must be a 2-D numpy array [B, n]")
    b, n = candidates.shape
    if not isinstance(seeds, np.ndarray) or seeds.dtype.kind not in "iu" or seeds.shape != (b,):
        raise ValueError(f"`seeds` must be an integer numpy array of shape ({b},)")
    return lfsr_coins(seeds, n)


def draft_tree_reject_sample(
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    seeds,
    target_probs,
    draft_probs,
    threshold_single=1.0,
    threshold_acc=1.0,
    deterministic=True,
) -> None:
    """K6 with on-chip coins: :func:`tree_speculative_sampling_target_only` whose two coin
    arrays are :func:`lfsr_coins` ``(seeds, n)``.

    Parameters: as :func:`tree_speculative_sampling_target_only`, with ``seeds`` (integer
    array [B], values in ``[0, 2^32)``; 0 is replaced by the LFSR's ``ZERO_SEED_STATE``) in
    place of ``uniform_samples`` and ``uniform_samples_for_final_sampling``.
    """
    coins, coin_final = tree_lfsr_coins(candidates, seeds)
    tree_speculative_sampling_target_only(
        predicts, accept_index, accept_token_num, candidates, retrive_index,
        retrive_next_token, retrive_next_sibling, coins, coin_final, target_probs,
        draft_probs, threshold_single, threshold_acc, deterministic,
    )
