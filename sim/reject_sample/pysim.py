"""K6 ``RejectSample`` on Amaranth's simulator: small calls for the unit tests (no Verilator).

:func:`run_on_amaranth` drives calls through a kernel instance with one clocked process that
plays every endpoint (``cmd``, ``tree``, the memory with random latency, ``result`` and
``draft_write`` sinks), the way ``sim.cocotb_tb.StreamBench`` does under cocotb, then checks
the outputs against the golden (``sim.reject_sample.results``).
"""

import random
from collections import deque

from amaranth.hdl import Value

from sim.amaranth_tb import simulate

from .memory import MemoryImage
from .results import compare, expected
from .streams import beats, feeds, outputs_from_dut

__all__ = ["run_on_amaranth"]


def run_on_amaranth(kernel, calls, *, idle=0.0, backpressure=0.0, latency=(1, 1), seed=0,
                    timeout=200_000) -> dict:
    """Run ``calls`` one after the other through ``kernel``; raise AssertionError on any
    difference from the golden. Returns ``{"cycles": ..., "status": [per request]}``."""
    rng = random.Random(seed)
    params = kernel.params
    report = {"cycles": 0, "status": []}
    pending = []
    for number, call in enumerate(calls):
        words = feeds(params, call)
        pending.append((call, MemoryImage(call, params.lanes, seed=seed + number),
                        words["cmd"], words["tree"]))

    async def bench(ctx):
        dut = kernel
        for call, memory, cmd_words, tree_words in pending:
            cmd_q, tree_q = deque(cmd_words), deque(tree_words)
            responses = deque()  # (due cycle, word)
            offer = {"cmd": None, "tree": None, "data": None}
            packets, current, writes = [], [], []
            cycle = 0
            while len(packets) < call.batch_size or tree_q or cmd_q:
                assert cycle < timeout, f"{call.name}: no completion in {timeout} cycles"
                for name, queue in (("cmd", cmd_q), ("tree", tree_q)):
                    port = getattr(dut, name)
                    if offer[name] is None and queue and rng.random() >= idle:
                        offer[name] = queue[0]
                    ctx.set(port.valid, offer[name] is not None)
                    if offer[name] is not None:
                        ctx.set(Value.cast(port.payload), offer[name])
                if offer["data"] is None and responses and responses[0][0] <= cycle \
                        and rng.random() >= idle:
                    offer["data"] = responses[0][1]
                ctx.set(dut.read_data.valid, offer["data"] is not None)
                if offer["data"] is not None:
                    ctx.set(Value.cast(dut.read_data.payload), offer["data"])
                address_ready = rng.random() >= backpressure
                result_ready = rng.random() >= backpressure
                draft_ready = rng.random() >= backpressure
                ctx.set(dut.read_address.ready, address_ready)
                ctx.set(dut.result.ready, result_ready)
                ctx.set(dut.draft_write.ready, draft_ready)
                (_, _, cmd_ready, tree_ready, ra_valid, ra_payload, rd_ready, res_valid,
                 res_payload, dw_valid, dw_payload, status) = await ctx.tick().sample(
                    dut.cmd.ready, dut.tree.ready, dut.read_address.valid,
                    dut.read_address.payload, dut.read_data.ready, dut.result.valid,
                    Value.cast(dut.result.payload), dut.draft_write.valid,
                    Value.cast(dut.draft_write.payload), Value.cast(dut.status))
                if offer["cmd"] is not None and cmd_ready:
                    cmd_q.popleft()
                    offer["cmd"] = None
                if offer["tree"] is not None and tree_ready:
                    tree_q.popleft()
                    offer["tree"] = None
                if offer["data"] is not None and rd_ready:
                    responses.popleft()
                    offer["data"] = None
                if ra_valid and address_ready:
                    due = max(cycle + rng.randint(*latency),
                              responses[-1][0] if responses else 0)
                    responses.append((due, memory.payload(ra_payload)))
                if res_valid and result_ready:
                    beat = beats(params.result_layout, [res_payload])[0]
                    current.append(beat)
                    if beat["last"]:
                        packets.append(current)
                        current = []
                        report["status"].append(beats(params.status_layout, [status])[0])
                if dw_valid and draft_ready:
                    writes.append(beats(params.draft_layout, [dw_payload])[0])
                cycle += 1
            ctx.set(dut.cmd.valid, 0)
            ctx.set(dut.tree.valid, 0)
            ctx.set(dut.read_data.valid, 0)
            report["cycles"] += cycle
            assert not responses and not tree_q, f"{call.name}: unread responses or tree beats"
            problems = compare(call, outputs_from_dut(call, memory, packets, writes),
                               expected(call))
            assert not problems, "\n".join(problems)

    simulate(kernel, bench)
    return report
