"""What the host API returns: the verify tree (SGLang's verify-forward inputs), the verify
result (SGLang's commit outputs) and one round's summary, plus the per-command cost
records."""

from dataclasses import dataclass, field

import numpy as np

from golden.draft_round import DraftRoundResult

__all__ = ["CommandRecord", "RoundResult", "VerifyResult", "VerifyTree"]


@dataclass(frozen=True)
class CommandRecord:
    """One command sent to the backend: its ``command`` name, ``status`` name and cost
    (``cycles``, ``bytes``; ``None`` when the backend does not measure it)."""

    command: str
    status: str
    cycles: int | None
    bytes: int | None


@dataclass(frozen=True)
class VerifyTree:
    """``build_verify``'s outputs (docs/kernels.md §6 and the P1 metadata of §11), numpy
    arrays in SGLang's formats for a batch of ``B`` requests and ``n`` verify positions
    (root included).

    Fields: ``n``; ``tree_mask_mode``; ``draft_tokens`` i64 [B*n]; ``positions`` i64 [B*n]
    (``seq_len + depth``); ``retrive_index``, ``retrive_next_token``,
    ``retrive_next_sibling`` i64 [B, n]; ``tree_mask`` (bool, bool or uint8 by the mode);
    ``qo_indptr``, ``kv_indptr``, ``mask_indptr`` i64 [B+1]; ``kv_indices`` i64
    [``kv_indptr[B]``]; ``cache_locs`` i64 [B*n], the verify forward's KV slots.
    """

    n: int
    tree_mask_mode: int
    draft_tokens: np.ndarray
    positions: np.ndarray
    retrive_index: np.ndarray
    retrive_next_token: np.ndarray
    retrive_next_sibling: np.ndarray
    tree_mask: np.ndarray
    qo_indptr: np.ndarray
    kv_indptr: np.ndarray
    mask_indptr: np.ndarray
    kv_indices: np.ndarray
    cache_locs: np.ndarray

    @property
    def batch_size(self) -> int:
        """``B``."""
        return self.retrive_index.shape[0]

    def candidates(self) -> np.ndarray:
        """``draft_tokens`` as [B, n] (SGLang's ``candidates``)."""
        return self.draft_tokens.reshape(self.batch_size, self.n)

    def depths(self) -> np.ndarray:
        """Each verify position's depth below the root, i64 [B, n] (0 for the root)."""
        b = self.batch_size
        positions = self.positions.reshape(b, self.n)
        return positions - positions[:, :1]


@dataclass(frozen=True)
class VerifyResult:
    """``verify``'s outputs (docs/kernels.md §10 and §9) for ``B`` requests.

    Fields: ``predicts`` i32 [B*n]; ``accept_index`` i32 [B, S]; ``accept_token_num`` i32
    [B] (accepted draft tokens); ``accept_length`` i32 [B] (tokens committed: accepted draft
    tokens plus the bonus token, after the EOS / length finish); ``verified_id`` i32
    [sum(accept_length)]; ``next_root`` i64 [B]; ``evict_mask`` bool [B*n]; ``finished``
    bool [B]; ``seq_lens`` i64 [B] (updated); ``active_slots``, ``active_inverse`` i64 [B];
    ``active_count`` (int); ``nan_flags`` bool [B]; ``rows_read`` (int, logits rows read).
    """

    predicts: np.ndarray
    accept_index: np.ndarray
    accept_token_num: np.ndarray
    accept_length: np.ndarray
    verified_id: np.ndarray
    next_root: np.ndarray
    evict_mask: np.ndarray
    finished: np.ndarray
    seq_lens: np.ndarray
    active_slots: np.ndarray
    active_inverse: np.ndarray
    active_count: int
    nan_flags: np.ndarray
    rows_read: int

    def accepted_tokens(self) -> list[np.ndarray]:
        """The committed tokens of each request (``verified_id`` split by
        ``accept_length``), int64."""
        ends = np.cumsum(self.accept_length)
        return [part.astype(np.int64) for part in np.split(self.verified_id, ends[:-1])]


@dataclass(frozen=True)
class RoundResult:
    """One round (``Engine.round``): the draft round, its verify tree, the verify result and
    the commands it sent (``commands``: :class:`CommandRecord` s in order)."""

    draft: DraftRoundResult
    tree: VerifyTree
    verify: VerifyResult
    commands: list[CommandRecord] = field(default_factory=list)

    @property
    def cycles(self) -> int | None:
        """Engine clocks of the round's commands (``None`` if any is unmeasured)."""
        return _total(record.cycles for record in self.commands)

    @property
    def bytes(self) -> int | None:
        """Bytes the round's commands moved (``None`` if any is unmeasured)."""
        return _total(record.bytes for record in self.commands)


def _total(values) -> int | None:
    values = list(values)
    if not values or any(value is None for value in values):
        return None
    return int(sum(values))
