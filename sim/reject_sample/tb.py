# amaranth: UnusedElaboratable=no
"""cocotb testbench: K6 ``RejectSample`` against ``golden.tree_speculative_sampling_target_only``,
``golden.draft_tree_reject_sample`` (LFSR coins) and ``golden.verify_tree_greedy``.

Configuration (from the harness): ``parameters`` (the DUT's ``RejectSample`` arguments),
``random_calls``, ``lfsr_trials``, ``idle``/``backpressure`` probabilities, ``max_latency``
(random memory latency ``1..max_latency``), ``figure_latency`` (the fixed memory latency of the
figures), ``perf_requests`` (n = 64 requests of the traversal figure), ``row_vocab`` (V of the
final-row figure), ``seed``, and ``case`` when ``CASE=`` was given.

Phases: (1) figures without idle or back-pressure at a fixed memory latency: the traversal of
``perf_requests`` random n = 64, S = 8 trees (``status.walk_cycles``: load and walk, final row
excluded), the same with ``threshold_acc = 0.5`` (divider in the loop), and one softmax row of
``row_vocab`` elements (``status.row_cycles``); (2) the directed calls; (3) random calls with
random idle, back-pressure and memory latency (trees of up to ``max_nodes`` nodes, depth <= 8,
S, V, thresholds, coins from arrays and from the LFSR, greedy); (4) ``lfsr_trials`` requests of
the golden's lossless-check tree with LFSR coins from distinct seeds. Every call's outputs
(``predicts``, ``accept_index``, ``accept_token_num``, ``draft_probs``) are rebuilt from the
streams and compared whole with the golden's, float32 by bit pattern.

With a case: the case's call runs alone; the RTL must equal the golden, and the golden must
equal the case's ``expected_*`` tensors when present.

With ``measure`` (``sim.reject_sample.measure``): only the ``measurement`` test runs, one
verify step of a benchmark contract point at a fixed memory latency, checked against the
golden; the summary's ``measurement`` holds cycles, port bytes and operations.
"""

import random
from collections import deque

import cocotb
import numpy as np

from hw.kernels.reject_sample import RejectSample
from sim.cocotb_tb import (
    StreamBench,
    StreamSink,
    StreamSource,
    config,
    start_clock_and_reset,
    write_summary,
)
from sim.payload import pack, unpack
from sim.reject_sample.vectors import (
    MemoryImage,
    call_from_case,
    commands,
    compare,
    directed_calls,
    expected,
    lossless_call,
    outputs_from_dut,
    perf_call,
    random_call,
    row_call,
    tree_beats,
    verify_step_call,
    worst_call,
)
from sim.targets import port_bytes


class TargetMemory:
    """The ``target_probs`` read port: accepts word addresses (random back-pressure) and
    answers each ``latency`` clocks later (random in a range), in order, random idle on top."""

    def __init__(self, dut, memory: MemoryImage, *, latency, idle, backpressure, rng):
        self.memory = memory
        self.latency = latency
        self.idle = idle
        self.backpressure = backpressure
        self._rng = rng
        self._address_valid = dut.read_address__valid
        self._address_ready = dut.read_address__ready
        self._address = dut.read_address__payload
        self._data_valid = dut.read_data__valid
        self._data_ready = dut.read_data__ready
        self._data = dut.read_data__payload
        self._queue = deque()  # (due cycle, word)
        self._offering = False
        self._ready_now = False
        self._now = 0
        self.reads = 0
        self.address_at = []  # acceptance cycles of read_address and read_data beats
        self.data_at = []
        self._address_ready.value = 0
        self._data_valid.value = 0

    @property
    def done(self):
        return not self._queue

    def drive(self):
        self._ready_now = self.backpressure <= 0 or self._rng.random() >= self.backpressure
        self._address_ready.value = int(self._ready_now)
        if self._offering:
            return
        if self._queue and self._queue[0][0] <= self._now and (
                self.idle <= 0 or self._rng.random() >= self.idle):
            self._data.value = self._queue[0][1]
            self._data_valid.value = 1
            self._offering = True
        else:
            self._data_valid.value = 0

    def sample(self, cycle):
        if self._offering and self._data_ready.value:
            self._queue.popleft()
            self._offering = False
            self.data_at.append(cycle)
        if self._ready_now and self._address_valid.value:
            word = self.memory.word(self._address.value.to_unsigned())
            due = max(cycle + self._rng.randint(*self.latency),
                      self._queue[-1][0] if self._queue else 0)
            self._queue.append((due, sum(v << (32 * j) for j, v in enumerate(word))))
            self.reads += 1
            self.address_at.append(cycle)
        self._now = cycle + 1


