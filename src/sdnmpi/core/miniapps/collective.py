"""Collectives inside mini-applications, expanded by :mod:`sdnmpi.core.collectives`.

A thin wrapper over :func:`sdnmpi.core.collectives.expand` whose errors name the
mini-application parameter at fault (the algorithm or the MPI library), since the
counts and ranks it is given are derived, not user input.  The import is lazy so
that the mini-applications that need no collective do not load the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdnmpi.core.miniapps.params import fail
from sdnmpi.errors import PatternError

if TYPE_CHECKING:
    from sdnmpi.core.collectives.schedule import Schedule


def expand_in_app(
    app: str,
    collective: str,
    nprocs: int,
    count: int,
    *,
    type_bytes: int,
    library: str,
    root: int = 0,
    algorithm: str | None = None,
    algorithm_param: str = "algorithm",
) -> Schedule:
    """The schedule of one collective call of ``app``.

    An unknown ``algorithm`` is reported as parameter ``algorithm_param``, any
    other rejection as parameter ``library``.

    >>> expand_in_app("ft", "reduce", 4, 1, type_bytes=16, library="mpich").algorithm
    'binomial'
    """
    from sdnmpi.core.collectives import algorithms, expand

    if algorithm is not None and algorithm not in algorithms(collective):
        valid = ", ".join(algorithms(collective))
        raise fail(
            app, algorithm_param, algorithm, f"is not an algorithm of {collective} ({valid})"
        )
    try:
        return expand(
            collective,
            nprocs,
            count,
            algorithm=algorithm,
            root=root,
            type_bytes=type_bytes,
            library=library,
        )
    except PatternError as err:
        raise fail(app, "library", library, f"is not usable: {err}") from None
