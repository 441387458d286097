/* The OpenMPI side of `bench/run allreduce`: MPI_Allreduce (sum) of f32 buffers, median of REPS
   after a warm-up; rank 0 prints {"impl":"mpi","bytes":...,"ms":...} per size.
   usage: mpirun -n N mpi-allreduce [REPS] MiB... */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int reps = argc > 1 ? atoi(argv[1]) : 5;
  for (int i = 2; i < argc; ++i) {
    const long n = (long)(atof(argv[i]) * 1024 * 1024 / 4);
    float* x = malloc(n * sizeof(float));
    float* y = malloc(n * sizeof(float));
    for (long k = 0; k < n; ++k) x[k] = 1.0f;
    MPI_Allreduce(x, y, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double* ms = malloc(reps * sizeof(double));
    for (int r = 0; r < reps; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(x, y, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      ms[r] = (MPI_Wtime() - t0) * 1e3;
    }
    qsort(ms, reps, sizeof(double), cmp);
    if (rank == 0) printf("{\"impl\":\"mpi\",\"bytes\":%ld,\"ms\":%.3f}\n", n * 4, ms[reps / 2]);
    fflush(stdout);
    free(x);
    free(y);
    free(ms);
  }
  MPI_Finalize();
  return 0;
}
