"""The card backend (host/card.py): the engine's Vitis kernel, Verilated, driven as a host
drives a card (registers, rings, one buffer), against the rtl backend and the golden.

The rounds themselves are checked against the golden in tests/test_host_rtl.py (its engine
fixture runs on both backends); here: the counters a host reads off the card equal the rtl
backend's measurement, memory that stalls at random changes nothing but the clocks, a
snapshot restores through a new ring session, and the XRT device says clearly that XRT is
missing."""

import re

import numpy as np
import pytest

import host
from host.card import CardBackend, CardUnavailable, SimulatedCard, XrtCard

V = 32
TREE = host.TREES["small"]
CONFIG = TREE.round_config(batch_size=2)
CONTEXT = 512


def rounds(engine, count, seed):
    """``count`` rounds of both slots at temperature 0.8 and greedy; the results."""
    models = host.BigramModels(V, seed=seed, agreement=0.6)
    sampler = models.sampler(TREE.node_top_k)
    roots = np.array([3, 11], np.int64)
    results = []
    for _ in range(count):
        result = engine.round(sampler, roots, models.verify_logits,
                              temperatures=np.array([0.8, 0.0], np.float32))
        roots = result.verify.next_root
        results.append(result)
    return results


def commands(results):
    return [(c.command, c.status, c.cycles, c.bytes) for r in results for c in r.commands]


def tokens(results):
    return [[t.tolist() for t in r.verify.accepted_tokens()] for r in results]


def test_card_counters_equal_the_rtl_measurement():
    """Per command, the card's ``command.cycles`` and ports' ``bytes`` counters read through
    the counter window equal what the rtl backend measures on the engine's own ports (the
    same engine, the same memory latency): the kernel's rings and registers add nothing to a
    command. The three causes of the clocks add up to them."""
    card = host.Engine(CONFIG, vocab_size=V, backend="card", context_len=CONTEXT, seed=3)
    rtl = host.Engine(CONFIG, vocab_size=V, backend="rtl", context_len=CONTEXT, seed=3)
    got, expected = rounds(card, 4, 3), rounds(rtl, 4, 3)
    assert commands(got) == commands(expected)
    assert tokens(got) == tokens(expected)
    registers = card.backend.registers
    causes = sum(registers.counter(f"command.{name}")
                 for name in ("busy_cycles", "memory_cycles", "backpressure_cycles"))
    assert causes == registers.counter("command.cycles") > 0
    # every command the kernel took (the rounds' and host.Engine's own read_state ones)
    assert registers.counter("command.commands") == card.backend.completed > len(commands(got))


def test_stalling_memory_changes_only_the_clocks():
    """The simulated card's memory stalls a quarter of its channel clocks and answers after
    up to 24 clocks: same tokens and states as the golden, more cycles, back-pressure and
    memory waits counted."""
    config = host.engine_config(CONFIG, V)
    table = np.full((CONFIG.batch_size, CONTEXT), -1, np.int64)
    stalled = CardBackend(config, table.copy(), memory_stall=0.25, memory_latency=24)
    engines = {"stalled": host.Engine(CONFIG, vocab_size=V, backend=stalled,
                                      context_len=CONTEXT, seed=4),
               "golden": host.Engine(CONFIG, vocab_size=V, backend="golden",
                                     context_len=CONTEXT, seed=4),
               "card": host.Engine(CONFIG, vocab_size=V, backend="card", context_len=CONTEXT,
                                   seed=4)}
    results = {name: rounds(engine, 3, 4) for name, engine in engines.items()}
    assert tokens(results["stalled"]) == tokens(results["golden"]) == tokens(results["card"])
    for slot in range(CONFIG.batch_size):
        got, expected = engines["stalled"].read_state(slot), engines["golden"].read_state(slot)
        assert (got.phase, got.seq_len, got.cumu_count) == \
            (expected.phase, expected.seq_len, expected.cumu_count)
    slow = sum(c.cycles for r in results["stalled"] for c in r.commands)
    fast = sum(c.cycles for r in results["card"] for c in r.commands)
    assert slow > fast
    registers = stalled.registers
    assert registers.counter("command.backpressure_cycles") > 0
    assert registers.counter("command.memory_cycles") > 0


def test_a_snapshot_restores_through_a_new_ring_session():
    """``restore`` stops the kernel (drain, ap_done, ap_continue) and starts a new session on
    a fresh buffer; the replayed state equals the golden's."""
    engines = {name: host.Engine(CONFIG, vocab_size=V, backend=name, context_len=CONTEXT,
                                 seed=6) for name in ("card", "golden")}
    for engine in engines.values():
        rounds(engine, 2, 6)
        engine.backend.restore(engine.backend.snapshot())
    after = {name: tokens(rounds(engine, 2, 7)) for name, engine in engines.items()}
    assert after["card"] == after["golden"]
    control = engines["card"].backend.device.read_register(0)
    assert control & 0b100 == 0, "the kernel should be running its new session"


def test_a_card_backend_is_the_simulated_card_by_default():
    config = host.engine_config(CONFIG, V)
    backend = CardBackend(config, np.full((2, CONTEXT), -1, np.int64))
    assert isinstance(backend.device, SimulatedCard)
    assert backend.device.buffer_address > 1 << 32  # the ports add 64-bit pointers
    backend.close()
    assert backend.device.read_register(0) & 0b100  # idle after the drain


def test_the_xrt_card_says_when_xrt_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("XILINX_XRT", str(tmp_path))
    with pytest.raises(CardUnavailable, match="XRT is not installed here"):
        XrtCard(tmp_path / "dataflow.xclbin", 1 << 20)
    monkeypatch.delenv("XILINX_XRT")
    with pytest.raises(CardUnavailable, match="use the simulated card"):
        XrtCard(tmp_path / "dataflow.xclbin", 1 << 20)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"memory_stall": 0.95}, "`memory_stall` must be between 0.0 and 0.9, not 0.95"),
    ({"memory_stall": float("nan")}, "`memory_stall` must be a finite number"),
    ({"memory_latency": -1}, "`memory_latency`"),
    ({"device": "card0"}, "`device` must be a host.card.CardDevice or None, not str"),
])
def test_bad_arguments_name_the_argument(kwargs, message):
    """Refused before any model is built or loaded."""
    config = host.engine_config(CONFIG, V)
    with pytest.raises(ValueError, match=re.escape(message)):
        CardBackend(config, np.full((2, CONTEXT), -1, np.int64), **kwargs)
