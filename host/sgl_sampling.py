"""sgl-kernel's sampling ops and its two newer EAGLE helpers as drop-ins (docs/host.md,
"Drop-in ops for SGLang"; issue 33).

An orchestration written against ``sgl_kernel`` imports these instead::

    from host.sgl_sampling import top_k_renorm_prob, top_p_renorm_prob

Each op has sgl-kernel's name, its positional order and keyword names. The filters and the
sampler are functional as in sgl-kernel: they return a new array, a torch tensor on the
device of ``probs`` when ``probs`` is one (else a numpy array); the tree sampler and
``process_accept_index_evict_mask_fused`` write their outputs in place and return ``None``.
Arrays go through :mod:`host.arrays` (numpy, torch tensors, ``__dlpack__``/``__array__``
objects); integer arrays may be int32 or int64, ``probs``/``top_p`` arrays float32.

Coins: ``top_k_top_p_sampling_from_probs`` samples with one uniform coin per output row (see
:func:`golden.top_k_top_p_sampling_from_probs`): ``uniform_samples`` when given, else drawn
from ``generator`` — a ``numpy.random.Generator`` (``generator.random(batch,
dtype=float32)``) or a ``torch.Generator`` (``torch.rand(batch, generator=generator)``) —
else from a fresh ``numpy.random.default_rng()``. FlashInfer draws philox numbers inside its
rejection loop: the same distribution, never the same tokens.

``backend`` (keyword only, per call): ``"golden"`` (the default) runs the numpy goldens of
``golden/sampling.py``; ``"rtl"`` runs ``tree_speculative_sampling_target_only_rejmask`` on
K6's Verilator model (:mod:`host.k6_rtl`, with a zero scratch ``draft_probs``, as the golden
does) and raises ``NotImplementedError`` naming what is missing for the others
(:data:`RTL_MISSING`). Every op raises ``ValueError`` naming the argument before writing
anything.
"""

from __future__ import annotations

import functools
import numbers

import numpy as np

import golden

from .arrays import commit, exact_input, int_input, is_torch_tensor, output
from .checks import check_backend, check_real

__all__ = ["BACKENDS", "RTL_MISSING", "process_accept_index_evict_mask_fused",
           "top_k_renorm_prob", "top_k_renorm_probs", "top_k_top_p_sampling_from_probs",
           "top_p_renorm_prob", "top_p_renorm_probs",
           "tree_speculative_sampling_target_only_rejmask"]

BACKENDS = ("golden", "rtl")

_NO_FILTER_KERNEL = ("the hardware has no kernel for probability rows (top-k/top-p run only "
                     "inside the engine's fused verify, on the logits rows it visits)")

# What the rtl backend of each op still needs (issue 33).
RTL_MISSING = {
    "top_k_renorm_probs": _NO_FILTER_KERNEL,
    "top_p_renorm_probs": _NO_FILTER_KERNEL,
    "top_k_top_p_sampling_from_probs": "the hardware samples only inside the engine's draft "
    "round and fused verify; it has no sampler for caller-given probability rows",
    "process_accept_index_evict_mask_fused": "the hardware has no kernel for it (the engine "
    "compacts the accepted tokens of its own verify only)",
}


def _run_on(op_name, backend) -> None:
    """Check ``backend``; ``"rtl"`` raises ``NotImplementedError`` naming what is missing."""
    check_backend(__name__, op_name, backend, BACKENDS, RTL_MISSING)


def _returned(array, like):
    """``array`` as the caller works: a torch tensor on the device of ``like`` when ``like`` is
    one (torch is installed then), else the numpy array itself."""
    if is_torch_tensor(like):
        import torch
        return torch.from_numpy(array).to(like.device)
    return array


def _rows(name, array, rows):
    """``array`` (read flat) if it holds one value per row: [rows] or [rows, 1]."""
    if array.size != rows or array.ndim > 2:
        raise ValueError(f"`{name}` must hold one value per row of `probs` ([{rows}] or "
                         f"[{rows}, 1]), not shape {array.shape}")
    return np.ascontiguousarray(array).reshape(rows)


def _top_k(top_k, rows):
    """sgl-kernel's ``_to_tensor_scalar_tuple`` of ``top_k``: ``(int32 array or None, int)``."""
    if isinstance(top_k, numbers.Integral) and not isinstance(top_k, bool | np.bool_):
        return None, int(top_k)
    if isinstance(top_k, numbers.Number | bool | np.bool_):
        raise ValueError(f"`top_k` must be an integer or an integer array, not {top_k!r}")
    return _rows("top_k", int_input("top_k", top_k, np.int32), rows), 0


