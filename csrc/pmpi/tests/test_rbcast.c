/* Unit tests of the replicated broadcast's engine (rbcast.c) over an in-memory
 * channel with a fake clock; run by tests/pmpi/test_rbcast_protocol.py, which also
 * decodes the "rbcast-vector KIND HEX" lines this program prints with the Python
 * codec (sdnmpi.wire.rbcast).  Usage: test_rbcast */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rbcast.h"

#include "check.h"

#define MAXR 8
#define GUARD 64
#define MS 1000000ull

/* A drop rule: returns 1 to drop the n-th DATA copy to receiver r (or the n-th ACK
 * from r when ack is 1). */
typedef int (*drop_fn)(int ack, uint32_t r, uint64_t n, uint32_t seq);
/* A marking rule: returns 1 if packet seq reaches receiver r CE-marked. */
typedef int (*mark_fn)(uint32_t r, uint32_t seq);

struct sim {
	struct sdn_rb_sender *s;
	struct sdn_rb_receiver *r[MAXR];
	uint8_t *src, *dst[MAXR];
	uint32_t nrecv;
	uint64_t len, now, data_n, ack_n;
	mark_fn mark; /* NULL: nothing marked */
	enum sdn_rb_action end;
};

static uint8_t *guarded(uint64_t len, uint8_t fill)
{
	uint8_t *p = malloc(len + 2 * GUARD);

	memset(p, fill, len + 2 * GUARD);
	return p + GUARD;
}

static int guards_intact(const uint8_t *p, uint64_t len, uint8_t fill)
{
	for (int i = 0; i < GUARD; i++)
		if (p[-1 - i] != fill || p[len + (uint64_t)i] != fill)
			return 0;
	return 1;
}

static void sim_init(struct sim *m, const struct sdn_rb_params *p, uint64_t len, uint32_t nrecv)
{
	memset(m, 0, sizeof(*m));
	m->len = len;
	m->nrecv = nrecv;
	m->now = 1000;
	m->src = guarded(len, 0xEE);
	for (uint64_t i = 0; i < len; i++)
		m->src[i] = (uint8_t)(i * 131 + (i >> 8));
	m->s = sdn_rb_sender_new(p, 77, m->src, len, nrecv, m->now);
	for (uint32_t i = 0; i < nrecv; i++) {
		m->dst[i] = guarded(len, 0xA5);
		memset(m->dst[i], 0, len);
		m->r[i] = sdn_rb_receiver_new(p, 77, m->dst[i], len, i, m->now);
	}
}

static void sim_free(struct sim *m)
{
	sdn_rb_sender_free(m->s);
	free(m->src - GUARD);
	for (uint32_t i = 0; i < m->nrecv; i++) {
		sdn_rb_receiver_free(m->r[i]);
		free(m->dst[i] - GUARD);
	}
}

/* Run until the sender ends (zero delay: a packet arrives when it is sent). */
static void sim_run(struct sim *m, drop_fn drop, uint64_t max_steps)
{
	uint8_t pkt[SDNMPI_RBCAST_HDR_LEN + SDNMPI_RBCAST_MAX_PAYLOAD], ack[SDNMPI_RBCAST_HDR_LEN];
	struct sdn_rb_packet out;
	uint64_t wake, rwake, step;

	for (step = 0; step < max_steps; step++) {
		enum sdn_rb_action a = sdn_rb_sender_poll(m->s, m->now, &out, &wake);
		uint64_t next = wake;
		if (a == SDN_RB_DONE || a == SDN_RB_FAILED) {
			m->end = a;
			return;
		}
		if (a == SDN_RB_SEND) {
			memcpy(pkt, out.hdr, SDNMPI_RBCAST_HDR_LEN);
			memcpy(pkt + SDNMPI_RBCAST_HDR_LEN, out.payload, out.payload_len);
			for (uint32_t i = 0; i < m->nrecv; i++)
				if (!drop || !drop(0, i, m->data_n++, out.seq))
					sdn_rb_receiver_on_data(m->r[i], m->now, pkt,
								SDNMPI_RBCAST_HDR_LEN + out.payload_len,
								m->mark && m->mark(i, out.seq));
			next = m->now;
		}
		for (uint32_t i = 0; i < m->nrecv; i++) {
			enum sdn_rb_action ra;
			while ((ra = sdn_rb_receiver_poll(m->r[i], m->now, ack, &rwake)) == SDN_RB_SEND)
				if (!drop || !drop(1, i, m->ack_n++, 0))
					sdn_rb_sender_on_ack(m->s, m->now, ack, sizeof(ack));
			if (ra == SDN_RB_WAIT && rwake < next)
				next = rwake;
		}
		if (next > m->now)
			m->now = next == UINT64_MAX ? m->now + MS : next;
	}
	m->end = SDN_RB_WAIT; /* did not terminate */
}

static int sim_delivered(const struct sim *m)
{
	for (uint32_t i = 0; i < m->nrecv; i++) {
		if (!sdn_rb_receiver_complete(m->r[i]) || memcmp(m->src, m->dst[i], m->len))
			return 0;
		if (!guards_intact(m->dst[i], m->len, 0xA5))
			return 0;
	}
	return 1;
}

