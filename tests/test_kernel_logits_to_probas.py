# amaranth: UnusedElaboratable=no
"""K5 ``LogitsToProbas``: parameter validation, the dataflow/sequencer helpers, the kernel on
Amaranth's simulator, and the Verilator regression against ``golden.logits_to_probas``."""

from dataclasses import asdict

import numpy as np
import pytest
from amaranth.hdl import Const, Module, Signal

from golden.logits_to_probas import _fast_two_sum, _two_prod
from hw.kernels.logits_to_probas import (
    DEFAULTS,
    LogitsToProbas,
    LogitsToProbasParams,
    order_key_greater,
    synthesis_parameters,
)
from hw.lib.float32_dataflow import Float32Dataflow, Float32Sequencer
from sim.amaranth_tb import simulate
from sim.float32.vectors import directed_operands
from sim.harness import BUILD_ROOT
from sim.logits_to_probas import PARAMETERS, TARGET
from sim.logits_to_probas.pysim import run_on_amaranth
from sim.logits_to_probas.vectors import (
    bf16_round,
    call_from_case,
    expected,
    make_call,
    write_case_file,
)

F32 = np.float32


# --- parameters ------------------------------------------------------------------------------


def test_parameters_and_layouts():
    dut = LogitsToProbas(max_vocab_size=1000, lanes=4, input_format="bfloat16",
                         row_count_width=8)
    assert (dut.max_vocab_size, dut.lanes, dut.input_format, dut.row_count_width) == \
        (1000, 4, "bfloat16", 8)
    with pytest.raises(AttributeError):
        dut.lanes = 2
    params = dut.params
    assert params == LogitsToProbasParams(max_vocab_size=1000, lanes=4,
                                          input_format="bfloat16", row_count_width=8)
    assert params.max_words == 250 and params.token_width == 10
    assert params.accumulator_width == 10 + 65
    assert params.cmd_layout.size == 32 + 10 + 8
    assert params.logits_layout.size == 4 * 16 + 2
    assert params.probs_layout.size == 4 * 32 + 2
    assert params.predict_layout.size == 10 + 2
    assert dut.max_words == 250 and dut.predict_layout == params.predict_layout
    assert set(params.ports) == {"cmd", "logits", "probs", "predict"}
    assert asdict(LogitsToProbasParams()) == DEFAULTS
    assert {name: DEFAULTS[name] for name in PARAMETERS} == PARAMETERS
    figures = dut.exp_figures()
    assert figures["adds"] == 26 and figures["multiplies"] == 16
    assert figures["latency"] > 100


def test_synthesis_parameters():
    params, wide = synthesis_parameters(), synthesis_parameters(lanes=4)
    assert params.max_vocab_size >= 128256 and wide.lanes == 4


# --- the helpers -----------------------------------------------------------------------------


def _bits(x):
    return int(np.array(x, F32).view(np.uint32))


def test_order_key_greater_is_the_order_key_compare():
    """The argmax's ``order_key_greater`` (two magnitude compares) is ``float32_order_key(a) >
    float32_order_key(b)`` for every bit pattern: the corner pairs (NaNs, zeros of both signs,
    infinities, subnormals) and random patterns."""
    corner_a, corner_b = directed_operands()
    rng = np.random.default_rng(7)
    a_values = np.concatenate([corner_a, rng.integers(0, 1 << 32, 2000, dtype=np.uint32)])
    b_values = np.concatenate([corner_b, rng.integers(0, 1 << 32, 2000, dtype=np.uint32)])

    def key(bits):
        magnitude = bits & 0x7FFF_FFFF
        return -magnitude if bits >> 31 else magnitude

    a, b, greater = Signal(32), Signal(32), Signal()
    m = Module()
    m.d.comb += greater.eq(order_key_greater(a, b))
    wrong = []

    async def testbench(ctx):
        for x, y in zip(a_values.tolist(), b_values.tolist(), strict=True):
            ctx.set(a, x)
            ctx.set(b, y)
            if ctx.get(greater) != (key(x) > key(y)):
                wrong.append((hex(x), hex(y)))

    simulate(m, testbench, clocked=False)
    assert not wrong, wrong[:5]


