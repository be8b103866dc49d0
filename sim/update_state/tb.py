"""cocotb testbench: the K2 kernel (``UpdateCumuDraftState``) against the golden model.

Configuration: ``parameters`` (the DUT's), ``seed``, ``figure_requests`` (the ``figures``
phase, at least 1), ``random_requests`` and ``requests_per_batch`` (random requests sent back
to back between dumps), ``idle``/``backpressure``, ``case`` (the ``case`` test) and
``measure`` (the ``measurement`` test). Every check loads whole slot states through the host
port, runs requests, dumps the whole slot states back and compares every buffer, sentinels
included, by bit pattern with the golden model (and with the ``expected_*`` tensors of a case).

Tests (phases):

* ``figures``: back-to-back requests at ``W = max_tree_width``, ``verify_num = 64`` (clamped to
  ``MAXV``), no idle or back-pressure; cycles per request (the ``done`` interval) and the
  latency from a request's first beat to its ``done``.
* ``capture``: the CUDA capture ``cost_draft_tree_update_case``, one request per slot, vs its
  ``expected_*`` and the golden (a plain run leaves it out on a build that cannot hold it,
  ``sim.update_state.UpdateStateTarget.run``).
* ``directed``: ``vectors.directed_cases`` with random idle and back-pressure on the requests.
* ``random``: chained random requests over all slots, idle and back-pressure everywhere.
* ``case``: a case file (``CASE=``), as ``capture``.
* ``measurement``: one draft round of a benchmark contract point (the cycle budget).
"""

import cocotb
import numpy as np

from hw.kernels.update_state import Region, UpdateStateParams
from sim.bench import KernelBench, write_summary

from . import CAPTURE
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
    request_beats,
    state_shapes,
)
from .vectors import directed_cases, random_request, random_state, read_update_case, sentinel_state


class Slots:
    """K2 on a ``KernelBench``: slot states loaded and dumped over the host port, requests
    sent back to back. ``clock`` counts the clocks of every run, ``at`` holds each port's
    acceptance cycles on that count (one time line across the runs)."""

    def __init__(self, bench):
        self.bench = bench
        self.params = bench.params
        self.known = {}  # slot -> state it holds (after a full load or a dump)
        self.clock = 0
        self.at = {name: [] for name in bench.ports}
        self.idle = self.backpressure = 0.0
        self.host_stressed = False

    def stress(self, idle, backpressure, *, host=True):
        """Random idle cycles on the inputs and back-pressure on the outputs of the request
        runs (``host``: of the host-port runs too)."""
        self.idle, self.backpressure, self.host_stressed = idle, backpressure, host

    async def _run(self, feeds, counts, *, work, stressed):
        run = await self.bench.run(feeds, counts, work=work,
                                   idle=self.idle if stressed else 0.0,
                                   backpressure=self.backpressure if stressed else 0.0)
        start = self.clock
        for name, cycles in run.at.items():
            self.at[name] += [start + cycle for cycle in cycles]
        self.clock += run.cycles
        return run, start

    async def host(self, words):
        """Send host commands; return their answers once all arrived."""
        run, _ = await self._run({"host_cmd": words}, {"host_rsp": len(words)},
                                 work=10 * len(words) + 100, stressed=self.host_stressed)
        return run.items["host_rsp"]

    async def load(self, slot, state):
        """Write ``state`` into ``slot``; only the elements that differ from what the slot is
        known to hold (its last dump, or its last full load)."""
        answers = await self.host(load_commands(self.params, slot, state, self.known.get(slot)))
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
        beats, firsts = [], []
        for slot, request in slot_requests:
            self.known.pop(slot, None)  # until its next dump
            firsts.append(len(beats))
            beats += request_beats(self.params, slot, request)
        run, start = await self._run({"req": beats}, {"done": len(slot_requests)},
                                     work=25 * len(beats) + 500 * len(slot_requests),
                                     stressed=True)
        records = [decode_done(self.params, word) for word in run.items["done"]]
        return (records, [start + run.at["req"][index] for index in firsts],
                [start + cycle for cycle in run.at["done"]])


async def _start(dut):
    bench = await KernelBench.start(dut, UpdateStateParams)
    return bench, Slots(bench)


