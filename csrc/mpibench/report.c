/* sdnmpi-bench: output.
 *
 * JSON (--json) is one object on one line, printed by rank 0 at the end:
 *   {"benchmark", "mpi_library", "nprocs", "parameters": {...},
 *    "results": [{"size_bytes", "iterations", "time_avg_s", "time_min_s",
 *                 "time_max_s", METRIC}], "timestamps": {...}}
 * (coll and pairs rows also "start_unix_s", "end_unix_s", and "step_min_s" and
 * "step_max_s": the fastest and slowest single step of any rank)
 * where METRIC is latency_us (latency), bandwidth_MBps (bw; bibw: both
 * directions together; pairs: per rank) or algbw_MBps (coll).  MB is 10^6 bytes, as in the OSU benchmarks.
 */
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "args.h"

static const char *const METRIC_KEYS[] = {"latency_us", "bandwidth_MBps", "algbw_MBps",
					  "bandwidth_MBps", "bandwidth_MBps"};

static void utc_now(char *out, size_t len)
{
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The first line of MPI_Get_library_version, without trailing blanks. */
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
			putchar(c);
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

static void print_header(const struct report *rep)
{
	const struct bench_opts *o = rep->opts;

	printf("# sdnmpi-bench %s", args_kind_name(o->kind));
	if (o->kind == BENCH_COLL)
		printf(" --op %s --root %d", args_ops_text(o), o->root);
	if (o->kind == BENCH_BW || o->kind == BENCH_BIBW)
		printf(" --window %d", o->window);
	if (o->kind == BENCH_PAIRS)
		printf(" --shift %d%s", rep->shift, o->oneway ? " --oneway" : "");
	printf("\n# %s\n# nprocs %d\n", rep->library, rep->nprocs);
	if (o->kind == BENCH_LATENCY)
		printf("%12s %10s %14s %14s %14s\n", "size_bytes", "iterations", "latency_us",
		       "min_us", "max_us");
	else if (o->kind == BENCH_BW || o->kind == BENCH_BIBW)
		printf("%12s %10s %14s\n", "size_bytes", "iterations", "bandwidth_MBps");
	else
		printf("%12s %10s %14s %14s %14s %14s\n", "size_bytes", "iterations", "avg_us",
		       "min_us", "max_us", o->kind == BENCH_COLL ? "algbw_MBps" : "MBps_per_rank");
	fflush(stdout);
}

static void print_table_row(const struct report *rep, const struct bench_result *r)
{
	enum bench_kind kind = rep->opts->kind;

	if (kind == BENCH_LATENCY)
		printf("%12zu %10ld %14.2f %14.2f %14.2f\n", r->size_bytes, r->iterations,
		       r->metric, r->time_min_s * 1e6, r->time_max_s * 1e6);
	else if (kind == BENCH_BW || kind == BENCH_BIBW)
		printf("%12zu %10ld %14.2f\n", r->size_bytes, r->iterations, r->metric);
	else
		printf("%12zu %10ld %14.2f %14.2f %14.2f %14.2f\n", r->size_bytes, r->iterations,
		       r->time_avg_s * 1e6, r->time_min_s * 1e6, r->time_max_s * 1e6, r->metric);
	fflush(stdout);
}

static void json_parameters(const struct report *rep)
{
	const struct bench_opts *o = rep->opts;

	/* null: not given, the per-size default (iters, warmup) or unused. */
	fputs("\"parameters\":{\"iters\":", stdout);
	json_number(o->iters > 0 ? (double)o->iters : NAN);
	fputs(",\"warmup\":", stdout);
	json_number(o->warmup >= 0 ? (double)o->warmup : NAN);
	fputs(",\"duration_s\":", stdout);
	json_number(o->duration_s > 0.0 ? o->duration_s : NAN);
	if (o->kind == BENCH_BW || o->kind == BENCH_BIBW)
		printf(",\"window\":%d", o->window);
	if (o->kind == BENCH_COLL)
		printf(",\"op\":\"%s\",\"root\":%d", args_ops_text(o), o->root);
	if (o->kind == BENCH_PAIRS)
		printf(",\"shift\":%d,\"oneway\":%s", rep->shift, o->oneway ? "true" : "false");
	putchar('}');
}

static void json_row(const struct report *rep, const struct bench_result *r)
{
	printf("{\"size_bytes\":%zu,\"iterations\":%ld,\"time_avg_s\":", r->size_bytes,
	       r->iterations);
	json_number(r->time_avg_s);
	fputs(",\"time_min_s\":", stdout);
	json_number(r->time_min_s);
	fputs(",\"time_max_s\":", stdout);
	json_number(r->time_max_s);
	printf(",\"%s\":", METRIC_KEYS[rep->opts->kind]);
	json_number(r->metric);
	if (rep->opts->kind == BENCH_COLL)
		printf(",\"op\":\"%s\"", args_op_name(r->op));
	if (rep->opts->kind == BENCH_COLL || rep->opts->kind == BENCH_PAIRS) {
		/* microseconds of a 10-digit epoch: %.9g would keep 10 s */
		printf(",\"start_unix_s\":%.6f,\"end_unix_s\":%.6f", r->start_unix_s,
		       r->end_unix_s);
	}
	if (r->has_steps) {
		fputs(",\"step_min_s\":", stdout);
		json_number(r->step_min_s);
		fputs(",\"step_max_s\":", stdout);
		json_number(r->step_max_s);
	}
	putchar('}');
}

static void print_json(const struct report *rep, const char *end_utc, double elapsed_s)
{
	fputs("{\"benchmark\":", stdout);
	json_string(args_kind_name(rep->opts->kind));
	fputs(",\"mpi_library\":", stdout);
	json_string(rep->library);
	printf(",\"nprocs\":%d,", rep->nprocs);
	json_parameters(rep);
	fputs(",\"results\":[", stdout);
	for (int i = 0; i < rep->nrows; i++) {
		if (i > 0)
			putchar(',');
		json_row(rep, &rep->rows[i]);
	}
	printf("],\"timestamps\":{\"start_utc\":\"%s\",\"end_utc\":\"%s\",\"elapsed_s\":",
	       rep->start_utc, end_utc);
	json_number(elapsed_s);
	fputs("}}\n", stdout);
	fflush(stdout);
}

void report_begin(struct report *rep, const struct bench_opts *opts, MPI_Comm comm)
{
	memset(rep, 0, sizeof(*rep));
	rep->opts = opts;
	MPI_Comm_rank(comm, &rep->rank);
	MPI_Comm_size(comm, &rep->nprocs);
	rep->shift = opts->shift > 0 ? opts->shift : rep->nprocs / 2;
	library_first_line(rep->library, sizeof(rep->library));
	utc_now(rep->start_utc, sizeof(rep->start_utc));
	rep->start_s = MPI_Wtime();
	if (rep->rank == 0 && !opts->json)
		print_header(rep);
}

void report_row(struct report *rep, const struct bench_result *row)
{
	if (rep->rank != 0 || rep->nrows >= BENCH_MAX_ROWS)
		return;
	rep->rows[rep->nrows++] = *row;
	if (!rep->opts->json)
		print_table_row(rep, row);
}

void report_end(struct report *rep)
{
	char end_utc[REPORT_TIME_LEN];

	if (rep->rank != 0 || !rep->opts->json)
		return;
	utc_now(end_utc, sizeof(end_utc));
	print_json(rep, end_utc, MPI_Wtime() - rep->start_s);
}
