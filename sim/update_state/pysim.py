"""The K2 kernel on Amaranth's own simulator (unit tests; no Verilator build).

``run_steps`` builds the kernel, then executes a list of steps in one simulation, stepping the
four streams cycle by cycle (so requests can be sent back to back while their ``done`` records
are collected), with optional random idle cycles on the inputs and back-pressure on the
outputs:

* ``("load", slot, state)``: write ``state`` into ``slot`` through the host port;
* ``("requests", [(slot, request), ...])``: send the requests back to back; the step's result
  is ``(done_records, cycles)``, ``cycles`` counted from the first beat offered to the last
  ``done`` accepted;
* ``("beats", words, count)``: send raw ``req`` payloads, collect ``count`` ``done`` records
  (framing tests); the result is as for ``requests``;
* ``("host", words)``: raw ``host_cmd`` payloads; the result is the list of answers;
* ``("dump", slot)``: read ``slot`` back; the result is its state.

Parameters: ``params`` (dict or ``UpdateStateParams``), ``steps``, ``idle``, ``backpressure``,
``seed``. Returns the list of step results (``None`` for loads).
"""

import dataclasses
import random

from hw.kernels.update_state import UpdateCumuDraftState
from sim.amaranth_tb import simulate

from .host import (
    decode_done,
    decode_dump,
    dump_commands,
    load_commands,
    params_from,
    request_beats,
)

__all__ = ["run_steps", "make_dut"]


def make_dut(params):
    """The kernel built with ``params`` (a dict or ``UpdateStateParams``)."""
    return UpdateCumuDraftState(**dataclasses.asdict(params_from(params)))


class _Streams:
    """One source and one sink stepped together, one clock per ``step``."""

    def __init__(self, source, sink, rng, idle, backpressure):
        self.source, self.sink = source, sink
        self.rng, self.idle, self.backpressure = rng, idle, backpressure

    async def exchange(self, ctx, words, expected):
        """Send ``words`` on the source while collecting ``expected`` sink items."""
        pending, received, offering, cycles = list(words), [], False, 0
        while len(received) < expected:
            if not offering and pending and self.rng.random() >= self.idle:
                ctx.set(self.source.payload.as_value(), pending[0])
                offering = True
            ctx.set(self.source.valid, int(offering))
            ready = self.rng.random() >= self.backpressure
            ctx.set(self.sink.ready, int(ready))
            sent = offering and ctx.get(self.source.ready)
            if ready and ctx.get(self.sink.valid):
                received.append(ctx.get(self.sink.payload.as_value()))
            await ctx.tick()
            cycles += 1
            if sent:
                pending.pop(0)
                offering = False
            if cycles > 100 * (len(words) + expected) + 1000:
                raise TimeoutError("the kernel stopped answering")
        ctx.set(self.source.valid, 0)
        ctx.set(self.sink.ready, 0)
        assert not pending, "the kernel answered before it took every input"
        return received, cycles


def run_steps(params, steps, *, idle=0.0, backpressure=0.0, seed=0):
    dut = make_dut(params)
    p = dut.params
    rng = random.Random(seed)
    host = _Streams(dut.host_cmd, dut.host_rsp, rng, idle, backpressure)
    kernel = _Streams(dut.req, dut.done, rng, idle, backpressure)
    results = []

    async def testbench(ctx):
        for step in steps:
            if step[0] == "load":
                commands = load_commands(p, step[1], step[2])
                answers, _ = await host.exchange(ctx, commands, len(commands))
                assert not any(answers), "a host write was not answered with zeros"
                results.append(None)
            elif step[0] == "host":
                answers, _ = await host.exchange(ctx, step[1], len(step[1]))
                results.append(answers)
            elif step[0] == "dump":
                commands = dump_commands(p, step[1])
                answers, _ = await host.exchange(ctx, commands, len(commands))
                results.append(decode_dump(p, answers))
            elif step[0] in ("requests", "beats"):
                if step[0] == "requests":
                    beats = [word for slot, request in step[1]
                             for word in request_beats(p, slot, request)]
                    count = len(step[1])
                else:
                    beats, count = step[1], step[2]
                records, cycles = await kernel.exchange(ctx, beats, count)
                results.append(([decode_done(p, word) for word in records], cycles))
            else:
                raise ValueError(f"unknown step {step[0]!r}")

    simulate(dut, testbench)
    return results
