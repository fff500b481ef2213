/* Register and tag modes (see node.h). */
#include "node.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "agentc.h"
#include "sdnmpi/rank_ctx.h"

/* What every rank tells the others at init (fixed size: one PMPI_Allgather). */
struct peer_info {
	char ip[16];
	int32_t pid;     /* 0: this rank did not register with its agent */
	int32_t job_slot; /* the job's tag slot as this rank's agent has it; -1: none */
	int32_t nports;
	int32_t ports[SDN_AGENT_MAX_PORTS];
};

#define PUSH_CACHE 256

/* A collective call as push mode caches it. */
struct push_key {
	const char *coll;
	MPI_Comm comm;
	int root;
	int64_t bytes;
};

static struct {
	int fd;                         /* agent connection, -1 without one */
	struct sdnmpi_rank_ctx *ctx;    /* mapped context memory (tag mode), or NULL */
	unsigned current;               /* the primitive published last */
	int rank;
	int push;                       /* push mode on (and an agent to push to) */
	int push_timeout_ms;
	int push_warned;
	struct push_key cache[PUSH_CACHE];
	int ncache;
	char ip[16]; /* the fabric address in the agent's register reply */
	unsigned stale; /* requests whose replies timed out and are still to come */
} N = {-1, NULL, 0, 0, 0, 2000, 0, {{0}}, 0, "", 0};

static void untagged(const char *path, const char *why)
{
	fprintf(stderr, "sdnmpi: rank %d: node agent at %s: %s; running untagged\n", N.rank,
		path, why);
}

/* The job name: SDNMPI_JOB, else SLURM_JOB_ID, else rank 0's "mpi-HOST-PID" (bcast). */
static void job_name(const struct sdn_config *cfg, char *job, size_t len)
{
	char buf[65] = {0};
	const char *slurm = getenv("SLURM_JOB_ID");

	if (cfg->job[0])
		snprintf(buf, sizeof(buf), "%.64s", cfg->job); /* the agent takes 64 */
	else if (slurm && *slurm)
		snprintf(buf, sizeof(buf), "%.64s", slurm);
	else if (N.rank == 0) {
		char host[40] = "host";
		gethostname(host, sizeof(host) - 1);
		snprintf(buf, sizeof(buf), "mpi-%s-%ld", host, (long)getpid());
	}
	if (!cfg->job[0] && !(slurm && *slurm))
		PMPI_Bcast(buf, sizeof(buf), MPI_BYTE, 0, MPI_COMM_WORLD);
	for (char *p = buf; *p; p++) /* the name goes into JSON unescaped */
		if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
			*p = '_';
	snprintf(job, len, "%s", buf);
}

/* Register; fills me (ip, pid, ports) and maps the context in tag mode.  NULL or why not. */
static const char *do_register(const struct sdn_config *cfg, const char *path, const char *job,
			       int nprocs, struct peer_info *me)
{
	static char why[300];
	char req[512], line[SDN_AGENT_LINE_MAX], extra[48] = "";
	struct sdn_agent_reply r;
	int passed = -1;

	N.fd = sdn_agent_connect(path, cfg->agent_timeout_ms);
	if (N.fd < 0)
		return strerror(errno);
	if (cfg->job_slot)
		snprintf(extra, sizeof(extra), ",\"job_slot\":%d", cfg->job_slot);
	/* A rank that does not tag (register or bcast mode alone) says so: its agent then
	 * never scans its sockets (docs/agent-protocol.md). */
	if (!(cfg->modes & (SDN_MODE_TAG | SDN_MODE_PUSH)))
		strncat(extra, ",\"tag\":false", sizeof(extra) - strlen(extra) - 1);
	snprintf(req, sizeof(req), "{\"op\":\"register\",\"job\":\"%s\",\"rank\":%d,\"nprocs\":%d%s}",
		 job, N.rank, nprocs, extra);
	if (sdn_agent_call(N.fd, req, line, sizeof(line), &passed) ||
	    sdn_agent_parse_reply(line, &r))
		return "no reply to register";
	if (!r.ok) {
		snprintf(why, sizeof(why), "refused: %s", r.error);
		return why;
	}
	snprintf(me->ip, sizeof(me->ip), "%s", r.ip);
	snprintf(N.ip, sizeof(N.ip), "%s", r.ip);
	me->pid = (int32_t)getpid();
	me->job_slot = r.job_slot;
	me->nports = r.nports;
	for (int i = 0; i < r.nports; i++)
		me->ports[i] = r.ports[i];
	if ((cfg->modes & SDN_MODE_TAG) && passed >= 0) {
		void *m = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE,
			       MAP_SHARED, passed, 0);
		if (m == MAP_FAILED) {
			snprintf(why, sizeof(why), "cannot map the context: %s", strerror(errno));
			close(passed);
			return why;
		}
		N.ctx = m;
	}
	if (passed >= 0)
		close(passed);
	return NULL;
}