static int drop_none(int ack, uint32_t r, uint64_t n, uint32_t seq)
{
	(void)ack, (void)r, (void)n, (void)seq;
	return 0;
}

static int drop_every_7th_data(int ack, uint32_t r, uint64_t n, uint32_t seq)
{
	(void)r, (void)seq;
	return !ack && n % 7 == 3;
}

static int drop_receiver_1(int ack, uint32_t r, uint64_t n, uint32_t seq)
{
	(void)ack, (void)n, (void)seq;
	return r == 1;
}

static int drop_all_acks(int ack, uint32_t r, uint64_t n, uint32_t seq)
{
	(void)r, (void)n, (void)seq;
	return ack;
}

/* The first window lost to every receiver (receivers that joined the group late). */
static int drop_first_30(int ack, uint32_t r, uint64_t n, uint32_t seq)
{
	(void)r, (void)seq;
	return !ack && n < 30;
}

/* A long blackout: 100 transmissions to each of 3 receivers.  With a congestion
 * window of 10 and a backed-off timeout the receivers' dead timeout passes first:
 * FAILED, so the library falls back (DONE would be as good). */
static int drop_first_300(int ack, uint32_t r, uint64_t n, uint32_t seq)
{
	(void)r, (void)seq;
	return !ack && n < 300;
}

static int drop_last_packet_once(int ack, uint32_t r, uint64_t n, uint32_t seq)
{
	static int dropped[MAXR];

	(void)n;
	if (ack || seq != 9 || dropped[r])
		return 0;
	dropped[r] = 1;
	return 1;
}

static void test_params(void)
{
	struct sdn_rb_params p;

	sdn_rb_params_default(&p);
	CHECK(sdn_rb_params_check(&p) == 0);
	CHECK(p.payload_bytes == 1400 && p.send_dead_ns > p.recv_dead_ns);
	p.send_dead_ns = p.recv_dead_ns;
	CHECK(sdn_rb_params_check(&p) == -1);
	sdn_rb_params_default(&p);
	p.payload_bytes = 0;
	CHECK(sdn_rb_params_check(&p) == -1);
	CHECK(sdn_rb_sender_new(&p, 1, "x", 1, 1, 0) == NULL);
	CHECK(sdn_rb_npackets(0, 1400) == 0);
	CHECK(sdn_rb_npackets(1400, 1400) == 1);
	CHECK(sdn_rb_npackets(1401, 1400) == 2);
	CHECK(sdn_rb_npackets(1ull << 60, 1) == UINT32_MAX);
}

static void run_case(const char *name, uint64_t len, uint32_t nrecv, drop_fn drop,
		     enum sdn_rb_action want)
{
	struct sdn_rb_params p;
	struct sim m;

	sdn_rb_params_default(&p);
	sim_init(&m, &p, len, nrecv);
	CHECK(m.s != NULL);
	sim_run(&m, drop, 2000000);
	if (m.end != want)
		fprintf(stderr, "case %s: ended %d, wanted %d\n", name, (int)m.end, (int)want);
	CHECK(m.end == want);
	if (want == SDN_RB_DONE)
		CHECK(sim_delivered(&m));
	for (uint32_t i = 0; i < nrecv; i++)
		CHECK(guards_intact(m.dst[i], len, 0xA5));
	sim_free(&m);
}

static void test_scenarios(void)
{
	struct sdn_rb_params p;
	struct sdn_rb_sender_stats st;
	struct sim m;
	int32_t who = -2;

	run_case("lossless", 100000, 3, drop_none, SDN_RB_DONE);
	run_case("empty", 0, 2, drop_none, SDN_RB_DONE);
	run_case("one byte", 1, 1, drop_none, SDN_RB_DONE);
	run_case("every 7th", 300000, 4, drop_every_7th_data, SDN_RB_DONE);
	run_case("first 30", 200000, 3, drop_first_30, SDN_RB_DONE);
	run_case("first 300", 200000, 3, drop_first_300, SDN_RB_FAILED);
	run_case("tail", 14000, 2, drop_last_packet_once, SDN_RB_DONE);
	run_case("blackout", 50000, 3, drop_receiver_1, SDN_RB_FAILED);
	run_case("no acks", 50000, 2, drop_all_acks, SDN_RB_FAILED);

	/* Who failed and when: receiver 1, silent from the start, after send_dead_ns;
	 * receiver 1 itself gave up after recv_dead_ns, and so did receiver 0: the root
	 * never sent beyond its first window (the slowest receiver holds it back). */
	sdn_rb_params_default(&p);
	sim_init(&m, &p, 50000, 3);
	sim_run(&m, drop_receiver_1, 2000000);
	CHECK(m.end == SDN_RB_FAILED);
	CHECK(sdn_rb_sender_failure(m.s, &who) == SDN_RB_FAIL_DEAD && who == 1);
	CHECK(m.now >= 1000 + p.send_dead_ns && m.now < 1000 + p.send_dead_ns + 2 * p.ack_interval_ns);
	{
		uint8_t ack[SDNMPI_RBCAST_HDR_LEN];
		uint64_t wake;
		CHECK(sdn_rb_receiver_poll(m.r[1], m.now, ack, &wake) == SDN_RB_FAILED);
		CHECK(sdn_rb_receiver_poll(m.r[0], m.now, ack, &wake) == SDN_RB_FAILED);
	}
	sim_free(&m);

	/* Repairs counted; the lossless run sends each packet once. */
	sim_init(&m, &p, 300000, 4);
	sim_run(&m, drop_every_7th_data, 2000000);
	sdn_rb_sender_stats(m.s, &st);
	CHECK(st.repairs > 0 && st.packets == sdn_rb_npackets(300000, 1400) + st.repairs);
	sim_free(&m);
	sim_init(&m, &p, 300000, 4);
	sim_run(&m, drop_none, 2000000);
	sdn_rb_sender_stats(m.s, &st);
	CHECK(st.repairs == 0 && st.packets == sdn_rb_npackets(300000, 1400));
	sim_free(&m);
}

