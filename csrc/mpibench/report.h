/* sdnmpi-bench: output, on rank 0 only (a table, or one JSON object). */
#ifndef SDNMPI_BENCH_REPORT_H
#define SDNMPI_BENCH_REPORT_H

#include <mpi.h>

#include "bench.h"

#define REPORT_LIB_LEN 256
#define REPORT_TIME_LEN 32

struct report {
	const struct bench_opts *opts;
	int rank;
	int nprocs;
	int shift; /* pairs: the partner offset actually used */
	char library[REPORT_LIB_LEN];
	char start_utc[REPORT_TIME_LEN];
	double start_s;
	struct bench_result rows[BENCH_MAX_ROWS];
	int nrows;
};

void report_begin(struct report *rep, const struct bench_opts *opts, MPI_Comm comm);

/* Record a finished size; rank 0 prints it at once in table mode. */
void report_row(struct report *rep, const struct bench_result *row);

/* Rank 0 prints the JSON object (--json) or the table's footer. */
void report_end(struct report *rep);

#endif
