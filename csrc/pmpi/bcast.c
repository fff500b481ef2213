/* bcast mode: the switch-replicated MPI_Bcast (see bcast.h). */
#include "bcast.h"

#include <arpa/inet.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agentc.h"
#include "mcast.h"
#include "node.h"
#include "rbcast.h"

#define MS 1000000ull

/* Why a broadcast took the library's own path (counted; each said once). */
enum reason {
	R_INTERCOMM, R_ONE_HOST, R_NO_GROUP, R_NO_ADDR, R_SETUP, R_DATATYPE, R_FAILED, R_COUNT
};
static const char *const REASON_NAMES[R_COUNT] = {
	"intercomm", "one-host", "no-group", "no-address", "setup", "datatype", "failed"};

/* The settings every rank takes from world rank 0. */
struct settings {
	long long min_bytes, min_rate;
	int timeout_ms, open_timeout_ms, window, stats, have_group;
	uint32_t group, port;
};

/* Why the root falls back, said once per job by the communicator's printer. */
#define DETAIL_LEN 200

/* Copy a reason's detail, cut to DETAIL_LEN - 1 bytes. */
static void copy_detail(char *dst, const char *src)
{
	size_t n = strlen(src);

	if (n > DETAIL_LEN - 1)
		n = DETAIL_LEN - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* What the root tells the communicator on the first call with it as root. */
struct setup_record {
	int32_t ok, reason;
	uint32_t group, port, root_addr, ack_port, session_hi, payload;
	char detail[DETAIL_LEN];
};


/* One (communicator, root). */
struct root_entry {
	int root, failed, reason, recv_index, local_root, from_agent;
	uint32_t nrecv, calls, session_hi, payload;
	uint32_t group;
	struct sockaddr_in group_sa, root_sa;
	int fd, group_fd, ack_fd;
	struct root_entry *next;
};

/* One communicator (an MPI attribute: freed with it). */
struct comm_state {
	int rank, size, nhosts;
	int printer; /* this rank says the fallbacks: world rank 0, else comm rank 0 */
	int *host_of; /* per comm rank: its host's lowest comm rank */
	MPI_Comm node;
	struct root_entry *roots;
};

static struct {
	int on, joined, world_rank, keyval;
	struct settings set;
	uint64_t reasons[R_COUNT], replicated;
	unsigned said, kept;
	struct sdn_rb_sender_stats tx;
	struct sdn_rb_receiver_stats rx;
	struct sdn_mc_counters io;
} B = {0, 0, 0, MPI_KEYVAL_INVALID, {0, 0, 0, 0, 0, 0, 0, 0, 0}, {0}, 0, 0, 0, {0}, {0}, {0}};

/* Print a fallback's reason once per process. */
static void say_once(enum reason r, const char *detail)
{
	if (B.said & (1u << r))
		return;
	B.said |= 1u << r;
	fprintf(stderr, "sdnmpi: rank %d: MPI_Bcast falls back to the library's (%s: %s)\n",
		B.world_rank, REASON_NAMES[r], detail);
}

/* The deciding rank (the root) keeps why, for the record it broadcasts. */
static char why[R_COUNT][DETAIL_LEN];

/* A reason a rank other than world rank 0 would have said, kept for MPI_Finalize,
 * where world rank 0 says what it has not said itself (gather_reasons). */
static char kept[R_COUNT][DETAIL_LEN];

/* Say a reason once per job: world rank 0 at once, any other rank at MPI_Finalize
 * through world rank 0 (a job that never finalizes loses those lines, not its data). */
static void tell(enum reason r, const char *detail)
{
	if (B.world_rank == 0) {
		say_once(r, detail);
		return;
	}
	if (B.kept & (1u << r))
		return;
	B.kept |= 1u << r;
	copy_detail(kept[r], detail);
}

static void note(enum reason r, const char *detail)
{
	copy_detail(why[r], detail);
}

/* Every rank of the communicator knows the reason (setup record, outcome); only its
 * printer tells it: world rank 0 whenever it is a member, else the communicator's
 * rank 0, whose reasons world rank 0 says at MPI_Finalize. */
static void announce(const struct comm_state *cs, int r, const char *detail)
{
	if (cs->printer && r >= 0 && r < R_COUNT)
		tell((enum reason)r, detail[0] ? detail : "no detail");
}

/* -- per communicator ------------------------------------------------------------ */

static void close_entry(struct root_entry *e)
{
	char req[96], line[256];

	sdn_mc_close(e->fd, 0, "");
	sdn_mc_close(e->group_fd, e->group, sdn_node_ip());
	sdn_mc_close(e->ack_fd, 0, "");
	if (e->from_agent) {
		struct in_addr a = {htonl(e->group)};
		char g[16] = "";
		inet_ntop(AF_INET, &a, g, sizeof(g));
		snprintf(req, sizeof(req), "{\"op\":\"bcast_close\",\"group\":\"%s\"}", g);
		sdn_node_request(req, line, sizeof(line), B.set.timeout_ms);
	}
}

static int delete_state(MPI_Comm comm, int keyval, void *attr, void *extra)
{
	struct comm_state *cs = attr;

	(void)comm, (void)keyval, (void)extra;
	while (cs->roots) {
		struct root_entry *e = cs->roots;
		cs->roots = e->next;
		close_entry(e);
		free(e);
	}
	if (cs->node != MPI_COMM_NULL)
		PMPI_Comm_free(&cs->node);
	free(cs->host_of);
	free(cs);
	return MPI_SUCCESS;
}

/* Collective over comm: 1 on every rank if every rank's ok is 1 (a rank short of
 * memory must not leave the others waiting in a collective it skips). */
static int all_ok(int ok, MPI_Comm comm)
{
	int all = 0;

	PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm);
	return all;
}

