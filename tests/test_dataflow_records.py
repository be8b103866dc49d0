"""The records that cross card memory (hw/dataflow/records.py): docs/engine.md's tables list
them, ``EngineParams`` sizes them, ``EngineHost`` packs and unpacks them field by field as the
hardware writes them (the hardware's own use is checked end to end by the engine tests)."""

import re

import numpy as np
import pytest

from hw.dataflow.engine import EngineParams
from hw.dataflow.records import (
    ARGUMENT,
    FRONTIER,
    NODE,
    RECORDS,
    REQUEST,
    RESULT,
    STATE,
    TREE,
    record_tables,
)
from sim.dataflow import PARAMETERS
from sim.dataflow.host import EngineHost
from sim.dataflow.memory import CardMemory
from sim.harness import REPO_ROOT

BEGIN, END = "<!-- record tables: begin -->\n", "<!-- record tables: end -->"


def _doc_tables():
    """docs/engine.md's record tables: the text between the markers."""
    text = (REPO_ROOT / "docs" / "engine.md").read_text()
    assert BEGIN in text and END in text, "docs/engine.md lost its record tables"
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def test_docs_record_tables_are_the_records():
    assert _doc_tables() == record_tables(), \
        "docs/engine.md's record tables are stale: paste hw.dataflow.records.record_tables()"


def test_docs_record_tables_list_each_records_fields_in_order():
    """Parsed back, each table's rows are the record's fields at words 0, 1, ..., then its
    tails (a stale or hand-edited table, or a generator that drops a field, fails)."""
    tables = re.findall(r"^(.+) record \((.+) words\):\n\n((?:\|.*\|\n)+)", _doc_tables(),
                        re.MULTILINE)
    assert [name for name, _, _ in tables] == [record.name for record in RECORDS]
    for (_, size, table), record in zip(tables, RECORDS, strict=True):
        rows = [[cell.strip() for cell in line.strip("|").split("|")]
                for line in table.splitlines()[2:]]
        fixed = len(record.fields)
        assert [row[1].strip("`") for row in rows] == \
            list(record.fields) + [tail.name for tail in record.tails]
        assert [row[0] for row in rows[:fixed]] == [str(x) for x in range(fixed)]
        assert all(row[0].startswith("+ ") for row in rows[fixed:])
        assert size.split(" + ")[0] == str(record.size) == str(fixed)


def test_record_layouts():
    """Each record's fixed words as docs/engine.md and the issue name them, 32 bits each."""
    assert ARGUMENT.fields == ("slot", "root_token", "seq_len", "req_pool_index")
    assert FRONTIER.fields == ("token", "parent_index", "node_id", "position", "kv_slot")
    assert TREE.fields == ("retrive_index", "retrive_next_token", "retrive_next_sibling",
                           "position", "draft_token")
    assert REQUEST.fields == ("temperature", "top_k", "top_p", "seed_or_final_coin",
                              "max_seq_len")
    assert RESULT.size == 10 and RESULT.word("rows_read") == 9
    assert STATE.fields == ("phase", "seq_len", "req_pool_index", "cumu_count")
    assert NODE.fields == ("token", "score", "delta", "prev", "next", "side")
    for record in RECORDS:
        assert record.layout.size == 32 * len(record.fields)
        assert [record.word(field) for field in record.fields] == list(range(record.size))


