/* bench_common.h: what the benchmarks share: clocks, the machine's FMA peak measured in the same run,
   the load average, medians. Included after titans.h (it uses the header's SIMD layer); needs
   _POSIX_C_SOURCE >= 199309L for the clocks. Everything is static inline: a bench uses what it needs. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the calling thread: the FMA peak is the core's, whatever else runs on the machine. */
static inline double thread_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void set_threads(int t) {
#ifdef _OPENMP
  omp_set_num_threads(t);
#else
  (void)t;
#endif
}

/* ---- FMA peak: independent FMA chains, enough of them to hide the latency --------------------- */

/* BENCH_CHAINS independent chains acc = acc * a + c in the header's vector width, iters steps each,
   from distinct starting values (or the compiler merges the chains into one); the fixed point
   c / (1 - a) = 1, so nothing overflows or becomes subnormal. Returns a sum that must be used. */
#define BENCH_CHAINS 16
static inline float fma_chains(long iters) {
  titans__vf acc[BENCH_CHAINS], va = titans__vset1(0.9999f), vc = titans__vset1(1e-4f);
  TITANS__GEMM_UNROLL /* the chains in registers at -O2 too (GCC unrolls loops like this one at -O3 only) */
  for (int j = 0; j < BENCH_CHAINS; j++) acc[j] = titans__vset1((float)j * 0.01f);
  for (long i = 0; i < iters; i++)
    TITANS__GEMM_UNROLL
    for (int j = 0; j < BENCH_CHAINS; j++) acc[j] = titans__vfma(acc[j], va, vc);
  titans__vf s = acc[0];
  for (int j = 1; j < BENCH_CHAINS; j++) s = titans__vadd(s, acc[j]);
  return titans__vsum(s);
}

/* GFLOP/s of the calling thread by its CPU time: the core's peak, whatever else runs on the machine. */
static inline double fma_peak_once(void) {
  const long iters = 16000000 / TITANS__VW;
  double t0 = thread_sec();
  volatile float sink = fma_chains(iters);
  double t = thread_sec() - t0;
  (void)sink;
  return 2.0 * BENCH_CHAINS * TITANS__VW * (double)iters / t * 1e-9;
}

/* Peak GFLOP/s of nt threads together (best of 5). */
static inline double fma_peak(int nt) {
  double best = 0.0;
  for (int r = 0; r < 5; r++) {
    double total = 0.0;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) reduction(+ : total)
    total += fma_peak_once();
#else
    (void)nt;
    total = fma_peak_once();
#endif
    if (total > best) best = total;
  }
  return best;
}

/* Wall-clock variant for the memory bench, whose 2-thread fractions are of what two threads really get
   together: the best of 7 timed blocks of fma_chains on nth threads. */
static inline double fma_peak_wall(int nth) {
  const long iters = 2000000;
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int trial = 0; trial < 7; trial++) {
    float got = 0.0f;
    double t0 = now_sec();
#ifdef _OPENMP
#pragma omp parallel num_threads(nth) reduction(+ : got)
#endif
    got += fma_chains(iters);
    double t = now_sec() - t0;
    sink += got;
    double flops = 2.0 * (double)iters * BENCH_CHAINS * TITANS__VW * nth;
    if (flops / t > best) best = flops / t;
  }
  (void)sink;
  return best * 1e-9;
}

/* GB/s of one thread reading a buffer of `bytes` again and again, by its CPU time (the best of 5 blocks
   of at least 20 ms): the bandwidth of whichever cache level (or memory) holds a working set that size,
   which bounds a step that reads that many bytes per call. 0 when the buffer cannot be allocated. */
static inline double read_bandwidth(size_t bytes) {
  const size_t U = 4 * TITANS__VW; /* floats per iteration: four independent sums hide the add latency */
  size_t n = (bytes / sizeof(float) + U - 1) / U * U;
  float *buf = titans_alloc_floats(n); /* [n] small values: the sums stay finite */
  if (!buf) return 0.0;
  for (size_t i = 0; i < n; i++) buf[i] = (float)(i % 7) * 1e-3f;
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int r = 0; r < 5; r++) {
    titans__vf a0 = titans__vset1(0.0f), a1 = a0, a2 = a0, a3 = a0;
    double t0 = thread_sec(), t = 0.0;
    long passes = 0;
    do {
      for (size_t i = 0; i < n; i += U) {
        a0 = titans__vadd(a0, titans__vload(buf + i));
        a1 = titans__vadd(a1, titans__vload(buf + i + TITANS__VW));
        a2 = titans__vadd(a2, titans__vload(buf + i + 2 * TITANS__VW));
        a3 = titans__vadd(a3, titans__vload(buf + i + 3 * TITANS__VW));
      }
      passes++;
      t = thread_sec() - t0;
    } while (t < 0.02);
    sink += titans__vsum(titans__vadd(titans__vadd(a0, a1), titans__vadd(a2, a3)));
    double gbs = (double)passes * (double)n * sizeof(float) / t * 1e-9;
    if (gbs > best) best = gbs;
  }
  (void)sink;
  titans_free(buf);
  return best;
}

/* The header's vector width in floats and its name. */
static inline int vector_width(void) { return TITANS__VW; }
static inline const char *vector_name(void) {
  return TITANS__VW == 16 ? "AVX-512" : TITANS__VW == 8 ? "AVX2" : TITANS__VW == 4 ? "NEON" : "scalar";
}

/* The 1-minute load average, or -1: other processes on the cores make the figures noisy. */
static inline double load_average(void) {
  double l = -1.0;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = -1.0;
    fclose(f);
  }
  return l;
}

/* What starting an empty parallel region of nth threads costs, in microseconds, when ~50 us of serial
   work precede it (as between a model's parallel regions: long enough for a thread under
   OMP_WAIT_POLICY=passive to sleep, short against the default policy's spinning); 0 without OpenMP or
   with one thread. */
static inline double omp_region_cost_us(int nth) {
#ifdef _OPENMP
  const int regions = 2000;
  const double gap = 50e-6;
  if (nth < 2) return 0.0;
  double t0 = now_sec();
  for (int r = 0; r < regions; r++) {
#pragma omp parallel num_threads(nth)
    {
      __asm__ __volatile__("" ::: "memory"); /* an empty body the compiler keeps */
    }
    double until = now_sec() + gap;
    while (now_sec() < until) {
    }
  }
  return ((now_sec() - t0) / regions - gap) * 1e6;
#else
  (void)nth;
  return 0.0;
#endif
}

static inline int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* The median of n values (sorts them). */
static inline double median(double *v, size_t n) {
  qsort(v, n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
