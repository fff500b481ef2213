/* SPDX-License-Identifier: MIT */
/*
 * sdnmpi replicated-broadcast packet header, version 2: the canonical definition.
 *
 * libsdnmpi's switch-replicated MPI_Bcast (docs/bcast.md) sends a broadcast as UDP
 * datagrams to a per-job IPv4 multicast group; each receiving host leader answers
 * with ACKs sent unicast to the root.  Both kinds start with this 56-byte header,
 * every field little-endian, no padding (each field is naturally aligned):
 *
 *   off size field
 *     0    4 magic        0x42524453 (wire bytes 'S' 'D' 'R' 'B')
 *     4    1 version      2
 *     5    1 type         1 DATA, 2 ACK
 *     6    2 flags        DATA: bit 0 REPAIR (a retransmission),
 *                              bit 1 ACK_REQ (the root asks for an ACK now);
 *                         ACK: bit 0 ABORT (this receiver cannot take part),
 *                              bit 1 ECE (a DATA packet arrived CE-marked since
 *                              this receiver's previous ACK: congestion, RFC 3168)
 *     8    8 session      one broadcast call (the root's choice; stale calls differ)
 *    16    4 seq          DATA: packet index 0..npackets-1;
 *                         ACK: cumulative ack, the number of leading packets held
 *    20    4 npackets     ceil(total_len / payload size); 0 for an empty broadcast
 *    24    8 total_len    bytes of the whole broadcast
 *    32    4 payload_len  DATA: bytes after the header; ACK: 0
 *    36    4 receiver     ACK: the receiver's index 0..n-1; DATA: 0
 *    40    8 ack_bitmap   ACK: bit i set = packet seq+1+i held; DATA: 0
 *    48    8 xmit         DATA: this copy's transmission number in the call (1, 2, ...:
 *                         the root counts every copy it sends, repairs included);
 *                         ACK: the highest xmit of any copy the receiver has taken
 *                         (an echo, as TCP's timestamps: which copy arrived)
 *    56      payload (DATA only)
 *
 * Packet i of a broadcast carries bytes [i*P, min((i+1)*P, total_len)) where P is
 * the payload size of the session (1400 by default: header, UDP and IPv4 fit in
 * 1500 bytes, no fragmentation).  The Python codec sdnmpi.wire.rbcast mirrors this
 * header: every integer "#define SDNMPI_RBCAST_<NAME>" equals its constant <NAME>
 * (tests/pmpi/test_rbcast_protocol.py), and packets encoded on either side decode
 * on the other.  Plain C: <stdint.h> and <string.h> only.
 *
 * Version 2 added xmit (version 1 had a 48-byte header and no xmit): with it the root
 * knows which copy of a packet sent twice a receiver took, so a loss is told from a
 * late packet by transmission order (RACK, RFC 8985) and a spurious timeout is undone
 * (Eifel, RFC 3522).  Versions do not mix: a packet of another version is ignored.
 *
 * ECE came after version 1's first release without a version change: a sender reads
 * only the ACK flags it knows (an older root ignores ECE and keeps reacting to loss
 * alone), DATA packets are unchanged (ECN lives in the IP header, not here), and an
 * older receiver never sets ECE, which leaves a newer root where it was.  Unknown
 * flag bits are ignored on both sides, never rejected.
 */
#ifndef SDNMPI_RBCAST_H
#define SDNMPI_RBCAST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SDNMPI_RBCAST_MAGIC 0x42524453
#define SDNMPI_RBCAST_VERSION 2
#define SDNMPI_RBCAST_TYPE_DATA 1
#define SDNMPI_RBCAST_TYPE_ACK 2
#define SDNMPI_RBCAST_FLAG_REPAIR 0x1
#define SDNMPI_RBCAST_FLAG_ACK_REQ 0x2
#define SDNMPI_RBCAST_FLAG_ABORT 0x1
#define SDNMPI_RBCAST_FLAG_ECE 0x2
#define SDNMPI_RBCAST_HDR_LEN 56
#define SDNMPI_RBCAST_BITMAP_BITS 64
#define SDNMPI_RBCAST_DEFAULT_PAYLOAD 1400
#define SDNMPI_RBCAST_MAX_PAYLOAD 65000

