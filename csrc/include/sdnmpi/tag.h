/* SPDX-License-Identifier: MIT */
/*
 * sdnmpi MPI context tag, layout v1: the canonical definition.
 *
 * The tag replaces the destination MAC of an MPI packet so OpenFlow switches can
 * route by MPI context (after UnisonFlow, sections III-A/III-B). This header is
 * used by the eBPF tagger (clang -target bpf) and by user-space C; it needs only
 * <linux/types.h> and calls no libc function. The Python codec sdnmpi.wire.tag
 * mirrors it: every integer "#define SDNMPI_<NAME>" below equals the Python
 * constant <NAME>, and enum sdnmpi_primitive equals sdnmpi.wire.tag.Primitive
 * (tests/wire/test_header_parity.py). Shared vectors: tests/vectors/tag-v1.json.
 *
 * Octets o0..o5 in wire order (o0 is the first octet of the destination MAC):
 *
 *   o0 = 0xA6   bits 7..4 magic 0xA, bits 3..2 version (01),
 *               bit 1 locally administered (1), bit 0 unicast (0)
 *   o1..o5      V, a 40-bit big-endian value (o1 holds V bits 39..32):
 *     V[39:33]  job slot          7 bits, 1..127 (0 invalid)
 *     V[32:28]  primitive code    5 bits, 1..31  (0 invalid, 18..30 reserved)
 *     V[27:16]  source rank      12 bits, 0..4095 (world rank in the job)
 *     V[15:4]   destination rank 12 bits, 0..4095
 *     V[3:0]    check, CRC-4
 *
 * CRC-4: generator x^4 + x + 1 (0x3 without the x^4 term), initial value 0, no
 * reflection, no final xor. The message is the 44-bit number
 *     M = (o0 << 36) | (V >> 4)
 * fed most significant bit first: o0 bit 7 first, ..., o0 bit 0, then V bit 39,
 * ..., V bit 4. The check is the remainder of M * x^4 modulo the generator.
 * Worked example: job slot 1, bcast (3), source rank 2, destination rank 3:
 *     V >> 4 = 0x023002003, M = 0xA6023002003, check = 0x9,
 *     MAC = a6:02:30:02:00:39.
 */
#ifndef SDNMPI_TAG_H
#define SDNMPI_TAG_H

#include <linux/types.h>

#define SDNMPI_TAG_LEN 6
#define SDNMPI_TAG_VERSION 1
#define SDNMPI_TAG_MAGIC 0xA
#define SDNMPI_TAG_OCTET0 0xA6
/* octet 0 & PREFIX_MASK == PREFIX: magic, locally administered, unicast */
#define SDNMPI_TAG_PREFIX_MASK 0xF3
#define SDNMPI_TAG_PREFIX 0xA2
#define SDNMPI_TAG_VERSION_SHIFT 2
#define SDNMPI_TAG_VERSION_MASK 0x3

#define SDNMPI_TAG_JOB_SLOT_SHIFT 33
#define SDNMPI_TAG_JOB_SLOT_BITS 7
#define SDNMPI_TAG_PRIMITIVE_SHIFT 28
#define SDNMPI_TAG_PRIMITIVE_BITS 5
#define SDNMPI_TAG_SRC_RANK_SHIFT 16
#define SDNMPI_TAG_DST_RANK_SHIFT 4
#define SDNMPI_TAG_RANK_BITS 12
#define SDNMPI_TAG_CHECK_BITS 4
#define SDNMPI_TAG_CRC_POLY 0x3
#define SDNMPI_TAG_FIRST_RESERVED_PRIMITIVE 18
#define SDNMPI_TAG_LAST_RESERVED_PRIMITIVE 30

#define SDNMPI_MAX_JOB_SLOT 127
#define SDNMPI_MAX_RANK 4095
#define SDNMPI_MAX_PRIMITIVE 31

