"""K4 verify-tree build goldens (docs/kernels.md §6).

Two in-place ops build what the target model's tree-attention verify forward needs:

* :func:`build_tree_kernel_efficient` — sgl-kernel's op of that name (``build_tree_efficient``
  in ``sgl-kernel/csrc/speculative/eagle_utils.cu``): same arguments, same order, same
  ``tree_mask_mode`` values, same in-place writes, so an SGLang user can swap it in. The verify
  set arrives already chosen (``selected_index``, SGLang's sorted top-k of the flattened
  draft scores) and the parents are decoded from ``parent_list``.
* :func:`fused_tree_mask_operator` — the project's op: it selects the verify set from the
  cumulative tree of §0 (root + the ``n-1`` best-scored nodes, ties to the lower node id,
  listed in ascending node id) and writes the retrive arrays, positions, draft tokens and the
  mask in one of the three layouts; its bit-packed layout serves up to 128 nodes.

Shared vocabulary. A *verify tree* of ``n`` nodes is listed by *position* ``0..n-1``,
position 0 being the root (the last verified token). ``parent_pos[i]`` is the position of
node i's parent. Row i of the mask is true at column i (itself), at column 0 (the root) and at
every ancestor. ``positions = seq_len + depth`` (root depth 0). ``retrive_index[b, i] =
b*n + i``; ``retrive_next_token[b, i]`` is the first child of i and
``retrive_next_sibling[b, i]`` the next sibling, children in ascending position, -1 for none.

Mask layouts (``tree_mask_mode``, SGLang's ``TreeMaskMode``):

* 0 ``FULL_MASK``: per request a ``[n, seq_len + n]`` bool matrix, requests concatenated
  (request b starts at ``n*n*b + n*sum(seq_len[:b])``); columns ``0..seq_len-1`` are the
  prefix (true), column ``seq_len + c`` is tree position c.
* 1 ``QLEN_ONLY``: ``[B, n, n]`` bool, the tree part only.
* 2 ``QLEN_ONLY_BITPACKING``: the tree part, one bit per column, little-endian: column c is
  bit ``c mod 8`` of byte ``c div 8`` of the row. The row stride differs between the two ops
  (see each op): the fused op uses ``ceil(n/8)`` bytes (n <= 128), SGLang 1, 2 or 4 bytes
  (n <= 32).
"""

import enum

import numpy as np

from ._abi import check_index_range, check_int, in_view, out_view

__all__ = [
    "MAX_PACKED_VERIFY_NUM",
    "SGLANG_MAX_PACKED_DRAFT_TOKENS",
    "TreeMaskMode",
    "build_tree_kernel_efficient",
    "fused_tree_mask_operator",
    "pack_tree_mask",
    "packed_row_bytes",
    "select_verify_nodes",
    "sglang_packed_row_bytes",
    "tree_mask_size",
    "unpack_tree_mask",
    "verify_set_size",
]


class TreeMaskMode(enum.IntEnum):
    """``tree_mask_mode`` values, as SGLang's ``TreeMaskMode``."""

    FULL_MASK = 0
    QLEN_ONLY = 1
    QLEN_ONLY_BITPACKING = 2


# The fused op's bit-packed layout serves up to 128 verify nodes (16 bytes a row).
MAX_PACKED_VERIFY_NUM = 128
# sgl-kernel's packed layout: rows of 1, 2 or 4 bytes (uint8/uint16/uint32 tensors).
SGLANG_MAX_PACKED_DRAFT_TOKENS = 32
# Packed masks may be handed over as any little-endian unsigned integer array (SGLang
# allocates uint8, uint16 or uint32 by n); the ops write its bytes.
_PACKED_DTYPES = tuple(np.dtype(f"<u{size}") for size in (1, 2, 4, 8))


# --- layout helpers -------------------------------------------------------------------------


def verify_set_size(verify_num, cumu_count):
    """Return ``n = min(verify_num, cumu_count)``, the verify-set size of §6 (root included)."""
    return min(int(verify_num), int(cumu_count))


def packed_row_bytes(n):
    """Bytes per row of the fused op's packed mask: ``ceil(n/8)``."""
    return (int(n) + 7) // 8


