"""Board records and the out-of-context Vivado scripts (no Vivado needed)."""

import dataclasses
import json
import os

import jsonschema
import pytest

from boards import (
    BOARDS,
    RESOURCES,
    SCHEMA_DIR,
    Board,
    UnknownBoardError,
    board,
    board_names,
    load_schema,
)
from boards.vivado import (
    parse_timing_summary,
    parse_utilization,
    read_results,
    write_ooc_scripts,
)


def test_the_two_alveo_cards_with_their_part_strings():
    assert board("alveo-v80").part == "xcv80-lsva4737-2MHP-e-S"
    assert board("alveo-u55c").part == "xcu55c-fsvh2892-2L-e"
    assert board("alveo") is board("alveo-v80")  # the seed documents' card
    assert set(BOARDS) == {"alveo-v80", "alveo-u55c"}
    assert board_names() == ["alveo", "alveo-v80", "alveo-u55c"]


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_board_has_capacities_bandwidth_clock_and_sources(name):
    b = board(name)
    for resource in RESOURCES:
        assert isinstance(b.capacities[resource], int) and b.capacities[resource] > 0
        assert b.capacity_notes[resource]
    assert b.clock_mhz == 300.0
    assert b.clock_period_ns == pytest.approx(3.3333, abs=1e-4)
    assert b.hbm_bandwidth_gbps > 0 and b.hbm_gb > 0
    assert "report_utilization" in b.source
    assert b.yosys_family == "xcup"
    assert isinstance(dict(b.kernel_parameters), dict)
    json.dumps(b.to_json())  # plain JSON data


def test_u55c_capacities_are_the_data_sheet_figures():
    u55c = board("alveo-u55c")
    assert dict(u55c.capacities) == {"LUT": 1_303_680, "FF": 2_607_360, "BRAM": 2_016,
                                     "URAM": 960, "DSP": 9_024}
    assert (u55c.hbm_gb, u55c.hbm_type, u55c.hbm_bandwidth_gbps) == (16, "HBM2", 460.0)
    assert u55c.capacities_confirmed


def test_v80_is_marked_unconfirmed_and_says_what_is_derived():
    v80 = board("alveo-v80")
    assert (v80.hbm_gb, v80.hbm_type, v80.hbm_bandwidth_gbps) == (32, "HBM2e", 819.0)
    assert not v80.capacities_confirmed
    assert "derived" in v80.capacity_notes["FF"]
    assert "product brief" in v80.capacity_notes["LUT"]
    assert v80.capacities["DSP"] == 10_848


def test_unknown_board_lists_the_known_ones():
    with pytest.raises(UnknownBoardError, match="alveo-u55c"):
        board("alveo-u280")


def test_board_records_are_immutable_and_checked():
    v80 = board("alveo")
    with pytest.raises(dataclasses.FrozenInstanceError):
        v80.part = "xcvu9p"
    with pytest.raises(TypeError):
        v80.capacities["LUT"] = 1
    with pytest.raises(ValueError, match="no capacity for URAM"):
        dataclasses.replace(v80, capacities={r: 1 for r in RESOURCES if r != "URAM"})
    with pytest.raises(ValueError, match="capacity of DSP"):
        dataclasses.replace(v80, capacities={**v80.capacities, "DSP": 0})


def test_share_and_hbm_time():
    u55c = board("alveo-u55c")
    assert u55c.share("DSP", 902.4) == pytest.approx(10.0)
    assert u55c.hbm_seconds(460e9) == pytest.approx(1.0)


def test_board_json_matches_the_report_schema_of_a_board():
    subschema = load_schema("kernel_report")["properties"]["board"]
    for b in BOARDS.values():
        record = {key: b.to_json()[key] for key in subschema["required"]}
        jsonschema.validate(record, subschema, cls=jsonschema.Draft202012Validator)


def test_schemas_are_valid_json_schemas():
    names = sorted(p.name for p in SCHEMA_DIR.glob("*.schema.json"))
    assert names == ["benchmark_contract.schema.json", "cycle_budget.schema.json",
                     "kernel_report.schema.json", "measurement.schema.json"]
    for name in names:
        jsonschema.Draft202012Validator.check_schema(load_schema(name.split(".")[0]))


