"""The K4 kernel on Amaranth's own simulator (unit tests; no Verilator build).

``run_on_amaranth`` drives calls through ``TreeMask(**parameters)`` with optional random idle
cycles on the inputs and back-pressure on the outputs (``sim.amaranth_tb.run_streams``), and
checks every call against the golden (``vectors.check_calls``).
"""

import numpy as np

from hw.kernels.tree_mask import TreeMask
from sim.amaranth_tb import run_streams

from .vectors import check_calls, input_fields, output_counts

__all__ = ["run_on_amaranth"]


def _records(items, layout):
    return {name: np.array([int(getattr(item, name)) for item in items], dtype=object)
            for name, _ in layout}


def run_on_amaranth(parameters: dict, calls, *, idle=0.0, backpressure=0.0, seed=0) -> None:
    """Run ``calls`` back to back on ``TreeMask(**parameters)``; raise ``AssertionError``
    on the first difference from the golden."""
    dut = TreeMask(**parameters)
    params = dut.params
    maxv, lanes = params.max_verify_num, params.mask_lanes
    feeds = {port: [{k: int(v[i]) for k, v in fields.items()}
                    for i in range(len(next(iter(fields.values()))))]
             for port, fields in input_fields(calls).items()}
    counts = output_counts(calls, maxv, lanes)
    work = len(feeds["nodes"]) + 3 * counts["tree"] + counts["mask"] + 20 * len(calls)
    trees, masks = run_streams(
        dut, [(getattr(dut, port), items) for port, items in feeds.items()],
        [(dut.tree, counts["tree"]), (dut.mask, counts["mask"])], idle=idle,
        backpressure=backpressure, seed=seed,
        max_cycles=int(work / (1 - max(idle, backpressure)) ** 2) * 2 + 1000)
    check_calls(calls, maxv, lanes, _records(trees, params.tree_layout),
                _records(masks, params.mask_layout))
