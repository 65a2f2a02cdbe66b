/* bench_gemm: titans_gemm GFLOP/s beside the scalar reference, the machine's measured FMA peak and
   OpenBLAS (loaded at run time, if installed, so nothing is needed to build).
   Usage: bench_gemm [--quick] [--full]
     default  M in {1,16,64,256,1024}, (N, K) in 8 pairs from {64,256,512,2048}, layouts NN NT TN
     --full   all 16 (N, K) pairs;  --quick  only N == K
   Each figure is the median over short timed samples (about 0.5 ms of back-to-back calls each, 7 to 41
   of them), with the interquartile range beside it: on a shared machine a descheduled thread stalls a
   2-thread call for milliseconds, which spoils a few samples rather than the figure. titans and OpenBLAS
   are timed shape by shape, one after the other, so that both see the same load; with 2 threads a pause
   follows each, so that one library's spinning worker threads do not steal the core the other is timed on.
   The reference is timed (3 single calls) only on shapes of at most 3e7 flops: it is slow. */
#define _POSIX_C_SOURCE 200809L
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "bench_common.h"
#include "../tests/reference_kernels.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIN_SAMPLES 7
#define MAX_SAMPLES 41
#define SAMPLE_SEC 0.0005 /* one sample: about this long */
#define MEASURE_SEC 0.12  /* one shape, one library, one thread count */

static void pause_sec(double s) {
  struct timespec ts;
  ts.tv_sec = (time_t)s;
  ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
  nanosleep(&ts, NULL);
}

/* ---- OpenBLAS at run time --------------------------------------------------------------------- */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                         int);
typedef void (*setthreads_fn)(int);
static sgemm_fn ob_sgemm;
static setthreads_fn ob_set_threads;

static void load_openblas(void) {
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 0); /* its AVX-512 kernels; it may not recognise newer CPUs */
  void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("OpenBLAS: not found (%s).\n  To compare: apt-get install libopenblas-dev (the bench loads "
           "libopenblas.so.0 at run time; OPENBLAS_CORETYPE=SkylakeX is set unless already set).\n",
           dlerror());
    return;
  }
  void *f = dlsym(h, "cblas_sgemm"), *t = dlsym(h, "openblas_set_num_threads");
  if (!f) {
    printf("OpenBLAS: cblas_sgemm missing\n");
    return;
  }
  memcpy(&ob_sgemm, &f, sizeof f); /* object to function pointer without a cast ISO C frowns on */
  if (t) memcpy(&ob_set_threads, &t, sizeof t);
  const char *ct = getenv("OPENBLAS_CORETYPE");
  printf("OpenBLAS: loaded, OPENBLAS_CORETYPE=%s\n", ct);
  if (strcmp(ct, "SkylakeX") != 0)
    printf("  note: OPENBLAS_CORETYPE came from the environment; OpenBLAS's AVX-512 kernels need SkylakeX "
           "(run with OPENBLAS_CORETYPE=SkylakeX to compare against them)\n");
}

/* ---- timing ----------------------------------------------------------------------------------- */
typedef struct shape {
  int ta, tb;
  size_t m, n, k;
} shape;

enum { LIB_TITANS, LIB_OPENBLAS, LIB_REF };

static float *A, *B, *C;

static void call(int lib, const shape *s) {
  size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
  if (lib == LIB_TITANS) titans_gemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, titans_cm(A, lda), titans_cm(B, ldb), 0.0f,
                                     titans_m(C, s->n));
  else if (lib == LIB_REF) titans_gemm_ref(s->ta, s->tb, s->m, s->n, s->k, 1.0f, titans_cm(A, lda), titans_cm(B, ldb),
                                           0.0f, titans_m(C, s->n));
  else
    ob_sgemm(101, s->ta ? 112 : 111, s->tb ? 112 : 111, (int)s->m, (int)s->n, (int)s->k, 1.0f, A, (int)lda, B,
             (int)ldb, 0.0f, C, (int)s->n);
}

typedef struct result {
  double med, lo, hi; /* GFLOP/s: median and interquartile range over the samples; 0 when not measured */
} result;

/* Short samples (about SAMPLE_SEC of back-to-back calls, or one call when a call is longer), as many as
   fit in MEASURE_SEC (at least MIN_SAMPLES): a descheduled thread then spoils a few samples, not all. */
static result measure(int lib, const shape *s) {
  double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k, g[MAX_SAMPLES];
  call(lib, s); /* warm up: caches, pages, thread pool */
  double t0 = now_sec();
  call(lib, s);
  double one = now_sec() - t0;
  if (one < 1e-8) one = 1e-8;
  long reps = one >= SAMPLE_SEC ? 1 : (long)(SAMPLE_SEC / one) + 1;
  int samples = (int)(MEASURE_SEC / (one * (double)reps));
  if (samples < MIN_SAMPLES) samples = MIN_SAMPLES;
  if (samples > MAX_SAMPLES) samples = MAX_SAMPLES;
  if (lib == LIB_REF) { reps = 1; samples = 3; }
  for (int i = 0; i < samples; i++) {
    t0 = now_sec();
    for (long r = 0; r < reps; r++) call(lib, s);
    g[i] = flops * (double)reps / (now_sec() - t0) * 1e-9;
  }
  qsort(g, (size_t)samples, sizeof(double), cmp_double);
  result res = {g[samples / 2], g[samples / 4], g[(3 * samples) / 4]};
  return res;
}

