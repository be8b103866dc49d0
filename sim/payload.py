"""Packing numpy arrays into stream payload integers and back, by ``data.StructLayout``.

Payloads cross the simulator boundary as plain integers (a flattened ``StructLayout``, field
``f`` at bits ``offset .. offset+width-1``). Floats travel as their bit patterns: pass
``x.view(np.uint32)`` for float32 data.
"""

import numpy as np
from amaranth.lib import data

__all__ = ["layout_fields", "pack", "unpack"]


def layout_fields(layout: data.StructLayout) -> list[tuple[str, int, int]]:
    """``(name, offset, width)`` of every field of ``layout``, in declaration order."""
    return [(name, field.offset, field.width) for name, field in layout]


def pack(layout: data.StructLayout, count: int | None = None, **fields) -> list[int]:
    """Pack per-field arrays (or scalars) into one payload integer per item.

    Parameters
    ----------
    layout : data.StructLayout
        Payload layout; every field must be given (scalars broadcast).
    count : int or None
        Number of items; inferred from the first array argument when omitted.
    **fields
        Field name to array of unsigned or signed integers (two's complement is applied).
    """
    spec = layout_fields(layout)
    missing = {name for name, _, _ in spec} - fields.keys()
    unknown = fields.keys() - {name for name, _, _ in spec}
    if missing or unknown:
        raise ValueError(f"payload fields: missing {sorted(missing)}, unknown {sorted(unknown)}")
    if count is None:
        count = next(np.size(v) for v in fields.values() if np.ndim(v) > 0)
    words = [0] * count
    for name, offset, width in spec:
        mask = (1 << width) - 1
        for index, value in enumerate(_python_ints(name, fields[name], count)):
            words[index] |= (value & mask) << offset
    return words


def _python_ints(name: str, values, count: int) -> list[int]:
    """``values`` as ``count`` exact Python ints (no detour through float64 for wide values)."""
    if np.ndim(values) == 0:
        return [int(values)] * count
    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    if len(items) != count:
        raise ValueError(f"payload field `{name}` has {len(items)} values, not {count}")
    return [int(item) for item in items]


def unpack(layout: data.StructLayout, words, *, signed: tuple[str, ...] = ()) -> dict:
    """Split payload integers into one int64/uint64 numpy array per field.

    Fields named in ``signed`` are sign-extended; others are unsigned. Fields wider than 64
    bits come back as object arrays of Python ints.
    """
    words = list(words)
    result = {}
    for name, offset, width in layout_fields(layout):
        mask = (1 << width) - 1
        values = [(word >> offset) & mask for word in words]
        if name in signed:
            values = [v - (1 << width) if v >> (width - 1) else v for v in values]
        dtype = object if width > 64 else (np.int64 if name in signed else np.uint64)
        result[name] = np.array(values, dtype=dtype)
    return result
