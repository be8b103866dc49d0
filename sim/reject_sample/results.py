"""The golden's outputs of a K6 call and their comparison.

:func:`expected` runs the call's golden op on pre-filled output arrays (-1, zero
``draft_probs``: :func:`blank_outputs`); :func:`compare` lists the differences of two output
sets, float32 by bit pattern.
"""

import numpy as np

from golden.reject_sample import (
    draft_tree_reject_sample,
    tree_speculative_sampling_target_only,
    verify_tree_greedy,
)

from .call import F32, Call

__all__ = ["blank_outputs", "expected", "compare"]


def blank_outputs(call: Call) -> dict:
    """The output arrays as SGLang pre-fills them: -1 indices, zero ``draft_probs``."""
    b, n = call.candidates.shape
    out = {
        "predicts": np.full(b * n, -1, np.int32),
        "accept_index": np.full((b, call.steps), -1, np.int32),
        "accept_token_num": np.full(b, -1, np.int32),
    }
    if call.mode != "greedy":
        out["draft_probs"] = np.zeros_like(call.target_probs)
    return out


def expected(call: Call) -> dict:
    """The golden's outputs for ``call`` (on pre-filled arrays: -1, draft zeros)."""
    out = blank_outputs(call)
    links = (call.candidates, call.retrive_index, call.retrive_next_token,
             call.retrive_next_sibling)
    head = (out["predicts"], out["accept_index"], out["accept_token_num"], *links)
    if call.mode == "greedy":
        verify_tree_greedy(*head, call.target_predict)
    elif call.mode == "lfsr":
        draft_tree_reject_sample(*head, call.seeds, call.target_probs, out["draft_probs"],
                                 call.threshold_single, call.threshold_acc)
    else:
        tree_speculative_sampling_target_only(
            *head, call.uniform_samples, call.final_coins, call.target_probs,
            out["draft_probs"], call.threshold_single, call.threshold_acc)
    return out


def compare(call: Call, actual: dict, wanted: dict) -> list[str]:
    """Differences between two output sets (float32 by bit pattern); empty when equal."""
    problems = []
    for name, want in wanted.items():
        got = actual[name]
        a = got.view(np.uint32) if got.dtype == F32 else got
        w = want.view(np.uint32) if want.dtype == F32 else want
        if not np.array_equal(a, w):
            bad = np.argwhere(a != w)
            where = ", ".join(f"{tuple(int(x) for x in i)}: {got[tuple(i)]!r} != "
                              f"{want[tuple(i)]!r}" for i in bad[:4])
            problems.append(f"{call.name}: {name} differs at {len(bad)} places ({where})")
    return problems


