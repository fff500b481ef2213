"""Mini-application communication patterns: the benchmarks of the seed paper.

The evaluation of Takahashi et al. ("An MPI framework for HPC clusters deployed
with software-defined networking") runs CG and FT from the NAS Parallel
Benchmarks (Bailey et al. 1991; NPB 3.3) and four mini-applications, Stencil2D,
Stencil3D, Butterfly and SpMV, with 160 processes on 20 nodes.  Each module here
models one of them as a function ``name(nprocs, **params) -> Pattern``: a
rank-level :class:`~sdnmpi.core.pattern.Pattern` with the phases in program order,
loop bodies listed once with the loop count as :attr:`Phase.repeat`, and all
parameters recorded in ``Pattern.meta["params"]``.

:data:`MINIAPPS` is the registry a command line uses to parse specs such as
``cg:nprocs=128,klass=C``:

>>> app = MINIAPPS["stencil3d"]
>>> pattern = app.build(app.parse({"nprocs": "8", "nx": "16", "ny": "16", "nz": "16"}))
>>> pattern.name, pattern.meta["derived"]["dims"]
('stencil3d-8', [2, 2, 2])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sdnmpi.core.miniapps.butterfly import PARAMS as BUTTERFLY_PARAMS
from sdnmpi.core.miniapps.butterfly import butterfly
from sdnmpi.core.miniapps.cg import PARAMS as CG_PARAMS
from sdnmpi.core.miniapps.cg import cg
from sdnmpi.core.miniapps.ft import PARAMS as FT_PARAMS
from sdnmpi.core.miniapps.ft import ft
from sdnmpi.core.miniapps.params import Param, ParamValue
from sdnmpi.core.miniapps.spmv import PARAMS as SPMV_PARAMS
from sdnmpi.core.miniapps.spmv import spmv
from sdnmpi.core.miniapps.stencil import PARAMS_2D, PARAMS_3D, stencil2d, stencil3d
from sdnmpi.core.pattern import Pattern
from sdnmpi.errors import PatternError

__all__ = [
    "MINIAPPS",
    "MiniApp",
    "Param",
    "ParamValue",
    "butterfly",
    "cg",
    "ft",
    "spmv",
    "stencil2d",
    "stencil3d",
]


@dataclass(frozen=True)
class MiniApp:
    """A registered mini-application: its function, parameters and description."""

    name: str
    function: Callable[..., Pattern]
    params: tuple[Param, ...]
    description: str

    def param(self, name: str) -> Param:
        """The parameter called ``name``; unknown names are a PatternError."""
        for p in self.params:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.params)
        raise PatternError(f"{self.name}: unknown parameter {name!r} (known: {known})")

    def defaults(self) -> dict[str, ParamValue | None]:
        """Every parameter's default (``None``: derived from the others)."""
        return {p.name: p.default for p in self.params}

    def parse(self, values: Mapping[str, str]) -> dict[str, ParamValue]:
        """Convert ``name -> string`` pairs (from a spec) to typed values."""
        return {name: self.param(name).parse(text) for name, text in values.items()}

    def build(self, values: Mapping[str, ParamValue] | None = None) -> Pattern:
        """The pattern for these parameter values (others take their defaults)."""
        given = dict(values or {})
        for name in given:
            self.param(name)
        return self.function(**given)


MINIAPPS: dict[str, MiniApp] = {
    app.name: app
    for app in (
        MiniApp("cg", cg, CG_PARAMS, "NPB 3.3 CG: row sums and transpose of a 2-D matrix grid"),
        MiniApp("ft", ft, FT_PARAMS, "NPB 3.3 FT: 3-D FFT with Alltoall transposes"),
        MiniApp("stencil2d", stencil2d, PARAMS_2D, "2-D halo exchange with 4 face neighbours"),
        MiniApp("stencil3d", stencil3d, PARAMS_3D, "3-D halo exchange with 6 face neighbours"),
        MiniApp("butterfly", butterfly, BUTTERFLY_PARAMS, "recursive-doubling pairwise exchange"),
        MiniApp("spmv", spmv, SPMV_PARAMS, "sparse matrix-vector product, random matrix"),
    )
}
