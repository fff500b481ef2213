/* The replicated broadcast's reliability engine (see rbcast.h): pure, no I/O. */
#include "rbcast.h"

#include <stdlib.h>
#include <string.h>

#define MS 1000000ull

struct rb_peer {
	uint32_t cum;        /* leading packets it holds */
	uint64_t bitmap;     /* packets cum+1+i it holds */
	uint64_t last_heard; /* its last valid ACK (or the start) */
	uint64_t rack;       /* the highest xmit it echoed: the latest copy it has taken */
	uint64_t probe_at;   /* when its last timeout marked a repair (0: none yet) */
	int behind;          /* it lacked the packet of the last tail timeout (see undo) */
};

/* What a tail timeout changed, to be undone if it proves spurious (Eifel, RFC 3522):
 * every receiver that lacked the packet shows it held by an ACK echoing no copy as
 * late as the retransmission, so each took the original. */
struct rb_undo {
	int pending;      /* receivers still to show it (0: nothing to undo) */
	uint32_t seq;     /* the packet retransmitted */
	uint64_t xmit;    /* the retransmission's xmit */
	double cwnd, ssthresh;
	uint32_t recover;
	uint64_t rto;
};

struct sdn_rb_sender {
	struct sdn_rb_params p;
	const uint8_t *buf;
	uint64_t len, session, start;
	uint32_t npackets, nrecv;
	uint32_t next_new;  /* first packet never sent */
	uint32_t min_cum;   /* the slowest receiver's cumulative ack */
	uint32_t repair_lo; /* no repair is marked below this */
	uint32_t n_repair;  /* packets marked for repair */
	uint8_t *need;      /* per packet: 1 = marked for repair */
	uint8_t *sends;     /* per packet: times sent, saturating (Karn: one send, one sample) */
	uint64_t *last_sent;
	uint64_t *order;    /* per packet: the sender's transmission count at its last send */
	uint64_t sent_total;
	uint32_t since_req; /* copies sent since the last one that asked for an ACK */
	/* Round-trip estimate (RFC 6298 from the highest packet an ACK shows, sent once)
	 * and the congestion window (AIMD in packets, one cut per window of loss). */
	uint64_t srtt, rttvar, rto;
	uint64_t progress_at; /* when the slowest receiver last moved (or the start) */
	double cwnd;
	double ssthresh;
	uint32_t recover; /* no second cut until the slowest receiver passes this */
	struct rb_peer *peer;
	struct rb_undo undo;
	enum sdn_rb_fail fail;
	int32_t fail_peer;
	struct sdn_rb_sender_stats st;
};

struct sdn_rb_receiver {
	struct sdn_rb_params p;
	uint8_t *buf;
	uint64_t len, session;
	uint32_t npackets, index;
	uint8_t *have; /* per packet: 1 = in the buffer */
	uint32_t cum, top, received, since_ack; /* top: highest packet held + 1 */
	uint64_t last_ack, last_new;
	int ack_due, dup_due, final_left, complete, failed;
	int ce_pending; /* a CE mark since the last ACK: the next one carries ECE */
	int ece_sent;   /* the last ACK carried ECE (a congestion episode is on) */
	uint64_t xmit;  /* the highest xmit of any valid copy taken: echoed in ACKs */
	struct sdn_rb_receiver_stats st;
};

