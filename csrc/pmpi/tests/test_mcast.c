/* Tests of the replicated broadcast's sockets (mcast.c) over loopback, no root needed:
 * the root's socket sends ECT(0) with the DSCP bits zero; a leader's socket reports
 * each datagram's TOS byte, CE included; and a whole transfer runs through
 * sdn_mc_run_sender and sdn_mc_run_receiver (a forked child) twice: plain, and with
 * the root's TOS set to CE, standing for a switch that marks every packet, where the
 * receiver counts every mark and the sender cuts its window on the echoes.  Unicast
 * to 127.0.0.1 stands for the group (the TOS byte and IP_RECVTOS are the same for
 * both; real multicast through a bridge is tests/pmpi/test_bcast_replicated.py).
 * Run by tests/pmpi/test_rbcast_protocol.py.  Usage: test_mcast */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mcast.h"
#include "rbcast.h"

#include "check.h"

#define MS 1000000ull
#define LEN (200u * 1000u) /* 143 packets: within a default socket buffer */

/* A UDP socket bound to 127.0.0.1 on a free port, its address in *at; -1 if none. */
static int loopback_socket(struct sockaddr_in *at)
{
	socklen_t len = sizeof(*at);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	memset(at, 0, sizeof(*at));
	at->sin_family = AF_INET;
	at->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)at, sizeof(*at)) ||
	    getsockname(fd, (struct sockaddr *)at, &len)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* The next datagram on fd (waiting up to a second): its length, its TOS in *tos. */
static ssize_t recv_one(int fd, uint8_t *tos)
{
	struct pollfd p = {fd, POLLIN, 0};
	uint8_t buf[256];

	if (poll(&p, 1, 1000) != 1)
		return -1;
	return sdn_mc_recv_tos(fd, buf, sizeof(buf), tos);
}

static int root_socket(struct sdn_mc_counters *c, uint16_t *port)
{
	memset(c, 0, sizeof(*c));
	return sdn_mc_open_root("127.0.0.1", port, c);
}

/* The root's socket is ECN-capable: TOS ECT(0), DSCP zero, on every datagram. */
static void test_root_sends_ect0(void)
{
	struct sdn_mc_counters c;
	struct sockaddr_in rx_at, plain_at;
	uint16_t port = 0;
	int tos = -1, fd = root_socket(&c, &port);
	int rx = loopback_socket(&rx_at), plain = loopback_socket(&plain_at);
	socklen_t len = sizeof(tos);
	uint8_t got = 0xFF;

	CHECK(fd >= 0 && rx >= 0 && plain >= 0 && port > 0);
	CHECK(getsockopt(fd, IPPROTO_IP, IP_TOS, &tos, &len) == 0 && tos == SDN_MC_ECT0);
	CHECK(sdn_mc_want_tos(rx) == 0);
	CHECK(sendto(fd, "data", 4, 0, (struct sockaddr *)&rx_at, sizeof(rx_at)) == 4);
	CHECK(recv_one(rx, &got) == 4 && got == SDN_MC_ECT0);
	/* Without IP_RECVTOS the byte is not reported: 0, as not ECN-capable. */
	CHECK(sendto(fd, "data", 4, 0, (struct sockaddr *)&plain_at, sizeof(plain_at)) == 4);
	CHECK(recv_one(plain, &got) == 4 && got == 0);
	close(fd);
	close(rx);
	close(plain);
}

/* A leader's socket sees CE: a sender whose TOS is CE stands for a marking switch. */
static void test_leader_sees_ce(void)
{
	struct sockaddr_in rx_at, tx_at;
	int rx = loopback_socket(&rx_at), tx = loopback_socket(&tx_at), ce = SDN_MC_CE;
	uint8_t got = 0;

	CHECK(rx >= 0 && tx >= 0 && sdn_mc_want_tos(rx) == 0);
	CHECK(setsockopt(tx, IPPROTO_IP, IP_TOS, &ce, sizeof(ce)) == 0);
	CHECK(sendto(tx, "mark", 4, 0, (struct sockaddr *)&rx_at, sizeof(rx_at)) == 4);
	CHECK(recv_one(rx, &got) == 4 && (got & SDN_MC_ECN_MASK) == SDN_MC_CE);
	close(rx);
	close(tx);
}

/* What the receiving child reports to the parent. */
struct child_report {
	int complete, equal;
	struct sdn_rb_receiver_stats st;
	struct sdn_mc_counters c;
};

struct stop_ctx {
	struct sdn_rb_receiver *r;
	uint64_t start, complete_at;
};

/* Stop 50 ms after completion (the final ACKs go out 5 ms apart), or after 10 s. */
static int stop_after_final_acks(void *ctx)
{
	struct stop_ctx *s = ctx;
	uint64_t now = sdn_mc_now_ns();

	if (!s->complete_at && sdn_rb_receiver_complete(s->r))
		s->complete_at = now;
	return (s->complete_at && now - s->complete_at > 50 * MS) || now - s->start > 10000 * MS;
}

