"""Simulation target of the K4 verify-tree build ``fused_tree_mask_operator``: ``tree_mask``.

``vectors`` makes the calls (trees grown by the golden draft round, directed trees, the
throughput call, case files) and asks the golden model for the results, ``tb`` is the cocotb
testbench. ``run_parameters`` runs the same testbench on a DUT built with other parameters
(``make sim`` uses ``PARAMETERS``).
"""

from ..targets import SimTarget

__all__ = ["PARAMETERS", "TARGETS", "make_dut", "run_parameters"]

# The DUT of `make sim KERNEL=tree_mask`: MAXN = 256 and verify sets up to 128 nodes (the
# packed layout's limit, so n = 65 and 128 are covered), 64-column mask words (rows of more
# than 64 columns take several words). The throughput figure is taken at verify_num = 64.
PARAMETERS = {"max_node_count": 256, "max_verify_num": 128, "mask_lanes": 64,
              "token_width": 32, "seq_len_width": 32, "max_batch_size": 256}


def make_dut(**parameters):
    """``TreeMask`` at ``PARAMETERS``, updated by ``parameters``."""
    from hw.kernels.tree_mask import TreeMask

    return TreeMask(**{**PARAMETERS, **parameters})


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
