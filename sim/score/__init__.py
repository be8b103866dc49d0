"""Simulation targets of K1 (``draft_tree_layer_score_index_gen_op``): ``score`` and ``score_k1``.

Each model is one parameter set of ``ScoreKernel`` under ``sim.score.dut.ScoreBench`` (the
build parameters: the kernel's, plus ``probes``); the runtime ``tree_width`` covers every
``W`` up to ``max_tree_width`` in the same model:

* ``score``: K = 8, W <= 8 (N up to 64, the capture's configuration), 64-lane network, float32
  hidden states 8 lanes per clock, plus gather probes (4 and 16 lanes of float32, 16 lanes of
  bfloat16) for the cycles-per-request table; replays the shared CUDA capture in every run and
  measures the cycle budget. Its 64 float32 multipliers make a large model (first build:
  about 7 minutes).
* ``score_k1``: K = 1, W = 1 (N = 1, still the full 64-lane network): the small model of the
  CI tier.

A case file (``CASE=``) replays on the parameters it needs (``ScoreTarget.case_parameters``).
``vectors`` holds the host side (packing, golden calls, generators, case files), ``dut`` the
wrapper, ``tb`` the cocotb testbench (phases ``capture``, ``figures``, ``gather``,
``directed``, ``random``, ``large``; ``case``; ``measurement``).
"""

from ..targets import NotMeasured, SimTarget

__all__ = ["PARAMETERS", "K1_PARAMETERS", "ScoreTarget", "MeasuredScoreTarget", "TARGET",
           "TARGET_K1", "TARGETS"]

_KERNEL = {"count_width": 32, "stages_per_register": 1, "hot_vocab_size": 1024,
           "remap_lanes": 8, "token_width": 32, "element_width": 32, "hidden_lanes": 8,
           "max_hidden_size": 4096, "address_width": 32}
_PROBES = [
    {"lanes": 4, "element_width": 32, "max_hidden_size": 4096},
    {"lanes": 16, "element_width": 32, "max_hidden_size": 4096},
    {"lanes": 16, "element_width": 16, "max_hidden_size": 4096},
]

# The DUTs of `make sim KERNEL=score` and `KERNEL=score_k1`.
PARAMETERS = {"node_top_k": 8, "max_tree_width": 8, "sort_width": 64, **_KERNEL,
              "probes": _PROBES}
K1_PARAMETERS = {"node_top_k": 1, "max_tree_width": 1, "sort_width": 64, **_KERNEL,
                 "probes": []}

_CONFIG = {
    "hot_size": 1000,  # runtime V_hot of the generated batches
    "figures_requests": 64,
    "gather_sizes": [64],  # H values of the gather figures
    "random_batches": 24,
    "large_batch": 128,
    "capture": None,  # the case file of the `capture` phase
    "idle": 0.25,
    "backpressure": 0.25,
    "memory_latency": 8,  # largest random memory read latency
}


def _signed_bits(values) -> int:
    """Bits of the signed integers that hold every value of ``values`` (at least 2)."""
    return max([2, *((v if v >= 0 else -v - 1).bit_length() + 1 for v in map(int, values))])


