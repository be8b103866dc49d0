"""Stream framing on top of ``amaranth.lib.stream``.

Amaranth streams carry no packet markers, so packet payloads are ``data.StructLayout``\\ s with
``first``/``last`` fields (``packet_layout``). ``RegisterSlice`` cuts the combinational paths
of a stream in both directions at full throughput, and ``stalling_handshake`` turns a
fixed-latency, clock-enabled pipeline into a stream stage. ``stream_put``/``stream_get`` drive
streams from Amaranth's simulator (async testbenches).
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["packet_layout", "RegisterSlice", "stalling_handshake", "stream_put", "stream_get"]


def packet_layout(fields: dict) -> data.StructLayout:
    """A struct layout holding ``fields`` plus the packet markers ``first`` and ``last``.

    Parameters
    ----------
    fields : dict
        Field name to shape; the names ``first`` and ``last`` are reserved.
    """
    for reserved in ("first", "last"):
        if reserved in fields:
            raise ValueError(f"`{reserved}` is a reserved packet field name")
    return data.StructLayout({**fields, "first": 1, "last": 1})


class RegisterSlice(wiring.Component):
    """Full-throughput register slice (skid buffer) for a stream.

    Registers ``valid``/``payload`` towards the sink and ``ready`` towards the source, so
    neither combinational path crosses the slice, and still passes one payload per clock. A
    payload that arrives while the output is stalled waits in the skid register.

    Parameters
    ----------
    payload_shape : ShapeLike
        Shape of the payload.

    Members
    -------
    i : In(stream.Signature(payload_shape))
        Input stream.
    o : Out(stream.Signature(payload_shape))
        Output stream, same order, one cycle of latency when not stalled.
    """

    def __init__(self, payload_shape):
        self._payload_shape = payload_shape
        super().__init__({
            "i": In(stream.Signature(payload_shape)),
            "o": Out(stream.Signature(payload_shape)),
        })

    @property
    def payload_shape(self):
        return self._payload_shape

    def elaborate(self, platform):
        m = Module()
        # The payloads are datapath: meaningful only with their valid, so they take no reset
        # (the reset net reaches the two valid flags only).
        skid_payload = Signal.like(self.i.payload, name="skid_payload", reset_less=True)
        out_payload = Signal.like(self.i.payload, name="out_payload", reset_less=True)
        skid_valid = Signal()
        m.d.comb += [self.i.ready.eq(~skid_valid), self.o.payload.eq(out_payload)]
        with m.If(self.o.ready | ~self.o.valid):
            with m.If(skid_valid):
                m.d.sync += [out_payload.eq(skid_payload), self.o.valid.eq(1),
                             skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [out_payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & self.i.ready):
            m.d.sync += [skid_payload.eq(self.i.payload), skid_valid.eq(1)]
        return m


def stalling_handshake(m: Module, *, latency: int, source, sink) -> Signal:
    """Make a fixed-latency pipeline a stream stage; returns its clock enable.

    The pipeline advances whenever its last stage is empty or being accepted, so it passes one
    item per clock without back-pressure and freezes as a whole when ``sink`` stalls. Items
    enter from ``source`` (whose payload the caller feeds to the pipeline) and leave into
    ``sink`` (whose payload the caller takes from the pipeline's output, ``latency`` clocks
    later).

    Parameters
    ----------
    m : Module
        Module the control logic is added to.
    latency : int
        Pipeline depth in clocks, at least 1.
    source : stream.Interface
        Stream whose ``ready`` this drives (the pipeline's input).
    sink : stream.Interface
        Stream whose ``valid`` this drives (the pipeline's output).
    """
    if not isinstance(latency, int) or latency < 1:
        raise ValueError(f"`latency` must be a positive integer, not {latency!r}")
    enable = Signal(name="pipeline_en")
    valid = Signal(latency, name="pipeline_valid")
    m.d.comb += [
        enable.eq(~sink.valid | sink.ready),
        source.ready.eq(enable),
        sink.valid.eq(valid[-1]),
    ]
    with m.If(enable):
        m.d.sync += valid.eq((valid << 1) | source.valid)
    return enable


async def stream_put(ctx, stream, payload):
    """Offer ``payload`` on ``stream`` and wait until the design accepts it (simulation only)."""
    ctx.set(stream.valid, 1)
    ctx.set(stream.payload, payload)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream):
    """Accept one payload from ``stream`` and return it (simulation only)."""
    ctx.set(stream.ready, 1)
    (payload,) = await ctx.tick().sample(stream.payload).until(stream.valid)
    ctx.set(stream.ready, 0)
    return payload
