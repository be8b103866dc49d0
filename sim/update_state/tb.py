"""cocotb testbench: the K2 kernel (``UpdateCumuDraftState``) against the golden model.

Configuration (``sim.cocotb_tb.config()``): ``params`` (the DUT's parameters, so the layouts
match), ``seed``, ``figure_requests`` and ``random_requests`` (0 skips the test),
``requests_per_batch`` (random requests sent back to back between dumps), ``directed`` (False
skips the directed cases), ``idle``, ``backpressure``, and ``case`` when ``CASE=<file>`` was
given. Every check loads whole slot states through the host
port, runs requests, dumps the whole slot states back and compares every buffer, sentinels
included, by bit pattern with the golden model (and with the ``expected_*`` tensors of a case).

Tests, in order:

1. ``figures``: back-to-back requests at ``W = max_tree_width``, ``verify_num = 64`` (clamped to
   ``MAXV``), no idle or back-pressure; measures cycles per request (the ``done`` interval) and
   the latency from a request's first beat to its ``done``.
2. ``case_replay``: the case file (default: the CUDA capture ``cost_draft_tree_update_case``
   when the parameters can hold it), one request per slot, vs ``expected_*`` and the golden.
3. ``directed``: ``vectors.directed_cases`` with random idle and back-pressure.
4. ``random_requests``: chained random requests over all slots, idle and back-pressure.
"""

import random

import cocotb
import numpy as np

from hw.kernels.update_state import Region
from sim.cocotb_tb import (
    StreamBench,
    StreamSink,
    StreamSource,
    config,
    start_clock_and_reset,
    write_summary,
)
from sim.targets import port_bytes

from .host import (
    FLOAT_NAMES,
    SCALAR_NAMES,
    check_request,
    compare_states,
    decode_done,
    decode_dump,
    dump_commands,
    golden_apply,
    load_commands,
    params_from,
    request_beats,
    state_shapes,
)
from .vectors import directed_cases, random_request, random_state, read_update_case, sentinel_state

_SUMMARY = {"vectors": 0, "cycles": 0, "extra": {}}


def _report(**figures):
    for key, value in figures.items():
        if key == "extra":
            _SUMMARY["extra"].update(value)
        elif key in ("vectors", "cycles"):
            _SUMMARY[key] += value
        else:
            _SUMMARY[key] = value
    write_summary(**_SUMMARY)


class Kernel:
    """The DUT's four streams stepped by one ``StreamBench``, with host-level operations."""

    def __init__(self, dut, params, rng):
        self.params = params
        self.req = StreamSource(dut, "req", rng=rng)
        self.cmd = StreamSource(dut, "host_cmd", rng=rng)
        self.rsp = StreamSink(dut, "host_rsp", rng=rng)
        self.done = StreamSink(dut, "done", rng=rng)
        self.bench = StreamBench(dut, [self.req, self.cmd, self.rsp, self.done])
        self.log = dut._log
        self.known = {}  # slot -> state it holds (after a full load or a dump)

    def stress(self, idle, backpressure, *, host=True):
        """Random idle cycles on the inputs and back-pressure on the outputs (``host``: also on
        the host port, otherwise on the request and ``done`` streams only)."""
        self.req.idle = idle
        self.done.backpressure = backpressure
        self.cmd.idle = idle if host else 0.0
        self.rsp.backpressure = backpressure if host else 0.0

    async def host(self, words):
        """Send host commands; return their answers once all arrived."""
        start = len(self.rsp.items)
        self.cmd.send(words)
        await self.bench.run(lambda: len(self.rsp.items) == start + len(words),
                             timeout_cycles=20 * len(words) + 200)
        return self.rsp.items[start:]

    async def load(self, slot, state):
        """Write ``state`` into ``slot``; only the elements that differ from what the slot is
        known to hold (its last dump, or its last full load)."""
        known = self.known.get(slot)
        answers = await self.host(load_commands(self.params, slot, state, known))
        assert not any(answers), "a host write was not answered with zeros"
        self.known[slot] = {name: np.array(value, copy=True) for name, value in state.items()}

    async def dump(self, slot):
        """Read the whole state of ``slot`` back."""
        state = decode_dump(self.params, await self.host(dump_commands(self.params, slot)))
        self.known[slot] = state
        return state

    async def run_requests(self, slot_requests):
        """Send ``(slot, request)`` pairs back to back; return their ``done`` records and, per
        request, the cycles of its first beat and of its ``done``."""
        beats_before, done_before = len(self.req.accepted_at), len(self.done.items)
        firsts = []
        offset = beats_before
        for slot, request in slot_requests:
            self.known.pop(slot, None)  # until its next dump
            beats = request_beats(self.params, slot, request)
            firsts.append(offset)
            offset += len(beats)
            self.req.send(beats)
        total = offset - beats_before
        await self.bench.run(lambda: len(self.done.items) == done_before + len(slot_requests),
                             timeout_cycles=50 * total + 1000 * len(slot_requests))
        records = [decode_done(self.params, word) for word in self.done.items[done_before:]]
        first_cycles = [self.req.accepted_at[index] for index in firsts]
        return records, first_cycles, self.done.accepted_at[done_before:]


