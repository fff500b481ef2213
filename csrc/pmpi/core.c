/* libsdnmpi core: configuration, clocks, event recording, writers at finalize. */
#include "core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>

#include "bcast.h"
#include "comms.h"
#include "config.h"
#include "duplex.h"
#include "node.h"
#include "reqmap.h"
#include "trace.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(uint64_t), "MPI_Request wider than 64 bits");

SDN_TLS int sdn_depth;
SDN_TLS const struct sdn_call *sdn_current_call;

#define MAX_MESSAGES 16

static struct {
	int initialized;
	int active; /* profile mode recording */
	int done;   /* outputs written */
	unsigned modes;
	struct sdn_config cfg;
	int rank, nprocs;
	char host[MPI_MAX_PROCESSOR_NAME + 1];
	char library[MPI_MAX_LIBRARY_VERSION_STRING + 1];
	struct timespec t0;
	double t0_wall;
	struct sdn_evbuf events;
	struct sdn_comm_table comms;
	struct sdn_reqmap pending; /* MPI_Irecv request -> event index */
	char *messages[MAX_MESSAGES];
	int n_messages;
} S;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Per-thread scratch (wrappers do not nest on a thread: see sdn_depth). */
static SDN_TLS MPI_Status *scratch_statuses;
static SDN_TLS size_t scratch_statuses_n;
static SDN_TLS struct pending_slot {
	int slot;       /* index in the call's request array */
	int64_t event;  /* index of the MPI_Irecv event */
} *pend;
static SDN_TLS size_t pend_cap;

/* -- messages: collected, then printed once each, on world rank 0 ------------------ */

static void collect(void *ctx, const char *msg)
{
	(void)ctx;
	for (int i = 0; i < S.n_messages; i++)
		if (strcmp(S.messages[i], msg) == 0)
			return;
	if (S.n_messages < MAX_MESSAGES)
		S.messages[S.n_messages++] = strdup(msg);
}

static void print_messages(void)
{
	for (int i = 0; i < S.n_messages; i++) {
		if (S.messages[i] && S.rank == 0)
			fprintf(stderr, "sdnmpi: %s\n", S.messages[i]);
		free(S.messages[i]);
	}
	S.n_messages = 0;
}

static void print_now(void *ctx, const char *msg)
{
	(void)ctx;
	fprintf(stderr, "sdnmpi: rank %d: %s\n", S.rank, msg);
}

/* -- clocks ------------------------------------------------------------------------- */

static double since_t0(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)(ts.tv_sec - S.t0.tv_sec) + (double)(ts.tv_nsec - S.t0.tv_nsec) * 1e-9;
}

/* -- init and finish ---------------------------------------------------------------- */

static void finish(void)
{
	struct sdn_comm_info *infos;
	struct sdn_trace_meta m;

	pthread_mutex_lock(&lock);
	if (S.done || !S.initialized) {
		pthread_mutex_unlock(&lock);
		return;
	}
	S.done = 1;
	S.active = 0;
	infos = calloc(S.comms.n + 1, sizeof(*infos));
	if (infos && (S.modes & SDN_MODE_PROFILE)) {
		sdn_comms_info(&S.comms, infos);
		m = (struct sdn_trace_meta){S.rank,      S.nprocs,    (long)getpid(),
					    S.host,      S.library,   S.cfg.job,
					    S.t0_wall,   S.modes,     infos,
					    S.comms.n};
		sdn_write_outputs(S.cfg.trace_dir, &m, &S.events, print_now, NULL);
	}
	free(infos);
	sdn_evbuf_free(&S.events);
	sdn_reqmap_free(&S.pending);
	pthread_mutex_unlock(&lock);
}

static void at_exit(void)
{
	sdn_node_finish();
	finish(); /* the program exited without MPI_Finalize */
}

