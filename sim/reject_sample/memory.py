"""The ``target_probs`` memory of a K6 call, as the kernel's read port sees it.

Request ``b``'s node ``i`` has row ``b*n + i``; row ``r`` starts at word ``r * row_words``
(``row_words = ceil(V / lanes) + call.row_pad``); lane ``l`` of a word is element
``offset * lanes + l`` of its row. Lanes past ``V`` and the padding words hold garbage (large
positive floats, infinities), which the kernel must ignore.
"""

import numpy as np

from .call import F32, Call

__all__ = ["MemoryImage", "GARBAGE"]

#: What lanes outside the rows hold.
GARBAGE = np.array([3.0e38, np.inf, 7.5, 1.0, 0.25], F32)


class MemoryImage:
    """``target_probs`` of a call as ``lanes``-wide words (see the module), read lazily;
    ``seed`` chooses the garbage."""

    def __init__(self, call: Call, lanes: int, *, seed: int = 0):
        self.lanes = lanes
        self.row_words = call.row_words(lanes)
        self.vocab = call.vocab_size
        b, n = call.candidates.shape
        self.rows = b * n
        if call.target_probs is None:
            self.flat = np.zeros((self.rows, 1), F32)
        else:
            self.flat = call.target_probs.reshape(self.rows, -1)
        self.size = self.rows * self.row_words
        self._garbage = np.random.default_rng(seed).choice(GARBAGE, size=4 * lanes)

    def word(self, address: int) -> list[int]:
        """The ``lanes`` float32 bit patterns at word ``address``."""
        if not 0 <= address < self.size:
            raise AssertionError(f"read of word {address} outside the {self.size} words of "
                                 "target_probs")
        row, offset = divmod(address, self.row_words)
        start = offset * self.lanes
        values = self._garbage[(address % 3) * self.lanes:][:self.lanes].copy()
        if start < self.vocab:
            chunk = self.flat[row, start:start + self.lanes]
            values[:chunk.size] = chunk
        return [int(v) for v in values.view(np.uint32)]

    def element(self, address: int, lane: int) -> tuple[int, int]:
        """``(row, j)`` of element ``lane`` of word ``address`` (for draft writes)."""
        row, offset = divmod(address, self.row_words)
        return row, offset * self.lanes + lane

    def payload(self, address: int) -> int:
        """Word ``address`` as the ``read_data`` payload (lane ``l`` at bits ``32 l``): the
        lookup of ``sim.cocotb_tb.ReadPortMemory``."""
        return sum(value << (32 * lane) for lane, value in enumerate(self.word(address)))
