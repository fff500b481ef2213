/* Pending nonblocking receives: request handle (as 64 bits) -> event index, so
 * a completion call can fill in the actual source and size (no MPI dependency). */
#ifndef SDN_REQMAP_H
#define SDN_REQMAP_H

#include <stddef.h>
#include <stdint.h>

struct sdn_reqmap {
	uint64_t *keys;
	int64_t *vals;
	unsigned char *used;
	size_t cap, n;
};

void sdn_reqmap_init(struct sdn_reqmap *m);
void sdn_reqmap_free(struct sdn_reqmap *m);
/* Insert or overwrite; 0, or -1 on allocation failure. */
int sdn_reqmap_put(struct sdn_reqmap *m, uint64_t key, int64_t val);
/* The value of key, or -1 if absent. */
int64_t sdn_reqmap_get(const struct sdn_reqmap *m, uint64_t key);
/* Remove key; returns its value, or -1 if absent. */
int64_t sdn_reqmap_take(struct sdn_reqmap *m, uint64_t key);

#endif
