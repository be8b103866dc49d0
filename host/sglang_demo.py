"""``python -m host.sglang_demo``: SGLang's EAGLE verify step on ``host.sgl_kernel`` (issue 33).

An orchestration written as SGLang writes it, its CUDA ops replaced by ``host.sgl_kernel``'s:
per round, a synthetic EAGLE draft (``select_top_k_tokens`` over ``speculative_num_steps``
steps, ``organize_draft_results``), the verify tree built by
``build_tree_kernel_efficient`` (SGLang's ``eagle_utils`` wrapper around the op; always the
golden: the hardware builds trees only from its own draft round), the target's logits of
every tree position, then ``EagleVerifyInput.verify``: on the greedy path ``argmax`` ->
``verify_tree_greedy``; on the sampling path ``softmax(logits / temperature)`` ->
``top_k_renorm_prob`` -> ``top_p_renorm_prob`` (each request's ``top_k``/``top_p`` repeated
over its ``n`` rows, as SGLang does; the filters run on the golden on either backend: the
hardware filters only inside its own fused verify) -> ``tree_speculative_sampling_target_only``
with uniform coins. The accepted tokens are read as SGLang reads them
(``predict[accept_index]``, the last one the next round's root), ``seq_lens`` advance by
``accept_length + 1``.

The models are synthetic and seeded: the target's logits after token ``t`` at position ``p``
are ``W[t] + P[p]`` (``W`` a random ``V x V`` table, ``P[p]`` a random row per position), the
draft's the same plus a fixed random error, so drafts are often but not always accepted.
Arrays are numpy (``--torch``: CPU tensors, torch installed).

``--backend golden`` or ``rtl`` runs the verify ops on that backend; the default ``both`` runs
both on the same seed and exits 1 (naming the first difference) unless every round's tokens
agree. The rtl backend runs K6 on its Verilator model (``host.k6_rtl``); its first use builds
the model (a progress line says so; cached under ``build/verilated/`` after). A model that
does not build exits 2 naming its log.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from . import sgl_kernel

__all__ = ["Settings", "ToyModels", "build_tree", "draft", "main", "run", "verify"]

#: K6's first Verilator build on this project's 2 shared cores (elaborate, verilate,
#: compile: 14 to 15 s measured at a load of about 1; more on a busy machine); the progress
#: line's expectation, in minutes.
EXPECTED_BUILD_MINUTES = (0.25, 1)
PATHS = ("greedy", "sampling")


@dataclass(frozen=True)
class Settings:
    """The demo's shape: SGLang's ``speculative_eagle_topk``, ``speculative_num_steps`` and
    ``speculative_num_draft_tokens``, the batch, vocabulary, rounds per path, the sampling
    path's temperature, top-k and top-p, and the seed."""

    batch: int = 2
    topk: int = 4
    steps: int = 3
    draft_tokens: int = 8
    vocab: int = 512
    rounds: int = 3
    temperature: float = 0.7
    top_k: int = 20
    top_p: float = 0.9
    seed: int = 0
    prompt_len: int = 5


class ToyModels:
    """The seeded synthetic target and draft (see the module docstring)."""

    def __init__(self, vocab: int, seed: int):
        rng = np.random.default_rng([seed, 1])
        self.vocab, self.seed = vocab, seed
        self.table = (rng.standard_normal((vocab, vocab)) * 2.5).astype(np.float32)
        self.error = (rng.standard_normal((vocab, vocab)) * 0.6).astype(np.float32)

    def _position(self, position: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, 2, int(position)])
        return (rng.standard_normal(self.vocab) * 1.5).astype(np.float32)

    def target_logits(self, tokens, positions) -> np.ndarray:
        """float32 ``[len(tokens), V]``: the target's next-token logits after each token."""
        return np.stack([self.table[t] + self._position(p)
                         for t, p in zip(np.ravel(tokens), np.ravel(positions), strict=True)])

    def draft_logits(self, tokens, positions) -> np.ndarray:
        """The draft's logits: the target's plus the draft's fixed error."""
        return self.target_logits(tokens, positions) + self.error[np.ravel(tokens)]