static void test_window_and_abort(void)
{
	struct sdn_rb_params p;
	struct sdn_rb_packet out;
	uint8_t buf[100000] = {0}, ack[SDNMPI_RBCAST_HDR_LEN];
	uint64_t wake;
	int32_t who;
	int sent = 0;
	struct sdn_rb_sender *s;

	sdn_rb_params_default(&p);
	p.window_pkts = 10;
	s = sdn_rb_sender_new(&p, 5, buf, sizeof(buf), 2, 0);
	while (sdn_rb_sender_poll(s, 0, &out, &wake) == SDN_RB_SEND)
		sent++;
	/* The initial window (10 packets); before any round-trip sample the timeout is
	 * 10 times its floor. */
	CHECK(sent == 10 && wake == 10 * p.rto_ns);
	/* The tail retransmit after it: packet 0 again, a repair; the timeout doubles. */
	CHECK(sdn_rb_sender_poll(s, 10 * p.rto_ns, &out, &wake) == SDN_RB_SEND);
	CHECK(out.seq == 0 && out.repair);
	CHECK(sdn_rb_sender_poll(s, 10 * p.rto_ns, &out, &wake) == SDN_RB_WAIT);
	CHECK(wake == 30 * p.rto_ns);
	sdn_rb_abort_ack(5, sizeof(buf), sdn_rb_npackets(sizeof(buf), 1400), 1, ack);
	CHECK(sdn_rb_sender_on_ack(s, 10 * p.rto_ns, ack, sizeof(ack)) == 0);
	CHECK(sdn_rb_sender_poll(s, 10 * p.rto_ns, &out, &wake) == SDN_RB_FAILED);
	CHECK(sdn_rb_sender_failure(s, &who) == SDN_RB_FAIL_ABORT && who == 1);
	sdn_rb_sender_free(s);
}

static void put_u(uint8_t *pkt, unsigned off, uint64_t v, unsigned n)
{
	sdnmpi_rbcast_put(pkt + off, v, n);
}

/* Packets that differ from a valid one in one field are ignored, nothing copied. */
static void test_hostile_packets(void)
{
	struct sdn_rb_params p;
	struct sdn_rb_sender *s;
	struct sdn_rb_receiver *r;
	struct sdn_rb_packet out;
	uint8_t src[3000], *dst = guarded(3000, 0x5A), pkt[SDNMPI_RBCAST_HDR_LEN + 1400], bad[sizeof(pkt)];
	uint64_t wake;
	size_t n;
	static const struct {
		unsigned off, size;
		uint64_t value;
	} edits[] = {
		{SDNMPI_RBCAST_OFF_MAGIC, 4, 0x11111111},    {SDNMPI_RBCAST_OFF_VERSION, 1, 1},
		{SDNMPI_RBCAST_OFF_TYPE, 1, 2},              {SDNMPI_RBCAST_OFF_SESSION, 8, 8},
		{SDNMPI_RBCAST_OFF_SEQ, 4, 3},               {SDNMPI_RBCAST_OFF_SEQ, 4, 0xFFFFFFFF},
		{SDNMPI_RBCAST_OFF_NPACKETS, 4, 4},          {SDNMPI_RBCAST_OFF_TOTAL_LEN, 8, 3001},
		{SDNMPI_RBCAST_OFF_TOTAL_LEN, 8, UINT64_MAX}, {SDNMPI_RBCAST_OFF_PAYLOAD_LEN, 4, 1401},
		{SDNMPI_RBCAST_OFF_PAYLOAD_LEN, 4, 1399},    {SDNMPI_RBCAST_OFF_SEQ, 4, 2},
	};

	memset(src, 0x42, sizeof(src));
	memset(dst, 0, 3000);
	sdn_rb_params_default(&p);
	s = sdn_rb_sender_new(&p, 9, src, sizeof(src), 1, 0);
	r = sdn_rb_receiver_new(&p, 9, dst, 3000, 0, 0);
	CHECK(sdn_rb_sender_poll(s, 0, &out, &wake) == SDN_RB_SEND && out.seq == 0);
	memcpy(pkt, out.hdr, SDNMPI_RBCAST_HDR_LEN);
	memcpy(pkt + SDNMPI_RBCAST_HDR_LEN, out.payload, out.payload_len);
	n = SDNMPI_RBCAST_HDR_LEN + out.payload_len;
	for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
		memcpy(bad, pkt, n);
		put_u(bad, edits[i].off, edits[i].value, edits[i].size);
		CHECK(sdn_rb_receiver_on_data(r, 1, bad, n, 0) == -1);
	}
	CHECK(sdn_rb_receiver_on_data(r, 1, pkt, n - 1, 0) == -1);
	CHECK(sdn_rb_receiver_on_data(r, 1, pkt, 10, 0) == -1);
	CHECK(sdn_rb_receiver_on_data(r, 1, NULL, 0, 0) == -1);
	for (size_t i = 0; i < 3000; i++)
		CHECK(dst[i] == 0);
	CHECK(sdn_rb_receiver_on_data(r, 1, pkt, n, 0) == 0);
	CHECK(sdn_rb_receiver_on_data(r, 1, pkt, n, 0) == 1);
	CHECK(dst[0] == 0x42 && dst[1399] == 0x42 && dst[1400] == 0);
	CHECK(guards_intact(dst, 3000, 0x5A));
	/* An ACK is not DATA, and DATA is not an ACK. */
	CHECK(sdn_rb_sender_on_ack(s, 1, pkt, n) == -1);
	sdn_rb_sender_free(s);
	sdn_rb_receiver_free(r);
	free(dst - GUARD);
}

