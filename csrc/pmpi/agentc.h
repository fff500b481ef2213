/* The rank's side of the node agent protocol (docs/agent-protocol.md), without MPI:
 * the primitive code of a call, the socket path for this host, the agent's
 * replies, and one request/reply exchange with a passed file descriptor. */
#ifndef SDN_AGENTC_H
#define SDN_AGENTC_H

#include <stddef.h>

#define SDN_AGENT_MAX_PORTS 16
#define SDN_AGENT_LINE_MAX 4096

struct sdn_agent_reply {
	int ok;
	int ctx_slot;
	int job_slot; /* the job's tag slot; -1 when null or absent (the job runs untagged) */
	char ip[16];
	int nports;
	int ports[SDN_AGENT_MAX_PORTS];
	char group[16]; /* bcast_open: the tree's IPv4 multicast group, or "" */
	int port;       /* bcast_open: its UDP port, or 0 */
	char error[256];
};

/* The tag primitive code (csrc/include/sdnmpi/tag.h) of a call of this kind
 * (event.h's SDN_KIND_*) and collective name, or 0 for calls that keep the
 * current primitive (init, finalize, completion, communicator management). */
unsigned sdn_primitive_of(int kind, const char *coll);
/* tmpl with every "%h" replaced by host; -1 if it does not fit in len. */
int sdn_expand_host(const char *tmpl, const char *host, char *out, size_t len);
/* Parse one reply line (flat JSON as the agent writes it); 0 if it is an
 * object with "ok", -1 if malformed. */
int sdn_agent_parse_reply(const char *line, struct sdn_agent_reply *r);
/* Connect to the agent's Unix socket; the fd, or -1 (errno set). */
int sdn_agent_connect(const char *path, int timeout_ms);
/* Send request (one line, newline added) and read one reply line into line;
 * a file descriptor passed with it goes to *passed_fd (else -1).  0 or -1. */
int sdn_agent_call(int fd, const char *request, char *line, size_t len, int *passed_fd);
/* sdn_agent_call on a connection whose earlier requests may have timed out: the agent
 * answers a connection's requests in order, so the first *stale lines read are late
 * replies to those and are skipped.  A timeout now adds this request to *stale.
 * Without it a late reply was taken as the answer to the next request (a push
 * confirmed, a Bcast group given, by a reply meant for another). */
int sdn_agent_exchange(int fd, const char *request, char *line, size_t len, int *passed_fd,
		       unsigned *stale);

#endif
