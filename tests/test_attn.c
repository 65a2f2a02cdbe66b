/* Tests of the attention kernels (docs/model.md section 2): RoPE, the masked multi-head attention forward and
   backward, and the KV cache. References are written independently here: a materialised masked
   softmax in double, its analytic backward in double, central finite differences, and RoPE in long
   double. */

#define _DEFAULT_SOURCE /* tests/guard.h: mmap's MAP_ANONYMOUS and sigsetjmp under -std=c11 */
/* An allocator that can be told to fail, to check that allocation failures are returned, not fatal. */
#include <stdlib.h>
static long test_alloc_countdown = -1; /* fail the allocation when it reaches 0; -1 = never */
static void *test_malloc(size_t n) {
  if (test_alloc_countdown >= 0 && test_alloc_countdown-- == 0) return NULL;
  return malloc(n);
}
#define TITANS_MALLOC(n) test_malloc(n)
#define TITANS_FREE(p) free(p)
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "harness.h"
#include "guard.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

static titans_rng rng;

static float *randn(size_t n, float sd) {
  float *x = (float *)malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = sd * titans_rng_normal(&rng);
  return x;
}
static float *zeros(size_t n) { return (float *)calloc(n ? n : 1, sizeof(float)); }
static float *copyf(const float *x, size_t n) {
  float *y = (float *)malloc((n ? n : 1) * sizeof(float));
  memcpy(y, x, n * sizeof(float));
  return y;
}
static int bit_equal(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* The mask rule, written without overflow: kp <= qp and (window == 0 or qp - kp < window). */
static int visible(int64_t qp, int64_t kp, int64_t window) {
  return kp <= qp && (window == 0 || (uint64_t)qp - (uint64_t)kp < (uint64_t)window);
}

/* Naive reference: per (row, head) the full masked score vector, softmax and output in double. */
static void ref_forward(double *out, double *lse, const float *q, const float *k, const float *v, const int64_t *qpos,
                        const int64_t *kpos, size_t Tq, size_t P, size_t Tk, size_t H, size_t d, int64_t window) {
  size_t ld = H * d, nk = P + Tk;
  double *s = (double *)malloc((nk ? nk : 1) * sizeof(double));
  for (size_t i = 0; i < Tq; i++)
    for (size_t h = 0; h < H; h++) {
      double m = -INFINITY;
      for (size_t j = 0; j < nk; j++) {
        int vis = j < P || visible(qpos[i], kpos[j - P], window);
        double dot = 0;
        for (size_t c = 0; c < d; c++) dot += (double)q[i * ld + h * d + c] * k[j * ld + h * d + c];
        s[j] = vis ? dot / sqrt((double)d) : -INFINITY;
        if (s[j] > m) m = s[j];
      }
      double z = 0;
      for (size_t j = 0; j < nk; j++) z += s[j] == -INFINITY ? 0 : exp(s[j] - m);
      for (size_t c = 0; c < d; c++) {
        double acc = 0;
        for (size_t j = 0; j < nk; j++)
          if (s[j] != -INFINITY) acc += exp(s[j] - m) / z * v[j * ld + h * d + c];
        out[i * ld + h * d + c] = z > 0 ? acc : 0.0;
      }
      lse[i * H + h] = z > 0 ? m + log(z) : -INFINITY;
    }
  free(s);
}

/* Reference backward in double (the textbook softmax derivative on the materialised matrix). */
static void ref_backward(double *dq, double *dk, double *dv, const float *dout, const float *q, const float *k,
                         const float *v, const int64_t *qpos, const int64_t *kpos, size_t Tq, size_t P, size_t Tk,
                         size_t H, size_t d, int64_t window) {
  size_t ld = H * d, nk = P + Tk;
  double *p = (double *)malloc((nk ? nk : 1) * sizeof(double)), *dp = (double *)malloc((nk ? nk : 1) * sizeof(double));
  double sc = 1.0 / sqrt((double)d);
  for (size_t i = 0; i < Tq; i++)
    for (size_t h = 0; h < H; h++) {
      const float *qi = q + i * ld + h * d, *di = dout + i * ld + h * d;
      double m = -INFINITY, z = 0, D = 0;
      for (size_t j = 0; j < nk; j++) {
        int vis = j < P || visible(qpos[i], kpos[j - P], window);
        double dot = 0;
        for (size_t c = 0; c < d; c++) dot += (double)qi[c] * k[j * ld + h * d + c];
        p[j] = vis ? dot * sc : -INFINITY;
        if (p[j] > m) m = p[j];
      }
      if (m == -INFINITY) continue;
      for (size_t j = 0; j < nk; j++) z += p[j] == -INFINITY ? 0 : exp(p[j] - m);
      for (size_t j = 0; j < nk; j++) {
        p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - m) / z;
        dp[j] = 0;
        for (size_t c = 0; c < d; c++) dp[j] += (double)di[c] * v[j * ld + h * d + c];
        D += p[j] * dp[j];
      }
      for (size_t j = 0; j < nk; j++) {
        double ds = p[j] * (dp[j] - D) * sc;
        for (size_t c = 0; c < d; c++) {
          dq[i * ld + h * d + c] += ds * k[j * ld + h * d + c];
          dk[j * ld + h * d + c] += ds * qi[c];
          dv[j * ld + h * d + c] += p[j] * di[c];
        }
      }
    }
  free(p);
  free(dp);
}

static double max_diff_fd(const float *a, const double *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d != d) return INFINITY;
    if (d > m) m = d;
  }
  return m;
}

static double max_abs_d(const double *a, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
  return m;
}

/* A problem: buffers and positions of one attention call. */
typedef struct prob {
  const char *name;
  size_t Tq, P, Tk, H, d;
  int64_t window;
  int64_t *qpos, *kpos;
  float *q, *k, *v;
} prob;

enum { POS_CAUSAL, POS_MAC, POS_SUBSET, POS_UNSORTED, POS_EMPTY };

/* kind: CAUSAL  qpos = kpos = off + [0..T)                  (Tq = Tk = T)
         MAC     qpos = [0..C), kpos = [0..C, 0..C)           (T = C, Tk = 2C)
         SUBSET  the last Tq of Tk positions (a later segment of queries over a longer key stream)
         UNSORTED kpos a random permutation (many runs: the scan path), qpos another one
         EMPTY   like CAUSAL, but every third query sits before every key (sees only the prefix) */
