/* A stand-in for UCX's libucp in tests: ucp_worker_progress() returns the
 * number its "worker" points to, so a test controls whether a pass found
 * events, and sees that libsdnmpi_idle passes the worker through.
 *
 * The wake-up calls are steered by the environment:
 *   FAKEUCP_EFD  "none": ucp_worker_get_efd fails (a context without wake-up);
 *                "ready": its descriptor is a pipe with a byte in it (an event);
 *                otherwise a pipe that stays empty (nothing arrives)
 *   FAKEUCP_ARM  "busy": ucp_worker_arm says events are pending; else it arms
 * ucp_init_version() stores the features it was given in *context_p. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

unsigned ucp_worker_progress(void *worker);
int ucp_worker_get_efd(void *worker, int *fd);
int ucp_worker_arm(void *worker);
int ucp_init_version(unsigned api_major_version, unsigned api_minor_version, const void *params,
		     const void *config, void **context_p);

unsigned ucp_worker_progress(void *worker)
{
	return *(const unsigned *)worker;
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
