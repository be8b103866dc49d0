"""The fused-verify call record: one call of ``golden.tree_speculative_sampling_from_logits``
(mode ``sampling``: coins from the arrays) or ``golden.draft_tree_reject_sample_from_logits``
(``lfsr``: coins from the on-chip LFSR seeded per request), ``B`` requests of ``n`` tree
positions each, with the memory layout of its ``target_logits`` rows.

A request with ``temperatures[b] < 1e-6`` is greedy (argmax verify); a call may mix greedy
and sampling requests. In a ``bfloat16`` call every logit is exactly representable in
bfloat16 (:func:`to_bfloat16`), so a kernel reading bfloat16 from memory sees the very values
the golden receives.
"""

from dataclasses import dataclass, field

import numpy as np

from golden.logit_rows import GREEDY_TEMPERATURE
from golden.reject_sample import lfsr_coins
from hw.kernels.tree_verify_params import LOGIT_BITS, TreeVerifyParams
from sim.reject_sample.call import F32, f32_bits

__all__ = ["Call", "MODES", "F32", "f32_bits", "to_bfloat16", "is_bfloat16"]

MODES = ("sampling", "lfsr")

_QUIET_NAN = 0x7FC00000


def to_bfloat16(values) -> np.ndarray:
    """float32 ``values`` rounded to the nearest bfloat16 (ties to even) and widened back to
    float32; infinities stay, overflow rounds to infinity, a NaN stays a NaN (its top 16 bits
    when they still spell one, else the quiet NaN of its sign)."""
    x = np.asarray(values, F32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16) & 0xFFFFFFFF
    nan = np.isnan(x)
    top = bits & 0xFFFF0000
    keep = (top & 0x7F800000 == 0x7F800000) & (top & 0x007F0000 != 0)
    nan_bits = np.where(keep, top, (bits & 0x80000000) | _QUIET_NAN)
    return np.where(nan, nan_bits, rounded).astype(np.uint32).view(F32).reshape(x.shape)


def is_bfloat16(values) -> bool:
    """Whether every value of a float32 array is exactly a widened bfloat16 (the low 16 bits
    zero; NaN too)."""
    bits = np.asarray(values, F32).view(np.uint32)
    return not bool((bits & 0xFFFF).any())


@dataclass
class Call:
    """One fused-verify call (see the module).

    Arrays: ``candidates``, ``retrive_index``, ``retrive_next_token``,
    ``retrive_next_sibling`` int64 [B, n]; ``target_logits`` float32 [B, n, V];
    ``temperatures`` float32 [B]; ``top_k`` int32 [B] and ``top_p`` float32 [B] (None: off);
    ``uniform_samples`` float32 [B, n] and ``uniform_samples_for_final_sampling`` float32 [B]
    (``sampling``) or ``seeds`` int64 [B] in ``[0, 2**32)`` (``lfsr``). ``steps`` is ``S``.
    ``logit_format`` is the element type the call's logits are exact in (``float32`` or
    ``bfloat16``); ``row_pad`` port words follow every row in memory; ``notes`` carry what the
    generators and case reader know about the call (row styles, expected outputs).
    """

    name: str
    mode: str
    candidates: np.ndarray
    retrive_index: np.ndarray
    retrive_next_token: np.ndarray
    retrive_next_sibling: np.ndarray
    steps: int
    target_logits: np.ndarray
    temperatures: np.ndarray
    top_k: np.ndarray | None = None
    top_p: np.ndarray | None = None
    uniform_samples: np.ndarray | None = None
    uniform_samples_for_final_sampling: np.ndarray | None = None
    seeds: np.ndarray | None = None
    threshold_single: float = 1.0
    threshold_acc: float = 1.0
    logit_format: str = "float32"
    row_pad: int = 0
    notes: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"{self.name}: mode must be one of {MODES}, not {self.mode!r}")
        if self.logit_format not in LOGIT_BITS:
            raise ValueError(f"{self.name}: logit_format must be one of {tuple(LOGIT_BITS)}, "
                             f"not {self.logit_format!r}")

    @property
    def batch_size(self) -> int:
        """``B``."""
        return self.candidates.shape[0]

    @property
    def nodes(self) -> int:
        """``n``: tree positions per request."""
        return self.candidates.shape[1]

    @property
    def vocab_size(self) -> int:
        """``V``."""
        return self.target_logits.shape[-1]

    @property
    def greedy(self) -> np.ndarray:
        """bool [B]: the greedy requests (``temperature < fl32(1e-6)``)."""
        return np.asarray(self.temperatures, F32) < F32(GREEDY_TEMPERATURE)

    def row_words(self, params: TreeVerifyParams) -> int:
        """Port words holding one row: ``ceil(V / port_logits)`` (the padding excluded)."""
        return -(-self.vocab_size // params.port_logits)

    def row_pitch(self, params: TreeVerifyParams) -> int:
        """Bytes from one row to the next: ``(row_words + row_pad) * port_bytes``."""
        return (self.row_words(params) + self.row_pad) * params.port_bytes

    def coins(self) -> tuple[np.ndarray, np.ndarray]:
        """``(uniform_samples [B, n], final coins [B])`` the call uses (the LFSR's in
        ``lfsr`` mode)."""
        if self.mode == "lfsr":
            return lfsr_coins(self.seeds, self.nodes)
        return self.uniform_samples, self.uniform_samples_for_final_sampling

    def golden_arguments(self) -> dict:
        """The golden op's input arguments by name (``seeds`` or the two coin arrays), the
        arrays as they are (the golden reads its inputs only)."""
        arguments = {
            "candidates": self.candidates, "retrive_index": self.retrive_index,
            "retrive_next_token": self.retrive_next_token,
            "retrive_next_sibling": self.retrive_next_sibling,
        }
        if self.mode == "lfsr":
            arguments["seeds"] = self.seeds
        else:
            arguments["uniform_samples"] = self.uniform_samples
            arguments["uniform_samples_for_final_sampling"] = \
                self.uniform_samples_for_final_sampling
        arguments.update(target_logits=self.target_logits, temperatures=self.temperatures,
                         threshold_single=self.threshold_single,
                         threshold_acc=self.threshold_acc, top_k=self.top_k, top_p=self.top_p)
        return arguments

