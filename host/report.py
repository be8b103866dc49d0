"""``python -m host.report``: the end-to-end summary of tree speculative decoding through the
engine, ``reports/end_to_end.{md,json}`` (docs/host.md, "The end-to-end report").

Two parts:

* **Measured runs**: the serving tree (K = W = 8, five depths, 64 draft tokens) at B = 1 and
  B = 8, greedy and at temperature 1, decoded on the ``rtl`` backend (cycles and bytes per
  round from the hardware's counters) and again on the ``golden`` backend with the same seeds;
  the report states whether the two token streams are the same.
* **Acceptance sweep** on the golden backend: acceptance figures of the synthetic pair over
  draft/target agreement and temperature, next to what EAGLE-2 reports for real models.

The model pair is ``host.BigramModels``; its acceptance depends on the knobs, so the figures
show what the engine does with a pair of a given quality, not what a real draft model gets.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from .decode import decode, decode_context_len
from .engine import Engine
from .synthetic import BigramModels
from .trees import TREES

__all__ = ["main", "measure", "render"]

REPORT_DIR = Path(__file__).resolve().parents[1] / "reports"
CLOCK_MHZ = 300.0  # benchmarks/contract.toml's kernel clock
TREE = TREES["serving"]
BATCHES = (1, 8)
TEMPERATURES = (0.0, 1.0)
#: The pair of the measured runs: 1,024 tokens, peaked logits, a draft close to the target.
VOCAB, SHARPNESS, AGREEMENT = 1024, 4.0, 0.9
SWEEP_AGREEMENTS = (0.5, 0.7, 0.9, 1.0)

#: What the literature reports, for the acceptance columns (average acceptance length tau:
#: tokens committed per drafting-verification cycle, the root's token included).
LITERATURE = [
    ("EAGLE-2 (Li et al. 2024, arXiv:2406.16858), Vicuna / LLaMA2-Chat / LLaMA3-Instruct, "
     "MT-bench and five other tasks, temperature 0, dynamic tree of 60 tokens",
     "about 4 to 5.5 tokens per round"),
]


def _run(backend: str, batch: int, temperature: float, rounds: int, seed: int,
         agreement: float = AGREEMENT) -> tuple[dict, list]:
    """One decode of the serving tree: its summary and its token streams."""
    config = TREE.round_config(max(BATCHES))  # one build serves both batch sizes
    engine = Engine(config, vocab_size=VOCAB, backend=backend,
                    context_len=decode_context_len(config, rounds), seed=seed)
    models = BigramModels(VOCAB, seed=seed, agreement=agreement, sharpness=SHARPNESS)
    prompts = [int(t) for t in engine.rng.integers(0, VOCAB, batch)]
    run = decode(engine, models, prompts, rounds, temperature=temperature)
    return run.metrics.summary(CLOCK_MHZ), run.tokens


def measure(*, rounds: int = 32, sweep_rounds: int = 64, seed: int = 1, backend: str = "rtl",
            log=print) -> dict:
    """Run the measured runs on ``backend`` (and on golden for the comparison) and the golden
    sweep; return the report's document."""
    runs = []
    for batch in BATCHES:
        for temperature in TEMPERATURES:
            log(f"serving tree, B = {batch}, temperature {temperature:g}: {rounds} rounds on "
                f"the {backend} backend and on golden")
            started = time.monotonic()
            summary, tokens = _run(backend, batch, temperature, rounds, seed)
            seconds = time.monotonic() - started
            _, golden_tokens = _run("golden", batch, temperature, rounds, seed)
            runs.append({"batch": batch, "temperature": temperature, "backend": backend,
                         "seconds": round(seconds, 1), "metrics": summary,
                         "same_tokens_as_golden": tokens == golden_tokens,
                         "tokens": tokens})
    sweep = []
    for agreement in SWEEP_AGREEMENTS:
        for temperature in TEMPERATURES:
            summary, _ = _run("golden", max(BATCHES), temperature, sweep_rounds, seed,
                              agreement)
            sweep.append({"agreement": agreement, "temperature": temperature,
                          "metrics": summary})
    return {
        "command": f"python -m host.report --rounds {rounds} --sweep-rounds {sweep_rounds} "
                   f"--seed {seed} --backend {backend}",
        "tree": {"name": TREE.name, "node_top_k": TREE.node_top_k,
                 "tree_width": TREE.tree_width, "depth": TREE.depth,
                 "verify_num": TREE.verify_num},
        "models": {"kind": "host.BigramModels", "vocab_size": VOCAB, "sharpness": SHARPNESS,
                   "agreement": AGREEMENT, "seed": seed},
        "clock_mhz": CLOCK_MHZ, "runs": runs, "sweep": sweep,
        "literature": [{"source": source, "figure": figure} for source, figure in LITERATURE],
    }


def _row(cells) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _number(value, digits=0, suffix=""):
    return "n/a" if value is None else f"{value:,.{digits}f}{suffix}"