/* Primitive codes; nonblocking variants use the code of their blocking form. */
enum sdnmpi_primitive {
	SDNMPI_PRIM_NONE = 0, /* not inside an MPI call; never on the wire */
	SDNMPI_PRIM_P2P = 1,
	SDNMPI_PRIM_BARRIER = 2,
	SDNMPI_PRIM_BCAST = 3,
	SDNMPI_PRIM_REDUCE = 4,
	SDNMPI_PRIM_ALLREDUCE = 5,
	SDNMPI_PRIM_ALLTOALL = 6,
	SDNMPI_PRIM_ALLGATHER = 7,
	SDNMPI_PRIM_GATHER = 8,
	SDNMPI_PRIM_SCATTER = 9,
	SDNMPI_PRIM_REDUCE_SCATTER = 10,
	SDNMPI_PRIM_SCAN = 11,
	SDNMPI_PRIM_EXSCAN = 12,
	SDNMPI_PRIM_ALLTOALLV = 13,
	SDNMPI_PRIM_ALLGATHERV = 14,
	SDNMPI_PRIM_GATHERV = 15,
	SDNMPI_PRIM_SCATTERV = 16,
	SDNMPI_PRIM_REDUCE_SCATTER_BLOCK = 17,
	SDNMPI_PRIM_OTHER = 31,
};

/* Result of sdnmpi_tag_decode(): >= 0 means the fields were filled in. */
enum sdnmpi_tag_status {
	SDNMPI_TAG_OK = 0,
	SDNMPI_TAG_UNKNOWN_PRIMITIVE = 1, /* valid tag, reserved code 18..30 */
	SDNMPI_TAG_ERR_PREFIX = -1,       /* octet 0 is not an sdnmpi prefix */
	SDNMPI_TAG_ERR_VERSION = -2,
	SDNMPI_TAG_ERR_CRC = -3,
	SDNMPI_TAG_ERR_JOB_SLOT = -4, /* job slot 0 */
	SDNMPI_TAG_ERR_PRIMITIVE = -5, /* primitive 0 */
	SDNMPI_TAG_ERR_RANGE = -6,     /* encode: a field out of range */
};

struct sdnmpi_tag {
	__u8 job_slot;
	__u8 primitive;
	__u16 src_rank;
	__u16 dst_rank;
};

/* Nibble table of the CRC-4, packed 4 bits per entry: entry i (bits 4i+3..4i) is
 * (i * x^4) mod (x^4 + x + 1). Entries 0..15: 0 3 6 5 c f a 9 b 8 d e 7 4 1 2. */
#define SDNMPI_TAG_CRC_TABLE 0x2147ed8b9afc5630ULL

/* CRC-4 of the 44-bit message msg44 (see above), one nibble at a time, most
 * significant nibble first; with a 4-bit register crc' = T[crc ^ nibble]. This is
 * branchless and loop-free after unrolling, which keeps the BPF verifier's work
 * small (a bit-serial version made the 6.18 verifier give up with E2BIG). The
 * Python codec computes the same value bit by bit. */
static inline __u8 sdnmpi_tag_crc4(__u64 msg44)
{
	__u64 crc = 0;
	int shift;

#ifdef __clang__
#pragma clang loop unroll(full)
#endif
	for (shift = 40; shift >= 0; shift -= 4) {
		__u64 idx = (crc ^ (msg44 >> shift)) & 0xF;

		crc = (SDNMPI_TAG_CRC_TABLE >> (idx * 4)) & 0xF;
	}
	return (__u8)crc;
}

static inline int sdnmpi_tag_fields_valid(const struct sdnmpi_tag *t)
{
	return t->job_slot >= 1 && t->job_slot <= SDNMPI_MAX_JOB_SLOT &&
	       t->primitive >= 1 && t->primitive <= SDNMPI_MAX_PRIMITIVE &&
	       t->src_rank <= SDNMPI_MAX_RANK && t->dst_rank <= SDNMPI_MAX_RANK;
}

/* Encode t into out[0..5] (wire order). Returns SDNMPI_TAG_OK or
 * SDNMPI_TAG_ERR_RANGE (out untouched) when a field is out of range. */
