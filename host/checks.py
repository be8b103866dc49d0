"""Argument checks of the host API: every check raises ``ValueError`` naming the argument
(in backquotes, as the golden models do) before anything reaches a backend.

Arrays pass one gate, :func:`check_array`: a plain numpy array (masked arrays and matrices
are refused: a masked entry is still a value to the engine), never of object dtype, of the
exact shape and dtype asked for. Values bound for the card's int32 words (token ids, KV slot
ids, sequence lengths, ``req_to_token`` entries) must fit int32 (:data:`INT32_MAX`)."""

import math
import numbers

import numpy as np

__all__ = ["INT32_MAX", "check_array", "check_backend", "check_choice", "check_float_array",
           "check_index_array", "check_integer", "check_probability", "check_real",
           "check_token_array"]

INT32_MAX = (1 << 31) - 1  # the card's token ids, KV slot ids, sequence lengths, table entries


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} of shape {value.shape}"
    return type(value).__name__


def check_array(name, value, shape, dtype):
    """``value`` if it is a plain numpy array of exactly ``shape`` (``None`` entries: any
    size) and ``dtype`` (a numpy dtype, or ``"integer"`` for any integer dtype); masked
    arrays, matrices and object dtypes are refused."""
    wanted = "an integer" if dtype == "integer" else str(np.dtype(dtype))
    text = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
    if not isinstance(value, np.ndarray):
        raise ValueError(f"`{name}` must be a numpy array ({wanted} {text}), not "
                         f"{_describe(value)}")
    if isinstance(value, np.ma.MaskedArray | np.matrix):
        raise ValueError(f"`{name}` must be a plain numpy array ({wanted} {text}), not a "
                         f"{type(value).__module__}.{type(value).__name__} (a masked entry "
                         "is still a value to the engine)")
    good_dtype = value.dtype.kind in "iu" if dtype == "integer" else value.dtype == dtype
    good_shape = value.ndim == len(shape) and all(
        s is None or s == got for s, got in zip(shape, value.shape, strict=True))
    if not (good_dtype and good_shape):
        raise ValueError(f"`{name}` must be {wanted} {text}, not {_describe(value)}")
    return value


def check_integer(name, value, lo, hi=None) -> int:
    """``value`` as an int in ``lo .. hi`` (``hi`` None: no upper bound); ``bool``, floats
    (even whole ones), strings and ``None`` are refused."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise ValueError(f"`{name}` must be an integer, not {value!r}")
    return _in_range(name, int(value), lo, hi)


def check_choice(name, value, choices):
    """``value`` if it equals one of ``choices`` (integers compared by value)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Number | str) \
            or value not in choices:
        raise ValueError(f"`{name}` must be one of {', '.join(map(str, choices))}, "
                         f"not {value!r}")
    return value


def check_index_array(name, value, shape, *, lo=0, hi=INT32_MAX + 1,
                      dtype=np.int64) -> np.ndarray:
    """An integer array of ``shape`` (``dtype``: exact, or ``"integer"``) whose values lie
    in ``lo .. hi - 1`` (default: the card's int32, ``lo .. 2**31 - 1``; ``hi`` None: no
    upper bound)."""
    check_array(name, value, shape, dtype)
    if value.size:
        bad = value < lo if hi is None else (value < lo) | (value >= hi)
        if bad.any():
            bound = f"at least {lo}" if hi is None else f"between {lo} and {hi - 1}"
            raise ValueError(f"`{name}` values must be {bound}, not {int(value[bad][0])}")
    return value


def check_token_array(name, value, shape, vocab_size, *, vocabulary="the vocabulary"):
    """Token ids: int64 of ``shape`` in ``0 .. vocab_size - 1``."""
    check_array(name, value, shape, np.int64)
    if value.size:
        bad = (value < 0) | (value >= vocab_size)
        if bad.any():
            raise ValueError(f"`{name}` holds token {int(value[bad][0])}, outside "
                             f"{vocabulary} (0 .. {vocab_size - 1})")
    return value


def check_float_array(name, value, shape, *, lo=None, hi=None, hi_open=False,
                      finite=True) -> np.ndarray:
    """A float32 array of ``shape``; with ``finite`` no NaN or infinity; values in ``lo ..
    hi`` (``hi_open``: below ``hi``) where the bounds are given."""
    check_array(name, value, shape, np.float32)
    if finite and value.size and not np.isfinite(value).all():
        bad = value[~np.isfinite(value)][0]
        raise ValueError(f"`{name}` must be finite, not {bad}")
    if value.size and lo is not None and (value < lo).any():
        raise ValueError(f"`{name}` values must be at least {lo}, not {value[value < lo][0]}")
    if value.size and hi is not None:
        above = value >= hi if hi_open else value > hi
        if above.any():
            relation = "below" if hi_open else "at most"
            raise ValueError(f"`{name}` values must be {relation} {hi}, not {value[above][0]}")
    return value


def check_real(name, value, lo, hi=None) -> float:
    """``value`` as a finite float in ``lo .. hi`` (``hi`` None: no upper bound)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real) \
            or not math.isfinite(float(value)):
        raise ValueError(f"`{name}` must be a finite number, not {value!r}")
    return _in_range(name, float(value), lo, hi)


def _in_range(name, value, lo, hi):
    """``value`` if it lies in ``lo .. hi`` (``hi`` None: no upper bound), else
    ``ValueError`` naming ``name`` and the bounds."""
    if value < lo or (hi is not None and value > hi):
        bound = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
        raise ValueError(f"`{name}` must be {bound}, not {value}")
    return value


def check_probability(name, value) -> float:
    """A real number in ``[0, 1]`` (a threshold)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"`{name}` must be a number between 0 and 1, not {value!r}")
    return float(value)


def check_backend(module, op_name, backend, choices, missing) -> None:
    """A drop-in op's ``backend`` (issue 33): one of ``choices``; ``"rtl"`` for an op in
    ``missing`` raises ``NotImplementedError`` naming what it still needs, ``missing[op_name]``."""
    check_choice("backend", backend, choices)
    if backend == "rtl" and op_name in missing:
        raise NotImplementedError(
            f"{module}.{op_name}(backend='rtl') is not implemented yet: {missing[op_name]}; "
            "use backend='golden' (issue 33)")
