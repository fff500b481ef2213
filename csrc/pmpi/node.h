/* Register and tag modes: the rank's link to its node agent (docs/agent-protocol.md).
 *
 * sdn_node_init (after PMPI_Init, on every rank: it makes collective calls)
 * registers with the agent, maps the rank's context memory (tag mode), exchanges
 * [ip, pid, listening ports] with the other ranks and sends the table to the
 * agent.  Without an agent the rank prints one line and runs untagged.
 * sdn_node_enter publishes the primitive of every MPI call with one memory store
 * (no system call); the primitive stays published after the call returns, since
 * TCP sends what a call buffered after it returned.  In push mode, the first
 * time a collective call with a given (collective, communicator, root, size) is
 * entered, the communicator's rank 0 sends it to the agent, which has the
 * controller install its routes, and waits for the answer (at most
 * SDNMPI_PUSH_TIMEOUT_MS); repeated calls hit a per-process cache.
 * sdn_node_finish (at MPI_Finalize or exit) unregisters. */
#ifndef SDN_NODE_H
#define SDN_NODE_H

#include "config.h"
#include "core.h"

SDN_HIDDEN void sdn_node_init(const struct sdn_config *cfg, int rank, int nprocs);
SDN_HIDDEN void sdn_node_enter(const struct sdn_call *c);
SDN_HIDDEN void sdn_node_finish(void);
/* The fabric address the agent gave at registration ("" without one). */
SDN_HIDDEN const char *sdn_node_ip(void);
/* One request to the agent and its reply line, waiting at most timeout_ms;
 * 0, or -1 without an agent or a reply (bcast mode's bcast_open/bcast_close). */
SDN_HIDDEN int sdn_node_request(const char *req, char *line, size_t len, int timeout_ms);

#endif
