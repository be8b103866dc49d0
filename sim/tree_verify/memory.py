"""The ``target_logits`` memory of a fused-verify call, as the kernel's read ports see it.

Layout (``hw.kernels.tree_verify_params``): request ``b``'s node ``i`` has its row at byte
``b * n * row_pitch + i * row_pitch`` (``row_pitch = (row_words + row_pad) * port_bytes``,
``row_words = ceil(V / port_logits)``); word ``w`` of a row holds the logits
``w * port_logits ..``, logit ``l`` of the word at bits ``l * logit_bits`` (bfloat16: the top
16 bits of the float32). Port ``p`` reads words ``p * chunk_words ..`` of a row
(:meth:`MemoryImage.chunk`). Lanes past ``V`` and the padding words hold garbage (NaN
patterns, infinities, huge finite values) that the kernel must ignore.
"""

import numpy as np

from golden.tree_verify import visited_rows
from hw.kernels.tree_verify_params import TreeVerifyParams

from .call import Call, is_bfloat16

__all__ = ["MemoryImage", "GARBAGE"]

#: float32 bit patterns of what lanes outside the rows hold: quiet, negative and signalling
#: NaN, all ones, +inf, 3e38, 1e30 (bfloat16 images hold their top 16 bits).
GARBAGE = np.array([0x7FC00000, 0xFFC00000, 0x7FA00000, 0xFFFFFFFF, 0x7F800000,
                    0x7F61B1E6, 0x7149F2CA], np.uint32)


class MemoryImage:
    """``call.target_logits`` laid out for a kernel built with ``params`` (see the module),
    read lazily word by word; ``seed`` chooses the garbage. A ``bfloat16`` build needs a call
    whose logits are exact in bfloat16."""

    def __init__(self, call: Call, params: TreeVerifyParams, *, seed: int = 0):
        if params.logit_format == "bfloat16" and not is_bfloat16(call.target_logits):
            raise AssertionError(f"{call.name}: a bfloat16 memory needs logits exact in "
                                 "bfloat16 (a `logit_format='bfloat16'` call)")
        self.params = params
        self.nodes = call.nodes
        self.vocab = call.vocab_size
        self.row_words = call.row_words(params)
        self.row_pitch = call.row_pitch(params)
        self.rows = call.batch_size * call.nodes
        self.size = self.rows * self.row_pitch
        self._flat = np.ascontiguousarray(call.target_logits, np.float32).reshape(self.rows, -1)
        self._half = params.logit_bits == 16
        garbage = GARBAGE >> 16 if self._half else GARBAGE
        self._garbage = np.random.default_rng(seed).choice(garbage, 4 * params.port_logits) \
            .astype("<u2" if self._half else "<u4")

    def row_address(self, b: int, node: int = 0) -> int:
        """Byte address of request ``b``'s row of tree position ``node`` (its first row by
        default: the ``row_address`` of its command)."""
        return (b * self.nodes + node) * self.row_pitch

    def locate(self, address: int) -> tuple[int, int, int]:
        """``(request, node, word)`` of a port-word byte address (``word >= row_words``: a
        padding word); fails like :meth:`word` outside the image or misaligned."""
        self._check(address)
        row, offset = divmod(address, self.row_pitch)
        request, node = divmod(row, self.nodes)
        return request, node, offset // self.params.port_bytes

    def chunk(self, port: int) -> range:
        """The words of every row that read port ``port`` reads (empty for a port past the
        row's end)."""
        chunk_words = -(-self.row_words // self.params.read_ports)
        return range(min(port * chunk_words, self.row_words),
                     min((port + 1) * chunk_words, self.row_words))

    def word(self, address: int) -> int:
        """The port word (``port_bits`` bits) at byte ``address``: logit ``l`` of the word at
        bits ``l * logit_bits``. Raises AssertionError, naming the address, outside the image
        or at an address that is not a multiple of ``port_bytes``."""
        request, node, offset = self.locate(address)
        lanes = self.params.port_logits
        skew = (address // self.params.port_bytes) % (3 * lanes)
        values = self._garbage[skew:skew + lanes].copy()
        start = offset * lanes
        if offset < self.row_words:
            chunk = self._flat[request * self.nodes + node, start:start + lanes]
            bits = chunk.view(np.uint32)
            values[:chunk.size] = bits >> 16 if self._half else bits
        return int.from_bytes(values.tobytes(), "little")

    def burst(self, address: int, length: int) -> list[int]:
        """The words of one read burst: ``length + 1`` beats (AXI ``ARLEN``) from byte
        ``address``, at most ``max_burst`` of them."""
        beats = length + 1
        if not 1 <= beats <= self.params.max_burst:
            raise AssertionError(f"burst of {beats} beats at {address:#x}: the build's "
                                 f"`max_burst` is {self.params.max_burst}")
        return [self.word(address + k * self.params.port_bytes) for k in range(beats)]

    def read_words(self, rows) -> int:
        """Port words a kernel moves reading ``rows`` rows whole (an int, or a ``rows_read``
        list of lists as the golden fills it)."""
        count = rows if isinstance(rows, int) else visited_rows(rows)
        return count * self.row_words

    def read_bytes(self, rows) -> int:
        """Bytes a kernel moves reading ``rows`` rows whole (as :meth:`read_words`)."""
        return self.read_words(rows) * self.params.port_bytes

    def _check(self, address: int) -> None:
        if not 0 <= address < self.size:
            raise AssertionError(f"read of byte address {address:#x} outside the "
                                 f"{self.size} bytes of target_logits")
        if address % self.params.port_bytes:
            raise AssertionError(f"read of byte address {address:#x}: not a multiple of the "
                                 f"{self.params.port_bytes}-byte port word")
