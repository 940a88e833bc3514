/*
 * bench/peers/mpi_coll.c - the Open MPI peer of `simpler bench collectives`.
 *
 * Adapted from the workplace's own measuring tool (peers/mpi_coll.c of the
 * shared peers kit, "written for this kit"): the same timing method, so the
 * figures compare with the kit's. simpler embeds this file, builds it with
 * `mpicc -O2` into a temporary directory when mpicc and mpirun are on PATH,
 * and runs it beside its own collectives in the same run.
 *
 * Its original description (a small MPI collective / window / memcpy
 * timer for the kit's mpi_collectives.sh):
 *
 *   ./mpi_coll memcpy [bytes]                      no MPI: memcpy bandwidth
 *   mpirun -np N ./mpi_coll coll [minB maxB]       collectives, sizes x4 steps
 *   mpirun -np N ./mpi_coll win [bytes...]         MPI_Win_allocate/free latency
 *
 * Sizes follow nccl-tests: "bytes" is the whole buffer of the operation
 *   allreduce       count*4 per rank (in = out)
 *   allgather       size of the gathered output (each rank sends bytes/N)
 *   reduce_scatter  size of the input (each rank keeps bytes/N)
 *   alltoall        size of each rank's send buffer (bytes/N to each peer)
 *   bcast           the broadcast buffer
 * algbw = bytes / time (GB/s, 1e9); busbw = algbw * factor with factors
 *   allreduce 2(N-1)/N; allgather, reduce_scatter, alltoall (N-1)/N; bcast 1.
 *
 * Timing of one (op, size): correctness check (also a warm-up), 2 more
 * warm-ups, a calibration op, then TRIALS trials of `iters` back-to-back ops
 * (iters chosen so a trial lasts ~TARGET_S). A trial's time per op is the
 * slowest rank's average; the reported figure is the median over trials.
 * All output lines start with a tag (ROW, WIN, MEMCPY) for the shell script
 * to parse.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MAX_TRIALS 64
#define MAX_ITERS 2000
/* overridable from the environment: MPI_COLL_TRIALS, MPI_COLL_TARGET_S,
 * MPI_COLL_MIN_ITERS */
static int TRIALS = 9;
static double TARGET_S = 0.02;
static int MIN_ITERS = 2;

static void read_env(void) {
  const char *v;
  if ((v = getenv("MPI_COLL_TRIALS")) && atoi(v) > 0) TRIALS = atoi(v) < MAX_TRIALS ? atoi(v) : MAX_TRIALS;
  if ((v = getenv("MPI_COLL_TARGET_S")) && atof(v) > 0) TARGET_S = atof(v);
  if ((v = getenv("MPI_COLL_MIN_ITERS")) && atoi(v) > 0) MIN_ITERS = atoi(v);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void *xalloc(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, bytes) != 0) {
    fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    exit(2);
  }
  memset(p, 0, bytes); /* fault every page in before timing */
  return p;
}

/* ------------------------------------------------------------ memcpy */

static int do_memcpy(size_t bytes) {
  char *src = xalloc(bytes), *dst = xalloc(bytes);
  memset(src, 0x5a, bytes);
  enum { WARM = 3, REPS = 31 };
  double t[REPS];
  for (int i = 0; i < WARM + REPS; i++) {
    double t0 = now();
    memcpy(dst, src, bytes);
    __asm__ volatile("" : : "r"(dst) : "memory");
    double dt = now() - t0;
    if (i >= WARM) t[i - WARM] = dt;
  }
  if (dst[bytes - 1] != 0x5a) { fprintf(stderr, "memcpy check failed\n"); return 1; }
  double tmin = t[0], tmax = t[0];
  for (int i = 1; i < REPS; i++) { if (t[i] < tmin) tmin = t[i]; if (t[i] > tmax) tmax = t[i]; }
  double med = median(t, REPS);
  printf("MEMCPY bytes=%zu reps=%d us=%.1f gbps=%.3f gbps_best=%.3f gbps_worst=%.3f\n",
         bytes, REPS, med * 1e6, bytes / med / 1e9, bytes / tmin / 1e9, bytes / tmax / 1e9);
  free(src); free(dst);

  /* first touch: fresh anonymous mapping, write every byte, unmap. This is
   * what a new buffer costs before its first use on this machine (page
   * faults + zeroing); it explains the window and big-message numbers. */
  enum { FT_REPS = 9 };
  double ft[FT_REPS];
  for (int i = 0; i < 1 + FT_REPS; i++) {
    double t0 = now();
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    memset(p, 1, bytes);
    __asm__ volatile("" : : "r"(p) : "memory");
    munmap(p, bytes);
    if (i >= 1) ft[i - 1] = now() - t0;
  }
  double fmed = median(ft, FT_REPS);
  printf("FIRSTTOUCH bytes=%zu reps=%d us=%.1f gbps=%.3f us_per_4k_page=%.3f\n", bytes, FT_REPS,
         fmed * 1e6, bytes / fmed / 1e9, fmed * 1e6 / (double)(bytes / 4096));
  return 0;
}

