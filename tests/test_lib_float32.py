"""float32 cores vs numpy float32: Verilator regression and Amaranth-simulator unit tests."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal

import hw.lib.float32 as float32
from hw.lib.float32 import Float32Add, Float32Compare, Float32Multiply
from hw.lib.params import ParameterError
from sim.amaranth_tb import simulate
from sim.float32 import BY_OPERATION
from sim.float32.dut import Float32StreamParams
from sim.float32.vectors import directed_operands, mismatches, random_operands, reference
from sim.harness import BUILD_ROOT

CORES = {"mul": Float32Multiply, "add": Float32Add, "cmp": Float32Compare}


def run_core(operation, a, b, *, subtract=0):
    """Results of a core for operand arrays, on Amaranth's simulator, one pair per clock."""
    core = (Float32Add if operation == "sub" else CORES[operation])()
    results = []

    async def testbench(ctx):
        if operation == "sub":
            ctx.set(core.subtract, 1)
        for index in range(a.size + core.latency):
            if index < a.size:
                ctx.set(core.a, int(a[index]))
                ctx.set(core.b, int(b[index]))
            await ctx.tick()
            if index >= core.latency - 1 and len(results) < a.size:
                if operation == "cmp":
                    results.append([ctx.get(core.lt), ctx.get(core.eq), ctx.get(core.gt)])
                else:
                    results.append(ctx.get(core.result))

    simulate(core, testbench)
    return np.array(results, dtype=bool if operation == "cmp" else np.uint32)


@pytest.mark.parametrize("operation", ["mul", "add", "sub", "cmp"])
def test_corner_pairs_on_amaranth_simulator(operation):
    a, b = directed_operands()
    actual = run_core(operation, a, b)
    assert mismatches(operation, reference(operation, a, b), actual).size == 0


def test_multiply_near_the_normal_boundary():
    """Products of a subnormal and a normal operand whose result lies around 2**-126: the
    multiply picks its normalisation from the position of the product's leading one (two
    candidates), which decides normal against subnormal here."""
    rng = np.random.default_rng(11)
    count = 3000
    subnormal = rng.integers(1, 1 << 23, count, dtype=np.uint32)  # exponent field 0
    # |a * b| near 2**-126 needs b near 2**-126 / a: exponent field 127 + 23 - log2(mantissa)
    shift = 31 - np.array([int(x).bit_length() for x in subnormal], dtype=np.int64)
    exponent = np.clip(126 + shift - 8 + rng.integers(-2, 3, count), 1, 254).astype(np.uint32)
    normal = (exponent << 23) | rng.integers(0, 1 << 23, count, dtype=np.uint32)
    normal |= rng.integers(0, 2, count, dtype=np.uint32) << 31
    a, b = np.concatenate([subnormal, normal]), np.concatenate([normal, subnormal])
    products = np.abs(a.view(np.float32) * b.view(np.float32))
    tiny = np.finfo(np.float32).tiny
    assert (products < tiny).sum() > count // 4 and (products >= tiny).sum() > count // 4
    actual = run_core("mul", a, b)
    assert mismatches("mul", reference("mul", a, b), actual).size == 0


@pytest.mark.parametrize("operation", ["mul", "add"])
def test_truncating_core_is_caught(operation, monkeypatch):
    """The vectors must expose a core that truncates instead of rounding to nearest even."""

    def truncate(exponent_field, significand, guard, sticky):
        return float32.Cat(significand[:23], exponent_field[:8])

    monkeypatch.setattr(float32, "_round_to_nearest_even", truncate)
    a, b = random_operands(np.random.default_rng(7), 2000)
    actual = run_core(operation, a, b)
    assert mismatches(operation, reference(operation, a, b), actual).size > 100