/* The final ACK is sent final_acks times, then COMPLETE; a duplicate re-ACKs. */
static void test_final_acks(void)
{
	struct sdn_rb_params p;
	struct sdn_rb_sender *s;
	struct sdn_rb_receiver *r;
	struct sdn_rb_packet out;
	uint8_t src[100] = {1}, dst[100], pkt[200], ack[SDNMPI_RBCAST_HDR_LEN];
	uint64_t wake, t = 0;
	int acks = 0;

	sdn_rb_params_default(&p);
	s = sdn_rb_sender_new(&p, 3, src, sizeof(src), 1, 0);
	r = sdn_rb_receiver_new(&p, 3, dst, sizeof(dst), 0, 0);
	CHECK(sdn_rb_receiver_poll(r, 0, ack, &wake) == SDN_RB_SEND); /* hello */
	CHECK(sdn_rb_sender_poll(s, 0, &out, &wake) == SDN_RB_SEND);
	memcpy(pkt, out.hdr, SDNMPI_RBCAST_HDR_LEN);
	memcpy(pkt + SDNMPI_RBCAST_HDR_LEN, out.payload, out.payload_len);
	CHECK(sdn_rb_receiver_on_data(r, 0, pkt, SDNMPI_RBCAST_HDR_LEN + 100, 0) == 0);
	for (int i = 0; i < 10; i++, t += p.ack_interval_ns) {
		enum sdn_rb_action a = sdn_rb_receiver_poll(r, t, ack, &wake);
		acks += a == SDN_RB_SEND;
		if (a == SDN_RB_COMPLETE)
			break;
	}
	CHECK(acks == (int)p.final_acks);
	CHECK(sdn_rb_receiver_poll(r, t, ack, &wake) == SDN_RB_COMPLETE);
	CHECK(sdn_rb_receiver_on_data(r, t, pkt, SDNMPI_RBCAST_HDR_LEN + 100, 0) == 1);
	CHECK(sdn_rb_receiver_poll(r, t + p.repair_holdoff_ns, ack, &wake) == SDN_RB_SEND);
	CHECK(sdn_rb_sender_on_ack(s, t, ack, sizeof(ack)) == 0);
	CHECK(sdn_rb_sender_poll(s, t, &out, &wake) == SDN_RB_DONE);
	/* Shared vectors for the Python codec: this ACK and a DATA header. */
	printf("rbcast-vector ack ");
	for (size_t i = 0; i < sizeof(ack); i++)
		printf("%02x", ack[i]);
	printf("\nrbcast-vector data ");
	for (size_t i = 0; i < SDNMPI_RBCAST_HDR_LEN + 100; i++)
		printf("%02x", pkt[i]);
	printf("\n");
	sdn_rb_sender_free(s);
	sdn_rb_receiver_free(r);
}

/* An ACK of receiver 0 of session 7 with these flags: cum and the bitmap of the
 * packets after it. */
