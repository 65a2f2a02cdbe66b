/* test_gemm: the fast titans_gemm against the scalar titans_gemm_ref over many shapes, the four
   layouts, alpha/beta combinations, leading dimensions larger than the widths (padding must stay
   untouched and is never read), beta == 0 over a NaN-filled C, and bit-identical results for 1 and 2
   threads; the multiply-add counter of TITANS_COUNT_FLOPS (bench_model's flops); and, where the
   system has mmap, that no method reads a float outside its operands (each one placed against an
   unmapped page). */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS and sigsetjmp under -std=c11 */
#define TITANS_IMPLEMENTATION
#define TITANS_COUNT_FLOPS
#include "titans.h"
#include "tests/harness.h"
#include "tests/reference_kernels.h"

/* Tolerance. Both results are float sums of the same k products in different orders (the fast path
   uses FMA, blocks k and reduces vector lanes by a tree), so each is within gamma_k * sum_p |a||b| of
   the exact value (gamma_k ~ k * 2^-24, the classic bound for recursive summation; blocked and tree
   orders are tighter). Their difference is therefore within 2 * gamma_k times the absolute sum, plus
   a few roundings for alpha and beta. Checking |fast - ref| <= (2k + 4) * 2^-24 * (|alpha| sum_p |a||b|
   + |beta||c|) is rigorous and still catches a missing or doubled term, which would be a whole
   |a_ip b_pj| off. We print the largest ratio diff / bound (1 = at the bound). */
static double bound_ratio(const float *fast, const float *ref, const float *c0, size_t ldc, int ta, int tb, size_t m,
                          size_t n, size_t k, float alpha, const float *a, size_t lda, const float *b, size_t ldb,
                          float beta, double *maxdiff) {
  double worst = 0.0;
  const double u = 1.0 / 16777216.0;
  for (size_t i = 0; i < m; i++) {
    for (size_t j = 0; j < n; j++) {
      double s = 0.0;
      for (size_t p = 0; p < k; p++) {
        double av = ta ? a[p * lda + i] : a[i * lda + p];
        double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        s += fabs(av * bv);
      }
      double scale = fabs((double)alpha) * s + (beta != 0.0f ? fabs((double)beta * c0[i * ldc + j]) : 0.0);
      double bound = (2.0 * (double)k + 4.0) * u * scale + 1e-30;
      double d = fabs((double)fast[i * ldc + j] - (double)ref[i * ldc + j]);
      if (d != d) return INFINITY;
      if (d > *maxdiff) *maxdiff = d;
      if (d / bound > worst) worst = d / bound;
    }
  }
  return worst;
}

static void fill(float *x, size_t n, titans_rng *rng) {
  for (size_t i = 0; i < n; i++) x[i] = 2.0f * titans_rng_uniform(rng) - 1.0f;
}

/* A [rows, ld] matrix whose columns >= width are padding set to pad (NaN for A and B: a read of the
   padding would poison a result). */
static float *matrix(size_t rows, size_t width, size_t ld, float pad, titans_rng *rng) {
  float *x = titans_alloc_floats(rows * ld + 1);
  for (size_t r = 0; r < rows; r++) {
    fill(x + r * ld, width, rng);
    for (size_t j = width; j < ld; j++) x[r * ld + j] = pad;
  }
  return x;
}

typedef struct stats {
  double ratio, diff;
  int pad_ok, finite_ok, calls;
} stats;

