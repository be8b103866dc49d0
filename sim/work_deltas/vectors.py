"""Calls of the K3 kernel (``hw.kernels.work_deltas.WorkDeltas``) and their golden results.

A ``Call`` is one ``calculate_work_deltas`` + ``width_policy`` invocation: the ``work_scores``
rows ``[B, MAXV+K]`` and the scalars. ``expected`` asks the golden models for the result,
``command``/``score_beats`` turn a call into the DUT's stream payloads, ``check`` compares the
``deltas`` beats by bit pattern. ``random_call`` and ``directed_calls`` make the vectors of the
testbenches, ``write_case_file`` writes a call as a case file, ``example_case``/
``write_example_case`` the case file of ``golden/captures/work_deltas_example_case.txt``
(``python -m sim.work_deltas.vectors`` rewrites it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import golden
from golden.cases import CAPTURES_DIR, read_case, write_case

__all__ = ["Call", "expected", "command", "score_beats", "check", "random_call",
           "directed_calls", "perf_call", "call_from_case", "example_case",
           "write_example_case", "write_case_file", "EXAMPLE_CASE"]

F32 = np.float32
EXAMPLE_CASE = CAPTURES_DIR / "work_deltas_example_case.txt"
CUMU_COUNT_MAX = (1 << 32) - 1  # the width of the DUT's `cumu_count` field
_FILL = F32(-123.0)  # row entries past ws0 + K: never streamed, never read


@dataclass
class Call:
    """One kernel call: ``work_scores`` [B, MAXV+K] float32 and the ABI scalars."""

    work_scores: np.ndarray
    batch_size: int
    node_top_k: int
    cumu_count: int
    verify_num: int
    max_verify_num: int
    cost_per_node: float = 0.0
    name: str = "random"

    @property
    def kept(self) -> int:
        """``ws0``: how many ``A`` values each row holds (the row prefix is ``ws0 + K``)."""
        v = golden.clamp_verify_num(self.verify_num, self.max_verify_num)
        return min(v, self.cumu_count)


def expected(call: Call) -> tuple[np.ndarray, int]:
    """``(work_deltas [K+1] float32, W')`` from the golden models."""
    deltas = np.full(call.node_top_k + 1, np.nan, F32)
    golden.calculate_work_deltas(call.work_scores, deltas, call.batch_size, call.node_top_k,
                                 call.cumu_count, call.verify_num, call.max_verify_num)
    width = golden.width_policy(deltas, call.node_top_k, call.batch_size,
                                F32(call.cost_per_node))
    return deltas, width


def command(call: Call, dut_max_verify_num: int) -> dict:
    """The ``cmd`` beat (a dict of integers) of a call, for a DUT built with
    ``max_verify_num = dut_max_verify_num >= call.max_verify_num``.

    ``verify_num`` is clamped with the call's ``MAXV`` first, so the DUT's own clamp (to a
    ``MAXV`` at least as large) leaves it alone; ``cumu_count`` saturates at the field's
    maximum, which does not change ``ws0``.
    """
    if call.max_verify_num > dut_max_verify_num:
        raise ValueError(f"the call needs max_verify_num >= {call.max_verify_num}, the DUT has "
                         f"{dut_max_verify_num}")
    return {
        "batch_size": call.batch_size,
        "cumu_count": min(call.cumu_count, CUMU_COUNT_MAX),
        "verify_num": golden.clamp_verify_num(call.verify_num, call.max_verify_num),
        "cost_per_node": int(np.array(call.cost_per_node, F32).view(np.uint32)),
    }


def score_beats(call: Call, lanes: int, rng: np.random.Generator | None = None) -> list[dict]:
    """The ``scores`` beats of a call: per request the row prefix, ``lanes`` values a beat.

    Each beat is ``{"scores": [lane bit patterns], "first": .., "last": ..}``. Lanes past the
    row end carry random bits (``rng``) or zeros: the DUT must ignore them.
    """
    length = call.kept + call.node_top_k
    beats = []
    rows = np.asarray(call.work_scores, F32).reshape(
        call.batch_size, call.max_verify_num + call.node_top_k)
    for row in rows:
        bits = row[:length].view(np.uint32).tolist()
        count = -(-length // lanes)
        pad = count * lanes - length
        if rng is not None:
            bits += rng.integers(0, 1 << 32, size=pad, dtype=np.uint64).tolist()
        else:
            bits += [0] * pad
        for index in range(count):
            beats.append({"scores": [int(x) for x in bits[index * lanes:(index + 1) * lanes]],
                          "first": int(index == 0), "last": int(index == count - 1)})
    return beats


def check(call: Call, beats: list[dict]) -> None:
    """Assert that the ``deltas`` beats (dicts of ``work_delta``, ``next_width``, ``first``,
    ``last``) of a call equal the golden result, floats by bit pattern."""
    deltas, width = expected(call)
    k = call.node_top_k
    assert len(beats) == k + 1, f"{call.name}: {len(beats)} output beats, expected {k + 1}"
    got = np.array([b["work_delta"] for b in beats], dtype=np.uint32)
    want = deltas.view(np.uint32)
    widths = [int(b["next_width"]) for b in beats]
    flags = [(int(b["first"]), int(b["last"])) for b in beats]
    detail = (f"{call.name}: B={call.batch_size} K={k} cumu_count={call.cumu_count} "
              f"verify_num={call.verify_num} MAXV={call.max_verify_num} "
              f"cost={float(F32(call.cost_per_node))!r}")
    assert np.array_equal(got, want), (
        f"{detail}\n  work_deltas expected {[hex(x) for x in want.tolist()]} "
        f"({deltas.tolist()})\n  got {[hex(x) for x in got.tolist()]} "
        f"({got.view(F32).tolist()})")
    assert widths == [width] * (k + 1), f"{detail}: next_width {widths}, expected {width}"
    assert flags == [(int(w == 0), int(w == k)) for w in range(k + 1)], \
        f"{detail}: first/last flags {flags}"


# --- vector generation ----------------------------------------------------------------------


def _rows(kept_rows, new_rows, k, maxv) -> np.ndarray:
    """[B, MAXV+K] work_scores whose row b starts with ``kept_rows[b]`` then ``new_rows[b]``."""
    out = np.full((len(kept_rows), maxv + k), _FILL, F32)
    for b, (a, c) in enumerate(zip(kept_rows, new_rows, strict=True)):
        row = np.concatenate([np.asarray(a, F32), np.asarray(c, F32)])
        out[b, :row.size] = row
    return out


def _descending(values) -> np.ndarray:
    return np.sort(np.asarray(values, F32))[::-1].copy()


def _values(rng, size, mode):
    """``size`` float32 values for one of the value modes (unsorted)."""
    if mode == "dyadic":  # a coarse grid: many exact ties
        return (rng.integers(0, 17, size) / 16).astype(F32)
    if mode == "zeros":  # signed zeros, subnormals and a few normals
        pool = np.array([0x0000_0000, 0x8000_0000, 0x0000_0001, 0x0000_0003, 0x007F_FFFF,
                         0x3F00_0000, 0x3400_0000], np.uint32).view(F32)
        return rng.choice(pool, size)
    if mode == "wide":  # many magnitudes and both signs: rounding in every add
        mantissa = rng.random(size) + 1.0
        exponent = rng.integers(-30, 31, size)
        sign = rng.choice([-1.0, 1.0], size, p=[0.2, 0.8])
        return (sign * np.ldexp(mantissa, exponent)).astype(F32)
    if mode == "probabilities":  # products of a few probabilities, as in a draft tree
        return np.prod(rng.random((size, 3)) ** 0.5, axis=1).astype(F32)
    return rng.random(size).astype(F32)


def random_call(rng: np.random.Generator, k: int, maxv: int, max_batch: int) -> Call:
    """A random call: batch size, ``verify_num`` (clamped or not), ``cumu_count`` covering
    ``ws0 = 0``, ``ws0 = v`` and between, value modes with ties, signed zeros, displacement of
    every kind, and ``cost_per_node`` from zero to above every marginal."""
    batch = int(rng.integers(0, min(max_batch, 12) + 1)) if rng.random() < 0.85 else \
        int(rng.integers(0, min(max_batch, 40) + 1))
    verify_num = int(rng.integers(-2, maxv + 4))
    v = golden.clamp_verify_num(verify_num, maxv)
    cumu_count = int(rng.choice([0, v, v + int(rng.integers(0, 100)),
                                 int(rng.integers(0, v + 1)), CUMU_COUNT_MAX]))
    ws0 = min(v, cumu_count)
    mode = str(rng.choice(["uniform", "dyadic", "zeros", "wide", "probabilities", "full",
                           "none", "ties", "unsorted"]))
    kept_rows, new_rows = [], []
    for _ in range(batch):
        value_mode = mode if mode in ("dyadic", "zeros", "wide", "probabilities") else "uniform"
        a = _descending(_values(rng, ws0, value_mode))
        c = _descending(_values(rng, k, value_mode))
        if mode == "full":  # every new node above every kept one
            a, c = (a / 4).astype(F32), (F32(0.5) + c / 2).astype(F32)
        elif mode == "none":
            a, c = (F32(0.5) + a / 2).astype(F32), (c / 4).astype(F32)
        elif mode == "ties" and ws0:  # new scores equal to kept ones
            c = _descending(rng.choice(a[-min(ws0, k + 1):], k))
        elif mode == "unsorted":  # outside the contract's ordering; same algorithm
            a, c = rng.permutation(a), rng.permutation(c)
        kept_rows.append(a)
        new_rows.append(c)
    call = Call(_rows(kept_rows, new_rows, k, maxv), batch, k, cumu_count, verify_num, maxv,
                name=f"random {mode}")
    choice = rng.random()
    if choice < 0.3:
        call.cost_per_node = 0.0
    elif choice < 0.75 and batch:  # a threshold among the marginals
        deltas, _ = expected(call)
        marginals = deltas[1:] - deltas[:-1]
        call.cost_per_node = float(F32(rng.choice(marginals) / F32(batch)))
    elif choice < 0.85:
        call.cost_per_node = float(F32(rng.random() * 0.5))
    elif choice < 0.95:
        call.cost_per_node = 1e30  # above every marginal: W' = 0
    else:
        call.cost_per_node = -0.25
    return call


def directed_calls(k: int, maxv: int, max_batch: int) -> list[Call]:
    """The directed calls of §5 for a DUT with ``node_top_k = k`` and ``max_verify_num =
    maxv``: ``ws0 = 0``, ``ws0 = v``, full / no / partial displacement, exhausting ``A``, ties,
    signed zeros, subnormals, ``verify_num`` clamps, ``B = 0, 1`` and several, the summation
    order across requests, and ``cost_per_node`` zero, negative, passing some widths, none."""
    rng = np.random.default_rng(12345)
    b_few = min(max_batch, 3)
    b_many = min(max_batch, 11)
    calls = []

    def add(name, kept_rows, new_rows, cumu_count, verify_num, cost=0.0):
        calls.append(Call(_rows(kept_rows, new_rows, k, maxv), len(kept_rows), k, cumu_count,
                          verify_num, maxv, cost, name))

    def desc(n, low=0.0, high=1.0):
        return _descending(low + (high - low) * rng.random(n))

    v_small = max(1, min(maxv, k // 2))
    add("ws0 = 0, every new node free", [[]] * b_few, [desc(k) for _ in range(b_few)], 0, maxv)
    add("ws0 = 0, v < K: free then nothing", [[]] * b_few, [desc(k) for _ in range(b_few)],
        0, v_small)
    add("ws0 = v, mixed", [desc(maxv) for _ in range(b_few)], [desc(k) for _ in range(b_few)],
        10 * maxv, maxv)
    add("full displacement", [desc(maxv, 0.0, 0.25) for _ in range(b_few)],
        [desc(k, 0.5, 1.0) for _ in range(b_few)], maxv, maxv)
    add("full displacement exhausts A", [desc(v_small, 0.0, 0.25) for _ in range(b_few)],
        [desc(k, 0.5, 1.0) for _ in range(b_few)], v_small, v_small)
    add("no displacement", [desc(maxv, 0.5, 1.0) for _ in range(b_few)],
        [desc(k, 0.0, 0.25) for _ in range(b_few)], maxv + 3, maxv)
    n_free = max(1, k // 3) if k > 1 else 0
    n_displace = (k - n_free) // 2
    kept_n = max(0, maxv - n_free)
    staged = np.array([0.9] * n_free + [0.8] * n_displace + [0.01] * (k - n_free - n_displace),
                      F32)
    add("free, then displacement, then nothing",
        [desc(kept_n, 0.25, 1.0) for _ in range(b_few)], [staged] * b_few, kept_n, maxv)
    grid = (np.arange(maxv, 0, -1) / maxv).astype(F32)  # distinct, descending
    tie_new = np.full(k, grid[-2] if maxv > 1 else grid[-1], F32)
    tie_new[0] = grid[-1] + F32(1 / (4 * maxv))  # displaces A[-1], then ties with A[-2]
    add("ties do not displace", [grid] * b_few, [_descending(tie_new)] * b_few, maxv, maxv)
    add("all ties", [grid] * b_few, [np.full(k, grid[-1], F32)] * b_few, maxv, maxv)
    if k > 1:
        # With descending C a tie changes nothing downstream; a larger score after the tie
        # (C unsorted, outside §5's ordering) shows whether the tie kept A[a-1] in the set.
        after_tie = np.zeros(k, F32)
        after_tie[0] = grid[-1]
        after_tie[1] = (grid[-1] + grid[-2]) / 2 if maxv > 1 else grid[-1] * F32(1.5)
        add("ties do not displace (then a larger, unsorted C)", [grid] * b_few,
            [after_tie] * b_few, maxv, maxv)
    zero_bits = np.array([0x8000_0000, 0x0000_0000, 0x8000_0000, 0x0000_0001] * k,
                         np.uint32)[:k].view(F32)
    add("signed zeros enter free", [[]] * 2, [zero_bits] * 2, 0, maxv)
    signed_kept = _descending(np.array([0x3F00_0000, 0x0000_0000, 0x8000_0000] * maxv,
                                       np.uint32)[:maxv].view(F32))
    add("signed zeros, full set", [signed_kept] * 2, [zero_bits] * 2, maxv, maxv)
    subnormal = np.array([0x0000_0005, 0x0000_0003, 0x0000_0002, 0x0000_0001] * maxv,
                         np.uint32).view(F32)
    add("subnormals", [_descending(subnormal[:maxv])] * 2,
        [_descending(np.resize(subnormal, k) * F32(2))] * 2, maxv, maxv)
    add("verify_num 0 clamps to 1", [desc(1)] * b_few, [desc(k) for _ in range(b_few)], 5, 0)
    add("verify_num < 0 clamps to 1", [desc(1)] * b_few, [desc(k) for _ in range(b_few)], 5, -7)
    add("verify_num > MAXV clamps to MAXV", [desc(maxv)] * b_few,
        [desc(k) for _ in range(b_few)], CUMU_COUNT_MAX, maxv + 10)
    add("B = 0", [], [], maxv, maxv, cost=0.5)
    add("B = 1", [desc(maxv)], [desc(k)], maxv, maxv)
    add("B several", [desc(maxv) for _ in range(b_many)], [desc(k) for _ in range(b_many)],
        maxv, maxv)
    tiny = F32(2.0**-24)
    order_new = [np.full(k, x, F32) for x in (1.0, tiny, tiny)][:min(max_batch, 3)]
    add("requests summed in ascending b", [[]] * len(order_new), order_new, 0, maxv)
    # Width policy: cost 0, negative, between the marginals, above all.
    base_kept = [desc(maxv) for _ in range(b_few)]
    base_new = [desc(k) for _ in range(b_few)]
    add("cost 0", base_kept, base_new, maxv, maxv, 0.0)
    add("cost negative", base_kept, base_new, maxv, maxv, -1.0)
    add("cost above every marginal (W' = 0)", base_kept, base_new, maxv, maxv, 1e30)
    probe = calls[-1]
    deltas, _ = expected(probe)
    marginals = deltas[1:] - deltas[:-1]
    for w in sorted({0, k // 2, k - 1}):
        add(f"cost = marginal({w + 1}) / B", base_kept, base_new, maxv, maxv,
            float(F32(marginals[w] / F32(probe.batch_size))))
    add("cost = 1/B, B = 1: threshold equals a marginal", [[]], [np.full(k, 0.5, F32)], 0,
        maxv, 0.5)
    return calls


def perf_call(k: int, maxv: int, max_batch: int, *, batch_size: int, verify_num: int,
              cumu_count: int, seed: int = 7) -> Call:
    """The call the throughput figure is measured on (random probabilities)."""
    rng = np.random.default_rng(seed)
    batch = min(batch_size, max_batch)
    ws0 = min(golden.clamp_verify_num(verify_num, maxv), cumu_count)
    kept = [_descending(_values(rng, ws0, "probabilities")) for _ in range(batch)]
    new = [_descending(_values(rng, k, "probabilities")) for _ in range(batch)]
    return Call(_rows(kept, new, k, maxv), batch, k, cumu_count, verify_num, maxv, 0.01,
                f"perf B={batch} K={k} verify_num={verify_num} ws0={ws0}")


# --- case files -----------------------------------------------------------------------------


def call_from_case(path) -> tuple[Call, np.ndarray | None, int | None]:
    """Read a case file: the call, ``expected_work_deltas`` and ``expected_next_tree_width``
    (``None`` when a line is absent). ``cost_per_node`` defaults to 0.0."""
    case = read_case(path)
    k = case.scalar("node_top_k")
    maxv = case.scalar("max_verify_num")
    batch = case.scalar("batch_size")
    cost = float(case.f32("cost_per_node")[0]) if "cost_per_node" in case else 0.0
    scores = case.f32("work_scores")
    if scores.size != batch * (maxv + k):
        raise ValueError(f"{path}: work_scores has {scores.size} values, "
                         f"batch_size * (max_verify_num + node_top_k) = {batch * (maxv + k)}")
    call = Call(scores.reshape(batch, maxv + k), batch, k, case.scalar("cumu_count"),
                case.scalar("verify_num"), maxv, cost, f"case {Path(path).name}")
    deltas = case.f32("expected_work_deltas") if "expected_work_deltas" in case else None
    width = (case.scalar("expected_next_tree_width") if "expected_next_tree_width" in case
             else None)
    return call, deltas, width


def example_case() -> Call:
    """The call of ``golden/captures/work_deltas_example_case.txt``: K = 8, MAXV = 64,
    verify_num = 64 and a full verify set (ws0 = 64), four requests with free entries none,
    partial displacement, full displacement and a tie; cost_per_node picks W' = 3."""
    k, maxv, batch = 8, 64, 4
    rng = np.random.default_rng(2024)
    kept, new = [], []
    for b in range(batch):
        a = _descending(_values(rng, maxv, "probabilities"))
        if b == 0:
            c = (a[-k:] * F32(0.5)).astype(F32)  # below every kept score: no displacement
        elif b == 1:
            c = _descending(_values(rng, k, "probabilities"))  # partial displacement
        elif b == 2:
            c = _descending(F32(0.9) + F32(0.1) * rng.random(k).astype(F32))  # full
        else:
            c = np.full(k, a[-1], F32)  # ties with the smallest kept score: none displaces
            c[0] = np.nextafter(a[-1], F32(1))
        kept.append(a)
        new.append(c)
    call = Call(_rows(kept, new, k, maxv), batch, k, 73, 64, maxv, 0.0, "example")
    deltas, _ = expected(call)
    marginals = deltas[1:] - deltas[:-1]
    call.cost_per_node = float(F32(marginals[2] / F32(batch)))
    return call


def write_example_case(path=EXAMPLE_CASE) -> None:
    """Write ``example_case()`` and its golden results in the project's case format."""
    write_case_file(example_case(), path)


def write_case_file(call: Call, path) -> None:
    """Write ``call`` and its golden results as a case file (``call_from_case`` reads it)."""
    deltas, width = expected(call)
    write_case(path, {
        "work_scores": call.work_scores,
        "batch_size": call.batch_size,
        "node_top_k": call.node_top_k,
        "cumu_count": call.cumu_count,
        "verify_num": call.verify_num,
        "max_verify_num": call.max_verify_num,
        "cost_per_node": np.array([call.cost_per_node], F32),
    }, expected={"work_deltas": deltas, "next_tree_width": width},
        header="K3 calculate_work_deltas + width policy case (golden/work_deltas.py)\n"
               "work_scores [batch_size, max_verify_num + node_top_k]; expected_work_deltas "
               "[node_top_k + 1];\nexpected_next_tree_width = width_policy("
               "expected_work_deltas, node_top_k, batch_size, cost_per_node)\n"
               "written by `python -m sim.work_deltas.vectors`")


if __name__ == "__main__":
    write_example_case()
    print(f"wrote {EXAMPLE_CASE}")