def _check_done(record, slot, dropped, name):
    expected = {"slot": slot, "dropped": dropped, "framing_error": 0, "refused": 0}
    assert record == expected, f"{name}: done record {record}, expected {expected}"


def _assert_same(actual, expected, name):
    problems = compare_states(actual, expected, context=f"{name}: ")
    assert not problems, "\n".join(problems)


async def _setup(dut):
    cfg = config()
    params = params_from(cfg["params"])
    await start_clock_and_reset(dut)
    return cfg, params, Kernel(dut, params, random.Random(cfg["seed"]))


def _measuring():
    """A ``measure`` run (``sim.update_state.measure``) runs only the ``measurement`` test."""
    return "measure" in config()


@cocotb.test()
async def figures(dut):
    """Back-to-back requests without idle or back-pressure: cycles per request."""
    if _measuring():
        return
    cfg, p, kernel = await _setup(dut)
    if cfg["figure_requests"] < 1:
        return
    rng = np.random.default_rng(cfg["seed"])
    width, n = p.max_tree_width, p.max_tree_width * p.node_top_k
    verify_num = min(64, p.max_verify_num)
    base = min(21, max(p.max_node_count - n, 0))
    states = {slot: sentinel_state(p) for slot in range(p.max_batch)}
    counts = dict.fromkeys(states, base)
    for slot, state in states.items():
        await kernel.load(slot, state)
    plan, expected_dropped = [], []
    for index in range(cfg["figure_requests"]):
        slot = index % p.max_batch
        if counts[slot] + n > p.max_node_count:
            counts[slot] = base
        request = random_request(rng, p, tree_width=width, cumu_count=counts[slot],
                                 verify_num=verify_num)
        expected_dropped.append(check_request(p, request))
        counts[slot] += n
        plan.append((slot, request))
        states[slot], _ = golden_apply(p, states[slot], request)
    start = kernel.bench.cycle
    records, firsts, dones = await kernel.run_requests(plan)
    cycles = kernel.bench.cycle - start
    for (slot, _), record, dropped in zip(plan, records, expected_dropped, strict=True):
        _check_done(record, slot, dropped, "figures")
    for slot, state in states.items():
        _assert_same(await kernel.dump(slot), state, f"figures slot {slot}")
    latency = dones[0] - firsts[0]
    interval = (dones[-1] - dones[0]) / (len(dones) - 1) if len(dones) > 1 else float(latency)
    label = f"K={p.node_top_k}, W={width}, verify_num={verify_num}"
    kernel.log.info(f"K2 cycles per request ({label}): {interval:.1f} back to back, "
                    f"latency {latency} cycles from first beat to done")
    _report(vectors=len(plan), cycles=cycles, latency_cycles=latency,
            initiation_interval=interval,
            extra={f"cycles/request ({label})": round(interval, 2),
                   "append+merge latency": f"{latency} cycles"})