static prob make_prob(const char *name, int kind, size_t T, size_t Tk_extra, size_t P, size_t H, size_t d,
                      int64_t window, int64_t off) {
  prob p;
  memset(&p, 0, sizeof(p));
  p.name = name;
  p.P = P, p.H = H, p.d = d, p.window = window;
  p.Tq = T;
  p.Tk = kind == POS_MAC ? 2 * T : T + Tk_extra;
  p.qpos = (int64_t *)malloc(p.Tq * sizeof(int64_t));
  p.kpos = (int64_t *)malloc((p.Tk ? p.Tk : 1) * sizeof(int64_t));
  for (size_t i = 0; i < p.Tq; i++) p.qpos[i] = off + (int64_t)(i + (kind == POS_SUBSET ? Tk_extra : 0));
  for (size_t j = 0; j < p.Tk; j++) p.kpos[j] = off + (int64_t)(kind == POS_MAC ? j % T : j);
  if (kind == POS_UNSORTED) {
    for (size_t j = p.Tk; j > 1; j--) {
      size_t r = (size_t)(titans_rng_u64(&rng) % j);
      int64_t t = p.kpos[j - 1];
      p.kpos[j - 1] = p.kpos[r], p.kpos[r] = t;
    }
    for (size_t i = p.Tq; i > 1; i--) {
      size_t r = (size_t)(titans_rng_u64(&rng) % i);
      int64_t t = p.qpos[i - 1];
      p.qpos[i - 1] = p.qpos[r], p.qpos[r] = t;
    }
  }
  if (kind == POS_EMPTY)
    for (size_t i = 0; i < p.Tq; i += 3) p.qpos[i] = off - 5;
  size_t ld = H * d;
  p.q = randn(p.Tq * ld, 1.5f); /* sd 1.5: scores spread enough that the softmax is not flat */
  p.k = randn((p.P + p.Tk) * ld, 1.0f);
  p.v = randn((p.P + p.Tk) * ld, 1.0f);
  return p;
}

static void free_prob(prob *p) {
  free(p->qpos), free(p->kpos), free(p->q), free(p->k), free(p->v);
}

static int fwd(const prob *p, float *out, float *lse) {
  const titans_attn_shape sh = {p->qpos, p->kpos, p->Tq, p->P, p->Tk, p->H, p->d, p->window};
  return titans_attention_forward(out, lse, p->q, p->k, p->v, &sh);
}

static int bwd(const prob *p, float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
               int mode) {
  const titans_attn_grads g = {dq, dk, dv, dout};
  const titans_attn_saved fw = {p->q, p->k, p->v, out, lse};
  const titans_attn_shape sh = {p->qpos, p->kpos, p->Tq, p->P, p->Tk, p->H, p->d, p->window};
  return titans__attention_backward_mode(&g, &fw, &sh, mode);
}

/* ---- forward and backward against the double references --------------------------------------- */

/* Tolerances: outputs are convex combinations of O(1) values and float scores are accurate to about
   1e-6 relative, so outputs agree with the double reference to ~1e-6; 1e-5 leaves room for d = 64
   and long key lists. Gradients: the same relative accuracy on sums of up to ~200 terms of O(1):
   1e-4 relative to the largest gradient. */
static void check_against_reference(prob *p) {
  size_t ld = p->H * p->d, nq = p->Tq * ld, nk = (p->P + p->Tk) * ld;
  float *out = zeros(nq), *lse = zeros(p->Tq * p->H);
  double *rout = (double *)calloc(nq, sizeof(double)), *rlse = (double *)calloc(p->Tq * p->H, sizeof(double));
  int st = fwd(p, out, lse);
  ref_forward(rout, rlse, p->q, p->k, p->v, p->qpos, p->kpos, p->Tq, p->P, p->Tk, p->H, p->d, p->window);
  double dlse = 0;
  int lse_inf_ok = 1;
  for (size_t i = 0; i < p->Tq * p->H; i++) {
    if (rlse[i] == -INFINITY || lse[i] == -INFINITY) {
      lse_inf_ok &= rlse[i] == lse[i];
      continue;
    }
    double d = fabs(lse[i] - rlse[i]);
    dlse = d > dlse || d != d ? d : dlse;
  }
  char what[160];
  snprintf(what, sizeof(what), "%s: forward out vs double reference", p->name);
  th_check(st == TITANS_OK, "%s: forward returns ok", p->name);
  th_close(what, max_diff_fd(out, rout, nq), 1e-5);
  snprintf(what, sizeof(what), "%s: lse vs double reference", p->name);
  th_close(what, dlse, 1e-5);
  th_check(lse_inf_ok, "%s: lse is -inf exactly where no key is visible", p->name);

  /* backward: both schemes against the reference, and against each other bit for bit */
  float *dout = randn(nq, 1.0f);
  float *dq1 = zeros(nq), *dk1 = zeros(nk), *dv1 = zeros(nk);
  float *dq2 = zeros(nq), *dk2 = zeros(nk), *dv2 = zeros(nk);
  double *rdq = (double *)calloc(nq, sizeof(double)), *rdk = (double *)calloc(nk, sizeof(double)),
         *rdv = (double *)calloc(nk, sizeof(double));
  bwd(p, dq1, dk1, dv1, dout, out, lse, TITANS__ATTN_BWD_FUSED);
  bwd(p, dq2, dk2, dv2, dout, out, lse, TITANS__ATTN_BWD_TWO_PASS);
  ref_backward(rdq, rdk, rdv, dout, p->q, p->k, p->v, p->qpos, p->kpos, p->Tq, p->P, p->Tk, p->H, p->d, p->window);
  double sq = max_abs_d(rdq, nq), sk = max_abs_d(rdk, nk), sv = max_abs_d(rdv, nk);
  snprintf(what, sizeof(what), "%s: dq vs double reference (relative to max |dq| %.3g)", p->name, sq);
  th_close(what, max_diff_fd(dq1, rdq, nq) / (sq > 1e-3 ? sq : 1e-3), 1e-4);
  snprintf(what, sizeof(what), "%s: dk vs double reference (relative to max |dk| %.3g)", p->name, sk);
  th_close(what, max_diff_fd(dk1, rdk, nk) / (sk > 1e-3 ? sk : 1e-3), 1e-4);
  snprintf(what, sizeof(what), "%s: dv vs double reference (relative to max |dv| %.3g)", p->name, sv);
  th_close(what, max_diff_fd(dv1, rdv, nk) / (sv > 1e-3 ? sv : 1e-3), 1e-4);
  th_check(bit_equal(dq1, dq2, nq) && bit_equal(dk1, dk2, nk) && bit_equal(dv1, dv2, nk),
           "%s: fused and two-pass backward bit-identical (max diff dq %.3g dk %.3g dv %.3g)", p->name,
           th_max_abs_diff(dq1, dq2, nq), th_max_abs_diff(dk1, dk2, nk), th_max_abs_diff(dv1, dv2, nk));
  free(out), free(lse), free(rout), free(rlse), free(dout);
  free(dq1), free(dk1), free(dv1), free(dq2), free(dk2), free(dv2), free(rdq), free(rdk), free(rdv);
}

