/* sdnmpi-bench: timed loops.
 *
 * With --duration every rank runs the same batches: after each batch the
 * ranks agree (MPI_Allreduce, MAX) on the elapsed time, so all ranks stop
 * after the same number of steps and no collective is left unmatched.  The
 * agreement step is outside the timed region.
 */
#include "timing.h"

#include <time.h>

#define CHECK_INTERVAL_S 0.05
#define MAX_BATCH 1000000L
#define IDLE_POLL_NS 1000000L

struct loop_spec timing_spec(const struct bench_opts *opts, size_t size_bytes, bool sync_each)
{
	struct loop_spec spec;

	spec.iters = opts->iters > 0 ? opts->iters : bench_default_iters(size_bytes);
	spec.warmup = opts->warmup >= 0 ? opts->warmup : bench_default_warmup(size_bytes);
	spec.duration_s = opts->duration_s;
	spec.sync_each = sync_each;
	return spec;
}

static void note_step(struct loop_stats *out, double step_s)
{
	if (!out)
		return;
	if (out->step_min_s < 0.0 || step_s < out->step_min_s)
		out->step_min_s = step_s;
	if (step_s > out->step_max_s)
		out->step_max_s = step_s;
}

/* Without sync_each the steps run back to back, as an application's would: a step's
 * time is from the previous step's end (reading the clock costs tens of ns). */
static double run_batch(long n, bool sync_each, bench_step_fn step, void *ctx, MPI_Comm comm,
			struct loop_stats *out)
{
	double busy = 0.0;
	double t0;
	double prev;
	double now;

	if (!sync_each) {
		MPI_Barrier(comm);
		t0 = prev = MPI_Wtime();
		for (long i = 0; i < n; i++) {
			step(ctx);
			now = MPI_Wtime();
			note_step(out, now - prev);
			prev = now;
		}
		return prev - t0;
	}
	for (long i = 0; i < n; i++) {
		MPI_Barrier(comm);
		t0 = MPI_Wtime();
		step(ctx);
		now = MPI_Wtime() - t0;
		note_step(out, now);
		busy += now;
	}
	return busy;
}

/* Next batch size from agreed figures only, so every rank computes the same. */
static long next_batch(long batch, long done, double elapsed_s, double duration_s)
{
	double per_step = elapsed_s / (double)done;
	double remaining = duration_s - elapsed_s;
	double want = CHECK_INTERVAL_S;
	long next;

	if (remaining < want)
		want = remaining;
	if (per_step <= 0.0)
		return batch * 2 > MAX_BATCH ? MAX_BATCH : batch * 2;
	next = want / per_step >= (double)MAX_BATCH ? MAX_BATCH : (long)(want / per_step);
	if (next > batch * 2)
		next = batch * 2;
	return next < 1 ? 1 : next;
}

static void run_for_duration(const struct loop_spec *spec, bench_step_fn step, void *ctx,
			     MPI_Comm comm, struct loop_stats *out)
{
	double start = MPI_Wtime();
	double elapsed;
	double agreed;
	long batch = 1;

	for (;;) {
		out->busy_s += run_batch(batch, spec->sync_each, step, ctx, comm, out);
		out->iterations += batch;
		elapsed = MPI_Wtime() - start;
		MPI_Allreduce(&elapsed, &agreed, 1, MPI_DOUBLE, MPI_MAX, comm);
		if (agreed >= spec->duration_s)
			return;
		batch = next_batch(batch, out->iterations, agreed, spec->duration_s);
	}
}

void timing_run(const struct loop_spec *spec, bench_step_fn step, void *ctx, MPI_Comm comm,
		struct loop_stats *out)
{
	out->iterations = 0;
	out->busy_s = 0.0;
	out->step_min_s = -1.0;
	out->step_max_s = 0.0;
	run_batch(spec->warmup, spec->sync_each, step, ctx, comm, NULL);
	if (spec->duration_s > 0.0) {
		run_for_duration(spec, step, ctx, comm, out);
		return;
	}
	out->busy_s = run_batch(spec->iters, spec->sync_each, step, ctx, comm, out);
	out->iterations = spec->iters;
}

void timing_steps(const struct loop_stats *ls, MPI_Comm comm, struct bench_result *res)
{
	double fastest = ls->step_min_s < 0.0 ? 0.0 : ls->step_min_s;

	MPI_Reduce(&fastest, &res->step_min_s, 1, MPI_DOUBLE, MPI_MIN, 0, comm);
	MPI_Reduce(&ls->step_max_s, &res->step_max_s, 1, MPI_DOUBLE, MPI_MAX, 0, comm);
	res->has_steps = 1;
}

void timing_spread(double value, MPI_Comm comm, struct bench_result *res)
{
	int nprocs = 1;
	double sum = 0.0;

	MPI_Comm_size(comm, &nprocs);
	MPI_Reduce(&value, &res->time_min_s, 1, MPI_DOUBLE, MPI_MIN, 0, comm);
	MPI_Reduce(&value, &res->time_max_s, 1, MPI_DOUBLE, MPI_MAX, 0, comm);
	MPI_Reduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, comm);
	res->time_avg_s = sum / (double)nprocs;
}

void timing_idle_barrier(MPI_Comm comm)
{
	const struct timespec nap = {0, IDLE_POLL_NS};
	MPI_Request req;
	int done = 0;

	MPI_Ibarrier(comm, &req);
	for (;;) {
		MPI_Test(&req, &done, MPI_STATUS_IGNORE);
		if (done)
			return;
		nanosleep(&nap, NULL);
	}
}

double timing_unix_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
