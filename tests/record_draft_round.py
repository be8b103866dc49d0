"""Records the 15-depth draft round that ``tests/test_host_rtl_15_depths.py`` replays:
``python -m tests.record_draft_round`` writes ``tests/data/draft_round_15_depths.npz``.

The round has the sizes of the spec's 15-depth capture (docs/kernels.md §4: B = 2, K = W = 8,
``max_input_size`` 64, ``max_node_count`` 1,024, ``verify_num`` 64) and a width per depth as
a serving system's schedule gives it (8 while the tree is shallow, narrowing to 1), chosen so
that all 15 depth labels fit the 64 draft-input columns. The draft model's answers come from
``golden.synthetic_sampler``; the file keeps them, the roots, the widths and what
``golden.draft_round`` made of them, so a later golden or hardware change that alters the
round shows as a difference from the record.
"""

from dataclasses import asdict
from pathlib import Path

import numpy as np

from golden.draft_round import DraftRoundConfig, draft_round, synthetic_sampler

__all__ = ["RECORD", "CONFIG", "TREE_ARRAYS", "record"]

RECORD = Path(__file__).resolve().parent / "data" / "draft_round_15_depths.npz"

CONFIG = DraftRoundConfig(batch_size=2, node_top_k=8, max_tree_width=8, depths=15,
                          verify_num=64, max_verify_num=64, max_node_count=1024,
                          max_input_size=64, hidden_size=0)

#: Widths of depth labels 2 .. 15 (their sum, 57, keeps the input count within 64 + 1).
WIDTHS = (8, 8, 8, 6, 5, 4, 4, 3, 3, 2, 2, 2, 1, 1)

#: The result's arrays the record keeps (``DraftRoundResult`` field names).
TREE_ARRAYS = ("cumu_tokens", "cumu_scores", "cumu_deltas", "prev_indexs", "next_indexs",
               "side_indexs", "sort_scores", "work_scores", "mask_nodes")


def record(path: Path = RECORD, *, seed: int = 15, vocab_size: int = 1000) -> dict:
    """Run the round on the golden model and write it to ``path``; return the arrays."""
    roots = np.array([17, 923], np.int64)
    samples = []
    sampler = synthetic_sampler(seed, vocab_size, CONFIG.node_top_k)

    def recording(depth, frontier):
        sample = sampler(depth, frontier)
        samples.append(sample)
        return sample

    result = draft_round(CONFIG, recording, roots, widths=WIDTHS)
    if len(result.depths) != CONFIG.depths:  # the widths end with depth 15: "width_zero"
        raise AssertionError(f"the recorded round stopped early: {result.stop_reason} after "
                             f"{len(result.depths)} depths")
    arrays = {
        "config": np.array(repr(asdict(CONFIG))), "vocab_size": np.array(vocab_size),
        "root_tokens": roots, "widths": np.array(WIDTHS, np.int64),
        "cumu_count": np.array(result.cumu_count), "stop_reason": np.array(result.stop_reason),
        "tree_widths": np.array([d.tree_width for d in result.depths], np.int64),
        **{f"probas_{d}": s.probas for d, s in enumerate(samples, 1)},
        **{f"tokens_{d}": s.tokens for d, s in enumerate(samples, 1)},
        **{name: getattr(result, name) for name in TREE_ARRAYS},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    return arrays


if __name__ == "__main__":
    saved = record()
    print(f"{RECORD}: {int(saved['cumu_count'])} nodes over {len(saved['tree_widths'])} depths, "
          f"widths {saved['tree_widths'].tolist()}")