static void test_forward_backward_reference(void) {
  printf("forward and backward vs double reference\n");
  struct {
    const char *name;
    int kind;
    size_t T, extra, P, H, d;
    int64_t window, off;
  } cases[] = {
      {"causal T=150 H=2 d=20", POS_CAUSAL, 150, 0, 0, 2, 20, 0, 0},
      {"causal + prefix P=3, d=64, positions from 1e6", POS_CAUSAL, 100, 0, 3, 2, 64, 0, 1000000},
      {"SWA w=1", POS_CAUSAL, 40, 0, 0, 2, 20, 1, 0},
      {"SWA w=3", POS_CAUSAL, 40, 0, 0, 3, 6, 3, 0},
      {"SWA w=70 (> tile) + prefix P=4", POS_CAUSAL, 200, 0, 4, 2, 20, 70, 0},
      {"SWA w=500 > T", POS_CAUSAL, 60, 0, 0, 2, 20, 500, 0},
      {"SWA w=1 + prefix P=2", POS_CAUSAL, 30, 0, 2, 2, 8, 1, 0},
      {"MAC mask C=80 P=4", POS_MAC, 80, 0, 4, 2, 20, 0, 0},
      {"MAC mask C=7 P=0, d=4", POS_MAC, 7, 0, 0, 1, 4, 0, 0},
      {"queries = last 50 of 120 keys, SWA w=30 + P=2", POS_SUBSET, 50, 70, 2, 2, 20, 30, 0},
      {"unsorted positions (scan path), SWA w=10 + P=1", POS_UNSORTED, 90, 0, 1, 2, 20, 10, 0},
      {"unsorted positions, causal", POS_UNSORTED, 70, 0, 0, 1, 12, 0, 0},
      {"queries before every key, P=0 (empty rows)", POS_EMPTY, 20, 0, 0, 2, 8, 0, 0},
      {"queries before every key, P=2", POS_EMPTY, 20, 0, 2, 2, 8, 4, 0},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    prob p = make_prob(cases[c].name, cases[c].kind, cases[c].T, cases[c].extra, cases[c].P, cases[c].H, cases[c].d,
                       cases[c].window, cases[c].off);
    check_against_reference(&p);
    free_prob(&p);
  }
}

/* A query that sees nothing outputs exact zeros (and no NaN reaches the gradients). */
static void test_empty_rows(void) {
  printf("rows that see no key\n");
  prob p = make_prob("empty", POS_EMPTY, 9, 0, 0, 2, 8, 0, 0);
  size_t ld = p.H * p.d, nq = p.Tq * ld, nk = p.Tk * ld;
  float *out = zeros(nq), *lse = zeros(p.Tq * p.H), *dout = randn(nq, 1.0f);
  float *dq = zeros(nq), *dk = zeros(nk), *dv = zeros(nk);
  fwd(&p, out, lse);
  float mx = 0;
  for (size_t i = 0; i < p.Tq; i += 3)
    for (size_t c = 0; c < ld; c++) mx = fabsf(out[i * ld + c]) > mx ? fabsf(out[i * ld + c]) : mx;
  th_check(mx == 0.0f && lse[0] == -INFINITY, "empty rows: output exactly 0 (max |out| %g), lse -inf", mx);
  bwd(&p, dq, dk, dv, dout, out, lse, TITANS__ATTN_BWD_AUTO);
  th_check(th_all_finite(out, nq) && th_all_finite(dq, nq) && th_all_finite(dk, nk) && th_all_finite(dv, nk),
           "empty rows: output and gradients finite");
  free(out), free(lse), free(dout), free(dq), free(dk), free(dv);
  free_prob(&p);
}

/* ---- backward against central finite differences of L = sum(out * R) --------------------------- */

static double loss(const prob *p, const float *R, float *out) {
  size_t n = p->Tq * p->H * p->d;
  fwd(p, out, NULL);
  double L = 0;
  for (size_t i = 0; i < n; i++) L += (double)out[i] * R[i];
  return L;
}

/* Central differences on the float kernel: the perturbation is the float-representable step
   (x + eps) - (x - eps). eps = 1e-2: truncation error ~eps^2 * |f'''| ~ 1e-4, rounding ~1e-7 * |L| /
   eps ~ 1e-5 for these sizes. Tolerance 2e-3 absolute on gradients of O(0.1..1). */
static double fd_check(prob *p, float *x, const float *g, size_t n, const float *R, float *out) {
  double worst = 0;
  const float eps = 1e-2f;
  for (size_t i = 0; i < n; i++) {
    float x0 = x[i], xp = x0 + eps, xm = x0 - eps;
    x[i] = xp;
    double Lp = loss(p, R, out);
    x[i] = xm;
    double Lm = loss(p, R, out);
    x[i] = x0;
    double fd = (Lp - Lm) / ((double)xp - (double)xm);
    double d = fabs(fd - g[i]);
    if (d != d) return INFINITY;
    worst = d > worst ? d : worst;
  }
  return worst;
}

static void test_finite_differences(void) {
  printf("backward vs central finite differences, L = sum(out * R)\n");
  struct {
    const char *name;
    int kind;
    size_t T, P, H, d;
    int64_t window;
  } cases[] = {
      {"causal + prefix P=2", POS_CAUSAL, 7, 2, 2, 6, 0},
      {"SWA w=3 + prefix P=2", POS_CAUSAL, 9, 2, 2, 4, 3},
      {"MAC mask C=5 P=2", POS_MAC, 5, 2, 2, 4, 0},
      {"causal d=20 (vector path)", POS_CAUSAL, 6, 1, 1, 20, 0},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    prob p = make_prob(cases[c].name, cases[c].kind, cases[c].T, 0, cases[c].P, cases[c].H, cases[c].d,
                       cases[c].window, 0);
    size_t ld = p.H * p.d, nq = p.Tq * ld, nk = (p.P + p.Tk) * ld;
    float *R = randn(nq, 1.0f), *out = zeros(nq), *lse = zeros(p.Tq * p.H);
    /* gradients start from a non-zero value to check that the backward accumulates */
    float *g0q = randn(nq, 1.0f), *g0k = randn(nk, 1.0f), *g0v = randn(nk, 1.0f);
    float *dq = copyf(g0q, nq), *dk = copyf(g0k, nk), *dv = copyf(g0v, nk);
    fwd(&p, out, lse);
    const titans_attn_grads g = {dq, dk, dv, R};
    const titans_attn_saved fw = {p.q, p.k, p.v, out, lse};
    const titans_attn_shape sh = {p.qpos, p.kpos, p.Tq, p.P, p.Tk, p.H, p.d, p.window};
    titans_attention_backward(&g, &fw, &sh);
    for (size_t i = 0; i < nq; i++) dq[i] -= g0q[i];
    for (size_t i = 0; i < nk; i++) dk[i] -= g0k[i], dv[i] -= g0v[i];
    char what[160];
    snprintf(what, sizeof(what), "%s: dq vs finite differences", p.name);
    th_close(what, fd_check(&p, p.q, dq, nq, R, out), 2e-3);
    snprintf(what, sizeof(what), "%s: dk (prefix rows included) vs finite differences", p.name);
    th_close(what, fd_check(&p, p.k, dk, nk, R, out), 2e-3);
    snprintf(what, sizeof(what), "%s: dv (prefix rows included) vs finite differences", p.name);
    th_close(what, fd_check(&p, p.v, dv, nk, R, out), 2e-3);
    free(R), free(out), free(lse), free(g0q), free(g0k), free(g0v), free(dq), free(dk), free(dv);
    free_prob(&p);
  }
}