#define SDNMPI_RBCAST_OFF_MAGIC 0
#define SDNMPI_RBCAST_OFF_VERSION 4
#define SDNMPI_RBCAST_OFF_TYPE 5
#define SDNMPI_RBCAST_OFF_FLAGS 6
#define SDNMPI_RBCAST_OFF_SESSION 8
#define SDNMPI_RBCAST_OFF_SEQ 16
#define SDNMPI_RBCAST_OFF_NPACKETS 20
#define SDNMPI_RBCAST_OFF_TOTAL_LEN 24
#define SDNMPI_RBCAST_OFF_PAYLOAD_LEN 32
#define SDNMPI_RBCAST_OFF_RECEIVER 36
#define SDNMPI_RBCAST_OFF_ACK_BITMAP 40
#define SDNMPI_RBCAST_OFF_XMIT 48

/* The decoded header (host byte order; its memory layout is not the wire's). */
struct sdnmpi_rbcast_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t type;
	uint16_t flags;
	uint64_t session;
	uint32_t seq;
	uint32_t npackets;
	uint64_t total_len;
	uint32_t payload_len;
	uint32_t receiver;
	uint64_t ack_bitmap;
	uint64_t xmit;
};

/* The same fields laid out as on a little-endian wire (the offsets above). */
struct __attribute__((packed)) sdnmpi_rbcast_wire {
	uint32_t magic;
	uint8_t version;
	uint8_t type;
	uint16_t flags;
	uint64_t session;
	uint32_t seq;
	uint32_t npackets;
	uint64_t total_len;
	uint32_t payload_len;
	uint32_t receiver;
	uint64_t ack_bitmap;
	uint64_t xmit;
};

_Static_assert(sizeof(struct sdnmpi_rbcast_wire) == SDNMPI_RBCAST_HDR_LEN, "header size");
_Static_assert(offsetof(struct sdnmpi_rbcast_wire, version) == SDNMPI_RBCAST_OFF_VERSION, "version");
_Static_assert(offsetof(struct sdnmpi_rbcast_wire, flags) == SDNMPI_RBCAST_OFF_FLAGS, "flags");
_Static_assert(offsetof(struct sdnmpi_rbcast_wire, session) == SDNMPI_RBCAST_OFF_SESSION, "session");
_Static_assert(offsetof(struct sdnmpi_rbcast_wire, seq) == SDNMPI_RBCAST_OFF_SEQ, "seq");
_Static_assert(offsetof(struct sdnmpi_rbcast_wire, npackets) == SDNMPI_RBCAST_OFF_NPACKETS,
	       "npackets");
_Static_assert(offsetof(struct sdnmpi_rbcast_wire, total_len) == SDNMPI_RBCAST_OFF_TOTAL_LEN,
	       "total_len");
_Static_assert(offsetof(struct sdnmpi_rbcast_wire, payload_len) == SDNMPI_RBCAST_OFF_PAYLOAD_LEN,
	       "payload_len");
_Static_assert(offsetof(struct sdnmpi_rbcast_wire, receiver) == SDNMPI_RBCAST_OFF_RECEIVER,
	       "receiver");
_Static_assert(offsetof(struct sdnmpi_rbcast_wire, ack_bitmap) == SDNMPI_RBCAST_OFF_ACK_BITMAP,
	       "ack_bitmap");
_Static_assert(offsetof(struct sdnmpi_rbcast_wire, xmit) == SDNMPI_RBCAST_OFF_XMIT, "xmit");
_Static_assert(SDNMPI_RBCAST_HDR_LEN + SDNMPI_RBCAST_DEFAULT_PAYLOAD + 8 + 20 <= 1500,
	       "a default packet fits a 1500-byte MTU");

