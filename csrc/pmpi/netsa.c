// SPDX-License-Identifier: MIT
/*
 * NetSA's net_set_pattern() for unmodified applications that link or preload
 * libsdnmpi.so (csrc/include/sdnmpi/netsa.h).
 *
 * The manager speaks gRPC, which a C library preloaded into MPI programs should
 * not carry, so the call runs the manager's own client: `sdnmpi pattern
 * activate PATTERN` ($SDNMPI_CLI, or `sdnmpi` on the PATH), as the calling user,
 * with the caller's environment minus LD_PRELOAD (the child is not an MPI
 * program). The manager authorizes by that uid: a job can only change its own
 * routes. Rare by design (once per application phase), so a process start is
 * an acceptable cost.
 */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <sdnmpi/netsa.h>

#define SDN_EXPORT __attribute__((visibility("default")))

extern char **environ;

/* environ without LD_PRELOAD; NULL if out of memory. */
static char **child_env(void)
{
	size_t n = 0, k = 0;
	char **out;

	while (environ[n])
		n++;
	out = calloc(n + 1, sizeof(*out));
	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
			out[k++] = environ[i];
	return out;
}

static int valid_name(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 128)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z') &&
		    !(s[i] >= '0' && s[i] <= '9') && !strchr("_.:-", s[i]))
			return 0;
	return 1;
}

SDN_EXPORT int net_set_pattern(const char *pattern_id)
{
	const char *cli = getenv("SDNMPI_CLI");
	char *argv[5];
	char **env;
	pid_t pid;
	int status, rc;

	if (!valid_name(pattern_id)) {
		fprintf(stderr, "sdnmpi: net_set_pattern: bad pattern name\n");
		return 0;
	}
	if (!cli || !*cli)
		cli = "sdnmpi";
	argv[0] = (char *)cli;
	argv[1] = (char *)"pattern";
	argv[2] = (char *)"activate";
	argv[3] = (char *)pattern_id;
	argv[4] = NULL;
	env = child_env();
	if (!env) {
		fprintf(stderr, "sdnmpi: net_set_pattern: out of memory\n");
		return 0;
	}
	rc = posix_spawnp(&pid, cli, NULL, NULL, argv, env);
	free(env);
	if (rc != 0) {
		fprintf(stderr, "sdnmpi: net_set_pattern: cannot run %s: %s\n", cli, strerror(rc));
		return 0;
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return 0;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
