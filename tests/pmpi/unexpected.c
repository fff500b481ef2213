/* Rank 0 sends N messages of SIZE bytes to rank 1 at once; rank 1 posts its
 * receives only DELAY_MS later, so a message the MPI library sends eagerly
 * arrives unexpected and is buffered whole at rank 1, while a rendezvous message
 * waits at rank 0.  Rank 1 prints its peak resident memory at the end:
 *     rank 1 hwm_kB K
 * Usage: unexpected [N [SIZE [DELAY_MS]]]   (defaults 32, 1048576, 1000).
 * Used by tests/pmpi/test_pmpi_duplex.py and the measurement in
 * docs/mpi-duplex.md. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long hwm_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "VmHWM:", 6) == 0)
			kb = strtol(line + 6, NULL, 10);
	fclose(f);
	return kb;
}

/* Wait delay_ms, letting the library make progress (arrivals are buffered). */
static void late(long delay_ms)
{
	struct timespec ms = {0, 1000000};
	double t0 = MPI_Wtime();
	int flag;

	while (MPI_Wtime() - t0 < (double)delay_ms / 1000) {
		MPI_Iprobe(0, 1, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
		nanosleep(&ms, NULL);
	}
}

int main(int argc, char **argv)
{
	int rank, n;
	long size, delay_ms;
	MPI_Request *reqs;
	char *buf;
	size_t bytes;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	n = argc > 1 ? atoi(argv[1]) : 32;
	size = argc > 2 ? atol(argv[2]) : 1048576;
	delay_ms = argc > 3 ? atol(argv[3]) : 1000;
	if (n < 1 || size < 1 || size > 1 << 30 || delay_ms < 0)
		MPI_Abort(MPI_COMM_WORLD, 2);
	bytes = (size_t)size * (rank == 1 ? (size_t)n : 1);
	reqs = calloc((size_t)n, sizeof(*reqs));
	buf = malloc(bytes);
	if (!reqs || !buf)
		MPI_Abort(MPI_COMM_WORLD, 1);
	memset(buf, 1, bytes);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0) {
		for (int i = 0; i < n; i++)
			MPI_Isend(buf, (int)size, MPI_BYTE, 1, 0, MPI_COMM_WORLD, &reqs[i]);
	} else if (rank == 1) {
		late(delay_ms);
		for (int i = 0; i < n; i++)
			MPI_Irecv(buf + (size_t)i * (size_t)size, (int)size, MPI_BYTE, 0, 0,
				  MPI_COMM_WORLD, &reqs[i]);
	}
	for (int i = 0; rank <= 1 && i < n; i++)
		MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
	if (rank == 1)
		printf("rank 1 hwm_kB %ld\n", hwm_kb());
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Finalize();
	free(buf);
	free(reqs);
	return 0;
}
