"""The phase engine in C (``libsdnmpi_sim.so``, csrc/sim): the reference event loop, faster.

:func:`run_phase` simulates one phase as :func:`sdnmpi.sim.engine.run` does
for flows released at time 0, with the same floating-point operations in the
same order (csrc/sim/phase.h says how), so the traces are the same bit for
bit; tests/sim/test_native.py checks it.  It records no timeline and no flow
rates: :func:`sdnmpi.sim.engine.run_phases` uses it for the phases it would
batch when neither is asked for, and keeps the numpy engines otherwise.

The library is an artefact of ``make csrc`` (:mod:`sdnmpi.artefacts`); without
it the numpy engines run, with the same results, and :func:`status` says why.
The call releases the GIL, so phases can run on several threads.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

from sdnmpi import artefacts
from sdnmpi.errors import SdnMpiError
from sdnmpi.sim.engine import _ULPS, Trace

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: The library's name in the build tree.
LIBRARY = "sim/libsdnmpi_sim.so"
#: Set to ``0`` to run the numpy engines even when the library is built.
ENV = "SDNMPI_SIM_NATIVE"

#: sdnmpi_sim_phase's code for "no flow can progress" (its message is the reference's).
_ESTALL = 3
_P_I64 = ctypes.POINTER(ctypes.c_int64)
_P_F64 = ctypes.POINTER(ctypes.c_double)


@functools.cache
def _load() -> tuple[Any, str]:
    """The library's function, or None and why not."""
    if os.environ.get(ENV, "1") == "0":
        return None, f"${ENV}=0"
    where = artefacts.path(LIBRARY)
    if not where.is_file():
        return None, f"{where} is not built (make csrc)"
    try:
        lib = ctypes.CDLL(str(where))
    except OSError as exc:
        return None, f"{where}: {exc}"
    fn = lib.sdnmpi_sim_phase
    fn.restype = ctypes.c_int
    fn.argtypes = [
        ctypes.c_int64,
        ctypes.c_int64,
        _P_I64,
        _P_I64,
        _P_F64,
        _P_F64,
        _P_F64,
        _P_F64,
        ctypes.c_double,
        ctypes.c_double,
        _P_F64,
        _P_F64,
        _P_F64,
        _P_F64,
        _P_F64,
        _P_I64,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    return fn, f"{where}"


def available() -> bool:
    """Whether the C engine can run here."""
    return _load()[0] is not None


def status() -> str:
    """Which engine phases run on, in words (for messages and notes)."""
    fn, why = _load()
    return f"C phase engine ({why})" if fn is not None else f"numpy engines ({why})"


def integral(weights: FloatArray) -> bool:
    """Whether incidence weights suit the C engine (positive integers)."""
    return bool(np.all(weights > 0) and np.array_equal(weights, np.round(weights)))


def _ptr(array: Any, kind: Any) -> Any:
    return array.ctypes.data_as(kind)


def run_phase(
    capacity_bps: FloatArray,
    incidence: Any,
    size_bits: FloatArray,
    latency_s: FloatArray,
    *,
    rtol: float,
) -> Trace:
    """One phase (flows = rows of ``incidence``, all released at 0): the trace
    :func:`sdnmpi.sim.engine.run` gives, without timeline or flow rates.

    Raises :class:`~sdnmpi.errors.SdnMpiError` when the library is missing or
    refuses the input, and when no flow can progress (as the reference does).
    """
    fn, why = _load()
    if fn is None:
        raise SdnMpiError(f"the C phase engine is not available: {why}")
    inc = sparse.csr_array(incidence)
    n, narcs = int(inc.shape[0]), int(capacity_bps.size)
    if inc.shape[1] > narcs:
        raise SdnMpiError(f"incidence has {inc.shape[1]} arcs, the platform {narcs}")
    indptr = np.ascontiguousarray(inc.indptr, dtype=np.int64)
    arcs = np.ascontiguousarray(inc.indices, dtype=np.int64)
    weights = np.ascontiguousarray(inc.data, dtype=np.float64)
    capacity = np.ascontiguousarray(capacity_bps, dtype=np.float64)
    size = np.ascontiguousarray(size_bits, dtype=np.float64)
    latency = np.ascontiguousarray(latency_s, dtype=np.float64)
    if size.size != n or latency.size != n:
        raise SdnMpiError(f"{n} flows but {size.size} sizes and {latency.size} latencies")
    start, finish = np.empty(n), np.empty(n)
    peak = np.empty(narcs)
    seg_start, seg_end = np.empty(2 * n + 1), np.empty(2 * n + 1)
    counts = np.zeros(2, dtype=np.int64)
    err = ctypes.create_string_buffer(256)
    rc = fn(
        n,
        narcs,
        _ptr(indptr, _P_I64),
        _ptr(arcs, _P_I64),
        _ptr(weights, _P_F64),
        _ptr(capacity, _P_F64),
        _ptr(size, _P_F64),
        _ptr(latency, _P_F64),
        float(rtol),
        _ULPS,
        _ptr(start, _P_F64),
        _ptr(finish, _P_F64),
        _ptr(peak, _P_F64),
        _ptr(seg_start, _P_F64),
        _ptr(seg_end, _P_F64),
        _ptr(counts, _P_I64),
        err,
        ctypes.sizeof(err),
    )
    if rc:
        message = err.value.decode(errors="replace")
        raise SdnMpiError(f"C phase engine: {message}" if rc != _ESTALL else message)
    nseg = int(counts[0])
    return Trace(
        np.zeros(n),
        start,
        finish,
        seg_start[:nseg].copy(),
        seg_end[:nseg].copy(),
        None,
        None,
        peak,
        int(counts[1]),
    )
