/* Unit tests of libsdnmpi_idle's parser and sleep schedule (no MPI, no
 * interposition): prints "test_idle: N checks, F failures" and exits 1 on a
 * failure. */
#include <stdio.h>

#include "../idle.h"

static int checks;
static int failures;

#define CHECK(cond)                                                              \
	do {                                                                     \
		checks++;                                                        \
		if (!(cond)) {                                                   \
			failures++;                                              \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,   \
				__LINE__, #cond);                                \
		}                                                                \
	} while (0)

static void parses(const char *text, int rc, long first_us, long longest_us)
{
	struct sdn_idle_cfg cfg;

	CHECK(sdn_idle_parse(text, &cfg) == rc);
	CHECK(cfg.first_ns == first_us * 1000L);
	CHECK(cfg.longest_ns == longest_us * 1000L);
}

static void test_parse(void)
{
	parses(NULL, 0, 50, 200);
	parses("", 0, 50, 200);
	parses("0", 0, 0, 0);
	parses("100", 0, 100, 100);
	parses("20,1000", 0, 20, 1000);
	parses("100000,100000", 0, 100000, 100000);
	/* bad values leave the defaults */
	parses("100001", -1, 50, 200);
	parses("-5", -1, 50, 200);
	parses("200,100", -1, 50, 200);
	parses("0,100", -1, 50, 200);
	parses("10,", -1, 50, 200);
	parses("10,20,30", -1, 50, 200);
	parses("abc", -1, 50, 200);
	parses("99999999999999999999", -1, 50, 200);
	parses(" 10", -1, 50, 200);
}

static void test_schedule(void)
{
	struct sdn_idle_cfg cfg = {50000L, 200000L};

	/* idle calls back to back: 50 -> 100 -> 200 -> 200 us */
	CHECK(sdn_idle_next(&cfg, 50000L, 1000L) == 100000L);
	CHECK(sdn_idle_next(&cfg, 100000L, 1000L) == 200000L);
	CHECK(sdn_idle_next(&cfg, 200000L, 1000L) == 200000L);
	/* a call long after the last (the rank worked): back to the first sleep */
	CHECK(sdn_idle_next(&cfg, 200000L, 700000L) == 50000L);
	CHECK(sdn_idle_next(&cfg, 50000L, 300001L) == 50000L);
	CHECK(sdn_idle_next(&cfg, 50000L, 300000L) == 100000L);
	/* a clock that went backwards is treated as work done */
	CHECK(sdn_idle_next(&cfg, 200000L, -1L) == 50000L);
}

int main(void)
{
	test_parse();
	test_schedule();
	printf("test_idle: %d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}