def test_dataflow_two_prod_is_the_golden():
    """A TwoProd + FastTwoSum graph (operands of different depths) matches numpy."""
    m = Module()
    a, b = Signal(32), Signal(32)
    df = Float32Dataflow(m, Const(1), name="t")
    na, nb = df.input(a), df.input(b)
    p = df.mul(na, nb)
    c = df.mul(_bits(4097.0), na)
    a_hi = df.sub(c, df.sub(c, na))
    a_lo = df.sub(na, a_hi)
    c = df.mul(_bits(4097.0), nb)
    b_hi = df.sub(c, df.sub(c, nb))
    b_lo = df.sub(nb, b_hi)
    err = df.sub(df.mul(a_lo, b_lo), df.sub(df.sub(df.sub(p, df.mul(a_hi, b_hi)),
                                                   df.mul(a_lo, b_hi)), df.mul(a_hi, b_lo)))
    s = df.add(p, err)
    lo = df.sub(err, df.sub(s, p))
    time, (out_s, out_lo) = df.align(s, lo)
    rng = np.random.default_rng(5)
    xs = (rng.normal(0, 1, 40) * 2.0 ** rng.integers(-20, 20, 40)).astype(F32)
    ys = (rng.normal(0, 1, 40) * 2.0 ** rng.integers(-20, 20, 40)).astype(F32)
    p_ref, e_ref = _two_prod(xs, ys)
    s_ref, lo_ref = _fast_two_sum(p_ref, e_ref)
    got = []

    async def bench(ctx):
        for i in range(len(xs) + time - 1):
            if i < len(xs):
                ctx.set(a, _bits(xs[i]))
                ctx.set(b, _bits(ys[i]))
            await ctx.tick()
            if i + 1 >= time:
                got.append((ctx.get(out_s), ctx.get(out_lo)))

    simulate(m, bench)
    assert [g[0] for g in got] == [_bits(v) for v in s_ref]
    assert [g[1] for g in got] == [_bits(v) for v in lo_ref]


def test_sequencer_program():
    m = Module()
    seq = Float32Sequencer(name="s")
    seq.reg("x")
    seq.program("p")
    seq.mul("y", "x", _bits(3.0))
    seq.sub("z", "y", _bits(0.5))
    seq.add("w", "z", "z")
    seq.elaborate(m)
    assert seq.operations("p") == 3

    async def bench(ctx):
        ctx.set(seq.regs["x"], _bits(1.25))
        ctx.set(seq.start("p"), 1)
        await ctx.tick()
        ctx.set(seq.start("p"), 0)
        cycles = 0
        while ctx.get(seq.busy):
            await ctx.tick()
            cycles += 1
        assert ctx.get(seq.regs["w"]) == _bits((1.25 * 3 - 0.5) * 2)
        assert cycles <= seq.cycles("p") + 2

    simulate(m, bench)


# --- the kernel on Amaranth's simulator --------------------------------------------------------


def test_softmax_and_greedy_one_lane():
    parameters = {"max_vocab_size": 64, "lanes": 1}
    rng = np.random.default_rng(0)
    x = rng.normal(0, 3, (3, 9)).astype(F32)
    x[1, 2] = -np.inf
    run_on_amaranth(parameters, [make_call(x, [0.0, 0.7, 0.0], 1, "three requests")], idle=0.3,
                    backpressure=0.3, seed=1)


def test_directed_two_lanes():
    """Ties in the max, all -inf rows and V = lanes + 1 on two lanes (the full directed set
    and random calls run under Verilator)."""
    parameters = {"max_vocab_size": 16, "lanes": 2}
    rng = np.random.default_rng(7)
    row = rng.normal(0, 2, 7).astype(F32)
    row[[1, 4, 6]] = row.max() + 1
    calls = [make_call(np.stack([row, np.full(7, -np.inf, F32)]), [1.5], 2, "ties, -inf"),
             make_call(rng.normal(0, 3, (1, 3)).astype(F32), [0.05], 1, "V = lanes + 1")]
    run_on_amaranth(parameters, calls, idle=0.2, backpressure=0.2, seed=2)


