"""The array adapter of the drop-in ops (``host.sgl_kernel``): what a caller passes in, the
numpy array the golden models see, and the way outputs get back into the caller's memory.

Accepted arrays:

* numpy arrays (plain: masked arrays, matrices and object dtypes are refused by the project's
  gate, :func:`host.checks.check_array`);
* torch tensors, when torch is installed (it is imported by no module here: a tensor is
  recognised by its type's module, so the default install does not need torch). A CPU tensor
  is viewed in place (``Tensor.numpy`` of the detached tensor shares its memory), so outputs
  are written into it. A tensor on another device (CUDA, ...) is **copied** to the host for
  the call and each output is copied back into it (``Tensor.copy_``) after the op succeeded;
* any other object with ``__dlpack__`` (host memory: ``numpy.from_dlpack``, shared) or
  ``__array__`` (``numpy.asarray``). An ``__array__`` object is accepted as an output only if
  its array shares memory from call to call (otherwise writes could not land).

Integer arguments take int32 or int64 (any integer dtype) and are handed to the golden in the
dtype it demands: inputs converted (a copy where the dtype differs). Every output is computed
into a working copy of the golden's dtype and written back after the op succeeded, all values
checked to fit the caller's dtypes first. So an op that raises leaves every output as it was.
An output element whose value the golden's dtype cannot hold (an int64 ``1 << 40`` where the
golden writes int32) keeps its value unless the op writes it.
"""

from __future__ import annotations

import numpy as np

from .checks import check_array

__all__ = ["Output", "commit", "exact_input", "host_array", "int_input", "is_torch_tensor",
           "mask_input", "output"]


def is_torch_tensor(value) -> bool:
    """Whether ``value`` is a torch tensor (recognised without importing torch)."""
    return any(cls.__module__.split(".")[0] == "torch" and cls.__name__ == "Tensor"
               for cls in type(value).__mro__)


def _torch_array(value):
    """``(array, copy_back)`` of a torch tensor: a shared view of a CPU tensor (``copy_back``
    None), else a host copy and the function that copies it back to the device."""
    tensor = value.detach()
    if tensor.device.type == "cpu":
        return tensor.numpy(), None
    array = tensor.cpu().numpy()

    def copy_back():
        import torch  # installed: the caller passed a tensor
        tensor.copy_(torch.from_numpy(array))  # the detached tensor shares value's storage

    return array, copy_back


def host_array(name, value, *, writable=False):
    """``(array, copy_back)``: ``value`` as a numpy array (see the module docstring for what
    is accepted and when it is shared); ``copy_back`` is None unless the array is a host copy
    of a device tensor (then calling it writes the array back). ``writable``: the array will
    be written (an ``__array__`` object whose array is a fresh copy each call is refused)."""
    if isinstance(value, np.ndarray):
        return value, None
    if is_torch_tensor(value):
        return _torch_array(value)
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value), None
        except (BufferError, RuntimeError, TypeError) as error:
            raise ValueError(f"`{name}` cannot be read through __dlpack__ ({error}): pass a "
                             "numpy array or a torch tensor") from error
    if hasattr(value, "__array__"):
        array = np.asarray(value)
        if writable and not np.shares_memory(array, np.asarray(value)):
            raise ValueError(f"`{name}` is an output, but its __array__ returns a new copy each "
                             "time (writes would be lost): pass a numpy array or a tensor")
        return array, None
    raise ValueError(f"`{name}` must be a numpy array, a torch tensor or an object with "
                     f"__dlpack__ or __array__, not {type(value).__name__}")


def _gate(name, array, dtype):
    """The project's input gate at any shape: ``dtype`` a numpy dtype or ``"integer"``."""
    return check_array(name, array, (None,) * array.ndim, dtype)


def int_input(name, value, dtype=np.int64) -> np.ndarray:
    """An integer input (int32, int64 or any integer dtype) as a ``dtype`` array (the
    caller's own array when it already has that dtype)."""
    array, _ = host_array(name, value)
    _gate(name, array, "integer")
    if array.dtype != dtype:
        info = np.iinfo(dtype)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise ValueError(f"`{name}` holds values outside {np.dtype(dtype)}")
        array = array.astype(dtype)
    return array


