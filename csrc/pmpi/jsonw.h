/* Minimal JSON output helpers (no MPI dependency). */
#ifndef SDN_JSONW_H
#define SDN_JSONW_H

#include <stdio.h>

/* A JSON string literal: quotes, backslash and control characters escaped;
 * bytes >= 0x80 are written as \u00XX so the output is always valid ASCII
 * JSON whatever the encoding of the input (host names, MPI version strings). */
void sdn_json_str(FILE *f, const char *s);
/* A number with 9 decimals, or null if not finite. */
void sdn_json_double(FILE *f, double v);

#endif
