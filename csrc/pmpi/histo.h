/* Message-size histogram: size in bytes -> number of messages (no MPI). */
#ifndef SDN_HISTO_H
#define SDN_HISTO_H

#include <stddef.h>
#include <stdint.h>

struct sdn_histo {
	int64_t *keys; /* -1: empty slot */
	uint64_t *vals;
	size_t cap, n;
};

void sdn_histo_init(struct sdn_histo *h);
void sdn_histo_free(struct sdn_histo *h);
/* Add n messages of size_bytes (>= 0); 0 on success, -1 on bad size or no memory. */
int sdn_histo_add(struct sdn_histo *h, int64_t size_bytes, uint64_t n);
/* Sizes ascending with their counts into arrays of h->n entries; returns h->n. */
size_t sdn_histo_sorted(const struct sdn_histo *h, int64_t *sizes, uint64_t *counts);

#endif
