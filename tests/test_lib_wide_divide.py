# amaranth: UnusedElaboratable=no
"""The fused verify's wide dividers (``hw.lib.wide_divide``) against ``golden.logit_rows`` on
Amaranth's simulator: ``RatioToFloat32`` bit patterns and ``TemperatureScale`` integers."""

import random
from fractions import Fraction

import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

import golden.logit_rows as logit_rows
from golden.logit_rows import ratio_to_float32, temperature_scale
from hw.lib.params import ParameterError, ParameterTypeError
from hw.lib.wide_divide import RatioToFloat32, RestoringDivider, TemperatureScale
from sim.amaranth_tb import records, run_streams, simulate

KERNEL = (32, 73, 10)  # the fused verify's widths
SMALL = (12, 8, 6)  # numerator wider than denominator: dividend bits past the remainder
NARROW = (5, 14, 4)
LONG = (40, 6, 8)  # dividend bits left over after the 26 quotient bits


def bits32(value) -> int:
    return int(np.float32(value).view(np.uint32))


def expected_ratio(numerator, denominator, scale) -> int:
    with np.errstate(over="ignore"):
        if scale >= 0:
            return bits32(ratio_to_float32(numerator << scale, denominator))
        return bits32(ratio_to_float32(numerator, denominator << -scale))


def ratio_operands(widths, seed, count=300):
    """Edge operands of every kind (see the module docstring of ``hw.lib.wide_divide``) and
    random ones (scales over the whole range, and aimed at results from 2**-155 to 2**130),
    all fitting ``widths``."""
    nb, db, sb = widths
    smin, smax = -(1 << (sb - 1)), (1 << (sb - 1)) - 1
    rng = random.Random(seed)
    ops = []

    def add(n, d, s):
        if 0 <= n < 1 << nb and 0 < d < 1 << db and smin <= s <= smax:
            ops.append((n, d, s))

    def aim(n, d, exponent):  # scale putting n * 2**s / d in [2**(exponent-1), 2**(exponent+1))
        add(n, d, exponent - (n.bit_length() - d.bit_length()))

    top_n, top_d = (1 << nb) - 1, (1 << db) - 1
    denominators = [1, 3, top_d, 1 << (db - 1), (1 << (db - 1)) + 1, rng.getrandbits(db) | 1]
    for d in denominators:
        for s in (smin, -150, -149, 0, smax):
            add(0, d, s)  # zero numerator
            for n in (1, 2, 3, 1 << (nb - 1), top_n, 1 << 31, (1 << 31) - 1):
                add(n, d, s)
    for i in sorted({0, 1, nb - 1} | set(range(0, nb, 4))):  # powers of two at the range ends
        j = rng.randrange(db)
        for e in (-151, -150, -149, -148, -127, -126, -125, -1, 0, 1, 126, 127, 128):
            add(1 << i, 1 << j, e - i + j)
    for d in (1, 3, 5, 7, 1 << (db - 2), top_d):  # exactly 1.0 and its neighbours
        for k in range(0, nb):
            add(d << k, d, -k)
            add((d << k) + 1, d, -k)
        add(d, d << (db - d.bit_length()), db - d.bit_length())
    for _ in range(40):  # subnormal ties (2k + 1) * 2**-150 and their neighbours
        m = rng.choice([1, 3, 5, rng.getrandbits(max(db - 12, 1)) | 1])
        odd = 2 * rng.randrange(1 << min(23, nb)) + 1
        j = rng.randrange(max(db - m.bit_length(), 1))
        for delta in (-1, 0, 1):
            add(odd * m + delta, m << j, -150 + j)
    for n in (1, 2, 3, 5, top_n):  # the smallest subnormal, zero and rounding into it
        for shift in range(-152, -147):
            aim(n, 1, shift + n.bit_length() - 1)
    for ones in (24, 25, 26, 27, min(nb, 32)):  # all ones: rounding into the next binade
        n = (1 << ones) - 1
        for e in (-150, -149, -127, -126, -125, 0, 1, 103, 104, 127):
            add(n, 1, e - ones + 24)
            add(n << 3, 1 << 3, e - ones + 24)
    for _ in range(60):  # exact quotients of 24..27 bits: guard and the bits below it
        length = rng.randint(24, 27)
        n, m = rng.getrandbits(length) | 1 << (length - 1), rng.choice([1, 3, 7])
        j = rng.randrange(max(db - m.bit_length(), 1))
        add(n * m, m << j, rng.randint(-140, 100) + j - length)
    add(top_n, 1, smax)  # overflow
    add(1, 1, smax)
    for _ in range(count):
        n, d = rng.getrandbits(nb), rng.getrandbits(db) or 1
        if rng.random() < 0.3:
            add(n, d, rng.randint(smin, smax))
        else:
            aim(n, d, rng.randint(-155, 130))
    return ops


