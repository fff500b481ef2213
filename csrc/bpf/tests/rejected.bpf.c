// SPDX-License-Identifier: MIT
/* A program the verifier must refuse (packet read without a bounds check), with
 * the same .rodata settings as the tagger; tests/bpf uses it to check that the
 * loader reports the verifier log. Not built by the Makefile. */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include <bpf/bpf_helpers.h>

#include "../tagger.h"

const volatile struct sdnmpi_tagger_settings settings = {.enabled = 1};

SEC("tc")
int sdnmpi_tagger(struct __sk_buff *skb)
{
	unsigned char *data = (unsigned char *)(long)skb->data;

	return data[20] == 6 ? TC_ACT_OK : TC_ACT_UNSPEC; /* no data_end check */
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
