"""Simulation target of the K2 kernel ``update_cumu_draft_state``: ``update_state``.

``host`` converts ABI buffers to and from the kernel's stream payloads (and holds the host
API checks), ``vectors`` makes states, requests and directed cases and reads/writes case files,
``tb`` is the cocotb testbench (``make sim KERNEL=update_state [CASE=<file>]``), ``pysim`` runs
the kernel on Amaranth's simulator for unit tests. ``run_parameters`` runs the testbench on a
kernel built with other parameters; ``measure`` is the cycle-budget protocol of
docs/contributing.md.
"""

from ..targets import NotMeasured, SimTarget

__all__ = ["DEFAULT_PARAMS", "CONFIG", "TARGETS", "make_dut", "run_parameters",
           "measure_parameters", "measure"]

# The default build holds the CUDA capture: B=2, K=8, W=8, MAXN=1024, MAXV=64, MI=64.
DEFAULT_PARAMS = {
    "node_top_k": 8,
    "max_tree_width": 8,
    "max_node_count": 1024,
    "max_verify_num": 64,
    "max_input_size": 64,
    "max_batch": 2,
    "token_width": 32,
    "index_width": 32,
}

CONFIG = {"params": DEFAULT_PARAMS, "figure_requests": 8, "random_requests": 24,
          "requests_per_batch": 3, "directed": True, "idle": 0.2, "backpressure": 0.2}


def make_dut(**params):
    """``UpdateCumuDraftState`` at ``DEFAULT_PARAMS``, updated by ``params``."""
    from hw.kernels.update_state import UpdateCumuDraftState

    return UpdateCumuDraftState(**{**DEFAULT_PARAMS, **params})


def run_parameters(params: dict, *, overrides: dict | None = None, seed: int | None = None,
                   case=None, log_file=None, log=print) -> dict:
    """Build (or reuse) the model of the kernel with ``params`` (missing ones: the defaults)
    and run the ``update_state`` testbench on it with ``CONFIG`` updated by ``overrides``;
    returns the summary (``sim.targets.run_target`` for other parameters)."""
    from pathlib import Path

    from ..harness import build_model, run_testbench
    from ..targets import DEFAULT_SEED

    params = {**DEFAULT_PARAMS, **params}
    config = {**CONFIG, **(overrides or {}), "params": params}
    if case is not None:
        config["case"] = str(Path(case).resolve())
    # One top name for every parameter set: the model cache is keyed by the Verilog.
    model = build_model(make_dut(**params), name="update_state", log=log)
    return run_testbench(model, "sim.update_state.tb", config,
                         seed=DEFAULT_SEED if seed is None else seed, log_file=log_file)


def measure_parameters(point: dict) -> dict:
    """The kernel parameters a benchmark point is measured with: ``K`` and ``W`` of the point,
    room for the whole round (``MAXN >= 1 + K + (depth-1)*W*K``, ``MI >= (depth-2)*W``,
    ``MAXV >= verify_num``, at least the defaults' 1024 / 64 / 64) and 8 slots (the contract's
    largest batch) or the batch."""
    k, width, depth = point["node_top_k"], point["tree_width"], point["depth"]
    if k * width > 128:
        raise NotMeasured(f"N = {k * width} exceeds the 128 candidates K2 holds")
    if not 1 <= width <= k <= 16:
        raise NotMeasured(f"K = {k}, W = {width} is outside 1 <= W <= K <= 16")
    return {**DEFAULT_PARAMS, "node_top_k": k, "max_tree_width": width,
            "max_node_count": max(1024, 1 + k + (depth - 1) * width * k),
            "max_verify_num": max(64, point["verify_num"]),
            "max_input_size": max(64, (depth - 2) * width),
            "max_batch": max(8, point["batch"])}


def measure(point: dict, *, seed: int, log_file=None) -> dict:
    """K2's cycle budget over one draft round at a benchmark contract point.

    The batch's requests of every depth run back to back on the kernel of
    ``measure_parameters(point)`` (see ``sim.update_state.tb.measurement``: root writes, one
    call per depth, the ``K`` output rows of each request read back over the host port).
    ``cycles``: first host command to last host answer, no idle or back-pressure.
    ``operations``: per request and depth, ``N`` float32 multiplies (the 0.9999 scaling) plus
    ``ws1`` merge compare-selects. ``initiation_interval``: cycles per request (``done``
    interval) in the last depth's call (absent for a batch of one).
    """
    spec = {key: point[key] for key in ("batch", "depth", "tree_width", "verify_num")}
    summary = run_parameters(measure_parameters(point), overrides={"measure": spec}, seed=seed,
                             log_file=log_file)
    return summary["measurement"]


TARGETS = [
    SimTarget(
        name="update_state",
        description="K2 update_cumu_draft_state: on-chip tree state vs golden "
                    "(capture, directed, random; CASE= replay)",
        make_dut=make_dut,
        testbench="sim.update_state.tb",
        config=CONFIG,
        takes_case=True,
        figures_config={"random_requests": 0, "directed": False},
        measure=measure,
    ),
]
