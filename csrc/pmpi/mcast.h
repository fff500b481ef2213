/* The replicated broadcast's sockets and I/O loops (IPv4 UDP multicast), without
 * MPI: the root sends to the group and takes ACKs on one socket; a host leader
 * takes the group's packets on a socket bound to group:port and sends ACKs to the
 * root from a second, unbound one.  The loops drive the engine of rbcast.h with
 * CLOCK_MONOTONIC and never block longer than the engine's next deadline.
 *
 * ECN (RFC 3168): the root's DATA packets are ECN-capable, ECT(0) in the IP header's
 * TOS byte with the DSCP bits zero, so a congested switch port marks them CE rather
 * than drop them; a leader reads each datagram's TOS byte (IP_RECVTOS) and hands the
 * CE mark to the engine, whose ACKs echo it (ECE).  ACKs are not ECN-capable (as
 * TCP's pure ACKs, RFC 3168 6.1.4).  A socket that refuses either option only loses
 * ECN: the transfer then reacts to loss alone. */
#ifndef SDN_MCAST_H
#define SDN_MCAST_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/types.h>

#include "rbcast.h"

/* Bytes asked for SO_RCVBUF / SO_SNDBUF (the kernel may give less: see *_got). */
#define SDN_MC_SOCKBUF (4 << 20)

/* The IP header's ECN field (the TOS byte's low two bits, RFC 3168 section 5). */
#define SDN_MC_ECN_MASK 0x3
#define SDN_MC_ECT0 0x2
#define SDN_MC_CE 0x3

struct sdn_mc_counters {
	uint64_t send_errors; /* datagrams the kernel refused (counted as lost) */
	uint64_t ect_in;      /* leader: datagrams that arrived ECN-capable (CE included);
			       * 0 beside received packets: the path bleaches ECT */
	int rcvbuf_got, sndbuf_got;
};

uint64_t sdn_mc_now_ns(void);
/* The local address the kernel routes the group through ("" if none), in out. */
int sdn_mc_route_addr(uint32_t group, char out[16]);
/* Root: a socket on local_ip (or any address if ""), sending to the group through
 * that interface, loop off, TTL 8, TOS ECT(0).  Its port (the ACK port) in *port.
 * fd or -1. */
int sdn_mc_open_root(const char *local_ip, uint16_t *port, struct sdn_mc_counters *c);
/* Leader: a socket bound to group:port, joined on iface_ip (or the routed interface
 * if ""), reporting each datagram's TOS byte, and an unbound socket for its ACKs.
 * 0, or -1 (nothing left open). */
int sdn_mc_open_leader(uint32_t group, uint16_t port, const char *iface_ip, int *group_fd,
		       int *ack_fd, struct sdn_mc_counters *c);
/* Ask fd for each datagram's TOS byte (IP_RECVTOS): 0, or -1 if refused. */
int sdn_mc_want_tos(int fd);
/* One datagram from fd (non-blocking) into buf[0..cap), as recv(2); *tos is its IP
 * TOS byte, or 0 (not ECN-capable) if fd does not report it. */
ssize_t sdn_mc_recv_tos(int fd, void *buf, size_t cap, uint8_t *tos);

/* Leave the group (if group is non-zero) and close; fds of -1 are skipped. */
void sdn_mc_close(int fd, uint32_t group, const char *iface_ip);

/* Run a sender to its end (DONE or FAILED), ACKs read from fd. */
enum sdn_rb_action sdn_mc_run_sender(int fd, const struct sockaddr_in *group,
				     struct sdn_rb_sender *s, struct sdn_mc_counters *c);
/* Run a receiver until stop(ctx) returns non-zero (it is asked at least every
 * 200 us); returns what the receiver was then (SDN_RB_COMPLETE, SDN_RB_FAILED, or
 * SDN_RB_WAIT while it was still receiving).  A FAILED receiver goes silent. */
enum sdn_rb_action sdn_mc_run_receiver(int group_fd, int ack_fd, const struct sockaddr_in *root,
				       struct sdn_rb_receiver *r, int (*stop)(void *),
				       void *ctx, struct sdn_mc_counters *c);
/* Send one ACK (an ABORT) to the root. */
void sdn_mc_send_ack(int ack_fd, const struct sockaddr_in *root, const uint8_t *ack);

#endif