def test_ooc_scripts_for_every_board(tmp_path):
    verilog = tmp_path / "adder.v"
    verilog.write_text("module adder(input clk); endmodule\n")
    for b in BOARDS.values():
        scripts = write_ooc_scripts(tmp_path / b.name, top="adder", part=b.part,
                                    verilog_file=verilog, clock_mhz=250.0, board=b.name)
        tcl = scripts.tcl.read_text()
        assert "read_verilog [file normalize [file join $script_dir ../adder.v]]" in tcl
        assert f"set part {b.part}" in tcl
        assert "synth_design -top $top -part $part -mode out_of_context" in tcl
        for command in ("opt_design", "place_design", "route_design",
                        "report_utilization -file", "report_timing_summary -max_paths 10 -file"):
            assert command in tcl
        assert tcl.index("synth_design") < tcl.index("place_design") < tcl.index("route_design")
        assert scripts.xdc.read_text().splitlines()[-1] == (
            "create_clock -period 4.0000 -name clk [get_ports clk]")
        build_sh = scripts.build_sh.read_text()
        assert "vivado -mode batch -nojournal -log vivado.log -source adder.tcl" in build_sh
        assert os.access(scripts.build_sh, os.X_OK)


UTILISATION_US = """\
1. CLB Logic
------------

+----------------------------+------+-------+------------+-----------+-------+
|          Site Type         | Used | Fixed | Prohibited | Available | Util% |
+----------------------------+------+-------+------------+-----------+-------+
| CLB LUTs                   | 1234 |     0 |          0 |   1303680 |  0.09 |
|   LUT as Logic             | 1200 |     0 |          0 |   1303680 |  0.09 |
| CLB Registers              | 2345 |     0 |          0 |   2607360 |  0.09 |
+----------------------------+------+-------+------------+-----------+-------+
| Block RAM Tile | 3.5 |     0 |          0 |      2016 |  0.17 |
| URAM           |   2 |     0 |          0 |       960 |  0.21 |
| DSPs           |   7 |     0 |          0 |      9024 |  0.08 |
"""


def test_utilisation_and_timing_parsers():
    assert parse_utilization(UTILISATION_US) == {"LUT": 1234, "FF": 2345, "BRAM": 3.5,
                                                 "URAM": 2, "DSP": 7}
    assert parse_utilization("| DSP Slices | 4 | 0 |\n| Registers | 9 | 0 |") == {
        "DSP": 4, "FF": 9}
    timing = """
------------------------------------------------------------------------------------------------
| Design Timing Summary
| ---------------------
------------------------------------------------------------------------------------------------

    WNS(ns)      TNS(ns)  TNS Failing Endpoints  TNS Total Endpoints      WHS(ns)
    -------      -------  ---------------------  -------------------      -------
     -0.125       -3.210                     12                  800        0.021
"""
    assert parse_timing_summary(timing) == -0.125
    assert parse_timing_summary("no table") is None


def test_read_results_prefers_the_summary_and_needs_the_utilisation(tmp_path):
    verilog = tmp_path / "k.v"
    verilog.write_text("")
    scripts = write_ooc_scripts(tmp_path / "viv", top="k", part="xcu55c-fsvh2892-2L-e",
                                verilog_file=verilog, clock_mhz=300.0, board="alveo-u55c")
    from boards.vivado import VivadoError

    with pytest.raises(VivadoError, match="no utilisation report"):
        read_results(scripts)
    scripts.reports.mkdir()
    (scripts.reports / "utilization.rpt").write_text(UTILISATION_US)
    (scripts.reports / "summary.txt").write_text("top k\nwns_ns 0.333\n")
    assert read_results(scripts) == {"resources": {"LUT": 1234, "FF": 2345, "BRAM": 3.5,
                                                   "URAM": 2, "DSP": 7}, "wns_ns": 0.333}
    (scripts.reports / "summary.txt").write_text("wns_ns none\n")
    assert read_results(scripts)["wns_ns"] is None


def test_board_is_a_dataclass_with_documented_fields():
    documented = Board.__doc__
    for f in dataclasses.fields(Board):
        assert f.name in documented
