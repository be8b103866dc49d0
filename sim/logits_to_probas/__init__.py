"""Simulation target of K5 ``convert_logits_to_probas`` (docs/kernels.md §7):
``logits_to_probas``.

``hw.kernels.logits_to_probas.LogitsToProbas`` at ``PARAMETERS`` (V <= 131072, 1 lane,
float32 input) against ``golden.logits_to_probas``. ``vectors`` holds the host side (calls,
beats, golden, case files: ``vectors.write_case_file`` writes them), ``tb`` the cocotb
testbench (phases ``figures``, ``directed``, ``random``, ``case``, ``measurement``), ``pysim``
the Amaranth-simulator runner of the unit tests.
"""

from ..targets import SimTarget, check_limits

__all__ = ["PARAMETERS", "TARGET", "TARGETS"]

# The DUT of `make sim KERNEL=logits_to_probas`.
PARAMETERS = {"max_vocab_size": 131072, "lanes": 1, "input_format": "float32",
              "row_count_width": 16}


class LogitsToProbasTarget(SimTarget):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._measured = {}  # (V, seed) -> the measurement test's per-row figures

    def case_parameters(self, case, parameters):
        """``max_vocab_size`` raised to the case's ``V``, ``row_count_width`` to its ``n``."""
        from .vectors import call_from_case

        call = call_from_case(case)
        vocab = call["logits"].shape[1]
        return {**parameters,
                "max_vocab_size": max(parameters["max_vocab_size"], vocab),
                "row_count_width": max(parameters["row_count_width"], call["n"].bit_length())}

    def measure_parameters(self, point):
        """The model of ``make sim`` and the point's ``V`` (``config["measure"]``)."""
        check_limits(PARAMETERS, {"V": (point["vocab"], "max_vocab_size")})
        return PARAMETERS, {"vocab": point["vocab"]}

    def measure(self, point, *, seed, log_file=None):
        """K5's cycle budget of one verify step: ``batch`` requests of ``verify_num`` sampling
        rows (``T = 1``) of ``vocab`` logits.

        The kernel handles rows one after the other on a data-independent schedule (ingest,
        exp pass, row constant, output pass; per request the constant program first).
        Simulating ``batch * verify_num`` rows of 128256 is out of reach (~0.4 M clocks per
        row at a few hundred clocks per second under cocotb), so the ``measurement`` test
        simulates, without idle or back-pressure and checked bit for bit against the golden:
        one request of one row of the real ``V`` (``first``: first ``cmd`` transfer to last
        ``probs`` transfer; ``row``: first ``logits`` to last ``probs`` transfer), and two
        requests of two rows of ``V = 64`` for the V-independent gaps between consecutive
        rows (``row_gap``) and across a request boundary (``request_gap``, the per-request
        constants). ``cycles = first + (R - B) * (row + row_gap) + (B - 1) * (row +
        request_gap)`` for ``R = batch * verify_num`` rows and ``B = batch`` requests.
        Bytes: per-row and per-request beats times the counts. ``operations``: per element
        the exp pipeline's float32 adds and multiplies plus the output multiply. The
        simulation is cached per ``(V, seed)``.
        """
        vocab, batch, n = point["vocab"], point["batch"], point["verify_num"]
        rows = batch * n
        key = (vocab, seed)
        if key not in self._measured:
            self._measured[key] = super().measure(point, seed=seed, log_file=log_file)
        m = self._measured[key]
        row, row_gap, request_gap = m["row_cycles"], m["row_gap"], m["request_gap"]
        cycles = (m["first_row_cycles"] + (rows - batch) * (row + row_gap)
                  + (batch - 1) * (row + request_gap))
        ports = {"cmd": batch * m["cmd_bytes_per_request"],
                 "logits": rows * m["logits_bytes_per_row"],
                 "probs": rows * m["probs_bytes_per_row"],
                 "predict": rows * m["predict_bytes_per_row"]}
        return {
            "cycles": int(cycles),
            "bytes_in": ports["cmd"] + ports["logits"],
            "bytes_out": ports["probs"] + ports["predict"],
            "operations": rows * vocab * m["operations_per_element"],
            "initiation_interval": (row + row_gap) / vocab,
            "invocations": batch,
            "ports": ports,
            "notes": (f"simulated 1 row of V = {vocab} (T = 1, bit-exact vs golden, no "
                      f"idle/back-pressure): first row {m['first_row_cycles']} cycles from the "
                      f"cmd, {row} per row; gaps measured on 2 x 2 rows of V = 64: {row_gap} "
                      f"between rows, {request_gap} across requests (data-independent "
                      f"schedule); cycles = first + (R - B) * (row + row gap) + (B - 1) * "
                      f"(row + request gap), R = {rows}, B = {batch}. 1 lane, float32 input; "
                      f"II in cycles per element."),
        }


TARGET = LogitsToProbasTarget(
    "logits_to_probas",
    "K5 logits -> probabilities / argmax vs golden (random rows, directed cases, "
    "temperatures, idle/back-pressure, V=8192 figure row; CASE= replay)",
    component="hw.kernels.logits_to_probas:LogitsToProbas",
    parameters=PARAMETERS,
    config={
        "random_calls": 60,
        "max_random_vocab": 300,
        # V of the figures' row: 8192 keeps `make sim` at about a minute (cocotb drives this
        # model at a few hundred clocks per second); the slow tier runs the `figures` phase at
        # V = 131072, `measure` the contract's vocabularies.
        "row_vocab": 8192,
        "row_vocab_small": 256,  # V of the gap and greedy figures
    },
    figures_config={"row_vocab": 4096},  # latency/II at V = 4096
)

TARGETS = [TARGET]