def _softmax(logits: np.ndarray) -> np.ndarray:
    """float32 softmax over the last axis."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(shifted, dtype=np.float32)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def _topk(values: np.ndarray, k: int):
    """``torch.topk(values, k, dim=-1)``: values and indices, largest first (ties: lower
    index first)."""
    index = np.argsort(-values, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(values, index, axis=-1), index


def _select_top_k_tokens(i, topk_p, topk_index, scores, topk):
    """SGLang's ``select_top_k_tokens`` (no hidden states): ``(input_ids, scores,
    tree_info)`` of draft step ``i``."""
    if i == 0:
        b = topk_p.shape[0]
        parents = np.tile(np.arange(-1, topk, dtype=np.int64), (b, 1))
        return topk_index.reshape(-1), topk_p, (topk_p[:, None, :], topk_index, parents)
    b = topk_p.shape[0] // topk
    expand = scores[:, :, None] * topk_p.reshape(b, topk, topk)
    cs_p, cs_index = _topk(expand.reshape(b, -1), topk)
    tokens = topk_index.reshape(b, topk * topk)
    input_ids = np.take_along_axis(tokens, cs_index, axis=1).reshape(-1)
    return input_ids, cs_p, (expand, tokens, cs_index + topk * topk * (i - 1) + topk)


def draft(models: ToyModels, verified_id, seq_lens, s: Settings):
    """The EAGLE draft of one round as SGLang's ``draft_forward`` runs it, then
    ``organize_draft_results``: ``(parent_list, top_scores_index, draft_tokens)``."""
    b = len(verified_id)
    topk_p, topk_index = _topk(_softmax(models.draft_logits(verified_id, seq_lens)), s.topk)
    score_list, token_list, parents_list = [], [], []
    scores = None
    for i in range(s.steps):
        input_ids, scores, (step_scores, step_tokens, parents) = _select_top_k_tokens(
            i, topk_p, topk_index, scores, s.topk)
        score_list.append(step_scores)
        token_list.append(step_tokens)
        parents_list.append(parents)
        if i == s.steps - 1:
            break
        positions = np.repeat(seq_lens, s.topk) + i + 1
        topk_p, topk_index = _topk(_softmax(models.draft_logits(input_ids, positions)), s.topk)
    # organize_draft_results
    all_scores = np.concatenate(score_list, axis=1).reshape(b, -1)
    all_tokens = np.concatenate(token_list, axis=1)
    top_scores_index = np.sort(_topk(all_scores, s.draft_tokens - 1)[1], axis=-1)
    draft_tokens = np.take_along_axis(all_tokens, top_scores_index, axis=1)
    parent_list = np.concatenate(parents_list[:-1], axis=1) if len(parents_list) > 1 \
        else np.empty((b, 0), np.int64)
    return parent_list, top_scores_index, draft_tokens


@dataclass
class VerifyInput:
    """What SGLang's ``EagleVerifyInput`` holds of a round (numpy)."""

    draft_token: np.ndarray
    positions: np.ndarray
    retrive_index: np.ndarray
    retrive_next_token: np.ndarray
    retrive_next_sibling: np.ndarray
    spec_steps: int
    draft_token_num: int


def build_tree(verified_id, parent_list, top_scores_index, draft_tokens, seq_lens,
               s: Settings, tensor) -> VerifyInput:
    """SGLang's ``build_tree_kernel_efficient`` wrapper (full tree mask, SGLang's buffers)
    around ``host.sgl_kernel.build_tree_kernel_efficient`` (golden)."""
    b, n = len(seq_lens), s.draft_tokens
    tokens = np.concatenate([verified_id[:, None], draft_tokens], axis=1).reshape(-1)
    tree_mask = np.ones(int(seq_lens.sum()) * n + n * n * b, np.bool_)
    links = np.full((3, b, n), -1, np.int64)
    positions = np.empty(b * n, np.int64)
    sgl_kernel.build_tree_kernel_efficient(
        tensor(parent_list), tensor(top_scores_index), tensor(seq_lens), tensor(tree_mask),
        tensor(positions), tensor(links[0]), tensor(links[1]), tensor(links[2]), s.topk,
        s.steps, n, 0)
    return VerifyInput(tokens, positions, links[0], links[1], links[2], s.steps, n)


