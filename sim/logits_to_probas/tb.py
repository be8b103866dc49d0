# amaranth: UnusedElaboratable=no
"""cocotb testbench: K5 ``LogitsToProbas`` against ``golden.logits_to_probas``.

Configuration (from the harness): ``parameters`` (the DUT's ``LogitsToProbas`` arguments),
``random_calls``, ``max_random_vocab``, ``idle``/``backpressure`` probabilities, ``row_vocab``
(V of the figures' row), ``row_vocab_small`` (V of the gap and greedy figures), ``seed``;
``case`` when ``CASE=`` was given; ``measure`` (``vocab``) from ``sim.logits_to_probas.measure``:
one row of that V, then 2 x 2 rows of V = 64 (the gaps).

Phases: (1) figures without idle or back-pressure: one sampling row of ``row_vocab`` random
logits (cycles per row = first ``logits`` transfer to last ``probs`` transfer, elements per
clock of the ingest/output passes, latency = first ``cmd`` transfer to first ``probs``
transfer), two requests of two ``row_vocab_small`` rows (the gaps between rows and across a
request boundary; ``initiation_interval`` = (row cycles + gap) / V, cycles per element) and a
greedy row; (2) the
directed calls (ties in the max, ``-inf`` entries, all ``-inf`` rows, a huge logit range,
temperatures 0 / just below 1e-6 / 1e-6 / 0.01..10 / 1e6, V = 1, lanes +- 1, tiny logits,
requests back to back) under random idle and back-pressure; (3) random calls (1-3 requests,
n = 1-3, V up to ``max_random_vocab``, rows with ties, ``-inf``, wide ranges, random
temperatures with greedy and boundary ones) under random idle and back-pressure. Every call's
``target_probs`` (greedy rows: the one-hot of the DUT's argmax) and ``target_predict`` are
compared whole with the golden's, float32 by bit pattern.
"""

import random

import cocotb
import numpy as np

from hw.kernels.logits_to_probas import LogitsToProbas
from sim.cocotb_tb import (
    StreamBench,
    StreamSink,
    StreamSource,
    config,
    start_clock_and_reset,
    write_summary,
)
from sim.logits_to_probas.vectors import (
    call_from_case,
    cmd_words,
    compare,
    directed_calls,
    expected,
    greedy_rows,
    logit_words,
    make_call,
    outputs,
    random_call,
)
from sim.targets import port_bytes

F32 = np.float32


