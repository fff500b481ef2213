/* Open-addressing hash map int64 -> uint64 with linear probing. */
#include "histo.h"

#include <stdlib.h>
#include <string.h>

void sdn_histo_init(struct sdn_histo *h)
{
	memset(h, 0, sizeof(*h));
}

void sdn_histo_free(struct sdn_histo *h)
{
	free(h->keys);
	free(h->vals);
	sdn_histo_init(h);
}

static size_t slot(int64_t key, size_t cap)
{
	uint64_t x = (uint64_t)key * 0x9E3779B97F4A7C15ull;
	return (size_t)(x >> 17) & (cap - 1);
}

static size_t find(const struct sdn_histo *h, int64_t key)
{
	size_t i = slot(key, h->cap);

	while (h->keys[i] != -1 && h->keys[i] != key)
		i = (i + 1) & (h->cap - 1);
	return i;
}

static int rehash(struct sdn_histo *h, size_t cap)
{
	struct sdn_histo n = {malloc(cap * sizeof(int64_t)), calloc(cap, sizeof(uint64_t)), cap, 0};

	if (!n.keys || !n.vals) {
		free(n.keys);
		free(n.vals);
		return -1;
	}
	for (size_t i = 0; i < cap; i++)
		n.keys[i] = -1;
	for (size_t i = 0; i < h->cap; i++) {
		if (h->keys[i] == -1)
			continue;
		size_t j = find(&n, h->keys[i]);
		n.keys[j] = h->keys[i];
		n.vals[j] = h->vals[i];
		n.n++;
	}
	free(h->keys);
	free(h->vals);
	*h = n;
	return 0;
}

int sdn_histo_add(struct sdn_histo *h, int64_t size_bytes, uint64_t n)
{
	size_t i;

	if (size_bytes < 0)
		return -1;
	if ((h->n + 1) * 2 > h->cap && rehash(h, h->cap ? h->cap * 2 : 64))
		return -1;
	i = find(h, size_bytes);
	if (h->keys[i] == -1) {
		h->keys[i] = size_bytes;
		h->n++;
	}
	h->vals[i] += n;
	return 0;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

size_t sdn_histo_sorted(const struct sdn_histo *h, int64_t *sizes, uint64_t *counts)
{
	size_t k = 0;

	for (size_t i = 0; i < h->cap; i++)
		if (h->keys[i] != -1)
			sizes[k++] = h->keys[i];
	qsort(sizes, k, sizeof(int64_t), cmp_i64);
	for (size_t i = 0; i < k; i++)
		counts[i] = h->vals[find(h, sizes[i])];
	return k;
}
