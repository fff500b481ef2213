/* Tests of sdnmpi-replay's MPI-free parts, run by tests/replay/test_vectors.py.
 *
 * Usage:
 *   replay_tests vectors FILE...  one JSON line per file: what the C parser
 *                                 makes of it (the Python test compares that
 *                                 with tests/vectors/replay/vectors.json and
 *                                 with the Python reader)
 *   replay_tests unit             checks of the plan, the rank filter and the
 *                                 options; prints "N checks, F failures"
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "format.h"
#include "plan.h"

static int failures, checks;

#define CHECK(cond)                                                                    \
	do {                                                                           \
		checks++;                                                              \
		if (!(cond)) {                                                         \
			failures++;                                                    \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
				#cond);                                                \
		}                                                                      \
	} while (0)

static void json_string(const char *s)
{
	putchar('"');
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0;

	*len = 0;
	if (f == NULL)
		return NULL;
	for (;;) {
		if (*len == cap) {
			char *grown = realloc(buf, cap + 65536);
			if (grown == NULL)
				break;
			buf = grown;
			cap += 65536;
		}
		size_t got = fread(buf + *len, 1, cap - *len, f);
		*len += got;
		if (got == 0)
			break;
	}
	fclose(f);
	return buf;
}

static void print_pattern(const struct replay_pattern *pat)
{
	printf("\"ok\":true,\"nprocs\":%d,\"name\":", pat->nprocs);
	json_string(pat->name);
	printf(",\"largest_message_bytes\":%lld,\"phases\":[", (long long)pat->largest.bytes);
	for (int k = 0; k < pat->nphases; k++) {
		const struct replay_phase *ph = &pat->phases[k];
		printf("%s{\"label\":", k ? "," : "");
		json_string(ph->label);
		printf(",\"repeat\":%d,\"ncells\":%lld,\"bytes\":%lld,\"messages\":%lld,\"cells\":[",
		       ph->repeat, (long long)ph->ncells, (long long)ph->bytes,
		       (long long)ph->messages);
		for (size_t i = 0; i < ph->nkept; i++) {
			const struct replay_cell *c = &ph->cells[i];
			printf("%s[%d,%d,%lld,%d]", i ? "," : "", c->src, c->dst,
			       (long long)c->size_bytes, c->messages);
		}
		fputs("]}", stdout);
	}
	putchar(']');
}

static int vectors(int argc, char **argv)
{
	for (int i = 2; i < argc; i++) {
		struct replay_pattern pat;
		struct replay_error err;
		size_t len;
		char *text = slurp(argv[i], &len);
		int rc;

		if (text == NULL) {
			fprintf(stderr, "replay_tests: cannot read %s\n", argv[i]);
			return 1;
		}
		rc = replay_parse(text, len, REPLAY_KEEP_ALL, &pat, &err);
		fputs("{\"file\":", stdout);
		json_string(argv[i]);
		putchar(',');
		if (rc == REPLAY_OK) {
			print_pattern(&pat);
			replay_free(&pat);
		} else {
			printf("\"ok\":false,\"line\":%ld,\"error\":", err.line);
			json_string(err.msg);
		}
		puts("}");
		free(text);
		if (rc == REPLAY_NO_MEMORY)
			return 1;
	}
	return 0;
}

/* 3 ranks: 0 -> 1 (10 bytes in 3), 1 -> 1 (self, 4 in 1), 2 -> 0 (0 in 2). */
static const char SMALL[] = "sdnmpi-replay 1\n"
			    "pattern 3 2 small\n"
			    "phase 2 3 a\n"
			    "0 1 10 3\n"
			    "1 1 4 1\n"
			    "2 0 0 2\n"
			    "phase 1 1 b\n"
			    "1 2 7 1\n";

static void test_message_bytes(void)
{
	struct replay_cell c = {10, 0, 1, 3};

	CHECK(replay_message_bytes(&c, 0) == 3);
	CHECK(replay_message_bytes(&c, 1) == 3);
	CHECK(replay_message_bytes(&c, 2) == 4);
	c.size_bytes = 2;
	CHECK(replay_message_bytes(&c, 0) == 0 && replay_message_bytes(&c, 2) == 2);
}

static void test_rank_filter(void)
{
	struct replay_pattern pat;
	struct replay_error err;

	CHECK(replay_parse(SMALL, strlen(SMALL), 1, &pat, &err) == REPLAY_OK);
	CHECK(pat.nphases == 2 && pat.phases[0].nkept == 2 && pat.phases[1].nkept == 1);
	CHECK(pat.phases[0].ncells == 3 && pat.phases[0].bytes == 14);
	CHECK(pat.phases[0].messages == 6);
	CHECK(pat.largest.bytes == 7 && pat.largest.line == 8);
	replay_free(&pat);
	CHECK(replay_parse(SMALL, strlen(SMALL), 2, &pat, &err) == REPLAY_OK);
	CHECK(pat.phases[0].nkept == 1 && pat.phases[0].cells[0].src == 2);
	replay_free(&pat);
}

