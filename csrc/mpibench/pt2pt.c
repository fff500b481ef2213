/* sdnmpi-bench: point-to-point benchmarks.
 *
 * latency and bw follow osu_latency and osu_bw (OSU Micro-Benchmarks): ranks
 * other than 0 and 1 wait in a sleeping barrier.  Every round trip (latency)
 * or window (bw) is timed on rank 0, which gives min and max as well as the
 * mean.  bibw follows osu_bibw: both ranks post a window of receives, then a
 * window of sends, and wait for all of them; its figure is the bytes of both
 * directions over the time of a window.  pairs is the shift permutation that collides on one uplink under
 * D-mod-K or ECMP when ranks are placed by leaf.
 */
#include "pt2pt.h"

#include <float.h>
#include <stdlib.h>

#include "buffer.h"
#include "timing.h"

#define TAG_DATA 100
#define TAG_ACK 101

struct sample_stats {
	double sum;
	double min;
	double max;
};

/* Requests and statuses of one window.  Real statuses rather than
 * MPI_STATUSES_IGNORE: GCC 12 flags MPICH's access attribute on MPI_Waitall
 * with the latter (-Wstringop-overflow). */
struct window {
	MPI_Request *reqs;
	MPI_Status *stats;
	int size;
};

struct pairs_ctx {
	unsigned char *sbuf;
	unsigned char *rbuf;
	int count;
	int src;
	int dst;
	MPI_Comm comm;
};

static size_t max_size(const struct bench_opts *opts)
{
	return opts->sizes[opts->nsizes - 1];
}

static void stats_add(struct sample_stats *s, double value)
{
	s->sum += value;
	if (value < s->min)
		s->min = value;
	if (value > s->max)
		s->max = value;
}

static void stats_fill(const struct sample_stats *s, long n, struct bench_result *res)
{
	res->iterations = n;
	res->time_avg_s = s->sum / (double)n;
	res->time_min_s = s->min;
	res->time_max_s = s->max;
}

static void pingpong_rank0(unsigned char *buf, int count, long warmup, long iters,
			   MPI_Comm comm, struct sample_stats *st)
{
	double t0;

	for (long i = 0; i < warmup + iters; i++) {
		t0 = MPI_Wtime();
		MPI_Send(buf, count, MPI_BYTE, 1, TAG_DATA, comm);
		MPI_Recv(buf, count, MPI_BYTE, 1, TAG_DATA, comm, MPI_STATUS_IGNORE);
		if (i >= warmup)
			stats_add(st, (MPI_Wtime() - t0) / 2.0);
	}
}

static void pingpong_rank1(unsigned char *buf, int count, long total, MPI_Comm comm)
{
	for (long i = 0; i < total; i++) {
		MPI_Recv(buf, count, MPI_BYTE, 0, TAG_DATA, comm, MPI_STATUS_IGNORE);
		MPI_Send(buf, count, MPI_BYTE, 0, TAG_DATA, comm);
	}
}

static void latency_size(const struct bench_opts *opts, size_t size, unsigned char *buf,
			 MPI_Comm comm, struct report *rep)
{
	struct loop_spec spec = timing_spec(opts, size, false);
	struct sample_stats st = {0.0, DBL_MAX, 0.0};
	struct bench_result res = {0};

	if (rep->rank == 1) {
		pingpong_rank1(buf, (int)size, spec.warmup + spec.iters, comm);
		return;
	}
	pingpong_rank0(buf, (int)size, spec.warmup, spec.iters, comm, &st);
	stats_fill(&st, spec.iters, &res);
	res.size_bytes = size;
	res.metric = res.time_avg_s * 1e6;
	report_row(rep, &res);
}

void pt2pt_latency(const struct bench_opts *opts, MPI_Comm comm, struct report *rep)
{
	unsigned char *buf;

	if (rep->rank <= 1) {
		buf = buffer_alloc(max_size(opts), comm);
		for (int i = 0; i < opts->nsizes; i++)
			latency_size(opts, opts->sizes[i], buf, comm, rep);
		free(buf);
	}
	timing_idle_barrier(comm);
}

