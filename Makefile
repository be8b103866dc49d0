# EAGLE tree speculative decoding control kernels — developer entry points.
# Every user-facing target depends on $(SETUP), which builds .venv once.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
SETUP  := $(VENV)/.setup-stamp
PYTEST := $(BIN)/python -m pytest

KERNEL ?=
SEED   ?=
WAVES  ?=
CASE   ?=
BOARD  ?= alveo
SYNTH  ?= vivado
QUICK  ?=

SIM_ARGS := $(if $(SEED),--seed $(SEED)) $(if $(filter 1,$(WAVES)),--waves) $(if $(CASE),--case $(CASE))

.PHONY: help setup demo check sim synth build report report-e2e report-counters test test-full lint clean

help:
	@echo "make demo                      the engine decoding on the rtl backend (Verilated), rtl == golden"
	@echo "make check [SEED=n]            every simulation target (make sim KERNEL=all), one summary each"
	@echo "make sim KERNEL=<name> [SEED=n] [WAVES=1] [CASE=file]"
	@echo "                               one kernel's cocotb testbench under Verilator vs golden"
	@echo "make synth [KERNEL=name] [QUICK=1]"
	@echo "                               Yosys synth_xilinx resources and the 300 MHz timing proxy"
	@echo "                               -> reports/synth/, reports/timing_proxy.md (docs/timing.md)"
	@echo "make build [BOARD=alveo|alveo-v80|alveo-u55c] [KERNEL=name] [SYNTH=vivado|yosys|none]"
	@echo "                               Verilog, Vivado scripts, JSON reports -> build/<board>/"
	@echo "make report [KERNEL=name]      benchmark contract, env manifest, cycle budget -> reports/"
	@echo "make report-e2e                end-to-end decoding summary (serving tree, rtl) -> reports/"
	@echo "make report-counters           the card's counters over a serving round -> reports/hw_counters.csv"
	@echo "make bench-gpu [CPU=1]         GPU baseline (H100): verify/draft CSVs, fpga_vs_h100_summary.md"
	@echo "make test                      CI tier: lint + regression (fast parameter sets)"
	@echo "make test-full                 everything, including long sweeps"
	@echo "make clean                     remove build outputs (keeps .venv)"

setup: $(SETUP)

$(SETUP): pyproject.toml sim/toolchain.py
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (Python 3.11 is required)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[sim,synth,report,dev]'
	$(BIN)/python -m sim.toolchain
	touch $@

demo: $(SETUP)
	$(BIN)/python -m host.demo

check: $(SETUP)
	$(BIN)/python -m sim --all $(SIM_ARGS)

sim: $(SETUP)
	$(BIN)/python -m sim $(if $(filter all,$(KERNEL)),--all,$(KERNEL)) $(SIM_ARGS)

synth: $(SETUP)
	$(BIN)/python -m hw.synth $(if $(filter 1,$(QUICK)),--quick) $(KERNEL)

build: $(SETUP)
	$(BIN)/python -m hw.build --board $(BOARD) --kernel $(or $(KERNEL),all) --synth $(SYNTH)

report: $(SETUP)
	$(BIN)/python -m hw.report --board $(BOARD) $(if $(KERNEL),--kernel $(KERNEL))
	$(BIN)/python -m bench.gpu summary
	$(BIN)/python -m sim.parity

report-e2e: $(SETUP)
	$(BIN)/python -m host.report

report-counters: $(SETUP)
	$(BIN)/python -m host.counters

# The GPU baseline (bench/gpu, issues 37/38): needs the optional `gpu` group (torch, triton) and
# an NVIDIA GPU; CPU=1 runs the CPU validation instead (TRITON_INTERPRET=1, build/bench-gpu/).
.PHONY: bench-gpu
bench-gpu: $(SETUP)
	$(BIN)/python -m pip install --quiet -e '.[gpu]'
	$(BIN)/python -m bench.gpu verify $(if $(filter 1,$(CPU)),--cpu)
	$(BIN)/python -m bench.gpu draft $(if $(filter 1,$(CPU)),--cpu)
	$(BIN)/python -m bench.gpu summary

lint: $(SETUP)
	$(BIN)/ruff check hw golden sim flow boards host tests bench

# pytest's own exit status is kept in build/pytest.status (make reports every failure as 2);
# .ci/run reads it to tell "no tests collected" (5) from failures.
test: lint
	@mkdir -p build
	$(PYTEST) -m "not slow" --durations=30; status=$$?; echo $$status > build/pytest.status; exit $$status

test-full: lint
	@mkdir -p build
	$(PYTEST); status=$$?; echo $$status > build/pytest.status; exit $$status

clean:
	rm -rf build .pytest_cache .ruff_cache
