"""Host-API argument checks shared by the golden ops (ValueError before any write).

Arrays may come flat (as in the CUDA captures) or shaped; outputs are returned as reshaped
*views* so that writes land in the caller's memory.
"""

import numpy as np

__all__ = ["ParameterError", "ParameterTypeError", "check_int", "check_array", "in_view",
           "out_view", "check_index_range"]


class ParameterError(ValueError):
    """An argument or build parameter is out of range; ``parameter`` names it (as data, so
    callers such as the build flow need not parse the message)."""

    def __init__(self, parameter: str, message: str):
        super().__init__(message)
        self.parameter = parameter


class ParameterTypeError(ParameterError, TypeError):
    """An argument or build parameter has the wrong type (a ``ValueError`` and a
    ``TypeError``); ``parameter`` names it."""



def check_int(name, value, lo, hi=None, *, lo_name=None, hi_name=None):
    """Check that ``value`` is an integer in ``[lo, hi]`` and return it as a Python int.

    Parameters: ``name`` argument name for the message; ``value`` the argument; ``lo``/``hi``
    inclusive bounds (``hi=None``: no upper bound); ``lo_name``/``hi_name`` spellings of the
    bounds in the message when they are other arguments (e.g. "`node_top_k`").

    Raises ``ParameterTypeError`` for a non-integer (``bool`` included) and ``ParameterError``
    for a value out of range, both carrying ``name`` as ``parameter``.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ParameterTypeError(name, f"`{name}` must be an integer, not {value!r}")
    value = int(value)
    lo_text = lo_name if lo_name is not None else str(lo)
    hi_text = hi_name if hi_name is not None else str(hi)
    if hi is None and value < lo:
        raise ParameterError(name, f"`{name}` must be at least {lo_text}, not {value}")
    if hi is not None and not lo <= value <= hi:
        raise ParameterError(name, f"`{name}` must be between {lo_text} and {hi_text}, "
                                   f"not {value}")
    return value


def check_array(name, array, shape, dtype):
    """Raise ``ValueError`` unless ``array`` is a numpy array of exactly ``shape``/``dtype``."""
    if not isinstance(array, np.ndarray) or array.dtype != dtype or array.shape != shape:
        got = (array.shape, array.dtype) if isinstance(array, np.ndarray) else type(array)
        raise ValueError(f"`{name}` must be {np.dtype(dtype)} of shape {shape}, not {got}")
    return array


def in_view(name, array, shape, dtype):
    """Validate an input array (exact dtype, element count) and return it reshaped to ``shape``.

    Parameters: ``name`` argument name; ``array`` the caller's array (flat or shaped);
    ``shape`` the ABI shape; ``dtype`` the ABI dtype.
    """
    if not isinstance(array, np.ndarray):
        raise ValueError(f"`{name}` must be a numpy array, not {type(array).__name__}")
    if array.dtype != np.dtype(dtype):
        raise ValueError(f"`{name}` must have dtype {np.dtype(dtype)}, not {array.dtype}")
    expected = int(np.prod(shape, dtype=np.int64))
    if array.size != expected:
        raise ValueError(
            f"`{name}` must have {expected} elements (shape {tuple(shape)}), not {array.size}"
        )
    return array.reshape(shape)


def out_view(name, array, shape, dtype):
    """Validate an output array and return a reshaped *view* of it (never a copy).

    Parameters as for :func:`in_view`; the array must also be writable and C-contiguous,
    otherwise a reshape could silently copy and the outputs would be lost.
    """
    view = in_view(name, array, shape, dtype)
    if not array.flags.writeable:
        raise ValueError(f"`{name}` must be writable")
    if not array.flags.c_contiguous:
        raise ValueError(f"`{name}` must be C-contiguous (outputs are written in place)")
    return view


def check_index_range(name, values, lo, hi, hi_name):
    """Check that every element of ``values`` lies in ``[lo, hi)``; ``hi_name`` names ``hi``."""
    if values.size and (values.min() < lo or values.max() >= hi):
        bad = values[(values < lo) | (values >= hi)][0]
        raise ValueError(f"`{name}` values must be between {lo} and {hi_name} - 1, not {bad}")
