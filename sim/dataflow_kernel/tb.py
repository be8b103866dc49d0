"""cocotb testbench: the engine's Vitis kernel (``hw.dataflow.vitis_top.EngineKernel``) under
cocotbext-axi, against ``golden.engine.Engine``.

Configuration: ``parameters`` (the kernel's), ``seed``, ``rounds``, ``pause`` (probability of
a paused channel per clock on every m_axi channel), ``bad_commands``, ``vocab_size``,
``context_len``, ``memory_bytes`` (a power of two).

One ``mmap`` holds the card memory: cocotbext-axi's ``AxiRam`` (the ring port),
``AxiRamRead`` (the read ports) and ``AxiRamWrite`` (the write ports) serve every m_axi port
from it, and the host side (``sim.dataflow.host.EngineHost`` through ``CardMemory``) lays out
the records in it. The buffer lies at device address ``BASE`` (every pointer argument; the
RAMs see ``address % memory_bytes``). The host speaks to the kernel only through
``AxiLiteMaster`` and the rings, as docs/vitis.md's control model has it: arguments, start,
per command a descriptor and ``command_head``, ``completion_head`` polled, the record read
and ``completion_tail``; at the end ``drain``, ``ap_done`` and ``ap_continue``.

Per command: the completion, the memory the command wrote and the whole ``req_to_token``
table equal the golden's (``check_step``); the port counters read through the counter window
moved exactly the beats of the command's runs (``check_port_counters``); the command's clocks
by cause add up to its clocks.
"""

import logging
import mmap
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam, AxiRamRead, AxiRamWrite

from hw.dataflow.command_counters import COMMAND_COUNTERS
from hw.dataflow.engine import EngineParams
from hw.dataflow.params import counter_layout
from hw.dataflow.ring import payload_words
from hw.dataflow.vitis_top import RESET_STAGES, counter_names, vitis_interface
from sim.cocotb_tb import config, write_summary
from sim.dataflow.host import completion_record, descriptor_words, record_words
from sim.dataflow.memory import CardMemory
from sim.dataflow.rounds import Scenario, check_port_counters, check_step

#: The buffer's device address (above 4 GiB: the pointer adds carry into the high word).
BASE = 0x3_0000_0000
#: Entries of each ring.
ENTRIES = 4
#: Register polls before a command is called hung.
PATIENCE = 20_000


def pauses(rng: random.Random, probability: float):
    """A cocotbext-axi pause generator: paused with ``probability`` each clock."""
    while True:
        yield rng.random() < probability


def _quiet(model) -> None:
    """cocotbext-axi's models log every transfer at INFO: warnings only."""
    model.log.setLevel(logging.WARNING)