async def run_call(dut, kernel, call, *, idle=0.0, backpressure=0.0, rng=None) -> dict:
    """Drive one call, check it against the golden; return the endpoints (for figures)."""
    rng = rng or random.Random(0)
    cmd = StreamSource(dut, "cmd", idle=idle, rng=rng)
    logits = StreamSource(dut, "logits", idle=idle, rng=rng)
    cmd.send(cmd_words(kernel, call))
    logits.send(logit_words(kernel, call))
    probs = StreamSink(dut, "probs", backpressure=backpressure, rng=rng)
    predict = StreamSink(dut, "predict", backpressure=backpressure, rng=rng)
    bench = StreamBench(dut, [cmd, logits, probs, predict])
    rows, vocab = call["logits"].shape
    words = -(-vocab // kernel.lanes)
    sampling = int((~greedy_rows(call)).sum())
    timeout = int((rows * (words + 40) + sampling * (2 * words + 900) + 800)
                  / (1 - max(idle, backpressure)) ** 2) + 2000
    cycles = await bench.run(
        lambda: len(predict.items) == rows and len(probs.items) == sampling * words
        and cmd.done and logits.done, timeout_cycles=timeout)
    got_probs, got_predict, problems = outputs(kernel, call, probs.items, predict.items)
    problems = compare(call, got_probs, got_predict, expected(call, kernel.input_format),
                       problems)
    assert not problems, "\n".join(problems)
    return {"cycles": cycles, "cmd": cmd, "logits": logits, "probs": probs,
            "predict": predict, "words": words}


def _check_ports(dut, kernel):
    for name, layout in (("cmd", kernel.cmd_layout), ("logits", kernel.logits_layout),
                         ("probs", kernel.probs_layout), ("predict", kernel.predict_layout)):
        width = len(getattr(dut, f"{name}__payload"))
        assert width == layout.size, (
            f"port {name}: {width} bits, but LogitsToProbas(**parameters) has {layout.size}: "
            "the configuration does not describe this model")


def _rows(run, rows):
    """``(first logits transfer, last probs transfer)`` of each sampling row of a run."""
    words = run["words"]
    logits_at, probs_at = run["logits"].accepted_at, run["probs"].accepted_at
    return [(logits_at[r * words], probs_at[(r + 1) * words - 1]) for r in range(rows)]


async def _measure(dut, kernel, spec, np_rng):
    """One ``T = 1`` row of the real ``V`` (first row, row cycles), then a 2 x 2-row call of
    ``V = 64`` for the V-independent gaps between rows and across a request boundary."""
    vocab = spec["vocab"]
    call = make_call(np_rng.normal(0, 3, (1, vocab)).astype(F32), [1.0], 1,
                     f"measurement V={vocab}")
    run = await run_call(dut, kernel, call)
    ((start, end),) = _rows(run, 1)
    small = make_call(np_rng.normal(0, 3, (4, 64)).astype(F32), [1.0, 1.0], 2, "gaps")
    gaps = _rows(await run_call(dut, kernel, small), 4)
    words = run["words"]
    ops = kernel.exp_figures()
    measurement = {
        "first_row_cycles": end - run["cmd"].accepted_at[0] + 1,
        "row_cycles": end - start + 1,
        "row_gap": gaps[1][0] - gaps[0][1] - 1,
        "request_gap": gaps[2][0] - gaps[1][1] - 1,
        "cmd_bytes_per_request": port_bytes(1, kernel.cmd_layout.size),
        "logits_bytes_per_row": port_bytes(words, kernel.logits_layout.size),
        "probs_bytes_per_row": port_bytes(words, kernel.probs_layout.size),
        "predict_bytes_per_row": port_bytes(1, kernel.predict_layout.size),
        "operations_per_element": ops["adds"] + ops["multiplies"] + 1,
    }
    assert len(run["logits"].accepted_at) == words == len(run["probs"].accepted_at)
    write_summary(vectors=5, cycles=run["cycles"], measurement=measurement)


@cocotb.test()
async def logits_to_probas_matches_golden(dut):
    cfg = config()
    kernel = LogitsToProbas(**cfg["parameters"])
    _check_ports(dut, kernel)
    seed = cfg["seed"]
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    await start_clock_and_reset(dut)

    if "measure" in cfg:
        await _measure(dut, kernel, cfg["measure"], np_rng)
        return

    if "case" in cfg:
        call = call_from_case(cfg["case"])
        want_probs, want_predict = expected(call, kernel.input_format)
        wanted = call["expected"]
        if "expected_target_probs" in wanted:
            assert np.array_equal(want_probs.view(np.uint32),
                                  wanted["expected_target_probs"].view(np.uint32)), \
                "golden differs from the case's expected_target_probs"
        if "expected_target_predict" in wanted:
            assert np.array_equal(want_predict, wanted["expected_target_predict"]), \
                "golden differs from the case's expected_target_predict"
        run = await run_call(dut, kernel, call, idle=0.1, backpressure=0.1, rng=rng)
        dut._log.info(f"case {cfg['case']}: RTL == golden"
                      + (" == expected tensors" if call["expected"] else ""))
        write_summary(vectors=call["logits"].shape[0], cycles=run["cycles"],
                      extra={"case": cfg["case"],
                             "expected tensors": ", ".join(sorted(call["expected"]))
                             or "absent"})
        return

    lanes = kernel.lanes
    rows_checked = 0
    total_cycles = 0
    extra = {}

    # (1) Figures: no idle, no back-pressure: one sampling row of row_vocab, then two
    # requests of two rows (row_vocab_small) for the gaps between rows, a greedy row.
    vocab = min(cfg["row_vocab"], kernel.max_vocab_size)
    figure = make_call(np_rng.normal(0, 3, (1, vocab)).astype(F32), [1.0], 1,
                       f"figure V={vocab}")
    run = await run_call(dut, kernel, figure, rng=rng)
    ((start, end),) = _rows(run, 1)
    row_cycles = end - start + 1
    latency = run["probs"].accepted_at[0] - run["cmd"].accepted_at[0]
    words = run["words"]
    rows_checked += 1
    total_cycles += run["cycles"]
    small_vocab = min(cfg["row_vocab_small"], kernel.max_vocab_size)
    small = make_call(np_rng.normal(0, 3, (4, small_vocab)).astype(F32), [1.0, 1.0], 2,
                      "gaps")
    run_s = await run_call(dut, kernel, small, rng=rng)
    rows_checked += 4
    total_cycles += run_s["cycles"]
    spans = _rows(run_s, 4)
    row_gap = spans[1][0] - spans[0][1] - 1
    request_gap = spans[2][0] - spans[1][1] - 1
    interval = row_cycles + row_gap
    extra[f"cycles per sampling row (V={vocab}, {lanes} lane(s))"] = (
        f"{row_cycles} (first logits beat to last probs beat; "
        f"{vocab / row_cycles:.3f} elements/clock overall; 3 passes of {words} words + "
        f"{row_cycles - 3 * words})")
    extra[f"gaps between rows (measured at V={small_vocab})"] = (
        f"{row_gap} clocks within a request, {request_gap} across a request boundary "
        f"(per-request constants)")
    extra["elements per clock, streaming passes"] = (
        f"{lanes} per pass (ingest, exp, output: one word per clock; exp pipeline "
        f"{kernel.exp_figures()['latency']} clocks deep)")
    ingest = run["logits"].accepted_at
    output = run["probs"].accepted_at
    extra["measured pass rates (figure row)"] = (
        f"ingest {vocab / (ingest[-1] - ingest[0] + 1):.3f}, output "
        f"{vocab / (output[-1] - output[0] + 1):.3f} elements/clock")
    greedy = make_call(np_rng.normal(0, 3, (1, small_vocab)).astype(F32), [0.0], 1, "greedy")
    run_g = await run_call(dut, kernel, greedy, rng=rng)
    rows_checked += 1
    total_cycles += run_g["cycles"]
    greedy_cycles = run_g["predict"].accepted_at[0] - run_g["logits"].accepted_at[0] + 1
    extra[f"cycles per greedy row (V={small_vocab})"] = greedy_cycles

    # (2) Directed calls, with idle and back-pressure.
    stress = {"idle": cfg["idle"], "backpressure": cfg["backpressure"]}
    directed = directed_calls(lanes, kernel.max_vocab_size)
    for call in directed:
        run = await run_call(dut, kernel, call, rng=rng, **stress)
        rows_checked += call["logits"].shape[0]
        total_cycles += run["cycles"]

    # (3) Random calls.
    for index in range(cfg["random_calls"]):
        call = random_call(np_rng, name=f"random call {index}", lanes=lanes,
                           max_vocab=min(cfg["max_random_vocab"], kernel.max_vocab_size))
        run = await run_call(dut, kernel, call, rng=rng, **stress)
        rows_checked += call["logits"].shape[0]
        total_cycles += run["cycles"]

    dut._log.info(f"{rows_checked} rows bit-exact with the golden")
    write_summary(vectors=rows_checked, directed_vectors=len(directed),
                  random_vectors=cfg["random_calls"], cycles=total_cycles,
                  latency_cycles=latency, initiation_interval=interval / vocab,
                  extra=extra)