def sglang_packed_row_bytes(draft_token_num):
    """Bytes per row of sgl-kernel's packed mask: 1 (n <= 8), 2 (n <= 16), 4 (n <= 32).

    This is the ``num_bytes_per_item`` of sgl-kernel's host code and the item size of the
    uint8/uint16/uint32 tensor SGLang's ``build_tree_kernel_efficient`` allocates. Raises
    ``ValueError`` for n outside ``1..32``.
    """
    n = check_int("draft_token_num", draft_token_num, 1, SGLANG_MAX_PACKED_DRAFT_TOKENS)
    return 1 if n <= 8 else 2 if n <= 16 else 4


def tree_mask_size(tree_mask_mode, seq_lens, n):
    """Number of elements of the fused op's ``tree_mask`` (its dtype: bool, bool, uint8).

    ``seq_lens`` is the batch's sequence lengths (its sum matters for FULL_MASK only), ``n``
    the verify-set size.
    """
    mode = TreeMaskMode(int(tree_mask_mode))
    lens = np.asarray(seq_lens, dtype=np.int64)
    b, n = lens.size, int(n)
    if mode == TreeMaskMode.FULL_MASK:
        return n * int(lens.sum()) + b * n * n
    if mode == TreeMaskMode.QLEN_ONLY:
        return b * n * n
    return b * n * packed_row_bytes(n)


def pack_tree_mask(mask):
    """Pack a bool mask ``[..., n, n]`` into ``[..., n, ceil(n/8)]`` uint8 (bit c of byte c div 8).

    Padding bits (columns ``>= n``) are zero.
    """
    return np.packbits(np.asarray(mask, dtype=np.bool_), axis=-1, bitorder="little")


def unpack_tree_mask(packed, n):
    """Inverse of :func:`pack_tree_mask`: ``[..., n, bytes]`` uint8 -> ``[..., n, n]`` bool.

    ``bytes`` may exceed ``ceil(n/8)`` (e.g. SGLang's 4-byte rows at n = 17..24, viewed as
    uint8); only the first n bits of a row are returned.
    """
    bits = np.unpackbits(np.asarray(packed, dtype=np.uint8), axis=-1, bitorder="little")
    return bits[..., : int(n)].astype(np.bool_)


def _check_mode(tree_mask_mode):
    mode = check_int("tree_mask_mode", tree_mask_mode, 0, 2)
    return TreeMaskMode(mode)


def _check_non_negative(name, values):
    """Raise ``ValueError`` if any element of ``values`` is negative."""
    if values.size and values.min() < 0:
        raise ValueError(f"`{name}` values must be non-negative, not {values.min()}")


def _packed_view(name, array, total_bytes):
    """Validate a packed mask (little-endian unsigned ints, ``total_bytes`` bytes); byte view."""
    if not isinstance(array, np.ndarray):
        raise ValueError(f"`{name}` must be a numpy array, not {type(array).__name__}")
    if array.dtype not in _PACKED_DTYPES:
        raise ValueError(
            f"`{name}` must have a little-endian unsigned integer dtype in mode "
            f"QLEN_ONLY_BITPACKING, not {array.dtype}"
        )
    if array.nbytes != total_bytes:
        raise ValueError(f"`{name}` must have {total_bytes} bytes, not {array.nbytes}")
    if not array.flags.writeable:
        raise ValueError(f"`{name}` must be writable")
    if not array.flags.c_contiguous:
        raise ValueError(f"`{name}` must be C-contiguous (outputs are written in place)")
    return array.reshape(-1).view(np.uint8)


def _ancestor_rows(parent_pos):
    """Bool ``[n, n]``: row i true at i, the root and every ancestor (parents walked).

    ``parent_pos[0]`` is ignored (the root); every other entry must lead to 0 (checked by the
    callers).
    """
    n = len(parent_pos)
    rows = np.zeros((n, n), dtype=np.bool_)
    rows[:, 0] = True
    for i in range(1, n):
        cur = i
        while cur != 0:
            rows[i, cur] = True
            cur = int(parent_pos[cur])
    return rows


# --- SGLang-compatible op -------------------------------------------------------------------


