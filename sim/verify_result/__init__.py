"""Simulation target of K7 ``update_verify_result``: ``verify_result``.

``vectors`` makes the calls (K6 outputs from the golden chain draft round -> K4 -> greedy
K6, directed cases, the throughput call) and asks the golden model for the results, ``tb``
is the cocotb testbench. ``run_parameters`` runs the same testbench on a DUT built with
other parameters (``make sim`` uses ``PARAMETERS``); ``measure`` is the cycle-budget protocol of
docs/contributing.md.
"""

from ..targets import NotMeasured, SimTarget

__all__ = ["PARAMETERS", "TARGETS", "make_dut", "run_parameters", "measure"]

# The DUT of `make sim KERNEL=verify_result`: verify trees of up to 64 nodes, S up to 16.
PARAMETERS = {"max_draft_tokens": 64, "max_speculative_tokens": 16, "max_batch_size": 256,
              "token_width": 32, "loc_width": 32, "seq_len_width": 32,
              "pool_index_width": 16}


def make_dut(**parameters):
    """``VerifyResult`` at ``PARAMETERS``, updated by ``parameters``."""
    from hw.kernels.verify_result import VerifyResult

    return VerifyResult(**{**PARAMETERS, **parameters})


def measure(point: dict, *, seed: int, log_file=None) -> dict:
    """K7's cycle budget over one verify step at a benchmark contract point.

    One ``VerifyResult`` call for the whole batch on the model of ``make sim
    KERNEL=verify_result`` (``PARAMETERS``: n <= 64, S <= 16, B <= 256 cover every contract
    point), see ``sim.verify_result.tb.measurement``: the K6 outputs of
    ``vectors.verify_step_call`` (draft-round trees at the point, ``n = verify_num``,
    ``S = depth + 1``, greedy K6 following the draft 80 % of the time, random EOS and length
    limits), checked against the golden. ``cycles``: first input transfer to last output
    transfer, no idle or back-pressure. ``operations``: two compares per accepted token (the
    EOS and length-limit finish checks) plus one add per request (the ``verified_id`` offset
    prefix sum). ``initiation_interval``: cycles per request (``result`` beats; absent for a
    batch of one).
    """
    from ..harness import build_model, run_testbench

    k, width, depth = point["node_top_k"], point["tree_width"], point["depth"]
    nodes = 1 + k + (depth - 1) * width * k
    limits = {"n": (min(point["verify_num"], nodes), PARAMETERS["max_draft_tokens"],
                    "max_draft_tokens"),
              "S": (depth + 1, PARAMETERS["max_speculative_tokens"], "max_speculative_tokens"),
              "B": (point["batch"], PARAMETERS["max_batch_size"], "max_batch_size")}
    for name, (value, limit, parameter) in limits.items():
        if value > limit:
            raise NotMeasured(f"{name} = {value} exceeds `{parameter}` {limit}")
    spec = {key: point[key] for key in ("batch", "node_top_k", "tree_width", "depth",
                                        "verify_num", "vocab")}
    model = build_model(make_dut(), name="verify_result", log=print)
    config = {**TARGETS[0].config, "parameters": PARAMETERS, "measure": spec}
    return run_testbench(model, TARGETS[0].testbench, config, seed=seed,
                         log_file=log_file)["measurement"]


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
        measure=measure,
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
