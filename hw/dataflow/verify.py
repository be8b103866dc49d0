"""The engine's ``verify`` command (``hw.dataflow.engine.PersistentEngine``; what each state
does: docs/engine.md): the request records (checked), per request the fused verify and K7,
the compaction, the result records and ``verified_id``.

A refused ``verify`` (``BAD_PHASE`` outside a ``BUILT`` round, ``BAD_ARGUMENT`` for a request's
temperature or ``top_p`` or a threshold out of range) leaves the round as it was; an accepted
one ends it (``IDLE``).
"""

from dataclasses import asdict

from amaranth.hdl import Array, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.kernels.active_slots import ActiveSlots
from hw.kernels.tree_verify import TreeVerify
from hw.kernels.verify_result import VerifyResult

from .commands import Phase, Status
from .load_tree import verify_tree_layout
from .memory_ports import reader_control_signature, writer_control_signature
from .records import REQUEST
from .runs import (
    TABLE_READY,
    copy_table_row,
    copy_words,
    finish,
    idle_state,
    memory,
    table_address,
)
from .verify_records import request_records_states
from .verify_results import result_records_state
from .word_banks import WordBanks

__all__ = ["Verify"]


class Verify(wiring.Component):
    """``verify`` (see the module): started by a ``start`` transfer, finished by a ``done``
    transfer offered in the clock the command ends. It owns the fused verify (``TreeVerify``),
    K7 (``VerifyResult``), the compaction (``ActiveSlots``) and the memories no other command
    uses: the request records (``verify_requests``), ``predicts``, ``verified_ids``, the
    accepted tokens' KV slots (``commit_locs``), the requests' results (``verify_results``),
    their ``accept_index`` rows and the compaction's ``active_inverse`` and ``active_slots``.
    The round's memories and the engine's ports it reaches through the members below, which
    the engine connects while the command runs. Two FSMs: ``verify`` (the records, the fused
    verify request after request, the compaction, the result records, ``verified_id``) and
    ``verify_k7`` (K7 and the ``req_to_token`` run of the request the fused verify finished
    last, beside its next one).

    Parameters
    ----------
    params : EngineParams
        The engine's build.

    Members
    -------
    start : In(stream.Signature({"lfsr", "row_pitch", "requests", "logit_rows", "results",
                                 "verified_id", "threshold_single", "threshold_acc",
                                 "eos_token_id"}))
        The command's ``lfsr`` (coins from the LFSR) and ``row_pitch`` (bytes between two
        logits rows), the byte addresses of the request records (``address0``), of the first
        logits row (``address1``), of the result records (``address2``) and of
        ``verified_id`` (``address3``), the two thresholds (float32 bits) and
        ``eos_token_id``.
    done : Out(stream.Signature({"status": 3, "active_count": 16, "rows_read": 32}))
        The ``Status``, the requests left after the compaction and the logits rows the fused
        verify read (both 0 when the command is refused). On ``OK`` the round is over.
    phase : In(2)
        The round in flight's ``Phase``.
    batch : In(range(max_batch + 1))
        The round's requests.
    vn, vn_last : In
        The verify set's size ``n``, and ``n - 1`` (signed: -1 for none).
    request_last : In(range(-1, verify_request_words + max_verify_num))
        Words of a request record (``verify_request_words + n``) less one.
    depths_run : In(8)
        Depths the round has drafted (``S - 1``).
    config : In(config_layout)
        The engine's settings (``vocab_size``, ``req_to_token``, ``context_len``).
    pool_at, seq_at : Out(range(max_batch + 1))
        Batch rows read from the round's bank (``req_pool_index``, ``seq_len``)...
    pool, seq_len : In(32)
        ... and their words, a clock later.
    seq_write_at : Out(range(max_batch + 1)), seq_write : Out(32), seq_write_en : Out(1)
        A request's new ``seq_len`` into its batch row.
    tree_read_at : Out(range(max_batch * max_verify_num))
        A node of ``verify_tree`` read...
    tree_read : In(verify_tree_layout)
        ... and the node, a clock later.
    locs_read_at : Out(range(max_batch * max_verify_num))
        A KV slot read out of K7's copy of ``verify_cache_locs``...
    locs_read : In(32)
        ... and the slot, a clock later.
    reader : Out(reader_control_signature(...))
        The sequencer's reader (``read``): the request records.
    results : Out(writer_control_signature(..., result_group_words))
        The result writer (``result_write``): the result records, ``verified_id``.
    table : Out(writer_control_signature(...))
        The table writer (``table_write``): the accepted tokens' KV slots into
        ``req_to_token``.
    logits : Out(params.verify.read_port).array(logit_ports)
        The fused verify's logits read ports (the engine's ``logits``).
    tv_busy : Out(1)
        The fused verify has a request in flight (the logits ports' ``PortCounters``).
    """

    def __init__(self, params):
        self._params = p = params
        layout = p.command_layout
        a = p.address_width
        rows = range(p.max_batch + 1)
        nodes = range(p.max_batch * p.max_verify_num)
        super().__init__({
            "start": In(stream.Signature(data.StructLayout({
                "lfsr": layout["lfsr"].shape, "row_pitch": layout["row_pitch"].shape,
                "requests": a, "logit_rows": a, "results": a, "verified_id": a,
                "threshold_single": layout["threshold_single"].shape,
                "threshold_acc": layout["threshold_acc"].shape,
                "eos_token_id": layout["eos_token_id"].shape}))),
            "done": Out(stream.Signature(data.StructLayout({
                "status": 3, "active_count": 16, "rows_read": 32}))),
            "phase": In(2),
            "batch": In(range(p.max_batch + 1)),
            "vn": In(range(p.max_verify_num + 1)),
            "vn_last": In(range(-1, p.max_verify_num)),
            "request_last": In(range(-1, p.verify_request_words + p.max_verify_num)),
            "depths_run": In(8),
            "config": In(p.config_layout),
            "pool_at": Out(rows), "seq_at": Out(rows), "pool": In(32), "seq_len": In(32),
            "seq_write_at": Out(rows), "seq_write": Out(32), "seq_write_en": Out(1),
            "tree_read_at": Out(nodes), "tree_read": In(verify_tree_layout),
            "locs_read_at": Out(nodes), "locs_read": In(32),
            "reader": Out(reader_control_signature(a, p.max_run_words, p.port_bits // 32)),
            "results": Out(writer_control_signature(a, p.max_run_words, p.result_group_words)),
            "table": Out(writer_control_signature(a, p.max_run_words)),
            "logits": Out(p.verify.read_port).array(p.logit_ports),
            "tv_busy": Out(1),
        })

    def elaborate(self, platform):
        p = self._params
        MAXB, MAXV, S = p.max_batch, p.max_verify_num, p.max_steps
        VQH = p.verify_request_words
        m = Module()
        m.submodules.tv = tv = TreeVerify(**asdict(p.verify))
        m.submodules.k7 = k7 = VerifyResult(**asdict(p.k7))
        m.submodules.active = active = ActiveSlots(max_batch_size=MAXB)
        for port in range(p.logit_ports):
            wiring.connect(m, tv.read[port], wiring.flipped(self.logits[port]))

        lanes = p.port_bits // 32
        # the request records as read (a beat a clock), and predicts (cleared a beat a clock)
        requests = m.submodules.verify_requests = WordBanks(depth=MAXB * (VQH + MAXV),
                                                            lanes=lanes)
        predicts = m.submodules.predicts = WordBanks(depth=MAXB * MAXV, lanes=lanes)
        vids_rd, vids_wr = memory(m, "verified_ids", 32, MAXB * S)
        commit_rd, commit_wr = memory(m, "commit_locs", 32, S)
        vres_layout = data.StructLayout({
            "accept_token_num": 8, "accept_length": 8, "next_root": 32, "finished": 1,
            "seq_len": 32, "nan": 1, "offset": 32, "rows": 16, "evict": MAXV})
        vres_rd, vres_wr = memory(m, "verify_results", vres_layout, MAXB)
        accept_layout = data.ArrayLayout(32, S)
        accidx_rd, accidx_wr = memory(m, "accept_index", accept_layout, MAXB)
        inverse_rd, inverse_wr = memory(m, "active_inverse", 32, MAXB)
        aslot_rd, aslot_wr = memory(m, "active_slots", 32, MAXB)

        command = Signal.like(self.start.payload, reset_less=True)  # datapath
        reader = self.reader
        results, table = self.results, self.table
        vn, vn_last, batch = self.vn, self.vn_last, self.batch
        b = Signal(range(MAXB + 1))  # request of the batch (the fused verify's)
        k7_b = Signal(range(MAXB + 1))  # the request K7 and the table writes are at
        k7_i = Signal(range(max(MAXV, S) + 2))  # its node or accepted token
        k7_j = Signal(range(TABLE_READY + 3))  # its sub-step
        k7_start = Signal()  # the fused verify hands request b to K7's FSM
        k7_idle = Signal()  # K7's FSM has no request
        # element: of a request record (the tree beats), of verified_id
        i = Signal(range(max(VQH + MAXV, MAXB * S) + 2))
        record_at = Signal(range(MAXB * (VQH + MAXV) + 1))  # request b's record in `requests`
        j = Signal(range(VQH + 2))  # sub-step
        bad_argument = Signal()
        steps = Signal(range(S + 1))  # S
        accepted = Signal(8)  # the request's accepted rows so far
        accept_row = Signal(accept_layout, reset_less=True)
        # what K7's FSM takes from the fused verify with its request
        k7_accepted = Signal(8)
        k7_accept_row = Signal(accept_layout, reset_less=True)
        k7_max_seq_len = Signal(32)
        tv_nan = Signal()
        verified_total = Signal(32)
        rows_read = Signal(32)
        active_count = Signal(16)
        res = Signal(vres_layout, reset_less=True)  # the request's result, as it is made
        header = Array(Signal(32, name=f"header{x}", reset_less=True) for x in range(VQH))
        slots_written = Signal(range(MAXB + 1))  # active_slots entries written

        def end(status):
            finish(m, self.done, status=status, active_count=active_count, rows_read=rows_read)

        with m.FSM(name="verify"):
            idle_state(m, self.start, command,
                       clear=(b, i, j, record_at, bad_argument, verified_total, rows_read,
                              active_count))

            with m.State("CHECK"):
                m.d.sync += steps.eq(self.depths_run + 1)
                with m.If(self.phase != Phase.BUILT):
                    end(Status.BAD_PHASE)
                with m.Else():
                    m.d.comb += [reader.start.eq(1), reader.address.eq(command.requests),
                                 reader.count.eq(batch * (VQH + vn))]
                    m.next = "RECORDS"

            request_records_states(
                m, reader=reader, requests=requests, predicts=predicts, batch=batch, vn=vn,
                request_words=self.request_last + 1,
                thresholds=(command.threshold_single, command.threshold_acc), b=b, j=j,
                record_at=record_at, bad=bad_argument,
                refuse=lambda: end(Status.BAD_ARGUMENT), then="K7_CMD")

            with m.State("K7_CMD"):
                c7 = k7.cmd.payload
                m.d.comb += [k7.cmd.valid.eq(1), c7.batch_size.eq(batch),
                             c7.num_draft_tokens.eq(vn), c7.num_speculative_tokens.eq(steps),
                             c7.eos_token_id.eq(command.eos_token_id)]
                with m.If(k7.cmd.ready):
                    m.next = "REQUEST"

            with m.State("REQUEST"):  # request b, or the end of the batch
                m.d.sync += [i.eq(0), j.eq(0)]
                with m.If(b == batch):
                    with m.If(k7_idle):
                        m.d.sync += b.eq(0)
                        m.next = "ACTIVE"
                with m.Else():
                    m.next = "HEADER"

            # The byte address of request b's first logits row, from b as it was three clocks
            # before (a free-running pipeline; HEADER holds b for more clocks than that).
            b_nodes = Signal(range(MAXB * MAXV + 1))
            row_offset = Signal(p.address_width)
            row_address = Signal(p.address_width)
            m.d.sync += [b_nodes.eq(b * vn), row_offset.eq(b_nodes * command.row_pitch),
                         row_address.eq(command.logit_rows + row_offset)]

            with m.State("HEADER"):
                # the request's fixed words (REQUEST), one a clock, into `header`
                m.d.comb += requests.read_at.eq(record_at + j)
                with m.If(j <= VQH):
                    m.d.sync += j.eq(j + 1)
                with m.If(j >= 1):
                    m.d.sync += header[j - 1].eq(requests.read_data)
                with m.If(j == VQH + 1):
                    m.d.sync += [j.eq(0), i.eq(0), accepted.eq(0), accept_row.eq(0)]
                    m.next = "TV_CMD"

            with m.State("TV_CMD"):
                tc = tv.cmd.payload
                m.d.comb += [self.tv_busy.eq(1), tv.cmd.valid.eq(1), tc.lfsr.eq(command.lfsr),
                             tc.nodes.eq(vn), tc.steps.eq(steps),
                             tc.vocab_size.eq(self.config.vocab_size),
                             tc.row_address.eq(row_address), tc.row_pitch.eq(command.row_pitch),
                             tc.temperature.eq(header[REQUEST.word("temperature")]),
                             tc.top_k.eq(header[REQUEST.word("top_k")]),
                             tc.top_p.eq(header[REQUEST.word("top_p")]),
                             tc.seed.eq(header[REQUEST.word("seed_or_final_coin")]),
                             tc.final_coin.eq(header[REQUEST.word("seed_or_final_coin")]),
                             tc.threshold_single.eq(command.threshold_single),
                             tc.threshold_acc.eq(command.threshold_acc),
                             self.tree_read_at.eq(b * vn),
                             requests.read_at.eq(record_at + VQH)]
                with m.If(tv.cmd.ready):
                    m.next = "TV_TREE"

            with m.State("TV_TREE"):
                beat, node = tv.tree.payload, self.tree_read
                taken = tv.tree.ready
                m.d.comb += [self.tv_busy.eq(1), self.tree_read_at.eq(b * vn + i + taken),
                             requests.read_at.eq(record_at + VQH + i + taken),
                             tv.tree.valid.eq(1), beat.candidate.eq(node.token),
                             beat.index.eq(node.index), beat.next_token.eq(node.next),
                             beat.next_sibling.eq(node.sibling),
                             beat.coin.eq(requests.read_data), beat.first.eq(i == 0),
                             beat.last.eq(i == vn_last)]
                with m.If(taken):
                    m.d.sync += i.eq(i + 1)
                    with m.If(i == vn_last):
                        m.d.sync += i.eq(0)
                        m.next = "TV_RESULT"

            with m.State("TV_RESULT"):
                out = tv.result.payload
                m.d.comb += [self.tv_busy.eq(1), tv.result.ready.eq(1),
                             predicts.write_at.eq(out.index), predicts.write.count.eq(1),
                             predicts.write.data[0].eq(out.token),
                             predicts.write_en.eq(tv.result.valid)]
                with m.If(tv.result.valid):
                    m.d.sync += [accept_row[accepted[:max(1, (S - 1).bit_length())]]
                                 .eq(out.index), accepted.eq(accepted + 1)]
                    with m.If(out.last):
                        m.d.sync += [tv_nan.eq(out.nan), i.eq(0), j.eq(0)]
                        m.next = "TV_ROWS"

            with m.State("TV_ROWS"):
                # the request goes to K7's FSM (once it is done with the one before), and the
                # fused verify on to the next request
                with m.If(k7_idle):
                    m.d.comb += k7_start.eq(1)
                    m.d.sync += [res.rows.eq(tv.status.rows), res.nan.eq(tv_nan),
                                 rows_read.eq(rows_read + tv.status.rows),
                                 k7_accepted.eq(accepted), k7_accept_row.eq(accept_row),
                                 k7_max_seq_len.eq(header[REQUEST.word("max_seq_len")]),
                                 k7_b.eq(b), k7_i.eq(0), k7_j.eq(0), b.eq(b + 1),
                                 record_at.eq(record_at + self.request_last + 1)]
                    m.next = "REQUEST"

            with m.State("ACTIVE"):
                # the compaction of the unfinished rows
                finished = active.finished
                m.d.comb += [active.cmd.valid.eq(j == 0),
                             active.cmd.payload.batch_size.eq(batch),
                             vres_rd.addr.eq(i + (finished.valid & finished.ready)),
                             finished.valid.eq((j == 2) & (i < batch)),
                             finished.payload.finished.eq(vres_rd.data.finished),
                             active.inverse.ready.eq(1), active.slots.ready.eq(1),
                             active.count.ready.eq(1)]
                with m.If(j == 0):
                    with m.If(active.cmd.ready):
                        m.d.sync += j.eq(1)
                with m.Elif(j == 1):
                    m.d.comb += vres_rd.addr.eq(0)
                    m.d.sync += j.eq(2)
                with m.If(finished.valid & finished.ready):
                    m.d.sync += i.eq(i + 1)
                with m.If(active.inverse.valid):
                    m.d.comb += [inverse_wr.addr.eq(b), inverse_wr.en.eq(1),
                                 inverse_wr.data.eq(active.inverse.payload.active_inverse)]
                    m.d.sync += b.eq(b + 1)
                with m.If(active.slots.valid):
                    m.d.comb += [aslot_wr.addr.eq(slots_written), aslot_wr.en.eq(1),
                                 aslot_wr.data.eq(active.slots.payload.active_slot)]
                    m.d.sync += slots_written.eq(slots_written + 1)
                with m.If(active.count.valid):
                    m.d.sync += [active_count.eq(active.count.payload.active_count),
                                 b.eq(0), i.eq(0), j.eq(0), slots_written.eq(0)]
                    m.next = "WRITE"

            result_records_state(
                m, results=results, address=command.results, predicts=predicts,
                rows=(vres_rd, accidx_rd, inverse_rd, aslot_rd), batch=batch, vn=vn,
                steps=steps, b=b, j=j, max_steps=S, max_verify_num=MAXV, then="VERIFIED")

            with m.State("VERIFIED"):
                # verified_id, the accepted tokens of the batch in one list
                with m.If(j == 0):
                    with m.If(results.can_start):
                        m.d.comb += [results.start.eq(1), results.address.eq(command.verified_id),
                                     results.count.eq(verified_total)]
                        m.d.sync += j.eq(1)
                with m.Else():
                    done = copy_words(m, step=j, at=1, index=i, count=verified_total,
                                      addr=vids_rd.addr, data=vids_rd.data, writer=results,
                                      address=lambda x: x)
                    with m.If(done & ~results.busy & ~table.busy):
                        end(Status.OK)

        # K7 and the table writes of request k7_b, beside the fused verify of the next one
        with m.FSM(name="verify_k7"):
            with m.State("IDLE"):
                m.d.comb += k7_idle.eq(1)
                with m.If(k7_start):
                    m.next = "K7_NODES"

            with m.State("K7_NODES"):
                # predicts and KV slots of the request's n positions (read a clock ahead)
                node7 = k7.nodes.payload
                taken = k7.nodes.valid & k7.nodes.ready
                m.d.comb += [predicts.read_at.eq(k7_b * vn + k7_i + taken),
                             self.locs_read_at.eq(k7_b * vn + k7_i + taken),
                             node7.predict.eq(predicts.read_data),
                             node7.cache_loc.eq(self.locs_read),
                             node7.first.eq(k7_i == 0), node7.last.eq(k7_i == vn_last),
                             k7.nodes.valid.eq(k7_j == 1)]
                with m.If(k7_j == 0):
                    m.d.comb += [predicts.read_at.eq(k7_b * vn), self.locs_read_at.eq(k7_b * vn)]
                    m.d.sync += k7_j.eq(1)
                with m.Elif(taken):
                    m.d.sync += k7_i.eq(k7_i + 1)
                    with m.If(k7_i == vn_last):
                        m.d.sync += [k7_i.eq(0), k7_j.eq(0)]
                        m.next = "K7_REQUEST"

            with m.State("K7_REQUEST"):
                rq = k7.request.payload
                m.d.comb += [self.pool_at.eq(k7_b), self.seq_at.eq(k7_b)]
                with m.If(k7_j == 0):  # pool and seq_len are being read
                    m.d.sync += k7_j.eq(1)
                with m.Else():
                    m.d.comb += [k7.request.valid.eq(1),
                                 rq.accept_token_num.eq(k7_accepted - 1),
                                 rq.req_pool_index.eq(self.pool), rq.seq_len.eq(self.seq_len),
                                 rq.max_seq_len.eq(k7_max_seq_len)]
                    m.d.comb += [rq.accept_index[x].eq(k7_accept_row[x]) for x in range(S)]
                    with m.If(k7.request.ready):
                        m.d.sync += [k7_j.eq(0), k7_i.eq(0),
                                     res.accept_token_num.eq(k7_accepted - 1)]
                        m.d.comb += [accidx_wr.addr.eq(k7_b), accidx_wr.data.eq(k7_accept_row),
                                     accidx_wr.en.eq(1)]
                        m.next = "K7_OUT"

            with m.State("K7_OUT"):
                # the commits (verified ids and the KV slots of the accepted tokens), then the
                # request's result
                commit = k7.commit.payload
                m.d.comb += [k7.commit.ready.eq(1), k7.result.ready.eq(1),
                             vids_wr.addr.eq(commit.verified_index),
                             vids_wr.data.eq(commit.verified_id),
                             vids_wr.en.eq(k7.commit.valid), commit_wr.addr.eq(k7_i),
                             commit_wr.data.eq(commit.kv_loc), commit_wr.en.eq(k7.commit.valid)]
                with m.If(k7.commit.valid):
                    m.d.sync += k7_i.eq(k7_i + 1)
                with m.If(k7.result.valid):
                    r7 = k7.result.payload
                    m.d.comb += [vres_wr.addr.eq(k7_b), vres_wr.en.eq(1), vres_wr.data.eq(res),
                                 vres_wr.data.accept_length.eq(r7.accept_length),
                                 vres_wr.data.next_root.eq(r7.next_root),
                                 vres_wr.data.finished.eq(r7.finished),
                                 vres_wr.data.seq_len.eq(r7.seq_len),
                                 vres_wr.data.offset.eq(r7.verified_offset),
                                 vres_wr.data.evict.eq(r7.evict),
                                 self.seq_write_at.eq(k7_b), self.seq_write.eq(r7.seq_len),
                                 self.seq_write_en.eq(1)]
                    m.d.sync += [verified_total.eq(r7.verified_offset + r7.accept_length),
                                 res.accept_length.eq(r7.accept_length), k7_j.eq(0)]
                    m.next = "TABLE"

            accepted_row = table_address(m, p, self.config, pool=self.pool,
                                         offset=self.seq_len - res.accept_length, name="table")
            with m.State("TABLE"):
                # req_to_token[pool, old seq_len + x] = the accepted tokens' KV slots
                m.d.comb += [self.pool_at.eq(k7_b), self.seq_at.eq(k7_b)]
                with m.If(copy_table_row(m, step=k7_j, index=k7_i, count=res.accept_length,
                                         address=accepted_row, addr=commit_rd.addr,
                                         data=commit_rd.data, table=table)):
                    m.next = "IDLE"

        return m
