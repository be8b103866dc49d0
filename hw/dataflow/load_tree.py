"""The engine's ``load_tree`` command as states of its sequencer
(``hw.dataflow.engine.PersistentEngine``): a verify tree the caller built (SGLang's
``build_tree_kernel_efficient``, any other builder) in place of the round's own, for the fused
verify (docs/engine.md, "Loading a caller's tree").

The command names the tree's size ``n`` (``verify_num``, exactly, ``1 .. MAXV``), ``S - 1``
(``depths``, ``1 .. max_depths``: the verify's ``num_speculative_tokens`` is ``S``), the
batch's ``B * n`` tree records (``address0``, ``records.TREE`` as ``build_verify`` writes them)
and the verify forward's ``B * n`` KV slots (``address1``, as ``build_verify`` takes them,
for K7's commits). Every record is checked as it arrives, so that the fused verify's walk of an
accepted tree ends and stays inside the request's rows:

* ``draft_token`` below the configured ``vocab_size``;
* ``retrive_index`` is the record's own flat position ``b * n + i`` (what every builder
  writes: the verify's ``predicts`` and ``accept_index`` entries are these positions);
* ``retrive_next_token`` and ``retrive_next_sibling`` are -1 or a node ``1 .. n - 1``, and no
  node of a request is the target of two links (the root, node 0, of none). A walk from the
  root then visits each node at most once: any link graph in which every node has at most one
  incoming link and the root none is a forest below the root.

``position`` is read and ignored. A refused ``load_tree`` (``BAD_PHASE`` outside a drafting
round, ``BAD_ARGUMENT`` otherwise) leaves the round as it was; an accepted one ends drafting and
leaves the round ``BUILT`` with the caller's tree.
"""

from amaranth.hdl import Signal

from hw.lib.params import index_bits

from .commands import Phase, Status
from .records import TREE
from .runs import verify_locs_states

__all__ = ["load_tree_states"]


def load_tree_states(m, c):
    """The sequencer states of ``load_tree`` (see the module).

    ``c`` holds the engine's shared signals, memories and kernels (``PersistentEngine.elaborate``).
    """
    n = c.cmd.verify_num
    with m.State("LOAD_CHECK"):
        with m.If((c.phase != Phase.DRAFTING) & (c.phase != Phase.DRAFTED)):
            m.d.sync += c.status.eq(Status.BAD_PHASE)
            m.next = "COMPLETE"
        with m.Elif((n < 1) | (n > c.MAXV) | (c.cmd.depths == 0)
                    | (c.cmd.depths > c.p.max_depths)):
            m.d.sync += c.status.eq(Status.BAD_ARGUMENT)
            m.next = "COMPLETE"
        with m.Else():
            # (vn is not read while a round drafts: build_verify sets it anew)
            m.d.sync += [*c.verify_size_is(n), c.invalid.eq(0), c.trees.eq(0)]
            m.next = "LOAD_LOCS_START"

    verify_locs_states(m, c, name="LOAD_LOCS", address=c.cmd.address1, then="LOAD_TREE_START")

    with m.State("LOAD_TREE_START"):  # (batch * n is in its register: verify_nodes)
        m.d.comb += [c.reader.start.eq(1), c.reader.address.eq(c.cmd.address0),
                     c.reader.count.eq(c.verify_nodes * TREE.size)]
        m.next = "LOAD_RECORDS"

    # Record `trees` (node j of request b), word i. `seen`: the request's nodes that are the
    # target of a link so far.
    record = Signal(TREE.layout, name="load_record")
    current = Signal(TREE.layout, name="load_current")  # the record with the word arriving
    seen = Signal(c.MAXV, name="load_seen")
    value = c.words.payload
    bits = index_bits(c.MAXV)
    target = value.as_signed()
    link_ok = (target == -1) | ((target >= 1) & (target < c.vn)
                                & ~seen.bit_select(value[:bits], 1))
    with m.State("LOAD_RECORDS"):
        m.d.comb += [c.words.ready.eq(1), current.eq(record),
                     current.as_value().word_select(c.i[:index_bits(TREE.size)], 32).eq(value)]
        with m.If(c.words_taken):
            m.d.sync += record.eq(current)
            with m.Switch(c.i):
                with m.Case(TREE.word("retrive_index")):
                    with m.If(value != c.trees):
                        m.d.sync += c.invalid.eq(1)
                with m.Case(TREE.word("retrive_next_token"), TREE.word("retrive_next_sibling")):
                    with m.If(~link_ok):
                        m.d.sync += c.invalid.eq(1)
                    with m.If(target != -1):
                        m.d.sync += seen.eq(seen | (1 << value[:bits]))
                with m.Case(TREE.word("draft_token")):
                    with m.If(value >= c.cfg.vocab_size):
                        m.d.sync += c.invalid.eq(1)
            with m.If(c.i == TREE.size - 1):
                m.d.comb += [c.vtree_wr.addr.eq(c.trees), c.vtree_wr.en.eq(1),
                             c.vtree_wr.data.token.eq(current.draft_token),
                             c.vtree_wr.data.index.eq(current.retrive_index),
                             c.vtree_wr.data.next.eq(current.retrive_next_token),
                             c.vtree_wr.data.sibling.eq(current.retrive_next_sibling)]
                m.d.sync += [c.i.eq(0), c.j.eq(c.j + 1), c.trees.eq(c.trees + 1)]
                with m.If(c.j == c.vn_last):  # the request's last record: the next one's links
                    m.d.sync += [c.j.eq(0), seen.eq(0)]
            with m.Else():
                m.d.sync += c.i.eq(c.i + 1)
        with m.If(~c.reader.busy & ~c.words.valid):
            m.d.sync += [c.i.eq(0), c.j.eq(0), seen.eq(0)]
            with m.If(c.invalid):
                m.d.sync += c.status.eq(Status.BAD_ARGUMENT)
            with m.Else():
                m.d.sync += [c.phase.eq(Phase.BUILT), c.depths_run.eq(c.cmd.depths)]
            m.next = "COMPLETE"
