/* SPDX-License-Identifier: MIT */
/* Checks csrc/include/sdnmpi/tag.h against the shared vectors
 * (tests/vectors/tag-v1.json, turned into tag_vectors.inc at build time).
 * Prints one line per failure and a summary; exit status 0 only if all pass. */
#include <stdio.h>
#include <string.h>

#include <sdnmpi/tag.h>

struct valid_vector {
	unsigned job_slot, primitive, src_rank, dst_rank;
	__u8 mac[SDNMPI_TAG_LEN];
	int status;
};

struct invalid_vector {
	__u8 mac[SDNMPI_TAG_LEN];
	int status;
};

#include "tag_vectors.inc"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int check_valid(const struct valid_vector *v, size_t i)
{
	struct sdnmpi_tag in = {
		.job_slot = (__u8)v->job_slot,
		.primitive = (__u8)v->primitive,
		.src_rank = (__u16)v->src_rank,
		.dst_rank = (__u16)v->dst_rank,
	};
	struct sdnmpi_tag out;
	__u8 mac[SDNMPI_TAG_LEN];
	int rc;

	memset(&out, 0, sizeof(out));
	if (sdnmpi_tag_encode(&in, mac) != SDNMPI_TAG_OK || memcmp(mac, v->mac, sizeof(mac)) != 0) {
		printf("FAIL valid[%zu]: encode mismatch\n", i);
		return 1;
	}
	rc = sdnmpi_tag_decode(v->mac, &out);
	if (rc != v->status || memcmp(&in, &out, sizeof(in)) != 0) {
		printf("FAIL valid[%zu]: decode status %d (expected %d) or fields differ\n", i,
		       rc, v->status);
		return 1;
	}
	return 0;
}

static int check_invalid(const struct invalid_vector *v, size_t i)
{
	struct sdnmpi_tag out;
	int rc;

	memset(&out, 0xEE, sizeof(out));
	rc = sdnmpi_tag_decode(v->mac, &out);
	if (rc != v->status || out.job_slot != 0xEE) {
		printf("FAIL invalid[%zu]: decode status %d, expected %d\n", i, rc, v->status);
		return 1;
	}
	return 0;
}

static int check_range(void)
{
	const struct sdnmpi_tag bad[] = {
		{0, 1, 0, 0}, {128, 1, 0, 0}, {1, 0, 0, 0}, {1, 32, 0, 0}, {1, 1, 4096, 0},
		{1, 1, 0, 4096},
	};
	__u8 mac[SDNMPI_TAG_LEN] = {0};
	size_t i;
	int failures = 0;

	for (i = 0; i < COUNT(bad); i++) {
		if (sdnmpi_tag_encode(&bad[i], mac) != SDNMPI_TAG_ERR_RANGE || mac[0] != 0) {
			printf("FAIL range[%zu]: out-of-range fields accepted\n", i);
			failures++;
		}
	}
	return failures;
}

int main(void)
{
	size_t i;
	int failures = 0;

	for (i = 0; i < COUNT(VALID_VECTORS); i++)
		failures += check_valid(&VALID_VECTORS[i], i);
	for (i = 0; i < COUNT(INVALID_VECTORS); i++)
		failures += check_invalid(&INVALID_VECTORS[i], i);
	failures += check_range();
	printf("tag_vectors: %zu valid, %zu invalid, %d failures\n", COUNT(VALID_VECTORS),
	       COUNT(INVALID_VECTORS), failures);
	return failures == 0 ? 0 : 1;
}
