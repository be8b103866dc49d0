"""Build parameters: the kernels' parameter records and the checks they share.

A kernel's parameter record is a frozen dataclass deriving from ``ParameterRecord`` whose
fields are declared with ``parameter`` (default, documentation, range: written once). One
check family for the whole project (the golden ops use the same ``check_int`` for their
runtime arguments): errors are ``ParameterError`` (a ``ValueError``) or ``ParameterTypeError``
(also a ``TypeError``) with the parameter's name in ``parameter``, and messages of the form
"`max_tree_width` must be between 1 and `node_top_k`, not 12".
"""

import dataclasses
import inspect

from golden._abi import ParameterError, ParameterTypeError, check_int

__all__ = ["ParameterError", "ParameterTypeError", "check_int", "check_power_of_two",
           "check_choice", "index_bits", "parameter", "ParameterRecord"]


def check_power_of_two(name, value, lo, hi, **bound_names):
    """``check_int(name, value, lo, hi, **bound_names)``, and ``value`` a power of two."""
    value = check_int(name, value, lo, hi, **bound_names)
    if value & (value - 1):
        raise ParameterError(name, f"`{name}` must be a power of two, not {value}")
    return value


def check_choice(name, value, choices):
    """``value`` if it is one of ``choices``, else ``ParameterError`` listing them."""
    if value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise ParameterError(name, f"`{name}` must be one of {listed}, not {value!r}")
    return value


def index_bits(count):
    """Unsigned width holding ``0 .. count - 1`` (at least 1 bit)."""
    return max(1, (count - 1).bit_length())


def parameter(default, doc, *, lo=1, hi=None, power_of_two=False, choices=None):
    """A field of a ``ParameterRecord``: its default, its documentation and its check.

    ``lo``/``hi`` are inclusive bounds (``hi=None``: none); a bound may name another field of
    the record (``hi="node_top_k"``, spelled by that name in the error) or a property (by
    value in the error).
    ``choices``: the value must be one of these instead (no bounds then).
    """
    check = {"lo": lo, "hi": hi, "power_of_two": power_of_two, "choices": choices}
    return dataclasses.field(default=default, metadata={"doc": doc, "check": check})


class ParameterRecord:
    """Base of the kernels' parameter records (frozen dataclasses of ``parameter`` fields).

    After construction every field is checked in declaration order, then ``check()`` runs the
    rules between fields. The class docstring gets a numpydoc ``Parameters`` section made from
    the fields' documentation and checks.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        declared = [(name, value) for name, value in vars(cls).items()
                    if isinstance(value, dataclasses.Field) and "check" in value.metadata]
        if declared:
            entries = "\n".join(
                f"{name} : {_describe(field.default, field.metadata['check'])}\n"
                f"    {field.metadata['doc']}" for name, field in declared)
            cls.__doc__ = (f"{inspect.cleandoc(cls.__doc__ or '')}\n\n"
                           f"Parameters\n----------\n{entries}")

    def __post_init__(self):
        for field in dataclasses.fields(self):
            if "check" in field.metadata:
                self._check_field(field.name, **field.metadata["check"])
        self.check()

    def check(self):
        """Rules between fields (override); each field has passed its own check."""

    def _check_field(self, name, *, lo, hi, power_of_two, choices):
        value = getattr(self, name)
        if choices is not None:
            check_choice(name, value, choices)
            return
        fields = {field.name for field in dataclasses.fields(self)}
        names = {f"{end}_name": f"`{bound}`" for end, bound in (("lo", lo), ("hi", hi))
                 if bound in fields}
        lo, hi = (getattr(self, bound) if isinstance(bound, str) else bound for bound in (lo, hi))
        (check_power_of_two if power_of_two else check_int)(name, value, lo, hi, **names)


def _describe(default, check) -> str:
    """The type line of a parameter's docstring entry: kind, range, default."""
    if check["choices"] is not None:
        kind = "one of " + ", ".join(repr(choice) for choice in check["choices"])
    elif check["hi"] is None:
        kind = f"int, at least {_bound(check['lo'])}"
    else:
        kind = f"int, {_bound(check['lo'])}..{_bound(check['hi'])}"
    if check["power_of_two"]:
        kind += ", a power of two"
    return f"{kind} (default {default!r})"


def _bound(bound) -> str:
    return f"``{bound}``" if isinstance(bound, str) else f"{bound:,}"