def _sglang_parent_positions(b, selected, parent_row, topk, n):
    """Decode the parent position of positions 1..n-1 of request b, as the CUDA kernel does.

    Position i >= 1 is draft node ``x = selected[i-1]`` (a flat index into SGLang's
    ``score_list``); its parent is the root if ``x // topk == 0``, else the first position
    ``k+1`` with ``selected[k] == parent_list[x // topk]``. Raises ``ValueError`` for a
    parent that is not selected ("invalid eagle tree") or a parent cycle.
    """
    parent_pos = np.full(n, -1, dtype=np.int64)
    for i in range(1, n):
        row = int(selected[i - 1]) // topk
        if row == 0:
            parent_pos[i] = 0
            continue
        token = parent_row[row]
        hits = np.flatnonzero(selected == token)
        if hits.size == 0:
            raise ValueError(
                f"invalid eagle tree: request {b}, `selected_index` entry {i - 1} "
                f"({int(selected[i - 1])}) has parent {int(token)} = `parent_list`[{row}], "
                f"which is not selected"
            )
        parent_pos[i] = int(hits[0]) + 1
    for i in range(1, n):  # every parent chain must reach the root
        cur, steps = i, 0
        while cur != 0:
            cur, steps = int(parent_pos[cur]), steps + 1
            if steps > n:
                raise ValueError(
                    f"invalid eagle tree: request {b}, the parents of position {i} form a cycle"
                )
    return parent_pos


