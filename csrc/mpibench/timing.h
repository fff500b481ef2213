/* sdnmpi-bench: timed loops (by iterations or by agreed duration). */
#ifndef SDNMPI_BENCH_TIMING_H
#define SDNMPI_BENCH_TIMING_H

#include <mpi.h>
#include <stdbool.h>

#include "bench.h"

typedef void (*bench_step_fn)(void *ctx);

struct loop_spec {
	long iters;        /* used when duration_s <= 0 */
	long warmup;       /* untimed steps first */
	double duration_s; /* > 0: run batches until this much time is up */
	bool sync_each;    /* barrier before every step, time each step alone */
};

struct loop_stats {
	long iterations; /* timed steps, the same on every rank */
	double busy_s;   /* this rank's time inside the timed steps */
	double step_min_s; /* this rank's fastest and slowest single step: one step far */
	double step_max_s; /* above the mean is a stall, not the steady rate */
};

/* Iterations and warmup for one size: the options, or the per-size defaults. */
struct loop_spec timing_spec(const struct bench_opts *opts, size_t size_bytes, bool sync_each);

/* Run step(ctx) as spec says; collective over comm (every rank calls it). */
void timing_run(const struct loop_spec *spec, bench_step_fn step, void *ctx, MPI_Comm comm,
		struct loop_stats *out);

/* Wall-clock seconds since the epoch (CLOCK_REALTIME), to line up with port counters. */
double timing_unix_s(void);

/* Reduce each rank's value to min/avg/max on rank 0 (collective). */
void timing_spread(double value, MPI_Comm comm, struct bench_result *res);

/* The fastest step of any rank and the slowest, on rank 0 (collective). */
void timing_steps(const struct loop_stats *ls, MPI_Comm comm, struct bench_result *res);

/* A barrier that sleeps while it waits, for ranks that sit out a benchmark
 * (so they do not steal cores from the ranks being measured). */
void timing_idle_barrier(MPI_Comm comm);

#endif