def _top_p(top_p, rows):
    """sgl-kernel's ``_to_tensor_scalar_tuple`` of ``top_p``: ``(float32 array or None,
    float)``, values in [0, 1]."""
    if isinstance(top_p, numbers.Number | bool | np.bool_):
        return None, check_real("top_p", top_p, 0.0, 1.0)
    values = _rows("top_p", exact_input("top_p", top_p, np.float32), rows)
    bad = ~((values >= 0) & (values <= 1))
    if bad.any():
        raise ValueError(f"`top_p` values must be between 0 and 1, not {values[bad][0]}")
    return values, 0.0


def _probs(probs):
    array = exact_input("probs", probs, np.float32)
    if array.ndim != 2:
        raise ValueError(f"`probs` must be float32 [batch, V], not of shape {array.shape}")
    return array


# --- the filters ---------------------------------------------------------------------------------


def top_k_renorm_probs(probs, top_k, *, backend="golden"):
    """sgl-kernel ``top_k_renorm_probs`` (also ``top_k_renorm_prob``): ``probs`` (float32
    [batch, V]) with each row's tokens below its k-th largest zeroed and the rest
    renormalised (ties at the k-th kept; ``k <= 0`` or ``k >= V``: the row unchanged), as a
    new array (:func:`golden.top_k_renorm_probs`). ``top_k``: an int, or an int32/int64 array
    of one k per row ([batch] or [batch, 1])."""
    _run_on("top_k_renorm_probs", backend)
    rows = _probs(probs)
    renorm = np.empty(rows.shape, np.float32)
    golden.top_k_renorm_probs(rows, renorm, *_top_k(top_k, rows.shape[0]))
    return _returned(renorm, probs)


def top_p_renorm_probs(probs, top_p, *, backend="golden"):
    """sgl-kernel ``top_p_renorm_probs`` (also ``top_p_renorm_prob``): ``probs`` (float32
    [batch, V]) with each row cut to its most probable tokens whose mass reaches ``p`` (whole
    tie groups) and renormalised (``p = 1``: the row unchanged), as a new array
    (:func:`golden.top_p_renorm_probs`). ``top_p``: a real in [0, 1], or a float32 array of
    one p per row ([batch] or [batch, 1])."""
    _run_on("top_p_renorm_probs", backend)
    rows = _probs(probs)
    renorm = np.empty(rows.shape, np.float32)
    golden.top_p_renorm_probs(rows, renorm, *_top_p(top_p, rows.shape[0]))
    return _returned(renorm, probs)


top_k_renorm_prob = top_k_renorm_probs
top_p_renorm_prob = top_p_renorm_probs


# --- the sampler -------------------------------------------------------------------------------


def _is_float_array(value) -> bool:
    """Whether ``value`` is a floating-point numpy array or torch tensor (sgl-kernel's older
    ``uniform_samples`` argument, where the newer op has ``top_k``)."""
    if is_torch_tensor(value):
        return bool(value.is_floating_point())
    return isinstance(value, np.ndarray) and value.dtype.kind == "f"


def _coins(uniform_samples, generator, batch):
    """One float32 coin per output: ``uniform_samples`` ([batch], [batch, 1], or sgl-kernel's
    older [rounds, batch], whose first round is used), else drawn from ``generator``."""
    if uniform_samples is not None:
        if generator is not None:
            raise ValueError("give `uniform_samples` or `generator`, not both")
        coins = exact_input("uniform_samples", uniform_samples, np.float32)
        if coins.ndim == 2 and coins.shape[1] == batch and coins.shape != (batch, 1):
            coins = coins[0]
        if coins.size != batch or coins.ndim > 2:
            raise ValueError(f"`uniform_samples` must be float32 [{batch}] (or [{batch}, 1], "
                             f"or [rounds, {batch}]), not of shape {coins.shape}")
        return np.ascontiguousarray(coins).reshape(batch)
    if type(generator).__module__.split(".")[0] == "torch":
        import torch
        drawn = torch.rand(batch, generator=generator, dtype=torch.float32,
                           device=generator.device)
        return drawn.cpu().numpy()
    if generator is None:
        generator = np.random.default_rng()
    if not isinstance(generator, np.random.Generator):
        raise ValueError("`generator` must be None, a numpy.random.Generator or a "
                         f"torch.Generator, not {type(generator).__name__}")
    return generator.random(batch, dtype=np.float32)


