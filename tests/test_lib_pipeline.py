"""``hw.lib.pipeline`` helpers on Amaranth's simulator against Python integers: the
leading-zero count (at the widths the cores use and the odd ones around its table groups) and
the right shift with its sticky bit."""

import random

import pytest
from amaranth.hdl import Module, Signal

from hw.lib.pipeline import count_leading_zeros, shift_right_sticky
from sim.amaranth_tb import simulate


@pytest.mark.parametrize("width", [1, 2, 5, 6, 7, 12, 23, 24, 25, 48, 64, 65])
def test_count_leading_zeros_matches_bit_length(width):
    rng = random.Random(width)
    value, count = Signal(width), Signal(width.bit_length())
    m = Module()
    m.d.comb += count.eq(count_leading_zeros(value))
    values = [0, (1 << width) - 1, *(1 << bit for bit in range(width)),
              *(rng.getrandbits(width) >> rng.randrange(width) for _ in range(200))]

    async def testbench(ctx):
        for x in values:
            ctx.set(value, x)
            assert ctx.get(count) == width - x.bit_length(), (width, hex(x))

    simulate(m, testbench, clocked=False)


@pytest.mark.parametrize("width, max_shift", [(25, 33), (25, 32), (8, 8), (1, 3)])
def test_shift_right_sticky_matches_integers(width, max_shift):
    """The shift and its sticky bit (a one shifted out) for every amount the amount's width
    holds, beyond ``max_shift`` too (such shifts leave nothing)."""
    rng = random.Random(width * 100 + max_shift)
    amount_bits = max_shift.bit_length() + 1
    value, amount = Signal(width), Signal(amount_bits)
    shifted, sticky = Signal(width), Signal()
    m = Module()
    result, lost = shift_right_sticky(value, amount, max_shift=max_shift)
    m.d.comb += [shifted.eq(result), sticky.eq(lost)]
    values = [0, 1, (1 << width) - 1, *(rng.getrandbits(width) for _ in range(30))]

    async def testbench(ctx):
        for x in values:
            for by in range(1 << amount_bits):
                ctx.set(value, x)
                ctx.set(amount, by)
                assert ctx.get(shifted) == x >> by, (x, by)
                assert ctx.get(sticky) == int(x & ((1 << by) - 1) != 0), (x, by)

    simulate(m, testbench, clocked=False)


def test_shift_right_sticky_needs_room_for_the_width():
    with pytest.raises(ValueError, match="at least the value width"):
        shift_right_sticky(Signal(8), Signal(3), max_shift=7)
