/* Trace writers: sdnmpi-trace-<rank>.jsonl (schema sdnmpi-trace/1, see
 * docs/trace-format.md) and pfprof oxton-result<rank>.json.  Plain data in,
 * files out: no MPI dependency. */
#ifndef SDN_TRACE_H
#define SDN_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "event.h"

#define SDN_TRACE_SCHEMA "sdnmpi-trace/1"

/* A communicator: its member world ranks in communicator-rank order. */
struct sdn_comm_info {
	int32_t id;
	int32_t size;
	const int32_t *world_ranks;
};

struct sdn_trace_meta {
	int rank, nprocs;
	long pid;
	const char *host;
	const char *mpi_library;
	const char *job;
	double t0_wall; /* CLOCK_REALTIME at init, seconds since the epoch */
	unsigned modes;
	const struct sdn_comm_info *comms;
	size_t ncomms;
};

/* 0, or -1 on an output error. */
int sdn_write_trace(FILE *f, const struct sdn_trace_meta *m, const struct sdn_evbuf *b);
int sdn_write_pfprof(FILE *f, const struct sdn_trace_meta *m, const struct sdn_evbuf *b);
/* Create dir (and parents) if needed and check it is writable; 0 or -1 with errno. */
int sdn_prepare_dir(const char *dir);
/* Write both files of this rank into dir (via a temporary name and rename).
 * Problems go to report(ctx, msg); returns 0 or -1. */
int sdn_write_outputs(const char *dir, const struct sdn_trace_meta *m, const struct sdn_evbuf *b,
		      sdn_report_fn report, void *ctx);

#endif
