/* SPDX-License-Identifier: MIT */
/*
 * The MPI library settings that let a rank pair's large exchanges run both ways
 * at once over TCP (docs/mpi-duplex.md): every message up to a few MiB is sent
 * eagerly, so no rendezvous acknowledgement waits behind the receiver's own
 * outgoing data on the pair's one connection.
 *
 * The same table as sdnmpi.node.duplex.DUPLEX_ENV (Python), one row per
 * variable: library ("openmpi" or "mpich", the Python key), name, value.
 * tests/node/test_duplex.py reads this file and checks it equals the Python
 * table; tests/pmpi/test_core.py checks the compiled table (test_core prints
 * it) against Python too.  Used by libsdnmpi.so (SDNMPI_DUPLEX=1) and the
 * SPANK plugin (plugstack key duplex).  C and C++; no libc needed.
 */
#ifndef SDNMPI_DUPLEX_H
#define SDNMPI_DUPLEX_H

struct sdnmpi_duplex_var {
	const char *library; /* "openmpi" or "mpich" */
	const char *name;
	const char *value;
};

/* Each library ignores the other's variables, so a caller that does not know
 * which library its tasks use may set them all.  MPICH's ch4:ucx (and Open MPI's
 * UCX PML) read the UCX_ ones; Open MPI's ob1 over the TCP BTL the rest, at
 * 4 MiB (the eager limit counts ob1's match header).  Both set their TCP socket
 * buffers to 4 MiB rather than the kernel's autotuning, which left exchanges
 * short of line rate in some runs (docs/mpi-duplex.md, "Socket buffers"). */
__attribute__((unused)) static const struct sdnmpi_duplex_var sdnmpi_duplex_vars[] = {
	{"openmpi", "OMPI_MCA_btl_tcp_eager_limit", "4194304"},
	{"openmpi", "OMPI_MCA_btl_tcp_rndv_eager_limit", "4194304"},
	{"openmpi", "OMPI_MCA_btl_tcp_max_send_size", "4194304"},
	{"openmpi", "OMPI_MCA_btl_tcp_sndbuf", "4194304"},
	{"openmpi", "OMPI_MCA_btl_tcp_rcvbuf", "4194304"},
	{"mpich", "UCX_RNDV_THRESH", "inf"},
	{"mpich", "UCX_TCP_SNDBUF", "4194304"},
	{"mpich", "UCX_TCP_RCVBUF", "4194304"},
};

#define SDNMPI_DUPLEX_NVARS (sizeof(sdnmpi_duplex_vars) / sizeof(sdnmpi_duplex_vars[0]))

#endif