static void ack_flags(uint64_t len, uint32_t cum, uint64_t bitmap, uint16_t flags,
		      uint8_t ack[SDNMPI_RBCAST_HDR_LEN])
{
	struct sdnmpi_rbcast_hdr h = {0};

	h.flags = flags;
	h.magic = SDNMPI_RBCAST_MAGIC;
	h.version = SDNMPI_RBCAST_VERSION;
	h.type = SDNMPI_RBCAST_TYPE_ACK;
	h.session = 7;
	h.seq = cum;
	h.npackets = sdn_rb_npackets(len, 1400);
	h.total_len = len;
	h.ack_bitmap = bitmap;
	/* The echo of a receiver that took every packet it shows as first sent, in order:
	 * the highest one's transmission number (packet k went out as the (k+1)-th). */
	h.xmit = bitmap ? (uint64_t)cum + 2 + (uint64_t)(63 - __builtin_clzll(bitmap)) : cum;
	sdnmpi_rbcast_encode(&h, ack);
}

static void ack_of(uint64_t len, uint32_t cum, uint64_t bitmap, uint8_t ack[SDNMPI_RBCAST_HDR_LEN])
{
	ack_flags(len, cum, bitmap, 0, ack);
}

/* The congestion window and the timeout: 10 packets at first, slow start on ACKs,
 * the timeout from the measured round trip, one cut per window of loss, and a
 * repair not repeated before it could have arrived. */
static void test_congestion(void)
{
	static uint8_t buf[1 << 20];
	struct sdn_rb_params p;
	struct sdn_rb_packet out;
	struct sdn_rb_sender_stats st;
	struct sdn_rb_sender *s;
	uint8_t ack[SDNMPI_RBCAST_HDR_LEN];
	uint64_t wake, t;
	int sent = 0;

	sdn_rb_params_default(&p);
	s = sdn_rb_sender_new(&p, 7, buf, sizeof(buf), 1, 0);
	while (sdn_rb_sender_poll(s, 0, &out, &wake) == SDN_RB_SEND)
		sent++;
	CHECK(sent == 10);
	/* Packets 0..9 acked 20 ms later: srtt 20 ms, rttvar 10 ms, timeout 60 ms; the
	 * window doubles (slow start): 20 more packets. */
	t = 20 * MS;
	ack_of(sizeof(buf), 10, 0, ack);
	CHECK(sdn_rb_sender_on_ack(s, t, ack, sizeof(ack)) == 0);
	sent = 0;
	while (sdn_rb_sender_poll(s, t, &out, &wake) == SDN_RB_SEND)
		sent++;
	CHECK(sent == 20 && out.seq == 29);
	CHECK(wake == t + 60 * MS);
	/* Packet 10 lost, 11..29 in: repaired once, the window halved once. */
	t += 20 * MS;
	ack_of(sizeof(buf), 10, (1ull << 19) - 1, ack);
	CHECK(sdn_rb_sender_on_ack(s, t, ack, sizeof(ack)) == 0);
	CHECK(sdn_rb_sender_poll(s, t, &out, &wake) == SDN_RB_SEND);
	CHECK(out.seq == 10 && out.repair);
	/* The same gap reported again before the repair could arrive: no second repair,
	 * no second cut; the window (now 10, the slowest receiver at 10) allows nothing
	 * new beyond packet 29. */
	CHECK(sdn_rb_sender_on_ack(s, t + 3 * MS, ack, sizeof(ack)) == 0);
	CHECK(sdn_rb_sender_poll(s, t + 3 * MS, &out, &wake) == SDN_RB_WAIT);
	sdn_rb_sender_stats(s, &st);
	CHECK(st.cuts == 1 && st.repairs == 1 && st.packets == 31);
	sdn_rb_sender_free(s);
}

/* DATA packet seq of a 1 MiB broadcast of session 7 (payload zeros) into pkt; its
 * length. */
static size_t data_of(uint32_t seq, uint8_t *pkt)
{
	struct sdnmpi_rbcast_hdr h = {0};
	uint64_t len = 1 << 20;

	h.magic = SDNMPI_RBCAST_MAGIC;
	h.version = SDNMPI_RBCAST_VERSION;
	h.type = SDNMPI_RBCAST_TYPE_DATA;
	h.session = 7;
	h.seq = seq;
	h.npackets = sdn_rb_npackets(len, 1400);
	h.total_len = len;
	h.payload_len = 1400;
	sdnmpi_rbcast_encode(&h, pkt);
	memset(pkt + SDNMPI_RBCAST_HDR_LEN, 0, 1400);
	return SDNMPI_RBCAST_HDR_LEN + 1400;
}

/* Feed packets lo..hi-1 (CE-marked if ce) to r at t; then what poll does, the ACK's
 * flags in *flags (0 if it sent none). */
static enum sdn_rb_action feed(struct sdn_rb_receiver *r, uint64_t t, uint32_t lo, uint32_t hi,
			       int ce, uint16_t *flags)
{
	uint8_t pkt[SDNMPI_RBCAST_HDR_LEN + 1400], ack[SDNMPI_RBCAST_HDR_LEN];
	struct sdnmpi_rbcast_hdr h;
	enum sdn_rb_action a;
	uint64_t wake;

	for (uint32_t seq = lo; seq < hi; seq++)
		CHECK(sdn_rb_receiver_on_data(r, t, pkt, data_of(seq, pkt), ce) == 0);
	a = sdn_rb_receiver_poll(r, t, ack, &wake);
	*flags = 0;
	if (a == SDN_RB_SEND && sdn_rb_decode(ack, sizeof(ack), &h) == 0)
		*flags = h.flags;
	return a;
}

