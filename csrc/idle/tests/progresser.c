/* Calls ucp_worker_progress() N times on a worker that reports EVENTS events
 * per pass and prints the seconds it took: with libsdnmpi_idle.so preloaded,
 * passes with no events sleep, others return at once.  Linked against
 * fakeucp.c's library, as MPICH is against UCX's. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

unsigned ucp_worker_progress(void *worker);

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100;
	unsigned events = argc > 2 ? (unsigned)atol(argv[2]) : 0;
	unsigned total = 0;
	struct timespec a;
	struct timespec b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		total += ucp_worker_progress(&events);
	clock_gettime(CLOCK_MONOTONIC, &b);
	if (total != (unsigned)n * events) {
		fprintf(stderr, "progresser: %u events, expected %lu\n", total, (unsigned long)n * events);
		return 1;
	}
	printf("%.6f\n", (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
	return 0;
}
