"""K5 ``LogitsToProbas`` on Amaranth's simulator: small calls for the unit tests (no Verilator).

:func:`run_on_amaranth` plays every endpoint (``cmd``, ``logits`` sources with random idle,
``probs``/``predict`` sinks with random back-pressure) in one clocked testbench, then checks
the outputs against the golden (``sim.logits_to_probas.vectors``).
"""

import random
from collections import deque

from amaranth.hdl import Value

from sim.amaranth_tb import simulate

from .vectors import cmd_words, compare, expected, logit_words, outputs

__all__ = ["run_on_amaranth"]


def run_on_amaranth(kernel, calls, *, idle=0.0, backpressure=0.0, seed=0,
                    timeout=200_000) -> dict:
    """Run ``calls`` one after the other; raise AssertionError on any difference from the
    golden. Returns ``{"cycles": [per call]}``."""
    rng = random.Random(seed)
    report = {"cycles": []}

    async def bench(ctx):
        dut = kernel
        for call in calls:
            queues = {"cmd": deque(cmd_words(kernel, call)),
                      "logits": deque(logit_words(kernel, call))}
            offer = {"cmd": None, "logits": None}
            probs, predicts = [], []
            rows = call["logits"].shape[0]
            cycle = 0
            while len(predicts) < rows or queues["logits"] or offer["logits"] is not None \
                    or not _probs_done(kernel, call, probs):
                assert cycle < timeout, f"{call['name']}: no completion in {timeout} cycles"
                for name, queue in queues.items():
                    port = getattr(dut, name)
                    if offer[name] is None and queue and rng.random() >= idle:
                        offer[name] = queue.popleft()
                    ctx.set(port.valid, offer[name] is not None)
                    if offer[name] is not None:
                        ctx.set(Value.cast(port.payload), offer[name])
                probs_ready = rng.random() >= backpressure
                predict_ready = rng.random() >= backpressure
                ctx.set(dut.probs.ready, probs_ready)
                ctx.set(dut.predict.ready, predict_ready)
                (_, _, cmd_ready, logits_ready, p_valid, p_payload, t_valid,
                 t_payload) = await ctx.tick().sample(
                    dut.cmd.ready, dut.logits.ready, dut.probs.valid,
                    Value.cast(dut.probs.payload), dut.predict.valid,
                    Value.cast(dut.predict.payload))
                if offer["cmd"] is not None and cmd_ready:
                    offer["cmd"] = None
                if offer["logits"] is not None and logits_ready:
                    offer["logits"] = None
                if probs_ready and p_valid:
                    probs.append(int(p_payload))
                if predict_ready and t_valid:
                    predicts.append(int(t_payload))
                cycle += 1
            got_probs, got_predict, problems = outputs(kernel, call, probs, predicts)
            problems = compare(call, got_probs, got_predict,
                               expected(call, kernel.input_format), problems)
            assert not problems, "\n".join(problems)
            report["cycles"].append(cycle)
        ctx.set(dut.cmd.valid, 0)
        ctx.set(dut.logits.valid, 0)

    simulate(kernel, bench)
    return report


def _probs_done(kernel, call, probs):
    from .vectors import greedy_rows

    words = -(-call["logits"].shape[1] // kernel.lanes)
    return len(probs) >= int((~greedy_rows(call)).sum()) * words