/* Collective over comm: the node-local communicator and every rank's host; NULL on
 * every rank (and the library's Bcast) if any rank is short of memory. */
static struct comm_state *comm_setup(MPI_Comm comm)
{
	struct comm_state *cs = calloc(1, sizeof(*cs));
	int host, size;

	PMPI_Comm_size(comm, &size);
	if (cs)
		cs->host_of = calloc((size_t)size, sizeof(int));
	if (!all_ok(cs && cs->host_of, comm)) {
		if (cs)
			free(cs->host_of);
		free(cs);
		return NULL;
	}
	PMPI_Comm_rank(comm, &cs->rank);
	cs->size = size;
	{
		MPI_Group world, mine;
		int zero = 0, r0 = MPI_UNDEFINED;
		PMPI_Comm_group(MPI_COMM_WORLD, &world);
		PMPI_Comm_group(comm, &mine);
		PMPI_Group_translate_ranks(world, 1, &zero, mine, &r0);
		PMPI_Group_free(&world);
		PMPI_Group_free(&mine);
		cs->printer = r0 == MPI_UNDEFINED ? cs->rank == 0 : cs->rank == r0;
	}
	PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, cs->rank, MPI_INFO_NULL, &cs->node);
	PMPI_Allreduce(&cs->rank, &host, 1, MPI_INT, MPI_MIN, cs->node);
	PMPI_Allgather(&host, 1, MPI_INT, cs->host_of, 1, MPI_INT, comm);
	for (int r = 0; r < cs->size; r++)
		cs->nhosts += cs->host_of[r] == r;
	PMPI_Comm_set_attr(comm, B.keyval, cs);
	return cs;
}

/* The node-comm rank of comm rank r on r's host. */
static int node_rank_of(const struct comm_state *cs, int r)
{
	int n = 0;

	for (int i = 0; i < r; i++)
		n += cs->host_of[i] == cs->host_of[r];
	return n;
}

/* This rank's receiver index for root (host leaders of the other hosts), or -1. */
static int receiver_index(const struct comm_state *cs, int root)
{
	int idx = 0, root_host = cs->host_of[root];

	if (cs->host_of[cs->rank] != cs->rank || cs->rank == root_host)
		return -1;
	for (int r = 0; r < cs->rank; r++)
		idx += cs->host_of[r] == r && r != root_host;
	return idx;
}

