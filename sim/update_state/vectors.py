"""Vectors for the K2 kernel: random and sentinel states, random and directed requests, cases.

Everything here returns host-side states and requests (see ``sim.update_state.host``); the
expected results always come from the golden model (``host.golden_apply``) or a case file's
``expected_*`` tensors, never from a copy of its logic.
"""

import warnings

import numpy as np

from golden.cases import read_case, write_case
from golden.update_state import NodeBudgetWarning, update_cumu_draft_state

from .host import FLOAT_NAMES, INPUT_NAMES, STATE_NAMES, params_from, state_shapes

__all__ = ["sentinel_state", "random_state", "random_request", "directed_cases",
           "read_update_case", "write_update_case", "CASE_SCALARS"]

# The capture's meta line, in order (golden/captures/FORMAT.md).
CASE_SCALARS = ("batch_size", "node_top_k", "tree_width", "input_count", "cumu_count",
                "verify_num", "curr_depth", "max_input_size", "max_node_count", "max_verify_num")


def _f32(values):
    return np.asarray(values, dtype=np.float32)


def _random_scores(rng, n, *, ties=True):
    """Probability-like float32 scores in [0, 1] with zeros of both signs, subnormals, ties."""
    values = rng.random(n).astype(np.float32)
    if ties and n > 1:
        pick = rng.random(n)
        values = np.where(pick < 0.15, values[rng.integers(0, n, n)], values)
        values = np.where(pick > 0.97, np.float32(0.0), values)
        values = np.where((pick > 0.94) & (pick <= 0.97), np.float32(-0.0), values)
        values = np.where((pick > 0.92) & (pick <= 0.94),
                          np.array([1], np.uint32).view(np.float32)[0], values)
    return values.astype(np.float32)


def _descending(values):
    return _f32(-np.sort(-np.asarray(values, dtype=np.float32), kind="stable"))


def _random_ints(rng, width, n):
    lo, hi = -(1 << (width - 1)), (1 << (width - 1))
    return rng.integers(lo, hi, size=n, dtype=np.int64)


def sentinel_state(params, *, sorted_prefix=32):
    """A state filled like the CUDA capture: -777 tokens, -3.0 scores, -1 depths and parents,
    -2 next, -3 side, -999 outputs, -123 work scores, sort scores ``2.2, 2.21, ...`` descending
    for ``sorted_prefix`` entries then -1234, mask rows alternating 0/1 patterns."""
    p = params_from(params)
    shapes = state_shapes(p)
    state = {
        "cumu_tokens": np.full(shapes["cumu_tokens"], -777, np.int64),
        "cumu_scores": np.full(shapes["cumu_scores"], -3.0, np.float32),
        "cumu_deltas": np.full(shapes["cumu_deltas"], -1, np.int64),
        "prev_indexs": np.full(shapes["prev_indexs"], -1, np.int64),
        "next_indexs": np.full(shapes["next_indexs"], -2, np.int64),
        "side_indexs": np.full(shapes["side_indexs"], -3, np.int64),
        "output_scores": np.full(shapes["output_scores"], -999.0, np.float32),
        "output_tokens": np.full(shapes["output_tokens"], -999, np.int64),
        "work_scores": np.full(shapes["work_scores"], -123.0, np.float32),
        "sort_scores": np.full(shapes["sort_scores"], -1234.0, np.float32),
        "output_tree_mask": (np.indices(shapes["output_tree_mask"]).sum(axis=0) % 3 == 0),
    }
    prefix = min(sorted_prefix, p.max_verify_num)
    state["sort_scores"][:prefix] = _f32(2.2 + 0.01 * np.arange(prefix))[::-1]
    return state


def random_state(rng, params):
    """Random buffers: random tokens/links/depths over the full storage range, random float32
    bit patterns (NaNs included) where values are only stored, a descending ``sort_scores``
    (with ties and zeros) where the merge reads them, random mask rows."""
    p = params_from(params)
    shapes = state_shapes(p)
    state = {}
    for name in STATE_NAMES:
        shape = shapes[name]
        size = int(np.prod(shape))
        if name == "output_tree_mask":
            state[name] = rng.random(shape) < 0.5
        elif name == "sort_scores":
            state[name] = _descending(_random_scores(rng, size))
        elif name in FLOAT_NAMES:
            state[name] = rng.integers(0, 1 << 32, size, dtype=np.uint64).astype(
                np.uint32).view(np.float32).reshape(shape)
        elif name in ("cumu_tokens", "output_tokens"):
            state[name] = _random_ints(rng, p.token_width, size).reshape(shape)
        else:
            state[name] = _random_ints(rng, p.index_width, size).reshape(shape)
    return state


