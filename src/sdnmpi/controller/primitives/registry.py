"""Which module routes which primitive, configurable per controller run.

:meth:`Registry.standard` maps MPI_Bcast, MPI_Reduce, MPI_Allreduce and
MPI_Alltoall to their pattern modules and everything else (point-to-point,
other collectives, reserved and unknown codes) to ``default``.  A spec string
(e.g. a command-line option) overrides entries::

    bcast=pinned:spine1,reduce=pinned:spine2     UnisonFlow's experiment
    allreduce=pattern:ours,alltoall=default      another router, or none

Keys are primitive names (:class:`sdnmpi.wire.tag.Primitive`, lower case);
values are ``default``, a named module (``bcast``, ``reduce``, ``allreduce``,
``alltoall``), ``pattern:ROUTER`` (a core router on the primitive's pattern) or
``pinned:SPINE``.  The preset ``unisonflow`` is the first line above.

>>> reg = Registry.from_spec("bcast=pinned:spine1")
>>> reg.module_for(3).name, reg.module_for(20).name, reg.module_for(5).name
('pinned:spine1', 'default', 'allreduce')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from sdnmpi.controller.primitives.allreduce import ALLREDUCE
from sdnmpi.controller.primitives.alltoall import ALLTOALL
from sdnmpi.controller.primitives.base import PrimitiveModule
from sdnmpi.controller.primitives.bcast import BCAST
from sdnmpi.controller.primitives.default import DEFAULT
from sdnmpi.controller.primitives.pattern import PatternModule
from sdnmpi.controller.primitives.pinned import PinnedModule
from sdnmpi.controller.primitives.reduce import REDUCE
from sdnmpi.errors import ConfigError
from sdnmpi.wire.tag import Primitive

#: Modules selectable by name in a spec.
NAMED: Mapping[str, PrimitiveModule] = MappingProxyType(
    {m.name: m for m in (DEFAULT, BCAST, REDUCE, ALLREDUCE, ALLTOALL)}
)
PRESETS: Mapping[str, str] = MappingProxyType(
    {"unisonflow": "bcast=pinned:spine1,reduce=pinned:spine2"}
)
_STANDARD: Mapping[int, PrimitiveModule] = MappingProxyType(
    {
        Primitive.BCAST: BCAST,
        Primitive.REDUCE: REDUCE,
        Primitive.ALLREDUCE: ALLREDUCE,
        Primitive.ALLTOALL: ALLTOALL,
    }
)


@dataclass(frozen=True)
class Registry:
    """Primitive code -> module; codes not listed go to ``fallback``."""

    modules: Mapping[int, PrimitiveModule] = field(default_factory=dict)
    fallback: PrimitiveModule = DEFAULT

    @classmethod
    def standard(cls) -> Registry:
        """The four collective modules, ``default`` for everything else."""
        return cls(dict(_STANDARD))

    @classmethod
    def from_spec(cls, spec: str, base: Registry | None = None) -> Registry:
        """``base`` (the standard registry) with the entries of ``spec`` replaced."""
        spec = PRESETS.get(spec.strip(), spec)
        modules = dict((base or cls.standard()).modules)
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"primitive routing {item!r}: expected PRIMITIVE=MODULE")
            modules[_code(key.strip())] = module_by_name(value.strip())
        return cls(modules)

    def module_for(self, code: int) -> PrimitiveModule:
        """The module routing primitive ``code`` (``fallback`` if unknown or reserved)."""
        return self.modules.get(code, self.fallback)

    def describe(self) -> str:
        """``name=module`` for every entry, for logs."""
        items = sorted(self.modules.items())
        return ",".join(f"{Primitive(c).name.lower()}={m.name}" for c, m in items)


def module_by_name(value: str) -> PrimitiveModule:
    """A module from its spec value (see the module docstring)."""
    kind, _, arg = value.partition(":")
    if kind == "pinned" and arg:
        return PinnedModule(arg)
    if kind == "pattern":
        return PatternModule(f"pattern:{arg or 'ours'}", router=arg or "ours")
    if value in NAMED:
        return NAMED[value]
    known = ", ".join([*NAMED, "pattern:ROUTER", "pinned:SPINE"])
    raise ConfigError(f"unknown primitive module {value!r}; known: {known}")


def _code(name: str) -> int:
    try:
        return int(Primitive[name.upper()])
    except KeyError:
        known = ", ".join(p.name.lower() for p in Primitive)
        raise ConfigError(f"unknown primitive {name!r}; known: {known}") from None