@pytest.mark.parametrize("parameters", [{}, PARAMETERS, {"max_input_size": 100}])
def test_engine_params_word_counts_are_the_records_sizes(parameters):
    p = EngineParams(**parameters)
    assert p.argument_words == 4 + p.max_input_size + 1 == ARGUMENT.size + p.kv_slots
    assert p.frontier_words == 5 + -(-p.max_input_size // 32) == FRONTIER.size + p.mask_words
    assert p.tree_words == TREE.size == 5
    assert (p.verify_request_words, p.verify_result_words) == (REQUEST.size, RESULT.size)


def test_record_errors():
    with pytest.raises(KeyError, match="no field 'slots'"):
        ARGUMENT.word("slots")
    with pytest.raises(ValueError, match="fields"):
        TREE.in_order({"retrive_index": 0})
    with pytest.raises(ValueError, match="tails"):
        REQUEST.pack(1, temperature=0, top_k=0, top_p=0, seed_or_final_coin=0, max_seq_len=0)
    with pytest.raises(ValueError, match="9 words a record expected, got 8"):
        REQUEST.unpack(np.zeros((2, 8)), coins=4)


def _host():
    params = EngineParams(**PARAMETERS)
    return params, EngineHost(params, CardMemory(1 << 18), np.zeros((12, 48), np.int64))


def _values(record, count):
    """Distinct values per field and request: field f of request b is ``100 * f + b + 1``."""
    return {field: 100 * x + np.arange(count) + 1 for x, field in enumerate(record.fields)}


def test_host_packs_argument_and_request_records_by_field():
    params, host = _host()
    locs = np.arange(2 * params.kv_slots).reshape(2, -1) + 50
    host.begin_round([3, 1], [7, 8], [5, 6], [9, 2], locs, verify_num=4, depths=2)
    words = host.memory.read_words(host.arguments, 2 * params.argument_words)
    arguments = ARGUMENT.unpack(words.reshape(2, -1), kv_slots=params.kv_slots)
    assert arguments["slot"].tolist() == [3, 1] and arguments["root_token"].tolist() == [7, 8]
    assert arguments["seq_len"].tolist() == [5, 6]
    assert arguments["req_pool_index"].tolist() == [9, 2]
    assert (arguments["kv_slots"] == locs).all()

    n = 3
    logits = np.zeros((2, n, 16), np.float32)
    host.verify(logits, [0.5, 2.0], [40, 41], seeds=[11, 12], top_k=[4, 5], top_p=[0.25, 1.0])
    words = host.memory.read_words(host.verify_requests, 2 * (REQUEST.size + n), signed=False)
    request = REQUEST.unpack(words.reshape(2, -1), coins=n)
    assert request["temperature"].tolist() == [0x3F000000, 0x40000000]
    assert request["top_k"].tolist() == [4, 5] and request["max_seq_len"].tolist() == [40, 41]
    assert request["top_p"].tolist() == [0x3E800000, 0x3F800000]
    assert request["seed_or_final_coin"].tolist() == [11, 12]
    assert (request["coins"] == 0).all()


def test_host_unpacks_result_records_by_field():
    _, host = _host()
    b, n, steps = 2, 35, 3
    header = _values(RESULT, b)
    accept_index = np.arange(b * steps).reshape(b, steps) + 7000
    predicts = np.arange(b * n).reshape(b, n) + 8000
    evict = np.zeros((b, n), np.bool_)
    evict[0, [0, 31, 34]] = evict[1, [1, 33]] = True
    evict_words = [[sum(int(bit) << i for i, bit in enumerate(row[32 * w:32 * w + 32]))
                    for w in range(2)] for row in evict]
    words = RESULT.pack(b, **header, tails={"accept_index": accept_index, "predicts": predicts,
                                            "evict_mask": evict_words})
    host.memory.write_words(host.verify_results, words.reshape(-1))
    out = host.run_outputs(b, n, steps, 0)
    for name, field in [("accept_token_num", "accept_token_num"),
                        ("accept_length", "accept_length"), ("next_root", "next_root"),
                        ("seq_lens", "seq_len"), ("active_slots", "active_slot"),
                        ("active_inverse", "active_inverse")]:
        assert out[name].tolist() == header[field].tolist(), name
    assert out["finished"].all() and out["nan_flags"].all()
    assert out["rows_read"] == int(header["rows_read"].sum())
    assert (out["accept_index"] == accept_index).all()
    assert (out["predicts"] == predicts.reshape(-1)).all()
    assert (out["evict_mask"] == evict.reshape(-1)).all()


def test_host_unpacks_frontier_tree_and_state_records_by_field():
    params, host = _host()
    b, width, inputs = 2, 2, 3
    frontier = _values(FRONTIER, b * width)
    mask = np.array([0b101, 0b011, 0b110, 0b111]).reshape(-1, 1) \
        * np.eye(1, params.mask_words, dtype=np.int64)
    host.memory.write_words(host.frontier, FRONTIER.pack(b * width, **frontier,
                                                         tails={"mask": mask}).reshape(-1))
    out = host.frontier_outputs(b, width, inputs)
    for name, field in [("tokens", "token"), ("parent_indices", "parent_index"),
                        ("node_ids", "node_id"), ("positions", "position"),
                        ("kv_slots", "kv_slot")]:
        assert out[name].reshape(-1).tolist() == frontier[field].tolist(), name
    assert out["tree_mask"].reshape(-1, 4).tolist() == [
        [True, False, True, False], [True, True, False, False],
        [False, True, True, False], [True, True, True, False]]

    n = 3
    tree = _values(TREE, b * n)
    host.memory.write_words(host.tree, TREE.pack(b * n, **tree).reshape(-1))
    host.memory.write_words(host.indptrs, [0] * 9)
    out = host.verify_outputs(b, n, 0)
    for name in ("retrive_index", "retrive_next_token", "retrive_next_sibling"):
        assert out[name].reshape(-1).tolist() == tree[name].tolist(), name
    assert out["positions"].tolist() == tree["position"].tolist()
    assert out["draft_tokens"].tolist() == tree["draft_token"].tolist()

    count, v, k = 2, params.max_verify_num, params.node_top_k
    nodes = NODE.pack(count, **_values(NODE, count))
    scores = np.arange(2 * v + k) + 900
    header = {"phase": 2, "seq_len": 17, "req_pool_index": -1, "cumu_count": count}
    state = STATE.pack(1, **header, tails={"nodes": nodes.reshape(1, -1),
                                           "sort_scores": scores[None, :v],
                                           "work_scores": scores[None, v:]})
    host.memory.write_words(host.state, state.reshape(-1))
    out = host.state_outputs()
    assert {name: out[name] for name in header} == header
    node_values = _values(NODE, count)
    for name, field in [("cumu_tokens", "token"), ("cumu_scores", "score"),
                        ("cumu_deltas", "delta"), ("prev_indexs", "prev"),
                        ("next_indexs", "next"), ("side_indexs", "side")]:
        assert out["tree"][name].tolist() == node_values[field].tolist(), name
    assert out["tree"]["sort_scores"].tolist() == scores[:v].tolist()
    assert out["tree"]["work_scores"].tolist() == scores[v:].tolist()
