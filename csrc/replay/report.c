/* sdnmpi-replay: output.
 *
 * JSON (--json) is one object on one line, printed by rank 0 at the end:
 *   {"benchmark": "replay", "mpi_library", "nprocs", "parameters": {...},
 *    "pattern", "phases": [{"index", "label", "repeat", "cells", "messages",
 *    "bytes", "time_s", "time_avg_s", "wait_avg_s", "wait_cv", "messages_sent", "bytes_sent",
 *    "messages_received", "bytes_received"}], "total_s", "passes_s": [...],
 *    "mismatched_messages", "memory_bytes", "hosts": [...],
 *    "timestamps": {...}}
 * "messages" and "bytes" are the file's, per occurrence of the phase; the
 * *_sent and *_received counters are what the ranks counted (receives from
 * their MPI statuses) over every timed occurrence, summed over ranks.
 * time_s is a phase's time per occurrence: each rank's mean over its timed
 * occurrences, the maximum over ranks (time_avg_s: the mean over ranks).
 * wait_avg_s and wait_cv: over every (rank, timed occurrence) in which the rank
 * sends or receives, the mean and the coefficient of variation (standard
 * deviation over mean) of its exchange's own time, from posting to the end of the
 * wait (no barrier): how evenly concurrent exchanges progress; null without any.
 * passes_s holds each timed pass's time, the maximum over ranks; total_s is
 * their mean.
 */
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The ranks' measurements, reduced on rank 0. */
struct summary {
	double *time_max_s;
	double *time_avg_s;
	double *wait; /* per phase: count, sum, sum of squares (3 doubles) */
	double *pass_s;
	uint64_t *counters;
	uint64_t mismatched;
};

static void utc_now(char *out, size_t len)
{
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The first line of MPI_Get_library_version, without trailing blanks or tabs. */
static void library_first_line(char *out, size_t len)
{
	char version[MPI_MAX_LIBRARY_VERSION_STRING];
	int vlen = 0;
	size_t n;

	MPI_Get_library_version(version, &vlen);
	n = strcspn(version, "\r\n");
	while (n > 0 && (version[n - 1] == ' ' || version[n - 1] == '\t'))
		n--;
	if (n >= len)
		n = len - 1;
	memcpy(out, version, n);
	out[n] = '\0';
	for (char *c = out; *c != '\0'; c++) {
		if (*c == '\t')
			*c = ' '; /* MPICH: "MPICH Version:\t4.0.2" */
	}
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c); /* UTF-8 as is: the parser checked it */
	}
	putchar('"');
}

static void json_number(double value)
{
	if (isfinite(value))
		printf("%.9g", value);
	else
		fputs("null", stdout);
}

void report_begin(struct report *rep, const struct replay_opts *opts, MPI_Comm comm)
{
	memset(rep, 0, sizeof(*rep));
	rep->opts = opts;
	MPI_Comm_rank(comm, &rep->rank);
	MPI_Comm_size(comm, &rep->nprocs);
	library_first_line(rep->library, sizeof(rep->library));
	utc_now(rep->start_utc, sizeof(rep->start_utc));
	rep->start_s = MPI_Wtime();
}

int report_hosts(struct report *rep, MPI_Comm comm)
{
	char name[REPORT_HOST_LEN];
	int len = 0;
	int failed = 0;

	memset(name, 0, sizeof(name));
	MPI_Get_processor_name(name, &len);
	name[REPORT_HOST_LEN - 1] = '\0';
	if (rep->rank == 0) {
		rep->hosts = calloc((size_t)rep->nprocs, REPORT_HOST_LEN);
		failed = rep->hosts == NULL;
	}
	MPI_Bcast(&failed, 1, MPI_INT, 0, comm);
	if (failed)
		return rep->rank == 0 ? -1 : 0;
	MPI_Gather(name, REPORT_HOST_LEN, MPI_CHAR, rep->hosts, REPORT_HOST_LEN, MPI_CHAR, 0,
		   comm);
	return 0;
}

void report_free(struct report *rep)
{
	free(rep->hosts);
	rep->hosts = NULL;
}

static const char *host_of(const struct report *rep, int rank)
{
	return rep->hosts + (size_t)rank * REPORT_HOST_LEN;
}

static void summary_free(struct summary *sum)
{
	free(sum->time_max_s);
	free(sum->time_avg_s);
	free(sum->wait);
	free(sum->pass_s);
	free(sum->counters);
}

static void summary_alloc(struct summary *sum, size_t nphases, size_t iters, MPI_Comm comm)
{
	memset(sum, 0, sizeof(*sum));
	sum->time_max_s = calloc(nphases, sizeof(double));
	sum->time_avg_s = calloc(nphases, sizeof(double));
	sum->wait = calloc(nphases * 3, sizeof(double));
	sum->pass_s = calloc(iters, sizeof(double));
	sum->counters = calloc(nphases * RUN_NCOUNTERS, sizeof(uint64_t));
	if (!sum->time_max_s || !sum->time_avg_s || !sum->wait || !sum->pass_s ||
	    !sum->counters) {
		fputs("sdnmpi-replay: rank 0: out of memory for the results\n", stderr);
		MPI_Abort(comm, 1);
	}
}

