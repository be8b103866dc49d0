"""A seeded synthetic draft/target model pair (no downloads): both are bigram models, whose
next-token logits depend on the previous token only, so the target's distribution of every
generated token is known exactly (the lossless tests compare against it)."""

import numpy as np

from golden.draft_round import DraftSample
from golden.tree_verify import reference_probabilities

from .checks import check_integer
from .results import VerifyTree

__all__ = ["BigramModels"]


class BigramModels:
    """A draft and a target bigram model over ``vocab_size`` tokens.

    ``draft_logits[prev]`` are ``sharpness * N(0, 1)`` draws; ``target_logits[prev] =
    draft_logits[prev] + noise * N(0, 1)`` with ``noise = 2 * sharpness * (1 -
    agreement)``: ``agreement = 1`` makes the target equal the draft, ``agreement = 0`` makes
    it nearly independent of it. Both tables are float32 ``[V, V]``; row ``prev`` is the
    logits of the token after ``prev``.
    """

    def __init__(self, vocab_size: int, *, seed: int, agreement: float = 0.7,
                 sharpness: float = 2.0):
        self.vocab_size = check_integer("vocab_size", vocab_size, 1)
        if not 0.0 <= agreement <= 1.0:
            raise ValueError(f"`agreement` must be between 0 and 1, not {agreement!r}")
        if not sharpness > 0:
            raise ValueError(f"`sharpness` must be positive, not {sharpness!r}")
        rng = np.random.default_rng(seed)
        v = self.vocab_size
        self.agreement = float(agreement)
        self.draft_logits = (rng.standard_normal((v, v)) * sharpness).astype(np.float32)
        noise = rng.standard_normal((v, v)) * (2.0 * sharpness * (1.0 - agreement))
        self.target_logits = (self.draft_logits + noise).astype(np.float32)

    def sampler(self, node_top_k: int, *, temperature: float = 1.0):
        """The draft model as a ``draft_round`` sampler: every frontier node's ``node_top_k``
        most likely next tokens under ``softmax(draft_logits[token] / temperature)``, in
        descending probability (ties: lower token first)."""
        k = check_integer("node_top_k", node_top_k, 1, self.vocab_size)

        def sample(depth, frontier) -> DraftSample:
            b, w = frontier.tokens.shape
            logits = self.draft_logits[frontier.tokens].astype(np.float64) / temperature
            p = np.exp(logits - logits.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            order = np.argsort(-p, axis=-1, kind="stable")[..., :k]
            probas = np.take_along_axis(p, order, axis=-1).astype(np.float32)
            return DraftSample(probas=probas.reshape(b, w * k),
                               tokens=order.astype(np.int64).reshape(b, w * k))

        return sample

    def verify_logits(self, tree: VerifyTree) -> np.ndarray:
        """The target's logits for a verify tree, f32 [B, n, V]: row ``i`` of request ``b``
        is ``target_logits[token at verify position i]``."""
        return self.target_logits[tree.candidates()]

    def next_token_distribution(self, prev: int, temperature: float, top_k: int = 0,
                                top_p: float = 1.0) -> np.ndarray:
        """The target's float64 distribution of the token after ``prev`` (docs/kernels.md
        §10: softmax at ``temperature``, then top-k, then top-p; one-hot at the argmax when
        greedy)."""
        logits = self.target_logits[prev]
        if temperature < 1e-6:
            p = np.zeros(self.vocab_size)
            p[int(np.argmax(logits))] = 1.0
            return p
        return reference_probabilities(logits, temperature, top_k, top_p)
