"""``python -m host``: tree speculative decoding with a synthetic model pair through
``host.Engine`` (docs/host.md, "The command line")."""

import argparse
import json
import sys

from .backend import BACKENDS
from .decode import decode, decode_context_len, progress_bar
from .engine import Engine
from .synthetic import BigramModels
from .trees import TREES

CLOCK_MHZ = 300.0  # benchmarks/contract.toml's kernel clock


def parse_arguments(argv=None) -> argparse.Namespace:
    """The command line's options."""
    parser = argparse.ArgumentParser(
        prog="python -m host", description="Tree speculative decoding of a synthetic "
        "draft/target model pair through the engine's commands.")
    parser.add_argument("--rounds", type=int, default=20, help="rounds to run (default 20)")
    parser.add_argument("--backend", choices=BACKENDS, default="golden",
                        help="what runs the commands (default golden)")
    parser.add_argument("--seed", type=int, default=1, help="seed of models, prompts, coins")
    parser.add_argument("--json", metavar="FILE", help="write the tokens and metrics here")
    parser.add_argument("--batch", type=int, default=1, help="requests (default 1)")
    parser.add_argument("--tree", choices=sorted(TREES), default="small",
                        help="contract tree (default small)")
    parser.add_argument("--vocab", type=int, default=32, help="vocabulary size (default 32)")
    parser.add_argument("--agreement", type=float, default=0.7,
                        help="draft/target agreement in [0, 1] (default 0.7)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="target sampling temperature, 0 = greedy (default 1.0)")
    parser.add_argument("--top-k", type=int, default=0, help="top-k, 0 = off (default)")
    parser.add_argument("--top-p", type=float, default=1.0, help="top-p, 1 = off (default)")
    parser.add_argument("--static-tree", action="store_true",
                        help="force the full tree width at every depth instead of the width "
                        "policy")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    for name, value, lo in (("--rounds", args.rounds, 1), ("--batch", args.batch, 1),
                            ("--vocab", args.vocab, 2)):
        if value < lo:
            parser.error(f"{name} must be at least {lo}, not {value}")
    return args


def _figure(value, unit="", *, digits=2, backend="golden"):
    if value is None:
        return f"n/a ({backend} backend)"
    return f"{value:,.{digits}f}{unit}"


def format_summary(args, summary: dict) -> str:
    """The summary lines printed at the end of a run."""
    tree = TREES[args.tree]
    cycles = summary["cycles_per_round"]
    timing = _figure(cycles, digits=0, backend=args.backend)
    data = _figure(summary["bytes_per_round"], digits=0, backend=args.backend)
    if cycles is not None:
        timing += f" ({summary['us_per_round']:.2f} us at {CLOCK_MHZ:g} MHz)"
    lines = [
        f"host: {summary['rounds']} rounds, backend {args.backend}, tree {tree.name} "
        f"(K={tree.node_top_k}, W={tree.tree_width}, depth {tree.depth}, verify_num "
        f"{tree.verify_num}{', static' if args.static_tree else ''}), batch {args.batch}, "
        f"V={args.vocab}, agreement {args.agreement:g}, temperature {args.temperature:g}, "
        f"top-k {args.top_k}, top-p {args.top_p:g}, seed {args.seed}",
        f"  generated tokens          {summary['tokens']}",
        f"  mean acceptance length    {summary['mean_accept_length']:.3f} tokens per request "
        "per round",
        f"  acceptance rate           {summary['acceptance_rate']:.3f} (accepted draft tokens "
        "/ verify-tree depth)",
        f"  rounds with >= 2 accepted {summary['fraction_two_or_more']:.3f}",
        f"  tokens per round          {summary['tokens_per_round']:.3f} (whole batch)",
        f"  verify positions / round  {summary['verify_positions_per_round']:.1f}, logits rows "
        f"read / round {summary['logits_rows_read_per_round']:.1f}",
        f"  bytes per round           {data}",
        f"  cycles per round          {timing}",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    """Run the command line; returns the exit status."""
    args = parse_arguments(argv)
    tree = TREES[args.tree]
    if args.vocab < tree.node_top_k:
        print(f"python -m host: --vocab must be at least K = {tree.node_top_k}",
              file=sys.stderr)
        return 2
    config = tree.round_config(args.batch)
    context = decode_context_len(config, args.rounds)
    try:
        models = BigramModels(args.vocab, seed=args.seed, agreement=args.agreement)
        engine = Engine(config, vocab_size=args.vocab, backend=args.backend,
                        context_len=context, seed=args.seed)
    except (NotImplementedError, ValueError, RuntimeError) as error:
        print(f"python -m host: {error}", file=sys.stderr)
        return 2
    prompts = [int(t) for t in engine.rng.integers(0, args.vocab, args.batch)]
    run = decode(engine, models, prompts, args.rounds, temperature=args.temperature,
                 top_k=args.top_k, top_p=args.top_p,
                 widths=tree.static_widths() if args.static_tree else None,
                 progress=None if args.quiet else progress_bar())
    summary = run.metrics.summary(CLOCK_MHZ)
    print(format_summary(args, summary))
    if args.json:
        document = {
            "arguments": vars(args), "backend": args.backend, "clock_mhz": CLOCK_MHZ,
            "tree": {"name": tree.name, "node_top_k": tree.node_top_k,
                     "tree_width": tree.tree_width, "depth": tree.depth,
                     "verify_num": tree.verify_num},
            "metrics": summary,
            "requests": [{"prompt": [prompt], "tokens": tokens, "finished": finished}
                         for prompt, tokens, finished in zip(
                             run.prompts, run.tokens, run.finished, strict=True)]}
        with open(args.json, "w") as file:
            json.dump(document, file, indent=1)
            file.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
