// SPDX-License-Identifier: MIT
/*
 * sdnmpi ECN marker for the emulated switches' ports (TC egress, direct action).
 *
 * An emulated port is a veth whose egress an HTB class shapes to the link's rate,
 * with a tail-drop FIFO behind it. This program runs before that queue: it keeps
 * each port's backlog as a virtual queue drained at the port's rate (HTB drains
 * the real one at exactly that rate while it is backlogged) and sets CE on
 * ECN-capable packets that arrive while the backlog is above the port's marking
 * threshold (the backlog the packet finds, not counting itself: on a host's
 * interface one segmentation-offload packet can be 64 KiB), as an ECN-marking
 * switch does (RFC 3168 senders then halve their
 * window without a loss). It never drops and never delays: every packet leaves
 * with TC_ACT_UNSPEC (the next filter, if any, or the qdisc). Ports not in the
 * map are left alone.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf_helpers.h>

#include "ecn.h"

#define NSEC_PER_SEC 1000000000ULL

struct port {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 t_ns;
	__u64 backlog;
	__u64 rate_Bps;
	__u64 mark_bytes;
	__u64 seen;
	__u64 marked;
};

_Static_assert(sizeof(struct port) == sizeof(struct sdnmpi_ecn_port), "ABI of ecn.h");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDNMPI_ECN_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct port);
} ports SEC(".maps");

SEC("tc")
int sdnmpi_ecn(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct port *p = bpf_map_lookup_elem(&ports, &ifindex);
	__u64 now, elapsed, drained, backlog;

	if (!p)
		return TC_ACT_UNSPEC;
	now = bpf_ktime_get_ns();
	bpf_spin_lock(&p->lock);
	/* At most one second of draining per step keeps elapsed * rate within 64 bits
	 * for any rate below 18 GB/s; a longer idle spell empties any queue we mark. */
	elapsed = now > p->t_ns ? now - p->t_ns : 0;
	if (elapsed > NSEC_PER_SEC)
		elapsed = NSEC_PER_SEC;
	drained = elapsed * p->rate_Bps / NSEC_PER_SEC;
	p->backlog = p->backlog > drained ? p->backlog - drained : 0;
	backlog = p->backlog; /* what this packet finds queued, as a switch's marking sees it */
	p->backlog += skb->len;
	p->t_ns = now;
	p->seen++;
	bpf_spin_unlock(&p->lock);
	if (backlog > p->mark_bytes && bpf_skb_ecn_set_ce(skb))
		__sync_fetch_and_add(&p->marked, 1);
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
