"""NPB FT: the transposes of the NAS 3-D FFT benchmark.

The FT kernel of the NAS Parallel Benchmarks (Bailey et al., "The NAS Parallel
Benchmarks", RNR-91-002, 1991) solves a 3-D diffusion equation spectrally: one
forward 3-D FFT of an ``nx x ny x nz`` complex-double grid, then ``niter`` times
an evolution step and an inverse FFT followed by a checksum.  The MPI reference
implementation, NPB 3.3 ``FT/ft.f``, distributes the grid over an ``np1 x np2``
process grid (``me2 = me mod np2``, ``me1 = me / np2``); ``commslice1`` groups the
ranks of equal ``me1`` (size ``np2``), ``commslice2`` those of equal ``me2``
(size ``np1``).  Its layouts (subroutine ``setup``; without an ``inputft.data``
file, 1-D when ``nprocs <= nz``, else 2-D with ``np1 = nz``):

* ``1d`` (``np1 = 1``): each 3-D FFT has one global transpose, an
  ``MPI_Alltoall`` on ``commslice1`` = all ranks (``transpose2_global``).
* ``2d``: each 3-D FFT has two, ``transpose_x_y`` (``MPI_Alltoall`` on
  ``commslice2``) and ``transpose_x_z`` (on ``commslice1``); the inverse FFT runs
  them in the opposite order.
* ``0d`` (one rank): no communication.

Every Alltoall moves the rank's whole slab, ``ntdivnp = (nx*ny/nprocs)*nz``
complex doubles (16 bytes), so each pair of a communicator of size ``c`` exchanges
``ntdivnp / c`` of them.  ``checksum`` ends every iteration with an
``MPI_Reduce`` of one double complex to rank 0.  The program runs the forward FFT
twice (once untimed to touch the data, once timed) and the loop ``niter`` times.
The collectives are expanded by :func:`sdnmpi.core.collectives.expand` with the
``library``'s default algorithm (or ``alltoall_algorithm``).  Setup collectives
(five ``MPI_Bcast`` of parameters, two ``MPI_Comm_split``, one ``MPI_Barrier``)
are not modelled: they carry a few hundred bytes in total.
"""

from __future__ import annotations

import numpy as np

from sdnmpi.core.miniapps.collective import expand_in_app
from sdnmpi.core.miniapps.params import (
    Param,
    check_choice,
    check_int,
    check_power_of_two,
    fail,
)
from sdnmpi.core.pattern import IntArray, Pattern, Phase

APP = "ft"
#: NPB classes: (nx, ny, nz, niter), from NPB 3.3 ``sys/setparams.c``.
CLASSES: dict[str, tuple[int, int, int, int]] = {
    "S": (64, 64, 64, 6),
    "W": (128, 128, 32, 6),
    "A": (256, 256, 128, 6),
    "B": (512, 256, 256, 20),
    "C": (512, 512, 512, 20),
    "D": (2048, 1024, 1024, 25),
    "E": (4096, 2048, 2048, 25),
}
LAYOUTS = ("auto", "0d", "1d", "2d")
COMPLEX_BYTES = 16

PARAMS: tuple[Param, ...] = (
    Param("nprocs", int, 128, "MPI ranks (a power of two)"),
    Param("klass", str, "C", "NPB problem class", tuple(CLASSES)),
    Param("nx", int, None, "grid points along x (default: from klass)"),
    Param("ny", int, None, "grid points along y (default: from klass)"),
    Param("nz", int, None, "grid points along z (default: from klass)"),
    Param("niter", int, None, "time steps (default: from klass)"),
    Param("layout", str, "auto", "process layout (auto: as NPB without inputft.data)", LAYOUTS),
    Param("np1", int, None, "2d layout: processes along the first axis (default: nz)"),
    Param("alltoall_algorithm", str, None, "Alltoall algorithm (default: the library's)"),
    Param("library", str, "mpich", "MPI library whose collective algorithms are used"),
)