def render(document: dict) -> str:
    """``reports/end_to_end.md`` from the document of :func:`measure`."""
    tree, models = document["tree"], document["models"]
    lines = [
        "# End-to-end tree speculative decoding through the engine",
        "",
        f"Generated by `{document['command']}` (docs/host.md, \"The end-to-end report\"). "
        f"Tree `{tree['name']}`: K = {tree['node_top_k']}, W = {tree['tree_width']}, "
        f"{tree['depth']} depths, verify_num {tree['verify_num']}, the width policy at cost "
        f"0 (full width). Model pair: `{models['kind']}` (V = {models['vocab_size']:,}, "
        f"sharpness {models['sharpness']:g}, agreement {models['agreement']:g}, seed "
        f"{models['seed']}), a synthetic bigram pair: its acceptance shows what the engine "
        "does with a draft of that quality, not what a trained draft model reaches.",
        "",
        "## Measured runs",
        "",
        "Cycles and bytes per round are the hardware's own counters on the host's rtl build "
        "(64-bit memory ports, two 64-bit float32 logits ports, one build with 8 slots for "
        "both batch sizes), command accepted to completion, summed over `begin_round`, the "
        "`draft_depth`s, `build_verify` and `verify` (not the `read_state`s that return the "
        f"tree to the host); µs at "
        f"{document['clock_mhz']:g} MHz. That build is not the V80's (256-bit ports, a "
        "1,024-lane verify): the V80 build's cycles at the contract points, with real "
        "vocabularies, are in `reports/cycle_budget.md`.",
        "",
        _row(["B", "temperature", "rounds", "mean acceptance length", "acceptance rate",
              ">= 2 accepted", "tokens / round", "cycles / round", "µs / round",
              "bytes / round", "same tokens as golden"]),
        _row(["---:"] * 10 + [":---:"]),
    ]
    for run in document["runs"]:
        m = run["metrics"]
        lines.append(_row([
            run["batch"], f"{run['temperature']:g}", m["rounds"],
            f"{m['mean_accept_length']:.2f}", f"{m['acceptance_rate']:.3f}",
            f"{m['fraction_two_or_more']:.2f}", f"{m['tokens_per_round']:.2f}",
            _number(m["cycles_per_round"]), _number(m["us_per_round"], 2),
            _number(m["bytes_per_round"]), "yes" if run["same_tokens_as_golden"] else "**no**"]))
    lines += [
        "",
        "Mean acceptance length: tokens committed per request per round (accepted draft "
        "tokens plus the one the target adds), EAGLE-2's tau. Acceptance rate: accepted draft "
        "tokens over the verify tree's depth. Tokens per round: the whole batch.",
        "",
        "## Acceptance against the literature",
        "",
        f"The same tree at B = {max(BATCHES)} on the golden backend "
        f"({document['sweep'][0]['metrics']['rounds']} rounds each), over the pair's "
        "agreement:",
        "",
        _row(["agreement", "temperature", "mean acceptance length", "acceptance rate",
              ">= 2 accepted"]),
        _row(["---:"] * 5),
    ]
    for point in document["sweep"]:
        m = point["metrics"]
        lines.append(_row([f"{point['agreement']:g}", f"{point['temperature']:g}",
                           f"{m['mean_accept_length']:.2f}", f"{m['acceptance_rate']:.3f}",
                           f"{m['fraction_two_or_more']:.2f}"]))
    lines += ["", "Reported for real models:", ""]
    lines += [f"- {item['source']}: {item['figure']}." for item in document["literature"]]
    lines += [
        "",
        f"With five depths a round commits at most {tree['depth'] + 1} tokens per request. "
        "At temperature 0 the synthetic pair reaches EAGLE-2's range once the draft agrees "
        "with the target closely. At temperature 1 the verify samples the target's "
        "distribution and a depth is accepted only when the sample is one of the drafted "
        "children there, so even a draft equal to the target commits fewer tokens than at "
        "temperature 0 (the K children hold only part of the probability mass).",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m host.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=32,
                        help="rounds per measured run (default 32)")
    parser.add_argument("--sweep-rounds", type=int, default=64,
                        help="rounds per point of the golden sweep (default 64)")
    parser.add_argument("--seed", type=int, default=1, help="seed of models and prompts")
    parser.add_argument("--backend", choices=("rtl", "golden"), default="rtl",
                        help="backend of the measured runs (default rtl)")
    parser.add_argument("--out", type=Path, default=REPORT_DIR,
                        help="report directory (default reports/)")
    args = parser.parse_args(argv)
    for name, value in (("--rounds", args.rounds), ("--sweep-rounds", args.sweep_rounds)):
        if value < 1:
            parser.error(f"{name} must be at least 1, not {value}")
    document = measure(rounds=args.rounds, sweep_rounds=args.sweep_rounds, seed=args.seed,
                       backend=args.backend, log=lambda text: print(text, flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "end_to_end.json").write_text(json.dumps(document, indent=1) + "\n")
    (args.out / "end_to_end.md").write_text(render(document))
    print(f"wrote {args.out / 'end_to_end.md'} and {args.out / 'end_to_end.json'}")
    mismatched = [run for run in document["runs"] if not run["same_tokens_as_golden"]]
    if mismatched:
        print(f"error: {len(mismatched)} run(s) gave other tokens than the golden backend",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
