"""Reader and writer of the project's case files (golden/captures/FORMAT.md).

A case file holds one tensor per line, ``name count v0 v1 ... v(count-1)``, flattened
row-major. ``#`` lines are comments, blank lines are skipped, and names the reader does not
know are kept (trace lines are not errors).

The ``meta`` line is special: it is not a tensor of the mapping but the ``Case.meta``
attribute. Most files write it with a count (``meta 10 2 8 ...``); the score capture
``cost_draft_tree_score_case.txt`` writes it without one (``meta 2 8 8 64 17``). With
``meta_has_count=None`` the reader infers which form a file uses:

    the meta line is counted  iff  its first number equals the number of numbers after it
                              and  the file is not a score capture, i.e. its first comment
                                   line does not contain "score kernel capture".

The rule is a heuristic: a file with an uncounted meta whose first value happens to equal the
number of values after it (``meta 2 8 8``) reads as counted; pass ``meta_has_count`` to force
the form. ``write_case`` always writes a count, so a file it writes under a header containing
"score kernel capture" must be read back with ``meta_has_count=True``.

Floats are written as the shortest exact decimal of their double value (``repr(float(x))``),
so every float32 value round-trips bit for bit, -0.0, subnormals and infinities included. NaN
is written as ``nan`` and reads back as the canonical quiet NaN (0x7FC00000): NaN sign and
payload are not preserved.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

__all__ = ["CAPTURES_DIR", "Case", "read_case", "write_case"]

CAPTURES_DIR = Path(__file__).resolve().parent / "captures"

_SCORE_CAPTURE_MARK = "score kernel capture"


class Case(Mapping):
    """A parsed case file: tensor name -> tuple of the raw value tokens (strings).

    The mapping keeps file order and does not contain ``meta``; its numbers (without the count)
    are in ``meta`` (``()`` when the file has no meta line). ``path`` is the file read.
    """

    def __init__(self, tensors: Mapping[str, tuple[str, ...]], meta: tuple[int, ...], path,
                 lines: Mapping[str, int] | None = None):
        """Build a case.

        Parameters:
            tensors: tensor name -> value tokens, in file order.
            meta: the numbers of the meta line, without its count.
            path: the file the case came from (used in error messages).
            lines: tensor name -> its line in the file (used in error messages).
        """
        self._tensors = dict(tensors)
        self.meta = tuple(meta)
        self.path = Path(path)
        self._lines = dict(lines or {})

    def where(self, name: str) -> str:
        """``file:line`` of tensor ``name`` (``file`` alone when the line is not known)."""
        line = self._lines.get(name)
        return f"{self.path}:{line}" if line is not None else str(self.path)

    def __getitem__(self, name: str) -> tuple[str, ...]:
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"tensor {name!r} not found in case file {self.path}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __repr__(self) -> str:
        return f"Case({str(self.path)!r}, {len(self)} tensors, meta={self.meta})"

    def f32(self, name: str) -> np.ndarray:
        """Return tensor ``name`` as a 1-D float32 array.

        Parameters:
            name: tensor name. Tokens are parsed with ``float()`` (``inf``, ``-inf``, ``nan``
                accepted) and cast to float32, which is exact for values written as the
                shortest decimal of a float32's double.
        """
        values = self._convert(name, float, "a float")
        return np.array(values, dtype=np.float64).astype(np.float32)

    def i64(self, name: str) -> np.ndarray:
        """Return tensor ``name`` as a 1-D int64 array.

        Parameters:
            name: tensor name; every token must be a decimal integer within int64.
        """
        values = self._convert(name, int, "an integer")
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            raise ValueError(
                f"{self.where(name)}: tensor {name!r} has a value outside int64"
            ) from None

    def bool_(self, name: str) -> np.ndarray:
        """Return tensor ``name`` as a 1-D bool array.

        Parameters:
            name: tensor name; every token must be ``0`` or ``1``.
        """
        tokens = self[name]
        bad = [t for t in tokens if t not in ("0", "1")]
        if bad:
            raise ValueError(
                f"{self.where(name)}: tensor {name!r} must hold 0/1 values, found {bad[0]!r}"
            )
        return np.array([t == "1" for t in tokens], dtype=np.bool_)

    def scalar(self, name: str) -> int:
        """Return the single integer of a one-element line.

        Parameters:
            name: tensor name; the line must hold exactly one integer value.
        """
        tokens = self[name]
        if len(tokens) != 1:
            raise ValueError(
                f"{self.where(name)}: tensor {name!r} must hold one value to be read as a "
                f"scalar, it holds {len(tokens)}"
            )
        return self._convert(name, int, "an integer")[0]

    def _convert(self, name: str, parse, what: str) -> list:
        """Parse every token of ``name`` with ``parse``; a bad token is a ValueError."""
        out = []
        for position, token in enumerate(self[name]):
            try:
                out.append(parse(token))
            except ValueError:
                raise ValueError(
                    f"{self.where(name)}: tensor {name!r}: value {position} ({token!r}) is "
                    f"not {what}"
                ) from None
        return out


def _resolve(path_or_name: str | os.PathLike) -> Path:
    """Map a bare ``str`` name to ``golden/captures/<name>.txt``; use anything else as a path.

    A ``str`` without a directory part is a name (``"foo"`` or ``"foo.txt"``); to read a file
    in the working directory pass ``"./foo.txt"`` or a ``Path``.
    """
    if isinstance(path_or_name, str) and not os.path.dirname(path_or_name):
        name = path_or_name if path_or_name.endswith(".txt") else path_or_name + ".txt"
        return CAPTURES_DIR / name
    return Path(path_or_name)


def _parse_meta(
    tokens: list[str], counted: bool | None, score_capture: bool, where: str
) -> tuple[int, ...]:
    """Return the meta numbers without the count, inferring the form when ``counted`` is None."""
    try:
        numbers = [int(t) for t in tokens]
    except ValueError:
        raise ValueError(f"{where}: meta values must be integers") from None
    if counted is None:
        counted = bool(numbers) and numbers[0] == len(numbers) - 1 and not score_capture
    if not counted:
        return tuple(numbers)
    if not numbers or numbers[0] != len(numbers) - 1:
        found = len(numbers) - 1 if numbers else 0
        declared = numbers[0] if numbers else "no"
        raise ValueError(f"{where}: meta declares {declared} values but has {found}")
    return tuple(numbers[1:])


def read_case(path_or_name: str | os.PathLike, *, meta_has_count: bool | None = None) -> Case:
    """Read a case file.

    Parameters:
        path_or_name: a path, or a bare name such as ``"cost_draft_tree_score_case"`` (a ``str``
            with no directory part, ``.txt`` optional) that names a file of
            ``golden/captures/``.
        meta_has_count: whether the ``meta`` line starts with its count; ``None`` infers it
            (rule in the module docstring).

    Returns the ``Case``. Raises ``ValueError`` for a line whose count does not match its
    values (naming file, line and tensor), a missing or non-integer count, and duplicate names.
    """
    path = _resolve(path_or_name)
    lines = path.read_text().splitlines()
    first_comment = next((ln for ln in lines if ln.lstrip().startswith("#")), "")
    score_capture = _SCORE_CAPTURE_MARK in first_comment

    tensors: dict[str, tuple[str, ...]] = {}
    tensor_lines: dict[str, int] = {}
    meta: tuple[int, ...] | None = None
    for lineno, line in enumerate(lines, start=1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        name, rest = parts[0], parts[1:]
        where = f"{path}:{lineno}"
        if name == "meta":
            if meta is not None:
                raise ValueError(f"{where}: duplicate meta line")
            meta = _parse_meta(rest, meta_has_count, score_capture, where)
            continue
        if name in tensors:
            raise ValueError(f"{where}: duplicate tensor {name!r}")
        tensors[name] = _parse_tensor(name, rest, where)
        tensor_lines[name] = lineno
    return Case(tensors, meta if meta is not None else (), path, tensor_lines)


def _parse_tensor(name: str, rest: list[str], where: str) -> tuple[str, ...]:
    """Check ``count v0 ..`` of tensor ``name`` and return the value tokens."""
    if not rest:
        raise ValueError(f"{where}: tensor {name!r} has no count")
    try:
        count = int(rest[0])
    except ValueError:
        raise ValueError(f"{where}: tensor {name!r} has a non-integer count {rest[0]!r}") from None
    values = tuple(rest[1:])
    if count != len(values):
        raise ValueError(
            f"{where}: tensor {name!r} declares {count} values but has {len(values)}"
        )
    return values


def _tokens(name: str, value) -> list[str]:
    """Format one entry of ``write_case`` as value tokens."""
    array = np.asarray(value)
    flat = array.reshape(-1)
    kind = array.dtype.kind
    if kind == "b":
        return ["1" if v else "0" for v in flat.tolist()]
    if kind in "iu":
        return [str(int(v)) for v in flat.tolist()]
    if kind == "f":
        return [repr(float(v)) for v in flat.tolist()]
    raise TypeError(f"tensor {name!r}: cannot write values of dtype {array.dtype}")


def write_case(
    path: str | os.PathLike,
    tensors: Mapping[str, np.ndarray | int | float | bool],
    *,
    expected: Mapping[str, np.ndarray | int | float | bool] | None = None,
    header: str | None = None,
) -> None:
    """Write a case file, one line per entry of ``tensors`` in the given order, then one
    ``expected_<name>`` line per entry of ``expected`` (the outputs a replay checks).

    Parameters:
        path: the file to write (created or overwritten; bare names are not resolved).
        tensors: name -> array or scalar. Arrays are flattened row-major; floating values are
            written as ``repr(float(x))`` (``-3.0``, ``inf``, ``nan``), integers as integers,
            bools as 0/1; a scalar is a one-element line. ``meta`` is written like any other
            line, i.e. with its count.
        expected: optional name -> expected output, written as ``expected_<name>``.
        header: optional text written first, each of its lines as a ``# `` comment.
    """
    tensors = {**tensors, **{f"expected_{name}": value
                             for name, value in (expected or {}).items()}}
    out: list[str] = []
    if header is not None:
        out.extend(f"# {ln}".rstrip() for ln in header.splitlines())
    for name, value in tensors.items():
        if not name or any(c.isspace() for c in name) or name.startswith("#"):
            raise ValueError(f"invalid tensor name {name!r}")
        values = _tokens(name, value)
        out.append(" ".join([name, str(len(values)), *values]))
    Path(path).write_text("\n".join(out) + "\n")
