/* sdnmpi-replay: results, reduced over ranks and printed by rank 0 (a table,
 * or one JSON object in the style of sdnmpi-bench). */
#ifndef SDNMPI_REPLAY_REPORT_H
#define SDNMPI_REPLAY_REPORT_H

#include <mpi.h>
#include <stdint.h>

#include "args.h"
#include "format.h"
#include "run.h"

#define REPORT_LIB_LEN 256
#define REPORT_TIME_LEN 32
#define REPORT_HOST_LEN MPI_MAX_PROCESSOR_NAME

struct report {
	const struct replay_opts *opts;
	int rank;
	int nprocs;
	char library[REPORT_LIB_LEN];
	char start_utc[REPORT_TIME_LEN];
	double start_s;
	char *hosts;           /* rank 0: nprocs names of REPORT_HOST_LEN bytes */
	uint64_t memory_bytes; /* the most any rank needs (plan_memory_bytes) */
};

void report_begin(struct report *rep, const struct replay_opts *opts, MPI_Comm comm);

/* Gather every rank's MPI_Get_processor_name on rank 0; collective.  Returns
 * -1 on rank 0 if it cannot allocate the table. */
int report_hosts(struct report *rep, MPI_Comm comm);

/* Reduce the ranks' measurements and print on rank 0; collective. */
void report_end(struct report *rep, const struct replay_pattern *pat,
		const struct run_stats *stats, MPI_Comm comm);

void report_free(struct report *rep);

#endif
