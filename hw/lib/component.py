"""``KernelComponent``: a ``wiring.Component`` built from its parameter record.

Every kernel has a parameter record: a frozen dataclass that validates the build parameters
(``hw.lib.params``) and derives the port layouts (``ports``: stream port name -> payload
layout), so that testbenches and the host read layouts without building the component. The
component itself only adds the hardware; this base class does the rest once.
"""

import dataclasses
import functools
import operator

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["KernelComponent"]


class KernelComponent(wiring.Component):
    """Base of the kernels.

    A subclass sets ``Params`` (the record class) and ``OUTPUTS`` (names of the record's
    ``ports`` that the component drives; the others are inputs). The constructor takes the
    record's fields as keyword arguments and builds the record (so bad parameters raise its
    ``ParameterError`` before anything else), then the signature from ``members(params)``:
    one ``stream.Signature`` per entry of ``params.ports``, in that order. Override ``members``
    to add ports that are not streams, and ``__init__`` to take arguments that are not build
    parameters (passing the rest on).

    Members
    -------
    params
        The parameter record (read-only). Every field and public property of the record
        (parameters, derived widths, layouts) is also a read-only attribute of the component
        (``kernel.max_batch_size``, ``kernel.cmd_layout``).
    """

    Params = None
    OUTPUTS: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.Params is None:
            return
        derived = [name for record in cls.Params.__mro__ for name, value in vars(record).items()
                   if isinstance(value, property | functools.cached_property)
                   and not name.startswith("_")]
        for name in [field.name for field in dataclasses.fields(cls.Params)] + derived:
            if not hasattr(cls, name):
                setattr(cls, name, property(operator.attrgetter(f"_params.{name}")))

    def __new__(cls, *args, src_loc_at: int = 0, **kwargs):
        # Validate before the object exists: a component whose constructor raised would
        # otherwise be reported by Amaranth as "created but never used" when collected.
        # Keyword arguments that are not record fields belong to a subclass's `__init__`.
        fields = {field.name for field in dataclasses.fields(cls.Params)}
        cls.Params(**{name: value for name, value in kwargs.items() if name in fields})
        return super().__new__(cls, *args, src_loc_at=src_loc_at + 1, **kwargs)

    def __init__(self, *, src_loc_at: int = 0, **parameters):
        self._params = self.Params(**parameters)
        super().__init__(self.members(self._params), src_loc_at=src_loc_at + 1)

    @property
    def params(self):
        return self._params

    def members(self, params) -> dict:
        """Signature members: every ``params.ports`` entry as a stream, ``Out`` for the names in
        ``OUTPUTS``, ``In`` for the others."""
        return {name: (Out if name in self.OUTPUTS else In)(stream.Signature(layout))
                for name, layout in params.ports.items()}
