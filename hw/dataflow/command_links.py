"""How the engine's sequencer links the commands that are components of their own
(``BeginRound``, ``DraftDepth``, ``ReadState``, ``LoadTree``, ``BuildVerify``, ``Verify``) to
what they share: the command's fields, the round's state and memories, K2's host port and the
memory ports' readers and writers.

Per command two functions: ``link_*`` makes the connections that hold whatever the sequencer
does (the command's fields into ``start.payload``, the round's state and the shared resources'
outputs into the component's inputs); ``drive_*`` makes those that hold only in the sequencer
state in which the command runs (the component's outputs onto the shared resources). Their
reader and writer halves are ``feed_*`` and ``drive_*`` below, on the control signatures
beside ``WordReader`` and ``WordWriter``.
``c`` is the ``EngineShared`` record of what the commands share (``hw/dataflow/shared.py``).
"""

from amaranth.lib import wiring

__all__ = ["link_begin_round", "drive_begin_round", "link_read_state", "drive_read_state",
           "link_load_tree", "drive_load_tree", "link_draft_depth", "drive_draft_depth",
           "link_build_verify", "drive_build_verify", "link_verify", "drive_verify",
           "feed_reader", "drive_reader", "feed_writer", "drive_writer"]


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
    rows = c.rows
    for banks in (rows.locs, rows.locs2):
        m.d.comb += [banks.write_at.eq(command.locs_at), banks.write.eq(c.reader.group.payload),
                     banks.write_en.eq(command.locs_en)]
    m.d.comb += [rows.vtree_wr.addr.eq(command.tree_at), rows.vtree_wr.data.eq(command.tree_write),
                 rows.vtree_wr.en.eq(command.tree_en)]


def link_begin_round(m, begin, command, c):
    """``begin_round``: the batch size, records' address and depths of ``command``; the round
    in flight's state (for its save), the batch rows' data, the reader's and table writer's
    outputs."""
    rows, state = c.rows, c.round
    start = begin.start.payload
    m.d.comb += [start.batch_size.eq(command.batch_size), start.records.eq(command.address0),
                 start.depths.eq(command.depths), begin.config.eq(c.config),
                 begin.phase.eq(state.phase), begin.batch.eq(state.batch),
                 begin.cumu_count.eq(state.cumu_count), begin.slot.eq(rows.slot_rd.data),
                 begin.seq_len.eq(rows.seq_rd.data), begin.pool.eq(rows.pool_rd.data),
                 begin.root.eq(rows.root_rd.data), begin.kv_read.eq(rows.kv_rd.data),
                 begin.host_idle.eq(c.host_idle)]
    feed_reader(m, begin.reader, c.reader)
    feed_writer(m, begin.table, c.twriter)


def drive_begin_round(m, begin, c):
    """``begin_round`` runs: the batch rows it names read (in either bank) and written (in the
    idle one), its slots' saved rows; the reader, the table writer and K2's host port (whose
    answers to its writes are dropped) are its."""
    rows = c.rows
    row = rows.row(begin.request, new=begin.row_new)
    table_row = rows.row(begin.table_request, new=begin.row_new)
    new_row = rows.row(begin.request, new=True)
    written = begin.row_write
    kv = rows.kv_row(begin.table_request, begin.kv_slot, new=True)
    m.d.comb += [rows.slot_rd.addr.eq(row), rows.seq_rd.addr.eq(table_row),
                 rows.pool_rd.addr.eq(table_row),
                 rows.root_rd.addr.eq(begin.request), rows.kv_rd.addr.eq(kv),
                 rows.kv_wr.addr.eq(kv), rows.kv_wr.data.eq(begin.kv_write),
                 rows.kv_wr.en.eq(begin.kv_en)]
    for memory, value in ((rows.slot_wr, written.slot), (rows.seq_wr, written.seq_len),
                          (rows.pool_wr, written.pool)):
        m.d.comb += [memory.addr.eq(new_row), memory.data.eq(value),
                     memory.en.eq(begin.row_write_en)]
    m.d.comb += [rows.root_wr.addr.eq(begin.request), rows.root_wr.data.eq(written.root),
                 rows.root_wr.en.eq(begin.row_write_en),
                 rows.info_wr.addr.eq(begin.info_at), rows.info_wr.data.eq(begin.info_write),
                 rows.info_wr.en.eq(begin.info_en), rows.saving_slot.eq(begin.saved_slot),
                 rows.saving.eq(begin.saved_en), rows.slot_row_wr.addr.eq(begin.slot_row_at),
                 rows.slot_row_wr.data.eq(begin.slot_row_write),
                 rows.slot_row_wr.en.eq(begin.slot_row_en)]
    wiring.connect(m, begin.k2_cmd, c.host_cmd)
    m.d.comb += c.k2.host_rsp.ready.eq(1)
    drive_reader(m, begin.reader, c.reader)
    drive_writer(m, begin.table, c.twriter)


