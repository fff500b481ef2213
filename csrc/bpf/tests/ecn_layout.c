/* SPDX-License-Identifier: MIT */
/* Prints struct sdnmpi_ecn_port's size and field offsets as JSON for
 * tests/emu/test_ecn.py, which checks sdnmpi.emu.ecn's ctypes mirror against them. */
#include <stddef.h>
#include <stdio.h>

#include "ecn.h"

#define FIELD(f) printf("\"%s\": %zu, ", #f, offsetof(struct sdnmpi_ecn_port, f))

int main(void)
{
	printf("{");
	FIELD(lock);
	FIELD(t_ns);
	FIELD(backlog);
	FIELD(rate_Bps);
	FIELD(mark_bytes);
	FIELD(seen);
	FIELD(marked);
	printf("\"size\": %zu}\n", sizeof(struct sdnmpi_ecn_port));
	return 0;
}