def build_tree_kernel_efficient(
    parent_list,
    selected_index,
    verified_seq_len,
    tree_mask,
    positions,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    topk,
    depth,
    draft_token_num,
    tree_mask_mode,
):
    """sgl-kernel ``build_tree_kernel_efficient``, in place (docs/kernels.md §6).

    ``bs`` is ``verified_seq_len.size``; ``n = draft_token_num``; ``L = topk*(depth-1)+1``.

    Parameters (sgl-kernel order):
        parent_list: i64 [bs, L]: flat ``score_list`` index of the parent of each ``topk``
            block (entry 0, the root's block, is never read). With ``depth == 1`` it is never
            read at all and may be empty (SGLang passes a ``[bs, 0]`` tensor then).
        selected_index: i64 [bs, n-1]: flat ``score_list`` indices of the draft nodes of
            positions 1..n-1 (SGLang sorts them ascending), in ``0 .. topk*L - 1``.
        verified_seq_len: i64 [bs], >= 0.
        tree_mask: out. Mode 0: bool ``[sum(seq_len)*n + bs*n*n]`` (FULL layout); mode 1:
            bool ``[bs*n*n]``; mode 2: ``bs*n`` rows of :func:`sglang_packed_row_bytes` bytes
            (n <= 32), as a little-endian uint8/16/32/64 array of that many bytes.
        positions: i64 [bs*n] out. retrive_index: i64 [bs, n] out.
        retrive_next_token, retrive_next_sibling: i64 [bs, n] in/out; the caller fills them
            with -1 (SGLang does), the op only writes links.
        topk, depth (SGLang's ``spec_steps``), draft_token_num (>= 1 each), tree_mask_mode
            (0, 1 or 2).

    Writes, per request b (exactly the CUDA kernel's, which runs one thread per position):

    * every row's tree part: mode 0/1 column 0 (root) true, columns 1..n-1 false, then the
      columns of the row's position and its ancestors true. Mode 0 does not write the prefix
      columns: SGLang fills the whole mask with true before the call. Mode 2: byte 0 of the
      row is set to 1, then the bit of every column of the row and its ancestors is OR-ed into
      its byte; the row's other bytes keep their old bits (SGLang zero-fills first) and bytes
      past ``ceil(n/8)`` are not touched.
    * ``positions[b*n + i] = seq_len + depth(i)``; ``retrive_index[b, i] = b*n + i``.
    * links, built by thread 0 for i = n-1 down to 1 with p = parent position of i:
      if ``retrive_next_token[b, p] == -1`` it becomes i, else its old value ``o`` moves to
      ``retrive_next_sibling[b, i] = o`` and ``retrive_next_token[b, p] = i``. So children
      come out in ascending position.

    Raises ``ValueError`` before any write for invalid scalars or arrays, and for an invalid
    eagle tree (a node whose parent is not selected, or a parent cycle): the CUDA kernel
    prints a warning and skips such a node in the links, but the other threads of the kernel
    then index out of bounds, so the golden refuses the call.
    """
    k = check_int("topk", topk, 1)
    d = check_int("depth", depth, 1)
    n = check_int("draft_token_num", draft_token_num, 1)
    mode = _check_mode(tree_mask_mode)
    if mode == TreeMaskMode.QLEN_ONLY_BITPACKING and n > SGLANG_MAX_PACKED_DRAFT_TOKENS:
        raise ValueError(
            f"`draft_token_num` must be at most {SGLANG_MAX_PACKED_DRAFT_TOKENS} in mode "
            f"QLEN_ONLY_BITPACKING (sgl-kernel rows are at most 4 bytes), not {n}; "
            f"`fused_tree_mask_operator` packs up to {MAX_PACKED_VERIFY_NUM}"
        )
    if not isinstance(verified_seq_len, np.ndarray):
        raise ValueError(
            f"`verified_seq_len` must be a numpy array, not {type(verified_seq_len).__name__}"
        )
    bs = verified_seq_len.size
    seq = in_view("verified_seq_len", verified_seq_len, (bs,), np.int64)
    _check_non_negative("verified_seq_len", seq)
    row_len = k * (d - 1) + 1
    if d == 1 and isinstance(parent_list, np.ndarray) and parent_list.size == 0:
        parents = np.full((bs, row_len), -1, dtype=np.int64)  # never read
    else:
        parents = in_view("parent_list", parent_list, (bs, row_len), np.int64)
    selected = in_view("selected_index", selected_index, (bs, n - 1), np.int64)
    check_index_range("selected_index", selected, 0, k * row_len, "`topk` * L")
    if mode == TreeMaskMode.QLEN_ONLY_BITPACKING:
        stride = sglang_packed_row_bytes(n)
        mask = _packed_view("tree_mask", tree_mask, bs * n * stride).reshape(bs, n, stride)
    else:
        total = n * int(seq.sum()) + bs * n * n if mode == TreeMaskMode.FULL_MASK else bs * n * n
        mask = out_view("tree_mask", tree_mask, (total,), np.bool_)
    pos_out = out_view("positions", positions, (bs * n,), np.int64)
    r_index = out_view("retrive_index", retrive_index, (bs, n), np.int64)
    r_next = out_view("retrive_next_token", retrive_next_token, (bs, n), np.int64)
    r_side = out_view("retrive_next_sibling", retrive_next_sibling, (bs, n), np.int64)

    trees = [_sglang_parent_positions(b, selected[b], parents[b], k, n) for b in range(bs)]

    offset = 0  # FULL_MASK: start of request b, n*n*b + n*sum(seq_len[:b])
    for b, parent_pos in enumerate(trees):
        seq_len = int(seq[b])
        rows = _ancestor_rows(parent_pos)
        depths = rows.sum(axis=1) - 1
        if mode == TreeMaskMode.QLEN_ONLY_BITPACKING:
            packed = pack_tree_mask(rows)  # [n, ceil(n/8)]
            used = packed.shape[1]
            packed[:, 0] |= 1
            mask[b, :, 0] = packed[:, 0]
            mask[b, :, 1:used] |= packed[:, 1:used]
        elif mode == TreeMaskMode.QLEN_ONLY:
            mask[b * n * n : (b + 1) * n * n] = rows.reshape(-1)
        else:
            width = seq_len + n
            full = mask[offset : offset + n * width].reshape(n, width)
            full[:, seq_len:] = rows
            offset += n * width
        pos_out[b * n : (b + 1) * n] = seq_len + depths
        r_index[b] = b * n + np.arange(n, dtype=np.int64)
        for i in range(n - 1, 0, -1):
            p = int(parent_pos[i])
            old = int(r_next[b, p])
            r_next[b, p] = i
            if old != -1:
                r_side[b, i] = old


# --- the project's fused op -----------------------------------------------------------------


def select_verify_nodes(scores, cumu_count, n):
    """Node ids of the verify set of one request, ascending (§6).

    Parameters: ``scores`` f32 [>= cumu_count] the request's ``cumu_scores``; ``cumu_count``
    valid nodes; ``n`` verify-set size (``1 <= n <= cumu_count``).

    Node 0 (the root) is always in the set. Non-root node j (``1 <= j < cumu_count``) is in it
    iff its rank ``#{m != j, 1 <= m < cumu_count : s[m] > s[j] or (s[m] == s[j] and m < j)}``
    is below ``n - 1`` (float32 IEEE compares, so +0.0 == -0.0): the n-1 highest scores, ties
    to the lower node id.
    """
    count, n = int(cumu_count), int(n)
    s = np.asarray(scores[1:count], dtype=np.float32)
    ids = np.arange(1, count)
    beats = (s[None, :] > s[:, None]) | ((s[None, :] == s[:, None]) & (ids[None, :] < ids[:, None]))
    rank = beats.sum(axis=1)
    return np.concatenate([[0], ids[rank < n - 1]]).astype(np.int64)


