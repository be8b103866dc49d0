"""Records the draft rounds that ``tests/test_host_rtl_15_depths.py`` replays:
``python -m tests.record_draft_round`` writes ``tests/data/draft_round_15_depths.npz`` and
``tests/data/draft_round_229_nodes.npz``.

The round has the sizes of the spec's 15-depth capture (docs/kernels.md §4: B = 2, K = W = 8,
``max_input_size`` 64, ``max_node_count`` 1,024, ``verify_num`` 64) and a width per depth as
a serving system's schedule gives it (8 while the tree is shallow, narrowing to 1), chosen so
that all 15 depth labels fit the 64 draft-input columns. The draft model's answers come from
``golden.synthetic_sampler``; the file keeps them, the roots, the widths and what
``golden.draft_round`` made of them, so a later golden or hardware change that alters the
round shows as a difference from the record.

The second record has the shape of a real 15-depth EAGLE run (issue 39: B = 1, K = W = 4,
``max_node_count`` 229, ``max_input_size`` 157, ``verify_num`` 64): width 4 at every depth
fills the node budget exactly (1 + 4 + 14 * 16 = 229 nodes), on sizes that are not powers of
two.
"""

from dataclasses import asdict
from pathlib import Path

import numpy as np

from golden.draft_round import DraftRoundConfig, draft_round, synthetic_sampler

__all__ = ["RECORD", "CONFIG", "REAL_RUN", "REAL_RUN_CONFIG", "TREE_ARRAYS", "record"]

DATA = Path(__file__).resolve().parent / "data"
RECORD = DATA / "draft_round_15_depths.npz"

CONFIG = DraftRoundConfig(batch_size=2, node_top_k=8, max_tree_width=8, depths=15,
                          verify_num=64, max_verify_num=64, max_node_count=1024,
                          max_input_size=64, hidden_size=0)

#: Widths of depth labels 2 .. 15 (their sum, 57, keeps the input count within 64 + 1).
WIDTHS = (8, 8, 8, 6, 5, 4, 4, 3, 3, 2, 2, 2, 1, 1)

REAL_RUN = DATA / "draft_round_229_nodes.npz"

REAL_RUN_CONFIG = DraftRoundConfig(batch_size=1, node_top_k=4, max_tree_width=4, depths=15,
                                   verify_num=64, max_verify_num=64, max_node_count=229,
                                   max_input_size=157, hidden_size=0)

#: The records: path -> (config, widths of depth labels 2 .. 15, root tokens, seed).
RECORDS = {RECORD: (CONFIG, WIDTHS, (17, 923), 15),
           REAL_RUN: (REAL_RUN_CONFIG, (4,) * 14, (311,), 229)}

#: The result's arrays the record keeps (``DraftRoundResult`` field names).
TREE_ARRAYS = ("cumu_tokens", "cumu_scores", "cumu_deltas", "prev_indexs", "next_indexs",
               "side_indexs", "sort_scores", "work_scores", "mask_nodes")


def record(path: Path = RECORD, *, vocab_size: int = 1000) -> dict:
    """Run the round of ``RECORDS[path]`` on the golden model and write it to ``path``;
    return the arrays."""
    config, widths, roots, seed = RECORDS[path]
    roots = np.array(roots, np.int64)
    samples = []
    sampler = synthetic_sampler(seed, vocab_size, config.node_top_k)

    def recording(depth, frontier):
        sample = sampler(depth, frontier)
        samples.append(sample)
        return sample

    result = draft_round(config, recording, roots, widths=widths)
    if len(result.depths) != config.depths:  # the widths end with depth 15: "width_zero"
        raise AssertionError(f"the recorded round stopped early: {result.stop_reason} after "
                             f"{len(result.depths)} depths")
    arrays = {
        "config": np.array(repr(asdict(config))), "vocab_size": np.array(vocab_size),
        "root_tokens": roots, "widths": np.array(widths, np.int64),
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
    for path in RECORDS:
        saved = record(path)
        print(f"{path}: {int(saved['cumu_count'])} nodes over {len(saved['tree_widths'])} "
              f"depths, widths {saved['tree_widths'].tolist()}")