/* -- the group: static, or the node agent's bcast_open ---------------------------- */

static int world_ranks_json(MPI_Comm comm, int n, char *out, size_t cap)
{
	MPI_Group g, w;
	int *in = malloc((size_t)n * sizeof(int)), *wr = malloc((size_t)n * sizeof(int));
	size_t used = 0;

	if (!in || !wr) {
		free(in);
		free(wr);
		return -1;
	}
	for (int i = 0; i < n; i++)
		in[i] = i;
	PMPI_Comm_group(comm, &g);
	PMPI_Comm_group(MPI_COMM_WORLD, &w);
	PMPI_Group_translate_ranks(g, n, in, w, wr);
	PMPI_Group_free(&g);
	PMPI_Group_free(&w);
	for (int i = 0; i < n && used < cap; i++)
		used += (size_t)snprintf(out + used, cap - used, "%s%d", i ? "," : "", wr[i]);
	free(in);
	free(wr);
	return used < cap ? 0 : -1;
}

/* Root: the group and port for (comm, root); reason and detail on failure. */
static int open_group(MPI_Comm comm, const struct comm_state *cs, struct setup_record *s,
		      int *from_agent, char *detail, size_t dlen)
{
	size_t cap = 96 + (size_t)cs->size * 12;
	char *req = malloc(cap), line[SDN_AGENT_LINE_MAX], root_w[16];
	struct sdn_agent_reply r;
	struct in_addr a;
	int rc = -1;

	if (B.set.have_group) {
		s->group = B.set.group;
		s->port = B.set.port;
		free(req);
		return 0;
	}
	snprintf(detail, dlen, "no reply from the node agent within %d ms",
		 B.set.open_timeout_ms);
	if (!req || world_ranks_json(comm, cs->size, req + 64, cap - 80) ||
	    world_ranks_json(MPI_COMM_SELF, 1, root_w, sizeof(root_w))) {
		free(req);
		return -1;
	}
	{
		char *ranks = strdup(req + 64);
		snprintf(req, cap, "{\"op\":\"bcast_open\",\"comm\":[%s],\"root\":%s}",
			 ranks ? ranks : "", root_w);
		free(ranks);
	}
	if (sdn_node_request(req, line, sizeof(line), B.set.open_timeout_ms) == 0 &&
	    sdn_agent_parse_reply(line, &r) == 0) {
		if (!r.ok)
			snprintf(detail, dlen, "bcast_open refused: %s", r.error);
		else if (inet_pton(AF_INET, r.group, &a) != 1 || !IN_MULTICAST(ntohl(a.s_addr)) ||
			 r.port < 1 || r.port > 65535)
			snprintf(detail, dlen, "bcast_open gave group '%s' port %d", r.group, r.port);
		else {
			s->group = ntohl(a.s_addr);
			s->port = (uint32_t)r.port;
			*from_agent = 1;
			rc = 0;
		}
	}
	free(req);
	return rc;
}

/* Root: the group, the sending socket and the setup record. */
static void root_prepare(MPI_Comm comm, const struct comm_state *cs, struct root_entry *e,
			 struct setup_record *s)
{
	char ip[16], detail[300];
	uint16_t ack_port = 0;
	struct in_addr a;

	if (open_group(comm, cs, s, &e->from_agent, detail, sizeof(detail))) {
		s->reason = R_NO_GROUP;
		copy_detail(s->detail, detail);
		return;
	}
	snprintf(ip, sizeof(ip), "%s", sdn_node_ip());
	if ((!ip[0] && sdn_mc_route_addr(s->group, ip)) || inet_pton(AF_INET, ip, &a) != 1) {
		s->reason = R_NO_ADDR;
		copy_detail(s->detail, "no fabric address from the agent and no route to the group");
		return;
	}
	e->fd = sdn_mc_open_root(ip, &ack_port, &B.io);
	if (e->fd < 0) {
		s->reason = R_SETUP;
		copy_detail(s->detail, "cannot open the root's UDP socket");
		return;
	}
	s->root_addr = a.s_addr;
	s->ack_port = ack_port;
	s->session_hi = (uint32_t)getpid() * 2654435761u ^ (uint32_t)time(NULL) ^
			(uint32_t)(uintptr_t)e;
	s->payload = SDNMPI_RBCAST_DEFAULT_PAYLOAD;
	s->ok = 1;
}

