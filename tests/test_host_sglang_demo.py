"""python -m host.sglang_demo: SGLang's EAGLE verify step on host.sgl_kernel gives the same
tokens on the golden and rtl backends; its draft is shaped as SGLang's; a difference exits 1,
a model that does not build exits 2."""

import numpy as np
import pytest

from host import k6_rtl, sglang_demo
from host.sglang_demo import Settings
from sim.harness import SimulationError

SMALL = Settings(batch=3, rounds=2, seed=5)


@pytest.fixture(scope="module")
def k6():
    """The demo's K6 build (n <= 16, S <= 8, V <= 4096: the one of test_host_sgl_rtl)."""
    return k6_rtl.model(SMALL.draft_tokens, SMALL.steps + 1, SMALL.vocab)


def test_draft_is_shaped_as_sglangs():
    s = SMALL
    models = sglang_demo.ToyModels(s.vocab, s.seed)
    roots = np.array([1, 2, 3])
    parent_list, selected, drafted = sglang_demo.draft(models, roots, np.full(3, 5), s)
    assert parent_list.shape == (3, s.topk + 1 + (s.steps - 2) * s.topk)
    assert parent_list[:, :s.topk + 1].tolist() == [list(range(-1, s.topk))] * 3
    assert selected.shape == drafted.shape == (3, s.draft_tokens - 1)
    assert (np.diff(selected, axis=1) > 0).all()  # sorted, distinct
    assert selected.max() < s.topk + (s.steps - 1) * s.topk ** 2
    spec = sglang_demo.build_tree(roots, parent_list, selected, drafted, np.full(3, 5), s,
                                  lambda array: array)
    assert spec.draft_token.reshape(3, -1)[:, 0].tolist() == roots.tolist()
    assert spec.positions.reshape(3, -1)[:, 0].tolist() == [5, 5, 5]
    assert (spec.retrive_next_token[:, 0] >= 0).all()


def test_golden_and_rtl_tokens_equal(k6):
    lines = []
    golden = sglang_demo.run(SMALL, "golden", out=lines.append)
    rtl = sglang_demo.run(SMALL, "rtl", out=lines.append)
    assert golden == rtl
    assert len(golden) == 2 * SMALL.rounds
    assert sum(len(row) - 1 for rows in golden.values() for row in rows) > 0  # drafts accepted
    assert sum(line.startswith("  round") for line in lines) == 4 * SMALL.rounds


def test_main_runs_both_and_compares(k6, capsys):
    assert sglang_demo.main(["--rounds", "2", "--batch", "2"]) == 0
    out = capsys.readouterr().out
    assert "[golden] greedy path" in out and "[rtl] sampling path" in out
    assert "rtl == golden: all" in out


def test_a_difference_exits_1(monkeypatch, capsys):
    def run(s, backend, **kwargs):
        return {("greedy", 0): [[1, 2]] if backend == "golden" else [[1, 3]]}

    monkeypatch.setattr(sglang_demo, "run", run)
    monkeypatch.setattr(sglang_demo, "_prepare_rtl", lambda s, out: None)
    assert sglang_demo.main([]) == 1
    assert "rtl != golden: greedy path, round 0: golden [[1, 2]], rtl [[1, 3]]" in \
        capsys.readouterr().err


def test_a_model_that_does_not_build_exits_2(monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise SimulationError("Verilated library of reject_sample: `make` failed (exit 2); "
                              "see build.log")

    monkeypatch.setattr(k6_rtl, "model", fail)
    assert sglang_demo.main(["--backend", "rtl"]) == 2
    assert "did not build" in capsys.readouterr().err


@pytest.mark.slow
def test_torch_tensors(k6):
    pytest.importorskip("torch")
    golden = sglang_demo.run(SMALL, "golden", out=lambda line: None)
    assert sglang_demo.run(SMALL, "rtl", torch_arrays=True, out=lambda line: None) == golden