def _resolve_class(klass: str, sizes: tuple[int | None, ...]) -> tuple[int, ...]:
    check_choice(APP, "klass", klass, CLASSES)
    names = ("nx", "ny", "nz", "niter")
    out = []
    for name, value, default in zip(names, sizes, CLASSES[klass], strict=True):
        if value is None:
            out.append(default)
        elif name == "niter":
            out.append(check_int(APP, name, value, 1))
        else:
            out.append(check_power_of_two(APP, name, value))
    return tuple(out)


def proc_grid(nprocs: int, nz: int, layout: str, np1: int | None) -> tuple[str, int, int]:
    """``(layout, np1, np2)`` as NPB ``setup`` chooses them (``auto``) or as given.

    >>> proc_grid(128, 512, "auto", None), proc_grid(1024, 512, "auto", None)
    (('1d', 1, 128), ('2d', 512, 2))
    """
    if layout == "auto":
        layout = "0d" if nprocs == 1 else "1d" if nprocs <= nz else "2d"
    if layout == "0d":
        if nprocs != 1:
            raise fail(APP, "layout", layout, f"needs nprocs=1, got {nprocs}")
        return layout, 1, 1
    if layout == "1d":
        return layout, 1, nprocs
    rows = nz if np1 is None else check_power_of_two(APP, "np1", np1)
    if rows > nprocs:
        raise fail(APP, "np1", rows, f"exceeds nprocs ({nprocs})")
    return layout, rows, nprocs // rows


def _check_divisible(shape: tuple[int, int, int], np1: int, np2: int) -> None:
    """NPB's slabs/pencils must split evenly (``dims(2,i)/np1``, ``dims(3,i)/np2``)."""
    nx, ny, nz = shape
    needs = (("nx", nx, np1), ("ny", ny, np1), ("ny", ny, np2), ("nz", nz, np2))
    for name, value, parts in needs:
        if value % parts:
            raise fail(APP, name, value, f"is not divisible by {parts} processes")


def slice_groups(np1: int, np2: int, comm: int) -> IntArray:
    """World ranks of each communicator, one row per communicator.

    ``comm=1``: ``commslice1`` (equal ``me1``, ranked by ``me2``); ``comm=2``:
    ``commslice2`` (equal ``me2``, ranked by ``me1``).

    >>> slice_groups(2, 3, 1).tolist(), slice_groups(2, 3, 2).tolist()
    ([[0, 1, 2], [3, 4, 5]], [[0, 3], [1, 4], [2, 5]])
    """
    grid = np.arange(np1 * np2, dtype=np.int64).reshape(np1, np2)
    return grid if comm == 1 else np.ascontiguousarray(grid.T)


def on_groups(pattern: Pattern, groups: IntArray, label: str, repeat: int) -> list[Phase]:
    """A communicator-local pattern run concurrently on every row of ``groups``."""
    count = groups.shape[0]
    return [
        Phase.from_arrays(
            f"{label}: {ph.label}",
            groups[:, ph.src].reshape(-1),
            groups[:, ph.dst].reshape(-1),
            np.tile(ph.size_bytes, count),
            np.tile(ph.messages, count),
            repeat=repeat,
        )
        for ph in pattern.phases
    ]


class _Collectives:
    """Expands (and remembers) the collectives of one FT configuration."""

    def __init__(self, library: str, alltoall_algorithm: str | None) -> None:
        self.library = library
        self.alltoall_algorithm = alltoall_algorithm
        self.algorithms: dict[str, str] = {}

    def alltoall(self, size: int, count: int) -> Pattern:
        """One Alltoall of ``count`` complex doubles per pair on ``size`` ranks."""
        schedule = expand_in_app(
            APP,
            "alltoall",
            size,
            count,
            type_bytes=COMPLEX_BYTES,
            library=self.library,
            algorithm=self.alltoall_algorithm,
            algorithm_param="alltoall_algorithm",
        )
        self.algorithms[f"alltoall/{size}"] = schedule.algorithm
        return schedule.to_pattern()

    def checksum(self, nprocs: int) -> Pattern:
        """``MPI_Reduce`` of one double complex to rank 0."""
        schedule = expand_in_app(
            APP, "reduce", nprocs, 1, type_bytes=COMPLEX_BYTES, library=self.library
        )
        self.algorithms["reduce"] = schedule.algorithm
        return schedule.to_pattern()


