"""Simulation target of K7 ``update_verify_result``: ``verify_result``.

``vectors`` makes the calls (K6 outputs from the golden chain draft round -> K4 -> greedy
K6, directed cases, the throughput call) and asks the golden model for the results, ``tb``
is the cocotb testbench. ``run_parameters`` runs the same testbench on a DUT built with
other parameters (``make sim`` uses ``PARAMETERS``).
"""

from ..targets import SimTarget

__all__ = ["PARAMETERS", "TARGETS", "make_dut", "run_parameters"]

# The DUT of `make sim KERNEL=verify_result`: verify trees of up to 64 nodes, S up to 16.
PARAMETERS = {"max_draft_tokens": 64, "max_speculative_tokens": 16, "max_batch_size": 256,
              "token_width": 32, "loc_width": 32, "seq_len_width": 32,
              "pool_index_width": 16}


def make_dut(**parameters):
    """``VerifyResult`` at ``PARAMETERS``, updated by ``parameters``."""
    from hw.kernels.verify_result import VerifyResult

    return VerifyResult(**{**PARAMETERS, **parameters})


TARGETS = [
    SimTarget(
        name="verify_result",
        description="K7 update_verify_result (accept lengths, verified ids, KV writes, "
                    "evictions, next roots, finished) vs golden on draft-round trees "
                    "(CASE= replay)",
        make_dut=make_dut,
        testbench="sim.verify_result.tb",
        config={
            "parameters": PARAMETERS,
            "vectors": 150,  # random calls, with idle and back-pressure
            "idle": 0.3,
            "backpressure": 0.3,
            # The throughput figure: n = verify_num = 64 out of 256-node trees, S = 16.
            "perf": {"batch_size": 32, "verify_num": 64, "max_node_count": 256, "s": 16},
        },
        takes_case=True,
        figures_config={"vectors": 0},
    ),
]


def run_parameters(parameters: dict, *, overrides: dict | None = None, seed: int | None = None,
                   case=None, log_file=None, log=print) -> dict:
    """Build (or reuse) the model of ``VerifyResult(**parameters)`` and run the
    ``verify_result`` testbench on it; returns the summary.

    Parameters
    ----------
    parameters : dict
        ``VerifyResult`` keyword arguments (missing ones take ``PARAMETERS``).
    overrides : dict or None
        Testbench configuration entries to change (``vectors``, ``perf`` ...).
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
    model = build_model(make_dut(**parameters), name=f"verify_result_{suffix}", log=log)
    return run_testbench(model, TARGETS[0].testbench, config,
                         seed=DEFAULT_SEED if seed is None else seed, log_file=log_file)
