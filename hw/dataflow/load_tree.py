"""The engine's ``load_tree`` command (``hw.dataflow.engine.PersistentEngine``): a verify tree
the caller built (SGLang's ``build_tree_kernel_efficient``, any other builder) in place of the
round's own, for the fused verify (docs/engine.md, "Loading a caller's tree").

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

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.params import index_bits

from .commands import Phase, Status
from .memory_ports import reader_control_signature
from .records import TREE
from .runs import finish, idle_state, store_locs_states

__all__ = ["LoadTree", "verify_tree_layout"]

#: A verify-tree node as the engine keeps it for the fused verify (``verify_tree`` memory).
verify_tree_layout = data.StructLayout({"token": 32, "index": 32, "next": signed(16),
                                        "sibling": signed(16)})


class LoadTree(wiring.Component):
    """``load_tree`` (see the module): started by a ``start`` transfer, finished by a
    ``done`` transfer offered in the clock the command ends.

    Parameters
    ----------
    params : EngineParams
        The engine's build.

    Members
    -------
    start : In(stream.Signature({"verify_num", "depths", "trees", "locs"}))
        The command's ``verify_num`` (``n``) and ``depths`` (``S - 1``), the byte addresses of
        the tree records (``address0``) and of the KV slots (``address1``).
    done : Out(stream.Signature({"status": 3, "sized": 1}))
        The ``Status``; ``sized``: ``n`` passed the argument checks (the engine's verify size
        is ``n`` from then on, also when a record is refused). On ``OK`` the round is
        ``BUILT`` with ``depths`` depths run.
    phase : In(2)
        The round in flight's ``Phase``.
    batch : In(range(max_batch + 1))
        The round's requests.
    vocab_size : In(32)
        The configured vocabulary (draft tokens must be below it).
    reader : Out(reader_control_signature(...))
        The sequencer's reader (``read``).
    locs_at, locs_en : Out
        Index and enable of a group of KV slots written into ``verify_cache_locs`` and
        K7's copy (the group is ``reader.group``'s payload).
    tree_write : Out(verify_tree_layout), tree_at, tree_en
        A tree node into ``verify_tree``.
    """

    def __init__(self, params):
        self._params = p = params
        layout = p.command_layout
        lanes = p.port_bits // 32
        super().__init__({
            "start": In(stream.Signature(data.StructLayout({
                "verify_num": layout["verify_num"].shape, "depths": layout["depths"].shape,
                "trees": p.address_width, "locs": p.address_width}))),
            "done": Out(stream.Signature(data.StructLayout({"status": 3, "sized": 1}))),
            "phase": In(2),
            "batch": In(range(p.max_batch + 1)),
            "vocab_size": In(32),
            "reader": Out(reader_control_signature(p.address_width, p.max_run_words, lanes)),
            "locs_at": Out(range(p.max_batch * p.max_verify_num)),
            "locs_en": Out(1),
            "tree_write": Out(verify_tree_layout),
            "tree_at": Out(range(p.max_batch * p.max_verify_num)),
            "tree_en": Out(1),
        })

    def elaborate(self, platform):
        p = self._params
        MAXV, MAXB = p.max_verify_num, p.max_batch
        m = Module()
        command = Signal.like(self.start.payload, reset_less=True)  # datapath
        n = command.verify_num
        reader, words = self.reader, self.reader.words
        nodes = Signal(range(MAXB * MAXV + 1))  # batch * n
        i = Signal(range(max(TREE.size, p.max_run_words) + 1))  # word (records: within one)
        j = Signal(range(MAXV + 1))  # record within the request
        trees = Signal(range(MAXB * MAXV + 1))  # records done
        invalid = Signal()

        def end(status, sized=1):
            finish(m, self.done, status=status, sized=sized)

        with m.FSM(name="load_tree"):
            idle_state(m, self.start, command, clear=(i, j, trees, invalid))

            with m.State("CHECK"):
                m.d.sync += nodes.eq(self.batch * n)
                with m.If((self.phase != Phase.DRAFTING) & (self.phase != Phase.DRAFTED)):
                    end(Status.BAD_PHASE, sized=0)
                with m.Elif((n < 1) | (n > MAXV) | (command.depths == 0)
                            | (command.depths > p.max_depths)):
                    end(Status.BAD_ARGUMENT, sized=0)
                with m.Else():
                    m.next = "LOCS_START"

            # The verify forward's B * n KV slots, a read beat a clock, into both copies.
            store_locs_states(m, self, address=command.locs, count=nodes, index=i,
                              then="TREE_START")

            with m.State("TREE_START"):
                m.d.comb += [reader.start.eq(1), reader.address.eq(command.trees),
                             reader.count.eq(nodes * TREE.size)]
                m.next = "RECORDS"

            # Record `trees` (node j of the request), word i. `seen`: the request's nodes that
            # are the target of a link so far.
            record = Signal(TREE.layout, name="load_record", reset_less=True)
            current = Signal(TREE.layout, name="load_current", reset_less=True)  # + arriving word
            seen = Signal(MAXV, name="load_seen")
            value = words.payload
            bits = index_bits(MAXV)
            target = value.as_signed()
            link_ok = (target == -1) | ((target >= 1) & (target < n)
                                        & ~seen.bit_select(value[:bits], 1))
            taken = words.valid & words.ready
            with m.State("RECORDS"):
                m.d.comb += [words.ready.eq(1), current.eq(record),
                             current.as_value().word_select(i[:index_bits(TREE.size)], 32)
                             .eq(value)]
                with m.If(taken):
                    m.d.sync += record.eq(current)
                    with m.Switch(i):
                        with m.Case(TREE.word("retrive_index")):
                            with m.If(value != trees):
                                m.d.sync += invalid.eq(1)
                        with m.Case(TREE.word("retrive_next_token"),
                                    TREE.word("retrive_next_sibling")):
                            with m.If(~link_ok):
                                m.d.sync += invalid.eq(1)
                            with m.If(target != -1):
                                m.d.sync += seen.eq(seen | (1 << value[:bits]))
                        with m.Case(TREE.word("draft_token")):
                            with m.If(value >= self.vocab_size):
                                m.d.sync += invalid.eq(1)
                    with m.If(i == TREE.size - 1):
                        m.d.comb += [self.tree_at.eq(trees), self.tree_en.eq(1),
                                     self.tree_write.token.eq(current.draft_token),
                                     self.tree_write.index.eq(current.retrive_index),
                                     self.tree_write.next.eq(current.retrive_next_token),
                                     self.tree_write.sibling.eq(current.retrive_next_sibling)]
                        m.d.sync += [i.eq(0), j.eq(j + 1), trees.eq(trees + 1)]
                        with m.If(j == n - 1):  # the request's last record: the next one's
                            m.d.sync += [j.eq(0), seen.eq(0)]
                    with m.Else():
                        m.d.sync += i.eq(i + 1)
                with m.If(~reader.busy & ~words.valid):
                    m.d.sync += seen.eq(0)
                    end(Mux(invalid, Status.BAD_ARGUMENT, Status.OK))
        return m
