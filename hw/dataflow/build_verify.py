"""The engine's ``build_verify`` command (``hw.dataflow.engine.PersistentEngine``; what each
state does: docs/engine.md): K4 on every request's nodes, the tree records, mask bytes, indptrs
and ``kv_indices``, ``req_to_token`` last.

The verify set's size ``n`` is ``min(cumu_count, clamp(verify_num))`` (0 for an empty batch).
A refused ``build_verify`` (``BAD_PHASE`` outside a drafting round with a depth run,
``BAD_ARGUMENT`` for the reserved mask mode or a tree K4 finds invalid) leaves the round as it
was; an accepted one leaves it ``BUILT``.
"""

from dataclasses import asdict

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.kernels.tree_mask import TreeMask, TreeMaskMode
from hw.kernels.update_state import Region

from .commands import Phase, Status, clamp_verify_num
from .load_tree import verify_tree_layout
from .mask_bytes import MaskBytes
from .memory_ports import reader_control_signature, writer_control_signature
from .records import TREE
from .runs import (
    TABLE_READY,
    copy_group,
    copy_words,
    finish,
    idle_state,
    store_locs,
    table_address,
)

__all__ = ["BuildVerify", "RequestSizes"]


class BuildVerify(wiring.Component):
    """``build_verify`` (see the module): started by a ``start`` transfer, finished by a
    ``done`` transfer offered in the clock the command ends. It owns K4 (``TreeMask``), the
    mask bytes (``MaskBytes``) and the indptrs; the round's memories and the engine's ports
    it reaches through the members below, which the engine connects while the command runs.

    Parameters
    ----------
    params : EngineParams
        The engine's build.

    Members
    -------
    start : In(stream.Signature({"mode", "locs", "trees", "mask", "indptrs", "kv_indices"}))
        The command's ``tree_mask_mode`` and byte addresses: the verify forward's KV slots
        (``address0``), the tree records (``address1``), the mask (``address2``), the three
        indptr arrays (``address3``) and ``kv_indices`` (``address4``).
    done : Out(stream.Signature({"status": 3, "verify_size": ...}))
        The ``Status`` and the verify set's size ``n`` (whatever the status). On ``OK`` the
        round is ``BUILT``.
    phase : In(2)
        The round in flight's ``Phase``.
    depths_run : In(8)
        Depths the round has drafted.
    batch : In(range(max_batch + 1))
        The round's requests.
    verify_num : In(signed(32))
        The round's ``verify_num``.
    cumu_count, cumu_last : In
        The round's node count, and the count less one (signed: -1 for none).
    config : In(config_layout)
        The engine's settings (``req_to_token``, ``context_len``).
    slot_at, seq_at, pool_at, k4_seq_at, mask_seq_at : Out(range(max_batch + 2))
        Batch rows read from the round's bank: the slot (K2's reads), ``seq_len`` (three
        readers: the sizes and the table rows read and written; K4's feed and the prefixes
        copied into ``kv_indices``; the mask's row width) and ``req_pool_index``; their
        words on the inputs below a clock later.
    slot, seq_len, pool, k4_seq_len, mask_seq_len : In
    reader : Out(reader_control_signature(...))
        The sequencer's reader (``read``).
    results : Out(writer_control_signature(..., result_group_words))
        The result writer (``result_write``): tree records, indptrs, ``kv_indices``.
    masks : Out(writer_control_signature(...))
        The mask writer (``mask_write``).
    table : Out(writer_control_signature(..., lanes))
        The table writer (``table_write``): ``req_to_token``.
    k2_cmd : Out(stream.Signature(params.k2.host_command_layout))
        K2's host port: node reads.
    k2_rsp : In(stream.Signature(params.k2.host_response_layout))
        Their answers.
    locs_at, locs_en : Out
        Index and enable of a group of KV slots written into ``verify_cache_locs`` and K7's
        copy (the group is ``reader.group``'s payload).
    locs_read_at : Out(range(max_batch * max_verify_num))
        Index of the first of ``lanes`` KV slots read out of ``verify_cache_locs``...
    locs_read : In(data.ArrayLayout(32, lanes))
        ... and those slots, a clock later.
    tree_write : Out(verify_tree_layout), tree_at, tree_en
        A tree node into ``verify_tree``.
    """

    def __init__(self, params):
        self._params = p = params
        lanes = p.port_bits // 32
        rows = range(p.max_batch + 2)
        nodes = range(p.max_batch * p.max_verify_num)
        a = p.address_width
        super().__init__({
            "start": In(stream.Signature(data.StructLayout({
                "mode": 2, "locs": a, "trees": a, "mask": a, "indptrs": a, "kv_indices": a}))),
            "done": Out(stream.Signature(data.StructLayout({
                "status": 3, "verify_size": range(p.max_verify_num + 1)}))),
            "phase": In(2),
            "depths_run": In(8),
            "batch": In(range(p.max_batch + 1)),
            "verify_num": In(signed(32)),
            "cumu_count": In(range(p.max_node_count + p.max_candidates + 1)),
            "cumu_last": In(range(-1, p.max_node_count + p.max_candidates)),
            "config": In(p.config_layout),
            "slot_at": Out(rows), "seq_at": Out(rows), "pool_at": Out(rows),
            "k4_seq_at": Out(rows), "mask_seq_at": Out(rows),
            "slot": In(range(p.max_batch)), "seq_len": In(32), "pool": In(32),
            "k4_seq_len": In(32), "mask_seq_len": In(32),
            "reader": Out(reader_control_signature(a, p.max_run_words, lanes)),
            "results": Out(writer_control_signature(a, p.max_run_words, p.result_group_words)),
            "masks": Out(writer_control_signature(a, p.max_run_words)),
            "table": Out(writer_control_signature(a, p.max_run_words, lanes)),
            "k2_cmd": Out(stream.Signature(p.k2.host_command_layout)),
            "k2_rsp": In(stream.Signature(p.k2.host_response_layout)),
            "locs_at": Out(nodes), "locs_en": Out(1),
            "locs_read_at": Out(nodes), "locs_read": In(data.ArrayLayout(32, lanes)),
            "tree_write": Out(verify_tree_layout), "tree_at": Out(nodes), "tree_en": Out(1),
        })

    def elaborate(self, platform):
        p = self._params
        MAXB, MAXV = p.max_batch, p.max_verify_num
        lanes = p.port_bits // 32
        m = Module()
        m.submodules.k4 = k4 = TreeMask(**asdict(p.k4))
        m.submodules.mask_bytes = mask_bytes = MaskBytes(
            mask_lanes=p.mask_lanes, max_columns=p.max_seq_len + MAXV)
        wiring.connect(m, mask_bytes.words, wiring.flipped(self.masks.words))
        m.submodules.sizes = sizes = RequestSizes(p)
        # entry b of each indptr array: SIZES writes them, INDPTR streams them out
        indptr_layout = data.StructLayout({"qo": range(MAXB * MAXV + 1),
                                           "kv": range(p.max_run_words + 1),
                                           "mask": range(p.max_run_words * 4 + 1)})
        m.submodules.indptrs = indptrs = Memory(shape=indptr_layout, depth=MAXB + 1, init=[])
        indptr_rd, indptr_wr = indptrs.read_port(), indptrs.write_port()

        command = Signal.like(self.start.payload, reset_less=True)  # datapath
        results, table = self.results, self.table
        vn = Signal(range(MAXV + 1))  # n
        vn_last = Signal(range(-1, MAXV), init=-1)  # n - 1
        nodes = Signal(range(MAXB * MAXV + 1))  # batch * n, a clock behind n
        b = Signal(range(MAXB + 2))  # request (up to B + 1: the indptrs' entries)
        i = Signal(range(max(p.max_node_count + p.max_candidates, p.max_run_words) + 2))
        j = Signal(range(TABLE_READY + 5))  # sub-step (INDPTR: the array)
        mask_total = Signal(range(p.max_run_words * 4 + 1))  # bytes of the mask array
        kv_total = Signal(range(p.max_run_words + 1))  # words of kv_indices
        running = Signal(range(MAXB * MAXV + 1))  # qo_indptr's running sum
        invalid = Signal()  # K4 found the tree invalid
        k4_cmd_sent = Signal()
        seq_b = Signal(range(MAXB + 1))  # K4's seq_lens feed; SIZES: indptr entries written
        mask_b = Signal(range(MAXB + 1))  # request of the mask rows arriving
        mask_rows = Signal(range(MAXV + 1))
        flushed = Signal()
        storing = Signal()  # the KV slots are being read, a beat a clock into the banks
        stored = Signal(range(MAXB * MAXV + p.port_bits // 32))  # KV slots stored
        trees = Signal(range(MAXB * MAXV + 1))  # tree records written
        rsp_x = Signal(range(p.max_node_count + 1))  # node answers forwarded in the request
        ahead = Signal(range(MAXB + 1))  # KV: request whose row is read next
        ahead_step = Signal(range(TABLE_READY + 1))
        m.d.sync += nodes.eq(self.batch * vn)
        m.d.comb += [sizes.seq_len.eq(self.seq_len), sizes.vn.eq(vn), sizes.mode.eq(command.mode)]
        # req_to_token[pool, offset]: KV's row starts (offset 0), TABLE's rows past seq_len
        in_table = Signal()
        table_row = table_address(m, p, self.config, pool=self.pool,
                                  offset=Mux(in_table, self.seq_len, 0), name="verify_table")

        def end(status, size=vn):
            finish(m, self.done, status=status, verify_size=size)

        with m.FSM(name="build_verify"):
            idle_state(m, self.start, command, clear=(b, i, j))

            with m.State("CHECK"):
                clamped = clamp_verify_num(self.verify_num, MAXV)
                size = Mux(self.batch == 0, 0,
                           Mux(self.cumu_count < clamped, self.cumu_count, clamped))
                m.d.sync += [vn.eq(size), vn_last.eq(size - 1), invalid.eq(0),
                             mask_total.eq(0), kv_total.eq(0), running.eq(0), seq_b.eq(0)]
                with m.If(((self.phase != Phase.DRAFTING) & (self.phase != Phase.DRAFTED))
                          | (self.depths_run == 0)):
                    end(Status.BAD_PHASE, size)
                with m.Elif(command.mode == 3):
                    end(Status.BAD_ARGUMENT, size)
                with m.Else():
                    m.next = "LOCS_START"

            with m.State("LOCS_START"):
                # The verify forward's KV slots, kept for kv_indices, req_to_token and K7: read
                # while the batch is sized and K4 runs (see `storing` below).
                m.d.comb += [self.reader.start.eq(1), self.reader.address.eq(command.locs),
                             self.reader.count.eq(self.batch * vn)]
                m.d.sync += [storing.eq(1), stored.eq(0)]
                m.next = "SIZES"

            with m.State("SIZES"):
                # Every request's kv_indices words and mask bytes, one request a clock into
                # the pipeline; their running sums (and n's, qo_indptr's) are the indptrs'
                # entries, the last ones (entry B) the totals.
                issuing = b < self.batch
                m.d.comb += [self.seq_at.eq(b), sizes.issue.eq(issuing),
                             indptr_wr.addr.eq(seq_b), indptr_wr.data.qo.eq(running),
                             indptr_wr.data.kv.eq(kv_total), indptr_wr.data.mask.eq(mask_total)]
                with m.If(issuing):
                    m.d.sync += b.eq(b + 1)
                with m.If(sizes.valid):
                    m.d.comb += indptr_wr.en.eq(1)
                    m.d.sync += [running.eq(running + vn), kv_total.eq(kv_total + sizes.kv),
                                 mask_total.eq(mask_total + sizes.mask), seq_b.eq(seq_b + 1)]
                with m.If(~issuing & ~sizes.busy):
                    m.d.comb += [indptr_wr.en.eq(1),
                                 results.start.eq(1), results.address.eq(command.trees),
                                 results.count.eq(nodes * p.tree_words),
                                 self.masks.start.eq(1), self.masks.address.eq(command.mask),
                                 self.masks.count.eq((mask_total + 3) >> 2)]
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0), trees.eq(0), k4_cmd_sent.eq(0),
                                 seq_b.eq(0), mask_b.eq(0), mask_rows.eq(0), flushed.eq(0),
                                 rsp_x.eq(0)]
                    m.next = "K4"

            with m.State("K4"):
                # (a) the command, then every request's nodes read out of K2 and its seq_len
                kc = k4.cmd.payload
                m.d.comb += [k4.cmd.valid.eq(~k4_cmd_sent), kc.batch_size.eq(self.batch),
                             kc.cumu_count.eq(self.cumu_count), kc.verify_num.eq(self.verify_num),
                             kc.tree_mask_mode.eq(command.mode)]
                with m.If(k4.cmd.valid & k4.cmd.ready):
                    m.d.sync += k4_cmd_sent.eq(1)
                host = self.k2_cmd.payload
                advance = self.k2_cmd.ready & (i == self.cumu_last)
                m.d.comb += [self.slot_at.eq(b + advance), host.slot.eq(self.slot),
                             host.region.eq(Region.NODE), host.index.eq(i),
                             self.k2_cmd.valid.eq(k4_cmd_sent & (b < self.batch))]
                with m.If(self.k2_cmd.valid & self.k2_cmd.ready):
                    m.d.sync += i.eq(Mux(i == self.cumu_last, 0, i + 1))
                    with m.If(i == self.cumu_last):
                        m.d.sync += b.eq(b + 1)
                node, answer = k4.nodes.payload, self.k2_rsp.payload
                m.d.comb += [k4.nodes.valid.eq(self.k2_rsp.valid),
                             self.k2_rsp.ready.eq(k4.nodes.ready),
                             node.token.eq(answer.tok), node.score.eq(answer.score),
                             node.prev.eq(answer.prev), node.first.eq(rsp_x == 0),
                             node.last.eq(rsp_x == self.cumu_last)]
                with m.If(k4.nodes.valid & k4.nodes.ready):
                    m.d.sync += rsp_x.eq(Mux(rsp_x == self.cumu_last, 0, rsp_x + 1))
                m.d.comb += [self.k4_seq_at.eq(seq_b + (k4.seq_lens.valid & k4.seq_lens.ready)),
                             k4.seq_lens.valid.eq(k4_cmd_sent & (seq_b < self.batch)),
                             k4.seq_lens.payload.seq_len.eq(self.k4_seq_len)]
                with m.If(k4.seq_lens.valid & k4.seq_lens.ready):
                    m.d.sync += seq_b.eq(seq_b + 1)
                # (b) tree records (TREE), a record a transfer
                record = k4.tree.payload
                fields = {"retrive_index": record.retrive_index,
                          "retrive_next_token": record.next_token,
                          "retrive_next_sibling": record.next_sibling,
                          "position": record.position, "draft_token": record.draft_token}
                group = results.group
                m.d.comb += [group.valid.eq(k4.tree.valid), group.payload.count.eq(p.tree_words),
                             k4.tree.ready.eq(group.ready)]
                for index, value in enumerate(TREE.in_order(fields)):
                    m.d.comb += group.payload.data[index].eq(value)
                m.d.comb += [self.tree_at.eq(trees), self.tree_write.token.eq(record.draft_token),
                             self.tree_write.index.eq(record.retrive_index),
                             self.tree_write.next.eq(record.next_token),
                             self.tree_write.sibling.eq(record.next_sibling),
                             self.tree_en.eq(k4.tree.valid & k4.tree.ready)]
                with m.If(k4.tree.valid & k4.tree.ready):
                    m.d.sync += trees.eq(trees + 1)
                    with m.If(record.invalid):
                        m.d.sync += invalid.eq(1)
                # (c) mask rows into bytes; the row width of the request they belong to (its
                # seq_len read a clock ahead: the next request's first row may follow the last
                # one at once)
                mask = k4.mask
                row_taken = mask.valid & mask.ready & mask.payload.row_last
                request_done = row_taken & (mask_rows == vn_last)
                m.d.comb += [mask_bytes.mask.valid.eq(mask.valid),
                             mask_bytes.mask.payload.eq(mask.payload),
                             mask.ready.eq(mask_bytes.mask.ready),
                             self.mask_seq_at.eq(mask_b + request_done),
                             mask_bytes.packed.eq(command.mode
                                                  == TreeMaskMode.QLEN_ONLY_BITPACKING),
                             mask_bytes.columns.eq(Mux(command.mode == TreeMaskMode.FULL_MASK,
                                                       self.mask_seq_len + vn, vn))]
                with m.If(row_taken):
                    m.d.sync += mask_rows.eq(Mux(mask_rows == vn_last, 0, mask_rows + 1))
                    with m.If(mask_rows == vn_last):
                        m.d.sync += mask_b.eq(mask_b + 1)
                with m.If((mask_b == self.batch) & ~flushed):
                    m.d.comb += mask_bytes.flush.eq(1)
                    m.d.sync += flushed.eq(1)
                with m.If(flushed & (trees == nodes) & results.can_start & ~storing
                          & self.masks.can_start & (b == self.batch) & (seq_b == self.batch)):
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0)]
                    m.next = "INDPTR"

            with m.State("INDPTR"):
                # qo_indptr, kv_indptr, mask_indptr (B + 1 words each; j is the array)
                with m.If(i == 0):
                    m.d.comb += [results.start.eq(1), results.address.eq(command.indptrs),
                                 results.count.eq(3 * (self.batch + 1))]
                    m.d.sync += i.eq(1)
                with m.Else():
                    entry = indptr_rd.data
                    with m.If(copy_words(m, step=i, at=1, index=b, count=self.batch + 1,
                                         addr=indptr_rd.addr,
                                         data=Array([entry.qo, entry.kv, entry.mask])[j],
                                         writer=results, address=lambda x: x)):
                        m.d.sync += [j.eq(j + 1), i.eq(1), b.eq(0)]
                        with m.If(j == 2):
                            m.d.sync += [j.eq(0), i.eq(0), ahead.eq(0), ahead_step.eq(0)]
                            m.next = "KV"

            with m.State("KV"):
                # kv_indices: per request the table row's first seq_len slots, then its
                # verify KV slots (which TABLE writes to the row after them). The rows are read
                # ahead (request `ahead`; its address ready at sub-step TABLE_READY), as many
                # as the reader holds, while request b's words go out.
                m.d.comb += [self.pool_at.eq(ahead), self.seq_at.eq(ahead),
                             self.k4_seq_at.eq(b)]
                with m.If(ahead < self.batch):
                    with m.If(ahead_step < TABLE_READY):
                        m.d.sync += ahead_step.eq(ahead_step + 1)
                    with m.Elif(self.reader.can_start):
                        m.d.comb += [self.reader.start.eq(1), self.reader.count.eq(self.seq_len),
                                     self.reader.address.eq(table_row)]
                        m.d.sync += [ahead.eq(ahead + 1), ahead_step.eq(0)]
                with m.If(j == 0):
                    with m.If(results.can_start):
                        m.d.comb += [results.start.eq(1), results.address.eq(command.kv_indices),
                                     results.count.eq(kv_total)]
                        m.d.sync += j.eq(1)
                with m.Elif(b == self.batch):
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0)]
                    m.next = "TABLE"
                with m.Elif(j == 1):  # request b's seq_len is read
                    m.d.sync += [j.eq(2), i.eq(0)]
                with m.Elif(j == 2):  # its row's prefix, the rest of a beat a clock
                    source, sink = self.reader.group, results.group
                    m.d.comb += [sink.valid.eq(source.valid),
                                 sink.payload.count.eq(source.payload.count),
                                 source.ready.eq(sink.ready)]
                    for index, word in enumerate(source.payload.data):
                        m.d.comb += sink.payload.data[index].eq(word)
                    with m.If(source.valid & source.ready):
                        m.d.sync += i.eq(i + source.payload.count)
                    with m.If(i == self.k4_seq_len):
                        m.d.comb += [sink.valid.eq(0), source.ready.eq(0)]
                        m.d.sync += [j.eq(3), i.eq(0)]
                with m.Else():  # then its verify slots
                    with m.If(copy_group(m, step=j, at=3, index=i, count=vn,
                                         read_at=self.locs_read_at, read_group=self.locs_read,
                                         writer=results, lanes=lanes,
                                         address=lambda x: b * vn + x)):
                        m.d.sync += [b.eq(b + 1), j.eq(1), i.eq(0)]

            with m.State("TABLE"):
                # req_to_token[pool, seq_len + x] = verify slot x (only for a valid tree); the
                # command ends once every write has its response
                m.d.comb += [self.pool_at.eq(b), self.seq_at.eq(b), in_table.eq(1)]
                landed = ~results.busy & ~self.masks.busy & ~table.busy
                with m.If(invalid):
                    with m.If(landed):
                        end(Status.BAD_ARGUMENT)
                with m.Elif(b == self.batch):
                    with m.If(landed):
                        end(Status.OK)
                with m.Elif(j < TABLE_READY):  # the row's pool and seq_len, then its address
                    m.d.sync += j.eq(j + 1)
                with m.Elif(j == TABLE_READY):
                    with m.If(table.can_start):
                        m.d.comb += [table.start.eq(1), table.count.eq(vn),
                                     table.address.eq(table_row)]
                        m.d.sync += [j.eq(TABLE_READY + 1), i.eq(0)]
                with m.Else():
                    with m.If(copy_group(m, step=j, at=TABLE_READY + 1, index=i, count=vn,
                                         read_at=self.locs_read_at, read_group=self.locs_read,
                                         writer=table, lanes=lanes,
                                         address=lambda x: b * vn + x)):
                        m.d.sync += [b.eq(b + 1), j.eq(0), i.eq(0)]

        # The KV slots' read (started in LOCS_START) goes on through SIZES and K4, which do not
        # use the reader: its groups into the verify tree's banks as they come.
        with m.If(storing):
            with m.If(store_locs(m, self, index=stored)):
                m.d.sync += storing.eq(0)
        return m


