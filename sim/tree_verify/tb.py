"""cocotb testbench: the fused verify ``TreeVerify`` against
``golden.tree_speculative_sampling_from_logits`` and ``draft_tree_reject_sample_from_logits``.

Configuration: ``parameters`` (the DUT's), ``random_calls``, ``max_vocab`` (``V`` of the
random and directed calls), ``idle``/``backpressure``, ``max_latency`` (random memory latency
``1..max_latency`` per burst), ``figure_latency`` (the fixed latency of the figures and the
measurement), ``seed``, ``case`` (the ``case`` test) and ``measure`` (the ``measurement`` test).

Tests (phases): ``figures`` (one verify step of the serving tree at ``V = 32000``, B = 2, no idle
or back-pressure, fixed memory latency), ``directed``, ``random`` (random calls, then the
directed ones, under random idle and back-pressure on every stream and read port and random
memory latency), ``case`` (RTL == golden == the case's ``expected_*``), ``measurement`` (one
verify step of a benchmark contract point). Every call's outputs (``predicts``,
``accept_index``, ``accept_token_num``, the NaN flags) are rebuilt from the ``result`` packets
and compared whole with the golden's; the rows each request read (``status.rows``) and the
words the read ports moved are checked against the golden's ``rows_read``; without stress (a
fixed memory latency, no idle or back-pressure) every request's ``status.cycles`` equals the
schedule formula (``sim.tree_verify.schedule``).
"""

import cocotb

from hw.kernels.tree_verify import V80_BUILD
from hw.kernels.tree_verify_params import TreeVerifyParams
from sim.bench import KernelBench, PacketSink, write_summary
from sim.cocotb_tb import BurstReadMemory
from sim.tree_verify.cases import call_from_case
from sim.tree_verify.generators import directed_calls, random_call, verify_step_call
from sim.tree_verify.memory import MemoryImage
from sim.tree_verify.results import OUTPUTS, compare, expected
from sim.tree_verify.schedule import call_cycles
from sim.tree_verify.streams import feeds, outputs_from_dut

INPUTS = ("cmd", "tree")


def _port(index: int) -> str:
    return f"read__{index}"


