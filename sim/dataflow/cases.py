"""Command-sequence case files of the engine (``make sim KERNEL=dataflow CASE=<file>``; format:
docs/engine.md, "Replaying a command sequence").

A case is a line-oriented text file: ``#`` starts a comment; a line is a keyword and
``name=value`` settings, a value is a comma-separated list of numbers (rows of a 2-D array
separated by ``/``). Settings: ``seed N`` (the ``req_to_token`` table's contents and the random
rounds), ``config`` (the scenario: ``vocab_size``, ``pool_rows``, ``context_len``,
``cost_per_node``, ``bad_commands``), ``memory`` (``latency=lo,hi``, ``stall``), ``parameters``
(build parameters changed from the target's). Then the sequence, in file order:
``begin_round``, ``draft_depth`` and ``build_verify`` with their arguments, ``verify`` (its
logits and sampling settings drawn from the seed), and ``rounds N`` (N seeded random rounds,
bad commands between them, as the ``random`` phase).
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Case", "Entry", "read_case", "EXAMPLE_CASE", "COMMANDS"]

EXAMPLE_CASE = Path(__file__).resolve().parent / "example_case.txt"

#: Command keyword -> (required arguments, optional arguments); 2-D arrays in ``MATRICES``.
COMMANDS = {
    "begin_round": (("slots", "root_tokens", "seq_lens", "req_pool_indices",
                     "draft_cache_locs", "verify_num", "depths"), ()),
    "draft_depth": (("probas", "tokens"), ("width",)),
    "build_verify": (("tree_mask_mode",), ()),
    "verify": ((), ()),  # its logits and sampling settings drawn from the seed
}
MATRICES = ("draft_cache_locs", "probas", "tokens")
SCALARS = ("verify_num", "depths", "width", "tree_mask_mode")
SETTINGS = {
    "config": {"vocab_size": int, "pool_rows": int, "context_len": int,
               "cost_per_node": float, "bad_commands": float},
    "memory": {"latency": list, "stall": float},
}


@dataclass
class Entry:
    """One line of the sequence: ``kind`` (``begin_round``, ``draft_depth``, ``rounds``), its
    arguments (numpy arrays and ints; ``rounds``: ``count``) and its ``line``."""

    kind: str
    arguments: dict
    line: int


@dataclass
class Case:
    path: Path
    seed: int = 1
    config: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    parameters: dict = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)

    @property
    def commands(self) -> int:
        """Explicit commands (``rounds`` entries not counted)."""
        return sum(entry.kind in COMMANDS for entry in self.entries)

    @property
    def rounds(self) -> int:
        """Random rounds of the ``rounds`` entries."""
        return sum(entry.arguments["count"] for entry in self.entries if entry.kind == "rounds")


def _number(text, kind, where):
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{where}: `{text}` is not {'an integer' if kind is int else 'a number'}"
                         ) from None


def _value(name, text, where):
    """A command argument: an int scalar, a 1-D or (``MATRICES``) 2-D array."""
    if name in SCALARS:
        return _number(text, int, f"{where}: `{name}`")
    kind = float if name == "probas" else int
    rows = [[_number(item, kind, f"{where}: `{name}`") for item in row.split(",") if item]
            for row in text.split("/")] if text else []
    if name not in MATRICES:
        if len(rows) > 1:
            raise ValueError(f"{where}: `{name}` is a list, not rows separated by `/`")
        return np.array(rows[0] if rows else [], np.int64)
    if len({len(row) for row in rows}) > 1:
        raise ValueError(f"{where}: the rows of `{name}` differ in length")
    return np.array(rows, np.float32 if kind is float else np.int64)


def _pairs(words, where):
    pairs = {}
    for word in words:
        name, equals, text = word.partition("=")
        if not equals or not name:
            raise ValueError(f"{where}: `{word}` is not `name=value`")
        if name in pairs:
            raise ValueError(f"{where}: `{name}` given twice")
        pairs[name] = text
    return pairs


def read_case(path) -> Case:
    """Parse a case file; ``ValueError`` naming file and line for a malformed one."""
    path = Path(path)
    case = Case(path)
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        words = raw.partition("#")[0].split()
        if not words:
            continue
        where = f"{path}:{number}"
        keyword, rest = words[0], words[1:]
        if keyword in ("seed", "rounds"):
            if len(rest) != 1:
                raise ValueError(f"{where}: `{keyword}` takes one integer")
            value = _number(rest[0], int, f"{where}: `{keyword}`")
            if keyword == "seed":
                case.seed = value
            else:
                if value < 0:
                    raise ValueError(f"{where}: `rounds` must not be negative")
                case.entries.append(Entry("rounds", {"count": value}, number))
        elif keyword in SETTINGS:
            known = SETTINGS[keyword]
            for name, text in _pairs(rest, where).items():
                if name not in known:
                    raise ValueError(f"{where}: `{keyword}` has no setting `{name}` (known: "
                                     f"{', '.join(known)})")
                if known[name] is list:
                    value = [_number(item, int, f"{where}: `{name}`") for item in text.split(",")]
                    if len(value) != 2 or not 1 <= value[0] <= value[1]:
                        raise ValueError(f"{where}: `{name}` must be `lo,hi` with 1 <= lo <= hi")
                else:
                    value = _number(text, known[name], f"{where}: `{name}`")
                getattr(case, keyword)[name] = value
        elif keyword == "parameters":
            case.parameters.update({name: _number(text, int, f"{where}: `{name}`")
                                    for name, text in _pairs(rest, where).items()})
        elif keyword in COMMANDS:
            required, optional = COMMANDS[keyword]
            pairs = _pairs(rest, where)
            missing = [name for name in required if name not in pairs]
            unknown = [name for name in pairs if name not in (*required, *optional)]
            if missing or unknown:
                raise ValueError(f"{where}: `{keyword}` " + "; ".join(
                    text for text in (missing and f"lacks {', '.join(missing)}",
                                      unknown and f"has no argument {', '.join(unknown)}")
                    if text))
            case.entries.append(Entry(keyword, {name: _value(name, text, where)
                                                for name, text in pairs.items()}, number))
        else:
            raise ValueError(f"{where}: unknown keyword `{keyword}` (known: seed, config, "
                             f"memory, parameters, {', '.join(COMMANDS)}, rounds)")
    if not case.entries:
        raise ValueError(f"{path}: no command and no `rounds` to replay")
    return case
