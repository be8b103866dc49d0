"""The K7 kernel on Amaranth's own simulator (unit tests; no Verilator build).

``run_on_amaranth`` drives calls through ``VerifyResult(**parameters)`` with optional random
idle cycles and back-pressure, and checks every call against the golden (``vectors.check``).
"""

import numpy as np

from hw.kernels.verify_result import VerifyResult
from sim.amaranth_tb import records, run_streams

from .vectors import check, command, expected, node_fields, request_fields

__all__ = ["run_on_amaranth"]


def run_on_amaranth(parameters: dict, calls, *, idle=0.0, backpressure=0.0, seed=0) -> None:
    """Run ``calls`` back to back on ``VerifyResult(**parameters)``; raise
    ``AssertionError`` on the first difference from the golden."""
    dut = VerifyResult(**parameters)
    flat_bits, maxs = dut.params.flat_bits, dut.max_speculative_tokens
    lengths = [int(np.sum(expected(c)["accept_length"])) for c in calls]
    commands = [command(c) for c in calls]
    nodes, requests = [], []
    for c in calls:
        fields = node_fields(c)
        nodes += [{k: int(v[i]) for k, v in fields.items()}
                  for i in range(c.batch_size * c.n)]
        rows = request_fields(c, flat_bits, maxs)
        for b in range(c.batch_size):
            beat = {k: int(v[b]) for k, v in rows.items() if k != "accept_index"}
            word = int(rows["accept_index"][b])
            beat["accept_index"] = [(word >> (j * flat_bits)) & ((1 << flat_bits) - 1)
                                    for j in range(maxs)]
            requests.append(beat)
    work = len(nodes) + sum(lengths) + 6 * len(requests) + 20 * len(calls)
    commits, results = run_streams(
        dut, [(dut.cmd, commands), (dut.nodes, nodes), (dut.request, requests)],
        [(dut.commit, sum(lengths)), (dut.result, len(requests))], idle=idle,
        backpressure=backpressure, seed=seed,
        max_cycles=int(work / (1 - max(idle, backpressure)) ** 2) * 2 + 1000)
    commit = records(commits, dut.params.commit_layout)
    result = records(results, dut.params.result_layout)
    k = r = 0
    for c, length in zip(calls, lengths, strict=True):
        check(c, {key: v[k:k + length] for key, v in commit.items()},
              {key: v[r:r + c.batch_size] for key, v in result.items()})
        k, r = k + length, r + c.batch_size
