"""Helpers for the project's cocotb testbenches (they run inside the simulator process).

A testbench reads its settings with ``config()``, builds stream endpoints on the DUT's
Amaranth-generated ports (``<name>__valid``, ``<name>__ready``, ``<name>__payload``), steps them
all in one clocked loop (``StreamBench``) and reports with ``write_summary``. Every endpoint can
inject random idle cycles (sources) or back-pressure (sinks); ``StreamBench`` counts cycles and
records when each item was accepted, from which ``latency_and_interval`` derives the
first-output latency and the steady-state initiation interval.
"""

import json
import os
import random
from collections import deque

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from .harness import CONFIG_ENV

__all__ = ["config", "write_summary", "start_clock_and_reset", "StreamSource", "StreamSink",
           "StreamBench", "latency_and_interval"]


def config() -> dict:
    """The JSON configuration the harness passed to this run."""
    with open(os.environ[CONFIG_ENV]) as f:
        return json.load(f)


def write_summary(**summary) -> None:
    """Hand figures (vectors checked, cycles, latency, ...) back to the harness."""
    path = config()["summary_path"]
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)


async def start_clock_and_reset(dut, *, cycles: int = 2) -> None:
    """Start a 10 ns clock on ``dut.clk`` and hold ``dut.rst`` for ``cycles`` rising edges."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for _ in range(cycles):
        await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0


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
        self._valid = getattr(dut, f"{name}__valid")
        self._ready = getattr(dut, f"{name}__ready")
        self._payload = getattr(dut, f"{name}__payload")
        self.idle = idle
        self._rng = rng or random.Random(0)
        self._queue = deque()
        self._offering = False
        self.accepted_at = []
        self._valid.value = 0

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
            self._valid.value = 1
            self._offering = True
        else:
            self._valid.value = 0

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
        self._ready.value = 0

    def drive(self) -> None:
        self._ready_now = self.backpressure <= 0 or self._rng.random() >= self.backpressure
        self._ready.value = int(self._ready_now)

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
            if isinstance(endpoint, StreamSource):
                endpoint.drive()
        return self.cycle - start


def latency_and_interval(input_cycles, output_cycles) -> tuple[int, float]:
    """First-output latency (cycles from the first input accepted to the first output
    accepted) and steady-state initiation interval in cycles per output,
    ``(t_last - t_first) / (n - 1)``, of a run without idle or back-pressure."""
    latency = output_cycles[0] - input_cycles[0]
    if len(output_cycles) < 2:
        return latency, float("nan")
    return latency, (output_cycles[-1] - output_cycles[0]) / (len(output_cycles) - 1)
