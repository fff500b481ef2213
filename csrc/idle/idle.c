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
 *
 * A finishing rank keeps answering its peers.  MPICH 4.0's MPI_Finalize
 * (Debian 12's) closes its UCX endpoints with ucp_disconnect_nb(), progresses
 * until its own closes complete, and then waits in a PMI barrier without
 * progressing UCX.  A peer whose close still needs an answer from that rank
 * then waits for ever: with UCX over TCP across the emulator's namespaces,
 * 6 of 8 two-rank runs of `sdnmpi-bench bw` (64 KiB) hung so (2026-11-29;
 * backtraces: one rank reading its PMI socket, the other in
 * ucp_worker_progress under PMPI_Finalize).  MPICH removed that barrier
 * upstream in July 2023 (pmodels/mpich#6596).  So the library wraps
 * MPI_Finalize to know that a rank is finishing, and once such a rank has
 * closed an endpoint, a thread of its own progresses the rank's worker
 * whenever the rank has not done so for KEEP_QUIET_NS (it has left its
 * progress loop), until the rank destroys the worker or releases its address.
 * The thread and the rank's own calls of the UCX functions a finishing rank
 * uses (progress, closing, completing and releasing requests) take one lock,
 * so the worker is never used by two threads at once.  SDNMPI_IDLE_KEEP=0
 * turns it off.  Open MPI ranks (TCP BTL) never reach it.
 *
 * Nothing else is intercepted.  Parsing is in idle_parse.c so that tests can
 * call it without the interposition.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
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
static int keep = 1; /* a finishing rank's worker keeps being progressed */

static void configure(void)
{
	const char *w = getenv("SDNMPI_IDLE_WAKE");
	const char *k = getenv("SDNMPI_IDLE_KEEP");

	if (sdn_idle_parse(getenv("SDNMPI_IDLE_US"), &cfg) != 0)
		sdn_idle_parse(NULL, &cfg); /* a bad value: the defaults, never a crash */
	sleep_ns = cfg.first_ns;
	wake = cfg.first_ns != 0 && !(w != NULL && strcmp(w, "0") == 0);
	keep = !(k != NULL && strcmp(k, "0") == 0);
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
void *ucp_disconnect_nb(void *ep);
void *ucp_ep_close_nbx(void *ep, const void *param);
int ucp_request_is_completed(void *request);
void ucp_request_release(void *request);
void ucp_request_free(void *request);
void ucp_worker_release_address(void *worker, void *address);
void ucp_worker_destroy(void *worker);
int MPI_Finalize(void);
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

/* Store the function NAME found behind this library in *fn (a function pointer
 * of SIZE bytes). */
static void resolve(void *fn, size_t size, const char *name)
{
	void *sym = required_symbol(name);

	/* POSIX guarantees dlsym's object pointer converts to a function */
	_Static_assert(sizeof(sym) == sizeof(progress_fn), "function pointer size");
	memcpy(fn, &sym, size);
}

/* UCX's ucp_worker_progress(ucp_worker_h), found behind this library. */
static progress_fn next_progress(void)
{
	static progress_fn next;

	if (next == NULL)
		resolve(&next, sizeof(next), "ucp_worker_progress");
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

	if (next == NULL)
		resolve(&next, sizeof(next), "ucp_init_version");
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

/* -- A finishing rank keeps answering its peers (see the top) ------------- */

#define KEEP_QUIET_NS 10000000L /* the rank has not progressed for 10 ms */
#define KEEP_PASS_NS 1000000L	/* the thread looks every 1 ms */

static pthread_mutex_t ucx_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static int finishing;	  /* MPI_Finalize was entered */
static int locking;	  /* the thread runs: the rank's UCX calls take ucx_lock */
static int depth;	  /* the rank's wrapped UCX calls in progress (UCX may nest them) */
static void *last_worker; /* the worker the rank progressed last */
static pthread_t keeper;
static atomic_int keeper_stop;
static atomic_long last_progress_ns;

static long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long)t.tv_sec * 1000000000L + t.tv_nsec;
}

/* Around each of the rank's UCX calls: 1 if it took the lock. */
static int hold(void)
{
	depth++;
	if (!locking)
		return 0;
	pthread_mutex_lock(&ucx_lock);
	return 1;
}

static void unhold(int held)
{
	if (held)
		pthread_mutex_unlock(&ucx_lock);
	depth--;
}

static void *keep_answering(void *worker)
{
	struct timespec pass = {0, KEEP_PASS_NS};

	while (!atomic_load(&keeper_stop)) {
		nanosleep(&pass, NULL);
		if (now_ns() - atomic_load(&last_progress_ns) < KEEP_QUIET_NS)
			continue; /* the rank is still in its own progress loop */
		pthread_mutex_lock(&ucx_lock);
		if (!atomic_load(&keeper_stop))
			next_progress()(worker);
		pthread_mutex_unlock(&ucx_lock);
	}
	return NULL;
}

/* After a finishing rank closed an endpoint (outside any other UCX call). */
static void start_keeper(void)
{
	if (!configured)
		configure();
	if (!keep || !finishing || locking || depth != 0 || last_worker == NULL)
		return;
	atomic_store(&keeper_stop, 0);
	atomic_store(&last_progress_ns, now_ns());
	locking = 1;
	if (pthread_create(&keeper, NULL, keep_answering, last_worker) != 0)
		locking = 0; /* no thread: the rank finishes as it would without us */
}

/* Before the worker goes away. */
static void stop_keeper(void)
{
	if (!locking)
		return;
	atomic_store(&keeper_stop, 1);
	pthread_join(keeper, NULL);
	locking = 0;
}

__attribute__((visibility("default"))) int MPI_Finalize(void)
{
	static int (*next)(void);

	if (next == NULL)
		resolve(&next, sizeof(next), "MPI_Finalize");
	finishing = 1;
	return next();
}

__attribute__((visibility("default"))) void *ucp_disconnect_nb(void *ep)
{
	static void *(*next)(void *);
	void *request;
	int held;

	if (next == NULL)
		resolve(&next, sizeof(next), "ucp_disconnect_nb");
	held = hold();
	request = next(ep);
	unhold(held);
	start_keeper();
	return request;
}

__attribute__((visibility("default"))) void *ucp_ep_close_nbx(void *ep, const void *param)
{
	static void *(*next)(void *, const void *);
	void *request;
	int held;

	if (next == NULL)
		resolve(&next, sizeof(next), "ucp_ep_close_nbx");
	held = hold();
	request = next(ep, param);
	unhold(held);
	start_keeper();
	return request;
}

__attribute__((visibility("default"))) int ucp_request_is_completed(void *request)
{
	static int (*next)(void *);
	int done;
	int held;

	if (next == NULL)
		resolve(&next, sizeof(next), "ucp_request_is_completed");
	held = hold();
	done = next(request);
	unhold(held);
	return done;
}

/* A request handed back to UCX (NAME: ucp_request_release or ucp_request_free),
 * under the lock. */
static void give_back(void (**next)(void *), const char *name, void *request)
{
	int held;

	if (*next == NULL)
		resolve(next, sizeof(*next), name);
	held = hold();
	(*next)(request);
	unhold(held);
}

__attribute__((visibility("default"))) void ucp_request_release(void *request)
{
	static void (*next)(void *);

	give_back(&next, "ucp_request_release", request);
}

__attribute__((visibility("default"))) void ucp_request_free(void *request)
{
	static void (*next)(void *);

	give_back(&next, "ucp_request_free", request);
}

__attribute__((visibility("default"))) void ucp_worker_release_address(void *worker,
								      void *address)
{
	static void (*next)(void *, void *);

	if (next == NULL)
		resolve(&next, sizeof(next), "ucp_worker_release_address");
	stop_keeper();
	next(worker, address);
}

__attribute__((visibility("default"))) void ucp_worker_destroy(void *worker)
{
	static void (*next)(void *);

	if (next == NULL)
		resolve(&next, sizeof(next), "ucp_worker_destroy");
	stop_keeper();
	if (worker == last_worker)
		last_worker = NULL;
	next(worker);
}

/* One idle pass of a UCX worker: wait on its descriptor for at most the
 * schedule's sleep (a message wakes it at once), else sleep. */
static void wait_worker(void *worker)
{
	int fd = -2;

	if (wake) {
		int held = hold();

		fd = armed_fd(worker);
		unhold(held);
	}
	if (fd != -1) /* -1: events to progress at once */
		nap_once(fd);
}

__attribute__((visibility("default"))) unsigned ucp_worker_progress(void *worker)
{
	int held = hold();
	unsigned events = next_progress()(worker);

	last_worker = worker;
	if (finishing)
		atomic_store(&last_progress_ns, now_ns());
	unhold(held);
	if (events == 0) {
		if (!configured)
			configure();
		if (cfg.first_ns != 0)
			wait_worker(worker);
	}
	return events;
}
