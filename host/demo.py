"""``python -m host.demo`` (``make demo``): the engine decoding on the ``rtl`` backend.

A few rounds of the serving tree (K = W = 8, five depths, 64 draft tokens) at B = 1 and at
B = 8 through the Verilated persistent engine (``host.RtlBackend``), the synthetic pair of
``python -m host.report`` (V = 1,024). Per round: the tokens each request committed, its
acceptance figures, the engine's cycles and bytes from its counters, the round's µs at the
300 MHz kernel clock and at the clock the engine's V80 netlist meets (read from
``reports/cycle_budget.json``, else ``reports/timing_proxy.md``), and whether the round equals
the golden backend's on the same seed, bit for bit (the draft tree, the verify tree and the
verify result). The first run builds the engine's Verilator model (the long step, one build
shared by both batch sizes and by ``make report-e2e``, cached under ``build/verilated/``); a
progress line with its expected duration runs meanwhile. Exit status 1 when a round differs.
"""

import argparse
import dataclasses
import json
import re
import sys
import threading
import time
from pathlib import Path

import numpy as np

from .decode import decode, decode_context_len
from .engine import Engine, engine_config
from .report import AGREEMENT, CLOCK_MHZ, SHARPNESS, TREE, VOCAB
from .synthetic import BigramModels

__all__ = ["BuildProgress", "main", "netlist_clock", "run_batch", "same_round"]

REPORT_DIR = Path(__file__).resolve().parents[1] / "reports"
BATCHES = (1, 8)
#: The engine model's first build (elaborate, verilate, compile the C++ on both cores) as
#: measured with sim/verilated.py's flags on the development machine's 2 cores shared with
#: other jobs (issue 36): 3.1 min at a load of about 3.7, 8.0 min at about 5.6 (a fresh
#: clone). The progress line's expectation, not a limit. CPU time behind it: elaboration
#: 41 s, Verilator 35 s, make 54 s.
EXPECTED_BUILD_MINUTES = (3, 8)


def netlist_clock(report_dir: Path = REPORT_DIR) -> tuple[float, str] | None:
    """The clock (MHz) the engine's V80 netlist meets and the file it was read from:
    ``cycle_budget.json``'s ``proxy_clock_mhz`` of the ``dataflow`` rows, else the
    ``dataflow`` row of ``timing_proxy.md`` (its last column); None when neither has it."""
    budget = report_dir / "cycle_budget.json"
    if budget.exists():
        clocks = {row.get("proxy_clock_mhz") for row in json.loads(budget.read_text())["rows"]
                  if row.get("kernel") == "dataflow"} - {None}
        if len(clocks) == 1:
            return float(clocks.pop()), str(budget.relative_to(report_dir.parent))
    proxy = report_dir / "timing_proxy.md"
    if proxy.exists():
        for line in proxy.read_text().splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if cells[0] == "dataflow" and re.fullmatch(r"\d+(\.\d+)?", cells[-1]):
                return float(cells[-1]), str(proxy.relative_to(report_dir.parent))
    return None


