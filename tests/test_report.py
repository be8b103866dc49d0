"""``make report`` (``python -m hw.report``, ``flow.report``): the benchmark contract, the
environment manifest and the cycle budget sheet, with fake measurements (the real kernels are
not needed)."""

import json

import jsonschema
import pytest

import flow.report
from boards import load_schema
from sim.targets import NotMeasured, SimTarget, port_bytes

OUTPUTS = ("benchmark_contract.md", "env_manifest.txt", "cycle_budget.json", "cycle_budget.md",
           "cycle_budget.png")


@pytest.fixture
def isolated(tmp_path, monkeypatch, request):
    """Logs under tmp_path; no simulation target anywhere (unless a test adds some); no
    synthesis report (unless a test writes some under ``tmp_path / "synth"``); the plot (a
    second or more) only in the tests that request ``with_plot``."""
    monkeypatch.setattr(flow.report, "LOG_DIR", tmp_path / "logs")
    monkeypatch.setattr(flow.report, "SYNTH_DIR", tmp_path / "synth")
    if "with_plot" not in request.fixturenames:
        monkeypatch.setattr(flow.report, "plot_budget",
                            lambda sheet, path: path.write_bytes(b"\x89PNG stand-in"))
    targets = {}

    def find_sim_target(kernel):
        if kernel in targets:
            return targets[kernel], None
        return None, f"no simulation target yet (sim/{kernel}/ does not exist)"

    monkeypatch.setattr(flow.report, "find_sim_target", find_sim_target)
    monkeypatch.setattr(flow.report, "_measured_outside_contract", lambda contract: [])
    return targets


def run(capsys, *args):
    status = flow.report.main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def validate(instance, name):
    jsonschema.validate(instance, load_schema(name), cls=jsonschema.Draft202012Validator)


def test_contract_has_the_operating_points_of_the_issue():
    contract = flow.report.load_contract()
    assert contract["clock_mhz"] == 300.0
    assert contract["hidden_size"] == 4096
    assert contract["hidden_dtype"] == "fp16" and contract["hidden_bytes"] == 2
    assert contract["batch_sizes"] == [1, 8, 32, 128]
    assert contract["partial_batches"]["batch_sizes"] == [32, 128]
    assert contract["partial_batches"]["kernels"] == ["dataflow"]
    assert contract["partial_batches"]["trees"] == ["serving"]
    assert contract["vocab_sizes"] == [32000, 128256]
    trees = {t["id"]: t for t in contract["trees"]}
    assert (trees["eagle2"]["node_top_k"], trees["eagle2"]["depth"],
            trees["eagle2"]["verify_num"]) == (10, 5, 60)
    assert (trees["serving"]["node_top_k"], trees["serving"]["depth"],
            trees["serving"]["verify_num"]) == (8, 5, 64)
    assert (trees["small"]["node_top_k"], trees["small"]["verify_num"]) == (4, 8)
    assert list(contract["kernels"]) == ["score", "update_state", "work_deltas", "tree_mask",
                                         "logits_to_probas", "reject_sample", "verify_result",
                                         "active_slots", "tree_verify", "dataflow"]
    points = flow.report.contract_points(contract)
    assert len(points) == 24
    assert points[0] == {
        "id": "eagle2-b1-v32000", "tree": "eagle2",
        "description": "paper-faithful EAGLE-2: top-k 10, depth 5, 60 tokens",
        "node_top_k": 10, "tree_width": 10, "depth": 5, "verify_num": 60, "batch": 1,
        "vocab": 32000, "hidden_size": 4096, "hidden_dtype": "fp16", "hidden_bytes": 2,
        "clock_mhz": 300.0}
    assert len({p["id"] for p in points}) == 24
    engine = [p["id"] for p in points if flow.report.out_of_scope(contract, "dataflow", p)
              is None]
    assert engine == [p["id"] for p in points if p["batch"] <= 8 or p["tree"] == "serving"]
    assert "serving-b128-v128256" in engine
    assert all(flow.report.out_of_scope(contract, "score", p) == (
        contract["partial_batches"]["reason"] if p["batch"] > 8 else None) for p in points)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("hidden_size = 4096", "hidden_size = -1"), "hidden_size"),
    (lambda t: t.replace('hidden_dtype = "fp16"', 'hidden_dtype = "fp8"'), "hidden_dtype"),
    (lambda t: t.replace("tree_width = 4", "tree_width = 5"), "tree_width exceeds node_top_k"),
    (lambda t: t.replace('id = "small"', 'id = "serving"'), "duplicate id"),
    (lambda t: t + "\nunknown_key = 1\n", "unknown_key"),
    (lambda t: t.replace("[kernels]", "[kernels"), "cannot read"),
    (lambda t: t.replace('trees = ["serving"]', 'trees = ["serve"]'),
     r"partial_batches/trees: \['serve'\] not in the contract's trees"),
    (lambda t: t.replace('kernels = ["dataflow"]', 'kernels = ["engine"]'),
     "partial_batches/kernels"),
    (lambda t: t.replace("batch_sizes = [32, 128]", "batch_sizes = [32, 64]"),
     "partial_batches/batch_sizes"),
])
def test_invalid_contract_is_refused(tmp_path, capsys, isolated, edit, message):
    broken = tmp_path / "contract.toml"
    broken.write_text(edit(flow.report.CONTRACT.read_text()))
    with pytest.raises(flow.report.FlowError, match=message):
        flow.report.load_contract(broken)
    status, _, stderr = run(capsys, "--contract", str(broken), "--out", str(tmp_path / "r"))
    assert status == 1
    assert "reading the benchmark contract failed" in stderr