class RequestSizes(wiring.Component):
    """A free-running pipeline from a request's ``seq_len`` to its ``kv`` (``kv_indices``
    words, ``seq_len + n``) and ``mask`` (tree-mask bytes, ``n`` rows of the mode's width).

    A block RAM's output into the row width, a multiply and a running sum do not fit a clock:
    each gets one.

    Parameters
    ----------
    params : EngineParams
        The engine's build.

    Members
    -------
    issue : In(1)
        A request's ``seq_len`` row is read this clock...
    seq_len : In(32)
        ... and its word is here a clock later.
    vn : In(range(max_verify_num + 1))
        ``n``, the verify set's size.
    mode : In(2)
        The ``TreeMaskMode``.
    valid : Out(1)
        ``kv`` and ``mask`` are those of a request issued :attr:`LATENCY` clocks ago.
    busy : Out(1)
        A request is in the pipeline.
    kv, mask : Out
    """

    #: Clocks from ``issue`` to ``valid``.
    LATENCY = 4

    def __init__(self, params):
        super().__init__({
            "issue": In(1), "seq_len": In(32), "vn": In(range(params.max_verify_num + 1)),
            "mode": In(2), "valid": Out(1), "busy": Out(1),
            "kv": Out(range(params.max_run_words + 1)),
            "mask": Out(range(params.max_run_words * 4 + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        issued = Signal(self.LATENCY)
        seq = Signal(32)
        kv = Signal.like(self.kv)
        row_bytes = Signal.like(self.mask)
        width = Mux(self.mode == TreeMaskMode.FULL_MASK, seq + self.vn,
                    Mux(self.mode == TreeMaskMode.QLEN_ONLY, self.vn, (self.vn + 7) >> 3))
        m.d.comb += [self.valid.eq(issued[-1]), self.busy.eq(issued.any())]
        m.d.sync += [issued.eq(Cat(self.issue, issued[:-1])), seq.eq(self.seq_len),
                     kv.eq(seq + self.vn), row_bytes.eq(width),
                     self.kv.eq(kv), self.mask.eq(self.vn * row_bytes)]
        return m

