"""Active-slot compaction golden model (docs/kernels.md §9, the second half of K7).

After :func:`golden.verify_result.update_verify_result`, the requests that finished leave the
batch. The survivors keep their relative order: the next batch's row i is the old batch row
``active_slots[i]``, and ``active_inverse`` maps an old row to its new row (-1 if it
finished). It is a stable stream compaction, an exclusive prefix sum over ``not finished``.
"""

import numpy as np

from ._abi import check_int, in_view, out_view

__all__ = ["compact_active_slots"]


def compact_active_slots(finished, batch_size, active_slots, active_inverse, active_count):
    """Compact the unfinished batch rows, in place. Returns ``None``.

    Parameters (ABI order):
        finished: bool [B] in (K7's ``finished``).
        batch_size: B >= 0.
        active_slots: i64 [B] out: ``active_slots[i]``, ``i < active_count``, is the i-th
            unfinished row in ascending order; entries ``active_count .. B-1`` are -1.
        active_inverse: i64 [B] out: ``active_inverse[b]`` = the i with ``active_slots[i] ==
            b`` (the number of unfinished rows before b) if b is unfinished, else -1.
        active_count: i64 [1] out: number of unfinished rows (0 when every request finished).

    Every element of the three outputs is written. Raises ``ValueError`` before any write for
    an invalid ``batch_size``, dtype, element count or non-writable/non-contiguous output.
    """
    b_count = check_int("batch_size", batch_size, 0)
    done = in_view("finished", finished, (b_count,), np.bool_)
    slots = out_view("active_slots", active_slots, (b_count,), np.int64)
    inverse = out_view("active_inverse", active_inverse, (b_count,), np.int64)
    count = out_view("active_count", active_count, (1,), np.int64)
    alive = ~done
    rank = np.cumsum(alive, dtype=np.int64) - alive  # exclusive prefix sum
    survivors = np.flatnonzero(alive).astype(np.int64)
    slots[:] = -1
    slots[: len(survivors)] = survivors
    inverse[:] = np.where(alive, rank, -1)
    count[0] = len(survivors)
