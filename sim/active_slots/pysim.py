"""The active-slot compaction on Amaranth's own simulator (unit tests; no Verilator build)."""

import numpy as np

from hw.kernels.active_slots import ActiveSlots
from sim.amaranth_tb import records, run_streams

from .vectors import check_calls

__all__ = ["run_on_amaranth"]


def run_on_amaranth(parameters: dict, calls, *, idle=0.0, backpressure=0.0, seed=0) -> None:
    """Run ``calls`` back to back on ``ActiveSlots(**parameters)``; raise ``AssertionError``
    on the first difference from the golden."""
    dut = ActiveSlots(**parameters)
    commands = [{"batch_size": c.batch_size} for c in calls]
    flags = [{"finished": int(f), "first": int(i == 0), "last": int(i == c.batch_size - 1)}
             for c in calls for i, f in enumerate(c.finished)]
    total = len(flags)
    work = 3 * total + 6 * len(calls)
    inverse, slots, counts = run_streams(
        dut, [(dut.cmd, commands), (dut.finished, flags)],
        [(dut.inverse, total), (dut.slots, total), (dut.count, len(calls))], idle=idle,
        backpressure=backpressure, seed=seed,
        max_cycles=int(work / (1 - max(idle, backpressure)) ** 2) * 2 + 1000)
    params = dut.params
    check_calls(calls, records(inverse, params.inverse_layout, np.int64),
                records(slots, params.slot_layout, np.int64),
                records(counts, params.count_layout, np.int64))
