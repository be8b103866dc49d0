"""The K6 coin generator (docs/kernels.md §8): a 32-bit Galois LFSR leaping 32 steps a clock.

The sequence is defined once, by ``golden.lfsr.GaloisLFSR32Model`` (polynomial
``x^32 + x^22 + x^2 + x + 1``, right-shifting Galois form, zero seed replaced by
``ZERO_SEED_STATE``, ``coin = (state >> 8) * 2^-24`` after each leap). :class:`GaloisLFSR32`
inherits its ``model_*`` methods, and builds its leap from the model's GF(2) matrix at
elaboration time: each next-state bit is the XOR of the state bits its matrix row selects.
"""

import operator

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from golden.lfsr import GaloisLFSR32Model

from .pipeline import count_leading_zeros

__all__ = ["GaloisLFSR32", "coin_exponent_field"]


def coin_exponent_field(leading_zeros: Value) -> Value:
    """The float32 exponent field of ``coin * 2^-24`` for a 24-bit unsigned ``coin`` with
    ``leading_zeros`` leading zeros (24 for a zero coin): ``126 - leading_zeros``, or 0 for a
    zero coin. The conversion is exact (a 24-bit integer times a power of two needs no
    rounding): the fraction field is the bits below the leading one."""
    return Mux(leading_zeros == 24, 0, 126 - leading_zeros)[:8]


def xor_tree(bits: list) -> Value:
    """XOR of ``bits`` as a tree of 6-input XORs (one LUT6 each), so that a leap row's depth
    (at most 21 inputs: two levels) does not rest on how synthesis balances a reduction (alone,
    the generator maps the same either way)."""
    bits = list(bits) or [Const(0, 1)]
    while len(bits) > 1:
        bits = [Cat(*bits[i:i + 6]).xor() for i in range(0, len(bits), 6)]
    return bits[0]


class GaloisLFSR32(GaloisLFSR32Model, wiring.Component):
    """32-bit Galois LFSR coin generator with a ``steps``-step leap per clock.

    Parameters
    ----------
    steps : int
        Single LFSR steps per ``advance`` (keyword; default 32, the §8 draw). Any positive
        integer: the leap is a fixed GF(2) matrix, one XOR tree per state bit.

    Members
    -------
    load : In(1)
        Load strobe: on the next clock ``state`` becomes ``seed``, or ``ZERO_SEED_STATE`` when
        ``seed`` is zero. Has priority over ``advance``.
    seed : In(32)
        Seed value, read when ``load`` is high.
    advance : In(1)
        When high (and ``load`` low) ``state`` leaps ``steps`` single steps on the next clock;
        when both are low the state holds.
    state : Out(32)
        The state register (reset: ``ZERO_SEED_STATE``, as if seeded with 0).
    coin : Out(32)
        float32 bit pattern of ``(state >> 8) * 2^-24``, valid with ``state``: after a load
        and ``i`` advances it is draw ``i`` of ``model_coins(seed, i)``. Its leading-zero
        count is registered with the state (from the next state), so only the normalising
        shift lies between the registers and ``coin``.

    The ``model_*`` classmethods (``model_seed``, ``model_step``, ``model_leap``,
    ``model_coin``, ``model_coins``, ``model_coins_batch``, ``leap_matrix``) are the
    bit-exact Python model, inherited from ``golden.lfsr.GaloisLFSR32Model``.
    """

    def __init__(self, *, steps: int = GaloisLFSR32Model.STEPS_PER_DRAW):
        try:
            steps = operator.index(steps)
        except TypeError:
            raise ValueError(f"`steps` must be a positive integer, not {steps!r}") from None
        if steps < 1:
            raise ValueError(f"`steps` must be a positive integer, not {steps}")
        self._steps = steps
        super().__init__({
            "load": In(1),
            "seed": In(32),
            "advance": In(1),
            "state": Out(32, init=self.ZERO_SEED_STATE),
            "coin": Out(32),
        })

    @property
    def steps(self) -> int:
        """Single steps per ``advance``."""
        return self._steps

    def model_advance(self, state):
        """Model of one ``advance`` of this instance: :meth:`model_leap` by :attr:`steps`."""
        return self.model_leap(state, self._steps)

    def elaborate(self, platform):
        m = Module()
        rows = self.leap_matrix(self._steps)

        def leap(value):
            return Cat(*(xor_tree([value[j] for j in range(32) if row >> j & 1]) for row in rows))

        # `ahead` is the state one leap on (the next state of an advance), kept a clock ahead
        # so that neither the next state nor the coin's leading-zero count of an advance has a
        # leap's XOR trees in front of it; the count of a load is that of the seed (or the
        # zero seed's, a constant), beside the seed's compare with zero. A zero seed acts as
        # `ZERO_SEED_STATE`; as the leap is linear (the leap of zero is zero), that is an OR
        # behind the seed's own values.
        seed_is_zero = self.seed == 0

        def or_zero_seed(value, zero_seed_value):
            return value | Mux(seed_is_zero, zero_seed_value, 0)

        zero_seed_ahead = self.model_advance(self.ZERO_SEED_STATE)
        zero_seed_zeros = 24 - (self.ZERO_SEED_STATE >> self.COIN_SHIFT).bit_length()
        ahead = Signal(32, init=zero_seed_ahead)
        leaped = Signal(32, name="leaped")
        m.d.comb += leaped.eq(leap(ahead))
        seeded_zeros = Signal(5, init=zero_seed_zeros)
        leaped_zeros = Signal(5)
        from_seed = Signal(init=1)  # the state is a seed, not a leap
        with m.If(self.load):
            m.d.sync += [self.state.eq(or_zero_seed(self.seed, self.ZERO_SEED_STATE)),
                         ahead.eq(or_zero_seed(leap(self.seed), zero_seed_ahead)),
                         from_seed.eq(1),
                         seeded_zeros.eq(Mux(seed_is_zero, zero_seed_zeros,
                                             count_leading_zeros(self.seed[self.COIN_SHIFT:])))]
        with m.Elif(self.advance):
            m.d.sync += [self.state.eq(ahead), ahead.eq(leaped), from_seed.eq(0)]
        with m.If(self.advance):  # not `Elif`: its enable is `advance` alone (unused on a load)
            m.d.sync += leaped_zeros.eq(count_leading_zeros(ahead[self.COIN_SHIFT:]))
        zeros = Mux(from_seed, seeded_zeros, leaped_zeros)
        normalised = (self.state[self.COIN_SHIFT:] << zeros)[:24]
        m.d.comb += self.coin.eq(Cat(normalised[:23], coin_exponent_field(zeros), 0))
        return m
