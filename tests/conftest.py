"""Shared fixtures: simulation summaries and the number of cocotb tests that really ran are
printed at the end of the pytest run."""

import pytest

from sim.harness import COCOTB_TESTS_RUN

_SIM_REPORT: list[str] = []


@pytest.fixture
def sim_report():
    """Append a line (e.g. vectors checked) to the "simulation summary" section of the run."""
    return _SIM_REPORT.append


def pytest_terminal_summary(terminalreporter):
    if _SIM_REPORT:
        terminalreporter.section("simulation summary")
        for line in _SIM_REPORT:
            terminalreporter.write_line(line)
    if COCOTB_TESTS_RUN:
        terminalreporter.section("cocotb tests")
        for module, count in sorted(COCOTB_TESTS_RUN.items()):
            terminalreporter.write_line(f"{module}: {count}")
        terminalreporter.write_line(f"{sum(COCOTB_TESTS_RUN.values())} cocotb tests ran under "
                                    "Verilator (each one phase of a testbench; none returns "
                                    "early)")