static double window_send(unsigned char *buf, int count, const struct window *win,
			  MPI_Comm comm)
{
	unsigned char ack;
	double t0 = MPI_Wtime();

	for (int w = 0; w < win->size; w++)
		MPI_Isend(buf, count, MPI_BYTE, 1, TAG_DATA, comm, &win->reqs[w]);
	MPI_Waitall(win->size, win->reqs, win->stats);
	MPI_Recv(&ack, 1, MPI_BYTE, 1, TAG_ACK, comm, MPI_STATUS_IGNORE);
	return MPI_Wtime() - t0;
}

/* Each receive of a window has its own slot: concurrent receives into one
 * buffer would be erroneous MPI. */
static void window_recv(unsigned char *buf, size_t size, const struct window *win,
			MPI_Comm comm)
{
	unsigned char ack = 0;

	for (int w = 0; w < win->size; w++)
		MPI_Irecv(buf + (size_t)w * size, (int)size, MPI_BYTE, 0, TAG_DATA, comm,
			  &win->reqs[w]);
	MPI_Waitall(win->size, win->reqs, win->stats);
	MPI_Send(&ack, 1, MPI_BYTE, 0, TAG_ACK, comm);
}

static void bw_size(const struct bench_opts *opts, size_t size, unsigned char *buf,
		    const struct window *win, MPI_Comm comm, struct report *rep)
{
	struct loop_spec spec = timing_spec(opts, size, false);
	struct sample_stats st = {0.0, DBL_MAX, 0.0};
	struct bench_result res = {0};

	for (long i = 0; i < spec.warmup + spec.iters; i++) {
		if (rep->rank == 1) {
			window_recv(buf, size, win, comm);
			continue;
		}
		double dt = window_send(buf, (int)size, win, comm);
		if (i >= spec.warmup)
			stats_add(&st, dt);
	}
	if (rep->rank != 0)
		return;
	stats_fill(&st, spec.iters, &res);
	res.size_bytes = size;
	res.metric = (double)size * opts->window / res.time_avg_s / 1e6;
	report_row(rep, &res);
}

void pt2pt_bw(const struct bench_opts *opts, MPI_Comm comm, struct report *rep)
{
	size_t window = (size_t)opts->window;
	size_t bytes = max_size(opts);
	unsigned char *buf;
	struct window win;

	if (rep->rank <= 1) {
		if (rep->rank == 1)
			bytes = buffer_span(bytes, window, comm);
		buf = buffer_alloc(bytes, comm);
		win.size = opts->window;
		win.reqs = (MPI_Request *)(void *)buffer_alloc(window * sizeof(MPI_Request), comm);
		win.stats = (MPI_Status *)(void *)buffer_alloc(window * sizeof(MPI_Status), comm);
		for (int i = 0; i < opts->nsizes; i++)
			bw_size(opts, opts->sizes[i], buf, &win, comm, rep);
		free(win.stats);
		free(win.reqs);
		free(buf);
	}
	timing_idle_barrier(comm);
}

/* One bibw window on rank 0 or 1: receives from the peer into their own slots,
 * sends to the peer from one buffer, wait for all. */
static double bibw_window(unsigned char *sbuf, unsigned char *rbuf, size_t size, int peer,
			  const struct window *win, MPI_Comm comm)
{
	double t0 = MPI_Wtime();

	for (int w = 0; w < win->size; w++)
		MPI_Irecv(rbuf + (size_t)w * size, (int)size, MPI_BYTE, peer, TAG_DATA, comm,
			  &win->reqs[w]);
	for (int w = 0; w < win->size; w++)
		MPI_Isend(sbuf, (int)size, MPI_BYTE, peer, TAG_DATA, comm,
			  &win->reqs[win->size + w]);
	MPI_Waitall(2 * win->size, win->reqs, win->stats);
	return MPI_Wtime() - t0;
}

static void bibw_size(const struct bench_opts *opts, size_t size, unsigned char *sbuf,
		      unsigned char *rbuf, const struct window *win, MPI_Comm comm,
		      struct report *rep)
{
	struct loop_spec spec = timing_spec(opts, size, false);
	struct sample_stats st = {0.0, DBL_MAX, 0.0};
	struct bench_result res = {0};
	int peer = 1 - rep->rank;

