/* bench_common.h: what the benchmarks share: clocks, the machine's FMA peak measured in the same run,
   the load average, medians. Included after titans.h (it uses the header's SIMD layer); needs
   _POSIX_C_SOURCE >= 199309L for the clocks. Everything is static inline: a bench uses what it needs. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* ---- what a generated token reads (issue 38's roofline) ------------------------------------------
   Every weight the token uses once (the embedding table's one row, or all of it when the head is tied to
   it; not the parameters read only at a reset: persistent tokens, LM2's initial bank, the memory's w0),
   which a session batch's streams share; and the stream's own state: each memory layer's W and S once
   (MAC's retrieval also reads its committed W), LM2's bank, the key and value rows its attention sees. */
typedef struct token_traffic {
  double shared_floats; /* weights: read once a call of a session batch, whatever its streams */
  double stream_floats; /* one stream's memory state, bank and KV rows: read for each stream's token */
  double attn_mflop;    /* the attention's 4 d a visible row (titans_gemm does not count it) */
} token_traffic;

/* The kinds with a neural memory (theta_max applies); LM2's bank is not one. */
static inline int has_neural_memory(int kind) {
  return kind == TITANS_BLOCK_MAC || kind == TITANS_BLOCK_MAG || kind == TITANS_BLOCK_MAL || kind == TITANS_BLOCK_LMM;
}

/* Floats of one memory head's weights: sum over its layers of n_{l+1} n_l. */
static inline double mem_head_floats(const titans_mem_config *m) {
  double dh = m->head_dim, hid = (double)m->hidden_mult * dh;
  return m->depth == 1 ? dh * dh : 2.0 * dh * hid + (double)(m->depth - 2) * hid * hid;
}

/* Key rows a token at stream position t (from 0) attends to in one layer; 0 without attention. */
static inline double kv_rows_seen(const titans_config *c, size_t t) {
  double P = c->n_persist, seen = (double)t + 1.0, win = c->window;
  switch (c->block) {
  case TITANS_BLOCK_ATTN: return P + seen;
  case TITANS_BLOCK_SWA:
  case TITANS_BLOCK_MAG:
  case TITANS_BLOCK_MAL:
  case TITANS_BLOCK_LM2: return P + (seen < win ? seen : win);
  case TITANS_BLOCK_MAC: return P + 2.0 * (double)(t % (size_t)c->segment + 1); /* Hm_j and X_j, j <= i */
  default: return 0.0;
  }
}

/* A token's traffic, averaged over a stream of n tokens from position 0. */
static inline token_traffic token_traffic_of(const titans_model *m, size_t n) {
  const titans_config *c = &m->cfg;
  const int k = c->block;
  double d = c->d, rows = 0.0;
  token_traffic tt = {0.0, 0.0, 0.0};
  for (size_t i = 0; i < m->n_params; i++) {
    const titans_param *p = &m->plist[i];
    if (strstr(p->name, "tok_emb")) tt.shared_floats += c->tied ? (double)p->size : d;
    else if (p->kind != TITANS_PARAM_TOKENS && !strstr(p->name, ".w0.")) tt.shared_floats += (double)p->size;
  }
  if (has_neural_memory(k))
    tt.stream_floats += c->n_layers * (k == TITANS_BLOCK_MAC ? 3.0 : 2.0) * c->mem.heads * mem_head_floats(&c->mem);
  if (k == TITANS_BLOCK_LM2) tt.stream_floats += c->n_layers * (double)c->lm2_slots * (2.0 * d + 2.0);
  for (size_t t = 0; t < n; t++) rows += kv_rows_seen(c, t);
  rows /= (double)n;
  tt.stream_floats += c->n_layers * rows * 2.0 * d; /* a key and a value row of d floats each */
  tt.attn_mflop = c->n_layers * rows * 4.0 * d / 1e6;
  return tt;
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
