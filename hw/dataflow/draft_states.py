"""The engine's draft-side commands, ``begin_round`` and ``draft_depth``, as states of its
sequencer (``hw.dataflow.engine.PersistentEngine``; what each state does: docs/engine.md)."""

from amaranth.hdl import Array, Const, Mux, Signal

from hw.kernels.update_state import Region
from hw.lib.params import index_bits

from .commands import ONE_BITS, ROOT_SCORE_BITS, Phase, Status, StopReason
from .proba_fetch import fetch_probas
from .raw_scores import raw_scores_state
from .records import ARGUMENT, FRONTIER
from .runs import TABLE_READY, copy_words

__all__ = ["begin_round_states", "draft_depth_states", "save_round"]


def begin_round_states(m, c):
    """The sequencer states of ``begin_round``: read and check the argument records, then K2's
    initial rows, the frontier's root and the round's KV slots into ``req_to_token``.

    ``c`` holds the engine's shared signals, memories and kernels (``PersistentEngine.elaborate``).
    """
    with m.State("BEGIN_CHECK"):
        with m.If(c.cmd.batch_size > c.MAXB):
            m.d.sync += c.status.eq(Status.BAD_SLOT)
            m.next = "COMPLETE"
        with m.Else():
            m.d.comb += [c.reader.start.eq(1), c.reader.address.eq(c.cmd.address0),
                         c.reader.count.eq(c.cmd.batch_size * c.R)]
            m.next = "BEGIN_READ"

    with m.State("BEGIN_READ"):
        # Record b, word i: the fixed fields (ARGUMENT), then the KV slots.
        fixed = ARGUMENT.size
        m.d.comb += c.words.ready.eq(1)
        value = c.words.payload
        with m.If(c.words_taken):
            m.d.sync += c.i.eq(Mux(c.i == c.R - 1, 0, c.i + 1))
            with m.If(c.i < fixed):
                m.d.sync += c.record.as_value().word_select(
                    c.i[:index_bits(fixed)], 32).eq(value)
            with m.Else():
                m.d.comb += [c.kv_wr.addr.eq(c.kv_row(c.b, c.i - fixed, new=True)),
                             c.kv_wr.data.eq(value), c.kv_wr.en.eq(1)]
            with m.If(c.i == c.R - 1):
                m.d.sync += c.b.eq(c.b + 1)
            with m.If(c.i == fixed):  # the fixed words are in: check and store them
                slot_v = c.record.slot
                root_v = c.record.root_token
                seq_v = c.record.seq_len
                pool_v = c.record.req_pool_index
                in_range = slot_v < c.MAXB
                with m.If(~in_range | (c.slot_seen.bit_select(slot_v[:index_bits(c.MAXB)], 1)
                                       & in_range)):
                    m.d.sync += c.bad_slot.eq(1)
                with m.Else():
                    m.d.sync += c.slot_seen.eq(
                        c.slot_seen | (1 << slot_v[:index_bits(c.MAXB)]))
                room = Const(max(c.p.kv_slots, c.MAXV), 33)
                with m.If((root_v >= c.cfg.vocab_size) | (pool_v >= c.cfg.pool_rows)
                          | (pool_v >= c.p.max_pool_rows)
                          | (seq_v[31]) | (seq_v + room > c.cfg.context_len)):
                    m.d.sync += c.bad_argument.eq(1)
                new_row = c.row(c.b, new=True)
                m.d.comb += [c.slot_wr.addr.eq(new_row), c.slot_wr.data.eq(slot_v),
                             c.slot_wr.en.eq(1), c.seq_wr.addr.eq(new_row),
                             c.seq_wr.data.eq(seq_v), c.seq_wr.en.eq(1),
                             c.pool_wr.addr.eq(new_row), c.pool_wr.data.eq(pool_v),
                             c.pool_wr.en.eq(1), c.root_wr.addr.eq(c.b), c.root_wr.data.eq(root_v),
                             c.root_wr.en.eq(1)]
        with m.If(~c.reader.busy & ~c.words.valid & (c.b == c.cmd.batch_size)):
            m.d.sync += [c.b.eq(0), c.i.eq(0)]
            m.next = "BEGIN_POOLS"

    with m.State("BEGIN_POOLS"):
        # Repeated pool rows: a bitmap over the rows, set here and cleared in
        # BEGIN_CLEAR (2 clocks per request: read the row, then test and set).
        m.d.comb += c.pool_rd.addr.eq(c.row(c.b, new=True))
        with m.If(c.b == c.cmd.batch_size):
            m.d.sync += c.b.eq(0)
            m.next = "BEGIN_CLEAR"
        with m.Elif(c.i == 0):
            m.d.sync += c.i.eq(1)
        with m.Elif(c.i == 1):
            m.d.comb += c.pool_seen_rd.addr.eq(c.pool_rd.data)
            m.d.sync += c.i.eq(2)
        with m.Else():
            row_ok = c.pool_rd.data < c.p.max_pool_rows
            with m.If(row_ok & c.pool_seen_rd.data):
                m.d.sync += c.bad_argument.eq(1)
            m.d.comb += [c.pool_seen_wr.addr.eq(c.pool_rd.data), c.pool_seen_wr.data.eq(1),
                         c.pool_seen_wr.en.eq(row_ok)]
            m.d.sync += [c.b.eq(c.b + 1), c.i.eq(0)]

    with m.State("BEGIN_CLEAR"):
        m.d.comb += c.pool_rd.addr.eq(c.row(c.b, new=True))
        with m.If(c.i == 0):
            m.d.sync += c.i.eq(1)
        with m.Else():
            m.d.comb += [c.pool_seen_wr.addr.eq(c.pool_rd.data), c.pool_seen_wr.data.eq(0),
                         c.pool_seen_wr.en.eq(c.pool_rd.data < c.p.max_pool_rows)]
            m.d.sync += [c.b.eq(c.b + 1), c.i.eq(0)]
        with m.If(c.b == c.cmd.batch_size):
            m.d.sync += [c.b.eq(0), c.i.eq(0)]
            with m.If(c.bad_slot):
                m.d.sync += c.status.eq(Status.BAD_SLOT)
                m.next = "COMPLETE"
            with m.Elif(c.bad_argument | (c.cmd.depths == 0) | (c.cmd.depths > c.p.max_depths)):
                m.d.sync += c.status.eq(Status.BAD_ARGUMENT)
                m.next = "COMPLETE"
            with m.Else():
                m.next = "BEGIN_SAVE"

    with m.State("BEGIN_SAVE"):
        # The round in flight is abandoned: what it leaves in each of its slots (read_state)
        with m.If(save_round(m, c)):
            m.d.sync += [c.b.eq(0), c.j.eq(0)]
            m.next = "BEGIN_INIT"

    with m.State("BEGIN_INIT"):
        # Per request: K2 node 0 and the sort/work rows, the frontier's root; element
        # i = 0: node 0; 1 .. MAXV: sort_scores; MAXV+1 .. 2*MAXV+K: work_scores.
        m.d.comb += [c.slot_rd.addr.eq(c.row(c.b, new=True)), c.root_rd.addr.eq(c.b)]
        host = c.host_cmd.payload
        last = 2 * c.MAXV + c.K
        with m.If(c.b == c.cmd.batch_size):
            with m.If(c.host_idle):  # (the last write's answer is dropped this clock)
                m.d.sync += [c.b.eq(0), c.i.eq(0)]
                m.next = "BEGIN_TABLE"
        with m.Elif(c.j == 0):  # memories read for request b
            m.d.sync += c.j.eq(1)
        with m.Else():
            m.d.comb += [c.host_cmd.valid.eq(1), host.write.eq(1),
                         host.slot.eq(c.slot_rd.data), c.slot_row_wr.addr.eq(c.slot_rd.data),
                         c.slot_row_wr.data.eq(c.b), c.slot_row_wr.en.eq(1)]
            with m.If(c.i == 0):
                m.d.comb += [host.region.eq(Region.NODE), host.index.eq(0),
                             host.tok.eq(c.root_rd.data), host.score.eq(ROOT_SCORE_BITS),
                             host.delta.eq(0), host.prev.eq(-1), host.next.eq(-1),
                             host.side.eq(-1)]
            with m.Elif(c.i <= c.MAXV):
                m.d.comb += [host.region.eq(Region.SORT), host.index.eq(c.i - 1),
                             host.score.eq(Mux(c.i == 1, ROOT_SCORE_BITS, 0))]
            with m.Else():
                m.d.comb += [host.region.eq(Region.WORK), host.index.eq(c.i - 1 - c.MAXV),
                             host.score.eq(Mux(c.i == c.MAXV + 1, ROOT_SCORE_BITS, 0))]
            with m.If(c.host_cmd.ready):
                m.d.sync += c.i.eq(Mux(c.i == last, 0, c.i + 1))
                with m.If(c.i == last):
                    m.d.sync += [c.b.eq(c.b + 1), c.j.eq(0)]
                    m.d.comb += [c.fscore_wr.addr.eq(c.b * c.WM), c.fscore_wr.data.eq(ONE_BITS),
                                 c.fscore_wr.en.eq(1), c.fnode_wr.addr.eq(c.b * c.WM),
                                 c.fnode_wr.data.eq(0), c.fnode_wr.en.eq(1),
                                 c.fmask_wr.addr.eq(c.b * c.WM), c.fmask_wr.data.eq(0),
                                 c.fmask_wr.en.eq(1)]
        m.d.comb += c.k2.host_rsp.ready.eq(1)

    with m.State("BEGIN_TABLE"):
        # req_to_token[pool, seq_len + x] = kv slot x, x = 0..MI, one run per request.
        m.d.comb += [c.pool_rd.addr.eq(c.row(c.b, new=True)),
                     c.seq_rd.addr.eq(c.row(c.b, new=True))]
        with m.If(c.b == c.cmd.batch_size):
            with m.If(~c.twriter.busy):
                m.d.sync += [c.phase.eq(Phase.DRAFTING), c.batch.eq(c.cmd.batch_size),
                             c.in_round.eq(c.slot_seen),
                             c.bank.eq(~c.bank), c.depths_run.eq(0),
                             c.verify_num.eq(c.cmd.verify_num), c.depths.eq(c.cmd.depths),
                             c.depth.eq(1), c.width.eq(1), c.input_count.eq(1),
                             c.cumu_count.eq(1), c.cumu_last.eq(0), c.b.eq(0), c.i.eq(0),
                             c.j.eq(0)]
                m.next = "COMPLETE"
        with m.Elif(c.j < TABLE_READY):  # the row's pool and seq_len, then its address
            m.d.sync += c.j.eq(c.j + 1)
        with m.Elif(c.j == TABLE_READY):
            with m.If(c.twriter.can_start):
                m.d.comb += [c.twriter.start.eq(1), c.twriter.count.eq(c.p.kv_slots),
                             c.twriter.address.eq(c.table_row)]
                m.d.sync += [c.j.eq(TABLE_READY + 1), c.i.eq(0)]
        with m.Else():
            with m.If(copy_words(m, step=c.j, at=TABLE_READY + 1, index=c.i,
                                 count=c.p.kv_slots,
                                 addr=c.kv_rd.addr, data=c.kv_rd.data, writer=c.twriter,
                                 address=lambda x: c.kv_row(c.b, x, new=True))):
                m.d.sync += [c.b.eq(c.b + 1), c.j.eq(0), c.i.eq(0)]


