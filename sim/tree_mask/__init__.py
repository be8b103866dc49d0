"""Simulation target of the K4 verify-tree build ``fused_tree_mask_operator``: ``tree_mask``.

``vectors`` makes the calls (trees grown by the golden draft round, directed trees, the
throughput call, case files) and asks the golden model for the results, ``tb`` is the cocotb
testbench (phases ``figures``, ``directed``, ``random``, ``stress_directed``; ``case``,
``measurement``), ``pysim`` runs calls on Amaranth's simulator.
"""

from ..targets import NotMeasured, SimTarget, check_limits, contract_spec, draft_round_node_count

__all__ = ["PARAMETERS", "TARGET", "TARGETS"]

# The DUT of `make sim KERNEL=tree_mask`: MAXN = 256 and verify sets up to 128 nodes (the
# packed layout's limit, so n = 65 and 128 are covered), 64-column mask words (rows of more
# than 64 columns take several words). The throughput figure is taken at verify_num = 64.
PARAMETERS = {"max_node_count": 256, "max_verify_num": 128, "mask_lanes": 64,
              "token_width": 32, "seq_len_width": 32, "max_batch_size": 256}


def _node_count_holding(count: int) -> int:
    """The power of two ``max_node_count`` that holds a tree of ``count`` nodes."""
    return 1 << (count - 1).bit_length()


def _signed_bits(values) -> int:
    """Two's-complement width holding every integer of ``values`` (at least 2)."""
    return max([2, *(int(v).bit_length() + 1 if v >= 0 else (~int(v)).bit_length() + 1
                     for v in values)])


class TreeMaskTarget(SimTarget):
    def case_parameters(self, case, parameters):
        """``parameters``, raised where the case needs more: ``max_node_count`` to the next
        power of two holding its ``cumu_count``, ``max_verify_num`` to its verify set (the
        ``n`` its ``expected_*`` were written for), ``max_batch_size`` to its batch,
        ``token_width``/``seq_len_width`` to its tokens and ``seq_lens``."""
        from .vectors import call_from_case

        call, _ = call_from_case(case)
        count = max(call.cumu_count, 1)
        maxn = parameters["max_node_count"]
        if count > maxn:
            maxn = _node_count_holding(count)
        n = min(max(call.verify_num, 1), count)
        tokens = call.cumu_tokens[:, :count].reshape(-1).tolist()
        seq_bits = max([int(s).bit_length() for s in call.seq_lens.tolist()], default=1)
        return {
            **parameters,
            "max_node_count": maxn,
            "max_verify_num": max(parameters["max_verify_num"], n),
            "max_batch_size": max(parameters["max_batch_size"], call.batch_size),
            "token_width": max(parameters["token_width"], _signed_bits(tokens)),
            "seq_len_width": max(parameters["seq_len_width"], seq_bits),
        }

    def measure_parameters(self, point):
        """K4's cycle budget over one verify step at a benchmark contract point.

        One ``TreeMask`` call for the whole batch (``sim.tree_mask.tb.measurement``): ``B``
        cumulative trees grown by the golden draft round at the point's ``K``,
        ``tree_width`` and ``depth`` (width-policy cost 0, so every depth is as wide as the
        cap allows: ``draft_round_node_count`` nodes), ``verify_num`` of the point, the
        packed mask layout (``QLEN_ONLY_BITPACKING``), checked against the golden.

        The DUT is ``PARAMETERS`` (the model of ``make sim KERNEL=tree_mask``) when the
        point's tree fits in its ``MAXN = 256`` nodes, else ``MAXN`` raised to the next power
        of two that holds the round (512 for the contract's eagle2 and serving trees, 411 and
        265 nodes); ``MAXV = 128`` and the batch width cover every contract point.

        ``cycles``: first input transfer to last output transfer, no idle or back-pressure.
        ``operations``: per request, ``(cumu_count - 1) * (n - 1)`` key compares of the
        insertion array (each non-root node against the ``n - 1`` slots of the verify set)
        plus ``n`` ancestor-row ORs (one mask row per position). ``initiation_interval``:
        cycles per request (first node beat of each request; absent for a batch of one).
        """
        count = draft_round_node_count(point["node_top_k"], point["tree_width"], point["depth"])
        n = min(point["verify_num"], count)
        if n > PARAMETERS["max_verify_num"]:
            raise NotMeasured(f"verify set n = {n} exceeds `max_verify_num` "
                              f"{PARAMETERS['max_verify_num']} (the packed layout's limit)")
        check_limits(PARAMETERS, {"B": (point["batch"], "max_batch_size")})
        parameters = dict(PARAMETERS)
        if count > parameters["max_node_count"]:
            parameters["max_node_count"] = _node_count_holding(count)
        return parameters, contract_spec(point)


TARGET = TreeMaskTarget(
    "tree_mask", component="hw.kernels.tree_mask:TreeMask", parameters=PARAMETERS,
    description="K4 verify-tree build (selection, retrive arrays, positions, 3 mask layouts) "
                "vs golden on draft-round and directed trees (CASE= replay)",
    # 60 random calls; the throughput figure: verify_num = 64 on 256-node trees (K = 5,
    # width 5, 11 depths: 1 + 5 + 10 * 25 = 256 nodes), packed layout.
    config={"vectors": 60, "perf": {"batch_size": 16, "verify_num": 64, "node_top_k": 5,
                                    "tree_width": 5, "depths": 11, "mode": 2}},
    # `stress_directed`: the directed calls once more under idle and back-pressure.
    phases=("figures", "directed", "random", "stress_directed"))

TARGETS = [TARGET]