@pytest.mark.slow
def test_bfloat16_input_four_lanes():
    """bfloat16 input on four lanes (Amaranth's simulator; ~3 minutes on 2 cores)."""
    parameters = {"max_vocab_size": 16, "lanes": 4, "input_format": "bfloat16"}
    rng = np.random.default_rng(9)
    x = rng.normal(0, 3, (2, 11)).astype(F32)
    x[0, :3] = x[0, 5]  # ties after bf16 truncation too
    run_on_amaranth(parameters, [make_call(x, [0.9, 0.0], 1, "bf16")], idle=0.2,
                    backpressure=0.2, seed=3)


def test_case_file_round_trip(tmp_path):
    rng = np.random.default_rng(4)
    call = make_call(rng.normal(0, 2, (4, 10)).astype(F32), [0.5, 0.0], 2, "case")
    path = tmp_path / "k5_case.txt"
    write_case_file(path, call)
    again = call_from_case(path)
    assert np.array_equal(again["logits"].view(np.uint32), call["logits"].view(np.uint32))
    probs, predict = expected(call)
    assert np.array_equal(again["expected"]["expected_target_probs"].view(np.uint32),
                          probs.view(np.uint32))
    assert np.array_equal(again["expected"]["expected_target_predict"], predict)


# --- Verilator regression ------------------------------------------------------------------------


def test_verilator_regression():
    summary = TARGET.run(overrides={"random_calls": 12, "row_vocab": 2000},
                         log_file=BUILD_ROOT / "pytest-logits_to_probas.log")
    assert summary["vectors"] > 50
    assert summary["latency_cycles"] > 0


def test_verilator_case(tmp_path):
    rng = np.random.default_rng(11)
    call = make_call(rng.normal(0, 2, (3, 50)).astype(F32), [0.8, 0.0, 1.5], 1, "case")
    path = tmp_path / "k5_case.txt"
    write_case_file(path, call)
    summary = TARGET.run(case=path, log_file=BUILD_ROOT / "pytest-logits_to_probas-case.log")
    assert summary["vectors"] == 3


# A small build for case replays: a case's V and n raise `max_vocab_size` and
# `row_count_width` (`TARGET.case_parameters`).
SMALL = {"max_vocab_size": 16, "row_count_width": 1}


def _case_beyond_small(tmp_path):
    """A case of V = 20 > 16 and n = 2 rows per request (> 1 bit), sampling and greedy."""
    rng = np.random.default_rng(13)
    x = rng.normal(0, 2, (4, 20)).astype(F32)
    x[1, 5] = -np.inf
    path = tmp_path / "k5_v20.txt"
    write_case_file(path, make_call(x, [0.6, 0.0], 2, "V = 20, n = 2"))
    return path


def test_case_parameters_follow_the_case(tmp_path):
    """``case_parameters`` raises ``max_vocab_size`` and ``row_count_width`` to the case's
    ``V`` and ``n`` (never lowers them), and the case replays bit-exact on a DUT built with
    them (Amaranth's simulator; the Verilator replay of such a derived model is slow)."""
    path = _case_beyond_small(tmp_path)
    derived = TARGET.case_parameters(path, {**PARAMETERS, **SMALL})
    assert derived == {**PARAMETERS, "max_vocab_size": 20, "row_count_width": 2}
    assert TARGET.case_parameters(path, PARAMETERS) == PARAMETERS
    run_on_amaranth(derived, [call_from_case(path)], idle=0.2, backpressure=0.2, seed=5)


@pytest.mark.slow
def test_verilator_largest_vocabulary_row():
    """One row of V = max_vocab_size = 131072 (the buffer full; 3 x 131072 + 448 clocks, about
    15 minutes under cocotb on 2 cores): the ``figures`` phase alone."""
    summary = TARGET.run(overrides={"row_vocab": PARAMETERS["max_vocab_size"]},
                         tests=("figures",),
                         log_file=BUILD_ROOT / "pytest-logits_to_probas-largest.log")
    words = PARAMETERS["max_vocab_size"] // PARAMETERS["lanes"]
    assert summary["initiation_interval"] * PARAMETERS["max_vocab_size"] < 3 * words + 500


