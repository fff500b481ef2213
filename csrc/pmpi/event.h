/* Per-rank in-memory event buffer of libsdnmpi (no MPI dependency). */
#ifndef SDN_EVENT_H
#define SDN_EVENT_H

#include <stddef.h>
#include <stdint.h>

/* What a wrapped call is (the classes of mpi_calls.spec). */
enum sdn_kind {
	SDN_KIND_SEND = 1,
	SDN_KIND_RECV,
	SDN_KIND_SENDRECV,
	SDN_KIND_COLL,
	SDN_KIND_COLLV,
	SDN_KIND_COMM_NEW,
	SDN_KIND_COMM_FREE,
	SDN_KIND_INIT,
	SDN_KIND_FINALIZE,
	SDN_KIND_COMPLETION,
};

/* Peer encodings besides world ranks >= 0. */
#define SDN_PEER_NONE (-1)  /* not applicable */
#define SDN_PEER_ANY (-2)   /* MPI_ANY_SOURCE, source unknown */
#define SDN_PEER_NULL (-3)  /* MPI_PROC_NULL */

/* One recorded call.  Names point to string literals of the wrappers. */
struct sdn_event {
	const char *name;      /* "MPI_Send" */
	const char *coll;      /* "allreduce" for collectives, else NULL */
	double t_start;        /* seconds since init (CLOCK_MONOTONIC) */
	double t_end;
	int64_t count;         /* elements (-1: not applicable) */
	int64_t type_bytes;    /* size of the datatype */
	int64_t bytes;         /* count * type_bytes (send side for sendrecv) */
	int64_t recv_bytes;    /* sendrecv: bytes received */
	int64_t counts_off;    /* v-variants: offset of the counts in the arena, or -1 */
	int32_t counts_len;
	int32_t comm_id;       /* -1: none */
	int32_t new_comm_id;   /* comm_new: the new communicator, -1: MPI_COMM_NULL */
	int32_t peer;          /* world rank or SDN_PEER_* */
	int32_t recv_peer;     /* sendrecv: world rank of the source */
	int32_t root;          /* world rank of the root, or SDN_PEER_NONE */
	int32_t tag;
	uint8_t kind;          /* enum sdn_kind */
};

/* Grows by doubling; counts of the v-variants live in a separate int64 arena. */
struct sdn_evbuf {
	struct sdn_event *ev;
	size_t n, cap;
	int64_t *arena;
	size_t arena_n, arena_cap;
	uint64_t dropped; /* events lost to allocation failure */
};

void sdn_evbuf_init(struct sdn_evbuf *b);
void sdn_evbuf_free(struct sdn_evbuf *b);
/* A zeroed event appended to the buffer (fields set to "none"), or NULL. */
struct sdn_event *sdn_evbuf_push(struct sdn_evbuf *b);
/* Copy n counts into the arena; the offset, or -1 on allocation failure. */
int64_t sdn_evbuf_push_counts(struct sdn_evbuf *b, const int *counts, int n);
/* The counts of an event (NULL when it has none). */
const int64_t *sdn_event_counts(const struct sdn_evbuf *b, const struct sdn_event *e);
/* "send", "coll", ... */
const char *sdn_kind_name(int kind);

#endif
