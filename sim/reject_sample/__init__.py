"""Simulation targets of K6 (``draft_tree_reject_sample``, docs/kernels.md §8):
``reject_sample`` and the divider core ``fp32_div``.

* ``reject_sample``: ``hw.kernels.reject_sample.RejectSample`` at ``PARAMETERS`` (n <= 64,
  S <= 8, V <= 131072, 8 lanes) against the three K6 goldens (``sim.reject_sample.tb``); takes
  ``CASE=`` files (``sim.reject_sample.vectors.call_from_case``).
* ``fp32_div``: ``hw.lib.float32_divide.Float32Divide`` against numpy on 200,000 random pairs
  plus every corner pair (``sim.reject_sample.divide_tb``).

``vectors`` holds the host side (calls, golden results, packing), ``pysim`` the Amaranth
simulator runner of the unit tests, ``run_parameters`` runs the testbench on a DUT built with
other parameters; ``measure`` is the cycle-budget protocol of docs/contributing.md.
"""

from ..targets import NotMeasured, SimTarget

__all__ = ["PARAMETERS", "TARGETS", "make_dut", "run_parameters", "measure"]

# The DUT of `make sim KERNEL=reject_sample` (RejectSample's defaults).
PARAMETERS = {"max_nodes": 64, "max_steps": 8, "max_vocab_size": 131072, "lanes": 8,
              "read_slots": 32, "segment_words": 64}


def make_dut(**parameters):
    """``RejectSample`` at ``PARAMETERS``, updated by ``parameters``."""
    from hw.kernels.reject_sample import RejectSample

    return RejectSample(**{**PARAMETERS, **parameters})


def _make_divider():
    from .divide import Float32DivideStream

    return Float32DivideStream()


def measure(point: dict, *, seed: int, log_file=None) -> dict:
    """K6's cycle budget over one verify step at a benchmark contract point.

    The batch's requests one after the other on the model of ``make sim
    KERNEL=reject_sample`` (``PARAMETERS``: n <= 64, S <= 8, V <= 131072 cover every contract
    point), see ``sim.reject_sample.tb.measurement``: ``vectors.verify_step_call`` (the K4
    verify trees of draft-round trees at the point, ``S = depth + 1``, EAGLE-like target rows
    of ``V = vocab``, sampling mode), the ``target_probs`` memory answering after a fixed
    latency of ``figure_latency`` (4) clocks; checked against the golden. ``cycles``: first
    input transfer to last output transfer without idle or back-pressure, the walks and the
    final rows' residual streams (``V / lanes`` words each) included. ``operations``: float32
    operations, three per sibling decision (the ``prob_acc`` add and the two acceptance
    compares) plus, per request, ``2 V`` for the final row (residual select and running-sum
    add per element) and the ``coin * sum`` multiply; the rescanned segment is not counted.
    ``initiation_interval``: cycles per request (``result`` packet ends; absent for a batch of
    one).
    """
    from ..harness import build_model, run_testbench

    k, width, depth = point["node_top_k"], point["tree_width"], point["depth"]
    nodes = 1 + k + (depth - 1) * width * k
    limits = {"n": (min(point["verify_num"], nodes), PARAMETERS["max_nodes"], "max_nodes"),
              "S": (depth + 1, PARAMETERS["max_steps"], "max_steps"),
              "V": (point["vocab"], PARAMETERS["max_vocab_size"], "max_vocab_size")}
    for name, (value, limit, parameter) in limits.items():
        if value > limit:
            raise NotMeasured(f"{name} = {value} exceeds `{parameter}` {limit}")
    spec = {key: point[key] for key in ("batch", "node_top_k", "tree_width", "depth",
                                        "verify_num", "vocab")}
    model = build_model(make_dut(), name="reject_sample", log=print)
    config = {**TARGETS[0].config, "parameters": PARAMETERS, "measure": spec}
    return run_testbench(model, TARGETS[0].testbench, config, seed=seed,
                         log_file=log_file)["measurement"]


TARGETS = [
    SimTarget(
        name="reject_sample",
        description="K6 tree rejection sampling + greedy verify vs golden (random trees, "
                    "directed cases, LFSR coins, random memory latency; CASE= replay)",
        make_dut=make_dut,
        testbench="sim.reject_sample.tb",
        config={
            "parameters": PARAMETERS,
            "random_calls": 150,
            "lfsr_trials": 2000,
            "idle": 0.25,
            "backpressure": 0.25,
            "max_latency": 12,
            "figure_latency": 4,
            "perf_requests": 16,
            "row_vocab": 128256,
        },
        takes_case=True,
        figures_config={"random_calls": 0, "lfsr_trials": 0},
        measure=measure,
    ),
    SimTarget(
        name="fp32_div",
        description="float32 divide core (K6's threshold_acc divider) vs numpy "
                    "(corner pairs + subnormal ties + random mix)",
        make_dut=_make_divider,
        testbench="sim.reject_sample.divide_tb",
        config={"vectors": 200_000, "idle": 0.25, "backpressure": 0.25},
    ),
]


def run_parameters(parameters: dict, *, overrides: dict | None = None, seed: int | None = None,
                   case=None, log_file=None, log=print) -> dict:
    """Build (or reuse) the model of ``RejectSample(**parameters)`` and run the
    ``reject_sample`` testbench on it (``sim.targets.run_target`` for other parameters)."""
    from pathlib import Path

    from ..harness import build_model, run_testbench
    from ..targets import DEFAULT_SEED

    parameters = {**PARAMETERS, **parameters}
    config = {**TARGETS[0].config, **(overrides or {}), "parameters": parameters}
    if case is not None:
        config["case"] = str(Path(case).resolve())
    suffix = "_".join(str(value) for value in parameters.values())
    model = build_model(make_dut(**parameters), name=f"reject_sample_{suffix}", log=log)
    return run_testbench(model, TARGETS[0].testbench, config,
                         seed=DEFAULT_SEED if seed is None else seed, log_file=log_file)
