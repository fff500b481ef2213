/* sdnmpi-replay: executing the plan with MPI, and what one rank measured. */
#ifndef SDNMPI_REPLAY_RUN_H
#define SDNMPI_REPLAY_RUN_H

#include <mpi.h>
#include <stdint.h>

#include "args.h"
#include "format.h"
#include "plan.h"

/* Counters of one phase on one rank, over every timed occurrence. */
enum run_counter { RUN_MSGS_RECV, RUN_BYTES_RECV, RUN_MSGS_SENT, RUN_BYTES_SENT, RUN_NCOUNTERS };

struct run_buffers {
	unsigned char *recv_region;
	unsigned char *send_buffer;
	MPI_Request *requests;
	MPI_Status *statuses;
};

struct run_stats {
	double *phase_sum_s; /* per phase: this rank's time summed over timed occurrences */
	/* Per phase, over the timed occurrences where this rank sends or receives: the
	 * count, and the sum and sum of squares of its exchange's own time (posting to
	 * the end of the wait, no barrier): how much exchanges of a phase vary. */
	double *wait_n;
	double *wait_sum_s;
	double *wait_sq_s;
	double *pass_s;      /* per timed pass: this rank's time from the start barrier */
	uint64_t *counters;  /* per phase: RUN_NCOUNTERS counters */
	uint64_t mismatched; /* received messages of another size or source than planned */
	double start_unix_s; /* wall clock when the timed passes began ... */
	double end_unix_s;   /* ... and ended (this rank) */
};

/* Bytes of MPI bookkeeping per concurrent message (a request and a status). */
#define RUN_REQUEST_BYTES (sizeof(MPI_Request) + sizeof(MPI_Status))

/* Allocate (and touch) the buffers the plan needs; 0 or -1 (out of memory). */
int run_alloc(const struct plan *plan, struct run_buffers *buf);
void run_free(struct run_buffers *buf);

int run_stats_alloc(int32_t nphases, long iters, struct run_stats *stats);
void run_stats_free(struct run_stats *stats);

/* The warmup passes, then the timed passes; collective over comm. */
void run_replay(const struct replay_opts *opts, const struct replay_pattern *pat,
		const struct plan *plan, struct run_buffers *buf, MPI_Comm comm,
		struct run_stats *stats);

#endif
