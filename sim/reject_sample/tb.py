"""cocotb testbench: K6 ``RejectSample`` against ``golden.tree_speculative_sampling_target_only``,
``golden.draft_tree_reject_sample`` (LFSR coins) and ``golden.verify_tree_greedy``.

Configuration: ``parameters`` (the DUT's), ``random_calls``, ``lfsr_trials``,
``idle``/``backpressure``, ``max_latency`` (random memory latency ``1..max_latency``),
``figure_latency`` (the fixed memory latency of the figures), ``perf_requests`` (requests of
the traversal figure), ``row_vocab`` (``V`` of the final-row figure), ``seed``, ``case`` (the
``case`` test) and ``measure`` (the ``measurement`` test).

Tests (phases): ``figures`` (no idle or back-pressure, fixed memory latency: the traversal of
``perf_requests`` random n = 64, S = 8 trees, the same with ``threshold_acc = 0.5`` (divider in
the loop), the worst-case walk, one softmax row of ``row_vocab`` elements), ``directed``,
``random`` (random calls with random idle, back-pressure and memory latency: trees of up to
``max_nodes`` nodes, depth <= 8, S, V, thresholds, array and LFSR coins, greedy), ``lfsr``
(``lfsr_trials`` requests of the golden's lossless-check tree, LFSR coins from distinct seeds),
``case`` (RTL == golden == the case's ``expected_*``), ``measurement`` (one verify step of a
benchmark contract point). Every call's outputs (``predicts``, ``accept_index``,
``accept_token_num``, ``draft_probs``) are rebuilt from the streams and compared whole with the
golden's, float32 by bit pattern.
"""

import cocotb
import numpy as np

from hw.kernels.reject_sample_params import RejectSampleParams
from sim.bench import KernelBench, PacketSink, write_summary
from sim.cocotb_tb import ReadPortMemory, StreamSink
from sim.reject_sample.cases import call_from_case
from sim.reject_sample.generators import (
    directed_calls,
    lossless_call,
    perf_call,
    random_call,
    row_call,
    verify_step_call,
    worst_call,
)
from sim.reject_sample.memory import MemoryImage
from sim.reject_sample.results import compare, expected
from sim.reject_sample.streams import beats, feeds, outputs_from_dut

INPUTS = ("cmd", "tree", "read_data")  # read_data: the memory port's answers
OUTPUTS = ("read_address", "draft_write", "result")  # read_address: the memory requests


class DraftSink(StreamSink):
    """``draft_write`` beats; a request's writes all precede its last ``result`` beat."""

    done = True