static uint64_t elapsed(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

static uint64_t earliest(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t after(uint64_t then, uint64_t span)
{
	return then > UINT64_MAX - span ? UINT64_MAX : then + span;
}

/* Congestion window: packets at the start (as TCP's initial window, RFC 6928), and
 * the least it is cut to.  The retransmit timeout before any sample is this many
 * times params.rto_ns (its floor), and never grows above RTO_MAX_NS nor a quarter of
 * the receivers' dead timeout (a receiver must hear a retransmission before it gives
 * up: with the cap at that timeout, one backed-off timeout failed a lossless call). */
#define CWND_INITIAL 10u
#define CWND_MIN 2.0
#define RTO_INITIAL_FACTOR 10u
#define RTO_MAX_NS (1000u * MS)

void sdn_rb_params_default(struct sdn_rb_params *p)
{
	p->payload_bytes = SDNMPI_RBCAST_DEFAULT_PAYLOAD;
	p->window_pkts = 128;
	p->ack_every = 16;
	p->final_acks = 3;
	p->rto_ns = 10 * MS;
	p->repair_holdoff_ns = 2 * MS;
	p->ack_interval_ns = 20 * MS;
	p->recv_dead_ns = 1000 * MS;
	p->send_dead_ns = 2000 * MS;
	p->overall_ns = 0;
}

int sdn_rb_params_check(const struct sdn_rb_params *p)
{
	if (!p || p->payload_bytes < 1 || p->payload_bytes > SDNMPI_RBCAST_MAX_PAYLOAD)
		return -1;
	if (p->window_pkts < 1 || p->ack_every < 1 || !p->rto_ns || !p->ack_interval_ns)
		return -1;
	if (!p->recv_dead_ns || p->recv_dead_ns > UINT64_MAX / 4)
		return -1;
	if (p->send_dead_ns <= p->recv_dead_ns + p->ack_interval_ns)
		return -1;
	return 0;
}

uint32_t sdn_rb_npackets(uint64_t len, uint32_t payload_bytes)
{
	uint64_t n;

	if (!payload_bytes)
		return UINT32_MAX;
	n = len / payload_bytes + (len % payload_bytes != 0);
	return n >= UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* Bytes of packet seq (seq < npackets). */
static uint64_t packet_len(uint64_t len, uint32_t payload, uint32_t seq)
{
	uint64_t off = (uint64_t)seq * payload;

	return len - off < payload ? len - off : payload;
}

/* -- sender --------------------------------------------------------------------- */

static uint64_t rto_cap(const struct sdn_rb_sender *s);

struct sdn_rb_sender *sdn_rb_sender_new(const struct sdn_rb_params *p, uint64_t session,
					const void *buf, uint64_t len, uint32_t nrecv,
					uint64_t now)
{
	struct sdn_rb_sender *s;
	uint32_t n;

	if (sdn_rb_params_check(p) || nrecv < 1 || (!buf && len))
		return NULL;
	n = sdn_rb_npackets(len, p->payload_bytes);
	if (n == UINT32_MAX)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->need = calloc((size_t)n + 1, 1);
	s->sends = calloc((size_t)n + 1, 1);
	s->order = calloc((size_t)n + 1, sizeof(uint64_t));
	s->last_sent = calloc((size_t)n + 1, sizeof(uint64_t));
	s->peer = calloc(nrecv, sizeof(*s->peer));
	if (!s->need || !s->sends || !s->order || !s->last_sent || !s->peer) {
		sdn_rb_sender_free(s);
		return NULL;
	}
	s->p = *p;
	s->buf = buf;
	s->len = len;
	s->session = session;
	s->start = now;
	s->npackets = n;
	s->nrecv = nrecv;
	s->fail_peer = -1;
	s->progress_at = now;
	s->rto = RTO_INITIAL_FACTOR * p->rto_ns;
	if (s->rto > rto_cap(s))
		s->rto = rto_cap(s);
	s->cwnd = CWND_INITIAL < p->window_pkts ? CWND_INITIAL : p->window_pkts;
	s->ssthresh = p->window_pkts;
	for (uint32_t i = 0; i < nrecv; i++)
		s->peer[i].last_heard = now;
	return s;
}

void sdn_rb_sender_free(struct sdn_rb_sender *s)
{
	if (!s)
		return;
	free(s->need);
	free(s->sends);
	free(s->order);
	free(s->last_sent);
	free(s->peer);
	free(s);
}

static void update_min_cum(struct sdn_rb_sender *s)
{
	uint32_t m = s->npackets;

	for (uint32_t i = 0; i < s->nrecv; i++)
		if (s->peer[i].cum < m)
			m = s->peer[i].cum;
	s->min_cum = m;
}

static void mark_repair(struct sdn_rb_sender *s, uint32_t seq)
{
	if (s->need[seq])
		return;
	s->need[seq] = 1;
	s->n_repair++;
	if (seq < s->repair_lo || s->n_repair == 1)
		s->repair_lo = seq;
}

/* The retransmit timeout's ceiling (see RTO_MAX_NS), never below its floor. */
static uint64_t rto_cap(const struct sdn_rb_sender *s)
{
	uint64_t cap = s->p.recv_dead_ns / 4 < RTO_MAX_NS ? s->p.recv_dead_ns / 4 : RTO_MAX_NS;

	return cap > s->p.rto_ns ? cap : s->p.rto_ns;
}

/* One round-trip sample (RFC 6298), the timeout from it, floored at params.rto_ns. */
static void rtt_sample(struct sdn_rb_sender *s, uint64_t rtt)
{
	if (!s->srtt) {
		s->srtt = rtt ? rtt : 1;
		s->rttvar = rtt / 2;
	} else {
		uint64_t dev = rtt > s->srtt ? rtt - s->srtt : s->srtt - rtt;
		s->rttvar = (3 * s->rttvar + dev) / 4;
		s->srtt = (7 * s->srtt + rtt) / 8;
		if (!s->srtt)
			s->srtt = 1;
	}
	s->rto = s->srtt + 4 * s->rttvar;
	if (s->rto < s->p.rto_ns)
		s->rto = s->p.rto_ns;
	if (s->rto > rto_cap(s))
		s->rto = rto_cap(s);
}

/* Congestion seen at packet seq (lost, or CE-marked at the latest there): halve the
 * window, once per window of data (a packet sent after the last cut must be lost or
 * marked for the next one).  1 if it cut. */
static int congestion(struct sdn_rb_sender *s, uint32_t seq)
{
	if (seq < s->recover)
		return 0;
	s->ssthresh = s->cwnd / 2 < CWND_MIN ? CWND_MIN : s->cwnd / 2;
	s->cwnd = s->ssthresh;
	s->recover = s->next_new;
	s->st.cuts++;
	return 1;
}

/* The slowest receiver moved from old to now: grow the window (slow start below
 * ssthresh, then one packet per window). */
static void grow(struct sdn_rb_sender *s, uint32_t acked)
{
	double cap = s->p.window_pkts;

	if (!acked)
		return;
	if (s->cwnd < s->ssthresh)
		s->cwnd += acked;
	else
		s->cwnd += (double)acked / s->cwnd;
	if (s->cwnd > cap)
		s->cwnd = cap;
}

/* Where packet seq's retransmit timer runs from: its last send, or the slowest
 * receiver's last progress if later (TCP restarts its timer on every ACK of new
 * data, RFC 6298 5.3).  From the send alone, every packet waiting in a shaped queue
 * behind a growing window timed out: 62 spurious timeouts per 1 MiB call at 10
 * Mbit/s. */
static uint64_t timer_base(const struct sdn_rb_sender *s, uint32_t seq)
{
	return s->last_sent[seq] > s->progress_at ? s->last_sent[seq] : s->progress_at;
}

/* Whether an ACK state (cumulative ack cum, bitmap of the packets after it) holds seq. */
static int holds(uint32_t cum, uint64_t bitmap, uint32_t seq)
{
	return seq < cum || (seq > cum && seq - cum - 1 < SDNMPI_RBCAST_BITMAP_BITS &&
			     (bitmap >> (seq - cum - 1)) & 1);
}

/* Mark what receiver r is missing, by all its ACKs so far.  Certainly lost: a packet
 * whose last copy went out before the latest copy r has taken (its echoed xmit; a
 * receiver's path is FIFO: RACK, RFC 8985, on transmission order), after a hold-off
 * for reordering; this also keeps a repair from being repeated before it could have
 * arrived.  Merely late (nothing sent after it has arrived, as for a lost tail): one probe per
 * receiver and retransmit timeout, the lowest such packet; when the probe arrives,
 * RACK finds the rest of a lost tail at once (as TCP's tail loss probe and F-RTO).
 * A timeout for every late packet repaired whatever a receiver had not read yet:
 * packets queued behind a shaped port, or a rank that did not get a core for 80 ms
 * (at 20 emulated hosts 6-16 % of all packets went twice; docs/bcast.md).  Timers
 * from the slowest receiver's progress made a fast receiver's lost tail wait behind a
 * slow receiver; from r's own progress, a receiver that had lost many packets waited
 * an RTO per repair (4-20 of 56 calls on an unshaped bridge failed). */
static void mark_missing(struct sdn_rb_sender *s, struct rb_peer *r, uint64_t now)
{
	uint32_t cum = r->cum;
	uint64_t bitmap = r->bitmap;
	uint64_t span = (uint64_t)cum + 1 + SDNMPI_RBCAST_BITMAP_BITS;
	uint32_t end = span < s->next_new ? (uint32_t)span : s->next_new;
	int probe = !r->probe_at || elapsed(now, r->probe_at) >= s->rto;

	for (uint32_t seq = cum; seq < end; seq++) {
		if (holds(cum, bitmap, seq) || s->need[seq])
			continue;
		if (s->order[seq] < r->rack) {
			if (elapsed(now, s->last_sent[seq]) >= s->p.repair_holdoff_ns) {
				(void)congestion(s, seq);
				mark_repair(s, seq);
			}
		} else if (probe && elapsed(now, s->last_sent[seq]) >= s->rto) {
			probe = 0;
			r->probe_at = now;
			mark_repair(s, seq);
		}
	}
}

/* An ACK that fits this sender, decoded into h; 0 or -1. */
static int valid_ack(const struct sdn_rb_sender *s, const void *pkt, size_t len,
		     struct sdnmpi_rbcast_hdr *h)
{
	if (!pkt || len != SDNMPI_RBCAST_HDR_LEN || sdnmpi_rbcast_decode(pkt, len, h))
		return -1;
	if (h->type != SDNMPI_RBCAST_TYPE_ACK || h->session != s->session ||
	    h->total_len != s->len || h->npackets != s->npackets || h->payload_len != 0 ||
	    h->receiver >= s->nrecv || h->seq > s->npackets)
		return -1;
	return 0;
}

/* The highest packet an ACK of cumulative ack cum and this (trimmed) bitmap shows
 * held, in *top; 0 if it shows none. */
static int top_shown(uint32_t cum, uint64_t bitmap, uint32_t *top)
{
	if (bitmap) {
		*top = cum + 1 + (uint32_t)(63 - __builtin_clzll(bitmap));
		return 1;
	}
	if (!cum)
		return 0;
	*top = cum - 1;
	return 1;
}

/* An ACK with ECE: a packet this receiver took since its previous ACK was marked,
 * so at the latest the highest packet the ACK shows.  A cut as for a loss at that
 * packet, once per window: marks on packets sent before the last cut (the queue that
 * cut already answers) cut nothing, as RFC 3168 reacts once per round trip.  An
 * ECE ACK that shows no packet held (cum 0 and every packet it holds beyond the
 * bitmap) is only counted: the mark cannot be placed. */
static void echoed_ce(struct sdn_rb_sender *s, uint32_t cum, uint64_t bitmap)
{
	uint32_t top;

	s->st.ece_acks++;
	if (top_shown(cum, bitmap, &top) && congestion(s, top))
		s->st.ecn_cuts++;
}

/* Receiver r, which lacked the last tail timeout's packet, shows it held (cum beyond
 * it, or its bit): by the original (its echo older than the retransmission) one fewer
 * to wait for, and the timeout is undone when none is left; by the retransmission, the
 * loss was real and nothing is undone. */
static void check_undo(struct sdn_rb_sender *s, struct rb_peer *r, uint32_t cum, uint64_t bitmap,
		       uint64_t xmit)
{
	struct rb_undo *u = &s->undo;

	if (!u->pending || !holds(cum, bitmap, u->seq))
		return;
	r->behind = 0;
	if (xmit >= u->xmit) {
		for (uint32_t i = 0; i < s->nrecv; i++)
			s->peer[i].behind = 0;
		u->pending = 0;
		return;
	}
	if (--u->pending)
		return;
	if (s->cwnd < u->cwnd)
		s->cwnd = u->cwnd;
	s->ssthresh = u->ssthresh;
	s->recover = u->recover;
	s->rto = u->rto;
	s->st.undone++;
}

/* A tail timeout of packet seq, just retransmitted: remember the window, threshold,
 * recovery point and timeout it is about to change, and which receivers lacked it. */
static void arm_undo(struct sdn_rb_sender *s, uint32_t seq)
{
	struct rb_undo *u = &s->undo;

	if (u->pending && u->seq == seq)
		return; /* backed off again: spurious if the original got there after all */
	u->pending = 0;
	for (uint32_t i = 0; i < s->nrecv; i++) {
		struct rb_peer *r = &s->peer[i];

		r->behind = !holds(r->cum, r->bitmap, seq);
		u->pending += r->behind;
	}
	u->seq = seq;
	u->xmit = s->order[seq];
	u->cwnd = s->cwnd;
	u->ssthresh = s->ssthresh;
	u->recover = s->recover;
	u->rto = s->rto;
}

int sdn_rb_sender_on_ack(struct sdn_rb_sender *s, uint64_t now, const void *pkt, size_t len)
{
	struct sdnmpi_rbcast_hdr h;
	struct rb_peer *r;
	uint64_t bitmap;
	uint32_t beyond, top;

	if (valid_ack(s, pkt, len, &h)) {
		s->st.ignored++;
		return -1;
	}
	s->st.acks++;
	r = &s->peer[h.receiver];
	if (now > r->last_heard)
		r->last_heard = now;
	if ((h.flags & SDNMPI_RBCAST_FLAG_ABORT) && !s->fail && s->min_cum < s->npackets) {
		s->fail = SDN_RB_FAIL_ABORT;
		s->fail_peer = (int32_t)h.receiver;
		return 0;
	}
	beyond = s->npackets - h.seq; /* packets after cum that exist: bits 0..beyond-2 */
	bitmap = beyond > SDNMPI_RBCAST_BITMAP_BITS ? h.ack_bitmap
		 : beyond > 1 ? h.ack_bitmap & ((1ull << (beyond - 1)) - 1)
			      : 0;
	if (top_shown(h.seq, bitmap, &top) && (bitmap || h.seq > r->cum) &&
	    s->sends[top] == 1 && now >= s->last_sent[top])
		rtt_sample(s, now - s->last_sent[top]); /* Karn: only a packet sent once */
	if (h.xmit <= s->sent_total && h.xmit > r->rack) /* an echo of no copy sent: unknown */
		r->rack = h.xmit;
	if (r->behind)
		check_undo(s, r, h.seq, bitmap, h.xmit);
	if (h.seq > r->cum) {
		r->cum = h.seq;
		r->bitmap = bitmap;
	} else if (h.seq == r->cum) {
		r->bitmap |= bitmap;
	}
	{
		uint32_t before = s->min_cum;
		update_min_cum(s);
		grow(s, s->min_cum - before);
		if (s->min_cum > before)
			s->progress_at = now;
	}
	if (h.flags & SDNMPI_RBCAST_FLAG_ECE)
		echoed_ce(s, h.seq, bitmap);
	if (r->cum < s->npackets)
		mark_missing(s, r, now); /* what r is known to hold: a stale ACK marks nothing */
	return 0;
}

/* Whether this copy asks for an ACK (ACK_REQ): the last packet, the copy that fills
 * the window (nothing more goes until an ACK), and every quarter window otherwise, so
 * feedback comes a few times per window whatever the window; receivers ACK these at
 * once beside every params.ack_every new packets, and their timer is the fallback.  At
 * 10 Mbit/s a 5 ms timer made each of 19 leaders ACK every 4 packets: 5 ACKs per DATA
 * packet at the root, more datagrams for the switches than the data. */
static int asks_ack(const struct sdn_rb_sender *s, uint32_t seq)
{
	double quarter = s->cwnd / 4 < 1 ? 1 : s->cwnd / 4;

	return seq + 1 == s->npackets || (double)s->next_new >= (double)s->min_cum + s->cwnd ||
	       (double)(s->since_req + 1) >= quarter;
}

static void fill_packet(struct sdn_rb_sender *s, uint64_t now, uint32_t seq, int repair,
			struct sdn_rb_packet *out)
{
	struct sdnmpi_rbcast_hdr h = {0};

	h.magic = SDNMPI_RBCAST_MAGIC;
	h.version = SDNMPI_RBCAST_VERSION;
	h.type = SDNMPI_RBCAST_TYPE_DATA;
	h.flags = repair ? SDNMPI_RBCAST_FLAG_REPAIR : 0;
	if (asks_ack(s, seq)) {
		h.flags |= SDNMPI_RBCAST_FLAG_ACK_REQ;
		s->since_req = 0;
	} else {
		s->since_req++;
	}
	h.session = s->session;
	h.seq = seq;
	h.npackets = s->npackets;
	h.total_len = s->len;
	h.payload_len = (uint32_t)packet_len(s->len, s->p.payload_bytes, seq);
	s->order[seq] = ++s->sent_total;
	h.xmit = s->sent_total;
	sdnmpi_rbcast_encode(&h, out->hdr);
	out->payload = s->buf + (uint64_t)seq * s->p.payload_bytes;
	out->payload_len = h.payload_len;
	out->seq = seq;
	out->repair = repair;
	s->last_sent[seq] = now;
	if (s->sends[seq] < UINT8_MAX)
		s->sends[seq]++;
	s->st.packets++;
	if (repair)
		s->st.repairs++;
}

/* The lowest packet marked for repair, unmarked; UINT32_MAX if none. */
static uint32_t take_repair(struct sdn_rb_sender *s)
{
	for (uint32_t seq = s->repair_lo; s->n_repair && seq < s->npackets; seq++) {
		if (!s->need[seq])
			continue;
		s->need[seq] = 0;
		s->n_repair--;
		s->repair_lo = seq + 1;
		return seq;
	}
	s->n_repair = 0;
	return UINT32_MAX;
}

/* FAILED if a receiver has been silent too long or the call took too long. */
static void check_deadlines(struct sdn_rb_sender *s, uint64_t now)
{
	if (s->p.overall_ns && elapsed(now, s->start) >= s->p.overall_ns) {
		s->fail = SDN_RB_FAIL_OVERALL;
		return;
	}
	for (uint32_t i = 0; i < s->nrecv; i++) {
		if (s->peer[i].cum < s->npackets &&
		    elapsed(now, s->peer[i].last_heard) >= s->p.send_dead_ns) {
			s->fail = SDN_RB_FAIL_DEAD;
			s->fail_peer = (int32_t)i;
			return;
		}
	}
}

static uint64_t sender_wake(const struct sdn_rb_sender *s)
{
	uint64_t wake = UINT64_MAX;

	if (s->min_cum < s->next_new)
		wake = after(timer_base(s, s->min_cum), s->rto);
	if (s->p.overall_ns)
		wake = earliest(wake, after(s->start, s->p.overall_ns));
	for (uint32_t i = 0; i < s->nrecv; i++)
		if (s->peer[i].cum < s->npackets)
			wake = earliest(wake, after(s->peer[i].last_heard, s->p.send_dead_ns));
	return wake;
}

enum sdn_rb_action sdn_rb_sender_poll(struct sdn_rb_sender *s, uint64_t now,
				      struct sdn_rb_packet *out, uint64_t *wake_ns)
{
	uint32_t seq;

	*wake_ns = UINT64_MAX;
	if (s->fail)
		return SDN_RB_FAILED;
	if (s->min_cum >= s->npackets)
		return SDN_RB_DONE;
	check_deadlines(s, now);
	if (s->fail)
		return SDN_RB_FAILED;
	if (s->n_repair && (seq = take_repair(s)) != UINT32_MAX) {
		fill_packet(s, now, seq, 1, out);
		return SDN_RB_SEND;
	}
	if (s->next_new < s->npackets &&
	    (double)s->next_new < (double)s->min_cum + s->cwnd) {
		fill_packet(s, now, s->next_new++, 0, out);
		return SDN_RB_SEND;
	}
	seq = s->min_cum;
	if (seq < s->next_new && elapsed(now, timer_base(s, seq)) >= s->rto) {
		/* A timeout: the window shrinks to its least and the timeout backs off
		 * (RFC 6298 5.5) until an ACK brings a new sample. */
		fill_packet(s, now, seq, 1, out);
		arm_undo(s, seq);
		s->st.tail++;
		s->ssthresh = s->cwnd / 2 < CWND_MIN ? CWND_MIN : s->cwnd / 2;
		s->cwnd = CWND_MIN;
		s->recover = s->next_new;
		s->rto = 2 * s->rto > rto_cap(s) ? rto_cap(s) : 2 * s->rto;
		return SDN_RB_SEND;
	}
	*wake_ns = sender_wake(s);
	return SDN_RB_WAIT;
}

enum sdn_rb_fail sdn_rb_sender_failure(const struct sdn_rb_sender *s, int32_t *receiver)
{
	if (receiver)
		*receiver = s->fail_peer;
	return s->fail;
}

void sdn_rb_sender_stats(const struct sdn_rb_sender *s, struct sdn_rb_sender_stats *st)
{
	*st = s->st;
}

double sdn_rb_sender_cwnd(const struct sdn_rb_sender *s)
{
	return s->cwnd;
}

/* -- receiver ------------------------------------------------------------------- */

struct sdn_rb_receiver *sdn_rb_receiver_new(const struct sdn_rb_params *p, uint64_t session,
					    void *buf, uint64_t len, uint32_t index,
					    uint64_t now)
{
	struct sdn_rb_receiver *r;
	uint32_t n;

	if (sdn_rb_params_check(p) || (!buf && len))
		return NULL;
	n = sdn_rb_npackets(len, p->payload_bytes);
	if (n == UINT32_MAX)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->have = calloc((size_t)n + 1, 1);
	if (!r->have) {
		free(r);
		return NULL;
	}
	r->p = *p;
	r->buf = buf;
	r->len = len;
	r->session = session;
	r->npackets = n;
	r->index = index;
	r->last_ack = now;
	r->last_new = now;
	r->ack_due = 1; /* the root learns at once that this receiver is there */
	if (n == 0) {
		r->complete = 1;
		r->final_left = (int)p->final_acks;
	}
	return r;
}

void sdn_rb_receiver_free(struct sdn_rb_receiver *r)
{
	if (!r)
		return;
	free(r->have);
	free(r);
}

static int valid_data(const struct sdn_rb_receiver *r, const void *pkt, size_t len,
		      struct sdnmpi_rbcast_hdr *h)
{
	if (!pkt || sdnmpi_rbcast_decode(pkt, len, h))
		return -1;
	if (h->type != SDNMPI_RBCAST_TYPE_DATA || h->session != r->session ||
	    h->total_len != r->len || h->npackets != r->npackets || h->seq >= r->npackets)
		return -1;
	if (h->payload_len != packet_len(r->len, r->p.payload_bytes, h->seq) ||
	    len - SDNMPI_RBCAST_HDR_LEN != h->payload_len)
		return -1;
	return 0;
}

/* A valid packet arrived CE-marked: the next ACK echoes it, at once if it opens a
 * congestion episode (see rbcast.h). */
static void took_ce(struct sdn_rb_receiver *r)
{
	r->st.ce++;
	if (!r->ece_sent)
		r->ack_due = 1;
	r->ce_pending = 1;
}

int sdn_rb_receiver_on_data(struct sdn_rb_receiver *r, uint64_t now, const void *pkt,
			    size_t len, int ce)
{
	struct sdnmpi_rbcast_hdr h;

	if (r->failed || valid_data(r, pkt, len, &h)) {
		r->st.ignored++;
		return -1;
	}
	if (ce)
		took_ce(r);
	if (h.xmit > r->xmit)
		r->xmit = h.xmit;
	if (h.flags & SDNMPI_RBCAST_FLAG_ACK_REQ)
		r->ack_due = 1;
	if (r->have[h.seq]) {
		r->st.duplicates++;
		r->dup_due = 1;
		return 1;
	}
	memcpy(r->buf + (uint64_t)h.seq * r->p.payload_bytes,
	       (const uint8_t *)pkt + SDNMPI_RBCAST_HDR_LEN, h.payload_len);
	r->have[h.seq] = 1;
	r->received++;
	r->st.packets++;
	r->last_new = now;
	if (h.seq > r->top) /* a gap opened: say so at once */
		r->ack_due = 1;
	if (h.seq >= r->top)
		r->top = h.seq + 1;
	while (r->cum < r->npackets && r->have[r->cum])
		r->cum++;
	if (++r->since_ack >= r->p.ack_every)
		r->ack_due = 1;
	if (r->received == r->npackets) {
		r->complete = 1;
		r->final_left = (int)r->p.final_acks;
		r->ack_due = 1;
	}
	return 0;
}

static void fill_ack(const struct sdn_rb_receiver *r, uint8_t ack[SDNMPI_RBCAST_HDR_LEN])
{
	struct sdnmpi_rbcast_hdr h = {0};

	h.magic = SDNMPI_RBCAST_MAGIC;
	h.version = SDNMPI_RBCAST_VERSION;
	h.type = SDNMPI_RBCAST_TYPE_ACK;
	h.flags = r->ce_pending ? SDNMPI_RBCAST_FLAG_ECE : 0;
	h.session = r->session;
	h.seq = r->cum;
	h.npackets = r->npackets;
	h.total_len = r->len;
	h.receiver = r->index;
	h.xmit = r->xmit;
	for (uint32_t i = 0; i < SDNMPI_RBCAST_BITMAP_BITS; i++) {
		uint64_t seq = (uint64_t)r->cum + 1 + i;
		if (seq >= r->npackets)
			break;
		if (r->have[seq])
			h.ack_bitmap |= 1ull << i;
	}
	sdnmpi_rbcast_encode(&h, ack);
}

/* The ACK timer: ack_interval while something new came since the last ACK or the
 * final ACKs go out; KEEPALIVE_FACTOR times that while nothing moves (the root hears
 * the receiver is there, and its own timeout repairs a stalled tail).  Every receiver
 * ACKing every few ms would load the root's link: at 10 Mbit/s, 7 receivers at 5 ms
 * were a tenth of it. */
#define KEEPALIVE_FACTOR 10u

static uint64_t ack_timer(const struct sdn_rb_receiver *r)
{
	if (r->since_ack || (r->complete && r->final_left > 0) || !r->received)
		return r->p.ack_interval_ns;
	return KEEPALIVE_FACTOR * r->p.ack_interval_ns;
}

static int ack_is_due(const struct sdn_rb_receiver *r, uint64_t now)
{
	uint64_t quiet = elapsed(now, r->last_ack);

	if (r->ack_due)
		return 1;
	if ((!r->complete || r->final_left > 0) && quiet >= ack_timer(r))
		return 1;
	return r->dup_due && quiet >= r->p.repair_holdoff_ns;
}

static uint64_t receiver_wake(const struct sdn_rb_receiver *r)
{
	uint64_t wake = UINT64_MAX;

	if (!r->complete || r->final_left > 0)
		wake = after(r->last_ack, ack_timer(r));
	if (!r->complete)
		wake = earliest(wake, after(r->last_new, r->p.recv_dead_ns));
	if (r->dup_due)
		wake = earliest(wake, after(r->last_ack, r->p.repair_holdoff_ns));
	return wake;
}

enum sdn_rb_action sdn_rb_receiver_poll(struct sdn_rb_receiver *r, uint64_t now,
					uint8_t ack[SDNMPI_RBCAST_HDR_LEN], uint64_t *wake_ns)
{
	*wake_ns = UINT64_MAX;
	if (r->failed)
		return SDN_RB_FAILED;
	if (!r->complete && elapsed(now, r->last_new) >= r->p.recv_dead_ns) {
		r->failed = 1;
		return SDN_RB_FAILED;
	}
	if (ack_is_due(r, now)) {
		fill_ack(r, ack);
		r->last_ack = now;
		r->ack_due = r->dup_due = 0;
		r->since_ack = 0;
		if (r->complete && r->final_left > 0)
			r->final_left--;
		r->st.acks++;
		r->st.ece_acks += (uint64_t)r->ce_pending;
		r->ece_sent = r->ce_pending;
		r->ce_pending = 0;
		return SDN_RB_SEND;
	}
	if (r->complete && r->final_left == 0 && !r->dup_due)
		return SDN_RB_COMPLETE;
	*wake_ns = receiver_wake(r);
	return SDN_RB_WAIT;
}

int sdn_rb_receiver_complete(const struct sdn_rb_receiver *r)
{
	return r->complete;
}

void sdn_rb_receiver_stats(const struct sdn_rb_receiver *r, struct sdn_rb_receiver_stats *st)
{
	*st = r->st;
}

void sdn_rb_abort_ack(uint64_t session, uint64_t len, uint32_t npackets, uint32_t index,
		      uint8_t ack[SDNMPI_RBCAST_HDR_LEN])
{
	struct sdnmpi_rbcast_hdr h = {0};

	h.magic = SDNMPI_RBCAST_MAGIC;
	h.version = SDNMPI_RBCAST_VERSION;
	h.type = SDNMPI_RBCAST_TYPE_ACK;
	h.flags = SDNMPI_RBCAST_FLAG_ABORT;
	h.session = session;
	h.npackets = npackets;
	h.total_len = len;
	h.receiver = index;
	sdnmpi_rbcast_encode(&h, ack);
}

int sdn_rb_decode(const void *pkt, size_t len, struct sdnmpi_rbcast_hdr *h)
{
	return pkt ? sdnmpi_rbcast_decode(pkt, len, h) : -1;
}
