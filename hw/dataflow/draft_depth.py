"""The engine's ``draft_depth`` command (``hw.dataflow.engine.PersistentEngine``; what each
state does: docs/engine.md): the depth's tokens (checked), then per request K1 and K2, K3 with
the width policy, the stop rules and the next frontier's records.

A refused ``draft_depth`` (``BAD_PHASE`` with no round drafting, ``BAD_WIDTH`` for a width
above ``max_tree_width``, ``NODE_BUDGET`` after a budget stop, ``BAD_ARGUMENT`` for a token
outside the vocabulary) leaves the round as it was.
"""

from dataclasses import asdict

from amaranth.hdl import Array, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.kernels.score_sort import ScoreSortPipeline
from hw.kernels.update_state import Region
from hw.kernels.work_deltas import WorkDeltas

from .commands import ONE_BITS, Phase, Status, StopReason, clamp_verify_num
from .memory_ports import read_port_signature, reader_control_signature, writer_control_signature
from .proba_fetch import ProbaFetch
from .raw_scores import raw_scores_state
from .records import FRONTIER
from .runs import finish, idle_state, memory
from .word_banks import WordBanks

__all__ = ["DraftDepth"]


class DraftDepth(wiring.Component):
    """``draft_depth`` (see the module): started by a ``start`` transfer, finished by a
    ``done`` transfer offered in the clock the command ends. It owns K1 (``ScoreSortPipeline``),
    K3 (``WorkDeltas``), the top-K probabilities' reader (``ProbaFetch``), the depth's tokens
    and K1's ``cache``/``parents``, and the frontier (scores, node ids, mask rows of every
    request, which ``begin_round`` sets to the roots through ``root_at``/``root_en``) and a
    copy of K2's ``work_scores`` rows (K3's input); K2, the batch rows and the engine's other
    ports it reaches through the members below. Two FSMs: ``draft_depth`` (the tokens, per
    request K1's result and K2, then K3, the stop rules and the frontier) and ``k1_feed``
    (each request's probabilities and frontier scores into K1, a request ahead of K2).

    Parameters
    ----------
    params : EngineParams
        The engine's build.

    Members
    -------
    start : In(stream.Signature({"width_given", "width", "probas", "tokens", "frontier"}))
        The command's width override (``width`` if ``width_given``) and byte addresses: the
        top-K probabilities (``address0``), the tokens (``address1``), the next frontier's
        records (``address2``).
    done : Out(stream.Signature({"status", "next_width", "stop_reason", "depth_run", "grown",
                                 "nodes"}))
        The ``Status``, the next width and the ``StopReason``; what the round's state takes:
        ``depth_run``, one more depth run; ``grown``, ``nodes`` more nodes, and then either the
        drafting stopped (``stop_reason`` not ``NONE``: the round is ``DRAFTED``) or the frontier
        moved on (width ``next_width``, one depth deeper, ``next_width`` more inputs).
    phase, stop_kind : In(2), In(3)
        The round's ``Phase`` and the ``StopReason`` that ended its drafting.
    batch, width, depth, depths, input_count, cumu_count, verify_num : In
        The round's requests, frontier width, depth label, depths to draft, draft inputs per
        request, nodes per request and ``verify_num``.
    config : In(config_layout)
        The engine's settings (``vocab_size``, ``cost_per_node``).
    row_at : Out(range(max_batch + 1))
        The batch row read in the round's bank (slot, ``seq_len``, KV slots)...
    kv_slot : Out(range(kv_slots + max_tree_width + 1))
        ... the KV slot of it read...
    slot, seq_len, kv : In
        ... and their words, a clock later.
    root_at, root_en : In
        ``begin_round``'s writes of a request's root into the frontier.
    reader : Out(reader_control_signature(...))
        The sequencer's reader (``read``): the tokens.
    probas_port : Out(read_port_signature(address_width, port_bits))
        The probabilities' reader's port (on ``read`` too); ``probas_busy`` its busy.
    results : Out(writer_control_signature(..., result_group_words))
        The result writer (``result_write``): frontier records.
    k2_req : Out(stream.Signature(params.k2.request_layout)), k2_done : In(...)
        K2's requests and their ends.
    k2_cmd : Out(stream.Signature(params.k2.host_command_layout)), k2_rsp : In(...)
        K2's host port; ``host_idle``: no command waits for it.
    work_write : In(params.k2.work_write_layout)
        K2's writes of ``work_scores`` (every one, whichever command runs): ``DraftDepth``
        keeps a copy of the rows, from which K3 reads a beat of its lanes a clock.
    """

    def __init__(self, params):
        self._params = p = params
        lanes = p.port_bits // 32
        a = p.address_width
        super().__init__({
            "start": In(stream.Signature(data.StructLayout({
                "width_given": 1, "width": 8, "probas": a, "tokens": a, "frontier": a}))),
            "done": Out(stream.Signature(data.StructLayout({
                "status": 3, "next_width": range(p.max_tree_width + 1), "stop_reason": 3,
                "depth_run": 1, "grown": 1, "nodes": range(p.max_candidates + 1)}))),
            "phase": In(2), "stop_kind": In(3),
            "batch": In(range(p.max_batch + 1)),
            "width": In(range(p.max_tree_width + 1)),
            "depth": In(8), "depths": In(8),
            "input_count": In(range(p.kv_slots + p.max_tree_width + 1)),
            "cumu_count": In(range(p.max_node_count + p.max_candidates + 1)),
            "verify_num": In(signed(32)),
            "config": In(p.config_layout),
            "row_at": Out(range(p.max_batch + 1)),
            "kv_slot": Out(range(p.kv_slots + p.max_tree_width + 1)),
            "slot": In(range(p.max_batch)), "seq_len": In(32), "kv": In(32),
            "root_at": In(range(p.max_batch)), "root_en": In(1),
            "reader": Out(reader_control_signature(a, p.max_run_words, lanes)),
            "probas_port": Out(read_port_signature(a, p.port_bits)), "probas_busy": Out(1),
            "results": Out(writer_control_signature(a, p.max_run_words, p.result_group_words)),
            "k2_req": Out(stream.Signature(p.k2.request_layout)),
            "k2_done": In(stream.Signature(p.k2.done_layout)),
            "k2_cmd": Out(stream.Signature(p.k2.host_command_layout)),
            "k2_rsp": In(stream.Signature(p.k2.host_response_layout)),
            "host_idle": In(1),
            "work_write": In(p.k2.work_write_layout),
        })

    def elaborate(self, platform):
        p = self._params
        K, WM, NM, MI = p.node_top_k, p.max_tree_width, p.max_candidates, p.max_input_size
        MAXB, MAXV, MAXN, F = p.max_batch, p.max_verify_num, p.max_node_count, p.frontier_words
        m = Module()
        m.submodules.k1 = k1 = ScoreSortPipeline(**asdict(p.k1))
        m.submodules.k3 = k3 = WorkDeltas(**asdict(p.k3))
        m.submodules.fetch = fetch = ProbaFetch(p)
        wiring.connect(m, fetch.port, wiring.flipped(self.probas_port))
        m.d.comb += self.probas_busy.eq(fetch.reader_busy)

        fscore_rd, fscore_wr = memory(m, "frontier_score", 32, MAXB * WM)
        fnode_rd, fnode_wr = memory(m, "frontier_node", 32, MAXB * WM)
        fmask_rd, fmask_wr = memory(m, "frontier_mask", max(1, MI), MAXB * WM)
        lanes = p.port_bits // 32
        # the depth's tokens, b * n + x, written a read beat a clock
        tokens = m.submodules.tokens = WordBanks(depth=MAXB * NM, lanes=lanes)
        # K2's work_scores rows as K2 writes them (row of slot s from s * WS)
        WS = p.k2.work_size
        work = m.submodules.work_scores = WordBanks(depth=p.k2.max_batch * WS, lanes=lanes)
        m.d.comb += [work.write_at.eq(self.work_write.addr), work.write.count.eq(1),
                     work.write.data[0].eq(self.work_write.data),
                     work.write_en.eq(self.work_write.en)]
        row_base = Signal(range(p.k2.max_batch * WS))  # K3_ROWS: the request's row in `work`
        cache_rd, cache_wr = memory(m, "k1_cache", data.ArrayLayout(32, K), MAXB)
        parent_rd, parent_wr = memory(m, "k1_parents", data.ArrayLayout(k1.parent_width, K), MAXB)
        # begin_round's roots (the sequencer runs one command at a time: no write of ours then)
        for port, value in ((fscore_wr, ONE_BITS), (fnode_wr, 0), (fmask_wr, 0)):
            m.d.comb += [port.addr.eq(self.root_at * WM), port.data.eq(value),
                         port.en.eq(self.root_en)]

        command = Signal.like(self.start.payload, reset_less=True)  # datapath
        k2_cmd, k2_rsp, reader, results = self.k2_cmd, self.k2_rsp, self.reader, self.results
        b = Signal(range(MAXB + 1))  # request
        i = Signal(range(max(NM, MAXV + K, WM) + 2))  # element
        j = Signal(range(max(WM + 3, MAXV + K + 1, NM + 1)))  # sub-step or second counter
        n = Signal(range(NM + 1))  # N = W*K
        n_last = Signal(range(-1, NM), init=-1)  # n - 1
        ws_last = Signal(range(-1, MAXV + K), init=-1)  # ws0 + K - 1: K3's scores per row, less one
        token_at = Signal(range(MAXB * NM + lanes))
        bad_argument = Signal()
        parent_scores = Array(Signal(32, name=f"parent_score{w}", reset_less=True)
                              for w in range(WM))
        result = Signal(k1.result_layout, reset_less=True)
        next_width = Signal(range(WM + 1))
        stop_reason = Signal(3)
        primed = Signal()  # FRONTIER_READ: request b's rows of the memories are out
        feed_start = Signal()  # the depth's tokens are in: K1's feed begins
        f = Signal(range(MAXB + 1))  # the request K1's feed is at
        f_at = Signal(range(MAXB * NM + 1))  # its first probability (f * n)
        f_step = Signal(range(WM + 3))  # its sub-step
        m.d.comb += self.row_at.eq(b)  # by default

        def end(status, **fields):
            finish(m, self.done, status=status, next_width=next_width, stop_reason=stop_reason,
                   **fields)

        # K2's requests: the round's state and the request's slot with the beats of K2_SEND
        req = self.k2_req.payload
        m.d.comb += [req.slot.eq(self.slot), req.tree_width.eq(self.width),
                     req.input_count.eq(self.input_count), req.cumu_count.eq(self.cumu_count),
                     req.verify_num.eq(self.verify_num), req.curr_depth.eq(self.depth)]

        with m.FSM(name="draft_depth"):
            idle_state(m, self.start, command,
                       clear=(b, i, j, bad_argument, next_width, stop_reason))

            with m.State("CHECK"):
                width_k = self.width * K
                m.d.sync += [n.eq(width_k), n_last.eq(width_k - 1)]
                with m.If((self.phase == Phase.IDLE) | (self.phase == Phase.BUILT)):
                    end(Status.BAD_PHASE)
                with m.Elif(command.width_given & (command.width > WM)):
                    end(Status.BAD_WIDTH)
                with m.Elif(self.phase == Phase.DRAFTED):
                    end(Mux((self.stop_kind == StopReason.NODE_BUDGET)
                            | (self.stop_kind == StopReason.INPUT_BUDGET),
                            Status.NODE_BUDGET, Status.BAD_PHASE))
                with m.Elif(~fetch.fetching):  # (a fetch of a refused command may still run)
                    m.d.comb += [reader.start.eq(1), reader.address.eq(command.tokens),
                                 reader.count.eq(self.batch * width_k)]
                    m.d.sync += token_at.eq(0)
                    with m.If(self.batch != 0):  # every request's probabilities beside them
                        m.d.comb += [fetch.start.eq(1), fetch.address.eq(command.probas),
                                     fetch.count.eq(self.batch * width_k),
                                     fetch.first_count.eq(width_k)]
                    m.next = "TOKENS"

            with m.State("TOKENS"):
                # Every token of the depth is in (and checked) before anything is written: the
                # rest of a read beat a clock, at token b * n + x of the depth's tokens.
                group = reader.group
                m.d.comb += [group.ready.eq(1), tokens.write_at.eq(token_at),
                             tokens.write.eq(group.payload), tokens.write_en.eq(group.valid)]
                with m.If(group.valid):
                    m.d.sync += token_at.eq(token_at + group.payload.count)
                    for x, token in enumerate(group.payload.data):
                        with m.If((x < group.payload.count)
                                  & (token >= self.config.vocab_size)):
                            m.d.sync += bad_argument.eq(1)  # (unsigned: negatives too)
                with m.If(~reader.busy & ~group.valid):
                    m.d.sync += [b.eq(0), i.eq(0)]
                    with m.If(bad_argument):
                        end(Status.BAD_ARGUMENT)
                    with m.Elif(self.batch == 0):
                        end(Status.OK, depth_run=1)
                    with m.Else():
                        m.d.comb += feed_start.eq(1)
                        m.next = "K1_RESULT"

            with m.State("K1_RESULT"):
                m.d.comb += k1.o.ready.eq(1)
                m.d.sync += token_at.eq(b * n)  # request b's first token, for K2_SEND
                with m.If(k1.o.valid):
                    m.d.sync += result.eq(k1.o.payload)
                    m.d.comb += [cache_wr.addr.eq(b), cache_wr.data.eq(k1.o.payload.cache),
                                 cache_wr.en.eq(1), parent_wr.addr.eq(b),
                                 parent_wr.data.eq(k1.o.payload.parents), parent_wr.en.eq(1)]
                    m.d.sync += i.eq(0)
                    m.next = "K2_PREFETCH"

            with m.State("K2_PREFETCH"):
                m.d.comb += [tokens.read_at.eq(token_at), fnode_rd.addr.eq(b * WM),
                             fmask_rd.addr.eq(b * WM)]
                m.next = "K2_SEND"

            with m.State("K2_SEND"):
                # Beat i of request b; the memories are read one beat ahead.
                beat = self.k2_req.payload
                taken = self.k2_req.ready
                ahead = i + taken
                m.d.comb += [tokens.read_at.eq(token_at + ahead),
                             fnode_rd.addr.eq(b * WM + ahead), fmask_rd.addr.eq(b * WM + ahead)]
                m.d.comb += [
                    self.k2_req.valid.eq(1), beat.first.eq(i == 0), beat.last.eq(i == n_last),
                    beat.proba.eq(result.curr[i]), beat.token.eq(tokens.read_data),
                    beat.sorted_score.eq(result.scores[i]),
                    beat.sorted_index.eq(result.indices[i]),
                    beat.parent_index.eq(result.parents[i]),
                    beat.topk_index.eq(fnode_rd.data), beat.mask.eq(fmask_rd.data),
                ]
                with m.If(taken):
                    m.d.sync += i.eq(i + 1)
                    with m.If(i == n_last):
                        m.d.sync += i.eq(0)
                        m.next = "K2_DONE"

            with m.State("K2_DONE"):
                m.d.comb += self.k2_done.ready.eq(1)
                with m.If(self.k2_done.valid):
                    m.d.sync += [i.eq(0), j.eq(0)]
                    with m.If(self.depth == 1):
                        m.next = "RAW_SCORES"
                    with m.Else():
                        m.d.sync += b.eq(b + 1)
                        m.next = "NEXT_REQUEST"

            raw_scores_state(m, p, k2_cmd=k2_cmd, k2_rsp=k2_rsp, slot=self.slot,
                             probas=fetch.probas, first=self.cumu_count, n=n, n_last=n_last,
                             read=i, written=j, request=b, then="NEXT_REQUEST")

            with m.State("NEXT_REQUEST"):
                with m.If(b == self.batch):
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0)]
                    m.next = "K3_COMMAND"
                with m.Else():
                    m.next = "K1_RESULT"

            with m.State("K3_COMMAND"):
                k3_cmd = k3.cmd.payload
                m.d.comb += [k3.cmd.valid.eq(1), k3_cmd.batch_size.eq(self.batch),
                             k3_cmd.cumu_count.eq(self.cumu_count),
                             k3_cmd.verify_num.eq(self.verify_num),
                             k3_cmd.cost_per_node.eq(self.config.cost_per_node)]
                clamped = clamp_verify_num(self.verify_num, MAXV)
                m.d.sync += ws_last.eq(Mux(self.cumu_count < clamped, self.cumu_count, clamped)
                                       + (K - 1))
                m.d.comb += self.row_at.eq(0)
                with m.If(k3.cmd.ready):
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0)]
                    m.next = "K3_ROWS"

            with m.State("K3_ROWS"):
                # work_scores[slot, 0 .. ws0+K-1] of every request out of the copy into K3, a
                # beat of its lanes a clock: the slot read (j = 0), the row's start (1), its
                # first beat read (2), the beats (3, the next one read as one is taken).
                scores = k3.scores.payload
                taken = k3.scores.valid & k3.scores.ready
                last = i + lanes > ws_last
                m.d.comb += work.read_at.eq(row_base + i + Mux(taken, lanes, 0))
                with m.If(b == self.batch):
                    m.d.sync += [b.eq(0), i.eq(0), j.eq(0)]
                    m.next = "K3_RESULT"
                with m.Elif(j < 2):
                    m.d.sync += [j.eq(j + 1), row_base.eq(self.slot * WS)]
                with m.Elif(j == 2):
                    m.d.sync += j.eq(3)
                with m.Else():
                    m.d.comb += [k3.scores.valid.eq(1), scores.first.eq(i == 0),
                                 scores.last.eq(last)]
                    m.d.comb += [scores.scores[k].eq(work.read_group[k]) for k in range(lanes)]
                    with m.If(taken):
                        m.d.sync += i.eq(i + lanes)
                        with m.If(last):
                            m.d.sync += [b.eq(b + 1), i.eq(0), j.eq(0)]

            with m.State("K3_RESULT"):
                m.d.comb += k3.deltas.ready.eq(1)
                with m.If(k3.deltas.valid & k3.deltas.payload.last):
                    policy = k3.deltas.payload.next_width
                    m.d.sync += next_width.eq(Mux(command.width_given, command.width,
                                                  Mux(policy > WM, WM, policy)))
                    m.next = "DECIDE"

            with m.State("DECIDE"):
                new_count = self.cumu_count + n
                m.d.sync += [b.eq(0), i.eq(0), j.eq(0)]
                with m.If(next_width == 0):
                    m.d.sync += stop_reason.eq(StopReason.WIDTH_ZERO)
                with m.Elif(self.depth >= self.depths):
                    m.d.sync += stop_reason.eq(StopReason.DEPTHS)
                with m.Elif(new_count + next_width * K > MAXN):
                    m.d.sync += stop_reason.eq(StopReason.NODE_BUDGET)
                with m.Elif(self.input_count + next_width > MI + 1):
                    m.d.sync += stop_reason.eq(StopReason.INPUT_BUDGET)
                m.next = "STOP_OR_FRONTIER"

            with m.State("STOP_OR_FRONTIER"):
                with m.If(stop_reason != StopReason.NONE):
                    end(Status.OK, depth_run=1, grown=1, nodes=n)
                with m.Else():
                    m.d.comb += [results.start.eq(1), results.address.eq(command.frontier),
                                 results.count.eq(self.batch * next_width * F)]
                    m.d.sync += primed.eq(0)
                    m.next = "FRONTIER_READ"

            with m.State("FRONTIER_READ"):
                # Request b's next_width output rows read out of K2 (i of them asked for), each
                # answer going out as its record (j of them written) in the clock it arrives.
                host = k2_cmd.payload
                answer = k2_rsp.payload
                group = results.group
                sent = group.valid & group.ready
                m.d.comb += [host.slot.eq(self.slot), host.region.eq(Region.OUTPUT),
                             host.index.eq(i), cache_rd.addr.eq(b), parent_rd.addr.eq(b),
                             self.kv_slot.eq(self.input_count + j + sent)]
                with m.If(b == self.batch):
                    with m.If(~results.busy):
                        end(Status.OK, depth_run=1, grown=1, nodes=n)
                with m.Elif(~primed):  # the memories are read for request b
                    m.d.sync += primed.eq(1)
                with m.Else():
                    m.d.comb += k2_cmd.valid.eq(i < next_width)
                    with m.If(k2_cmd.valid & k2_cmd.ready):
                        m.d.sync += i.eq(i + 1)
                    old = Signal(range(MI + 1))  # mask columns before this depth
                    mask_row = Signal(max(1, MI))
                    m.d.comb += [old.eq(self.input_count - 1),
                                 mask_row.eq((answer.mask & ((Const(1, MI + 1) << old) - 1))
                                             | (Const(1, MI + 1) << (old + j)))]
                    cache = Array(cache_rd.data[k] for k in range(K))
                    parents = Array(parent_rd.data[k] for k in range(K))
                    fields = {"token": answer.tok, "parent_index": parents[j],
                              "node_id": cache[j], "position": self.seq_len + self.depth,
                              "kv_slot": self.kv}
                    record_words = (FRONTIER.in_order(fields)
                                    + [mask_row.word_select(x, 32) if MI > 32 * x
                                       else Const(0, 32) for x in range(p.mask_words)])
                    m.d.comb += [group.valid.eq(k2_rsp.valid), group.payload.count.eq(F),
                                 k2_rsp.ready.eq(group.ready)]
                    m.d.comb += [group.payload.data[x].eq(word)
                                 for x, word in enumerate(record_words)]
                    with m.If(sent):
                        # the next frontier, in place of the one just used
                        for port, value in ((fscore_wr, answer.score), (fnode_wr, cache[j]),
                                            (fmask_wr, mask_row)):
                            m.d.comb += [port.addr.eq(b * WM + j), port.data.eq(value),
                                         port.en.eq(1)]
                        m.d.sync += j.eq(j + 1)
                        with m.If(j == next_width - 1):
                            m.d.sync += [b.eq(b + 1), i.eq(0), j.eq(0), primed.eq(0)]

        # K1's feed: request f's probabilities (out of the banks the command's start filled)
        # and the frontier's scores into K1, ahead of the FSM above, which takes K1's results
        # in order (K1 of request f + 1 while K2 updates request f). Depth 1 rescores request
        # f with the probabilities loaded for K1 after K2, so there the feed waits for the FSM
        # to reach request f.
        with m.FSM(name="k1_feed"):
            with m.State("IDLE"):
                with m.If(feed_start):
                    m.d.sync += [f.eq(0), f_at.eq(0), f_step.eq(0)]
                    m.next = "PROBAS"

            with m.State("PROBAS"):
                with m.If(f_step == 0):
                    with m.If(((self.depth != 1) | (b == f)) & ~fetch.fetching):
                        # (the first request's came in with the fetch)
                        m.d.comb += [fetch.load.eq(f != 0), fetch.load_at.eq(f_at),
                                     fetch.load_count.eq(n)]
                        m.d.sync += f_step.eq(1)
                with m.Else():
                    # the frontier scores, one per clock (a clock behind their read)
                    m.d.comb += fscore_rd.addr.eq(f * WM + f_step - 1)
                    with m.If(f_step <= WM + 1):
                        m.d.sync += f_step.eq(f_step + 1)
                    with m.If((f_step >= 2) & (f_step <= WM + 1)):
                        m.d.sync += parent_scores[f_step - 2].eq(fscore_rd.data)
                    with m.If(~fetch.loading & (f_step == WM + 2)):
                        m.next = "K1"

            with m.State("K1"):
                k1_req = k1.i.payload
                m.d.comb += [k1.i.valid.eq(1), k1_req.tree_width.eq(self.width),
                             k1_req.cumu_count.eq(self.cumu_count), k1_req.first.eq(f == 0),
                             k1_req.last.eq(f == self.batch - 1),
                             k1_req.probas.eq(fetch.probas)]
                m.d.comb += [k1_req.parent_scores[w].eq(parent_scores[w]) for w in range(WM)]
                with m.If(k1.i.ready):
                    m.d.sync += [f.eq(f + 1), f_at.eq(f_at + n), f_step.eq(0)]
                    with m.If(f + 1 == self.batch):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "PROBAS"
        return m
