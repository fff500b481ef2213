/* A loss injector for tests/pmpi/test_bcast_replicated.py (the kernel has no netem):
 * a TC classifier that drops DROP_PER_MILLE of the UDP datagrams to port PORT
 * (both set with -D when compiling) and passes everything else unchanged.
 * clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -DPORT=P -DDROP_PER_MILLE=N */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

SEC("tc")
int drop(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct udphdr *udp;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_UDP || ip->ihl != 5)
		return TC_ACT_OK;
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end || udp->dest != bpf_htons(PORT))
		return TC_ACT_OK;
	return bpf_get_prandom_u32() % 1000 < DROP_PER_MILLE ? TC_ACT_SHOT : TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