/* ---- RoPE --------------------------------------------------------------------------------------- */

/* Tolerance: the kernel rounds a double rotation once to float: |err| <= ~1 ulp of values up to ~4,
   so 1e-6. A float angle at position 3e6 would be off by up to ~0.1 rad. */
static void test_rope(void) {
  printf("RoPE\n");
  int64_t pos[] = {0, 1, 2, 7, 1000, 65535, 1000003, 2718281, 2999999, 3000000};
  size_t T = sizeof(pos) / sizeof(pos[0]);
  size_t dims[] = {20, 64};
  for (size_t di = 0; di < 2; di++) {
    size_t H = 3, d = dims[di], ld = H * d, n = T * ld, half = d / 2;
    float *x = randn(n, 1.0f), *y = copyf(x, n), *g = randn(n, 1.0f), *gx = copyf(g, n);
    int st = titans_rope_forward(y, pos, T, H, d);
    int st2 = titans_rope_backward(gx, pos, T, H, d);
    double ef = 0, eb = 0;
    for (size_t t = 0; t < T; t++)
      for (size_t h = 0; h < H; h++)
        for (size_t i = 0; i < half; i++) {
          long double ang = (long double)pos[t] * powl(10000.0L, -2.0L * (long double)i / (long double)d);
          long double c = cosl(ang), s = sinl(ang);
          size_t a = t * ld + h * d + i, b = a + half;
          long double r1 = x[a] * c - x[b] * s, r2 = x[a] * s + x[b] * c;   /* rotate by +angle */
          long double b1 = g[a] * c + g[b] * s, b2 = -g[a] * s + g[b] * c;  /* rotate by -angle */
          double e[4] = {(double)fabsl(r1 - y[a]), (double)fabsl(r2 - y[b]), (double)fabsl(b1 - gx[a]),
                         (double)fabsl(b2 - gx[b])};
          ef = e[0] > ef ? e[0] : ef;
          ef = e[1] > ef ? e[1] : ef;
          eb = e[2] > eb ? e[2] : eb;
          eb = e[3] > eb ? e[3] : eb;
        }
    char what[160];
    th_check(st == TITANS_OK && st2 == TITANS_OK, "rope d=%zu: calls return ok", d);
    snprintf(what, sizeof(what), "rope d=%zu forward vs long double, positions up to 3e6", d);
    th_close(what, ef, 1e-6);
    snprintf(what, sizeof(what), "rope d=%zu backward vs long double rotation by -angle", d);
    th_close(what, eb, 1e-6);
    /* adjoint: <R x, g> = <x, R^T g> */
    double l1 = 0, l2 = 0;
    for (size_t i = 0; i < n; i++) l1 += (double)y[i] * g[i], l2 += (double)x[i] * gx[i];
    snprintf(what, sizeof(what), "rope d=%zu: <R x, g> = <x, R^T g> (relative)", d);
    th_close(what, fabs(l1 - l2) / (fabs(l1) > 1 ? fabs(l1) : 1), 1e-6);
    /* backward undoes forward */
    float *z = copyf(y, n);
    titans_rope_backward(z, pos, T, H, d);
    snprintf(what, sizeof(what), "rope d=%zu: backward(forward(x)) = x", d);
    th_close(what, th_max_abs_diff(z, x, n), 1e-6);
    free(x), free(y), free(g), free(gx), free(z);
  }
  float one[4] = {1, 2, 3, 4};
  int64_t p0 = 5;
  th_check(titans_rope_forward(one, &p0, 1, 1, 3) == TITANS_ERR_ARG, "rope: odd d_a is an argument error");
  th_check(titans_rope_forward(one, &p0, 1, 2, 2) == TITANS_OK, "rope: d_a = 2 works");
}

/* RoPE makes scores depend on relative positions only: shifting every position by 3,000,000 (after
   RoPE on q and k) leaves the outputs unchanged up to float rounding of the rotated vectors (~1e-7
   relative on q, k; 1e-5 on outputs). A float angle would fail this badly. No prefix here: persistent
   keys take no RoPE (docs/model.md section 2), so their scores do depend on the query's absolute position. */
static void test_rope_shift_invariance(void) {
  printf("RoPE + attention: invariance to a shift of every position\n");
  size_t T = 40, P = 0, H = 2, d = 16, ld = H * d;
  int64_t window = 9, shift = 3000000;
  prob p = make_prob("rope shift", POS_CAUSAL, T, 0, P, H, d, window, 0);
  float *q0 = copyf(p.q, T * ld), *k0 = copyf(p.k, (P + T) * ld), *o1 = zeros(T * ld), *o2 = zeros(T * ld);
  titans_rope_forward(p.q, p.qpos, T, H, d);
  titans_rope_forward(p.k, p.kpos, T, H, d);
  fwd(&p, o1, NULL);
  memcpy(p.q, q0, T * ld * sizeof(float));
  memcpy(p.k, k0, (P + T) * ld * sizeof(float));
  for (size_t i = 0; i < T; i++) p.qpos[i] += shift, p.kpos[i] += shift;
  titans_rope_forward(p.q, p.qpos, T, H, d);
  titans_rope_forward(p.k, p.kpos, T, H, d);
  fwd(&p, o2, NULL);
  th_close("attention outputs at positions shifted by 3e6 (RoPE in double)", th_max_abs_diff(o1, o2, T * ld), 1e-5);
  free(q0), free(k0), free(o1), free(o2);
  free_prob(&p);
}