class BuildProgress:
    """A progress line while the engine's model is prepared (``with BuildProgress(...)``):
    elapsed time against ``expected_minutes`` (a low, high pair), redrawn every second on a
    terminal, one line a minute otherwise (a log). Nothing is drawn when the block ends
    within ``quiet_s`` seconds (a cached model loads in about one)."""

    def __init__(self, what: str, expected_minutes: tuple[float, float], *, stream=None,
                 quiet_s=3.0):
        self.what, self.expected = what, expected_minutes
        self.stream = stream if stream is not None else sys.stderr
        self.quiet_s = quiet_s
        self._done = threading.Event()
        self._drawn = False

    def line(self, elapsed: float) -> str:
        """The progress text after ``elapsed`` seconds."""
        return (f"{self.what}: {int(elapsed) // 60}:{int(elapsed) % 60:02d} elapsed "
                f"(the first time about {self.expected[0]:g} to {self.expected[1]:g} min on 2 "
                "shared cores; cached after)")

    def log(self, message: str) -> None:
        """A build message on a line of its own (keeps the progress line below it)."""
        self.stream.write(("\n" if self._drawn and self._tty() else "") + message + "\n")
        self.stream.flush()

    def _tty(self) -> bool:
        return hasattr(self.stream, "isatty") and self.stream.isatty()

    def _run(self, started: float) -> None:
        period = 1.0 if self._tty() else 60.0
        if self._done.wait(self.quiet_s):
            return
        while True:
            elapsed = time.monotonic() - started
            self.stream.write(f"\r{self.line(elapsed)}" if self._tty() else
                              f"{self.line(elapsed)}\n")
            self.stream.flush()
            self._drawn = True
            if self._done.wait(period):
                return

    def __enter__(self):
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, args=(self._started,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        self.seconds = time.monotonic() - self._started
        if self._drawn:
            self.stream.write(("\n" if self._tty() else "")
                              + f"{self.what}: ready after {self.seconds / 60:.1f} min\n")
            self.stream.flush()
        return False


def same_round(a, b) -> bool:
    """Two round records (dataclasses of arrays and numbers, nested) equal bit for bit:
    arrays by dtype, shape and bytes."""
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(
            same_round(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same_round(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_round(a[k], b[k]) for k in a)
    return a == b


def _engine(backend: str, rounds: int, seed: int, *, log=None) -> Engine:
    """An Engine of the serving tree with room for ``max(BATCHES)`` requests (the build
    ``python -m host.report`` uses: one model for both batch sizes); ``log`` takes the rtl
    build's messages (None: standard error)."""
    config = TREE.round_config(max(BATCHES))
    table = np.full((config.batch_size, decode_context_len(config, rounds)), -1, np.int64)
    if backend == "rtl":
        from .rtl import RtlBackend

        backend = RtlBackend(engine_config(config, VOCAB), table, log=log)
    return Engine(config, vocab_size=VOCAB, backend=backend, req_to_token=table, seed=seed)


def _decode(engine: Engine, batch: int, rounds: int, seed: int, temperature: float,
            on_round=None):
    """``rounds`` rounds of ``batch`` requests (prompts from the engine's seed)."""
    models = BigramModels(VOCAB, seed=seed, agreement=AGREEMENT, sharpness=SHARPNESS)
    prompts = [int(t) for t in engine.rng.integers(0, VOCAB, batch)]
    return decode(engine, models, prompts, rounds, temperature=temperature,
                  on_round=on_round)


def _us(cycles: int | None, mhz: float | None) -> str:
    return "n/a" if cycles is None or mhz is None else f"{cycles / mhz:,.2f}"


def _count(value) -> str:
    """A measured count with thousands separators (``n/a``: the backend measures none)."""
    return "n/a" if value is None else f"{value:,.0f}"


def round_line(number: int, result, same: bool, clocks) -> str:
    """One round's line: committed tokens (the tokens at B = 1, the count per request
    otherwise), acceptance, cycles, bytes, µs at each of ``clocks`` (MHz, None: n/a) and
    ``same`` (the round equals the golden backend's)."""
    v = result.verify
    committed = v.accepted_tokens()
    if len(committed) == 1:
        tokens = "tokens " + " ".join(str(int(t)) for t in committed[0])
    else:
        tokens = "per request " + " ".join(str(len(t)) for t in committed)
    depth = int(result.tree.depths().max(axis=1).sum())
    at = " / ".join(f"{_us(result.cycles, mhz)} at {_count(mhz)} MHz" for mhz in clocks)
    return (f"  round {number:2d}: committed {int(v.accept_length.sum()):2d} ({tokens}), "
            f"accepted drafts {int(v.accept_token_num.sum())}/{depth}, "
            f"cycles {_count(result.cycles)}, bytes {_count(result.bytes)}, µs {at}, "
            f"rtl == golden: {'yes' if same else 'NO'}")


def run_batch(rtl: Engine, batch: int, rounds: int, seed: int, temperature: float, clocks,
              *, out=print) -> bool:
    """Decode ``rounds`` rounds of ``batch`` requests on the rtl Engine ``rtl`` and on a
    golden Engine with the same seed, printing each round as it finishes; True when every
    round and the token streams are the same bit for bit."""
    golden_rounds = []
    golden_run = _decode(_engine("golden", rounds, seed), batch, rounds, seed, temperature,
                         on_round=lambda _, result: golden_rounds.append(result))
    same = []

    def show(_, result):
        golden = golden_rounds[len(same)] if len(same) < len(golden_rounds) else None
        same.append(golden is not None and all(
            same_round(getattr(result, part), getattr(golden, part))
            for part in ("draft", "tree", "verify")))
        out(round_line(len(same), result, same[-1], clocks))

    started = time.monotonic()
    run = _decode(rtl, batch, rounds, seed, temperature, on_round=show)
    seconds = time.monotonic() - started
    m = run.metrics.summary(clocks[0])
    tokens_same = run.tokens == golden_run.tokens
    out(f"  B = {batch}: mean acceptance length {m['mean_accept_length']:.2f} tokens per "
        f"request per round, acceptance rate {m['acceptance_rate']:.3f}, "
        f"{_count(m['cycles_per_round'])} cycles and {_count(m['bytes_per_round'])} bytes per "
        f"round; tokens rtl == golden: {'yes' if tokens_same else 'NO'} "
        f"({seconds:.0f} s of simulation)")
    return all(same) and len(same) == run.metrics.rounds and tokens_same


def main(argv=None) -> int:
    """Run the demo; returns the exit status (1 when rtl and golden differ, 2 for bad
    arguments or a failed model build)."""
    parser = argparse.ArgumentParser(prog="python -m host.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4, help="rounds per batch (default 4)")
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES),
                        choices=range(1, max(BATCHES) + 1), metavar="B",
                        help=f"batch sizes, 1 to {max(BATCHES)} (default 1 8)")
    parser.add_argument("--seed", type=int, default=1, help="seed of models, prompts, coins")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="target sampling temperature, 0 = greedy (default 1.0)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    if args.temperature < 0:
        parser.error(f"--temperature must be at least 0, not {args.temperature}")
    found = netlist_clock()
    clocks = (CLOCK_MHZ, found[0] if found else None)
    print(f"host.demo: tree speculative decoding on the rtl backend (the Verilated engine), "
          f"tree {TREE.name} (K={TREE.node_top_k}, W={TREE.tree_width}, depth {TREE.depth}, "
          f"verify_num {TREE.verify_num}), V={VOCAB}, temperature {args.temperature:g}, "
          f"seed {args.seed}; each round checked against the golden backend on the same seed",
          flush=True)
    print(f"  µs per round at {CLOCK_MHZ:g} MHz (the kernel clock) / at "
          + (f"{found[0]:g} MHz (the clock the V80 netlist meets, {found[1]})" if found else
             "the netlist's clock: n/a (no reports/cycle_budget.json or timing_proxy.md)"),
          flush=True)
    try:
        with BuildProgress("engine model (elaborate, verilate, compile)",
                           EXPECTED_BUILD_MINUTES) as progress:
            _engine("rtl", args.rounds, args.seed, log=progress.log)  # built once, cached
    except RuntimeError as error:  # sim.harness.SimulationError: the log's path in it
        print(f"python -m host.demo: the engine's model did not build: {error}",
              file=sys.stderr)
        return 2
    same = True
    for batch in args.batches:
        print(f"B = {batch}, {args.rounds} rounds:", flush=True)
        same &= run_batch(_engine("rtl", args.rounds, args.seed), batch, args.rounds,
                          args.seed, args.temperature, clocks,
                          out=lambda line: print(line, flush=True))
    print(f"rtl == golden: {'yes' if same else 'NO'} (every round, bit for bit)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
