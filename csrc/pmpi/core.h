/* The hand-written core that every generated wrapper calls.
 *
 * A wrapper does, under the re-entry guard (sdn_depth):
 *     sdn_call_init(&c, name, kind, collective); c.<arg> = ...;
 *     sdn_enter(&c); rc = PMPI_X(...); sdn_leave(&c, rc);
 * sdn_enter/sdn_leave dispatch on the mode bitmask: profile records events;
 * register (at init), push (at finalize) and tag (in enter/leave: the current
 * primitive is sdn_current_call) are the hook points for the other modes. */
#ifndef SDN_CORE_H
#define SDN_CORE_H

#include <mpi.h>
#include <stdint.h>

#include "event.h"

#define SDN_HIDDEN __attribute__((visibility("hidden")))
#define SDN_TLS __thread __attribute__((tls_model("initial-exec")))

/* Depth of wrapped MPI calls on this thread: only depth 0 -> 1 is recorded. */
extern SDN_TLS int sdn_depth SDN_HIDDEN;

/* The classified arguments of one call (see mpi_calls.spec). */
struct sdn_call {
	const char *name;
	const char *coll;
	int kind;
	MPI_Comm comm;
	int peer, count, tag, root, has_root;
	MPI_Datatype type;
	const int *counts;
	int recv_peer, recv_count;
	MPI_Datatype recv_type;
	MPI_Status *status;
	MPI_Status local_status; /* used when the caller passed MPI_STATUS_IGNORE */
	MPI_Request *request;
	MPI_Comm *newcomm;
	const int *flag;
	MPI_Request *requests; /* completion: the requests waited on ... */
	int nreq;              /* ... and their number */
	MPI_Status *statuses;  /* completion: per-request statuses, or NULL */
	int *index, *outcount, *indices; /* *any / *some: which completed */
	int npending;          /* completion: tracked receives among requests */
	int32_t comm_id; /* comm_free: the id of the communicator being freed */
	double t_start;
};

/* The call currently inside PMPI on this thread (for the tag mode), or NULL. */
extern SDN_TLS const struct sdn_call *sdn_current_call SDN_HIDDEN;

SDN_HIDDEN void sdn_call_init(struct sdn_call *c, const char *name, int kind, const char *coll);
SDN_HIDDEN void sdn_enter(struct sdn_call *c);
SDN_HIDDEN void sdn_leave(struct sdn_call *c, int rc);
/* MPI_Bcast's core (bcast mode, bcast.c): PMPI_Bcast, or the replicated path. */
SDN_HIDDEN int sdn_bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm);
/* Statuses to use when the caller passed MPI_STATUSES_IGNORE (per thread), or
 * NULL when not profiling or out of memory. */
SDN_HIDDEN MPI_Status *sdn_status_scratch(int n);

#endif
