"""The top-k bitonic sort network of docs/kernels.md §1.

``sort_network_stages`` is the single description of the network: the golden sort below and
the hardware are both built from it. ``bitonic_sort_desc`` runs it over many rows at once,
one whole stage (32 or 64 disjoint compare-exchanges) per numpy operation.

NaN is outside the contract. What the network does with one: every compare involving NaN is
false, so a NaN lane never swaps, and its neighbours are not ordered across it. The result is
still a permutation of the lanes (scores and indices move together), but it need not be
sorted, and pad lanes (indices >= n) may end up among the first n outputs. Scores at or below
the pad -1e10 (e.g. -inf) can likewise exchange places with pad lanes.
"""

from __future__ import annotations

from functools import cache

import numpy as np

__all__ = ["SORT_PAD", "SORT_WIDTHS", "bitonic_sort_desc", "sort_network_stages"]

SORT_WIDTHS = (64, 128)

# -1e10f, bits 0xD01502F9: the value of the lanes n..sort_width-1.
SORT_PAD = np.array(0xD01502F9, dtype=np.uint32).view(np.float32)[()]


def _check_width(sort_width: int) -> None:
    if sort_width not in SORT_WIDTHS:
        raise ValueError(f"`sort_width` must be 64 or 128, not {sort_width}")


def sort_network_stages(sort_width: int = 64) -> list[list[tuple[int, int, bool]]]:
    """Return the compare-exchange stages of the §1 network, in execution order.

    Parameters:
        sort_width: number of lanes, 64 (21 stages) or 128 (28 stages).

    Each stage is a list of ``sort_width // 2`` disjoint pairs ``(i, j, descending)`` with
    ``i < j``, listed by ``tid``: the pair is swapped iff ``s[i] < s[j]`` when descending, or
    ``s[i] > s[j]`` when ascending.
    """
    _check_width(sort_width)
    stages = []
    size = 2
    while size <= sort_width:
        stride = size // 2
        while stride >= 1:
            stage = []
            for tid in range(sort_width // 2):
                i = (tid // stride) * (2 * stride) + (tid % stride)
                stage.append((i, i + stride, (i & size) == 0))
            stages.append(stage)
            stride //= 2
        size *= 2
    return stages


@cache
def _stage_arrays(sort_width: int) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]:
    """``sort_network_stages`` as (i, j, descending) index arrays, one triple per stage."""
    out = []
    for stage in sort_network_stages(sort_width):
        i, j, desc = (np.array(column) for column in zip(*stage, strict=True))
        for a in (i, j, desc):
            a.setflags(write=False)
        out.append((i, j, desc))
    return tuple(out)


def bitonic_sort_desc(
    scores: np.ndarray, *, sort_width: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """Sort every row of ``scores`` descending with the §1 network.

    Parameters:
        scores: float32 array of shape ``(rows, n)``, ``1 <= n <= sort_width``; ``rows`` may
            be 0. Not modified.
        sort_width: lanes of the network, 64 or 128.

    Returns ``(sorted_scores, sorted_indices)``: new float32 and int64 arrays of shape
    ``(rows, n)``, lanes ``0..n-1`` of the network after the last stage. Ties come out in
    network order (the sort is not stable); +0.0 and -0.0 compare equal and never swap.
    """
    _check_width(sort_width)
    if not isinstance(scores, np.ndarray) or scores.dtype != np.float32:
        kind = scores.dtype if isinstance(scores, np.ndarray) else type(scores).__name__
        raise ValueError(f"`scores` must be a float32 numpy array, not {kind}")
    if scores.ndim != 2:
        raise ValueError(f"`scores` must have shape (rows, n), not {scores.shape}")
    rows, n = scores.shape
    if not 1 <= n <= sort_width:
        raise ValueError(
            f"scores per row must be between 1 and `sort_width` ({sort_width}), not {n}"
        )

    s = np.full((rows, sort_width), SORT_PAD, dtype=np.float32)
    s[:, :n] = scores
    idx = np.tile(np.arange(sort_width, dtype=np.int64), (rows, 1))
    for i, j, desc in _stage_arrays(sort_width):
        si, sj = s[:, i], s[:, j]
        swap = np.where(desc, si < sj, si > sj)
        s[:, i], s[:, j] = np.where(swap, sj, si), np.where(swap, si, sj)
        xi, xj = idx[:, i], idx[:, j]
        idx[:, i], idx[:, j] = np.where(swap, xj, xi), np.where(swap, xi, xj)
    return s[:, :n].copy(), idx[:, :n].copy()
