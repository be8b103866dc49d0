"""Helpers for the project's cocotb testbenches (they run inside the simulator process).

A testbench reads its settings with ``config()``, builds stream endpoints on the DUT's
Amaranth-generated ports (``<name>__valid``, ``<name>__ready``, ``<name>__payload``), steps them
all in one clocked loop (``StreamBench``) and reports with ``write_summary``. Every endpoint can
inject random idle cycles (sources) or back-pressure (sinks); ``StreamBench`` counts cycles and
records when each item was accepted, from which ``latency_and_interval`` derives the
first-output latency and the steady-state initiation interval. ``ReadPortMemory`` answers a
memory read port (address stream out of the DUT, data stream back) with random latency;
``BurstReadMemory`` answers an AXI4-style burst read port. Kernel testbenches use these
through ``sim.bench.KernelBench``.
"""

import json
import os
import random
from collections import deque
from types import SimpleNamespace

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from hw.lib.axi import read_port_signature, request_overhead_bits

from .harness import CONFIG_ENV
from .payload import pack, unpack

__all__ = ["config", "write_summary", "start_clock_and_reset", "reset", "Pin", "StreamSource",
           "StreamSink", "StreamBench", "ReadPortMemory", "BurstReadMemory", "latency_and_interval"]

#: Summary entries that add up over the tests (phases) of one run; others are replaced.
SUMMED = ("vectors", "requests", "directed_vectors", "random_vectors")


def config() -> dict:
    """The JSON configuration the harness passed to this run."""
    with open(os.environ[CONFIG_ENV]) as f:
        return json.load(f)


def write_summary(**summary) -> None:
    """Hand figures (vectors checked, cycles, latency, ...) back to the harness.

    Every test (phase) of a run adds to the same summary: the counts in ``SUMMED`` add up,
    ``extra`` entries are merged, other entries are replaced.
    """
    path = config()["summary_path"]
    merged = {}
    if os.path.exists(path):
        with open(path) as f:
            merged = json.load(f)
    for key, value in summary.items():
        if key in SUMMED:
            merged[key] = merged.get(key, 0) + value
        elif key == "extra":
            merged["extra"] = {**merged.get("extra", {}), **value}
        else:
            merged[key] = value
    with open(path, "w") as f:
        json.dump(merged, f, indent=1)


