/* The reliability engine of the replicated MPI_Bcast (docs/bcast.md): a sender and
 * a receiver driven by events, with no sockets, no MPI and no clock of their own
 * (every call takes `now` in nanoseconds, from any monotonic origin).  The packet
 * format is csrc/include/sdnmpi/rbcast.h.
 *
 * The sender (the root) sends the buffer once to the group, in packets of
 * params.payload_bytes, never more than its congestion window beyond the slowest
 * receiver's cumulative ack: AIMD in packets as TCP's (10 at first, slow start,
 * halved once per window of loss, at most params.window_pkts), so that it shares
 * links with TCP and does not overrun a shaped queue.  Receivers ACK (cumulative
 * ack + a bitmap of the 64 packets after it); a packet an ACK shows missing is
 * repaired, to the group, once it is certainly lost (a packet sent after its last
 * transmission arrived; at most once per params.repair_holdoff_ns) or after the
 * retransmit timeout, which follows the measured round trip (RFC 6298, floor
 * params.rto_ns).  After that timeout without progress the slowest receiver's
 * first missing packet is sent again (the tail retransmit: it also reaches a
 * receiver whose every ACK was lost), the window drops to 2 and the timeout backs
 * off.  An ACK with ECE (a receiver saw a CE mark: a queue on the way is above
 * its marking threshold, RFC 3168) is congestion as a loss is: the same halving,
 * at most once per window of data, with nothing to repair; a path that bleaches
 * ECT or never marks leaves the sender reacting to loss alone.  The sender
 * ends DONE when every receiver acked everything, FAILED when a receiver was
 * silent for params.send_dead_ns, a receiver aborted, or params.overall_ns passed.
 *
 * A receiver (one per host) validates every field of a DATA packet against its
 * own session, size and packet layout and ignores anything else, including
 * duplicates; it copies payloads into the user buffer and never outside it.  It
 * ACKs every params.ack_every new packets, at once when a packet opens a gap or asks
 * for one (ACK_REQ: the root sets it a few times per window, see asks_ack), on
 * a duplicate (at most once per repair_holdoff_ns), params.ack_interval_ns after
 * new packets that no ACK covered yet, and every 10 ack_interval_ns while nothing
 * moves, even before its first packet (the root learns it is alive).  The caller
 * passes each packet's CE mark (the IP header's ECN field, which the engine never
 * sees); the next ACK carries ECE, and a mark that opens a congestion episode (the
 * previous ACK carried no ECE) makes that ACK due at once, so ACK thinning delays
 * the echo by at most one packet (later marks of the episode ride on the ACKs due
 * anyway, every one with ECE; one per packet would multiply the ACKs to the root
 * by ack_every exactly when its links are congested).  Once every packet is in it is COMPLETE and sends its final ACK
 * params.final_acks times, ack_interval_ns apart.  It FAILS when nothing new
 * arrived for params.recv_dead_ns; it then stays silent, so the root, whose dead
 * timeout is longer, fails too: a DONE sender implies every receiver COMPLETE.
 *
 * Calls on one object are not thread-safe; objects are independent. */
#ifndef SDN_RBCAST_H
#define SDN_RBCAST_H

#include <stddef.h>
#include <stdint.h>

#include "sdnmpi/rbcast.h"

struct sdn_rb_params {
	uint32_t payload_bytes;     /* per packet, 1..SDNMPI_RBCAST_MAX_PAYLOAD (1400) */
	uint32_t window_pkts;       /* credit beyond the slowest cumulative ack (128) */
	uint32_t ack_every;         /* receiver: ACK after this many new packets (16) */
	uint32_t final_acks;        /* receiver: copies of the final ACK (3) */
	uint64_t rto_ns;            /* retransmit timeout's floor; 10x before a sample (10 ms) */
	uint64_t repair_holdoff_ns; /* one repair of a packet per this (2 ms) */
	uint64_t ack_interval_ns;   /* receiver: timer ACK (20 ms; the root's ACK_REQ first) */
	uint64_t recv_dead_ns;      /* receiver: nothing new for this: FAILED (1 s) */
	uint64_t send_dead_ns;      /* sender: a receiver silent this long: FAILED (2 s) */
	uint64_t overall_ns;        /* sender: whole-call bound, 0 for none (0) */
};

/* What poll asks the caller to do. */
enum sdn_rb_action {
	SDN_RB_SEND = 1,  /* send the packet (sender: to the group; receiver: to the root) */
	SDN_RB_WAIT,      /* nothing to send: call poll again by *wake_ns or on a packet */
	SDN_RB_DONE,      /* sender: every receiver has everything */
	SDN_RB_COMPLETE,  /* receiver: buffer complete, final ACKs sent */
	SDN_RB_FAILED,    /* give up: the caller falls back */
};

enum sdn_rb_fail {
	SDN_RB_FAIL_NONE = 0,
	SDN_RB_FAIL_DEAD,    /* sender: a receiver silent; receiver: nothing new */
	SDN_RB_FAIL_ABORT,   /* sender: a receiver sent ABORT */
	SDN_RB_FAIL_OVERALL, /* sender: params.overall_ns passed */
};

/* A packet to send: header bytes, then payload_len bytes at payload (sender only;
 * it points into the caller's buffer). */
struct sdn_rb_packet {
	uint8_t hdr[SDNMPI_RBCAST_HDR_LEN];
	const uint8_t *payload;
	size_t payload_len;
	uint32_t seq;
	int repair; /* 1: a retransmission */
};

