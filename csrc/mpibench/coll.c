/* sdnmpi-bench: collective timer (osu_allreduce-like, for six operations).
 *
 * Sizes: allreduce, reduce and bcast move size_bytes per rank (allreduce and
 * reduce as floats, summed); alltoall and allgather send size_bytes to every
 * peer (the OSU convention).  algbw_MBps is size_bytes / mean time per call.
 */
#include "coll.h"

#include <stdlib.h>

#include "buffer.h"
#include "timing.h"

struct coll_ctx {
	unsigned char *sbuf;
	unsigned char *rbuf;
	int count; /* elements: floats for the reductions, bytes otherwise */
	int root;
	MPI_Comm comm;
};

static void step_allreduce(void *arg)
{
	struct coll_ctx *c = arg;

	MPI_Allreduce(c->sbuf, c->rbuf, c->count, MPI_FLOAT, MPI_SUM, c->comm);
}

static void step_reduce(void *arg)
{
	struct coll_ctx *c = arg;

	MPI_Reduce(c->sbuf, c->rbuf, c->count, MPI_FLOAT, MPI_SUM, c->root, c->comm);
}

static void step_bcast(void *arg)
{
	struct coll_ctx *c = arg;

	MPI_Bcast(c->sbuf, c->count, MPI_BYTE, c->root, c->comm);
}

static void step_alltoall(void *arg)
{
	struct coll_ctx *c = arg;

	MPI_Alltoall(c->sbuf, c->count, MPI_BYTE, c->rbuf, c->count, MPI_BYTE, c->comm);
}

static void step_allgather(void *arg)
{
	struct coll_ctx *c = arg;

	MPI_Allgather(c->sbuf, c->count, MPI_BYTE, c->rbuf, c->count, MPI_BYTE, c->comm);
}

static void step_barrier(void *arg)
{
	struct coll_ctx *c = arg;

	MPI_Barrier(c->comm);
}

static bench_step_fn step_for(enum coll_op op)
{
	switch (op) {
	case COLL_ALLREDUCE:
		return step_allreduce;
	case COLL_REDUCE:
		return step_reduce;
	case COLL_BCAST:
		return step_bcast;
	case COLL_ALLTOALL:
		return step_alltoall;
	case COLL_ALLGATHER:
		return step_allgather;
	case COLL_BARRIER:
		break;
	}
	return step_barrier;
}

/* Reductions sum floats: fill with 1.0f so sums stay small and exact. */
static void fill_floats(unsigned char *buf, size_t bytes)
{
	float *f = (float *)(void *)buf;

	for (size_t i = 0; i < bytes / sizeof(float); i++)
		f[i] = 1.0f;
}

static size_t per_peer_factor(enum coll_op op, int nprocs)
{
	return op == COLL_ALLTOALL || op == COLL_ALLGATHER ? (size_t)nprocs : 1;
}

static void coll_size(const struct bench_opts *opts, enum coll_op op, size_t size,
		      struct coll_ctx *ctx, struct report *rep)
{
	int reduces = op == COLL_ALLREDUCE || op == COLL_REDUCE;
	struct loop_spec spec = timing_spec(opts, size, false);
	struct loop_stats ls;
	struct bench_result res = {0};

	ctx->count = (int)(reduces ? size / sizeof(float) : size);
	MPI_Barrier(ctx->comm);
	res.start_unix_s = timing_unix_s();
	timing_run(&spec, step_for(op), ctx, ctx->comm, &ls);
	MPI_Barrier(ctx->comm);
	res.end_unix_s = timing_unix_s();
	timing_spread(ls.busy_s / (double)ls.iterations, ctx->comm, &res);
	timing_steps(&ls, ctx->comm, &res);
	res.op = op;
	res.size_bytes = size;
	res.iterations = ls.iterations;
	res.metric = res.time_avg_s > 0.0 ? (double)size / res.time_avg_s / 1e6 : 0.0;
	report_row(rep, &res);
}

void coll_run(const struct bench_opts *opts, MPI_Comm comm, struct report *rep)
{
	size_t largest = opts->sizes[opts->nsizes - 1], factor = 1;
	size_t bytes;

	for (int k = 0; k < opts->nops; k++) {
		size_t f = per_peer_factor(opts->ops[k], rep->nprocs);
		factor = f > factor ? f : factor;
	}
	bytes = buffer_span(largest, factor, comm);
	struct coll_ctx ctx;

	ctx.sbuf = buffer_alloc(bytes, comm);
	ctx.rbuf = buffer_alloc(bytes, comm);
	ctx.root = opts->root;
	ctx.comm = comm;
	fill_floats(ctx.sbuf, bytes);
	for (int k = 0; k < opts->nops; k++) {
		if (opts->ops[k] == COLL_BARRIER) {
			coll_size(opts, COLL_BARRIER, 0, &ctx, rep);
			continue;
		}
		for (int i = 0; i < opts->nsizes; i++)
			coll_size(opts, opts->ops[k], opts->sizes[i], &ctx, rep);
	}
	free(ctx.rbuf);
	free(ctx.sbuf);
}
