/* The replicated broadcast's sockets and I/O loops (see mcast.h). */
#include "mcast.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define RECV_MAX (SDNMPI_RBCAST_HDR_LEN + SDNMPI_RBCAST_MAX_PAYLOAD)
#define MAX_WAIT_NS 100000000ull /* 100 ms: the loops look again at least this often */
#define STOP_CHECK_NS 200000ull  /* 200 us: a receiver asks stop() this often */

uint64_t sdn_mc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int addr_of(const char *ip, struct in_addr *a)
{
	if (!ip || !*ip) {
		a->s_addr = htonl(INADDR_ANY);
		return 0;
	}
	return inet_pton(AF_INET, ip, a) == 1 ? 0 : -1;
}

static void big_buffers(int fd, struct sdn_mc_counters *c)
{
	int want = SDN_MC_SOCKBUF, got = 0;
	socklen_t len = sizeof(got);

	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof(want));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want));
	if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0)
		c->rcvbuf_got = got;
	len = sizeof(got);
	if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &got, &len) == 0)
		c->sndbuf_got = got;
}

int sdn_mc_route_addr(uint32_t group, char out[16])
{
	struct sockaddr_in to = {0}, me = {0};
	socklen_t len = sizeof(me);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = -1;

	out[0] = '\0';
	if (fd < 0)
		return -1;
	to.sin_family = AF_INET;
	to.sin_addr.s_addr = htonl(group);
	to.sin_port = htons(9);
	if (connect(fd, (struct sockaddr *)&to, sizeof(to)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&me, &len) == 0 &&
	    me.sin_addr.s_addr != htonl(INADDR_ANY) &&
	    inet_ntop(AF_INET, &me.sin_addr, out, 16))
		rc = 0;
	close(fd);
	return rc;
}

int sdn_mc_open_root(const char *local_ip, uint16_t *port, struct sdn_mc_counters *c)
{
	struct sockaddr_in me = {0};
	socklen_t len = sizeof(me);
	unsigned char loop = 0, ttl = 8;
	int tos = SDN_MC_ECT0; /* DSCP 0 (best effort), ECN field ECT(0) */
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -1;
	me.sin_family = AF_INET;
	if (addr_of(local_ip, &me.sin_addr) || bind(fd, (struct sockaddr *)&me, sizeof(me)) ||
	    getsockname(fd, (struct sockaddr *)&me, &len))
		goto fail;
	if (me.sin_addr.s_addr != htonl(INADDR_ANY) &&
	    setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &me.sin_addr, sizeof(me.sin_addr)))
		goto fail;
	if (setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof(loop)) ||
	    setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof(ttl)))
		goto fail;
	/* ECN-capable: a switch port above its threshold marks CE instead of dropping at
	 * its tail (refused: no ECN, the loss reaction remains). */
	(void)setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
	big_buffers(fd, c);
	*port = ntohs(me.sin_port);
	return fd;
fail:
	close(fd);
	return -1;
}

static int join(int fd, uint32_t group, const char *iface_ip, int how)
{
	struct ip_mreq m;

	m.imr_multiaddr.s_addr = htonl(group);
	if (addr_of(iface_ip, &m.imr_interface))
		return -1;
	return setsockopt(fd, IPPROTO_IP, how, &m, sizeof(m));
}

int sdn_mc_open_leader(uint32_t group, uint16_t port, const char *iface_ip, int *group_fd,
		       int *ack_fd, struct sdn_mc_counters *c)
{
	struct sockaddr_in at = {0};
	int one = 1;
	int g = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int a = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (g < 0 || a < 0)
		goto fail;
	at.sin_family = AF_INET;
	at.sin_addr.s_addr = htonl(group);
	at.sin_port = htons(port);
	/* Several communicators of a job may share a static group: each socket gets a
	 * copy, and the session tells their packets apart. */
	if (setsockopt(g, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(g, (struct sockaddr *)&at, sizeof(at)) || join(g, group, iface_ip, IP_ADD_MEMBERSHIP))
		goto fail;
	(void)sdn_mc_want_tos(g); /* refused: no CE marks seen, the loss reaction remains */
	big_buffers(g, c);
	*group_fd = g;
	*ack_fd = a;
	return 0;
fail:
	if (g >= 0)
		close(g);
	if (a >= 0)
		close(a);
	return -1;
}

int sdn_mc_want_tos(int fd)
{
	int one = 1;

	return setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one)) ? -1 : 0;
}

ssize_t sdn_mc_recv_tos(int fd, void *buf, size_t cap, uint8_t *tos)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {buf, cap};
	struct msghdr msg = {0};
	struct cmsghdr *cm;
	ssize_t n;

	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = ctl.buf;
	msg.msg_controllen = sizeof(ctl.buf);
	*tos = 0;
	n = recvmsg(fd, &msg, MSG_DONTWAIT);
	if (n < 0)
		return n;
	/* IPv4 gives IP_TOS as one byte (ip_cmsg_recv_tos); never read beyond the data. */
	for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
		if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_TOS &&
		    cm->cmsg_len >= CMSG_LEN(1))
			*tos = *(const uint8_t *)CMSG_DATA(cm);
	return n;
}

