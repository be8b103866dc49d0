"""Simulation target of the K4 verify-tree build ``fused_tree_mask_operator``: ``tree_mask``.

``vectors`` makes the calls (trees grown by the golden draft round, directed trees, the
throughput call, case files) and asks the golden model for the results, ``tb`` is the cocotb
testbench. ``run_parameters`` runs the same testbench on a DUT built with other parameters
(``make sim`` uses ``PARAMETERS``); ``measure`` is the cycle-budget protocol of
docs/contributing.md.
"""

from ..targets import NotMeasured, SimTarget

__all__ = ["PARAMETERS", "TARGETS", "make_dut", "run_parameters", "draft_round_node_count",
           "measure_parameters", "measure"]

# The DUT of `make sim KERNEL=tree_mask`: MAXN = 256 and verify sets up to 128 nodes (the
# packed layout's limit, so n = 65 and 128 are covered), 64-column mask words (rows of more
# than 64 columns take several words). The throughput figure is taken at verify_num = 64.
PARAMETERS = {"max_node_count": 256, "max_verify_num": 128, "mask_lanes": 64,
              "token_width": 32, "seq_len_width": 32, "max_batch_size": 256}


def make_dut(**parameters):
    """``TreeMask`` at ``PARAMETERS``, updated by ``parameters``."""
    from hw.kernels.tree_mask import TreeMask

    return TreeMask(**{**PARAMETERS, **parameters})


def draft_round_node_count(node_top_k: int, tree_width: int, depth: int) -> int:
    """``cumu_count`` after a full-width draft round: the root, ``K`` nodes at depth 1, then
    ``W * K`` per further depth (``1 + K + (depth - 1) * W * K``)."""
    return 1 + node_top_k + (depth - 1) * tree_width * node_top_k


def measure_parameters(point: dict) -> dict:
    """The ``TreeMask`` parameters a benchmark point is measured with: ``PARAMETERS`` (the
    model of ``make sim KERNEL=tree_mask``) when the point's tree fits in its ``MAXN = 256``
    nodes, else ``MAXN`` raised to the next power of two that holds the round (512 for the
    contract's eagle2 and serving trees, 411 and 265 nodes); ``MAXV = 128`` and the batch width
    cover every contract point. Raises ``NotMeasured`` for a point outside the kernel's range.
    """
    count = draft_round_node_count(point["node_top_k"], point["tree_width"], point["depth"])
    n = min(point["verify_num"], count)
    if n > PARAMETERS["max_verify_num"]:
        raise NotMeasured(f"verify set n = {n} exceeds `max_verify_num` "
                          f"{PARAMETERS['max_verify_num']} (the packed layout's limit)")
    if point["batch"] > PARAMETERS["max_batch_size"]:
        raise NotMeasured(f"B = {point['batch']} exceeds `max_batch_size` "
                          f"{PARAMETERS['max_batch_size']}")
    parameters = dict(PARAMETERS)
    if count > parameters["max_node_count"]:
        parameters["max_node_count"] = 1 << (count - 1).bit_length()
    return parameters


def measure(point: dict, *, seed: int, log_file=None) -> dict:
    """K4's cycle budget over one verify step at a benchmark contract point.

    One ``TreeMask`` call for the whole batch (see ``sim.tree_mask.tb.measurement``): ``B``
    cumulative trees grown by the golden draft round at the point's ``K``, ``tree_width`` and
    ``depth`` (width-policy cost 0, so every depth is as wide as the cap allows:
    ``draft_round_node_count`` nodes), ``verify_num`` of the point, the packed mask layout
    (``QLEN_ONLY_BITPACKING``), checked against the golden. The DUT is
    ``measure_parameters(point)``. ``cycles``: first input transfer to last output transfer,
    no idle or back-pressure. ``operations``: per request, ``(cumu_count - 1) * (n - 1)`` key
    compares of the insertion array (each non-root node against the ``n - 1`` slots of the
    verify set) plus ``n`` ancestor-row ORs (one mask row per position).
    ``initiation_interval``: cycles per request (first node beat of each request; absent for
    a batch of one).
    """
    parameters = measure_parameters(point)
    spec = {key: point[key] for key in ("batch", "node_top_k", "tree_width", "depth",
                                        "verify_num", "vocab")}
    summary = _run_measurement(parameters, spec, seed=seed, log_file=log_file)
    return summary["measurement"]


def _run_measurement(parameters: dict, spec: dict, *, seed: int, log_file=None,
                     log=print) -> dict:
    """The ``measurement`` test on ``TreeMask(**parameters)``: the model of ``make sim`` (top
    name ``tree_mask``) for ``PARAMETERS``, else the model ``run_parameters`` builds."""
    from ..harness import build_model, run_testbench

    if parameters == PARAMETERS:
        name = "tree_mask"
    else:
        name = "tree_mask_" + "_".join(str(value) for value in parameters.values())
    model = build_model(make_dut(**parameters), name=name, log=log)
    config = {**TARGETS[0].config, "parameters": parameters, "measure": spec}
    return run_testbench(model, TARGETS[0].testbench, config, seed=seed, log_file=log_file)


TARGETS = [
    SimTarget(
        name="tree_mask",
        description="K4 verify-tree build (selection, retrive arrays, positions, 3 mask "
                    "layouts) vs golden on draft-round and directed trees (CASE= replay)",
        make_dut=make_dut,
        testbench="sim.tree_mask.tb",
        config={
            "parameters": PARAMETERS,
            "vectors": 60,  # random calls, with idle and back-pressure
            "idle": 0.3,
            "backpressure": 0.3,
            "stress_directed": True,  # the directed calls once more under idle/back-pressure
            # The throughput figure: verify_num = 64 on 256-node trees (K = 5, width 5,
            # 11 depths: 1 + 5 + 10 * 25 = 256 nodes), packed layout.
            "perf": {"batch_size": 16, "verify_num": 64, "node_top_k": 5, "tree_width": 5,
                     "depths": 11, "mode": 2},
        },
        takes_case=True,
        figures_config={"vectors": 0, "stress_directed": False},
        measure=measure,
    ),
]


def run_parameters(parameters: dict, *, overrides: dict | None = None, seed: int | None = None,
                   case=None, log_file=None, log=print) -> dict:
    """Build (or reuse) the model of ``TreeMask(**parameters)`` and run the ``tree_mask``
    testbench on it; returns the summary (``sim.targets.run_target`` for other parameters).

    Parameters
    ----------
    parameters : dict
        ``TreeMask`` keyword arguments (missing ones take ``PARAMETERS``).
    overrides : dict or None
        Testbench configuration entries to change (``vectors``, ``idle``, ``perf`` ...).
    seed, case, log_file, log
        As for ``sim.targets.run_target``.
    """
    from pathlib import Path

    from ..harness import build_model, run_testbench
    from ..targets import DEFAULT_SEED

    parameters = {**PARAMETERS, **parameters}
    config = {**TARGETS[0].config, **(overrides or {}), "parameters": parameters}
    if case is not None:
        config["case"] = str(Path(case).resolve())
    suffix = "_".join(str(value) for value in parameters.values())
    model = build_model(make_dut(**parameters), name=f"tree_mask_{suffix}", log=log)
    return run_testbench(model, TARGETS[0].testbench, config,
                         seed=DEFAULT_SEED if seed is None else seed, log_file=log_file)