def run_ratio(widths, ops, *, bits_per_clock=1, idle=0.0, backpressure=0.0, seed=0):
    dut = RatioToFloat32(*widths, bits_per_clock=bits_per_clock)
    payloads = [{"numerator": n, "denominator": d, "scale": s} for n, d, s in ops]
    (got,) = run_streams(dut, [(dut.request, payloads)], [(dut.response, len(ops))],
                         idle=idle, backpressure=backpressure, seed=seed, max_cycles=10**6)
    return got


def check_ratio(widths, ops, got):
    bad = [(op, hex(value), hex(expected_ratio(*op)))
           for op, value in zip(ops, got, strict=True) if value != expected_ratio(*op)]
    assert not bad, f"{len(bad)} of {len(ops)} differ, first: {bad[:5]}"


@pytest.mark.parametrize(("widths", "bits_per_clock", "stress"), [
    (KERNEL, 1, 0.0), (KERNEL, 1, 0.3), (KERNEL, 2, 0.2), (KERNEL, 3, 0.0), (KERNEL, 13, 0.2),
    (SMALL, 1, 0.3), (SMALL, 4, 0.0), (NARROW, 5, 0.3), (LONG, 2, 0.3)], ids=str)
def test_ratio_matches_the_golden(widths, bits_per_clock, stress):
    ops = ratio_operands(widths, seed=bits_per_clock + len(widths) * 7)
    got = run_ratio(widths, ops, bits_per_clock=bits_per_clock, idle=stress,
                    backpressure=stress, seed=bits_per_clock)
    check_ratio(widths, ops, got)


def test_ratio_operands_cover_the_edges():
    """The operand set hits zero, subnormal ties, the smallest subnormal, 1.0, rounding into
    the next binade (subnormal to normal included), the largest float and overflow."""
    ops = ratio_operands(KERNEL, seed=1)
    values = [expected_ratio(*op) for op in ops]
    scaled = [Fraction(n, d) * Fraction(2) ** (s + 150) for n, d, s in ops]
    exact_ties = [v for v in scaled if v.denominator == 1 and v.numerator % 2 and v < 1 << 24]
    for pattern in (0, 1, 0x00800000, 0x3F800000, 0x7F7FFFFF, 0x7F800000, 0x4C000000):
        assert pattern in values, hex(pattern)
    assert len(exact_ties) > 20
    assert sum(1 for v in values if 0 < v < 0x00800000) > 100
    assert min(op[2] for op in ops) == -512 and max(op[2] for op in ops) == 511


def test_zero_denominator_gives_infinity():
    assert run_ratio(SMALL, [(5, 0, 0), (0, 0, 3)]) == [0x7F800000, 0]


def test_restoring_divider_core():
    """``quotient = floor(dividend * 2**(q - 1) / (divisor * 2**tail))`` and ``inexact``."""
    rng = random.Random(5)
    for divisor_bits, quotient_bits, tail_bits, per_clock in [(6, 9, 0, 2), (5, 7, 3, 3),
                                                              (7, 4, 9, 1)]:
        dut = RestoringDivider(divisor_bits, quotient_bits, tail_bits=tail_bits,
                               bits_per_clock=per_clock)
        cases = []
        for _ in range(60):
            divisor = rng.randrange(1, 1 << divisor_bits)
            high = rng.randrange(2 * divisor) % (1 << divisor_bits)
            cases.append((high << tail_bits | rng.getrandbits(tail_bits), divisor))
            shift = tail_bits - quotient_bits + 1  # exact divisions, and one bit more
            exact = divisor * rng.getrandbits(quotient_bits) << shift if shift >= 0 else (
                divisor * rng.getrandbits(tail_bits + 1))
            if exact >> tail_bits < min(2 * divisor, 1 << divisor_bits):
                cases += [(exact, divisor), (exact | 1 << rng.randrange(max(shift, 1)), divisor)]

        async def bench(ctx, dut=dut, cases=cases, q=quotient_bits, t=tail_bits):
            for dividend, divisor in cases:
                ctx.set(dut.load, 1)
                ctx.set(dut.dividend, dividend)
                ctx.set(dut.divisor, divisor)
                await ctx.tick()
                ctx.set(dut.load, 0)
                for _ in range(dut.iterations):
                    assert not ctx.get(dut.done)
                    await ctx.tick()
                want, rest = divmod(dividend << (q - 1), divisor << t)
                assert ctx.get(dut.done)
                assert (ctx.get(dut.quotient), ctx.get(dut.inexact)) == (want, rest != 0)

        simulate(dut, bench)


