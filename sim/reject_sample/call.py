"""The K6 call record: one call of a golden op with its input arrays.

A :class:`Call` is a call of ``tree_speculative_sampling_target_only`` (mode ``sampling``),
``draft_tree_reject_sample`` (``lfsr``: coins from the LFSR seeded per request) or
``verify_tree_greedy`` (``greedy``), ``B`` requests of ``n`` tree positions each.
"""

from dataclasses import dataclass, field

import numpy as np

from golden.reject_sample import lfsr_coins

__all__ = ["Call", "MODES", "F32", "f32_bits"]

F32 = np.float32
MODES = ("sampling", "lfsr", "greedy")


def f32_bits(value) -> int:
    """float32 bit pattern of a Python or numpy scalar."""
    return int(np.array(value, F32).view(np.uint32))


@dataclass
class Call:
    """One golden call (see the module). ``row_pad`` words pad every memory row
    (``sim.reject_sample.memory``)."""

    name: str
    mode: str
    candidates: np.ndarray
    retrive_index: np.ndarray
    retrive_next_token: np.ndarray
    retrive_next_sibling: np.ndarray
    steps: int
    target_probs: np.ndarray | None = None
    uniform_samples: np.ndarray | None = None
    final_coins: np.ndarray | None = None
    seeds: np.ndarray | None = None
    target_predict: np.ndarray | None = None
    threshold_single: float = 1.0
    threshold_acc: float = 1.0
    row_pad: int = 0
    notes: dict = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return self.candidates.shape[0]

    @property
    def nodes(self) -> int:
        return self.candidates.shape[1]

    @property
    def vocab_size(self) -> int:
        return 1 if self.target_probs is None else self.target_probs.shape[-1]

    def row_words(self, lanes: int) -> int:
        return -(-self.vocab_size // lanes) + self.row_pad

    def coins(self):
        """``(uniform_samples, final coins)`` the call uses (the LFSR's for ``lfsr``)."""
        if self.mode == "lfsr":
            return lfsr_coins(self.seeds, self.nodes)
        if self.mode == "sampling":
            return self.uniform_samples, self.final_coins
        b, n = self.candidates.shape
        return np.zeros((b, n), F32), np.zeros(b, F32)

