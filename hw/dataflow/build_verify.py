"""The engine's ``build_verify`` command as states of its sequencer
(``hw.dataflow.engine.PersistentEngine``; what each state does: docs/engine.md): K4 on every
request's nodes, the tree records, mask bytes, indptrs and ``kv_indices``, ``req_to_token``
last."""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Mux, Signal

from hw.kernels.tree_mask import TreeMaskMode
from hw.kernels.update_state import Region

from .commands import Phase, Status
from .records import TREE
from .runs import TABLE_READY, copy_group, copy_words, table_address, verify_locs_states

__all__ = ["build_verify_states"]

SIZES_LATENCY = 4


def build_verify_states(m, c):
    """The sequencer states of ``build_verify``: K4 on every request's nodes, the tree records,
    mask bytes, indptrs and ``kv_indices``, ``req_to_token`` last.

    ``c`` holds the engine's shared signals, memories and kernels (``PersistentEngine.elaborate``).
    """
    with m.State("VERIFY_CHECK"):
        clamped = c.clamp_verify(c.verify_num)
        size = Mux(c.cumu_count < clamped, c.cumu_count, clamped)
        vn = Mux(c.batch == 0, 0, size)
        m.d.sync += [*c.verify_size_is(vn), c.mode.eq(c.cmd.tree_mask_mode),
                     c.invalid.eq(0), c.mask_total.eq(0), c.kv_total.eq(0), c.running.eq(0),
                     c.seq_b.eq(0)]
        with m.If(((c.phase != Phase.DRAFTING) & (c.phase != Phase.DRAFTED))
                  | (c.depths_run == 0)):
            m.d.sync += c.status.eq(Status.BAD_PHASE)
            m.next = "COMPLETE"
        with m.Elif(c.cmd.tree_mask_mode == 3):
            m.d.sync += c.status.eq(Status.BAD_ARGUMENT)
            m.next = "COMPLETE"
        with m.Else():
            m.next = "VERIFY_LOCS_START"

    # The verify forward's KV slots, kept for kv_indices, req_to_token and K7.
    verify_locs_states(m, c, name="VERIFY_LOCS", address=c.cmd.address0, then="VERIFY_SIZES")

    sizes = _request_sizes(m, c)
    with m.State("VERIFY_SIZES"):
        # Every request's kv_indices words and mask bytes, one request a clock into the
        # pipeline; their running sums (and n's, qo_indptr's) are the indptrs' entries, the
        # last ones (entry B) the totals.
        issuing = c.b < c.batch
        m.d.comb += [c.seq_rd.addr.eq(c.row(c.b)), sizes.issue.eq(issuing),
                     c.indptr_wr.addr.eq(c.seq_b), c.indptr_wr.data.qo.eq(c.running),
                     c.indptr_wr.data.kv.eq(c.kv_total), c.indptr_wr.data.mask.eq(c.mask_total)]
        with m.If(issuing):
            m.d.sync += c.b.eq(c.b + 1)
        with m.If(sizes.valid):
            m.d.comb += c.indptr_wr.en.eq(1)
            m.d.sync += [c.running.eq(c.running + c.vn), c.kv_total.eq(c.kv_total + sizes.kv),
                         c.mask_total.eq(c.mask_total + sizes.mask), c.seq_b.eq(c.seq_b + 1)]
        with m.If(~issuing & ~sizes.busy):
            m.d.comb += [c.indptr_wr.en.eq(1),
                         c.rwriter.start.eq(1), c.rwriter.address.eq(c.cmd.address1),
                         c.rwriter.count.eq(c.verify_nodes * c.p.tree_words),
                         c.mwriter.start.eq(1), c.mwriter.address.eq(c.cmd.address2),
                         c.mwriter.count.eq((c.mask_total + 3) >> 2)]
            m.d.sync += [c.b.eq(0), c.i.eq(0), c.j.eq(0), c.trees.eq(0),
                         c.k4_cmd_sent.eq(0), c.seq_b.eq(0), c.mask_b.eq(0),
                         c.mask_rows.eq(0), c.flushed.eq(0), c.rsp_x.eq(0)]
            m.next = "VERIFY_K4"

    with m.State("VERIFY_K4"):
        # (a) the command, then every request's nodes read out of K2 and its seq_len
        kc = c.k4.cmd.payload
        m.d.comb += [c.k4.cmd.valid.eq(~c.k4_cmd_sent), kc.batch_size.eq(c.batch),
                     kc.cumu_count.eq(c.cumu_count), kc.verify_num.eq(c.verify_num),
                     kc.tree_mask_mode.eq(c.mode)]
        with m.If(c.k4.cmd.valid & c.k4.cmd.ready):
            m.d.sync += c.k4_cmd_sent.eq(1)
        host = c.host_cmd.payload
        advance = c.host_cmd.ready & (c.i == c.cumu_last)
        m.d.comb += [c.slot_rd.addr.eq(c.row(c.b + advance)), host.slot.eq(c.slot_rd.data),
                     host.region.eq(Region.NODE), host.index.eq(c.i),
                     c.host_cmd.valid.eq(c.k4_cmd_sent & (c.b < c.batch))]
        with m.If(c.host_cmd.valid & c.host_cmd.ready):
            m.d.sync += c.i.eq(Mux(c.i == c.cumu_last, 0, c.i + 1))
            with m.If(c.i == c.cumu_last):
                m.d.sync += c.b.eq(c.b + 1)
        node = c.k4.nodes.payload
        answer = c.k2.host_rsp.payload
        m.d.comb += [c.k4.nodes.valid.eq(c.k2.host_rsp.valid),
                     c.k2.host_rsp.ready.eq(c.k4.nodes.ready),
                     node.token.eq(answer.tok), node.score.eq(answer.score),
                     node.prev.eq(answer.prev), node.first.eq(c.rsp_x == 0),
                     node.last.eq(c.rsp_x == c.cumu_last)]
        with m.If(c.k4.nodes.valid & c.k4.nodes.ready):
            m.d.sync += c.rsp_x.eq(Mux(c.rsp_x == c.cumu_last, 0, c.rsp_x + 1))
        m.d.comb += [c.seq_k4_rd.addr.eq(c.row(c.seq_b + (c.k4.seq_lens.valid
                                                    & c.k4.seq_lens.ready))),
                     c.k4.seq_lens.valid.eq(c.k4_cmd_sent & (c.seq_b < c.batch)),
                     c.k4.seq_lens.payload.seq_len.eq(c.seq_k4_rd.data)]
        with m.If(c.k4.seq_lens.valid & c.k4.seq_lens.ready):
            m.d.sync += c.seq_b.eq(c.seq_b + 1)
        # (b) tree records (TREE), a record a transfer
        record = c.k4.tree.payload
        fields = {"retrive_index": record.retrive_index, "retrive_next_token": record.next_token,
                  "retrive_next_sibling": record.next_sibling, "position": record.position,
                  "draft_token": record.draft_token}
        group = c.rwriter.group
        m.d.comb += [group.valid.eq(c.k4.tree.valid), group.payload.count.eq(c.p.tree_words),
                     c.k4.tree.ready.eq(group.ready)]
        for index, value in enumerate(TREE.in_order(fields)):
            m.d.comb += group.payload.data[index].eq(value)
        m.d.comb += [c.vtree_wr.addr.eq(c.trees), c.vtree_wr.data.token.eq(record.draft_token),
                     c.vtree_wr.data.index.eq(record.retrive_index),
                     c.vtree_wr.data.next.eq(record.next_token),
                     c.vtree_wr.data.sibling.eq(record.next_sibling),
                     c.vtree_wr.en.eq(c.k4.tree.valid & c.k4.tree.ready)]
        with m.If(c.k4.tree.valid & c.k4.tree.ready):
            m.d.sync += c.trees.eq(c.trees + 1)
            with m.If(record.invalid):
                m.d.sync += c.invalid.eq(1)
        # (c) mask rows into bytes; the row width of the request they belong to (its seq_len
        # read a clock ahead: the next request's first row may follow the last one at once)
        request_done = (c.k4.mask.valid & c.k4.mask.ready & c.k4.mask.payload.row_last
                        & (c.mask_rows == c.vn_last))
        m.d.comb += [c.mask_bytes.mask.valid.eq(c.k4.mask.valid),
                     c.mask_bytes.mask.payload.eq(c.k4.mask.payload),
                     c.k4.mask.ready.eq(c.mask_bytes.mask.ready),
                     c.seq_mask_rd.addr.eq(c.row(c.mask_b + request_done)),
                     c.mask_bytes.packed.eq(c.mode == TreeMaskMode.QLEN_ONLY_BITPACKING),
                     c.mask_bytes.columns.eq(Mux(c.mode == TreeMaskMode.FULL_MASK,
                                               c.seq_mask_rd.data + c.vn, c.vn))]
        with m.If(c.k4.mask.valid & c.k4.mask.ready & c.k4.mask.payload.row_last):
            m.d.sync += c.mask_rows.eq(Mux(c.mask_rows == c.vn_last, 0, c.mask_rows + 1))
            with m.If(c.mask_rows == c.vn_last):
                m.d.sync += c.mask_b.eq(c.mask_b + 1)
        with m.If((c.mask_b == c.batch) & ~c.flushed):
            m.d.comb += c.mask_bytes.flush.eq(1)
            m.d.sync += c.flushed.eq(1)
        with m.If(c.flushed & (c.trees == c.verify_nodes) & ~c.rwriter.busy & ~c.mwriter.busy
                  & (c.b == c.batch) & (c.seq_b == c.batch)):
            m.d.sync += [c.b.eq(0), c.i.eq(0), c.j.eq(0)]
            m.next = "VERIFY_INDPTR"

    with m.State("VERIFY_INDPTR"):
        # qo_indptr, kv_indptr, mask_indptr (B + 1 words each; j is the array)
        with m.If(c.i == 0):
            m.d.comb += [c.rwriter.start.eq(1), c.rwriter.address.eq(c.cmd.address3),
                         c.rwriter.count.eq(3 * (c.batch + 1))]
            m.d.sync += c.i.eq(1)
        with m.Else():
            entry = c.indptr_rd.data
            indptr = SimpleNamespace(addr=c.indptr_rd.addr,
                                     data=Array([entry.qo, entry.kv, entry.mask])[c.j])
            with m.If(copy_words(m, step=c.i, at=1, index=c.b, count=c.batch + 1, read=indptr,
                                 writer=c.rwriter, address=lambda x: x)):
                m.d.sync += [c.j.eq(c.j + 1), c.i.eq(1), c.b.eq(0)]
                with m.If(c.j == 2):
                    m.d.sync += [c.j.eq(0), c.i.eq(0)]
                    m.next = "VERIFY_KV"

    kv_row = table_address(m, c, pool=c.pool_rd.data, offset=0, name="verify_kv")
    with m.State("VERIFY_KV"):
        # kv_indices: per request the table row's first seq_len slots, then its
        # verify KV slots (which VERIFY_TABLE writes to the row after them)
        m.d.comb += [c.pool_rd.addr.eq(c.row(c.b)), c.seq_rd.addr.eq(c.row(c.b))]
        with m.If(c.j == 0):
            with m.If(~c.rwriter.busy):
                m.d.comb += [c.rwriter.start.eq(1), c.rwriter.address.eq(c.cmd.address4),
                             c.rwriter.count.eq(c.kv_total)]
                m.d.sync += c.j.eq(1)
        with m.Elif(c.b == c.batch):
            with m.If(~c.rwriter.busy):
                m.d.sync += [c.b.eq(0), c.i.eq(0), c.j.eq(0)]
                m.next = "VERIFY_TABLE"
        with m.Elif(c.j < 1 + TABLE_READY):  # pool and seq_len of row b, then its address
            m.d.sync += c.j.eq(c.j + 1)
        with m.Elif(c.j == 1 + TABLE_READY):
            m.d.comb += [c.reader.start.eq(1), c.reader.count.eq(c.seq_rd.data),
                         c.reader.address.eq(kv_row)]
            m.d.sync += c.j.eq(2 + TABLE_READY)
        with m.Elif(c.j == 2 + TABLE_READY):  # the row's prefix, the rest of a beat a clock
            source, sink = c.reader.group, c.rwriter.group
            m.d.comb += [sink.valid.eq(source.valid), sink.payload.count.eq(source.payload.count),
                         source.ready.eq(sink.ready)]
            for index, word in enumerate(source.payload.data):
                m.d.comb += sink.payload.data[index].eq(word)
            with m.If(~c.reader.busy & ~source.valid):
                m.d.sync += [c.j.eq(3 + TABLE_READY), c.i.eq(0)]
        with m.Else():  # then the request's verify slots
            with m.If(copy_group(m, step=c.j, at=3 + TABLE_READY, index=c.i, count=c.vn,
                                 banks=c.locs, writer=c.rwriter, lanes=c.lanes,
                                 address=lambda x: c.b * c.vn + x)):
                m.d.sync += [c.b.eq(c.b + 1), c.j.eq(1), c.i.eq(0)]

    with m.State("VERIFY_TABLE"):
        # req_to_token[pool, seq_len + x] = verify slot x (only for a valid tree)
        m.d.comb += [c.pool_rd.addr.eq(c.row(c.b)), c.seq_rd.addr.eq(c.row(c.b))]
        with m.If(c.invalid):
            m.d.sync += c.status.eq(Status.BAD_ARGUMENT)
            m.next = "COMPLETE"
        with m.Elif(c.b == c.batch):
            with m.If(~c.twriter.busy):
                m.d.sync += [c.phase.eq(Phase.BUILT), c.b.eq(0), c.i.eq(0), c.j.eq(0)]
                m.next = "COMPLETE"
        with m.Elif(c.j < TABLE_READY):  # the row's pool and seq_len, then its address
            m.d.sync += c.j.eq(c.j + 1)
        with m.Elif(c.j == TABLE_READY):
            with m.If(~c.twriter.busy):
                m.d.comb += [c.twriter.start.eq(1), c.twriter.count.eq(c.vn),
                             c.twriter.address.eq(c.table_row)]
                m.d.sync += [c.j.eq(TABLE_READY + 1), c.i.eq(0)]
        with m.Else():
            with m.If(copy_group(m, step=c.j, at=TABLE_READY + 1, index=c.i, count=c.vn,
                                 banks=c.locs, writer=c.twriter, lanes=c.lanes,
                                 address=lambda x: c.b * c.vn + x)):
                m.d.sync += [c.b.eq(c.b + 1), c.j.eq(0), c.i.eq(0)]


