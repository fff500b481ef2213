/* sdnmpi-bench: collective timer. */
#ifndef SDNMPI_BENCH_COLL_H
#define SDNMPI_BENCH_COLL_H

#include <mpi.h>

#include "bench.h"
#include "report.h"

/* Time --op per size: each rank's mean time per call, min/avg/max over ranks. */
void coll_run(const struct bench_opts *opts, MPI_Comm comm, struct report *rep);

#endif
