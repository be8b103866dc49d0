"""A fused-verify call as the kernel's stream beats, and its outputs rebuilt from the kernel's.

:func:`feeds` packs a call's ``cmd`` beats (:func:`commands`, one per request) and ``tree``
beats (:func:`tree_beats`, one packet of ``n`` beats per request) into payload words by the
layouts of ``TreeVerifyParams``; :func:`outputs_from_dut` rebuilds the golden's output arrays
and ``nan_flags`` from the ``result`` packets (:func:`beats` decodes them), so that the two
compare whole with :func:`sim.tree_verify.results.compare`.
"""

import numpy as np
from amaranth.hdl import Shape

from hw.kernels.tree_verify_params import TreeVerifyParams
from sim.payload import pack, unpack

from .call import Call, f32_bits
from .results import blank_outputs

__all__ = ["commands", "tree_beats", "feeds", "beats", "outputs_from_dut", "result_packets"]


def commands(call: Call, params: TreeVerifyParams) -> list[dict]:
    """``cmd`` beat fields of every request of ``call``: floats as float32 bit patterns,
    ``top_k`` 0 and ``top_p`` 1.0 when the call has none, ``seed`` 0 in ``sampling`` mode and
    ``final_coin`` 0 in ``lfsr`` mode; ``row_address`` is the request's first row in
    :class:`~sim.tree_verify.memory.MemoryImage`."""
    lfsr = call.mode == "lfsr"
    pitch = call.row_pitch(params)
    result = []
    for req in range(call.batch_size):
        result.append({
            "lfsr": int(lfsr),
            "nodes": call.nodes,
            "steps": call.steps,
            "vocab_size": call.vocab_size,
            "row_address": req * call.nodes * pitch,
            "row_pitch": pitch,
            "temperature": f32_bits(call.temperatures[req]),
            "top_k": 0 if call.top_k is None else int(call.top_k[req]),
            "top_p": f32_bits(1.0 if call.top_p is None else call.top_p[req]),
            "seed": int(call.seeds[req]) if lfsr else 0,
            "final_coin": 0 if lfsr else f32_bits(call.uniform_samples_for_final_sampling[req]),
            "threshold_single": f32_bits(call.threshold_single),
            "threshold_acc": f32_bits(call.threshold_acc),
        })
    return result


def tree_beats(call: Call, req: int) -> list[dict]:
    """``tree`` beat fields of request ``req``, one per tree position in order (``coin`` the
    position's ``uniform_samples`` bits, 0 in ``lfsr`` mode; ``first``/``last`` frame the
    request)."""
    n = call.nodes
    coins = call.uniform_samples if call.mode == "sampling" else None
    return [{
        "candidate": int(call.candidates[req, i]),
        "index": int(call.retrive_index[req, i]),
        "next_token": int(call.retrive_next_token[req, i]),
        "next_sibling": int(call.retrive_next_sibling[req, i]),
        "coin": 0 if coins is None else f32_bits(coins[req, i]),
        "first": int(i == 0),
        "last": int(i == n - 1),
    } for i in range(n)]


def feeds(params: TreeVerifyParams, call: Call) -> dict[str, list[int]]:
    """The payload words of the ``cmd`` and ``tree`` streams of ``call`` (every request)."""
    cmds = commands(call, params)
    tree = [beat for req in range(call.batch_size) for beat in tree_beats(call, req)]
    return {name: pack(layout, len(rows), **{key: [row[key] for row in rows] for key in rows[0]})
            for name, layout, rows in (("cmd", params.cmd_layout, cmds),
                                       ("tree", params.tree_layout, tree))}


def beats(layout, words) -> list[dict]:
    """Payload words decoded into one field dict (Python ints) per beat; signed fields of
    ``layout`` (tree links, ``top_k``) sign-extended."""
    signed = tuple(name for name, field in layout if Shape.cast(field.shape).signed)
    fields = unpack(layout, words, signed=signed)
    return [{key: int(values[index]) for key, values in fields.items()}
            for index in range(len(words))]


def outputs_from_dut(call: Call, packets: list[list[dict]]) -> dict:
    """The output arrays (on :func:`~sim.tree_verify.results.blank_outputs`) and
    ``nan_flags`` rebuilt from the kernel's ``result`` packets: one list of decoded beats per
    request, in request order. Beat ``k`` of request ``b`` is ``accept_index[b, k]`` (``index``)
    and ``predicts[index]`` (``token``); its last beat carries the request's NaN flag (``nan``)
    and must not carry ``error`` (a link cycle). Framing is asserted: ``first`` on the first
    beat only, ``last`` on the last only, 1 to ``S`` beats, indices below ``B * n``."""
    out = blank_outputs(call)
    out["nan_flags"] = np.zeros(call.batch_size, np.bool_)
    b, n = call.candidates.shape
    assert len(packets) == b, f"{call.name}: {len(packets)} result packets for {b} requests"
    for req, packet in enumerate(packets):
        assert packet, f"{call.name}: request {req}: empty result packet"
        assert 1 <= len(packet) <= call.steps, \
            f"{call.name}: request {req}: {len(packet)} result beats for S={call.steps}"
        assert [beat["first"] for beat in packet] == [1] + [0] * (len(packet) - 1), \
            f"{call.name}: request {req}: bad `first` framing"
        assert [beat["last"] for beat in packet] == [0] * (len(packet) - 1) + [1], \
            f"{call.name}: request {req}: bad `last` framing"
        assert not packet[-1]["error"], f"{call.name}: request {req}: the kernel flagged a " \
                                        "link cycle"
        for k, beat in enumerate(packet):
            assert 0 <= beat["index"] < b * n, \
                f"{call.name}: request {req}: beat {k} index {beat['index']} outside B*n"
            out["accept_index"][req, k] = beat["index"]
            out["predicts"][beat["index"]] = np.array(beat["token"], np.uint32).view(np.int32)
        out["accept_token_num"][req] = len(packet) - 1
        out["nan_flags"][req] = bool(packet[-1]["nan"])
    return out


def result_packets(params: TreeVerifyParams, call: Call, outputs: dict) -> list[list[int]]:
    """The ``result`` payload words a correct kernel sends for ``outputs`` (the golden's, as
    :func:`~sim.tree_verify.results.expected` gives them), one list per request: the inverse
    of :func:`outputs_from_dut`, for tests of the host side and models of the kernel."""
    packets = []
    for req in range(call.batch_size):
        count = int(outputs["accept_token_num"][req]) + 1
        index = outputs["accept_index"][req, :count]
        packets.append(pack(params.result_layout, count, index=index,
                            token=[int(outputs["predicts"][i]) & 0xFFFFFFFF for i in index],
                            error=0, nan=[0] * (count - 1) + [int(outputs["nan_flags"][req])],
                            first=[1] + [0] * (count - 1), last=[0] * (count - 1) + [1]))
    return packets