def _older_form(op):
    """Let ``op`` be called as sgl-kernel's older op, ``(probs, uniform_samples, top_k, top_p,
    filter_apply_order, deterministic, check_nan) -> (samples, success)``: a floating-point
    array where ``top_k`` would be is read as ``uniform_samples``."""

    @functools.wraps(op)
    def wrapper(*args, **kwargs):
        if len(args) > 1 and _is_float_array(args[1]):
            probs, coins, *rest = args
            names = ("top_k", "top_p", "filter_apply_order", "deterministic", "check_nan")
            if len(rest) > len(names):
                raise TypeError(f"{op.__name__}() takes at most 7 positional arguments in its "
                                f"older form ({len(args)} given)")
            for name, value in zip(names, rest, strict=False):
                if name in kwargs:
                    raise TypeError(f"{op.__name__}() got multiple values for `{name}`")
                kwargs[name] = value
            samples = op(probs, uniform_samples=coins, **kwargs)
            return samples, _returned(np.ones(np.shape(samples), np.bool_), samples)
        return op(*args, **kwargs)

    return wrapper


@_older_form
def top_k_top_p_sampling_from_probs(
    probs,
    top_k,
    top_p,
    indices=None,
    filter_apply_order="top_k_first",
    deterministic=True,
    generator=None,
    check_nan=False,
    *,
    uniform_samples=None,
    backend="golden",
):
    """sgl-kernel ``top_k_top_p_sampling_from_probs``: one token per output row (int32
    [batch]) from the tokens top-k and top-p keep (:func:`golden.top_k_top_p_sampling_from_probs`;
    ``filter_apply_order`` ``"top_k_first"`` or ``"joint"``).

    ``probs`` float32 [rows, V]; ``top_k``/``top_p`` scalars or arrays of one value per row of
    ``probs`` (the kernel reads them at ``indices[b]``); ``indices`` None or int32/int64
    [batch]. Coins: ``uniform_samples`` (keyword only here), else ``generator`` (module
    docstring). ``deterministic`` is accepted (the sums are always sequential); NaN is always
    refused, so ``check_nan`` changes nothing. sgl-kernel's older form, ``(probs,
    uniform_samples, top_k, top_p, filter_apply_order, deterministic, check_nan)``, is
    recognised by a floating-point array in second place and returns ``(samples, success)``
    with ``success`` all True (the inverse-CDF draw always succeeds).
    """
    _run_on("top_k_top_p_sampling_from_probs", backend)
    if not isinstance(check_nan, bool | np.bool_):
        raise ValueError(f"`check_nan` must be a bool, not {check_nan!r}")
    rows = _probs(probs)
    source = None if indices is None else int_input("indices", indices)
    if source is not None and source.ndim != 1:
        raise ValueError(f"`indices` must be 1-D [batch], not of shape {source.shape}")
    batch = rows.shape[0] if source is None else source.size
    coins = _coins(uniform_samples, generator, batch)
    samples = np.empty(batch, np.int32)
    golden.top_k_top_p_sampling_from_probs(
        rows, samples, source, *_top_k(top_k, rows.shape[0]), *_top_p(top_p, rows.shape[0]),
        deterministic, coins, filter_apply_order=filter_apply_order)
    return _returned(samples, probs)


# --- in-place EAGLE helpers --------------------------------------------------------------------

_TREE_LINKS = ("retrive_index", "retrive_next_token", "retrive_next_sibling")
_UNWRITTEN = np.iinfo(np.int32).min


def _retrieve_keywords(op):
    """Accept SGLang's (and newer sgl-kernel's) ``retrieve_*`` keywords for ``op``'s
    ``retrive_*`` arguments (both spellings of one argument: ``TypeError``)."""

    @functools.wraps(op)
    def wrapper(*args, **kwargs):
        spelled = {name.replace("retrive_", "retrieve_"): name for name in _TREE_LINKS}
        for new in set(spelled) & set(kwargs):
            if spelled[new] in kwargs:
                raise TypeError(f"{op.__name__}() got both `{spelled[new]}` and `{new}`")
            kwargs[spelled[new]] = kwargs.pop(new)
        return op(*args, **kwargs)

    return wrapper


