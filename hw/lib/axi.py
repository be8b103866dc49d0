"""AXI4 memory ports: the one home of the read and write port signatures every kernel, the
engine and the Vitis top use, and of the AXI4 master's flat Verilog signals.

An AXI4-style port is seen from the master. ``read_port_signature`` has the channels

* ``ar`` (a ``stream.Signature``): ``address`` (byte address), ``length`` (beats - 1, AXI's
  ARLEN), ``burst`` (AXI's ARBURST, ``Burst``; every master here sends ``Burst.INCR``) and,
  when ``id_width`` > 0, ``id`` (ARID);
* ``r``: ``data``, ``last`` (the burst's last beat) and, when ``id_width`` > 0, ``id`` (RID).
  AXI's RRESP is not carried (no master here reads it; ``sim.dataflow.memory`` offers the
  ``data``/``last`` beats it packs): the top's ``rresp`` input is left unread;

``write_port_signature`` has ``aw`` (as ``ar``: AWADDR, AWLEN, AWBURST, AWID), ``w``
(``data``, byte ``strobe``, ``last``; AXI4 has no WID) and ``b`` (``resp``, AXI's BRESP,
``Resp``, and ``id`` when ``id_width`` > 0). New fields follow the old ones, so an existing
field keeps its bit offset in the flattened payload. With ``id_width`` 0 (the default) no
``id`` field or Verilog ID port exists, as before. The slave answers a channel's bursts in
order, after any latency, and may stall any channel.

``axi4_master_members(prefix, data_width, access)`` are the flat members ``<prefix>_<signal>``
of an AXI4 master (``arvalid``, ``araddr``, ...; ``arid``/``rid``/``awid``/``bid`` with
``id_width`` > 0), the names Vivado's IP packager infers an ``m_axi`` interface from.
"""

from enum import IntEnum

from amaranth.hdl import unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .params import check_choice, check_int

__all__ = ["Burst", "Resp", "LENGTH_BITS", "BURST_BITS", "RESP_BITS", "SIZE_BITS",
           "MAX_ID_WIDTH", "ACCESS", "request_layout", "request_overhead_bits",
           "read_port_signature", "write_port_signature", "axi4_master_members",
           "axi4_channel_signals"]

#: Bits of AxLEN (beats - 1: up to 256 beats), AxBURST, xRESP and AxSIZE.
LENGTH_BITS, BURST_BITS, RESP_BITS, SIZE_BITS = 8, 2, 2, 3
#: Widest ID this project builds (AXI allows more; Vitis masters use few).
MAX_ID_WIDTH = 16
#: What a master does through a port: its read channels, its write channels, or both.
ACCESS = ("read", "write", "readwrite")


class Burst(IntEnum):
    """AxBURST."""

    FIXED = 0
    INCR = 1
    WRAP = 2


class Resp(IntEnum):
    """RRESP/BRESP."""

    OKAY = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


def _check(address_width, data_width, id_width):
    check_int("address_width", address_width, 1, 64)
    check_int("data_width", data_width, 8, 1024)
    check_int("id_width", id_width, 0, MAX_ID_WIDTH)


def _with_id(fields: dict, id_width: int) -> data.StructLayout:
    return data.StructLayout({**fields, **({"id": unsigned(id_width)} if id_width else {})})


def request_layout(address_width: int, id_width: int = 0) -> data.StructLayout:
    """Payload of ``ar`` and ``aw``: ``address``, ``length``, ``burst`` (and ``id``)."""
    return _with_id({"address": unsigned(address_width), "length": unsigned(LENGTH_BITS),
                     "burst": unsigned(BURST_BITS)}, id_width)


def request_overhead_bits(id_width: int = 0) -> int:
    """Bits of an ``ar``/``aw`` payload besides the address (for a test bench that sees the
    flattened payload and wants the address width back)."""
    return LENGTH_BITS + BURST_BITS + id_width


def read_port_signature(address_width: int, data_width: int, *,
                        id_width: int = 0) -> wiring.Signature:
    """An AXI4-style read port, seen from the master (see the module): ``ar`` and ``r``."""
    _check(address_width, data_width, id_width)
    return wiring.Signature({
        "ar": Out(stream.Signature(request_layout(address_width, id_width))),
        "r": In(stream.Signature(_with_id({"data": unsigned(data_width), "last": 1},
                                          id_width))),
    })


def write_port_signature(address_width: int, data_width: int, *,
                         id_width: int = 0) -> wiring.Signature:
    """An AXI4-style write port, seen from the master (see the module): ``aw``, ``w`` and
    ``b`` (one response per burst)."""
    _check(address_width, data_width, id_width)
    return wiring.Signature({
        "aw": Out(stream.Signature(request_layout(address_width, id_width))),
        "w": Out(stream.Signature(data.StructLayout({
            "data": unsigned(data_width), "strobe": unsigned(data_width // 8), "last": 1}))),
        "b": In(stream.Signature(_with_id({"resp": unsigned(RESP_BITS)}, id_width))),
    })


#: AXI4 master signals per channel group: (name, direction from the master, width: an int,
#: "address", "data", "strobe" or "id").
_CHANNELS = {
    "read": (("arvalid", Out, 1), ("arready", In, 1), ("araddr", Out, "address"),
             ("arlen", Out, LENGTH_BITS), ("arsize", Out, SIZE_BITS),
             ("arburst", Out, BURST_BITS), ("arid", Out, "id"), ("rvalid", In, 1),
             ("rready", Out, 1), ("rdata", In, "data"), ("rlast", In, 1),
             ("rresp", In, RESP_BITS), ("rid", In, "id")),
    "write": (("awvalid", Out, 1), ("awready", In, 1), ("awaddr", Out, "address"),
              ("awlen", Out, LENGTH_BITS), ("awsize", Out, SIZE_BITS),
              ("awburst", Out, BURST_BITS), ("awid", Out, "id"), ("wvalid", Out, 1),
              ("wready", In, 1), ("wdata", Out, "data"), ("wstrb", Out, "strobe"),
              ("wlast", Out, 1), ("bvalid", In, 1), ("bready", Out, 1),
              ("bresp", In, RESP_BITS), ("bid", In, "id")),
}


def axi4_channel_signals(access: str, *, data_width: int, address_width: int = 64,
                         id_width: int = 0) -> list[tuple[str, object, int]]:
    """``(signal, In or Out from the master, width)`` of every AXI4 master signal a port with
    ``access`` has (``arvalid`` ... for ``read``, ``awvalid`` ... for ``write``, both for
    ``readwrite``); the ID signals only with ``id_width`` > 0."""
    check_choice("access", access, ACCESS)
    _check(address_width, data_width, id_width)
    widths = {"address": address_width, "data": data_width, "strobe": data_width // 8,
              "id": id_width}
    signals = []
    for group in ("read", "write"):
        if access not in (group, "readwrite"):
            continue
        for name, flow, width in _CHANNELS[group]:
            width = widths.get(width, width)
            if width:
                signals.append((name, flow, width))
    return signals


def axi4_master_members(prefix: str, data_width: int, access: str, *, address_width: int = 64,
                        id_width: int = 0) -> dict:
    """Signature members ``<prefix>_<signal>`` of an AXI4 master port (see
    ``axi4_channel_signals``); addresses are 64 bits by default, as Vitis requires."""
    return {f"{prefix}_{name}": flow(width) for name, flow, width in axi4_channel_signals(
        access, data_width=data_width, address_width=address_width, id_width=id_width)}