async def run_calls(bench, calls, *, latency=(1, 1), idle=0.0, backpressure=0.0) -> dict:
    """Drive ``calls`` one after the other (the read ports answering after ``latency = (low,
    high)`` clocks) and check each against the golden; returns the last call's figures:
    ``cycles``, per-request ``status``, result packet ``ends``, the memory ports' beats and
    the acceptance cycles ``at`` of every port (the read ports' data beats under
    ``read__<p>``)."""
    params = bench.params
    for number, call in enumerate(calls):
        memory = MemoryImage(call, params, seed=bench.seed + number)
        ports = [BurstReadMemory(bench.dut, _port(p), memory.word, data_bits=params.port_bits,
                                 latency=latency, idle=idle, backpressure=backpressure,
                                 rng=bench.rng) for p in range(params.read_ports)]
        result = PacketSink(bench, "result", call.batch_size, backpressure=backpressure)
        want = expected(call)
        rows = sum(len(r) for r in want["rows_read"])
        words = -(-call.vocab_size // params.port_logits)
        work = (call.batch_size * (call.nodes * 120 + 400) + rows * (4 * words + 80
                + 40 * latency[1]) + (call.batch_size * 160 * words if call.top_k is not None
                                      or call.top_p is not None else 0))
        run = await bench.run(feeds(params, call), {}, work=work, idle=idle,
                              backpressure=backpressure, endpoints=(*ports, result))
        result.finish()
        got = outputs_from_dut(call, result.packets)
        problems = compare(call, want, got)
        assert not problems, "\n".join(problems)
        assert [s["rows"] for s in result.status] == [len(r) for r in want["rows_read"]], \
            f"{call.name}: rows read {[s['rows'] for s in result.status]}, the golden's " \
            f"{[len(r) for r in want['rows_read']]}"
        beats = sum(port.beats for port in ports)
        assert beats == memory.read_words(want["rows_read"]), \
            f"{call.name}: {beats} words read, the golden's rows are " \
            f"{memory.read_words(want['rows_read'])}"
        if latency[0] == latency[1] and not idle and not backpressure:
            formula = call_cycles(params, call, want["traces"], latency=latency[0])
            assert [s["cycles"] for s in result.status] == formula, \
                f"{call.name}: cycles per request {[s['cycles'] for s in result.status]}, " \
                f"the schedule formula (docs/tree_verify.md) gives {formula}"
    return {"cycles": run.cycles, "status": result.status, "ends": result.ends,
            "beats": beats, "want": want, "memory": memory,
            "at": {**run.at, **{port.name: port.data_at for port in ports},
                   "result": result.accepted_at}}


async def check_calls(bench, calls, **stress):
    """``run_calls`` for ``KernelBench.check_calls`` (random memory latency when stressed)."""
    latency = (1, bench.cfg["max_latency"]) if stress else (1, 1)
    await run_calls(bench, calls, latency=latency, **stress)


def _step_figures(bench, run, call) -> dict:
    """Per-request cycles and rows of a verify-step run, and its first result latency."""
    status = run["status"]
    return {"cycles per request": [s["cycles"] for s in status],
            "rows per request": [s["rows"] for s in status],
            "accepted": [int(x) for x in run["want"]["accept_token_num"]],
            "V": call.vocab_size, "lanes": bench.params.lanes}


@cocotb.test()
async def figures(dut):
    """One verify step of the serving tree (n = 64, S = 6) at ``V = 32000``, B = 2, without
    idle or back-pressure, the memory at ``figure_latency``."""
    bench = await KernelBench.start(dut, TreeVerifyParams)
    fixed = (bench.cfg["figure_latency"],) * 2
    call = verify_step_call(seed=bench.seed, batch=2, node_top_k=8, tree_width=8, depth=5,
                            verify_num=64, vocab=min(32000, bench.params.max_vocab_size))
    run = await run_calls(bench, [call], latency=fixed)
    at = run["at"]
    latency = run["ends"][0] - at["cmd"][0]
    interval = (run["ends"][-1] - run["ends"][0]) / (len(run["ends"]) - 1)
    figures = _step_figures(bench, run, call)
    bench.log(f"verify step figures: {figures}")
    write_summary(vectors=1, requests=call.batch_size, cycles=run["cycles"],
                  latency_cycles=latency, initiation_interval=interval,
                  extra={"serving tree, V = 32000": figures})


@cocotb.test()
async def directed(dut):
    """The directed calls, no idle or back-pressure."""
    bench = await KernelBench.start(dut, TreeVerifyParams)
    p = bench.params
    calls = directed_calls(max_nodes=p.max_nodes, max_steps=p.max_steps,
                           max_vocab=min(bench.cfg["max_vocab"], p.max_vocab_size),
                           logit_format=p.logit_format)
    await bench.check_calls(check_calls, directed=calls)


@cocotb.test()
async def random(dut):
    """``random_calls`` random calls, then the directed ones, under random idle,
    back-pressure and memory latency."""
    bench = await KernelBench.start(dut, TreeVerifyParams)
    p = bench.params
    vocab = min(bench.cfg["max_vocab"], p.max_vocab_size)
    calls = [random_call(bench.np_rng, max_nodes=p.max_nodes, max_steps=p.max_steps,
                         max_vocab=vocab, logit_format=p.logit_format,
                         name=f"random call {i}") for i in range(bench.cfg["random_calls"])]
    await bench.check_calls(check_calls, random=calls,
                            directed=directed_calls(max_nodes=p.max_nodes,
                                                    max_steps=p.max_steps, max_vocab=vocab,
                                                    logit_format=p.logit_format),
                            stressed=True)


@cocotb.test()
async def case(dut):
    """The case file's call alone: RTL == golden == the case's ``expected_*``."""
    bench = await KernelBench.start(dut, TreeVerifyParams)
    call = call_from_case(bench.cfg["case"])
    file_expected = call.notes.get("expected", {})

    async def run(bench, calls):
        return type("Run", (), {"at": (await run_calls(bench, calls, latency=(1, 8)))["at"]})

    await bench.replay_case(run, call, expected(call), file_expected, OUTPUTS,
                            last_port="result", batch_size=call.batch_size,
                            mode=call.mode, n=call.nodes, S=call.steps, V=call.vocab_size)


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one verify step (``config["measure"]``), docs/contributing.md.

    The ``batch`` requests of ``generators.verify_step_call`` at the point (seed ``seed``)
    back to back, without idle or back-pressure, every read port answering after a fixed
    ``figure_latency`` clocks; checked against the golden and, per request, against the
    schedule formula. The record reports the V80 build (``V80_BUILD``) by the formula on the
    same walks (``source`` says so; the simulated build's figures under ``simulated``). Bytes
    in: the read ports' data beats and the ``cmd``/``tree`` beats; out: the ``result`` beats.
    """
    bench = await KernelBench.start(dut, TreeVerifyParams)
    p = bench.params
    call = verify_step_call(seed=bench.seed, **bench.cfg["measure"])
    latency = bench.cfg["figure_latency"]
    run = await run_calls(bench, [call], latency=(latency, latency))
    want, at = run["want"], run["at"]
    rows = sum(len(r) for r in want["rows_read"])
    beats = {name: len(at[name]) for name in (_port(i) for i in range(p.read_ports))}
    logit_bytes = sum(beats.values()) * p.port_bytes
    v80 = TreeVerifyParams(**V80_BUILD)
    assert logit_bytes == rows * -(-call.vocab_size * v80.logit_bits // v80.port_bits) \
        * v80.port_bytes, "the V80 build would read other bytes"
    per_request = [s["cycles"] for s in run["status"]]
    assert sum(per_request) == run["ends"][-1] - at["cmd"][0] + 1, "gaps between requests"
    formula = call_cycles(v80, call, want["traces"], latency=latency)
    slow = call_cycles(v80, call, want["traces"], latency=bench.cfg["hbm_latency"])
    b, n, vocab = call.batch_size, call.nodes, call.vocab_size
    sglang = 12 * b * n * vocab + 8 * b * vocab
    bench.measurement(
        at, INPUTS, ("result",), operations=0, invocations=b,
        read_bytes={name: count * p.port_bytes for name, count in beats.items()},
        extra={"cycles": sum(formula), "initiation_interval": sum(formula) / b,
               "rows_read": rows, "logit_bytes": logit_bytes,
               "source": f"schedule formula (docs/tree_verify.md) for the V80 build "
                         f"({v80.read_ports} ports x {v80.port_bits} bits, "
                         f"{v80.logit_format}, {v80.lanes} lanes) on the golden's walks; "
                         f"equal to the simulated cycles of the measured build "
                         f"({p.read_ports} x {p.port_bits} bits, {p.lanes} lanes) per request",
               "simulated": {"cycles": sum(per_request), "per_request": per_request,
                             "lanes": p.lanes, "read_ports": p.read_ports,
                             "port_bits": p.port_bits, "logit_format": p.logit_format}},
        notes=f"B={b} requests one after the other, n={n}, S={call.steps}, V={vocab}, "
              f"bfloat16 logits, temperature 1, top-k/top-p off; accepted "
              f"{want['accept_token_num'].tolist()}, {rows} rows read ({logit_bytes:,} bytes "
              f"of logits); V80 build by formula: {formula} cycles per request at a memory "
              f"latency of {latency} clocks, {slow} at {bench.cfg['hbm_latency']}; simulated "
              f"{p.lanes}-lane build: {per_request}. SGLang's path moves 12*B*n*V + 8*B*V = "
              f"{sglang:,} bytes (float32 softmax read and write, zero-filled draft_probs, the "
              f"final rows' target/draft reads): {sglang / logit_bytes:.0f}x these bytes "
              f"({sglang / (2 * logit_bytes):.0f}x with float32 logits)")
