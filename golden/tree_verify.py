"""Fused verify from logits (docs/kernels.md §10): tree speculative sampling that reads only
the logits rows its traversal visits, as a numpy golden of the hardware.

``tree_speculative_sampling_from_logits`` has the §10 ABI: §8's arguments with
``target_logits`` (float32 [B, n, V]) and ``temperatures`` (float32 [B]) in place of
``target_probs``/``draft_probs``, and ``top_k``/``top_p`` (None: off). Per request ``b``:

* ``temperatures[b] < 1e-6``: greedy, ``verify_tree_greedy`` with ``target_predict`` the
  argmax of each visited row (lowest index on ties; NaN counts as ``-inf``);
* otherwise §8's traversal (float32 ``prob_acc``, the same acceptance test) on the
  probabilities of ``golden.logit_rows`` (the hardware's fixed-point exponentials, exact
  normaliser, top-k then top-p), computed for visited rows only; the final draw samples the
  final row's kept tokens minus the siblings rejected there, by inverse CDF in token order.

``draft_tree_reject_sample_from_logits`` is the same op with its coins from the on-chip LFSR
(``golden.reject_sample.lfsr_coins``). ``tree_speculative_sampling_from_logits_reference`` is
its float64 reference (float64 softmax, renormalisation and decisions) for accuracy tests.
"""

from __future__ import annotations

import numpy as np

from ._abi import check_index_range, in_view, out_view
from .logit_rows import GREEDY_TEMPERATURE, row_distribution, temperature_scale
from .reject_sample import _accepts, _commit, _threshold, _tree_views, _walk, tree_lfsr_coins

__all__ = ["tree_speculative_sampling_from_logits", "draft_tree_reject_sample_from_logits",
           "tree_speculative_sampling_from_logits_reference", "visited_rows"]

_F32 = np.float32
_MIN_THRESHOLD_ACC = 1e-9


def _arguments(predicts, accept_index, accept_token_num, candidates, retrive_index,
               retrive_next_token, retrive_next_sibling, uniform_samples,
               uniform_samples_for_final_sampling, target_logits, temperatures,
               threshold_single, threshold_acc, top_k, top_p):
    """Check every argument before anything is written; returns the views and settings."""
    v, b, n, s = _tree_views(predicts, accept_index, accept_token_num, candidates,
                             retrive_index, retrive_next_token, retrive_next_sibling)
    if not isinstance(target_logits, np.ndarray) or target_logits.ndim not in (2, 3):
        raise ValueError("`target_logits` must be a numpy array [B, n, V] or [B*n, V]")
    vocab = target_logits.shape[-1]
    if vocab < 1:
        raise ValueError("`target_logits` must have a vocabulary dimension V >= 1")
    settings = {
        "B": b, "n": n, "S": s, "V": vocab,
        "logits": in_view("target_logits", target_logits, (b, n, vocab), np.float32),
        "temperatures": in_view("temperatures", temperatures, (b,), np.float32),
        "coins": in_view("uniform_samples", uniform_samples, (b, n), np.float32),
        "coin_final": in_view("uniform_samples_for_final_sampling",
                              uniform_samples_for_final_sampling, (b,), np.float32),
        "threshold_single": _threshold("threshold_single", threshold_single),
        "threshold_acc": _F32(max(float(_threshold("threshold_acc", threshold_acc)),
                                  _MIN_THRESHOLD_ACC)),
        "top_k": (np.zeros(b, np.int64) if top_k is None
                  else in_view("top_k", top_k, (b,), np.int32).astype(np.int64)),
        "top_p": (np.ones(b, np.float32) if top_p is None
                  else in_view("top_p", top_p, (b,), np.float32)),
    }
    check_index_range("candidates", v["candidates"], 0, vocab, "V")
    t = settings["temperatures"]
    bad = ~(np.isfinite(t) & (t >= 0))
    if bad.any():
        raise ValueError(f"`temperatures` must be finite and >= 0, not {t[bad][0]}")
    p = settings["top_p"]
    if not ((p >= 0) & (p <= 1)).all():
        raise ValueError("`top_p` values must be between 0 and 1")
    return v, settings


def _greedy_request(b, v, settings):
    """``verify_tree_greedy`` on the argmax of each visited row; returns the request's
    outputs and the rows it read."""
    logits, cand = settings["logits"][b], v["candidates"][b]
    rows = {}

    def argmax(row):
        if row not in rows:
            x = logits[row]
            rows[row] = int(np.where(np.isnan(x), -np.inf, x).argmax())
        return rows[row]

    trace = []

    def accept(cur, row):
        trace.append((row, cur, True, bool(cand[cur] == argmax(row))))
        return trace[-1][-1]

    writes, accept_row, accepted, row, last = _walk(b, settings["n"], settings["S"], v, accept)
    writes.append((last, argmax(row)))
    return (writes, accept_row, accepted), rows, {"greedy": True, "decisions": trace,
                                                  "final_row": row}


