"""Shared fixtures: simulation summaries are printed at the end of the pytest run."""

import pytest

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
