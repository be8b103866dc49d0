"""K5 ``LogitsToProbas`` on Amaranth's simulator: small calls for the unit tests (no Verilator).

:func:`run_on_amaranth` sends the calls back to back through ``sim.amaranth_tb.run_streams``
(``cmd`` and ``logits`` with random idle, ``probs`` and ``predict`` with random
back-pressure), then checks every call's outputs against the golden
(``sim.logits_to_probas.vectors.check``).
"""

from amaranth.lib import data

from hw.kernels.logits_to_probas import LogitsToProbas
from sim.amaranth_tb import run_streams

from .vectors import beats, check, cmd_words, logit_words, work

__all__ = ["run_on_amaranth"]


def run_on_amaranth(parameters: dict, calls, *, idle=0.0, backpressure=0.0, seed=0) -> None:
    """Run ``calls`` back to back on ``LogitsToProbas(**parameters)``; raise
    ``AssertionError`` on any difference from the golden."""
    dut = LogitsToProbas(**parameters)
    params = dut.params

    def payloads(layout, words):
        return [data.Const(layout, word) for word in words]

    counts = [beats(params, call) for call in calls]
    probs, predict = run_streams(
        dut,
        [(dut.cmd, payloads(params.cmd_layout,
                            [w for call in calls for w in cmd_words(params, call)])),
         (dut.logits, payloads(params.logits_layout,
                               [w for call in calls for w in logit_words(params, call)]))],
        [(dut.probs, sum(c["probs"] for c in counts)),
         (dut.predict, sum(c["predict"] for c in counts))],
        idle=idle, backpressure=backpressure, seed=seed,
        max_cycles=int(sum(work(params, call) for call in calls)
                       / (1 - max(idle, backpressure)) ** 2) * 2 + 1000)
    probs = [item.as_value().value for item in probs]
    predict = [item.as_value().value for item in predict]
    for call, count in zip(calls, counts, strict=True):
        check(params, call, probs[:count["probs"]], predict[:count["predict"]])
        probs, predict = probs[count["probs"]:], predict[count["predict"]:]
