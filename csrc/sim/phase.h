/* sdnmpi_sim_phase: one phase of the flow simulator, in C.
 *
 * The Python engine (src/sdnmpi/sim/engine.py, class _Loop) is the reference:
 * every flow is released at time 0, pays its path latency, then shares the
 * arcs max-min fairly with the transmitting flows (progressive filling), and
 * the loop jumps from event to event.  This file does the same floating-point
 * operations in the same order, so its results are the reference's bit for
 * bit (tests/sim/test_native.py compares them); it is only faster:
 *
 *   - the filling resumes at the first stage a completing flow froze at, as
 *     src/sdnmpi/sim/filling.py does (its docstring says why that is exact);
 *   - an arc's rate is summed again only when a flow on it changed rate, in
 *     ascending flow order, which is the order numpy's bincount adds them in.
 *
 * Build with -ffp-contract=off: a fused multiply-add would round differently.
 */
#ifndef SDNMPI_SIM_PHASE_H
#define SDNMPI_SIM_PHASE_H

#include <stddef.h>
#include <stdint.h>

/* Return codes of sdnmpi_sim_phase (the message in err says more). */
enum {
	SDNMPI_SIM_OK = 0,
	SDNMPI_SIM_EINPUT = 1,   /* indices out of range, negative or non-integer weights */
	SDNMPI_SIM_ENOMEM = 2,   /* an allocation failed */
	SDNMPI_SIM_ESTALL = 3,   /* no flow can progress (a zero rate) */
};

/* Simulate the n flows of one phase on narcs arcs.
 *
 * Flow i crosses arcs arc[indptr[i] .. indptr[i+1]-1] (each at most once)
 * with the integer weights weight[...] (the share of its rate the arc
 * carries); it sends size_bits[i] after latency[i].  capacity[a] is arc a's
 * capacity in bit/s.  rtol and ulps are the reference's event tolerances
 * (maxmin.RTOL, engine._ULPS).
 *
 * Fills start[n] (when each flow starts transmitting), finish[n],
 * peak[narcs] (each arc's highest rate), seg_start/seg_end (the segments
 * between events during which some flow transmits; room for 2n + 1) and
 * counts[0] = segments, counts[1] = events.  On error, writes a message of
 * at most errlen bytes (NUL included) to err.  Thread-safe: no global state.
 */
int sdnmpi_sim_phase(int64_t n, int64_t narcs, const int64_t *indptr, const int64_t *arc,
		     const double *weight, const double *capacity, const double *size_bits,
		     const double *latency, double rtol, double ulps, double *start,
		     double *finish, double *peak, double *seg_start, double *seg_end,
		     int64_t *counts, char *err, size_t errlen);

#endif
