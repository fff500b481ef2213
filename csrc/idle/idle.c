/* libsdnmpi_idle.so: MPI ranks that wait for messages sleep instead of spinning.
 *
 * On the emulated cluster many MPI ranks share two cores with the userspace
 * switches.  Open MPI with mpi_yield_when_idle=1 calls sched_yield() whenever
 * a pass of its progress engine found nothing to do; a spinning rank that only
 * yields still competes for a core, so a rank that has just received data
 * waits for the scheduler to rotate through every other spinner (measured:
 * an MPI_Barrier of 16 ranks took 60 ms, four rounds of about 15 ms).  On a
 * real cluster each rank has a core of its own and sees its messages within
 * microseconds.
 *
 * Loaded with LD_PRELOAD, this library replaces sched_yield() with a short
 * sleep that doubles while the rank stays idle, from SDNMPI_IDLE_US's first
 * value up to its second ("50,200" by default, microseconds); a call that
 * comes long after the previous one means the rank did work in between, and
 * the sleep starts again from the first value.  Ranks then leave the cores to
 * whoever has work, and a message waits at most the longest sleep (0.2 ms:
 * a sixth of a 1500-byte frame's time at 10 Mbit/s).  "0" restores the plain
 * sched_yield().
 *
 * MPICH over UCX never yields: MPI_Wait loops over ucp_worker_progress(),
 * which returns how many events it processed.  The library therefore also
 * interposes ucp_worker_progress() (libmpich calls it through its PLT): a call
 * that processed nothing is a pass that found nothing to do, and sleeps on the
 * same schedule.  A program without UCX never calls it.  Nothing else is
 * intercepted.  Parsing is in idle_parse.c so that tests can call it without
 * the interposition.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "idle.h"

static struct sdn_idle_cfg cfg;
static int configured;
static long sleep_ns;
static struct timespec last_return;

static long ns_between(const struct timespec *a, const struct timespec *b)
{
	return (long)(b->tv_sec - a->tv_sec) * 1000000000L + (b->tv_nsec - a->tv_nsec);
}

static void configure(void)
{
	if (sdn_idle_parse(getenv("SDNMPI_IDLE_US"), &cfg) != 0)
		sdn_idle_parse(NULL, &cfg); /* a bad value: the defaults, never a crash */
	sleep_ns = cfg.first_ns;
	configured = 1;
}

/* One idle pass: sleep on the schedule (the caller checked cfg.first_ns). */
static void nap_once(void)
{
	struct timespec now;
	struct timespec nap;

	clock_gettime(CLOCK_MONOTONIC, &now);
	sleep_ns = sdn_idle_next(&cfg, sleep_ns, ns_between(&last_return, &now));
	nap.tv_sec = 0;
	nap.tv_nsec = sleep_ns;
	nanosleep(&nap, NULL);
	clock_gettime(CLOCK_MONOTONIC, &last_return);
}

__attribute__((visibility("default"))) int sched_yield(void)
{
	if (!configured)
		configure();
	if (cfg.first_ns == 0)
		return (int)syscall(SYS_sched_yield);
	nap_once();
	return 0;
}

/* UCX's prototype (ucp/api/ucp.h), with ucp_worker_h as an opaque pointer:
 * this library needs no UCX headers. */
unsigned ucp_worker_progress(void *worker);
typedef unsigned (*progress_fn)(void *worker);

/* UCX's ucp_worker_progress(ucp_worker_h), found behind this library. */
static progress_fn next_progress(void)
{
	static progress_fn next;
	void *sym;

	if (next == NULL) {
		sym = dlsym(RTLD_NEXT, "ucp_worker_progress");
		if (sym == NULL) {
			/* a UCX loaded by dlopen() with RTLD_LOCAL (an MCA component) */
			void *ucp = dlopen("libucp.so.0", RTLD_LAZY | RTLD_NOLOAD);

			sym = ucp != NULL ? dlsym(ucp, "ucp_worker_progress") : NULL;
		}
		if (sym == NULL) {
			/* only a caller linked against UCX gets here: say why, once */
			fprintf(stderr, "libsdnmpi_idle: ucp_worker_progress not found: %s\n",
				dlerror());
			abort();
		}
		/* POSIX guarantees dlsym's object pointer converts to a function */
		_Static_assert(sizeof(sym) == sizeof(next), "function pointer size");
		memcpy(&next, &sym, sizeof(next));
	}
	return next;
}

__attribute__((visibility("default"))) unsigned ucp_worker_progress(void *worker)
{
	unsigned events = next_progress()(worker);

	if (events == 0) {
		if (!configured)
			configure();
		if (cfg.first_ns != 0)
			nap_once();
	}
	return events;
}
