/* Communicator tracking: every communicator the program uses gets a per-rank id
 * and its member list as WORLD ranks (MPI_Group_translate_ranks once, at
 * creation or first use), so events can name world ranks. */
#ifndef SDN_COMMS_H
#define SDN_COMMS_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "trace.h"

struct sdn_comm {
	MPI_Comm handle;
	int32_t id;
	int32_t size;
	int32_t my_rank;
	int32_t *world_ranks; /* by communicator rank */
	int live;             /* 0 after MPI_Comm_free (kept for the trace header) */
	int inter;            /* intercommunicator: peers are remote-group ranks */
};

struct sdn_comm_table {
	struct sdn_comm *v;
	size_t n, cap;
	int32_t next_id;
	MPI_Group world_group;
};

/* Register MPI_COMM_WORLD (id 0) and MPI_COMM_SELF (id 1); 0 or -1. */
int sdn_comms_init(struct sdn_comm_table *t);
void sdn_comms_free(struct sdn_comm_table *t);
/* The live entry of a handle, registering it on first use; NULL on failure. */
struct sdn_comm *sdn_comm_get(struct sdn_comm_table *t, MPI_Comm comm);
/* Register a new communicator (a constructor's output); NULL for MPI_COMM_NULL. */
struct sdn_comm *sdn_comm_register(struct sdn_comm_table *t, MPI_Comm comm);
/* Forget a handle (MPI_Comm_free); returns its id or -1. */
int32_t sdn_comm_forget(struct sdn_comm_table *t, MPI_Comm comm);
/* World rank of communicator rank r, or SDN_PEER_ANY / SDN_PEER_NULL / SDN_PEER_NONE. */
int32_t sdn_comm_world(const struct sdn_comm *c, int r);
/* The table as plain data for the writers (array of t->n entries). */
void sdn_comms_info(const struct sdn_comm_table *t, struct sdn_comm_info *out);

#endif
