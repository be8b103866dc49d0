"""The records the engine and its host exchange through card memory, defined once.

Each :class:`Record` is a fixed part of 32-bit little-endian words (an
``amaranth.lib.data.StructLayout``, one field a word, in memory order) followed by variable
tails whose lengths follow the build or the command. The hardware (``PersistentEngine``'s
sequencer states) indexes words by field name (:meth:`Record.word`), the host
(``sim.dataflow.host.EngineHost``) packs and unpacks them with :meth:`Record.pack` and
:meth:`Record.unpack`, ``EngineParams``' word counts are their sizes and docs/engine.md's record
tables are :func:`record_tables`' text (checked by tests/test_dataflow_records.py).
"""

from dataclasses import dataclass

import numpy as np
from amaranth.lib import data

__all__ = ["Record", "Tail", "ARGUMENT", "FRONTIER", "TREE", "REQUEST", "RESULT", "STATE",
           "NODE", "RECORDS", "record_tables"]


@dataclass(frozen=True)
class Tail:
    """A variable part of a record, after its fixed words: ``name``, its length in words as
    docs/engine.md writes it (``words``) and what it holds."""

    name: str
    words: str
    meaning: str


class Record:
    """A record's fixed part (one 32-bit word per field, in order) and its variable tails.

    Parameters
    ----------
    name : str
        The record's name in docs/engine.md.
    fields : sequence of (str, str)
        ``(field name, meaning)`` per word of the fixed part, in memory order.
    tails : sequence of Tail
        The variable parts after the fixed words, in memory order.
    """

    def __init__(self, name, fields, tails=()):
        if len({field for field, _ in fields}) != len(fields) or not fields:
            raise ValueError(f"record {name!r} needs distinct field names, at least one")
        self.name = name
        self.layout = data.StructLayout({field: 32 for field, _ in fields})
        self.meanings = dict(fields)
        self.tails = tuple(tails)

    @property
    def fields(self) -> tuple[str, ...]:
        """The fixed part's field names in memory order."""
        return tuple(sorted(self.meanings, key=lambda field: self.layout[field].offset))

    @property
    def size(self) -> int:
        """Words of the fixed part."""
        return self.layout.size // 32

    def word(self, field: str) -> int:
        """Word index of ``field`` within the record."""
        try:
            return self.layout[field].offset // 32
        except KeyError:
            raise KeyError(f"record {self.name!r} has no field {field!r}; it has "
                           f"{', '.join(self.fields)}") from None

    def in_order(self, values: dict) -> list:
        """``values`` (field name -> anything, every field once) in the fields' word order."""
        if sorted(values) != sorted(self.fields):
            raise ValueError(f"record {self.name!r}: fields {list(self.fields)} needed, got "
                             f"{sorted(values)}")
        return [values[field] for field in self.fields]

    def _tail_sizes(self, sizes):
        names = [tail.name for tail in self.tails]
        if sorted(sizes) != sorted(names):
            raise ValueError(f"record {self.name!r}: tails {names} needed, got {sorted(sizes)}")
        return [int(sizes[name]) for name in names]

    def pack(self, count, tails=None, **fields) -> np.ndarray:
        """``count`` records as int64 words ``[count, size + tails]``: every field's value
        (a scalar or ``count`` values) by name, every tail (``[count, words]``) in ``tails``."""
        self.in_order(fields)
        tails = dict(tails or {})
        self._tail_sizes({name: 0 for name in tails})
        columns = [np.asarray(tails[tail.name], np.int64).reshape(count, -1) if count
                   else np.zeros((0, 0), np.int64) for tail in self.tails]
        head = np.zeros((count, self.size), np.int64)
        for field, value in fields.items():
            head[:, self.word(field)] = np.asarray(value, np.int64)
        return np.concatenate([head, *columns], axis=1)

    def unpack(self, words, **tail_sizes) -> dict[str, np.ndarray]:
        """The fields (``words[..., i]``) and tails (``words[..., a:b]``) of records ``words``
        (``[..., size + tails]``, the tails' lengths by name)."""
        sizes = self._tail_sizes(tail_sizes)
        words = np.asarray(words)
        if words.shape[-1] != self.size + sum(sizes):
            raise ValueError(f"record {self.name!r}: {self.size + sum(sizes)} words a record "
                             f"expected, got {words.shape[-1]}")
        out = {field: words[..., self.word(field)] for field in self.fields}
        start = self.size
        for tail, length in zip(self.tails, sizes, strict=True):
            out[tail.name] = words[..., start:start + length]
            start += length
        return out


