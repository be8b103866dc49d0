"""Fused-verify case files (``golden.cases`` format): a call and, optionally, its expected
outputs.

Scalars ``batch_size``, ``num_draft_tokens`` (n), ``num_speculative_tokens`` (S),
``vocab_size`` (V) and ``logit_bits`` (32, or 16: every logit exact in bfloat16); the op's
input arrays by argument name: ``candidates``, ``retrive_index``, ``retrive_next_token``,
``retrive_next_sibling``, ``uniform_samples`` and ``uniform_samples_for_final_sampling``
(``tree_speculative_sampling_from_logits``) or ``seeds`` (``draft_tree_reject_sample_from_logits``,
LFSR coins), ``target_logits``, ``temperatures``, optional ``top_k``, ``top_p``,
``threshold_single``, ``threshold_acc``. Expected outputs, when present:
``expected_predicts``, ``expected_accept_index``, ``expected_accept_token_num`` and
``expected_nan_flags``.

``python -m sim.tree_verify.cases [PATH] [--seed N] [--mode sampling|lfsr]`` writes a random
case; ``--example`` rewrites :data:`EXAMPLE_CASE`.
"""

from pathlib import Path

import numpy as np

from golden.cases import read_case, write_case

from .call import F32, MODES, Call, is_bfloat16
from .results import OUTPUTS
from .results import expected as golden_outputs

__all__ = ["EXAMPLE_CASE", "call_from_case", "write_case_file", "example_call", "main"]

EXAMPLE_CASE = Path(__file__).resolve().parent / "example_case.txt"
_SCALARS = ("batch_size", "num_draft_tokens", "num_speculative_tokens", "vocab_size")
_LINKS = ("candidates", "retrive_index", "retrive_next_token", "retrive_next_sibling")


def call_from_case(path) -> Call:
    """The call of a case file (see the module); the expected outputs it holds go into
    ``notes["expected"]`` (name -> array). A malformed file (syntax, a missing tensor, a
    count that does not match the scalars, a value out of range) raises ``ValueError``
    naming the file, and the line and tensor where there is one, before anything else
    happens."""
    case = read_case(Path(path), meta_has_count=True)
    try:
        return _call(case)
    except KeyError as error:  # a missing tensor: the message names the file
        raise ValueError(error.args[0]) from None


def _call(case) -> Call:
    b, n, s, v = (case.scalar(key) for key in _SCALARS)
    bits = case.scalar("logit_bits") if "logit_bits" in case else 32

    def fail(key, message):
        raise ValueError(f"{case.where(key)}: tensor {key!r} {message}")

    for key, value in zip(_SCALARS, (b, n, s, v), strict=True):
        if value < 1:
            fail(key, f"must be at least 1, not {value}")
    if bits not in (16, 32):
        fail("logit_bits", f"must be 16 or 32, not {bits}")

    def tensor(key, shape, kind="i64", lo=None, hi=None):
        values = getattr(case, kind)(key)
        if values.size != int(np.prod(shape)):
            fail(key, f"holds {values.size} values; the scalars need {int(np.prod(shape))}")
        bad = np.zeros(values.shape, bool)
        if kind == "f32" and (lo is not None or hi is not None):
            bad |= ~np.isfinite(values)
        if lo is not None:
            bad |= values < lo
        if hi is not None:
            bad |= values > hi
        if bad.any():
            fail(key, f"value {values[bad][0]} is outside [{lo}, {hi}]")
        return values.reshape(shape)

    links = [tensor("candidates", (b, n), lo=0, hi=v - 1),
             tensor("retrive_index", (b, n), lo=0, hi=b * n - 1),
             tensor("retrive_next_token", (b, n), lo=-1, hi=n - 1),
             tensor("retrive_next_sibling", (b, n), lo=-1, hi=n - 1)]
    logits = tensor("target_logits", (b, n, v), "f32")
    if bits == 16 and not is_bfloat16(logits):
        fail("target_logits", "holds values not exact in bfloat16 (`logit_bits` 16)")
    call = Call(f"case {case.path}", "lfsr" if "seeds" in case else "sampling", *links, s,
                logits, tensor("temperatures", (b,), "f32", lo=0.0),
                logit_format="bfloat16" if bits == 16 else "float32")
    if "top_k" in case:
        call.top_k = tensor("top_k", (b,), lo=-2**31, hi=2**31 - 1).astype(np.int32)
    if "top_p" in case:
        call.top_p = tensor("top_p", (b,), "f32", lo=0.0, hi=1.0)
    for key in ("threshold_single", "threshold_acc"):
        if key in case:
            setattr(call, key, float(tensor(key, (1,), "f32", lo=0.0, hi=1.0)[0]))
    if call.mode == "lfsr":
        call.seeds = tensor("seeds", (b,), lo=0, hi=2**32 - 1)
    else:
        call.uniform_samples = tensor("uniform_samples", (b, n), "f32")
        call.uniform_samples_for_final_sampling = tensor(
            "uniform_samples_for_final_sampling", (b,), "f32")
    shapes = {"predicts": (b * n,), "accept_index": (b, s), "accept_token_num": (b,)}
    call.notes["expected"] = {key: tensor(f"expected_{key}", shape).astype(np.int32)
                              for key, shape in shapes.items() if f"expected_{key}" in case}
    if "expected_nan_flags" in case:
        call.notes["expected"]["nan_flags"] = tensor("expected_nan_flags", (b,), "bool_")
    return call