def mask_input(name, value) -> np.ndarray:
    """A bool mask given as bool or as uint8 bytes (0 false, anything else true), as bool."""
    array, _ = host_array(name, value)
    _gate(name, array, np.uint8 if array.dtype == np.uint8 else np.bool_)
    return array.astype(np.bool_, copy=False)


def exact_input(name, value, dtype) -> np.ndarray:
    """An input of exactly ``dtype`` (float32 probabilities and coins, bool bits: no silent
    rounding or casting of other dtypes)."""
    array, _ = host_array(name, value)
    return _gate(name, array, dtype)


class Output:
    """One output argument: ``work`` is the array the golden writes, always a working copy
    (C-contiguous, the golden's dtype), so that no output is touched until every output of
    the call is known to fit; :func:`commit` brings it into the caller's memory."""

    def __init__(self, name, value, kind, dtype=None, *, fill=None):
        """``kind``: the gate's dtype (a numpy dtype, ``"integer"``, or ``"bool_or_integer"``:
        bool, else any integer dtype); ``dtype``: the golden's dtype (None: the caller's);
        ``fill``: the golden gets an array filled with this value instead of the caller's
        contents (which are not read; every element is written back)."""
        self.name = name
        self.array, self.copy_back = host_array(name, value, writable=True)
        if kind == "bool_or_integer":
            kind = np.bool_ if self.array.dtype == np.bool_ else "integer"
        _gate(name, self.array, kind)
        if not self.array.flags.writeable:
            raise ValueError(f"`{name}` must be writable (outputs are written in place)")
        dtype = self.array.dtype if dtype is None else np.dtype(dtype)
        # (where, the caller's values there): values the golden's dtype cannot hold, which
        # the golden sees as its dtype's minimum (a value no op writes)
        self._kept = None
        if fill is not None:
            self.work = np.full(self.array.shape, fill, dtype)
        else:
            self.work = np.array(self.array, dtype=dtype, order="C")  # always a copy
            if self.work.dtype.kind in "iu" and self.array.dtype.kind in "iu" and \
                    self.work.dtype.itemsize < self.array.dtype.itemsize and self.work.size:
                info = np.iinfo(self.work.dtype)
                where = (self.array < info.min) | (self.array > info.max)
                if where.any():  # an element the op does not write must keep its value
                    self._kept = where, self.array[where].copy()
                    self.work[where] = info.min

    def check_fits(self) -> None:
        """Raise ``ValueError`` if ``work`` holds a value the caller's dtype cannot."""
        if self.array.dtype.kind not in "iu" or not self.work.size:
            return
        info = np.iinfo(self.array.dtype)
        if self.work.min() < info.min or self.work.max() > info.max:
            raise ValueError(f"`{self.name}` received values outside its dtype "
                             f"{self.array.dtype}; pass {self.work.dtype}")

    def write(self) -> None:
        """Copy ``work`` into the caller's array (and on to its device). An element whose
        caller value the golden's dtype could not hold (an int64 ``1 << 40`` in an int32
        output) keeps that value unless the op wrote it (the op saw the dtype's minimum
        there, which no op writes: ids, counts and -1)."""
        result = self.work
        if self._kept is not None:
            where, values = self._kept
            result = self.work.astype(self.array.dtype)
            untouched = self.work[where] == np.iinfo(self.work.dtype).min
            result[where] = np.where(untouched, values, self.work[where])
        self.array[...] = result
        if self.copy_back is not None:
            self.copy_back()


def output(name, value, kind, dtype=None, *, fill=None) -> Output:
    """An :class:`Output` for ``value`` (see there)."""
    return Output(name, value, kind, dtype, fill=fill)


def commit(*outputs: Output) -> None:
    """Write every output back after the op succeeded: all are checked to fit first, so a
    value that does not fit leaves every output as it was."""
    for out in outputs:
        out.check_fits()
    for out in outputs:
        out.write()