async def _latency(ctx, dut, payload):
    """Clocks from the request's transfer to the response's valid, and from the response's
    transfer to the next request's ready."""
    ctx.set(dut.request.payload, payload)
    ctx.set(dut.request.valid, 1)
    await ctx.tick().until(dut.request.ready)
    ctx.set(dut.request.valid, 0)
    clocks = 1
    while not ctx.get(dut.response.valid):
        await ctx.tick()
        clocks += 1
    ctx.set(dut.response.ready, 1)
    await ctx.tick()
    ctx.set(dut.response.ready, 0)
    return clocks, ctx.get(dut.request.ready)


@pytest.mark.parametrize("bits_per_clock", [1, 2, 3, 26])
def test_latency(bits_per_clock):
    for dut, payload, formula in [
            (RatioToFloat32(bits_per_clock=bits_per_clock),
             {"numerator": 3, "denominator": 7, "scale": -2}, 6 + -(-26 // bits_per_clock)),
            (TemperatureScale(bits_per_clock=bits_per_clock), bits32(0.7),
             2 + -(-28 // bits_per_clock))]:
        assert dut.latency == formula
        measured = []

        async def bench(ctx, dut=dut, payload=payload, measured=measured):
            for _ in range(2):
                measured.append(await _latency(ctx, dut, payload))

        simulate(dut, bench)
        assert measured == [(formula, 1)] * 2


def temperatures(seed, count=400):
    """Random temperatures over 1e-6..1e6 and edge values."""
    rng = np.random.default_rng(seed)
    values = list(np.exp(rng.uniform(np.log(1e-6), np.log(1e6), count)).astype(np.float32))
    values += [np.float32(v) for v in (1e-6, 1.0, 1e6, 0.5, 3.0, 0.7)]
    values += [np.float32(2.0 ** k) for k in range(-19, 20)]
    values += [np.float32(np.nextafter(np.float32(1e-6), np.float32(1))),
               np.uint32(0x7F7FFFFF).view(np.float32), np.uint32(0x7F000000).view(np.float32)]
    # the significands around the order bit's change (LOG2E_Q64 / t crosses 2**41), all ones
    for significand in (12102202, 12102203, 12102204, 12102205, (1 << 24) - 1, 1 << 23):
        for field in (107, 127, 147, 254):
            values.append(np.uint32(field << 23 | significand & 0x7FFFFF).view(np.float32))
    return values


def run_scale(values, dut=None, *, bits_per_clock=1, stress=0.0, seed=0):
    dut = dut or TemperatureScale(bits_per_clock=bits_per_clock)
    (got,) = run_streams(dut, [(dut.request, [bits32(v) for v in values])],
                         [(dut.response, len(values))], idle=stress, backpressure=stress,
                         seed=seed, max_cycles=10**6)
    fields = records(got, TemperatureScale.response_layout, dtype=np.int64)
    return list(zip(fields["mantissa"].tolist(), fields["exponent"].tolist(), strict=True))


def check_scale(values, got):
    want = [(temperature_scale(v).mantissa, temperature_scale(v).exponent) for v in values]
    bad = [(v, g, w) for v, g, w in zip(values, got, want, strict=True) if g != w]
    assert not bad, f"{len(bad)} of {len(values)} differ, first: {bad[:5]}"


@pytest.mark.parametrize(("bits_per_clock", "stress"), [(1, 0.0), (1, 0.3), (3, 0.2),
                                                        (28, 0.3)], ids=str)
def test_temperature_scale_matches_the_golden(bits_per_clock, stress):
    values = temperatures(seed=bits_per_clock)
    check_scale(values, run_scale(values, bits_per_clock=bits_per_clock, stress=stress,
                                  seed=bits_per_clock))


def test_temperature_scale_never_rounds_into_the_next_binade():
    """No 24-bit significand gives the all-ones quotient that rounds up to ``2**26`` with
    log2(e): the quotient falls with the significand, and the two around ``2**27`` skip it."""
    q = [logit_rows.LOG2E_Q64 // (t << 14) for t in (12102203, 12102204)]
    assert q[0] >= 1 << 27 and q[1] < (1 << 27) - 1


@pytest.mark.parametrize(("quotient", "rest", "mantissa"), [
    ((1 << 27) - 1, 12345, 1 << 25),  # all ones rounded up: renormalised
    ((1 << 27) + 2, 1, (1 << 25) + 1),  # a tie but for the dividend bits never shifted in
    ((1 << 27) + 2, 0, 1 << 25),  # an exact tie: to even
    ((1 << 27) + 3, 0, (1 << 25) + 1),  # a tie but for the order bit's dropped quotient bit
], ids=["carry", "dropped-sticky", "tie", "order-sticky"])
def test_temperature_scale_with_other_dividends(monkeypatch, quotient, rest, mantissa):
    """Rounding cases log2(e) never reaches, on a 65-bit dividend made for significand
    ``2**23 + 1`` (the golden reads ``LOG2E_Q64`` when it is called)."""
    dividend = quotient * ((1 << 23) + 1) * (1 << 14) + rest
    monkeypatch.setattr(logit_rows, "LOG2E_Q64", dividend)
    assert dividend.bit_length() == 65
    values = [np.uint32(field << 23 | 1).view(np.float32) for field in (107, 127, 200)]
    values += temperatures(seed=9, count=20)
    assert temperature_scale(values[0]).mantissa == mantissa
    dut = type("OtherScale", (TemperatureScale,), {"DIVIDEND": dividend})()
    check_scale(values, run_scale(values, dut, stress=0.3))


@pytest.mark.parametrize(("factory", "message", "name"), [
    (lambda: RatioToFloat32(0), "`numerator_bits` must be between 1 and 128, not 0",
     "numerator_bits"),
    (lambda: RatioToFloat32(32, 129), "`denominator_bits` must be between 1 and 128, not 129",
     "denominator_bits"),
    (lambda: RatioToFloat32(32, 73, 17), "`scale_bits` must be between 1 and 16, not 17",
     "scale_bits"),
    (lambda: RatioToFloat32(bits_per_clock=27),
     "`bits_per_clock` must be between 1 and 26, not 27", "bits_per_clock"),
    (lambda: TemperatureScale(bits_per_clock=0),
     "`bits_per_clock` must be between 1 and 28, not 0", "bits_per_clock"),
    (lambda: RestoringDivider(8, 4, bits_per_clock=5),
     "`bits_per_clock` must be between 1 and 4, not 5", "bits_per_clock"),
    (lambda: RestoringDivider(8, 4, tail_bits=-1), "`tail_bits` must be at least 0, not -1",
     "tail_bits"),
])
def test_invalid_parameters(factory, message, name):
    with pytest.raises(ParameterError, match=f"^{message}$") as error:
        factory()
    assert error.value.parameter == name


def test_non_integer_parameters():
    with pytest.raises(ParameterTypeError, match="^`scale_bits` must be an integer, not 2.0$"):
        RatioToFloat32(32, 73, 2.0)


def test_layouts():
    request = RatioToFloat32(*KERNEL).request_layout
    assert {name: shape for name, shape in request.members.items()} == {
        "numerator": unsigned(32), "denominator": unsigned(73), "scale": signed(10)}
    assert RatioToFloat32(*SMALL).response.payload.shape() == unsigned(32)
    assert TemperatureScale().request.payload.shape() == unsigned(32)
    assert dict(TemperatureScale.response_layout.members) == {
        "mantissa": unsigned(26), "exponent": signed(9)}
