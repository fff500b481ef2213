/* sdnmpi-bench: an MPI micro-benchmark (latency, bw, bibw, coll, pairs).
 *
 * Every rank parses the same argv, so all ranks agree on the parameters; a
 * usage error is printed by rank 0 only, every rank calls MPI_Finalize and the
 * program exits with status 2.
 */
#include <mpi.h>
#include <stdio.h>

#include "args.h"
#include "bench.h"
#include "coll.h"
#include "pt2pt.h"
#include "report.h"

#define EXIT_USAGE 2

static void run(const struct bench_opts *opts, MPI_Comm comm)
{
	struct report rep;

	report_begin(&rep, opts, comm);
	switch (opts->kind) {
	case BENCH_LATENCY:
		pt2pt_latency(opts, comm, &rep);
		break;
	case BENCH_BW:
		pt2pt_bw(opts, comm, &rep);
		break;
	case BENCH_BIBW:
		pt2pt_bibw(opts, comm, &rep);
		break;
	case BENCH_COLL:
		coll_run(opts, comm, &rep);
		break;
	case BENCH_PAIRS:
		pt2pt_pairs(opts, comm, &rep);
		break;
	}
	report_end(&rep);
}

static int parse_all(int argc, char **argv, int nprocs, struct bench_opts *opts, char *err)
{
	if (args_parse(argc, argv, opts, err, ARGS_ERR_LEN) != 0)
		return -1;
	if (opts->help)
		return 0;
	return args_check_nprocs(opts, nprocs, err, ARGS_ERR_LEN);
}

int main(int argc, char **argv)
{
	struct bench_opts opts;
	char err[ARGS_ERR_LEN] = "";
	int rank = 0;
	int nprocs = 1;
	int status = 0;
	MPI_Comm comm;

	MPI_Init(&argc, &argv);
	MPI_Comm_dup(MPI_COMM_WORLD, &comm);
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &nprocs);
	if (parse_all(argc, argv, nprocs, &opts, err) != 0) {
		if (rank == 0)
			fprintf(stderr, "sdnmpi-bench: error: %s\n", err);
		status = EXIT_USAGE;
	} else if (opts.help) {
		if (rank == 0)
			args_print_usage();
	} else {
		run(&opts, comm);
	}
	/* A blocking barrier before finalizing: with MPICH 4.0.2 over UCX
	 * (UCX_TLS=tcp,self) MPI_Finalize intermittently hangs after a polled
	 * MPI_Ibarrier (timing_idle_barrier) once rendezvous-sized messages
	 * were sent; this barrier makes it reliable. */
	MPI_Barrier(comm);
	MPI_Comm_free(&comm);
	MPI_Finalize();
	return status;
}