/* The rank table as the agent's "ranks" request; malloc'd, or NULL. */
static char *ranks_request(const struct peer_info *all, int nprocs)
{
	size_t cap = 64 + (size_t)nprocs * (48 + 8 * SDN_AGENT_MAX_PORTS), used;
	char *req = malloc(cap);

	if (!req)
		return NULL;
	used = (size_t)snprintf(req, cap, "{\"op\":\"ranks\",\"table\":[");
	for (int i = 0; i < nprocs; i++) {
		const struct peer_info *p = &all[i];
		used += (size_t)snprintf(req + used, cap - used, "%s[%d,\"%s\",%d,[", i ? "," : "", i,
					 p->ip[0] ? p->ip : "0.0.0.0", (int)p->pid);
		for (int k = 0; k < p->nports && k < SDN_AGENT_MAX_PORTS; k++)
			used += (size_t)snprintf(req + used, cap - used, "%s%d", k ? "," : "",
						 (int)p->ports[k]);
		used += (size_t)snprintf(req + used, cap - used, "]]");
	}
	snprintf(req + used, cap - used, "]}");
	return req;
}

static void drop_agent(void)
{
	N.push = 0;
	if (N.ctx) {
		munmap(N.ctx, (size_t)sysconf(_SC_PAGESIZE));
		N.ctx = NULL;
	}
	if (N.fd >= 0) {
		close(N.fd);
		N.fd = -1;
	}
}

/* Tag and push modes tag a job only if every rank is registered under one job slot:
 * a rank whose agent gave no slot (its join lost, the controller down or slow) would
 * leave the others' tags unrouted, every tagged packet a packet-in.  NULL or why not. */
static const char *whole_job(const struct sdn_config *cfg, const struct peer_info *all,
			     int nprocs)
{
	static char why[160];

	if (!(cfg->modes & (SDN_MODE_TAG | SDN_MODE_PUSH)))
		return NULL;
	for (int i = 0; i < nprocs; i++) {
		if (!all[i].pid)
			snprintf(why, sizeof(why), "rank %d is not registered with its node agent: "
				 "no rank tags", i);
		else if (all[i].job_slot < 0)
			snprintf(why, sizeof(why), "rank %d has no job slot (its join did not reach "
				 "the controller): no rank tags", i);
		else if (all[i].job_slot != all[0].job_slot)
			snprintf(why, sizeof(why), "ranks 0 and %d have job slots %d and %d: no rank tags", i,
				 (int)all[0].job_slot, (int)all[i].job_slot);
		else
			continue;
		return why;
	}
	return NULL;
}