static void test_plan(void)
{
	struct replay_pattern pat;
	struct replay_error err;
	struct plan plan;

	CHECK(replay_parse(SMALL, strlen(SMALL), 1, &pat, &err) == REPLAY_OK);
	CHECK(plan_build(&pat, 1, &plan) == 0);
	/* phase a on rank 1: receives 3 + 3 + 4 from 0 (slots at 0) and 4 from itself
	 * (slots at 10); sends 4 to itself. */
	CHECK(plan.phases[0].nrecv == 2 && plan.phases[0].nsend == 1);
	CHECK(plan.phases[0].recv[0].peer == 0 && plan.phases[0].recv[0].offset == 0);
	CHECK(plan.phases[0].recv[0].each == 3 && plan.phases[0].recv[0].last == 4);
	CHECK(plan.phases[0].recv[1].peer == 1 && plan.phases[0].recv[1].offset == 10);
	CHECK(plan.phases[0].recv_bytes == 14 && plan.phases[0].recv_messages == 4);
	CHECK(plan.phases[0].send_messages == 1 && plan.phases[0].send_bytes == 4);
	CHECK(plan.phases[1].nrecv == 0 && plan.phases[1].send[0].peer == 2);
	CHECK(plan.recv_region_bytes == 14 && plan.send_buffer_bytes == 7);
	CHECK(plan.max_requests == 5);
	CHECK(plan_memory_bytes(&plan, 100) == 14 + 7 + 500);
	plan.max_requests = INT64_MAX;
	CHECK(plan_memory_bytes(&plan, 100) == UINT64_MAX);
	plan_free(&plan);
	replay_free(&pat);
}

static int parse_args(struct replay_opts *o, char *err, int argc, ...)
{
	char *argv[16] = {"sdnmpi-replay"};
	va_list ap;

	va_start(ap, argc);
	for (int i = 1; i < argc && i < 16; i++)
		argv[i] = va_arg(ap, char *);
	va_end(ap);
	return args_parse(argc, argv, o, err, ARGS_ERR_LEN);
}

static void test_args(void)
{
	struct replay_opts o;
	char err[ARGS_ERR_LEN];

	CHECK(parse_args(&o, err, 2, "f.replay") == 0);
	CHECK(o.iters == 1 && o.warmup == 1 && o.barrier && o.poll_us == 0 && !o.json);
	CHECK(o.max_memory == ARGS_DEFAULT_MAX_MEMORY && strcmp(o.file, "f.replay") == 0);
	CHECK(parse_args(&o, err, 7, "--iters=3", "--no-barrier", "--poll-us", "200",
			 "--max-memory=1G", "f") == 0);
	CHECK(o.iters == 3 && !o.barrier && o.poll_us == 200 && o.max_memory == (1ull << 30));
	CHECK(parse_args(&o, err, 3, "--", "-odd-name") == 0 && strcmp(o.file, "-odd-name") == 0);
	CHECK(parse_args(&o, err, 2, "--help") == 0 && o.help);
	CHECK(parse_args(&o, err, 1) != 0 && strstr(err, "missing the pattern file"));
	CHECK(parse_args(&o, err, 3, "a", "b") != 0 && strstr(err, "one pattern file only"));
	CHECK(parse_args(&o, err, 3, "--iters", "0") != 0 && strstr(err, "out of range"));
	CHECK(parse_args(&o, err, 3, "--bogus", "f") != 0 && strstr(err, "unknown option"));
	CHECK(parse_args(&o, err, 3, "--json=1", "f") != 0 && strstr(err, "takes no value"));
	CHECK(parse_args(&o, err, 2, "--poll-us") != 0 && strstr(err, "needs a value"));
	CHECK(parse_args(&o, err, 3, "--max-memory=3X", "f") != 0 && strstr(err, "not a size"));
	CHECK(parse_args(&o, err, 3, "--max-memory=2T", "f") != 0 && strstr(err, "out of range"));
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "vectors") == 0)
		return vectors(argc, argv);
	if (argc != 2 || strcmp(argv[1], "unit") != 0) {
		fputs("usage: replay_tests vectors FILE... | replay_tests unit\n", stderr);
		return 2;
	}
	test_message_bytes();
	test_rank_filter();
	test_plan();
	test_args();
	printf("replay_tests: %d checks, %d failures\n", checks, failures);
	return failures != 0;
}