/* Fast result against the reference on a few rows (the reference on all of a large shape is slow):
   rows 0..3 and the last, tolerance as in tests/test_gemm.c. Returns the largest diff / bound. */
static double check(const shape *s) {
  size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
  titans_gemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, titans_cm(A, lda), titans_cm(B, ldb), 0.0f, titans_m(C, s->n));
  float *r = titans_alloc_floats(s->n);
  double worst = 0.0;
  for (size_t i = 0; i < s->m; i++) {
    if (i >= 4 && i + 1 != s->m) continue;
    const float *ai = s->ta ? A + i : A + i * lda;
    titans_gemm_ref(s->ta, s->tb, 1, s->n, s->k, 1.0f, titans_cm(ai, lda), titans_cm(B, ldb), 0.0f, titans_m(r, s->n));
    for (size_t j = 0; j < s->n; j++) {
      double sum = 0.0;
      for (size_t p = 0; p < s->k; p++) {
        double av = s->ta ? A[p * lda + i] : A[i * lda + p], bv = s->tb ? B[j * ldb + p] : B[p * ldb + j];
        sum += fabs(av * bv);
      }
      double bound = (2.0 * (double)s->k + 4.0) / 16777216.0 * sum + 1e-30;
      double d = fabs((double)C[i * s->n + j] - (double)r[j]) / bound;
      if (!(d <= worst)) worst = d; /* NaN makes worst NaN */
    }
  }
  titans_free(r);
  return worst;
}

int main(int argc, char **argv) {
  int quick = 0, full = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--full")) full = 1;
  }
  static const size_t ms[] = {1, 16, 64, 256, 1024}, nks[] = {64, 256, 512, 2048};
  static const size_t pairs8[][2] = {{64, 64}, {256, 256}, {512, 512}, {2048, 2048},
                                     {64, 2048}, {2048, 64}, {256, 2048}, {2048, 512}};
  size_t npairs = 0, pairs[16][2];
  for (size_t i = 0; i < 4; i++)
    for (size_t j = 0; j < 4; j++)
      if (full || (quick && i == j)) { pairs[npairs][0] = nks[i]; pairs[npairs][1] = nks[j]; npairs++; }
  if (!full && !quick)
    for (size_t i = 0; i < 8; i++) { pairs[npairs][0] = pairs8[i][0]; pairs[npairs][1] = pairs8[i][1]; npairs++; }

  const char *simd =
#if defined(TITANS__AVX512)
      "AVX-512";
#elif defined(TITANS__AVX2)
      "AVX2+FMA";
#elif defined(TITANS__NEON)
      "NEON";
#else
      "scalar";
