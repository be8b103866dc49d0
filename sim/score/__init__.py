"""Simulation targets of K1 (``draft_tree_layer_score_index_gen_op``): ``score`` and variants.

Each target is one Verilator model (one parameter set of ``ScoreKernel``, under
``sim.score.dut.ScoreBench``); the runtime ``tree_width`` covers every ``W`` up to
``max_tree_width`` in the same model:

* ``score``: K = 8, W <= 8 (N up to 64, the capture's configuration), 64-lane network, float32
  hidden states 8 lanes per clock, plus gather probes (4 and 16 lanes of float32, 16 lanes of
  bfloat16) for the cycles-per-request table; replays the shared CUDA capture in every run.
  Its 64 float32 multipliers make a large model (first build: about 7 minutes).
* ``score_k1``: K = 1, W = 1 (N = 1, still the full 64-lane network): the small model of the
  CI tier.

Other parameter sets (K = 4; K = 10 with W <= 6 and, on the 128-lane network, W <= 10) run on
Amaranth's simulator in ``tests/test_kernel_score.py``. ``measure`` (the cycle budget, ``make
report``) builds one model per contract tree.

``vectors`` holds the host side (packing, golden calls, generators), ``dut`` the wrapper, ``tb``
the cocotb testbench. The DUT parameters live in the target's ``config`` (``kernel``,
``probes``) so that the testbench rebuilds the same layouts; do not override them.
"""

from ..targets import NotMeasured, SimTarget

__all__ = ["TARGETS", "make_bench", "measure_parameters", "measure"]

_STRESS = {"idle": 0.25, "backpressure": 0.25, "memory_latency": 8}


def make_bench(cfg: dict, toplevel: str | None = None):
    """The ``ScoreBench`` a target configuration describes (``toplevel``: the Verilog top
    name, which makes lanes share module definitions; see ``sim.score.dut``)."""
    from .dut import ScoreBench

    return ScoreBench(kernel=cfg["kernel"], probes=tuple(cfg.get("probes", ())),
                      toplevel=toplevel)


def _target(name: str, description: str, *, kernel: dict, probes=(), capture=None,
            gather_sizes=(64,), random_batches=24, large_batch=128,
            measure=None) -> SimTarget:
    kernel = {"hot_vocab_size": 1024, "remap_lanes": 8, "element_width": 32,
              "hidden_lanes": 8, "max_hidden_size": 4096, **kernel}
    cfg = {"kernel": kernel, "probes": [dict(p) for p in probes], "hot_size": 1000,
           "figures_requests": 64, "gather_sizes": list(gather_sizes),
           "random_batches": random_batches, "large_batch": large_batch,
           "capture": capture, **_STRESS}
    return SimTarget(name=name, description=description,
                     make_dut=lambda: make_bench(cfg, toplevel=name), testbench="sim.score.tb",
                     config=cfg, takes_case=True,
                     figures_config={"capture": None, "gather_sizes": [64],
                                     "random_batches": 0, "large_batch": 2},
                     measure=measure)


def measure_parameters(point: dict) -> dict:
    """The ``ScoreKernel`` parameters a benchmark point is measured with: ``K`` and ``W`` of
    the point on the 64-lane network (128 lanes when ``W*K > 64``), the hidden states as
    ``hidden_lanes = 256 / element bits`` elements per 256-bit word (the synthesis
    configuration's port), ``max_hidden_size`` the point's ``H``, a small hot-token table
    (the remap is off in the measurement)."""
    k, width = point["node_top_k"], point["tree_width"]
    if not 1 <= width <= k <= 16:
        raise NotMeasured(f"K = {k}, W = {width} is outside 1 <= W <= K <= 16")
    if k * width > 128:
        raise NotMeasured(f"N = {k * width} exceeds the 128-lane network")
    element_width = 8 * point["hidden_bytes"]
    return {"node_top_k": k, "max_tree_width": width, "sort_width": 64 if k * width <= 64
            else 128, "hot_vocab_size": 16, "remap_lanes": 8, "element_width": element_width,
            "hidden_lanes": 256 // element_width, "max_hidden_size": point["hidden_size"]}


def measure(point: dict, *, seed: int, log_file=None) -> dict:
    """K1's cycle budget over one draft round at a benchmark contract point.

    One call per depth on the kernel of ``measure_parameters(point)`` (see
    ``sim.score.tb.measurement``): ``B`` requests with ``W = 1`` at depth 1 and
    ``W = tree_width`` after, each gathering its ``K`` parents' hidden-state rows of ``H``
    elements through the one-word-per-clock memory port. ``cycles``: sum over the calls of
    first input to last output, no idle or back-pressure. ``operations``: per request, ``N``
    float32 multiplies plus the network's compare-exchanges (``sort_width / 2`` per stage).
    """
    from pathlib import Path

    from ..harness import build_model, run_testbench

    kernel = measure_parameters(point)
    cfg = {**TARGETS[0].config, "kernel": {**TARGETS[0].config["kernel"], **kernel},
           "probes": [], "capture": None,
           "measure": {key: point[key] for key in ("batch", "depth", "tree_width",
                                                   "hidden_size", "hidden_bytes")}}
    name = "score_measure_" + "_".join(str(kernel[key]) for key in (
        "node_top_k", "max_tree_width", "sort_width", "element_width", "max_hidden_size"))
    model = build_model(make_bench(cfg, toplevel=name), name=name)
    summary = run_testbench(model, "sim.score.tb", cfg, seed=seed,
                            log_file=Path(log_file) if log_file else None)
    return summary["measurement"]


_PROBES = (
    {"lanes": 4, "element_width": 32, "max_hidden_size": 4096},
    {"lanes": 16, "element_width": 32, "max_hidden_size": 4096},
    {"lanes": 16, "element_width": 16, "max_hidden_size": 4096},
)

TARGETS = [
    _target("score", "K1 score + top-k sort + token remap + hidden gather vs golden "
            "(K=8, W<=8, 64 lanes; replays the CUDA capture)",
            kernel={"node_top_k": 8, "max_tree_width": 8, "sort_width": 64}, probes=_PROBES,
            capture="cost_draft_tree_score_case", gather_sizes=(64, 1000, 4096),
            random_batches=40, large_batch=256, measure=measure),
    _target("score_k1", "K1 vs golden at K=1, W=1 (N=1; the full 64-lane network), "
            "a small model for the CI tier",
            kernel={"node_top_k": 1, "max_tree_width": 1, "sort_width": 64}),
]
