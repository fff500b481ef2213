/* Checks MPI_Bcast byte for byte: pseudo-random buffers of many sizes (0, odd, below
 * and above the replicated path's threshold, several MiB), several roots, datatypes
 * (MPI_BYTE, MPI_INT, MPI_DOUBLE, a contiguous derived type, a vector type that
 * must fall back) and communicators (MPI_COMM_WORLD, a dup, a split with reversed
 * rank order, an intercommunicator between its two halves, which must fall back).
 * Every rank compares what it got with what the root sent (and a
 * vector's gaps with what they held); the job exits 1 on any difference.
 * Used by tests/pmpi/test_bcast_replicated.py.  Usage: bcast_check [ROUNDS] */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long calls, errors;

static uint8_t expected(unsigned call, size_t i)
{
	uint64_t x = (uint64_t)call * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;

	x ^= x >> 31;
	x *= 0x94D049BB133111EBull;
	return (uint8_t)(x >> 56);
}

/* One contiguous broadcast of bytes bytes as count elements of type. */
static void check_contig(MPI_Comm comm, int root, MPI_Datatype type, int elem, size_t bytes)
{
	int rank, count = (int)(bytes / (size_t)elem);
	size_t n = (size_t)count * (size_t)elem;
	uint8_t *buf = malloc(n + 1);
	unsigned call = (unsigned)++calls;

	MPI_Comm_rank(comm, &rank);
	for (size_t i = 0; i < n; i++)
		buf[i] = rank == root ? expected(call, i) : 0xCD;
	MPI_Bcast(buf, count, type, root, comm);
	for (size_t i = 0; i < n; i++) {
		if (buf[i] != expected(call, i)) {
			if (errors < 5)
				fprintf(stderr, "bcast_check: call %u (root %d, %zu bytes): byte %zu "
					"is %u, not %u\n", call, root, n, i, buf[i],
					expected(call, i));
			errors++;
			break;
		}
	}
	free(buf);
}

/* A vector of every other int: the gaps must keep their values. */
static void check_vector(MPI_Comm comm, int root, int nints)
{
	MPI_Datatype vec;
	int rank, *buf = malloc(2 * (size_t)nints * sizeof(int));
	unsigned call = (unsigned)++calls;

	MPI_Comm_rank(comm, &rank);
	MPI_Type_vector(nints, 1, 2, MPI_INT, &vec);
	MPI_Type_commit(&vec);
	for (int i = 0; i < 2 * nints; i++)
		buf[i] = i % 2 ? -i : (rank == root ? (int)expected(call, (size_t)i) : -1);
	MPI_Bcast(buf, 1, vec, root, comm);
	for (int i = 0; i < 2 * nints; i++) {
		int want = i % 2 ? -i : (int)expected(call, (size_t)i);
		if (buf[i] != want) {
			fprintf(stderr, "bcast_check: vector call %u: int %d is %d, not %d\n", call, i,
				buf[i], want);
			errors++;
			break;
		}
	}
	MPI_Type_free(&vec);
	free(buf);
}

static void sweep(MPI_Comm comm)
{
	static const size_t sizes[] = {0, 1, 1000, 65535, 65536, 65537, 200003, 1 << 20};
	int size;

	MPI_Comm_size(comm, &size);
	for (int k = 0; k < 3; k++) {
		int root = k == 0 ? 0 : k == 1 ? size - 1 : size / 2;
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
			check_contig(comm, root, MPI_BYTE, 1, sizes[i]);
	}
}

/* A broadcast over an intercommunicator from rank 0 of the group with color 0 (the
 * root passes MPI_ROOT, its group's others MPI_PROC_NULL, the other group 0). */
static void check_inter(MPI_Comm inter, int color, size_t bytes)
{
	int rank, root;
	uint8_t *buf = malloc(bytes);
	unsigned call = (unsigned)++calls;

	MPI_Comm_rank(inter, &rank);
	root = color == 0 ? (rank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
	for (size_t i = 0; i < bytes; i++)
		buf[i] = root == MPI_ROOT ? expected(call, i) : 0xCD;
	MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, inter);
	for (size_t i = 0; color != 0 && i < bytes; i++) {
		if (buf[i] != expected(call, i)) {
			if (errors < 5)
				fprintf(stderr, "bcast_check: intercommunicator call %u: byte %zu "
					"is %u, not %u\n", call, i, buf[i], expected(call, i));
			errors++;
			break;
		}
	}
	free(buf);
}

int main(int argc, char **argv)
{
	MPI_Comm inter = MPI_COMM_NULL;
	MPI_Comm dup, split;
	MPI_Datatype quad;
	int rank, size, rounds = argc > 1 ? atoi(argv[1]) : 1;
	long total;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Type_contiguous(4, MPI_INT, &quad);
	MPI_Type_commit(&quad);
	MPI_Comm_dup(MPI_COMM_WORLD, &dup);
	MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &split);
	if (size >= 2) /* the halves' leaders: the highest even and odd world ranks */
		MPI_Intercomm_create(split, 0, MPI_COMM_WORLD,
				     rank % 2 ? (size - 1) - (size - 1) % 2 : size - 1 - size % 2, 7,
				     &inter);
	for (int r = 0; r < rounds; r++) {
		sweep(MPI_COMM_WORLD);
		sweep(dup);
		sweep(split);
		check_contig(MPI_COMM_WORLD, 0, MPI_BYTE, 1, (3u << 20) + 5);
		check_contig(MPI_COMM_WORLD, size - 1, MPI_BYTE, 1, 4u << 20);
		check_contig(MPI_COMM_WORLD, 1 % size, MPI_INT, 4, 262144 + 12);
		check_contig(MPI_COMM_WORLD, 0, MPI_DOUBLE, 8, 300000);
		check_contig(dup, size - 1, quad, 16, 160000);
		check_vector(MPI_COMM_WORLD, 0, 40000);
		check_vector(split, 0, 100);
		if (inter != MPI_COMM_NULL)
			check_inter(inter, rank % 2, 1u << 20);
	}
	if (inter != MPI_COMM_NULL)
		MPI_Comm_free(&inter);
	MPI_Comm_free(&split);
	MPI_Comm_free(&dup);
	MPI_Type_free(&quad);
	MPI_Allreduce(&errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("bcast_check: %ld calls per rank, %ld differences\n", calls, total);
	MPI_Finalize();
	return total ? 1 : 0;
}
