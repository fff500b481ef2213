/* SPDX-License-Identifier: MIT */
/*
 * Map ABI of tagger.bpf.c, shared with user space (src/sdnmpi/node/bpf.py mirrors
 * these structs with ctypes; tests/bpf checks sizes and offsets against this file).
 */
#ifndef SDNMPI_TAGGER_H
#define SDNMPI_TAGGER_H

#include <linux/types.h>

#include <sdnmpi/rank_ctx.h>

#define SDNMPI_TAGGER_MAX_CONNS 65536
#define SDNMPI_TAGGER_MAX_CTX_SLOTS 1024

/* Key of the conns hash map: a TCP 4-tuple as it appears in the packet (network
 * byte order), seen from the sending side. */
struct sdnmpi_conn_key {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
};

/* Value of the conns hash map: who talks to whom, and where the sender's
 * current primitive lives. */
struct sdnmpi_conn {
	__u32 ctx_slot; /* index into ctx_slots */
	__u16 src_rank; /* world rank of the sender, 0..4095 */
	__u16 dst_rank; /* world rank of the receiver, 0..4095 */
	__u8 job_slot;  /* 1..127 */
	__u8 pad[3];
};

/* Settings, one const volatile global in .rodata, set before load. */
struct sdnmpi_tagger_settings {
	__u32 enabled; /* 0: count packets as "disabled" and tag nothing */
	__u32 reserved;
};

/* Index of each per-CPU counter. Every packet increments SEEN and exactly one
 * of the others. */
enum sdnmpi_tagger_counter {
	SDNMPI_CNT_SEEN = 0,
	SDNMPI_CNT_TAGGED = 1,
	SDNMPI_CNT_NOT_MPI = 2,      /* IPv4/TCP, 4-tuple not in conns */
	SDNMPI_CNT_NO_CONTEXT = 3,   /* listed, but no inner map at ctx_slot */
	SDNMPI_CNT_UNPARSABLE = 4,   /* not IPv4/TCP, fragment, truncated, bad IHL */
	SDNMPI_CNT_IDLE = 5,         /* listed, context primitive 0 */
	SDNMPI_CNT_INVALID = 6,      /* primitive > 31 or conn fields out of range */
	SDNMPI_CNT_STORE_FAILED = 7, /* bpf_skb_store_bytes failed */
	SDNMPI_CNT_DISABLED = 8,     /* settings.enabled == 0 */
	SDNMPI_CNT_MAX = 9,
};

#endif /* SDNMPI_TAGGER_H */