def random_request(rng, params, *, tree_width=None, cumu_count=None, verify_num=None,
                   input_count=None, curr_depth=None, sorted_input=True):
    """One random request; keyword arguments pin a scalar.

    Defaults: ``tree_width`` uniform in ``1..max_tree_width``; ``cumu_count`` mostly in
    ``0..MAXN-N`` and sometimes overflowing; ``verify_num`` in ``-2..MAXV+3``; ``input_count``
    in ``0..MI+1``; ``topk_indexs`` distinct existing nodes, sometimes duplicated or outside
    ``0..MAXN-1``; ``sorted_scores`` descending unless ``sorted_input`` is false.
    """
    p = params_from(params)
    k, maxn = p.node_top_k, p.max_node_count
    width = int(rng.integers(1, p.max_tree_width + 1)) if tree_width is None else tree_width
    n = width * k
    if cumu_count is None:
        choice = rng.random()
        if choice < 0.75:
            cumu_count = int(rng.integers(0, max(maxn - n, 0) + 1))
        elif choice < 0.95:
            cumu_count = int(rng.integers(max(maxn - n + 1, 0), maxn + 1))
        else:
            cumu_count = int(rng.integers(maxn, maxn + 2 * n + 1))
    if verify_num is None:
        verify_num = int(rng.integers(-2, p.max_verify_num + 4))
    if input_count is None:
        input_count = int(rng.integers(0, p.max_input_size + 2))
    if curr_depth is None:
        curr_depth = int(rng.integers(0, 40))
    probas = _random_scores(rng, n)
    scores = _random_scores(rng, n)
    order = np.argsort(-scores, kind="stable")
    if sorted_input:
        sorted_scores, sorted_indexs = scores[order], order.astype(np.int64)
    else:
        sorted_scores, sorted_indexs = scores, rng.integers(0, n, n).astype(np.int64)
    parents = np.minimum(sorted_indexs[:k] // k, width - 1).astype(np.int64)
    if rng.random() < 0.3:
        parents = rng.integers(0, width, k).astype(np.int64)
    pool = max(min(cumu_count, maxn), 1)
    topk = rng.choice(pool, size=width, replace=pool < width).astype(np.int64)
    roll = rng.random(width)
    topk = np.where(roll < 0.1, topk[0], topk)                               # duplicates
    topk = np.where((roll > 0.9) & (roll < 0.95), -1 - (topk % 3), topk)     # negative
    topk = np.where(roll >= 0.95, maxn + topk % 5, topk)                     # >= MAXN
    return {
        "topk_probas": probas,
        "topk_tokens": _random_ints(rng, min(p.token_width, 20), n),
        "sorted_scores": _f32(sorted_scores),
        "sorted_indexs": sorted_indexs,
        "parent_indexs": parents,
        "topk_indexs": topk,
        "input_tree_mask": rng.random((width, max(input_count - 1, 0))) < 0.5,
        "tree_width": width,
        "input_count": input_count,
        "cumu_count": int(cumu_count),
        "verify_num": int(verify_num),
        "curr_depth": int(curr_depth),
    }


def directed_cases(params, seed=2024):
    """``(name, slot, state, request)`` for every directed case of the K2 brief that the
    parameter set can express (K = 1 builds run the same list with ``W = 1``)."""
    p = params_from(params)
    rng = np.random.default_rng(seed)
    k, wm, maxn, maxv, mi = (p.node_top_k, p.max_tree_width, p.max_node_count,
                             p.max_verify_num, p.max_input_size)
    nmax = k * wm
    last = p.max_batch - 1
    fit_count = max(0, min(21, maxn - nmax))
    cases = []

    def add(name, state=None, slot=0, **request):
        req = random_request(rng, p, **{"tree_width": wm, "cumu_count": fit_count,
                                        "verify_num": maxv, **request})
        cases.append((name, slot, sentinel_state(p) if state is None else state, req))
        return req

    # New scores outrank every old best score (C entirely before A), and the reverse.
    low = sentinel_state(p)
    low["sort_scores"][:] = _descending(rng.random(maxv).astype(np.float32) * 0.01)
    req = add("new_scores_outrank_old", state=low)
    req["sorted_scores"] = _descending(0.5 + 0.5 * rng.random(req["sorted_scores"].size))
    high = sentinel_state(p)
    high["sort_scores"][:] = _descending(2.0 + rng.random(maxv).astype(np.float32))
    add("old_scores_outrank_new", state=high)
    # Exact ties between A and C: A is taken first. Equal non-zero values have equal bits, so
    # the ties are mostly +0.0 against -0.0, whose sign shows which list an output came from.
    tie = sentinel_state(p)
    tie["sort_scores"][:] = _descending(np.resize(_f32([0.5, 0.0, -0.0]), maxv))
    req = add("ties_take_old_first", state=tie, cumu_count=min(fit_count, maxv))
    req["sorted_scores"] = _descending(np.resize(_f32([0.5, -0.0, 0.0, 0.25]),
                                                 req["sorted_scores"].size))
    # verify_num below / above cumu_count and clamped at both ends.
    big = max(0, min(maxn - nmax, maxv + 5))
    add("verify_num_below_cumu_count", cumu_count=big, verify_num=max(1, min(maxv, big) - 2))
    add("verify_num_above_cumu_count", cumu_count=min(3, fit_count), verify_num=maxv)
    add("verify_num_clamped_to_1", verify_num=-5)
    add("verify_num_zero", verify_num=0)
    add("verify_num_above_max", verify_num=maxv + 1000)
    add("cumu_count_zero", cumu_count=0)
    # Node budget: partial drop (links may name dropped slots) and everything dropped.
    req = add("overflow_partial", cumu_count=max(0, maxn - max(nmax // 2, 1)))
    req["topk_indexs"][:] = np.arange(wm) % maxn
    add("overflow_last_slot_only", cumu_count=max(0, maxn - nmax + 1))
    add("overflow_everything", cumu_count=maxn + 3)
    # Mask columns: none (input_count 0 and 1), all of them.
    add("input_count_0", input_count=0)
    add("input_count_1", input_count=1)
    add("input_count_full", input_count=mi + 1)
    # Frontier parents: duplicates (last write wins), out of range, inside the appended range.
    req = add("duplicate_parents")
    req["topk_indexs"][:] = 5 % maxn
    if wm >= 3:
        req["topk_indexs"][1] = 7 % maxn
    req = add("parents_out_of_range")
    req["topk_indexs"][:] = np.resize([-1, maxn, -7, maxn + 3, 0], wm)
    req = add("parent_in_appended_range", cumu_count=0)
    req["topk_indexs"][:] = np.minimum(np.arange(wm) * k + 1, maxn - 1)
    # Late dependencies for the output-token and mask engines.
    req = add("sorted_index_reversed")
    req["sorted_indexs"][:] = np.arange(nmax)[::-1]
    req = add("parent_index_last_slot")
    req["parent_indexs"][:] = wm - 1
    add("unsorted_merge_inputs", sorted_input=False)
    # Every width, on the last slot.
    for width in range(1, wm + 1):
        add(f"width_{width}", slot=last, tree_width=width,
            cumu_count=max(0, min(40, maxn - width * k)))
    add("random_state", state=random_state(rng, p), slot=last)
    return cases


def _shaped(case, name, values, shape):
    """``values`` (a tensor of ``case``) reshaped to ``shape``, or a ``ValueError`` naming the
    file and the tensor."""
    if values.size != int(np.prod(shape)):
        raise ValueError(f"{case.path}: tensor {name!r} has {values.size} values, the case's "
                         f"scalars give {' x '.join(map(str, shape))}")
    return values.reshape(shape)


def read_update_case(path):
    """A K2 case file as ``(scalars, states, requests, expected)``.

    ``scalars`` are the ten of ``CASE_SCALARS`` (from a counted ``meta`` line in that order, as
    the capture writes it, or from one-element lines of those names); ``states``/``requests``/
    ``expected`` are per-request lists (``expected`` is ``None`` without ``expected_*`` lines).
    """
    case = read_case(path)
    if len(case.meta) == len(CASE_SCALARS):
        scalars = dict(zip(CASE_SCALARS, case.meta, strict=True))
    else:
        scalars = {name: case.scalar(name) for name in CASE_SCALARS}
    b, k, w = scalars["batch_size"], scalars["node_top_k"], scalars["tree_width"]
    mi, maxn, maxv = (scalars["max_input_size"], scalars["max_node_count"],
                      scalars["max_verify_num"])
    n, cols = w * k, max(scalars["input_count"] - 1, 0)
    shapes = {"cumu_tokens": (maxn,), "cumu_scores": (maxn,), "cumu_deltas": (maxn,),
              "prev_indexs": (maxn,), "next_indexs": (maxn,), "side_indexs": (maxn,),
              "output_scores": (k,), "output_tokens": (k,), "work_scores": (maxv + k,),
              "sort_scores": (maxv,), "output_tree_mask": (k, mi + 1)}

    def read(name, state_name):
        reader = case.f32 if state_name in FLOAT_NAMES else case.i64
        if state_name == "output_tree_mask":
            reader = case.bool_
        return _shaped(case, name, reader(name), (b, *shapes[state_name]))

    states = [{name: read(f"initial_{name}", name)[r].copy() for name in STATE_NAMES}
              for r in range(b)]
    expected = None
    if all(f"expected_{name}" in case for name in STATE_NAMES):
        expected = [{name: read(f"expected_{name}", name)[r].copy() for name in STATE_NAMES}
                    for r in range(b)]
    readers = {"topk_probas": (case.f32, n), "topk_tokens": (case.i64, n),
               "sorted_scores": (case.f32, n), "sorted_indexs": (case.i64, n),
               "parent_indexs": (case.i64, k), "topk_indexs": (case.i64, w),
               "input_tree_mask": (case.bool_, (w, cols))}
    inputs = {name: _shaped(case, name, reader(name), (b, *np.atleast_1d(size)))
              for name, (reader, size) in readers.items()}
    requests = [{**{name: values[r].copy() for name, values in inputs.items()},
                 **{name: scalars[name] for name in ("tree_width", "input_count", "cumu_count",
                                                      "verify_num", "curr_depth")}}
                for r in range(b)]
    return scalars, states, requests, expected


def write_update_case(path, params, states, requests, *, header="K2 update_state case"):
    """Write a case file (project format) for one batched K2 call: request ``b`` on state ``b``.

    The requests must share the ABI scalars (``tree_width``, ``input_count``, ``cumu_count``,
    ``verify_num``, ``curr_depth``); the scalars are written as one-element lines, the inputs
    and ``initial_*`` buffers stacked over the batch, and ``expected_*`` computed by one batched
    call of the golden op (overflow warnings silenced). Returns the expected states.
    """
    p = params_from(params)
    first = requests[0]
    scalars = {name: first[name] for name in ("tree_width", "input_count", "cumu_count",
                                               "verify_num", "curr_depth")}
    for request in requests[1:]:
        if any(request[name] != value for name, value in scalars.items()):
            raise ValueError("the requests of one case must share the ABI scalars")
    b = len(requests)
    all_scalars = {"batch_size": b, "node_top_k": p.node_top_k, **scalars,
                   "max_input_size": p.max_input_size, "max_node_count": p.max_node_count,
                   "max_verify_num": p.max_verify_num}
    inputs = {name: np.stack([np.asarray(r[name]) for r in requests]) for name in INPUT_NAMES}
    initial = {name: np.stack([np.asarray(s[name]) for s in states]) for name in STATE_NAMES}
    expected = {name: array.copy() for name, array in initial.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NodeBudgetWarning)
        update_cumu_draft_state(*(inputs[name] for name in INPUT_NAMES),
                                *(all_scalars[name] for name in CASE_SCALARS[:7]),
                                *(all_scalars[name] for name in CASE_SCALARS[7:]),
                                *(expected[name] for name in STATE_NAMES))
    tensors = {**all_scalars, **inputs}
    tensors.update({f"initial_{name}": array for name, array in initial.items()})
    write_case(path, tensors, expected=expected, header=header)
    return [{name: expected[name][r] for name in STATE_NAMES} for r in range(b)]