/* What a (comm, root) whose entry could not be allocated on some rank gets: nothing
 * is kept on any rank, so the next call tries again everywhere alike. */
static struct root_entry no_memory = {.failed = 1, .reason = R_SETUP};

/* Collective over comm: the entry of (comm, root), set up on first use. */
static struct root_entry *root_setup(MPI_Comm comm, struct comm_state *cs, int root)
{
	struct root_entry *e = calloc(1, sizeof(*e));
	struct setup_record s = {0};
	int mine = 1, all = 0;

	if (!all_ok(e != NULL, comm)) {
		free(e);
		return &no_memory;
	}
	e->root = root;
	e->fd = e->group_fd = e->ack_fd = -1;
	e->recv_index = receiver_index(cs, root);
	e->nrecv = (uint32_t)cs->nhosts - 1;
	e->local_root = cs->host_of[cs->rank] == cs->host_of[root] ? node_rank_of(cs, root) : 0;
	e->next = cs->roots;
	cs->roots = e;
	if (cs->rank == root)
		root_prepare(comm, cs, e, &s);
	PMPI_Bcast(&s, sizeof(s), MPI_BYTE, root, comm);
	s.detail[DETAIL_LEN - 1] = '\0';
	e->group = s.group;
	e->session_hi = s.session_hi;
	e->payload = s.payload;
	e->group_sa = (struct sockaddr_in){.sin_family = AF_INET};
	e->group_sa.sin_addr.s_addr = htonl(s.group);
	e->group_sa.sin_port = htons((uint16_t)s.port);
	e->root_sa = (struct sockaddr_in){.sin_family = AF_INET};
	e->root_sa.sin_addr.s_addr = s.root_addr;
	e->root_sa.sin_port = htons((uint16_t)s.ack_port);
	if (!s.ok) {
		e->failed = 1;
		e->reason = s.reason;
		announce(cs, s.reason, s.detail);
		return e;
	}
	if (e->recv_index >= 0)
		mine = sdn_mc_open_leader(s.group, (uint16_t)s.port, sdn_node_ip(), &e->group_fd,
					  &e->ack_fd, &B.io) == 0;
	PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
	if (!all) {
		e->failed = 1;
		e->reason = R_SETUP;
		announce(cs, R_SETUP, "a host leader could not join the group");
	}
	return e;
}

/* -- one broadcast ---------------------------------------------------------------- */

/* The buffer is count*size contiguous bytes from buf. */
static int contiguous(void *buf, MPI_Datatype type)
{
	int ni, na, nd, combiner, size;
	MPI_Aint lb, extent, tlb, textent;

	if (buf == MPI_IN_PLACE || !buf)
		return 0;
	if (PMPI_Type_get_envelope(type, &ni, &na, &nd, &combiner) != MPI_SUCCESS)
		return 0;
	if (combiner == MPI_COMBINER_NAMED)
		return 1;
	PMPI_Type_size(type, &size);
	PMPI_Type_get_extent(type, &lb, &extent);
	PMPI_Type_get_true_extent(type, &tlb, &textent);
	return lb == 0 && tlb == 0 && extent == size && textent == size;
}

static int status_arrived(void *ctx)
{
	int done = 0;

	PMPI_Test((MPI_Request *)ctx, &done, MPI_STATUS_IGNORE);
	return done;
}

static struct sdn_rb_params params_for(uint64_t len, uint32_t payload)
{
	struct sdn_rb_params p;