@pytest.fixture
def with_plot():
    """Requested by the tests that draw the real PNG."""


def test_with_no_measurement_every_report_is_written_and_valid(tmp_path, capsys, with_plot,
                                                               isolated):
    out = tmp_path / "reports"
    status, stdout, stderr = run(capsys, "--out", str(out))
    assert status == 0, stderr
    for name in OUTPUTS:
        assert (out / name).stat().st_size > 0
    assert "[1/15] reading the benchmark contract benchmarks/contract.toml ..." in stdout
    assert "[15/15] plotting" in stdout
    sheet = json.loads((out / "cycle_budget.json").read_text())
    validate(sheet, "cycle_budget")
    assert sheet["rows"] == []
    assert [m["kernel"] for m in sheet["not_measured"]] == list(sheet["kernels"])
    assert all(m["point"] is None and m["reason"] for m in sheet["not_measured"])
    budget = (out / "cycle_budget.md").read_text()
    assert "No measurements yet" in budget
    # The reason may also say that hw/kernels/score.py is missing, depending on the checkout.
    assert "no simulation target yet (sim/score/ does not exist) |" in budget
    contract = (out / "benchmark_contract.md").read_text()
    assert "| eagle2 | paper-faithful EAGLE-2: top-k 10, depth 5, 60 tokens | 10 | 10 | 5 | " \
           "100 | 128 (§1 extension) | 60 |" in contract
    assert "| small-b8-v128256 | small | 8 | 128,256 |" in contract
    assert "`xcv80-lsva4737-2MHP-e-S`" in contract and "`xcu55c-fsvh2892-2L-e`" in contract
    manifest = (out / "env_manifest.txt").read_text()
    assert "git revision: " in manifest
    assert "amaranth: 0.5.10" in manifest
    assert "vivado: " in manifest
    assert (out / "cycle_budget.png").read_bytes().startswith(b"\x89PNG")


def _fake_target(measure):
    if measure is None:
        return SimTarget("score", "fake", component=lambda: None, testbench="none")

    class FakeTarget(SimTarget):
        def measure(self, point, *, seed, log_file=None):
            return measure(point, seed=seed, log_file=log_file)

    return FakeTarget("score", "fake", component=lambda: None, testbench="none")