/* One comparison: C [m, ldc] filled (NaN when beta == 0), padding columns of C set to a sentinel. */
static void one(stats *st, int ta, int tb, size_t m, size_t n, size_t k, float alpha, float beta, size_t pad,
                titans_rng *rng) {
  size_t arows = ta ? k : m, awid = ta ? m : k, brows = tb ? n : k, bwid = tb ? k : n;
  size_t lda = awid + pad, ldb = bwid + (pad * 3) % 7, ldc = n + pad / 2 + 1;
  float *a = matrix(arows, awid, lda, NAN, rng), *b = matrix(brows, bwid, ldb, NAN, rng);
  float *c0 = matrix(m, n, ldc, 777.0f, rng); /* [m, ldc] */
  float *c1 = titans_alloc_floats(m * ldc + 1), *c2 = titans_alloc_floats(m * ldc + 1);
  if (beta == 0.0f)
    for (size_t i = 0; i < m; i++)
      for (size_t j = 0; j < n; j++) c0[i * ldc + j] = NAN;
  memcpy(c1, c0, (m * ldc + 1) * sizeof(float));
  memcpy(c2, c0, (m * ldc + 1) * sizeof(float));
  titans_gemm(ta, tb, m, n, k, alpha, titans_cm(a, lda), titans_cm(b, ldb), beta, titans_m(c1, ldc));
  titans_gemm_ref(ta, tb, m, n, k, alpha, titans_cm(a, lda), titans_cm(b, ldb), beta, titans_m(c2, ldc));
  double r = bound_ratio(c1, c2, c0, ldc, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, &st->diff);
  if (r > st->ratio) st->ratio = r;
  for (size_t i = 0; i < m; i++)
    for (size_t j = n; j < ldc; j++)
      if (c1[i * ldc + j] != 777.0f) st->pad_ok = 0;
  if (c1[m * ldc] != 0.0f) st->pad_ok = 0; /* the float after the last row */
  for (size_t i = 0; i < m; i++)
    if (!th_all_finite(c1 + i * ldc, n)) st->finite_ok = 0;
  st->calls++;
  titans_free(a);
  titans_free(b);
  titans_free(c0);
  titans_free(c1);
  titans_free(c2);
}

static const char *layout_name(int ta, int tb) { return ta ? (tb ? "TT" : "TN") : (tb ? "NT" : "NN"); }

static void report(const char *what, int ta, int tb, const stats *st) {
  th_check(st->ratio <= 1.0, "%s %s: %d calls, max |fast-ref| %.3g, max diff/bound %.3g (must be <= 1)", what,
           layout_name(ta, tb), st->calls, st->diff, st->ratio);
  th_check(st->pad_ok, "%s %s: padding of C (ldc > n) untouched", what, layout_name(ta, tb));
  th_check(st->finite_ok, "%s %s: results finite (beta == 0 ignores the NaN in C; NaN padding of A, B never read)",
           what, layout_name(ta, tb));
}

#include "tests/guard.h"

#ifdef TG_HAVE_GUARD_PAGES
typedef struct guarded_call {
  int ta, tb;
  size_t m, n, k;
  const float *a, *b;
  float *c;
} guarded_call;

static void guarded_call_run(void *arg) {
  const guarded_call *g = (const guarded_call *)arg;
  titans_gemm(g->ta, g->tb, g->m, g->n, g->k, 1.0f, titans_cm(g->a, g->ta ? g->m : g->k),
              titans_cm(g->b, g->tb ? g->k : g->n), 0.5f, titans_m(g->c, g->n));
}

/* titans_gemm on tight operands (ld = width), each against a guard page (tests/guard.h); returns the
   signal that stopped it, 0 if none, -1 if the pages could not be set up. */
static int guarded_gemm(int ta, int tb, size_t m, size_t n, size_t k, int after) {
  tg_block a, b, c;
  guarded_call g = {
      ta, tb, m, n, k, tg_alloc(&a, m * k, after), tg_alloc(&b, k * n, after), tg_alloc(&c, m * n, after)};
  int sig = g.a && g.b && g.c ? tg_run(guarded_call_run, &g) : -1;
  tg_free(&a);
  tg_free(&b);
  tg_free(&c);
  return sig;
}
#endif

static const float alphas[] = {1.0f, 0.5f, -1.5f, 1.0f, 2.0f, 0.0f};
static const float betas[] = {0.0f, 1.0f, 0.25f, -1.0f, 0.0f, 0.5f};

