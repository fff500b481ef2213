/* SDNMPI_DUPLEX=1 (see duplex.h and docs/mpi-duplex.md). */
#include "duplex.h"

#include <stddef.h>

#include <sdnmpi/duplex.h>

int sdn_duplex_apply(sdn_getenv_fn get, sdn_setenv_fn set)
{
	int n = 0, failed = 0;

	for (size_t i = 0; i < SDNMPI_DUPLEX_NVARS; i++) {
		const struct sdnmpi_duplex_var *v = &sdnmpi_duplex_vars[i];

		if (get(v->name))
			continue;
		if (set(v->name, v->value, 0) == 0)
			n++;
		else
			failed = 1;
	}
	return failed ? -1 : n;
}
