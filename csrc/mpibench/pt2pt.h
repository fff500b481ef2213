/* sdnmpi-bench: point-to-point benchmarks (latency, bw, pairs). */
#ifndef SDNMPI_BENCH_PT2PT_H
#define SDNMPI_BENCH_PT2PT_H

#include <mpi.h>

#include "bench.h"
#include "report.h"

/* Ping-pong between ranks 0 and 1; one-way latency in microseconds. */
void pt2pt_latency(const struct bench_opts *opts, MPI_Comm comm, struct report *rep);

/* Windows of Isends rank 0 -> rank 1, acked per window; MB/s. */
void pt2pt_bw(const struct bench_opts *opts, MPI_Comm comm, struct report *rep);

/* Windows of Isends both ways between ranks 0 and 1 at once; total MB/s. */
void pt2pt_bibw(const struct bench_opts *opts, MPI_Comm comm, struct report *rep);

/* Every rank r sends to (r + shift) mod N and receives from (r - shift) mod N. */
void pt2pt_pairs(const struct bench_opts *opts, MPI_Comm comm, struct report *rep);

#endif
