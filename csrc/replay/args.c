/* sdnmpi-replay: command line parsing.
 *
 * The table-driven parser of sdnmpi-bench (csrc/mpibench/args.c), cut down:
 * "--name value" and "--name=value", one positional FILE ("--" ends the
 * options), errors into a buffer so that only rank 0 prints them.
 */
#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum opt_id { OPT_ITERS, OPT_WARMUP, OPT_BARRIER, OPT_NO_BARRIER, OPT_POLL_US, OPT_MAX_MEMORY, OPT_JSON };

struct opt_def {
	const char *name;
	enum opt_id id;
	int takes_value;
};

static const struct opt_def OPTIONS[] = {
	{"--iters", OPT_ITERS, 1},
	{"--warmup", OPT_WARMUP, 1},
	{"--barrier", OPT_BARRIER, 0},
	{"--no-barrier", OPT_NO_BARRIER, 0},
	{"--poll-us", OPT_POLL_US, 1},
	{"--max-memory", OPT_MAX_MEMORY, 1},
	{"--json", OPT_JSON, 0},
};

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static int parse_long(const char *name, const char *text, long lo, long hi, long *out,
		      char *err, size_t errlen)
{
	char *end = NULL;
	long value;

	errno = 0;
	value = strtol(text, &end, 10);
	if (errno != 0 || end == text || *end != '\0' || !isdigit((unsigned char)text[0]))
		return fail(err, errlen, "%s: '%s' is not an integer", name, text);
	if (value < lo || value > hi)
		return fail(err, errlen, "%s: %ld is out of range [%ld, %ld]", name, value, lo, hi);
	*out = value;
	return 0;
}

static int suffix_shift(const char *end, unsigned *shift)
{
	static const char UNITS[] = "KMGT";

	if (*end == '\0') {
		*shift = 0;
		return 0;
	}
	for (unsigned i = 0; UNITS[i] != '\0'; i++) {
		if (end[1] == '\0' && toupper((unsigned char)end[0]) == UNITS[i]) {
			*shift = 10 * (i + 1);
			return 0;
		}
	}
	return -1;
}

/* Bytes, with an optional binary suffix K, M, G or T (e.g. 512M). */
static int parse_bytes(const char *name, const char *text, uint64_t *out, char *err,
		       size_t errlen)
{
	char *end = NULL;
	unsigned long long value;
	unsigned shift;

	errno = 0;
	if (!isdigit((unsigned char)text[0]))
		return fail(err, errlen, "%s: '%s' is not a size in bytes (e.g. 512M)", name, text);
	value = strtoull(text, &end, 10);
	if (errno != 0 || suffix_shift(end, &shift) != 0)
		return fail(err, errlen, "%s: '%s' is not a size in bytes (e.g. 512M)", name, text);
	if (value == 0 || value > (ARGS_MAX_MEMORY >> shift))
		return fail(err, errlen, "%s: %s is out of range [1, %llu] bytes", name, text,
			    (unsigned long long)ARGS_MAX_MEMORY);
	*out = (uint64_t)value << shift;
	return 0;
}

static int apply_option(enum opt_id id, const char *value, struct replay_opts *opts, char *err,
			size_t errlen)
{
	switch (id) {
	case OPT_ITERS:
		return parse_long("--iters", value, 1, ARGS_MAX_ITERS, &opts->iters, err, errlen);
	case OPT_WARMUP:
		return parse_long("--warmup", value, 0, ARGS_MAX_ITERS, &opts->warmup, err, errlen);
	case OPT_BARRIER:
		opts->barrier = true;
		return 0;
	case OPT_NO_BARRIER:
		opts->barrier = false;
		return 0;
	case OPT_POLL_US:
		return parse_long("--poll-us", value, 0, ARGS_MAX_POLL_US, &opts->poll_us, err,
				  errlen);
	case OPT_MAX_MEMORY:
		return parse_bytes("--max-memory", value, &opts->max_memory, err, errlen);
	case OPT_JSON:
		opts->json = true;
		return 0;
	}
	return fail(err, errlen, "internal error: option %d", (int)id);
}

