"""Mini-application parameters: their declaration and their validation.

Each mini-application module declares its parameters as a tuple of :class:`Param`
(name, type, default, one-line help) next to its function, so that the registry
in :mod:`sdnmpi.core.miniapps` can describe them and a command line can parse
``name=value`` strings against them.  Values are always ``int``, ``float`` or
``str``; a default of ``None`` means "derived from the other parameters" (for
example NPB CG's ``na`` from its ``klass``).

The ``check_*`` helpers raise :class:`~sdnmpi.errors.PatternError` with a message
that names the application and the offending parameter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sdnmpi.errors import PatternError

ParamValue = int | float | str
ParamType = type[int] | type[float] | type[str]


@dataclass(frozen=True)
class Param:
    """One parameter of a mini-application.

    >>> Param("nx", int, 256, "global grid points along x").parse("512")
    512
    """

    name: str
    type: ParamType
    default: ParamValue | None
    help: str
    choices: tuple[str, ...] = ()

    def parse(self, text: str) -> ParamValue:
        """Convert a command-line string to this parameter's type."""
        try:
            value: ParamValue = self.type(text.strip())
        except ValueError:
            raise PatternError(
                f"parameter {self.name}: {text!r} is not a valid {self.type.__name__}"
            ) from None
        if self.choices and value not in self.choices:
            raise PatternError(
                f"parameter {self.name}: {text!r} is not one of {', '.join(self.choices)}"
            )
        return value


def fail(app: str, name: str, value: object, why: str) -> PatternError:
    """The error for parameter ``name`` of ``app`` (to be raised by the caller).

    >>> str(fail("cg", "nprocs", 6, "must be a power of two"))
    'cg: parameter nprocs=6 must be a power of two'
    """
    return PatternError(f"{app}: parameter {name}={value!r} {why}")


def check_int(app: str, name: str, value: object, minimum: int) -> int:
    """``value`` as an int that is at least ``minimum`` (bools are rejected)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise fail(app, name, value, "must be an integer")
    if value < minimum:
        raise fail(app, name, value, f"must be >= {minimum}")
    return value


def check_flag(app: str, name: str, value: object) -> bool:
    """A 0/1 (or False/True) switch."""
    if not isinstance(value, int) or value not in (0, 1):
        raise fail(app, name, value, "must be 0 or 1")
    return bool(value)


def check_float(app: str, name: str, value: object, low: float, high: float) -> float:
    """A number in the closed interval ``[low, high]``."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise fail(app, name, value, "must be a number")
    if not low <= value <= high:
        raise fail(app, name, value, f"must be in [{low}, {high}]")
    return float(value)


def check_choice(app: str, name: str, value: object, choices: Iterable[str]) -> str:
    """One of the allowed strings."""
    allowed = tuple(choices)
    if not isinstance(value, str) or value not in allowed:
        raise fail(app, name, value, f"must be one of {', '.join(allowed)}")
    return value


def check_power_of_two(app: str, name: str, value: object) -> int:
    """A positive power of two.

    >>> check_power_of_two("cg", "nprocs", 128)
    128
    """
    number = check_int(app, name, value, 1)
    if number & (number - 1):
        raise fail(app, name, value, "must be a power of two")
    return number
