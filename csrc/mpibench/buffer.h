/* sdnmpi-bench: message buffers, allocated once per benchmark and touched. */
#ifndef SDNMPI_BENCH_BUFFER_H
#define SDNMPI_BENCH_BUFFER_H

#include <mpi.h>
#include <stddef.h>

/* At least one byte (so 0-byte messages get a valid pointer), every page
 * written; on failure print the rank and size and MPI_Abort with status 1. */
unsigned char *buffer_alloc(size_t bytes, MPI_Comm comm);

/* bytes * count, aborting cleanly instead of overflowing. */
size_t buffer_span(size_t bytes, size_t count, MPI_Comm comm);

#endif