@_retrieve_keywords
def tree_speculative_sampling_target_only_rejmask(
        predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
        threshold_single=1.0, threshold_acc=1.0, deterministic=True, *,
        backend="golden") -> None:
    """sgl-kernel ``tree_speculative_sampling_target_only_rejmask``, in place:
    :func:`golden.tree_speculative_sampling_target_only_rejmask` — tree speculative sampling
    without ``draft_probs``, the rejected tokens masked out of the final draw; the same
    outputs as ``tree_speculative_sampling_target_only``. Trees of at most 4 children per node
    (``golden.REJMASK_MAX_CHILDREN``; more: ``ValueError``).

    Arguments, order and outputs as sgl-kernel's (both spellings of the ``retrive_*``
    keywords); integer arrays int32 or int64, coins and ``target_probs`` float32.
    """
    _run_on("tree_speculative_sampling_target_only_rejmask", backend)
    if backend == "rtl":  # K6 without draft_probs: a zero scratch row, as the golden does
        from .k6_rtl import tree_speculative_sampling_target_only as target_only
    else:
        target_only = golden.tree_speculative_sampling_target_only
    outs = [output(name, value, "integer", np.int64) for name, value in
            (("predicts", predicts), ("accept_index", accept_index),
             ("accept_token_num", accept_token_num))]
    tree = [int_input(name, value) for name, value in
            (("candidates", candidates), ("retrive_index", retrive_index),
             ("retrive_next_token", retrive_next_token),
             ("retrive_next_sibling", retrive_next_sibling))]
    floats = [exact_input(name, value, np.float32) for name, value in
              (("uniform_samples", uniform_samples),
               ("uniform_samples_for_final_sampling", uniform_samples_for_final_sampling),
               ("target_probs", target_probs))]
    # The golden writes int32 outputs, partly: it runs on scratch arrays filled with a value
    # it never writes there (its outputs are ids >= 0), and only what it wrote reaches the
    # int64 working copies, so elements it leaves keep whatever the caller's dtype holds.
    scratch = [np.full(out.work.shape, _UNWRITTEN, np.int32) for out in outs]
    golden.check_rejmask_tree(*scratch, *tree, floats[-1])
    target_only(*scratch, *tree, *floats, np.zeros(floats[-1].shape, np.float32),
                threshold_single, threshold_acc, deterministic)
    for out, written in zip(outs, scratch, strict=True):
        out.work[written != _UNWRITTEN] = written[written != _UNWRITTEN]
    commit(*outs)


def process_accept_index_evict_mask_fused(accept_index, predict, accept_length, verified_id,
                                          evict_mask, filtered_accept_index, output_size, *,
                                          backend="golden") -> None:
    """sgl-kernel ``process_accept_index_evict_mask_fused``, in place:
    :func:`golden.process_accept_index_evict_mask_fused` (``accept_length`` = entries of
    ``accept_index`` that are not -1, minus one; ``verified_id``/``filtered_accept_index``
    the entries' tokens and ids, compacted; ``evict_mask`` False at the entries;
    ``output_size[0]`` their number).

    Integer arrays int32 or int64 (CUDA: int32), ``evict_mask`` bool. ``accept_length``,
    ``evict_mask`` and ``output_size`` are written whole; ``verified_id`` and
    ``filtered_accept_index`` only in their first ``output_size`` elements (the rest keep
    their contents, whatever their dtype holds). (sgl-kernel's CUDA stream argument is added
    inside its wrapper, not passed by the caller.)
    """
    _run_on("process_accept_index_evict_mask_fused", backend)
    index = int_input("accept_index", accept_index, np.int32)
    tokens = int_input("predict", predict, np.int32)
    length = output("accept_length", accept_length, "integer", np.int32, fill=0)
    mask = output("evict_mask", evict_mask, np.bool_, fill=True)
    size = output("output_size", output_size, "integer", np.int32, fill=0)
    # int64 working copies keep the untouched tail as it was; the golden writes int32 scratch
    compacted = [output(name, value, "integer", np.int64) for name, value in
                 (("verified_id", verified_id), ("filtered_accept_index",
                                                 filtered_accept_index))]
    scratch = [np.zeros(out.work.size, np.int32) for out in compacted]
    golden.process_accept_index_evict_mask_fused(index, tokens, length.work, scratch[0],
                                                 mask.work, scratch[1], size.work)
    count = int(size.work.reshape(-1)[0])
    for out, written in zip(compacted, scratch, strict=True):
        out.work.reshape(-1)[:count] = written[:count]
    commit(length, mask, size, *compacted)
