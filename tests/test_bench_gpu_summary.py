"""``reports/fpga_vs_h100_summary.md`` (bench.gpu.summary) and the bench's golden checks: the
parts of bench/gpu that need neither torch nor a GPU (``make report`` runs the summary)."""

import json
import shutil

import numpy as np
import pytest

from bench.gpu.checks import exact, probabilities
from bench.gpu.csvio import COLUMNS, write_csv
from bench.gpu.engine import engine_round, load_budget
from bench.gpu.summary import LINKS, PUBLISHED, pcie_transfers, pcie_us, render
from sim.harness import REPO_ROOT

BUDGET = REPO_ROOT / "reports" / "cycle_budget.json"
POINT = "serving-b1-v128256"


@pytest.fixture
def reports(tmp_path):
    shutil.copy(BUDGET, tmp_path / "cycle_budget.json")
    return tmp_path


def _row(point, op, mode, us, device="NVIDIA H100 80GB HBM3"):
    return {"point": point, "op": op, "mode": mode, "run": 1, "us": us, "iters": 1,
            "bytes": 0, "cov": 0.0, "attempts": 1, "gate": "ok", "device": device,
            "gpu": device, "driver": "x", "torch": "x", "triton": "x", "cuda": "x"}


def _line(text, start):
    return next(line for line in text.splitlines() if line.startswith(start))


def test_without_gpu_csvs_every_gpu_figure_is_missing(reports):
    text = render(reports)
    assert "`reports/h100_verify_raw.csv`: absent" in text
    assert "`reports/h100_draft_raw.csv`: absent" in text
    cells = [c.strip() for c in _line(text, f"| {POINT} |").split("|")[1:-1]]
    assert cells[1:3] == ["MISSING", "MISSING"]
    budget = json.loads(BUDGET.read_text())
    row = next(r for r in budget["rows"] if r["kernel"] == "dataflow" and r["point"] == POINT)
    assert cells[3] == f"{row['cycles']:,}"
    assert cells[4] == f"{row['cycles'] / 300:,.1f}"
    assert cells[5] == f"{row['cycles'] / row['proxy_clock_mhz']:,.1f}"
    large = [c.strip() for c in _line(text, "| serving-b32-v128256 |").split("|")[1:-1]]
    row = next(r for r in budget["rows"]
               if r["kernel"] == "dataflow" and r["point"] == "serving-b32-v128256")
    assert large[1:4] == ["MISSING", "MISSING", f"{row['cycles']:,}"]
    assert _line(text, "| eagle2-b32-v128256 |").count("not measured") >= 6
    assert PUBLISHED["source"] in text


def test_engine_round_is_the_sum_of_its_commands():
    budget = load_budget(BUDGET)
    for row in (r for r in budget["rows"] if r["kernel"] == "dataflow"):
        engine = engine_round(budget, row["point"])
        assert engine.total == row["cycles"]
    assert engine_round(budget, "eagle2-b32-v32000") is None  # outside the contract's scope


def test_pcie_time_counts_dependent_transfers_and_bytes():
    link = LINKS[0]
    assert pcie_us(10, 2_520_000, link) == pytest.approx(10 * link.latency_us + 100.0)
    budget = load_budget(BUDGET)
    transfers, nbytes = pcie_transfers(budget, POINT)
    row = next(r for r in budget["rows"] if r["kernel"] == "dataflow" and r["point"] == POINT)
    assert transfers == 2 * 5 + row["rows_read"] + 2
    assert nbytes >= row["rows_read"] * 128256 * 2


def test_gpu_rows_fill_the_round_and_the_itl(reports):
    rows = [_row(POINT, "draft_round", "graph", 60.0), _row(POINT, "build_tree", "graph", 10.0),
            _row(POINT, "sglang_chain", "graph", 130.0),
            _row(POINT, "visited_rows", "graph", 30.0)]
    write_csv(reports / "h100_draft_raw.csv", [], rows[:1])
    write_csv(reports / "h100_verify_raw.csv", [], rows[1:])
    text = render(reports)
    cells = [c.strip() for c in _line(text, f"| {POINT} |").split("|")[1:-1]]
    assert cells[1:3] == ["200.0", "100.0"]
    engine = engine_round(load_budget(BUDGET), POINT)
    met = engine.total / engine.met_clock_mhz
    assert cells[9] == f"engine {200.0 / met:.2f}x faster"
    itl = 1e6 / PUBLISHED["eagle2_tps"]
    expected = itl - (200.0 - met) / PUBLISHED["tau"]
    assert f"{expected:,.0f} ({(expected - itl) / itl:+.1%})" in _line(text, "| 1 | ")


def test_cpu_validation_rows_are_never_gpu_figures(reports):
    write_csv(reports / "h100_verify_raw.csv", [],
              [_row(POINT, "sglang_chain", "graph", 1.0, device="cpu-validation")])
    text = render(reports)
    assert "`reports/h100_verify_raw.csv`: CPU validation only" in text
    assert _line(text, f"| {POINT} |").split("|")[2].strip() == "MISSING"


def test_csv_columns_name_the_environment():
    assert COLUMNS[-6:] == ("device", "gpu", "driver", "torch", "triton", "cuda")


def test_exact_check_finds_one_wrong_element():
    golden = {"a": np.arange(10, dtype=np.int32), "f": np.ones(3, np.float32)}
    assert exact("op", golden, {k: v.copy() for k, v in golden.items()}).passed
    wrong = {"a": golden["a"].copy(), "f": np.array([1, 1, -0.0 + 1e-45], np.float32)}
    wrong["a"][3] = 99
    check = exact("op", golden, wrong)
    assert not check.passed
    assert "a (1 elements differ)" in check.detail and "f (1 elements differ)" in check.detail


def test_probability_check_holds_its_tolerance():
    ref = np.array([[0.5, 0.25, 0.25]])
    assert probabilities("p", ref, (ref * (1 + 5e-6)).astype(np.float32), "rows").passed
    assert not probabilities("p", ref, (ref * (1 + 5e-5)).astype(np.float32), "rows").passed