/* Positions at the ends of int64_t and windows up to INT64_MAX: the bounds never overflow. */
static void test_extreme_positions(void) {
  printf("extreme positions\n");
  size_t T = 12, H = 1, d = 8, ld = H * d;
  int64_t bases[2] = {INT64_MAX - 11, INT64_MIN}, windows[3] = {3, INT64_MAX - 1, INT64_MAX};
  double worst = 0, worst_b = 0;
  for (int bi = 0; bi < 2; bi++)
    for (int wi = 0; wi < 3; wi++) {
      prob p = make_prob("extreme", POS_CAUSAL, T, 0, 1, H, d, windows[wi], 0);
      for (size_t i = 0; i < T; i++) p.qpos[i] = p.kpos[i] = bases[bi] + (int64_t)i;
      float *out = zeros(T * ld), *lse = zeros(T * H), *dout = randn(T * ld, 1.0f);
      float *dq1 = zeros(T * ld), *dk1 = zeros((T + 1) * ld), *dv1 = zeros((T + 1) * ld);
      float *dq2 = zeros(T * ld), *dk2 = zeros((T + 1) * ld), *dv2 = zeros((T + 1) * ld);
      double *rout = (double *)calloc(T * ld, sizeof(double)), *rlse = (double *)calloc(T * H, sizeof(double));
      fwd(&p, out, lse);
      ref_forward(rout, rlse, p.q, p.k, p.v, p.qpos, p.kpos, T, p.P, p.Tk, H, d, p.window);
      double e = max_diff_fd(out, rout, T * ld);
      worst = e > worst ? e : worst;
      bwd(&p, dq1, dk1, dv1, dout, out, lse, TITANS__ATTN_BWD_FUSED);
      bwd(&p, dq2, dk2, dv2, dout, out, lse, TITANS__ATTN_BWD_TWO_PASS);
      e = th_max_abs_diff(dk1, dk2, (T + 1) * ld) + th_max_abs_diff(dq1, dq2, T * ld);
      worst_b = e > worst_b ? e : worst_b;
      free(out), free(lse), free(dout), free(dq1), free(dk1), free(dv1), free(dq2), free(dk2), free(dv2);
      free(rout), free(rlse);
      free_prob(&p);
    }
  th_close("positions near INT64_MAX and INT64_MIN, windows 3 .. INT64_MAX: out vs reference", worst, 1e-5);
  th_close("the same: fused = two-pass backward (query bounds near INT64_MAX)", worst_b, 0.0);
}

/* Only persistent keys (Tk = 0, no positions): every query attends to the prefix alone. */
static void test_prefix_only(void) {
  printf("prefix only\n");
  size_t Tq = 5, P = 3, H = 2, d = 8, ld = H * d;
  float *q = randn(Tq * ld, 1.0f), *k = randn(P * ld, 1.0f), *v = randn(P * ld, 1.0f);
  float *out = zeros(Tq * ld), *lse = zeros(Tq * H), *out2 = zeros(Tq * ld);
  int64_t qpos[5] = {0, 1, 2, 3, 4};
  double *rout = (double *)calloc(Tq * ld, sizeof(double)), *rlse = (double *)calloc(Tq * H, sizeof(double));
  const titans_attn_shape sh = {qpos, NULL, Tq, P, 0, H, d, 0}, sh3 = {qpos, NULL, Tq, P, 0, H, d, 3};
  int st = titans_attention_forward(out, lse, q, k, v, &sh);
  int st2 = titans_attention_forward(out2, NULL, q, k, v, &sh3);
  ref_forward(rout, rlse, q, k, v, qpos, NULL, Tq, P, 0, H, d, 0);
  th_check(st == TITANS_OK && st2 == TITANS_OK, "prefix only: calls ok (kpos NULL, lse NULL)");
  th_close("prefix only: out vs double reference", max_diff_fd(out, rout, Tq * ld), 1e-5);
  th_close("prefix only: a window changes nothing, lse NULL changes nothing", th_max_abs_diff(out, out2, Tq * ld), 0.0);
  float *dq = zeros(Tq * ld), *dk = zeros(P * ld), *dv = zeros(P * ld);
  const titans_attn_grads g = {dq, dk, dv, out};
  const titans_attn_saved fw = {q, k, v, out, lse};
  st = titans_attention_backward(&g, &fw, &sh);
  th_check(st == TITANS_OK && th_all_finite(dq, Tq * ld) && th_all_finite(dk, P * ld),
           "prefix only: backward ok and finite");
  free(q), free(k), free(v), free(out), free(lse), free(out2), free(rout), free(rlse), free(dq), free(dk), free(dv);
}

/* ---- causality --------------------------------------------------------------------------------- */

/* Changing the key/value rows at position j changes no output at a query with position < j
   (exactly: those queries never read the rows). For MAC both Hm_j and X_j change. */
static void test_causality(void) {
  printf("causality\n");
  struct {
    const char *name;
    int kind;
    size_t T, P;
    int64_t window;
  } cases[] = {{"causal + prefix", POS_CAUSAL, 40, 2, 0}, {"SWA w=5", POS_CAUSAL, 40, 0, 5},
               {"MAC mask", POS_MAC, 20, 3, 0}, {"unsorted keys", POS_UNSORTED, 30, 1, 0}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    prob p = make_prob(cases[c].name, cases[c].kind, cases[c].T, 0, cases[c].P, 2, 8, cases[c].window, 0);
    size_t ld = p.H * p.d, nq = p.Tq * ld;
    float *o1 = zeros(nq), *o2 = zeros(nq);
    fwd(&p, o1, NULL);
    double worst = 0;
    int64_t jpos[] = {1, (int64_t)p.Tq / 2, (int64_t)p.Tq - 1};
    for (size_t t = 0; t < 3; t++) {
      for (size_t j = 0; j < p.Tk; j++)
        if (p.kpos[j] >= jpos[t])
          for (size_t e = 0; e < ld; e++) p.k[(p.P + j) * ld + e] += 3.0f, p.v[(p.P + j) * ld + e] -= 2.0f;
      fwd(&p, o2, NULL);
      for (size_t i = 0; i < p.Tq; i++)
        if (p.qpos[i] < jpos[t]) {
          double d = th_max_abs_diff(o1 + i * ld, o2 + i * ld, ld);
          worst = d > worst ? d : worst;
        }
      memcpy(o1, o2, nq * sizeof(float)); /* the next change is relative to this state */
    }
    char what[160];
    snprintf(what, sizeof(what), "%s: changing keys/values at positions >= j changes no output before j", p.name);
    th_close(what, worst, 0.0);
    free(o1), free(o2);
    free_prob(&p);
  }
}

/* ---- KV cache ---------------------------------------------------------------------------------- */

/* Feed the stream token by token (append k_t, v_t, then attend q_t) and compare with the batched
   forward. The cache visits the same keys in the same order, so the results are bit-identical. */