@cocotb.test()
async def case_replay(dut):
    """A case file (default: the CUDA capture) through golden and RTL, bit for bit."""
    if _measuring():
        return
    cfg, p, kernel = await _setup(dut)
    explicit = "case" in cfg
    path = cfg["case"] if explicit else "cost_draft_tree_update_case"
    scalars, states, requests, expected = read_update_case(path)
    mismatched = {name: (scalars[name], getattr(p, name)) for name in
                  ("node_top_k", "max_node_count", "max_verify_num", "max_input_size")
                  if scalars[name] != getattr(p, name)}
    if scalars["tree_width"] > p.max_tree_width:
        mismatched["max_tree_width"] = (scalars["tree_width"], p.max_tree_width)
    if scalars["batch_size"] > p.max_batch:
        mismatched["max_batch"] = (scalars["batch_size"], p.max_batch)
    if mismatched:
        message = ", ".join(f"{name}: case {c} vs kernel {k}"
                            for name, (c, k) in mismatched.items())
        assert not explicit, f"case {path} does not fit this kernel build ({message})"
        kernel.log.info(f"default capture skipped: it does not fit this build ({message})")
        _report(extra={"capture": "skipped (parameters)"})
        return
    golden = []
    for slot, (state, request) in enumerate(zip(states, requests, strict=True)):
        dropped = check_request(p, request)
        golden.append(golden_apply(p, state, request)[0])
        if expected is not None:
            _assert_same(golden[-1], expected[slot], f"golden vs case slot {slot}")
        await kernel.load(slot, state)
    start = kernel.bench.cycle
    records, _, _ = await kernel.run_requests(list(enumerate(requests)))
    for slot, record in enumerate(records):
        _check_done(record, slot, check_request(p, requests[slot]), "case")
    for slot in range(len(requests)):
        dumped = await kernel.dump(slot)
        _assert_same(dumped, golden[slot], f"RTL vs golden slot {slot}")
        if expected is not None:
            _assert_same(dumped, expected[slot], f"RTL vs case slot {slot}")
    name = path if explicit else "CUDA capture"
    kernel.log.info(f"{name}: {len(requests)} requests bit-exact with "
                    f"{'the case and ' if expected is not None else ''}the golden")
    _report(vectors=len(requests), cycles=kernel.bench.cycle - start,
            extra={"case": f"{name} exact ({dropped} dropped)"})


@cocotb.test()
async def directed(dut):
    """The directed cases, each on a freshly loaded slot, with idle and back-pressure."""
    if _measuring():
        return
    cfg, p, kernel = await _setup(dut)
    if not cfg.get("directed", True):
        return
    kernel.stress(cfg["idle"], cfg["backpressure"], host=False)
    start = kernel.bench.cycle
    cases = directed_cases(p, seed=cfg["seed"])
    failures = []
    for name, slot, state, request in cases:
        dropped = check_request(p, request)
        expected, _ = golden_apply(p, state, request)
        await kernel.load(slot, state)
        (record,), _, _ = await kernel.run_requests([(slot, request)])
        _check_done(record, slot, dropped, name)
        scalars = ", ".join(f"{key}={request[key]}" for key in SCALAR_NAMES)
        failures += compare_states(await kernel.dump(slot), expected,
                                   context=f"{name} (slot {slot}, {scalars}): ")
    assert not failures, "\n".join(failures)
    kernel.log.info(f"{len(cases)} directed cases bit-exact with the golden")
    _report(vectors=len(cases), cycles=kernel.bench.cycle - start,
            extra={"directed cases": len(cases)})