def link_draft_depth(m, draft, command, c):
    """``draft_depth``: the width override and three addresses of ``command``; the round's
    state, the batch rows' data, the reader's, result writer's and K2's outputs. K2's
    requests are ``draft_depth``'s alone: connected here for good."""
    rows, state = c.rows, c.round
    start = draft.start.payload
    m.d.comb += [start.width_given.eq(command.width_given), start.width.eq(command.width),
                 start.probas.eq(command.address0), start.tokens.eq(command.address1),
                 start.frontier.eq(command.address2),
                 draft.phase.eq(state.phase), draft.stop_kind.eq(state.stop_kind),
                 draft.batch.eq(state.batch), draft.width.eq(state.width),
                 draft.depth.eq(state.depth),
                 draft.depths.eq(state.depths), draft.input_count.eq(state.input_count),
                 draft.cumu_count.eq(state.cumu_count), draft.verify_num.eq(state.verify_num),
                 draft.config.eq(c.config), draft.slot.eq(rows.slot_rd.data),
                 draft.seq_len.eq(rows.seq_rd.data), draft.kv.eq(rows.kv_rd.data),
                 draft.host_idle.eq(c.host_idle)]
    wiring.connect(m, draft.k2_req, c.k2.req)
    wiring.connect(m, c.k2.done, draft.k2_done)
    _feed_host_responses(m, draft.k2_rsp, c)
    feed_reader(m, draft.reader, c.reader)
    feed_writer(m, draft.results, c.rwriter)


def drive_draft_depth(m, draft, c):
    """``draft_depth`` runs: the batch row it names addressed in the round's bank; the
    reader, the result writer and K2's host port are its."""
    rows = c.rows
    row = rows.row(draft.row_at)
    m.d.comb += [rows.slot_rd.addr.eq(row), rows.seq_rd.addr.eq(row),
                 rows.kv_rd.addr.eq(rows.kv_row(draft.row_at, draft.kv_slot))]
    _drive_host_port(m, draft, c)
    drive_reader(m, draft.reader, c.reader)
    drive_writer(m, draft.results, c.rwriter)


def link_read_state(m, read_state, command, c):
    """``read_state``: the slot and record address of ``command`` (the command stream's
    payload); the slot memories' data, the round's state, the result writer's and K2's
    answers."""
    rows, state = c.rows, c.round
    m.d.comb += [read_state.start.payload.slot.eq(command.slot),
                 read_state.start.payload.address.eq(command.address0),
                 read_state.info.eq(rows.info_rd.data),
                 read_state.batch_seq_len.eq(rows.seq_rd.data),
                 read_state.batch_pool.eq(rows.pool_rd.data),
                 read_state.in_round.eq(state.in_round), read_state.saved.eq(rows.saved),
                 read_state.phase.eq(state.phase), read_state.cumu_count.eq(state.cumu_count)]
    _feed_host_responses(m, read_state.k2_rsp, c)
    feed_writer(m, read_state.writer, c.rwriter)


def drive_read_state(m, read_state, c):
    """``read_state`` runs: the slot's rows addressed (``c.command`` is the command)."""
    rows = c.rows
    m.d.comb += [rows.info_rd.addr.eq(c.command.slot), rows.slot_row_rd.addr.eq(c.command.slot),
                 rows.seq_rd.addr.eq(rows.row(rows.slot_row_rd.data)),
                 rows.pool_rd.addr.eq(rows.row(rows.slot_row_rd.data))]
    _drive_host_port(m, read_state, c)
    drive_writer(m, read_state.writer, c.rwriter)


def link_load_tree(m, load_tree, command, c):
    """``load_tree``: ``n``, ``S - 1`` and the two addresses of ``command``; the round's
    phase and batch, the vocabulary, the reader's outputs."""
    state = c.round
    start = load_tree.start.payload
    m.d.comb += [start.verify_num.eq(command.verify_num), start.depths.eq(command.depths),
                 start.trees.eq(command.address0), start.locs.eq(command.address1),
                 load_tree.phase.eq(state.phase), load_tree.batch.eq(state.batch),
                 load_tree.vocab_size.eq(c.config.vocab_size)]
    feed_reader(m, load_tree.reader, c.reader)


def drive_load_tree(m, load_tree, c):
    """``load_tree`` runs: the reader and the verify tree's memories are its."""
    drive_reader(m, load_tree.reader, c.reader)
    _drive_verify_tree(m, load_tree, c)