static double cache_stream(titans_kv_cache *cache, const prob *p, const float *ref_out, const float *ref_lse,
                           size_t t0, size_t t1, int *ok) {
  size_t ld = p->H * p->d;
  float *o = zeros(ld), *l = zeros(p->H);
  double worst = 0;
  for (size_t t = t0; t < t1; t++) {
    *ok &= titans_kv_cache_append(cache, p->k + (p->P + t) * ld, p->v + (p->P + t) * ld, p->kpos + t, 1) == TITANS_OK;
    *ok &= titans_kv_cache_attend(cache, o, l, p->q + t * ld, p->qpos[t]) == TITANS_OK;
    *ok &= cache->count <= cache->capacity;
    double d = th_max_abs_diff(o, ref_out + t * ld, ld);
    double dl = th_max_abs_diff(l, ref_lse + t * p->H, p->H);
    worst = d > worst ? d : worst;
    worst = dl > worst ? dl : worst;
  }
  free(o), free(l);
  return worst;
}

static void test_kv_cache(void) {
  printf("KV cache\n");
  struct {
    const char *name;
    size_t T, P, H, d, cap;
    int64_t window;
  } cases[] = {
      {"SWA w=5, capacity 5, P=2 (ring wraps 12 times)", 60, 2, 2, 20, 5, 5},
      {"SWA w=100, capacity 100, P=3 (visible keys span two tiles)", 300, 3, 2, 20, 100, 100},
      {"SWA w=6, capacity 9 > w", 50, 0, 2, 8, 9, 6},
      {"full attention, P=4, capacity = T", 150, 4, 3, 16, 150, 0},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    prob p = make_prob(cases[c].name, POS_CAUSAL, cases[c].T, 0, cases[c].P, cases[c].H, cases[c].d,
                       cases[c].window, 0);
    size_t ld = p.H * p.d, nq = p.Tq * ld;
    float *out = zeros(nq), *lse = zeros(p.Tq * p.H);
    fwd(&p, out, lse);
    titans_kv_cache cache;
    int ok = titans_kv_cache_init(&cache, p.P, cases[c].cap, p.H, p.d, p.window) == TITANS_OK;
    titans_kv_cache_set_prefix(&cache, p.k, p.v);
    double d = cache_stream(&cache, &p, out, lse, 0, p.Tq, &ok);
    char what[200];
    snprintf(what, sizeof(what), "%s: token by token = batched (out and lse, bit-identical)", p.name);
    th_check(ok, "%s: cache calls ok, count <= capacity", p.name);
    th_close(what, d, 0.0);
    titans_kv_cache_free(&cache);
    free(out), free(lse);
    free_prob(&p);
  }

  /* appending many rows at once (more than the capacity) keeps the last `capacity` of them */
  {
    prob p = make_prob("bulk append", POS_CAUSAL, 30, 0, 1, 2, 8, 4, 0);
    size_t ld = p.H * p.d, nq = p.Tq * ld;
    float *out = zeros(nq), *lse = zeros(p.Tq * p.H), *o = zeros(ld), *l = zeros(p.H);
    fwd(&p, out, lse);
    titans_kv_cache cache;
    int ok = titans_kv_cache_init(&cache, p.P, 4, p.H, p.d, p.window) == TITANS_OK;
    titans_kv_cache_set_prefix(&cache, p.k, p.v);
    ok &= titans_kv_cache_append(&cache, p.k + p.P * ld, p.v + p.P * ld, p.kpos, 20) == TITANS_OK; /* rows 0..19 */
    ok &= cache.count == 4;
    ok &= titans_kv_cache_attend(&cache, o, l, p.q + 19 * ld, p.qpos[19]) == TITANS_OK;
    double d = th_max_abs_diff(o, out + 19 * ld, ld);
    ok &= titans_kv_cache_append(&cache, p.k + (p.P + 20) * ld, p.v + (p.P + 20) * ld, p.kpos + 20, 3) == TITANS_OK;
    ok &= titans_kv_cache_attend(&cache, o, l, p.q + 22 * ld, p.qpos[22]) == TITANS_OK;
    double d2 = th_max_abs_diff(o, out + 22 * ld, ld);
    th_check(ok, "bulk append: calls ok, count = capacity");
    th_close("bulk append of 20 rows into capacity 4, then 3 more: = batched", d > d2 ? d : d2, 0.0);
    titans_kv_cache_free(&cache);
    free(out), free(lse), free(o), free(l);
    free_prob(&p);
  }

  /* MAC: one segment of C tokens, the cache holds Hm_t and X_t (both at position t) as they arrive, so
     its key order (Hm_0, X_0, Hm_1, ...) differs from the batched [Hm || X]: equal within float
     rounding of the reordered sums (1e-6). */
  {
    size_t C = 24, P = 3, H = 2, d = 20;
    prob p = make_prob("MAC segment", POS_MAC, C, 0, P, H, d, 0, 0);
    size_t ld = H * d;
    float *out = zeros(C * ld), *lse = zeros(C * H), *o = zeros(ld);
    fwd(&p, out, lse);
    titans_kv_cache cache;
    int ok = titans_kv_cache_init(&cache, P, 2 * C, H, d, 0) == TITANS_OK;
    titans_kv_cache_set_prefix(&cache, p.k, p.v);
    double worst = 0;
    for (int seg = 0; seg < 2; seg++) { /* the second pass after a reset must give the same again */
      titans_kv_cache_reset(&cache);
      for (size_t t = 0; t < C; t++) {
        ok &= titans_kv_cache_append(&cache, p.k + (P + t) * ld, p.v + (P + t) * ld, p.kpos + t, 1) == TITANS_OK;
        ok &= titans_kv_cache_append(&cache, p.k + (P + C + t) * ld, p.v + (P + C + t) * ld, p.kpos + C + t, 1) ==
              TITANS_OK;
        ok &= titans_kv_cache_attend(&cache, o, NULL, p.q + t * ld, p.qpos[t]) == TITANS_OK;
        double dd = th_max_abs_diff(o, out + t * ld, ld);
        worst = dd > worst ? dd : worst;
      }
    }
    th_check(ok, "MAC cache: calls ok");
    th_close("MAC cache (capacity 2C, reset per segment): token by token = batched", worst, 1e-6);
    th_close("MAC cache: last output, relative difference (floor 1)",
             th_max_rel_diff(o, out + (C - 1) * ld, ld, 1.0), 1e-6);
    titans_kv_cache_free(&cache);
    free(out), free(lse), free(o);
    free_prob(&p);
  }

  /* fork: a clone continues exactly like the original; changing the clone leaves the original alone */
  {
    prob p = make_prob("fork", POS_CAUSAL, 40, 0, 2, 2, 8, 6, 0);
    size_t ld = p.H * p.d, nq = p.Tq * ld;
    float *out = zeros(nq), *lse = zeros(p.Tq * p.H);
    fwd(&p, out, lse);
    titans_kv_cache a, b, c3, wrong;
    int ok = titans_kv_cache_init(&a, p.P, 6, p.H, p.d, p.window) == TITANS_OK;
    titans_kv_cache_set_prefix(&a, p.k, p.v);
    double d1 = cache_stream(&a, &p, out, lse, 0, 20, &ok);
    ok &= titans_kv_cache_clone(&b, &a) == TITANS_OK;
    ok &= titans_kv_cache_init(&c3, p.P, 6, p.H, p.d, p.window) == TITANS_OK;
    ok &= titans_kv_cache_copy(&c3, &a) == TITANS_OK;
    /* disturb a, then check that b and c3 still continue the stream exactly */
    float *junk = randn(ld, 5.0f);
    int64_t jp = 20;
    titans_kv_cache_append(&a, junk, junk, &jp, 1);
    double d2 = cache_stream(&b, &p, out, lse, 20, p.Tq, &ok);
    double d3 = cache_stream(&c3, &p, out, lse, 20, p.Tq, &ok);
    th_check(ok, "fork: calls ok");
    th_close("fork: clone continues the stream exactly", d1 > d2 ? d1 : d2, 0.0);
    th_close("fork: copy into an existing cache continues the stream exactly", d3, 0.0);
    ok = titans_kv_cache_init(&wrong, p.P, 7, p.H, p.d, p.window) == TITANS_OK;
    th_check(ok && titans_kv_cache_copy(&wrong, &a) == TITANS_ERR_ARG && titans_kv_cache_error(&wrong)[0] != 0,
             "fork: copy between caches of different capacity is an argument error (\"%s\")",
             titans_kv_cache_error(&wrong));
    titans_kv_cache_free(&a), titans_kv_cache_free(&b), titans_kv_cache_free(&c3), titans_kv_cache_free(&wrong);
    free(out), free(lse), free(junk);
    free_prob(&p);
  }
}

