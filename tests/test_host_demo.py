"""``python -m host.demo`` (``make demo``): the netlist clock read from the reports, the
progress line, the round-by-round comparison with the golden backend; the demo itself on
the rtl backend (its own serving-tree model) in the slow tier."""

import io
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from host import demo
from sim.harness import REPO_ROOT


def write_budget(directory, clocks):
    rows = [{"kernel": "score", "proxy_clock_mhz": 193}]
    rows += [{"kernel": "dataflow", "proxy_clock_mhz": clock} for clock in clocks]
    (directory / "cycle_budget.json").write_text(json.dumps({"rows": rows}))


PROXY = """| kernel | parameter set | verdict | clock it meets (MHz) |
| --- | --- | --- | ---: |
| active_slots | synthesis | meets | 325 |
| dataflow | v80 | **breaks** | 149 |
"""


def test_netlist_clock_from_the_cycle_budget(tmp_path):
    write_budget(tmp_path, [147, 147])
    (tmp_path / "timing_proxy.md").write_text(PROXY)
    assert demo.netlist_clock(tmp_path) == (147.0, f"{tmp_path.name}/cycle_budget.json")


def test_netlist_clock_from_the_timing_proxy(tmp_path):
    """Without a single engine clock in the budget (none, or two that disagree) the timing
    proxy's dataflow row gives it."""
    (tmp_path / "timing_proxy.md").write_text(PROXY)
    assert demo.netlist_clock(tmp_path) == (149.0, f"{tmp_path.name}/timing_proxy.md")
    write_budget(tmp_path, [147, 150])
    assert demo.netlist_clock(tmp_path)[0] == 149.0


def test_netlist_clock_absent(tmp_path):
    assert demo.netlist_clock(tmp_path) is None


def test_netlist_clock_of_the_repository_reports():
    """The committed reports name the engine's clock (the demo prints it)."""
    clock, source = demo.netlist_clock()
    assert 50 <= clock <= 400 and source == "reports/cycle_budget.json"


def test_progress_line_without_a_terminal():
    """In a log (not a terminal) the line is drawn once at once (then once a minute) and
    ends with the time taken; a block shorter than ``quiet_s`` draws nothing."""
    stream = io.StringIO()
    with demo.BuildProgress("model", (3, 8), stream=stream, quiet_s=0) as progress:
        deadline = 100
        while "elapsed" not in stream.getvalue() and deadline:
            deadline -= 1
            time.sleep(0.05)
        progress.log("building it")
    lines = stream.getvalue().splitlines()
    assert lines[0] == ("model: 0:00 elapsed (the first time about 3 to 8 min on 2 shared "
                        "cores; cached after)")
    assert lines[1] == "building it"
    assert lines[2].startswith("model: ready after 0.0 min")
    quiet = io.StringIO()
    with demo.BuildProgress("model", (3, 8), stream=quiet, quiet_s=5):
        pass
    assert quiet.getvalue() == ""


def test_same_round_compares_bits():
    a = np.array([1.0, -0.0], np.float32)
    assert demo.same_round({"x": a, "n": 3}, {"x": a.copy(), "n": 3})
    assert not demo.same_round({"x": a}, {"x": np.array([1.0, 0.0], np.float32)})
    assert not demo.same_round({"x": a}, {"x": a.astype(np.float64)})
    assert not demo.same_round([a, 1], [a, 2])


def test_run_batch_tells_equal_from_different_rounds():
    """The comparison the demo prints: an engine on the same seed gives every round the same
    (here a golden engine stands in for the rtl one), another seed does not."""
    lines = []
    assert demo.run_batch(demo._engine("golden", 2, 3), 8, 2, 3, 1.0, (300.0, 151.0),
                          out=lines.append)
    assert len(lines) == 3 and all(line.endswith("rtl == golden: yes") for line in lines[:2])
    assert lines[0].startswith("  round  1: committed")
    lines = []
    assert not demo.run_batch(demo._engine("golden", 2, 4), 1, 2, 3, 1.0, (300.0, None),
                              out=lines.append)
    assert "rtl == golden: NO" in "\n".join(lines)


def test_bad_arguments_exit_2():
    for argv in (["--rounds", "0"], ["--batches", "9"], ["--temperature", "-1"]):
        with pytest.raises(SystemExit) as exit_info:
            demo.main(argv)
        assert exit_info.value.code == 2


@pytest.mark.slow
def test_demo_on_the_rtl_backend():
    """``python -m host.demo`` on the Verilated engine (builds the serving-tree model the
    first time): rounds at B = 1 and B = 8 with the engine's cycles and bytes, rtl == golden."""
    done = subprocess.run([sys.executable, "-m", "host.demo", "--rounds", "2"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stdout + done.stderr
    rounds = [line for line in done.stdout.splitlines() if line.startswith("  round")]
    assert len(rounds) == 4
    for line in rounds:
        assert "cycles n/a" not in line and "bytes n/a" not in line
        assert line.endswith("rtl == golden: yes")
    assert done.stdout.splitlines()[-1] == "rtl == golden: yes (every round, bit for bit)"


@pytest.mark.parametrize(("target", "command"), [
    (["demo"], "/python -m host.demo"),
    (["check"], "/python -m sim --all"),
    (["sim", "KERNEL=all"], "/python -m sim --all"),
    (["check", "SEED=3"], "/python -m sim --all --seed 3"),
])
def test_make_targets(target, command):
    """``make demo`` runs the demo; the every-target regression is ``make check`` (or
    ``make sim KERNEL=all``). Dry runs: what make would execute."""
    done = subprocess.run(["make", "-n", *target], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert any(line.endswith(command) or f"{command} " in line
               for line in done.stdout.splitlines()), done.stdout


def test_failed_build_exits_2(monkeypatch, capsys):
    """A model that does not build ends the demo with one line naming the error (its log)."""
    from sim.harness import SimulationError

    def broken(backend, rounds, seed, *, log=None):
        raise SimulationError("Verilated library of top: `make` failed; see build.log")

    monkeypatch.setattr(demo, "_engine", broken)
    assert demo.main(["--rounds", "1"]) == 2
    assert capsys.readouterr().err == ("python -m host.demo: the engine's model did not build: "
                                       "Verilated library of top: `make` failed; see "
                                       "build.log\n")
