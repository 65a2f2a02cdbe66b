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
static inline double fma_peak_once(void) {
  titans__vf x = titans__vset1(0.999f), y = titans__vset1(1e-4f);
  /* distinct starting values, or the compiler merges the chains into one */
  titans__vf s0 = titans__vset1(0.1f), s1 = titans__vset1(0.2f), s2 = titans__vset1(0.3f), s3 = titans__vset1(0.4f);
  titans__vf s4 = titans__vset1(0.5f), s5 = titans__vset1(0.6f), s6 = titans__vset1(0.7f), s7 = titans__vset1(0.8f);
  titans__vf s8 = titans__vset1(0.9f), s9 = titans__vset1(1.1f), s10 = titans__vset1(1.2f), s11 = titans__vset1(1.3f);
  const long iters = 20000000 / TITANS__VW;
  double t0 = thread_sec();
  for (long i = 0; i < iters; i++) {
    s0 = titans__vfma(s0, x, y); s1 = titans__vfma(s1, x, y); s2 = titans__vfma(s2, x, y);
    s3 = titans__vfma(s3, x, y); s4 = titans__vfma(s4, x, y); s5 = titans__vfma(s5, x, y);
    s6 = titans__vfma(s6, x, y); s7 = titans__vfma(s7, x, y); s8 = titans__vfma(s8, x, y);
    s9 = titans__vfma(s9, x, y); s10 = titans__vfma(s10, x, y); s11 = titans__vfma(s11, x, y);
  }
  double t = thread_sec() - t0;
  titans__vf s = titans__vadd(titans__vadd(titans__vadd(s0, s1), titans__vadd(s2, s3)),
                              titans__vadd(titans__vadd(s4, s5), titans__vadd(s6, s7)));
  s = titans__vadd(s, titans__vadd(titans__vadd(s8, s9), titans__vadd(s10, s11)));
  volatile float sink = titans__vsum(s);
  (void)sink;
  return 12.0 * 2.0 * TITANS__VW * (double)iters / t * 1e-9;
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
   together: each thread runs BENCH_CHAINS independent chains acc = acc * a + c (the fixed point
   c / (1 - a) = 1, so nothing overflows or becomes subnormal); the best of 7 timed blocks on nth threads. */
#define BENCH_CHAINS 16
static inline float fma_chains(long iters) {
  titans__vf acc[BENCH_CHAINS], va = titans__vset1(0.9999f), vc = titans__vset1(1e-4f);
  for (int j = 0; j < BENCH_CHAINS; j++) acc[j] = titans__vset1((float)j * 0.01f);
  for (long i = 0; i < iters; i++)
    for (int j = 0; j < BENCH_CHAINS; j++) acc[j] = titans__vfma(acc[j], va, vc);
  titans__vf s = acc[0];
  for (int j = 1; j < BENCH_CHAINS; j++) s = titans__vadd(s, acc[j]);
  return titans__vsum(s);
}

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
