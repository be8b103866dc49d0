"""Alveo board records (``boards.alveo``), out-of-context Vivado scripts (``boards.vivado``)
and the JSON schemas of the generated reports (``boards/schemas/``).

``python -m hw.build --board alveo`` builds for ``board("alveo")``, the V80.
"""

from pathlib import Path

from .alveo import (
    BOARD_ALIASES,
    BOARDS,
    RESOURCES,
    Board,
    UnknownBoardError,
    board,
    board_names,
)

__all__ = ["BOARDS", "BOARD_ALIASES", "RESOURCES", "Board", "UnknownBoardError", "board",
           "board_names", "SCHEMA_DIR", "load_schema"]

#: Checked-in JSON schemas of the generated reports.
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


def load_schema(name: str) -> dict:
    """The JSON schema ``boards/schemas/<name>.schema.json`` as a dict."""
    import json

    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
