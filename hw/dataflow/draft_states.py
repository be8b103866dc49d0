"""The engine's ``draft_depth`` command as states of its sequencer
(``hw.dataflow.engine.PersistentEngine``; what each state does: docs/engine.md)."""

from amaranth.hdl import Array, Const, Mux, Signal

from hw.kernels.update_state import Region

from .commands import Phase, Status, StopReason
from .proba_fetch import fetch_probas
from .raw_scores import raw_scores_state
from .records import FRONTIER

__all__ = ["draft_depth_states"]


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
