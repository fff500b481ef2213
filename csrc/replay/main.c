/* sdnmpi-replay: execute a communication pattern with real MPI calls.
 *
 * Rank 0 reads the file and broadcasts its bytes; every rank parses the same
 * bytes, keeping only its own cells.  So the file need exist only where rank
 * 0 runs (not on every emulated or real host), a job of 160 ranks on one
 * machine opens it once, and every rank reaches the same verdict on the same
 * bytes without another round of agreement.  Failures that can differ between
 * ranks (memory) are agreed with an MPI_Allreduce, so that every rank leaves
 * through MPI_Finalize: usage errors (options, the file, the rank count) are
 * printed by rank 0 with exit status 2, runtime errors by the rank concerned
 * with status 1.
 */
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "format.h"
#include "plan.h"
#include "report.h"
#include "run.h"

/* Verdicts, agreed with MPI_MAX: a runtime failure anywhere wins. */
enum verdict { V_OK = 0, V_USAGE = 1, V_RUNTIME = 2 };

#define READ_CHUNK ((size_t)1 << 20)
#define MSG_LEN 8192 /* an error message, with the file name in it */

struct job {
	MPI_Comm comm;
	int rank;
	int nprocs;
	struct replay_opts opts;
	char *text;
	size_t len;
	struct replay_pattern pat;
	struct plan plan;
	struct run_buffers buf;
	struct run_stats stats;
	struct report rep;
};

static int agree(int verdict, MPI_Comm comm)
{
	int all = V_OK;

	MPI_Allreduce(&verdict, &all, 1, MPI_INT, MPI_MAX, comm);
	return all;
}

static int usage_error(const struct job *job, const char *msg)
{
	if (job->rank == 0)
		fprintf(stderr, "sdnmpi-replay: error: %s\n", msg);
	return V_USAGE;
}

static int out_of_memory(const struct job *job, const char *what)
{
	fprintf(stderr, "sdnmpi-replay: rank %d: out of memory (%s)\n", job->rank, what);
	return V_RUNTIME;
}

/* Rank 0: the whole file, at most REPLAY_MAX_FILE_BYTES. */
static int read_file(struct job *job, char *err, size_t errlen)
{
	FILE *f = fopen(job->opts.file, "rb");
	size_t cap = 0;

	if (f == NULL) {
		snprintf(err, errlen, "%s: cannot read: %s", job->opts.file, strerror(errno));
		return V_USAGE;
	}
	for (;;) {
		if (job->len == cap) {
			char *grown;
			if (cap > REPLAY_MAX_FILE_BYTES) {
				snprintf(err, errlen, "%s: larger than %zu bytes", job->opts.file,
					 REPLAY_MAX_FILE_BYTES);
				fclose(f);
				return V_USAGE;
			}
			grown = realloc(job->text, cap + READ_CHUNK);
			if (grown == NULL) {
				fclose(f);
				return out_of_memory(job, "reading the file");
			}
			job->text = grown;
			cap += READ_CHUNK;
		}
		size_t got = fread(job->text + job->len, 1, cap - job->len, f);
		job->len += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		snprintf(err, errlen, "%s: cannot read: %s", job->opts.file, strerror(errno));
		fclose(f);
		return V_USAGE;
	}
	fclose(f);
	if (job->len > REPLAY_MAX_FILE_BYTES) {
		snprintf(err, errlen, "%s: larger than %zu bytes", job->opts.file,
			 REPLAY_MAX_FILE_BYTES);
		return V_USAGE;
	}
	return V_OK;
}

/* Rank 0 reads, every rank gets the bytes. */
static int share_file(struct job *job)
{
	char err[MSG_LEN] = "";
	long long head[2] = {V_OK, 0};
	int verdict = V_OK;

	if (job->rank == 0) {
		head[0] = read_file(job, err, sizeof(err));
		head[1] = (long long)job->len;
		if (head[0] == V_USAGE)
			usage_error(job, err);
	}
	MPI_Bcast(head, 2, MPI_LONG_LONG, 0, job->comm);
	if (head[0] != V_OK)
		return (int)head[0];
	job->len = (size_t)head[1];
	if (job->rank != 0) {
		job->text = malloc(job->len ? job->len : 1);
		if (job->text == NULL)
			verdict = out_of_memory(job, "the file's bytes");
	}
	verdict = agree(verdict, job->comm);
	if (verdict == V_OK && job->len > 0)
		MPI_Bcast(job->text, (int)job->len, MPI_CHAR, 0, job->comm);
	return verdict;
}

static int parse_file(struct job *job)
{
	struct replay_error err;
	int rc = replay_parse(job->text, job->len, job->rank, &job->pat, &err);
	int verdict = rc == REPLAY_OK ? V_OK : rc == REPLAY_NO_MEMORY ? V_RUNTIME : V_USAGE;
	char msg[MSG_LEN];

	free(job->text);
	job->text = NULL;
	if (rc == REPLAY_NO_MEMORY)
		out_of_memory(job, "parsing the file");
	verdict = agree(verdict, job->comm);
	if (verdict == V_USAGE) {
		snprintf(msg, sizeof(msg), "%s:%ld: %s", job->opts.file, err.line, err.msg);
		usage_error(job, msg);
	}
	return verdict;
}

