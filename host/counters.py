"""``python -m host.counters``: the counters a host reads off the card, for one contract round
per batch size, written as ``reports/hw_counters.csv`` (docs/vitis.md, "Counters a host
reads").

Decodes one round of the serving tree (``host.latency``'s build and pair: K = W = 8, five
depths, 64 draft tokens, V = 1,024) on the ``card`` backend, the engine's Vitis kernel driven
through its registers and rings (``host.CardBackend``, every m_axi port answering after
``--latency`` clocks), and reads every counter of the kernel's counter window around each
command. One row per command kind of the round and one for the round (the round's
``read_state`` s, which return the tree to the host, are a row of their own and not in the
round's), in the columns of ``reports/cycle_budget.json``'s engine rows: ``cycles``,
``bytes_in`` (the ``read`` and ``logits`` ports), ``bytes_out`` (the write ports),
``bytes_total``, the bytes of each port, and the clocks by cause (``busy_cycles``,
``memory_cycles``, ``backpressure_cycles``), which add up to ``cycles`` in every row.
"""

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

from .decode import decode, decode_context_len
from .engine import Engine, engine_config
from .latency import AGREEMENT, SHARPNESS, VOCAB
from .synthetic import BigramModels
from .trees import TREES

__all__ = ["COLUMNS", "CAUSES", "counter_rows", "main"]

#: The clocks of a command by cause (``CommandCounters``): they add up to ``cycles``.
CAUSES = ("busy_cycles", "memory_cycles", "backpressure_cycles")
#: The read ports (``bytes_in``); the rest write (``bytes_out``).
_READ_PORTS = ("read", "logits0", "logits1")
_PORTS = ("read", "result_write", "mask_write", "table_write", "logits0", "logits1")
COLUMNS = ("point", "batch", "latency_clocks", "command", "count", "cycles", *CAUSES,
           "bytes_in", "bytes_out", "bytes_total", *(f"bytes_{port}" for port in _PORTS))


def counter_rows(batch: int, *, latency: int, tree: str = "serving", build_batch: int = 8,
                 seed: int = 1) -> list:
    """The rows of one round at ``batch`` requests on the build of ``tree`` for
    ``build_batch`` requests (see the module)."""
    from .card import CardBackend

    config = TREES[tree].round_config(build_batch)
    table = np.full((config.batch_size, decode_context_len(config, 1)), -1, np.int64)
    backend = CardBackend(engine_config(config, VOCAB), table, memory_latency=latency,
                          every_counter=True)
    engine = Engine(config, vocab_size=VOCAB, backend=backend, req_to_token=table, seed=seed)
    models = BigramModels(VOCAB, seed=seed, agreement=AGREEMENT, sharpness=SHARPNESS)
    prompts = [int(token) for token in engine.rng.integers(0, VOCAB, batch)]
    decode(engine, models, prompts, 1, temperature=1.0)
    backend.close()
    per_command: dict[str, dict] = {}
    for name, counters in backend.counter_log:
        row = per_command.setdefault(name, {"count": 0, "cycles": 0,
                                            **dict.fromkeys(CAUSES, 0),
                                            **{f"bytes_{port}": 0 for port in _PORTS}})
        row["count"] += 1
        row["cycles"] += counters["command.cycles"]
        for cause in CAUSES:
            row[cause] += counters[f"command.{cause}"]
        for port in _PORTS:
            row[f"bytes_{port}"] += counters.get(f"{port}.bytes", 0)

    point = f"{tree}-b{batch}-v{VOCAB}"
    rows = []
    names = [name for name in per_command if name != "read_state"]
    whole = {key: sum(per_command[name][key] for name in names)
             for key in per_command[names[0]]}
    for name, values in [*((name, per_command[name]) for name in per_command),
                         ("round", whole)]:
        row = {"point": point, "batch": batch, "latency_clocks": latency, "command": name,
               **values}
        row["bytes_in"] = sum(values[f"bytes_{port}"] for port in _READ_PORTS)
        row["bytes_out"] = sum(values[f"bytes_{port}"] for port in _PORTS
                               if port not in _READ_PORTS)
        row["bytes_total"] = row["bytes_in"] + row["bytes_out"]
        if sum(values[cause] for cause in CAUSES) != values["cycles"]:
            raise RuntimeError(f"{point} {name}: the clocks by cause do not add up to the "
                               f"command's clocks: {values}")
        rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m host.counters",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--latency", type=int, default=64,
                        help="clocks every m_axi port takes to answer (default 64)")
    parser.add_argument("--out", type=Path, default=Path("reports/hw_counters.csv"))
    args = parser.parse_args(argv)
    for value in args.batches:
        if not 1 <= value <= 8:
            parser.error(f"argument --batches: the build holds 1 .. 8 requests, not {value}")
    if args.latency < 1:
        parser.error(f"argument --latency: must be at least 1, not {args.latency}")
    rows = []
    for batch in args.batches:
        print(f"host.counters: one serving round at B = {batch}, memory latency "
              f"{args.latency} clocks, on the card backend ...", flush=True)
        rows += counter_rows(batch, latency=args.latency)
        whole = rows[-1]
        print(f"  round {whole['cycles']:,} cycles (busy {whole['busy_cycles']:,}, memory "
              f"{whole['memory_cycles']:,}, back-pressure {whole['backpressure_cycles']:,}), "
              f"{whole['bytes_total']:,} bytes", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