def _sampling_request(b, v, settings):
    """§8 on the fixed-point distributions of the visited rows; returns the request's outputs
    and the rows it read (row -> ``RowDistribution``)."""
    logits, cand = settings["logits"][b], v["candidates"][b]
    scale = temperature_scale(settings["temperatures"][b])
    top_k, top_p = int(settings["top_k"][b]), settings["top_p"][b]
    rows = {}

    def distribution(row):
        if row not in rows:
            rows[row] = row_distribution(logits[row], scale, top_k, top_p)
        return rows[row]

    state = {"prob_acc": _F32(0), "coin": settings["coins"][b, 0]}
    rejected = []  # (row, token)
    trace = []

    def accept(cur, row):
        token = int(cand[cur])
        q = distribution(row).probability(token)
        kept = bool(distribution(row).kept[token] and distribution(row).mantissa[token])
        trace.append((row, cur, kept, True))
        state["prob_acc"] = _F32(state["prob_acc"] + q)
        if _accepts(q, state["coin"], _F32(state["prob_acc"] / settings["threshold_acc"]),
                   settings["threshold_single"]):
            state["prob_acc"] = _F32(0)
            state["coin"] = settings["coins"][b, cur]
            return True
        rejected.append((row, token))
        trace[-1] = (row, cur, kept, False)
        return False

    writes, accept_row, accepted, row, last = _walk(b, settings["n"], settings["S"], v, accept)
    removed = sorted({token for node_row, token in rejected if node_row == row})
    writes.append((last, distribution(row).pick(settings["coin_final"][b], removed)))
    return (writes, accept_row, accepted), rows, {
        "greedy": False, "decisions": trace, "final_row": row, "removed": removed,
        "distribution": distribution(row), "coin_final": settings["coin_final"][b],
        "bonus": writes[-1][1]}


def _run(arguments, nan_flags, rows_read, traces=None):
    v, settings = _arguments(*arguments)
    flags = None if nan_flags is None else out_view("nan_flags", nan_flags, (settings["B"],),
                                                    np.bool_)
    for name, value in (("rows_read", rows_read), ("traces", traces)):
        if value is not None and not isinstance(value, list):
            raise ValueError(f"`{name}` must be a list, not {type(value).__name__}")
    results, read, walks = [], [], []
    for b in range(settings["B"]):
        greedy = settings["temperatures"][b] < _F32(GREEDY_TEMPERATURE)
        result, rows, walk = (_greedy_request if greedy else _sampling_request)(b, v, settings)
        results.append(result)
        read.append(rows)
        walks.append(walk)
    _commit(v, results)
    for b, rows in enumerate(read):
        if flags is not None:
            flags[b] = bool(np.isnan(settings["logits"][b, sorted(rows)]).any())
        if rows_read is not None:
            rows_read.append(sorted(rows))
    if traces is not None:
        traces.extend(walks)


def tree_speculative_sampling_from_logits(
    predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
    retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_logits,
    temperatures, threshold_single=1.0, threshold_acc=1.0, top_k=None, top_p=None, *,
    nan_flags=None, rows_read=None, traces=None,
) -> None:
    """§10: tree speculative sampling from logits, in place.

    Parameters:
        predicts, accept_index, accept_token_num, candidates, retrive_index,
        retrive_next_token, retrive_next_sibling, uniform_samples,
        uniform_samples_for_final_sampling, threshold_single, threshold_acc: as
            :func:`golden.reject_sample.tree_speculative_sampling_target_only`.
        target_logits: in, float32 [B, n, V] (or [B*n, V]): the target's logits at every
            tree position; ``-inf`` allowed, NaN read as ``-inf`` (and flagged).
        temperatures: in, float32 [B], finite, ``>= 0``; below ``1e-6``: greedy.
        top_k: None, or int32 [B]: keep the tokens at least as probable as the k-th
            (off when ``<= 0`` or ``>= V``).
        top_p: None, or float32 [B] in ``[0, 1]``: then keep the tokens at least ``tau``
            (off at 1).
        nan_flags: optional out, bool [B]: whether a row the request read held a NaN.
        rows_read: optional list; receives per request the sorted tree positions whose rows
            were read (each once).
        traces: optional list; receives per request a dict of its walk (for schedules and
            analyses): ``greedy``, ``decisions`` (``(row, node, kept, accepted)`` per child
            decided, in order; ``kept``: the child's token is in the kept set with a nonzero
            exponential), ``final_row``; for sampling requests also ``removed`` (the final
            row's rejected tokens), ``distribution`` (its ``RowDistribution``),
            ``coin_final`` and ``bonus`` (the drawn token).

    Returns None. Raises ValueError before writing anything for invalid arguments.
    """
    _run((predicts, accept_index, accept_token_num, candidates, retrive_index,
          retrive_next_token, retrive_next_sibling, uniform_samples,
          uniform_samples_for_final_sampling, target_logits, temperatures, threshold_single,
          threshold_acc, top_k, top_p), nan_flags, rows_read, traces)