static inline int sdnmpi_tag_encode(const struct sdnmpi_tag *t, __u8 out[SDNMPI_TAG_LEN])
{
	__u64 v;

	if (!sdnmpi_tag_fields_valid(t))
		return SDNMPI_TAG_ERR_RANGE;
	v = ((__u64)t->job_slot << SDNMPI_TAG_JOB_SLOT_SHIFT) |
	    ((__u64)t->primitive << SDNMPI_TAG_PRIMITIVE_SHIFT) |
	    ((__u64)t->src_rank << SDNMPI_TAG_SRC_RANK_SHIFT) |
	    ((__u64)t->dst_rank << SDNMPI_TAG_DST_RANK_SHIFT);
	v |= sdnmpi_tag_crc4(((__u64)SDNMPI_TAG_OCTET0 << 36) | (v >> SDNMPI_TAG_CHECK_BITS));
	out[0] = SDNMPI_TAG_OCTET0;
	out[1] = (__u8)(v >> 32);
	out[2] = (__u8)(v >> 24);
	out[3] = (__u8)(v >> 16);
	out[4] = (__u8)(v >> 8);
	out[5] = (__u8)v;
	return SDNMPI_TAG_OK;
}

static inline int sdnmpi_tag_primitive_known(__u32 code)
{
	return code >= 1 && code <= SDNMPI_MAX_PRIMITIVE &&
	       (code < SDNMPI_TAG_FIRST_RESERVED_PRIMITIVE ||
		code > SDNMPI_TAG_LAST_RESERVED_PRIMITIVE);
}

/* Decode mac[0..5]. Checks in order: prefix, version, CRC, job slot, primitive.
 * Returns a negative SDNMPI_TAG_ERR_* (t untouched), SDNMPI_TAG_OK, or
 * SDNMPI_TAG_UNKNOWN_PRIMITIVE for a valid tag with a reserved code (t filled). */
static inline int sdnmpi_tag_decode(const __u8 mac[SDNMPI_TAG_LEN], struct sdnmpi_tag *t)
{
	__u64 v;
	__u8 job_slot, primitive;

	if ((mac[0] & SDNMPI_TAG_PREFIX_MASK) != SDNMPI_TAG_PREFIX)
		return SDNMPI_TAG_ERR_PREFIX;
	if (((mac[0] >> SDNMPI_TAG_VERSION_SHIFT) & SDNMPI_TAG_VERSION_MASK) != SDNMPI_TAG_VERSION)
		return SDNMPI_TAG_ERR_VERSION;
	v = ((__u64)mac[1] << 32) | ((__u64)mac[2] << 24) | ((__u64)mac[3] << 16) |
	    ((__u64)mac[4] << 8) | (__u64)mac[5];
	if ((v & 0xF) != sdnmpi_tag_crc4(((__u64)mac[0] << 36) | (v >> SDNMPI_TAG_CHECK_BITS)))
		return SDNMPI_TAG_ERR_CRC;
	job_slot = (__u8)((v >> SDNMPI_TAG_JOB_SLOT_SHIFT) & SDNMPI_MAX_JOB_SLOT);
	primitive = (__u8)((v >> SDNMPI_TAG_PRIMITIVE_SHIFT) & SDNMPI_MAX_PRIMITIVE);
	if (job_slot == 0)
		return SDNMPI_TAG_ERR_JOB_SLOT;
	if (primitive == 0)
		return SDNMPI_TAG_ERR_PRIMITIVE;
	t->job_slot = job_slot;
	t->primitive = primitive;
	t->src_rank = (__u16)((v >> SDNMPI_TAG_SRC_RANK_SHIFT) & SDNMPI_MAX_RANK);
	t->dst_rank = (__u16)((v >> SDNMPI_TAG_DST_RANK_SHIFT) & SDNMPI_MAX_RANK);
	return sdnmpi_tag_primitive_known(primitive) ? SDNMPI_TAG_OK
						      : SDNMPI_TAG_UNKNOWN_PRIMITIVE;
}

#endif /* SDNMPI_TAG_H */
