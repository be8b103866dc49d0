"""cocotb testbench: K5 ``LogitsToProbas`` against ``golden.logits_to_probas``.

Configuration: ``parameters`` (the DUT's), ``random_calls``, ``max_random_vocab``,
``idle``/``backpressure`` probabilities, ``row_vocab`` (V of the figures' row),
``row_vocab_small`` (V of the gap and greedy figures), ``seed``, ``case`` (the ``case`` test)
and ``measure`` (``vocab``, the ``measurement`` test).

Tests (phases): ``figures`` (no idle or back-pressure: one sampling row of ``row_vocab``
random logits (cycles per row = first ``logits`` transfer to last ``probs`` transfer,
elements per clock of the ingest/output passes, latency = first ``cmd`` transfer to first
``probs`` transfer), two requests of two ``row_vocab_small`` rows (the gaps between rows and
across a request boundary; ``initiation_interval`` = (row cycles + gap) / V, cycles per
element) and a greedy row); ``directed`` (ties in the max, ``-inf`` entries, all ``-inf``
rows, a huge logit range, temperatures 0 / just below 1e-6 / 1e-6 / 0.01..10 / 1e6, V = 1,
lanes +- 1, tiny logits, requests back to back) and ``random`` (1-3 requests, n = 1-3, V up
to ``max_random_vocab``, rows with ties, ``-inf``, wide ranges, random temperatures with
greedy and boundary ones), both under random idle and back-pressure; ``case`` (RTL == golden
== the case's ``expected_*``); ``measurement`` (one ``T = 1`` row of the point's V, then 2 x
2 rows of V = 64 for the gaps; ``sim.logits_to_probas.TARGET.measure`` extrapolates). Every
call's ``target_probs`` (greedy rows: the one-hot of the DUT's argmax) and
``target_predict`` are compared whole with the golden's, float32 by bit pattern.
"""

import cocotb
import numpy as np

from hw.kernels.logits_to_probas import LogitsToProbasParams, exp_figures
from sim.bench import KernelBench, golden_matches_case, write_summary
from sim.logits_to_probas.vectors import (
    beats,
    bit_patterns,
    call_from_case,
    check,
    cmd_words,
    directed_calls,
    expected,
    logit_words,
    make_call,
    random_call,
    work,
)

F32 = np.float32


async def run_call(bench, call, *, idle=0.0, backpressure=0.0):
    """Drive one call, check it against the golden; return the ``Transfers``."""
    params = bench.params
    transfers = await bench.run(
        {"cmd": cmd_words(params, call), "logits": logit_words(params, call)},
        beats(params, call), work=work(params, call), idle=idle, backpressure=backpressure)
    check(params, call, transfers.items["probs"], transfers.items["predict"])
    return transfers


