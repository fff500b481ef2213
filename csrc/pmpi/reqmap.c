/* Open addressing with linear probing and backward-shift deletion. */
#include "reqmap.h"

#include <stdlib.h>
#include <string.h>

void sdn_reqmap_init(struct sdn_reqmap *m)
{
	memset(m, 0, sizeof(*m));
}

void sdn_reqmap_free(struct sdn_reqmap *m)
{
	free(m->keys);
	free(m->vals);
	free(m->used);
	sdn_reqmap_init(m);
}

static size_t home(uint64_t key, size_t cap)
{
	return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
}

static size_t find(const struct sdn_reqmap *m, uint64_t key)
{
	size_t i = home(key, m->cap);

	while (m->used[i] && m->keys[i] != key)
		i = (i + 1) & (m->cap - 1);
	return i;
}

static int rehash(struct sdn_reqmap *m, size_t cap)
{
	struct sdn_reqmap n = {malloc(cap * sizeof(uint64_t)), malloc(cap * sizeof(int64_t)),
			       calloc(cap, 1), cap, 0};

	if (!n.keys || !n.vals || !n.used) {
		sdn_reqmap_free(&n);
		return -1;
	}
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->used[i])
			continue;
		size_t j = find(&n, m->keys[i]);
		n.used[j] = 1;
		n.keys[j] = m->keys[i];
		n.vals[j] = m->vals[i];
		n.n++;
	}
	sdn_reqmap_free(m);
	*m = n;
	return 0;
}

int sdn_reqmap_put(struct sdn_reqmap *m, uint64_t key, int64_t val)
{
	size_t i;

	if ((m->n + 1) * 2 > m->cap && rehash(m, m->cap ? m->cap * 2 : 64))
		return -1;
	i = find(m, key);
	if (!m->used[i]) {
		m->used[i] = 1;
		m->keys[i] = key;
		m->n++;
	}
	m->vals[i] = val;
	return 0;
}

int64_t sdn_reqmap_get(const struct sdn_reqmap *m, uint64_t key)
{
	size_t i;

	if (!m->n)
		return -1;
	i = find(m, key);
	return m->used[i] ? m->vals[i] : -1;
}

int64_t sdn_reqmap_take(struct sdn_reqmap *m, uint64_t key)
{
	size_t i, j;
	int64_t val;

	if (!m->n)
		return -1;
	i = find(m, key);
	if (!m->used[i])
		return -1;
	val = m->vals[i];
	m->used[i] = 0;
	m->n--;
	/* backward shift: move later entries of the probe run into the hole */
	for (j = (i + 1) & (m->cap - 1); m->used[j]; j = (j + 1) & (m->cap - 1)) {
		size_t h = home(m->keys[j], m->cap);
		int between = i <= j ? (i < h && h <= j) : (i < h || h <= j);
		if (between)
			continue;
		m->keys[i] = m->keys[j];
		m->vals[i] = m->vals[j];
		m->used[i] = 1;
		m->used[j] = 0;
		i = j;
	}
	return val;
}
