"""Simulation target of K5 ``convert_logits_to_probas`` (docs/kernels.md §7):
``logits_to_probas``.

``hw.kernels.logits_to_probas.LogitsToProbas`` at ``PARAMETERS`` (V <= 131072, 1 lane,
float32 input) against ``golden.logits_to_probas`` (``sim.logits_to_probas.tb``); takes
``CASE=`` files (``sim.logits_to_probas.vectors.write_case_file`` writes them). ``vectors``
holds the host side, ``pysim`` the Amaranth simulator runner of the unit tests,
``run_parameters`` runs the testbench on a DUT built with other parameters, ``measure`` is the
cycle-budget protocol of docs/contributing.md.
"""

from ..targets import SimTarget

__all__ = ["PARAMETERS", "CONFIG", "TARGETS", "make_dut", "run_parameters", "measure"]

# The DUT of `make sim KERNEL=logits_to_probas`.
PARAMETERS = {"max_vocab_size": 131072, "lanes": 1, "input_format": "float32",
              "row_count_width": 16}

CONFIG = {
    "parameters": PARAMETERS,
    "random_calls": 60,
    "max_random_vocab": 300,
    "idle": 0.3,
    "backpressure": 0.3,
    # V of the figures' row: 8192 keeps `make sim` at about a minute (cocotb drives this model
    # at a few hundred clocks per second); the slow tier runs a V = 131072 row, `measure` the
    # contract's vocabularies.
    "row_vocab": 8192,
    "row_vocab_small": 256,  # V of the gap and greedy figures
}


def make_dut(**parameters):
    """``LogitsToProbas`` at ``PARAMETERS``, updated by ``parameters``."""
    from hw.kernels.logits_to_probas import LogitsToProbas

    return LogitsToProbas(**{**PARAMETERS, **parameters})


def run_parameters(parameters: dict, *, overrides: dict | None = None, seed: int | None = None,
                   case=None, log_file=None, log=print) -> dict:
    """Build (or reuse) the model of ``LogitsToProbas(**parameters)`` and run the
    ``logits_to_probas`` testbench on it (``sim.targets.run_target`` for other parameters)."""
    from pathlib import Path

    from ..harness import build_model, run_testbench
    from ..targets import DEFAULT_SEED

    parameters = {**PARAMETERS, **parameters}
    config = {**CONFIG, **(overrides or {}), "parameters": parameters}
    if case is not None:
        config["case"] = str(Path(case).resolve())
    # One top name for every parameter set: the model cache is keyed by the Verilog.
    model = build_model(make_dut(**parameters), name="logits_to_probas", log=log)
    return run_testbench(model, "sim.logits_to_probas.tb", config,
                         seed=DEFAULT_SEED if seed is None else seed, log_file=log_file)


_MEASURED = {}


def measure(point: dict, *, seed: int, log_file=None) -> dict:
    """K5's cycle budget of one verify step: ``batch`` requests of ``verify_num`` sampling rows
    (``T = 1``) of ``vocab`` logits.

    The kernel handles rows one after the other on a data-independent schedule (ingest, exp
    pass, row constant, output pass; per request the constant program first). Simulating
    ``batch * verify_num`` rows of 128256 is out of reach (~0.4 M clocks per row at a few
    hundred clocks per second under cocotb), so the testbench simulates, without idle or
    back-pressure and checked bit for bit against the golden: one request of one row of the
    real ``V`` (``first``: first ``cmd`` transfer to last ``probs`` transfer; ``row``: first
    ``logits`` to last ``probs`` transfer), and two requests of two rows of ``V = 64`` for
    the V-independent gaps between consecutive rows (``row_gap``) and across a request
    boundary (``request_gap``, the per-request constants). ``cycles = first + (R - B) *
    (row + row_gap) + (B - 1) * (row + request_gap)`` for ``R = batch * verify_num`` rows
    and ``B = batch`` requests. Bytes: per-row and per-request beats times the counts.
    ``operations``: per element the exp pipeline's float32 adds and multiplies plus the
    output multiply. Cached per ``(V, seed)``.
    """
    vocab, batch, n = point["vocab"], point["batch"], point["verify_num"]
    rows = batch * n
    if vocab > PARAMETERS["max_vocab_size"]:
        from ..targets import NotMeasured

        raise NotMeasured(f"V = {vocab} needs `max_vocab_size` >= {vocab}")
    key = (vocab, seed)
    if key not in _MEASURED:
        summary = run_parameters({}, overrides={"measure": {"vocab": vocab}}, seed=seed,
                                 log_file=log_file)
        _MEASURED[key] = summary["measurement"]
    m = _MEASURED[key]
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


TARGETS = [
    SimTarget(
        name="logits_to_probas",
        description="K5 logits -> probabilities / argmax vs golden (random rows, directed "
                    "cases, temperatures, idle/back-pressure, V=8192 figure row; CASE= replay)",
        make_dut=make_dut,
        testbench="sim.logits_to_probas.tb",
        config=CONFIG,
        takes_case=True,
        figures_config={"random_calls": 0, "row_vocab": 4096},  # latency/II at V = 4096
        measure=measure,
    ),
]
