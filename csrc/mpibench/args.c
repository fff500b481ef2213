/* sdnmpi-bench: command line parsing.
 *
 * A small table-driven parser instead of getopt_long: it accepts
 * "--name value" and "--name=value", rejects options that do not apply to
 * the chosen subcommand, and reports errors into a buffer so that only rank 0
 * prints them.  It has no side effects and never calls MPI.
 */
#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)
#define K_LATENCY (1u << BENCH_LATENCY)
#define K_BW (1u << BENCH_BW)
#define K_COLL (1u << BENCH_COLL)
#define K_PAIRS (1u << BENCH_PAIRS)
#define K_BIBW (1u << BENCH_BIBW)
#define K_ALL (K_LATENCY | K_BW | K_COLL | K_PAIRS | K_BIBW)
#define MAX_ITERS 1000000000L
#define MAX_DURATION_S 86400.0

enum opt_id {
	OPT_MIN, OPT_MAX, OPT_SIZE, OPT_ITERS, OPT_WARMUP, OPT_DURATION,
	OPT_WINDOW, OPT_OP, OPT_ROOT, OPT_SHIFT, OPT_ONEWAY, OPT_JSON
};

struct opt_def {
	const char *name;
	enum opt_id id;
	int takes_value;
	unsigned kinds; /* bit mask of the subcommands that accept it */
};

static const struct opt_def OPTIONS[] = {
	{"--min", OPT_MIN, 1, K_ALL},
	{"--max", OPT_MAX, 1, K_ALL},
	{"--size", OPT_SIZE, 1, K_ALL},
	{"--iters", OPT_ITERS, 1, K_ALL},
	{"--warmup", OPT_WARMUP, 1, K_ALL},
	{"--duration", OPT_DURATION, 1, K_COLL | K_PAIRS},
	{"--window", OPT_WINDOW, 1, K_BW | K_BIBW},
	{"--op", OPT_OP, 1, K_COLL},
	{"--root", OPT_ROOT, 1, K_COLL},
	{"--shift", OPT_SHIFT, 1, K_PAIRS},
	{"--oneway", OPT_ONEWAY, 0, K_PAIRS},
	{"--json", OPT_JSON, 0, K_ALL},
};

static const char *const KIND_NAMES[] = {"latency", "bw", "coll", "pairs", "bibw"};
static const char *const OP_NAMES[] = {"allreduce", "bcast",     "reduce",
				       "alltoall",  "allgather", "barrier"};

/* Size range as given on the command line, before it becomes a list. */
struct size_range {
	size_t min;
	size_t max;
	int have_min;
	int have_max;
	int have_size;
};

const char *args_kind_name(enum bench_kind kind)
{
	return KIND_NAMES[kind];
}

const char *args_op_name(enum coll_op op)
{
	return OP_NAMES[op];
}

long bench_default_iters(size_t size_bytes)
{
	return size_bytes > 8 * KIB ? 100 : 1000;
}

