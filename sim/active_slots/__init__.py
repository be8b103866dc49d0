"""Simulation target of the active-slot compaction (second half of K7): ``active_slots``.

``vectors`` makes the ``finished`` vectors (directed, uniform random, and K7 golden results on
draft-round trees) and asks ``golden.compact_active_slots`` for the results, ``tb`` is the
cocotb testbench (phases ``figures``, ``directed``, ``random``, ``case``, ``measurement``).
"""

from ..targets import SimTarget, check_limits, contract_spec

__all__ = ["PARAMETERS", "TARGET", "TARGETS"]

# The DUT of `make sim KERNEL=active_slots`.
PARAMETERS = {"max_batch_size": 256}


class ActiveSlotsTarget(SimTarget):
    def case_parameters(self, case, parameters):
        """``max_batch_size`` raised to the case's batch."""
        from .vectors import call_from_case

        call, _ = call_from_case(case)
        return {**parameters,
                "max_batch_size": max(parameters["max_batch_size"], call.batch_size)}

    def measure_parameters(self, point):
        """One ``ActiveSlots`` call for the whole batch on the model of ``make sim``
        (``max_batch_size = 256`` covers every contract batch); ``finished`` is K7's golden
        result for the verify step of ``sim.verify_result.vectors.verify_step_call`` at the
        point (same seed). ``cycles``: first input transfer to last output transfer, no idle
        or back-pressure (``B + (B - active_count) + 2`` by design). ``operations``: one add
        per row (the running count of survivors). ``initiation_interval``: cycles per
        ``finished`` row."""
        check_limits(PARAMETERS, {"B": (point["batch"], "max_batch_size")})
        return PARAMETERS, contract_spec(point)


TARGET = ActiveSlotsTarget(
    "active_slots", component="hw.kernels.active_slots:ActiveSlots", parameters=PARAMETERS,
    description="active-slot compaction (active_slots, active_inverse, active_count) vs "
                "golden (directed, random, K7 finished flags; CASE= replay)",
    # 200 random calls; the throughput figure: a full batch, a tenth of the requests finished.
    config={"vectors": 200, "perf": {"batch_size": 256, "finished_fraction": 0.1}})

TARGETS = [TARGET]
