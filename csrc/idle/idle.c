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
 * same schedule.  A program without UCX never calls it.
 *
 * A fixed sleep delays a rank's answer to its peer's rendezvous request, and
 * that decides whether an exchange of two large messages runs both ways at
 * once: with UCX over TCP the first answer to go out is queued behind the data
 * it releases.  Measured (2026-11-29, MPICH 4.0, UCX 1.13, two hosts at 10
 * Mbit/s, 1 MiB each way, runs of 6 or 12 exchanges): spinning ranks ran 53
 * and 83 % of the exchanges both ways at once (two runs), ranks sleeping on
 * this schedule 9 % (seven runs, none in five of them), ranks waiting on the
 * descriptor as below 56 % (seven runs, 15-97 %).  So the library also interposes ucp_init_version() to ask for UCX's wake-up
 * feature, and an idle pass of a worker arms it and waits on its event
 * descriptor, for at most the schedule's sleep: a message wakes the rank at
 * once, as a spinning rank would see it, without the spinning.  A worker
 * without a descriptor (or SDNMPI_IDLE_WAKE=0) sleeps as before.
 * Nothing else is intercepted.  Parsing is in idle_parse.c so that tests can
 * call it without the interposition.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <stdint.h>
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

static int wake = 1; /* UCX workers wait on their event descriptor */

static void configure(void)
{
	const char *w = getenv("SDNMPI_IDLE_WAKE");

	if (sdn_idle_parse(getenv("SDNMPI_IDLE_US"), &cfg) != 0)
		sdn_idle_parse(NULL, &cfg); /* a bad value: the defaults, never a crash */
	sleep_ns = cfg.first_ns;
	wake = cfg.first_ns != 0 && !(w != NULL && strcmp(w, "0") == 0);
	configured = 1;
}

/* One idle pass: sleep on the schedule (the caller checked cfg.first_ns), or
 * with fd >= 0 wait on that descriptor for at most as long (an event on it
 * ends the wait at once). */
static void nap_once(int fd)
{
	struct timespec now;
	struct timespec nap;
	struct pollfd pfd;

	clock_gettime(CLOCK_MONOTONIC, &now);
	sleep_ns = sdn_idle_next(&cfg, sleep_ns, ns_between(&last_return, &now));
	nap.tv_sec = 0;
	nap.tv_nsec = sleep_ns;
	if (fd >= 0) {
		pfd.fd = fd;
		pfd.events = POLLIN;
		pfd.revents = 0;
		ppoll(&pfd, 1, &nap, NULL);
	} else {
		nanosleep(&nap, NULL);
	}
	clock_gettime(CLOCK_MONOTONIC, &last_return);
}

__attribute__((visibility("default"))) int sched_yield(void)
{
	if (!configured)
		configure();
	if (cfg.first_ns == 0)
		return (int)syscall(SYS_sched_yield);
	nap_once(-1);
	return 0;
}

/* UCX's prototypes (ucp/api/ucp.h), with handles as opaque pointers and
 * ucs_status_t as int (an enum): this library needs no UCX headers. */
unsigned ucp_worker_progress(void *worker);
int ucp_init_version(unsigned api_major_version, unsigned api_minor_version, const void *params,
		     const void *config, void **context_p);
typedef unsigned (*progress_fn)(void *worker);
typedef int (*init_fn)(unsigned, unsigned, const void *, const void *, void **);
typedef int (*efd_fn)(void *worker, int *fd);
typedef int (*arm_fn)(void *worker);

#define UCS_OK 0
#define UCS_ERR_BUSY (-4)
#define UCP_PARAM_FIELD_FEATURES 1ULL /* UCS_BIT(0) */
#define UCP_FEATURE_WAKEUP (1ULL << 4)

/* The start of ucp_params_t: its field mask, then its features. */
struct ucp_params_head {
	unsigned long long field_mask;
	unsigned long long features;
};

