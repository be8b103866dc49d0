"""A K6 call as the kernel's stream beats, and its outputs rebuilt from the kernel's beats.

:func:`feeds` packs a call's ``cmd`` beats (:func:`commands`, one per request) and ``tree``
beats (:func:`tree_beats`, ``n`` per request) into payload words by the kernel's layouts;
:func:`outputs_from_dut` rebuilds the golden's output arrays from the ``result`` packets and
``draft_write`` beats (:func:`beats` decodes them), so that the two compare whole.
"""

import numpy as np

from hw.kernels.reject_sample_params import RejectSampleParams
from sim.payload import pack, unpack

from .call import F32, Call, f32_bits
from .memory import MemoryImage
from .results import blank_outputs

__all__ = ["commands", "tree_beats", "feeds", "beats", "outputs_from_dut"]


def commands(call: Call, lanes: int) -> list[dict]:
    """``cmd`` beat fields of every request of ``call``."""
    b, n = call.candidates.shape
    row_words = call.row_words(lanes)
    coins, finals = call.coins()
    result = []
    for req in range(b):
        result.append({
            "greedy": int(call.mode == "greedy"),
            "lfsr": int(call.mode == "lfsr"),
            "nodes": n,
            "steps": call.steps,
            "vocab_size": call.vocab_size,
            "row_address": req * n * row_words,
            "row_words": row_words,
            "seed": int(call.seeds[req]) if call.mode == "lfsr" else 0,
            "final_coin": f32_bits(finals[req]) if call.mode == "sampling" else 0,
            "threshold_single": f32_bits(call.threshold_single),
            "threshold_acc": f32_bits(call.threshold_acc),
        })
    return result


def tree_beats(call: Call, req: int) -> list[dict]:
    """``tree`` beat fields of request ``req`` (position order)."""
    n = call.nodes
    coins = call.uniform_samples if call.mode == "sampling" else None
    beats = []
    for i in range(n):
        predict = 0
        if call.mode == "greedy":
            predict = int(call.target_predict.reshape(-1)[call.retrive_index[req, i]])
        beats.append({
            "candidate": int(call.candidates[req, i]),
            "index": int(call.retrive_index[req, i]),
            "next_token": int(call.retrive_next_token[req, i]),
            "next_sibling": int(call.retrive_next_sibling[req, i]),
            "coin": f32_bits(coins[req, i]) if coins is not None else 0,
            "predict": predict,
            "first": int(i == 0),
            "last": int(i == n - 1),
        })
    return beats



def feeds(params: RejectSampleParams, call: Call) -> dict[str, list[int]]:
    """The payload words of the ``cmd`` and ``tree`` streams of ``call`` (every request)."""
    cmds = commands(call, params.lanes)
    tree = [beat for req in range(call.batch_size) for beat in tree_beats(call, req)]
    return {name: pack(layout, len(rows), **{key: [row[key] for row in rows] for key in rows[0]})
            for name, layout, rows in (("cmd", params.cmd_layout, cmds),
                                       ("tree", params.tree_layout, tree))}


def beats(layout, words) -> list[dict]:
    """Payload words decoded into one field dict (Python ints) per beat."""
    fields = unpack(layout, words)
    return [{key: int(values[index]) for key, values in fields.items()}
            for index in range(len(words))]


def outputs_from_dut(call: Call, memory: MemoryImage, packets: list[list[dict]],
                     writes: list[dict], *, out: dict | None = None) -> dict:
    """The output arrays rebuilt from the kernel's ``result`` packets (one list of beats per
    request, in order) and ``draft_write`` beats, on the same pre-filled arrays
    (:func:`~sim.reject_sample.results.blank_outputs`), or written into ``out`` (the caller's
    pre-filled arrays of those names, C-contiguous; only the entries the golden writes
    change)."""
    out = blank_outputs(call) if out is None else out
    b = call.batch_size
    assert len(packets) == b, f"{len(packets)} result packets for {b} requests"
    for req, beats in enumerate(packets):
        assert beats[0]["first"] and beats[-1]["last"], f"request {req}: bad packet framing"
        assert not any(beat["last"] for beat in beats[:-1]), f"request {req}: early last"
        assert not beats[-1]["error"], f"request {req}: the kernel flagged a link cycle"
        assert len(beats) <= call.steps, f"request {req}: {len(beats)} beats for S={call.steps}"
        for k, beat in enumerate(beats):
            out["accept_index"][req, k] = beat["index"]
            out["predicts"][beat["index"]] = np.array(beat["token"], np.uint32).view(np.int32)
        out["accept_token_num"][req] = len(beats) - 1
    if call.mode == "greedy":
        assert not writes, f"greedy verify wrote {len(writes)} draft_probs elements"
    else:
        flat = out["draft_probs"].reshape(memory.rows, -1)
        for write in writes:
            row, j = memory.element(write["address"], write["lane"])
            assert row < memory.rows and j < memory.vocab, f"draft write outside: {write}"
            flat[row, j] = np.array(write["value"], np.uint32).view(F32)
    return out
