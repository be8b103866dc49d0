"""``python -m host.latency``: cycles per round of the engine against the card memory's read
latency (docs/engine.md, "Still to do"; issue 31, item 4).

Decodes the serving tree (``host.report``'s build: K = W = 8, five depths, 64 draft tokens,
``max_batch`` 8, V = 1,024, the synthetic pair at agreement 0.9) on the Verilated engine
(``host.RtlBackend``) with every memory port answering after ``L`` clocks, for each latency and
batch size asked for, and prints the cycles per round and per command (a round: ``begin_round``,
its ``draft_depth`` s, ``build_verify``, ``verify``; the ``read_state`` s that return the tree
to the host are listed apart). The first run builds the engine's model (minutes; cached).
"""

import argparse
import sys

import numpy as np

from .decode import decode, decode_context_len
from .engine import Engine, engine_config
from .synthetic import BigramModels
from .trees import TREES

__all__ = ["main", "measure"]

VOCAB, AGREEMENT, SHARPNESS = 1024, 0.9, 4.0  # host.report's pair


def measure(latency: int, batch: int, *, rounds: int = 6, seed: int = 1) -> dict:
    """Mean cycles per round and per command of ``rounds`` rounds at temperature 1."""
    from .rtl import RtlBackend

    config = TREES["serving"].round_config(8)
    table = np.full((config.batch_size, decode_context_len(config, rounds)), -1, np.int64)
    backend = RtlBackend(engine_config(config, VOCAB), table, memory_latency=latency)
    engine = Engine(config, vocab_size=VOCAB, backend=backend, req_to_token=table, seed=seed)
    models = BigramModels(VOCAB, seed=seed, agreement=AGREEMENT, sharpness=SHARPNESS)
    prompts = [int(token) for token in engine.rng.integers(0, VOCAB, batch)]
    decode(engine, models, prompts, rounds, temperature=1.0)
    per_command = {}
    for record in engine.commands:
        per_command[record.command] = per_command.get(record.command, 0) + record.cycles
    per_command = {name: cycles / rounds for name, cycles in per_command.items()}
    return {"round": sum(cycles for name, cycles in per_command.items()
                         if name != "read_state"), "commands": per_command}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m host.latency",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--latencies", type=int, nargs="+", default=[4, 64])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    for value in args.latencies:
        if value < 1:
            parser.error(f"argument --latencies: must be at least 1, not {value}")
    for value in args.batches:
        if not 1 <= value <= 8:
            parser.error(f"argument --batches: the build holds 1 .. 8 requests, not {value}")
    if args.rounds < 1:
        parser.error(f"argument --rounds: must be at least 1, not {args.rounds}")
    print("serving tree, V = 1,024, temperature 1: cycles per round (per command)")
    for latency in args.latencies:
        for batch in args.batches:
            figures = measure(latency, batch, rounds=args.rounds)
            commands = ", ".join(f"{name} {cycles:,.0f}"
                                 for name, cycles in figures["commands"].items())
            print(f"latency {latency:3d}, B = {batch}: {figures['round']:,.0f} ({commands})",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
