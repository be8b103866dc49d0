# amaranth: UnusedElaboratable=no
"""The engine's Vitis RTL kernel (hw/dataflow/vitis_top.py): its ports against its
``KernelInterface``, and a whole run on Amaranth's simulator: the host writes the arguments
through ``s_axi_control``, fills the command ring, drains the completion ring (smaller than
the run, so it wraps and fills up) and stops the persistent engine with ``drain``; card memory
answers every m_axi port with random latency and stalls."""

import random

import pytest
from amaranth.sim import Simulator

from hw.dataflow.commands import Opcode, Status
from hw.dataflow.records import STATE
from hw.dataflow.ring import payload_words
from hw.dataflow.vitis_top import (
    COUNTER_SCALARS,
    KERNEL_PARAMETERS,
    MEMORY,
    READ_ONLY,
    RESET_STAGES,
    RING_SCALARS,
    EngineKernel,
    counter_names,
    kernel_parameters,
    vitis_interface,
)
from hw.lib.axi_lite import CONTROL, AXI4LiteSignature
from sim.dataflow.memory import CardMemory, ReadServer, WriteServer
from sim.payload import pack, unpack

PATIENCE = 5_000
#: The kernel's default set on 64-bit ports (a descriptor is several beats).
PARAMETERS = {**KERNEL_PARAMETERS, "port_bits": 64, "logit_port_bits": 64}
AXI4_READ = {"arvalid", "arready", "araddr", "arlen", "arsize", "arburst", "arid", "rvalid",
             "rready", "rdata", "rlast", "rresp", "rid"}
AXI4_WRITE = {"awvalid", "awready", "awaddr", "awlen", "awsize", "awburst", "awid", "wvalid",
              "wready", "wdata", "wstrb", "wlast", "bvalid", "bready", "bresp", "bid"}


def test_ports_follow_the_interface():
    dut = EngineKernel(**PARAMETERS)
    interface = dut.vitis_interface
    assert interface == vitis_interface(kernel_parameters(**PARAMETERS))
    assert interface.kernel_name == interface.top == "dataflow"
    members = dut.signature.members
    expected = {"ap_clk", "ap_rst_n", "interrupt"}
    expected |= {f"s_axi_control_{name}" for name in AXI4LiteSignature(12).members}
    for port in interface.memory_ports:
        channels = {"read": AXI4_READ, "write": AXI4_WRITE,
                    "readwrite": AXI4_READ | AXI4_WRITE}[port.access]
        expected |= {f"{port.name}_{signal}" for signal in channels}
        for signal in channels & {"araddr", "awaddr"}:
            assert len(getattr(dut, f"{port.name}_{signal}")) == 64
        for signal in channels & {"rdata", "wdata"}:
            assert len(getattr(dut, f"{port.name}_{signal}")) == port.data_width
    assert set(members) == expected
    assert [(p.name, p.access, p.argument) for p in interface.memory_ports] == [
        ("m_axi_ring", "readwrite", "ring_ptr"), ("m_axi_read", "read", "read_ptr"),
        ("m_axi_result", "write", "result_ptr"), ("m_axi_mask", "write", "mask_ptr"),
        ("m_axi_table", "write", "table_ptr"), ("m_axi_logits0", "read", "logits0_ptr"),
        ("m_axi_logits1", "read", "logits1_ptr")]
    assert interface.scalars == RING_SCALARS + (
        ("req_to_token", 64), ("pool_rows", 32), ("context_len", 32), ("vocab_size", 32),
        ("cost_per_node", 32), ("watchdog_cycles", 32)) + COUNTER_SCALARS
    assert members["s_axi_control_awvalid"].flow.name == "In"
    registers = {row.name for row in interface.registers}
    assert set(READ_ONLY) <= registers and {name for name, _ in RING_SCALARS} <= registers
    assert members["m_axi_ring_awvalid"].flow.name == "Out"


#: Why every m_axi port shares data with another (docs/vitis.md, "The engine's kernel"): the
#: host's one buffer holds all the engine reads and writes.
SHARED = {
    "m_axi_ring": "command descriptors the host wrote, completion records the host reads",
    "m_axi_read": "the host's arrays and req_to_token as m_axi_table wrote it",
    "m_axi_result": "results the host reads",
    "m_axi_mask": "masks the host reads",
    "m_axi_table": "req_to_token rows that m_axi_read reads back",
    "m_axi_logits0": "target logits the host wrote",
    "m_axi_logits1": "target logits the host wrote",
}


