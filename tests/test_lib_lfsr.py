# amaranth: UnusedElaboratable=no
"""The K6 coin generator: the Galois LFSR model vs its polynomial, and the hardware vs the model."""

import math
import random

import numpy as np
import pytest
from amaranth.back import rtlil

from golden.lfsr import GaloisLFSR32Model
from hw.lib.lfsr import GaloisLFSR32
from sim.amaranth_tb import simulate

P = GaloisLFSR32Model.POLYNOMIAL
ORDER = 2**32 - 1
ORDER_FACTORS = (3, 5, 17, 257, 65537)


# --- GF(2)[x] arithmetic on Python ints (bit i = coefficient of x^i) -------------------------


def poly_mulmod(a: int, b: int, mod: int = P) -> int:
    """``a * b mod mod`` over GF(2)."""
    degree = mod.bit_length() - 1
    result = 0
    while b:
        if b & 1:
            result ^= a
        b >>= 1
        a <<= 1
        if a >> degree & 1:
            a ^= mod
    return result


def poly_powmod(a: int, exponent: int, mod: int = P) -> int:
    result = 1
    while exponent:
        if exponent & 1:
            result = poly_mulmod(result, a, mod)
        a = poly_mulmod(a, a, mod)
        exponent >>= 1
    return result


def is_prime(q: int) -> bool:
    return q >= 2 and all(q % d for d in range(2, math.isqrt(q) + 1))


X = 0b10
X_INVERSE = poly_powmod(X, ORDER - 1)  # x^(2^32 - 2) = x^-1 in the multiplicative group


# --- the polynomial and the single-step model ------------------------------------------------


def test_polynomial_is_the_spec_polynomial():
    assert P == (1 << 32) + (1 << 22) + (1 << 2) + (1 << 1) + 1


def test_polynomial_is_primitive():
    """x has multiplicative order exactly 2^32 - 1 modulo p, so p is irreducible (every
    nonzero residue is a power of x, hence a unit) and primitive."""
    assert math.prod(ORDER_FACTORS) == ORDER
    assert all(is_prime(q) for q in ORDER_FACTORS)
    assert poly_powmod(X, ORDER) == 1
    for q in ORDER_FACTORS:
        assert poly_powmod(X, ORDER // q) != 1, q


def test_taps_are_x_inverse():
    assert GaloisLFSR32Model.TAPS == X_INVERSE == (1 << 31) | (1 << 21) | (1 << 1) | 1
    assert poly_mulmod(X, GaloisLFSR32Model.TAPS) == 1


def test_single_step_is_multiplication_by_x_inverse():
    rng = random.Random(3)
    states = [1, 2, 0x8000_0000, 0xFFFF_FFFF] + [rng.getrandbits(32) for _ in range(300)]
    for state in states:
        stepped = GaloisLFSR32Model.model_step(state)
        assert stepped == poly_mulmod(state, X_INVERSE)
        assert poly_mulmod(stepped, X) == state
    assert GaloisLFSR32Model.model_step(0) == 0


def test_single_step_has_maximal_period():
    """Order of x^-1 equals the order of x (2^32 - 1): one cycle through every nonzero state.
    Spot check: 2^32 - 1 steps from any state return to it, as the powers of x^-1 say."""
    assert poly_powmod(X_INVERSE, ORDER) == 1
    for q in ORDER_FACTORS:
        assert poly_powmod(X_INVERSE, ORDER // q) != 1


def test_leap_is_multiplication_by_x_to_minus_32_and_maximal():
    assert math.gcd(GaloisLFSR32Model.STEPS_PER_DRAW, ORDER) == 1  # leap has period 2^32 - 1
    leap_factor = poly_powmod(X_INVERSE, 32)
    rng = random.Random(4)
    for _ in range(200):
        state = rng.getrandbits(32)
        assert GaloisLFSR32Model.model_leap(state) == poly_mulmod(state, leap_factor)


def test_batch_leap_and_matrix_match_single_steps():
    rng = np.random.default_rng(5)
    states = rng.integers(0, 2**32, size=500, dtype=np.uint64).astype(np.uint32)
    for steps in (1, 7, 32):
        batch = GaloisLFSR32Model.model_leap(states, steps)
        scalar = [GaloisLFSR32Model.model_leap(int(s), steps) for s in states]
        np.testing.assert_array_equal(batch, np.array(scalar, dtype=np.uint32))
        rows = GaloisLFSR32Model.leap_matrix(steps)
        for state, expected in zip(states[:50].tolist(), scalar[:50], strict=True):
            bits = [bin(state & row).count("1") & 1 for row in rows]
            assert sum(bit << i for i, bit in enumerate(bits)) == expected


def test_coins_model():
    model = GaloisLFSR32Model
    state = 1
    expected = []
    for _ in range(5):
        state = poly_mulmod(state, poly_powmod(X_INVERSE, 32))  # the leap, independently
        expected.append(np.float32((state >> 8) / 2**24))
    np.testing.assert_array_equal(model.model_coins(1, 5), np.array(expected, np.float32))

    coins = model.model_coins(12345, 1000)
    assert coins.dtype == np.float32
    assert ((coins >= 0) & (coins < 1)).all()
    assert (coins * np.float32(2**24) == np.round(coins * np.float32(2**24))).all()
    assert abs(float(coins.mean()) - 0.5) < 0.03

    np.testing.assert_array_equal(model.model_coins(0, 20),
                                  model.model_coins(model.ZERO_SEED_STATE, 20))
    seeds = np.array([0, 1, 2, 0xFFFF_FFFF, 987654321], dtype=np.int64)
    batch = model.model_coins_batch(seeds, 9)
    for row, seed in zip(batch, seeds.tolist(), strict=True):
        np.testing.assert_array_equal(row, model.model_coins(seed, 9))


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, "1"])
def test_seed_validation(seed):
    with pytest.raises(ValueError, match="seed"):
        GaloisLFSR32Model.model_seed(seed)


