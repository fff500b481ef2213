/* Event buffer: doubling arrays, 64-bit counts, no MPI. */
#include "event.h"

#include <stdlib.h>
#include <string.h>

void sdn_evbuf_init(struct sdn_evbuf *b)
{
	memset(b, 0, sizeof(*b));
}

void sdn_evbuf_free(struct sdn_evbuf *b)
{
	free(b->ev);
	free(b->arena);
	sdn_evbuf_init(b);
}

static int grow(void **ptr, size_t *cap, size_t need, size_t elem)
{
	size_t ncap = *cap ? *cap : 1024;
	void *p;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	p = realloc(*ptr, ncap * elem);
	if (!p)
		return -1;
	*ptr = p;
	*cap = ncap;
	return 0;
}

struct sdn_event *sdn_evbuf_push(struct sdn_evbuf *b)
{
	struct sdn_event *e;
	void *p = b->ev;

	if (grow(&p, &b->cap, b->n + 1, sizeof(*e))) {
		b->dropped++;
		return NULL;
	}
	b->ev = p;
	e = &b->ev[b->n++];
	memset(e, 0, sizeof(*e));
	e->count = -1;
	e->counts_off = -1;
	e->comm_id = -1;
	e->new_comm_id = -1;
	e->peer = SDN_PEER_NONE;
	e->recv_peer = SDN_PEER_NONE;
	e->root = SDN_PEER_NONE;
	e->tag = -1;
	return e;
}

int64_t sdn_evbuf_push_counts(struct sdn_evbuf *b, const int *counts, int n)
{
	size_t off = b->arena_n;
	void *p = b->arena;

	if (n < 0 || grow(&p, &b->arena_cap, off + (size_t)n + 1, sizeof(int64_t)))
		return -1;
	b->arena = p;
	for (int i = 0; i < n; i++)
		b->arena[off + (size_t)i] = counts[i];
	b->arena_n += (size_t)n;
	return (int64_t)off;
}

const int64_t *sdn_event_counts(const struct sdn_evbuf *b, const struct sdn_event *e)
{
	if (e->counts_off < 0 || !b->arena)
		return NULL;
	return b->arena + e->counts_off;
}

const char *sdn_kind_name(int kind)
{
	static const char *const names[] = {
		[SDN_KIND_SEND] = "send",         [SDN_KIND_RECV] = "recv",
		[SDN_KIND_SENDRECV] = "sendrecv", [SDN_KIND_COLL] = "coll",
		[SDN_KIND_COLLV] = "collv",       [SDN_KIND_COMM_NEW] = "comm_new",
		[SDN_KIND_COMM_FREE] = "comm_free", [SDN_KIND_INIT] = "init",
		[SDN_KIND_FINALIZE] = "finalize", [SDN_KIND_COMPLETION] = "completion",
	};
	if (kind < SDN_KIND_SEND || kind > SDN_KIND_COMPLETION)
		return "unknown";
	return names[kind];
}