ARGUMENT = Record("begin_round argument", [
    ("slot", "the request's slot"),
    ("root_token", "the round's root token"),
    ("seq_len", "the request's sequence length"),
    ("req_pool_index", "its `req_to_token` row"),
], [Tail("kv_slots", "MI + 1", "the round's draft KV slots")])

FRONTIER = Record("draft_depth frontier", [
    ("token", "the node's token"),
    ("parent_index", "its parent's index in the depth's frontier"),
    ("node_id", "its node id"),
    ("position", "its position"),
    ("kv_slot", "its KV slot"),
], [Tail("mask", "ceil(MI / 32)", "the mask row: column `c` at bit `c % 32` of word `c // 32`")])

TREE = Record("build_verify tree", [
    ("retrive_index", "`retrive_index`"),
    ("retrive_next_token", "`retrive_next_token`"),
    ("retrive_next_sibling", "`retrive_next_sibling`"),
    ("position", "the position"),
    ("draft_token", "the draft token"),
])

REQUEST = Record("verify request", [
    ("temperature", "float32, finite and >= 0"),
    ("top_k", "0: off"),
    ("top_p", "float32 in [0, 1] (1.0: off)"),
    ("seed_or_final_coin", "the LFSR seed, or the final draw's coin (float32)"),
    ("max_seq_len", "`max_seq_len`"),
], [Tail("coins", "n", "the coins (float32; ignored with `lfsr`)")])

RESULT = Record("verify result", [
    ("accept_token_num", "`accept_token_num`"),
    ("accept_length", "`accept_length`"),
    ("next_root", "the next round's root token"),
    ("finished", "1: the request finished"),
    ("seq_len", "the new `seq_len`"),
    ("nan_flag", "1: a NaN in its logits"),
    ("verified_offset", "the request's offset in `verified_id`"),
    ("active_slot", "`active_slots[b]`"),
    ("active_inverse", "`active_inverse[b]`"),
    ("rows_read", "the logits rows it read"),
], [Tail("accept_index", "S", "its `accept_index` row (`S` = depths run + 1)"),
    Tail("predicts", "n", "its `predicts` row"),
    Tail("evict_mask", "ceil(n / 32)", "its `evict_mask`: node `i` at bit `i % 32` of word "
         "`i // 32`")])

STATE = Record("read_state", [
    ("phase", "the slot's phase"),
    ("seq_len", "`seq_len`"),
    ("req_pool_index", "`req_pool_index` (-1 for a slot no round has used)"),
    ("cumu_count", "`cumu_count`"),
], [Tail("nodes", "6 * cumu_count", "the valid nodes, a read_state node record each"),
    Tail("sort_scores", "MAXV", "`sort_scores` (float32)"),
    Tail("work_scores", "MAXV + K", "`work_scores` (float32)")])

NODE = Record("read_state node", [
    ("token", "`cumu_tokens`"),
    ("score", "`cumu_scores` (float32)"),
    ("delta", "`cumu_deltas`"),
    ("prev", "`prev_indexs`"),
    ("next", "`next_indexs`"),
    ("side", "`side_indexs`"),
])

#: Every record, in docs/engine.md's order.
RECORDS = (ARGUMENT, FRONTIER, TREE, REQUEST, RESULT, STATE, NODE)


def record_tables() -> str:
    """docs/engine.md's record tables (Markdown): per record a heading line and a table of its
    words, fixed fields by index, then its tails."""
    parts = []
    for record in RECORDS:
        size = " + ".join([str(record.size)] + [f"({tail.words})" if " " in tail.words
                                                 else tail.words for tail in record.tails])
        lines = [f"{record.name} record ({size} words):", "",
                 "| word | field | meaning |", "|---|---|---|"]
        lines += [f"| {record.word(field)} | `{field}` | {record.meanings[field]} |"
                  for field in record.fields]
        lines += [f"| + {tail.words} | `{tail.name}` | {tail.meaning} |" for tail in record.tails]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)
