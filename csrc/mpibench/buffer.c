/* sdnmpi-bench: message buffers. */
#include "buffer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void buffer_die(const char *what, size_t bytes, MPI_Comm comm)
{
	int rank = 0;

	MPI_Comm_rank(comm, &rank);
	fprintf(stderr, "sdnmpi-bench: rank %d: %s %zu bytes\n", rank, what, bytes);
	MPI_Abort(comm, 1);
}

unsigned char *buffer_alloc(size_t bytes, MPI_Comm comm)
{
	size_t len = bytes > 0 ? bytes : 1;
	unsigned char *buf = malloc(len);

	if (buf == NULL)
		buffer_die("cannot allocate", len, comm);
	/* Touch every page now so first-touch faults do not land in timed loops. */
	memset(buf, 0xa5, len);
	return buf;
}

size_t buffer_span(size_t bytes, size_t count, MPI_Comm comm)
{
	if (count != 0 && bytes > SIZE_MAX / count)
		buffer_die("buffer too large: count times", bytes, comm);
	return bytes * count;
}
