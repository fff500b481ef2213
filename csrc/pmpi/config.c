/* Configuration parsing (pure: no MPI, no global state). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
	const char *name;
	unsigned bit;
} mode_names[] = {
	{"profile", SDN_MODE_PROFILE},
	{"register", SDN_MODE_REGISTER},
	{"push", SDN_MODE_PUSH},
	{"tag", SDN_MODE_TAG},
	{"bcast", SDN_MODE_BCAST},
};

#define N_MODES (sizeof(mode_names) / sizeof(mode_names[0]))

__attribute__((format(printf, 3, 4))) static void reportf(sdn_report_fn report, void *ctx,
							  const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (!report)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	report(ctx, msg);
}

void sdn_config_defaults(struct sdn_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->modes = SDN_MODE_PROFILE;
	strcpy(cfg->trace_dir, ".");
	strcpy(cfg->agent_socket, "/run/sdnmpi/agent.sock");
	cfg->push_timeout_ms = 2000;
	cfg->agent_timeout_ms = 30000;
	/* 64 KiB: below it the library's own Bcast (a binomial tree of eager messages)
	 * costs a few round trips that the replicated path's setup (a status broadcast
	 * after the UDP phase and a poll loop) would not win back; from 64 KiB on the
	 * data dominates and the root sends it once instead of log2(p) times. */
	cfg->bcast_min_bytes = 65536;
	cfg->bcast_min_rate = 1000000;
	cfg->bcast_timeout_ms = 1000;
	cfg->bcast_open_timeout_ms = 10000;
	cfg->bcast_window = 128;
}

static int parse_timeout(const char *key, const char *value, int *ms, sdn_report_fn report,
			 void *ctx)
{
	char *end = NULL;
	long v;

	errno = 0;
	v = strtol(value, &end, 10);
	if (errno || end == value || *end || v < 1 || v > 600000) {
		reportf(report, ctx, "%s '%s' is not 1..600000; ignored", key, value);
		return 1;
	}
	*ms = (int)v;
	return 0;
}

static int parse_slot(const char *value, int *slot, sdn_report_fn report, void *ctx)
{
	char *end = NULL;
	long v;

	errno = 0;
	v = strtol(value, &end, 10);
	if (errno || end == value || *end || v < 1 || v > 127) {
		reportf(report, ctx, "SDNMPI_JOB_SLOT '%s' is not 1..127; ignored", value);
		return 1;
	}
	*slot = (int)v;
	return 0;
}

static int parse_duplex(const char *value, int *duplex, sdn_report_fn report, void *ctx)
{
	if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0) {
		reportf(report, ctx, "SDNMPI_DUPLEX '%s' is not 0 or 1; ignored", value);
		return 1;
	}
	*duplex = value[0] == '1';
	return 0;
}

static int copy_value(char *dst, size_t len, const char *key, const char *value,
		      sdn_report_fn report, void *ctx)
{
	if (strlen(value) >= len) {
		reportf(report, ctx, "value of %s too long; ignored", key);
		return 1;
	}
	strcpy(dst, value);
	return 0;
}

static int parse_long(const char *key, const char *value, long long lo, long long hi,
		      long long *out, sdn_report_fn report, void *ctx)
{
	char *end = NULL;
	long long v;

	errno = 0;
	v = strtoll(value, &end, 10);
	if (errno || end == value || *end || v < lo || v > hi) {
		reportf(report, ctx, "%s '%s' is not %lld..%lld; ignored", key, value, lo, hi);
		return 1;
	}
	*out = v;
	return 0;
}

int sdn_config_parse_group(const char *text, unsigned *addr, unsigned *port)
{
	unsigned a, b, c, d, p;
	char tail;

	if (sscanf(text, "%u.%u.%u.%u:%u%c", &a, &b, &c, &d, &p, &tail) != 5)
		return -1;
	if (a != 239 || b > 255 || c > 255 || d > 255 || p < 1 || p > 65535)
		return -1;
	*addr = a << 24 | b << 16 | c << 8 | d;
	*port = p;
	return 0;
}