/* Receiver: a CE mark is echoed (ECE) on the next ACK, at once when it opens an
 * episode (the previous ACK had no ECE), on the ACK due anyway within one; an ACK
 * without ECE ends the episode.  Marks on ignored packets count nothing. */
static void test_ecn_receiver(void)
{
	static uint8_t dst[1 << 20];
	uint8_t pkt[SDNMPI_RBCAST_HDR_LEN + 1400], ack[SDNMPI_RBCAST_HDR_LEN];
	struct sdn_rb_receiver_stats st;
	struct sdn_rb_params p;
	struct sdn_rb_receiver *r;
	uint16_t flags;
	uint64_t wake;
	size_t n;

	sdn_rb_params_default(&p);
	r = sdn_rb_receiver_new(&p, 7, dst, sizeof(dst), 0, 0);
	CHECK(sdn_rb_receiver_poll(r, 0, ack, &wake) == SDN_RB_SEND); /* hello */
	CHECK(feed(r, 1, 0, 1, 0, &flags) == SDN_RB_WAIT);             /* thinned */
	CHECK(feed(r, 1, 1, 2, 1, &flags) == SDN_RB_SEND && flags == SDNMPI_RBCAST_FLAG_ECE);
	CHECK(feed(r, 1, 2, 3, 1, &flags) == SDN_RB_WAIT); /* the episode is on: thinned */
	CHECK(feed(r, 1, 3, 17, 0, &flags) == SDN_RB_WAIT);
	CHECK(feed(r, 1, 17, 18, 0, &flags) == SDN_RB_SEND && flags == SDNMPI_RBCAST_FLAG_ECE);
	CHECK(feed(r, 1, 18, 34, 0, &flags) == SDN_RB_SEND && flags == 0); /* episode over */
	CHECK(feed(r, 1, 34, 35, 1, &flags) == SDN_RB_SEND && flags == SDNMPI_RBCAST_FLAG_ECE);
	/* A foreign or malformed packet's mark is no congestion of ours. */
	n = data_of(36, pkt);
	pkt[SDNMPI_RBCAST_OFF_SESSION] ^= 1;
	CHECK(sdn_rb_receiver_on_data(r, 1, pkt, n, 1) == -1);
	CHECK(sdn_rb_receiver_on_data(r, 1, pkt, 10, 1) == -1);
	CHECK(feed(r, 1, 35, 36, 0, &flags) == SDN_RB_WAIT);
	/* A marked duplicate (a repair that queued) is congestion too; the episode is
	 * still on (the last ACK had ECE), so it rides on the duplicate's ACK. */
	CHECK(sdn_rb_receiver_on_data(r, 1, pkt, data_of(0, pkt), 1) == 1);
	CHECK(sdn_rb_receiver_poll(r, 1, ack, &wake) == SDN_RB_WAIT);
	CHECK(sdn_rb_receiver_poll(r, 1 + p.repair_holdoff_ns, ack, &wake) == SDN_RB_SEND);
	CHECK(ack[SDNMPI_RBCAST_OFF_FLAGS] == SDNMPI_RBCAST_FLAG_ECE);
	sdn_rb_receiver_stats(r, &st);
	CHECK(st.ce == 4 && st.ece_acks == 4 && st.ignored == 2);
	sdn_rb_receiver_free(r);
}

/* Sender: an ECE ACK halves the window once per window of data (a mark on a packet
 * sent before the last cut cuts nothing), repairs nothing, and is counted; the same
 * ACKs without ECE leave the window growing. */