int main(void) {
  static const size_t dims[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 100, 129, 257};
  const size_t nd = sizeof(dims) / sizeof(dims[0]);
  titans_rng rng;
  titans_rng_seed(&rng, 42);
  printf("test_gemm: fast path vs titans_gemm_ref (bound: (2k+4) 2^-24 (|alpha| sum|a||b| + |beta c|))\n");

  for (int layout = 0; layout < 4; layout++) {
    int ta = layout >> 1, tb = layout & 1;
    stats st = {0.0, 0.0, 1, 1, 0};
    /* every triple of the small sizes (all edge tiles of every method), alpha/beta rotating */
    size_t combo = 0;
    for (size_t x = 0; x < 10; x++)
      for (size_t y = 0; y < 10; y++)
        for (size_t z = 0; z < 10; z++, combo++)
          one(&st, ta, tb, dims[x], dims[y], dims[z], alphas[combo % 6], betas[combo % 6], combo % 5, &rng);
    report("small sizes {0..33}^3", ta, tb, &st);

    /* a sample of triples over all sizes */
    stats sa = {0.0, 0.0, 1, 1, 0};
    for (int t = 0; t < 120; t++) {
      size_t m = dims[titans_rng_u64(&rng) % nd], n = dims[titans_rng_u64(&rng) % nd];
      size_t k = dims[titans_rng_u64(&rng) % nd];
      one(&sa, ta, tb, m, n, k, alphas[t % 6], betas[t % 6], (size_t)t % 9, &rng);
    }
    report("sampled sizes up to 257", ta, tb, &sa);

    /* larger shapes: several k slices, column blocks, threads; tiny m or n with long k (the dot method
       at m = 2, k >= 1024; the packed method at m = 12 with an op(B) of over 2M floats) */
    static const size_t big[][3] = {{300, 200, 500}, {257, 129, 600}, {16, 700, 300},  {1, 1000, 513},
                                    {5, 300, 1100},  {700, 16, 300},  {600, 9, 257},   {64, 520, 256},
                                    {2, 300, 1500},  {12, 2100, 1030}};
    stats sb = {0.0, 0.0, 1, 1, 0};
    for (size_t t = 0; t < sizeof(big) / sizeof(big[0]); t++)
      one(&sb, ta, tb, big[t][0], big[t][1], big[t][2], alphas[t % 6], betas[(t + 1) % 6], t % 3 * 7, &rng);
    /* 9 to 16 rows against rows of B 2 KiB apart or a multiple (with tb, the transposed dot's 8 rows a
       pass): k = 1024 and 512 in rows of k, k = 510 in rows of 512 (pad 3) */
    static const size_t aliased[][4] = {{16, 48, 1024, 0}, {9, 37, 512, 0}, {16, 33, 510, 3}};
    for (size_t t = 0; t < sizeof(aliased) / sizeof(aliased[0]); t++)
      one(&sb, ta, tb, aliased[t][0], aliased[t][1], aliased[t][2], alphas[t % 6], betas[t % 6], aliased[t][3], &rng);
    report("larger shapes", ta, tb, &sb);
  }

  /* k == 0 and alpha == 0: C = beta * C; m == 0 or n == 0 touches nothing (A and B may be NULL) */
  {
    float c[6] = {1, 2, 3, 4, 5, 6}, want[6] = {0.5f, 1, 1.5f, 2, 2.5f, 3};
    titans_gemm(0, 0, 2, 3, 0, 1.0f, titans_cm(NULL, 1), titans_cm(NULL, 3), 0.5f, titans_m(c, 3));
    th_close("k == 0: C = beta C (relative)", th_max_rel_diff(c, want, 6, 1.0), 0.0);
    titans_gemm(1, 1, 0, 3, 5, 1.0f, titans_cm(NULL, 1), titans_cm(NULL, 5), 0.5f, titans_m(c, 3));
    titans_gemm(0, 1, 2, 0, 5, 1.0f, titans_cm(NULL, 5), titans_cm(NULL, 5), 0.5f, titans_m(c, 3));
    th_close("m == 0 or n == 0: C untouched", th_max_abs_diff(c, want, 6), 0.0);
    float cn[4] = {NAN, NAN, NAN, NAN}, z[4] = {0, 0, 0, 0};
    titans_gemm(0, 0, 2, 2, 0, 1.0f, titans_cm(NULL, 1), titans_cm(NULL, 2), 0.0f, titans_m(cn, 2));
    th_close("k == 0, beta == 0 over NaN: C = 0", th_max_abs_diff(cn, z, 4), 0.0);
  }

  /* TITANS_COUNT_FLOPS: m n k per call that reads A and B, from any thread; nothing for k == 0, alpha == 0
     or an empty C */
  {
    float a[6 * 5], b[5 * 4], c[6 * 4];
    fill(a, 30, &rng);
    fill(b, 20, &rng);
    unsigned long long before = titans_gemm_madds();
    titans_gemm(0, 0, 6, 4, 5, 1.0f, titans_cm(a, 5), titans_cm(b, 4), 0.0f, titans_m(c, 4));
    /* op(A) = B^T [4 x 5], op(B) = A^T [5 x 6] */
    titans_gemm(1, 1, 4, 6, 5, 1.0f, titans_cm(b, 4), titans_cm(a, 5), 0.0f, titans_m(c, 6));
    titans_gemm(0, 0, 6, 4, 0, 1.0f, titans_cm(a, 5), titans_cm(b, 4), 0.5f, titans_m(c, 4));
    titans_gemm(0, 0, 6, 4, 5, 0.0f, titans_cm(a, 5), titans_cm(b, 4), 0.5f, titans_m(c, 4));
    titans_gemm(0, 0, 0, 4, 5, 1.0f, titans_cm(a, 5), titans_cm(b, 4), 0.0f, titans_m(c, 4));
    th_check(titans_gemm_madds() - before == 2 * 6 * 4 * 5,
             "the multiply-add counter adds m n k per product: %llu (want %d)", titans_gemm_madds() - before,
             2 * 6 * 4 * 5);
#ifdef _OPENMP
    before = titans_gemm_madds();
#pragma omp parallel for num_threads(2) schedule(static)
    for (int i = 0; i < 1000; i++) {
      float cl[6 * 4];
      titans_gemm(0, 0, 6, 4, 5, 1.0f, titans_cm(a, 5), titans_cm(b, 4), 0.0f, titans_m(cl, 4));
    }
    th_check(titans_gemm_madds() - before == 1000ULL * 120, "... from two threads at once: %llu (want %llu)",
             titans_gemm_madds() - before, 1000ULL * 120);
#endif
  }

#ifdef TG_HAVE_GUARD_PAGES
  /* No method reads outside its operands: every layout, over shapes that reach each method and its
     edge tiles, with A, B and C tight (ld = width) and each against an unmapped page, after its last
     float and then before its first. One thread: the fault handler must run on the thread that
     called. (GCC 12 at -O2 and -O3 vectorized the scalar build's 8-row direct tile with loads of
     three rows past the one it used: a crash whenever op(B) ended at the end of a mapping.) */
  {
#ifdef _OPENMP
    int saved_threads = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
    static const size_t shp[][3] = {{1, 1, 1},     {8, 2, 64},     {128, 256, 64},  {7, 33, 17},  {17, 31, 257},
                                    {3, 5, 1100},  {33, 7, 1030},  {300, 200, 500}, {16, 2048, 300},
                                    {1024, 16, 256}, {2048, 5, 300}, {1024, 64, 64}, {2, 2048, 1024},
                                    {13, 1999, 333}, {12, 2100, 1030}};
    for (int layout = 0; layout < 4; layout++) {
      int ta = layout >> 1, tb = layout & 1, faults = 0, calls = 0;
      char first[96] = "";
      for (size_t t = 0; t < sizeof(shp) / sizeof(shp[0]); t++)
        for (int after = 0; after < 2; after++, calls++) {
          int sig = guarded_gemm(ta, tb, shp[t][0], shp[t][1], shp[t][2], after);
          if (sig != 0 && faults++ == 0)
            snprintf(first, sizeof(first), " (first: %zux%zux%zu, guard %s, %s)", shp[t][0], shp[t][1],
                     shp[t][2], after ? "before" : "after", sig < 0 ? "mmap failed" : "fault");
        }
      th_check(faults == 0, "%s: %d calls with A, B, C against unmapped pages, %d read outside them%s",
               layout_name(ta, tb), calls, faults, first);
    }
#ifdef _OPENMP
    omp_set_num_threads(saved_threads);
#endif
  }
#else
  printf("  (no mmap here: the guard-page check is skipped)\n");
#endif

#ifdef _OPENMP
  /* Bit-identical for 1 and 2 threads, and when called from inside a parallel region. Every shape has
     m*n*k above the threading threshold (2^20 per thread), and together they reach each method: packed
     (300x200x500, 129x1000x257, 64x512x512 NN), direct with few rows or few columns (16x2048x300,
     3x4096x256, 1024x16x256, 2048x5x300 NN/TN), bdirect (1024x64x64 NT/TT), the transposed dot and
     dot methods (16x2048x300 and 2x2048x1024 NT/TT), with odd edges. */
  {
    static const size_t shp[][3] = {{300, 200, 500}, {64, 512, 512},   {16, 2048, 300},  {3, 4096, 256},
                                    {1024, 16, 256}, {2048, 5, 300},   {129, 1000, 257}, {8, 3000, 1000},
                                    {1024, 64, 64},  {2, 2048, 1024}, {13, 1999, 333}};
    int saved = omp_get_max_threads();
    for (size_t t = 0; t < sizeof(shp) / sizeof(shp[0]); t++) {
      for (int layout = 0; layout < 4; layout++) {
        int ta = layout >> 1, tb = layout & 1;
        size_t m = shp[t][0], n = shp[t][1], k = shp[t][2];
        size_t lda = ta ? m : k, ldb = tb ? k : n;
        float *a = titans_alloc_floats(m * k), *b = titans_alloc_floats(k * n);
        float *c1 = titans_alloc_floats(m * n), *c2 = titans_alloc_floats(m * n), *c3 = titans_alloc_floats(m * n);
        fill(a, m * k, &rng);
        fill(b, k * n, &rng);
        fill(c1, m * n, &rng);
        memcpy(c2, c1, m * n * sizeof(float));
        memcpy(c3, c1, m * n * sizeof(float));
        omp_set_num_threads(1);
        titans_gemm(ta, tb, m, n, k, 0.75f, titans_cm(a, lda), titans_cm(b, ldb), 0.5f, titans_m(c1, n));
        omp_set_num_threads(2);
        titans_gemm(ta, tb, m, n, k, 0.75f, titans_cm(a, lda), titans_cm(b, ldb), 0.5f, titans_m(c2, n));
#pragma omp parallel num_threads(2)
        {
#pragma omp single
          titans_gemm(ta, tb, m, n, k, 0.75f, titans_cm(a, lda), titans_cm(b, ldb), 0.5f, titans_m(c3, n));
        }
        th_check(memcmp(c1, c2, m * n * sizeof(float)) == 0 && memcmp(c1, c3, m * n * sizeof(float)) == 0,
                 "%s %zux%zux%zu: 1 thread, 2 threads and inside a parallel region bit-identical (max diff %.3g)",
                 layout_name(ta, tb), m, n, k, th_max_abs_diff(c1, c2, m * n) + th_max_abs_diff(c1, c3, m * n));
        titans_free(a);
        titans_free(b);
        titans_free(c1);
        titans_free(c2);
        titans_free(c3);
      }
    }
    omp_set_num_threads(saved);
  }
#else
  printf("  (built without OpenMP: the 1 vs 2 threads check is skipped)\n");
#endif
  return th_summary("test_gemm");
}