long bench_default_warmup(size_t size_bytes)
{
	return size_bytes > 8 * KIB ? 10 : 100;
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static int suffix_shift(const char *end, unsigned *shift)
{
	if (*end == '\0')
		*shift = 0;
	else if (strcmp(end, "K") == 0 || strcmp(end, "k") == 0)
		*shift = 10;
	else if (strcmp(end, "M") == 0 || strcmp(end, "m") == 0)
		*shift = 20;
	else if (strcmp(end, "G") == 0 || strcmp(end, "g") == 0)
		*shift = 30;
	else
		return -1;
	return 0;
}

/* Bytes, with an optional binary suffix K, M or G (e.g. 64K, 4M). */
static int parse_size(const char *name, const char *text, size_t *out, char *err, size_t errlen)
{
	char *end = NULL;
	unsigned long long value;
	unsigned shift;

	errno = 0;
	if (!isdigit((unsigned char)text[0]))
		return fail(err, errlen, "%s: '%s' is not a size in bytes (e.g. 4096, 64K, 1M)",
			    name, text);
	value = strtoull(text, &end, 10);
	if (errno != 0 || suffix_shift(end, &shift) != 0)
		return fail(err, errlen, "%s: '%s' is not a size in bytes (e.g. 4096, 64K, 1M)",
			    name, text);
	if (value > (BENCH_MAX_SIZE_BYTES >> shift))
		return fail(err, errlen, "%s: %s is larger than the limit of %zu bytes", name,
			    text, BENCH_MAX_SIZE_BYTES);
	*out = (size_t)(value << shift);
	return 0;
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
		return fail(err, errlen, "%s: %ld is out of range [%ld, %ld]", name, value, lo,
			    hi);
	*out = value;
	return 0;
}

static int parse_int(const char *name, const char *text, long lo, long hi, int *out,
		     char *err, size_t errlen)
{
	long value;

	if (parse_long(name, text, lo, hi, &value, err, errlen) != 0)
		return -1;
	*out = (int)value;
	return 0;
}

static int parse_duration(const char *text, double *out, char *err, size_t errlen)
{
	char *end = NULL;
	double value;

	errno = 0;
	value = strtod(text, &end);
	if (errno != 0 || end == text || *end != '\0' || !isfinite(value))
		return fail(err, errlen, "--duration: '%s' is not a number of seconds", text);
	if (value <= 0.0 || value > MAX_DURATION_S)
		return fail(err, errlen, "--duration: %s is out of range (0, %.0f] seconds", text,
			    MAX_DURATION_S);
	*out = value;
	return 0;
}

static int parse_one_op(const char *text, enum coll_op *out, char *err, size_t errlen)
{
	for (size_t i = 0; i < sizeof(OP_NAMES) / sizeof(OP_NAMES[0]); i++) {
		if (strcmp(text, OP_NAMES[i]) == 0) {
			*out = (enum coll_op)i;
			return 0;
		}
	}
	return fail(err, errlen,
		    "--op: unknown operation '%s' (allreduce, bcast, reduce, alltoall, "
		    "allgather, barrier)",
		    text);
}

/* "bcast" or "bcast,reduce": the operations, run one after the other. */
static int parse_op(const char *text, struct bench_opts *opts, char *err, size_t errlen)
{
	char buf[128], *save = NULL;

	if (strlen(text) >= sizeof(buf))
		return fail(err, errlen, "--op: list too long");
	strcpy(buf, text);
	opts->nops = 0;
	for (char *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		if (opts->nops == BENCH_MAX_OPS)
			return fail(err, errlen, "--op: at most %d operations", BENCH_MAX_OPS);
		if (parse_one_op(w, &opts->ops[opts->nops], err, errlen))
			return -1;
		opts->nops++;
	}
	if (opts->nops == 0)
		return fail(err, errlen, "--op: no operation given");
	opts->op = opts->ops[0];
	return 0;
}

const char *args_ops_text(const struct bench_opts *opts)
{
	static char text[128];
	size_t used = 0;

	text[0] = '\0';
	for (int i = 0; i < opts->nops; i++) {
		int w = snprintf(text + used, sizeof(text) - used, "%s%s", i ? "," : "",
				 args_op_name(opts->ops[i]));
		if (w < 0 || (size_t)w >= sizeof(text) - used)
			break;
		used += (size_t)w;
	}
	return text;
}

static int parse_kind(const char *text, enum bench_kind *out, char *err, size_t errlen)
{
	for (size_t i = 0; i < sizeof(KIND_NAMES) / sizeof(KIND_NAMES[0]); i++) {
		if (strcmp(text, KIND_NAMES[i]) == 0) {
			*out = (enum bench_kind)i;
			return 0;
		}
	}
	return fail(err, errlen, "unknown subcommand '%s' (latency, bw, bibw, coll, pairs)", text);
}

static int apply_size(const char *name, const char *value, size_t *slot, int *flag,
		      char *err, size_t errlen)
{
	*flag = 1;
	return parse_size(name, value, slot, err, errlen);
}

static int apply_option(enum opt_id id, const char *value, struct bench_opts *opts,
			struct size_range *range, char *err, size_t errlen)
{
	switch (id) {
	case OPT_MIN:
		return apply_size("--min", value, &range->min, &range->have_min, err, errlen);
	case OPT_MAX:
		return apply_size("--max", value, &range->max, &range->have_max, err, errlen);
	case OPT_SIZE:
		return apply_size("--size", value, &range->min, &range->have_size, err, errlen);
	case OPT_ITERS:
		return parse_long("--iters", value, 1, MAX_ITERS, &opts->iters, err, errlen);
	case OPT_WARMUP:
		return parse_long("--warmup", value, 0, MAX_ITERS, &opts->warmup, err, errlen);
	case OPT_DURATION:
		return parse_duration(value, &opts->duration_s, err, errlen);
	case OPT_WINDOW:
		return parse_int("--window", value, 1, 1024, &opts->window, err, errlen);
	case OPT_OP:
		return parse_op(value, opts, err, errlen);
	case OPT_ROOT:
		return parse_int("--root", value, 0, INT_MAX, &opts->root, err, errlen);
	case OPT_SHIFT:
		return parse_int("--shift", value, 1, INT_MAX, &opts->shift, err, errlen);
	case OPT_ONEWAY:
		opts->oneway = true;
		return 0;
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

/* Parse argv[*i] (and maybe argv[*i + 1]); advance *i past what was used. */
static int parse_one(int argc, char **argv, int *i, struct bench_opts *opts,
		     struct size_range *range, char *err, size_t errlen)
{
	const char *arg = argv[*i];
	const char *eq = strchr(arg, '=');
	size_t namelen = eq ? (size_t)(eq - arg) : strlen(arg);
	const struct opt_def *def = find_option(arg, namelen);
	const char *value = eq ? eq + 1 : NULL;

	if (def == NULL)
		return fail(err, errlen, "unknown option '%s' (see --help)", arg);
	if ((def->kinds & (1u << opts->kind)) == 0)
		return fail(err, errlen, "%s is not an option of '%s' (see --help)", def->name,
			    args_kind_name(opts->kind));
	if (!def->takes_value && value != NULL)
		return fail(err, errlen, "%s takes no value", def->name);
	if (def->takes_value && value == NULL) {
		if (*i + 1 >= argc)
			return fail(err, errlen, "%s needs a value", def->name);
		*i += 1;
		value = argv[*i];
	}
	return apply_option(def->id, value, opts, range, err, errlen);
}

static void default_range(enum bench_kind kind, struct size_range *range)
{
	switch (kind) {
	case BENCH_LATENCY:
	case BENCH_BW:
	case BENCH_BIBW:
		range->min = 0;
		range->max = 4 * MIB;
		break;
	case BENCH_COLL:
		range->min = 4;
		range->max = MIB;
		break;
	case BENCH_PAIRS:
		range->min = MIB;
		range->max = MIB;
		break;
	}
}

static int resolve_range(enum bench_kind kind, struct size_range *given, char *err,
			 size_t errlen)
{
	struct size_range def = {0, 0, 0, 0, 0};

	if (given->have_size && (given->have_min || given->have_max))
		return fail(err, errlen, "give --size or --min/--max, not both");
	if (given->have_size) {
		given->max = given->min;
		return 0;
	}
	default_range(kind, &def);
	if (!given->have_min)
		given->min = given->have_max && given->max < def.min ? given->max : def.min;
	if (!given->have_max)
		given->max = given->have_min && given->min > def.max ? given->min : def.max;
	if (given->min > given->max)
		return fail(err, errlen, "--min %zu is larger than --max %zu", given->min,
			    given->max);
	return 0;
}

/* Doubling from min (0, then 1, if min is 0) up to max; max is always included. */
static void build_sizes(const struct size_range *range, struct bench_opts *opts)
{
	size_t next = range->min;

	opts->nsizes = 0;
	if (next == 0) {
		opts->sizes[opts->nsizes++] = 0;
		next = 1;
	}
	while (next <= range->max && opts->nsizes < BENCH_MAX_SIZES) {
		opts->sizes[opts->nsizes++] = next;
		if (next > range->max / 2)
			break;
		next *= 2;
	}
	if (opts->sizes[opts->nsizes - 1] != range->max && opts->nsizes < BENCH_MAX_SIZES)
		opts->sizes[opts->nsizes++] = range->max;
}

static int check_opts(const struct bench_opts *opts, char *err, size_t errlen)
{
	if (opts->duration_s > 0.0 && opts->iters > 0)
		return fail(err, errlen, "give --iters or --duration, not both");
	if (opts->kind != BENCH_COLL)
		return 0;
	for (int k = 0; k < opts->nops; k++) {
		enum coll_op op = opts->ops[k];
		if (op != COLL_ALLREDUCE && op != COLL_REDUCE)
			continue;
		for (int i = 0; i < opts->nsizes; i++) {
			if (opts->sizes[i] % sizeof(float) != 0)
				return fail(err, errlen,
					    "--op %s reduces floats: size %zu is not a multiple of "
					    "%zu bytes",
					    args_op_name(op), opts->sizes[i], sizeof(float));
		}
	}
	return 0;
}

static void set_defaults(struct bench_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->warmup = -1;
	opts->window = 64;
	opts->op = COLL_ALLREDUCE;
	opts->ops[0] = COLL_ALLREDUCE;
	opts->nops = 1;
}

static int wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ||
		    (i == 1 && strcmp(argv[i], "help") == 0))
			return 1;
	}
	return 0;
}