class ScoreTarget(SimTarget):
    """A K1 target: ``ScoreBench`` at the target's parameters, built with ``toplevel`` = the
    target's name (the top module of its models, where the shared multiplier module lives)."""

    def __init__(self, name: str, description: str, *, parameters: dict, config: dict,
                 phases: tuple[str, ...]):
        super().__init__(
            name, description, component=self.bench, testbench="sim.score.tb",
            parameters=parameters, config={**_CONFIG, **config}, phases=phases)

    def bench(self, **parameters):
        """``ScoreBench(**parameters)`` under this target's top-module name."""
        from .dut import ScoreBench

        return ScoreBench(**parameters, toplevel=self.name)

    def case_parameters(self, case, parameters):
        """The run's ``parameters`` with the case's ``K`` and room for the case.

        ``node_top_k`` = the case's ``K``; ``max_tree_width`` the run's, at least the case's
        ``W`` and at most ``K``, lowered so that ``N_max`` stays within the network the spec
        sorts the case's ``N`` on (64 lanes up to ``N = 64``, else 128, or the run's
        ``sort_width`` if wider); ``hot_vocab_size``, ``max_hidden_size``, ``count_width``,
        ``token_width`` and ``address_width`` raised to what the case's table, ``H``,
        ``cumu_count``, ids and rows need; float32 hidden states when the case gathers. A
        malformed case, or one no kernel can run, raises ``ValueError`` naming the file.
        """
        from .dut import ScoreBenchParams
        from .vectors import case_batch

        batch, _, table = case_batch(case)
        k, w, n = batch.k, batch.w, batch.n
        sort_width = max(parameters["sort_width"], 64 if n <= 64 else 128)
        ids = [*batch.tokens.reshape(-1).tolist(), *([] if table is None else table.tolist())]
        words = -(-batch.h // parameters["hidden_lanes"])
        derived = {
            "node_top_k": k,
            "max_tree_width": max(w, min(parameters["max_tree_width"], k, sort_width // k)),
            "sort_width": sort_width,
            "hot_vocab_size": max(parameters["hot_vocab_size"],
                                  0 if table is None else len(table)),
            "max_hidden_size": max(parameters["max_hidden_size"], batch.h),
            "count_width": max(parameters["count_width"], (batch.cumu + n - 1).bit_length()),
            "token_width": max(parameters["token_width"], _signed_bits(ids)),
            "address_width": max(parameters["address_width"],
                                 (batch.b * w * words - 1).bit_length()),
        }
        if batch.h:
            derived["element_width"] = 32  # case files hold float32 hidden states
        parameters = {**parameters, **derived}
        try:
            record = ScoreBenchParams.of(**parameters)
            record.kernel.check_call(
                batch_size=batch.b, node_top_k=k, tree_width=w, cumu_count=batch.cumu,
                hidden_size=batch.h, use_hot_token_id=batch.use_hot,
                topk_tokens_sampling=batch.tokens,
                hot_token_id=table if table is not None else [])
        except ValueError as error:
            raise ValueError(f"{case}: no K1 model replays this case (K = {k}, W = {w}): "
                             f"{error}") from error
        return parameters


class MeasuredScoreTarget(ScoreTarget):
    """``ScoreTarget`` with the cycle budget (``make report``)."""

    def measure_parameters(self, point):
        """K1's cycle budget over one draft round at a benchmark contract point.

        The kernel: ``K`` and ``W`` of the point on the 64-lane network (128 lanes when
        ``W*K > 64``), the hidden states as ``hidden_lanes = 256 / element bits`` elements per
        256-bit word (the synthesis configuration's port), ``max_hidden_size`` the point's
        ``H``, a small hot-token table (the remap is off), no probes. The run
        (``sim.score.tb.measurement``): one call per depth, ``B`` requests with ``W = 1`` at
        depth 1 and ``W = tree_width`` after, each gathering its ``K`` parents' rows of ``H``
        elements through the one-word-per-clock memory port. ``cycles``: sum over the calls
        of first input to last output, no idle or back-pressure. ``operations``: per request,
        ``N`` float32 multiplies plus the network's compare-exchanges (``sort_width / 2`` per
        stage).
        """
        k, width = point["node_top_k"], point["tree_width"]
        if not 1 <= width <= k <= 16:
            raise NotMeasured(f"K = {k}, W = {width} is outside 1 <= W <= K <= 16")
        if k * width > 128:
            raise NotMeasured(f"N = {k * width} exceeds the 128-lane network")
        element_width = 8 * point["hidden_bytes"]
        parameters = {
            "node_top_k": k, "max_tree_width": width,
            "sort_width": 64 if k * width <= 64 else 128, "hot_vocab_size": 16,
            "remap_lanes": 8, "element_width": element_width,
            "hidden_lanes": 256 // element_width, "max_hidden_size": point["hidden_size"],
            "probes": []}
        spec = {key: point[key] for key in ("batch", "depth", "tree_width", "hidden_size",
                                            "hidden_bytes")}
        return parameters, spec


TARGET = MeasuredScoreTarget(
    "score",
    "K1 score + top-k sort + token remap + hidden gather vs golden "
    "(K=8, W<=8, 64 lanes; replays the CUDA capture)",
    parameters=PARAMETERS,
    config={"capture": "cost_draft_tree_score_case", "gather_sizes": [64, 1000, 4096],
            "random_batches": 40, "large_batch": 256},
    phases=("capture", "figures", "gather", "directed", "random", "large"),
)

TARGET_K1 = ScoreTarget(
    "score_k1",
    "K1 vs golden at K=1, W=1 (N=1; the full 64-lane network), a small model for the CI tier",
    parameters=K1_PARAMETERS,
    config={},
    phases=("figures", "gather", "directed", "random", "large"),
)

TARGETS = [TARGET, TARGET_K1]