	sdn_rb_params_default(&p);
	p.payload_bytes = payload;
	p.window_pkts = (uint32_t)B.set.window;
	p.recv_dead_ns = (uint64_t)(unsigned)B.set.timeout_ms * MS;
	p.send_dead_ns = 2 * p.recv_dead_ns;
	/* A bound on the whole UDP phase, whatever its progress: 10 dead timeouts plus the
	 * buffer at SDNMPI_BCAST_MIN_RATE (default 1 MB/s, 1 us a byte).  At 10 MB/s a 16
	 * MiB Bcast over 10 Mbit/s links (14 s) failed at 11.7 s and then ran the library's
	 * Bcast too (so did 16 MiB at 1 MB/s over 5 Mbit/s links: 29 s); at 100 kB/s a
	 * call that stalls (seen under 5 % loss with MPICH) held its job for 50 s. */
	double at_rate = (double)len * 1e9 / (double)B.set.min_rate;

	p.overall_ns = 10 * p.recv_dead_ns +
		       (at_rate < (double)(UINT64_MAX / 4) ? (uint64_t)at_rate : UINT64_MAX / 4);
	return p;
}

#define STATUS_OK (-1)

/* The root's part: STATUS_OK, or the reason of the fallback. */
static int run_root(struct root_entry *e, uint64_t session, const void *buf, uint64_t len,
		    int contig)
{
	struct sdn_rb_params p = params_for(len, e->payload);
	struct sdn_rb_sender *s;
	struct sdn_rb_sender_stats st;
	enum sdn_rb_action a;
	int32_t who = -1;
	char detail[96];

	if (!contig) {
		note(R_DATATYPE, "the root's datatype is not contiguous");
		return R_DATATYPE;
	}
	s = sdn_rb_sender_new(&p, session, buf, len, e->nrecv, sdn_mc_now_ns());
	if (!s)
		return R_FAILED;
	a = sdn_mc_run_sender(e->fd, &e->group_sa, s, &B.io);
	sdn_rb_sender_stats(s, &st);
	B.tx.packets += st.packets, B.tx.repairs += st.repairs, B.tx.tail += st.tail;
	B.tx.acks += st.acks, B.tx.ignored += st.ignored, B.tx.cuts += st.cuts;
	B.tx.ece_acks += st.ece_acks, B.tx.ecn_cuts += st.ecn_cuts, B.tx.undone += st.undone;
	if (a == SDN_RB_DONE) {
		sdn_rb_sender_free(s);
		return STATUS_OK;
	}
	if (sdn_rb_sender_failure(s, &who) == SDN_RB_FAIL_ABORT) {
		snprintf(detail, sizeof(detail), "receiver %d's datatype is not contiguous", (int)who);
		note(R_DATATYPE, detail);
		sdn_rb_sender_free(s);
		return R_DATATYPE;
	}
	if (sdn_rb_sender_failure(s, NULL) == SDN_RB_FAIL_OVERALL)
		snprintf(detail, sizeof(detail),
			 "the transfer of %llu bytes passed its bound of %.1f s "
			 "(SDNMPI_BCAST_MIN_RATE %lld bytes/s)",
			 (unsigned long long)len, (double)p.overall_ns / 1e9, B.set.min_rate);
	else
		snprintf(detail, sizeof(detail), "receiver %d %s", (int)who,
			 sdn_rb_sender_failure(s, NULL) == SDN_RB_FAIL_DEAD ? "went silent"
									  : "took too long");
	note(R_FAILED, detail);
	sdn_rb_sender_free(s);
	return R_FAILED;
}

