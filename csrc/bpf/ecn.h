/* SPDX-License-Identifier: MIT */
/*
 * Map ABI of ecn.bpf.c, shared with user space (src/sdnmpi/emu/ecn.py mirrors the
 * struct with ctypes; tests/emu/test_ecn.py checks its size and offsets against
 * build/bpf/ecn_layout, compiled from this file).
 */
#ifndef SDNMPI_ECN_H
#define SDNMPI_ECN_H

#include <linux/types.h>

#define SDNMPI_ECN_MAX_PORTS 4096

/* One switch port's egress queue, as the marker tracks it (key: the port's ifindex
 * in the namespace the program is attached in). User space writes rate_Bps and
 * mark_bytes; the program keeps the rest. */
struct sdnmpi_ecn_port {
	__u32 lock;        /* struct bpf_spin_lock in the program */
	__u32 pad;
	__u64 t_ns;        /* when backlog was last updated (bpf_ktime_get_ns) */
	__u64 backlog;     /* bytes queued at rate_Bps since t_ns, by this port's arrivals */
	__u64 rate_Bps;    /* the port's shaped rate, bytes per second */
	__u64 mark_bytes;  /* CE-mark ECN-capable packets that arrive above this backlog */
	__u64 seen;        /* packets seen */
	__u64 marked;      /* packets whose ECN field was set to CE */
};

#endif
