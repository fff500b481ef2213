/* Calls ucp_worker_progress() N times on a worker that reports EVENTS events
 * per pass and prints the seconds it took: with libsdnmpi_idle.so preloaded,
 * passes with no events sleep (or wait on the worker's descriptor), others
 * return at once.  "progresser init MASK FEATURES" instead calls
 * ucp_init_version() with parameters of that field mask and features and
 * prints the features UCX was given.  Linked against fakeucp.c's library, as
 * MPICH is against UCX's. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

unsigned ucp_worker_progress(void *worker);
int ucp_init_version(unsigned api_major_version, unsigned api_minor_version, const void *params,
		     const void *config, void **context_p);

static int init(const char *mask, const char *features)
{
	/* ucp_params_t starts with its field mask and features (and goes on) */
	uint64_t params[8] = {0};
	void *context = NULL;

	params[0] = strtoull(mask, NULL, 0);
	params[1] = strtoull(features, NULL, 0);
	if (ucp_init_version(1, 13, params, NULL, &context) != 0)
		return 1;
	printf("%#llx\n", (unsigned long long)(uintptr_t)context);
	return 0;
}

int main(int argc, char **argv)
{
	long n;
	unsigned events;
	unsigned total = 0;
	struct timespec a;
	struct timespec b;

	if (argc == 4 && strcmp(argv[1], "init") == 0)
		return init(argv[2], argv[3]);
	n = argc > 1 ? atol(argv[1]) : 100;
	events = argc > 2 ? (unsigned)atol(argv[2]) : 0;
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