def _request_sizes(m, c):
    """A free-running pipeline from the seq_len of a batch row (``c.seq_rd`` addressed while
    ``issue`` is high, its data a clock later) to the request's ``kv`` (kv_indices words,
    ``seq_len + n``) and ``mask`` (tree-mask bytes, ``n`` rows of the mode's width), ``valid``
    for one clock ``SIZES_LATENCY`` clocks after ``issue``. ``busy``: a request is in it.

    A block RAM's output into the row width and a multiply and a running sum do not fit a
    clock: each gets one.
    """
    issued = Signal(SIZES_LATENCY, name="sizes_issued")
    seq = Signal(32, name="sizes_seq_len")
    kv = Signal(len(c.kv_total), name="sizes_kv_stage")
    row_bytes = Signal(len(c.mask_total), name="sizes_row_bytes")
    sizes = SimpleNamespace(issue=Signal(name="sizes_issue"), valid=issued[-1],
                            busy=issued.any(), kv=Signal(len(c.kv_total), name="sizes_kv"),
                            mask=Signal(len(c.mask_total), name="sizes_mask"))
    width = Mux(c.mode == TreeMaskMode.FULL_MASK, seq + c.vn,
                Mux(c.mode == TreeMaskMode.QLEN_ONLY, c.vn, (c.vn + 7) >> 3))
    m.d.sync += [issued.eq(Cat(sizes.issue, issued[:-1])), seq.eq(c.seq_rd.data),
                 kv.eq(seq + c.vn), row_bytes.eq(width),
                 sizes.kv.eq(kv), sizes.mask.eq(c.vn * row_bytes)]
    return sizes