def _words(params, call) -> int:
    return -(-call["logits"].shape[1] // params.lanes)


def _rows(at, words, rows):
    """``(first logits transfer, last probs transfer)`` of each sampling row of a run."""
    return [(at["logits"][r * words], at["probs"][(r + 1) * words - 1]) for r in range(rows)]


def _row_call(bench, vocab, temperature, name):
    return make_call(bench.np_rng.normal(0, 3, (1, vocab)).astype(F32), [temperature], 1, name)


def _gaps_call(bench, vocab):
    """Two requests of two ``T = 1`` rows: the gaps within and across requests."""
    return make_call(bench.np_rng.normal(0, 3, (4, vocab)).astype(F32), [1.0, 1.0], 2, "gaps")


def _gaps(at, words):
    spans = _rows(at, words, 4)
    return spans[1][0] - spans[0][1] - 1, spans[2][0] - spans[1][1] - 1


def _rows_of(calls) -> int:
    return sum(call["logits"].shape[0] for call in calls)


async def _stressed(bench, kind, calls):
    """Run ``calls`` under the configuration's idle and back-pressure; count them as
    ``kind`` (``directed``/``random``) vectors."""
    for call in calls:
        await run_call(bench, call, **bench.stress)
    bench.log(f"{len(calls)} {kind} calls ({_rows_of(calls)} rows) bit-exact with the golden")
    write_summary(vectors=_rows_of(calls), **{f"{kind}_vectors": len(calls)})


@cocotb.test()
async def figures(dut):
    """One sampling row of ``row_vocab``, the gaps (two requests of two ``row_vocab_small``
    rows) and a greedy row, without idle or back-pressure."""
    bench = await KernelBench.start(dut, LogitsToProbasParams)
    params, cfg = bench.params, bench.cfg
    lanes = params.lanes
    vocab = min(cfg["row_vocab"], params.max_vocab_size)
    figure = _row_call(bench, vocab, 1.0, f"figure V={vocab}")
    run = await run_call(bench, figure)
    words = _words(params, figure)
    ((start, end),) = _rows(run.at, words, 1)
    row_cycles = end - start + 1
    latency = run.at["probs"][0] - run.at["cmd"][0]
    small_vocab = min(cfg["row_vocab_small"], params.max_vocab_size)
    small = _gaps_call(bench, small_vocab)
    run_s = await run_call(bench, small)
    row_gap, request_gap = _gaps(run_s.at, _words(params, small))
    interval = row_cycles + row_gap
    greedy = _row_call(bench, small_vocab, 0.0, "greedy")
    run_g = await run_call(bench, greedy)
    greedy_cycles = run_g.at["predict"][0] - run_g.at["logits"][0] + 1
    ingest, output = run.at["logits"], run.at["probs"]
    extra = {
        f"cycles per sampling row (V={vocab}, {lanes} lane(s))": (
            f"{row_cycles} (first logits beat to last probs beat; "
            f"{vocab / row_cycles:.3f} elements/clock overall; 3 passes of {words} words + "
            f"{row_cycles - 3 * words})"),
        f"gaps between rows (measured at V={small_vocab})": (
            f"{row_gap} clocks within a request, {request_gap} across a request boundary "
            f"(per-request constants)"),
        "elements per clock, streaming passes": (
            f"{lanes} per pass (ingest, exp, output: one word per clock; exp pipeline "
            f"{exp_figures()['latency']} clocks deep)"),
        "measured pass rates (figure row)": (
            f"ingest {vocab / (ingest[-1] - ingest[0] + 1):.3f}, output "
            f"{vocab / (output[-1] - output[0] + 1):.3f} elements/clock"),
        f"cycles per greedy row (V={small_vocab})": greedy_cycles,
    }
    bench.log(f"{row_cycles} cycles per sampling row of V = {vocab}")
    write_summary(vectors=_rows_of([figure, small, greedy]),
                  cycles=run.cycles + run_s.cycles + run_g.cycles, latency_cycles=latency,
                  initiation_interval=interval / vocab, extra=extra)


@cocotb.test()
async def directed(dut):
    """The directed calls, under random idle and back-pressure."""
    bench = await KernelBench.start(dut, LogitsToProbasParams)
    await _stressed(bench, "directed",
                    directed_calls(bench.params.lanes, bench.params.max_vocab_size))


@cocotb.test()
async def random(dut):
    """``random_calls`` random calls, under random idle and back-pressure."""
    bench = await KernelBench.start(dut, LogitsToProbasParams)
    params, cfg = bench.params, bench.cfg
    calls = [random_call(bench.np_rng, name=f"random call {index}", lanes=params.lanes,
                         max_vocab=min(cfg["max_random_vocab"], params.max_vocab_size))
             for index in range(cfg["random_calls"])]
    await _stressed(bench, "random", calls)


@cocotb.test()
async def case(dut):
    """The case file's call alone, with 10% idle and back-pressure: RTL == golden == the
    case's ``expected_*``."""
    bench = await KernelBench.start(dut, LogitsToProbasParams)
    path = bench.cfg["case"]
    call = call_from_case(path)
    want = dict(zip(("expected_target_probs", "expected_target_predict"),
                    expected(call, bench.params.input_format), strict=True))
    differing = golden_matches_case(bit_patterns(want), bit_patterns(call["expected"]))
    assert not differing, f"golden differs from the case's {', '.join(differing)}"
    run = await run_call(bench, call, idle=0.1, backpressure=0.1)
    bench.log(f"case {path}: RTL == golden" + (" == expected tensors" if call["expected"] else ""))
    write_summary(vectors=call["logits"].shape[0], cycles=run.cycles,
                  extra={"case": path, "vocab_size": call["logits"].shape[1],
                         "expected tensors": ", ".join(sorted(call["expected"])) or "absent"})


@cocotb.test()
async def measurement(dut):
    """One ``T = 1`` row of the real ``V`` (first row, row cycles), then a 2 x 2-row call of
    ``V = 64`` for the V-independent gaps between rows and across a request boundary; no
    idle or back-pressure, checked against the golden."""
    bench = await KernelBench.start(dut, LogitsToProbasParams)
    vocab = bench.cfg["measure"]["vocab"]
    call = _row_call(bench, vocab, 1.0, f"measurement V={vocab}")
    run = await run_call(bench, call)
    words = _words(bench.params, call)
    ((start, end),) = _rows(run.at, words, 1)
    small = _gaps_call(bench, 64)
    row_gap, request_gap = _gaps((await run_call(bench, small)).at, _words(bench.params, small))
    sizes = bench.port_bytes(run.at, ("cmd", "logits", "probs", "predict"))
    ops = exp_figures()
    measurement = {
        "first_row_cycles": end - run.at["cmd"][0] + 1,
        "row_cycles": end - start + 1,
        "row_gap": row_gap,
        "request_gap": request_gap,
        "cmd_bytes_per_request": sizes["cmd"],
        "logits_bytes_per_row": sizes["logits"],
        "probs_bytes_per_row": sizes["probs"],
        "predict_bytes_per_row": sizes["predict"],
        "operations_per_element": ops["adds"] + ops["multiplies"] + 1,
    }
    assert len(run.at["logits"]) == words == len(run.at["probs"])
    bench.log(f"measurement: {measurement}")
    write_summary(vectors=5, cycles=run.cycles, measurement=measurement)
