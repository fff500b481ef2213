/* sdnmpi-replay: command line parsing, identical on every rank, MPI-free. */
#ifndef SDNMPI_REPLAY_ARGS_H
#define SDNMPI_REPLAY_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARGS_ERR_LEN 256
#define ARGS_MAX_ITERS 100000L
#define ARGS_MAX_POLL_US 1000000L
#define ARGS_DEFAULT_MAX_MEMORY ((uint64_t)256 << 20)
#define ARGS_MAX_MEMORY ((uint64_t)1 << 40)

struct replay_opts {
	long iters;          /* timed passes over the whole pattern */
	long warmup;         /* untimed passes first */
	bool barrier;        /* MPI_Barrier ends every phase occurrence */
	long poll_us;        /* 0: MPI_Waitall; > 0: MPI_Testall + nanosleep(poll_us) */
	uint64_t max_memory; /* per rank: receive slots, send buffer, request arrays */
	bool json;
	bool help;
	const char *file;
};

/* Parse argv into opts; on a usage error return -1 with a message in err. */
int args_parse(int argc, char **argv, struct replay_opts *opts, char *err, size_t errlen);

void args_print_usage(void);

#endif
