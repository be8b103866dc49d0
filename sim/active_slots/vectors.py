"""Calls of the active-slot compaction (``hw.kernels.active_slots.ActiveSlots``), their golden
results (``golden.compact_active_slots``) and the kernel's streams decoded back to the
golden's tensors. Random ``finished`` vectors come from uniform draws and from the K7 golden
run on draft-round trees (``sim.verify_result.vectors``). ``python -m sim.active_slots.vectors``
rewrites the example case file ``sim/active_slots/example_case.txt``."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from golden.active_slots import compact_active_slots
from golden.cases import read_case, write_case

__all__ = ["Call", "OUTPUT_NAMES", "expected", "decode", "check", "random_call",
           "directed_calls", "perf_call", "k7_call", "call_from_case", "example_case",
           "write_example_case", "write_case_file", "EXAMPLE_CASE"]

I64 = np.int64
SENTINEL = -777
OUTPUT_NAMES = ("active_slots", "active_inverse", "active_count")


@dataclass
class Call:
    """One ``compact_active_slots`` call: ``finished`` (bool [B])."""

    name: str
    finished: np.ndarray

    @property
    def batch_size(self) -> int:
        return len(self.finished)


def expected(call: Call) -> dict:
    b = call.batch_size
    out = {"active_slots": np.full(b, SENTINEL, I64), "active_inverse": np.full(b, SENTINEL, I64),
           "active_count": np.full(1, SENTINEL, I64)}
    compact_active_slots(call.finished, b, *out.values())
    return out


def _markers(name, values, count):
    position = np.arange(count)
    assert np.array_equal(values["first"], position == 0), f"{name}: `first` markers"
    assert np.array_equal(values["last"], position == count - 1), f"{name}: `last` markers"


def decode(call: Call, inverse: dict, slots: dict, count: dict) -> dict:
    """The golden's tensors from the kernel's ``inverse``, ``slots`` and ``count`` beats
    (markers checked); also checks on the kernel's own outputs that ``active_inverse``
    inverts ``active_slots``."""
    b = call.batch_size
    assert len(inverse["active_inverse"]) == b, f"{call.name}: inverse beats"
    assert len(slots["active_slot"]) == b, f"{call.name}: slots beats"
    assert len(count["active_count"]) == 1, f"{call.name}: count beats"
    _markers(f"{call.name} inverse", inverse, b)
    _markers(f"{call.name} slots", slots, b)
    out = {"active_slots": slots["active_slot"].astype(I64),
           "active_inverse": inverse["active_inverse"].astype(I64),
           "active_count": count["active_count"].astype(I64)}
    active = int(out["active_count"][0])
    for i in range(active):
        slot = int(out["active_slots"][i])
        assert 0 <= slot < b and out["active_inverse"][slot] == i, \
            f"{call.name}: active_inverse does not invert active_slots at {i}"
    assert (out["active_inverse"] >= 0).sum() == active, \
        f"{call.name}: active_inverse maps {(out['active_inverse'] >= 0).sum()} rows"
    return out


def check_calls(calls, inverse: dict, slots: dict, count: dict) -> None:
    """``check`` every call of a back-to-back run: ``inverse`` and ``slots`` hold one record
    per row of all the calls, ``count`` one per call (field -> array)."""
    row = 0
    for index, call in enumerate(calls):
        rows = slice(row, row + call.batch_size)
        check(call, {key: v[rows] for key, v in inverse.items()},
              {key: v[rows] for key, v in slots.items()},
              {key: v[index:index + 1] for key, v in count.items()})
        row += call.batch_size


def check(call: Call, inverse: dict, slots: dict, count: dict) -> None:
    """Raise ``AssertionError`` naming the first output of ``call`` that differs from the
    golden (the unpacked fields of its output records)."""
    got, want = decode(call, inverse, slots, count), expected(call)
    for name in OUTPUT_NAMES:
        if not np.array_equal(got[name], want[name]):
            diff = np.flatnonzero(got[name] != want[name])
            raise AssertionError(
                f"{call.name}: `{name}` differs from the golden at {diff.size} of "
                f"{want[name].size} elements, first at {diff[:6].tolist()}: got "
                f"{got[name][diff[:6]].tolist()}, expected {want[name][diff[:6]].tolist()}")


def random_call(rng: np.random.Generator, max_batch: int) -> Call:
    b = int(rng.integers(0, min(max_batch, 80) + 1))
    p = float(rng.choice([0.0, 0.1, 0.5, 0.9, 1.0]))
    return Call(f"random B={b} p={p}", rng.random(b) < p)


def k7_call(rng: np.random.Generator, max_batch: int) -> Call:
    """``finished`` of a K7 golden call on draft-round trees (EOS and length limits)."""
    from sim.verify_result.vectors import expected as k7_expected
    from sim.verify_result.vectors import random_call as k7_random

    call = k7_random(rng, 16, 6)
    finished = k7_expected(call)["finished"][:max_batch]
    return Call(f"K7 finished B={len(finished)}", finished.copy())


def directed_calls(max_batch: int) -> list[Call]:
    """An empty batch, one request (alive / finished), nothing finished, everything finished
    (zero unfinished requests), alternating rows, the first / last row finished, only the
    last row alive, requests finishing in the middle of the batch, the largest batch."""
    b = max_batch
    mid = np.zeros(min(b, 9), np.bool_)
    mid[[i for i in (2, 4, 5) if i < len(mid)]] = True
    calls = [
        Call("batch_size 0", np.zeros(0, np.bool_)),
        Call("one request, alive", np.array([False])),
        Call("one request, finished", np.array([True])),
        Call("nothing finished", np.zeros(min(b, 37), np.bool_)),
        Call("all finished (zero unfinished requests)", np.ones(min(b, 37), np.bool_)),
        Call("alternating", np.arange(min(b, 20)) % 2 == 1),
        Call("first and last finished", np.isin(np.arange(min(b, 12)), [0, min(b, 12) - 1])),
        Call("only the last alive", np.arange(min(b, 10)) != min(b, 10) - 1),
        Call("finishing in the middle of the batch", mid),
        Call(f"largest batch {b}, a third finished", np.arange(b) % 3 == 1),
        Call(f"largest batch {b}, all finished", np.ones(b, np.bool_)),
    ]
    return calls


def perf_call(*, batch_size: int, finished_fraction: float, seed: int = 2026) -> Call:
    rng = np.random.default_rng(seed)
    return Call(f"perf B={batch_size} {finished_fraction:.0%} finished",
                rng.random(batch_size) < finished_fraction)


# --- case files -----------------------------------------------------------------------------

EXAMPLE_CASE = Path(__file__).resolve().parent / "example_case.txt"


def call_from_case(path) -> tuple[Call, dict]:
    """Read a case file (``finished``, ``batch_size``): the call and its ``expected_*``
    tensors (those present)."""
    case = read_case(path)
    finished = case.bool_("finished")
    if finished.size != case.scalar("batch_size"):
        raise ValueError(f"{path}: finished has {finished.size} values, batch_size = "
                         f"{case.scalar('batch_size')}")
    want = {name: case.i64(f"expected_{name}") for name in OUTPUT_NAMES
            if f"expected_{name}" in case}
    return Call(f"case {Path(path).name}", finished), want


def example_case() -> Call:
    """The call of ``sim/active_slots/example_case.txt``: the ``finished`` flags of the K7
    example case (``sim/verify_result/example_case.txt``) plus nine more rows."""
    from sim.verify_result.vectors import example_case as k7_example
    from sim.verify_result.vectors import expected as k7_expected

    finished = k7_expected(k7_example())["finished"]
    more = np.array([False, True, True, False, False, True, False, True, True])
    return Call("example", np.concatenate([finished, more]))


def write_example_case(path=EXAMPLE_CASE) -> None:
    write_case_file(example_case(), path)


def write_case_file(call: Call, path) -> None:
    """Write ``call`` and its golden results as a case file (``call_from_case`` reads it)."""
    want = expected(call)
    write_case(path, {"finished": call.finished, "batch_size": call.batch_size},
               expected={name: want[name] for name in OUTPUT_NAMES},
               header="active-slot compaction case (golden/active_slots.py)\n"
                      "written by `python -m sim.active_slots.vectors`")


if __name__ == "__main__":
    write_example_case()
    print(f"wrote {EXAMPLE_CASE}")
