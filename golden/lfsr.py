"""The on-chip coin generator of K6 (docs/kernels.md §8): a 32-bit Galois LFSR, bit for bit.

This module is the single definition of the coin sequence. ``hw.lib.lfsr.GaloisLFSR32`` (the
hardware) subclasses :class:`GaloisLFSR32Model`, so the model methods live on the hardware
class too, and the K6 golden (``golden.reject_sample``) draws its coins from here.

Definition:

* **Polynomial** ``p(x) = x^32 + x^22 + x^2 + x + 1`` (primitive; ``tests/test_lib_lfsr.py``
  proves it with GF(2) polynomial arithmetic). State bit ``i`` is the coefficient of ``x^i``.
* **Single step** (right-shifting Galois form): ``s' = (s >> 1) ^ (TAPS if s & 1 else 0)``
  with ``TAPS = 0x80200003`` (bits 31, 21, 1, 0). Algebraically ``s' = s * x^-1 mod p``
  (``x^-1 = x^31 + x^21 + x + 1``), so every nonzero state lies on one cycle of length
  ``2^32 - 1``; zero is a fixed point.
* **Draw**: one leap of ``STEPS_PER_DRAW = 32`` single steps (multiplication by ``x^-32``,
  also of maximal period since ``gcd(32, 2^32 - 1) = 1``), *then* ``coin = (state >> 8) *
  2^-24`` of the new state: a float32 in ``[0, 1 - 2^-24]`` on a grid of ``2^-24`` (exact, no
  rounding). The hardware does the leap in one clock (a fixed GF(2) matrix, XOR trees).
* **Seeding**: ``state = seed`` for a 32-bit ``seed``; ``seed == 0`` (the fixed point) is
  replaced by ``ZERO_SEED_STATE = 0x6A09E667``, so seeds 0 and 0x6A09E667 give the same
  sequence. Draw ``i`` (``i = 1, 2, ...``) is the coin after ``i`` leaps from the seeded state;
  the seed itself is never a coin.

Seeds should come from a good host RNG: the sequences of all seeds are shifts of one
m-sequence, and simple relations between seeds give related streams (seed ``2s`` is seed ``s``
one single step earlier, and ``seq(a ^ b) = seq(a) ^ seq(b)`` bit for bit).
"""

from __future__ import annotations

import operator

import numpy as np

__all__ = ["GaloisLFSR32Model"]

_MASK32 = 0xFFFF_FFFF


def _state_arg(name: str, value) -> int:
    """``value`` as a Python int in ``[0, 2^32)``, else ValueError naming the argument."""
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"`{name}` must be an integer, not {type(value).__name__}") from None
    if not 0 <= value <= _MASK32:
        raise ValueError(f"`{name}` must be between 0 and 2**32 - 1, not {value}")
    return value


