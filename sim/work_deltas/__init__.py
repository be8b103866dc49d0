"""Simulation target of K3 ``calculate_work_deltas`` + width policy: ``work_deltas``.

``vectors`` makes the calls (directed, random, the throughput call, case files) and asks the
golden models for their results, ``tb`` is the cocotb testbench (phases ``figures``,
``directed``, ``random``, ``case``, ``measurement``).
"""

from ..targets import SimTarget, check_limits

__all__ = ["PARAMETERS", "TARGET", "TARGETS", "draft_round_cumu_counts"]

# The DUT of `make sim KERNEL=work_deltas` (the defaults of hw.kernels.work_deltas.WorkDeltas).
PARAMETERS = {"node_top_k": 8, "max_verify_num": 64, "lanes": 8, "max_batch_size": 256}


def draft_round_cumu_counts(node_top_k: int, tree_width: int, depth: int) -> list[int]:
    """The ``cumu_count`` K3 receives at each depth of a draft round at full width (§4): 1 at
    depth 1 (``K`` nodes under the root), then ``1 + K + (d - 2) * W * K``."""
    return [1] + [1 + node_top_k + (d - 2) * tree_width * node_top_k
                  for d in range(2, depth + 1)]


class WorkDeltasTarget(SimTarget):
    def case_parameters(self, case, parameters):
        """The case's ``node_top_k``; ``max_verify_num`` and ``max_batch_size`` raised to the
        case's ``max_verify_num`` and ``batch_size`` (``lanes`` as given)."""
        from .vectors import call_from_case

        call, _, _ = call_from_case(case)
        return {**parameters, "node_top_k": call.node_top_k,
                "max_verify_num": max(parameters["max_verify_num"], call.max_verify_num),
                "max_batch_size": max(parameters["max_batch_size"], call.batch_size)}

    def measure_parameters(self, point):
        """K3's cycle budget over one draft round: one ``WorkDeltas`` call per depth
        (``cumu_count`` from ``draft_round_cumu_counts`` at ``tree_width``, the width policy's
        upper bound), each with the whole batch, back to back without idle or back-pressure on
        a DUT with ``node_top_k = K``, ``max_verify_num = max(64, verify_num)``, 8 lanes,
        ``max_batch_size = max(256, batch)``. The timing does not depend on the score values
        (random descending probabilities, checked against the golden). ``cycles``: first
        ``cmd`` transfer to last ``deltas`` transfer. ``operations``: float32 operations,
        ``3K`` adds per request and depth (gains, running sums, accumulations) plus ``K``
        marginal subtractions and one multiply per call. ``initiation_interval``: cycles per
        request in the last depth's call."""
        from hw.kernels.work_deltas import MAX_NODE_TOP_K

        k, verify_num, batch = point["node_top_k"], point["verify_num"], point["batch"]
        check_limits({"node_top_k": MAX_NODE_TOP_K}, {"K": (k, "node_top_k")})
        parameters = {**PARAMETERS, "node_top_k": k,
                      "max_verify_num": max(PARAMETERS["max_verify_num"], verify_num),
                      "max_batch_size": max(PARAMETERS["max_batch_size"], batch)}
        spec = {"batch_size": batch, "verify_num": verify_num,
                "cumu_counts": draft_round_cumu_counts(k, point["tree_width"], point["depth"])}
        return parameters, spec


TARGET = WorkDeltasTarget(
    "work_deltas", component="hw.kernels.work_deltas:WorkDeltas", parameters=PARAMETERS,
    description="K3 calculate_work_deltas + width policy vs golden (directed + random calls, "
                "CASE= replay)",
    # 400 random calls; the throughput figure: K = 8, verify_num = 64, a full verify set.
    config={"vectors": 400, "perf": {"batch_size": 64, "verify_num": 64, "cumu_count": 1000}})

TARGETS = [TARGET]