def test_ports_that_share_data_are_linked_to_one_range():
    """The engine's m_axi ports are one memory, and both boards' link configurations (read as
    text) put all of them on one range: HBM[0:31] on the U55C (v++), MEM on the V80
    (slashkit). Fast: the port list, no elaboration."""
    import re

    from boards.vitis import link_config

    interface = vitis_interface(kernel_parameters())
    assert {port.name for port in interface.memory_ports} == set(SHARED)
    assert list(interface.memories) == [MEMORY]
    for board_name, unit, target in (("alveo-u55c", "dataflow_1", "HBM[0:31]"),
                                     ("alveo-v80", "dataflow_0", "MEM")):
        text = link_config(interface, board_name)
        ranges = dict(re.findall(rf"^sp={unit}\.(\w+):(\S+)$", text, re.MULTILINE))
        assert ranges == dict.fromkeys(SHARED, target), board_name


def test_axi_facts_of_the_ports():
    """Longest bursts: ``READ_BURST`` beats for the word readers (the ring's reads too), one
    beat for the word writers, the fused verify's ``max_burst`` (within a 4 KiB page) for
    the logits ports; one ID bit each."""
    from hw.dataflow.memory_ports import READ_BURST

    p = kernel_parameters(**PARAMETERS)
    ports = {port.name: port for port in vitis_interface(p).memory_ports}
    assert {name: port.max_burst for name, port in ports.items()} == {
        "m_axi_ring": READ_BURST, "m_axi_read": READ_BURST,
        **dict.fromkeys(("m_axi_result", "m_axi_mask", "m_axi_table"), 1),
        "m_axi_logits0": p.verify.max_burst, "m_axi_logits1": p.verify.max_burst}
    assert {port.id_width for port in ports.values()} == {1}
    assert ports["m_axi_logits0"].axi_parameters()["MAX_BURST_LENGTH"] == "16"
    assert ports["m_axi_read"].axi_parameters()["MAX_BURST_LENGTH"] == str(READ_BURST)


def test_the_engine_is_a_user_managed_kernel():
    """The host writes the ring indices while the kernel runs (docs/vitis.md, "The control
    model"): kernel.xml and package_xo.tcl declare the kernel user-managed."""
    from boards.vitis import kernel_xml, package_xo_tcl

    interface = vitis_interface(kernel_parameters())
    assert interface.control_protocol == "user_managed"
    assert 'hwControlProtocol="user_managed"' in kernel_xml(interface)
    tcl = package_xo_tcl(interface, verilog="dataflow.v", part="xcu55c-fsvh2892-2L-e")
    assert "set_property vitis_drc {ctrl_protocol user_managed} $core" in tcl


def test_bad_parameters_name_the_parameter():
    with pytest.raises(ValueError, match="`port_bits` must be a power of two, not 48"):
        EngineKernel(**{**PARAMETERS, "port_bits": 48})


