"""``python -m host.report`` (the end-to-end report) on the golden backend with few rounds: the
document's runs and sweep, the rendered tables, and its argument errors. The rtl run that
fills reports/end_to_end.md is the report's own command (docs/host.md)."""

import json

import pytest

from host import report


def test_report_on_the_golden_backend(tmp_path, capsys):
    assert report.main(["--backend", "golden", "--rounds", "2", "--sweep-rounds", "2",
                        "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "end_to_end.json").read_text())
    assert [(run["batch"], run["temperature"]) for run in document["runs"]] == \
        [(b, t) for b in report.BATCHES for t in report.TEMPERATURES]
    for run in document["runs"]:
        metrics = run["metrics"]
        assert run["same_tokens_as_golden"] and metrics["rounds"] == 2
        assert len(run["tokens"]) == run["batch"]
        assert sum(map(len, run["tokens"])) == metrics["tokens"] > 0
        assert 1.0 <= metrics["mean_accept_length"] <= report.TREE.depth + 1
        assert metrics["cycles_per_round"] is None  # golden: not measured
    assert len(document["sweep"]) == len(report.SWEEP_AGREEMENTS) * len(report.TEMPERATURES)
    text = (tmp_path / "end_to_end.md").read_text()
    assert text == report.render(document)
    assert "| 8 | 1 | 2 |" in text and "EAGLE-2" in text and "**no**" not in text
    assert "--backend golden" in document["command"]
    assert "end_to_end.md" in capsys.readouterr().out


def test_a_token_mismatch_is_reported_and_fails(tmp_path, monkeypatch, capsys):
    runs = iter(range(1000))

    def fake_run(backend, batch, temperature, rounds, seed, agreement=0.9):
        summary = {"rounds": rounds, "tokens": batch, "mean_accept_length": 1.0,
                   "acceptance_rate": 0.0, "fraction_two_or_more": 0.0,
                   "tokens_per_round": float(batch), "cycles_per_round": None,
                   "us_per_round": None, "bytes_per_round": None}
        return summary, [[next(runs)] for _ in range(batch)]  # never the same twice

    monkeypatch.setattr(report, "_run", fake_run)
    assert report.main(["--backend", "golden", "--rounds", "1", "--sweep-rounds", "1",
                        "--out", str(tmp_path)]) == 1
    assert "**no**" in (tmp_path / "end_to_end.md").read_text()
    assert "other tokens than the golden backend" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--sweep-rounds", "0"],
                                  ["--backend", "gpu"]])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        report.main(argv)
    assert exit_.value.code == 2
    assert "usage: python -m host.report" in capsys.readouterr().err