def draft_tree_reject_sample_from_logits(
    predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
    retrive_next_sibling, seeds, target_logits, temperatures, threshold_single=1.0,
    threshold_acc=1.0, top_k=None, top_p=None, *, nan_flags=None, rows_read=None,
    traces=None,
) -> None:
    """:func:`tree_speculative_sampling_from_logits` with the coins of
    :func:`golden.reject_sample.lfsr_coins` ``(seeds, n)`` (``seeds``: integer [B])."""
    coins, coin_final = tree_lfsr_coins(candidates, seeds)
    tree_speculative_sampling_from_logits(
        predicts, accept_index, accept_token_num, candidates, retrive_index,
        retrive_next_token, retrive_next_sibling, coins, coin_final, target_logits,
        temperatures, threshold_single, threshold_acc, top_k, top_p, nan_flags=nan_flags,
        rows_read=rows_read, traces=traces)


def visited_rows(rows_read) -> int:
    """Rows read by a call (the ``rows_read`` list it filled)."""
    return sum(len(rows) for rows in rows_read)


# --- float64 reference -----------------------------------------------------------------------


def reference_probabilities(logits: np.ndarray, temperature: float, top_k: int = 0,
                            top_p: float = 1.0) -> np.ndarray:
    """float64 ``renorm(softmax(logits / T))`` with §10's top-k then top-p (ties kept)."""
    x = np.where(np.isnan(logits), -np.inf, logits).astype(np.float64)
    peak = x.max()
    if peak == -np.inf:
        p = np.ones_like(x)
    elif peak == np.inf:
        p = (x == np.inf).astype(np.float64)
    else:
        p = np.exp((x - peak) / np.float64(temperature))
    p /= p.sum()
    if 0 < top_k < p.size:
        p = np.where(p >= np.partition(p, p.size - top_k)[p.size - top_k], p, 0)
        p /= p.sum()
    if top_p < 1:
        ordered = np.sort(p)[::-1]
        at = min(int(np.searchsorted(np.cumsum(ordered), np.float64(top_p))),
                 p.size - 1)
        p = np.where(p >= ordered[at], p, 0)
        p /= p.sum()
    return p


def tree_speculative_sampling_from_logits_reference(
    predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
    retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_logits,
    temperatures, threshold_single=1.0, threshold_acc=1.0, top_k=None, top_p=None,
) -> None:
    """The float64 reference of :func:`tree_speculative_sampling_from_logits`: the same
    traversal with float64 probabilities (``reference_probabilities``), float64 ``prob_acc``
    and comparisons, and the final draw over float64 prefix sums."""
    v, settings = _arguments(predicts, accept_index, accept_token_num, candidates,
                             retrive_index, retrive_next_token, retrive_next_sibling,
                             uniform_samples, uniform_samples_for_final_sampling,
                             target_logits, temperatures, threshold_single, threshold_acc,
                             top_k, top_p)
    results = []
    for b in range(settings["B"]):
        if settings["temperatures"][b] < _F32(GREEDY_TEMPERATURE):
            results.append(_greedy_request(b, v, settings)[0])
            continue
        logits, cand = settings["logits"][b], v["candidates"][b]
        rows = {}

        def probs(row, b=b, logits=logits, rows=rows):
            if row not in rows:
                rows[row] = reference_probabilities(
                    logits[row], float(settings["temperatures"][b]),
                    int(settings["top_k"][b]), float(settings["top_p"][b]))
            return rows[row]

        state = {"prob_acc": 0.0, "coin": float(settings["coins"][b, 0])}
        rejected = []

        def accept(cur, row, b=b, cand=cand, probs=probs, state=state, rejected=rejected):
            q = probs(row)[int(cand[cur])]
            state["prob_acc"] += q
            if _accepts(q, state["coin"], state["prob_acc"] / float(settings["threshold_acc"]),
                       float(settings["threshold_single"])):
                state["prob_acc"] = 0.0
                state["coin"] = float(settings["coins"][b, cur])
                return True
            rejected.append((row, int(cand[cur])))
            return False

        writes, accept_row, accepted, row, last = _walk(b, settings["n"], settings["S"], v,
                                                        accept)
        residual = probs(row).copy()
        residual[[token for node_row, token in rejected if node_row == row]] = 0
        prefix = np.cumsum(residual)
        hit = (residual > 0) & (prefix > float(settings["coin_final"][b]) * prefix[-1])
        if hit.any():
            token = int(hit.argmax())
        elif (residual > 0).any():
            token = residual.size - 1 - int((residual > 0)[::-1].argmax())
        else:
            token = residual.size - 1
        writes.append((last, token))
        results.append((writes, accept_row, accepted))
    _commit(v, results)
