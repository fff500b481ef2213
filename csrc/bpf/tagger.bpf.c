// SPDX-License-Identifier: MIT
/*
 * sdnmpi TC egress tagger: writes the MPI context tag (csrc/include/sdnmpi/tag.h)
 * into the destination MAC of the TCP packets of registered MPI connections.
 *
 * Ethernet -> IPv4 (IHL checked) -> TCP, with a bounds check before each header
 * access. Anything else (non-IPv4, non-TCP, fragments, truncated headers), any
 * TCP 4-tuple not in `conns`, and any sender whose context is missing or idle
 * passes unchanged. The program never drops: it always returns TC_ACT_UNSPEC
 * (the next filter on the hook, e.g. the emulator's ECN marker, or pass).
 *
 * The sender's current primitive comes from its own mmapable single-entry array
 * (struct sdnmpi_rank_ctx, written by the rank without syscalls), found through
 * the ctx_slots map-in-map at the connection's context slot.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include <sdnmpi/tag.h>

#include "tagger.h"

/* Bytes the parser may need in the linear area: Ethernet, IPv4 with options, TCP. */
#define PARSE_LEN (ETH_HLEN + 60 + sizeof(struct tcphdr))
#define IP_FRAG_MASK 0x3FFF /* MF flag | fragment offset */

const volatile struct sdnmpi_tagger_settings settings = {.enabled = 1};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDNMPI_TAGGER_MAX_CONNS);
	__type(key, struct sdnmpi_conn_key);
	__type(value, struct sdnmpi_conn);
} conns SEC(".maps");

struct ctx_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	/* sizes, not BTF types: the struct is only used through pointers here, so
	 * clang emits just a forward declaration that libbpf cannot size */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct sdnmpi_rank_ctx));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, SDNMPI_TAGGER_MAX_CTX_SLOTS);
	__type(key, __u32);
	__array(values, struct ctx_inner);
} ctx_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SDNMPI_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline int count(__u32 idx)
{
	__u64 *val = bpf_map_lookup_elem(&counters, &idx);

	if (val)
		*val += 1;
	return TC_ACT_UNSPEC;
}

/* Make sure the headers the parser needs are in the linear area if the packet has
 * them at all; pointers derived from skb->data are invalid after this call. */
static __always_inline void pull_headers(struct __sk_buff *skb)
{
	__u32 linear = skb->data_end - skb->data;

	if (linear < PARSE_LEN && skb->len > linear)
		bpf_skb_pull_data(skb, skb->len < PARSE_LEN ? skb->len : PARSE_LEN);
}

/* Fill key from the packet; return 0 on success, -1 if it is not parsable
 * IPv4/TCP (never a fragment). */
static __always_inline int parse_tuple(struct __sk_buff *skb, struct sdnmpi_conn_key *key)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph;
	struct tcphdr *tcph;
	__u32 ihl_bytes;

	if ((void *)(eth + 1) > data_end)
		return -1;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return -1;
	iph = (void *)(eth + 1);
	if ((void *)(iph + 1) > data_end)
		return -1;
	if (iph->version != 4 || iph->ihl < 5 || iph->protocol != IPPROTO_TCP)
		return -1;
	if (iph->frag_off & bpf_htons(IP_FRAG_MASK))
		return -1;
	ihl_bytes = (__u32)iph->ihl * 4;
	tcph = (void *)iph + ihl_bytes;
	if ((void *)(tcph + 1) > data_end)
		return -1;
	key->saddr = iph->saddr;
	key->daddr = iph->daddr;
	key->sport = tcph->source;
	key->dport = tcph->dest;
	return 0;
}

/* The sender's current primitive, or a negative counter index saying why none. */
static __always_inline int current_primitive(const struct sdnmpi_conn *conn)
{
	struct sdnmpi_rank_ctx *ctx;
	__u32 zero = 0, slot = conn->ctx_slot;
	void *inner;
	__u32 prim;

	inner = bpf_map_lookup_elem(&ctx_slots, &slot);
	if (!inner)
		return -SDNMPI_CNT_NO_CONTEXT;
	ctx = bpf_map_lookup_elem(inner, &zero);
	if (!ctx)
		return -SDNMPI_CNT_NO_CONTEXT;
	prim = *(volatile __u32 *)&ctx->primitive; /* one read per packet */
	if (prim == SDNMPI_PRIM_NONE)
		return -SDNMPI_CNT_IDLE;
	if (prim > SDNMPI_MAX_PRIMITIVE)
		return -SDNMPI_CNT_INVALID;
	return (int)prim;
}

SEC("tc")
int sdnmpi_tagger(struct __sk_buff *skb)
{
	struct sdnmpi_conn_key key = {};
	struct sdnmpi_conn *conn;
	struct sdnmpi_tag tag;
	__u8 mac[SDNMPI_TAG_LEN];
	int prim;

	count(SDNMPI_CNT_SEEN);
	if (!settings.enabled)
		return count(SDNMPI_CNT_DISABLED);
	pull_headers(skb);
	if (parse_tuple(skb, &key) < 0)
		return count(SDNMPI_CNT_UNPARSABLE);
	conn = bpf_map_lookup_elem(&conns, &key);
	if (!conn)
		return count(SDNMPI_CNT_NOT_MPI);
	prim = current_primitive(conn);
	if (prim < 0)
		return count((__u32)-prim);
	tag.job_slot = conn->job_slot;
	tag.primitive = (__u8)prim;
	tag.src_rank = conn->src_rank;
	tag.dst_rank = conn->dst_rank;
	if (sdnmpi_tag_encode(&tag, mac) != SDNMPI_TAG_OK)
		return count(SDNMPI_CNT_INVALID);
	if (bpf_skb_store_bytes(skb, 0, mac, SDNMPI_TAG_LEN, 0) < 0)
		return count(SDNMPI_CNT_STORE_FAILED);
	return count(SDNMPI_CNT_TAGGED);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