static void first_line(char *s)
{
	char *nl = strchr(s, '\n');

	if (nl)
		*nl = '\0';
	for (size_t n = strlen(s); n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\r'); n--)
		s[n - 1] = '\0';
}

static void identify(void)
{
	int len = 0;

	PMPI_Comm_rank(MPI_COMM_WORLD, &S.rank);
	PMPI_Comm_size(MPI_COMM_WORLD, &S.nprocs);
	PMPI_Get_processor_name(S.host, &len);
	PMPI_Get_library_version(S.library, &len);
	first_line(S.library);
}

static void check_modes(void)
{
	char names[64], msg[160];
	unsigned pending = S.modes & ~SDN_MODES_IMPLEMENTED;

	if (!pending)
		return;
	sdn_config_modes_str(pending, names, sizeof(names));
	snprintf(msg, sizeof(msg), "mode(s) %s not implemented in this version; ignored", names);
	collect(NULL, msg);
	S.modes &= SDN_MODES_IMPLEMENTED;
}

static void check_trace_dir(void)
{
	char msg[SDN_PATH_MAX + 128];

	if (!(S.modes & SDN_MODE_PROFILE) || sdn_prepare_dir(S.cfg.trace_dir) == 0)
		return;
	snprintf(msg, sizeof(msg), "cannot write traces to %s: %s; profile mode disabled",
		 S.cfg.trace_dir, strerror(errno));
	collect(NULL, msg);
	S.modes &= ~SDN_MODE_PROFILE;
}

static const char *env(const char *name)
{
	return getenv(name);
}

/* SDNMPI_DUPLEX=1: the full-duplex settings (docs/mpi-duplex.md) go into this
 * process's environment when the library is loaded, before main().  Open MPI
 * reads its MCA variables and UCX its configuration inside MPI_Init, so the top
 * of the MPI_Init wrapper would do as well (both checked on loopback: Open MPI's
 * mpi_show_mca_params, and the receiver's memory for unexpected eager messages
 * with both libraries); a constructor also precedes MPI_T_init_thread (not
 * wrapped) and any thread of the program (setenv is not thread-safe).  A
 * variable already set is kept.  Configuration problems are reported by
 * on_init, after MPI_Init, like every other. */
__attribute__((constructor)) static void set_duplex(void)
{
	static struct sdn_config cfg; /* two paths of 4 KiB: not on the stack */

	sdn_config_load(&cfg, env, NULL, NULL);
	if (cfg.duplex)
		sdn_duplex_apply(env, setenv);
}

static void on_init(void)
{
	pthread_mutex_lock(&lock);
	if (S.initialized) {
		pthread_mutex_unlock(&lock);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &S.t0);
	{
		struct timespec wall;
		clock_gettime(CLOCK_REALTIME, &wall);
		S.t0_wall = (double)wall.tv_sec + (double)wall.tv_nsec * 1e-9;
	}
	sdn_config_load(&S.cfg, env, collect, NULL);
	S.modes = S.cfg.modes;
	identify();
	check_modes();
	check_trace_dir();
	sdn_evbuf_init(&S.events);
	sdn_reqmap_init(&S.pending);
	if (sdn_comms_init(&S.comms)) {
		collect(NULL, "cannot read MPI_COMM_WORLD's group; profile mode disabled");
		S.modes = 0;
	}
	print_messages();
	/* bcast mode registers to ask the agent for trees, unless its group is static */
	if ((S.modes & (SDN_MODE_REGISTER | SDN_MODE_TAG | SDN_MODE_PUSH)) ||
	    ((S.modes & SDN_MODE_BCAST) && !S.cfg.bcast_group[0]))
		sdn_node_init(&S.cfg, S.rank, S.nprocs); /* collective: every rank */
	S.cfg.modes = S.modes;
	sdn_bcast_init(&S.cfg, S.rank); /* collective in bcast mode */
	S.initialized = 1;
	S.active = (S.modes & SDN_MODE_PROFILE) != 0;
	atexit(at_exit);
	pthread_mutex_unlock(&lock);
}

/* -- recording ---------------------------------------------------------------------- */

static int64_t type_bytes(MPI_Datatype type)
{
	MPI_Count size = 0;

	if (type == MPI_DATATYPE_NULL || PMPI_Type_size_x(type, &size) != MPI_SUCCESS)
		return 0;
	return (int64_t)size;
}

/* Source and bytes of a completed receive, from its status. */
static void received(const struct sdn_call *c, const struct sdn_comm *cm, MPI_Datatype type,
		     int posted, int32_t *peer, int64_t *bytes, int64_t tb)
{
	int n = MPI_UNDEFINED;

	*peer = sdn_comm_world(cm, c->status->MPI_SOURCE);
	if (PMPI_Get_count(c->status, type, &n) == MPI_SUCCESS && n != MPI_UNDEFINED)
		*bytes = (int64_t)n * tb;
	else
		*bytes = (int64_t)posted * tb;
}

static void record_p2p(const struct sdn_call *c, struct sdn_event *e, const struct sdn_comm *cm)
{
	e->count = c->count;
	e->type_bytes = type_bytes(c->type);
	e->bytes = (int64_t)c->count * e->type_bytes;
	e->tag = c->tag;
	e->peer = sdn_comm_world(cm, c->peer);
	if (c->kind == SDN_KIND_RECV && c->status && !c->request)
		received(c, cm, c->type, c->count, &e->peer, &e->bytes, e->type_bytes);
	if (c->kind == SDN_KIND_SENDRECV) {
		int64_t rtb = type_bytes(c->recv_type);
		e->recv_peer = sdn_comm_world(cm, c->recv_peer);
		e->recv_bytes = (int64_t)c->recv_count * rtb;
		if (c->status)
			received(c, cm, c->recv_type, c->recv_count, &e->recv_peer, &e->recv_bytes,
				 rtb);
	}
}

static void record_coll(struct sdn_call *c, struct sdn_event *e, const struct sdn_comm *cm)
{
	int64_t sum = 0;
	const int64_t *counts;

	e->type_bytes = type_bytes(c->type);
	if (c->kind == SDN_KIND_COLL && strcmp(c->coll, "barrier") != 0)
		e->count = c->count;
	if (c->has_root)
		e->root = sdn_comm_world(cm, c->root);
	if (c->kind == SDN_KIND_COLLV) {
		e->count = c->coll && (!strcmp(c->coll, "alltoallv") || !strcmp(c->coll, "reduce_scatter"))
				   ? -1
				   : c->count;
		if (c->counts && cm && (!c->has_root || c->root == cm->my_rank)) {
			e->counts_off = sdn_evbuf_push_counts(&S.events, c->counts, cm->size);
			e->counts_len = e->counts_off < 0 ? 0 : cm->size;
		}
	}
	counts = sdn_event_counts(&S.events, e);
	for (int32_t i = 0; counts && i < e->counts_len; i++)
		sum += counts[i];
	e->bytes = (e->count >= 0 ? e->count : sum) * e->type_bytes;
}

/* -- nonblocking receives: actual source and size at completion ------------------ */

static uint64_t request_key(MPI_Request r)
{
	uint64_t key = 0;

	memcpy(&key, &r, sizeof(r));
	return key;
}

/* An MPI_Irecv's request is remembered; any other new request handle clears a
 * stale entry with the same value (a request freed without a wrapped completion). */
static void track_request(const struct sdn_call *c, const struct sdn_event *e)
{
	if (!c->request || *c->request == MPI_REQUEST_NULL)
		return;
	if (c->kind == SDN_KIND_RECV)
		sdn_reqmap_put(&S.pending, request_key(*c->request), (int64_t)(e - S.events.ev));
	else
		sdn_reqmap_take(&S.pending, request_key(*c->request));
}

/* Before the completion call: which of its requests are tracked receives. */
static void snapshot_requests(struct sdn_call *c)
{
	c->npending = 0;
	if (!c->requests || c->nreq <= 0 || !S.pending.n)
		return;
	for (int i = 0; i < c->nreq; i++) {
		int64_t ev = sdn_reqmap_get(&S.pending, request_key(c->requests[i]));
		if (ev < 0)
			continue;
		if ((size_t)c->npending == pend_cap) {
			size_t cap = pend_cap ? pend_cap * 2 : 16;
			struct pending_slot *p = realloc(pend, cap * sizeof(*p));
			if (!p)
				return;
			pend = p;
			pend_cap = cap;
		}
		pend[c->npending++] = (struct pending_slot){i, ev};
	}
}

/* Whether request slot i completed in this call, and its status (or NULL). */
static int completed(const struct sdn_call *c, int i, const MPI_Status **status)
{
	*status = NULL;
	if (c->indices && c->outcount) {
		for (int k = 0; k < *c->outcount; k++) {
			if (c->indices[k] == i) {
				*status = c->statuses ? &c->statuses[k] : NULL;
				return 1;
			}
		}
		return 0;
	}
	if (c->index) {
		*status = *c->index == i ? c->status : NULL;
		return *c->index == i;
	}
	*status = c->statuses ? &c->statuses[i] : c->status;
	return 1;
}

static void complete_receives(const struct sdn_call *c)
{
	for (int k = 0; k < c->npending; k++) {
		const MPI_Status *st;
		struct sdn_event *e;
		int n = MPI_UNDEFINED;

		if (!completed(c, pend[k].slot, &st))
			continue;
		sdn_reqmap_take(&S.pending, request_key(c->requests[pend[k].slot]));
		if (!st || pend[k].event >= (int64_t)S.events.n)
			continue;
		e = &S.events.ev[pend[k].event];
		if (e->comm_id >= 0 && (size_t)e->comm_id < S.comms.n)
			e->peer = sdn_comm_world(&S.comms.v[e->comm_id], st->MPI_SOURCE);
		if (PMPI_Get_count(st, MPI_BYTE, &n) == MPI_SUCCESS && n != MPI_UNDEFINED)
			e->bytes = n;
	}
}

MPI_Status *sdn_status_scratch(int n)
{
	if (!S.active || n <= 0)
		return NULL;
	if ((size_t)n > scratch_statuses_n) {
		MPI_Status *p = realloc(scratch_statuses, (size_t)n * sizeof(*p));
		if (!p)
			return NULL;
		scratch_statuses = p;
		scratch_statuses_n = (size_t)n;
	}
	return scratch_statuses;
}

static void record(struct sdn_call *c, double t_end)
{
	struct sdn_comm *cm = NULL;
	struct sdn_event *e;

	if (c->kind != SDN_KIND_COMPLETION && c->kind != SDN_KIND_COMM_FREE)
		cm = sdn_comm_get(&S.comms, c->comm);
	e = sdn_evbuf_push(&S.events);
	if (!e)
		return;
	e->name = c->name;
	e->coll = c->coll;
	e->kind = (uint8_t)c->kind;
	e->t_start = c->t_start;
	e->t_end = t_end;
	e->comm_id = cm ? cm->id : -1;
	switch (c->kind) {
	case SDN_KIND_SEND:
	case SDN_KIND_RECV:
	case SDN_KIND_SENDRECV:
		record_p2p(c, e, cm);
		track_request(c, e);
		break;
	case SDN_KIND_COLL:
	case SDN_KIND_COLLV:
		record_coll(c, e, cm);
		track_request(c, e);
		break;
	case SDN_KIND_COMM_NEW: {
		struct sdn_comm *n = sdn_comm_register(&S.comms, *c->newcomm);
		e->new_comm_id = n ? n->id : -1;
		break;
	}
	case SDN_KIND_COMM_FREE:
		e->comm_id = c->comm_id;
		break;
	default:
		break;
	}
}

/* -- the API of the wrappers -------------------------------------------------------- */

void sdn_call_init(struct sdn_call *c, const char *name, int kind, const char *coll)
{
	c->name = name;
	c->coll = coll;
	c->kind = kind;
	c->comm = MPI_COMM_NULL;
	c->peer = MPI_PROC_NULL;
	c->count = 0;
	c->tag = -1;
	c->root = 0;
	c->has_root = 0;
	c->type = MPI_DATATYPE_NULL;
	c->counts = NULL;
	c->recv_peer = MPI_PROC_NULL;
	c->recv_count = 0;
	c->recv_type = MPI_DATATYPE_NULL;
	c->status = NULL;
	c->request = NULL;
	c->newcomm = NULL;
	c->flag = NULL;
	c->requests = NULL;
	c->nreq = 0;
	c->statuses = NULL;
	c->index = NULL;
	c->outcount = NULL;
	c->indices = NULL;
	c->npending = 0;
	c->comm_id = -1;
	c->t_start = 0.0;
}

void sdn_enter(struct sdn_call *c)
{
	if (c->kind == SDN_KIND_FINALIZE) {
		sdn_bcast_finish();
		sdn_node_finish();
	}
	else
		sdn_node_enter(c); /* tag: one store, no syscall; push: once per call kind */
	if (!S.active)
		return;
	if (c->kind == SDN_KIND_FINALIZE) {
		/* push mode hook: send the summary to the node agent here. */
		finish();
		return;
	}
	if (c->kind == SDN_KIND_COMM_FREE) {
		pthread_mutex_lock(&lock);
		c->comm_id = sdn_comm_forget(&S.comms, c->comm);
		pthread_mutex_unlock(&lock);
	}
	if (c->kind == SDN_KIND_COMPLETION && c->requests) {
		pthread_mutex_lock(&lock);
		snapshot_requests(c);
		pthread_mutex_unlock(&lock);
	}
	sdn_current_call = c;
	c->t_start = since_t0();
}

void sdn_leave(struct sdn_call *c, int rc)
{
	double t_end;

	if (c->kind == SDN_KIND_INIT) {
		if (rc == MPI_SUCCESS)
			on_init();
		return;
	}
	sdn_current_call = NULL;
	if (!S.active || rc != MPI_SUCCESS)
		return;
	if (c->kind == SDN_KIND_COMPLETION && c->flag && *c->flag <= 0)
		return;
	t_end = since_t0();
	pthread_mutex_lock(&lock);
	if (S.active) {
		if (c->npending)
			complete_receives(c);
		record(c, t_end);
	}
	pthread_mutex_unlock(&lock);
}