	for (long i = 0; i < spec.warmup + spec.iters; i++) {
		double dt = bibw_window(sbuf, rbuf, size, peer, win, comm);
		if (i >= spec.warmup)
			stats_add(&st, dt);
	}
	if (rep->rank != 0)
		return;
	stats_fill(&st, spec.iters, &res);
	res.size_bytes = size;
	res.metric = 2.0 * (double)size * opts->window / res.time_avg_s / 1e6;
	report_row(rep, &res);
}

void pt2pt_bibw(const struct bench_opts *opts, MPI_Comm comm, struct report *rep)
{
	size_t window = (size_t)opts->window;
	unsigned char *sbuf;
	unsigned char *rbuf;
	struct window win;

	if (rep->rank <= 1) {
		sbuf = buffer_alloc(max_size(opts), comm);
		rbuf = buffer_alloc(buffer_span(max_size(opts), window, comm), comm);
		win.size = opts->window;
		win.reqs = (MPI_Request *)(void *)buffer_alloc(2 * window * sizeof(MPI_Request),
							       comm);
		win.stats = (MPI_Status *)(void *)buffer_alloc(2 * window * sizeof(MPI_Status),
							       comm);
		for (int i = 0; i < opts->nsizes; i++)
			bibw_size(opts, opts->sizes[i], sbuf, rbuf, &win, comm, rep);
		free(win.stats);
		free(win.reqs);
		free(rbuf);
		free(sbuf);
	}
	timing_idle_barrier(comm);
}

static void pairs_step(void *arg)
{
	struct pairs_ctx *c = arg;
	MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
	MPI_Status stats[2];

	if (c->src != MPI_PROC_NULL)
		MPI_Irecv(c->rbuf, c->count, MPI_BYTE, c->src, TAG_DATA, c->comm, &reqs[0]);
	if (c->dst != MPI_PROC_NULL)
		MPI_Isend(c->sbuf, c->count, MPI_BYTE, c->dst, TAG_DATA, c->comm, &reqs[1]);
	MPI_Waitall(2, reqs, stats);
}

static void pairs_size(const struct bench_opts *opts, size_t size, struct pairs_ctx *ctx,
		       struct report *rep)
{
	struct loop_spec spec = timing_spec(opts, size, true);
	struct loop_stats ls;
	struct bench_result res = {0};

	ctx->count = (int)size;
	MPI_Barrier(ctx->comm);
	res.start_unix_s = timing_unix_s();
	timing_run(&spec, pairs_step, ctx, ctx->comm, &ls);
	MPI_Barrier(ctx->comm);
	res.end_unix_s = timing_unix_s();
	timing_spread(ls.busy_s / (double)ls.iterations, ctx->comm, &res);
	timing_steps(&ls, ctx->comm, &res);
	res.size_bytes = size;
	res.iterations = ls.iterations;
	res.metric = res.time_avg_s > 0.0 ? (double)size / res.time_avg_s / 1e6 : 0.0;
	report_row(rep, &res);
}

void pt2pt_pairs(const struct bench_opts *opts, MPI_Comm comm, struct report *rep)
{
	int n = rep->nprocs;
	int shift = rep->shift % n;
	struct pairs_ctx ctx;

	ctx.sbuf = buffer_alloc(max_size(opts), comm);
	ctx.rbuf = buffer_alloc(max_size(opts), comm);
	ctx.dst = (rep->rank + shift) % n;
	ctx.src = (rep->rank - shift + n) % n;
	if (opts->oneway) {
		/* Blocks of shift ranks alternate sender, receiver: one direction per pair. */
		if ((rep->rank / shift) % 2 == 0)
			ctx.src = MPI_PROC_NULL;
		else
			ctx.dst = MPI_PROC_NULL;
	}
	ctx.comm = comm;
	for (int i = 0; i < opts->nsizes; i++)
		pairs_size(opts, opts->sizes[i], &ctx, rep);
	free(ctx.rbuf);
	free(ctx.sbuf);
}
