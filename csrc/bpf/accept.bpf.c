// SPDX-License-Identifier: MIT
/*
 * sdnmpi TC ingress acceptor: delivers frames whose destination MAC is an MPI
 * context tag (csrc/include/sdnmpi/tag.h) to this host.
 *
 * On a fabric the last switch restores the real destination MAC (set_field).
 * Where no switch does (two hosts on a direct link, as the overhead experiment
 * uses to measure the node side without switch noise, or a last hop that
 * cannot rewrite MACs), the receiving kernel would drop a tagged frame as
 * PACKET_OTHERHOST; this program marks it PACKET_HOST instead. It checks only
 * the tag prefix (octet 0 & 0xF3 == 0xA2) and never drops: everything returns
 * TC_ACT_OK.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf_helpers.h>

#include <sdnmpi/tag.h>

SEC("tc")
int sdnmpi_accept(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return TC_ACT_OK;
	if ((eth->h_dest[0] & SDNMPI_TAG_PREFIX_MASK) != SDNMPI_TAG_PREFIX)
		return TC_ACT_OK;
	if (skb->pkt_type == PACKET_OTHERHOST)
		bpf_skb_change_type(skb, PACKET_HOST);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