/* What the program, not the format, requires: the rank count, message sizes. */
static int check_pattern(const struct job *job)
{
	const struct replay_largest *big = &job->pat.largest;
	char msg[MSG_LEN];

	if (job->pat.nprocs != job->nprocs) {
		snprintf(msg, sizeof(msg),
			 "%s: the pattern is for %d ranks, this job has %d (run it with -n %d)",
			 job->opts.file, job->pat.nprocs, job->nprocs, job->pat.nprocs);
		return usage_error(job, msg);
	}
	if (big->bytes > INT_MAX) {
		snprintf(msg, sizeof(msg),
			 "%s:%ld: a message of %lld bytes (cell %d -> %d: %lld bytes in %d "
			 "messages) exceeds INT_MAX (%d), the most one MPI call of MPI_BYTE "
			 "sends; split the cell into more messages",
			 job->opts.file, big->line, (long long)big->bytes, big->src, big->dst,
			 (long long)big->size_bytes, big->messages, INT_MAX);
		return usage_error(job, msg);
	}
	return V_OK;
}

/* This rank's need against --max-memory; the first rank over it explains. */
static int check_memory(struct job *job)
{
	uint64_t need = plan_memory_bytes(&job->plan, RUN_REQUEST_BYTES);
	int first = INT_MAX, candidate;

	if (job->plan.max_requests > INT_MAX)
		need = UINT64_MAX; /* MPI_Waitall counts requests in an int */
	MPI_Allreduce(&need, &job->rep.memory_bytes, 1, MPI_UINT64_T, MPI_MAX, job->comm);
	if (job->rep.memory_bytes <= job->opts.max_memory)
		return V_OK;
	candidate = need > job->opts.max_memory ? job->rank : INT_MAX;
	MPI_Allreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, job->comm);
	if (job->rank == first)
		fprintf(stderr,
			"sdnmpi-replay: error: rank %d needs %llu bytes, above --max-memory %llu: "
			"receive slots for the largest phase %lld, send buffer %lld, %lld "
			"concurrent messages of %zu bytes of requests and statuses\n",
			job->rank, (unsigned long long)need,
			(unsigned long long)job->opts.max_memory,
			(long long)job->plan.recv_region_bytes,
			(long long)job->plan.send_buffer_bytes, (long long)job->plan.max_requests,
			RUN_REQUEST_BYTES);
	return V_RUNTIME;
}

static int prepare(struct job *job)
{
	int verdict = V_OK;

	if (plan_build(&job->pat, job->rank, &job->plan) != 0)
		verdict = out_of_memory(job, "planning");
	if ((verdict = agree(verdict, job->comm)) != V_OK)
		return verdict;
	if ((verdict = check_memory(job)) != V_OK)
		return verdict;
	if (run_alloc(&job->plan, &job->buf) != 0)
		verdict = out_of_memory(job, "message buffers");
	else if (run_stats_alloc(job->pat.nphases, job->opts.iters, &job->stats) != 0)
		verdict = out_of_memory(job, "timers");
	else if (report_hosts(&job->rep, job->comm) != 0)
		verdict = out_of_memory(job, "host names");
	return agree(verdict, job->comm);
}

static int replay(struct job *job)
{
	int verdict;

	if ((verdict = share_file(job)) != V_OK || (verdict = parse_file(job)) != V_OK)
		return verdict;
	if ((verdict = check_pattern(job)) != V_OK || (verdict = prepare(job)) != V_OK)
		return verdict;
	run_replay(&job->opts, &job->pat, &job->plan, &job->buf, job->comm, &job->stats);
	report_end(&job->rep, &job->pat, &job->stats, job->comm);
	return V_OK;
}

static int start(struct job *job, int argc, char **argv)
{
	char err[ARGS_ERR_LEN] = "";

	if (args_parse(argc, argv, &job->opts, err, sizeof(err)) != 0)
		return usage_error(job, err);
	if (job->opts.help) {
		if (job->rank == 0)
			args_print_usage();
		return V_OK;
	}
	report_begin(&job->rep, &job->opts, job->comm);
	return replay(job);
}

int main(int argc, char **argv)
{
	static struct job job;
	int verdict;

	MPI_Init(&argc, &argv);
	MPI_Comm_dup(MPI_COMM_WORLD, &job.comm);
	MPI_Comm_rank(job.comm, &job.rank);
	MPI_Comm_size(job.comm, &job.nprocs);
	verdict = start(&job, argc, argv);
	free(job.text);
	replay_free(&job.pat);
	plan_free(&job.plan);
	run_free(&job.buf);
	run_stats_free(&job.stats);
	report_free(&job.rep);
	/* A blocking barrier before finalizing, as sdnmpi-bench does: MPICH 4.0.2
	 * over UCX intermittently hangs in MPI_Finalize after polled waits. */
	MPI_Barrier(job.comm);
	MPI_Comm_free(&job.comm);
	MPI_Finalize();
	return verdict == V_RUNTIME ? 1 : verdict == V_USAGE ? 2 : 0;
}
