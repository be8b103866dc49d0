"""The cycle gate (issue 31): cycles in simulation are deterministic, so they are guarded like
results. Three rounds of the small build (``tests/test_host_rtl.py``'s, the contract's small
tree at B = 2: no build of its own) run on the rtl backend at a fixed seed with a card memory
that answers every read ``LATENCY`` clocks late; each command's cycles must not exceed the
figure recorded in ``tests/data/cycle_gate.json``. A change that earns fewer cycles records
them in the same commit (``python -m tests.test_cycle_gate`` rewrites the file); one that
costs more fails here, naming the command."""

import json
import sys
from pathlib import Path

import numpy as np

import host
from host.rtl import RtlBackend
from tests.test_host_rtl import CONFIG, CONTEXT, V

GATE = Path(__file__).resolve().parent / "data" / "cycle_gate.json"
LATENCY = 64  # clocks from a read request to its data (HBM at 300 MHz: 30 to 60 and more)
ROUNDS = 3
SEED = 31


def measure() -> list[dict]:
    """The gate's commands in order: ``{"command", "round", "cycles"}`` each."""
    table = np.full((CONFIG.batch_size, CONTEXT), -1, np.int64)
    backend = RtlBackend(host.engine_config(CONFIG, V), table, memory_latency=LATENCY)
    engine = host.Engine(CONFIG, vocab_size=V, backend=backend, context_len=CONTEXT,
                         seed=SEED)
    models = host.BigramModels(V, seed=SEED, agreement=0.7)
    sampler = models.sampler(CONFIG.node_top_k)
    roots = np.array([3, 11], np.int64)
    temperatures = np.array([1.0, 0.0], np.float32)  # a sampling and a greedy request
    figures = []
    for index in range(ROUNDS):
        result = engine.round(sampler, roots, models.verify_logits, temperatures)
        roots = result.verify.next_root
        figures += [{"command": c.command, "round": index, "cycles": c.cycles}
                    for c in result.commands]
    return figures


def test_no_command_takes_more_cycles_than_recorded():
    recorded = json.loads(GATE.read_text())
    assert (recorded["latency"], recorded["rounds"], recorded["seed"]) == \
        (LATENCY, ROUNDS, SEED), f"{GATE} was recorded for another run: record it again"
    figures = measure()
    assert [(f["command"], f["round"]) for f in figures] == \
        [(f["command"], f["round"]) for f in recorded["commands"]], \
        "the gate's command sequence changed: record it again (python -m tests.test_cycle_gate)"
    slower = [f"round {got['round']} {got['command']}: {got['cycles']} cycles, recorded "
              f"{want['cycles']}" for got, want in zip(figures, recorded["commands"], strict=True)
              if got["cycles"] > want["cycles"]]
    assert not slower, "slower than recorded in " + f"{GATE.name}:\n" + "\n".join(slower)


def record(path: Path = GATE) -> list[dict]:
    """Measure and write the figures (a deliberate update, committed with its cause)."""
    figures = measure()
    path.write_text(json.dumps({"latency": LATENCY, "rounds": ROUNDS, "seed": SEED,
                                "commands": figures}, indent=1) + "\n")
    return figures


if __name__ == "__main__":
    for figure in record():
        print(f"round {figure['round']} {figure['command']:>13}: {figure['cycles']} cycles",
              file=sys.stderr)