static void run_leader(struct root_entry *e, uint64_t session, void *buf, uint64_t len,
		       int contig, MPI_Request *req)
{
	struct sdn_rb_params p = params_for(len, e->payload);
	struct sdn_rb_receiver *r;
	struct sdn_rb_receiver_stats st;
	uint8_t ack[SDNMPI_RBCAST_HDR_LEN];

	r = contig ? sdn_rb_receiver_new(&p, session, buf, len, (uint32_t)e->recv_index,
					 sdn_mc_now_ns())
		   : NULL;
	if (!r) {
		sdn_rb_abort_ack(session, len, sdn_rb_npackets(len, e->payload),
				 (uint32_t)e->recv_index, ack);
		for (int i = 0; i < 3; i++)
			sdn_mc_send_ack(e->ack_fd, &e->root_sa, ack);
		return;
	}
	sdn_mc_run_receiver(e->group_fd, e->ack_fd, &e->root_sa, r, status_arrived, req, &B.io);
	sdn_rb_receiver_stats(r, &st);
	B.rx.packets += st.packets, B.rx.duplicates += st.duplicates;
	B.rx.ignored += st.ignored, B.rx.acks += st.acks, B.rx.ce += st.ce;
	B.rx.ece_acks += st.ece_acks;
	sdn_rb_receiver_free(r);
}

static int replicated(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm,
		      struct comm_state *cs, struct root_entry *e, uint64_t len)
{
	uint64_t session = (uint64_t)e->session_hi << 32 | ++e->calls;
	int contig = contiguous(buf, type), status = R_FAILED;
	MPI_Request req;

	if (cs->rank == root)
		status = run_root(e, session, buf, len, contig);
	PMPI_Ibcast(&status, 1, MPI_INT, root, comm, &req);
	if (e->recv_index >= 0)
		run_leader(e, session, buf, len, contig, &req);
	PMPI_Wait(&req, MPI_STATUS_IGNORE);
	if (status != STATUS_OK) {
		/* Every rank knows the outcome: the root's reason follows (one small
		 * broadcast, on a failed call only), and the printer says it. */
		char detail[DETAIL_LEN] = "";
		int r = status >= 0 && status < R_COUNT ? status : R_FAILED;
		if (cs->rank == root)
			copy_detail(detail, why[r]);
		PMPI_Bcast(detail, DETAIL_LEN, MPI_CHAR, root, comm);
		detail[DETAIL_LEN - 1] = '\0';
		announce(cs, r, detail);
		B.reasons[r]++;
		return PMPI_Bcast(buf, count, type, root, comm);
	}
	B.replicated++;
	if (cs->nhosts == cs->size)
		return MPI_SUCCESS; /* one rank per host: nothing to hand on */
	return PMPI_Bcast(buf, count, type, e->local_root, cs->node);
}

static int big_bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm,
		     uint64_t len)
{
	struct comm_state *cs = NULL;
	struct root_entry *e;
	int inter = 0, found = 0;

	if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) {
		B.reasons[R_INTERCOMM]++;
		if (root == MPI_ROOT)
			tell(R_INTERCOMM, "an intercommunicator");
		return PMPI_Bcast(buf, count, type, root, comm);
	}
	PMPI_Comm_get_attr(comm, B.keyval, &cs, &found);
	if (!found && !(cs = comm_setup(comm)))
		return PMPI_Bcast(buf, count, type, root, comm);
	if (cs->nhosts < 2) {
		B.reasons[R_ONE_HOST]++;
		announce(cs, R_ONE_HOST, "the communicator is on one host");
		return PMPI_Bcast(buf, count, type, root, comm);
	}
	for (e = cs->roots; e && e->root != root; e = e->next)
		;
	if (!e)
		e = root_setup(comm, cs, root);
	if (e->failed) {
		B.reasons[e->reason]++;
		return PMPI_Bcast(buf, count, type, root, comm);
	}
	return replicated(buf, count, type, root, comm, cs, e, len);
}

int sdn_bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
	int size = 0;

	if (!B.on || count <= 0 || PMPI_Type_size(type, &size) != MPI_SUCCESS ||
	    (long long)count * size < B.set.min_bytes)
		return PMPI_Bcast(buf, count, type, root, comm);
	return big_bcast(buf, count, type, root, comm, (uint64_t)count * (uint64_t)size);
}

