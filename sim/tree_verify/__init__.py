"""Simulation target ``tree_verify``: the fused verify ``hw.kernels.tree_verify.TreeVerify``
against ``golden.tree_speculative_sampling_from_logits`` and
``draft_tree_reject_sample_from_logits`` (LFSR coins).

The host side: ``call`` (the call record), ``generators`` (random, directed and measurement
calls), ``memory`` (the ``target_logits`` memory image the read ports see), ``results`` (the
golden's outputs, their comparison), ``streams`` (a call as stream beats, outputs rebuilt from
the kernel's), ``cases`` (case files). ``tb`` is the cocotb testbench (phases ``figures``,
``directed``, ``random``, ``case``, ``measurement``), ``pysim`` the Amaranth-simulator runner
of the unit tests.
"""

from ..targets import SimTarget, check_limits, contract_spec, verify_tree_size

__all__ = ["PARAMETERS", "MEASURE_PARAMETERS", "TARGET", "TARGETS"]

# The DUT of `make sim KERNEL=tree_verify`: n <= 64, S <= 8, V <= 131072, two 256-bit ports of
# float32 logits (16 lanes).
PARAMETERS = {"max_nodes": 64, "max_steps": 8, "max_vocab_size": 131072, "read_ports": 2,
              "port_bits": 256, "logit_format": "float32", "max_burst": 16}
# The model the cycle budget simulates: bfloat16 logits like the V80 build (32 lanes).
MEASURE_PARAMETERS = {**PARAMETERS, "logit_format": "bfloat16"}


class TreeVerifyTarget(SimTarget):
    def case_parameters(self, case, parameters):
        """``max_nodes``, ``max_steps`` and ``max_vocab_size`` raised to the case's ``n``,
        ``S`` and ``V`` where the build is smaller; ``logit_format`` bfloat16 for a case whose
        logits are bfloat16 (the rest as built)."""
        from .cases import call_from_case

        call = call_from_case(case)
        return {**parameters,
                "max_nodes": max(parameters["max_nodes"], call.nodes),
                "max_steps": max(parameters["max_steps"], call.steps),
                "max_vocab_size": max(parameters["max_vocab_size"], call.vocab_size),
                "logit_format": call.logit_format}

    def measure_parameters(self, point):
        """One verify step at a benchmark contract point.

        Simulated on ``MEASURE_PARAMETERS`` (two 256-bit ports of bfloat16, 32 lanes):
        ``generators.verify_step_call`` (the point's K4 verify trees, ``n = verify_num``,
        ``S = depth + 1``, EAGLE-like bfloat16 target logits of ``V = vocab``, temperature 1,
        top-k and top-p off), the ``B`` requests one after the other, every read port
        answering after a fixed ``figure_latency`` clocks; checked against the golden, and
        every request's cycles against the schedule formula. The record reports the default
        V80 build (``hw.kernels.tree_verify.V80_BUILD``, 1,024 lanes) by that formula on the
        same walks, marked as such in ``source``, with the simulated build's figures under
        ``simulated``; bytes from the read ports' counters (the V80 build reads the same
        bytes), ``rows_read`` and ``logit_bytes``.
        """
        n, s = verify_tree_size(point)
        check_limits(MEASURE_PARAMETERS, {"n": (n, "max_nodes"), "S": (s, "max_steps"),
                                          "V": (point["vocab"], "max_vocab_size")})
        return MEASURE_PARAMETERS, {**contract_spec(point), "logit_format": "bfloat16"}


TARGET = TreeVerifyTarget(
    "tree_verify",
    "fused verify from logits (K5+K6, visited rows only) vs golden (random trees and logits, "
    "greedy, top-k/top-p, LFSR coins, random memory latency; CASE= replay)",
    component="hw.kernels.tree_verify:TreeVerify",
    parameters=PARAMETERS,
    config={
        "random_calls": 40,
        "max_vocab": 300,  # V of the random and directed calls
        "max_latency": 12,  # random memory latency 1..max_latency
        "figure_latency": 4,  # the fixed memory latency of the figures and the measurement
        "hbm_latency": 100,  # a realistic HBM read latency (clocks), for the formula figures
    },
    phases=("figures", "directed", "random"),
)

TARGETS = [TARGET]
