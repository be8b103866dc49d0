"""K1 ``draft_tree_layer_score_index_gen_op`` (docs/kernels.md §2) as a numpy golden model.

Per request b, with ``N = W*K`` candidates ``t = w*K + k``:
1. ``curr[b,t] = topk_probas_sampling[b,t] * last_layer_scores[b, t div K]`` (one float32
   multiply) -> ``curr_layer_scores``;
2. optionally remap ``topk_tokens_sampling`` through ``hot_token_id`` in place;
3. sort ``curr`` with the §1 network -> ``sort_layer_scores``, ``sort_layer_indices``;
4. for the K best: ``cache_topk_indices = cumu_count + t``, ``parent_indices_in_layer =
   t div K`` and ``output_hidden_states[b,k,:] = input_hidden_states[b, t div K, :]``.

Every check, including the data-dependent one (NaN scores, or scores so low that sort pads
reach the result), runs before the first write, so a rejected call leaves every buffer as it
was.
"""

from __future__ import annotations

import operator

import numpy as np

from .sort import SORT_WIDTHS, bitonic_sort_desc

__all__ = ["draft_tree_layer_score_index_gen_op", "score_layer"]

MAX_NODE_TOP_K = 16
# float32, float16, and bfloat16 carried as its uint16 bit pattern.
HIDDEN_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.uint16))


def _int_arg(name: str, value) -> int:
    """Return ``value`` as a Python int, or raise ValueError naming the argument."""
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"`{name}` must be an integer, not {type(value).__name__}") from None


def _check_scalars(batch_size, node_top_k, tree_width, cumu_count, use_hot_token_id, sort_width):
    """Validate the scalar arguments; return ``(B, K, W, cumu_count, use_hot)`` as ints/bool."""
    if sort_width not in SORT_WIDTHS:
        raise ValueError(f"`sort_width` must be 64 or 128, not {sort_width}")
    b = _int_arg("batch_size", batch_size)
    k = _int_arg("node_top_k", node_top_k)
    w = _int_arg("tree_width", tree_width)
    c = _int_arg("cumu_count", cumu_count)
    if b < 0:
        raise ValueError(f"`batch_size` must be non-negative, not {b}")
    if not 1 <= k <= MAX_NODE_TOP_K:
        raise ValueError(f"`node_top_k` must be between 1 and {MAX_NODE_TOP_K}, not {k}")
    if not 1 <= w <= k:
        raise ValueError(f"`tree_width` must be between 1 and `node_top_k`, not {w}")
    if w * k > sort_width:
        raise ValueError(
            f"`tree_width * node_top_k` must be at most `sort_width` ({sort_width}), "
            f"not {w * k}"
        )
    if c < 0:
        raise ValueError(f"`cumu_count` must be non-negative, not {c}")
    if isinstance(use_hot_token_id, bool | np.bool_):
        use_hot = bool(use_hot_token_id)
    elif _int_arg("use_hot_token_id", use_hot_token_id) in (0, 1):
        use_hot = bool(use_hot_token_id)
    else:
        raise ValueError(f"`use_hot_token_id` must be a bool or 0/1, not {use_hot_token_id}")
    return b, k, w, c, use_hot


def _as_shape(name: str, array, dtypes, shape: tuple[int, ...], *, out: bool) -> np.ndarray:
    """Return ``array`` viewed with ``shape``; it may also come flat (``prod(shape)`` elements).

    Outputs must be C-contiguous and writeable so the view aliases the caller's memory.
    """
    if not isinstance(array, np.ndarray):
        raise ValueError(f"`{name}` must be a numpy array, not {type(array).__name__}")
    if array.dtype not in dtypes:
        allowed = " or ".join(str(d) for d in dtypes)
        raise ValueError(f"`{name}` must be {allowed}, not {array.dtype}")
    size = int(np.prod(shape))
    if array.shape not in (shape, (size,)):
        raise ValueError(f"`{name}` must have shape {shape} or ({size},), not {array.shape}")
    if out and not (array.flags.c_contiguous and array.flags.writeable):
        raise ValueError(f"`{name}` must be C-contiguous and writeable (written in place)")
    return array.reshape(shape)  # a view: C-contiguous outputs reshape without a copy


def _hidden_size(name: str, array, rows: int) -> int:
    """Infer H from ``input_hidden_states`` ([B, W, H] or flat with B*W*H elements)."""
    if not isinstance(array, np.ndarray):
        raise ValueError(f"`{name}` must be a numpy array, not {type(array).__name__}")
    if array.ndim == 3:
        return array.shape[2]
    if array.ndim != 1 or array.size % rows:
        raise ValueError(
            f"`{name}` must have shape (batch_size, tree_width, H) or a multiple of "
            f"{rows} elements, not {array.shape}"
        )
    return array.size // rows


