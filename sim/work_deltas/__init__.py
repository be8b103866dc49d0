"""Simulation target of K3 ``calculate_work_deltas`` + width policy: ``work_deltas``.

``vectors`` makes the calls (directed, random, the throughput call, case files) and asks the
golden models for their results, ``tb`` is the cocotb testbench. ``run_parameters`` runs the
same testbench on a DUT built with other parameters (``make sim`` uses the defaults);
``measure`` is the cycle-budget protocol of docs/contributing.md.
"""

from ..targets import SimTarget

__all__ = ["PARAMETERS", "CONFIG", "TARGETS", "make_dut", "run_parameters", "measure",
           "draft_round_cumu_counts"]

# The DUT of `make sim KERNEL=work_deltas` (the defaults of hw.kernels.work_deltas.WorkDeltas).
PARAMETERS = {"node_top_k": 8, "max_verify_num": 64, "lanes": 8, "max_batch_size": 256}

CONFIG = {
    "parameters": PARAMETERS,
    "vectors": 400,  # random calls, with idle and back-pressure
    "idle": 0.3,
    "backpressure": 0.3,
    # The throughput figure: K = 8, verify_num = 64, a full verify set (ws0 = 64).
    "perf": {"batch_size": 64, "verify_num": 64, "cumu_count": 1000},
}


def make_dut(**parameters):
    """``WorkDeltas`` at ``PARAMETERS``, updated by ``parameters``."""
    from hw.kernels.work_deltas import WorkDeltas

    return WorkDeltas(**{**PARAMETERS, **parameters})


def run_parameters(parameters: dict, *, overrides: dict | None = None, seed: int | None = None,
                   case=None, log_file=None, log=print) -> dict:
    """Build (or reuse) the model of ``WorkDeltas(**parameters)`` and run the ``work_deltas``
    testbench on it; returns the summary (``sim.targets.run_target`` for other parameters).

    Parameters
    ----------
    parameters : dict
        ``WorkDeltas`` keyword arguments (missing ones take ``PARAMETERS``).
    overrides : dict or None
        Testbench configuration entries to change (``vectors``, ``idle``, ``perf`` ...).
    seed, case, log_file, log
        As for ``sim.targets.run_target``.
    """
    from pathlib import Path

    from ..harness import build_model, run_testbench
    from ..targets import DEFAULT_SEED

    parameters = {**PARAMETERS, **parameters}
    config = {**CONFIG, **(overrides or {}), "parameters": parameters}
    if case is not None:
        config["case"] = str(Path(case).resolve())
    # One top name for every parameter set: the model cache is keyed by the Verilog, so the
    # default parameters share the model of `make sim KERNEL=work_deltas`.
    model = build_model(make_dut(**parameters), name="work_deltas", log=log)
    return run_testbench(model, "sim.work_deltas.tb", config,
                         seed=DEFAULT_SEED if seed is None else seed, log_file=log_file)


def draft_round_cumu_counts(node_top_k: int, tree_width: int, depth: int) -> list[int]:
    """The ``cumu_count`` K3 receives at each depth of a draft round at full width (§4): 1 at
    depth 1 (``K`` nodes under the root), then ``1 + K + (d - 2) * W * K``."""
    return [1] + [1 + node_top_k + (d - 2) * tree_width * node_top_k
                  for d in range(2, depth + 1)]


def measure(point: dict, *, seed: int, log_file=None) -> dict:
    """K3's cycle budget over one draft round at a benchmark contract point.

    One ``WorkDeltas`` call per depth (``cumu_count`` from ``draft_round_cumu_counts`` at
    ``tree_width``, the width policy's upper bound), each with the whole batch; the calls run
    back to back without idle or back-pressure on a DUT with ``node_top_k = K``,
    ``max_verify_num = max(64, verify_num)``, 8 lanes, ``max_batch_size = max(256, batch)``.
    The timing does not depend on the score values (random descending probabilities, checked
    against the golden). ``cycles``: first ``cmd`` transfer to last ``deltas`` transfer.
    ``operations``: float32 operations, ``3K`` adds per request and depth (gains, running
    sums, accumulations) plus ``K`` marginal subtractions and one multiply per call.
    ``initiation_interval``: cycles per request in the last depth's call.
    """
    k, width, depth = point["node_top_k"], point["tree_width"], point["depth"]
    verify_num, batch = point["verify_num"], point["batch"]
    parameters = {"node_top_k": k,
                  "max_verify_num": max(PARAMETERS["max_verify_num"], verify_num),
                  "max_batch_size": max(PARAMETERS["max_batch_size"], batch)}
    spec = {"batch_size": batch, "verify_num": verify_num,
            "cumu_counts": draft_round_cumu_counts(k, width, depth)}
    summary = run_parameters(parameters, overrides={"measure": spec}, seed=seed,
                             log_file=log_file)
    return summary["measurement"]


TARGETS = [
    SimTarget(
        name="work_deltas",
        description="K3 calculate_work_deltas + width policy vs golden "
                    "(directed + random calls, CASE= replay)",
        make_dut=make_dut,
        testbench="sim.work_deltas.tb",
        config=CONFIG,
        takes_case=True,
        figures_config={"vectors": 0},
        measure=measure,
    ),
]