def _fused_request_tree(b, nodes, prev):
    """Parent positions of the verify set ``nodes`` (ascending ids) of request b.

    Raises ``ValueError`` if a node's parent is not in the set or has a higher-or-equal id.
    """
    n = len(nodes)
    where = {int(node): i for i, node in enumerate(nodes)}
    parent_pos = np.full(n, -1, dtype=np.int64)
    for i in range(1, n):
        node, parent = int(nodes[i]), int(prev[nodes[i]])
        if not 0 <= parent < node:
            raise ValueError(
                f"`prev_indexs`: request {b}, node {node} has parent {parent}; a parent must "
                f"be a lower node id (0 <= parent < node)"
            )
        if parent not in where:
            raise ValueError(
                f"verify set not ancestor-closed: request {b}, node {node} is selected but "
                f"its parent {parent} is not (a child's `cumu_scores` must not exceed its "
                f"parent's)"
            )
        parent_pos[i] = where[parent]
    return parent_pos


def fused_tree_mask_operator(
    cumu_tokens,
    cumu_scores,
    cumu_deltas,
    prev_indexs,
    next_indexs,
    side_indexs,
    seq_lens,
    batch_size,
    cumu_count,
    verify_num,
    max_node_count,
    tree_mask_mode,
    tree_mask,
    positions,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    draft_tokens,
):
    """K4: select the verify set and build the verify tree, in place (docs/kernels.md §6).

    ``n = min(verify_num, cumu_count)``. Every element of every output is written (no
    pre-fill needed). Returns ``None``.

    Parameters (ABI order: the §0 cumulative tree in K2's order, then the batch inputs, the
    scalars and the outputs in SGLang's order plus ``draft_tokens``):
        cumu_tokens, cumu_scores, cumu_deltas, prev_indexs, next_indexs, side_indexs:
            i64/f32/i64/i64/i64/i64 [B, MAXN], the cumulative tree as K2 leaves it (valid
            below ``cumu_count``). Read: tokens, scores and ``prev_indexs`` of the nodes below
            ``cumu_count``; ``cumu_deltas``, ``next_indexs``, ``side_indexs`` are not read
            (depths come from the parent chain, children from ``prev_indexs``).
        seq_lens: i64 [B], >= 0: verified length per request (the root's position).
        batch_size: ``B`` >= 0 (0 is a no-op after validation).
        cumu_count: valid nodes, ``1 .. max_node_count``, the same for every request.
        verify_num: verify-set size incl. the root, >= 1 (pass ``clamp_verify_num(...)``).
        max_node_count: ``MAXN`` >= 1.
        tree_mask_mode: 0 FULL_MASK (bool ``[n*sum(seq_lens) + B*n*n]``), 1 QLEN_ONLY (bool
            ``[B, n, n]``), 2 QLEN_ONLY_BITPACKING (uint8 ``[B, n, ceil(n/8)]``, padding bits
            0, ``n <= 128``); :func:`tree_mask_size` gives the element count.
        tree_mask: out, as above. positions: i64 [B*n] out, ``seq_len + depth``.
        retrive_index, retrive_next_token, retrive_next_sibling: i64 [B, n] out.
        draft_tokens: i64 [B*n] out, ``cumu_tokens`` of the set in position order.

    Per request: the set is :func:`select_verify_nodes` (root + the n-1 best scores, ties to
    the lower node id) listed in ascending node id, so position 0 is the root. Every selected
    node's parent (``prev_indexs``) must be selected too and have a lower id: K2 trees
    guarantee it (a child's score never exceeds its parent's, ties go to the lower id, and a
    parent's id is below its children's); a tree that breaks it is refused with
    ``ValueError`` (no node is added or dropped to repair it). The parent position is then
    below the child's, so in ascending position ``depth[i] = depth[parent] + 1`` and
    ``row[i] = row[parent] | {i}``; ``retrive_next_token`` is the lowest-position child and
    ``retrive_next_sibling`` the next higher-position child of the same parent.

    Raises ``ValueError`` before any write for invalid scalars, dtypes, element counts,
    non-writable or non-contiguous outputs, negative ``seq_lens``, NaN among the valid
    ``cumu_scores``, and trees that break the rule above.
    """
    b_count = check_int("batch_size", batch_size, 0)
    maxn = check_int("max_node_count", max_node_count, 1)
    count = check_int("cumu_count", cumu_count, 1, maxn, hi_name="`max_node_count`")
    v = check_int("verify_num", verify_num, 1)
    mode = _check_mode(tree_mask_mode)
    n = verify_set_size(v, count)
    if mode == TreeMaskMode.QLEN_ONLY_BITPACKING and n > MAX_PACKED_VERIFY_NUM:
        raise ValueError(
            f"min(`verify_num`, `cumu_count`) must be at most {MAX_PACKED_VERIFY_NUM} in mode "
            f"QLEN_ONLY_BITPACKING, not {n}"
        )
    shape = (b_count, maxn)
    tokens = in_view("cumu_tokens", cumu_tokens, shape, np.int64)
    scores = in_view("cumu_scores", cumu_scores, shape, np.float32)
    in_view("cumu_deltas", cumu_deltas, shape, np.int64)
    prev = in_view("prev_indexs", prev_indexs, shape, np.int64)
    in_view("next_indexs", next_indexs, shape, np.int64)
    in_view("side_indexs", side_indexs, shape, np.int64)
    seq = in_view("seq_lens", seq_lens, (b_count,), np.int64)
    _check_non_negative("seq_lens", seq)
    if mode == TreeMaskMode.FULL_MASK:
        mask = out_view("tree_mask", tree_mask, (tree_mask_size(mode, seq, n),), np.bool_)
    elif mode == TreeMaskMode.QLEN_ONLY:
        mask = out_view("tree_mask", tree_mask, (b_count, n, n), np.bool_)
    else:
        mask = out_view("tree_mask", tree_mask, (b_count, n, packed_row_bytes(n)), np.uint8)
    pos_out = out_view("positions", positions, (b_count * n,), np.int64)
    r_index = out_view("retrive_index", retrive_index, (b_count, n), np.int64)
    r_next = out_view("retrive_next_token", retrive_next_token, (b_count, n), np.int64)
    r_side = out_view("retrive_next_sibling", retrive_next_sibling, (b_count, n), np.int64)
    tok_out = out_view("draft_tokens", draft_tokens, (b_count * n,), np.int64)
    valid_scores = scores[:, :count]
    if np.isnan(valid_scores).any():
        b_bad, j_bad = np.argwhere(np.isnan(valid_scores))[0]
        raise ValueError(f"`cumu_scores` must not be NaN (request {b_bad}, node {j_bad})")

    plans = []
    for b in range(b_count):
        nodes = select_verify_nodes(scores[b], count, n)
        plans.append((nodes, _fused_request_tree(b, nodes, prev[b])))

    offset = 0
    for b, (nodes, parent_pos) in enumerate(plans):
        rows = np.zeros((n, n), dtype=np.bool_)
        depth = np.zeros(n, dtype=np.int64)
        rows[0, 0] = True
        first_child = np.full(n, -1, dtype=np.int64)
        next_sibling = np.full(n, -1, dtype=np.int64)
        last_child = np.full(n, -1, dtype=np.int64)
        for i in range(1, n):
            p = int(parent_pos[i])
            rows[i] = rows[p]
            rows[i, i] = True
            depth[i] = depth[p] + 1
            if first_child[p] == -1:
                first_child[p] = i
            else:
                next_sibling[last_child[p]] = i
            last_child[p] = i
        seq_len = int(seq[b])
        if mode == TreeMaskMode.FULL_MASK:
            width = seq_len + n
            full = mask[offset : offset + n * width].reshape(n, width)
            full[:, :seq_len] = True
            full[:, seq_len:] = rows
            offset += n * width
        elif mode == TreeMaskMode.QLEN_ONLY:
            mask[b] = rows
        else:
            mask[b] = pack_tree_mask(rows)
        pos_out[b * n : (b + 1) * n] = seq_len + depth
        r_index[b] = b * n + np.arange(n, dtype=np.int64)
        r_next[b] = first_child
        r_side[b] = next_sibling
        tok_out[b * n : (b + 1) * n] = tokens[b, nodes]