void sdn_bcast_init(const struct sdn_config *cfg, int world_rank)
{
	unsigned group = 0, port = 0;

	B.world_rank = world_rank;
	if (!(cfg->modes & SDN_MODE_BCAST))
		return;
	B.set = (struct settings){.min_bytes = cfg->bcast_min_bytes,
				  .min_rate = cfg->bcast_min_rate,
				  .timeout_ms = cfg->bcast_timeout_ms,
				  .open_timeout_ms = cfg->bcast_open_timeout_ms,
				  .window = cfg->bcast_window,
				  .stats = cfg->bcast_stats};
	if (cfg->bcast_group[0] && sdn_config_parse_group(cfg->bcast_group, &group, &port) == 0) {
		B.set.have_group = 1;
		B.set.group = group;
		B.set.port = port;
	}
	PMPI_Bcast(&B.set, sizeof(B.set), MPI_BYTE, 0, MPI_COMM_WORLD);
	B.joined = 1; /* every rank took part: MPI_Finalize's gather_reasons is safe */
	if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &B.keyval, NULL) ==
	    MPI_SUCCESS)
		B.on = 1;
}

/* World rank 0 says the reasons only other ranks kept: for each, the lowest world
 * rank that kept it broadcasts its detail.  Collective over MPI_COMM_WORLD, in every
 * rank's MPI_Finalize after sdn_bcast_init's broadcast (so all or none of them). */
static void gather_reasons(void)
{
	int mine[R_COUNT], low[R_COUNT];

	for (int r = 0; r < R_COUNT; r++)
		mine[r] = (B.kept & (1u << r)) ? B.world_rank : INT_MAX;
	if (PMPI_Allreduce(mine, low, R_COUNT, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS)
		return;
	for (int r = 0; r < R_COUNT; r++) {
		char detail[DETAIL_LEN + 48] = "";

		if (low[r] == INT_MAX)
			continue;
		if (B.world_rank == low[r])
			copy_detail(detail, kept[r]);
		if (PMPI_Bcast(detail, DETAIL_LEN, MPI_CHAR, low[r], MPI_COMM_WORLD) != MPI_SUCCESS)
			return;
		detail[DETAIL_LEN - 1] = '\0';
		if (B.world_rank == 0) {
			size_t n = strlen(detail);
			snprintf(detail + n, sizeof(detail) - n, "; seen by world rank %d", low[r]);
			say_once((enum reason)r, detail);
		}
	}
}

void sdn_bcast_finish(void)
{
	char reasons[256] = "";
	size_t used = 0;

	if (B.joined)
		gather_reasons();
	B.joined = 0;
	if (!B.on || !B.set.stats)
		return;
	for (int r = 0; r < R_COUNT; r++)
		used += (size_t)snprintf(reasons + used, sizeof(reasons) - used, "%s%s=%llu",
					 r ? "," : "", REASON_NAMES[r],
					 (unsigned long long)B.reasons[r]);
	fprintf(stderr,
		"sdnmpi: rank %d: bcast stats: replicated=%llu fallback[%s] sent=%llu "
		"repairs=%llu tail=%llu undone=%llu acks_in=%llu cuts=%llu ece_in=%llu ecn_cuts=%llu "
		"received=%llu duplicates=%llu ignored=%llu ect=%llu ce=%llu acks_out=%llu "
		"ece_out=%llu send_errors=%llu rcvbuf=%d\n",
		B.world_rank, (unsigned long long)B.replicated, reasons,
		(unsigned long long)B.tx.packets, (unsigned long long)B.tx.repairs,
		(unsigned long long)B.tx.tail, (unsigned long long)B.tx.undone,
		(unsigned long long)B.tx.acks,
		(unsigned long long)B.tx.cuts, (unsigned long long)B.tx.ece_acks,
		(unsigned long long)B.tx.ecn_cuts, (unsigned long long)B.rx.packets,
		(unsigned long long)B.rx.duplicates, (unsigned long long)B.rx.ignored,
		(unsigned long long)B.io.ect_in, (unsigned long long)B.rx.ce,
		(unsigned long long)B.rx.acks, (unsigned long long)B.rx.ece_acks,
		(unsigned long long)B.io.send_errors, B.io.rcvbuf_got);
	B.set.stats = 0;
}
