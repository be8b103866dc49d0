"""Host side of the K2 kernel (``hw.kernels.update_state``): ABI buffers <-> stream payloads.

A *state* is one request slot's view of the eleven in/out buffers of docs/kernels.md §3, as a
dict of numpy rows: ``cumu_tokens``, ``cumu_scores``, ``cumu_deltas``, ``prev_indexs``,
``next_indexs``, ``side_indexs`` ``[MAXN]``; ``output_scores``, ``output_tokens`` ``[K]``;
``work_scores`` ``[MAXV+K]``; ``sort_scores`` ``[MAXV]``; ``output_tree_mask`` ``[K, MI+1]``
(int64 / float32 / bool as in the ABI). A *request* is one request's inputs: ``topk_probas``,
``topk_tokens``, ``sorted_scores``, ``sorted_indexs`` ``[N]``, ``parent_indexs`` ``[K]``,
``topk_indexs`` ``[W]``, ``input_tree_mask`` ``[W, input_count-1]`` and the scalars
``tree_width``, ``input_count``, ``cumu_count``, ``verify_num``, ``curr_depth``.

The host API (``check_state``, ``check_request``) refuses, before anything is sent, what the
golden refuses plus what the hardware cannot hold (values wider than the storage, widths above
``max_tree_width``), and reports the node-budget overflow (appends that will be dropped) as the
golden's ``node_budget_overflow`` does; the kernel reports the same count in its ``done``
record. ``golden_apply`` runs the golden op on a state (batch of one).
"""

import warnings

import numpy as np

from golden.update_state import NodeBudgetWarning, node_budget_overflow, update_cumu_draft_state
from hw.kernels.update_state import Region, UpdateStateParams
from sim.payload import pack, unpack

__all__ = [
    "STATE_NAMES", "FLOAT_NAMES", "INPUT_NAMES", "SCALAR_NAMES", "params_from", "state_shapes",
    "check_state", "check_request", "golden_apply", "load_commands", "dump_commands",
    "decode_dump", "request_beats", "decode_done", "compare_states",
]

STATE_NAMES = ("cumu_tokens", "cumu_scores", "cumu_deltas", "prev_indexs", "next_indexs",
               "side_indexs", "output_scores", "output_tokens", "work_scores", "sort_scores",
               "output_tree_mask")
FLOAT_NAMES = frozenset({"cumu_scores", "output_scores", "work_scores", "sort_scores"})
INPUT_NAMES = ("topk_probas", "topk_tokens", "sorted_scores", "sorted_indexs", "parent_indexs",
               "topk_indexs", "input_tree_mask")
SCALAR_NAMES = ("tree_width", "input_count", "cumu_count", "verify_num", "curr_depth")
_NODE_FIELDS = {"cumu_tokens": "tok", "cumu_scores": "score", "cumu_deltas": "delta",
                "prev_indexs": "prev", "next_indexs": "next", "side_indexs": "side"}
_SIGNED = ("tok", "delta", "prev", "next", "side")


def params_from(params) -> UpdateStateParams:
    """``UpdateStateParams`` from a params object or a dict of the component's parameters."""
    if isinstance(params, UpdateStateParams):
        return params
    return UpdateStateParams(**params)


def state_shapes(params) -> dict:
    """ABI shape of each state row of one slot."""
    p = params_from(params)
    shapes = {name: (p.max_node_count,) for name in _NODE_FIELDS}
    shapes.update(output_scores=(p.node_top_k,), output_tokens=(p.node_top_k,),
                  work_scores=(p.work_size,), sort_scores=(p.max_verify_num,),
                  output_tree_mask=(p.node_top_k, p.mask_row_width))
    return shapes


def _dtype(name):
    if name in FLOAT_NAMES:
        return np.float32
    return np.bool_ if name == "output_tree_mask" else np.int64


def _check_fits(name, values, width):
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    if values.size and (values.min() < lo or values.max() > hi):
        bad = values[(values < lo) | (values > hi)][0]
        raise ValueError(f"`{name}` value {bad} does not fit the kernel's {width}-bit storage")


def check_state(params, state) -> None:
    """Refuse a state whose buffers have the wrong shape/dtype or values the storage cannot hold."""
    p = params_from(params)
    for name, shape in state_shapes(p).items():
        array = np.asarray(state[name])
        if array.dtype != _dtype(name) or array.shape != shape:
            raise ValueError(f"`{name}` must be {np.dtype(_dtype(name))} of shape {shape}, "
                             f"not {array.dtype} {array.shape}")
    for name in ("cumu_tokens", "output_tokens"):
        _check_fits(name, np.asarray(state[name]), p.token_width)
    for name in ("cumu_deltas", "prev_indexs", "next_indexs", "side_indexs"):
        _check_fits(name, np.asarray(state[name]), p.index_width)


