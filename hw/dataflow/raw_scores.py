"""``draft_depth``'s depth-1 rescoring as a state of ``DraftDepth`` (``RAW_SCORES``): depth 1
keeps the raw probabilities as the new nodes' ``cumu_scores`` (``golden.draft_round``), so
each of request ``b``'s ``n`` new nodes is read out of K2 and written back with its
probability.

K2's host port takes a command a clock and answers each in order, a write with zeros. The
reads run ahead of the writes (at most ``AHEAD`` nodes), their answers wait in a small FIFO
for their write, and a FIFO of the commands' kinds tells a read's answer from a write's: two
commands a node, about two clocks a node where a read, a wait and a write, a wait took seven.
"""

from amaranth.hdl import Mux
from amaranth.lib import data
from amaranth.lib.fifo import SyncFIFO

from hw.kernels.update_state import Region

__all__ = ["raw_scores_state", "AHEAD"]

#: Most nodes read and not yet written back.
AHEAD = 3


def raw_scores_state(m, params, *, k2_cmd, k2_rsp, slot, probas, first, n, n_last, read,
                     written, request, then):
    """The state ``RAW_SCORES`` for the ``n`` nodes of K2's ``slot`` from node ``first`` on:
    each written back with its score from ``probas``. ``k2_cmd`` and ``k2_rsp`` are K2's host
    port; ``read`` and ``written`` count the nodes (zero on entry). Once every node is written
    and every answer is in, the FSM goes to ``then`` with both counters zero and ``request``
    advanced.
    """
    # Both FIFOs are empty at every state's end; the watchdog's abort empties them with K2.
    answers = m.submodules.raw_answers = SyncFIFO(
        width=params.k2.host_response_layout.size, depth=AHEAD + 1)
    kinds = m.submodules.raw_kinds = SyncFIFO(
        width=1, depth=2 * AHEAD + 2)  # 1: a read's answer is coming
    answer = k2_rsp.payload
    held = data.View(params.k2.host_response_layout, answers.r_data)  # the oldest read's answer
    with m.State("RAW_SCORES"):
        host = k2_cmd.payload
        m.d.comb += [host.slot.eq(slot), host.region.eq(Region.NODE), k2_rsp.ready.eq(1)]
        writing = answers.r_rdy  # a write back goes first
        reading = ~writing & (read <= n_last) & (read - written < AHEAD)
        m.d.comb += [k2_cmd.valid.eq((writing | reading) & kinds.w_rdy),
                     host.write.eq(writing),
                     host.index.eq(first + Mux(writing, written, read)),
                     host.tok.eq(held.tok), host.score.eq(probas[written]),
                     host.delta.eq(held.delta), host.prev.eq(held.prev),
                     host.next.eq(held.next), host.side.eq(held.side)]
        accepted = k2_cmd.valid & k2_cmd.ready
        m.d.comb += [kinds.w_data.eq(reading), kinds.w_en.eq(accepted),
                     answers.r_en.eq(accepted & writing)]
        with m.If(accepted & writing):
            m.d.sync += written.eq(written + 1)
        with m.If(accepted & reading):
            m.d.sync += read.eq(read + 1)
        arrived = k2_rsp.valid
        m.d.comb += [kinds.r_en.eq(arrived), answers.w_data.eq(answer.as_value()),
                     answers.w_en.eq(arrived & kinds.r_data)]
        with m.If((written == n) & ~kinds.r_rdy & ~arrived):
            m.d.sync += [read.eq(0), written.eq(0), request.eq(request + 1)]
            m.next = then