void sdn_mc_close(int fd, uint32_t group, const char *iface_ip)
{
	if (fd < 0)
		return;
	if (group)
		join(fd, group, iface_ip, IP_DROP_MEMBERSHIP);
	close(fd);
}

/* Wait for fd to be readable until deadline (ns), at most MAX_WAIT_NS. */
static void wait_readable(int fd, uint64_t now, uint64_t deadline)
{
	struct pollfd p = {fd, POLLIN, 0};
	uint64_t span = deadline > now ? deadline - now : 0;
	struct timespec ts;

	if (span > MAX_WAIT_NS)
		span = MAX_WAIT_NS;
	ts.tv_sec = (time_t)(span / 1000000000ull);
	ts.tv_nsec = (long)(span % 1000000000ull);
	ppoll(&p, 1, &ts, NULL);
}

/* One DATA packet to the group; a full socket buffer is waited out for 1 ms, then
 * the packet counts as lost (the protocol repairs it). */
static void send_packet(int fd, const struct sockaddr_in *group, const struct sdn_rb_packet *pkt,
			struct sdn_mc_counters *c)
{
	struct iovec iov[2] = {{(void *)pkt->hdr, SDNMPI_RBCAST_HDR_LEN},
			       {(void *)pkt->payload, pkt->payload_len}};
	struct msghdr msg = {0};

	msg.msg_name = (void *)group;
	msg.msg_namelen = sizeof(*group);
	msg.msg_iov = iov;
	msg.msg_iovlen = pkt->payload_len ? 2 : 1;
	for (int attempt = 0; attempt < 2; attempt++) {
		struct pollfd p = {fd, POLLOUT, 0};
		if (sendmsg(fd, &msg, MSG_DONTWAIT) >= 0)
			return;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS && errno != EINTR)
			break;
		poll(&p, 1, 1);
	}
	c->send_errors++;
}

static void drain_acks(int fd, struct sdn_rb_sender *s)
{
	uint8_t buf[RECV_MAX];
	ssize_t n;

	while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) >= 0 || errno == EINTR)
		if (n >= 0)
			sdn_rb_sender_on_ack(s, sdn_mc_now_ns(), buf, (size_t)n);
}

enum sdn_rb_action sdn_mc_run_sender(int fd, const struct sockaddr_in *group,
				     struct sdn_rb_sender *s, struct sdn_mc_counters *c)
{
	struct sdn_rb_packet pkt;
	uint64_t wake, now;
	unsigned burst = 0;

	for (;;) {
		enum sdn_rb_action a;
		if (burst++ % 16 == 0)
			drain_acks(fd, s);
		now = sdn_mc_now_ns();
		a = sdn_rb_sender_poll(s, now, &pkt, &wake);
		if (a == SDN_RB_SEND) {
			send_packet(fd, group, &pkt, c);
			continue;
		}
		if (a != SDN_RB_WAIT)
			return a;
		wait_readable(fd, now, wake);
		burst = 0;
	}
}

void sdn_mc_send_ack(int ack_fd, const struct sockaddr_in *root, const uint8_t *ack)
{
	sendto(ack_fd, ack, SDNMPI_RBCAST_HDR_LEN, MSG_DONTWAIT, (const struct sockaddr *)root,
	       sizeof(*root));
}

enum sdn_rb_action sdn_mc_run_receiver(int group_fd, int ack_fd, const struct sockaddr_in *root,
				       struct sdn_rb_receiver *r, int (*stop)(void *),
				       void *ctx, struct sdn_mc_counters *c)
{
	uint8_t buf[RECV_MAX], ack[SDNMPI_RBCAST_HDR_LEN], tos;
	enum sdn_rb_action a = SDN_RB_WAIT;
	uint64_t wake, now;
	ssize_t n;

	for (;;) {
		while ((n = sdn_mc_recv_tos(group_fd, buf, sizeof(buf), &tos)) >= 0 ||
		       errno == EINTR) {
			if (n < 0 || a == SDN_RB_FAILED)
				continue;
			c->ect_in += (tos & SDN_MC_ECN_MASK) != 0;
			sdn_rb_receiver_on_data(r, sdn_mc_now_ns(), buf, (size_t)n,
						(tos & SDN_MC_ECN_MASK) == SDN_MC_CE);
		}
		now = sdn_mc_now_ns();
		if (a != SDN_RB_FAILED)
			while ((a = sdn_rb_receiver_poll(r, now, ack, &wake)) == SDN_RB_SEND)
				sdn_mc_send_ack(ack_fd, root, ack);
		if (stop(ctx))
			return a;
		if (a != SDN_RB_WAIT || wake > now + STOP_CHECK_NS)
			wake = now + STOP_CHECK_NS;
		wait_readable(group_fd, now, wake);
	}
}
