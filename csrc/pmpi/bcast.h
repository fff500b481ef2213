/* bcast mode: the switch-replicated MPI_Bcast (issue 14, docs/bcast.md).
 *
 * The MPI_Bcast wrapper calls sdn_bcast instead of PMPI_Bcast.  Below
 * SDNMPI_BCAST_MIN_BYTES, or without bcast mode, that is one size check and
 * PMPI_Bcast.  At or above it, on an intracommunicator spanning several hosts,
 * the root sends the buffer once over UDP to the group of (communicator, root)
 * (the node agent's bcast_open, or SDNMPI_BCAST_GROUP), one leader per host
 * receives it (rbcast.h: ACKs, repairs, credit window) and hands it on to its
 * host's ranks with PMPI_Bcast on a node-local communicator.  The root then
 * broadcasts the outcome (an MPI_INT, nonblocking so that the leaders keep
 * answering repairs while they wait for it): on failure every rank runs the
 * library's own PMPI_Bcast of the buffer, so the result is always MPI_Bcast's.
 *
 * Assumes every rank runs with the same SDNMPI_MODE (as register mode does); the
 * other bcast settings are taken from world rank 0 at MPI_Init.  Not for
 * concurrent MPI_Bcast calls from several threads. */
#ifndef SDN_BCAST_H
#define SDN_BCAST_H

#include <mpi.h>

#include "config.h"
#include "core.h"

/* At MPI_Init, on every rank (collective over MPI_COMM_WORLD in bcast mode). */
SDN_HIDDEN void sdn_bcast_init(const struct sdn_config *cfg, int world_rank);
/* At MPI_Finalize: the stats line (SDNMPI_BCAST_STATS=1). */
SDN_HIDDEN void sdn_bcast_finish(void);

#endif
