"""``python -m host.latency``: its options are checked before anything is built; the
measurement itself (the serving engine's Verilator build, minutes) is in the slow tier."""

import pytest

from host import latency


@pytest.mark.parametrize("argv", [["--batches", "9"], ["--latencies", "0"], ["--rounds", "0"]])
def test_bad_options_exit_before_building(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        latency.main(argv)
    assert stop.value.code == 2
    assert "argument --" in capsys.readouterr().err


@pytest.mark.slow
def test_a_longer_latency_costs_cycles():
    short, long = (latency.measure(value, 1, rounds=2) for value in (4, 64))
    assert long["round"] > short["round"] > 0
    assert set(short["commands"]) >= {"begin_round", "draft_depth", "build_verify", "verify"}