def link_build_verify(m, build, command, c):
    """``build_verify``: the mask mode and five addresses of ``command``; the round's state,
    the batch rows' data, the KV slots read, the reader's, writers' and K2's outputs. The mask
    writer is driven here for good: ``mask_write`` is only ``build_verify``'s."""
    rows, state = c.rows, c.round
    start = build.start.payload
    m.d.comb += [start.mode.eq(command.tree_mask_mode), start.locs.eq(command.address0),
                 start.trees.eq(command.address1), start.mask.eq(command.address2),
                 start.indptrs.eq(command.address3), start.kv_indices.eq(command.address4),
                 build.phase.eq(state.phase), build.depths_run.eq(state.depths_run),
                 build.batch.eq(state.batch), build.verify_num.eq(state.verify_num),
                 build.cumu_count.eq(state.cumu_count), build.cumu_last.eq(state.cumu_last),
                 build.config.eq(c.config), build.slot.eq(rows.slot_rd.data),
                 build.seq_len.eq(rows.seq_rd.data), build.pool.eq(rows.pool_rd.data),
                 build.k4_seq_len.eq(rows.seq_k4_rd.data),
                 build.mask_seq_len.eq(rows.seq_mask_rd.data),
                 build.locs_read.eq(rows.locs.read_group)]
    _feed_host_responses(m, build.k2_rsp, c)
    feed_reader(m, build.reader, c.reader)
    for control, writer in ((build.results, c.rwriter), (build.table, c.twriter),
                            (build.masks, c.mwriter)):
        feed_writer(m, control, writer)
    drive_writer(m, build.masks, c.mwriter)


def drive_build_verify(m, build, c):
    """``build_verify`` runs: the batch rows it names addressed in the round's bank; the
    reader, result and table writers, K2's host port and the verify tree's memories are its."""
    rows = c.rows
    m.d.comb += [rows.slot_rd.addr.eq(rows.row(build.slot_at)),
                 rows.seq_rd.addr.eq(rows.row(build.seq_at)),
                 rows.pool_rd.addr.eq(rows.row(build.pool_at)),
                 rows.seq_k4_rd.addr.eq(rows.row(build.k4_seq_at)),
                 rows.seq_mask_rd.addr.eq(rows.row(build.mask_seq_at)),
                 rows.locs.read_at.eq(build.locs_read_at)]
    _drive_host_port(m, build, c)
    drive_reader(m, build.reader, c.reader)
    drive_writer(m, build.results, c.rwriter)
    drive_writer(m, build.table, c.twriter)
    _drive_verify_tree(m, build, c)


def link_verify(m, verify, command, c):
    """``verify``: the LFSR flag, row pitch, four addresses, thresholds and EOS token of
    ``command``; the round's state, the batch rows' data, the verify tree's nodes and K7's KV
    slots read, the reader's and writers' outputs."""
    rows, state = c.rows, c.round
    start = verify.start.payload
    m.d.comb += [start.lfsr.eq(command.lfsr), start.row_pitch.eq(command.row_pitch),
                 start.requests.eq(command.address0), start.logit_rows.eq(command.address1),
                 start.results.eq(command.address2), start.verified_id.eq(command.address3),
                 start.threshold_single.eq(command.threshold_single),
                 start.threshold_acc.eq(command.threshold_acc),
                 start.eos_token_id.eq(command.eos_token_id),
                 verify.phase.eq(state.phase), verify.batch.eq(state.batch), verify.vn.eq(state.vn),
                 verify.vn_last.eq(state.vn_last), verify.request_last.eq(state.request_last),
                 verify.depths_run.eq(state.depths_run), verify.config.eq(c.config),
                 verify.pool.eq(rows.pool_rd.data), verify.seq_len.eq(rows.seq_rd.data),
                 verify.tree_read.eq(rows.vtree_rd.data), verify.locs_read.eq(rows.locs2.read_data)]
    feed_reader(m, verify.reader, c.reader)
    feed_writer(m, verify.results, c.rwriter)
    feed_writer(m, verify.table, c.twriter)


def drive_verify(m, verify, c):
    """``verify`` runs: the batch rows it names read and its ``seq_len`` rows written in the
    round's bank, the verify tree's and K7's KV-slot reads; the reader, result and table
    writers are its."""
    rows = c.rows
    m.d.comb += [rows.pool_rd.addr.eq(rows.row(verify.pool_at)),
                 rows.seq_rd.addr.eq(rows.row(verify.seq_at)),
                 rows.seq_wr.addr.eq(rows.row(verify.seq_write_at)),
                 rows.seq_wr.data.eq(verify.seq_write),
                 rows.seq_wr.en.eq(verify.seq_write_en), rows.vtree_rd.addr.eq(verify.tree_read_at),
                 rows.locs2.read_at.eq(verify.locs_read_at)]
    drive_reader(m, verify.reader, c.reader)
    drive_writer(m, verify.results, c.rwriter)
    drive_writer(m, verify.table, c.twriter)