/* ---- threads ----------------------------------------------------------------------------------- */

static void test_threads(void) {
  printf("threads\n");
#ifdef _OPENMP
  int saved = omp_get_max_threads();
  struct {
    const char *name;
    int kind;
    size_t T, P, H, d;
    int64_t window;
  } cases[] = {{"causal T=300 H=4 d=32 P=2", POS_CAUSAL, 300, 2, 4, 32, 0},
               {"SWA w=64 T=400 H=1 d=20 P=3", POS_CAUSAL, 400, 3, 1, 20, 64},
               {"MAC C=128 H=2 d=24 P=4", POS_MAC, 128, 4, 2, 24, 0}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    prob p = make_prob(cases[c].name, cases[c].kind, cases[c].T, 0, cases[c].P, cases[c].H, cases[c].d,
                       cases[c].window, 0);
    size_t ld = p.H * p.d, nq = p.Tq * ld, nk = (p.P + p.Tk) * ld;
    float *dout = randn(nq, 1.0f);
    float *out[2], *lse[2], *dq[2][3], *dk[2][3], *dv[2][3];
    for (int th = 0; th < 2; th++) {
      omp_set_num_threads(th + 1);
      out[th] = zeros(nq), lse[th] = zeros(p.Tq * p.H);
      fwd(&p, out[th], lse[th]);
      for (int mode = 0; mode < 3; mode++) {
        dq[th][mode] = zeros(nq), dk[th][mode] = zeros(nk), dv[th][mode] = zeros(nk);
        bwd(&p, dq[th][mode], dk[th][mode], dv[th][mode], dout, out[th], lse[th], mode);
      }
    }
    int same_f = bit_equal(out[0], out[1], nq) && bit_equal(lse[0], lse[1], p.Tq * p.H);
    int same_b = 1;
    for (int th = 0; th < 2; th++)
      for (int mode = 0; mode < 3; mode++)
        same_b &= bit_equal(dq[th][mode], dq[0][0], nq) && bit_equal(dk[th][mode], dk[0][0], nk) &&
                  bit_equal(dv[th][mode], dv[0][0], nk);
    th_check(same_f, "%s: forward bit-identical for 1 and 2 threads (max diff %.3g)", p.name,
             th_max_abs_diff(out[0], out[1], nq));
    th_check(same_b, "%s: backward bit-identical for 1 and 2 threads, auto/fused/two-pass (max diff dk %.3g)",
             p.name, th_max_abs_diff(dk[1][2], dk[0][1], nk));
    for (int th = 0; th < 2; th++) {
      free(out[th]), free(lse[th]);
      for (int mode = 0; mode < 3; mode++) free(dq[th][mode]), free(dk[th][mode]), free(dv[th][mode]);
    }
    free(dout);
    free_prob(&p);
  }
  omp_set_num_threads(saved);
#else
  th_check(1, "built without OpenMP: one thread only (thread tests skipped)");
#endif
}

/* ---- argument and allocation errors ------------------------------------------------------------- */

static void test_errors(void) {
  printf("errors\n");
  prob p = make_prob("err", POS_CAUSAL, 8, 0, 1, 2, 4, 0, 0);
  size_t ld = p.H * p.d, nq = p.Tq * ld, nk = (p.P + p.Tk) * ld;
  float *out = zeros(nq), *lse = zeros(p.Tq * p.H), *dout = randn(nq, 1.0f);
  const titans_attn_shape no_width = {p.qpos, p.kpos, p.Tq, p.P, p.Tk, p.H, 0, 0};
  const titans_attn_shape neg_window = {p.qpos, p.kpos, p.Tq, p.P, p.Tk, p.H, p.d, -1};
  const titans_attn_shape no_kpos = {p.qpos, NULL, p.Tq, p.P, p.Tk, p.H, p.d, 0};
  const titans_attn_shape huge = {p.qpos, p.kpos, SIZE_MAX / 2, p.P, p.Tk, p.H, p.d, 0};
  th_check(titans_attention_forward(out, lse, p.q, p.k, p.v, &no_width) == TITANS_ERR_ARG,
           "forward: d_a = 0 is an argument error");
  th_check(titans_attention_forward(out, lse, p.q, p.k, p.v, &neg_window) == TITANS_ERR_ARG,
           "forward: window < 0 is an argument error");
  th_check(titans_attention_forward(out, lse, p.q, p.k, p.v, &no_kpos) == TITANS_ERR_ARG,
           "forward: missing kpos is an argument error");
  th_check(titans_attention_forward(out, lse, p.q, p.k, p.v, &huge) == TITANS_ERR_ARG,
           "forward: sizes that overflow are an argument error");

  /* two-pass backward whose scratch allocation fails: falls back to the fused pass, same bits */
  float *dq1 = zeros(nq), *dk1 = zeros(nk), *dv1 = zeros(nk), *dq2 = zeros(nq), *dk2 = zeros(nk), *dv2 = zeros(nk);
  fwd(&p, out, lse);
  bwd(&p, dq1, dk1, dv1, dout, out, lse, TITANS__ATTN_BWD_FUSED);
  test_alloc_countdown = 0;
  int st = bwd(&p, dq2, dk2, dv2, dout, out, lse, TITANS__ATTN_BWD_TWO_PASS);
  test_alloc_countdown = -1;
  th_check(st == TITANS_OK && bit_equal(dq1, dq2, nq) && bit_equal(dk1, dk2, nk) && bit_equal(dv1, dv2, nk),
           "backward: failed scratch allocation falls back to the fused pass (same result)");

  titans_kv_cache cache;
  th_check(titans_kv_cache_init(&cache, 1, SIZE_MAX / 4, 2, 8, 0) == TITANS_ERR_NOMEM,
           "kv cache: a size that overflows gives TITANS_ERR_NOMEM (\"%s\")", titans_kv_cache_error(&cache));
  titans_kv_cache_free(&cache);
  int all_nomem = 1;
  for (long fail = 0; fail < 3; fail++) { /* each of the three allocations failing in turn */
    test_alloc_countdown = fail;
    all_nomem &= titans_kv_cache_init(&cache, 1, 4, 2, 8, 0) == TITANS_ERR_NOMEM;
    test_alloc_countdown = -1;
    all_nomem &= cache.k == NULL && cache.v == NULL && cache.pos == NULL;
    titans_kv_cache_free(&cache);
  }
  th_check(all_nomem, "kv cache: every failed allocation gives TITANS_ERR_NOMEM and a freeable cache");
  th_check(titans_kv_cache_init(&cache, 1, 0, 2, 8, 0) == TITANS_ERR_ARG, "kv cache: capacity 0 is an argument error");
  titans_kv_cache_free(&cache);
  th_check(titans_kv_cache_attend(&cache, out, NULL, p.q, 0) == TITANS_ERR_STATE,
           "kv cache: attend on a freed cache is a state error");
  free(out), free(lse), free(dout), free(dq1), free(dk1), free(dv1), free(dq2), free(dk2), free(dv2);
  free_prob(&p);
}

