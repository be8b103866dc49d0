"""``python -m host``: tree speculative decoding with a synthetic model pair through
``host.Engine`` (docs/host.md, "The command line")."""

import argparse
import json
import math
import os
import sys

from .backend import BACKENDS
from .decode import decode, decode_context_len, progress_bar
from .engine import Engine
from .synthetic import BigramModels
from .trees import TREES

CLOCK_MHZ = 300.0  # benchmarks/contract.toml's kernel clock
PROG = "python -m host"
MAX_ROUNDS = 100_000  # the req_to_token rows grow with the rounds (decode_context_len)
MAX_BATCH = 256
MAX_VOCAB = 8192  # the synthetic pair is two float32 [V, V] matrices (256 MiB each here)
INT32_MAX = (1 << 31) - 1


class UsageError(Exception):
    """A bad command line: one line for the user, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, its errors raised as :class:`UsageError` (one line, no usage block)."""

    def error(self, message):
        raise UsageError(message)


def _integer(lo, hi):
    """An argparse type: an integer in ``lo .. hi``."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}, not {value}")
        return value
    return parse


def _real(lo, hi=None):
    """An argparse type: a finite number in ``lo .. hi`` (``hi`` None: no upper bound)."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
        if not math.isfinite(value) or value < lo or (hi is not None and value > hi):
            bound = f"at least {lo:g}" if hi is None else f"between {lo:g} and {hi:g}"
            raise argparse.ArgumentTypeError(f"must be a finite number {bound}, not {text}")
        return value
    return parse


def _json_path(text):
    """An argparse type: a file path whose folder exists and is writable (checked before the
    run, so a bad path does not cost the run)."""
    folder = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"the folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(text) and not os.access(text, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{text!r} is not writable")
    return text


def parse_arguments(argv=None) -> argparse.Namespace:
    """The command line's options, each checked by its type (``UsageError`` naming it)."""
    parser = _Parser(
        prog=PROG, description="Tree speculative decoding of a synthetic "
        "draft/target model pair through the engine's commands.")
    parser.add_argument("--rounds", type=_integer(1, MAX_ROUNDS), default=20,
                        help=f"rounds to run, 1 .. {MAX_ROUNDS:,} (default 20)")
    parser.add_argument("--backend", choices=BACKENDS, default="golden",
                        help="what runs the commands (default golden)")
    parser.add_argument("--seed", type=_integer(0, 2**63 - 1), default=1,
                        help="seed of models, prompts, coins (>= 0)")
    parser.add_argument("--json", metavar="FILE", type=_json_path,
                        help="write the tokens and metrics here")
    parser.add_argument("--batch", type=_integer(1, MAX_BATCH), default=1,
                        help=f"requests, 1 .. {MAX_BATCH} (default 1)")
    parser.add_argument("--tree", choices=sorted(TREES), default="small",
                        help="contract tree (default small)")
    parser.add_argument("--vocab", type=_integer(2, MAX_VOCAB), default=32,
                        help=f"vocabulary size, K .. {MAX_VOCAB} (default 32)")
    parser.add_argument("--agreement", type=_real(0.0, 1.0), default=0.7,
                        help="draft/target agreement in [0, 1] (default 0.7)")
    parser.add_argument("--temperature", type=_real(0.0), default=1.0,
                        help="target sampling temperature, finite, 0 = greedy (default 1.0)")
    parser.add_argument("--top-k", type=_integer(0, INT32_MAX), default=0,
                        help="top-k, 0 = off (default)")
    parser.add_argument("--top-p", type=_real(0.0, 1.0), default=1.0,
                        help="top-p in [0, 1], 1 = off (default)")
    parser.add_argument("--static-tree", action="store_true",
                        help="force the full tree width at every depth instead of the width "
                        "policy")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    k = TREES[args.tree].node_top_k
    if args.vocab < k:
        parser.error(f"argument --vocab: must be at least K = {k} of tree {args.tree}, "
                     f"not {args.vocab}")
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
    """Run the command line; returns the exit status (2 and one line on standard error for
    a bad option or a run the engine refuses)."""
    try:
        args = parse_arguments(argv)
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    tree = TREES[args.tree]
    config = tree.round_config(args.batch)
    context = decode_context_len(config, args.rounds)
    try:
        models = BigramModels(args.vocab, seed=args.seed, agreement=args.agreement)
        engine = Engine(config, vocab_size=args.vocab, backend=args.backend,
                        context_len=context, seed=args.seed)
    except (NotImplementedError, ValueError, RuntimeError) as error:
        print(f"{PROG}: {error}", file=sys.stderr)
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
        try:
            with open(args.json, "w") as file:
                json.dump(document, file, indent=1)
                file.write("\n")
        except OSError as error:  # the path passed its check, then went away
            print(f"{PROG}: error: argument --json: {error.strerror}: {args.json!r}",
                  file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