def _check_done(record, slot, dropped, name):
    expected = {"slot": slot, "dropped": dropped, "framing_error": 0, "refused": 0}
    assert record == expected, f"{name}: done record {record}, expected {expected}"


def _assert_same(actual, expected, name):
    problems = compare_states(actual, expected, context=f"{name}: ")
    assert not problems, "\n".join(problems)


async def _replay(slots, path, name):
    """A case file through golden and RTL, one request per slot, bit for bit; the summary's
    ``extra["case"]``."""
    p = slots.params
    scalars, states, requests, expected = read_update_case(path)
    misfit = {key: (scalars[key], getattr(p, key)) for key in
              ("node_top_k", "max_node_count", "max_verify_num", "max_input_size")
              if scalars[key] != getattr(p, key)}
    if scalars["tree_width"] > p.max_tree_width:
        misfit["max_tree_width"] = (scalars["tree_width"], p.max_tree_width)
    if scalars["batch_size"] > p.max_batch:
        misfit["max_batch"] = (scalars["batch_size"], p.max_batch)
    assert not misfit, f"case {path} does not fit this kernel build (" + ", ".join(
        f"{key}: case {c} vs kernel {k}" for key, (c, k) in misfit.items()) + ")"
    golden = []
    for slot, (state, request) in enumerate(zip(states, requests, strict=True)):
        dropped = check_request(p, request)
        golden.append(golden_apply(p, state, request)[0])
        if expected is not None:
            _assert_same(golden[-1], expected[slot], f"golden vs case slot {slot}")
        await slots.load(slot, state)
    start = slots.clock
    records, _, _ = await slots.run_requests(list(enumerate(requests)))
    for slot, record in enumerate(records):
        _check_done(record, slot, check_request(p, requests[slot]), "case")
    for slot in range(len(requests)):
        dumped = await slots.dump(slot)
        _assert_same(dumped, golden[slot], f"RTL vs golden slot {slot}")
        if expected is not None:
            _assert_same(dumped, expected[slot], f"RTL vs case slot {slot}")
    slots.bench.log(f"{name}: {len(requests)} requests bit-exact with "
                    f"{'the case and ' if expected is not None else ''}the golden")
    write_summary(vectors=len(requests), cycles=slots.clock - start,
                  extra={"case": f"{name} exact ({dropped} dropped)"})


@cocotb.test()
async def figures(dut):
    """Back-to-back requests without idle or back-pressure: cycles per request."""
    bench, slots = await _start(dut)
    p = bench.params
    assert bench.cfg["figure_requests"] >= 1, "`figure_requests` must be at least 1"
    width, n = p.max_tree_width, p.max_tree_width * p.node_top_k
    verify_num = min(64, p.max_verify_num)
    base = min(21, max(p.max_node_count - n, 0))
    states = {slot: sentinel_state(p) for slot in range(p.max_batch)}
    counts = dict.fromkeys(states, base)
    for slot, state in states.items():
        await slots.load(slot, state)
    plan, expected_dropped = [], []
    for index in range(bench.cfg["figure_requests"]):
        slot = index % p.max_batch
        if counts[slot] + n > p.max_node_count:
            counts[slot] = base
        request = random_request(bench.np_rng, p, tree_width=width, cumu_count=counts[slot],
                                 verify_num=verify_num)
        expected_dropped.append(check_request(p, request))
        counts[slot] += n
        plan.append((slot, request))
        states[slot], _ = golden_apply(p, states[slot], request)
    start = slots.clock
    records, firsts, dones = await slots.run_requests(plan)
    cycles = slots.clock - start
    for (slot, _), record, dropped in zip(plan, records, expected_dropped, strict=True):
        _check_done(record, slot, dropped, "figures")
    for slot, state in states.items():
        _assert_same(await slots.dump(slot), state, f"figures slot {slot}")
    latency = dones[0] - firsts[0]
    interval = (dones[-1] - dones[0]) / (len(dones) - 1) if len(dones) > 1 else float(latency)
    label = f"K={p.node_top_k}, W={width}, verify_num={verify_num}"
    bench.log(f"K2 cycles per request ({label}): {interval:.1f} back to back, "
              f"latency {latency} cycles from first beat to done")
    write_summary(vectors=len(plan), cycles=cycles, latency_cycles=latency,
                  initiation_interval=interval,
                  extra={f"cycles/request ({label})": round(interval, 2),
                         "append+merge latency": f"{latency} cycles"})