static void fill(uint8_t *buf)
{
	for (uint32_t i = 0; i < LEN; i++)
		buf[i] = (uint8_t)(i * 7 + (i >> 9));
}

/* The child: receive on rx, ACK to root from a fresh socket, report on wfd. */
static void run_child(int rx, const struct sockaddr_in *root, int wfd)
{
	static uint8_t buf[LEN], want[LEN];
	struct sdn_rb_params p;
	struct child_report rep = {0};
	struct stop_ctx ctx;
	int ack = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	alarm(20);
	sdn_rb_params_default(&p);
	fill(want);
	ctx.r = sdn_rb_receiver_new(&p, 42, buf, LEN, 0, sdn_mc_now_ns());
	ctx.start = sdn_mc_now_ns();
	ctx.complete_at = 0;
	if (ack >= 0 && ctx.r) {
		sdn_mc_run_receiver(rx, ack, root, ctx.r, stop_after_final_acks, &ctx, &rep.c);
		rep.complete = sdn_rb_receiver_complete(ctx.r);
		rep.equal = memcmp(buf, want, LEN) == 0;
		sdn_rb_receiver_stats(ctx.r, &rep.st);
	}
	_exit(write(wfd, &rep, sizeof(rep)) == (ssize_t)sizeof(rep) ? 0 : 1);
}

/* One transfer over loopback; marked: the root's TOS is CE on every packet. */
static void transfer(int marked)
{
	static uint8_t src[LEN];
	struct sdn_mc_counters c;
	struct sdn_rb_params p;
	struct sdn_rb_sender_stats st;
	struct child_report rep = {0};
	struct sockaddr_in rx_at, root_at = {0};
	struct sdn_rb_sender *s;
	uint16_t port = 0;
	int fd = root_socket(&c, &port), rx = loopback_socket(&rx_at), pipefd[2], status = -1;
	int ce = SDN_MC_CE;
	pid_t pid;

	CHECK(fd >= 0 && rx >= 0 && sdn_mc_want_tos(rx) == 0 && pipe(pipefd) == 0);
	if (marked)
		CHECK(setsockopt(fd, IPPROTO_IP, IP_TOS, &ce, sizeof(ce)) == 0);
	root_at.sin_family = AF_INET;
	root_at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	root_at.sin_port = htons(port);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		close(pipefd[0]);
		close(fd);
		run_child(rx, &root_at, pipefd[1]);
	}
	close(pipefd[1]);
	close(rx);
	CHECK(pid > 0);
	fill(src);
	sdn_rb_params_default(&p);
	s = sdn_rb_sender_new(&p, 42, src, LEN, 1, sdn_mc_now_ns());
	CHECK(s && sdn_mc_run_sender(fd, &rx_at, s, &c) == SDN_RB_DONE);
	sdn_rb_sender_stats(s, &st);
	CHECK(read(pipefd[0], &rep, sizeof(rep)) == (ssize_t)sizeof(rep));
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	      WEXITSTATUS(status) == 0);
	CHECK(rep.complete && rep.equal && rep.st.packets == sdn_rb_npackets(LEN, 1400));
	/* Every datagram arrived ECN-capable. */
	CHECK(rep.c.ect_in == rep.st.packets + rep.st.duplicates + rep.st.ignored);
	if (marked) {
		/* Every valid datagram marked; echoed; the window cut on the echoes. */
		CHECK(rep.st.ce == rep.st.packets + rep.st.duplicates && rep.st.ece_acks > 0);
		CHECK(st.ece_acks > 0 && st.ecn_cuts > 0 && st.cuts >= st.ecn_cuts);
		CHECK(sdn_rb_sender_cwnd(s) < 10);
	} else {
		CHECK(rep.st.ce == 0 && rep.st.ece_acks == 0);
		CHECK(st.ece_acks == 0 && st.ecn_cuts == 0);
	}
	printf("mcast-transfer %s: sent=%llu cuts=%llu ecn_cuts=%llu ece_in=%llu ce=%llu ect=%llu\n",
	       marked ? "marked" : "plain", (unsigned long long)st.packets,
	       (unsigned long long)st.cuts, (unsigned long long)st.ecn_cuts,
	       (unsigned long long)st.ece_acks, (unsigned long long)rep.st.ce,
	       (unsigned long long)rep.c.ect_in);
	sdn_rb_sender_free(s);
	close(pipefd[0]);
	close(fd);
}

int main(void)
{
	test_root_sends_ect0();
	test_leader_sees_ce();
	transfer(0);
	transfer(1);
	printf("test_mcast: %d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}