/* Collective: every rank's figures into sum (allocated on rank 0 only). */
static void reduce(const struct report *rep, const struct replay_pattern *pat,
		   const struct run_stats *stats, MPI_Comm comm, struct summary *sum)
{
	size_t nph = pat->nphases ? (size_t)pat->nphases : 1;
	double *mean = calloc(nph, sizeof(double));
	double *wait = calloc(nph * 3, sizeof(double));

	if (mean == NULL || wait == NULL) {
		fprintf(stderr, "sdnmpi-replay: rank %d: out of memory for the results\n",
			rep->rank);
		MPI_Abort(comm, 1);
	}
	if (rep->rank == 0)
		summary_alloc(sum, nph, (size_t)rep->opts->iters, comm);
	for (int32_t k = 0; k < pat->nphases; k++) {
		mean[k] = stats->phase_sum_s[k] /
			  ((double)pat->phases[k].repeat * (double)rep->opts->iters);
		wait[3 * k] = stats->wait_n[k];
		wait[3 * k + 1] = stats->wait_sum_s[k];
		wait[3 * k + 2] = stats->wait_sq_s[k];
	}
	MPI_Reduce(mean, sum->time_max_s, (int)nph, MPI_DOUBLE, MPI_MAX, 0, comm);
	MPI_Reduce(wait, sum->wait, (int)(nph * 3), MPI_DOUBLE, MPI_SUM, 0, comm);
	MPI_Reduce(mean, sum->time_avg_s, (int)nph, MPI_DOUBLE, MPI_SUM, 0, comm);
	MPI_Reduce(stats->pass_s, sum->pass_s, (int)rep->opts->iters, MPI_DOUBLE, MPI_MAX, 0,
		   comm);
	MPI_Reduce(stats->counters, sum->counters, (int)(nph * RUN_NCOUNTERS), MPI_UINT64_T,
		   MPI_SUM, 0, comm);
	MPI_Reduce(&stats->mismatched, &sum->mismatched, 1, MPI_UINT64_T, MPI_SUM, 0, comm);
	free(mean);
	free(wait);
	if (rep->rank == 0) {
		for (size_t k = 0; k < nph; k++)
			sum->time_avg_s[k] /= (double)rep->nprocs;
	}
}

static double mean_of(const double *v, long n)
{
	double total = 0.0;

	for (long i = 0; i < n; i++)
		total += v[i];
	return n > 0 ? total / (double)n : 0.0;
}

static void json_parameters(const struct report *rep)
{
	const struct replay_opts *o = rep->opts;

	fputs("\"parameters\":{\"file\":", stdout);
	json_string(o->file);
	printf(",\"iters\":%ld,\"warmup\":%ld,\"barrier\":%s,\"poll_us\":%ld,"
	       "\"max_memory_bytes\":%llu}",
	       o->iters, o->warmup, o->barrier ? "true" : "false", o->poll_us,
	       (unsigned long long)o->max_memory);
}

/* Mean of the samples summarized by w = {count, sum, sum of squares}; NaN without any. */
static double wait_mean(const double *w)
{
	return w[0] > 0.0 ? w[1] / w[0] : NAN;
}

/* Their coefficient of variation (population standard deviation over mean). */
static double wait_cv(const double *w)
{
	double m = wait_mean(w);
	double var;

	if (!(m > 0.0))
		return NAN;
	var = w[2] / w[0] - m * m;
	return sqrt(var > 0.0 ? var : 0.0) / m;
}

static void json_phase(const struct replay_phase *ph, int32_t k, const struct summary *sum)
{
	const uint64_t *ctr = &sum->counters[(size_t)k * RUN_NCOUNTERS];

	printf("{\"index\":%d,\"label\":", k);
	json_string(ph->label);
	printf(",\"repeat\":%d,\"cells\":%lld,\"messages\":%lld,\"bytes\":%lld,\"time_s\":",
	       ph->repeat, (long long)ph->ncells, (long long)ph->messages, (long long)ph->bytes);
	json_number(sum->time_max_s[k]);
	fputs(",\"time_avg_s\":", stdout);
	json_number(sum->time_avg_s[k]);
	fputs(",\"wait_avg_s\":", stdout);
	json_number(wait_mean(&sum->wait[3 * k]));
	fputs(",\"wait_cv\":", stdout);
	json_number(wait_cv(&sum->wait[3 * k]));
	printf(",\"messages_sent\":%llu,\"bytes_sent\":%llu,\"messages_received\":%llu,"
	       "\"bytes_received\":%llu}",
	       (unsigned long long)ctr[RUN_MSGS_SENT], (unsigned long long)ctr[RUN_BYTES_SENT],
	       (unsigned long long)ctr[RUN_MSGS_RECV], (unsigned long long)ctr[RUN_BYTES_RECV]);
}