/* A UCX function found behind this library, or NULL. */
static void *ucx_symbol(const char *name)
{
	void *sym = dlsym(RTLD_NEXT, name);

	if (sym == NULL) {
		/* a UCX loaded by dlopen() with RTLD_LOCAL (an MCA component) */
		void *ucp = dlopen("libucp.so.0", RTLD_LAZY | RTLD_NOLOAD);

		sym = ucp != NULL ? dlsym(ucp, name) : NULL;
	}
	return sym;
}

/* A UCX function found behind this library; only a caller linked against UCX
 * calls the wrappers that need one, so a missing one is said once and fatal. */
static void *required_symbol(const char *name)
{
	void *sym = ucx_symbol(name);

	if (sym == NULL) {
		fprintf(stderr, "libsdnmpi_idle: %s not found: %s\n", name, dlerror());
		abort();
	}
	return sym;
}

/* UCX's ucp_worker_progress(ucp_worker_h), found behind this library. */
static progress_fn next_progress(void)
{
	static progress_fn next;

	if (next == NULL) {
		void *sym = required_symbol("ucp_worker_progress");

		/* POSIX guarantees dlsym's object pointer converts to a function */
		_Static_assert(sizeof(sym) == sizeof(next), "function pointer size");
		memcpy(&next, &sym, sizeof(next));
	}
	return next;
}

/* The context asks for wake-up support, so that an idle pass can wait on the
 * worker's event descriptor (below) rather than for a fixed time. */
__attribute__((visibility("default"))) int ucp_init_version(unsigned api_major_version,
							   unsigned api_minor_version,
							   const void *params, const void *config,
							   void **context_p)
{
	static init_fn next;

	if (next == NULL) {
		void *sym = required_symbol("ucp_init_version");

		memcpy(&next, &sym, sizeof(next));
	}
	if (!configured)
		configure();
	if (wake && params != NULL) {
		/* the caller's own (non-const) parameters: MPICH passes a local */
		struct ucp_params_head *head = (struct ucp_params_head *)(uintptr_t)params;

		if (head->field_mask & UCP_PARAM_FIELD_FEATURES)
			head->features |= UCP_FEATURE_WAKEUP;
	}
	return next(api_major_version, api_minor_version, params, config, context_p);
}

/* The worker's event descriptor, armed: >= 0 to wait on, -1 when there are
 * events to progress at once, -2 when the worker has no descriptor. */
static int armed_fd(void *worker)
{
	static void *known;
	static int fd = -2;
	static efd_fn get_efd;
	static arm_fn arm;
	void *sym;
	int status;

	if (worker != known) {
		known = worker;
		fd = -2;
		if (get_efd == NULL && (sym = ucx_symbol("ucp_worker_get_efd")) != NULL)
			memcpy(&get_efd, &sym, sizeof(get_efd));
		if (arm == NULL && (sym = ucx_symbol("ucp_worker_arm")) != NULL)
			memcpy(&arm, &sym, sizeof(arm));
		if (get_efd != NULL && arm != NULL && get_efd(worker, &fd) != UCS_OK)
			fd = -2;
	}
	if (fd < 0)
		return -2;
	status = arm(worker);
	if (status == UCS_ERR_BUSY)
		return -1;
	return status == UCS_OK ? fd : -2;
}

/* One idle pass of a UCX worker: wait on its descriptor for at most the
 * schedule's sleep (a message wakes it at once), else sleep. */
static void wait_worker(void *worker)
{
	int fd = wake ? armed_fd(worker) : -2;

	if (fd != -1) /* -1: events to progress at once */
		nap_once(fd);
}

__attribute__((visibility("default"))) unsigned ucp_worker_progress(void *worker)
{
	unsigned events = next_progress()(worker);

	if (events == 0) {
		if (!configured)
			configure();
		if (cfg.first_ns != 0)
			wait_worker(worker);
	}
	return events;
}
