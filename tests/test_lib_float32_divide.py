# amaranth: UnusedElaboratable=no
"""float32 divider vs numpy float32 division: Amaranth-simulator unit tests and the Verilator
regression (``fp32_div``: 200,000 random pairs plus every corner pair)."""

import numpy as np
import pytest

import hw.lib.float32_divide as float32_divide
from hw.lib.float32_divide import Float32Divide
from sim.amaranth_tb import simulate
from sim.float32 import BY_OPERATION
from sim.float32.dut import Float32OpStream, Float32StreamParams
from sim.float32.vectors import directed_operands, divide_operands, mismatches, reference
from sim.harness import BUILD_ROOT


def run_divider(a, b, *, bits_per_stage=1, en_pattern=None):
    """Quotients of ``Float32Divide`` for operand arrays on Amaranth's simulator (one pair per
    enabled clock; ``en_pattern`` cycles a clock-enable pattern)."""
    core = Float32Divide(bits_per_stage=bits_per_stage)
    results = []

    async def testbench(ctx):
        issued, clock = 0, 0
        in_flight = []
        while len(results) < a.size:
            enable = 1 if en_pattern is None else en_pattern[clock % len(en_pattern)]
            ctx.set(core.en, enable)
            if issued < a.size:
                ctx.set(core.a, int(a[issued]))
                ctx.set(core.b, int(b[issued]))
            await ctx.tick()
            clock += 1
            if enable:
                in_flight.append(issued < a.size)
                issued += 1
                if len(in_flight) >= core.latency and in_flight[-core.latency]:
                    results.append(ctx.get(core.result))

    simulate(core, testbench)
    return np.array(results, dtype=np.uint32)


@pytest.mark.parametrize(
    ("value", "message"),
    [(0, "`bits_per_stage` must be between 1 and 25, not 0"),
     (26, "`bits_per_stage` must be between 1 and 25, not 26"),
     (2.0, "`bits_per_stage` must be an integer between 1 and 25, not 2.0")],
)
def test_invalid_parameters(value, message):
    with pytest.raises(ValueError, match=message):
        Float32Divide(bits_per_stage=value)


def test_latency():
    assert Float32Divide().latency == 5 + 25
    assert Float32StreamParams("div").latency == Float32OpStream("div").latency == 5 + 25
    assert Float32StreamParams("div", bits_per_stage=5).latency == 5 + 5
    assert Float32Divide(bits_per_stage=2).latency == 5 + 13
    assert Float32Divide(bits_per_stage=5).latency == 5 + 5
    with pytest.raises(AttributeError):
        Float32Divide().bits_per_stage = 3


def test_corner_pairs_on_amaranth_simulator():
    a, b = directed_operands()
    assert mismatches("div", reference("div", a, b), run_divider(a, b)).size == 0


@pytest.mark.parametrize("bits_per_stage", [1, 2, 5])
def test_random_pairs_on_amaranth_simulator(bits_per_stage):
    a, b = divide_operands(np.random.default_rng(bits_per_stage), 1500)
    actual = run_divider(a, b, bits_per_stage=bits_per_stage)
    assert mismatches("div", reference("div", a, b), actual).size == 0


def test_operands_hit_subnormal_ties():
    """The vector set has subnormal quotients that are exact rounding ties."""
    a, b = divide_operands(np.random.default_rng(3), 20_000)
    with np.errstate(all="ignore"):
        x = a.view(np.float32).astype(np.float64)
        y = b.view(np.float32).astype(np.float64)
        scaled = x / y / 2.0**-149  # exact where it matters: halves of small integers
        ties = (np.abs(scaled) < 2**23) & (scaled != 0) & (np.mod(scaled, 1.0) == 0.5)
    assert ties.sum() > 1000


def test_pipeline_holds_when_disabled():
    a, b = divide_operands(np.random.default_rng(5), 60)
    actual = run_divider(a, b, en_pattern=[1, 0, 0, 1, 1, 0])
    assert mismatches("div", reference("div", a, b), actual).size == 0


def test_truncating_divider_is_caught(monkeypatch):
    """The vectors must expose a divider that truncates instead of rounding to nearest even."""

    def truncate(exponent_field, significand, guard, sticky):
        return float32_divide.Cat(significand[:23], exponent_field[:8])

    monkeypatch.setattr(float32_divide, "_round_to_nearest_even", truncate)
    a, b = divide_operands(np.random.default_rng(7), 1000)
    assert mismatches("div", reference("div", a, b), run_divider(a, b)).size > 100


def test_divider_matches_numpy_under_verilator(sim_report):
    """200,000 random pairs (subnormals, ties, overflow and underflow edges, specials, the K6
    range) and every corner pair, with random idle and back-pressure."""
    summary = BY_OPERATION["div"].run(log_file=BUILD_ROOT / "pytest-fp32_div.log")
    assert summary["random_vectors"] >= 200_000
    assert summary["initiation_interval"] == 1.0
    assert summary["latency_cycles"] == Float32Divide().latency
    sim_report(f"fp32_div: {summary['vectors']:,} vectors bit-exact with numpy "
               f"({summary['random_vectors']:,} random), latency {summary['latency_cycles']}, "
               f"II {summary['initiation_interval']:.2f}")
