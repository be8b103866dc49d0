"""How the engine's sequencer links the commands that are components of their own
(``BeginRound``, ``ReadState``, ``LoadTree``, ``BuildVerify``, ``Verify``) to what they share:
the command's fields, the round's state and memories, K2's host port and the memory ports'
readers and writers.

Per command two functions: ``link_*`` makes the connections that hold whatever the sequencer
does (the command's fields into ``start.payload``, the round's state and the shared resources'
outputs into the component's inputs); ``drive_*`` makes those that hold only in the sequencer
state in which the command runs (the component's outputs onto the shared resources). Their
reader and writer halves are ``feed_*`` and ``drive_*`` below, on the control signatures
beside ``WordReader`` and ``WordWriter``.
``c`` holds the engine's shared signals, memories and kernels
(``PersistentEngine.elaborate``).
"""

from amaranth.lib import wiring

from .commands import ONE_BITS

__all__ = ["link_begin_round", "drive_begin_round", "link_read_state", "drive_read_state",
           "link_load_tree", "drive_load_tree", "link_build_verify", "drive_build_verify",
           "feed_reader", "drive_reader", "feed_writer", "drive_writer", "link_verify",
           "drive_verify"]


def feed_reader(m, control, reader):
    """What a command's ``reader_control_signature`` reads of a ``WordReader``, whatever
    the sequencer does."""
    m.d.comb += [control.words.valid.eq(reader.words.valid),
                 control.words.payload.eq(reader.words.payload),
                 control.group.valid.eq(reader.group.valid),
                 control.group.payload.eq(reader.group.payload),
                 control.busy.eq(reader.busy), control.can_start.eq(reader.can_start)]


def drive_reader(m, control, reader):
    """A command's ``reader_control_signature`` onto a ``WordReader`` (in the states the
    command owns the reader)."""
    m.d.comb += [reader.start.eq(control.start), reader.address.eq(control.address),
                 reader.count.eq(control.count),
                 reader.words.ready.eq(control.words.ready),
                 reader.group.ready.eq(control.group.ready)]


def drive_writer(m, control, writer):
    """A command's ``writer_control_signature`` onto a ``WordWriter`` (in the states the
    command owns the writer)."""
    m.d.comb += [writer.start.eq(control.start), writer.address.eq(control.address),
                 writer.count.eq(control.count),
                 writer.words.valid.eq(control.words.valid),
                 writer.words.payload.eq(control.words.payload)]
    if "group" in control.signature.members:
        m.d.comb += [writer.group.valid.eq(control.group.valid),
                     writer.group.payload.eq(control.group.payload)]


def feed_writer(m, control, writer):
    """What a command's ``writer_control_signature`` reads of a ``WordWriter``, whatever
    the sequencer does."""
    m.d.comb += [control.busy.eq(writer.busy), control.can_start.eq(writer.can_start),
                 control.words.ready.eq(writer.words.ready)]
    if "group" in control.signature.members:
        m.d.comb += control.group.ready.eq(writer.group.ready)


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


def link_begin_round(m, begin, command, c):
    """``begin_round``: the batch size, records' address and depths of ``command``; the round
    in flight's state (for its save), the batch rows' data, the reader's and table writer's
    outputs."""
    start = begin.start.payload
    m.d.comb += [start.batch_size.eq(command.batch_size), start.records.eq(command.address0),
                 start.depths.eq(command.depths), begin.config.eq(c.cfg),
                 begin.phase.eq(c.phase), begin.batch.eq(c.batch),
                 begin.cumu_count.eq(c.cumu_count), begin.slot.eq(c.slot_rd.data),
                 begin.seq_len.eq(c.seq_rd.data), begin.pool.eq(c.pool_rd.data),
                 begin.root.eq(c.root_rd.data), begin.kv_read.eq(c.kv_rd.data),
                 begin.host_idle.eq(c.host_idle)]
    feed_reader(m, begin.reader, c.reader)
    feed_writer(m, begin.table, c.twriter)