def save_round(m, c):
    """Save the round in flight, batch row ``c.b`` after row (``c.b``, ``c.j`` from 0, two
    clocks a row): its slot's phase, ``seq_len``, ``req_to_token`` row and node count into
    ``slot_info``, which ``read_state`` reports for a slot outside the round in flight.
    Returns whether every row is saved (``c.b == c.batch``); the caller moves on then."""
    m.d.comb += [c.slot_rd.addr.eq(c.row(c.b)), c.seq_rd.addr.eq(c.row(c.b)),
                 c.pool_rd.addr.eq(c.row(c.b))]
    done = c.b == c.batch
    with m.If(~done & (c.j == 0)):
        m.d.sync += c.j.eq(1)
    with m.Elif(~done):
        m.d.comb += [c.info_wr.addr.eq(c.slot_rd.data), c.info_wr.en.eq(1),
                     c.info_wr.data.phase.eq(c.phase),
                     c.info_wr.data.seq_len.eq(c.seq_rd.data),
                     c.info_wr.data.pool.eq(c.pool_rd.data),
                     c.info_wr.data.cumu_count.eq(c.cumu_count)]
        m.d.sync += [c.b.eq(c.b + 1), c.j.eq(0),
                     c.saved.eq(c.saved | (1 << c.slot_rd.data))]
    return done