static int set_bcast(struct sdn_config *cfg, const char *key, const char *value,
		     sdn_report_fn report, void *ctx)
{
	long long v = 0;
	unsigned a, p;
	int bad;

	if (strcmp(key, "SDNMPI_BCAST_MIN_BYTES") == 0)
		return parse_long(key, value, 1, 1LL << 40, &cfg->bcast_min_bytes, report, ctx);
	if (strcmp(key, "SDNMPI_BCAST_MIN_RATE") == 0)
		return parse_long(key, value, 1000, 1000000000000LL, &cfg->bcast_min_rate, report,
				  ctx);
	if (strcmp(key, "SDNMPI_BCAST_GROUP") == 0) {
		if (*value && sdn_config_parse_group(value, &a, &p)) {
			reportf(report, ctx, "SDNMPI_BCAST_GROUP '%s' is not 239.a.b.c:port; ignored",
				value);
			return 1;
		}
		return copy_value(cfg->bcast_group, sizeof(cfg->bcast_group), key, value, report,
				  ctx);
	}
	if (strcmp(key, "SDNMPI_BCAST_TIMEOUT_MS") == 0 ||
	    strcmp(key, "SDNMPI_BCAST_OPEN_TIMEOUT_MS") == 0)
		bad = parse_long(key, value, 10, 600000, &v, report, ctx);
	else if (strcmp(key, "SDNMPI_BCAST_WINDOW") == 0)
		bad = parse_long(key, value, 1, 65536, &v, report, ctx);
	else
		bad = parse_long(key, value, 0, 1, &v, report, ctx); /* SDNMPI_BCAST_STATS */
	if (bad)
		return 1;
	if (strcmp(key, "SDNMPI_BCAST_TIMEOUT_MS") == 0)
		cfg->bcast_timeout_ms = (int)v;
	else if (strcmp(key, "SDNMPI_BCAST_OPEN_TIMEOUT_MS") == 0)
		cfg->bcast_open_timeout_ms = (int)v;
	else if (strcmp(key, "SDNMPI_BCAST_WINDOW") == 0)
		cfg->bcast_window = (int)v;
	else
		cfg->bcast_stats = (int)v;
	return 0;
}

static int mode_bit(const char *word, unsigned *bit)
{
	for (size_t i = 0; i < N_MODES; i++) {
		if (strcmp(word, mode_names[i].name) == 0) {
			*bit = mode_names[i].bit;
			return 0;
		}
	}
	return -1;
}

int sdn_config_parse_modes(const char *text, unsigned *modes, sdn_report_fn report, void *ctx)
{
	char buf[256], *save = NULL;
	int problems = 0;
	unsigned bits = 0, bit;

	if (strlen(text) >= sizeof(buf)) {
		reportf(report, ctx, "SDNMPI_MODE too long; ignored");
		return 1;
	}
	strcpy(buf, text);
	if (strcmp(buf, "off") == 0 || strcmp(buf, "none") == 0) {
		*modes = 0;
		return 0;
	}
	for (char *w = strtok_r(buf, ", \t", &save); w; w = strtok_r(NULL, ", \t", &save)) {
		if (mode_bit(w, &bit) == 0) {
			bits |= bit;
		} else {
			reportf(report, ctx,
				"unknown mode '%s' in SDNMPI_MODE ignored (valid: profile, register, push, tag, bcast)",
				w);
			problems++;
		}
	}
	*modes = bits;
	return problems;
}

int sdn_config_set(struct sdn_config *cfg, const char *key, const char *value,
		   sdn_report_fn report, void *ctx)
{
	if (strcmp(key, "SDNMPI_MODE") == 0)
		return sdn_config_parse_modes(value, &cfg->modes, report, ctx);
	if (strcmp(key, "SDNMPI_TRACE_DIR") == 0) {
		if (!*value) {
			reportf(report, ctx, "empty SDNMPI_TRACE_DIR ignored");
			return 1;
		}
		return copy_value(cfg->trace_dir, sizeof(cfg->trace_dir), key, value, report, ctx);
	}
	if (strcmp(key, "SDNMPI_JOB") == 0)
		return copy_value(cfg->job, sizeof(cfg->job), key, value, report, ctx);
	if (strcmp(key, "SDNMPI_AGENT_SOCKET") == 0)
		return copy_value(cfg->agent_socket, sizeof(cfg->agent_socket), key, value, report,
				  ctx);
	if (strcmp(key, "SDNMPI_JOB_SLOT") == 0)
		return parse_slot(value, &cfg->job_slot, report, ctx);
	if (strcmp(key, "SDNMPI_PUSH_TIMEOUT_MS") == 0)
		return parse_timeout(key, value, &cfg->push_timeout_ms, report, ctx);
	if (strcmp(key, "SDNMPI_AGENT_TIMEOUT_MS") == 0)
		return parse_timeout(key, value, &cfg->agent_timeout_ms, report, ctx);
	if (strcmp(key, "SDNMPI_DUPLEX") == 0)
		return parse_duplex(value, &cfg->duplex, report, ctx);
	if (strncmp(key, "SDNMPI_BCAST_", 13) == 0 &&
	    (!strcmp(key + 13, "MIN_BYTES") || !strcmp(key + 13, "MIN_RATE") ||
	     !strcmp(key + 13, "TIMEOUT_MS") ||
	     !strcmp(key + 13, "OPEN_TIMEOUT_MS") || !strcmp(key + 13, "WINDOW") ||
	     !strcmp(key + 13, "GROUP") || !strcmp(key + 13, "STATS")))
		return set_bcast(cfg, key, value, report, ctx);
	reportf(report, ctx,
		"unknown key '%s' ignored (valid: SDNMPI_MODE, SDNMPI_TRACE_DIR, SDNMPI_JOB, "
		"SDNMPI_AGENT_SOCKET, SDNMPI_JOB_SLOT, SDNMPI_PUSH_TIMEOUT_MS, "
		"SDNMPI_AGENT_TIMEOUT_MS, SDNMPI_DUPLEX, SDNMPI_BCAST_MIN_BYTES, "
		"SDNMPI_BCAST_MIN_RATE, SDNMPI_BCAST_TIMEOUT_MS, SDNMPI_BCAST_OPEN_TIMEOUT_MS, "
		"SDNMPI_BCAST_WINDOW, "
		"SDNMPI_BCAST_GROUP, "
		"SDNMPI_BCAST_STATS)",
		key);
	return 1;
}

