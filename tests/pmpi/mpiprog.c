/* Test program for libsdnmpi: known point-to-point and collective calls on 4
 * ranks (tests/pmpi/test_pmpi_mpi.py asserts the exact trace this gives).
 * Usage: mpiprog [EXIT_STATUS [nofinalize]]: exit status after MPI_Finalize
 * (default 0); with nofinalize, exit after one barrier without MPI_Finalize. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NP 4

static double checksum;

static void p2p(int rank, int n)
{
	int ints[100] = {0}, right = (rank + 1) % n, left = (rank + n - 1) % n;
	double out[10], in[10];
	char c3[3] = {'a', 'b', 'c'}, r3[3];
	MPI_Request reqs[2];
	MPI_Status st[2];

	if (rank == 0) {
		for (int i = 0; i < 100; i++)
			ints[i] = i;
		MPI_Send(ints, 100, MPI_INT, 1, 1, MPI_COMM_WORLD);
	} else if (rank == 1) {
		MPI_Recv(ints, 100, MPI_INT, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	}
	for (int i = 0; i < 10; i++)
		out[i] = rank + i;
	MPI_Irecv(in, 10, MPI_DOUBLE, left, 2, MPI_COMM_WORLD, &reqs[0]);
	MPI_Isend(out, 10, MPI_DOUBLE, right, 2, MPI_COMM_WORLD, &reqs[1]);
	MPI_Waitall(2, reqs, st);
	MPI_Sendrecv(c3, 3, MPI_CHAR, rank ^ 1, 3, r3, 3, MPI_CHAR, rank ^ 1, 3, MPI_COMM_WORLD,
		     MPI_STATUS_IGNORE);
	checksum += ints[99] + in[9] + r3[2];
}

/* Nonblocking receives whose actual source and size differ from the posted
 * ones: completed by MPI_Test (polling) and by MPI_Waitany (ANY_SOURCE). */
static void posted_vs_actual(int rank)
{
	char c7[7] = "sdnmpi", big[100];
	int ints[50] = {0}, flag = 0, idx = -1;
	MPI_Request req;

	if (rank == 0) {
		MPI_Isend(c7, 7, MPI_CHAR, 2, 5, MPI_COMM_WORLD, &req);
		MPI_Wait(&req, MPI_STATUS_IGNORE);
	} else if (rank == 2) {
		MPI_Irecv(big, 100, MPI_CHAR, 0, 5, MPI_COMM_WORLD, &req);
		do
			MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
		while (!flag);
		MPI_Send(ints, 5, MPI_INT, 3, 4, MPI_COMM_WORLD);
		checksum += big[5];
	} else if (rank == 3) {
		MPI_Irecv(ints, 50, MPI_INT, MPI_ANY_SOURCE, 4, MPI_COMM_WORLD, &req);
		MPI_Waitany(1, &req, &idx, MPI_STATUS_IGNORE);
		checksum += idx;
	}
}

static void collectives(int rank, int n)
{
	char b1000[1000];
	double d256[256], r256[256];
	int i8[8], r8[8], a2a[NP * 4], r2a[NP * 4], scounts[NP], sdispl[NP], rcounts[NP],
	    rdispl[NP], va[NP * NP], vr[NP * NP], g[2 * NP], s1 = rank, r1 = 0;
	MPI_Request req;

	memset(b1000, rank, sizeof(b1000));
	MPI_Bcast(b1000, 1000, MPI_CHAR, 1, MPI_COMM_WORLD);
	for (int i = 0; i < 256; i++)
		d256[i] = i * rank;
	MPI_Allreduce(d256, r256, 256, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	for (int i = 0; i < 8; i++)
		i8[i] = rank;
	MPI_Iallreduce(i8, r8, 8, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req);
	MPI_Wait(&req, MPI_STATUS_IGNORE);
	for (int i = 0; i < NP * 4; i++)
		a2a[i] = rank * 100 + i;
	MPI_Alltoall(a2a, 4, MPI_INT, r2a, 4, MPI_INT, MPI_COMM_WORLD);
	for (int i = 0; i < n; i++) {
		scounts[i] = i + 1; /* rank r sends i+1 ints to rank i */
		sdispl[i] = i * NP;
		rcounts[i] = rank + 1;
		rdispl[i] = i * NP;
	}
	for (int i = 0; i < NP * NP; i++)
		va[i] = rank;
	MPI_Alltoallv(va, scounts, sdispl, MPI_INT, vr, rcounts, rdispl, MPI_INT, MPI_COMM_WORLD);
	MPI_Gather(&i8[0], 2, MPI_INT, g, 2, MPI_INT, 0, MPI_COMM_WORLD);
	MPI_Scan(&s1, &r1, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);
	checksum += b1000[999] + r256[255] + r8[7] + r2a[NP * 4 - 1] + vr[0] + r1;
}

static void split(int rank)
{
	MPI_Comm sub;
	int in[16], out[16];
	char b64[64];

	MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &sub);
	for (int i = 0; i < 16; i++)
		in[i] = rank;
	MPI_Allreduce(in, out, 16, MPI_INT, MPI_SUM, sub);
	memset(b64, rank, sizeof(b64));
	MPI_Bcast(b64, 64, MPI_CHAR, 1, sub); /* root: sub rank 1 = world 2 or 3 */
	MPI_Comm_free(&sub);
	checksum += out[15] + b64[63];
}

int main(int argc, char **argv)
{
	int rank, n, status = argc > 1 ? atoi(argv[1]) : 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (argc > 2 && strcmp(argv[2], "nofinalize") == 0) {
		MPI_Barrier(MPI_COMM_WORLD); /* then exit without MPI_Finalize */
		printf("mpiprog: rank %d exits without MPI_Finalize\n", rank);
		exit(status);
	}
	if (n != NP) {
		if (rank == 0)
			fprintf(stderr, "mpiprog: needs %d ranks, got %d\n", NP, n);
		MPI_Finalize();
		return 2;
	}
	p2p(rank, n);
	posted_vs_actual(rank);
	collectives(rank, n);
	split(rank);
	printf("mpiprog: rank %d checksum %.1f\n", rank, checksum);
	MPI_Finalize();
	return status;
}
