"""Yosys resource estimates: primitive accounting (fast) and a real synthesis run (slow)."""

import pytest

from flow.synth import resource_counts, synthesize
from hw.lib.float32 import Float32Add


def test_resource_counts_maps_primitives_to_board_resources():
    cells = {"LUT6": 10, "LUT3": 5, "FDRE": 7, "FDSE": 1, "DSP48E2": 2, "RAMB36E2": 3,
             "RAMB18E2": 1, "URAM288": 4, "RAM64M": 2, "CARRY8": 6, "MUXF7": 9}
    counts = resource_counts(cells)
    assert counts["LUT"] == 15 + 8
    assert counts["LUTRAM_LUTS"] == 8
    assert counts["FF"] == 8
    assert counts["DSP"] == 2
    assert counts["BRAM"] == 3.5
    assert counts["URAM"] == 4
    assert counts["CARRY"] == 6


@pytest.mark.slow
def test_synthesis_of_the_add_core_reports_resources(tmp_path):
    report = synthesize(Float32Add(), name="test_fp32_add", report_dir=tmp_path)
    assert (tmp_path / "test_fp32_add.json").exists()
    assert report["resources"]["LUT"] > 100
    assert report["resources"]["FF"] > 100
    assert report["resources"]["DSP"] == 0