def test_pipeline_holds_when_disabled():
    core = Float32Multiply()

    async def testbench(ctx):
        ctx.set(core.a, 0x4040_0000)  # 3.0
        ctx.set(core.b, 0x4000_0000)  # 2.0
        await ctx.tick()
        ctx.set(core.en, 0)
        ctx.set(core.a, 0)
        for _ in range(2 * core.latency):
            await ctx.tick()
        assert ctx.get(core.result) == 0  # the product is still inside the frozen pipeline
        ctx.set(core.en, 1)
        await ctx.tick().repeat(core.latency - 1)
        assert ctx.get(core.result) == 0x40C0_0000  # 6.0

    simulate(core, testbench)


def test_comparison_helpers_follow_ieee():
    a, b = Signal(32), Signal(32)
    m = Module()
    less, equal = Signal(), Signal()
    m.d.comb += [less.eq(float32.float32_less(a, b)), equal.eq(float32.float32_equal(a, b))]
    cases = [(0x8000_0000, 0x0000_0000, 0, 1), (0xBF80_0000, 0x8000_0001, 1, 0),
             (0x7FC0_0000, 0x7FC0_0000, 0, 0), (0xFF80_0000, 0xFF7F_FFFF, 1, 0)]

    async def testbench(ctx):
        for x, y, expect_less, expect_equal in cases:
            ctx.set(a, x)
            ctx.set(b, y)
            assert (ctx.get(less), ctx.get(equal)) == (expect_less, expect_equal), (x, y)

    simulate(m, testbench, clocked=False)


@pytest.mark.parametrize("helper, operator", [("float32_less_equal", np.less_equal),
                                              ("float32_less", np.less)])
def test_comparisons_match_numpy_on_corner_pairs(helper, operator):
    """``float32_less_equal`` and ``float32_less`` (one magnitude compare each: the kernels'
    ``>=``, ``<=``, ``<``) are numpy's on every pair of the corner values (zeros of both signs,
    subnormals, extremes, infinities, NaNs)."""
    a_values, b_values = directed_operands()
    a, b, at_most = Signal(32), Signal(32), Signal()
    m = Module()
    m.d.comb += at_most.eq(getattr(float32, helper)(a, b))
    expected = operator(a_values.view(np.float32), b_values.view(np.float32))
    got = []

    async def testbench(ctx):
        for x, y in zip(a_values.tolist(), b_values.tolist(), strict=True):
            ctx.set(a, x)
            ctx.set(b, y)
            got.append(ctx.get(at_most))

    simulate(m, testbench, clocked=False)
    assert len(got) == len(expected) > 100
    wrong = np.flatnonzero(np.array(got, dtype=bool) != expected)
    assert wrong.size == 0, [(hex(a_values[i]), hex(b_values[i])) for i in wrong[:5]]


def test_stream_parameters():
    """The DUT wrapper's parameter record: layouts and latencies without building it."""
    assert Float32StreamParams("cmp").ports["o"].size == 3
    assert Float32StreamParams("add").ports["i"].size == 65
    assert Float32StreamParams("mul").latency == Float32Multiply.latency
    with pytest.raises(ParameterError, match="`operation` must be one of 'mul', 'add', 'cmp', "
                                             "'div', not 'pow'"):
        Float32StreamParams("pow")
    assert sorted(BY_OPERATION) == ["add", "cmp", "div", "mul"]


@pytest.mark.parametrize("operation", ["mul", "add", "cmp"])
def test_core_matches_numpy_under_verilator(operation, sim_report):
    """200,000 random pairs (and the corner pairs), random idle and back-pressure."""
    summary = BY_OPERATION[operation].run(log_file=BUILD_ROOT / f"pytest-fp32_{operation}.log")
    assert summary["random_vectors"] >= 200_000
    assert summary["initiation_interval"] == 1.0
    assert summary["latency_cycles"] == CORES[operation].latency
    sim_report(f"fp32_{operation}: {summary['vectors']:,} vectors bit-exact with numpy "
               f"({summary['random_vectors']:,} random), latency {summary['latency_cycles']}, "
               f"II {summary['initiation_interval']:.2f}")