class Host:
    """The host side of one simulation: AXI4-Lite accesses to ``s_axi_control``."""

    def __init__(self, ctx, dut):
        self.ctx, self.dut = ctx, dut

    def bus(self, name):
        return getattr(self.dut, f"s_axi_control_{name}")

    async def write(self, offset, value):
        ctx, bus = self.ctx, self.bus
        ctx.set(bus("awaddr"), offset)
        ctx.set(bus("wdata"), value & 0xFFFF_FFFF)
        ctx.set(bus("wstrb"), 0xF)
        ctx.set(bus("awvalid"), 1)
        ctx.set(bus("wvalid"), 1)
        await self._until_taken([("awvalid", "awready"), ("wvalid", "wready")])
        ctx.set(bus("bready"), 1)
        await self._until_taken([("bready", "bvalid")])

    async def write_argument(self, name, value):
        row = {r.name: r for r in self.dut.vitis_interface.registers}[name]
        for word in range(row.bits // 32):
            await self.write(row.offset + 4 * word, value >> (32 * word))

    async def read(self, offset):
        ctx, bus = self.ctx, self.bus
        ctx.set(bus("araddr"), offset)
        ctx.set(bus("arvalid"), 1)
        await self._until_taken([("arvalid", "arready")])
        ctx.set(bus("rready"), 1)
        for _ in range(PATIENCE):
            _, _, valid, data = await ctx.tick().sample(bus("rvalid"), bus("rdata"))
            if valid:
                ctx.set(bus("rready"), 0)
                return data
        raise AssertionError("no read response")

    async def read_argument(self, name):
        row = {r.name: r for r in self.dut.vitis_interface.registers}[name]
        return await self.read(row.offset)

    async def _until_taken(self, pairs):
        """Wait until each (driven, answer) pair has had a clock with both high, then drop
        the driven signal."""
        pending = list(pairs)
        for _ in range(PATIENCE):
            signals = [self.bus(name) for pair in pending for name in pair]
            _, _, *values = await self.ctx.tick().sample(*signals)
            for index, pair in reversed(list(enumerate(pending))):
                if values[2 * index] and values[2 * index + 1]:
                    self.ctx.set(self.bus(pair[0]), 0)
                    del pending[index]
            if not pending:
                return
        raise AssertionError(f"control bus: {pending} not accepted")


def _serve_master(dut, port, memory):
    """A background testbench answering the m_axi port ``port`` from ``memory`` (the servers
    of ``sim.dataflow.memory`` on the flat Vitis signals); AxSIZE and AxBURST are checked."""
    def sig(name):
        return getattr(dut, f"{port.name}_{name}")

    size = (port.data_width // 8).bit_length() - 1
    reads = port.access in ("read", "readwrite")
    writes = port.access in ("write", "readwrite")

    async def serve(ctx):
        reader = ReadServer(memory, port.data_width) if reads else None
        writer = WriteServer(memory, port.data_width) if writes else None
        watched = []
        if reads:
            watched += [sig(n) for n in ("arvalid", "araddr", "arlen", "arsize", "arburst",
                                          "rready")]
        if writes:
            watched += [sig(n) for n in ("awvalid", "awaddr", "awlen", "awsize", "awburst",
                                          "wvalid", "wdata", "wstrb", "wlast", "bready")]
        while True:
            if reads:
                ar_ready, beat = reader.drive()
                ctx.set(sig("arready"), ar_ready)
                if beat is not None:
                    ctx.set(sig("rdata"), beat["data"])
                    ctx.set(sig("rlast"), beat["last"])
                ctx.set(sig("rvalid"), beat is not None)
            if writes:
                aw_ready, w_ready, respond = writer.drive()
                ctx.set(sig("awready"), aw_ready)
                ctx.set(sig("wready"), w_ready)
                ctx.set(sig("bvalid"), respond)
            _, _, *values = await ctx.tick().sample(*watched)
            if reads:
                valid, address, length, ar_size, burst, r_ready, *values = values
                if valid and ar_ready:
                    assert (ar_size, burst) == (size, 1), (port.name, ar_size, burst)
                reader.clock(request=(address, length) if valid and ar_ready else None,
                             taken=beat is not None and bool(r_ready))
            if writes:
                valid, address, length, aw_size, burst, w_valid, data, strobe, last, \
                    b_ready = values
                if valid and aw_ready:
                    assert (aw_size, burst) == (size, 1), (port.name, aw_size, burst)
                writer.clock(request=(address, length) if valid and aw_ready else None,
                             beat=(data, strobe, last) if w_valid and w_ready else None,
                             taken=respond and bool(b_ready))
    return serve


def test_a_run_through_the_rings_and_the_control_registers():
    dut = EngineKernel(**PARAMETERS)
    p = dut.params
    interface = dut.vitis_interface
    memory = CardMemory(1 << 16, seed=5, latency=(0, 5), stall=0.25)
    rng = random.Random(11)
    pointers = {"ring_ptr": 0x1000, "read_ptr": 0x4000, "result_ptr": 0x5000,
                "mask_ptr": 0x6000, "table_ptr": 0x7000, "logits0_ptr": 0x8000,
                "logits1_ptr": 0x8000}
    command_ring, command_entries = 0x40, 3
    completion_ring, completion_entries = 0x400, 3
    command_words = payload_words(p.command_layout)
    record_words = payload_words(p.completion_layout) + 1
    memory.data[0x5000:0x5100] = 0xAB  # read_state records land here, over a marker

    def command(tag, opcode, **fields):
        values = {name: 0 for name, _ in p.command_layout}
        values.update(tag=tag, opcode=opcode, **fields)
        return pack(p.command_layout, 1, **values)[0]

    # Bad opcodes, commands out of phase, and read_state (a record on result_write).
    commands = [command(1, 0), command(2, Opcode.DRAFT_DEPTH),
                command(3, Opcode.READ_STATE, slot=1, address0=0x20),
                command(4, Opcode.READ_STATE, slot=9), command(5, 15),
                command(6, Opcode.VERIFY), command(7, Opcode.BUILD_VERIFY)]
    expected = [(1, 0, Status.BAD_ARGUMENT), (2, 2, Status.BAD_PHASE), (3, 5, Status.OK),
                (4, 5, Status.BAD_SLOT), (5, 15, Status.BAD_ARGUMENT), (6, 4, Status.BAD_PHASE),
                (7, 3, Status.BAD_PHASE)]
    got = []
    counters = {}
    offsets = {row.name: row.offset for row in interface.registers}

    async def host(ctx):
        bus = Host(ctx, dut)
        ctx.set(dut.ap_rst_n, 0)  # reset for the first clocks (active low)
        await ctx.delay(3e-8)
        ctx.set(dut.ap_rst_n, 1)
        await ctx.delay(1e-8 * (RESET_STAGES + 1))  # the kernel leaves reset after its stages
        arguments = {**pointers, "command_ring": command_ring,
                     "command_entries": command_entries, "completion_ring": completion_ring,
                     "completion_entries": completion_entries, "drain": 0,
                     "req_to_token": 0x100, "pool_rows": 4, "context_len": 16,
                     "vocab_size": 32, "cost_per_node": 0x3E4C_CCCD}
        for name, value in arguments.items():
            await bus.write_argument(name, value)
        assert await bus.read(CONTROL) & 0b100  # ap_idle
        await bus.write(CONTROL, 1)  # ap_start
        head = completion_tail = sent = 0
        words = command_words
        for _ in range(PATIENCE):
            # Producer: a descriptor whenever the command ring has room.
            tail = await bus.read_argument("command_tail")
            if sent < len(commands) and (head + 1) % command_entries != tail:
                base = pointers["ring_ptr"] + command_ring + 4 * words * head
                memory.write_words(base, [(commands[sent] >> (32 * k)) & 0xFFFF_FFFF
                                          for k in range(words)])
                head, sent = (head + 1) % command_entries, sent + 1
                await bus.write_argument("command_head", head)
            # Consumer: every record the engine has produced.
            produced = await bus.read_argument("completion_head")
            while completion_tail != produced:
                address = pointers["ring_ptr"] + completion_ring + \
                    4 * record_words * completion_tail
                raw = [int(v) for v in memory.read_words(address, record_words, signed=False)]
                payload = sum(w << (32 * k) for k, w in enumerate(raw[:-1]))
                fields = unpack(p.completion_layout, [payload])
                got.append((int(fields["tag"][0]), int(fields["opcode"][0]),
                            int(fields["status"][0]), raw[-1]))
                completion_tail = (completion_tail + 1) % completion_entries
                if rng.random() < 0.5:  # sometimes late: the ring fills up
                    await ctx.tick().repeat(rng.randrange(20, 200))
                await bus.write_argument("completion_tail", completion_tail)
            if len(got) == len(commands):
                break
        else:
            raise AssertionError(f"{len(got)} of {len(commands)} completions")
        # Persistent: the ring is empty but the kernel runs on until `drain`.
        await ctx.tick().repeat(50)
        control = await bus.read(CONTROL)
        assert control & 0b110 == 0, f"control {control:#x}: done or idle before drain"
        await bus.write_argument("drain", 1)
        for _ in range(100):
            control = await bus.read(CONTROL)
            if control & 0b10:
                break
        else:
            raise AssertionError("no ap_done after drain")
        assert await bus.read_argument("command_tail") == len(commands) % command_entries
        assert await bus.read_argument("completion_head") == \
            len(commands) % completion_entries
        await bus.write(CONTROL, 1 << 4)  # ap_continue
        await ctx.tick().repeat(2)
        assert await bus.read(CONTROL) & 0b100  # idle again
        for index, name in enumerate([*counter_names(p), "past the last"]):
            await bus.write_argument("counter_select", index)
            low = await bus.read_argument("counter_value")
            high = await bus.read(offsets["counter_value"] + 4)
            counters[name] = low | high << 32

    async def clock(ctx):  # ap_clk, 100 MHz
        while True:
            ctx.set(dut.ap_clk, 1)
            await ctx.delay(5e-9)
            ctx.set(dut.ap_clk, 0)
            await ctx.delay(5e-9)

    sim = Simulator(dut)
    sim.add_process(clock)
    sim.add_testbench(host)
    for port in interface.memory_ports:
        sim.add_testbench(_serve_master(dut, port, memory), background=True)
    sim.run()

    assert [(tag, opcode, status) for tag, opcode, status, _ in got] == expected
    assert [sequence for *_, sequence in got] == list(range(1, len(commands) + 1))
    record = memory.read_words(pointers["result_ptr"] + 0x20, 4)
    assert list(record) == [0, 0, -1, 0]  # slot 1: IDLE, seq_len 0, no pool row, no nodes
    # The counter window: one read_state record of an idle slot (no nodes: the record, the
    # sort scores and the work scores), nothing else written or read by the engine; every
    # command's clocks have exactly one cause.
    state_bytes = 4 * (STATE.size + p.max_verify_num + p.max_verify_num + p.node_top_k)
    beats = -(-state_bytes // (p.port_bits // 8))
    assert counters["command.commands"] == len(commands)
    assert counters["result_write.beats"] == beats
    assert counters["result_write.bytes"] == beats * p.port_bits // 8
    assert counters["mask_write.bytes"] == counters["read.bytes"] == 0
    causes = ("busy_cycles", "memory_cycles", "backpressure_cycles")
    assert sum(counters[f"command.{c}"] for c in causes) == counters["command.cycles"] > 0
    assert counters["past the last"] == 0


def test_docs_register_table_matches_the_kernel():
    from boards.vitis import register_table
    from sim.harness import REPO_ROOT

    text = (REPO_ROOT / "docs" / "vitis.md").read_text()
    begin, end = "<!-- engine register table: begin -->\n", "<!-- engine register table: end -->"
    assert begin in text and end in text, "docs/vitis.md lost its engine register table"
    table = text.split(begin, 1)[1].split(end, 1)[0]
    assert table == register_table(vitis_interface(kernel_parameters())), \
        "docs/vitis.md's engine register table is stale: paste boards.vitis.register_table(" \
        "hw.dataflow.vitis_top.vitis_interface(kernel_parameters()))"


def test_ap_rst_n_reaches_the_design_through_registers():
    """``pipelined_reset``: the design is in reset from power-up until ``RESET_STAGES`` clocks
    after ``ap_rst_n`` rises, and a one-clock low pulse on the pin resets it
    ``RESET_STAGES`` clocks later, for one clock (a counter of the ``sync`` domain shows
    it)."""
    from amaranth.hdl import ClockDomain, Module, Signal

    from hw.dataflow.vitis_top import pipelined_reset

    m = Module()
    clk, rst_n, count = Signal(), Signal(), Signal(8)
    m.domains.sync = sync = ClockDomain("sync")
    m.d.comb += [sync.clk.eq(clk), sync.rst.eq(pipelined_reset(m, clk, rst_n))]
    m.d.sync += count.eq(count + 1)
    seen = []

    async def bench(ctx):
        async def edge():
            ctx.set(clk, 1)
            await ctx.delay(5e-9)
            ctx.set(clk, 0)
            await ctx.delay(5e-9)
            seen.append(ctx.get(count))

        ctx.set(rst_n, 1)  # released from the start: the power-up value holds the reset
        for _ in range(RESET_STAGES + 3):
            await edge()
        ctx.set(rst_n, 0)  # a one-clock pulse
        await edge()
        ctx.set(rst_n, 1)
        for _ in range(RESET_STAGES + 2):
            await edge()

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    stages = RESET_STAGES
    # power-up: held for `stages` edges, then counting
    assert seen[:stages + 3] == [0] * stages + [1, 2, 3]
    # the pulse is seen `stages` edges after the edge that sampled it, for one edge
    pulse = seen[stages + 3:]
    assert pulse == [*range(4, 4 + stages), 0, 1, 2]
