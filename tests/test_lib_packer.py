# amaranth: UnusedElaboratable=no
"""hw/lib/packer.py: groups of a variable number of units in, whole groups out."""

import random

import pytest

from hw.lib.packer import Packer
from hw.lib.params import ParameterError
from sim.amaranth_tb import simulate


def _run(in_units, out_units, *, stall, seed, runs=4):
    """Runs of random groups (each run from a random offset, flushed at its end) through the
    packer under random idle and back-pressure; returns what came out and what should have."""
    rng = random.Random(seed)
    dut = Packer(unit_bits=8, in_units=in_units, out_units=out_units)
    plans = []
    for _ in range(runs):
        offset = rng.randrange(out_units)
        groups = [[rng.randrange(256) for _ in range(rng.randint(1, in_units))]
                  for _ in range(rng.randint(0, 12))]
        plans.append((offset, groups))
    got = []

    async def bench(ctx):
        for offset, groups in plans:
            ctx.set(dut.start, 1)
            ctx.set(dut.offset, offset)
            await ctx.tick()
            ctx.set(dut.start, 0)
            pending = list(groups)
            flushing = False
            out = []
            for _ in range(2000):
                if not pending and not flushing:
                    flushing = True
                ctx.set(dut.flush, flushing)
                offer = bool(pending) and rng.random() >= stall
                if offer:
                    ctx.set(dut.i.payload, {"data": pending[0] + [0] * (in_units
                                                                          - len(pending[0])),
                                            "count": len(pending[0])})
                ctx.set(dut.i.valid, offer)
                ready = rng.random() >= stall
                ctx.set(dut.o.ready, ready)
                _, _, i_ready, o_valid, o_payload, enables, empty = await ctx.tick().sample(
                    dut.i.ready, dut.o.valid, dut.o.payload, dut.enables, dut.empty)
                if offer and i_ready:
                    pending.pop(0)
                if o_valid and ready:
                    units = list(o_payload.data)
                    out.append((units, int(o_payload.count), enables))
                if flushing and empty and not o_valid:
                    break
            else:
                raise AssertionError("the packer did not drain")
            ctx.set(dut.flush, 0)
            ctx.set(dut.i.valid, 0)
            got.append(out)

    simulate(dut, bench)
    return plans, got


@pytest.mark.parametrize("in_units,out_units,stall", [
    (1, 4, 0.0), (4, 4, 0.3), (5, 2, 0.3), (5, 8, 0.0), (8, 8, 0.5), (3, 1, 0.2), (7, 3, 0.0)])
def test_units_leave_in_order_in_whole_groups(in_units, out_units, stall):
    plans, got = _run(in_units, out_units, stall=stall, seed=in_units * 10 + out_units)
    for (offset, groups), out in zip(plans, got, strict=True):
        sent = [unit for group in groups for unit in group]
        # every group but the last is whole; the last (flushed) one is zero-padded
        padded = [None] * offset + sent if sent else []  # nothing sent: nothing leaves
        padded += [0] * (-len(padded) % out_units)
        expected = [padded[k:k + out_units] for k in range(0, len(padded), out_units)]
        assert [units for units, _, _ in out] == [[0 if u is None else u for u in group]
                                                  for group in expected]
        for index, (_, count, enables) in enumerate(out):
            first = index * out_units
            held = [offset <= first + k < offset + len(sent) for k in range(out_units)]
            assert enables == sum(1 << k for k, h in enumerate(held) if h), (index, enables)
            last = index == len(out) - 1
            assert count == (out_units if not last else
                             min(out_units, offset + len(sent) - first)), index


def test_full_rate_without_back_pressure():
    """Five-unit groups into eight-unit groups: with the output always ready, one input group
    a clock."""
    dut = Packer(unit_bits=32, in_units=5, out_units=8)
    clocks = 0

    async def bench(ctx):
        nonlocal clocks
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.payload, {"data": [1, 2, 3, 4, 5], "count": 5})
        ctx.set(dut.i.valid, 1)
        taken = 0
        while taken < 64:
            _, _, ready = await ctx.tick().sample(dut.i.ready)
            taken += ready
            clocks += 1

    simulate(dut, bench)
    assert clocks <= 64 + 2, clocks


@pytest.mark.parametrize("arguments,name", [
    (dict(unit_bits=0, in_units=1, out_units=1), "unit_bits"),
    (dict(unit_bits=8, in_units=0, out_units=1), "in_units"),
    (dict(unit_bits=8, in_units=1, out_units=0), "out_units")])
def test_bad_parameters_are_named(arguments, name):
    with pytest.raises(ParameterError, match=f"`{name}`"):
        Packer(**arguments)