def test_batch_seed_validation():
    with pytest.raises(ValueError, match="seeds"):
        GaloisLFSR32Model.model_coins_batch(np.array([2**32]), 3)
    with pytest.raises(ValueError, match="seeds"):
        GaloisLFSR32Model.model_coins_batch(np.array([0.5]), 3)


# --- hardware ---------------------------------------------------------------------------------


def coin_bits(state: int) -> int:
    return int(GaloisLFSR32.model_coin(state).view(np.uint32))


@pytest.mark.parametrize("steps", [32, 1, 5])
def test_component_follows_model(steps):
    """Loads (zero seed included), advances with random gaps, a load racing an advance."""
    dut = GaloisLFSR32(steps=steps)
    rng = random.Random(steps)
    seeds = [0, 1, 0xFFFF_FFFF, 0x8000_0000, 0x6A09_E667] + [rng.getrandbits(32) for _ in range(3)]
    checked = []

    async def testbench(ctx):
        state = GaloisLFSR32.ZERO_SEED_STATE
        assert ctx.get(dut.state) == state  # reset value
        assert ctx.get(dut.coin) == coin_bits(state)
        for seed in seeds:
            ctx.set(dut.seed, seed)
            ctx.set(dut.load, 1)
            ctx.set(dut.advance, rng.random() < 0.5)  # load wins
            await ctx.tick()
            ctx.set(dut.load, 0)
            state = dut.model_seed(seed)
            assert ctx.get(dut.state) == state
            assert ctx.get(dut.coin) == coin_bits(state)
            for _ in range(120):
                advance = rng.random() < 0.75
                ctx.set(dut.advance, advance)
                await ctx.tick()
                if advance:
                    state = dut.model_advance(state)
                assert ctx.get(dut.state) == state
                assert ctx.get(dut.coin) == coin_bits(state)
                checked.append(state)
            ctx.set(dut.advance, 0)

    simulate(dut, testbench)
    assert len(checked) == 120 * len(seeds)


def test_component_draws_are_model_coins():
    """After a load and i advances, ``coin`` is draw i of ``model_coins(seed, i)``."""
    dut = GaloisLFSR32()
    seed, count = 0xC0FF_EE11, 64
    expected = GaloisLFSR32.model_coins(seed, count).view(np.uint32)

    async def testbench(ctx):
        ctx.set(dut.seed, seed)
        ctx.set(dut.load, 1)
        await ctx.tick()
        ctx.set(dut.load, 0)
        ctx.set(dut.advance, 1)
        for i in range(count):
            await ctx.tick()
            assert ctx.get(dut.coin) == int(expected[i]), i

    simulate(dut, testbench)


def test_coin_conversion_directed():
    """Coins 0, the smallest and largest, every power of two: exact float32 patterns."""
    coins = [0, 1, 2, 3, 0xFF_FFFF, 0x80_0000, 0x7F_FFFF] + [1 << k for k in range(24)]
    states = [(c << 8) | 0x5A for c in coins]
    dut = GaloisLFSR32()

    async def testbench(ctx):
        for state in states:
            ctx.set(dut.seed, state)
            ctx.set(dut.load, 1)
            await ctx.tick()
            assert ctx.get(dut.coin) == coin_bits(state), hex(state)
            value = np.array([ctx.get(dut.coin)], np.uint32).view(np.float32)[0]
            assert value == np.float32((state >> 8) / 2**24)

    simulate(dut, testbench)


@pytest.mark.parametrize("steps", [0, -3, 2.5, "32"])
def test_steps_validation(steps):
    with pytest.raises(ValueError, match="`steps` must be a positive integer"):
        GaloisLFSR32(steps=steps)


def test_parameters_and_model_on_the_class():
    dut = GaloisLFSR32(steps=7)
    assert dut.steps == 7
    with pytest.raises(AttributeError):
        dut.steps = 8
    assert GaloisLFSR32.model_coins is not None and issubclass(GaloisLFSR32, GaloisLFSR32Model)
    assert dut.model_advance(1) == GaloisLFSR32Model.model_leap(1, 7)
    assert "leaped" in rtlil.convert(GaloisLFSR32(), ports=None)
