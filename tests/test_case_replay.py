"""``CASE=`` replay, every kernel target: a malformed case file is refused with its file, line
and tensor before any model is built; the example case files are what their writers write
today. (The per-kernel replays of good captures, default and derived builds, are in each
kernel's tests.)"""

import importlib

import pytest

from sim.targets import discover_targets

TARGETS = discover_targets()

# (target, case file text, the error it must raise)
MALFORMED = [
    ("active_slots", "finished 3 1 0\n", r"broken.txt:1: tensor 'finished'"),
    ("dataflow", "seed 1\ndraft_depth probas=0.5,x tokens=1,2\n",
     r"broken.txt:2: `probas`: `x` is not a number"),
    ("logits_to_probas", "meta 3 1 1 4\nlogits 4 0.5 1.0 2.0\ntemperatures 1 1.0\n",
     r"broken.txt:2: tensor 'logits' declares 4 values"),
    ("logits_to_probas", "meta 3 1 1 4\ntemperatures 1 1.0\nlogits 3 0.5 1.0 2.0\n",
     r"broken.txt:3: tensor 'logits' has 3 values, meta B n V = 1 1 4 needs 4"),
    ("logits_to_probas", "logits 1 0.5\ntemperatures 1 1.0\n",
     r"broken.txt:1: meta must be `B n V`"),
    ("reject_sample", "meta 4 1 2 1 8\ncandidates 2 0\n", r"broken.txt:2: tensor 'candidates'"),
    ("reject_sample", "meta 4 1 2 1 8\ncandidates 3 0 1 2\n",
     r"broken.txt: tensor 'candidates' holds 3 values"),
    ("reject_sample", "meta 4 1 2 1 8\ncandidates 2 0 1\n",
     r"tensor 'retrive_index' not found in case file .*broken.txt"),
    ("reject_sample", "meta 2 1 2\n", r"broken.txt: `meta` must be `B n S \[V\]`"),
    *(entry for score in ("score", "score_k1") for entry in [
        (score, "batch_size 1 1\nnode_top_k 1 2\ntopk_probas_sampling 3 0.5 0.25\n",
         r"broken.txt:3: tensor 'topk_probas_sampling' declares 3 values but has 2"),
        (score, "batch_size 1 1\nnode_top_k 1 2\ntree_width 1 1\ncumu_count 1 0\n"
                  "topk_probas_sampling 3 0.5 0.25 0.125\nlast_layer_scores 1 1.0\n",
         r"broken.txt:5: tensor 'topk_probas_sampling' has 3 values, which is not of shape "
         r"\(1, 2\)"),
        (score, "batch_size 1 1\nnode_top_k 1 2\ntree_width 1 1\ncumu_count 1 0\n",
         r"tensor 'topk_probas_sampling' not found in case file .*broken.txt"),
        (score, "batch_size 1 1\nnode_top_k 1 2\ntree_width 1 3\ncumu_count 1 0\n"
                  "topk_probas_sampling 6 1 1 1 1 1 1\nlast_layer_scores 3 1 1 1\n",
         r"broken.txt: no K1 model replays this case \(K = 2, W = 3\): `max_tree_width` must be "
         "between 1 and `node_top_k`, not 3")]),
    ("tree_mask", "cumu_tokens 3 1 2\n", r"broken.txt:1: tensor 'cumu_tokens' declares 3"),
    ("tree_verify", "batch_size 1 1\nnum_draft_tokens 1 2\ncandidates 3 0 1\n",
     r"broken.txt:3: tensor 'candidates' declares 3 values but has 2"),
    ("tree_verify", "batch_size 1 1\nnum_draft_tokens 1 2\nnum_speculative_tokens 1 2\n"
                    "vocab_size 1 4\ncandidates 2 0 1\n",
     r"tensor 'retrive_index' not found in case file .*broken.txt"),
    ("update_state", "node_top_k 2 4\n", r"broken.txt:1: tensor 'node_top_k'"),
    ("verify_result", "batch_size 1 1\nnum_draft_tokens 1 x\n",
     r"broken.txt:2: .*num_draft_tokens"),
    ("work_deltas", "node_top_k 2 4\n", r"broken.txt:1: tensor 'node_top_k'"),
]


@pytest.mark.parametrize(("name", "text", "message"), MALFORMED)
def test_malformed_case_is_refused_before_any_build(tmp_path, monkeypatch, name, text,
                                                    message):
    target = TARGETS[name]
    monkeypatch.setattr(target, "model", lambda *args, **kwargs: pytest.fail("model built"))
    path = tmp_path / "broken.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        target.run(case=path)


def test_every_case_target_is_covered():
    assert {name for name, _, _ in MALFORMED} == \
        {name for name, target in TARGETS.items() if target.takes_case}


@pytest.mark.parametrize("kernel", ["active_slots", "tree_mask", "verify_result", "work_deltas"])
def test_example_case_is_current(tmp_path, kernel):
    vectors = importlib.import_module(f"sim.{kernel}.vectors")
    regenerated = tmp_path / "case.txt"
    vectors.write_example_case(regenerated)
    assert regenerated.read_text() == vectors.EXAMPLE_CASE.read_text(), \
        f"rerun `python -m sim.{kernel}.vectors`"