def check_request(params, request) -> int:
    """Validate a request for this kernel; return the appends it will drop (0: it fits).

    Raises ``ValueError`` for everything the golden refuses (run on a scratch state) and for
    what the hardware cannot carry: ``tree_width > max_tree_width``, tokens or ``topk_indexs``
    wider than the storage, ``cumu_count + N`` or ``curr_depth`` beyond ``2**(index_width-1)``.
    """
    p = params_from(params)
    width = request["tree_width"]
    if isinstance(width, bool) or not isinstance(width, int | np.integer):
        raise ValueError(f"`tree_width` must be an integer, not {width!r}")
    if not 1 <= width <= p.max_tree_width:
        raise ValueError(f"`tree_width` must be between 1 and `max_tree_width` "
                         f"({p.max_tree_width}), not {width}")
    scratch = {name: np.zeros(shape, _dtype(name)) for name, shape in state_shapes(p).items()}
    golden_apply(p, scratch, request)  # the golden's own validation (raises ValueError)
    _check_fits("topk_tokens", np.asarray(request["topk_tokens"]), p.token_width)
    _check_fits("topk_indexs", np.asarray(request["topk_indexs"]), p.index_width)
    n = width * p.node_top_k
    if request["cumu_count"] + n > p.max_count:
        raise ValueError(f"`cumu_count` + N must be at most {p.max_count}, "
                         f"not {request['cumu_count'] + n}")
    if request["curr_depth"] > p.max_count:
        raise ValueError(f"`curr_depth` must be at most {p.max_count}, "
                         f"not {request['curr_depth']}")
    return node_budget_overflow(request["cumu_count"], p.node_top_k, width, p.max_node_count)


def golden_apply(params, state, request) -> tuple[dict, int]:
    """Run the golden K2 on a copy of ``state``; return ``(new_state, dropped_appends)``."""
    p = params_from(params)
    out = {name: np.array(state[name], copy=True) for name in STATE_NAMES}
    width = int(request["tree_width"])
    mask = np.asarray(request["input_tree_mask"], dtype=np.bool_)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NodeBudgetWarning)
        update_cumu_draft_state(
            *(np.ascontiguousarray(request[name]) for name in INPUT_NAMES[:-1]), mask,
            1, p.node_top_k, width, request["input_count"], request["cumu_count"],
            request["verify_num"], request["curr_depth"], p.max_input_size, p.max_node_count,
            p.max_verify_num, *(out[name] for name in STATE_NAMES))
    dropped = node_budget_overflow(request["cumu_count"], p.node_top_k, width,
                                   p.max_node_count)
    return out, dropped


# --- host port --------------------------------------------------------------------------------


def _mask_words(rows):
    """Bool rows [R, C] -> one Python integer per row (bit j = column j), as an object array:
    a plain list of such integers would become float64 in numpy once one reaches 2**63."""
    rows = np.asarray(rows, dtype=np.bool_)
    weights = [1 << j for j in range(rows.shape[1])]
    words = np.empty(rows.shape[0], dtype=object)
    words[:] = [sum(w for w, bit in zip(weights, row, strict=True) if bit) for row in rows]
    return words


def _commands(p, write, region, slot, count, *, only=None, **fields):
    """Commands for elements ``0..count-1`` of ``region`` (or the indices where ``only``)."""
    zeros = {name: 0 for name in ("tok", "score", "delta", "prev", "next", "side", "mask")}
    fields = {**zeros, **fields}
    index = np.arange(count)
    if only is not None:
        index = index[only]
        fields = {name: value if np.ndim(value) == 0 else np.asarray(value)[only]
                  for name, value in fields.items()}
        if index.size == 0:
            return []
    return pack(p.host_command_layout, index.size, write=int(write), region=int(region),
                slot=slot, index=index, **fields)


def _differs(state, known, names):
    """Element mask (first axis) where any of ``names`` differs from ``known`` by bit pattern."""
    if known is None:
        return None
    mask = None
    for name in names:
        a, b = np.asarray(state[name]), np.asarray(known[name])
        if name in FLOAT_NAMES:
            a, b = a.view(np.uint32), b.view(np.uint32)
        diff = (a != b).reshape(a.shape[0], -1).any(axis=1)
        mask = diff if mask is None else mask | diff
    return mask


