"""The engine's figures from the cycle budget (``reports/cycle_budget.json``), per point.

The engine's row (kernel ``dataflow``, phase ``round``) gives cycles by command:
``begin_round``, ``draft_depth`` (all depths), ``build_verify`` and ``verify``; its
``proxy_clock_mhz`` is the clock the V80 netlist meets by the timing proxy
(docs/timing.md). Microseconds are given at the contract clock (300 MHz) and at that clock.
A point the budget has no row for (B = 32 and 128 until the contract lists them) is
``None``: the summaries say "not measured".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from flow.common import REPO_ROOT

__all__ = ["CYCLE_BUDGET", "EngineRound", "load_budget", "engine_round"]

CYCLE_BUDGET = REPO_ROOT / "reports" / "cycle_budget.json"


@dataclass(frozen=True)
class EngineRound:
    """One point's engine round: cycles per phase, the contract clock and the met clock."""

    point: str
    begin_round: int
    draft_depth: int
    build_verify: int
    verify: int
    clock_mhz: float
    met_clock_mhz: float | None

    @property
    def draft(self) -> int:
        """Cycles of the draft side: ``begin_round`` and every ``draft_depth``."""
        return self.begin_round + self.draft_depth

    @property
    def total(self) -> int:
        """Cycles of the whole round."""
        return self.draft + self.build_verify + self.verify

    def us(self, cycles: int, clock_mhz: float | None = None) -> float | None:
        """``cycles`` in µs at ``clock_mhz`` (the contract clock when None)."""
        clock = self.clock_mhz if clock_mhz is None else clock_mhz
        return None if clock is None else cycles / clock


def load_budget(path: Path = CYCLE_BUDGET) -> dict:
    """The cycle budget sheet (JSON)."""
    return json.loads(Path(path).read_text())


def engine_round(budget: dict, point: str) -> EngineRound | None:
    """The engine's round at ``point`` from the budget's ``dataflow`` row, or None."""
    for row in budget["rows"]:
        if row["kernel"] == "dataflow" and row["point"] == point and row.get("commands"):
            commands = row["commands"]
            return EngineRound(point, commands["begin_round"]["cycles"],
                               commands["draft_depth"]["cycles"],
                               commands["build_verify"]["cycles"],
                               commands["verify"]["cycles"], float(row["clock_mhz"]),
                               row.get("proxy_clock_mhz"))
    return None