static void json_tail(const struct report *rep, const struct run_stats *stats,
		      const struct summary *sum)
{
	char end_utc[REPORT_TIME_LEN];

	fputs(",\"total_s\":", stdout);
	json_number(mean_of(sum->pass_s, rep->opts->iters));
	fputs(",\"passes_s\":[", stdout);
	for (long i = 0; i < rep->opts->iters; i++) {
		if (i > 0)
			putchar(',');
		json_number(sum->pass_s[i]);
	}
	printf("],\"mismatched_messages\":%llu,\"memory_bytes\":%llu,\"hosts\":[",
	       (unsigned long long)sum->mismatched, (unsigned long long)rep->memory_bytes);
	for (int r = 0; r < rep->nprocs; r++) {
		if (r > 0)
			putchar(',');
		json_string(host_of(rep, r));
	}
	utc_now(end_utc, sizeof(end_utc));
	printf("],\"timestamps\":{\"start_utc\":\"%s\",\"end_utc\":\"%s\",\"elapsed_s\":",
	       rep->start_utc, end_utc);
	json_number(MPI_Wtime() - rep->start_s);
	/* microseconds of a 10-digit epoch: %.9g would keep 10 s */
	printf(",\"start_unix_s\":%.6f,\"end_unix_s\":%.6f}}\n", stats->start_unix_s,
	       stats->end_unix_s);
}

static void print_json(const struct report *rep, const struct replay_pattern *pat,
		       const struct run_stats *stats, const struct summary *sum)
{
	fputs("{\"benchmark\":\"replay\",\"mpi_library\":", stdout);
	json_string(rep->library);
	printf(",\"nprocs\":%d,", rep->nprocs);
	json_parameters(rep);
	fputs(",\"pattern\":", stdout);
	json_string(pat->name);
	fputs(",\"phases\":[", stdout);
	for (int32_t k = 0; k < pat->nphases; k++) {
		if (k > 0)
			putchar(',');
		json_phase(&pat->phases[k], k, sum);
	}
	putchar(']');
	json_tail(rep, stats, sum);
	fflush(stdout);
}

/* A text on one table line: control characters become '?'. */
static void print_text(const char *s)
{
	for (; *s != '\0'; s++)
		putchar((unsigned char)*s < 0x20 ? '?' : *s);
}

/* "node1 0-7, node2 8-15": runs of consecutive ranks on one host. */
static void print_placement(const struct report *rep)
{
	int start = 0;

	fputs("# hosts:", stdout);
	for (int r = 1; r <= rep->nprocs; r++) {
		if (r < rep->nprocs && strcmp(host_of(rep, r), host_of(rep, start)) == 0)
			continue;
		printf("%s %s %d", start > 0 ? "," : "", host_of(rep, start), start);
		if (r - 1 > start)
			printf("-%d", r - 1);
		start = r;
	}
	putchar('\n');
}

static void print_table(const struct report *rep, const struct replay_pattern *pat,
			const struct summary *sum)
{
	const struct replay_opts *o = rep->opts;
	double pass_bytes = 0.0; /* exact below 2^53 bytes */
	double lo = INFINITY, hi = 0.0;

	for (int32_t k = 0; k < pat->nphases; k++)
		pass_bytes += (double)pat->phases[k].bytes * pat->phases[k].repeat;
	printf("# sdnmpi-replay %s --iters %ld --warmup %ld %s --poll-us %ld\n# %s\n", o->file,
	       o->iters, o->warmup, o->barrier ? "--barrier" : "--no-barrier", o->poll_us,
	       rep->library);
	fputs("# pattern ", stdout);
	print_text(pat->name);
	printf(": %d ranks, %d phases, %.0f bytes per pass\n", rep->nprocs, pat->nphases,
	       pass_bytes);
	print_placement(rep);
	printf("%6s %10s %8s %14s %14s %14s  %s\n", "phase", "repeat", "cells", "bytes",
	       "time_us", "avg_us", "label");
	for (int32_t k = 0; k < pat->nphases; k++) {
		const struct replay_phase *ph = &pat->phases[k];
		printf("%6d %10d %8lld %14lld %14.1f %14.1f  ", k, ph->repeat,
		       (long long)ph->ncells, (long long)ph->bytes, sum->time_max_s[k] * 1e6,
		       sum->time_avg_s[k] * 1e6);
		print_text(ph->label);
		putchar('\n');
	}
	for (long i = 0; i < o->iters; i++) {
		lo = fmin(lo, sum->pass_s[i]);
		hi = fmax(hi, sum->pass_s[i]);
	}
	printf("# total_s per pass: mean %.6f, min %.6f, max %.6f over %ld passes\n",
	       mean_of(sum->pass_s, o->iters), lo, hi, o->iters);
	printf("# mismatched messages %llu, memory per rank at most %llu bytes\n",
	       (unsigned long long)sum->mismatched, (unsigned long long)rep->memory_bytes);
	fflush(stdout);
}

void report_end(struct report *rep, const struct replay_pattern *pat,
		const struct run_stats *stats, MPI_Comm comm)
{
	struct summary sum;

	memset(&sum, 0, sizeof(sum));
	reduce(rep, pat, stats, comm, &sum);
	if (rep->rank != 0)
		return;
	if (rep->opts->json)
		print_json(rep, pat, stats, &sum);
	else
		print_table(rep, pat, &sum);
	summary_free(&sum);
}
