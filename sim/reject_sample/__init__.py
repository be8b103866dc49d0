"""Simulation target ``reject_sample``: K6 ``hw.kernels.reject_sample.RejectSample`` against
``golden.tree_speculative_sampling_target_only``, ``draft_tree_reject_sample`` (LFSR coins) and
``verify_tree_greedy``.

The host side: ``call`` (the call record), ``generators`` (random, directed, figure and
measurement calls), ``results`` (the golden's outputs, their comparison), ``memory`` (the
``target_probs`` memory image), ``streams`` (a call as stream beats, outputs rebuilt from the
kernel's), ``cases`` (case files). ``tb`` is the cocotb testbench (phases ``figures``,
``directed``, ``random``, ``lfsr``, ``case``, ``measurement``), ``pysim`` the Amaranth-simulator
runner of the unit tests.
"""

from ..targets import SimTarget, check_limits, contract_spec, verify_tree_size

__all__ = ["PARAMETERS", "TARGET", "TARGETS"]

# The DUT of `make sim KERNEL=reject_sample` (RejectSample's defaults): n <= 64, S <= 8,
# V <= 131072, 8 lanes.
PARAMETERS = {"max_nodes": 64, "max_steps": 8, "max_vocab_size": 131072, "lanes": 8,
              "read_slots": 32, "segment_words": 64}


class RejectSampleTarget(SimTarget):
    def case_parameters(self, case, parameters):
        """``max_nodes``, ``max_steps`` and ``max_vocab_size`` raised to the case's ``n``,
        ``S`` and ``V`` where the build is smaller (never lowered; the rest as built)."""
        from .cases import call_from_case

        call = call_from_case(case)
        return {**parameters,
                "max_nodes": max(parameters["max_nodes"], call.nodes),
                "max_steps": max(parameters["max_steps"], call.steps),
                "max_vocab_size": max(parameters["max_vocab_size"], call.vocab_size)}

    def measure_parameters(self, point):
        """K6's cycle budget over one verify step at a benchmark contract point.

        The batch's requests one after the other on the model of ``make sim`` (n <= 64,
        S <= 8, V <= 131072 cover every contract point): ``generators.verify_step_call`` (the
        K4 verify trees of the point's draft-round trees, ``S = depth + 1``, EAGLE-like target
        rows of ``V = vocab``, sampling mode), the ``target_probs`` memory answering after a
        fixed ``figure_latency`` (4) clocks; checked against the golden. ``cycles``: first input
        transfer to last output transfer without idle or back-pressure, the final rows'
        residual streams (``V / lanes`` words each) included. ``operations``: float32
        operations, three per sibling decision (the ``prob_acc`` add and the two acceptance
        compares) plus, per request, ``2 V`` for the final row (residual select and running-sum
        add per element) and the ``coin * sum`` multiply; the rescanned segment is not
        counted. ``initiation_interval``: cycles per request (``result`` packet ends).
        """
        n, s = verify_tree_size(point)
        check_limits(PARAMETERS, {"n": (n, "max_nodes"), "S": (s, "max_steps"),
                                  "V": (point["vocab"], "max_vocab_size")})
        return PARAMETERS, contract_spec(point)


TARGET = RejectSampleTarget(
    "reject_sample",
    "K6 tree rejection sampling + greedy verify vs golden (random trees, directed cases, LFSR "
    "coins, random memory latency; CASE= replay)",
    component="hw.kernels.reject_sample:RejectSample",
    parameters=PARAMETERS,
    config={
        "random_calls": 150,
        "lfsr_trials": 2000,
        "idle": 0.25,
        "backpressure": 0.25,
        "max_latency": 12,  # random memory latency 1..max_latency
        "figure_latency": 4,  # the fixed memory latency of the figures and the measurement
        "perf_requests": 16,  # n = 64 requests of the traversal figure
        "row_vocab": 128256,  # V of the final-row figure
    },
    phases=("figures", "directed", "random", "lfsr"),
)

TARGETS = [TARGET]
