/* sdnmpi-replay: what one rank posts in each phase, and the memory it needs.
 *
 * MPI-free (tested by tests/replay_tests.c).  A cell is `messages` messages:
 * size_bytes / messages bytes each, the remainder on the last.  Every receive
 * of a phase gets its own slot in one receive region (concurrent receives into
 * one buffer are erroneous MPI); every send reads the same send buffer, which
 * MPI-3 allows.
 */
#ifndef SDNMPI_REPLAY_PLAN_H
#define SDNMPI_REPLAY_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"

struct plan_cell {
	int32_t peer;     /* source (receives) or destination (sends) */
	int32_t messages;
	int64_t each;     /* bytes of every message but the last */
	int64_t last;     /* bytes of the last message */
	int64_t offset;   /* receives: the first slot's offset in the receive region */
};

struct plan_phase {
	struct plan_cell *recv;
	size_t nrecv;
	struct plan_cell *send;
	size_t nsend;
	int64_t recv_messages;
	int64_t send_messages;
	int64_t recv_bytes; /* also the receive region this phase uses */
	int64_t send_bytes;
};

struct plan {
	struct plan_phase *phases;
	int32_t nphases;
	int64_t recv_region_bytes; /* the largest phase's receive bytes */
	int64_t send_buffer_bytes; /* the largest message sent */
	int64_t max_requests;      /* the most messages (in + out) of one phase */
};

/* The plan of `rank` from a pattern parsed for it (or with every cell).
 * Returns 0, or -1 when out of memory (nothing to free then). */
int plan_build(const struct replay_pattern *pat, int32_t rank, struct plan *out);

void plan_free(struct plan *plan);

/* Receive region + send buffer + max_requests * request_bytes, saturating at
 * UINT64_MAX instead of overflowing. */
uint64_t plan_memory_bytes(const struct plan *plan, size_t request_bytes);

#endif
