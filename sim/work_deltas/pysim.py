"""K3 ``WorkDeltas`` on Amaranth's own simulator (unit tests; no Verilator build)."""

import numpy as np

from hw.kernels.work_deltas import WorkDeltas
from sim.amaranth_tb import records, run_streams

from .vectors import check, command, score_beats

__all__ = ["run_on_amaranth"]


def run_on_amaranth(parameters: dict, calls, *, idle=0.0, backpressure=0.0, seed=0) -> None:
    """Run ``calls`` back to back on ``WorkDeltas(**parameters)``; raise ``AssertionError`` on
    the first call whose output beats differ from the golden."""
    dut = WorkDeltas(**parameters)
    k = dut.node_top_k
    rng = np.random.default_rng(seed)
    commands = [command(call, dut.max_verify_num) for call in calls]
    beats = [beat for call in calls for beat in score_beats(call, dut.lanes, rng)]
    (items,) = run_streams(dut, [(dut.cmd, commands), (dut.scores, beats)],
                           [(dut.deltas, (k + 1) * len(calls))], idle=idle,
                           backpressure=backpressure, seed=seed)
    fields = records(items, dut.params.output_layout)
    outputs = [{name: values[i] for name, values in fields.items()} for i in range(len(items))]
    for index, call in enumerate(calls):
        check(call, outputs[index * (k + 1):(index + 1) * (k + 1)])