@cocotb.test()
async def random_requests(dut):
    """Chained random requests over all slots, idle and back-pressure, dumps after each."""
    if _measuring():
        return
    cfg, p, kernel = await _setup(dut)
    if cfg["random_requests"] < 1:
        return
    kernel.stress(cfg["idle"], cfg["backpressure"])
    rng = np.random.default_rng(cfg["seed"] + 1)
    start = kernel.bench.cycle
    states = {}
    for slot in range(p.max_batch):
        states[slot] = random_state(rng, p) if slot % 2 else sentinel_state(p)
        await kernel.load(slot, states[slot])
    counts = dict.fromkeys(states, 1)
    batch = max(1, cfg.get("requests_per_batch", 3))
    done = 0
    while done < cfg["random_requests"]:
        plan = []
        for _ in range(min(batch, cfg["random_requests"] - done)):
            slot = int(rng.integers(0, p.max_batch))
            chained = rng.random() < 0.6
            request = random_request(rng, p, cumu_count=counts[slot] if chained else None,
                                     sorted_input=rng.random() < 0.9)
            plan.append((slot, request, check_request(p, request)))
            counts[slot] = request["cumu_count"] + request["tree_width"] * p.node_top_k
            if counts[slot] > p.max_node_count:
                counts[slot] = int(rng.integers(0, p.max_node_count // 2 + 1))
            states[slot], _ = golden_apply(p, states[slot], request)
        records, _, _ = await kernel.run_requests([(slot, req) for slot, req, _ in plan])
        for (slot, _, dropped), record in zip(plan, records, strict=True):
            _check_done(record, slot, dropped, f"random request {done}")
        for slot in sorted({slot for slot, _, _ in plan}):
            _assert_same(await kernel.dump(slot), states[slot],
                         f"random requests up to {done + len(plan)}, slot {slot}")
        done += len(plan)
    kernel.log.info(f"{done} random requests bit-exact with the golden")
    _report(vectors=done, cycles=kernel.bench.cycle - start,
            extra={"random requests": done})


def _root_state(p):
    """A slot before depth 1 of a round (§4): node 0 is the root with score 1.001f,
    ``sort_scores[0] = work_scores[0] = 1.001f``; everything else as after reset (zeros)."""
    state = {name: np.zeros(shape, dtype=np.float32 if name in FLOAT_NAMES
                            else np.bool_ if name == "output_tree_mask" else np.int64)
             for name, shape in state_shapes(p).items()}
    root = np.float32(1.001)
    state["cumu_tokens"][0] = 1
    state["cumu_scores"][0] = state["sort_scores"][0] = state["work_scores"][0] = root
    state["prev_indexs"][0] = state["next_indexs"][0] = state["side_indexs"][0] = -1
    return state


@cocotb.test()
async def measurement(dut):
    """The cycle budget of one draft round (``config["measure"]``), docs/contributing.md.

    Every slot ``b < batch`` starts from the memories' reset state (zeros); the host writes the
    root (node 0, ``sort_scores[0]``, ``work_scores[0]``: three commands per request), then for
    each depth ``d = 1..depth`` the batch's K2 requests run back to back (``W = 1`` and
    ``cumu_count = 1`` at depth 1, then ``W = tree_width`` and
    ``cumu_count = 1 + K + (d-2)*W*K``; ``input_count = 1 + max(d-2, 0)*W``; the frontier is
    the previous depth's best ``W`` nodes), and the host reads the ``K`` output rows of every
    request (the next frontier: scores, tokens, mask rows). Timed without idle or
    back-pressure from the first host command to the last answer; the final state of every slot
    is then dumped and checked against the golden run of the same round.
    """
    if not _measuring():
        return
    cfg, p, kernel = await _setup(dut)
    spec = cfg["measure"]
    batch, depth, width, verify_num = (spec["batch"], spec["depth"], spec["tree_width"],
                                       spec["verify_num"])
    k = p.node_top_k
    rng = np.random.default_rng(cfg["seed"])
    # The memories hold zeros after reset: only the root's three elements need writing.
    kernel.known = {slot: {name: np.zeros_like(value) for name, value in _root_state(p).items()}
                    for slot in range(batch)}
    states = {slot: _root_state(p) for slot in range(batch)}
    frontier = dict.fromkeys(states, np.array([0], dtype=np.int64))
    operations = 0
    cmd_start = len(kernel.cmd.accepted_at)
    for slot in range(batch):
        await kernel.load(slot, states[slot])
    interval = None
    for d in range(1, depth + 1):
        w = 1 if d == 1 else width
        cumu = 1 if d == 1 else 1 + k + (d - 2) * width * k
        plan = []
        for slot in range(batch):
            request = random_request(rng, p, tree_width=w, cumu_count=cumu,
                                     verify_num=verify_num,
                                     input_count=1 + max(d - 2, 0) * width, curr_depth=d)
            request["topk_indexs"] = frontier[slot][:w].copy()
            check_request(p, request)
            frontier[slot] = cumu + request["sorted_indexs"][:k]
            states[slot], _ = golden_apply(p, states[slot], request)
            n = w * k
            operations += n + min(max(min(verify_num, p.max_verify_num), 1), cumu + n)
            plan.append((slot, request))
        records, _, dones = await kernel.run_requests(plan)
        if batch > 1:
            interval = (dones[-1] - dones[0]) / (batch - 1)
        for slot in range(batch):
            await kernel.host(dump_commands(p, slot, (Region.OUTPUT,)))
    cycles = kernel.rsp.accepted_at[-1] - kernel.cmd.accepted_at[cmd_start] + 1
    ports = {
        "req": port_bytes(len(kernel.req.accepted_at), len(dut.req__payload)),
        "host_cmd": port_bytes(len(kernel.cmd.accepted_at) - cmd_start,
                               len(dut.host_cmd__payload)),
        "done": port_bytes(len(kernel.done.accepted_at), len(dut.done__payload)),
        "host_rsp": port_bytes(len(kernel.rsp.accepted_at), len(dut.host_rsp__payload)),
    }
    for slot in range(batch):
        _assert_same(await kernel.dump(slot), states[slot], f"measured round, slot {slot}")
    measurement = {
        "cycles": cycles,
        "bytes_in": ports["req"] + ports["host_cmd"],
        "bytes_out": ports["done"] + ports["host_rsp"],
        "operations": operations,
        "invocations": depth,
        "ports": ports,
        "notes": f"{depth} calls (one per depth) of B={batch} requests, K={k}, W={width}, "
                 f"verify_num={verify_num}; root writes and the K output rows per request "
                 "and depth over the host port included",
    }
    if interval is not None:
        measurement["initiation_interval"] = interval
    write_summary(vectors=batch * depth, cycles=cycles, measurement=measurement)
