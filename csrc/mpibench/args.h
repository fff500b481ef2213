/* sdnmpi-bench: command line parsing, identical on every rank. */
#ifndef SDNMPI_BENCH_ARGS_H
#define SDNMPI_BENCH_ARGS_H

#include <stddef.h>

#include "bench.h"

#define ARGS_ERR_LEN 256

/* Parse argv into opts; on a usage error return -1 with a message in err. */
int args_parse(int argc, char **argv, struct bench_opts *opts, char *err, size_t errlen);

/* Checks that depend on the communicator size (root, shift, rank count). */
int args_check_nprocs(const struct bench_opts *opts, int nprocs, char *err, size_t errlen);

const char *args_kind_name(enum bench_kind kind);
const char *args_op_name(enum coll_op op);
/* The --op list as given ("bcast,reduce"; static buffer). */
const char *args_ops_text(const struct bench_opts *opts);
void args_print_usage(void);

#endif
