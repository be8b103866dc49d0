"""The GPU baseline of the engine's workload (issues 37 and 38).

The same contract points, trees, seeds and logits generators as the cycle budget
(``reports/cycle_budget.json``), run as GPU kernels with the semantics of the project's goldens:

* ``verify`` (``bench.gpu.verify``): SGLang's verify chain (softmax over all ``B*n`` rows,
  top-k / top-p renormalisation, zero-filled draft probabilities, tree speculative sampling,
  greedy verify, the verify-tree build) and the visited-rows kernel (one Triton program per
  request that reads only the rows its walk visits);
* ``draft`` (``bench.gpu.draft``): K1 (score, sort, hot-token remap, fp16 hidden gather), K2
  (tree update) and K3 (work deltas) per depth, and the whole draft round;
* ``summary`` (``bench.gpu.summary``): ``reports/fpga_vs_h100_summary.md`` from whatever GPU
  CSVs exist and the cycle budget, naming the figures that are missing.

Every op is checked against the goldens on the same inputs before it is timed
(``bench.gpu.checks``). Timing (``bench.gpu.timing``) uses CUDA events on a GPU; on a machine
without one the same code runs with a wall-clock timer and every row is marked
``cpu-validation`` (never a GPU figure). ``python -m bench.gpu --help`` lists the commands;
``bench/gpu/run_on_device.sh`` is the one prepared run on an H100.
"""