static inline void sdnmpi_rbcast_put(uint8_t *p, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t sdnmpi_rbcast_get(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* Write h into out[0..SDNMPI_RBCAST_HDR_LEN). */
static inline void sdnmpi_rbcast_encode(const struct sdnmpi_rbcast_hdr *h, uint8_t *out)
{
	sdnmpi_rbcast_put(out + SDNMPI_RBCAST_OFF_MAGIC, h->magic, 4);
	out[SDNMPI_RBCAST_OFF_VERSION] = h->version;
	out[SDNMPI_RBCAST_OFF_TYPE] = h->type;
	sdnmpi_rbcast_put(out + SDNMPI_RBCAST_OFF_FLAGS, h->flags, 2);
	sdnmpi_rbcast_put(out + SDNMPI_RBCAST_OFF_SESSION, h->session, 8);
	sdnmpi_rbcast_put(out + SDNMPI_RBCAST_OFF_SEQ, h->seq, 4);
	sdnmpi_rbcast_put(out + SDNMPI_RBCAST_OFF_NPACKETS, h->npackets, 4);
	sdnmpi_rbcast_put(out + SDNMPI_RBCAST_OFF_TOTAL_LEN, h->total_len, 8);
	sdnmpi_rbcast_put(out + SDNMPI_RBCAST_OFF_PAYLOAD_LEN, h->payload_len, 4);
	sdnmpi_rbcast_put(out + SDNMPI_RBCAST_OFF_RECEIVER, h->receiver, 4);
	sdnmpi_rbcast_put(out + SDNMPI_RBCAST_OFF_ACK_BITMAP, h->ack_bitmap, 8);
	sdnmpi_rbcast_put(out + SDNMPI_RBCAST_OFF_XMIT, h->xmit, 8);
}

/* Read a header from in[0..len): 0, or -1 if len is short or magic or version
 * differ (the fields are then not to be trusted; nothing else is checked). */
static inline int sdnmpi_rbcast_decode(const uint8_t *in, size_t len, struct sdnmpi_rbcast_hdr *h)
{
	if (len < SDNMPI_RBCAST_HDR_LEN)
		return -1;
	h->magic = (uint32_t)sdnmpi_rbcast_get(in + SDNMPI_RBCAST_OFF_MAGIC, 4);
	h->version = in[SDNMPI_RBCAST_OFF_VERSION];
	h->type = in[SDNMPI_RBCAST_OFF_TYPE];
	h->flags = (uint16_t)sdnmpi_rbcast_get(in + SDNMPI_RBCAST_OFF_FLAGS, 2);
	h->session = sdnmpi_rbcast_get(in + SDNMPI_RBCAST_OFF_SESSION, 8);
	h->seq = (uint32_t)sdnmpi_rbcast_get(in + SDNMPI_RBCAST_OFF_SEQ, 4);
	h->npackets = (uint32_t)sdnmpi_rbcast_get(in + SDNMPI_RBCAST_OFF_NPACKETS, 4);
	h->total_len = sdnmpi_rbcast_get(in + SDNMPI_RBCAST_OFF_TOTAL_LEN, 8);
	h->payload_len = (uint32_t)sdnmpi_rbcast_get(in + SDNMPI_RBCAST_OFF_PAYLOAD_LEN, 4);
	h->receiver = (uint32_t)sdnmpi_rbcast_get(in + SDNMPI_RBCAST_OFF_RECEIVER, 4);
	h->ack_bitmap = sdnmpi_rbcast_get(in + SDNMPI_RBCAST_OFF_ACK_BITMAP, 8);
	h->xmit = sdnmpi_rbcast_get(in + SDNMPI_RBCAST_OFF_XMIT, 8);
	if (h->magic != SDNMPI_RBCAST_MAGIC || h->version != SDNMPI_RBCAST_VERSION)
		return -1;
	return 0;
}

#endif /* SDNMPI_RBCAST_H */