# The bfloat16 two-lane model of the slow tier (one Verilator build serves both tests below).
BF16_TWO_LANES = {"lanes": 2, "input_format": "bfloat16", "max_vocab_size": 4096}


@pytest.mark.slow
def test_verilator_bfloat16_two_lanes():
    summary = TARGET.run(BF16_TWO_LANES, overrides={"random_calls": 30, "row_vocab": 4096},
                         log_file=BUILD_ROOT / "pytest-logits_to_probas-bf16.log")
    assert summary["vectors"] > 50


@pytest.mark.slow
def test_verilator_case_derives_the_build(tmp_path):
    """A bfloat16 case of V = 4096 run with ``max_vocab_size = 64``: the replay runs on the
    model ``case_parameters`` derives (``max_vocab_size = 4096``, the model of
    ``test_verilator_bfloat16_two_lanes``)."""
    rng = np.random.default_rng(17)
    x = bf16_round(rng.normal(0, 3, (3, 4096)).astype(F32))  # exact in bfloat16
    path = tmp_path / "k5_bf16_v4096.txt"
    write_case_file(path, make_call(x, [1.0, 0.0, 0.3], 1, "bf16 V = 4096"))
    small = {**BF16_TWO_LANES, "max_vocab_size": 64}
    assert TARGET.case_parameters(path, {**PARAMETERS, **small}) == \
        {**PARAMETERS, **BF16_TWO_LANES}
    summary = TARGET.run(small, case=path,
                         log_file=BUILD_ROOT / "pytest-logits_to_probas-case-derived.log")
    assert summary["vectors"] == 3 and summary["extra"]["vocab_size"] == 4096
    assert summary["extra"]["expected tensors"] == \
        "expected_target_predict, expected_target_probs"


def test_exp_pipeline_is_the_golden():
    """One lane of the exp pipeline against ``_exp_elements`` over hard rows: huge ranges,
    -inf, subnormals, ties with the max, T = 1e-6 / 1 / 1e6 (statics held per segment)."""
    from golden.logits_to_probas import _exp_elements, _scale_c, _split
    from hw.kernels.logits_to_probas import _exp_element

    m = Module()
    df = Float32Dataflow(m, Const(1), name="t")
    logit, neg_max, c = Signal(32), Signal(32), [Signal(32) for _ in range(4)]
    e = _exp_element(df, df.input(logit), df.static(neg_max), *(df.static(s) for s in c),
                     df.static(Const(0)), df.static(Const(1)))
    latency = e.time
    rng = np.random.default_rng(21)
    segments = []
    for temperature, scale in ((1.0, 3.0), (1e-6, 1e-5), (1e6, 1e30), (0.37, 80.0)):
        row = (rng.normal(0, 1, 24) * scale).astype(F32)
        row[:3] = [-np.inf, row.max(), np.float32(1e-45)]
        row_max = row.max()
        t = np.array([temperature], F32)
        c_hi, c_lo = _scale_c(t)
        c_shi, c_slo = _split(c_hi)
        want = _exp_elements(row[None], np.array([[row_max]], F32), c_hi[:, None],
                             c_lo[:, None])[0]
        segments.append((row, row_max, [c_hi[0], c_lo[0], c_shi[0], c_slo[0]], want))
    got = []

    async def bench(ctx):
        for row, row_max, consts, _ in segments:
            ctx.set(neg_max, _bits(-row_max))
            for signal, value in zip(c, consts, strict=True):
                ctx.set(signal, _bits(value))
            out = []
            for i in range(len(row) + latency - 1):
                if i < len(row):
                    ctx.set(logit, _bits(row[i]))
                await ctx.tick()
                if i + 1 >= latency:
                    out.append(ctx.get(e.value))
            got.append(out)

    simulate(m, bench)
    for (row, _, _, want), out in zip(segments, got, strict=True):
        assert out == [_bits(v) for v in want], row