async def start_clock_and_reset(dut, *, cycles: int = 2) -> None:
    """Start a 10 ns clock on ``dut.clk`` and hold ``dut.rst`` for ``cycles`` rising edges."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    await reset(dut, cycles=cycles)


async def reset(dut, *, cycles: int = 2) -> None:
    """Hold ``dut.rst`` for ``cycles`` rising edges of the running clock; release it on a
    falling edge."""
    dut.rst.value = 1
    for _ in range(cycles):
        await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0


class Pin:
    """A DUT input that is written only when its value changes: each write is a call into
    the simulator, and most handshake inputs hold their value for many clocks. ``value`` is
    what the input holds; nothing else may write the handle."""

    def __init__(self, handle, value: int = 0):
        self.handle, self.value = handle, value
        handle.value = value

    def set(self, value: int) -> None:
        if value != self.value:
            self.handle.value = value
            self.value = value


class StreamSource:
    """Drives a stream into the DUT from a queue of payload integers.

    Once it raises ``valid`` it holds the payload until the DUT accepts it (stream rules);
    between items it stays idle with probability ``idle``.

    Parameters
    ----------
    dut : cocotb handle
        The top level.
    name : str
        Stream port name (``i`` for ``i__valid`` ...).
    idle : float
        Probability of an idle cycle before offering the next item.
    rng : random.Random
        Source of the idle decisions.
    """

    def __init__(self, dut, name: str, *, idle: float = 0.0, rng: random.Random | None = None):
        self.name = name
        self._valid = Pin(getattr(dut, f"{name}__valid"))
        self._ready = getattr(dut, f"{name}__ready")
        self._payload = getattr(dut, f"{name}__payload")
        self.idle = idle
        self._rng = rng or random.Random(0)
        self._queue = deque()
        self._offering = False
        self.accepted_at = []

    def send(self, payloads) -> None:
        """Queue payload integers for sending."""
        self._queue.extend(payloads)

    @property
    def done(self) -> bool:
        return not self._queue and not self._offering

    def drive(self) -> None:
        if self._offering:
            return
        if self._queue and (self.idle <= 0 or self._rng.random() >= self.idle):
            self._payload.value = self._queue[0]
            self._valid.set(1)
            self._offering = True
        else:
            self._valid.set(0)

    def sample(self, cycle: int) -> None:
        if self._offering and self._ready.value:
            self._queue.popleft()
            self._offering = False
            self.accepted_at.append(cycle)


class StreamSink:
    """Accepts a stream from the DUT, refusing with probability ``backpressure`` each cycle.

    Collected payload integers are in ``items``, their acceptance cycles in ``accepted_at``.
    """

    def __init__(self, dut, name: str, *, backpressure: float = 0.0,
                 rng: random.Random | None = None):
        self.name = name
        self._valid = getattr(dut, f"{name}__valid")
        self._ready = getattr(dut, f"{name}__ready")
        self._payload = getattr(dut, f"{name}__payload")
        self.backpressure = backpressure
        self._rng = rng or random.Random(1)
        self._ready_now = False
        self.items = []
        self.accepted_at = []
        self._ready_pin = Pin(self._ready)

    def drive(self) -> None:
        self._ready_now = self.backpressure <= 0 or self._rng.random() >= self.backpressure
        self._ready_pin.set(int(self._ready_now))

    def sample(self, cycle: int) -> None:
        if self._ready_now and self._valid.value:
            self.items.append(self._payload.value.to_unsigned())
            self.accepted_at.append(cycle)


class StreamBench:
    """Steps stream endpoints once per clock: drive after the falling edge, sample in ReadOnly.

    ``cycle`` counts clocks since ``run`` started; ``run`` returns when ``until()`` holds.
    """

    def __init__(self, dut, endpoints):
        self.clk = dut.clk
        self.endpoints = list(endpoints)
        self.cycle = 0

    async def run(self, until, *, timeout_cycles: int) -> int:
        """Clock until ``until()`` is true; return the cycles spent. Fails after the timeout."""
        start = self.cycle
        while not until():
            if self.cycle - start >= timeout_cycles:
                raise TimeoutError(f"no completion within {timeout_cycles} cycles")
            await FallingEdge(self.clk)
            for endpoint in self.endpoints:
                endpoint.drive()
            await ReadOnly()
            for endpoint in self.endpoints:
                endpoint.sample(self.cycle)
            self.cycle += 1
        await FallingEdge(self.clk)
        for endpoint in self.endpoints:  # leave the ports quiet
            if isinstance(endpoint, StreamSource | ReadPortMemory | BurstReadMemory):
                endpoint.drive()
        return self.cycle - start


class ReadPortMemory:
    """Answers a DUT's memory read port: accepts word addresses on ``<address>`` (random
    back-pressure) and returns ``lookup(address)`` on ``<data>`` after a latency drawn from
    ``latency = (low, high)`` clocks, in address order, with random idle cycles on top.

    ``reads`` counts the addresses, ``address_at``/``data_at`` the acceptance cycles of both
    streams; ``done`` holds when no answer is pending. ``lookup`` may raise (an address out of
    range fails the test).
    """

    def __init__(self, dut, lookup, *, address: str = "read_address", data: str = "read_data",
                 latency=(1, 1), idle: float = 0.0, backpressure: float = 0.0,
                 rng: random.Random | None = None):
        self.name = address
        self.lookup = lookup
        self.latency = tuple(latency)
        self.idle = idle
        self.backpressure = backpressure
        self._rng = rng or random.Random(2)
        self._address_valid = getattr(dut, f"{address}__valid")
        self._address_ready = getattr(dut, f"{address}__ready")
        self._address = getattr(dut, f"{address}__payload")
        self._data_valid = getattr(dut, f"{data}__valid")
        self._data_ready = getattr(dut, f"{data}__ready")
        self._data = getattr(dut, f"{data}__payload")
        self._queue = deque()  # (due cycle, word)
        self._offering = False
        self._ready_now = False
        self._now = 0
        self.reads = 0
        self.address_at = []
        self.data_at = []
        self._address_ready.value = 0
        self._data_valid.value = 0

    @property
    def done(self) -> bool:
        return not self._queue

    def drive(self) -> None:
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

    def sample(self, cycle: int) -> None:
        if self._offering and self._data_ready.value:
            self._queue.popleft()
            self._offering = False
            self.data_at.append(cycle)
        if self._ready_now and self._address_valid.value:
            word = self.lookup(self._address.value.to_unsigned())
            due = max(cycle + self._rng.randint(*self.latency),
                      self._queue[-1][0] if self._queue else 0)
            self._queue.append((due, word))
            self.reads += 1
            self.address_at.append(cycle)
        self._now = cycle + 1


class BurstReadMemory:
    """Answers a DUT's AXI4-style read port ``<prefix>`` (``<prefix>__ar__valid`` ...; the
    payloads of ``hw.lib.axi.read_port_signature``): accepts bursts on ``ar`` (random
    back-pressure) and returns their beats in order on ``r``, each burst after
    a latency drawn from ``latency = (low, high)`` clocks, with random idle cycles between
    beats. Beat ``k`` of a burst at byte address ``a`` is ``lookup(a + k * data_bits // 8)``.

    Every burst is checked against the AXI4 rules: a word-aligned start, at most 256 beats,
    no 4 KiB boundary crossed (``AssertionError`` naming the burst). ``bursts`` and ``beats``
    count the transfers, ``address_at``/``data_at`` their acceptance cycles; ``done`` holds
    when no beat is pending. ``lookup`` may raise (an address out of range fails the test).
    """

    def __init__(self, dut, prefix, lookup, *, data_bits, latency=(1, 1), idle: float = 0.0,
                 backpressure: float = 0.0, rng: random.Random | None = None):
        self.name = prefix
        self.lookup = lookup
        self.data_bytes = data_bits // 8
        self.latency = tuple(latency)
        self.idle = idle
        self.backpressure = backpressure
        self._rng = rng or random.Random(3)
        self._ar_valid = getattr(dut, f"{prefix}__ar__valid")
        self._ar_ready = getattr(dut, f"{prefix}__ar__ready")
        self._ar = getattr(dut, f"{prefix}__ar__payload")
        self._r_valid = getattr(dut, f"{prefix}__r__valid")
        self._r_ready = getattr(dut, f"{prefix}__r__ready")
        self._r = getattr(dut, f"{prefix}__r__payload")
        members = read_port_signature(len(self._ar) - request_overhead_bits(), data_bits).members
        self._ar_layout = members["ar"].signature.members["payload"].shape
        self._r_layout = members["r"].signature.members["payload"].shape
        self._queue = deque()  # bursts: due cycle, next beat's address, beats left
        self._offering = False
        self._ready_now = False
        self._now = 0
        self.bursts = 0
        self.beats = 0
        self.address_at = []
        self.data_at = []
        self._ar_ready.value = 0
        self._r_valid.value = 0

    @property
    def done(self) -> bool:
        return not self._queue

    def _check(self, address: int, beats: int) -> None:
        name = f"burst {self.bursts} of {self.name} ({beats} beats at {address:#x})"
        if address % self.data_bytes:
            raise AssertionError(f"{name} does not start on a {self.data_bytes}-byte word")
        if beats > 256:
            raise AssertionError(f"{name} is longer than 256 beats")
        if address % 4096 + beats * self.data_bytes > 4096:
            raise AssertionError(f"{name} crosses a 4 KiB boundary")

    def drive(self) -> None:
        self._ready_now = self.backpressure <= 0 or self._rng.random() >= self.backpressure
        self._ar_ready.value = int(self._ready_now)
        if self._offering:
            return
        if self._queue and self._queue[0].due <= self._now and (
                self.idle <= 0 or self._rng.random() >= self.idle):
            burst = self._queue[0]
            self._r.value = pack(self._r_layout, 1, data=self.lookup(burst.address),
                                 last=int(burst.beats == 1))[0]
            self._r_valid.value = 1
            self._offering = True
        else:
            self._r_valid.value = 0

    def sample(self, cycle: int) -> None:
        if self._offering and self._r_ready.value:
            burst = self._queue[0]
            burst.address += self.data_bytes
            burst.beats -= 1
            if not burst.beats:
                self._queue.popleft()
            self._offering = False
            self.beats += 1
            self.data_at.append(cycle)
        if self._ready_now and self._ar_valid.value:
            fields = unpack(self._ar_layout, [self._ar.value.to_unsigned()])
            address, beats = int(fields["address"][0]), int(fields["length"][0]) + 1
            self._check(address, beats)
            due = max(cycle + self._rng.randint(*self.latency),
                      self._queue[-1].due if self._queue else 0)
            self._queue.append(SimpleNamespace(due=due, address=address, beats=beats))
            self.bursts += 1
            self.address_at.append(cycle)
        self._now = cycle + 1


def latency_and_interval(input_cycles, output_cycles) -> tuple[int, float]:
    """First-output latency (cycles from the first input accepted to the first output
    accepted) and steady-state initiation interval in cycles per output,
    ``(t_last - t_first) / (n - 1)``, of a run without idle or back-pressure."""
    latency = output_cycles[0] - input_cycles[0]
    if len(output_cycles) < 2:
        return latency, float("nan")
    return latency, (output_cycles[-1] - output_cycles[0]) / (len(output_cycles) - 1)
