"""The golden's outputs of a fused-verify call and their comparison.

:func:`expected` runs the call's golden op (``tree_speculative_sampling_from_logits``, or
``draft_tree_reject_sample_from_logits`` in ``lfsr`` mode) on pre-filled output arrays
(:func:`blank_outputs`) and also returns its ``nan_flags``, ``rows_read`` and ``traces``;
:func:`compare` lists the differences of two output sets.
"""

import numpy as np

from golden.tree_verify import (
    draft_tree_reject_sample_from_logits,
    tree_speculative_sampling_from_logits,
)
from sim.reject_sample.results import compare as compare_arrays

from .call import Call

__all__ = ["OUTPUTS", "blank_outputs", "expected", "compare"]

#: The op's in-place outputs.
OUTPUTS = ("predicts", "accept_index", "accept_token_num")


def blank_outputs(call: Call) -> dict:
    """The output arrays as SGLang pre-fills them: ``predicts`` int32 [B*n] and
    ``accept_index`` int32 [B, S] at -1, ``accept_token_num`` int32 [B] at 0."""
    b, n = call.candidates.shape
    return {"predicts": np.full(b * n, -1, np.int32),
            "accept_index": np.full((b, call.steps), -1, np.int32),
            "accept_token_num": np.zeros(b, np.int32)}


def _read_only(array):
    if not isinstance(array, np.ndarray):
        return array
    view = array.view()
    view.flags.writeable = False
    return view


def expected(call: Call) -> dict:
    """The golden's outputs for ``call``: :data:`OUTPUTS` (on :func:`blank_outputs`), plus
    ``nan_flags`` (bool [B]), ``rows_read`` (per request the sorted tree positions whose
    rows the op read) and ``traces`` (per request the walk, for ``sim.tree_verify.schedule``).
    The call's arrays are passed read-only, so the golden cannot change
    them."""
    out = blank_outputs(call)
    out["nan_flags"] = np.zeros(call.batch_size, np.bool_)
    rows_read, traces = [], []
    arguments = {key: _read_only(value) for key, value in call.golden_arguments().items()}
    op = draft_tree_reject_sample_from_logits if call.mode == "lfsr" \
        else tree_speculative_sampling_from_logits
    op(out["predicts"], out["accept_index"], out["accept_token_num"], **arguments,
       nan_flags=out["nan_flags"], rows_read=rows_read, traces=traces)
    out["rows_read"] = rows_read
    out["traces"] = traces
    return out


def compare(call: Call, want: dict, got: dict) -> list[str]:
    """Readable differences between two output sets (integer and bool arrays exactly,
    ``rows_read`` as lists), over the names both hold; an output of :data:`OUTPUTS` missing
    on either side is a difference. Empty when they agree."""
    problems = [f"{call.name}: {name} missing from the {side} outputs"
                for name in OUTPUTS for side, outputs in (("wanted", want), ("actual", got))
                if name not in outputs]
    for name in [key for key in want if key in got]:
        if name == "rows_read":
            for b, (w, g) in enumerate(zip(want[name], got[name], strict=False)):
                if list(w) != list(g):
                    problems.append(f"{call.name}: request {b} read rows {list(g)}, "
                                    f"want {list(w)}")
            if len(want[name]) != len(got[name]):
                problems.append(f"{call.name}: rows_read of {len(got[name])} requests, want "
                                f"{len(want[name])}")
            continue
        w, g = np.asarray(want[name]), np.asarray(got[name])
        if w.shape != g.shape:
            problems.append(f"{call.name}: {name} has shape {g.shape}, want {w.shape}")
        else:
            problems += compare_arrays(call, {name: g}, {name: w})
    return problems
