"""The fused verify on Amaranth's simulator: small calls for the unit tests (no Verilator).

:func:`run_on_amaranth` drives calls through a ``TreeVerify`` instance: one clocked process
plays ``cmd``, ``tree`` and the ``result`` sink, and one :class:`ReadSlave` per read port
answers bursts from the call's memory image with random latency, ``ar`` back-pressure and
idle ``r`` cycles, checking every burst against the AXI4 rules. The outputs are compared with
the golden's (``sim.tree_verify.results``), the NaN flags and the rows read included.
"""

import random
from collections import deque
from types import SimpleNamespace

from amaranth.hdl import Value
from amaranth.sim import Simulator

from .memory import MemoryImage
from .results import compare, expected
from .streams import beats, feeds, outputs_from_dut

__all__ = ["ReadSlave", "run_on_amaranth", "simulate_with_slaves"]


class ReadSlave:
    """Answers a read port (``ar``/``r`` streams): accepts bursts (``ar.ready`` low with
    probability ``backpressure``), answers each after a latency drawn from ``latency`` clocks,
    in order, idling between beats with probability ``idle``; checks every burst (aligned, at
    most ``max_burst`` beats, within one 4 KiB page) and that ``r.ready`` stays high.
    ``lookup(address)`` gives a word."""

    def __init__(self, port, lookup, *, port_bytes, max_burst, latency=(1, 1), idle=0.0,
                 backpressure=0.0, seed=0):
        self.port, self.lookup = port, lookup
        self.port_bytes, self.max_burst = port_bytes, max_burst
        self.latency, self.idle, self.backpressure = latency, idle, backpressure
        self.rng = random.Random(seed)
        self.bursts = []  # (acceptance cycle, address, beats)
        self.beat_cycles = []

    def check(self, address, beats):
        name = f"burst {len(self.bursts)} ({beats} beats at {address:#x})"
        assert address % self.port_bytes == 0, f"{name} is not word-aligned"
        assert beats <= self.max_burst, f"{name} is longer than max_burst {self.max_burst}"
        assert address % 4096 + beats * self.port_bytes <= 4096, f"{name} crosses 4 KiB"

    async def run(self, ctx):
        ar, r, rng = self.port.ar, self.port.r, self.rng
        queue = deque()
        offering, cycle = None, 0
        while True:
            ready = rng.random() >= self.backpressure
            ctx.set(ar.ready, ready)
            if offering is None and queue and queue[0].due <= cycle and rng.random() >= self.idle:
                offering = queue[0]
                ctx.set(r.payload, {"data": self.lookup(offering.address),
                                    "last": offering.beats == 1})
            ctx.set(r.valid, offering is not None)
            *_, ar_valid, request, r_ready = await ctx.tick().sample(ar.valid, ar.payload,
                                                                     r.ready)
            assert r_ready, "r.ready went low (the loaders keep it high)"
            if offering is not None:
                self.beat_cycles.append(cycle)
                offering.address += self.port_bytes
                offering.beats -= 1
                if offering.beats == 0:
                    queue.popleft()
                offering = None
            if ready and ar_valid:
                address, beats = int(request.address), int(request.length) + 1
                self.check(address, beats)
                self.bursts.append((cycle, address, beats))
                queue.append(SimpleNamespace(due=cycle + rng.randint(*self.latency),
                                             address=address, beats=beats))
            cycle += 1


def run_on_amaranth(kernel, calls, *, idle=0.0, backpressure=0.0, latency=(1, 1), seed=0,
                    timeout=400_000, check=True) -> dict:
    """Run ``calls`` one after the other through ``kernel``; raise AssertionError on any
    difference from the golden. Returns ``{"cycles": ..., "status": [per request],
    "beats": read-port beats, "packets": per call the result packets}``; ``check=False``
    skips the golden (for calls it refuses)."""
    params = kernel.params
    rng = random.Random(seed)
    report = {"cycles": 0, "status": [], "beats": 0, "packets": []}
    images = {}
    slaves = []
    for port in range(params.read_ports):
        slaves.append(ReadSlave(kernel.read[port], lambda address: images["now"].word(address),
                                port_bytes=params.port_bytes, max_burst=params.max_burst,
                                latency=latency, idle=idle, backpressure=backpressure,
                                seed=seed * 97 + port))

    async def bench(ctx):
        dut = kernel
        for number, call in enumerate(calls):
            images["now"] = memory = MemoryImage(call, params, seed=seed + number)
            words = feeds(params, call)
            queues = {"cmd": deque(words["cmd"]), "tree": deque(words["tree"])}
            offer = {"cmd": None, "tree": None}
            packets, current, cycle, status_due = [], [], 0, False
            beats_before = sum(len(slave.beat_cycles) for slave in slaves)
            while len(packets) < call.batch_size or status_due:
                assert cycle < timeout, f"{call.name}: no completion in {timeout} cycles"
                for name, queue in queues.items():
                    port = getattr(dut, name)
                    if offer[name] is None and queue and rng.random() >= idle:
                        offer[name] = queue[0]
                    ctx.set(port.valid, offer[name] is not None)
                    if offer[name] is not None:
                        ctx.set(Value.cast(port.payload), offer[name])
                result_ready = rng.random() >= backpressure
                ctx.set(dut.result.ready, result_ready)
                (_, _, cmd_ready, tree_ready, res_valid, res_payload,
                 status) = await ctx.tick().sample(
                    dut.cmd.ready, dut.tree.ready, dut.result.valid,
                    Value.cast(dut.result.payload), Value.cast(dut.status))
                if status_due:  # status.cycles counts the last beat's clock the clock after
                    report["status"].append(beats(params.status_layout, [status])[0])
                    status_due = False
                for name, ready in (("cmd", cmd_ready), ("tree", tree_ready)):
                    if offer[name] is not None and ready:
                        queues[name].popleft()
                        offer[name] = None
                if res_valid and result_ready:
                    beat = beats(params.result_layout, [res_payload])[0]
                    current.append(beat)
                    if beat["last"]:
                        packets.append(current)
                        current = []
                        status_due = True
                cycle += 1
            ctx.set(dut.cmd.valid, 0)
            ctx.set(dut.tree.valid, 0)
            assert not queues["tree"], f"{call.name}: unread tree beats"
            report["cycles"] += cycle
            report["packets"].append(packets)
            if not check:
                continue
            want = expected(call)
            problems = compare(call, want, outputs_from_dut(call, packets))
            assert not problems, f"{call.name}:\n" + "\n".join(problems)
            got_rows = [status["rows"] for status in report["status"][-call.batch_size:]]
            want_rows = [len(rows) for rows in want["rows_read"]]
            assert got_rows == want_rows, f"{call.name}: rows read {got_rows} != {want_rows}"
            read = sum(len(slave.beat_cycles) for slave in slaves) - beats_before
            assert read == memory.read_words(want["rows_read"]), \
                f"{call.name}: {read} beats read, the golden's rows are " \
                f"{memory.read_words(want['rows_read'])}"
            report["beats"] += read

    simulate_with_slaves(kernel, slaves, bench)
    return report


def simulate_with_slaves(dut, slaves, bench) -> None:
    """Run the testbench ``bench`` on ``dut`` with every ``ReadSlave`` answering in the
    background."""
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for slave in slaves:
        sim.add_testbench(slave.run, background=True)
    sim.add_testbench(bench)
    sim.run()
