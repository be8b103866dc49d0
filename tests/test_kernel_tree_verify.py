"""The fused verify's hardware (docs/tree_verify.md): one lane against the golden arithmetic."""

import random

import numpy as np
import pytest
from test_golden_tree_verify import random_row

from golden.logit_rows import (
    lane_exponentials,
    normaliser_terms,
    row_constants,
    temperature_scale,
)
from hw.kernels.tree_verify_lane import LogitLane
from sim.amaranth_tb import simulate

F32 = np.float32


def lane_rows(seed, rows=120):
    """Rows of several styles and temperatures (NaN, ``-inf``, ``+inf`` and all ``-inf`` rows
    among them), each with its constants."""
    rng = np.random.default_rng(seed)
    out = []
    for index in range(rows):
        x = random_row(rng, int(rng.integers(1, 40)))
        if index % 7 == 3:
            x[rng.integers(0, x.size)] = np.nan
        if index % 11 == 5:
            x[:] = -np.inf
        if index % 13 == 6:
            x[rng.integers(0, x.size)] = np.inf
        t = F32(np.exp(rng.uniform(np.log(1e-5), np.log(1e4))))
        clean = np.where(np.isnan(x), -np.inf, x).astype(np.float32)
        out.append((x, row_constants(clean, temperature_scale(t))))
    return out


def run_lane(rows, *, stall=0.0, seed=0):
    """Every row through one ``LogitLane``: a row's logits back to back, ``LATENCY`` empty
    clocks between rows (the constants change only then; ``stall``: probability of a clock
    with ``en`` low); returns per row the lane's ``(mantissa, shift, term)`` arrays and its
    sum."""
    dut = LogitLane()
    feed = []
    for index, (x, _) in enumerate(rows):
        feed += [(index, value, position == 0, position == x.size - 1)
                 for position, value in enumerate(x)]
        feed += [None] * LogitLane.LATENCY
    outputs = {index: [] for index in range(len(rows))}
    sums = {}
    rand = random.Random(seed)

    async def bench(ctx):
        history = []  # per enabled clock: the (row, last) fed then, or None
        while len(history) < len(feed) + LogitLane.LATENCY:
            enable = rand.random() >= stall
            fed = None
            if enable and len(history) < len(feed) and feed[len(history)] is not None:
                index, value, first, last = feed[len(history)]
                constants = rows[index][1]
                for name, bits in (("peak", constants.peak), ("threshold", constants.threshold),
                                   ("logit", value)):
                    ctx.set(getattr(dut, name), int(np.float32(bits).view(np.uint32)))
                ctx.set(dut.grid, constants.grid)
                ctx.set(dut.peak_aligned, constants.peak_aligned)
                ctx.set(dut.scale, constants.scale)
                fed = (index, last)
            ctx.set(dut.valid, fed is not None)
            ctx.set(dut.clear, fed is not None and first)
            ctx.set(dut.en, enable)
            await ctx.tick()
            if not enable:
                continue
            history.append(fed)
            if len(history) >= LogitLane.LATENCY and history[-LogitLane.LATENCY] is not None:
                index, last = history[-LogitLane.LATENCY]
                assert ctx.get(dut.out_valid)
                outputs[index].append((ctx.get(dut.mantissa), ctx.get(dut.shift),
                                       ctx.get(dut.term)))
                if last:
                    sums[index] = ctx.get(dut.sum)

    simulate(dut, bench)
    return {index: np.array(values, dtype=np.int64).T for index, values in outputs.items()}, sums


@pytest.mark.parametrize(("seed", "stall"), [(1, 0.0), (2, 0.3)])
def test_lane_matches_the_golden_arithmetic(seed, stall):
    rows = lane_rows(seed)
    outputs, sums = run_lane(rows, stall=stall, seed=seed)
    for index, (x, constants) in enumerate(rows):
        clean = np.where(np.isnan(x), -np.inf, x).astype(np.float32)
        mantissa, shift, _ = lane_exponentials(clean, constants)
        terms = normaliser_terms(mantissa, shift)
        got_mantissa, got_shift, got_terms = outputs[index]
        np.testing.assert_array_equal(got_mantissa, mantissa, err_msg=f"row {index}: E")
        np.testing.assert_array_equal(got_shift, shift, err_msg=f"row {index}: k")
        np.testing.assert_array_equal(got_terms, terms, err_msg=f"row {index}: term")
        assert sums[index] == sum(int(t) for t in terms), f"row {index}: sum"