static void test_ecn_sender(void)
{
	static uint8_t buf[1 << 20];
	struct sdn_rb_params p;
	struct sdn_rb_packet out;
	struct sdn_rb_sender_stats st;
	struct sdn_rb_sender *s[2];
	uint8_t ack[SDNMPI_RBCAST_HDR_LEN];
	uint64_t wake, t;
	double before;
	int sent;

	sdn_rb_params_default(&p);
	for (int ece = 0; ece < 2; ece++) {
		uint16_t f = ece ? SDNMPI_RBCAST_FLAG_ECE : 0;
		s[ece] = sdn_rb_sender_new(&p, 7, buf, sizeof(buf), 1, 0);
		while (sdn_rb_sender_poll(s[ece], 0, &out, &wake) == SDN_RB_SEND)
			;
		t = 20 * MS;
		ack_of(sizeof(buf), 10, 0, ack); /* slow start: 20 */
		CHECK(sdn_rb_sender_on_ack(s[ece], t, ack, sizeof(ack)) == 0);
		while (sdn_rb_sender_poll(s[ece], t, &out, &wake) == SDN_RB_SEND)
			; /* packets 10..29 */
		/* Packets up to 19 in, one marked: the window would be 30, it is 15; nothing
		 * is repaired, 5 new packets go (the slowest receiver at 20, 30 sent). */
		t += 20 * MS;
		ack_flags(sizeof(buf), 20, 0, f, ack);
		CHECK(sdn_rb_sender_on_ack(s[ece], t, ack, sizeof(ack)) == 0);
		CHECK(sdn_rb_sender_cwnd(s[ece]) == (ece ? 15.0 : 30.0));
		sent = 0;
		while (sdn_rb_sender_poll(s[ece], t, &out, &wake) == SDN_RB_SEND) {
			CHECK(!out.repair);
			sent++;
		}
		CHECK(sent == (ece ? 5 : 20));
		/* Marks on packets up to 28, all sent before the cut (at 30): no second cut. */
		before = sdn_rb_sender_cwnd(s[ece]);
		ack_flags(sizeof(buf), 29, 0, f, ack);
		CHECK(sdn_rb_sender_on_ack(s[ece], t + MS, ack, sizeof(ack)) == 0);
		CHECK(sdn_rb_sender_cwnd(s[ece]) > before);
		/* A mark on packet 30, sent after the cut: the second cut. */
		before = sdn_rb_sender_cwnd(s[ece]);
		ack_flags(sizeof(buf), 31, 0, f, ack);
		CHECK(sdn_rb_sender_on_ack(s[ece], t + 2 * MS, ack, sizeof(ack)) == 0);
		CHECK(ece ? sdn_rb_sender_cwnd(s[ece]) < before / 2 + 1
			  : sdn_rb_sender_cwnd(s[ece]) > before);
		sdn_rb_sender_stats(s[ece], &st);
		CHECK(st.ece_acks == (ece ? 3u : 0u) && st.ecn_cuts == (ece ? 2u : 0u));
		CHECK(st.cuts == st.ecn_cuts && st.repairs == 0);
	}
	CHECK(sdn_rb_sender_cwnd(s[1]) < sdn_rb_sender_cwnd(s[0]));
	/* An ECE ACK that shows no packet held is counted, cuts nothing. */
	ack_flags(sizeof(buf), 0, 0, SDNMPI_RBCAST_FLAG_ECE, ack);
	before = sdn_rb_sender_cwnd(s[0]);
	CHECK(sdn_rb_sender_on_ack(s[0], t + 3 * MS, ack, sizeof(ack)) == 0);
	sdn_rb_sender_stats(s[0], &st);
	CHECK(st.ece_acks == 1 && st.cuts == 0 && sdn_rb_sender_cwnd(s[0]) == before);
	sdn_rb_sender_free(s[0]);
	sdn_rb_sender_free(s[1]);
}

static int mark_every_5th_to_0(uint32_t r, uint32_t seq)
{
	return r == 0 && seq % 5 == 0;
}

/* A whole transfer with marks and no loss: delivered, the window cut by the marks
 * alone, nothing repaired; without marks no cut. */
static void test_ecn_transfer(void)
{
	struct sdn_rb_params p;
	struct sdn_rb_sender_stats st[2];
	double cwnd[2];
	struct sim m;

	sdn_rb_params_default(&p);
	for (int marked = 0; marked < 2; marked++) {
		sim_init(&m, &p, 1 << 20, 3);
		m.mark = marked ? mark_every_5th_to_0 : NULL;
		sim_run(&m, drop_none, 2000000);
		CHECK(m.end == SDN_RB_DONE && sim_delivered(&m));
		sdn_rb_sender_stats(m.s, &st[marked]);
		cwnd[marked] = sdn_rb_sender_cwnd(m.s);
		sim_free(&m);
	}
	CHECK(st[0].cuts == 0 && st[0].ece_acks == 0 && st[0].repairs == 0);
	CHECK(st[1].ecn_cuts > 0 && st[1].cuts == st[1].ecn_cuts && st[1].repairs == 0);
	CHECK(st[1].packets == st[0].packets);
	CHECK(cwnd[1] < cwnd[0] && cwnd[0] == p.window_pkts);
}

/* An ACK of cum with no bitmap echoing xmit (the latest copy its receiver took). */
static void ack_echo(uint64_t len, uint32_t cum, uint64_t xmit, uint8_t ack[SDNMPI_RBCAST_HDR_LEN])
{
	struct sdnmpi_rbcast_hdr h;

	ack_of(len, cum, 0, ack);
	CHECK(sdnmpi_rbcast_decode(ack, SDNMPI_RBCAST_HDR_LEN, &h) == 0);
	h.xmit = xmit;
	sdnmpi_rbcast_encode(&h, ack);
}

/* 30 packets out (10, then 20 on an ACK of the first 10 at 20 ms: timeout 60 ms), then
 * silence until the timeout retransmits packet 10 as the 31st copy. */
static struct sdn_rb_sender *timed_out(uint8_t *buf, uint64_t len, double *cwnd_before)
{
	struct sdn_rb_params p;
	struct sdn_rb_packet out;
	struct sdn_rb_sender *s;
	uint8_t ack[SDNMPI_RBCAST_HDR_LEN];
	uint64_t wake;