int args_parse(int argc, char **argv, struct bench_opts *opts, char *err, size_t errlen)
{
	struct size_range range = {0, 0, 0, 0, 0};

	set_defaults(opts);
	if (wants_help(argc, argv)) {
		opts->help = true;
		return 0;
	}
	if (argc < 2)
		return fail(err, errlen, "missing subcommand (latency, bw, bibw, coll, pairs)");
	if (parse_kind(argv[1], &opts->kind, err, errlen) != 0)
		return -1;
	for (int i = 2; i < argc; i++) {
		if (parse_one(argc, argv, &i, opts, &range, err, errlen) != 0)
			return -1;
	}
	if (resolve_range(opts->kind, &range, err, errlen) != 0)
		return -1;
	build_sizes(&range, opts);
	return check_opts(opts, err, errlen);
}

int args_check_nprocs(const struct bench_opts *opts, int nprocs, char *err, size_t errlen)
{
	if (opts->kind != BENCH_COLL && nprocs < 2)
		return fail(err, errlen, "'%s' needs at least 2 ranks, got %d",
			    args_kind_name(opts->kind), nprocs);
	if (opts->kind == BENCH_COLL && opts->root >= nprocs)
		return fail(err, errlen, "--root %d is not a rank (nprocs is %d)", opts->root,
			    nprocs);
	if (opts->kind == BENCH_PAIRS && opts->shift % nprocs == 0 && opts->shift != 0)
		return fail(err, errlen, "--shift %d pairs every rank with itself (nprocs is %d)",
			    opts->shift, nprocs);
	if (opts->kind == BENCH_PAIRS && opts->oneway) {
		int shift = opts->shift > 0 ? opts->shift : nprocs / 2;
		if (nprocs % (2 * shift) != 0)
			return fail(err, errlen,
				    "--oneway needs nprocs a multiple of 2 * shift (%d ranks, "
				    "shift %d)",
				    nprocs, shift);
	}
	return 0;
}

