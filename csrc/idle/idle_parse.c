/* libsdnmpi_idle.so: parsing SDNMPI_IDLE_US and the sleep schedule (no libc
 * interposition here, so the unit tests link it directly). */
#include <errno.h>
#include <stdlib.h>

#include "idle.h"

static int parse_us(const char *text, char **end, long *out)
{
	long v;

	if (*text < '0' || *text > '9')
		return -1;
	errno = 0;
	v = strtol(text, end, 10);
	if (errno != 0 || v < 0 || v > SDN_IDLE_MAX_US)
		return -1;
	*out = v;
	return 0;
}

int sdn_idle_parse(const char *text, struct sdn_idle_cfg *cfg)
{
	long first = SDN_IDLE_DEFAULT_FIRST_US;
	long longest = SDN_IDLE_DEFAULT_LONGEST_US;
	char *end = NULL;

	cfg->first_ns = first * 1000L;
	cfg->longest_ns = longest * 1000L;
	if (text == NULL || *text == '\0')
		return 0;
	if (parse_us(text, &end, &first) != 0)
		return -1;
	longest = first;
	if (*end == ',' && parse_us(end + 1, &end, &longest) != 0)
		return -1;
	if (*end != '\0' || longest < first || (first == 0 && longest != 0))
		return -1;
	cfg->first_ns = first * 1000L;
	cfg->longest_ns = longest * 1000L;
	return 0;
}

long sdn_idle_next(const struct sdn_idle_cfg *cfg, long current_ns, long since_last_ns)
{
	if (since_last_ns < 0 || since_last_ns > 2 * current_ns + 200000L)
		return cfg->first_ns;
	if (current_ns >= cfg->longest_ns / 2)
		return cfg->longest_ns;
	return current_ns * 2;
}