/* ------------------------------------------------------------ collectives */

enum { ALLREDUCE, ALLGATHER, REDUCE_SCATTER, BCAST, ALLTOALL, NOPS };
static const char *op_name[NOPS] = {"allreduce", "allgather", "reduce_scatter", "bcast", "alltoall"};

static double bus_factor(int op, int n) {
  switch (op) {
  case ALLREDUCE: return 2.0 * (n - 1) / n;
  case BCAST: return 1.0;
  default: return (double)(n - 1) / n;
  }
}

static void run_op(int op, size_t bytes, float *sb, float *rb, int n) {
  int count = (int)(bytes / sizeof(float));
  int per = count / n;
  switch (op) {
  case ALLREDUCE: MPI_Allreduce(sb, rb, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
  case ALLGATHER: MPI_Allgather(sb, per, MPI_FLOAT, rb, per, MPI_FLOAT, MPI_COMM_WORLD); break;
  case REDUCE_SCATTER: MPI_Reduce_scatter_block(sb, rb, per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
  case BCAST: MPI_Bcast(sb, count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
  case ALLTOALL: MPI_Alltoall(sb, per, MPI_FLOAT, rb, per, MPI_FLOAT, MPI_COMM_WORLD); break;
  }
}

/* Fill inputs with rank-dependent values, run once, check a few elements of
 * every block. Returns 1 when this rank's result is right. */
static int check_op(int op, size_t bytes, float *sb, float *rb, int rank, int n) {
  size_t count = bytes / sizeof(float), per = count / (size_t)n;
  for (size_t i = 0; i < count; i++) {
    switch (op) {
    case ALLREDUCE: case REDUCE_SCATTER: sb[i] = (float)(rank + 1); break;
    case ALLGATHER: sb[i] = (float)rank; break;
    case BCAST: sb[i] = rank == 0 ? 7.0f : -1.0f; break;
    case ALLTOALL: sb[i] = (float)(rank * 1000 + (int)(i / per)); break;
    }
  }
  run_op(op, bytes, sb, rb, n);
  float sum = (float)(n * (n + 1) / 2);
  int ok = 1;
  for (int b = 0; b < n; b++) {
    size_t idx[3] = {b * per, b * per + per / 2, b * per + per - 1};
    for (int k = 0; k < 3; k++) {
      size_t i = idx[k];
      switch (op) {
      case ALLREDUCE: ok &= rb[i] == sum; break;
      case REDUCE_SCATTER: if (i < per) ok &= rb[i] == sum; break;
      case ALLGATHER: ok &= rb[i] == (float)b; break;
      case BCAST: ok &= sb[i] == 7.0f; break;
      case ALLTOALL: ok &= rb[i] == (float)(b * 1000 + rank); break;
      }
    }
  }
  return ok;
}

static double slowest(double x) {
  double m;
  MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

static int do_coll(size_t minb, size_t maxb, int rank, int n) {
  float *sb = xalloc(maxb), *rb = xalloc(maxb);
  int all_ok = 1;
  const char *only = getenv("OPS"); /* optional comma list of op names */
  for (int op = 0; op < NOPS; op++) {
    if (only && *only && !strstr(only, op_name[op])) continue;
    for (size_t bytes = minb; bytes <= maxb; bytes *= 4) {
      int ok = check_op(op, bytes, sb, rb, rank, n), ok_all;
      MPI_Allreduce(&ok, &ok_all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
      all_ok &= ok_all;
      for (int w = 0; w < 2; w++) run_op(op, bytes, sb, rb, n);
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now();
      run_op(op, bytes, sb, rb, n);
      double one = slowest(now() - t0);
      int iters = (int)(TARGET_S / (one > 1e-9 ? one : 1e-9));
      if (iters < MIN_ITERS) iters = MIN_ITERS;
      if (iters > MAX_ITERS) iters = MAX_ITERS;
      double per_op[MAX_TRIALS];
      for (int t = 0; t < TRIALS; t++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double s = now();
        for (int i = 0; i < iters; i++) run_op(op, bytes, sb, rb, n);
        per_op[t] = slowest((now() - s) / iters);
      }
      double lo = per_op[0], hi = per_op[0];
      for (int t = 1; t < TRIALS; t++) { if (per_op[t] < lo) lo = per_op[t]; if (per_op[t] > hi) hi = per_op[t]; }
      double med = median(per_op, TRIALS);
      double alg = bytes / med / 1e9;
      if (rank == 0)
        printf("ROW op=%s np=%d bytes=%zu iters=%d trials=%d us=%.2f us_min=%.2f us_max=%.2f "
               "algbw=%.4f busbw=%.4f ok=%d\n",
               op_name[op], n, bytes, iters, TRIALS, med * 1e6, lo * 1e6, hi * 1e6, alg,
               alg * bus_factor(op, n), ok_all);
      fflush(stdout);
    }
  }
  free(sb); free(rb);
  return all_ok ? 0 : 3;
}

/* ------------------------------------------------------------ windows */

static int do_win(int nsizes, char **sizes, int rank, int n) {
  enum { WARM = 2, MAX_REPS = 21 };
  for (int s = 0; s < nsizes; s++) {
    size_t bytes = strtoull(sizes[s], NULL, 0);
    int REPS = bytes >= ((size_t)16 << 20) ? 7 : MAX_REPS; /* big windows can take ~0.5 s each */
    double ta[MAX_REPS], tf[MAX_REPS], tt[MAX_REPS];
    for (int r = 0; r < WARM + REPS; r++) {
      void *base = NULL;
      MPI_Win win;
      /* alloc, then free, each timed as the slowest rank */
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now();
      MPI_Win_allocate((MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
      double a = slowest(now() - t0);
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = now();
      MPI_Win_free(&win);
      double f = slowest(now() - t0);
      /* alloc + first touch of every page + free, as one figure */
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = now();
      MPI_Win_allocate((MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
      memset(base, rank + 1, bytes);
      MPI_Win_free(&win);
      double t = slowest(now() - t0);
      if (r >= WARM) { ta[r - WARM] = a; tf[r - WARM] = f; tt[r - WARM] = t; }
    }
    double ma = median(ta, REPS), mf = median(tf, REPS), mt = median(tt, REPS);
    if (rank == 0)
      printf("WIN np=%d bytes=%zu reps=%d alloc_us=%.1f free_us=%.1f alloc_free_us=%.1f "
             "alloc_touch_free_us=%.1f\n", n, bytes, REPS, ma * 1e6, mf * 1e6, (ma + mf) * 1e6,
             mt * 1e6);
    fflush(stdout);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s memcpy [bytes] | coll [minB maxB] | win bytes...\n", argv[0]);
    return 1;
  }
  if (strcmp(argv[1], "memcpy") == 0)
    return do_memcpy(argc > 2 ? strtoull(argv[2], NULL, 0) : (size_t)64 << 20);

  read_env();
  MPI_Init(&argc, &argv);
  int rank, n, rc = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (strcmp(argv[1], "coll") == 0) {
    size_t minb = argc > 2 ? strtoull(argv[2], NULL, 0) : (size_t)4 << 10;
    size_t maxb = argc > 3 ? strtoull(argv[3], NULL, 0) : (size_t)64 << 20;
    rc = do_coll(minb, maxb, rank, n);
  } else if (strcmp(argv[1], "win") == 0) {
    rc = do_win(argc - 2, argv + 2, rank, n);
  } else {
    if (rank == 0) fprintf(stderr, "unknown mode %s\n", argv[1]);
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