	sdn_rb_params_default(&p);
	s = sdn_rb_sender_new(&p, 7, buf, len, 1, 0);
	while (sdn_rb_sender_poll(s, 0, &out, &wake) == SDN_RB_SEND)
		;
	ack_of(len, 10, 0, ack);
	CHECK(sdn_rb_sender_on_ack(s, 20 * MS, ack, sizeof(ack)) == 0);
	while (sdn_rb_sender_poll(s, 20 * MS, &out, &wake) == SDN_RB_SEND)
		;
	*cwnd_before = sdn_rb_sender_cwnd(s);
	CHECK(wake == 80 * MS);
	CHECK(sdn_rb_sender_poll(s, 80 * MS, &out, &wake) == SDN_RB_SEND);
	CHECK(out.seq == 10 && out.repair && sdn_rb_sender_cwnd(s) == 2.0);
	{
		struct sdnmpi_rbcast_hdr h;

		CHECK(sdnmpi_rbcast_decode(out.hdr, SDNMPI_RBCAST_HDR_LEN, &h) == 0 && h.xmit == 31);
	}
	return s;
}

/* A timeout is undone when the receiver that lacked the packet shows it held by an
 * ACK echoing an older copy (Eifel): the window and the timeout as before it; not when
 * the ACK echoes the retransmission.  A lost tail: once the retransmission of its
 * first packet arrives (the echo), every packet sent before it is known lost at once
 * (RACK on the echo), without a second timeout and without a second cut.  An echo
 * of a copy never sent is not believed. */
static void test_echo(void)
{
	static uint8_t buf[1 << 20];
	struct sdn_rb_packet out;
	struct sdn_rb_sender_stats st;
	struct sdn_rb_sender *s;
	uint8_t ack[SDNMPI_RBCAST_HDR_LEN];
	uint64_t wake;
	double before;
	uint32_t seq;

	/* Spurious: the original of packet 10 (and 11..29) got there, the ACK was late. */
	s = timed_out(buf, sizeof(buf), &before);
	CHECK(before == 20.0);
	ack_echo(sizeof(buf), 30, 30, ack);
	CHECK(sdn_rb_sender_on_ack(s, 90 * MS, ack, sizeof(ack)) == 0);
	sdn_rb_sender_stats(s, &st);
	CHECK(st.tail == 1 && st.undone == 1 && st.cuts == 0);
	CHECK(sdn_rb_sender_cwnd(s) == 40.0); /* 20 restored, then slow start by 20 */
	sdn_rb_sender_free(s);

	/* Real: the ACK echoes the retransmission (and the later packets came too). */
	s = timed_out(buf, sizeof(buf), &before);
	ack_echo(sizeof(buf), 30, 31, ack);
	CHECK(sdn_rb_sender_on_ack(s, 90 * MS, ack, sizeof(ack)) == 0);
	sdn_rb_sender_stats(s, &st);
	CHECK(st.tail == 1 && st.undone == 0);
	CHECK(sdn_rb_sender_cwnd(s) == 22.0); /* from 2, slow start by 20 below ssthresh 10 */
	sdn_rb_sender_free(s);

	/* A lost tail, 10..29: the retransmission of 10 arrives (echo 31), so 11..29, sent
	 * before it, are lost: all repaired now, in order, no cut. */
	s = timed_out(buf, sizeof(buf), &before);
	ack_echo(sizeof(buf), 11, 31, ack);
	CHECK(sdn_rb_sender_on_ack(s, 85 * MS, ack, sizeof(ack)) == 0);
	for (seq = 11; seq < 30; seq++) {
		CHECK(sdn_rb_sender_poll(s, 85 * MS, &out, &wake) == SDN_RB_SEND);
		CHECK(out.seq == seq && out.repair);
	}
	sdn_rb_sender_stats(s, &st);
	CHECK(st.repairs == 20 && st.tail == 1 && st.cuts == 0 && st.undone == 0);
	sdn_rb_sender_free(s);

	/* The same tail, the ACK echoing a copy never sent: taken, its echo not believed,
	 * nothing known lost (the rest waits for a timeout). */
	s = timed_out(buf, sizeof(buf), &before);
	ack_echo(sizeof(buf), 11, UINT64_MAX, ack);
	CHECK(sdn_rb_sender_on_ack(s, 85 * MS, ack, sizeof(ack)) == 0);
	CHECK(sdn_rb_sender_poll(s, 85 * MS, &out, &wake) == SDN_RB_WAIT);
	sdn_rb_sender_stats(s, &st);
	CHECK(st.acks == 2 && st.ignored == 0 && st.repairs == 1);
	sdn_rb_sender_free(s);
}

int main(void)
{
	test_params();
	test_scenarios();
	test_window_and_abort();
	test_congestion();
	test_echo();
	test_ecn_receiver();
	test_ecn_sender();
	test_ecn_transfer();
	test_hostile_packets();
	test_final_acks();
	printf("test_rbcast: %d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}