@cocotb.test()
async def capture(dut):
    """The CUDA capture through golden and RTL, bit for bit."""
    _, slots = await _start(dut)
    await _replay(slots, CAPTURE, "CUDA capture")


@cocotb.test()
async def case(dut):
    """The case file of ``CASE=`` through golden and RTL, bit for bit."""
    bench, slots = await _start(dut)
    await _replay(slots, bench.cfg["case"], bench.cfg["case"])


@cocotb.test()
async def directed(dut):
    """The directed cases, each on a freshly loaded slot, with idle and back-pressure."""
    bench, slots = await _start(dut)
    p = bench.params
    slots.stress(bench.cfg["idle"], bench.cfg["backpressure"], host=False)
    start = slots.clock
    cases = directed_cases(p, seed=bench.seed)
    failures = []
    for name, slot, state, request in cases:
        dropped = check_request(p, request)
        expected, _ = golden_apply(p, state, request)
        await slots.load(slot, state)
        (record,), _, _ = await slots.run_requests([(slot, request)])
        _check_done(record, slot, dropped, name)
        scalars = ", ".join(f"{key}={request[key]}" for key in SCALAR_NAMES)
        failures += compare_states(await slots.dump(slot), expected,
                                   context=f"{name} (slot {slot}, {scalars}): ")
    assert not failures, "\n".join(failures)
    bench.log(f"{len(cases)} directed cases bit-exact with the golden")
    write_summary(vectors=len(cases), directed_vectors=len(cases),
                  extra={"directed cases": len(cases),
                         "directed cycles": slots.clock - start})


@cocotb.test()
async def random(dut):
    """Chained random requests over all slots, idle and back-pressure, dumps after each
    group of ``requests_per_batch``."""
    bench, slots = await _start(dut)
    p, cfg = bench.params, bench.cfg
    slots.stress(cfg["idle"], cfg["backpressure"])
    rng = np.random.default_rng(bench.seed + 1)
    states = {}
    for slot in range(p.max_batch):
        states[slot] = random_state(rng, p) if slot % 2 else sentinel_state(p)
        await slots.load(slot, states[slot])
    counts = dict.fromkeys(states, 1)
    batch = max(1, cfg["requests_per_batch"])
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
        records, _, _ = await slots.run_requests([(slot, req) for slot, req, _ in plan])
        for (slot, _, dropped), record in zip(plan, records, strict=True):
            _check_done(record, slot, dropped, f"random request {done}")
        for slot in sorted({slot for slot, _, _ in plan}):
            _assert_same(await slots.dump(slot), states[slot],
                         f"random requests up to {done + len(plan)}, slot {slot}")
        done += len(plan)
    bench.log(f"{done} random requests bit-exact with the golden")
    write_summary(vectors=done, random_vectors=done, extra={"random requests": done})


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
    bench, slots = await _start(dut)
    p, spec = bench.params, bench.cfg["measure"]
    batch, depth, width, verify_num = (spec["batch"], spec["depth"], spec["tree_width"],
                                       spec["verify_num"])
    k = p.node_top_k
    rng = bench.np_rng
    # The memories hold zeros after reset: only the root's three elements need writing.
    slots.known = {slot: {name: np.zeros_like(value) for name, value in _root_state(p).items()}
                   for slot in range(batch)}
    states = {slot: _root_state(p) for slot in range(batch)}
    frontier = dict.fromkeys(states, np.array([0], dtype=np.int64))
    operations = 0
    for slot in range(batch):
        await slots.load(slot, states[slot])
    dones = []
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
        _, _, dones = await slots.run_requests(plan)
        for slot in range(batch):
            await slots.host(dump_commands(p, slot, (Region.OUTPUT,)))
    timed = {name: list(cycles) for name, cycles in slots.at.items()}
    for slot in range(batch):
        _assert_same(await slots.dump(slot), states[slot], f"measured round, slot {slot}")
    bench.measurement(
        timed, ("req", "host_cmd"), ("done", "host_rsp"), operations=operations,
        invocations=depth, interval_of=dones,
        notes=f"{depth} calls (one per depth) of B={batch} requests, K={k}, W={width}, "
              f"verify_num={verify_num}; root writes and the K output rows per request and "
              "depth over the host port included")
