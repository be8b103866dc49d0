"""The persistent engine (docs/kernels.md §11, docs/engine.md): commands in, tree state on chip.

``PersistentEngine`` executes the commands ``begin_round``, ``draft_depth``, ``build_verify``,
``load_tree`` (a caller's verify tree in place of ``build_verify``'s), ``verify`` and
``read_state`` bit-exact with ``golden.engine.Engine``. Every slot's cumulative
tree, ``sort_scores``, ``work_scores`` and draft mask stay in K2's on-chip memories
(``hw.kernels.update_state``) for the whole round; the round's batch, its frontier, the verify
tree and its KV slots stay in the engine's own memories. Only model-facing data crosses the
memory ports, each with its ``PortCounters``: argument records, the draft model's top-K, the
verify KV slots and request records in (``read``), the target logits rows the fused verify
visits (``logits``), results out (``result_write``), the verify mask (``mask_write``) and the
round's KV slots into ``req_to_token`` (``table_write``). Two word readers share ``read``
(``ReadShare``): the sequencer's and ``draft_depth``'s probability prefetch
(``ProbaFetch``); the writers take a record or a beat a transfer (``WordWriter.group``).

Every command is a component of its own (``BeginRound``, ``DraftDepth``, ``BuildVerify``,
``LoadTree``, ``Verify``, ``ReadState``), started and finished by the sequencer below and
linked in ``command_links`` to what the commands share (``shared.EngineShared``: the round's
registers and memories, K2, the memory ports' readers and writers); each owns its kernels:
K1's score and sort path (``ScoreSortPipeline``) and K3 with the width policy are
``DraftDepth``'s, K4 (``TreeMask``) is ``BuildVerify``'s, the fused verify (``TreeVerify``),
K7 (``VerifyResult``) and the compaction (``ActiveSlots``) are ``Verify``'s; K2 is the
engine's. The sequencer takes a command, starts its component, applies the round-state
changes its ``done`` reports and completes it; it also runs the watchdog. The build parameters
are ``params.EngineParams``. Commands are checked before they touch anything: a bad command
completes with an error ``Status`` and changes no state.

Memory formats, command and completion fields: docs/engine.md; choices: docs/decisions.md,
"Engine hardware".
"""

import contextlib
from dataclasses import asdict

from amaranth.hdl import Module, Mux, ResetInserter, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.kernels.update_state import UpdateCumuDraftState
from hw.lib.stream import RegisterSlice

from .begin_round import BeginRound
from .build_verify import BuildVerify
from .command_links import (
    drive_begin_round,
    drive_build_verify,
    drive_draft_depth,
    drive_load_tree,
    drive_read_state,
    drive_verify,
    link_begin_round,
    link_build_verify,
    link_draft_depth,
    link_load_tree,
    link_read_state,
    link_verify,
)
from .commands import (
    ONE_BITS,
    ROOT_SCORE_BITS,
    Opcode,
    Phase,
    Status,
    StopReason,
)
from .draft_depth import DraftDepth
from .load_tree import LoadTree
from .memory_ports import (
    PortCounters,
    ReadShare,
    WordReader,
    WordWriter,
    read_port_signature,
    write_port_signature,
)
from .params import EngineParams, counter_layout
from .read_state import ReadState, save_slot_rows
from .shared import EngineShared, RoundMemories, RoundState
from .verify import Verify

__all__ = ["Opcode", "Status", "StopReason", "EngineParams", "PersistentEngine", "ROOT_SCORE_BITS",
           "ONE_BITS", "counter_layout"]


