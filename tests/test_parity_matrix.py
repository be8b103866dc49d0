"""``python -m sim.parity`` (``reports/p0_parity_matrix.md``, ``make report``): the rows it
finds, the table it writes on a small subset (the active-slot compaction: its example case and
directed vectors on Amaranth's simulator, well under a second), and a golden output corrupted
by a monkeypatch turning its row, and the exit status, into a failure."""

import shutil
import subprocess

import numpy as np
import pytest

import sim.active_slots.vectors
from golden.cases import CAPTURES_DIR
from sim import parity
from sim.harness import REPO_ROOT

HEADER = ["kernel", "op", "case", "kind", "source", "golden == expected", "RTL == golden",
          "RTL build", "result", "s", "reproduce"]


def _table(text: str) -> list[list[str]]:
    """The rows of the report's table (header first), cells stripped."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def _run(tmp_path, *argv):
    out = tmp_path / "matrix.md"
    status = parity.main([*argv, "--out", str(out)], log=lambda line: None)
    return status, out.read_text()


def test_every_p0_kernel_and_capture_has_rows():
    every = parity.rows()
    assert list(parity.KERNELS) == ["score", "update_state", "work_deltas", "tree_mask",
                                    "logits_to_probas", "reject_sample", "tree_verify",
                                    "verify_result", "active_slots"]
    for name in parity.KERNELS:
        assert [row.case for row in every if row.kernel == name][-1] == "directed"
    cases = {(row.kernel, row.case) for row in every}
    assert len(cases) == len(every)  # every row has a command of its own
    for path in CAPTURES_DIR.glob("*.txt"):
        assert (parity.CAPTURE_KERNELS[path.stem][0], path.stem) in cases
    score = next(row for row in every if row.case == "cost_draft_tree_score_case")
    assert score.kernel == "score" and score.kind == "CUDA capture"
    assert score.command == ("python -m sim.parity --kernel score --case "
                             "cost_draft_tree_score_case")


def test_shared_copies_share_a_row_and_unknown_files_fail(tmp_path):
    """A file of the shared goldens with the same bytes as a capture shares its row, one with
    other bytes gets a row of its own, a file no kernel replays is a failing row."""
    captures, shared = tmp_path / "captures", tmp_path / "shared"
    captures.mkdir()
    shared.mkdir()
    for folder in (captures, shared):
        shutil.copy(CAPTURES_DIR / "cost_draft_tree_score_case.txt", folder)
    (shared / "cost_draft_tree_update_case.txt").write_text("# another capture\n")
    (captures / "mystery_case.txt").write_text("x 1 1\n")
    found = {row.case: row for row in parity.rows(captures=captures, shared=shared)}
    assert len(found["cost_draft_tree_score_case"].sources) == 2
    assert found["shared-cost_draft_tree_update_case"].kernel == "update_state"
    assert "cost_draft_tree_update_case" not in found
    mystery = parity.run_row(found["mystery_case"], {})
    assert not mystery.ok and "no P0 kernel replays this file" in mystery.golden.detail


def test_subset_writes_the_table(tmp_path):
    status, text = _run(tmp_path, "--kernel", "active_slots")
    assert status == 0
    assert text.startswith("# P0 parity matrix\n")
    assert "Generation took" in text and "2 rows, 2 pass, 0 fail" in text
    header, rule, *rows = _table(text)
    assert header == HEADER and len(rule) == len(HEADER)
    assert [row[2] for row in rows] == ["example_case", "directed"]
    case, directed = rows
    assert all(len(row) == len(HEADER) and row[8] == "PASS" for row in rows)
    assert case[5] == "pass: 3 expected tensors bit-exact"
    assert case[6] == "pass: 1 calls (13 requests) bit-exact"
    assert case[7] == "ActiveSlots, make-sim build"
    assert case[10] == "`python -m sim.parity --kernel active_slots --case example_case`"
    assert directed[5] == "n/a: reference" and directed[6].startswith("pass: 11 calls")


def test_a_corrupted_golden_output_fails_its_row(tmp_path, monkeypatch):
    """The golden's ``active_count`` one too high: the golden no longer equals the case
    file, the RTL no longer equals the golden; the report is written and the status is 1."""
    real = sim.active_slots.vectors.compact_active_slots

    def corrupted(finished, batch_size, active_slots, active_inverse, active_count):
        real(finished, batch_size, active_slots, active_inverse, active_count)
        active_count += 1

    monkeypatch.setattr(sim.active_slots.vectors, "compact_active_slots", corrupted)
    status, text = _run(tmp_path, "--kernel", "active_slots", "--case", "example_case")
    assert status == 1
    (row,) = _table(text)[2:]
    assert row[8] == "**FAIL**"
    assert row[5] == "**FAIL**: AssertionError: golden differs from expected_active_count"
    assert row[6].startswith("**FAIL**: AssertionError: case example_case.txt: `active_count` "
                             "differs from the golden")
    assert "1 rows, 0 pass, 1 fail" in text


def test_a_crashing_rtl_run_fails_its_row(monkeypatch):
    def broken(*args, **kwargs):
        raise TimeoutError("the kernel stopped answering")

    monkeypatch.setattr("sim.active_slots.pysim.run_on_amaranth", broken)
    row = next(row for row in parity.rows() if row.kernel == "active_slots"
               and row.case == "directed")
    parity.run_rows([row], log=lambda line: None)
    assert not row.ok and row.golden.ok is None
    assert row.rtl.cell == "**FAIL**: TimeoutError: the kernel stopped answering"


def test_a_selection_prints_and_writes_no_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(parity, "REPORT", tmp_path / "matrix.md")
    assert parity.main(["--kernel", "active_slots", "--case", "example_case"]) == 0
    assert not (tmp_path / "matrix.md").exists()
    output = capsys.readouterr().out
    assert "[1/1] active_slots example_case (case file) ..." in output
    assert "| `active_slots` | K7 active-slot compaction | example_case |" in output
    assert "1 of 1 rows pass" in output


@pytest.mark.parametrize("argv", [["--case", "no_such_case"],
                                  ["--kernel", "score", "--case", "example_case"]])
def test_unknown_rows_exit_2(argv, capsys):
    assert parity.main(argv) == 2
    assert "error: no row matches --" in capsys.readouterr().err


def test_list_names_every_row(capsys):
    assert parity.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(parity.rows())
    assert lines[0].startswith("python -m sim.parity --kernel score --case "
                               "cost_draft_tree_score_case    # CUDA capture: ")


def test_make_report_runs_the_matrix():
    done = subprocess.run(["make", "-n", "--no-print-directory", "report"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True)
    assert ".venv/bin/python -m sim.parity" in done.stdout


def test_golden_column_compares_bit_patterns():
    """-0.0 against +0.0 is a difference (floats compare by bit pattern)."""
    zeros = np.zeros(2, np.float32)
    with pytest.raises(AssertionError, match="expected_x"):
        parity._golden_matches({"x": (-zeros).view(np.uint32)},
                               {"x": zeros.view(np.uint32).astype(np.int64)})


def test_calls_detail_counts_requests_of_every_call_form():
    """K5's calls are dicts (a request per temperature), the others records with
    ``batch_size``."""
    from sim.logits_to_probas.vectors import make_call
    from sim.verify_result.vectors import directed_calls

    k5 = make_call(np.zeros((4, 3), np.float32), [1.0, 0.0], 2, "two requests")
    k7 = directed_calls(64, 16)
    assert parity._calls_detail([k5, k5]) == "2 calls (4 requests) bit-exact"
    assert parity._calls_detail(k7) == \
        f"{len(k7)} calls ({sum(call.batch_size for call in k7)} requests) bit-exact"
