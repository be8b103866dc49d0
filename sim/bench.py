"""The shared cocotb bench of the kernel testbenches (runs inside the simulator process).

A kernel's ``tb.py`` holds one ``@cocotb.test`` per phase (figures, directed calls, random
calls, case replay, measurement); the target names the phases a run executes
(``sim.targets.SimTarget.run``), so no test returns early. Each test starts with

    bench = await KernelBench.start(dut, TreeMaskParams)

which reads the run's configuration, builds the kernel's parameter record from its
``parameters`` (``bench.params``), seeds the random sources, checks that every port of the
model has the width of its layout in that record (``params.ports``), starts the clock and
resets the DUT. ``bench.run`` drives one or more calls' input words through stream sources
(optionally with random idle cycles), collects the outputs through stream sinks (optionally
with random back-pressure) until every output has its expected count, and fails after a
timeout derived from the work; it returns the collected words and the acceptance cycles of
every port. ``bench.measurement`` turns those into the cycle-budget record of docs/contributing.md.
"""

import random
from dataclasses import dataclass, field

import numpy as np

from .cocotb_tb import (
    StreamBench,
    StreamSink,
    StreamSource,
    config,
    start_clock_and_reset,
    write_summary,
)
from .payload import pack, unpack
from .targets import port_bytes

__all__ = ["KernelBench", "Transfers", "PacketSink", "write_summary", "golden_matches_case"]


@dataclass
class Transfers:
    """What one ``KernelBench.run`` moved.

    ``items``: output port -> payload integers collected; ``at``: port (inputs, outputs and
    extra endpoints) -> acceptance cycle of each beat; ``cycles``: clocks the run took.
    """

    items: dict[str, list[int]] = field(default_factory=dict)
    at: dict[str, list[int]] = field(default_factory=dict)
    cycles: int = 0


class PacketSink(StreamSink):
    """A result stream of packets (``first``/``last`` payload fields): ``packets`` holds the
    decoded beats of each (field dicts, from ``bench.params.<port>_layout``), ``ends`` the
    cycle of each last beat, ``status`` the kernel's ``status`` (``status_layout``) read the
    clock after each last beat; ``done`` after ``count`` packets. Call ``finish`` after the
    run (a status read may be due)."""

    def __init__(self, bench, port, count, *, backpressure):
        super().__init__(bench.dut, port, backpressure=backpressure, rng=bench.rng)
        self._dut, self._params = bench.dut, bench.params
        self._layout = getattr(bench.params, f"{port}_layout")
        self.count = count
        self.packets, self.status, self.ends = [], [], []
        self._current = []
        self._status_due = False

    @property
    def done(self) -> bool:
        return len(self.packets) >= self.count

    def _decode(self, layout, words) -> list[dict]:
        fields = unpack(layout, words)
        return [{key: int(values[i]) for key, values in fields.items()} for i in range(len(words))]

    def read_status(self):
        value = self._dut.status.value.to_unsigned()
        self.status.append(self._decode(self._params.status_layout, [value])[0])
        self._status_due = False

    def sample(self, cycle):
        if self._status_due:
            self.read_status()
        before = len(self.items)
        super().sample(cycle)
        for beat in self._decode(self._layout, self.items[before:]):
            self._current.append(beat)
            if beat["last"]:
                self.packets.append(self._current)
                self._current = []
                self.ends.append(cycle)
                self._status_due = True

    def finish(self):
        if self._status_due:
            self.read_status()


