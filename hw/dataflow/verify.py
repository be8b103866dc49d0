"""The engine's ``verify`` command as states of its sequencer
(``hw.dataflow.engine.PersistentEngine``; what each state does: docs/engine.md): the request
records (checked), per request the fused verify and K7, the compaction, the result records and
``verified_id``."""

from amaranth.hdl import Array, Cat, Const, Mux, Signal

from hw.lib.params import index_bits

from .commands import Phase, Status
from .records import REQUEST, RESULT
from .runs import TABLE_READY, copy_words, table_address

__all__ = ["verify_states"]


def verify_states(m, c):
    """The sequencer states of ``verify``: request records (checked), per request the fused verify
    and K7, the compaction, the result records and ``verified_id``.

    ``c`` holds the engine's shared signals, memories and kernels (``PersistentEngine.elaborate``).
    """
    # predicts entries cleared so far: one per draft-token word of the records, so that the
    # rows are clear, request after request, by the time the records are in
    cleared = Signal(range(c.MAXB * c.MAXV + 1), name="predicts_cleared")
    with m.State("RUN_CHECK"):
        m.d.sync += [c.steps.eq(c.depths_run + 1), c.verified_total.eq(0), c.rows_read.eq(0),
                     c.active_count.eq(0), c.bad_argument.eq(0), c.b.eq(0), c.i.eq(0), c.j.eq(0),
                     cleared.eq(0)]
        with m.If(c.phase != Phase.BUILT):
            m.d.sync += c.status.eq(Status.BAD_PHASE)
            m.next = "COMPLETE"
        with m.Else():
            m.d.comb += [c.reader.start.eq(1), c.reader.address.eq(c.cmd.address0),
                         c.reader.count.eq(c.batch * (c.p.verify_request_words + c.vn))]
            m.next = "RUN_RECORDS"

    with m.State("RUN_RECORDS"):
        # request records (kept for the run) with golden.tree_verify's checks:
        # temperature finite and >= 0, top_p and the thresholds in [0, 1]; the predicts rows
        # cleared on the way (the verify writes the accepted entries)
        clear = c.words_taken & (c.i >= c.p.verify_request_words)
        m.d.comb += [c.words.ready.eq(1), c.vreq_wr.addr.eq(c.b * c.VQ + c.i),
                     c.vreq_wr.data.eq(c.words.payload), c.vreq_wr.en.eq(c.words_taken),
                     c.predicts_wr.addr.eq(cleared), c.predicts_wr.data.eq(0),
                     c.predicts_wr.en.eq(clear)]
        with m.If(clear):
            m.d.sync += cleared.eq(cleared + 1)
        value = c.words.payload
        not_finite = value[23:31] == 0xFF
        negative = value[31] & (value[:31] != 0)  # -0.0 is >= 0
        with m.If(c.words_taken):
            m.d.sync += c.i.eq(Mux(c.i == c.request_last, 0, c.i + 1))
            with m.If(c.i == c.request_last):
                m.d.sync += c.b.eq(c.b + 1)
            with m.If((c.i == REQUEST.word("temperature")) & (not_finite | negative)):
                m.d.sync += c.bad_argument.eq(1)
            with m.If((c.i == REQUEST.word("top_p")) & ~c.unit_interval(value)):
                m.d.sync += c.bad_argument.eq(1)
        with m.If(~c.reader.busy & ~c.words.valid):
            threshold_bad = Signal()
            for threshold in (c.cmd.threshold_single, c.cmd.threshold_acc):
                with m.If(~c.unit_interval(threshold)):
                    m.d.comb += threshold_bad.eq(1)
            m.d.sync += [c.b.eq(0), c.i.eq(0), c.j.eq(0)]
            with m.If(c.bad_argument | threshold_bad):
                m.d.sync += c.status.eq(Status.BAD_ARGUMENT)
                m.next = "COMPLETE"
            with m.Else():
                m.next = "RUN_K7_CMD"

    with m.State("RUN_K7_CMD"):
        c7 = c.k7.cmd.payload
        m.d.comb += [c.k7.cmd.valid.eq(1), c7.batch_size.eq(c.batch),
                     c7.num_draft_tokens.eq(c.vn), c7.num_speculative_tokens.eq(c.steps),
                     c7.eos_token_id.eq(c.cmd.eos_token_id)]
        with m.If(c.k7.cmd.ready):
            m.next = "RUN_REQUEST"

    with m.State("RUN_REQUEST"):  # request b, or the end of the batch
        m.d.sync += [c.i.eq(0), c.j.eq(0)]
        with m.If(c.b == c.batch):
            m.d.sync += c.b.eq(0)
            m.next = "RUN_ACTIVE"
        with m.Else():
            m.next = "RUN_HEADER"

    # The byte address of request b's first logits row, from b as it was three clocks before
    # (a free-running pipeline; RUN_HEADER holds b for more clocks than that).
    b_nodes = Signal.like(c.verify_nodes, name="tv_b_nodes")
    row_offset = Signal(c.p.address_width, name="tv_row_offset")
    row_address = Signal(c.p.address_width, name="tv_row_address")
    m.d.sync += [b_nodes.eq(c.b * c.vn), row_offset.eq(b_nodes * c.cmd.row_pitch),
                 row_address.eq(c.cmd.address1 + row_offset)]

    with m.State("RUN_HEADER"):
        # the request's fixed words (REQUEST), one a clock, into `header`
        m.d.comb += c.vreq_rd.addr.eq(c.b * c.VQ + c.j)
        with m.If(c.j <= c.p.verify_request_words):
            m.d.sync += c.j.eq(c.j + 1)
        with m.If(c.j >= 1):
            m.d.sync += c.header[c.j - 1].eq(c.vreq_rd.data)
        with m.If(c.j == c.p.verify_request_words + 1):
            m.d.sync += [c.j.eq(0), c.i.eq(0), c.accepted.eq(0), c.accept_row.eq(0)]
            m.next = "RUN_TV_CMD"

    with m.State("RUN_TV_CMD"):
        tc = c.tv.cmd.payload
        m.d.comb += [c.tv_busy.eq(1), c.tv.cmd.valid.eq(1), tc.lfsr.eq(c.cmd.lfsr),
                     tc.nodes.eq(c.vn), tc.steps.eq(c.steps),
                     tc.vocab_size.eq(c.cfg.vocab_size),
                     tc.row_address.eq(row_address),
                     tc.row_pitch.eq(c.cmd.row_pitch),
                     tc.temperature.eq(c.header[REQUEST.word("temperature")]),
                     tc.top_k.eq(c.header[REQUEST.word("top_k")]),
                     tc.top_p.eq(c.header[REQUEST.word("top_p")]),
                     tc.seed.eq(c.header[REQUEST.word("seed_or_final_coin")]),
                     tc.final_coin.eq(c.header[REQUEST.word("seed_or_final_coin")]),
                     tc.threshold_single.eq(c.cmd.threshold_single),
                     tc.threshold_acc.eq(c.cmd.threshold_acc),
                     c.vtree_rd.addr.eq(c.b * c.vn), c.coin_rd.addr.eq(c.b * c.VQ + c.VQH)]
        with m.If(c.tv.cmd.ready):
            m.next = "RUN_TV_TREE"

    with m.State("RUN_TV_TREE"):
        beat = c.tv.tree.payload
        taken = c.tv.tree.ready
        m.d.comb += [c.tv_busy.eq(1), c.vtree_rd.addr.eq(c.b * c.vn + c.i + taken),
                     c.coin_rd.addr.eq(c.b * c.VQ + c.VQH + c.i + taken),
                     c.tv.tree.valid.eq(1), beat.candidate.eq(c.vtree_rd.data.token),
                     beat.index.eq(c.vtree_rd.data.index),
                     beat.next_token.eq(c.vtree_rd.data.next),
                     beat.next_sibling.eq(c.vtree_rd.data.sibling),
                     beat.coin.eq(c.coin_rd.data), beat.first.eq(c.i == 0),
                     beat.last.eq(c.i == c.vn_last)]
        with m.If(taken):
            m.d.sync += c.i.eq(c.i + 1)
            with m.If(c.i == c.vn_last):
                m.d.sync += c.i.eq(0)
                m.next = "RUN_TV_RESULT"

    with m.State("RUN_TV_RESULT"):
        out = c.tv.result.payload
        m.d.comb += [c.tv_busy.eq(1), c.tv.result.ready.eq(1),
                     c.predicts_wr.addr.eq(out.index), c.predicts_wr.data.eq(out.token),
                     c.predicts_wr.en.eq(c.tv.result.valid)]
        with m.If(c.tv.result.valid):
            m.d.sync += [c.accept_row[c.accepted[:max(1, (c.p.max_steps - 1).bit_length())]]
                         .eq(out.index), c.accepted.eq(c.accepted + 1)]
            with m.If(out.last):
                m.d.sync += [c.res.nan.eq(out.nan), c.i.eq(0), c.j.eq(0)]
                m.next = "RUN_TV_ROWS"

    with m.State("RUN_TV_ROWS"):
        m.d.sync += [c.res.rows.eq(c.tv.status.rows),
                     c.rows_read.eq(c.rows_read + c.tv.status.rows)]
        m.next = "RUN_K7_NODES"

    with m.State("RUN_K7_NODES"):
        # predicts and KV slots of the request's n positions (read a clock ahead)
        node7 = c.k7.nodes.payload
        taken = c.k7.nodes.valid & c.k7.nodes.ready
        m.d.comb += [c.predicts_rd.addr.eq(c.b * c.vn + c.i + taken),
                     c.locs2.read_at.eq(c.b * c.vn + c.i + taken),
                     node7.predict.eq(c.predicts_rd.data),
                     node7.cache_loc.eq(c.locs2.read_data),
                     node7.first.eq(c.i == 0), node7.last.eq(c.i == c.vn_last),
                     c.k7.nodes.valid.eq(c.j == 1)]
        with m.If(c.j == 0):
            m.d.comb += [c.predicts_rd.addr.eq(c.b * c.vn), c.locs2.read_at.eq(c.b * c.vn)]
            m.d.sync += c.j.eq(1)
        with m.Elif(taken):
            m.d.sync += c.i.eq(c.i + 1)
            with m.If(c.i == c.vn_last):
                m.d.sync += [c.i.eq(0), c.j.eq(0)]
                m.next = "RUN_K7_REQUEST"

    with m.State("RUN_K7_REQUEST"):
        rq = c.k7.request.payload
        m.d.comb += [c.pool_rd.addr.eq(c.row(c.b)), c.seq_rd.addr.eq(c.row(c.b))]
        with m.If(c.j == 0):  # pool and seq_len are being read
            m.d.sync += c.j.eq(1)
        with m.Else():
            m.d.comb += [c.k7.request.valid.eq(1), rq.accept_token_num.eq(c.accepted - 1),
                         rq.req_pool_index.eq(c.pool_rd.data), rq.seq_len.eq(c.seq_rd.data),
                         rq.max_seq_len.eq(c.header[REQUEST.word("max_seq_len")])]
            m.d.comb += [rq.accept_index[x].eq(c.accept_row[x])
                         for x in range(c.p.max_steps)]
            with m.If(c.k7.request.ready):
                m.d.sync += [c.j.eq(0), c.i.eq(0), c.res.accept_token_num.eq(c.accepted - 1)]
                m.d.comb += [c.accidx_wr.addr.eq(c.b), c.accidx_wr.data.eq(c.accept_row),
                             c.accidx_wr.en.eq(1)]
                m.next = "RUN_K7_OUT"

    with m.State("RUN_K7_OUT"):
        # the commits (verified ids and the KV slots of the accepted tokens), then the
        # request's result
        commit = c.k7.commit.payload
        m.d.comb += [c.k7.commit.ready.eq(1), c.k7.result.ready.eq(1),
                     c.vids_wr.addr.eq(commit.verified_index),
                     c.vids_wr.data.eq(commit.verified_id),
                     c.vids_wr.en.eq(c.k7.commit.valid), c.commit_wr.addr.eq(c.i),
                     c.commit_wr.data.eq(commit.kv_loc), c.commit_wr.en.eq(c.k7.commit.valid)]
        with m.If(c.k7.commit.valid):
            m.d.sync += c.i.eq(c.i + 1)
        with m.If(c.k7.result.valid):
            r7 = c.k7.result.payload
            m.d.comb += [c.vres_wr.addr.eq(c.b), c.vres_wr.en.eq(1),
                         c.vres_wr.data.eq(c.res),
                         c.vres_wr.data.accept_length.eq(r7.accept_length),
                         c.vres_wr.data.next_root.eq(r7.next_root),
                         c.vres_wr.data.finished.eq(r7.finished),
                         c.vres_wr.data.seq_len.eq(r7.seq_len),
                         c.vres_wr.data.offset.eq(r7.verified_offset),
                         c.vres_wr.data.evict.eq(r7.evict),
                         c.seq_wr.addr.eq(c.row(c.b)), c.seq_wr.data.eq(r7.seq_len),
                         c.seq_wr.en.eq(1)]
            m.d.sync += [c.verified_total.eq(r7.verified_offset + r7.accept_length),
                         c.res.accept_length.eq(r7.accept_length), c.j.eq(0)]
            m.next = "RUN_TABLE"

    accepted_row = table_address(m, c.p, c.cfg, pool=c.pool_rd.data,
                                 offset=c.seq_rd.data - c.res.accept_length, name="run_table")
    with m.State("RUN_TABLE"):
        # req_to_token[pool, old seq_len + x] = the accepted tokens' KV slots
        m.d.comb += [c.pool_rd.addr.eq(c.row(c.b)), c.seq_rd.addr.eq(c.row(c.b))]
        with m.If(c.j < TABLE_READY):  # the row's pool and seq_len, then its address
            m.d.sync += c.j.eq(c.j + 1)
        with m.Elif(c.j == TABLE_READY):
            with m.If(c.twriter.can_start):
                m.d.comb += [c.twriter.start.eq(1), c.twriter.count.eq(c.res.accept_length),
                             c.twriter.address.eq(accepted_row)]
                m.d.sync += [c.j.eq(TABLE_READY + 1), c.i.eq(0)]
        with m.Else():
            with m.If(copy_words(m, step=c.j, at=TABLE_READY + 1, index=c.i,
                                 count=c.res.accept_length,
                                 addr=c.commit_rd.addr, data=c.commit_rd.data,
                                 writer=c.twriter, address=lambda x: x)):
                m.d.sync += [c.b.eq(c.b + 1), c.j.eq(0), c.i.eq(0)]
                m.next = "RUN_REQUEST"

    with m.State("RUN_ACTIVE"):
        # the compaction of the unfinished rows
        m.d.comb += [c.active.cmd.valid.eq(c.j == 0), c.active.cmd.payload.batch_size.eq(c.batch),
                     c.vres_rd.addr.eq(c.i + (c.active.finished.valid & c.active.finished.ready)),
                     c.active.finished.valid.eq((c.j == 2) & (c.i < c.batch)),
                     c.active.finished.payload.finished.eq(c.vres_rd.data.finished),
                     c.active.inverse.ready.eq(1), c.active.slots.ready.eq(1),
                     c.active.count.ready.eq(1)]
        with m.If(c.j == 0):
            with m.If(c.active.cmd.ready):
                m.d.sync += c.j.eq(1)
        with m.Elif(c.j == 1):
            m.d.comb += c.vres_rd.addr.eq(0)
            m.d.sync += c.j.eq(2)
        with m.If(c.active.finished.valid & c.active.finished.ready):
            m.d.sync += c.i.eq(c.i + 1)
        with m.If(c.active.inverse.valid):
            m.d.comb += [c.inverse_wr.addr.eq(c.b), c.inverse_wr.data.eq(
                c.active.inverse.payload.active_inverse), c.inverse_wr.en.eq(1)]
            m.d.sync += c.b.eq(c.b + 1)
        with m.If(c.active.slots.valid):
            m.d.comb += [c.aslot_wr.addr.eq(c.rsp_x), c.aslot_wr.data.eq(
                c.active.slots.payload.active_slot), c.aslot_wr.en.eq(1)]
            m.d.sync += c.rsp_x.eq(c.rsp_x + 1)
        with m.If(c.active.count.valid):
            m.d.sync += [c.active_count.eq(c.active.count.payload.active_count),
                         c.b.eq(0), c.i.eq(0), c.j.eq(0), c.rsp_x.eq(0)]
            m.next = "RUN_WRITE"

    with m.State("RUN_WRITE"):
        # result records (RESULT): the fixed words, accept_index [S], predicts [n], evict bits
        words_per = c.p.verify_result_words + c.steps + c.vn + ((c.vn + 31) >> 5)
        m.d.comb += [c.vres_rd.addr.eq(c.b), c.accidx_rd.addr.eq(c.b), c.inverse_rd.addr.eq(c.b),
                     c.aslot_rd.addr.eq(c.b)]
        # signed: the predicts row is read a word ahead, from y = -1 (+ the taken word)
        x, y, zz = (Signal(range(-(c.p.verify_result_words + c.p.max_steps + c.MAXV),
                                 c.MAXV + c.p.max_steps + 64), name=name)
                    for name in ("past_header", "predicts_index", "evict_index"))
        m.d.comb += [x.eq(c.i - c.p.verify_result_words), y.eq(x - c.steps), zz.eq(y - c.vn)]
        taken = c.rwriter.words.valid & c.rwriter.words.ready
        m.d.comb += c.predicts_rd.addr.eq(c.b * c.vn + y + taken)
        with m.If(c.j == 0):
            m.d.comb += [c.rwriter.start.eq(1), c.rwriter.address.eq(c.cmd.address2),
                         c.rwriter.count.eq(c.batch * words_per)]
            m.d.sync += c.j.eq(1)
        with m.Elif(c.b == c.batch):
            with m.If(c.rwriter.can_start):
                m.d.sync += [c.j.eq(0), c.i.eq(0), c.b.eq(0)]
                m.next = "RUN_VERIFIED"
        with m.Elif(c.j == 1):  # the request's rows are being read
            m.d.comb += c.predicts_rd.addr.eq(c.b * c.vn)
            m.d.sync += [c.j.eq(2), c.i.eq(0)]
        with m.Else():
            r = c.vres_rd.data
            evict_words = -(-c.MAXV // 32)
            evict = Cat(r.evict, Const(0, 32 * evict_words - c.MAXV))
            evict_word = Signal(32)
            m.d.comb += evict_word.eq(evict.word_select(zz[:index_bits(evict_words)], 32)
                                      if evict_words > 1 else evict)
            fields = {"accept_token_num": r.accept_token_num, "accept_length": r.accept_length,
                      "next_root": r.next_root, "finished": r.finished, "seq_len": r.seq_len,
                      "nan_flag": r.nan, "verified_offset": r.offset,
                      "active_slot": c.aslot_rd.data, "active_inverse": c.inverse_rd.data,
                      "rows_read": r.rows}
            header_words = Array(RESULT.in_order(fields))
            value = Signal(32)
            with m.If(c.i < c.p.verify_result_words):
                m.d.comb += value.eq(header_words[c.i])
            with m.Elif(x < c.steps):
                m.d.comb += value.eq(c.accidx_rd.data[x.as_unsigned()])
            with m.Elif(y < c.vn):
                m.d.comb += value.eq(c.predicts_rd.data)
            with m.Else():
                m.d.comb += value.eq(evict_word)
            m.d.comb += [c.rwriter.words.valid.eq(1), c.rwriter.words.payload.eq(value)]
            with m.If(c.rwriter.words.ready):
                m.d.sync += c.i.eq(c.i + 1)
                with m.If(c.i == words_per - 1):
                    m.d.sync += [c.b.eq(c.b + 1), c.i.eq(0), c.j.eq(1)]

    with m.State("RUN_VERIFIED"):
        # verified_id, the accepted tokens of the batch in one list
        with m.If(c.j == 0):
            with m.If(c.rwriter.can_start):
                m.d.comb += [c.rwriter.start.eq(1), c.rwriter.address.eq(c.cmd.address3),
                             c.rwriter.count.eq(c.verified_total)]
                m.d.sync += c.j.eq(1)
        with m.Else():
            done = copy_words(m, step=c.j, at=1, index=c.i, count=c.verified_total,
                              addr=c.vids_rd.addr, data=c.vids_rd.data,
                              writer=c.rwriter, address=lambda x: x)
            with m.If(done & ~c.rwriter.busy & ~c.twriter.busy):
                m.d.sync += [c.phase.eq(Phase.IDLE), c.j.eq(0), c.i.eq(0)]
                m.next = "COMPLETE"