class PersistentEngine(wiring.Component):
    """The persistent engine, see the module.

    Parameters: the fields of :class:`EngineParams`.

    Members
    -------
    command : In(stream.Signature(command_layout))
        Commands, one at a time (the next is taken after the previous one's completion).
    completion : Out(stream.Signature(completion_layout))
        One completion per command, after its memory writes have their responses.
    config : In(config_layout)
        Static settings.
    read : Out(read_port_signature(address_width, port_bits))
    result_write : Out(write_port_signature(address_width, port_bits))
    mask_write : Out(write_port_signature(address_width, port_bits))
    table_write : Out(write_port_signature(address_width, port_bits))
    logits : Out(read_port_signature(address_width, logit_port_bits)).array(logit_ports)
    counters : Out(data.ArrayLayout(counter_layout, len(port_names)))
        Per port, in ``port_names`` order.
    """

    def __init__(self, **parameters):
        self._params = p = EngineParams(**parameters)
        super().__init__({
            "command": In(stream.Signature(p.command_layout)),
            "completion": Out(stream.Signature(p.completion_layout)),
            "config": In(p.config_layout),
            "read": Out(read_port_signature(p.address_width, p.port_bits)),
            "result_write": Out(write_port_signature(p.address_width, p.port_bits)),
            "mask_write": Out(write_port_signature(p.address_width, p.port_bits)),
            "table_write": Out(write_port_signature(p.address_width, p.port_bits)),
            "logits": Out(p.verify.read_port).array(p.logit_ports),
            "counters": Out(data.ArrayLayout(counter_layout, len(p.port_names))),
        })

    @property
    def params(self) -> EngineParams:
        return self._params

    def elaborate(self, platform):
        p = self._params
        m = Module()

        # --- kernels and ports ---------------------------------------------------------------
        # The watchdog's abort resets every kernel and port run (their logic, not their
        # memories) in the clock it cuts a command off.
        abort = Signal()

        def kernel(name, component):
            m.submodules[name] = ResetInserter(abort)(component)
            return component

        k2 = kernel("k2", UpdateCumuDraftState(**asdict(p.k2)))
        # The sequencer's commands to K2's host port pass a register slice: its state decode
        # and K2's address and write-enable logic behind it do not fit one clock together.
        host_slice = kernel("host_slice", RegisterSlice(k2.host_cmd.payload.shape()))
        wiring.connect(m, host_slice.o, k2.host_cmd)
        host_cmd = host_slice.i
        host_idle = ~host_slice.o.valid & host_slice.i.ready  # no command waits for K2
        lanes = p.port_bits // 32  # words of a memory port's beat
        port_args = dict(address_width=p.address_width, port_bits=p.port_bits,
                         max_words=p.max_run_words)
        # the sequencer's reader: up to four runs wait behind the one streaming out
        # (build_verify's table rows)
        reader = kernel("reader", WordReader(**port_args, runs=4))
        read_share = kernel("read_share", ReadShare(address_width=p.address_width,
                                                    port_bits=p.port_bits))
        # a frontier or tree record a transfer, or the rest of a read beat (kv_indices' table
        # prefixes)
        rwriter = kernel("result_writer", WordWriter(**port_args,
                                                     group_words=p.result_group_words))
        mwriter = kernel("mask_writer", WordWriter(**port_args))
        twriter = kernel("table_writer", WordWriter(**port_args, group_words=lanes))
        # draft_depth: K1, K3 and the top-K probabilities' reader beside the sequencer's
        draft = kernel("draft_depth", DraftDepth(p))
        wiring.connect(m, reader.port, read_share.masters[0])
        wiring.connect(m, draft.probas_port, read_share.masters[1])
        wiring.connect(m, read_share.port, wiring.flipped(self.read))
        wiring.connect(m, rwriter.port, wiring.flipped(self.result_write))
        wiring.connect(m, twriter.port, wiring.flipped(self.table_write))
        wiring.connect(m, mwriter.port, wiring.flipped(self.mask_write))
        # the fused verify, K7 and the compaction (the verify command)
        verify = kernel("verify", Verify(p))
        for port in range(p.logit_ports):
            wiring.connect(m, verify.logits[port], wiring.flipped(self.logits[port]))
        # (port, its data beats' channel, busy, bits per beat) in `port_names` order
        counted = {"read": (self.read.r, reader.busy | draft.probas_busy, p.port_bits),
                   "result_write": (self.result_write.w, rwriter.busy, p.port_bits),
                   "mask_write": (self.mask_write.w, mwriter.busy, p.port_bits),
                   "table_write": (self.table_write.w, twriter.busy, p.port_bits),
                   **{f"logits{port}": (self.logits[port].r, verify.tv_busy,
                                        p.logit_port_bits)
                      for port in range(p.logit_ports)}}
        for index, name in enumerate(p.port_names):
            beat, busy, bits = counted[name]
            m.submodules[f"{name}_counters"] = counters = PortCounters(port_bits=bits)
            m.d.comb += [counters.beat.eq(beat.valid & beat.ready), counters.busy.eq(busy)]
            m.d.comb += [self.counters[index][field].eq(getattr(counters, field))
                         for field in ("beats", "bytes", "busy_cycles", "stall_cycles")]

        # --- on-chip round state -------------------------------------------------------------
        rows = RoundMemories.create(m, p)
        r = RoundState.create(p)  # the round in flight
        cmd = Signal(p.command_layout, reset_less=True)  # datapath: docs/timing.md
        status = Signal(3)
        # The completion's fields of one command (0 in every other command's completion)
        stop_reason = Signal(3)  # draft_depth's: why drafting stopped
        next_width = Signal(range(p.max_tree_width + 1))  # and the next width
        rows_read = Signal(32)  # verify's: the logits rows read
        active_count = Signal(16)  # and the requests left active
        b = Signal(range(p.max_batch + 1))  # WATCHDOG_SAVE: the request saved
        step = Signal(range(4))  # and its sub-step
        # Memories are read a clock ahead: by default the batch row ``b``'s slot.
        m.d.comb += rows.slot_rd.addr.eq(rows.row(b))
        c = EngineShared(config=self.config, command=cmd, round=r, rows=rows, k2=k2,
                         host_cmd=host_cmd, host_idle=host_idle, reader=reader, rwriter=rwriter,
                         mwriter=mwriter, twriter=twriter)

        # The watchdog: clocks left to the command in flight (docs/engine.md, "The watchdog")
        remaining = Signal(range(p.watchdog_cycles + 1))
        expired = Signal()  # remaining reached 0 a clock ago
        limit = Mux(self.config.watchdog_cycles != 0, self.config.watchdog_cycles,
                    p.watchdog_cycles)
        # The commands, each a component of its own, started and finished by the sequencer
        # (docs/engine.md, "The hardware"): opcode -> (the sequencer's state while it runs,
        # the component, its drive_* function).
        begin = kernel("begin_round", BeginRound(p))
        read_state = kernel("read_state", ReadState(p))
        load_tree = kernel("load_tree", LoadTree(p))
        build = kernel("build_verify", BuildVerify(p))
        commands = {
            Opcode.BEGIN_ROUND: ("BEGIN_ROUND", begin, link_begin_round, drive_begin_round),
            Opcode.DRAFT_DEPTH: ("DRAFT_DEPTH", draft, link_draft_depth, drive_draft_depth),
            Opcode.BUILD_VERIFY: ("BUILD_VERIFY", build, link_build_verify, drive_build_verify),
            Opcode.VERIFY: ("VERIFY", verify, link_verify, drive_verify),
            Opcode.READ_STATE: ("READ_STATE", read_state, link_read_state, drive_read_state),
            Opcode.LOAD_TREE: ("LOAD_TREE", load_tree, link_load_tree, drive_load_tree),
        }
        for _, component, link, _ in commands.values():
            link(m, component, self.command.payload, c)
        # begin_round's roots into draft_depth's frontier (written only while begin_round runs)
        m.d.comb += [draft.root_at.eq(begin.request), draft.root_en.eq(begin.frontier_en),
                     draft.work_write.eq(k2.work_write)]

        @contextlib.contextmanager
        def running(opcode):
            """The sequencer's state while the command ``opcode`` runs: its component's
            ``done`` completes the command with the status it reports; the body makes the
            round-state changes it reports (``done``'s payload is given)."""
            name, component, _, drive = commands[opcode]
            with m.State(name):
                drive(m, component, c)
                m.d.comb += component.done.ready.eq(1)
                with m.If(component.done.valid):
                    m.d.sync += status.eq(component.done.payload.status)
                    yield component.done.payload
                    m.next = "COMPLETE"

        with m.FSM(name="sequencer") as sequencer:
            with m.State("IDLE"):
                m.d.comb += self.command.ready.eq(1)
                for opcode, (_, component, _, _) in commands.items():
                    m.d.comb += component.start.valid.eq(
                        self.command.valid & (self.command.payload.opcode == opcode))
                with m.If(self.command.valid):
                    m.d.sync += [cmd.eq(self.command.payload), status.eq(Status.OK),
                                 stop_reason.eq(0), next_width.eq(0), active_count.eq(0),
                                 rows_read.eq(0), b.eq(0), step.eq(0), remaining.eq(limit),
                                 expired.eq(0)]
                    with m.Switch(self.command.payload.opcode):
                        for opcode, (name, _, _, _) in commands.items():
                            with m.Case(opcode):
                                m.next = name
                        with m.Default():
                            m.d.sync += status.eq(Status.BAD_ARGUMENT)
                            m.next = "COMPLETE"

            with running(Opcode.BEGIN_ROUND) as done:
                with m.If(done.status == Status.OK):
                    m.d.sync += [r.phase.eq(Phase.DRAFTING), r.batch.eq(cmd.batch_size),
                                 r.in_round.eq(done.slots), rows.bank.eq(~rows.bank),
                                 r.depths_run.eq(0), r.verify_num.eq(cmd.verify_num),
                                 r.depths.eq(cmd.depths), r.depth.eq(1), r.width.eq(1),
                                 r.input_count.eq(1), r.cumu_count.eq(1), r.cumu_last.eq(0)]

            with running(Opcode.DRAFT_DEPTH) as done:
                m.d.sync += [next_width.eq(done.next_width), stop_reason.eq(done.stop_reason)]
                with m.If(done.depth_run):
                    m.d.sync += r.depths_run.eq(r.depths_run + 1)
                with m.If(done.grown):
                    m.d.sync += [r.cumu_count.eq(r.cumu_count + done.nodes),
                                 r.cumu_last.eq(r.cumu_count + done.nodes - 1)]
                    with m.If(done.stop_reason != StopReason.NONE):
                        m.d.sync += [r.phase.eq(Phase.DRAFTED), r.stop_kind.eq(done.stop_reason)]
                    with m.Else():
                        m.d.sync += [r.width.eq(done.next_width), r.depth.eq(r.depth + 1),
                                     r.input_count.eq(r.input_count + done.next_width)]

            with running(Opcode.BUILD_VERIFY) as done:
                m.d.sync += r.verify_size_is(done.verify_size, p)
                with m.If(done.status == Status.OK):
                    m.d.sync += r.phase.eq(Phase.BUILT)

            with running(Opcode.LOAD_TREE) as done:
                with m.If(done.sized):
                    m.d.sync += r.verify_size_is(cmd.verify_num, p)
                with m.If(done.status == Status.OK):
                    m.d.sync += [r.phase.eq(Phase.BUILT), r.depths_run.eq(cmd.depths)]

            with running(Opcode.VERIFY) as done:
                m.d.sync += [active_count.eq(done.active_count), rows_read.eq(done.rows_read)]
                with m.If(done.status == Status.OK):
                    m.d.sync += r.phase.eq(Phase.IDLE)

            with running(Opcode.READ_STATE):
                pass

            with m.State("WATCHDOG_SAVE"):
                # The command was cut off (its kernels reset): the round in flight ends
                # where its last completed command left it.
                m.d.comb += [rows.slot_rd.addr.eq(rows.row(b)), rows.seq_rd.addr.eq(rows.row(b)),
                             rows.pool_rd.addr.eq(rows.row(b))]
                with m.If(save_slot_rows(m, index=b, step=step, batch=r.batch,
                                         slot=rows.slot_rd.data, seq_len=rows.seq_rd.data,
                                         pool=rows.pool_rd.data, phase=r.phase,
                                         cumu_count=r.cumu_count, info_at=rows.info_wr.addr,
                                         info_write=rows.info_wr.data, info_en=rows.info_wr.en,
                                         saved_slot=rows.saving_slot, saved_en=rows.saving)):
                    m.d.sync += [r.phase.eq(Phase.IDLE), r.in_round.eq(0),
                                 status.eq(Status.WATCHDOG), b.eq(0), step.eq(0)]
                    m.next = "COMPLETE"

            with m.State("COMPLETE"):
                out = self.completion.payload
                m.d.comb += [self.completion.valid.eq(1), out.tag.eq(cmd.tag),
                             out.opcode.eq(cmd.opcode), out.status.eq(status),
                             out.next_tree_width.eq(next_width),
                             out.stop_reason.eq(stop_reason), out.verify_size.eq(r.vn),
                             out.active_count.eq(active_count), out.rows_read.eq(rows_read)]
                with m.If(self.completion.ready):
                    m.next = "IDLE"

        waiting = sequencer.ongoing("IDLE") | sequencer.ongoing("COMPLETE") \
            | sequencer.ongoing("WATCHDOG_SAVE")
        m.d.sync += abort.eq(0)
        with m.If(~waiting):
            m.d.sync += [remaining.eq(remaining - (remaining != 0)), expired.eq(remaining == 0)]
            with m.If(expired):  # after the command's own statements: this transition wins
                m.d.sync += [sequencer.state.eq(sequencer.encoding["WATCHDOG_SAVE"]),
                             abort.eq(1), b.eq(0), step.eq(0), expired.eq(0)]
        return m
