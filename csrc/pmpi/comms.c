/* Communicator tracking (see comms.h).  Only PMPI_ calls: never recorded. */
#include "comms.h"

#include <stdlib.h>
#include <string.h>

#include "event.h"

static struct sdn_comm *append(struct sdn_comm_table *t)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 16;
		struct sdn_comm *v = realloc(t->v, cap * sizeof(*v));
		if (!v)
			return NULL;
		t->v = v;
		t->cap = cap;
	}
	return &t->v[t->n];
}

static int translate(struct sdn_comm_table *t, MPI_Comm comm, struct sdn_comm *c)
{
	MPI_Group g;
	int size, rank, inter = 0, *ranks, *out, rc;

	PMPI_Comm_test_inter(comm, &inter);
	if (inter ? PMPI_Comm_remote_group(comm, &g) : PMPI_Comm_group(comm, &g))
		return -1;
	PMPI_Group_size(g, &size);
	PMPI_Comm_rank(comm, &rank);
	ranks = malloc((size_t)size * sizeof(int) + 1);
	out = malloc((size_t)size * sizeof(int) + 1);
	c->world_ranks = malloc((size_t)size * sizeof(int32_t) + 1);
	rc = !ranks || !out || !c->world_ranks ? -1 : 0;
	if (rc == 0) {
		for (int i = 0; i < size; i++)
			ranks[i] = i;
		rc = PMPI_Group_translate_ranks(g, size, ranks, t->world_group, out) ? -1 : 0;
		for (int i = 0; i < size; i++)
			c->world_ranks[i] = out[i] == MPI_UNDEFINED ? SDN_PEER_NONE : out[i];
	}
	PMPI_Group_free(&g);
	free(ranks);
	free(out);
	c->size = size;
	c->my_rank = rank;
	c->inter = inter;
	return rc;
}

struct sdn_comm *sdn_comm_register(struct sdn_comm_table *t, MPI_Comm comm)
{
	struct sdn_comm *c;

	if (comm == MPI_COMM_NULL)
		return NULL;
	c = append(t);
	if (!c)
		return NULL;
	memset(c, 0, sizeof(*c));
	c->handle = comm;
	if (translate(t, comm, c)) {
		free(c->world_ranks);
		return NULL;
	}
	c->id = t->next_id++;
	c->live = 1;
	t->n++;
	return c;
}

int sdn_comms_init(struct sdn_comm_table *t)
{
	memset(t, 0, sizeof(*t));
	if (PMPI_Comm_group(MPI_COMM_WORLD, &t->world_group))
		return -1;
	if (!sdn_comm_register(t, MPI_COMM_WORLD) || !sdn_comm_register(t, MPI_COMM_SELF))
		return -1;
	return 0;
}

void sdn_comms_free(struct sdn_comm_table *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i].world_ranks);
	free(t->v);
	memset(t, 0, sizeof(*t));
}

static struct sdn_comm *find(struct sdn_comm_table *t, MPI_Comm comm)
{
	for (size_t i = t->n; i-- > 0;)
		if (t->v[i].live && t->v[i].handle == comm)
			return &t->v[i];
	return NULL;
}

struct sdn_comm *sdn_comm_get(struct sdn_comm_table *t, MPI_Comm comm)
{
	struct sdn_comm *c;

	if (comm == MPI_COMM_WORLD && t->n > 0)
		return &t->v[0];
	c = find(t, comm);
	return c ? c : sdn_comm_register(t, comm);
}

int32_t sdn_comm_forget(struct sdn_comm_table *t, MPI_Comm comm)
{
	struct sdn_comm *c = find(t, comm);

	if (!c)
		return -1;
	c->live = 0;
	return c->id;
}

int32_t sdn_comm_world(const struct sdn_comm *c, int r)
{
	if (r == MPI_ANY_SOURCE)
		return SDN_PEER_ANY;
	if (r == MPI_PROC_NULL)
		return SDN_PEER_NULL;
	if (!c || r < 0 || r >= c->size)
		return SDN_PEER_NONE;
	return c->world_ranks[r];
}

void sdn_comms_info(const struct sdn_comm_table *t, struct sdn_comm_info *out)
{
	for (size_t i = 0; i < t->n; i++) {
		out[i].id = t->v[i].id;
		out[i].size = t->v[i].size;
		out[i].world_ranks = t->v[i].world_ranks;
	}
}
