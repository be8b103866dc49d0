"""``python -m host.counters`` (host/counters.py) and the report it wrote,
``reports/hw_counters.csv``: the counters a host reads off the card (the card backend's
counter window), per command of a contract round, in the cycle budget's columns."""

import csv

import pytest

from host.counters import CAUSES, COLUMNS, counter_rows
from sim.harness import REPO_ROOT


def check_row(row):
    """The clocks by cause add up to the clocks; the bytes by port to the totals."""
    assert sum(int(row[cause]) for cause in CAUSES) == int(row["cycles"]) > 0, row
    reads = sum(int(row[f"bytes_{port}"]) for port in ("read", "logits0", "logits1"))
    writes = sum(int(row[f"bytes_{port}"]) for port in ("result_write", "mask_write",
                                                          "table_write"))
    assert (int(row["bytes_in"]), int(row["bytes_out"])) == (reads, writes), row
    assert int(row["bytes_total"]) == reads + writes


def test_a_round_of_the_small_tree():
    """On the small tree's build shared with tests/test_host_card.py: a row per command kind
    and the round's, which sums the commands but the read_state s."""
    rows = counter_rows(2, latency=8, tree="small", build_batch=2)
    by_command = {row["command"]: row for row in rows}
    assert {"begin_round", "draft_depth", "build_verify", "verify", "round"} <= set(by_command)
    for row in rows:
        check_row(row)
        assert (row["point"], row["batch"], row["latency_clocks"]) == ("small-b2-v1024", 2, 8)
    commands = [row for row in rows if row["command"] not in ("round", "read_state")]
    for column in ("count", "cycles", *CAUSES, "bytes_total"):
        assert by_command["round"][column] == sum(row[column] for row in commands), column
    assert by_command["draft_depth"]["count"] >= 1
    assert by_command["verify"]["bytes_logits0"] > 0
    assert by_command["round"]["memory_cycles"] > 0


def test_the_committed_report():
    path = REPO_ROOT / "reports" / "hw_counters.csv"
    with open(path) as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == COLUMNS
        rows = list(reader)
    assert {row["point"] for row in rows} == {"serving-b1-v1024", "serving-b8-v1024"}
    assert {row["latency_clocks"] for row in rows} == {"64"}
    for row in rows:
        check_row(row)
    rounds = {row["batch"]: int(row["cycles"]) for row in rows if row["command"] == "round"}
    assert rounds["8"] > rounds["1"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--batches", "9"], "the build holds 1 .. 8 requests, not 9"),
    (["--latency", "0"], "must be at least 1, not 0"),
])
def test_bad_arguments(argv, message, capsys):
    from host.counters import main

    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err