class GaloisLFSR32Model:
    """Pure-Python model of the 32-bit Galois LFSR of docs/kernels.md §8 (see module docs).

    Every method is a classmethod: the model has no state of its own. The hardware class
    ``hw.lib.lfsr.GaloisLFSR32`` inherits them (``GaloisLFSR32.model_coins(seed, n)``).
    """

    WIDTH = 32
    #: ``x^32 + x^22 + x^2 + x + 1`` as the bit mask of its coefficients.
    POLYNOMIAL = (1 << 32) | (1 << 22) | (1 << 2) | (1 << 1) | 1
    #: Toggle mask of the right-shifting Galois form: the bits of ``x^-1 mod p``.
    TAPS = 0x8020_0003
    #: Single steps per draw (one hardware leap per clock).
    STEPS_PER_DRAW = 32
    #: State used for ``seed == 0`` (zero is the LFSR's fixed point).
    ZERO_SEED_STATE = 0x6A09_E667
    #: ``coin = (state >> COIN_SHIFT) * 2^-COIN_BITS``.
    COIN_SHIFT = 8
    COIN_BITS = 24

    _byte_tables: dict[int, np.ndarray] = {}

    @classmethod
    def model_seed(cls, seed) -> int:
        """The state a seed loads: ``seed``, or ``ZERO_SEED_STATE`` for ``seed == 0``."""
        seed = _state_arg("seed", seed)
        return seed if seed else cls.ZERO_SEED_STATE

    @classmethod
    def model_step(cls, state):
        """One single step: ``(s >> 1) ^ (TAPS if s & 1 else 0)``.

        ``state`` is a Python int in ``[0, 2^32)`` or a numpy ``uint32`` array (elementwise).
        """
        return (state >> 1) ^ ((state & 1) * cls.TAPS)

    @classmethod
    def model_leap(cls, state, steps: int | None = None):
        """``steps`` single steps (default ``STEPS_PER_DRAW``): one hardware clock.

        ``state`` is a Python int (stepped one by one, the reference) or a numpy ``uint32``
        array (through byte tables built from the single-step model, by linearity).
        """
        steps = cls.STEPS_PER_DRAW if steps is None else steps
        if isinstance(state, np.ndarray):
            tables = cls._leap_tables(steps)
            state = state.astype(np.uint32, copy=False)
            out = tables[0][state & 0xFF]
            for k in range(1, 4):
                out ^= tables[k][(state >> np.uint32(8 * k)) & 0xFF]
            return out
        for _ in range(steps):
            state = cls.model_step(state)
        return state

    @classmethod
    def leap_matrix(cls, steps: int | None = None) -> tuple[int, ...]:
        """The leap as a GF(2) matrix: new bit ``i`` = parity of ``state & rows[i]``."""
        columns = [cls.model_leap(1 << j, steps) for j in range(cls.WIDTH)]
        return tuple(
            sum(((columns[j] >> i) & 1) << j for j in range(cls.WIDTH)) for i in range(cls.WIDTH)
        )

    @classmethod
    def model_coin(cls, state) -> np.float32:
        """The coin of a state: ``(state >> 8) * 2^-24`` as float32 (exact)."""
        return np.float32(state >> cls.COIN_SHIFT) * np.float32(2.0 ** -cls.COIN_BITS)

    @classmethod
    def model_coins(cls, seed, count: int) -> np.ndarray:
        """The first ``count`` draws after seeding with ``seed``: float32 ``[count]``.

        Draw ``i`` is the coin of the state after ``i`` leaps (``i = 1..count``).
        """
        state = cls.model_seed(seed)
        coins = np.empty(count, dtype=np.float32)
        for i in range(count):
            state = cls.model_leap(state)
            coins[i] = cls.model_coin(state)
        return coins

    @classmethod
    def model_coins_batch(cls, seeds, count: int) -> np.ndarray:
        """:meth:`model_coins` for many seeds at once: float32 ``[len(seeds), count]``.

        ``seeds`` is an integer array-like with values in ``[0, 2^32)``.
        """
        seeds = np.asarray(seeds)
        if seeds.dtype.kind not in "iu" or seeds.ndim != 1:
            raise ValueError("`seeds` must be a 1-D integer array")
        if seeds.size and (seeds.min() < 0 or seeds.max() > _MASK32):
            raise ValueError("`seeds` values must be between 0 and 2**32 - 1")
        state = seeds.astype(np.uint32)
        state[state == 0] = cls.ZERO_SEED_STATE
        coins = np.empty((seeds.size, count), dtype=np.float32)
        scale = np.float32(2.0 ** -cls.COIN_BITS)
        for i in range(count):
            state = cls.model_leap(state)
            coins[:, i] = (state >> np.uint32(cls.COIN_SHIFT)).astype(np.float32) * scale
        return coins

    @classmethod
    def _leap_tables(cls, steps: int) -> np.ndarray:
        """``tables[k][b] = leap(b << 8k)``: the leap of a word is the XOR of its bytes'."""
        key = (cls.TAPS, steps)
        if key not in cls._byte_tables:
            cls._byte_tables[key] = np.array(
                [[cls.model_leap(b << (8 * k), steps) for b in range(256)] for k in range(4)],
                dtype=np.uint32,
            )
        return cls._byte_tables[key]
