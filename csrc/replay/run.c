/* sdnmpi-replay: executing the plan.
 *
 * One occurrence of a phase on a rank: MPI_Irecv for every message it
 * receives (each into its own slot), then MPI_Isend for every message it
 * sends, then wait for all of them; with --barrier an MPI_Barrier ends the
 * occurrence.  Every message of phase k carries the tag k mod 32768 (the
 * smallest MPI_TAG_UB MPI guarantees is 32767); receives name their source,
 * and MPI's non-overtaking rule matches a cell's messages in order even when,
 * without barriers, a peer is already a phase or an occurrence ahead.  Every
 * rank posts all its sends before it waits, so no order of ranks deadlocks.
 *
 * --poll-us replaces the spinning MPI_Waitall and MPI_Barrier with
 * MPI_Testall / MPI_Ibarrier + MPI_Test and a nanosleep between tests, so
 * that many ranks sharing a core leave it to the ones with work to do.
 */
#include "run.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_MODULUS 32768

struct runner {
	const struct replay_opts *opts;
	const struct replay_pattern *pat;
	const struct plan *plan;
	struct run_buffers *buf;
	MPI_Comm comm;
	struct timespec nap;
};

int run_alloc(const struct plan *plan, struct run_buffers *buf)
{
	size_t recv = (size_t)plan->recv_region_bytes;
	size_t send = (size_t)plan->send_buffer_bytes;
	size_t nreq = (size_t)plan->max_requests;

	memset(buf, 0, sizeof(*buf));
	buf->recv_region = malloc(recv ? recv : 1);
	buf->send_buffer = malloc(send ? send : 1);
	buf->requests = malloc((nreq ? nreq : 1) * sizeof(MPI_Request));
	buf->statuses = malloc((nreq ? nreq : 1) * sizeof(MPI_Status));
	if (!buf->recv_region || !buf->send_buffer || !buf->requests || !buf->statuses) {
		run_free(buf);
		return -1;
	}
	/* Touch every page now so first-touch faults do not land in timed passes. */
	memset(buf->recv_region, 0, recv ? recv : 1);
	memset(buf->send_buffer, 0xa5, send ? send : 1);
	return 0;
}

void run_free(struct run_buffers *buf)
{
	free(buf->recv_region);
	free(buf->send_buffer);
	free(buf->requests);
	free(buf->statuses);
	memset(buf, 0, sizeof(*buf));
}

int run_stats_alloc(int32_t nphases, long iters, struct run_stats *stats)
{
	size_t n = nphases ? (size_t)nphases : 1;

	memset(stats, 0, sizeof(*stats));
	stats->phase_sum_s = calloc(n, sizeof(double));
	stats->pass_s = calloc((size_t)iters, sizeof(double));
	stats->counters = calloc(n * RUN_NCOUNTERS, sizeof(uint64_t));
	stats->wait_n = calloc(n, sizeof(double));
	stats->wait_sum_s = calloc(n, sizeof(double));
	stats->wait_sq_s = calloc(n, sizeof(double));
	if (!stats->phase_sum_s || !stats->pass_s || !stats->counters || !stats->wait_n ||
	    !stats->wait_sum_s || !stats->wait_sq_s) {
		run_stats_free(stats);
		return -1;
	}
	return 0;
}

void run_stats_free(struct run_stats *stats)
{
	free(stats->phase_sum_s);
	free(stats->pass_s);
	free(stats->counters);
	free(stats->wait_n);
	free(stats->wait_sum_s);
	free(stats->wait_sq_s);
	memset(stats, 0, sizeof(*stats));
}

static double unix_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void wait_all(const struct runner *r, int n)
{
	int done = 0;

	if (r->opts->poll_us == 0) {
		MPI_Waitall(n, r->buf->requests, r->buf->statuses);
		return;
	}
	for (;;) {
		MPI_Testall(n, r->buf->requests, &done, r->buf->statuses);
		if (done)
			return;
		nanosleep(&r->nap, NULL);
	}
}

static void barrier(const struct runner *r)
{
	MPI_Request req;
	int done = 0;

	if (r->opts->poll_us == 0) {
		MPI_Barrier(r->comm);
		return;
	}
	MPI_Ibarrier(r->comm, &req);
	for (;;) {
		MPI_Test(&req, &done, MPI_STATUS_IGNORE);
		if (done)
			return;
		nanosleep(&r->nap, NULL);
	}
}