static char *trim(char *s)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

static int load_line(struct sdn_config *cfg, char *line, const char *where,
		     sdn_report_fn report, void *ctx)
{
	char *eq, *s = trim(line);

	if (!*s || *s == '#')
		return 0;
	eq = strchr(s, '=');
	if (!eq) {
		reportf(report, ctx, "%s: expected KEY=VALUE, got '%s'", where, s);
		return 1;
	}
	*eq = '\0';
	return sdn_config_set(cfg, trim(s), trim(eq + 1), report, ctx);
}

int sdn_config_load_file(struct sdn_config *cfg, const char *path, sdn_report_fn report,
			 void *ctx)
{
	char line[SDN_PATH_MAX + 64], where[SDN_PATH_MAX + 32];
	int problems = 0, lineno = 0;
	FILE *f = fopen(path, "r");

	if (!f) {
		reportf(report, ctx, "cannot read SDNMPI_CONFIG %s: %s", path, strerror(errno));
		return 1;
	}
	while (fgets(line, sizeof(line), f)) {
		snprintf(where, sizeof(where), "%s:%d", path, ++lineno);
		problems += load_line(cfg, line, where, report, ctx);
	}
	fclose(f);
	return problems;
}

int sdn_config_load(struct sdn_config *cfg, sdn_getenv_fn get, sdn_report_fn report, void *ctx)
{
	static const char *const keys[] = {"SDNMPI_MODE", "SDNMPI_TRACE_DIR", "SDNMPI_JOB",
					   "SDNMPI_AGENT_SOCKET", "SDNMPI_JOB_SLOT",
					   "SDNMPI_PUSH_TIMEOUT_MS", "SDNMPI_AGENT_TIMEOUT_MS",
					   "SDNMPI_DUPLEX", "SDNMPI_BCAST_MIN_BYTES",
					   "SDNMPI_BCAST_MIN_RATE",
					   "SDNMPI_BCAST_TIMEOUT_MS", "SDNMPI_BCAST_OPEN_TIMEOUT_MS",
					   "SDNMPI_BCAST_WINDOW",
					   "SDNMPI_BCAST_GROUP", "SDNMPI_BCAST_STATS"};
	const char *path = get("SDNMPI_CONFIG");
	int problems = 0;

	sdn_config_defaults(cfg);
	if (path && *path)
		problems += sdn_config_load_file(cfg, path, report, ctx);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const char *v = get(keys[i]);
		if (v)
			problems += sdn_config_set(cfg, keys[i], v, report, ctx);
	}
	return problems;
}

void sdn_config_modes_str(unsigned modes, char *buf, size_t len)
{
	size_t used = 0;

	if (len)
		buf[0] = '\0';
	for (size_t i = 0; i < N_MODES; i++) {
		if (!(modes & mode_names[i].bit))
			continue;
		int w = snprintf(buf + used, len - used, "%s%s", used ? "," : "", mode_names[i].name);
		if (w < 0 || (size_t)w >= len - used)
			return;
		used += (size_t)w;
	}
}