def verify(spec: VerifyInput, logits, temperatures, top_ks, top_ps, rng, backend, tensor):
    """``EagleVerifyInput.verify``'s kernel part: ``(predict, accept_index, accept_length)``.
    All-greedy batches (temperature 0) take ``argmax`` -> ``verify_tree_greedy``; others
    ``softmax(logits / temperature)`` -> ``top_k_renorm_prob`` -> ``top_p_renorm_prob``
    (``top_ks`` i32 [bs], ``top_ps`` f32 [bs]) -> ``tree_speculative_sampling_target_only``
    with uniform coins from ``rng``."""
    bs, n = spec.retrive_index.shape[0], spec.draft_token_num
    candidates = spec.draft_token.reshape(bs, n)
    predict = np.empty(logits.shape[0] + 1, np.int32)
    accept_index = np.full((bs, spec.spec_steps + 1), -1, np.int32)
    accept_length = np.empty(bs, np.int32)
    tree = {"candidates": tensor(candidates), "retrive_index": tensor(spec.retrive_index),
            "retrive_next_token": tensor(spec.retrive_next_token),
            "retrive_next_sibling": tensor(spec.retrive_next_sibling)}
    outputs = {"predicts": tensor(predict), "accept_index": tensor(accept_index),
               "accept_token_num": tensor(accept_length)}
    if (temperatures == 0).all():
        target_predict = logits.argmax(axis=-1).reshape(bs, n)
        sgl_kernel.verify_tree_greedy(**outputs, **tree, target_predict=tensor(target_predict),
                                      backend=backend)
    else:
        expanded = np.repeat(temperatures, n, axis=0)  # [bs * n, 1]
        target_probs = _softmax(logits / expanded)
        # the filters have no hardware kernel outside the engine: the golden on either backend
        target_probs = sgl_kernel.top_k_renorm_prob(tensor(target_probs), tensor(
            np.repeat(top_ks, n)))
        if not (top_ps == 1).all():
            target_probs = sgl_kernel.top_p_renorm_prob(target_probs, tensor(
                np.repeat(top_ps, n)))
        target_probs = np.asarray(target_probs).reshape(bs, n, -1)
        draft_probs = np.zeros(target_probs.shape, np.float32)
        coins = rng.random((bs, n), dtype=np.float32)
        coins_for_final_sampling = rng.random(bs, dtype=np.float32)
        sgl_kernel.tree_speculative_sampling_target_only(
            **outputs, **tree, uniform_samples=tensor(coins),
            uniform_samples_for_final_sampling=tensor(coins_for_final_sampling),
            target_probs=tensor(target_probs), draft_probs=tensor(draft_probs),
            threshold_single=1.0, threshold_acc=1.0, deterministic=True, backend=backend)
    return predict, accept_index, accept_length


def run(s: Settings, backend: str, *, torch_arrays=False, out=print) -> dict:
    """Both paths, ``s.rounds`` rounds each, on ``backend``: ``{(path, round): [tokens of
    each request]}``; a line per round through ``out``."""
    tensor = _tensor_maker(torch_arrays)
    models = ToyModels(s.vocab, s.seed)
    prompt = np.random.default_rng([s.seed, 3]).integers(0, s.vocab, s.batch)
    tokens = {}
    for number, path in enumerate(PATHS):
        temperature = 0.0 if path == "greedy" else s.temperature
        temperatures = np.full((s.batch, 1), temperature, np.float32)
        top_ks = np.full(s.batch, s.top_k, np.int32)
        top_ps = np.full(s.batch, s.top_p, np.float32)
        verified_id = prompt.astype(np.int64)
        seq_lens = np.full(s.batch, s.prompt_len, np.int64)
        op = "argmax -> verify_tree_greedy" if path == "greedy" else \
            (f"softmax -> top_k_renorm_prob ({s.top_k}) -> top_p_renorm_prob ({s.top_p:g}) -> "
             "tree_speculative_sampling_target_only")
        out(f"[{backend}] {path} path (temperature {temperature:g}: {op})")
        for round_number in range(s.rounds):
            parent_list, selected, drafted = draft(models, verified_id, seq_lens, s)
            spec = build_tree(verified_id, parent_list, selected, drafted, seq_lens, s, tensor)
            logits = models.target_logits(spec.draft_token, spec.positions)
            rng = np.random.default_rng([s.seed, 4, number, round_number])
            started = time.perf_counter()
            predict, accept_index, accept_length = verify(spec, logits, temperatures, top_ks,
                                                          top_ps, rng, backend, tensor)
            seconds = time.perf_counter() - started
            accepted = [[int(predict[i]) for i in row if i != -1] for row in accept_index]
            tokens[(path, round_number)] = accepted
            verified_id = np.array([row[-1] for row in accepted], np.int64)
            seq_lens = seq_lens + accept_length + 1
            per_request = "  ".join(f"req {i}: +{int(accept_length[i])} {row}"
                                    for i, row in enumerate(accepted))
            out(f"  round {round_number}: {per_request}  ({seconds * 1e3:.0f} ms)")
    return tokens