def _gather_views(args: dict, b: int, k: int, w: int, use_hot: bool) -> dict:
    """Check every array argument and return views shaped as in the §2 table."""
    n = w * k
    f32, i64 = (np.dtype(np.float32),), (np.dtype(np.int64),)
    views = {
        "topk_probas_sampling": _as_shape(
            "topk_probas_sampling", args["topk_probas_sampling"], f32, (b, n), out=False
        ),
        "last_layer_scores": _as_shape(
            "last_layer_scores", args["last_layer_scores"], f32, (b, w), out=False
        ),
    }
    for name, dtypes, shape in (
        ("curr_layer_scores", f32, (b, n)),
        ("sort_layer_scores", f32, (b, n)),
        ("sort_layer_indices", i64, (b, n)),
        ("cache_topk_indices", i64, (b, k)),
        ("parent_indices_in_layer", i64, (b, k)),
    ):
        views[name] = _as_shape(name, args[name], dtypes, shape, out=True)

    h = _hidden_size("input_hidden_states", args["input_hidden_states"], b * w)
    hidden_in = _as_shape(
        "input_hidden_states", args["input_hidden_states"], HIDDEN_DTYPES, (b, w, h), out=False
    )
    views["input_hidden_states"] = hidden_in
    views["output_hidden_states"] = _as_shape(
        "output_hidden_states", args["output_hidden_states"], (hidden_in.dtype,), (b, k, h),
        out=True,
    )
    if use_hot:
        views["topk_tokens_sampling"] = _as_shape(
            "topk_tokens_sampling", args["topk_tokens_sampling"], i64, (b, n), out=True
        )
        hot = args["hot_token_id"]
        if not isinstance(hot, np.ndarray) or hot.dtype != np.int64 or hot.ndim != 1:
            raise ValueError("`hot_token_id` must be a 1-D int64 numpy array")
        views["hot_token_id"] = hot
    return views


def _remap_tokens(tokens: np.ndarray, hot: np.ndarray) -> np.ndarray:
    """Return ``hot[tokens]`` where ``0 <= tokens < len(hot)``, the token itself elsewhere."""
    if not hot.size:
        return tokens.copy()
    in_range = (tokens >= 0) & (tokens < hot.size)
    return np.where(in_range, hot[np.where(in_range, tokens, 0)], tokens)


def draft_tree_layer_score_index_gen_op(
    topk_probas_sampling,
    topk_tokens_sampling,
    last_layer_scores,
    curr_layer_scores,
    sort_layer_scores,
    sort_layer_indices,
    cache_topk_indices,
    parent_indices_in_layer,
    input_hidden_states,
    output_hidden_states,
    hot_token_id,
    batch_size,
    node_top_k,
    tree_width,
    cumu_count,
    use_hot_token_id,
    *,
    sort_width: int = 64,
) -> None:
    """K1: score the layer's candidates, sort them and gather the K best (in place, §2).

    Every array is either shaped as below or flat with as many elements (row-major).

    Parameters:
        topk_probas_sampling: in, float32 [B, N] (N = tree_width * node_top_k).
        topk_tokens_sampling: in/out, int64 [B, N]; remapped in place through
            ``hot_token_id`` when ``use_hot_token_id``, else neither read nor checked
            (may be None).
        last_layer_scores: in, float32 [B, W].
        curr_layer_scores: out, float32 [B, N].
        sort_layer_scores: out, float32 [B, N].
        sort_layer_indices: out, int64 [B, N].
        cache_topk_indices: out, int64 [B, K].
        parent_indices_in_layer: out, int64 [B, K].
        input_hidden_states: in, [B, W, H] float32, float16, or bfloat16 as uint16 bits.
        output_hidden_states: out, [B, K, H], same dtype as the input (copied bit for bit).
        hot_token_id: in, int64 [V_hot]; ids outside ``[0, V_hot)`` are left unchanged. Not
            read or checked when ``use_hot_token_id`` is false (may be None).
        batch_size: B >= 0; 0 is a no-op that does not look at the arrays.
        node_top_k: K, 1..16.
        tree_width: W, 1..K, with W*K <= sort_width.
        cumu_count: nodes already in the cumulative tree (>= 0), added to the cache indices.
        use_hot_token_id: bool (or 0/1): apply the token remap.
        sort_width: lanes of the §1 sort network, 64 or 128 (keyword only, not in the ABI).

    Returns None. Raises ValueError before writing anything for invalid arguments, and for
    scores the sort cannot rank (NaN, or at or below the pad -1e10 so that pad lanes reach the
    result).
    """
    b, k, w, cumu, use_hot = _check_scalars(
        batch_size, node_top_k, tree_width, cumu_count, use_hot_token_id, sort_width
    )
    if b == 0:
        return
    args = {
        "topk_probas_sampling": topk_probas_sampling,
        "topk_tokens_sampling": topk_tokens_sampling,
        "last_layer_scores": last_layer_scores,
        "curr_layer_scores": curr_layer_scores,
        "sort_layer_scores": sort_layer_scores,
        "sort_layer_indices": sort_layer_indices,
        "cache_topk_indices": cache_topk_indices,
        "parent_indices_in_layer": parent_indices_in_layer,
        "input_hidden_states": input_hidden_states,
        "output_hidden_states": output_hidden_states,
        "hot_token_id": hot_token_id,
    }
    v = _gather_views(args, b, k, w, use_hot)
    n = w * k

    curr = v["topk_probas_sampling"] * np.repeat(v["last_layer_scores"], k, axis=1)
    if np.isnan(curr).any():
        raise ValueError("`curr_layer_scores` would contain NaN, which the sort cannot rank")
    sorted_scores, sorted_indices = bitonic_sort_desc(curr, sort_width=sort_width)
    if (sorted_indices >= n).any():
        raise ValueError(
            "candidate scores at or below the sort pad -1e10 let pad lanes into the result"
        )
    best = sorted_indices[:, :k]
    parents = best // k
    hidden = np.take_along_axis(v["input_hidden_states"], parents[:, :, None], axis=1)
    if use_hot:
        tokens = _remap_tokens(v["topk_tokens_sampling"], v["hot_token_id"])

    v["curr_layer_scores"][...] = curr
    if use_hot:
        v["topk_tokens_sampling"][...] = tokens
    v["sort_layer_scores"][...] = sorted_scores
    v["sort_layer_indices"][...] = sorted_indices
    v["cache_topk_indices"][...] = cumu + best
    v["parent_indices_in_layer"][...] = parents
    v["output_hidden_states"][...] = hidden