class ResultSink(StreamSink):
    """``result`` packets; reads ``status`` the clock after each packet's last beat."""

    def __init__(self, dut, kernel, *, backpressure, rng):
        super().__init__(dut, "result", backpressure=backpressure, rng=rng)
        self._kernel = kernel
        self._status = dut.status
        self.packets = []
        self.status = []
        self.ends = []
        self._current = []
        self._status_due = False

    def read_status(self):
        fields = unpack(self._kernel.status_layout, [self._status.value.to_unsigned()])
        self.status.append({key: int(value[0]) for key, value in fields.items()})
        self._status_due = False

    def sample(self, cycle):
        if self._status_due:
            self.read_status()
        before = len(self.items)
        super().sample(cycle)
        for word in self.items[before:]:
            beat = {k: int(v[0]) for k, v in unpack(self._kernel.result_layout, [word]).items()}
            self._current.append(beat)
            if beat["last"]:
                self.packets.append(self._current)
                self._current = []
                self.ends.append(cycle)
                self._status_due = True

    def finish(self):
        if self._status_due:
            self.read_status()


def _fields_to_words(layout, rows: list[dict]) -> list[int]:
    return pack(layout, len(rows), **{key: [row[key] for row in rows] for key in rows[0]})


async def run_call(dut, kernel, call, *, idle=0.0, backpressure=0.0, latency=(1, 1), rng=None,
                   seed=0) -> dict:
    """Drive one call through the kernel, check its outputs against the golden; return the
    figures of the run (cycles, per-request status, acceptance cycles)."""
    rng = rng or random.Random(seed)
    memory = MemoryImage(call, kernel.lanes, seed=seed)
    cmd = StreamSource(dut, "cmd", idle=idle, rng=rng)
    tree = StreamSource(dut, "tree", idle=idle, rng=rng)
    cmd.send(_fields_to_words(kernel.cmd_layout, commands(call, kernel.lanes)))
    tree.send(_fields_to_words(kernel.tree_layout,
                               [beat for req in range(call.batch_size)
                                for beat in tree_beats(call, req)]))
    port = TargetMemory(dut, memory, latency=latency, idle=idle, backpressure=backpressure,
                        rng=rng)
    result = ResultSink(dut, kernel, backpressure=backpressure, rng=rng)
    draft = StreamSink(dut, "draft_write", backpressure=backpressure, rng=rng)
    bench = StreamBench(dut, [cmd, tree, port, result, draft])
    per_request = call.nodes * (12 + latency[1]) + 6 * (-(-call.vocab_size // kernel.lanes)) \
        + 40 * latency[1] + 600
    timeout = int(call.batch_size * per_request / (1 - max(idle, backpressure)) ** 2) + 2000
    cycles = await bench.run(
        lambda: len(result.packets) == call.batch_size and cmd.done and tree.done,
        timeout_cycles=timeout)
    result.finish()
    assert port.done, f"{call.name}: memory answers left unread"
    writes = [{k: int(v[i]) for k, v in unpack(kernel.draft_layout, draft.items).items()}
              for i in range(len(draft.items))]
    wanted = expected(call)
    problems = compare(call, outputs_from_dut(call, memory, result.packets, writes), wanted)
    assert not problems, "\n".join(problems)
    return {"cycles": cycles, "status": result.status, "cmd_at": cmd.accepted_at,
            "ends": result.ends, "reads": port.reads, "requests": call.batch_size,
            "transfers": {"cmd": cmd.accepted_at, "tree": tree.accepted_at,
                          "read_data": port.data_at, "read_address": port.address_at,
                          "draft_write": draft.accepted_at, "result": result.accepted_at}}


def _check_ports(dut, kernel):
    for name, layout in (("cmd", kernel.cmd_layout), ("tree", kernel.tree_layout),
                         ("result", kernel.result_layout),
                         ("draft_write", kernel.draft_layout)):
        width = len(getattr(dut, f"{name}__payload"))
        assert width == layout.size, (
            f"port {name}: {width} bits, but RejectSample(**parameters) has {layout.size}: "
            "the configuration does not describe this model")


def _check_limits(kernel, call):
    limits = ((call.nodes, kernel.max_nodes, "n", "max_nodes"),
              (call.steps, kernel.max_steps, "S", "max_steps"),
              (call.vocab_size, kernel.max_vocab_size, "V", "max_vocab_size"))
    for value, limit, name, parameter in limits:
        if value > limit:
            raise AssertionError(f"the case has {name} = {value}; this model is built with "
                                 f"{parameter} = {limit}")


async def _replay_case(dut, kernel, path, rng):
    call = call_from_case(path)
    _check_limits(kernel, call)
    wanted = expected(call)
    file_expected = call.notes.get("expected", {})
    problems = compare(call, wanted, file_expected) if file_expected else []
    assert not problems, "golden differs from the case's expected tensors:\n" + \
        "\n".join(problems)
    run = await run_call(dut, kernel, call, latency=(1, 8), rng=rng)
    dut._log.info(f"case {path}: RTL == golden"
                  + (" == expected tensors" if file_expected else "")
                  + f" ({call.mode}, B={call.batch_size}, n={call.nodes}, S={call.steps}, "
                    f"V={call.vocab_size})")
    write_summary(vectors=call.batch_size, cycles=run["cycles"],
                  extra={"case": str(path), "mode": call.mode,
                         "expected tensors": ", ".join(sorted(file_expected)) or "absent"})


@cocotb.test()
async def reject_sample_matches_golden(dut):
    cfg = config()
    if "measure" in cfg:  # a `measure` run (sim.reject_sample.measure): measurement only
        return
    kernel = RejectSample(**cfg["parameters"])
    _check_ports(dut, kernel)
    seed = cfg["seed"]
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    await start_clock_and_reset(dut)

    if "case" in cfg:
        await _replay_case(dut, kernel, cfg["case"], rng)
        return

    lanes = kernel.lanes
    fixed = (cfg["figure_latency"], cfg["figure_latency"])
    requests = 0
    total_cycles = 0
    extra = {}

    # (1) Figures: no idle, no back-pressure, fixed memory latency.
    nodes = min(64, kernel.max_nodes)
    steps = min(8, kernel.max_steps)
    perf = perf_call(np_rng, requests=cfg["perf_requests"], nodes=nodes, steps=steps)
    run = await run_call(dut, kernel, perf, latency=fixed, rng=rng)
    walks = [s["walk_cycles"] for s in run["status"]]
    accepted = [int(n) for n in expected(perf)["accept_token_num"]]
    starts, ends = run["cmd_at"], run["ends"]
    latency = ends[0] - starts[0]
    interval = (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else float("nan")
    requests += run["requests"]
    total_cycles += run["cycles"]
    extra[f"traversal cycles/request (n={nodes})"] = (
        f"mean {np.mean(walks):.0f}, max {max(walks)} (load + walk, final row excluded; "
        f"S={steps}, {np.mean(accepted):.1f} accepted on average, memory latency "
        f"{fixed[0]})")
    divided = perf_call(np.random.default_rng(seed), requests=cfg["perf_requests"],
                        nodes=nodes, steps=steps, acc=0.5)
    run = await run_call(dut, kernel, divided, latency=fixed, rng=rng)
    walks = [s["walk_cycles"] for s in run["status"]]
    requests += run["requests"]
    total_cycles += run["cycles"]
    extra["traversal with threshold_acc=0.5 (divider)"] = (
        f"mean {np.mean(walks):.0f}, max {max(walks)}")
    if steps >= 2 and nodes >= steps:
        worst = worst_call(nodes=nodes, steps=steps)
        run = await run_call(dut, kernel, worst, latency=fixed, rng=rng)
        requests += run["requests"]
        total_cycles += run["cycles"]
        extra["traversal worst case"] = (f"{run['status'][0]['walk_cycles']} cycles "
                                         f"({worst.name})")
    vocab = min(cfg["row_vocab"], kernel.max_vocab_size)
    row = row_call(np_rng, vocab=vocab)
    run = await run_call(dut, kernel, row, latency=fixed, rng=rng)
    row_cycles = run["status"][0]["row_cycles"]
    requests += 1
    total_cycles += run["cycles"]
    words = -(-vocab // lanes)
    extra["final-row elements/clock"] = (
        f"{vocab / row_cycles:.2f} (V={vocab}, lanes={lanes}: {row_cycles} cycles for "
        f"{words} words + {run['reads'] - words} rescanned; softmax row)")

    # (2) Directed calls.
    directed = directed_calls(lanes, kernel.max_nodes, kernel.max_steps)
    for call in directed:
        run = await run_call(dut, kernel, call, latency=(1, 4), rng=rng)
        requests += run["requests"]
        total_cycles += run["cycles"]

    # (3) Random calls with random idle, back-pressure and memory latency.
    stress = {"idle": cfg["idle"], "backpressure": cfg["backpressure"],
              "latency": (1, cfg["max_latency"])}
    modes = {"sampling": 0, "lfsr": 0, "greedy": 0}
    for index in range(cfg["random_calls"]):
        call = random_call(np_rng, name=f"random call {index}", max_nodes=kernel.max_nodes,
                           max_steps=kernel.max_steps, lanes=lanes,
                           max_vocab=min(300, kernel.max_vocab_size))
        run = await run_call(dut, kernel, call, rng=rng, seed=index, **stress)
        modes[call.mode] += call.batch_size
        requests += run["requests"]
        total_cycles += run["cycles"]

    # (4) LFSR coins, many trials, bit-identical with the golden for the same seeds.
    if cfg["lfsr_trials"]:
        trials = lossless_call(np_rng, cfg["lfsr_trials"])
        run = await run_call(dut, kernel, trials, rng=rng, **stress)
        requests += run["requests"]
        total_cycles += run["cycles"]
        extra["LFSR trials"] = f"{cfg['lfsr_trials']} (lossless-check tree, distinct seeds)"

    extra["random requests"] = ", ".join(f"{key} {value}" for key, value in modes.items())
    dut._log.info(f"{requests} requests bit-exact with the golden")
    write_summary(vectors=requests, directed_vectors=len(directed),
                  random_vectors=cfg["random_calls"], cycles=total_cycles,
                  latency_cycles=latency, initiation_interval=interval, extra=extra)


INPUTS = ("cmd", "tree", "read_data")  # read_data: the memory port's answers
OUTPUTS = ("read_address", "draft_write", "result")  # read_address: the memory requests


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one verify step (``config["measure"]``), docs/contributing.md.

    The ``batch`` requests of ``vectors.verify_step_call`` at the point (seed ``seed``,
    sampling mode, target rows of ``V = vocab``) back to back, without idle or back-pressure,
    the ``target_probs`` memory answering every read after a fixed ``figure_latency`` clocks;
    checked against the golden (``run_call``). Cycles: first input transfer to last output
    transfer (the final rows' residual streams included); bytes: ``port_bytes`` of every
    stream and memory port's transfers (``read_data`` in, ``read_address`` out).
    """
    cfg = config()
    if "measure" not in cfg:
        return
    kernel = RejectSample(**cfg["parameters"])
    _check_ports(dut, kernel)
    rng = random.Random(cfg["seed"])
    await start_clock_and_reset(dut)

    call = verify_step_call(seed=cfg["seed"], **cfg["measure"])
    _check_limits(kernel, call)
    latency = cfg["figure_latency"]
    run = await run_call(dut, kernel, call, latency=(latency, latency), rng=rng,
                         seed=cfg["seed"])
    at = run["transfers"]
    widths = {"cmd": len(dut.cmd__payload), "tree": len(dut.tree__payload),
              "read_data": len(dut.read_data__payload),
              "read_address": len(dut.read_address__payload),
              "draft_write": len(dut.draft_write__payload),
              "result": len(dut.result__payload)}
    ports = {name: port_bytes(len(at[name]), widths[name]) for name in INPUTS + OUTPUTS}
    batch, vocab = call.batch_size, call.vocab_size
    accepted = len(at["result"]) - batch  # a request's packet: accepted + 1 beats
    decisions = accepted + len(at["draft_write"])  # every rejected sibling is written
    ends = run["ends"]
    walks = [status["walk_cycles"] for status in run["status"]]
    rows = [status["row_cycles"] for status in run["status"]]
    measurement = {
        "cycles": max(at[name][-1] for name in OUTPUTS if at[name])
        - min(at[name][0] for name in INPUTS if at[name]) + 1,
        "bytes_in": sum(ports[name] for name in INPUTS),
        "bytes_out": sum(ports[name] for name in OUTPUTS),
        "operations": 3 * decisions + batch * (2 * vocab + 1),
        "invocations": batch,
        "ports": ports,
        "notes": f"B={batch} requests one after the other, n={call.nodes}, S={call.steps}, "
                 f"V={vocab}, sampling mode (thresholds 1.0): {accepted} accepted, "
                 f"{len(at['draft_write'])} rejected siblings, {len(at['read_address'])} "
                 f"memory reads; target_probs memory at a fixed latency of {latency} clocks; "
                 f"per request: walk {min(walks)}..{max(walks)} cycles, final row "
                 f"{min(rows)}..{max(rows)} cycles ({kernel.lanes} lanes)",
    }
    if batch > 1:
        measurement["initiation_interval"] = (ends[-1] - ends[0]) / (batch - 1)
    dut._log.info(f"measurement: {measurement}")
    write_summary(vectors=1, requests=batch, cycles=measurement["cycles"],
                  measurement=measurement)
