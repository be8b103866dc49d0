"""Simulation target of K7 ``update_verify_result``: ``verify_result``.

``vectors`` makes the calls (K6 outputs from the golden chain draft round -> K4 -> greedy K6,
directed cases, the throughput call) and asks the golden model for the results, ``tb`` is the
cocotb testbench (phases ``figures``, ``directed``, ``random``, ``case``, ``measurement``).
"""

from ..targets import SimTarget, check_limits, contract_spec, verify_tree_size

__all__ = ["PARAMETERS", "TARGET", "TARGETS"]

# The DUT of `make sim KERNEL=verify_result`: verify trees of up to 64 nodes, S up to 16.
PARAMETERS = {"max_draft_tokens": 64, "max_speculative_tokens": 16, "max_batch_size": 256,
              "token_width": 32, "loc_width": 32, "seq_len_width": 32,
              "pool_index_width": 16}


class VerifyResultTarget(SimTarget):
    def case_parameters(self, case, parameters):
        """``max_draft_tokens``, ``max_speculative_tokens`` and ``max_batch_size`` raised to
        the case's ``n``, ``S`` and batch; ``seq_len_width``/``pool_index_width``/
        ``loc_width`` to what its lengths, pool rows and KV slots need."""
        from .vectors import call_from_case

        call, _ = call_from_case(case)
        longest = max([int(call.max_context_len), *map(int, call.max_seq_lens)])
        return {**parameters,
                "max_draft_tokens": max(parameters["max_draft_tokens"], call.n),
                "max_speculative_tokens": max(parameters["max_speculative_tokens"], call.s),
                "max_batch_size": max(parameters["max_batch_size"], call.batch_size),
                "seq_len_width": max(parameters["seq_len_width"], longest.bit_length()),
                "pool_index_width": max(parameters["pool_index_width"],
                                        len(call.req_to_token).bit_length()),
                "loc_width": max(parameters["loc_width"],
                                 int(call.out_cache_loc.max(initial=0)).bit_length())}

    def measure_parameters(self, point):
        """One ``VerifyResult`` call for the whole batch on the model of ``make sim``
        (n <= 64, S <= 16, B <= 256 cover every contract point): the K6 outputs of
        ``vectors.verify_step_call`` (draft-round trees at the point, ``n = verify_num``,
        ``S = depth + 1``, greedy K6 following the draft 80 % of the time, random EOS and
        length limits), checked against the golden. ``cycles``: first input transfer to last
        output transfer, no idle or back-pressure. ``operations``: two compares per accepted
        token (the EOS and length-limit finish checks) plus one add per request (the
        ``verified_id`` offset prefix sum). ``initiation_interval``: cycles per request."""
        n, s = verify_tree_size(point)
        check_limits(PARAMETERS, {"n": (n, "max_draft_tokens"), "S": (s, "max_speculative_tokens"),
                                  "B": (point["batch"], "max_batch_size")})
        return PARAMETERS, contract_spec(point)


TARGET = VerifyResultTarget(
    "verify_result", component="hw.kernels.verify_result:VerifyResult", parameters=PARAMETERS,
    description="K7 update_verify_result (accept lengths, verified ids, KV writes, evictions, "
                "next roots, finished) vs golden on draft-round trees (CASE= replay)",
    # 150 random calls; the throughput figure: n = verify_num = 64 out of 256-node trees, S = 16.
    config={"vectors": 150,
            "perf": {"batch_size": 32, "verify_num": 64, "max_node_count": 256, "s": 16}})

TARGETS = [TARGET]