def score_layer(
    topk_probas_sampling,
    last_layer_scores,
    input_hidden_states,
    node_top_k,
    tree_width,
    cumu_count,
    *,
    topk_tokens_sampling=None,
    hot_token_id=None,
    sort_width: int = 64,
) -> dict[str, np.ndarray]:
    """Functional K1: return the outputs as new arrays; the arguments are not modified.

    Parameters:
        topk_probas_sampling: float32 [B, N] or flat.
        last_layer_scores: float32 [B, W] or flat; B is ``last_layer_scores.size // W``.
        input_hidden_states: [B, W, H] (or flat) float32, float16 or uint16 (bfloat16 bits).
        node_top_k: K. tree_width: W. cumu_count: nodes already in the tree.
        topk_tokens_sampling: optional int64 [B, N]; remapped copy returned when given
            together with ``hot_token_id``.
        hot_token_id: optional int64 [V_hot]; enables the remap.
        sort_width: 64 or 128.

    Returns a dict with ``curr_layer_scores``, ``sort_layer_scores``, ``sort_layer_indices``
    ([B, N]), ``cache_topk_indices``, ``parent_indices_in_layer`` ([B, K]),
    ``output_hidden_states`` ([B, K, H]) and, if remapped, ``topk_tokens_sampling``.
    """
    w = _int_arg("tree_width", tree_width)
    k = _int_arg("node_top_k", node_top_k)
    if w < 1:
        raise ValueError(f"`tree_width` must be between 1 and `node_top_k`, not {w}")
    b = np.asarray(last_layer_scores).size // w
    hidden = np.asarray(input_hidden_states)
    h = hidden.size // (b * w) if b else 0
    use_hot = hot_token_id is not None and topk_tokens_sampling is not None
    out = {
        "curr_layer_scores": np.zeros((b, w * k), np.float32),
        "sort_layer_scores": np.zeros((b, w * k), np.float32),
        "sort_layer_indices": np.zeros((b, w * k), np.int64),
        "cache_topk_indices": np.zeros((b, k), np.int64),
        "parent_indices_in_layer": np.zeros((b, k), np.int64),
        "output_hidden_states": np.zeros((b, k, h), hidden.dtype),
    }
    tokens = np.array(topk_tokens_sampling, copy=True) if use_hot else None
    draft_tree_layer_score_index_gen_op(
        topk_probas_sampling, tokens, last_layer_scores,
        out["curr_layer_scores"], out["sort_layer_scores"], out["sort_layer_indices"],
        out["cache_topk_indices"], out["parent_indices_in_layer"],
        input_hidden_states, out["output_hidden_states"], hot_token_id,
        b, k, w, cumu_count, use_hot, sort_width=sort_width,
    )
    if use_hot:
        out["topk_tokens_sampling"] = tokens.reshape(b, w * k)
    return out
