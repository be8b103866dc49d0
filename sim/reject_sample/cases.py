"""K6 case files (``golden.cases`` format): a call and, optionally, its expected outputs.

``meta B n S V``, the golden's input arrays by name (``candidates``, ``retrive_index``,
``retrive_next_token``, ``retrive_next_sibling``, ``uniform_samples``,
``uniform_samples_for_final_sampling``, ``target_probs``, optional ``threshold_single`` and
``threshold_acc``); ``seeds`` instead of the two coin arrays (``draft_tree_reject_sample``), or
``target_predict`` instead of coins and probabilities (``verify_tree_greedy``). Expected
outputs, when present: ``expected_predicts``, ``expected_accept_index``,
``expected_accept_token_num``, ``expected_draft_probs``.

``python -m sim.reject_sample.cases [PATH] [--mode MODE] [--seed N]`` writes a random case for
``make sim KERNEL=reject_sample CASE=PATH``.
"""

import numpy as np

from golden.cases import read_case, write_case

from .call import F32, MODES, Call
from .results import expected

__all__ = ["call_from_case", "write_case_file", "main"]

#: Expected output tensors: name -> (dtype, shape given B, n, S, V).
_OUTPUTS = {
    "predicts": (np.int32, lambda b, n, s, v: (b * n,)),
    "accept_index": (np.int32, lambda b, n, s, v: (b, s)),
    "accept_token_num": (np.int32, lambda b, n, s, v: (b,)),
    "draft_probs": (F32, lambda b, n, s, v: (b, n, v)),
}


def call_from_case(path) -> Call:
    """The call of a case file (see the module); the expected outputs it holds go into
    ``notes["expected"]`` (name -> array). A malformed file raises ``ValueError`` naming the
    file (and the line, for a syntax error) before anything else happens."""
    case = read_case(path, meta_has_count=True)
    if len(case.meta) < 3:
        raise ValueError(f"{path}: `meta` must be `B n S [V]`, not {case.meta}")
    try:
        return _call(case, f"case {path}")
    except KeyError as error:  # a missing tensor; the message names the file
        raise ValueError(error.args[0]) from None


def _call(case, name: str) -> Call:
    b, n, s = case.meta[:3]
    vocab = case.meta[3] if len(case.meta) > 3 else 1

    def tensor(key, shape, *, floats=False):
        values = case.f32(key) if floats else case.i64(key)
        if values.size != int(np.prod(shape)):
            raise ValueError(f"{case.path}: tensor {key!r} holds {values.size} values; "
                             f"`meta` {case.meta} needs {int(np.prod(shape))}")
        return values.reshape(shape)

    links = [tensor(key, (b, n)) for key in ("candidates", "retrive_index",
                                              "retrive_next_token", "retrive_next_sibling")]
    if "target_predict" in case:
        call = Call(name, "greedy", *links, s, target_predict=case.i64("target_predict"))
    else:
        call = Call(name, "lfsr" if "seeds" in case else "sampling", *links, s,
                    target_probs=tensor("target_probs", (b, n, vocab), floats=True))
        for key in ("threshold_single", "threshold_acc"):
            if key in case:
                setattr(call, key, float(tensor(key, (1,), floats=True)[0]))
        if "seeds" in case:
            call.seeds = tensor("seeds", (b,))
        else:
            call.uniform_samples = tensor("uniform_samples", (b, n), floats=True)
            call.final_coins = tensor("uniform_samples_for_final_sampling", (b,), floats=True)
    call.notes["expected"] = {
        key: tensor(f"expected_{key}", shape(b, n, s, vocab), floats=dtype == F32).astype(dtype)
        for key, (dtype, shape) in _OUTPUTS.items() if f"expected_{key}" in case}
    return call


def write_case_file(path, call: Call, *, with_expected: bool = True) -> None:
    """Write ``call`` (and the golden's outputs) as a case file :func:`call_from_case` reads."""
    b, n = call.candidates.shape
    tensors = {"meta": np.array([b, n, call.steps, call.vocab_size], np.int64),
               "candidates": call.candidates, "retrive_index": call.retrive_index,
               "retrive_next_token": call.retrive_next_token,
               "retrive_next_sibling": call.retrive_next_sibling}
    if call.mode == "greedy":
        tensors["target_predict"] = call.target_predict
    else:
        if call.mode == "lfsr":
            tensors["seeds"] = call.seeds
        else:
            tensors["uniform_samples"] = call.uniform_samples
            tensors["uniform_samples_for_final_sampling"] = call.final_coins
        tensors["target_probs"] = call.target_probs
        tensors["threshold_single"] = np.array([call.threshold_single], F32)
        tensors["threshold_acc"] = np.array([call.threshold_acc], F32)
    write_case(path, tensors, expected=expected(call) if with_expected else None,
               header=f"K6 reject_sample case ({call.mode}): {call.name}")


def main(argv=None) -> int:
    """``python -m sim.reject_sample.cases [PATH] [--mode MODE] [--seed N]``: write a random
    K6 case file (with the golden's expected outputs) for ``make sim KERNEL=reject_sample
    CASE=PATH``."""
    import argparse
    from pathlib import Path

    from .generators import random_call

    parser = argparse.ArgumentParser(prog="python -m sim.reject_sample.cases",
                                     description=main.__doc__)
    parser.add_argument("path", nargs="?", default="build/sim/reject_sample_example_case.txt")
    parser.add_argument("--mode", choices=MODES, default="sampling")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    call = random_call(np.random.default_rng(args.seed), name="example", mode=args.mode,
                       batch=2, nodes=64)
    Path(args.path).parent.mkdir(parents=True, exist_ok=True)
    write_case_file(args.path, call)
    print(f"wrote {args.path} ({call.mode}, B={call.batch_size}, n={call.nodes}, "
          f"S={call.steps}, V={call.vocab_size})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