struct sdn_rb_sender_stats {
	uint64_t packets;   /* every DATA packet handed out, repairs included */
	uint64_t repairs;   /* retransmissions (NACKed or tail) */
	uint64_t tail;      /* ... of which tail retransmits after rto_ns */
	uint64_t acks;      /* valid ACKs taken */
	uint64_t ignored;   /* packets refused by on_ack */
	uint64_t cuts;      /* congestion window cuts (losses or ECE, one per window) */
	uint64_t ece_acks;  /* valid ACKs with ECE (a receiver saw a CE mark) */
	uint64_t ecn_cuts;  /* ... cuts (of cuts) an ECE ACK made */
	uint64_t undone;    /* tail timeouts undone: every receiver had the original */
};

struct sdn_rb_receiver_stats {
	uint64_t packets;    /* new packets copied */
	uint64_t duplicates; /* valid packets already held */
	uint64_t ignored;    /* malformed or foreign packets */
	uint64_t acks;       /* ACKs handed out */
	uint64_t ce;         /* valid packets (new or duplicate) that arrived CE-marked */
	uint64_t ece_acks;   /* ACKs handed out with ECE */
};

struct sdn_rb_sender;
struct sdn_rb_receiver;

/* The defaults above. */
void sdn_rb_params_default(struct sdn_rb_params *p);
/* 0 if usable: payload in range, window and ack_every >= 1, timeouts > 0 and
 * send_dead_ns > recv_dead_ns + ack_interval_ns; else -1. */
int sdn_rb_params_check(const struct sdn_rb_params *p);
/* Packets of a broadcast of len bytes, or UINT32_MAX if there are too many. */
uint32_t sdn_rb_npackets(uint64_t len, uint32_t payload_bytes);

/* A sender of buf[0..len) to nrecv >= 1 receivers, starting at now; NULL if the
 * parameters are bad or memory is short.  buf must outlive the sender. */
struct sdn_rb_sender *sdn_rb_sender_new(const struct sdn_rb_params *p, uint64_t session,
					const void *buf, uint64_t len, uint32_t nrecv,
					uint64_t now);
void sdn_rb_sender_free(struct sdn_rb_sender *s);
/* Take one received datagram (an ACK); 0 if taken, -1 if ignored. */
int sdn_rb_sender_on_ack(struct sdn_rb_sender *s, uint64_t now, const void *pkt, size_t len);
/* The next thing to do.  SEND fills *out; WAIT sets *wake_ns (also set, to
 * UINT64_MAX, otherwise). */
enum sdn_rb_action sdn_rb_sender_poll(struct sdn_rb_sender *s, uint64_t now,
				      struct sdn_rb_packet *out, uint64_t *wake_ns);
/* Why it failed (and which receiver, or -1), and its counters. */
enum sdn_rb_fail sdn_rb_sender_failure(const struct sdn_rb_sender *s, int32_t *receiver);
void sdn_rb_sender_stats(const struct sdn_rb_sender *s, struct sdn_rb_sender_stats *st);
/* The congestion window now, in packets (for tests and diagnostics). */
double sdn_rb_sender_cwnd(const struct sdn_rb_sender *s);

/* Receiver number index (0..nrecv-1) of buf[0..len), starting at now; NULL if
 * the parameters are bad or memory is short.  buf must outlive the receiver. */
struct sdn_rb_receiver *sdn_rb_receiver_new(const struct sdn_rb_params *p, uint64_t session,
					    void *buf, uint64_t len, uint32_t index,
					    uint64_t now);
void sdn_rb_receiver_free(struct sdn_rb_receiver *r);
/* Take one received datagram (DATA); ce: non-zero if it arrived with CE in its IP
 * header's ECN field (0 if the socket cannot tell).  0 if new data was copied, 1 if
 * it was a valid duplicate, -1 if ignored (malformed, foreign, or after FAILED; its
 * mark too). */
int sdn_rb_receiver_on_data(struct sdn_rb_receiver *r, uint64_t now, const void *pkt,
			    size_t len, int ce);
/* The next thing to do.  SEND fills ack[] (an ACK of SDNMPI_RBCAST_HDR_LEN
 * bytes); WAIT sets *wake_ns.  COMPLETE: done, but a later duplicate makes it
 * SEND again (the root may have lost every final ACK). */
enum sdn_rb_action sdn_rb_receiver_poll(struct sdn_rb_receiver *r, uint64_t now,
					uint8_t ack[SDNMPI_RBCAST_HDR_LEN], uint64_t *wake_ns);
/* 1 once every packet is in the buffer. */
int sdn_rb_receiver_complete(const struct sdn_rb_receiver *r);
void sdn_rb_receiver_stats(const struct sdn_rb_receiver *r, struct sdn_rb_receiver_stats *st);

/* sdnmpi_rbcast_decode as a linked function (for tests through ctypes). */
int sdn_rb_decode(const void *pkt, size_t len, struct sdnmpi_rbcast_hdr *h);

/* An ABORT ACK (a receiver that cannot take part, e.g. its datatype is not
 * contiguous) into ack[]. */
void sdn_rb_abort_ack(uint64_t session, uint64_t len, uint32_t npackets, uint32_t index,
		      uint8_t ack[SDNMPI_RBCAST_HDR_LEN]);

#endif