def drive_begin_round(m, begin, c):
    """``begin_round`` runs: the batch rows it names read (in either bank) and written (in the
    idle one), its slots' saved rows, the frontier's roots; the reader, the table writer and
    K2's host port (whose answers to its writes are dropped) are its."""
    row, new_row = c.row(begin.row_at, new=begin.row_new), c.row(begin.row_write_at, new=True)
    written = begin.row_write
    kv = c.kv_row(begin.kv_at, begin.kv_slot, new=True)
    m.d.comb += [c.slot_rd.addr.eq(row), c.seq_rd.addr.eq(row), c.pool_rd.addr.eq(row),
                 c.root_rd.addr.eq(begin.row_at), c.kv_rd.addr.eq(kv), c.kv_wr.addr.eq(kv),
                 c.kv_wr.data.eq(begin.kv_write), c.kv_wr.en.eq(begin.kv_en)]
    for memory, value in ((c.slot_wr, written.slot), (c.seq_wr, written.seq_len),
                          (c.pool_wr, written.pool)):
        m.d.comb += [memory.addr.eq(new_row), memory.data.eq(value),
                     memory.en.eq(begin.row_write_en)]
    m.d.comb += [c.root_wr.addr.eq(begin.row_write_at), c.root_wr.data.eq(written.root),
                 c.root_wr.en.eq(begin.row_write_en),
                 c.info_wr.addr.eq(begin.info_at), c.info_wr.data.eq(begin.info_write),
                 c.info_wr.en.eq(begin.info_en), c.saving_slot.eq(begin.saved_slot),
                 c.saving.eq(begin.saved_en), c.slot_row_wr.addr.eq(begin.slot_row_at),
                 c.slot_row_wr.data.eq(begin.slot_row_write),
                 c.slot_row_wr.en.eq(begin.slot_row_en)]
    frontier = begin.frontier_at * c.WM
    for memory, value in ((c.fscore_wr, ONE_BITS), (c.fnode_wr, 0), (c.fmask_wr, 0)):
        m.d.comb += [memory.addr.eq(frontier), memory.data.eq(value),
                     memory.en.eq(begin.frontier_en)]
    wiring.connect(m, begin.k2_cmd, c.host_cmd)
    m.d.comb += c.k2.host_rsp.ready.eq(1)
    drive_reader(m, begin.reader, c.reader)
    drive_writer(m, begin.table, c.twriter)


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


def link_verify(m, verify, command, c):
    """``verify``: the LFSR flag, row pitch, four addresses, thresholds and EOS token of
    ``command``; the round's state, the batch rows' data, the verify tree's nodes and K7's KV
    slots read, the reader's and writers' outputs."""
    start = verify.start.payload
    m.d.comb += [start.lfsr.eq(command.lfsr), start.row_pitch.eq(command.row_pitch),
                 start.requests.eq(command.address0), start.logit_rows.eq(command.address1),
                 start.results.eq(command.address2), start.verified_id.eq(command.address3),
                 start.threshold_single.eq(command.threshold_single),
                 start.threshold_acc.eq(command.threshold_acc),
                 start.eos_token_id.eq(command.eos_token_id),
                 verify.phase.eq(c.phase), verify.batch.eq(c.batch), verify.vn.eq(c.vn),
                 verify.vn_last.eq(c.vn_last), verify.request_last.eq(c.request_last),
                 verify.depths_run.eq(c.depths_run), verify.config.eq(c.cfg),
                 verify.pool.eq(c.pool_rd.data), verify.seq_len.eq(c.seq_rd.data),
                 verify.tree_read.eq(c.vtree_rd.data), verify.locs_read.eq(c.locs2.read_data)]
    feed_reader(m, verify.reader, c.reader)
    feed_writer(m, verify.results, c.rwriter)
    feed_writer(m, verify.table, c.twriter)


def drive_verify(m, verify, c):
    """``verify`` runs: the batch rows it names read and its ``seq_len`` rows written in the
    round's bank, the verify tree's and K7's KV-slot reads; the reader, result and table
    writers are its."""
    m.d.comb += [c.pool_rd.addr.eq(c.row(verify.pool_at)), c.seq_rd.addr.eq(c.row(verify.seq_at)),
                 c.seq_wr.addr.eq(c.row(verify.seq_write_at)), c.seq_wr.data.eq(verify.seq_write),
                 c.seq_wr.en.eq(verify.seq_write_en), c.vtree_rd.addr.eq(verify.tree_read_at),
                 c.locs2.read_at.eq(verify.locs_read_at)]
    drive_reader(m, verify.reader, c.reader)
    drive_writer(m, verify.results, c.rwriter)
    drive_writer(m, verify.table, c.twriter)