def load_commands(params, slot, state, known=None) -> list[int]:
    """``host_cmd`` payloads writing the buffers of ``slot`` from ``state``: every element, or,
    when ``known`` (the state the slot is known to hold) is given, the elements that differ."""
    p = params_from(params)
    check_state(p, state)
    node = {field: np.asarray(state[name]) for name, field in _NODE_FIELDS.items()}
    node["score"] = node["score"].view(np.uint32)
    words = _commands(p, 1, Region.NODE, slot, p.max_node_count,
                      only=_differs(state, known, _NODE_FIELDS), **node)
    words += _commands(p, 1, Region.OUTPUT, slot, p.node_top_k,
                       only=_differs(state, known, ("output_scores", "output_tokens",
                                                    "output_tree_mask")),
                       score=np.asarray(state["output_scores"]).view(np.uint32),
                       tok=state["output_tokens"], mask=_mask_words(state["output_tree_mask"]))
    words += _commands(p, 1, Region.WORK, slot, p.work_size,
                       only=_differs(state, known, ("work_scores",)),
                       score=np.asarray(state["work_scores"]).view(np.uint32))
    words += _commands(p, 1, Region.SORT, slot, p.max_verify_num,
                       only=_differs(state, known, ("sort_scores",)),
                       score=np.asarray(state["sort_scores"]).view(np.uint32))
    return words


def dump_commands(params, slot, regions=tuple(Region)) -> list[int]:
    """``host_cmd`` payloads reading every element of ``regions`` of ``slot`` (all of them by
    default, in the order ``decode_dump`` expects)."""
    p = params_from(params)
    return [word for region in regions
            for word in _commands(p, 0, region, slot, p.region_size(region))]


def decode_dump(params, words) -> dict:
    """The state read back by the answers to ``dump_commands``."""
    p = params_from(params)
    fields = unpack(p.host_response_layout, words, signed=_SIGNED)
    bounds = np.cumsum([0] + [p.region_size(region) for region in Region])
    part = {region: slice(bounds[region], bounds[region + 1]) for region in Region}

    def floats(region):
        return fields["score"][part[region]].astype(np.uint32).view(np.float32)

    state = {name: fields[field][part[Region.NODE]].astype(np.int64)
             for name, field in _NODE_FIELDS.items()}
    state["cumu_scores"] = floats(Region.NODE)
    state["output_scores"] = floats(Region.OUTPUT)
    state["output_tokens"] = fields["tok"][part[Region.OUTPUT]].astype(np.int64)
    rows = [int(word) for word in fields["mask"][part[Region.OUTPUT]]]
    state["output_tree_mask"] = np.array(
        [[(row >> j) & 1 for j in range(p.mask_row_width)] for row in rows], dtype=np.bool_)
    state["work_scores"] = floats(Region.WORK)
    state["sort_scores"] = floats(Region.SORT)
    return state


# --- requests ---------------------------------------------------------------------------------


def request_beats(params, slot, request) -> list[int]:
    """``req`` payloads of one request (``N`` beats, header on every beat)."""
    p = params_from(params)
    k, width = p.node_top_k, int(request["tree_width"])
    n = width * k
    pad = np.zeros(n, dtype=np.int64)
    parents, topk = pad.copy(), pad.copy()
    parents[:k] = request["parent_indexs"]
    topk[:width] = request["topk_indexs"]
    masks = np.zeros(n, dtype=object)
    masks[:width] = _mask_words(np.asarray(request["input_tree_mask"]).reshape(width, -1))
    verify = int(np.clip(request["verify_num"], -(1 << 31), (1 << 31) - 1))
    beat = np.arange(n)
    return pack(
        p.request_layout, n,
        first=beat == 0, last=beat == n - 1, slot=slot, tree_width=width,
        input_count=request["input_count"], cumu_count=request["cumu_count"],
        verify_num=verify, curr_depth=request["curr_depth"],
        proba=np.asarray(request["topk_probas"], dtype=np.float32).view(np.uint32),
        token=request["topk_tokens"],
        sorted_score=np.asarray(request["sorted_scores"], dtype=np.float32).view(np.uint32),
        sorted_index=request["sorted_indexs"], parent_index=parents, topk_index=topk,
        mask=masks)


def decode_done(params, word) -> dict:
    """The fields of one ``done`` record as Python ints."""
    fields = unpack(params_from(params).done_layout, [word])
    return {name: int(values[0]) for name, values in fields.items()}


def compare_states(actual, expected, *, context="") -> list[str]:
    """Differences between two states, bit for bit (floats by bit pattern); ``[]`` if equal."""
    problems = []
    for name in STATE_NAMES:
        a, e = np.asarray(actual[name]), np.asarray(expected[name])
        if a.shape != e.shape:
            problems.append(f"{context}{name}: shape {a.shape} != {e.shape}")
            continue
        if name in FLOAT_NAMES:
            a, e = a.view(np.uint32), e.view(np.uint32)
        bad = np.argwhere(a != e)
        if bad.size:
            where = [tuple(int(i) for i in index) for index in bad[:4]]
            sample = ", ".join(f"{w}: {a[w]!r} != {e[w]!r}" for w in where)
            problems.append(f"{context}{name}: {len(bad)} elements differ ({sample})")
    return problems