def _measure(point, *, seed, log_file):
    """Deterministic stand-in: figures depend on the point only."""
    assert seed == 1 and log_file.name == f"score-{point['id']}.log"
    if point["node_top_k"] * point["tree_width"] > 64:
        raise NotMeasured("N = 100 needs `sort_width` 128")
    requests = point["batch"] * point["depth"]
    beats_in = requests
    return {
        "cycles": 30 + requests,
        "bytes_in": port_bytes(beats_in, 2342),
        "bytes_out": port_bytes(requests, 4766) + port_bytes(
            requests * point["node_top_k"] * point["hidden_size"] // 16, 258),
        "operations": requests * point["node_top_k"] * point["tree_width"],
        "initiation_interval": 1.0,
        "invocations": requests,
        "ports": {"requests": port_bytes(beats_in, 2342)},
    }


def test_measurements_make_rows_and_the_reruns_are_identical(tmp_path, capsys, with_plot,
                                                             isolated):
    isolated["score"] = _fake_target(_measure)
    out = tmp_path / "reports"
    status, stdout, stderr = run(capsys, "--out", str(out))
    assert status == 0, stderr
    first = {name: (out / name).read_bytes() for name in OUTPUTS}
    sheet = json.loads(first["cycle_budget.json"])
    validate(sheet, "cycle_budget")
    assert len(sheet["rows"]) == 8  # the four eagle2 points need the 128-lane sort
    row = next(r for r in sheet["rows"] if r["point"] == "serving-b8-v32000")
    requests = 8 * 5
    assert row["cycles"] == 30 + requests
    assert row["microseconds"] == round((30 + requests) / 300, 4)
    assert row["bytes_in"] == requests * 293
    assert row["bytes_total"] == row["bytes_in"] + row["bytes_out"]
    assert row["hbm_floor_us"] == round(row["bytes_total"] / 819e3, 4)
    assert row["bound"] == ("hbm" if row["hbm_floor_us"] > row["microseconds"] else "cycles")
    assert row["phase"] == "draft"
    skipped = [m for m in sheet["not_measured"] if m["kernel"] == "score"]
    assert [m["point"] for m in skipped if m["point"].startswith("eagle2")] == [
        "eagle2-b1-v32000", "eagle2-b1-v128256", "eagle2-b8-v32000", "eagle2-b8-v128256",
        *(f"eagle2-b{b}-v{v}" for b in (32, 128) for v in (32000, 128256))]
    assert skipped[0]["reason"] == "N = 100 needs `sort_width` 128"
    scope = flow.report.load_contract()["partial_batches"]["reason"]
    assert [m["point"] for m in skipped if m["reason"] == scope] == [
        f"{tree}-b{b}-v{v}" for tree in ("eagle2", "serving", "small") for b in (32, 128)
        for v in (32000, 128256)]
    budget = first["cycle_budget.md"].decode()
    assert "| score | draft | serving-b8-v32000 | 11,720 |" in budget
    assert "| 0.233 | not synthesised |" in budget
    assert row["timing_rule"] == "not synthesised"
    assert "8 of 24 points measured (12 left out by the contract's partial_batches)" in stdout
    # one line per kernel and reason, its points listed
    assert "| score | eagle2-b1-v32000, eagle2-b1-v128256, eagle2-b8-v32000, " \
           "eagle2-b8-v128256 | N = 100 needs `sort_width` 128 |" in budget
    assert "| score | eagle2-b32-v32000, eagle2-b32-v128256, eagle2-b128-v32000, " \
           "eagle2-b128-v128256, serving-b32-v32000, " in budget

    status, _, stderr = run(capsys, "--out", str(out))
    assert status == 0, stderr
    assert {name: (out / name).read_bytes() for name in OUTPUTS} == first


SLOW_PATH = {"verdict": "breaks", "critical_path": {"estimate_ns": 9.5}}  # 105 MHz


@pytest.mark.parametrize("reports, rule, cell", [
    ({"score.json": "breaks"}, "breaks", "| 0.233 ✗ | breaks |"),
    ({"score.json": SLOW_PATH}, "breaks", "| 0.233 ✗ | breaks: 105 MHz, 0.667 µs |"),
    ({"score.json": "meets", "score.quick.json": "breaks"}, "meets", "| 0.233 | meets |"),
    ({"score.json": None, "score.quick.json": "breaks"}, "breaks (quick set)",
     "| 0.233 ✗ | breaks (quick set) |"),
    ({"score.v80.json": "meets", "score.quick.json": "breaks"}, "meets (V80 build)",
     "| 0.233 | meets (V80 build) |"),
    ({"score.json": None}, "no timing proxy", "| 0.233 | no timing proxy |"),
])
def test_the_timing_rule_comes_from_the_synthesis_report(tmp_path, capsys, isolated, reports,
                                                        rule, cell):
    isolated["score"] = _fake_target(_measure)
    (tmp_path / "synth").mkdir()
    for name, timing in reports.items():
        report = {"kernel": "score"} if timing is None else {
            "kernel": "score", "timing": {"verdict": timing} if isinstance(timing, str)
            else timing}
        (tmp_path / "synth" / name).write_text(json.dumps(report))
    status, _, stderr = run(capsys, "--out", str(tmp_path / "reports"), "--kernel", "score")
    assert status == 0, stderr
    sheet = json.loads((tmp_path / "reports" / "cycle_budget.json").read_text())
    assert {r["timing_rule"] for r in sheet["rows"]} == {rule}
    budget = (tmp_path / "reports" / "cycle_budget.md").read_text()
    assert "| score | draft | serving-b8-v32000 | 11,720 |" in budget
    assert cell in budget


def test_verdicts_only_keeps_the_rows_and_reads_the_verdicts_again(tmp_path, capsys,
                                                                   isolated):
    isolated["score"] = _fake_target(_measure)
    out = tmp_path / "reports"
    assert run(capsys, "--out", str(out))[0] == 0
    before = json.loads((out / "cycle_budget.json").read_text())
    (out / "env_manifest.txt").write_text("the measured revision\n")
    isolated["score"] = _fake_target(lambda point, **_: pytest.fail("measured again"))
    (tmp_path / "synth").mkdir()
    (tmp_path / "synth" / "score.json").write_text(json.dumps(
        {"kernel": "score", "timing": SLOW_PATH}))
    status, stdout, stderr = run(capsys, "--out", str(out), "--verdicts-only")
    assert status == 0, stderr
    sheet = json.loads((out / "cycle_budget.json").read_text())
    validate(sheet, "cycle_budget")
    changed = {"timing_rule": "breaks", "proxy_clock_mhz": 105}
    assert sheet["rows"] == [{**r, **changed} if r["kernel"] == "score" else r
                             for r in before["rows"]]
    assert "measuring" not in stdout
    assert (out / "env_manifest.txt").read_text() == "the measured revision\n"


def test_verdicts_only_refuses_a_kernel(tmp_path, capsys, isolated):
    with pytest.raises(SystemExit) as exit_:
        run(capsys, "--out", str(tmp_path), "--verdicts-only", "--kernel", "score")
    assert exit_.value.code == 2
    assert "--verdicts-only measures nothing" in capsys.readouterr().err


def test_selected_kernel_only(tmp_path, capsys, isolated):
    isolated["score"] = _fake_target(_measure)
    status, stdout, _ = run(capsys, "--out", str(tmp_path), "--kernel", "score")
    assert status == 0
    assert "[5/6] writing the cycle budget sheet" in stdout
    sheet = json.loads((tmp_path / "cycle_budget.json").read_text())
    assert {m["reason"] for m in sheet["not_measured"] if m["kernel"] != "score"} == {
        "not selected (--kernel)"}


def test_keep_others_remeasures_one_kernel_and_keeps_the_other_rows(tmp_path, capsys,
                                                                   isolated):
    def measure(cycles):
        return lambda point, **_: {"cycles": cycles + point["batch"], "bytes_in": 1,
                                   "bytes_out": 1, "operations": 0}

    isolated["score"] = _fake_target(measure(10))
    isolated["work_deltas"] = _fake_target(measure(20))
    assert run(capsys, "--out", str(tmp_path))[0] == 0
    before = json.loads((tmp_path / "cycle_budget.json").read_text())
    # as if the sheet predated the contract's B = 32 points: they come back, listed once
    older = {**before, "not_measured": [m for m in before["not_measured"]
                                        if "-b32-" not in (m["point"] or "")]}
    (tmp_path / "cycle_budget.json").write_text(json.dumps(older))
    isolated["score"] = _fake_target(measure(30))
    status, _, stderr = run(capsys, "--out", str(tmp_path), "--kernel", "score",
                            "--keep-others")
    assert status == 0, stderr
    sheet = json.loads((tmp_path / "cycle_budget.json").read_text())
    validate(sheet, "cycle_budget")
    assert [r for r in sheet["rows"] if r["kernel"] == "work_deltas"] == \
        [r for r in before["rows"] if r["kernel"] == "work_deltas"]
    assert {r["cycles"] for r in sheet["rows"] if r["kernel"] == "score"} == {31, 38}
    assert [r["kernel"] for r in sheet["rows"]] == [r["kernel"] for r in before["rows"]]
    assert "not selected (--kernel)" not in {m["reason"] for m in sheet["not_measured"]}
    entries = [(m["kernel"], m["point"]) for m in sheet["not_measured"]]
    assert len(entries) == len(set(entries))
    assert set(entries) == {(m["kernel"], m["point"]) for m in before["not_measured"]}


def test_point_remeasures_one_point_and_keeps_every_other_row(tmp_path, capsys, isolated):
    def measure(cycles):
        return lambda point, **_: {"cycles": cycles + point["batch"], "bytes_in": 1,
                                   "bytes_out": 1, "operations": 0}

    isolated["score"] = _fake_target(measure(10))
    assert run(capsys, "--out", str(tmp_path))[0] == 0
    before = json.loads((tmp_path / "cycle_budget.json").read_text())
    isolated["score"] = _fake_target(measure(30))
    status, stdout, stderr = run(capsys, "--out", str(tmp_path), "--kernel", "score",
                                 "--keep-others", "--point", "serving-b8-v32000",
                                 "--point", "small-b1-v32000")
    assert status == 0, stderr
    assert "measuring score (draft) at 2 contract points" in stdout
    sheet = json.loads((tmp_path / "cycle_budget.json").read_text())
    validate(sheet, "cycle_budget")
    changed = {"serving-b8-v32000": 38, "small-b1-v32000": 31}
    assert [(r["kernel"], r["point"]) for r in sheet["rows"]] == \
        [(r["kernel"], r["point"]) for r in before["rows"]]
    assert [r["cycles"] for r in sheet["rows"]] == [
        changed.get(r["point"], r["cycles"]) if r["kernel"] == "score" else r["cycles"]
        for r in before["rows"]]
    assert sheet["not_measured"] == before["not_measured"]


@pytest.mark.parametrize("args, message", [
    (["--point", "serving-b8-v32000"], "give --kernel and --keep-others"),
    (["--kernel", "score", "--point", "serving-b8-v32000"], "give --kernel and --keep-others"),
    (["--kernel", "score", "--keep-others", "--point", "serving-b64-v32000"],
     "point serving-b64-v32000 is not a contract point"),
])
def test_point_argument_errors(tmp_path, capsys, isolated, args, message):
    with pytest.raises(SystemExit) as exit_:
        run(capsys, "--out", str(tmp_path), *args)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_keep_others_without_a_sheet_fails_naming_it(tmp_path, capsys, isolated):
    isolated["score"] = _fake_target(lambda point, **_: {"cycles": 1, "bytes_in": 1,
                                                         "bytes_out": 1, "operations": 0})
    status, _, stderr = run(capsys, "--out", str(tmp_path), "--kernel", "score",
                            "--keep-others")
    assert status != 0
    assert f"need the existing sheet {tmp_path / 'cycle_budget.json'}" in stderr
    assert not (tmp_path / "cycle_budget.json").exists()


def test_unknown_kernel_is_an_argument_error(tmp_path, capsys, isolated):
    status, _, stderr = run(capsys, "--out", str(tmp_path), "--kernel", "sort")
    assert status == 2
    assert "kernel sort is not in the contract's [kernels] table" in stderr


def test_invalid_measurement_names_kernel_and_point(tmp_path, capsys, isolated):
    isolated["score"] = _fake_target(lambda point, **_: {"cycles": -1, "bytes_in": 0})
    status, _, stderr = run(capsys, "--out", str(tmp_path))
    assert status == 1
    assert "kernel `score`: measure() at point eagle2-b1-v32000 returned an invalid " \
           "measurement" in stderr
    assert "'bytes_out' is a required property" in stderr


def test_failing_measurement_fails_the_step(tmp_path, capsys, isolated):
    def measure(point, **_):
        raise RuntimeError("cocotb test failed")

    isolated["score"] = _fake_target(measure)
    status, _, stderr = run(capsys, "--out", str(tmp_path))
    assert status == 1
    assert "error: step [4/15] measuring score (draft) at 24 contract points failed: " \
           "measuring kernel `score` at point eagle2-b1-v32000 failed: RuntimeError: cocotb " \
           "test failed" in stderr


def test_target_without_measure_is_listed(tmp_path, capsys, isolated):
    isolated["score"] = _fake_target(None)
    status, _, _ = run(capsys, "--out", str(tmp_path))
    assert status == 0
    sheet = json.loads((tmp_path / "cycle_budget.json").read_text())
    not_measured = sheet["not_measured"][0]
    assert (not_measured["kernel"], not_measured["point"]) == ("score", None)
    assert not_measured["reason"].endswith("simulation target `score` has no measure() yet")


def test_port_bytes_counts_whole_bytes_per_beat():
    assert port_bytes(0, 32) == 0
    assert port_bytes(3, 32) == 12
    assert port_bytes(2, 33) == 10
    assert port_bytes(1, 1) == 1


def test_targets_with_measure_outside_the_contract_are_found():
    contract = flow.report.load_contract()
    # The float32 cores' targets have no measure(): nothing outside the contract.
    assert flow.report._measured_outside_contract(contract) == []


def _sheet_row(kernel, point, phase, *, cycles, total, **extra):
    return {"kernel": kernel, "point": point, "phase": phase, "cycles": cycles,
            "microseconds": cycles / 300, "bytes_total": total,
            "hbm_floor_us": total / 819e3, **extra}


def test_fusion_design_states_both_gates_at_the_serving_point():
    """``reports/fusion_design.md``: the engine against the sum of the eight unfused kernels,
    per point, the serving point's goals (20 µs, 20x fewer bytes) judged on the figures."""
    from flow.fusion import render_fusion_design

    contract = flow.report.load_contract()
    kernels = dict(contract["kernels"])
    unfused = [k for k, phase in kernels.items() if phase in ("draft", "verify")]
    assert len(unfused) == 8
    points = ["serving-b1-v128256", "small-b1-v32000"]
    rows = [_sheet_row(k, p, kernels[k], cycles=3000, total=1000) for k in unfused
            for p in points] + [_sheet_row("tree_verify", points[0], "fused", cycles=300,
                                           total=500)]
    sheet = {"seed": 1, "board": {"clock_mhz": 300.0, "hbm_bandwidth_gbps": 819.0},
             "points": points, "kernels": kernels, "rows": rows}
    assert render_fusion_design(sheet) is None  # no engine row yet
    engine = _sheet_row("dataflow", "serving-b1-v128256", "round", cycles=7500, total=400,
                        ports={"read": 100, "logits0": 150, "logits1": 150},
                        commands={"verify": {"count": 1, "cycles": 5000,
                                             "ports": {"logits0": 150, "logits1": 150}}},
                        source="simulated")
    text = render_fusion_design({**sheet, "rows": rows + [engine]})
    # the chain, then the chain with tree_verify for logits_to_probas and reject_sample
    assert "| serving-b1-v128256 | 7,500 | 25.00 | 400 | 8,000 | 20.0x | 80.0 | 6,500 | " \
           "16.2x |" in text
    assert "| small-b1-v32000 | not measured |" in text
    assert "25.00 µs (7,500 cycles): misses the 20 µs goal" in text
    assert "(20.0x): meets the 20x goal" in text
    assert "| serving-b1-v128256 | 100 | 300 | 0 | 0 | 0 |" in text  # logits ports summed
    assert "| `verify` | 1 | 5,000 | 0 | 300 | 0 | 0 | 0 |" in text


def test_fusion_design_plots_the_round_against_batch_size(tmp_path):
    """The engine's rows of one tree and vocabulary, in batch order, each against its
    memory-bound floor and its B = 1 round, with the other memory latency's cycles."""
    from flow.fusion import BATCH_PLOT, plot_batches, render_fusion_design

    contract = flow.report.load_contract()
    points = [f"serving-b{b}-v128256" for b in (1, 8, 32, 128)]
    # 819,000 bytes per request: the floor is 1 µs = 300 clocks per request
    rows = [_sheet_row("dataflow", point, "round", cycles=cycles, total=819_000 * b,
                       memory_latency=64, at_latency={"4": {"cycles": cycles - 100}},
                       ports={}, source="simulated")
            for point, b, cycles in zip(reversed(points), (128, 32, 8, 1),
                                        (96_000, 24_000, 6_000, 2_000), strict=True)]
    sheet = {"seed": 1, "board": {"clock_mhz": 300.0, "hbm_bandwidth_gbps": 819.0},
             "points": points, "kernels": dict(contract["kernels"]), "rows": rows}
    text = render_fusion_design(sheet)
    assert f"![cycles per round against batch size]({BATCH_PLOT})" in text
    assert "(memory read latency 64 clocks)" in text
    table = [line for line in text.splitlines() if line.startswith("| serving, V = 128,256 |")]
    assert table == [
        "| serving, V = 128,256 | 1 | 2,000 | 1.00x | 6.67 | 300 | 6.7x | 1,900 at 4 |",
        "| serving, V = 128,256 | 8 | 6,000 | 3.00x | 20.00 | 2,400 | 2.5x | 5,900 at 4 |",
        "| serving, V = 128,256 | 32 | 24,000 | 12.00x | 80.00 | 9,600 | 2.5x | 23,900 at 4 |",
        "| serving, V = 128,256 | 128 | 96,000 | 48.00x | 320.00 | 38,400 | 2.5x | "
        "95,900 at 4 |"]
    assert plot_batches(sheet, tmp_path / BATCH_PLOT)
    assert (tmp_path / BATCH_PLOT).read_bytes().startswith(b"\x89PNG")
    assert not plot_batches({**sheet, "rows": []}, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_engine_resources_add_the_v80_lanes(tmp_path):
    """The engine's estimate plus (1,024 - 16) lanes of the lane's estimate, against the V80."""
    from boards import board
    from flow.fusion import render_engine_resources

    assert "missing" in render_engine_resources(tmp_path, board("alveo"))[0]
    engine = {"LUT": 100_000, "FF": 50_000, "BRAM": 300.0, "URAM": 0, "DSP": 90}
    lane = {"LUT": 600, "FF": 624, "BRAM": 1.0, "URAM": 0, "DSP": 4}
    (tmp_path / "dataflow.v80.json").write_text(json.dumps(
        {"resources": engine, "family": "xcup", "seconds": 10}))
    (tmp_path / "tree_verify_lane.json").write_text(json.dumps({"resources": lane}))
    text = "\n".join(render_engine_resources(tmp_path, board("alveo")))
    assert "| + 1,008 lanes x one lane | 604,800 | 628,992 | 1,008 | 0 | 4,032 |" in text
    assert "| V80 engine build | 704,800 | 678,992 | 1,308 | 0 | 4,122 |" in text
    assert "| share | 27.1 % | 13.1 % | 35.4 % | 0.0 % | 38.0 % |" in text