void sdn_node_init(const struct sdn_config *cfg, int rank, int nprocs)
{
	char host[256] = "", path[SDN_PATH_MAX], job[65], line[SDN_AGENT_LINE_MAX];
	struct peer_info me, *all = calloc((size_t)nprocs, sizeof(*all));
	const char *why = NULL;
	int passed = -1;

	N.rank = rank;
	memset(&me, 0, sizeof(me));
	me.job_slot = -1;
	job_name(cfg, job, sizeof(job));
	gethostname(host, sizeof(host) - 1);
	if (sdn_expand_host(cfg->agent_socket, host, path, sizeof(path)))
		why = "socket path too long";
	else
		why = do_register(cfg, path, job, nprocs, &me);
	/* Every rank takes part, agent or not: the exchange is collective. */
	if (!all || PMPI_Allgather(&me, sizeof(me), MPI_BYTE, all, sizeof(me), MPI_BYTE,
				   MPI_COMM_WORLD) != MPI_SUCCESS) {
		why = why ? why : "rank exchange failed";
	} else if (!why && (why = whole_job(cfg, all, nprocs)) != NULL) {
		if (rank != 0) /* one line for the job, from rank 0 */
			why = "";
	} else if (!why) {
		char *req = ranks_request(all, nprocs);
		struct sdn_agent_reply r;
		if (!req || sdn_agent_exchange(N.fd, req, line, sizeof(line), &passed, &N.stale) ||
		    sdn_agent_parse_reply(line, &r) || !r.ok)
			why = "rank table refused";
		if (passed >= 0)
			close(passed);
		free(req);
	}
	free(all);
	if (why) {
		if (*why)
			untagged(path, why);
		drop_agent();
		return;
	}
	if (cfg->modes & SDN_MODE_PUSH) {
		struct timeval tv = {cfg->push_timeout_ms / 1000, (cfg->push_timeout_ms % 1000) * 1000};
		setsockopt(N.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		N.push = 1;
		N.push_timeout_ms = cfg->push_timeout_ms;
	}
}

/* Collectives the controller can route from their parameters alone. */
static int pushable(const char *coll)
{
	static const char *const names[] = {"bcast",     "reduce", "allreduce", "alltoall",
					    "allgather", "gather", "scatter",   "barrier"};

	for (size_t i = 0; coll && i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(coll, names[i]) == 0)
			return 1;
	return 0;
}

static int cached(const struct push_key *k)
{
	for (int i = 0; i < N.ncache; i++) {
		const struct push_key *c = &N.cache[i];
		if (c->comm == k->comm && c->root == k->root && c->bytes == k->bytes &&
		    strcmp(c->coll, k->coll) == 0)
			return 1;
	}
	if (N.ncache < PUSH_CACHE)
		N.cache[N.ncache++] = *k;
	return 0;
}

/* {"op":"push","collective":{...,"comm":[world ranks]}}; malloc'd, or NULL. */
static char *push_request(const struct sdn_call *c, int type_size)
{
	MPI_Group group, world;
	int n = 0, *in = NULL, *out = NULL;
	size_t cap, used;
	char *req = NULL;

	if (PMPI_Comm_size(c->comm, &n) != MPI_SUCCESS || n < 1)
		return NULL;
	in = malloc((size_t)n * sizeof(int));
	out = malloc((size_t)n * sizeof(int));
	cap = 160 + (size_t)n * 12;
	req = malloc(cap);
	if (!in || !out || !req)
		goto fail;
	for (int i = 0; i < n; i++)
		in[i] = i;
	PMPI_Comm_group(c->comm, &group);
	PMPI_Comm_group(MPI_COMM_WORLD, &world);
	PMPI_Group_translate_ranks(group, n, in, world, out);
	PMPI_Group_free(&group);
	PMPI_Group_free(&world);
	used = (size_t)snprintf(req, cap,
				"{\"op\":\"push\",\"collective\":{\"name\":\"%s\",\"root\":%d,"
				"\"count\":%d,\"type_bytes\":%d,\"comm\":[",
				c->coll, c->has_root ? c->root : 0, c->count < 0 ? 0 : c->count,
				type_size < 1 ? 1 : type_size);
	for (int i = 0; i < n; i++)
		used += (size_t)snprintf(req + used, cap - used, "%s%d", i ? "," : "", out[i]);
	snprintf(req + used, cap - used, "]}}");
	free(in);
	free(out);
	return req;
fail:
	free(in);
	free(out);
	free(req);
	return NULL;
}

/* Push mode: announce this call's collective once (comm rank 0), wait for routes. */
static void push(const struct sdn_call *c)
{
	struct push_key k;
	struct sdn_agent_reply r;
	char line[512], *req;
	int type_size = 1, me = -1, passed = -1;

	if (!pushable(c->coll) || c->comm == MPI_COMM_NULL)
		return;
	if (c->type != MPI_DATATYPE_NULL && c->count > 0)
		PMPI_Type_size(c->type, &type_size);
	k = (struct push_key){c->coll, c->comm, c->has_root ? c->root : 0,
			      (int64_t)c->count * type_size};
	if (PMPI_Comm_rank(c->comm, &me) != MPI_SUCCESS || me != 0 || cached(&k))
		return;
	req = push_request(c, type_size);
	if (!req)
		return;
	if (sdn_agent_exchange(N.fd, req, line, sizeof(line), &passed, &N.stale) ||
	    sdn_agent_parse_reply(line, &r) || !r.ok) {
		if (!N.push_warned++)
			fprintf(stderr, "sdnmpi: rank %d: push of %s not confirmed (%s); "
				"it runs on the routes in place\n",
				N.rank, c->coll, r.error[0] ? r.error : "no answer in time");
	}
	if (passed >= 0)
		close(passed);
	free(req);
}

void sdn_node_enter(const struct sdn_call *c)
{
	unsigned code;

	if (N.push && (c->kind == SDN_KIND_COLL))
		push(c);
	if (!N.ctx)
		return;
	code = sdn_primitive_of(c->kind, c->coll);
	if (!code || code == N.current)
		return;
	N.current = code;
	__atomic_store_n(&N.ctx->primitive, code, __ATOMIC_RELEASE);
	__atomic_add_fetch(&N.ctx->seq, 1, __ATOMIC_RELEASE);
}

void sdn_node_finish(void)
{
	char line[256];
	int passed = -1;

	if (N.ctx)
		__atomic_store_n(&N.ctx->primitive, 0u, __ATOMIC_RELEASE);
	if (N.fd >= 0 && sdn_agent_exchange(N.fd, "{\"op\":\"unregister\"}", line, sizeof(line),
					    &passed, &N.stale) == 0 && passed >= 0)
		close(passed);
	drop_agent();
}

const char *sdn_node_ip(void)
{
	return N.ip;
}

int sdn_node_request(const char *req, char *line, size_t len, int timeout_ms)
{
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
	int passed = -1, rc;

	if (N.fd < 0)
		return -1;
	setsockopt(N.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	rc = sdn_agent_exchange(N.fd, req, line, len, &passed, &N.stale);
	if (passed >= 0)
		close(passed);
	if (N.push) { /* push mode's own bound back */
		tv = (struct timeval){N.push_timeout_ms / 1000, (N.push_timeout_ms % 1000) * 1000};
		setsockopt(N.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	return rc;
}