void args_print_usage(void)
{
	fputs("usage: sdnmpi-bench SUBCOMMAND [OPTIONS]\n"
	      "\n"
	      "subcommands:\n"
	      "  latency   ping-pong rank 0 <-> rank 1, one-way latency in us (osu_latency)\n"
	      "  bw        streaming rank 0 -> rank 1, window of Isends, MB/s (osu_bw)\n"
	      "  bibw      windows both ways at once between ranks 0 and 1, total MB/s (osu_bibw)\n"
	      "  coll      collective timer: min/avg/max time per call over ranks\n"
	      "  pairs     every rank r exchanges with (r + shift) mod N, timed per exchange\n"
	      "\n"
	      "options (all subcommands):\n"
	      "  --min BYTES       smallest size (default 0; coll 4; pairs 1M)\n"
	      "  --max BYTES       largest size (default 4M; coll 1M; pairs 1M); sizes double\n"
	      "                    from --min (0, 1, 2, 4, ...) and --max is always included\n"
	      "  --size BYTES      a single size (instead of --min/--max); suffixes K, M, G\n"
	      "  --iters N         timed iterations per size (default 1000, 100 above 8K)\n"
	      "  --warmup N        untimed iterations first (default 100, 10 above 8K)\n"
	      "  --json            print one JSON object on rank 0 instead of a table\n"
	      "bw, bibw:\n"
	      "  --window W        non-blocking sends per window (each way), acked (default 64)\n"
	      "coll:\n"
	      "  --op OP[,OP...]   allreduce|bcast|reduce|alltoall|allgather|barrier; a list\n"
	      "                    runs each in turn (rows carry op and wall-clock times)\n"
	      "                    (default allreduce; allreduce/reduce sum floats, so sizes\n"
	      "                    are multiples of 4; alltoall/allgather: bytes per peer)\n"
	      "  --root R          root of bcast and reduce (default 0)\n"
	      "coll and pairs:\n"
	      "  --duration S      loop for S seconds per size (agreed across ranks)\n"
	      "                    instead of --iters\n"
	      "pairs:\n"
	      "  --shift S         partner offset (default nprocs / 2)\n"
	      "  --oneway          only ranks r with (r / S) even send, to r + S; the others\n"
	      "                    receive (no exchange over one connection, see README)\n"
	      "\n"
	      "exit status: 0 ok, 2 usage error, 1 runtime error\n",
	      stdout);
}
