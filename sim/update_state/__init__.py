"""Simulation target of the K2 kernel ``update_cumu_draft_state``: ``update_state``.

``host`` converts ABI buffers to and from the kernel's stream payloads (and holds the host
API checks), ``vectors`` makes states, requests and directed cases and reads/writes case files,
``tb`` is the cocotb testbench (phases ``figures``, ``capture``, ``directed``, ``random``,
``case``, ``measurement``), ``pysim`` runs the kernel on Amaranth's simulator for unit tests.
"""

from ..targets import NotMeasured, SimTarget

__all__ = ["PARAMETERS", "CAPTURE", "TARGET", "TARGETS", "signed_bits"]

# The default build holds the CUDA capture: B=2, K=8, W=8, MAXN=1024, MAXV=64, MI=64.
PARAMETERS = {
    "node_top_k": 8,
    "max_tree_width": 8,
    "max_node_count": 1024,
    "max_verify_num": 64,
    "max_input_size": 64,
    "max_batch": 2,
    "token_width": 32,
    "index_width": 32,
}

# The case the `capture` phase of a plain run replays (golden/captures/).
CAPTURE = "cost_draft_tree_update_case"


def signed_bits(values) -> int:
    """Two's-complement width holding every integer of ``values`` (at least 1)."""
    values = [int(v) for v in values]
    return max([1, *((v if v >= 0 else ~v).bit_length() + 1 for v in values)])


class UpdateStateTarget(SimTarget):
    def case_parameters(self, case, parameters):
        """The case's ``node_top_k``, ``max_node_count``, ``max_verify_num`` and
        ``max_input_size`` (the shapes of its buffers); ``max_tree_width`` raised to the case's
        ``tree_width`` (and kept within ``K`` and ``K * W <= 128``), ``max_batch`` to its
        ``batch_size``, ``token_width``/``index_width`` to what its tokens, links, depths,
        ``cumu_count + N`` and ``curr_depth`` need."""
        import numpy as np

        from hw.kernels.update_state import MAX_CANDIDATES

        from .vectors import read_update_case

        scalars, states, requests, _ = read_update_case(case)
        k, width = scalars["node_top_k"], scalars["tree_width"]
        max_width = min(max(parameters["max_tree_width"], width), k, max(MAX_CANDIDATES // k, 1))
        maxn = scalars["max_node_count"]

        def extremes(arrays):  # the smallest and largest value: their width covers all
            values = np.concatenate([np.ravel(array) for array in arrays])
            return [values.min(), values.max()] if values.size else []

        tokens = extremes([s[name] for s in states for name in ("cumu_tokens", "output_tokens")]
                          + [r["topk_tokens"] for r in requests])
        links = extremes([s[name] for s in states for name in ("cumu_deltas", "prev_indexs",
                                                               "next_indexs", "side_indexs")]
                         + [r["topk_indexs"] for r in requests])
        counts = [scalars["cumu_count"] + width * k, scalars["curr_depth"]]
        return {
            **parameters,
            "node_top_k": k,
            "max_tree_width": max_width,
            "max_node_count": maxn,
            "max_verify_num": scalars["max_verify_num"],
            "max_input_size": scalars["max_input_size"],
            "max_batch": max(parameters["max_batch"], scalars["batch_size"]),
            "token_width": max(parameters["token_width"], signed_bits(tokens)),
            "index_width": max(parameters["index_width"], signed_bits(links + counts),
                               (maxn + k * max_width).bit_length() + 1),
        }

    def capture_misfit(self, parameters: dict) -> str:
        """Why the build ``parameters`` cannot replay ``CAPTURE`` ("" if they can)."""
        from golden.cases import read_case

        needed = self.case_parameters(read_case(CAPTURE).path, parameters)
        return ", ".join(f"{name}: case {needed[name]} vs kernel {parameters[name]}"
                         for name in needed if needed[name] != parameters[name])

    def run(self, parameters=None, *, tests=None, case=None, log=print, **options):
        """``SimTarget.run``; a plain run on a build that cannot hold the CUDA capture
        (``capture_misfit``) leaves the ``capture`` phase out and notes it in the summary
        (``extra["capture"]``)."""
        misfit = ""
        if case is None and tests is None:
            misfit = self.capture_misfit({**self.parameters, **(parameters or {})})
            if misfit:
                log(f"update_state: the CUDA capture does not fit this build ({misfit}); "
                    "phase `capture` left out")
                tests = tuple(phase for phase in self.phases if phase != "capture")
        summary = super().run(parameters, tests=tests, case=case, log=log, **options)
        if misfit:
            summary.setdefault("extra", {})["capture"] = "skipped (parameters)"
        return summary

    def measure_parameters(self, point):
        """K2's cycle budget over one draft round at a benchmark contract point.

        The batch's requests of every depth run back to back on a kernel with ``K`` and ``W``
        of the point, room for the whole round (``MAXN >= 1 + K + (depth-1)*W*K``,
        ``MI >= (depth-2)*W``, ``MAXV >= verify_num``, at least the defaults' 1024 / 64 / 64)
        and 8 slots (the contract's largest batch) or the batch (see
        ``sim.update_state.tb.measurement``: root writes, one call per depth, the ``K`` output
        rows of each request read back over the host port). ``cycles``: first host command to
        last host answer, no idle or back-pressure. ``operations``: per request and depth,
        ``N`` float32 multiplies (the 0.9999 scaling) plus ``ws1`` merge compare-selects.
        ``initiation_interval``: cycles per request (``done`` interval) in the last depth's
        call (absent for a batch of one).
        """
        k, width, depth = point["node_top_k"], point["tree_width"], point["depth"]
        if k * width > 128:
            raise NotMeasured(f"N = {k * width} exceeds the 128 candidates K2 holds")
        if not 1 <= width <= k <= 16:
            raise NotMeasured(f"K = {k}, W = {width} is outside 1 <= W <= K <= 16")
        parameters = {**PARAMETERS, "node_top_k": k, "max_tree_width": width,
                      "max_node_count": max(1024, 1 + k + (depth - 1) * width * k),
                      "max_verify_num": max(64, point["verify_num"]),
                      "max_input_size": max(64, (depth - 2) * width),
                      "max_batch": max(8, point["batch"])}
        spec = {key: point[key] for key in ("batch", "depth", "tree_width", "verify_num")}
        return parameters, spec


TARGET = UpdateStateTarget(
    "update_state",
    "K2 update_cumu_draft_state: on-chip tree state vs golden (capture, directed, random; "
    "CASE= replay)",
    component="hw.kernels.update_state:UpdateCumuDraftState",
    parameters=PARAMETERS,
    config={"figure_requests": 8, "random_requests": 24, "requests_per_batch": 3,
            "idle": 0.2, "backpressure": 0.2},
    phases=("figures", "capture", "directed", "random"),
)

TARGETS = [TARGET]
