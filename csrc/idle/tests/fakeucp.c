/* A stand-in for UCX's libucp in tests: ucp_worker_progress() returns the
 * number its "worker" points to, so a test controls whether a pass found
 * events, and sees that libsdnmpi_idle passes the worker through.
 *
 * The wake-up calls are steered by the environment:
 *   FAKEUCP_EFD  "none": ucp_worker_get_efd fails (a context without wake-up);
 *                "ready": its descriptor is a pipe with a byte in it (an event);
 *                otherwise a pipe that stays empty (nothing arrives)
 *   FAKEUCP_ARM  "busy": ucp_worker_arm says events are pending; else it arms
 * ucp_init_version() stores the features it was given in *context_p.
 *
 * It is also the MPI library of tests/finisher.c: its MPI_Finalize() finishes as
 * MPICH 4.0's does over UCX (close the endpoint, progress until that close
 * completed, release it, then a "PMI barrier" that makes no UCX call, then
 * destroy the worker).  The barrier ends once the worker was progressed 50 times
 * (a peer's close answered) or after about 1 s; meanwhile the rank asks every
 * millisecond whether its request completed, a UCX call of its own.  Every UCX call here marks the
 * time it runs, so that two at once, or a call after the worker was destroyed,
 * are counted (fakeucp_report). */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

unsigned ucp_worker_progress(void *worker);
int ucp_worker_get_efd(void *worker, int *fd);
int ucp_worker_arm(void *worker);
int ucp_init_version(unsigned api_major_version, unsigned api_minor_version, const void *params,
		     const void *config, void **context_p);
void *ucp_disconnect_nb(void *ep);
int ucp_request_is_completed(void *request);
void ucp_request_release(void *request);
void ucp_worker_destroy(void *worker);
int MPI_Finalize(void);
void fakeucp_report(void);

static atomic_int in_ucx;
static atomic_int overlaps;
static atomic_int after_destroy;
static atomic_int destroyed;
static atomic_long passes;
static void *the_worker;
static long closed_at = -1; /* passes when the endpoint was closed */
static long answered = -1;  /* passes during the barrier */

/* A UCX call runs: count another one at the same time, or one after destroy. */
static void enter(void)
{
	struct timespec busy = {0, 100000}; /* long enough for another call to meet it */

	if (atomic_exchange(&in_ucx, 1))
		atomic_fetch_add(&overlaps, 1);
	if (atomic_load(&destroyed))
		atomic_fetch_add(&after_destroy, 1);
	nanosleep(&busy, NULL);
}

static void leave(void)
{
	atomic_store(&in_ucx, 0);
}

unsigned ucp_worker_progress(void *worker)
{
	unsigned events;

	if (!atomic_load(&destroyed) && closed_at < 0) {
		the_worker = worker;
		return *(const unsigned *)worker; /* the plain stand-in (progresser) */
	}
	enter();
	atomic_fetch_add(&passes, 1);
	events = *(const unsigned *)worker;
	leave();
	return events;
}

void *ucp_disconnect_nb(void *ep)
{
	enter();
	closed_at = atomic_load(&passes);
	leave();
	return ep;
}

int ucp_request_is_completed(void *request)
{
	int done;

	(void)request;
	enter();
	done = atomic_load(&passes) > closed_at;
	leave();
	return done;
}

void ucp_request_release(void *request)
{
	(void)request;
	enter();
	leave();
}

void ucp_worker_destroy(void *worker)
{
	(void)worker;
	enter();
	atomic_store(&destroyed, 1);
	leave();
}

int MPI_Finalize(void)
{
	static int ep;
	void *request = ucp_disconnect_nb(&ep);
	long before;

	while (!ucp_request_is_completed(request))
		ucp_worker_progress(the_worker);
	ucp_request_release(request);
	before = atomic_load(&passes);
	for (int i = 0; i < 1000 && atomic_load(&passes) - before < 50; i++) {
		struct timespec tick = {0, 1000000};

		nanosleep(&tick, NULL);
		(void)ucp_request_is_completed(request);
	}
	answered = atomic_load(&passes) - before;
	ucp_worker_destroy(the_worker);
	return 0;
}

void fakeucp_report(void)
{
	printf("answered %ld overlaps %d after_destroy %d\n", answered, atomic_load(&overlaps),
	       atomic_load(&after_destroy));
}

static int env_is(const char *name, const char *value)
{
	const char *v = getenv(name);

	return v != NULL && strcmp(v, value) == 0;
}

int ucp_worker_get_efd(void *worker, int *fd)
{
	int p[2];

	(void)worker;
	if (env_is("FAKEUCP_EFD", "none") || pipe(p) != 0)
		return -2; /* UCS_ERR_IO_ERROR */
	if (env_is("FAKEUCP_EFD", "ready") && write(p[1], "x", 1) != 1)
		return -2;
	*fd = p[0];
	return 0;
}

int ucp_worker_arm(void *worker)
{
	(void)worker;
	return env_is("FAKEUCP_ARM", "busy") ? -4 /* UCS_ERR_BUSY */ : 0;
}

int ucp_init_version(unsigned api_major_version, unsigned api_minor_version, const void *params,
		     const void *config, void **context_p)
{
	const uint64_t *head = params;

	(void)api_major_version;
	(void)api_minor_version;
	(void)config;
	*context_p = (void *)(uintptr_t)head[1];
	return 0;
}