#endif
  int maxt = titans_threads();
  printf("bench_gemm: titans_gemm (%s, micro-tile %dx%d, KC %d, NC %d), %d threads available\n", simd,
         TITANS__GEMM_MR, TITANS__GEMM_NR, TITANS__GEMM_KC, TITANS__GEMM_NC, maxt);
  double peak1 = fma_peak(1), peak2 = maxt >= 2 ? fma_peak(2) : 0.0;
  printf("FMA peak (measured: independent FMA chains, per-thread CPU time): %.1f GFLOP/s on 1 thread, %.1f on 2\n",
         peak1, peak2);
  load_openblas();

  size_t nshapes = 3 * (sizeof(ms) / sizeof(ms[0])) * npairs;
  shape *sh = (shape *)malloc(nshapes * sizeof(shape));
  result *res = (result *)calloc(nshapes * 5, sizeof(result)); /* [shape][titans1, ob1, titans2, ob2, ref] */
  size_t ns = 0;
  for (int l = 0; l < 3; l++)
    for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++)
      for (size_t p = 0; p < npairs; p++) {
        shape s = {l == 2, l == 1, ms[mi], pairs[p][0], pairs[p][1]};
        sh[ns++] = s;
      }
  A = titans_alloc_floats(1024 * 2048);
  B = titans_alloc_floats(2048 * 2048);
  C = titans_alloc_floats(1024 * 2048);
  titans_rng rng;
  titans_rng_seed(&rng, 1);
  for (size_t i = 0; i < 1024 * 2048; i++) A[i] = titans_rng_uniform(&rng) - 0.5f;
  for (size_t i = 0; i < 2048 * 2048; i++) B[i] = titans_rng_uniform(&rng) - 0.5f;

  double worst = 0.0;
  for (size_t i = 0; i < ns; i++) {
    double w = check(&sh[i]);
    if (!(w <= worst)) worst = w;
  }
  printf("check before timing: fast vs reference on rows 0-3 and the last of every shape: max diff/bound %.3g "
         "(%s)\n", worst, worst <= 1.0 ? "ok" : "FAILED");
  if (!(worst <= 1.0)) return 1;

  double t_start = now_sec();
  printf("load average before timing: %.2f on %d hardware threads (other processes make the figures noisy, "
         "2-thread ones most)\n", load_average(), maxt);
  for (int threads = 1; threads <= 2 && threads <= maxt; threads++) {
    set_threads(threads);
    if (ob_set_threads) ob_set_threads(threads);
    for (size_t i = 0; i < ns; i++) { /* the two libraries shape by shape: both see the same load */
      res[i * 5 + 2 * (threads - 1)] = measure(LIB_TITANS, &sh[i]);
      if (!ob_sgemm) continue;
      if (threads > 1) pause_sec(0.05); /* let titans' worker go to sleep */
      res[i * 5 + 2 * (threads - 1) + 1] = measure(LIB_OPENBLAS, &sh[i]);
      if (threads > 1) pause_sec(0.1); /* OpenBLAS's workers keep spinning a while after a call */
    }
  }
  set_threads(1);
  for (size_t i = 0; i < ns; i++) /* the reference, single-threaded: only where it is quick */
    if (2.0 * (double)sh[i].m * (double)sh[i].n * (double)sh[i].k <= 3e7) res[i * 5 + 4] = measure(LIB_REF, &sh[i]);
  set_threads(maxt);

  printf("\nGFLOP/s: median [interquartile range] of %d-%d samples of ~%.1f ms; %%pk = fraction of the measured FMA "
         "peak; x OB = titans / OpenBLAS (medians)\n", MIN_SAMPLES, MAX_SAMPLES, SAMPLE_SEC * 1e3);
  printf("%-3s %5s %5s %5s | %-21s %4s %7s %6s | %-21s %4s %7s %6s | %6s\n", "", "M", "N", "K", "titans 1 thread",
         "%pk", "OpenBLAS", "x OB", "titans 2 threads", "%pk", "OpenBLAS", "x OB", "ref");
  const char *names[3] = {"NN", "NT", "TN"};
  double lsum[2][2] = {{0, 0}, {0, 0}}; /* log-ratio sums [small M | M >= 64][threads] */
  int lcnt[2][2] = {{0, 0}, {0, 0}}, met[2][2] = {{0, 0}, {0, 0}};
  for (size_t i = 0; i < ns; i++) {
    const shape *s = &sh[i];
    const result *r = &res[i * 5];
    char col[2][64];
    for (int t = 0; t < 2; t++) {
      const result *rt = &r[2 * t], *ro = &r[2 * t + 1];
      double pk = t ? peak2 : peak1;
      if (rt->med <= 0.0) { snprintf(col[t], sizeof col[t], "%-21s %4s %7s %6s", "-", "", "", ""); continue; }
      char ob[16] = "-", ratio[16] = "";
      if (ro->med > 0.0) {
        double q = rt->med / ro->med;
        int cls = s->m >= 64 ? 1 : 0;
        snprintf(ob, sizeof ob, "%.1f", ro->med);
        snprintf(ratio, sizeof ratio, "%.2f", q);
        if (s->m <= 16 || s->m >= 64) {
          lsum[cls][t] += log(q);
          lcnt[cls][t]++;
          met[cls][t] += q >= (cls ? 0.9 : 1.0);
        }
      }
      char g[32];
      snprintf(g, sizeof g, "%.1f [%.1f-%.1f]", rt->med, rt->lo, rt->hi);
      snprintf(col[t], sizeof col[t], "%-21s %3.0f%% %7s %6s", g, 100.0 * rt->med / pk, ob, ratio);
    }
    char ref[16] = "-";
    if (r[4].med > 0.0) snprintf(ref, sizeof ref, "%.2f", r[4].med);
    printf("%-3s %5zu %5zu %5zu | %s | %s | %6s\n", names[s->ta ? 2 : s->tb ? 1 : 0], s->m, s->n, s->k, col[0], col[1],
           ref);
    if (i + 1 < ns && sh[i + 1].m != s->m) printf("\n");
  }
  if (ob_sgemm) {
    printf("\ntitans / OpenBLAS, geometric mean of the medians (shapes meeting the goal / shapes):\n");
    for (int cls = 0; cls < 2; cls++)
      for (int t = 0; t < 2; t++)
        if (lcnt[cls][t])
          printf("  %s, %d thread%s: %.2fx  (%d/%d at >= %.1fx)\n", cls ? "M >= 64" : "M <= 16", t + 1, t ? "s" : " ",
                 exp(lsum[cls][t] / lcnt[cls][t]), met[cls][t], lcnt[cls][t], cls ? 0.9 : 1.0);
  }
  double load = load_average();
  printf("timing took %.0f s; load average after: %.2f\n", now_sec() - t_start, load);
  if (maxt >= 2 && load > 0.5 * maxt && !getenv("OMP_WAIT_POLICY"))
    printf("note: the machine is busy. With OpenMP's default wait policy a 2-thread call whose second thread "
           "the OS runs late\n  stalls for milliseconds (the master spins, so its core never frees up); "
           "OMP_WAIT_POLICY=passive avoids most of it.\n");
  titans_free(A);
  titans_free(B);
  titans_free(C);
  free(sh);
  free(res);
  return 0;
}