def _transpose(
    colls: _Collectives, np1: int, np2: int, comm: int, ntdivnp: int, label: str, repeat: int
) -> list[Phase]:
    groups = slice_groups(np1, np2, comm)
    size = groups.shape[1]
    if size == 1:
        return []
    return on_groups(colls.alltoall(size, ntdivnp // size), groups, label, repeat)


def fft_phases(
    colls: _Collectives, np1: int, np2: int, ntdivnp: int, direction: int, repeat: int
) -> list[Phase]:
    """The global transposes of one 3-D FFT (``direction`` 1: forward, -1: inverse)."""
    name = "forward" if direction == 1 else "inverse"
    if np1 == 1:
        return _transpose(colls, 1, np2, 1, ntdivnp, f"fft {name}: transpose_xy_z", repeat)
    x_y = _transpose(colls, np1, np2, 2, ntdivnp, f"fft {name}: transpose_x_y", repeat)
    x_z = _transpose(colls, np1, np2, 1, ntdivnp, f"fft {name}: transpose_x_z", repeat)
    return [*x_y, *x_z] if direction == 1 else [*x_z, *x_y]


def ft(
    nprocs: int = 128,
    *,
    klass: str = "C",
    nx: int | None = None,
    ny: int | None = None,
    nz: int | None = None,
    niter: int | None = None,
    layout: str = "auto",
    np1: int | None = None,
    alltoall_algorithm: str | None = None,
    library: str = "mpich",
) -> Pattern:
    """The rank-level pattern of NPB 3.3 FT (see the module docstring).

    ``nx``/``ny``/``nz``/``niter`` override the class values (the pattern is then
    named after NPB's class ``U``); grid sizes must be powers of two that the
    process grid divides, as NPB requires.

    >>> p = ft(4, klass="S")
    >>> p.meta["derived"]["layout"], len(p.phases), int(p.phases[0].size_bytes[0])
    ('1d', 8, 262144)
    """
    check_power_of_two(APP, "nprocs", nprocs)
    check_choice(APP, "layout", layout, LAYOUTS)
    nx, ny, nz, niter = _resolve_class(klass, (nx, ny, nz, niter))
    used, rows, cols = proc_grid(nprocs, nz, layout, np1)
    _check_divisible((nx, ny, nz), rows, cols)
    ntdivnp = (nx * ny) // nprocs * nz
    colls = _Collectives(library, alltoall_algorithm)
    phases = [
        *fft_phases(colls, rows, cols, ntdivnp, 1, 2),
        *fft_phases(colls, rows, cols, ntdivnp, -1, niter),
    ]
    if nprocs > 1:
        phases += on_groups(colls.checksum(nprocs), slice_groups(1, nprocs, 1), "checksum", niter)
    params = {"nprocs": nprocs, "klass": klass, "nx": nx, "ny": ny, "nz": nz, "niter": niter}
    params |= {"layout": layout, "np1": np1, "alltoall_algorithm": alltoall_algorithm}
    meta = {
        "app": APP,
        "params": {**params, "library": library},
        "derived": {"layout": used, "np1": rows, "np2": cols, "ntdivnp": ntdivnp},
        "algorithms": dict(colls.algorithms),
        "source": "NPB 3.3 FT/ft.f (Bailey et al. 1991)",
    }
    label = klass if (nx, ny, nz, niter) == CLASSES[klass] else "U"
    return Pattern(f"ft-{label.lower()}-{nprocs}", nprocs, tuple(phases), None, meta)
