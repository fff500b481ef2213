/* SPDX-License-Identifier: MIT */
/*
 * Per-rank MPI context shared between a rank (the PMPI library, tag mode) and
 * the eBPF tagger, without syscalls on the MPI fast path.
 *
 * The node agent creates, for each local rank, a single-entry BPF array map with
 * BPF_F_MMAPABLE (key 0, value struct sdnmpi_rank_ctx), installs it in the
 * tagger's ctx_slots map-in-map at the rank's context slot, and hands the rank
 * ONLY that map's fd. The rank mmaps it (PROT_READ|PROT_WRITE, MAP_SHARED, one
 * page, offset 0) and writes its current primitive:
 *
 *   on entry to an MPI call:  ctx->primitive = code (enum sdnmpi_primitive)
 *   after each change:        ctx->seq++ (lets the agent/tests see activity)
 *   at MPI_Finalize:          ctx->primitive = SDNMPI_PRIM_NONE (0)
 *
 * libsdnmpi leaves the primitive published when a call returns (completion calls
 * such as MPI_Wait keep it too): TCP sends what a call buffered after the call has
 * returned, and those packets belong to it.
 *
 * Use single aligned 32-bit stores (e.g. __atomic_store_n(..., __ATOMIC_RELEASE));
 * the tagger reads primitive once per packet. Nested calls (a collective
 * implemented with point-to-point calls) keep the outermost primitive.
 */
#ifndef SDNMPI_RANK_CTX_H
#define SDNMPI_RANK_CTX_H

#include <linux/types.h>

struct sdnmpi_rank_ctx {
	__u32 primitive; /* enum sdnmpi_primitive; 0 = not inside an MPI call */
	__u32 flags;     /* reserved, 0 */
	__u64 seq;       /* generation counter, incremented by the rank */
};

#endif /* SDNMPI_RANK_CTX_H */