def write_case_file(path, call: Call, *, expected: bool = True) -> None:
    """Write ``call`` (with the golden's outputs when ``expected``) as a case file
    :func:`call_from_case` reads back into the same call."""
    tensors = dict(zip(_SCALARS, (call.batch_size, call.nodes, call.steps, call.vocab_size),
                       strict=True))
    tensors["logit_bits"] = 16 if call.logit_format == "bfloat16" else 32
    tensors.update({key: value for key, value in call.golden_arguments().items()
                    if value is not None})
    for key in ("threshold_single", "threshold_acc"):
        tensors[key] = np.array([call.threshold_single if key == "threshold_single"
                                 else call.threshold_acc], F32)
    outputs = None
    if expected:
        golden = golden_outputs(call)
        outputs = {key: golden[key] for key in (*OUTPUTS, "nan_flags")}
    write_case(path, tensors, expected=outputs,
               header=f"fused verify (tree_verify) case, {call.mode} mode: {call.name}")



def example_call() -> Call:
    """The call of :data:`EXAMPLE_CASE`: B = 2, n = 8, S = 4, V = 37; request 0 greedy,
    request 1 sampling at T = 0.8 with top_k = 5 and top_p = 0.9 (both arrays on)."""
    from .generators import random_call

    call = random_call(np.random.default_rng(439), max_nodes=8, max_steps=4, max_vocab=37,
                       batch=2, mode="sampling", name="example")
    call.temperatures = np.array([0.0, 0.8], F32)
    call.top_k = np.array([0, 5], np.int32)
    call.top_p = np.array([1.0, 0.9], F32)
    return call


def main(argv=None) -> int:
    """``python -m sim.tree_verify.cases [PATH] [--seed N] [--mode sampling|lfsr]
    [--example]``: write a random fused-verify case file (with the golden's expected
    outputs), or rewrite :data:`EXAMPLE_CASE`."""
    import argparse

    from .generators import random_call

    parser = argparse.ArgumentParser(prog="python -m sim.tree_verify.cases",
                                     description=main.__doc__)
    parser.add_argument("path", nargs="?", default="build/sim/tree_verify_example_case.txt")
    parser.add_argument("--mode", choices=MODES, default="sampling")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--example", action="store_true",
                        help=f"rewrite {EXAMPLE_CASE.name} (PATH and the options unused)")
    args = parser.parse_args(argv)
    if args.example:
        call, path = example_call(), EXAMPLE_CASE
    else:
        call = random_call(np.random.default_rng(args.seed), max_nodes=64, max_steps=8,
                           max_vocab=300, batch=2, mode=args.mode, name=f"seed {args.seed}")
        path = Path(args.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_case_file(path, call)
    print(f"wrote {path} ({call.mode}, B={call.batch_size}, n={call.nodes}, S={call.steps}, "
          f"V={call.vocab_size})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