class KernelBench:
    """One kernel's cocotb bench: configuration, random sources, port layouts, stream runs.

    Parameters
    ----------
    dut : cocotb handle
        The top level (Amaranth port names ``<port>__valid/ready/payload``).
    params_record : callable
        The kernel's parameter record class: ``params_record(**config["parameters"])`` has
        ``ports``, port name -> ``data.Layout`` of its payload.

    Members
    -------
    params
        The parameter record of the model under test.
    ports : dict
        ``params.ports``.
    cfg : dict
        The run's configuration (``parameters``, ``seed``, testbench settings, ``case``,
        ``measure``).
    seed, rng, np_rng
        The run's seed and the Python / numpy generators seeded with it.
    """

    def __init__(self, dut, params_record):
        self.dut = dut
        self.cfg = config()
        self.seed = self.cfg["seed"]
        self.rng = random.Random(self.seed)
        self.np_rng = np.random.default_rng(self.seed)
        self.params = params_record(**self.cfg["parameters"])
        self.ports = dict(self.params.ports)
        for name, layout in self.ports.items():
            width = len(getattr(dut, f"{name}__payload"))
            assert width == layout.size, (
                f"port {name}: {width} bits, but the configured parameters give "
                f"{layout.size}: the configuration does not describe this model")

    @classmethod
    async def start(cls, dut, params_record) -> "KernelBench":
        """A bench for ``dut`` (see the class), with the clock running and the DUT reset."""
        bench = cls(dut, params_record)
        await start_clock_and_reset(dut)
        return bench

    @property
    def stress(self) -> dict:
        """``idle`` and ``backpressure`` of the configuration (the random-phase settings)."""
        return {"idle": self.cfg["idle"], "backpressure": self.cfg["backpressure"]}

    def log(self, text: str) -> None:
        self.dut._log.info(text)

    def pack(self, port: str, count: int | None = None, **fields) -> list[int]:
        """``sim.payload.pack`` with the layout of ``port``."""
        return pack(self.ports[port], count, **fields)

    def unpack(self, port: str, words, signed=()) -> dict:
        """``sim.payload.unpack`` with the layout of ``port``."""
        return unpack(self.ports[port], words, signed=signed)

    async def run(self, feeds: dict[str, list[int]], counts: dict[str, int], *, work: int,
                  idle: float = 0.0, backpressure: float = 0.0, endpoints=(),
                  until=None) -> Transfers:
        """Send ``feeds`` (input port -> payload words) and collect ``counts`` (output port ->
        beats) in one clocked loop; return the ``Transfers``.

        Parameters
        ----------
        work : int
            Clocks the run needs without idle or back-pressure, roughly; the timeout is
            ``2 * work / (1 - max(idle, backpressure))**2 + 2000``.
        idle, backpressure : float
            Probabilities of an idle cycle on each source and a refusal on each sink.
        endpoints : sequence
            Further endpoints stepped in the same loop (memory ports, special sinks); each
            with ``drive()``, ``sample(cycle)`` and a ``done`` property that must hold at the
            end, and optionally ``name`` and ``accepted_at``.
        until : callable or None
            A further completion condition.
        """
        sources = {name: StreamSource(self.dut, name, idle=idle, rng=self.rng)
                   for name in feeds}
        for name, words in feeds.items():
            sources[name].send(words)
        sinks = {name: StreamSink(self.dut, name, backpressure=backpressure, rng=self.rng)
                 for name in counts}
        extra = list(endpoints)

        def finished():
            return (all(len(sinks[name].items) >= count for name, count in counts.items())
                    and all(source.done for source in sources.values())
                    and all(endpoint.done for endpoint in extra)
                    and (until is None or until()))

        stepper = StreamBench(self.dut, [*sources.values(), *sinks.values(), *extra])
        timeout = int(work / (1 - max(idle, backpressure)) ** 2) * 2 + 2000
        cycles = await stepper.run(finished, timeout_cycles=timeout)
        for name, count in counts.items():
            assert len(sinks[name].items) == count, (
                f"port {name}: {len(sinks[name].items)} beats, {count} expected")
        at = {name: endpoint.accepted_at for name, endpoint in {**sources, **sinks}.items()}
        at.update({endpoint.name: endpoint.accepted_at for endpoint in extra
                   if hasattr(endpoint, "accepted_at")})
        return Transfers(items={name: sink.items for name, sink in sinks.items()}, at=at,
                         cycles=cycles)

    def check_golden_against_case(self, want: dict, file_expected: dict) -> None:
        """Assert that the golden's outputs ``want`` equal the case file's ``expected_*``
        tensors (``file_expected``, name -> int64 array; those the file has)."""
        differing = golden_matches_case(want, file_expected)
        assert not differing, \
            f"golden differs from the case's expected_{', expected_'.join(differing)}"

    def case_replayed(self, file_expected: dict, output_names, *, requests: int, cycles: int,
                      **extra) -> None:
        """Log and summarise a replayed case (``config["case"]``): RTL == golden == the
        ``expected_*`` tensors of ``file_expected``; ``extra`` goes into the summary."""
        path, checked = self.cfg["case"], sorted(file_expected)
        self.log(f"case {path}: RTL == golden" + (f" == expected_* ({', '.join(checked)})"
                                                  if checked else "") + f" {extra}")
        write_summary(vectors=1, requests=requests, cycles=cycles,
                      extra={"case": str(path), **extra,
                             "expected tensors": f"{len(checked)} of {len(output_names)} "
                                                 "checked"})

    async def replay_case(self, run_calls, call, want: dict, file_expected: dict, output_names,
                          *, last_port: str, **extra) -> None:
        """The ``case`` phase of a kernel driven by calls: the golden's outputs ``want`` equal
        the case file's ``expected_*`` (``check_golden_against_case``), the call alone passes
        ``run_calls`` (RTL == golden), then ``case_replayed`` with the cycle of the last
        ``last_port`` transfer and ``extra``."""
        self.check_golden_against_case(want, file_expected)
        at = (await run_calls(self, [call])).at
        self.case_replayed(file_expected, output_names, requests=call.batch_size,
                           cycles=at[last_port][-1] if at[last_port] else 0, **extra)

    def port_bytes(self, at: dict[str, list[int]], names) -> dict[str, int]:
        """Port name -> bytes its beats moved (``sim.targets.port_bytes``)."""
        return {name: port_bytes(len(at[name]), len(getattr(self.dut, f"{name}__payload")))
                for name in names}

    async def check_calls(self, run_calls, *, random=(), directed=(),
                          stressed: bool = False) -> None:
        """One phase of calls: ``run_calls(bench, calls, **stress)`` drives the ``random``
        then the ``directed`` calls back to back and checks every result against the golden
        (under ``stress`` when ``stressed``); then the log line and the phase's summary:
        ``vectors`` (calls), ``requests`` (the calls' ``batch_size`` sum),
        ``random_vectors``, and ``directed_vectors`` when unstressed (a stressed rerun of the
        directed calls is not counted twice)."""
        calls = [*random, *directed]
        await run_calls(self, calls, **(self.stress if stressed else {}))
        requests = sum(call.batch_size for call in calls)
        counts = {"random_vectors": len(random)} if random else {}
        if directed and not stressed:
            counts["directed_vectors"] = len(directed)
        kinds = " + ".join(f"{len(group)} {kind}" for kind, group in
                           (("random", random), ("directed", directed)) if group)
        self.log(f"{kinds} calls ({requests} requests) bit-exact with the golden"
                 + (", stressed" if stressed else ""))
        write_summary(vectors=len(calls), requests=requests, **counts)

    def measurement(self, at: dict[str, list[int]], inputs, outputs, *, operations: int,
                    notes: str, invocations: int = 1,
                    interval_of: list[int] | None = None, read_bytes: dict | None = None,
                    extra: dict | None = None) -> dict:
        """The cycle-budget record of one measured run (docs/contributing.md).

        ``cycles``: first transfer on any of ``inputs`` to last transfer on any of
        ``outputs``, inclusive; ``bytes_in``/``bytes_out``: ``port_bytes`` of every beat of
        the inputs/outputs, plus ``read_bytes`` (memory read port -> bytes its data beats
        moved) in ``bytes_in``; ``initiation_interval``: mean spacing of the cycles
        ``interval_of`` (one per request; absent with fewer than two); ``extra`` entries are
        added to the record.
        """
        ports = {**self.port_bytes(at, [*inputs, *outputs]), **(read_bytes or {})}
        inputs = [*inputs, *(read_bytes or {})]
        record = {
            "cycles": max(at[name][-1] for name in outputs if at[name])
            - min(at[name][0] for name in inputs if at[name]) + 1,
            "bytes_in": sum(ports[name] for name in inputs),
            "bytes_out": sum(ports[name] for name in outputs),
            "operations": int(operations),
            "invocations": invocations,
            "ports": ports,
            "notes": notes,
            **(extra or {}),
        }
        if interval_of is not None and len(interval_of) > 1:
            record["initiation_interval"] = \
                (interval_of[-1] - interval_of[0]) / (len(interval_of) - 1)
        self.log(f"measurement: {record}")
        write_summary(vectors=1, cycles=record["cycles"], measurement=record)
        return record


def golden_matches_case(want: dict, file_expected: dict) -> list[str]:
    """Names of the case's ``expected_*`` tensors (name -> integer or bool array) that the
    golden's outputs ``want`` differ from, each compared as a flat int64 array."""
    return [name for name, values in file_expected.items()
            if not np.array_equal(np.asarray(want[name]).reshape(-1).astype(np.int64),
                                  np.asarray(values).reshape(-1).astype(np.int64))]