static const struct opt_def *find_option(const char *arg, size_t namelen)
{
	for (size_t i = 0; i < sizeof(OPTIONS) / sizeof(OPTIONS[0]); i++) {
		if (strlen(OPTIONS[i].name) == namelen &&
		    strncmp(arg, OPTIONS[i].name, namelen) == 0)
			return &OPTIONS[i];
	}
	return NULL;
}

/* Parse the option argv[*i] (and maybe argv[*i + 1]); advance *i past what was used. */
static int parse_one(int argc, char **argv, int *i, struct replay_opts *opts, char *err,
		     size_t errlen)
{
	const char *arg = argv[*i];
	const char *eq = strchr(arg, '=');
	size_t namelen = eq ? (size_t)(eq - arg) : strlen(arg);
	const struct opt_def *def = find_option(arg, namelen);
	const char *value = eq ? eq + 1 : NULL;

	if (def == NULL)
		return fail(err, errlen, "unknown option '%s' (see --help)", arg);
	if (!def->takes_value && value != NULL)
		return fail(err, errlen, "%s takes no value", def->name);
	if (def->takes_value && value == NULL) {
		if (*i + 1 >= argc)
			return fail(err, errlen, "%s needs a value", def->name);
		*i += 1;
		value = argv[*i];
	}
	return apply_option(def->id, value, opts, err, errlen);
}

static int set_file(const char *arg, struct replay_opts *opts, char *err, size_t errlen)
{
	if (opts->file != NULL)
		return fail(err, errlen, "one pattern file only (got '%s' and '%s')", opts->file,
			    arg);
	opts->file = arg;
	return 0;
}

static void set_defaults(struct replay_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->iters = 1;
	opts->warmup = 1;
	opts->barrier = true;
	opts->max_memory = ARGS_DEFAULT_MAX_MEMORY;
}

static int wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			return 0;
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return 1;
	}
	return 0;
}

int args_parse(int argc, char **argv, struct replay_opts *opts, char *err, size_t errlen)
{
	bool options_done = false;

	set_defaults(opts);
	if (wants_help(argc, argv)) {
		opts->help = true;
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		int rc;

		if (!options_done && strcmp(arg, "--") == 0) {
			options_done = true;
			continue;
		}
		if (!options_done && arg[0] == '-' && arg[1] != '\0')
			rc = parse_one(argc, argv, &i, opts, err, errlen);
		else
			rc = set_file(arg, opts, err, errlen);
		if (rc != 0)
			return -1;
	}
	if (opts->file == NULL)
		return fail(err, errlen, "missing the pattern file (see --help)");
	return 0;
}

void args_print_usage(void)
{
	fputs("usage: sdnmpi-replay [OPTIONS] FILE\n"
	      "\n"
	      "Executes a communication pattern (sdnmpi-replay format, docs/replay-format.md;\n"
	      "write one with `sdnmpi pattern convert SPEC FILE.replay`) phase by phase with\n"
	      "MPI_Irecv/MPI_Isend, on exactly the pattern's number of ranks.\n"
	      "\n"
	      "options:\n"
	      "  --iters N         timed passes over the whole pattern (default 1)\n"
	      "  --warmup N        untimed passes first (default 1)\n"
	      "  --barrier         MPI_Barrier after every phase occurrence (default):\n"
	      "                    phase-synchronous, like the simulator's \"phases\" mode\n"
	      "  --no-barrier      no barrier: each rank goes on when its own messages are\n"
	      "                    done (dependency-driven, the simulator's \"ranks\" mode)\n"
	      "  --poll-us US      wait with MPI_Testall and a US-microsecond sleep between\n"
	      "                    tests (and a polled MPI_Ibarrier) instead of spinning in\n"
	      "                    MPI_Waitall; for many ranks per core (default 0: spin)\n"
	      "  --max-memory B    per-rank cap on receive slots, send buffer and request\n"
	      "                    arrays; suffixes K, M, G, T (default 256M)\n"
	      "  --json            print one JSON object on rank 0 instead of a table\n"
	      "\n"
	      "exit status: 0 ok, 2 usage error (bad option or file, rank count), 1 runtime\n"
	      "error (memory)\n",
	      stdout);
}
