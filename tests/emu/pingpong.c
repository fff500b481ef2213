/* Two-rank MPI ping-pong for the emulated-fabric tests: pingpong [bytes] [iterations]. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int rank, n, len; char name[MPI_MAX_PROCESSOR_NAME];
  MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Get_processor_name(name, &len);
  int bytes = argc > 1 ? atoi(argv[1]) : 1 << 20, iters = argc > 2 ? atoi(argv[2]) : 10;
  char *buf = malloc(bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; i++) {
    if (rank == 0) { MPI_Send(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD); MPI_Recv(buf, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
    else if (rank == 1) { MPI_Recv(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(buf, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD); }
  }
  double dt = MPI_Wtime() - t0;
  printf("rank %d of %d on %s\n", rank, n, name);
  if (rank == 0) printf("pingpong bytes=%d iters=%d time_s=%.6f mbit_s=%.1f\n", bytes, iters, dt, 2.0 * iters * bytes * 8 / dt / 1e6);
  free(buf); MPI_Finalize(); return 0;
}
