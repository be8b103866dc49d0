"""Simulation target of the active-slot compaction (second half of K7): ``active_slots``.

``vectors`` makes the ``finished`` vectors (directed, uniform random, and K7 golden results on
draft-round trees) and asks ``golden.compact_active_slots`` for the results, ``tb`` is the
cocotb testbench. ``run_parameters`` runs it on a DUT with other parameters; ``measure`` is the
cycle-budget protocol of docs/contributing.md.
"""

from ..targets import NotMeasured, SimTarget

__all__ = ["PARAMETERS", "TARGETS", "make_dut", "run_parameters", "measure"]

PARAMETERS = {"max_batch_size": 256}


def make_dut(**parameters):
    """``ActiveSlots`` at ``PARAMETERS``, updated by ``parameters``."""
    from hw.kernels.active_slots import ActiveSlots

    return ActiveSlots(**{**PARAMETERS, **parameters})


def measure(point: dict, *, seed: int, log_file=None) -> dict:
    """The compaction's cycle budget over one verify step at a benchmark contract point.

    One ``ActiveSlots`` call for the whole batch on the model of ``make sim
    KERNEL=active_slots`` (``max_batch_size = 256`` covers every contract batch), see
    ``sim.active_slots.tb.measurement``: ``finished`` is K7's golden result for the verify
    step of ``sim.verify_result.vectors.verify_step_call`` at the point (same seed), checked
    against the golden. ``cycles``: first input transfer to last output transfer, no idle or
    back-pressure (``B + (B - active_count) + 2`` by design). ``operations``: one add per row
    (the running count of survivors, the exclusive prefix sum). ``initiation_interval``: cycles
    per ``finished`` row (absent for a batch of one).
    """
    from ..harness import build_model, run_testbench

    if point["batch"] > PARAMETERS["max_batch_size"]:
        raise NotMeasured(f"B = {point['batch']} exceeds `max_batch_size` "
                          f"{PARAMETERS['max_batch_size']}")
    spec = {key: point[key] for key in ("batch", "node_top_k", "tree_width", "depth",
                                        "verify_num", "vocab")}
    model = build_model(make_dut(), name="active_slots", log=print)
    config = {**TARGETS[0].config, "parameters": PARAMETERS, "measure": spec}
    return run_testbench(model, TARGETS[0].testbench, config, seed=seed,
                         log_file=log_file)["measurement"]


TARGETS = [
    SimTarget(
        name="active_slots",
        description="active-slot compaction (active_slots, active_inverse, active_count) vs "
                    "golden (directed, random, K7 finished flags; CASE= replay)",
        make_dut=make_dut,
        testbench="sim.active_slots.tb",
        config={
            "parameters": PARAMETERS,
            "vectors": 200,  # random calls, with idle and back-pressure
            "idle": 0.3,
            "backpressure": 0.3,
            # The throughput figure: a full batch, a tenth of the requests finished.
            "perf": {"batch_size": 256, "finished_fraction": 0.1},
        },
        takes_case=True,
        figures_config={"vectors": 0},
        measure=measure,
    ),
]


def run_parameters(parameters: dict, *, overrides: dict | None = None, seed: int | None = None,
                   case=None, log_file=None, log=print) -> dict:
    """Build (or reuse) the model of ``ActiveSlots(**parameters)`` and run the testbench
    (``overrides``, ``seed``, ``case``, ``log_file``, ``log`` as for
    ``sim.targets.run_target``)."""
    from pathlib import Path

    from ..harness import build_model, run_testbench
    from ..targets import DEFAULT_SEED

    parameters = {**PARAMETERS, **parameters}
    config = {**TARGETS[0].config, **(overrides or {}), "parameters": parameters}
    if case is not None:
        config["case"] = str(Path(case).resolve())
    suffix = "_".join(str(value) for value in parameters.values())
    model = build_model(make_dut(**parameters), name=f"active_slots_{suffix}", log=log)
    return run_testbench(model, TARGETS[0].testbench, config,
                         seed=DEFAULT_SEED if seed is None else seed, log_file=log_file)
