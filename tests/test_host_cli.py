"""``python -m host``: the end-to-end run, its summary and JSON, and the contract trees."""

import json
import subprocess
import sys
import tomllib

import pytest

import host
from host.__main__ import main
from sim.harness import REPO_ROOT


def run(capsys, *arguments):
    status = main([*arguments])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_the_trees_are_the_contract_trees():
    contract = tomllib.loads((REPO_ROOT / "benchmarks" / "contract.toml").read_text())
    trees = {tree["id"]: tree for tree in contract["trees"]}
    assert set(trees) == set(host.TREES)
    for name, point in host.TREES.items():
        tree = trees[name]
        assert (point.node_top_k, point.tree_width, point.depth, point.verify_num,
                point.description) == (tree["node_top_k"], tree["tree_width"], tree["depth"],
                                       tree["verify_num"], tree["description"])


def test_a_run_prints_the_summary_and_writes_the_json(capsys, tmp_path):
    path = tmp_path / "run.json"
    status, out, err = run(capsys, "--rounds", "4", "--batch", "2", "--seed", "3",
                           "--json", str(path))
    assert status == 0
    assert "4/4 rounds" in err  # the progress bar
    for figure in ("mean acceptance length", "acceptance rate", "rounds with >= 2 accepted",
                   "tokens per round", "bytes per round", "cycles per round"):
        assert figure in out
    assert out.count("n/a (golden backend)") == 2
    document = json.loads(path.read_text())
    metrics = document["metrics"]
    assert metrics["rounds"] == 4 and metrics["bytes_per_round"] is None
    assert metrics["cycles_per_round"] is None and metrics["us_per_round"] is None
    requests = document["requests"]
    assert len(requests) == 2
    assert sum(len(r["tokens"]) for r in requests) == metrics["tokens"]
    assert metrics["tokens_per_round"] == metrics["tokens"] / 4
    assert 1 <= metrics["mean_accept_length"] <= host.TREES["small"].depth + 1
    assert 0 <= metrics["acceptance_rate"] <= 1
    assert all(0 <= t < 32 for r in requests for t in r["tokens"])


def test_runs_are_reproducible(capsys, tmp_path):
    documents = []
    for name in ("a.json", "b.json"):
        assert run(capsys, "--rounds", "3", "--quiet", "--json", str(tmp_path / name))[0] == 0
        documents.append(json.loads((tmp_path / name).read_text())["requests"])
    assert documents[0] == documents[1]


@pytest.mark.parametrize("tree", sorted(host.TREES))
def test_every_contract_tree_runs(capsys, tree):
    status, out, _ = run(capsys, "--rounds", "2", "--quiet", "--tree", tree, "--static-tree",
                         "--temperature", "0")
    assert status == 0 and f"tree {tree}" in out and "static" in out


def test_a_vocabulary_below_k_is_refused(capsys):
    status, _, err = run(capsys, "--tree", "eagle2", "--vocab", "8")
    assert status == 2 and "--vocab" in err


def test_python_m_host_runs():
    done = subprocess.run([sys.executable, "-m", "host", "--rounds", "2", "--quiet"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "mean acceptance length" in done.stdout