class Card:
    """The kernel under cocotbext-axi: its RAMs, its control master, its registers by name."""

    def __init__(self, dut, params: EngineParams, cfg: dict, rng: random.Random):
        self.dut, self.params = dut, params
        self.interface = interface = vitis_interface(params)
        size = cfg["memory_bytes"]
        self.buffer = mmap.mmap(-1, size)
        self.memory = CardMemory(size, buffer=self.buffer)
        kinds = {"read": AxiRamRead, "write": AxiRamWrite, "readwrite": AxiRam}
        self.rams, paused = [], 0
        for port in interface.memory_ports:
            bus = AxiBus.from_prefix(dut, port.name)
            bus = {"read": bus.read, "write": bus.write, "readwrite": bus}[port.access]
            ram = kinds[port.access](bus, dut.ap_clk, dut.ap_rst_n, reset_active_level=False,
                                     mem=self.buffer)
            sides = (ram.read_if, ram.write_if) if port.access == "readwrite" else (ram,)
            for side in sides:
                for name in ("ar_channel", "r_channel", "aw_channel", "w_channel", "b_channel"):
                    channel = getattr(side, name, None)
                    if channel is not None:
                        channel.set_pause_generator(pauses(rng, cfg["pause"]))
                        paused += 1
                _quiet(side)
            self.rams.append(ram)
        assert paused == sum(2 * port.reads + 3 * port.writes
                             for port in interface.memory_ports), "a channel without pauses"
        self.control = AxiLiteMaster(AxiLiteBus.from_prefix(dut, interface.control_port),
                                     dut.ap_clk, dut.ap_rst_n, reset_active_level=False)
        _quiet(self.control.write_if)
        _quiet(self.control.read_if)
        self.rows = {row.name: row for row in interface.registers}
        self.counter_index = {name: index for index, name in enumerate(counter_names(params))}

    async def write(self, name: str, value: int) -> None:
        row = self.rows[name]
        for word in range(row.bits // 32):
            await self.control.write_dword(row.offset + 4 * word,
                                           value >> (32 * word) & 0xFFFF_FFFF)

    async def read(self, name: str) -> int:
        row = self.rows[name]
        value = 0
        for word in range(row.bits // 32):  # the low word first: it samples the value
            value |= await self.control.read_dword(row.offset + 4 * word) << (32 * word)
        return value

    async def counter(self, name: str) -> int:
        await self.write("counter_select", self.counter_index[name])
        return await self.read("counter_value")

    async def port_counters(self) -> dict:
        """Port -> its counters (``counter_layout`` fields), read through the window."""
        return {port: {field: await self.counter(f"{port}.{field}")
                       for field, _ in counter_layout} for port in self.params.port_names}


@cocotb.test()
async def rounds(dut):
    """``rounds`` rounds of ``Scenario`` with bad commands, through the rings, every m_axi
    channel paused at random: RTL == golden command by command (see the module)."""
    cfg = config()
    params = EngineParams(**cfg["parameters"])
    rng = random.Random(cfg["seed"])
    cocotb.start_soon(Clock(dut.ap_clk, 10, unit="ns").start())
    dut.ap_rst_n.value = 0
    card = Card(dut, params, cfg, rng)
    await ClockCycles(dut.ap_clk, 4)
    dut.ap_rst_n.value = 1
    await ClockCycles(dut.ap_clk, RESET_STAGES + 2)

    scenario = Scenario(params, card.memory, seed=cfg["seed"], vocab_size=cfg["vocab_size"],
                        context_len=cfg["context_len"], bad_commands=cfg["bad_commands"])
    host, memory = scenario.host, card.memory
    words = payload_words(params.command_layout)
    record = record_words(params)
    command_ring = memory.allocate("command_ring", words * ENTRIES)
    completion_ring = memory.allocate("completion_ring", record * ENTRIES)
    for port in card.interface.memory_ports:
        await card.write(port.argument, BASE)
    for name, value in {"command_ring": command_ring, "command_entries": ENTRIES,
                        "command_head": 0, "completion_ring": completion_ring,
                        "completion_entries": ENTRIES, "completion_tail": 0, "drain": 0,
                        **scenario.config}.items():
        await card.write(name, value)
    assert await card.control.read_dword(0) & 0b100, "not idle before the start"
    await card.control.write_dword(0, 1)  # ap_start

    head = tail = commands = cycles = 0
    for step in scenario.steps(cfg["rounds"]):
        before = await card.port_counters()
        clocks_before = {name: await card.counter(f"command.{name}")
                         for name in COMMAND_COUNTERS}
        memory.write_words(command_ring + 4 * words * head,
                           descriptor_words(params, step.command))
        head = (head + 1) % ENTRIES
        await card.write("command_head", head)
        for _ in range(PATIENCE):
            if await card.read("completion_head") != tail:
                break
        else:
            raise TimeoutError(f"{step.name} (tag {step.command['tag']}): no completion")
        fields, sequence = completion_record(params, memory.read_words(
            completion_ring + 4 * record * tail, record, signed=False))
        tail = (tail + 1) % ENTRIES
        await card.write("completion_tail", tail)
        commands += 1
        assert sequence == commands, f"{step.name}: record {sequence}, expected {commands}"
        check_step(step, fields, host)
        check_port_counters(step, host, before, await card.port_counters())
        clocks = {name: await card.counter(f"command.{name}") - clocks_before[name]
                  for name in COMMAND_COUNTERS}
        assert clocks["commands"] == 1
        assert clocks["busy_cycles"] + clocks["memory_cycles"] + \
            clocks["backpressure_cycles"] == clocks["cycles"] > 0, (step.name, clocks)
        cycles += clocks["cycles"]

    await card.write("drain", 1)
    for _ in range(PATIENCE):
        if await card.control.read_dword(0) & 0b10:
            break
    else:
        raise TimeoutError("no ap_done after drain")
    await card.control.write_dword(0, 1 << 4)  # ap_continue
    await ClockCycles(dut.ap_clk, 4)
    assert await card.control.read_dword(0) & 0b100, "not idle after ap_continue"
    dut._log.info(f"{cfg['rounds']} rounds, {commands} commands through the rings under "
                  f"cocotbext-axi with pauses {cfg['pause']}: bit-exact with golden.engine, "
                  f"port counters exact, {cycles} command clocks")
    write_summary(vectors=commands, random_vectors=cfg["rounds"], cycles=cycles,
                  extra={"rounds": f"{cfg['rounds']} rounds, {commands} commands"})
