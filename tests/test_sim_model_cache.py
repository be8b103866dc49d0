"""The Verilator model cache under concurrent builds: ``sim.harness.build_lock`` makes a
second process wait for the first, and ``sim.verilated.build_verilog`` builds a library once
when two builders ask for it at the same time (the second finds the first's)."""

import subprocess
import sys
import threading
import time

import pytest

from sim import verilated
from sim.harness import REPO_ROOT, build_lock

COUNTER = """module top(input clk, input rst, input [7:0] step, output reg [15:0] count);
  always @(posedge clk) count <= rst ? 16'd0 : count + {8'd0, step};
endmodule
"""

HOLD = """
import sys
from pathlib import Path
from sim.harness import build_lock
with build_lock(Path(sys.argv[1]), log=lambda m: print(m, flush=True)):
    print("locked", flush=True)
"""


def test_second_process_waits_for_the_lock(tmp_path):
    """While this process holds a directory's lock, another process asking for it waits
    (and says so); it gets the lock once this one lets go."""
    directory = tmp_path / "model-0123"
    with build_lock(directory):
        other = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], cwd=REPO_ROOT,
                                 stdout=subprocess.PIPE, text=True)
        first = other.stdout.readline()
        time.sleep(0.5)
        assert other.poll() is None, "the second process did not wait for the lock"
        assert first.startswith(f"waiting for another process building {directory}")
    out, _ = other.communicate(timeout=30)
    assert other.returncode == 0
    assert out.splitlines()[-1] == "locked"


def test_other_directories_do_not_wait(tmp_path):
    """The lock is per model: another directory's lock is free while one is held."""
    with build_lock(tmp_path / "a"):
        done = subprocess.run([sys.executable, "-c", HOLD, str(tmp_path / "b")],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout == "locked\n"


def test_concurrent_builds_compile_once(tmp_path, monkeypatch):
    """Two builders of the same Verilog at once: one compiles, the other waits and returns
    the same library (without the lock, or without looking again after waiting, both
    would compile into the same directory)."""
    monkeypatch.setattr(verilated, "BUILD_ROOT", tmp_path)
    compiled = []

    def fake_compile(text, directory, name, log):
        compiled.append(directory)
        time.sleep(0.5)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / verilated.LIBRARY).write_text("library")
        (directory / "model.stamp").write_text("ok\n")

    monkeypatch.setattr(verilated, "_compile", fake_compile)
    results, messages = [], []

    def builder():
        results.append(verilated.build_verilog(COUNTER, name="top", log=messages.append))

    threads = [threading.Thread(target=builder) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(compiled) == 1
    assert results == [compiled[0] / verilated.LIBRARY] * 2
    assert sum(message.startswith("waiting for another process") for message in messages) == 1


def test_changed_verilog_or_options_build_apart():
    """The cache is per parameter set: other Verilog, another directory."""
    assert verilated.library_directory(COUNTER, name="top") != verilated.library_directory(
        COUNTER.replace("count + ", "count - "), name="top")


BUILD = """
import sys
from pathlib import Path
from sim import verilated
verilated.BUILD_ROOT = Path(sys.argv[1])
library = verilated.build_verilog(open(sys.argv[2]).read(), name="top",
                                  log=lambda m: print(m, flush=True))
model = verilated.Model(library)
model.reset()
model.set("step", 3)
model.tick(5)
print("library", library, "count", model.get("count"), flush=True)
"""


@pytest.mark.slow
def test_two_processes_build_one_real_library(tmp_path):
    """Two processes build the same (small) Verilated library at once: one compiles it, the
    other waits; both load it and count alike."""
    source = tmp_path / "counter.v"
    source.write_text(COUNTER)
    command = [sys.executable, "-c", BUILD, str(tmp_path / "cache"), str(source)]
    runs = [subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
            for _ in range(2)]
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    text = "".join(outputs)
    assert text.count("building the Verilated library of top") == 1
    assert text.count("waiting for another process building") == 1
    results = {line for output in outputs for line in output.splitlines()
               if line.startswith("library")}
    assert len(results) == 1 and results.pop().endswith("count 15")
