"""The DUT of the K1 testbench: ``ScoreKernel`` plus standalone gather probes.

The probes are extra ``HiddenStateGather`` instances with other lane counts and element
widths, driven directly with row numbers, so that one Verilator model measures the gather's
cycles per request for several ``lanes`` (a compile-time parameter) and copies float16/bfloat16
rows as well as float32 ones.

Model size. Amaranth writes one Verilog module per component instance: a 64-lane kernel
carries 64 copies of the float32 multiplier (150 kB of Verilog each, about a minute of
elaboration). With ``toplevel`` given, ``ScoreBench`` instead elaborates one template
multiplier at its top level (fed from extra top-level ports the testbench leaves at 0) and
makes every lane an ``Instance`` of the template's module: the same RTL (``Float32Multiply``),
one module definition (which the harness's ``-fno-inline`` keeps one C++ class).
``sim.score.ScoreTarget`` always passes its own name, the top module name of its models.

``ScoreBenchParams`` is the parameter record of the testbench: the kernel's ``ScoreParams``,
the probes' ``GatherParams`` and every stream port's payload layout.
"""

import re
from dataclasses import asdict, dataclass

from amaranth.back import rtlil
from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal
from amaranth.lib import wiring
from amaranth.lib.wiring import Flow, Out

from hw.kernels.gather import GatherParams, HiddenStateGather
from hw.kernels.score import ScoreKernel, ScoreParams
from hw.lib.float32 import Float32Multiply

__all__ = ["ScoreBenchParams", "ScoreBench", "SharedModule"]


@dataclass(frozen=True)
class ScoreBenchParams:
    """Build parameters of ``ScoreBench``: ``kernel`` and one ``GatherParams`` per probe."""

    kernel: ScoreParams
    probes: tuple[GatherParams, ...] = ()

    @classmethod
    def of(cls, *, probes=(), **kernel) -> "ScoreBenchParams":
        """The record of ``ScoreBench(probes=probes, **kernel)`` (``probes``: dicts of
        ``HiddenStateGather`` parameters), e.g. from a run's ``config["parameters"]``."""
        return cls(ScoreParams(**kernel), tuple(GatherParams(**dict(p)) for p in probes))

    @property
    def ports(self) -> dict:
        """Stream port name -> payload layout: the kernel's, then ``probe<i>_<name>``."""
        ports = dict(self.kernel.ports)
        for index, probe in enumerate(self.probes):
            ports.update({f"probe{index}_{name}": layout
                          for name, layout in probe.ports.items()})
        return ports


def _forward(m, outer, inner, members):
    """Connect every member of ``inner`` to the same-flow member of ``outer``."""
    for name, member in members:
        inside, outside = getattr(inner, name), outer[name]
        if member.is_port:
            if member.flow == Flow.In:
                m.d.comb += inside.eq(outside)
            else:
                m.d.comb += outside.eq(inside)
        elif member.flow == Flow.In:
            wiring.connect(m, wiring.flipped(outside), inside)
        else:
            wiring.connect(m, inside, wiring.flipped(outside))


class _Harness(wiring.Component):
    """A component ``core`` whose every member is a top-level port of the same name."""

    def __init__(self, core):
        self._core = core
        super().__init__(dict(core.signature.members.items()))

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = self._core
        _forward(m, {name: getattr(self, name) for name in self.signature.members},
                 self._core, self.signature.members.items())
        return m


class SharedModule:
    """One Verilog module definition shared by many instances of a component.

    ``make()`` builds the component (its members must be plain ports). The template is placed
    by ``ScoreBench`` at its top level as submodule ``name`` with every member wired to a
    top-level port, so Amaranth writes its module as ``<toplevel>.<name>``; ``instance()``
    returns a stand-in with the same members whose elaboration is an ``Instance`` of that
    module. The module's port names are those Amaranth gives the component in exactly that
    situation (every member fed from or to a top-level port), read from a small conversion.
    """

    def __init__(self, toplevel: str, name: str, make):
        self.name = name
        self.make = make
        self.template = make()
        self.module_name = f"{toplevel}.{name}"
        text = rtlil.convert(_Harness(make()), name="probe", emit_src=False)
        cell = text[text.index("cell \\probe.core \\core"):]
        cell = cell[:cell.index("\n  end")]
        self.ports = {outer: port for port, outer in
                      re.findall(r"connect \\(\S+) \\(\S+)", cell)}
        missing = (set(self.template.signature.members) | {"clk"}) - set(self.ports)
        assert not missing, f"no port found for {missing} of {name}"

    def instance(self):
        return _SharedInstance(self)


class _SharedInstance(wiring.Component):
    def __init__(self, shared: SharedModule):
        self._shared = shared
        self.latency = getattr(shared.template, "latency", None)
        super().__init__(dict(shared.template.signature.members.items()))

    def elaborate(self, platform):
        m = Module()
        ports = [("i", self._shared.ports["clk"], ClockSignal())]
        if "rst" in self._shared.ports:
            ports.append(("i", self._shared.ports["rst"], ResetSignal()))
        for name, member in self.signature.members.items():
            direction = "i" if member.flow == Flow.In else "o"
            ports.append((direction, self._shared.ports[name], getattr(self, name)))
        m.submodules.cell = Instance(self._shared.module_name, *ports)
        return m


class ScoreBench(wiring.Component):
    """``ScoreKernel(**kernel)`` with its ports unchanged, plus probe ``i`` (for each dict of
    ``HiddenStateGather`` parameters in ``probes``) with ports ``probe<i>_<name>``.

    With ``toplevel`` (the top module name the model is built under) the multipliers share
    one module definition (see the module docstring); the template's ports are
    ``shared_fp32_mul__*``. Without it (Amaranth's simulator, which has no ``Instance``), every
    lane is its own component.

    Attributes
    ----------
    params : ScoreBenchParams
    kernel : ScoreKernel
    probes : list of HiddenStateGather
    """

    def __init__(self, *, probes=(), toplevel: str | None = None, **kernel):
        self._params = params = ScoreBenchParams.of(probes=probes, **kernel)
        self.shared = []
        multiplier = None
        if toplevel is not None:
            shared = SharedModule(toplevel, "shared_fp32_mul", Float32Multiply)
            self.shared = [shared]

            def multiplier(lane):
                return shared.instance()
        self.kernel = ScoreKernel(**asdict(params.kernel), multiplier=multiplier)
        self.probes = [HiddenStateGather(**asdict(probe)) for probe in params.probes]
        members = dict(self.kernel.signature.members.items())
        for index, probe in enumerate(self.probes):
            for name, member in probe.signature.members.items():
                members[f"probe{index}_{name}"] = member
        for shared in self.shared:
            members[shared.name] = Out(shared.template.signature)
        super().__init__(members)

    params = property(lambda self: self._params)

    def elaborate(self, platform):
        m = Module()
        m.submodules.kernel = self.kernel
        outer = {name: getattr(self, name) for name in self.signature.members}
        _forward(m, outer, self.kernel, self.kernel.signature.members.items())
        for index, probe in enumerate(self.probes):
            m.submodules[f"probe{index}"] = probe
            prefixed = {name: outer[f"probe{index}_{name}"]
                        for name in probe.signature.members}
            _forward(m, prefixed, probe, probe.signature.members.items())
        for shared in self.shared:
            m.submodules[shared.name] = shared.template
            ports = getattr(self, shared.name)
            for name, member in shared.template.signature.members.items():
                inside, outside = getattr(shared.template, name), getattr(ports, name)
                if member.flow == Flow.In:
                    m.d.comb += inside.eq(outside)
                else:
                    m.d.comb += outside.eq(inside)
        return m
