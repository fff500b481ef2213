/* sdnmpi-bench: shared types for the MPI micro-benchmark.
 *
 * The options are parsed identically on every rank (from the same argv), so
 * all ranks agree on every parameter without any extra communication.
 */
#ifndef SDNMPI_BENCH_H
#define SDNMPI_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#define BENCH_MAX_SIZE_BYTES ((size_t)1 << 30) /* 1 GiB: fits an int count */
#define BENCH_MAX_SIZES 64
#define BENCH_MAX_OPS 6
#define BENCH_MAX_ROWS (BENCH_MAX_SIZES * BENCH_MAX_OPS)

enum bench_kind { BENCH_LATENCY, BENCH_BW, BENCH_COLL, BENCH_PAIRS, BENCH_BIBW };

enum coll_op {
	COLL_ALLREDUCE,
	COLL_BCAST,
	COLL_REDUCE,
	COLL_ALLTOALL,
	COLL_ALLGATHER,
	COLL_BARRIER
};

struct bench_opts {
	enum bench_kind kind;
	size_t sizes[BENCH_MAX_SIZES]; /* message sizes in bytes, ascending */
	int nsizes;
	long iters;       /* 0: the per-size default */
	long warmup;      /* -1: the per-size default */
	double duration_s; /* > 0: loop until this much time is up */
	int window;       /* bw, bibw: non-blocking sends per window (each way) */
	enum coll_op op;  /* coll: the first of ops */
	enum coll_op ops[BENCH_MAX_OPS]; /* coll: run one after the other */
	int nops;
	int root;
	int shift;        /* pairs: partner offset; 0 means nprocs / 2 */
	bool oneway;      /* pairs: senders r with (r / shift) even, to r + shift only */
	bool json;
	bool help;
};

/* One row of output: a message size and its timings. */
struct bench_result {
	size_t size_bytes;
	long iterations;
	double time_avg_s;
	double time_min_s;
	double time_max_s;
	double metric; /* latency_us, bandwidth_MBps (bibw: both ways) or algbw_MBps */
	enum coll_op op;      /* coll: the operation of this row */
	double start_unix_s;  /* coll, pairs: wall clock (rank 0) when the loop began ... */
	double end_unix_s;    /* ... and ended (both after a barrier) */
	int has_steps;        /* coll, pairs: step_min_s and step_max_s were measured */
	double step_min_s;    /* the fastest single step of any rank */
	double step_max_s;    /* the slowest single step of any rank */
};

/* Iterations for a size when --iters is not given (OSU: fewer for large). */
long bench_default_iters(size_t size_bytes);
long bench_default_warmup(size_t size_bytes);

#endif