#ifdef TG_HAVE_GUARD_PAGES
typedef struct guarded_attn {
  size_t Tq, P, Tk, H, d_a;
  int64_t window;
  const int64_t *qpos, *kpos;
  float *out, *lse, *q, *k, *v, *dout, *dq, *dk, *dv;
  int rc_forward, rc_backward;
} guarded_attn;

static void guarded_attn_run(void *arg) {
  guarded_attn *g = (guarded_attn *)arg;
  const titans_attn_shape sh = {g->qpos, g->kpos, g->Tq, g->P, g->Tk, g->H, g->d_a, g->window};
  const titans_attn_grads gr = {g->dq, g->dk, g->dv, g->dout};
  const titans_attn_saved fw = {g->q, g->k, g->v, g->out, g->lse};
  g->rc_forward = titans_attention_forward(g->out, g->lse, g->q, g->k, g->v, &sh);
  g->rc_backward = titans_attention_backward(&gr, &fw, &sh);
}

/* The forward and backward read and write nothing outside their arrays: every array of the call tight
   and against an unmapped page (tests/guard.h), after its last float and then before its first, over
   shapes that reach the edge tiles (odd lengths, a prefix, a window, more keys than queries), on one
   thread (the fault handler must run on the calling thread). */
static void test_guard_pages(void) {
  static const size_t shapes[][6] = {/* Tq, P, Tk, H, d_a, window */
                                     {1, 0, 1, 1, 8, 0},    {17, 0, 17, 2, 8, 0},  {64, 3, 64, 2, 64, 0},
                                     {130, 0, 130, 2, 64, 16}, {33, 2, 40, 4, 16, 0}, {70, 1, 70, 1, 24, 9}};
#ifdef _OPENMP
  int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
#endif
  int calls = 0, faults = 0, errors = 0;
  char first[96] = "";
  for (size_t c = 0; c < sizeof(shapes) / sizeof(shapes[0]); c++)
    for (int after = 0; after < 2; after++, calls++) {
      size_t Tq = shapes[c][0], P = shapes[c][1], Tk = shapes[c][2], H = shapes[c][3], d_a = shapes[c][4];
      size_t wq = Tq * H * d_a, wk = (P + Tk) * H * d_a;
      int64_t *qpos = (int64_t *)malloc(Tq * sizeof(int64_t)), *kpos = (int64_t *)malloc(Tk * sizeof(int64_t));
      for (size_t j = 0; j < Tk; j++) kpos[j] = (int64_t)j;
      for (size_t i = 0; i < Tq; i++) qpos[i] = (int64_t)(Tk - Tq + i);
      tg_block b[9];
      guarded_attn g = {Tq, P, Tk, H, d_a, (int64_t)shapes[c][5], qpos, kpos,
                        tg_alloc(&b[0], wq, after), tg_alloc(&b[1], Tq * H, after), tg_alloc(&b[2], wq, after),
                        tg_alloc(&b[3], wk, after), tg_alloc(&b[4], wk, after), tg_alloc(&b[5], wq, after),
                        tg_alloc(&b[6], wq, after), tg_alloc(&b[7], wk, after), tg_alloc(&b[8], wk, after), -1, -1};
      int sig =
          g.out && g.lse && g.q && g.k && g.v && g.dout && g.dq && g.dk && g.dv ? tg_run(guarded_attn_run, &g) : -1;
      if (sig == 0 && (g.rc_forward != TITANS_OK || g.rc_backward != TITANS_OK)) errors++;
      if (sig != 0 && faults++ == 0)
        snprintf(first, sizeof(first), " (first: Tq %zu, P %zu, Tk %zu, H %zu, d_a %zu, guard %s, %s)", Tq, P, Tk, H,
                 d_a, after ? "before" : "after", sig < 0 ? "mmap failed" : "fault");
      for (int j = 0; j < 9; j++) tg_free(&b[j]);
      free(qpos);
      free(kpos);
    }
#ifdef _OPENMP
  omp_set_num_threads(saved_threads);
#endif
  th_check(faults == 0 && errors == 0,
           "guard pages: %d forward + backward calls with every array against an unmapped page, %d read or wrote "
           "outside them, %d returned an error%s",
           calls, faults, errors, first);
}
#endif

int main(void) {
  titans_rng_seed(&rng, 20250101);
  test_forward_backward_reference();
  test_empty_rows();
  test_finite_differences();
  test_rope();
  test_rope_shift_invariance();
  test_prefix_only();
  test_extreme_positions();
  test_causality();
  test_kv_cache();
  test_threads();
  test_errors();
#ifdef TG_HAVE_GUARD_PAGES
  test_guard_pages();
#else
  printf("  (no mmap here: the guard-page check is skipped)\n");
#endif
  return th_summary("test_attn");
}
