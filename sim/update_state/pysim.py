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

The steps run in order in one simulation, so ``sim.amaranth_tb.run_streams`` (one concurrent
exchange of all streams per simulation) does not fit: the slot memories must keep their
contents from a load to the requests to the dump, and host commands take priority over waiting
requests, so the two streams cannot be queued together. ``_exchange`` is the per-step form of
the same loop (one source, one sink, random idle and back-pressure, a cycle count).
"""

import random
from dataclasses import asdict

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

__all__ = ["run_steps"]


async def _exchange(ctx, source, sink, words, expected, *, rng, idle, backpressure):
    """Send ``words`` on ``source`` while collecting ``expected`` items from ``sink``, one
    clock at a time; returns the items and the clocks it took."""
    pending, received, offering, cycles = list(words), [], False, 0
    while len(received) < expected:
        if not offering and pending and rng.random() >= idle:
            ctx.set(source.payload.as_value(), pending[0])
            offering = True
        ctx.set(source.valid, int(offering))
        ready = rng.random() >= backpressure
        ctx.set(sink.ready, int(ready))
        sent = offering and ctx.get(source.ready)
        if ready and ctx.get(sink.valid):
            received.append(ctx.get(sink.payload.as_value()))
        await ctx.tick()
        cycles += 1
        if sent:
            pending.pop(0)
            offering = False
        if cycles > 100 * (len(words) + expected) + 1000:
            raise TimeoutError("the kernel stopped answering")
    ctx.set(source.valid, 0)
    ctx.set(sink.ready, 0)
    assert not pending, "the kernel answered before it took every input"
    return received, cycles


def run_steps(params, steps, *, idle=0.0, backpressure=0.0, seed=0, work_copy=None):
    p = params_from(params)
    dut = UpdateCumuDraftState(**asdict(p))
    rng = random.Random(seed)
    results = []

    async def copy_work(ctx):
        """Every write of ``work_write`` into ``work_copy`` (address -> word)."""
        async for _, _, enabled, address, word in ctx.tick().sample(
                dut.work_write.en, dut.work_write.addr, dut.work_write.data):
            if enabled:
                work_copy[address] = word

    async def host(ctx, words):
        answers, _ = await _exchange(ctx, dut.host_cmd, dut.host_rsp, words, len(words),
                                     rng=rng, idle=idle, backpressure=backpressure)
        return answers

    async def testbench(ctx):
        for step in steps:
            if step[0] == "load":
                answers = await host(ctx, load_commands(p, step[1], step[2]))
                assert not any(answers), "a host write was not answered with zeros"
                results.append(None)
            elif step[0] == "host":
                results.append(await host(ctx, step[1]))
            elif step[0] == "dump":
                results.append(decode_dump(p, await host(ctx, dump_commands(p, step[1]))))
            elif step[0] in ("requests", "beats"):
                if step[0] == "requests":
                    beats = [word for slot, request in step[1]
                             for word in request_beats(p, slot, request)]
                    count = len(step[1])
                else:
                    beats, count = step[1], step[2]
                records, cycles = await _exchange(ctx, dut.req, dut.done, beats, count, rng=rng,
                                                  idle=idle, backpressure=backpressure)
                results.append(([decode_done(p, word) for word in records], cycles))
            else:
                raise ValueError(f"unknown step {step[0]!r}")

    simulate(dut, testbench, background=() if work_copy is None else (copy_work,))
    return results