static int post_receives(const struct runner *r, const struct plan_phase *ph, int tag)
{
	int n = 0;

	for (size_t c = 0; c < ph->nrecv; c++) {
		const struct plan_cell *pc = &ph->recv[c];
		for (int32_t i = 0; i < pc->messages; i++) {
			int64_t bytes = i == pc->messages - 1 ? pc->last : pc->each;
			unsigned char *slot = r->buf->recv_region + pc->offset + (int64_t)i * pc->each;
			MPI_Irecv(slot, (int)bytes, MPI_BYTE, pc->peer, tag, r->comm,
				  &r->buf->requests[n++]);
		}
	}
	return n;
}

static int post_sends(const struct runner *r, const struct plan_phase *ph, int tag, int n)
{
	for (size_t c = 0; c < ph->nsend; c++) {
		const struct plan_cell *pc = &ph->send[c];
		for (int32_t i = 0; i < pc->messages; i++) {
			int64_t bytes = i == pc->messages - 1 ? pc->last : pc->each;
			MPI_Isend(r->buf->send_buffer, (int)bytes, MPI_BYTE, pc->peer, tag, r->comm,
				  &r->buf->requests[n++]);
		}
	}
	return n;
}

/* One occurrence of phase k; returns this rank's exchange time (posting to the
 * end of the wait, before any barrier), or a negative value if it has no message. */
static double occurrence(const struct runner *r, int32_t k)
{
	const struct plan_phase *ph = &r->plan->phases[k];
	int tag = (int)(k % TAG_MODULUS);
	double t = MPI_Wtime();
	int n = post_receives(r, ph, tag);

	n = post_sends(r, ph, tag, n);
	wait_all(r, n);
	t = n > 0 ? MPI_Wtime() - t : -1.0;
	if (r->opts->barrier)
		barrier(r);
	return t;
}

/* After a timed occurrence: what the statuses say arrived, and what was sent. */
static void count(const struct runner *r, int32_t k, struct run_stats *stats)
{
	const struct plan_phase *ph = &r->plan->phases[k];
	uint64_t *ctr = &stats->counters[(size_t)k * RUN_NCOUNTERS];
	size_t n = 0;

	for (size_t c = 0; c < ph->nrecv; c++) {
		const struct plan_cell *pc = &ph->recv[c];
		for (int32_t i = 0; i < pc->messages; i++, n++) {
			int64_t want = i == pc->messages - 1 ? pc->last : pc->each;
			int got = 0;
			MPI_Get_count(&r->buf->statuses[n], MPI_BYTE, &got);
			if (got != want || r->buf->statuses[n].MPI_SOURCE != pc->peer)
				stats->mismatched++;
			ctr[RUN_BYTES_RECV] += got > 0 ? (uint64_t)got : 0;
			ctr[RUN_MSGS_RECV]++;
		}
	}
	ctr[RUN_MSGS_SENT] += (uint64_t)ph->send_messages;
	ctr[RUN_BYTES_SENT] += (uint64_t)ph->send_bytes;
}

/* One pass over every phase; returns this rank's time from the start barrier. */
static double pass(const struct runner *r, struct run_stats *stats)
{
	double t0;

	barrier(r);
	t0 = MPI_Wtime();
	for (int32_t k = 0; k < r->plan->nphases; k++) {
		for (int32_t occ = 0; occ < r->pat->phases[k].repeat; occ++) {
			double t = MPI_Wtime();
			double wait = occurrence(r, k);

			if (stats == NULL)
				continue;
			stats->phase_sum_s[k] += MPI_Wtime() - t;
			if (wait >= 0.0) {
				stats->wait_n[k] += 1.0;
				stats->wait_sum_s[k] += wait;
				stats->wait_sq_s[k] += wait * wait;
			}
			count(r, k, stats);
		}
	}
	return MPI_Wtime() - t0;
}

void run_replay(const struct replay_opts *opts, const struct replay_pattern *pat,
		const struct plan *plan, struct run_buffers *buf, MPI_Comm comm,
		struct run_stats *stats)
{
	struct runner r = {opts, pat, plan, buf, comm, {0, 0}};

	r.nap.tv_sec = opts->poll_us / 1000000L;
	r.nap.tv_nsec = (opts->poll_us % 1000000L) * 1000L;
	for (long w = 0; w < opts->warmup; w++)
		pass(&r, NULL);
	barrier(&r);
	stats->start_unix_s = unix_now_s();
	for (long it = 0; it < opts->iters; it++)
		stats->pass_s[it] = pass(&r, stats);
	stats->end_unix_s = unix_now_s();
}