async def run_call(bench, call, *, latency, idle=0.0, backpressure=0.0, seed=0) -> dict:
    """Drive one call through the kernel (the ``target_probs`` memory answering after
    ``latency = (low, high)`` clocks), check its outputs against the golden; return the run's
    figures: ``cycles``, per-request ``status``, result packet ``ends``, memory ``reads`` and
    the acceptance cycles ``at`` of every port."""
    params = bench.params
    memory = MemoryImage(call, params.lanes, seed=seed)
    port = ReadPortMemory(bench.dut, memory.payload, latency=latency, idle=idle,
                          backpressure=backpressure, rng=bench.rng)
    result = PacketSink(bench, "result", call.batch_size, backpressure=backpressure)
    draft = DraftSink(bench.dut, "draft_write", backpressure=backpressure, rng=bench.rng)
    per_request = call.nodes * (12 + latency[1]) + 6 * (-(-call.vocab_size // params.lanes)) \
        + 40 * latency[1] + 600
    run = await bench.run(feeds(params, call), {}, work=call.batch_size * per_request // 2,
                          idle=idle, backpressure=backpressure, endpoints=(port, result, draft))
    result.finish()
    writes = beats(params.draft_layout, draft.items)
    problems = compare(call, outputs_from_dut(call, memory, result.packets, writes),
                       expected(call))
    assert not problems, "\n".join(problems)
    return {"cycles": run.cycles, "status": result.status, "ends": result.ends,
            "reads": port.reads,
            "at": {**run.at, "read_address": port.address_at, "read_data": port.data_at}}


def _check_fits(params, call):
    for value, limit, name, parameter in ((call.nodes, params.max_nodes, "n", "max_nodes"),
                                          (call.steps, params.max_steps, "S", "max_steps"),
                                          (call.vocab_size, params.max_vocab_size, "V",
                                           "max_vocab_size")):
        assert value <= limit, (f"the call has {name} = {value}; this model is built with "
                                f"{parameter} = {limit}")


@cocotb.test()
async def figures(dut):
    """Traversal, divider, worst-case and final-row figures at a fixed memory latency."""
    bench = await KernelBench.start(dut, RejectSampleParams)
    params, cfg = bench.params, bench.cfg
    fixed = (cfg["figure_latency"], cfg["figure_latency"])
    nodes, steps = min(64, params.max_nodes), min(8, params.max_steps)
    requests, cycles, extra = 0, 0, {}

    perf = perf_call(bench.np_rng, requests=cfg["perf_requests"], nodes=nodes, steps=steps)
    run = await run_call(bench, perf, latency=fixed)
    walks = [s["walk_cycles"] for s in run["status"]]
    accepted = [int(n) for n in expected(perf)["accept_token_num"]]
    starts, ends = run["at"]["cmd"], run["ends"]
    latency = ends[0] - starts[0]
    interval = (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else float("nan")
    requests, cycles = requests + perf.batch_size, cycles + run["cycles"]
    extra[f"traversal cycles/request (n={nodes})"] = (
        f"mean {np.mean(walks):.0f}, max {max(walks)} (load + walk, final row excluded; "
        f"S={steps}, {np.mean(accepted):.1f} accepted on average, memory latency "
        f"{fixed[0]})")

    divided = perf_call(np.random.default_rng(bench.seed), requests=cfg["perf_requests"],
                        nodes=nodes, steps=steps, acc=0.5)
    run = await run_call(bench, divided, latency=fixed)
    walks = [s["walk_cycles"] for s in run["status"]]
    requests, cycles = requests + divided.batch_size, cycles + run["cycles"]
    extra["traversal with threshold_acc=0.5 (divider)"] = \
        f"mean {np.mean(walks):.0f}, max {max(walks)}"

    worst = [worst_call(nodes=nodes, steps=steps)] if steps >= 2 and nodes >= steps else []
    for call in worst:
        run = await run_call(bench, call, latency=fixed)
        requests, cycles = requests + 1, cycles + run["cycles"]
        extra["traversal worst case"] = \
            f"{run['status'][0]['walk_cycles']} cycles ({call.name})"

    vocab = min(cfg["row_vocab"], params.max_vocab_size)
    run = await run_call(bench, row_call(bench.np_rng, vocab=vocab), latency=fixed)
    row_cycles = run["status"][0]["row_cycles"]
    requests, cycles = requests + 1, cycles + run["cycles"]
    words = -(-vocab // params.lanes)
    extra["final-row elements/clock"] = (
        f"{vocab / row_cycles:.2f} (V={vocab}, lanes={params.lanes}: {row_cycles} cycles for "
        f"{words} words + {run['reads'] - words} rescanned; softmax row)")
    bench.log(f"figures: {requests} requests bit-exact with the golden; {extra}")
    write_summary(vectors=requests, cycles=cycles, latency_cycles=latency,
                  initiation_interval=interval, extra=extra)


@cocotb.test()
async def directed(dut):
    """The directed calls, random memory latency 1..4, no idle or back-pressure."""
    bench = await KernelBench.start(dut, RejectSampleParams)
    params = bench.params
    calls = directed_calls(params.lanes, params.max_nodes, params.max_steps)
    for call in calls:
        await run_call(bench, call, latency=(1, 4))
    requests = sum(call.batch_size for call in calls)
    bench.log(f"{len(calls)} directed calls ({requests} requests) bit-exact with the golden")
    write_summary(vectors=requests, directed_vectors=len(calls))


@cocotb.test()
async def random(dut):
    """``random_calls`` random calls with random idle, back-pressure and memory latency."""
    bench = await KernelBench.start(dut, RejectSampleParams)
    params, cfg = bench.params, bench.cfg
    modes = {"sampling": 0, "lfsr": 0, "greedy": 0}
    for index in range(cfg["random_calls"]):
        call = random_call(bench.np_rng, name=f"random call {index}",
                           max_nodes=params.max_nodes, max_steps=params.max_steps,
                           lanes=params.lanes, max_vocab=min(300, params.max_vocab_size))
        await run_call(bench, call, latency=(1, cfg["max_latency"]), seed=index, **bench.stress)
        modes[call.mode] += call.batch_size
    requests = sum(modes.values())
    bench.log(f"{cfg['random_calls']} random calls ({requests} requests) bit-exact with the "
              "golden, stressed")
    write_summary(vectors=requests, random_vectors=cfg["random_calls"],
                  extra={"random requests": ", ".join(f"{key} {value}"
                                                      for key, value in modes.items())})


@cocotb.test()
async def lfsr(dut):
    """``lfsr_trials`` requests of the golden's lossless-check tree with LFSR coins from
    distinct seeds (one call), stressed like ``random``."""
    bench = await KernelBench.start(dut, RejectSampleParams)
    trials = bench.cfg["lfsr_trials"]
    calls = [lossless_call(bench.np_rng, trials)] if trials else []
    for call in calls:
        await run_call(bench, call, latency=(1, bench.cfg["max_latency"]), **bench.stress)
    bench.log(f"{trials} LFSR trials bit-exact with the golden")
    write_summary(vectors=trials,
                  extra={"LFSR trials": f"{trials} (lossless-check tree, distinct seeds)"})


@cocotb.test()
async def case(dut):
    """The case file's call alone: RTL == golden == the case's ``expected_*``."""
    bench = await KernelBench.start(dut, RejectSampleParams)
    path = bench.cfg["case"]
    call = call_from_case(path)
    _check_fits(bench.params, call)
    file_expected = call.notes["expected"]
    problems = compare(call, expected(call), file_expected)
    assert not problems, "golden differs from the case's expected tensors:\n" + \
        "\n".join(problems)
    run = await run_call(bench, call, latency=(1, 8))
    bench.log(f"case {path}: RTL == golden" + (" == expected tensors" if file_expected else "")
              + f" ({call.mode}, B={call.batch_size}, n={call.nodes}, S={call.steps}, "
                f"V={call.vocab_size})")
    write_summary(vectors=call.batch_size, cycles=run["cycles"],
                  extra={"case": str(path), "mode": call.mode,
                         "n, S, V": [call.nodes, call.steps, call.vocab_size],
                         "expected tensors": ", ".join(sorted(file_expected)) or "absent"})


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one verify step (``config["measure"]``), docs/contributing.md.

    The ``batch`` requests of ``generators.verify_step_call`` at the point (seed ``seed``,
    sampling mode, target rows of ``V = vocab``) back to back, without idle or back-pressure,
    the ``target_probs`` memory answering every read after a fixed ``figure_latency`` clocks;
    checked against the golden. Bytes: every stream and memory port's transfers
    (``read_data`` in, ``read_address`` out).
    """
    bench = await KernelBench.start(dut, RejectSampleParams)
    call = verify_step_call(seed=bench.seed, **bench.cfg["measure"])
    _check_fits(bench.params, call)
    latency = bench.cfg["figure_latency"]
    run = await run_call(bench, call, latency=(latency, latency), seed=bench.seed)
    at = run["at"]
    batch, vocab = call.batch_size, call.vocab_size
    accepted = len(at["result"]) - batch  # a request's packet: accepted + 1 beats
    decisions = accepted + len(at["draft_write"])  # every rejected sibling is written
    walks = [status["walk_cycles"] for status in run["status"]]
    rows = [status["row_cycles"] for status in run["status"]]
    bench.measurement(
        at, INPUTS, OUTPUTS, operations=3 * decisions + batch * (2 * vocab + 1),
        invocations=batch, interval_of=run["ends"],
        notes=f"B={batch} requests one after the other, n={call.nodes}, S={call.steps}, "
              f"V={vocab}, sampling mode (thresholds 1.0): {accepted} accepted, "
              f"{len(at['draft_write'])} rejected siblings, {len(at['read_address'])} "
              f"memory reads; target_probs memory at a fixed latency of {latency} clocks; "
              f"per request: walk {min(walks)}..{max(walks)} cycles, final row "
              f"{min(rows)}..{max(rows)} cycles ({bench.params.lanes} lanes)")
    write_summary(requests=batch)
