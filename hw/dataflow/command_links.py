"""How the engine's sequencer links the commands that are components of their own
(``ReadState``, ``LoadTree``, ``BuildVerify``) to what they share: the command's fields, the
round's state and memories, K2's host port and the memory ports' readers and writers.

Per command two functions: ``link_*`` makes the connections that hold whatever the sequencer
does (the command's fields into ``start.payload``, the round's state and the shared resources'
outputs into the component's inputs); ``drive_*`` makes those that hold only in the sequencer
state in which the command runs (the component's outputs onto the shared resources).
``c`` holds the engine's shared signals, memories and kernels
(``PersistentEngine.elaborate``).
"""

from amaranth.lib import wiring

from .memory_ports import drive_reader, drive_writer, feed_reader, feed_writer

__all__ = ["link_read_state", "drive_read_state", "link_load_tree", "drive_load_tree",
           "link_build_verify", "drive_build_verify"]


def _feed_host_responses(m, k2_rsp, c):
    m.d.comb += [k2_rsp.valid.eq(c.k2.host_rsp.valid), k2_rsp.payload.eq(c.k2.host_rsp.payload)]


def _drive_host_port(m, command, c):
    """The command's ``k2_cmd`` and ``k2_rsp`` onto K2's host port."""
    wiring.connect(m, command.k2_cmd, c.host_cmd)
    m.d.comb += c.k2.host_rsp.ready.eq(command.k2_rsp.ready)


def _drive_verify_tree(m, command, c):
    """A command's verify tree (``locs_at``/``locs_en`` with the reader's group of KV slots,
    ``tree_at``/``tree_write``/``tree_en``) into the engine's memories."""
    for banks in (c.locs, c.locs2):
        m.d.comb += [banks.write_at.eq(command.locs_at), banks.write.eq(c.reader.group.payload),
                     banks.write_en.eq(command.locs_en)]
    m.d.comb += [c.vtree_wr.addr.eq(command.tree_at), c.vtree_wr.data.eq(command.tree_write),
                 c.vtree_wr.en.eq(command.tree_en)]


def link_read_state(m, read_state, command, c):
    """``read_state``: the slot and record address of ``command`` (the command stream's
    payload); the slot memories' data, the round's state, the result writer's and K2's
    answers."""
    m.d.comb += [read_state.start.payload.slot.eq(command.slot),
                 read_state.start.payload.address.eq(command.address0),
                 read_state.info.eq(c.info_rd.data), read_state.batch_seq_len.eq(c.seq_rd.data),
                 read_state.batch_pool.eq(c.pool_rd.data),
                 read_state.in_round.eq(c.in_round), read_state.saved.eq(c.saved),
                 read_state.phase.eq(c.phase), read_state.cumu_count.eq(c.cumu_count)]
    _feed_host_responses(m, read_state.k2_rsp, c)
    feed_writer(m, read_state.writer, c.rwriter)


def drive_read_state(m, read_state, c):
    """``read_state`` runs: the slot's rows addressed (``c.cmd`` is the command)."""
    m.d.comb += [c.info_rd.addr.eq(c.cmd.slot), c.slot_row_rd.addr.eq(c.cmd.slot),
                 c.seq_rd.addr.eq(c.row(c.slot_row_rd.data)),
                 c.pool_rd.addr.eq(c.row(c.slot_row_rd.data))]
    _drive_host_port(m, read_state, c)
    drive_writer(m, read_state.writer, c.rwriter)


def link_load_tree(m, load_tree, command, c):
    """``load_tree``: ``n``, ``S - 1`` and the two addresses of ``command``; the round's
    phase and batch, the vocabulary, the reader's outputs."""
    start = load_tree.start.payload
    m.d.comb += [start.verify_num.eq(command.verify_num), start.depths.eq(command.depths),
                 start.trees.eq(command.address0), start.locs.eq(command.address1),
                 load_tree.phase.eq(c.phase), load_tree.batch.eq(c.batch),
                 load_tree.vocab_size.eq(c.cfg.vocab_size)]
    feed_reader(m, load_tree.reader, c.reader)


def drive_load_tree(m, load_tree, c):
    """``load_tree`` runs: the reader and the verify tree's memories are its."""
    drive_reader(m, load_tree.reader, c.reader)
    _drive_verify_tree(m, load_tree, c)


def link_build_verify(m, build, command, c):
    """``build_verify``: the mask mode and five addresses of ``command``; the round's state,
    the batch rows' data, the KV slots read, the reader's, writers' and K2's outputs. The mask
    writer is driven here for good: ``mask_write`` is only ``build_verify``'s."""
    start = build.start.payload
    m.d.comb += [start.mode.eq(command.tree_mask_mode), start.locs.eq(command.address0),
                 start.trees.eq(command.address1), start.mask.eq(command.address2),
                 start.indptrs.eq(command.address3), start.kv_indices.eq(command.address4),
                 build.phase.eq(c.phase), build.depths_run.eq(c.depths_run),
                 build.batch.eq(c.batch), build.verify_num.eq(c.verify_num),
                 build.cumu_count.eq(c.cumu_count), build.cumu_last.eq(c.cumu_last),
                 build.config.eq(c.cfg), build.slot.eq(c.slot_rd.data),
                 build.seq_len.eq(c.seq_rd.data), build.pool.eq(c.pool_rd.data),
                 build.k4_seq_len.eq(c.seq_k4_rd.data), build.mask_seq_len.eq(c.seq_mask_rd.data),
                 build.locs_read.eq(c.locs.read_group)]
    _feed_host_responses(m, build.k2_rsp, c)
    feed_reader(m, build.reader, c.reader)
    for control, writer in ((build.results, c.rwriter), (build.table, c.twriter),
                            (build.masks, c.mwriter)):
        feed_writer(m, control, writer)
    drive_writer(m, build.masks, c.mwriter)


def drive_build_verify(m, build, c):
    """``build_verify`` runs: the batch rows it names addressed in the round's bank; the
    reader, result and table writers, K2's host port and the verify tree's memories are its."""
    m.d.comb += [c.slot_rd.addr.eq(c.row(build.slot_at)), c.seq_rd.addr.eq(c.row(build.seq_at)),
                 c.pool_rd.addr.eq(c.row(build.pool_at)),
                 c.seq_k4_rd.addr.eq(c.row(build.k4_seq_at)),
                 c.seq_mask_rd.addr.eq(c.row(build.mask_seq_at)),
                 c.locs.read_at.eq(build.locs_read_at)]
    _drive_host_port(m, build, c)
    drive_reader(m, build.reader, c.reader)
    drive_writer(m, build.results, c.rwriter)
    drive_writer(m, build.table, c.twriter)
    _drive_verify_tree(m, build, c)
