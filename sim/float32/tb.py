"""cocotb testbench: a float32 core (``sim.float32.dut.Float32OpStream``) against numpy float32.

Configuration: ``parameters`` (the DUT's: ``operation`` mul, add, cmp or div), ``vectors``
(random pairs: ``vectors.operands``), ``seed``, ``idle`` and ``backpressure`` probabilities.
The corner-value pairs run first without idle or back-pressure (they also give latency and
initiation interval), then the random pairs with random idle and back-pressure. For ``add``
every pair is sent twice, as ``a + b`` and ``a - b``. Results compare by bit pattern, NaNs by
class.
"""

import cocotb
import numpy as np

from sim.bench import KernelBench, write_summary
from sim.cocotb_tb import latency_and_interval
from sim.float32.dut import Float32StreamParams
from sim.float32.vectors import directed_operands, mismatches, operands, reference


def _operations(operation, a, b):
    """Operands, subtract flags and numpy's results of every item of a phase."""
    if operation == "add":
        subtract = np.repeat([0, 1], a.size)
        expected = np.concatenate([reference("add", a, b), reference("sub", a, b)])
        return np.concatenate([a, a]), np.concatenate([b, b]), subtract, expected
    return a, b, np.zeros(a.size, dtype=np.int64), reference(operation, a, b)


def _results(bench, words):
    fields = bench.unpack("o", words)
    if bench.params.operation == "cmp":
        return np.stack([fields["less"], fields["equal"], fields["greater"]], axis=1).astype(bool)
    return fields["result"].astype(np.uint32)


async def _run_phase(bench, a, b, *, idle=0.0, backpressure=0.0):
    operation = bench.params.operation
    a, b, subtract, expected = _operations(operation, a, b)
    words = bench.pack("i", a=a, b=b, subtract=subtract)
    run = await bench.run({"i": words}, {"o": len(words)},
                          work=2 * len(words) + bench.params.latency, idle=idle,
                          backpressure=backpressure)
    actual = _results(bench, run.items["o"])
    bad = mismatches(operation, expected, actual)
    report = [f"  a={int(a[i]):08x} b={int(b[i]):08x} subtract={subtract[i]} "
              f"expected={expected[i]} actual={actual[i]}" for i in bad[:8]]
    assert bad.size == 0, f"{operation}: {bad.size} of {len(words)} results differ from " \
        "numpy:\n" + "\n".join(report)
    return len(words), run


@cocotb.test()
async def float32_core_matches_numpy(dut):
    bench = await KernelBench.start(dut, Float32StreamParams)
    operation = bench.params.operation
    n_directed, directed = await _run_phase(bench, *directed_operands())
    latency, interval = latency_and_interval(directed.at["i"], directed.at["o"])
    random_a, random_b = operands(operation, bench.np_rng, bench.cfg["vectors"])
    n_random, stressed = await _run_phase(bench, random_a, random_b, **bench.stress)
    bench.log(f"{operation}: {n_directed} directed + {n_random} random vectors bit-exact with "
              "numpy")
    write_summary(vectors=n_directed + n_random, directed_vectors=n_directed,
                  random_vectors=n_random, cycles=directed.cycles + stressed.cycles,
                  latency_cycles=latency, initiation_interval=interval)
