/* Unit tests of sdnmpi_sim_phase on cases whose answer is known by hand. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "phase.h"

static int failures;

#define EXPECT(cond, ...)                                                              \
	do {                                                                           \
		if (!(cond)) {                                                         \
			failures++;                                                    \
			fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                \
			fprintf(stderr, __VA_ARGS__);                                  \
			fputc('\n', stderr);                                           \
		}                                                                      \
	} while (0)

struct out {
	double start[8], finish[8], peak[4], seg_start[17], seg_end[17];
	int64_t counts[2];
	char err[160];
};

static int run(int64_t n, int64_t narcs, const int64_t *indptr, const int64_t *arc,
	       const double *weight, const double *capacity, const double *size,
	       const double *latency, struct out *o)
{
	memset(o, 0, sizeof(*o));
	return sdnmpi_sim_phase(n, narcs, indptr, arc, weight, capacity, size, latency, 1e-9,
				8 * 2.220446049250313e-16, o->start, o->finish, o->peak,
				o->seg_start, o->seg_end, o->counts, o->err, sizeof(o->err));
}

/* Two flows share arc 0 (8 bit/s); the second also crosses arc 1 (2 bit/s).
 * Max-min: flow 1 gets 2, flow 0 gets 6.  Flow 0 (12 bits) ends at 2 s;
 * flow 1 (8 bits) has sent 4 by then and is still held to 2 bit/s: ends at 4 s. */
static void test_two_flows(void)
{
	const int64_t indptr[] = {0, 1, 3}, arc[] = {0, 0, 1};
	const double weight[] = {1, 1, 1}, capacity[] = {8, 2};
	const double size[] = {12, 8}, latency[] = {0, 0};
	struct out o;
	int rc = run(2, 2, indptr, arc, weight, capacity, size, latency, &o);

	EXPECT(rc == 0, "rc %d: %s", rc, o.err);
	EXPECT(o.finish[0] == 2.0, "flow 0 ends at %g", o.finish[0]);
	EXPECT(o.finish[1] == 4.0, "flow 1 ends at %g", o.finish[1]);
	EXPECT(o.peak[0] == 8.0 && o.peak[1] == 2.0, "peaks %g %g", o.peak[0], o.peak[1]);
	EXPECT(o.counts[0] == 2, "%lld segments", (long long)o.counts[0]);
	EXPECT(o.counts[1] == 3, "%lld events (a start and two ends)", (long long)o.counts[1]);
}

/* Latency first: a lone flow takes L + size / C; a flow with no arc ends at once. */
static void test_latency_and_no_arc(void)
{
	const int64_t indptr[] = {0, 1, 1}, arc[] = {0};
	const double weight[] = {1}, capacity[] = {4};
	const double size[] = {8, 8}, latency[] = {0.5, 0};
	struct out o;
	int rc = run(2, 1, indptr, arc, weight, capacity, size, latency, &o);

	EXPECT(rc == 0, "rc %d: %s", rc, o.err);
	EXPECT(o.start[0] == 0.5 && o.finish[0] == 2.5, "flow 0: %g to %g", o.start[0],
	       o.finish[0]);
	EXPECT(o.finish[1] == 0.0, "flow 1 (no arc) ends at %g", o.finish[1]);
}

/* Bad input is refused with a message, nothing written past the arrays. */
static void test_bad_input(void)
{
	const int64_t indptr[] = {0, 1}, bad_arc[] = {3}, arc[] = {0};
	const double weight[] = {1}, half[] = {0.5}, capacity[] = {4};
	const double size[] = {8}, latency[] = {0}, nan_size[] = {NAN};
	struct out o;

	EXPECT(run(1, 1, indptr, bad_arc, weight, capacity, size, latency, &o) ==
		       SDNMPI_SIM_EINPUT && strstr(o.err, "out of range"),
	       "arc out of range: %s", o.err);
	EXPECT(run(1, 1, indptr, arc, half, capacity, size, latency, &o) == SDNMPI_SIM_EINPUT &&
		       strstr(o.err, "integer"),
	       "fractional weight: %s", o.err);
	EXPECT(run(1, 1, indptr, arc, weight, capacity, nan_size, latency, &o) ==
		       SDNMPI_SIM_EINPUT,
	       "NaN size: %s", o.err);
}

int main(void)
{
	test_two_flows();
	test_latency_and_no_arc();
	test_bad_input();
	if (failures)
		fprintf(stderr, "test_phase: %d failure(s)\n", failures);
	else
		printf("test_phase: all passed\n");
	return failures ? 1 : 0;
}
