"""The cycle budget's measurement driver (``sim.dataflow.measure``, what ``make report`` runs
for the engine) on the rtl backend's small build (``tests/test_host_rtl.py``'s: no build of its
own): the contract round at two memory latencies, every command checked against the golden."""

import jsonschema
import pytest

import host
from boards import load_schema
from host.rtl import engine_parameters
from sim.dataflow.measure import measure_point
from tests.test_host_rtl import CONFIG, CONTEXT, V

POINT = {"batch": 2, "node_top_k": 4, "tree_width": 4, "depth": 3, "verify_num": 8, "vocab": V}


@pytest.fixture(scope="module")
def measured():
    parameters = engine_parameters(host.engine_config(CONFIG, V), pool_rows=CONFIG.batch_size,
                                   context_len=CONTEXT)
    spec = {"point": POINT, "seq_len": 100, "context_len": CONTEXT, "latencies": [64, 4],
            "memory_bytes": 1 << 22}
    lines = []
    return measure_point(parameters, spec, seed=1, log=lines.append), lines


def test_the_record_is_a_valid_measurement(measured):
    record, lines = measured
    jsonschema.validate(record, load_schema("measurement"),
                        cls=jsonschema.Draft202012Validator)
    assert [line.split(":")[0] for line in lines] == ["memory latency 64", "memory latency 4"]


def test_the_round_is_every_command_of_the_contract_round(measured):
    record, _ = measured
    commands = record["commands"]
    assert {name: c["count"] for name, c in commands.items()} == {
        "begin_round": 1, "draft_depth": POINT["depth"], "build_verify": 1, "verify": 1}
    assert sum(c["cycles"] for c in commands.values()) == record["cycles"]
    assert sum(record["simulated"]["cycles_per_command"].values()) == \
        record["simulated"]["cycles"]
    for port in record["ports"]:
        assert sum(c["ports"][port] for c in commands.values()) == record["ports"][port]
    assert record["bytes_in"] + record["bytes_out"] == sum(record["ports"].values())
    assert record["bytes_out"] == sum(record["ports"][port] for port in (
        "result_write", "mask_write", "table_write"))


def test_the_second_latency_is_the_same_round_sooner(measured):
    record, _ = measured
    assert record["memory_latency"] == 64
    faster = record["at_latency"]["4"]
    assert faster["cycles"] < record["cycles"]
    assert set(faster["commands"]) == set(record["commands"])
    assert sum(faster["commands"].values()) == faster["cycles"]
    assert "at memory latency 4" in record["notes"]