def draft_depth_states(m, c):
    """The sequencer states of ``draft_depth``: tokens (checked), then per request K1 and K2, K3
    and the width policy, the stop rules and the next frontier's records.

    ``c`` holds the engine's shared signals, memories and kernels (``PersistentEngine.elaborate``).
    """
    with m.State("DRAFT_CHECK"):
        n = c.width * c.K
        m.d.sync += [c.n.eq(n), c.n_last.eq(n - 1)]
        with m.If((c.phase == Phase.IDLE) | (c.phase == Phase.BUILT)):
            m.d.sync += c.status.eq(Status.BAD_PHASE)
            m.next = "COMPLETE"
        with m.Elif(c.cmd.width_given & (c.cmd.width > c.WM)):
            m.d.sync += c.status.eq(Status.BAD_WIDTH)
            m.next = "COMPLETE"
        with m.Elif(c.phase == Phase.DRAFTED):
            m.d.sync += c.status.eq(Mux((c.stop_kind == StopReason.NODE_BUDGET)
                                      | (c.stop_kind == StopReason.INPUT_BUDGET),
                                      Status.NODE_BUDGET, Status.BAD_PHASE))
            m.next = "COMPLETE"
        with m.Elif(~c.fetching):  # (a fetch of a refused command may still be running)
            m.d.comb += [c.reader.start.eq(1), c.reader.address.eq(c.cmd.address1),
                         c.reader.count.eq(c.batch * c.width * c.K)]
            m.d.sync += c.token_at.eq(0)
            with m.If(c.batch != 0):  # the first request's probabilities beside the tokens
                fetch_probas(m, c, request=0, count=n)
                m.d.sync += c.fetched_ahead.eq(1)
            m.next = "DRAFT_TOKENS"

    with m.State("DRAFT_TOKENS"):
        # Every token of the depth is in (and checked) before anything is written: the rest of
        # a read beat a clock, at token b * n + x of the depth's tokens.
        group = c.reader.group
        m.d.comb += [group.ready.eq(1), c.tokens.write_at.eq(c.token_at),
                     c.tokens.write.eq(group.payload), c.tokens.write_en.eq(group.valid)]
        with m.If(group.valid):
            m.d.sync += c.token_at.eq(c.token_at + group.payload.count)
            for x, token in enumerate(group.payload.data):
                with m.If((x < group.payload.count) & (token >= c.cfg.vocab_size)):
                    m.d.sync += c.bad_argument.eq(1)  # (unsigned: negatives too)
        with m.If(~c.reader.busy & ~group.valid):
            m.d.sync += [c.b.eq(0), c.i.eq(0)]
            with m.If(c.bad_argument):
                m.d.sync += c.status.eq(Status.BAD_ARGUMENT)
                m.next = "COMPLETE"
            with m.Elif(c.batch == 0):
                m.d.sync += c.depths_run.eq(c.depths_run + 1)
                m.next = "COMPLETE"
            with m.Else():
                m.next = "DRAFT_PROBAS"

    with m.State("DRAFT_PROBAS"):
        # Request b: its probabilities (unless they were fetched ahead) and the frontier's
        # scores.
        with m.If(c.b == c.batch):
            m.d.sync += [c.b.eq(0), c.i.eq(0), c.j.eq(0)]
            m.next = "K3_COMMAND"
        with m.Elif(c.j == 0):
            with m.If(~c.fetched_ahead):
                fetch_probas(m, c, request=c.b)
            m.d.sync += [c.j.eq(1), c.i.eq(0), c.fetched_ahead.eq(0)]
        with m.Else():
            # the frontier scores, one per clock (a clock behind their read)
            m.d.comb += c.fscore_rd.addr.eq(c.b * c.WM + c.j - 1)
            with m.If(c.j <= c.WM + 1):
                m.d.sync += c.j.eq(c.j + 1)
            with m.If((c.j >= 2) & (c.j <= c.WM + 1)):
                m.d.sync += c.parent_scores[c.j - 2].eq(c.fscore_rd.data)
            with m.If(~c.fetching & (c.j == c.WM + 2)):
                m.d.sync += [c.j.eq(0), c.i.eq(0)]
                m.next = "K1"

    with m.State("K1"):
        req = c.k1.i.payload
        m.d.comb += [c.k1.i.valid.eq(1), req.tree_width.eq(c.width),
                     req.cumu_count.eq(c.cumu_count), req.first.eq(c.b == 0),
                     req.last.eq(c.b == c.batch - 1)]
        m.d.comb += [req.probas[t].eq(c.probas[t]) for t in range(c.NM)]
        m.d.comb += [req.parent_scores[w].eq(c.parent_scores[w]) for w in range(c.WM)]
        m.d.sync += c.token_at.eq(c.b * c.n)  # request b's first token, for K2_SEND
        with m.If(c.k1.i.ready):
            m.next = "K1_RESULT"
            # K1 has the probabilities: the next request's come in while this one is sorted
            # and updated (not at depth 1, whose RAW_SCORES reads this request's after K2)
            with m.If((c.b + 1 < c.batch) & (c.depth != 1)):
                fetch_probas(m, c, request=c.b + 1)
                m.d.sync += c.fetched_ahead.eq(1)

    with m.State("K1_RESULT"):
        m.d.comb += c.k1.o.ready.eq(1)
        with m.If(c.k1.o.valid):
            m.d.sync += c.result.eq(c.k1.o.payload)
            m.d.comb += [c.cache_wr.addr.eq(c.b), c.cache_wr.data.eq(c.k1.o.payload.cache),
                         c.cache_wr.en.eq(1), c.parent_wr.addr.eq(c.b),
                         c.parent_wr.data.eq(c.k1.o.payload.parents), c.parent_wr.en.eq(1)]
            m.d.sync += c.i.eq(0)
            m.next = "K2_PREFETCH"

    with m.State("K2_PREFETCH"):
        m.d.comb += [c.tokens.read_at.eq(c.token_at), c.fnode_rd.addr.eq(c.b * c.WM),
                     c.fmask_rd.addr.eq(c.b * c.WM), c.slot_rd.addr.eq(c.row(c.b))]
        m.next = "K2_SEND"

    with m.State("K2_SEND"):
        # Beat i of request b; the memories are read one beat ahead.
        beat = c.k2.req.payload
        taken = c.k2.req.ready
        ahead = c.i + taken
        m.d.comb += [c.tokens.read_at.eq(c.token_at + ahead),
                     c.fnode_rd.addr.eq(c.b * c.WM + ahead),
                     c.fmask_rd.addr.eq(c.b * c.WM + ahead), c.slot_rd.addr.eq(c.row(c.b))]
        m.d.comb += [
            c.k2.req.valid.eq(1), beat.first.eq(c.i == 0), beat.last.eq(c.i == c.n_last),
            beat.proba.eq(c.result.curr[c.i]), beat.token.eq(c.tokens.read_data),
            beat.sorted_score.eq(c.result.scores[c.i]),
            beat.sorted_index.eq(c.result.indices[c.i]),
            beat.parent_index.eq(c.result.parents[c.i]),
            beat.topk_index.eq(c.fnode_rd.data), beat.mask.eq(c.fmask_rd.data),
        ]
        with m.If(taken):
            m.d.sync += c.i.eq(c.i + 1)
            with m.If(c.i == c.n_last):
                m.d.sync += c.i.eq(0)
                m.next = "K2_DONE"

    with m.State("K2_DONE"):
        m.d.comb += c.k2.done.ready.eq(1)
        with m.If(c.k2.done.valid):
            m.d.sync += [c.i.eq(0), c.j.eq(0)]
            with m.If(c.depth == 1):
                m.next = "RAW_SCORES"
            with m.Else():
                m.d.sync += c.b.eq(c.b + 1)
                m.next = "DRAFT_PROBAS"

    raw_scores_state(m, c, then="DRAFT_PROBAS")

    with m.State("K3_COMMAND"):
        k3_cmd = c.k3.cmd.payload
        m.d.comb += [c.k3.cmd.valid.eq(1), k3_cmd.batch_size.eq(c.batch),
                     k3_cmd.cumu_count.eq(c.cumu_count), k3_cmd.verify_num.eq(c.verify_num),
                     k3_cmd.cost_per_node.eq(c.cfg.cost_per_node)]
        clamped = c.clamp_verify(c.verify_num)
        m.d.sync += c.ws_last.eq(Mux(c.cumu_count < clamped, c.cumu_count, clamped) + (c.K - 1))
        m.d.comb += c.slot_rd.addr.eq(c.row(0))
        with m.If(c.k3.cmd.ready):
            m.d.sync += [c.b.eq(0), c.i.eq(0), c.j.eq(0)]
            m.next = "K3_ROWS"

    with m.State("K3_ROWS"):
        # work_scores[slot, 0 .. ws0+K-1] of every request from K2's memory into K3:
        # reads issued by (b, i), answers forwarded by their count j.
        host = c.host_cmd.payload
        m.d.comb += [c.slot_rd.addr.eq(c.row(c.b + (c.host_cmd.ready & (c.i == c.ws_last)))),
                     host.slot.eq(c.slot_rd.data), host.region.eq(Region.WORK),
                     host.index.eq(c.i), c.host_cmd.valid.eq(c.b < c.batch)]
        with m.If(c.host_cmd.valid & c.host_cmd.ready):
            m.d.sync += c.i.eq(Mux(c.i == c.ws_last, 0, c.i + 1))
            with m.If(c.i == c.ws_last):
                m.d.sync += c.b.eq(c.b + 1)
        beat = c.k3.scores.payload
        m.d.comb += [c.k3.scores.valid.eq(c.k2.host_rsp.valid),
                     c.k2.host_rsp.ready.eq(c.k3.scores.ready),
                     beat.scores[0].eq(c.k2.host_rsp.payload.score)]
        # j counts answers within the current row
        m.d.comb += [beat.first.eq(c.j == 0), beat.last.eq(c.j == c.ws_last)]
        with m.If(c.k3.scores.valid & c.k3.scores.ready):
            m.d.sync += c.j.eq(Mux(c.j == c.ws_last, 0, c.j + 1))
        with m.If((c.b == c.batch) & c.host_idle & ~c.k2.host_rsp.valid & (c.j == 0)):
            m.d.sync += [c.i.eq(0), c.j.eq(0)]
            m.next = "K3_RESULT"

    with m.State("K3_RESULT"):
        m.d.comb += c.k3.deltas.ready.eq(1)
        with m.If(c.k3.deltas.valid & c.k3.deltas.payload.last):
            policy = c.k3.deltas.payload.next_width
            chosen = Mux(c.cmd.width_given, c.cmd.width,
                         Mux(policy > c.WM, c.WM, policy))
            m.d.sync += c.next_width.eq(chosen)
            m.next = "DECIDE"

    with m.State("DECIDE"):
        new_count = c.cumu_count + c.n
        m.d.sync += [c.cumu_count.eq(new_count), c.cumu_last.eq(c.cumu_count + c.n_last),
                     c.depths_run.eq(c.depths_run + 1), c.b.eq(0),
                     c.i.eq(0), c.j.eq(0)]
        with m.If(c.next_width == 0):
            m.d.sync += c.stop_reason.eq(StopReason.WIDTH_ZERO)
        with m.Elif(c.depth >= c.depths):
            m.d.sync += c.stop_reason.eq(StopReason.DEPTHS)
        with m.Elif(new_count + c.next_width * c.K > c.MAXN):
            m.d.sync += c.stop_reason.eq(StopReason.NODE_BUDGET)
        with m.Elif(c.input_count + c.next_width > c.MI + 1):
            m.d.sync += c.stop_reason.eq(StopReason.INPUT_BUDGET)
        m.next = "STOP_OR_FRONTIER"

    primed = Signal(name="frontier_primed")  # request b's rows of the memories are out
    with m.State("STOP_OR_FRONTIER"):
        with m.If(c.stop_reason != StopReason.NONE):
            m.d.sync += [c.phase.eq(Phase.DRAFTED), c.stop_kind.eq(c.stop_reason)]
            m.next = "COMPLETE"
        with m.Else():
            m.d.comb += [c.rwriter.start.eq(1), c.rwriter.address.eq(c.cmd.address2),
                         c.rwriter.count.eq(c.batch * c.next_width * c.F)]
            m.d.sync += primed.eq(0)
            m.next = "FRONTIER_READ"

    with m.State("FRONTIER_READ"):
        # Request b's next_width output rows read out of K2 (i of them asked for), each
        # answer going out as its record (j of them written) in the clock it arrives.
        host = c.host_cmd.payload
        answer = c.k2.host_rsp.payload
        group = c.rwriter.group
        sent = group.valid & group.ready
        m.d.comb += [c.slot_rd.addr.eq(c.row(c.b)), host.slot.eq(c.slot_rd.data),
                     host.region.eq(Region.OUTPUT), host.index.eq(c.i),
                     c.cache_rd.addr.eq(c.b), c.parent_rd.addr.eq(c.b),
                     c.seq_rd.addr.eq(c.row(c.b)),
                     c.kv_rd.addr.eq(c.kv_row(c.b, c.input_count + c.j + sent))]
        with m.If(c.b == c.batch):
            with m.If(~c.rwriter.busy):
                m.d.sync += [c.width.eq(c.next_width), c.depth.eq(c.depth + 1),
                             c.input_count.eq(c.input_count + c.next_width)]
                m.next = "COMPLETE"
        with m.Elif(~primed):  # the memories are read for request b
            m.d.sync += primed.eq(1)
        with m.Else():
            m.d.comb += c.host_cmd.valid.eq(c.i < c.next_width)
            with m.If(c.host_cmd.valid & c.host_cmd.ready):
                m.d.sync += c.i.eq(c.i + 1)
            old = Signal(range(c.MI + 1))  # mask columns before this depth
            mask_row = Signal(max(1, c.MI))
            m.d.comb += [old.eq(c.input_count - 1),
                         mask_row.eq((answer.mask & ((Const(1, c.MI + 1) << old) - 1))
                                     | (Const(1, c.MI + 1) << (old + c.j)))]
            cache = Array(c.cache_rd.data[k] for k in range(c.K))
            parents = Array(c.parent_rd.data[k] for k in range(c.K))
            fields = {"token": answer.tok, "parent_index": parents[c.j],
                      "node_id": cache[c.j], "position": c.seq_rd.data + c.depth,
                      "kv_slot": c.kv_rd.data}
            record_words = (FRONTIER.in_order(fields)
                            + [mask_row.word_select(x, 32) if c.MI > 32 * x else Const(0, 32)
                               for x in range(c.p.mask_words)])
            m.d.comb += [group.valid.eq(c.k2.host_rsp.valid), group.payload.count.eq(c.F),
                         c.k2.host_rsp.ready.eq(group.ready)]
            m.d.comb += [group.payload.data[x].eq(word) for x, word in enumerate(record_words)]
            with m.If(sent):
                # the next frontier, in place of the one just used
                for port, value in ((c.fscore_wr, answer.score), (c.fnode_wr, cache[c.j]),
                                    (c.fmask_wr, mask_row)):
                    m.d.comb += [port.addr.eq(c.b * c.WM + c.j), port.data.eq(value),
                                 port.en.eq(1)]
                m.d.sync += c.j.eq(c.j + 1)
                with m.If(c.j == c.next_width - 1):
                    m.d.sync += [c.b.eq(c.b + 1), c.i.eq(0), c.j.eq(0), primed.eq(0)]
