/* SDNMPI_DUPLEX=1: the full-duplex MPI settings (csrc/include/sdnmpi/duplex.h)
 * set in the process's own environment before the MPI library reads it.  Pure:
 * the environment is reached through the functions passed in (tests: a table). */
#ifndef SDN_DUPLEX_H
#define SDN_DUPLEX_H

#include "config.h"

/* setenv(3)'s signature: 0 on success. */
typedef int (*sdn_setenv_fn)(const char *name, const char *value, int overwrite);

/* Set every variable of the table that get() does not find; a variable already
 * set, even to "", is the user's and is kept.  Returns the number set, or -1 if
 * set() failed for one (the rest are still tried). */
int sdn_duplex_apply(sdn_getenv_fn get, sdn_setenv_fn set);

#endif