def _tensor_maker(torch_arrays: bool):
    """The arrays' form at the op calls: numpy as is, or CPU tensors sharing their memory."""
    if not torch_arrays:
        return lambda array: array
    import torch

    return lambda array: torch.from_numpy(np.ascontiguousarray(array))


def _prepare_rtl(s: Settings, out) -> None:
    """Load (the first time: build) K6's model for the demo's shape, with a progress line."""
    from . import k6_rtl
    from .demo import BuildProgress

    parameters = k6_rtl.build_parameters(s.draft_tokens, s.steps + 1, s.vocab, s.batch)
    out(f"[rtl] K6 RejectSample on Verilator: the build for n <= {parameters['max_nodes']}, "
        f"S <= {parameters['max_steps']}, V <= {parameters['max_vocab_size']}")
    with BuildProgress("[rtl] K6 model (elaborate, verilate, compile)",
                       EXPECTED_BUILD_MINUTES, stream=sys.stdout) as progress:
        k6_rtl.model(s.draft_tokens, s.steps + 1, s.vocab, batch=s.batch, log=progress.log)


def first_difference(golden: dict, rtl: dict) -> str | None:
    """Where two runs' tokens first differ, in words; None when they agree."""
    for key, want in golden.items():
        got = rtl.get(key)
        if got != want:
            path, number = key
            return f"{path} path, round {number}: golden {want}, rtl {got}"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m host.sglang_demo", description=__doc__
                                     .split("\n\n")[0])
    defaults = Settings()
    parser.add_argument("--backend", choices=("golden", "rtl", "both"), default="both")
    for name in ("batch", "topk", "steps", "draft_tokens", "vocab", "rounds", "seed"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int,
                            default=getattr(defaults, name))
    parser.add_argument("--temperature", type=float, default=defaults.temperature)
    parser.add_argument("--top-k", type=int, default=defaults.top_k)
    parser.add_argument("--top-p", type=float, default=defaults.top_p)
    parser.add_argument("--torch", action="store_true", help="pass torch CPU tensors")
    args = parser.parse_args(argv)
    s = Settings(batch=args.batch, topk=args.topk, steps=args.steps,
                 draft_tokens=args.draft_tokens, vocab=args.vocab, rounds=args.rounds,
                 temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                 seed=args.seed)
    print(f"EAGLE verify as SGLang's EagleVerifyInput.verify, ops from host.sgl_kernel: batch "
          f"{s.batch}, topk {s.topk}, {s.steps} draft steps, {s.draft_tokens} draft tokens, "
          f"vocabulary {s.vocab}, {s.rounds} rounds per path, seed {s.seed}"
          + (", torch CPU tensors" if args.torch else ""))
    backends = ("golden", "rtl") if args.backend == "both" else (args.backend,)
    runs = {}
    for backend in backends:
        if backend == "rtl":
            from sim.harness import SimulationError

            try:
                _prepare_rtl(s, print)
            except SimulationError as error:
                print(f"[rtl] the model did not build: {error}", file=sys.stderr)
                return 2
        runs[backend] = run(s, backend, torch_arrays=args.torch)
    if len(runs) == 2:
        difference = first_difference(runs["golden"], runs["rtl"])
        if difference:
            print(f"rtl != golden: {difference}", file=sys.stderr)
            return 1
        count = sum(len(row) for rows in runs["golden"].values() for row in rows)
        print(f"rtl == golden: all {count} accepted tokens of {len(runs['golden'])} rounds "
              "identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
