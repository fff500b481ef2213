/* The checks of csrc/pmpi's C unit tests: CHECK(cond) counts a check and reports a
 * failure with its line; each test program prints "NAME: N checks, F failures" and
 * exits 1 on a failure. */
#ifndef SDNMPI_TESTS_CHECK_H
#define SDNMPI_TESTS_CHECK_H

#include <stdio.h>

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

#endif
