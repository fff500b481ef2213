/* sdnmpi-replay: per-rank plan of every phase (see plan.h). */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

static struct plan_cell plan_cell_of(const struct replay_cell *c, int32_t peer, int64_t offset)
{
	struct plan_cell pc;

	pc.peer = peer;
	pc.messages = c->messages;
	pc.each = replay_message_bytes(c, 0);
	pc.last = replay_message_bytes(c, c->messages - 1);
	pc.offset = offset;
	return pc;
}

static int64_t max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

static void count_sides(const struct replay_phase *ph, int32_t rank, size_t *nrecv,
			size_t *nsend)
{
	*nrecv = 0;
	*nsend = 0;
	for (size_t i = 0; i < ph->nkept; i++) {
		*nrecv += ph->cells[i].dst == rank;
		*nsend += ph->cells[i].src == rank;
	}
}

static int build_phase(const struct replay_phase *ph, int32_t rank, struct plan_phase *out,
		       struct plan *plan)
{
	size_t nrecv, nsend;

	count_sides(ph, rank, &nrecv, &nsend);
	out->recv = calloc(nrecv ? nrecv : 1, sizeof(*out->recv));
	out->send = calloc(nsend ? nsend : 1, sizeof(*out->send));
	if (out->recv == NULL || out->send == NULL)
		return -1;
	for (size_t i = 0; i < ph->nkept; i++) {
		const struct replay_cell *c = &ph->cells[i];
		if (c->dst == rank) {
			out->recv[out->nrecv++] = plan_cell_of(c, c->src, out->recv_bytes);
			out->recv_bytes += c->size_bytes;
			out->recv_messages += c->messages;
		}
		if (c->src == rank) {
			out->send[out->nsend] = plan_cell_of(c, c->dst, 0);
			plan->send_buffer_bytes =
				max64(plan->send_buffer_bytes, out->send[out->nsend].last);
			out->nsend++;
			out->send_bytes += c->size_bytes;
			out->send_messages += c->messages;
		}
	}
	plan->recv_region_bytes = max64(plan->recv_region_bytes, out->recv_bytes);
	plan->max_requests = max64(plan->max_requests, out->recv_messages + out->send_messages);
	return 0;
}

int plan_build(const struct replay_pattern *pat, int32_t rank, struct plan *out)
{
	memset(out, 0, sizeof(*out));
	out->phases = calloc(pat->nphases ? (size_t)pat->nphases : 1, sizeof(*out->phases));
	if (out->phases == NULL)
		return -1;
	out->nphases = pat->nphases;
	for (int32_t k = 0; k < pat->nphases; k++) {
		if (build_phase(&pat->phases[k], rank, &out->phases[k], out) != 0) {
			plan_free(out);
			return -1;
		}
	}
	return 0;
}

void plan_free(struct plan *plan)
{
	for (int32_t k = 0; plan->phases != NULL && k < plan->nphases; k++) {
		free(plan->phases[k].recv);
		free(plan->phases[k].send);
	}
	free(plan->phases);
	memset(plan, 0, sizeof(*plan));
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

uint64_t plan_memory_bytes(const struct plan *plan, size_t request_bytes)
{
	uint64_t requests = (uint64_t)plan->max_requests;
	uint64_t total = sat_add((uint64_t)plan->recv_region_bytes,
				 (uint64_t)plan->send_buffer_bytes);

	if (request_bytes != 0 && requests > UINT64_MAX / request_bytes)
		return UINT64_MAX;
	return sat_add(total, requests * request_bytes);
}
