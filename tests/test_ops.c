/* Tests of the kernels of section 3 of titans.h: the vectorised exp against double exp, every SIMD
   kernel against its scalar reference over odd sizes, every backward against central finite
   differences of a forward written here in double, the conv against a naive loop and in streaming
   pieces, cross-entropy stability, AdamW against values computed by hand, and thread independence;
   first, the allocator's alignment. */
#include <float.h>
#include <stdlib.h>
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "harness.h"
#include "reference_kernels.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

static titans_rng rng;

static float *alloc_f(size_t n) { return (float *)calloc(n ? n : 1, sizeof(float)); }
static double *alloc_d(size_t n) { return (double *)calloc(n ? n : 1, sizeof(double)); }

static float *uniform(size_t n, float lo, float hi) {
  float *x = alloc_f(n);
  for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * titans_rng_uniform(&rng);
  return x;
}

static float *copy_f(const float *x, size_t n) {
  float *y = alloc_f(n);
  if (n) memcpy(y, x, n * sizeof(float));
  return y;
}

static double *to_d(const float *x, size_t n) {
  double *y = alloc_d(n);
  for (size_t i = 0; i < n; i++) y[i] = x[i];
  return y;
}

/* max_i |a_i - b_i| / max(floor, |b_i|) in double; NaN gives INFINITY */
static double max_rel_d(const double *a, const double *b, size_t n, double floor) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) {
    double s = fabs(b[i]) > floor ? fabs(b[i]) : floor, d = fabs(a[i] - b[i]) / s;
    if (d != d) return INFINITY;
    if (d > m) m = d;
  }
  return m;
}

/* (after - before) in double: what a backward kernel accumulated */
static double *accumulated(const float *after, const float *before, size_t n) {
  double *y = alloc_d(n);
  for (size_t i = 0; i < n; i++) y[i] = (double)after[i] - (double)before[i];
  return y;
}

/* Error of got in units in the last place of the float nearest to exact (subnormal ulp below
   FLT_MIN). Where exact rounds to +-Inf in float, only that Inf counts as right. */
static double ulp_err(float got, double exact) {
  if (exact != exact) return got != got ? 0.0 : INFINITY;
  if (isinf((float)exact)) return got == (float)exact ? 0.0 : INFINITY;
  if (got != got || isinf(got)) return INFINITY;
  int e = 0;
  if (exact != 0.0) frexp(exact, &e);
  double ulp = ldexp(1.0, exact == 0.0 || e - 24 < -149 ? -149 : e - 24);
  return fabs((double)got - exact) / ulp;
}

/* the vector exp over an array: full vectors, then the scalar fallback for the tail */
static void vexp_array(float *y, const float *x, size_t n) {
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) titans__vstore(y + i, titans__vexp(titans__vload(x + i)));
  for (; i < n; i++) y[i] = titans__expf(x[i]);
}

static const size_t sizes[] = {0, 1, 2, 7, 15, 16, 17, 31, 33, 100, 1000, 4099, 200003};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* ---- exp -------------------------------------------------------------------------------------- */

/* Max ulp error of y = exp(x) over x [n] against double exp; also the max relative error where the
   result is a normal float. */
static void exp_errors(const float *x, const float *y, size_t n, double *ulp, double *rel) {
  *ulp = 0.0, *rel = 0.0;
  for (size_t i = 0; i < n; i++) {
    double ex = exp((double)x[i]), u = ulp_err(y[i], ex);
    if (u > *ulp) *ulp = u;
    if (ex >= FLT_MIN && ex <= FLT_MAX) {
      double r = fabs((double)y[i] - ex) / ex;
      if (r > *rel) *rel = r;
    }
  }
}

static void test_exp(void) {
  printf("exp (vector titans__vexp, width %d, and scalar titans__expf) against double exp\n", TITANS__VW);
  /* a dense grid over [-110, 95] (every float result from 0 through the subnormals to +Inf), then
     random points in [-100, 100] */
  size_t ng = 1u << 21, nr = 1u << 18, n = ng + nr;
  float *x = alloc_f(n), *yv = alloc_f(n), *ys = alloc_f(n);
  for (size_t i = 0; i < ng; i++) x[i] = (float)(-110.0 + 205.0 * (double)i / (double)ng);
  for (size_t i = 0; i < nr; i++) x[ng + i] = -100.0f + 200.0f * titans_rng_uniform(&rng);
  vexp_array(yv, x, n);
  for (size_t i = 0; i < n; i++) ys[i] = titans__expf(x[i]);
  double ulp, rel;
  /* Tolerances: the polynomial is well below 1 ulp from exp(r); the reduction, Horner steps and final
     scaling round a few times, so 2 ulp leaves margin for the rounding of an x86, NEON or scalar path. */
  exp_errors(x, yv, n, &ulp, &rel);
  th_close("vexp max ulp over [-110, 95] (subnormal results in subnormal ulps)", ulp, 2.0);
  th_close("vexp max relative error where exp(x) is a normal float", rel, 2.5e-7);
  exp_errors(x, ys, n, &ulp, &rel);
  th_close("expf (scalar) max ulp over [-110, 95]", ulp, 2.0);
  th_close("expf (scalar) max relative error where exp(x) is a normal float", rel, 2.5e-7);
  /* the two forms are one function: a vector lane has the scalar's bits (the attention relies on it;
     n is a multiple of every vector width, so every yv came from a vector lane) */
  size_t differ = 0;
  for (size_t i = 0; i < n; i++) differ += memcmp(&yv[i], &ys[i], sizeof(float)) != 0;
  th_check(differ == 0, "vector lanes and scalar expf give the same bits (%zu of %zu differ)", differ, n);

  /* special values: each must come out exactly */
  const float sx[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 88.72283f, 88.72284f, 89.0f, 1e30f, -1e30f,
                      -103.0f, -103.972f, -104.0f, -200.0f, 1e-30f, -1e-30f};
  size_t ns = sizeof sx / sizeof sx[0], bad = 0;
  float *in = alloc_f(ns + TITANS__VW), *out = alloc_f(ns + TITANS__VW);
  memcpy(in, sx, sizeof sx);
  for (size_t k = 0; k < 2; k++) { /* k = 0: vector path (padded array); k = 1: scalar fallback */
    if (k == 0) vexp_array(out, in, titans__ops_ceil_div(ns, TITANS__VW) * TITANS__VW);
    for (size_t i = 0; i < ns; i++) {
      float got = k == 0 ? out[i] : titans__expf(in[i]);
      double u = ulp_err(got, exp((double)in[i]));
      if (!(u <= 2.0)) {
        printf("    x = %g: got %g, exp = %g (%g ulp)\n", (double)in[i], (double)got, exp((double)in[i]), u);
        bad++;
      }
    }
  }
  th_check(bad == 0, "exp(+Inf) = +Inf, exp(-Inf) = 0, NaN -> NaN, overflow/underflow edges (%zu wrong)", bad);
  free(in), free(out), free(x), free(yv), free(ys);
}

/* ---- activations: accuracy against double ----------------------------------------------------- */

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu_d(double x) { return x * sigmoid_d(x); }

static void test_activation_accuracy(void) {
  printf("activations against double (grid over [-30, 30] plus large and special inputs)\n");
  size_t n = 1u << 20;
  float *x = alloc_f(n + 8), *y = alloc_f(n + 8);
  for (size_t i = 0; i < n; i++) x[i] = (float)(-30.0 + 60.0 * (double)i / (double)n);
  const float extra[] = {-100.0f, 100.0f, -1e-30f, 1e-30f, 0.5499999f, 0.55f, -0.55f, 0.0f};
  memcpy(x + n, extra, sizeof extra);
  n += 8;
  double mu = 0.0;
  /* Tolerances (ulp of the double result): sigmoid and tanh are a 2-ulp exp followed by one add and
     one divide (+1 ulp each); SiLU adds one multiply. */
  titans_sigmoid_forward(y, x, n);
  for (size_t i = 0; i < n; i++) mu = fmax(mu, ulp_err(y[i], sigmoid_d(x[i])));
  th_close("sigmoid max ulp", mu, 4.0);
  mu = 0.0;
  titans_silu_forward(y, x, n);
  for (size_t i = 0; i < n; i++)
    if (fabs(silu_d(x[i])) >= FLT_MIN) mu = fmax(mu, ulp_err(y[i], silu_d(x[i])));
  th_close("SiLU max ulp (normal results: below -87 sigma is subnormal and x sigma loses bits)", mu, 5.0);
  mu = 0.0;
  titans_tanh_forward(y, x, n);
  for (size_t i = 0; i < n; i++) mu = fmax(mu, ulp_err(y[i], tanh((double)x[i])));
  th_close("tanh max ulp (polynomial below |x| = 0.55, exp formula above)", mu, 4.0);

  const float sx[] = {INFINITY, -INFINITY, NAN, -0.0f};
  float so[3][4];
  titans_sigmoid_forward(so[0], sx, 4);
  titans_tanh_forward(so[1], sx, 4);
  titans_silu_forward(so[2], sx, 4);
  th_check(so[0][0] == 1.0f && so[0][1] == 0.0f && isnan(so[0][2]) && so[0][3] == 0.5f,
           "sigmoid(+Inf, -Inf, NaN, -0) = (%g, %g, %g, %g)", so[0][0], so[0][1], so[0][2], so[0][3]);
  th_check(so[1][0] == 1.0f && so[1][1] == -1.0f && isnan(so[1][2]) && so[1][3] == 0.0f && signbit(so[1][3]),
           "tanh(+Inf, -Inf, NaN, -0) = (%g, %g, %g, %g)", so[1][0], so[1][1], so[1][2], so[1][3]);
  th_check(so[2][0] == INFINITY && isnan(so[2][2]), "SiLU(+Inf) = %g, SiLU(NaN) = %g", so[2][0], so[2][2]);
  free(x), free(y);
}

/* ---- elementwise: SIMD kernels against the scalar references ---------------------------------- */

typedef void (*fwd_fn)(float *, const float *, size_t);
typedef void (*bwd_fn)(float *, const float *, const float *, size_t);

static void test_elementwise_vs_ref(void) {
  printf("elementwise kernels against their scalar references (n = 0 .. 200003)\n");
  const char *names[3] = {"SiLU", "sigmoid", "tanh"};
  fwd_fn fast_f[3] = {titans_silu_forward, titans_sigmoid_forward, titans_tanh_forward};
  fwd_fn ref_f[3] = {titans__silu_forward_ref, titans__sigmoid_forward_ref, titans__tanh_forward_ref};
  bwd_fn fast_b[3] = {titans_silu_backward, titans_sigmoid_backward, titans_tanh_backward};
  bwd_fn ref_b[3] = {titans__silu_backward_ref, titans__sigmoid_backward_ref, titans__tanh_backward_ref};
  for (int k = 0; k < 3; k++) {
    double df = 0.0, db = 0.0, dalias = 0.0;
    for (size_t si = 0; si < NSIZES; si++) {
      size_t n = sizes[si];
      float *x = uniform(n, -20.0f, 20.0f), *g = uniform(n, -1.0f, 1.0f), *d0 = uniform(n, -1.0f, 1.0f);
      if (n > 3) x[0] = 0.0f, x[1] = -100.0f, x[2] = 100.0f; /* edges inside vectors */
      float *yf = alloc_f(n), *yr = alloc_f(n), *df_ = copy_f(d0, n), *dr = copy_f(d0, n), *al = copy_f(x, n);
      fast_f[k](yf, x, n);
      ref_f[k](yr, x, n);
      fast_f[k](al, al, n); /* in place */
      /* the backward of SiLU reads the input, the others the output */
      const float *saved = k == 0 ? x : yr;
      fast_b[k](df_, g, saved, n);
      ref_b[k](dr, g, saved, n);
      df = fmax(df, th_max_rel_diff(yf, yr, n, 1e-30));
      db = fmax(db, th_max_abs_diff(df_, dr, n));
      dalias = fmax(dalias, th_max_abs_diff(al, yf, n));
      free(x), free(g), free(d0), free(yf), free(yr), free(df_), free(dr), free(al);
    }
    char what[128];
    /* Forward: both are within a few ulp of the truth (libm's expf/tanhf about 1 ulp, ours 4-5), so
       they may differ by up to about 8 ulp = 1e-6 relative. Backward: |dinp| <= 2, derivatives are
       within a few ulp, so 1e-6 absolute. */
    snprintf(what, sizeof what, "%s forward, fast vs reference (relative)", names[k]);
    th_close(what, df, 1e-6);
    snprintf(what, sizeof what, "%s backward (dinp += ...), fast vs reference (absolute)", names[k]);
    th_close(what, db, 1e-6);
    snprintf(what, sizeof what, "%s forward in place (out == inp) vs out of place", names[k]);
    th_close(what, dalias, 0.0);
  }
}

/* ---- row kernels: SIMD against the scalar references ------------------------------------------ */

static const size_t shapes[][2] = {{0, 5}, {4, 0}, {1, 1}, {3, 7}, {3, 15}, {2, 16}, {5, 17}, {4, 100},
                                   {3, 1000}, {260, 257}, {1, 70000}};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

/* max relative error of softmax rows y against softmax of x computed in double */
static double softmax_err_d(const float *y, const float *x, size_t rows, size_t cols) {
  double m = 0.0;
  for (size_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    double mx = xr[0], s = 0.0;
    for (size_t j = 0; j < cols; j++) mx = fmax(mx, xr[j]);
    for (size_t j = 0; j < cols; j++) s += exp(xr[j] - mx);
    for (size_t j = 0; j < cols; j++) {
      double want = exp(xr[j] - mx) / s;
      m = fmax(m, fabs(y[r * cols + j] - want) / want);
    }
  }
  return m;
}

static void test_rows_vs_ref(void) {
  printf("row kernels (softmax, RMSNorm, L2Norm) against their scalar references\n");
  double e[9] = {0};
  for (size_t si = 0; si < NSHAPES; si++) {
    size_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
    float *x = uniform(n, -3.0f, 3.0f), *g = uniform(n, -1.0f, 1.0f), *gain = uniform(cols, 0.5f, 1.5f);
    float *d0 = uniform(n, -1.0f, 1.0f), *dg0 = uniform(cols, -1.0f, 1.0f);
    float *yf = alloc_f(n), *yr = alloc_f(n), *sf = alloc_f(rows), *sr = alloc_f(rows);
    float *df = copy_f(d0, n), *dr = copy_f(d0, n), *dgf = copy_f(dg0, cols), *dgr = copy_f(dg0, cols);
    titans_softmax_forward(yf, x, rows, cols);
    titans__softmax_forward_ref(yr, x, rows, cols);
    e[0] = fmax(e[0], th_max_rel_diff(yf, yr, n, 1e-30));
    e[8] = fmax(e[8], softmax_err_d(yf, x, rows, cols));
    titans_softmax_backward(df, g, yr, rows, cols);
    titans__softmax_backward_ref(dr, g, yr, rows, cols);
    e[1] = fmax(e[1], th_max_abs_diff(df, dr, n));

    titans_rmsnorm_forward(yf, sf, x, gain, rows, cols);
    titans__rmsnorm_forward_ref(yr, sr, x, gain, rows, cols);
    e[2] = fmax(e[2], th_max_rel_diff(yf, yr, n, 1e-3));
    e[3] = fmax(e[3], th_max_rel_diff(sf, sr, rows, 1e-30));
    memcpy(df, d0, n * sizeof(float)), memcpy(dr, d0, n * sizeof(float));
    titans_rmsnorm_backward(df, dgf, g, x, gain, sr, rows, cols);
    titans__rmsnorm_backward_ref(dr, dgr, g, x, gain, sr, rows, cols);
    e[4] = fmax(e[4], th_max_abs_diff(df, dr, n));
    e[5] = fmax(e[5], th_max_rel_diff(dgf, dgr, cols, 1.0));

    titans_l2norm_forward(yf, sf, x, rows, cols);
    titans__l2norm_forward_ref(yr, sr, x, rows, cols);
    e[6] = fmax(e[6], fmax(th_max_rel_diff(yf, yr, n, 1e-3), th_max_rel_diff(sf, sr, rows, 1e-30)));
    memcpy(df, d0, n * sizeof(float)), memcpy(dr, d0, n * sizeof(float));
    titans_l2norm_backward(df, g, x, sr, rows, cols);
    titans__l2norm_backward_ref(dr, g, x, sr, rows, cols);
    e[7] = fmax(e[7], th_max_abs_diff(df, dr, n));
    free(x), free(g), free(gain), free(d0), free(dg0), free(yf), free(yr), free(sf), free(sr);
    free(df), free(dr), free(dgf), free(dgr);
  }
  /* Tolerances: the fast kernels sum in vector lanes, the references left to right; sums of up to
     70000 terms of size <= 9 differ by ~1e-7 relative per ulp of the sum, times sqrt(cols) or so at
     worst. Softmax outputs are ratios of a 2-ulp exp; backward terms are O(1) with a dot of O(cols)
     terms, hence the absolute 1e-5 there. */
  th_close("softmax forward vs double (relative)", e[8], 1e-6);
  /* the reference sums 70000 exps left to right in float: its own error reaches ~1e-5 there */
  th_close("softmax forward vs reference (relative)", e[0], 3e-5);
  th_close("softmax backward (absolute)", e[1], 1e-5);
  th_close("RMSNorm forward out (relative, floor 1e-3)", e[2], 1e-5);
  th_close("RMSNorm forward rstd (relative)", e[3], 1e-5);
  th_close("RMSNorm backward dinp (absolute)", e[4], 1e-5);
  th_close("RMSNorm backward dgain (relative, floor 1; sums over 260 rows)", e[5], 1e-5);
  th_close("L2Norm forward out and rnorm (relative)", e[6], 1e-5);
  th_close("L2Norm backward dinp (absolute)", e[7], 1e-5);

  /* softmax edge rows: all -Inf gives zeros, a NaN makes the row NaN, huge values stay finite */
  float ed[3][5] = {{-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY},
                    {1.0f, NAN, 2.0f, 3.0f, 4.0f},
                    {3e38f, -3e38f, 3e38f, 0.0f, 1e38f}};
  float eo[3][5];
  titans_softmax_forward(&eo[0][0], &ed[0][0], 3, 5);
  int zeros = 1, nans = 1;
  for (int j = 0; j < 5; j++) zeros &= eo[0][j] == 0.0f, nans &= isnan(eo[1][j]);
  th_check(zeros, "softmax of an all -Inf row is zeros");
  th_check(nans, "softmax of a row with a NaN is NaN");
  th_check(eo[2][0] == 0.5f && eo[2][2] == 0.5f && eo[2][1] == 0.0f && eo[2][3] == 0.0f,
           "softmax of (3e38, -3e38, 3e38, 0, 1e38) = (%g, %g, %g, %g, %g)", eo[2][0], eo[2][1], eo[2][2], eo[2][3],
           eo[2][4]);
}

/* ---- finite differences ------------------------------------------------------------------------
   The forward of each op is written again here in double, straight from docs/model.md section 0, and the loss
   L = sum(dout * f(inputs)) is differentiated by central differences with step h = 1e-4: the
   truncation error h^2 f''' / 6 is ~1e-9 for these O(1) functions and the cancellation error
   1e-16 |L| / h ~1e-11, so the FD gradients are good to ~1e-8, far below the float kernels' own
   rounding (~1e-6). The float backward (what it accumulated onto a random starting gradient) must
   match within 2e-5 relative (floor 0.1: absolute 2e-6 for small entries). */

#define FD_H 1e-4
#define FD_TOL 2e-5
#define FD_FLOOR 0.1

typedef struct fd_ctx {
  double *x, *w, *tail, *dout; /* inputs being perturbed or read; see each loss */
  const int *tok;
  size_t rows, cols, T, C, K;
  int op;
  double scale;
} fd_ctx;

typedef double (*loss_fn)(fd_ctx *c);

static void fd_grad(double *grad, double *x, size_t n, loss_fn loss, fd_ctx *c) {
  for (size_t i = 0; i < n; i++) {
    double x0 = x[i];
    x[i] = x0 + FD_H;
    double lp = loss(c);
    x[i] = x0 - FD_H;
    double lm = loss(c);
    x[i] = x0;
    grad[i] = (lp - lm) / (2.0 * FD_H);
  }
}

static void fd_compare(const char *what, const float *after, const float *before, const double *fd, size_t n) {
  double *got = accumulated(after, before, n);
  char msg[160];
  snprintf(msg, sizeof msg, "%s vs central differences (%zu values)", what, n);
  th_close(msg, max_rel_d(got, fd, n, FD_FLOOR), FD_TOL);
  free(got);
}

/* op 0 SiLU, 1 sigmoid, 2 tanh over x [rows * cols] */
static double loss_act(fd_ctx *c) {
  double L = 0.0;
  for (size_t i = 0; i < c->rows * c->cols; i++) {
    double x = c->x[i], y = c->op == 0 ? silu_d(x) : c->op == 1 ? sigmoid_d(x) : tanh(x);
    L += c->dout[i] * y;
  }
  return L;
}

static double loss_softmax(fd_ctx *c) {
  double L = 0.0;
  for (size_t r = 0; r < c->rows; r++) {
    const double *x = c->x + r * c->cols;
    double mx = x[0], s = 0.0;
    for (size_t j = 0; j < c->cols; j++) mx = fmax(mx, x[j]);
    for (size_t j = 0; j < c->cols; j++) s += exp(x[j] - mx);
    for (size_t j = 0; j < c->cols; j++) L += c->dout[r * c->cols + j] * exp(x[j] - mx) / s;
  }
  return L;
}

/* RMSNorm (w = gain) when op == 0, L2Norm when op == 1 */
static double loss_norm(fd_ctx *c) {
  double L = 0.0;
  for (size_t r = 0; r < c->rows; r++) {
    const double *x = c->x + r * c->cols;
    double ss = 0.0;
    for (size_t j = 0; j < c->cols; j++) ss += x[j] * x[j];
    double s = c->op == 0 ? 1.0 / sqrt(ss / (double)c->cols + 1e-6) : 1.0 / sqrt(ss + 1e-6);
    for (size_t j = 0; j < c->cols; j++) L += c->dout[r * c->cols + j] * x[j] * s * (c->op == 0 ? c->w[j] : 1.0);
  }
  return L;
}

/* naive causal depthwise conv in double, docs/model.md section 0: out_t[j] = sum_s w[j, s] u_{t-K+1+s}[j] */
static void conv_d(double *out, const double *x, const double *tail, const double *w, size_t T, size_t C, size_t K) {
  for (size_t t = 0; t < T; t++)
    for (size_t j = 0; j < C; j++) {
      double acc = 0.0;
      for (size_t s = 0; s < K; s++) {
        long tau = (long)t - (long)K + 1 + (long)s;
        double u = tau >= 0 ? x[(size_t)tau * C + j] : tail ? tail[(size_t)((long)K - 1 + tau) * C + j] : 0.0;
        acc += w[j * K + s] * u;
      }
      out[t * C + j] = acc;
    }
}

static double loss_conv(fd_ctx *c) {
  double *y = alloc_d(c->T * c->C), L = 0.0;
  conv_d(y, c->x, c->tail, c->w, c->T, c->C, c->K);
  for (size_t i = 0; i < c->T * c->C; i++) L += c->dout[i] * y[i];
  free(y);
  return L;
}

/* scale * mean over counted rows of (logsumexp(x) - x[target]) */
static double loss_ce(fd_ctx *c) {
  double total = 0.0;
  size_t count = 0;
  for (size_t r = 0; r < c->rows; r++) {
    if (c->tok[r] < 0) continue;
    const double *x = c->x + r * c->cols;
    double mx = x[0], s = 0.0;
    for (size_t j = 0; j < c->cols; j++) mx = fmax(mx, x[j]);
    for (size_t j = 0; j < c->cols; j++) s += exp(x[j] - mx);
    total += mx + log(s) - x[c->tok[r]];
    count++;
  }
  return count ? c->scale * total / (double)count : 0.0;
}

static void test_fd_activations(void) {
  printf("activation backward kernels against finite differences\n");
  const char *names[3] = {"SiLU backward", "sigmoid backward (from the output)", "tanh backward (from the output)"};
  fwd_fn fwd[3] = {titans_silu_forward, titans_sigmoid_forward, titans_tanh_forward};
  bwd_fn bwd[3] = {titans_silu_backward, titans_sigmoid_backward, titans_tanh_backward};
  size_t n = 37;
  for (int k = 0; k < 3; k++) {
    float *x = uniform(n, -6.0f, 6.0f), *g = uniform(n, -1.0f, 1.0f), *d0 = uniform(n, -1.0f, 1.0f);
    float *y = alloc_f(n), *d = copy_f(d0, n);
    fwd[k](y, x, n);
    bwd[k](d, g, k == 0 ? x : y, n);
    fd_ctx c = {0};
    c.x = to_d(x, n), c.dout = to_d(g, n), c.rows = 1, c.cols = n, c.op = k;
    double *fd = alloc_d(n);
    fd_grad(fd, c.x, n, loss_act, &c);
    fd_compare(names[k], d, d0, fd, n);
    free(x), free(g), free(d0), free(y), free(d), free(c.x), free(c.dout), free(fd);
  }
}

static void test_fd_rows(void) {
  printf("softmax, RMSNorm, L2Norm backward against finite differences\n");
  size_t rows = 3, cols = 19, n = rows * cols;
  float *x = uniform(n, -2.0f, 2.0f), *g = uniform(n, -1.0f, 1.0f), *gain = uniform(cols, 0.5f, 1.5f);
  float *d0 = uniform(n, -1.0f, 1.0f), *dg0 = uniform(cols, -1.0f, 1.0f);
  float *y = alloc_f(n), *s = alloc_f(rows), *d = alloc_f(n), *dg = alloc_f(cols);
  double *fd = alloc_d(n), *fdw = alloc_d(cols);
  fd_ctx c = {0};
  c.x = to_d(x, n), c.w = to_d(gain, cols), c.dout = to_d(g, n), c.rows = rows, c.cols = cols;

  titans_softmax_forward(y, x, rows, cols);
  memcpy(d, d0, n * sizeof(float));
  titans_softmax_backward(d, g, y, rows, cols);
  fd_grad(fd, c.x, n, loss_softmax, &c);
  fd_compare("softmax backward dinp", d, d0, fd, n);

  c.op = 0;
  titans_rmsnorm_forward(y, s, x, gain, rows, cols);
  memcpy(d, d0, n * sizeof(float)), memcpy(dg, dg0, cols * sizeof(float));
  titans_rmsnorm_backward(d, dg, g, x, gain, s, rows, cols);
  fd_grad(fd, c.x, n, loss_norm, &c);
  fd_grad(fdw, c.w, cols, loss_norm, &c);
  fd_compare("RMSNorm backward dinp", d, d0, fd, n);
  fd_compare("RMSNorm backward dgain", dg, dg0, fdw, cols);
  float *d2 = copy_f(d0, n);
  titans_rmsnorm_backward(d2, NULL, g, x, gain, s, rows, cols);
  th_close("RMSNorm backward with dgain = NULL: same dinp", th_max_abs_diff(d2, d, n), 0.0);
  free(d2);

  c.op = 1;
  titans_l2norm_forward(y, s, x, rows, cols);
  memcpy(d, d0, n * sizeof(float));
  titans_l2norm_backward(d, g, x, s, rows, cols);
  fd_grad(fd, c.x, n, loss_norm, &c);
  fd_compare("L2Norm backward dinp", d, d0, fd, n);

  /* the forwards against the same double formulas */
  double *yd = alloc_d(n);
  for (size_t r = 0; r < rows; r++) {
    double ss = 0.0;
    for (size_t j = 0; j < cols; j++) ss += c.x[r * cols + j] * c.x[r * cols + j];
    for (size_t j = 0; j < cols; j++) yd[r * cols + j] = c.x[r * cols + j] / sqrt(ss / (double)cols + 1e-6) * c.w[j];
  }
  titans_rmsnorm_forward(y, s, x, gain, rows, cols);
  double *yg = to_d(y, n);
  th_close("RMSNorm forward vs double (relative, floor 1e-3)", max_rel_d(yg, yd, n, 1e-3), 1e-6);
  free(yg), free(yd);
  free(x), free(g), free(gain), free(d0), free(dg0), free(y), free(s), free(d), free(dg), free(fd), free(fdw);
  free(c.x), free(c.w), free(c.dout);
}

/* ---- conv ------------------------------------------------------------------------------------- */

static void test_conv(void) {
  printf("causal depthwise conv: naive loop, streaming, finite differences, reference\n");
  const size_t Ks[] = {1, 2, 4, 5}, Cs[] = {1, 3, 16, 17, 70, 130}, Ts[] = {1, 3, 40, 100};
  double e_naive = 0.0, e_ref = 0.0, e_bref = 0.0;
  for (size_t a = 0; a < 4; a++)
    for (size_t b = 0; b < 6; b++)
      for (size_t t = 0; t < 4; t++)
        for (int with_tail = 0; with_tail < 2; with_tail++) {
          size_t K = Ks[a], C = Cs[b], T = Ts[t], n = T * C;
          float *x = uniform(n, -1.0f, 1.0f), *w = uniform(C * K, -1.0f, 1.0f);
          float *tail = with_tail ? uniform((K - 1) * C, -1.0f, 1.0f) : NULL;
          float *y = alloc_f(n), *yr = alloc_f(n);
          titans_conv_forward(y, x, tail, w, T, C, K);
          titans__conv_forward_ref(yr, x, tail, w, T, C, K);
          double *xd = to_d(x, n), *wd = to_d(w, C * K), *td = tail ? to_d(tail, (K - 1) * C) : NULL;
          double *yd = alloc_d(n), *yg = to_d(y, n);
          conv_d(yd, xd, td, wd, T, C, K);
          e_naive = fmax(e_naive, max_rel_d(yg, yd, n, 1.0));
          e_ref = fmax(e_ref, th_max_abs_diff(y, yr, n));
          /* backward against the scalar reference */
          float *g = uniform(n, -1.0f, 1.0f), *di = uniform(n, -1.0f, 1.0f), *dw = uniform(C * K, -1.0f, 1.0f);
          float *dir = copy_f(di, n), *dwr = copy_f(dw, C * K);
          titans_conv_backward(di, dw, g, x, tail, w, T, C, K);
          titans__conv_backward_ref(dir, dwr, g, x, tail, w, T, C, K);
          e_bref = fmax(e_bref, fmax(th_max_rel_diff(di, dir, n, 1.0), th_max_rel_diff(dw, dwr, C * K, 1.0)));
          free(x), free(w), free(tail), free(y), free(yr), free(xd), free(wd), free(td), free(yd), free(yg);
          free(g), free(di), free(dw), free(dir), free(dwr);
        }
  /* sums of K <= 5 products of terms <= 1: a few float roundings; the backward sums over T <= 100 */
  th_close("conv forward vs naive double loop (K = 1, 2, 4, 5; C up to 130; T up to 100; tail or zeros)",
           e_naive, 1e-6);
  th_close("conv forward vs scalar reference (absolute)", e_ref, 1e-6);
  th_close("conv backward dinp, dweight vs scalar reference (relative, floor 1)", e_bref, 1e-5);

  /* Streaming: conv over [a; b] equals conv over a, then over b with the last K-1 rows of [tail; a]
     as b's tail. Same products in the same order, so bit-identical. Split points include ones
     shorter than K-1 (b's tail then mixes the first tail and a). */
  double e_stream = 0.0;
  const size_t C = 21, T = 13;
  for (size_t K = 1; K <= 5; K++)
    for (size_t split = 0; split <= T; split++) {
      float *x = uniform(T * C, -1.0f, 1.0f), *w = uniform(C * K, -1.0f, 1.0f);
      float *tail0 = uniform((K - 1) * C, -1.0f, 1.0f), *y = alloc_f(T * C), *ys = alloc_f(T * C);
      float *ext = alloc_f((K - 1 + T) * C); /* [tail0; x] */
      if (K > 1) memcpy(ext, tail0, (K - 1) * C * sizeof(float));
      memcpy(ext + (K - 1) * C, x, T * C * sizeof(float));
      titans_conv_forward(y, x, tail0, w, T, C, K);
      titans_conv_forward(ys, x, tail0, w, split, C, K);
      titans_conv_forward(ys + split * C, x + split * C, ext + split * C, w, T - split, C, K);
      e_stream = fmax(e_stream, th_max_abs_diff(y, ys, T * C));
      free(x), free(w), free(tail0), free(y), free(ys), free(ext);
    }
  th_close("conv streaming: [a; b] in one call vs a then b with a's last K-1 rows as tail (K = 1..5, every split)",
           e_stream, 0.0);

  /* finite differences for dinp and dweight, K = 1 and K = 4, with and without a tail */
  for (size_t K = 1; K <= 4; K += 3)
    for (int with_tail = 0; with_tail < 2; with_tail++) {
      size_t Tn = 6, Cn = 19, n = Tn * Cn;
      float *x = uniform(n, -1.0f, 1.0f), *w = uniform(Cn * K, -1.0f, 1.0f), *g = uniform(n, -1.0f, 1.0f);
      float *tail = with_tail ? uniform((K - 1) * Cn, -1.0f, 1.0f) : NULL; /* K = 1: a tail of 0 rows */
      float *d0 = uniform(n, -1.0f, 1.0f), *dw0 = uniform(Cn * K, -1.0f, 1.0f);
      float *d = copy_f(d0, n), *dw = copy_f(dw0, Cn * K);
      titans_conv_backward(d, dw, g, x, tail, w, Tn, Cn, K);
      fd_ctx c = {0};
      c.x = to_d(x, n), c.w = to_d(w, Cn * K), c.dout = to_d(g, n), c.tail = tail ? to_d(tail, (K - 1) * Cn) : NULL;
      c.T = Tn, c.C = Cn, c.K = K;
      double *fd = alloc_d(n), *fdw = alloc_d(Cn * K);
      fd_grad(fd, c.x, n, loss_conv, &c);
      fd_grad(fdw, c.w, Cn * K, loss_conv, &c);
      char what[96];
      snprintf(what, sizeof what, "conv backward dinp (K = %zu, %s)", K, tail ? "tail" : "zeros");
      fd_compare(what, d, d0, fd, n);
      snprintf(what, sizeof what, "conv backward dweight (K = %zu, %s)", K, tail ? "tail" : "zeros");
      fd_compare(what, dw, dw0, fdw, Cn * K);
      float *d2 = copy_f(d0, n), *dw2 = copy_f(dw0, Cn * K);
      titans_conv_backward(d2, NULL, g, x, tail, w, Tn, Cn, K);
      titans_conv_backward(NULL, dw2, g, x, tail, w, Tn, Cn, K);
      snprintf(what, sizeof what, "conv backward with dweight = NULL, then dinp = NULL: same results (K = %zu)", K);
      th_close(what, fmax(th_max_abs_diff(d2, d, n), th_max_abs_diff(dw2, dw, Cn * K)), 0.0);
      free(d2), free(dw2);
      free(x), free(w), free(g), free(tail), free(d0), free(dw0), free(d), free(dw), free(fd), free(fdw);
      free(c.x), free(c.w), free(c.dout), free(c.tail);
    }

  /* K = 0 is an empty sum */
  float x0[6] = {1, 2, 3, 4, 5, 6}, y0[6] = {9, 9, 9, 9, 9, 9};
  titans_conv_forward(y0, x0, NULL, NULL, 3, 2, 0);
  th_check(y0[0] == 0.0f && y0[5] == 0.0f, "conv with K = 0 writes zeros");
}

/* ---- embedding -------------------------------------------------------------------------------- */

static void test_embedding(void) {
  printf("embedding forward and backward\n");
  size_t vocab = 11, d = 37, n = 25;
  int tok[25];
  for (size_t i = 0; i < n; i++) tok[i] = (int)(titans_rng_u64(&rng) % vocab);
  tok[3] = tok[7] = tok[20] = 5; /* repeated tokens add up */
  float *table = uniform(vocab * d, -1.0f, 1.0f), *out = alloc_f(n * d), *g = uniform(n * d, -1.0f, 1.0f);
  int rc = titans_embedding_forward(out, tok, table, n, vocab, d);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += memcmp(out + i * d, table + (size_t)tok[i] * d, d * sizeof(float)) != 0;
  th_check(rc == TITANS_OK && bad == 0, "forward copies the rows (%zu rows wrong)", bad);

  for (size_t i = 0; i < n * d; i++) out[i] = 7.0f;
  int badtok[3] = {1, (int)vocab, 2}, negtok[2] = {0, -1};
  int rc1 = titans_embedding_forward(out, badtok, table, 3, vocab, d);
  int rc2 = titans_embedding_forward(out, negtok, table, 2, vocab, d);
  int untouched = 1;
  for (size_t i = 0; i < n * d; i++) untouched &= out[i] == 7.0f;
  th_check(rc1 == TITANS_ERR_ARG && rc2 == TITANS_ERR_ARG && untouched,
           "token == vocab and token < 0 give TITANS_ERR_ARG and write nothing");

  /* backward: FD of L = sum(dout * table[tok]) is exact (linear), so compare to the sum in double */
  float *dt0 = uniform(vocab * d, -1.0f, 1.0f), *dt = copy_f(dt0, vocab * d);
  titans_embedding_backward(dt, g, tok, n, d);
  double *want = alloc_d(vocab * d);
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < d; j++) want[(size_t)tok[i] * d + j] += g[i * d + j];
  double *got = accumulated(dt, dt0, vocab * d);
  th_close("backward accumulates dout rows into dtable (repeated tokens), vs double",
           max_rel_d(got, want, vocab * d, 1.0), 1e-6);
  int neg[2] = {-1, 2};
  float *dt2 = copy_f(dt, vocab * d);
  titans_embedding_backward(dt2, g, neg, 2, d);
  int ok = 1;
  for (size_t j = 0; j < vocab * d; j++) ok &= (j / d == 2) ? dt2[j] == dt[j] + g[d + j % d] : dt2[j] == dt[j];
  th_check(ok, "backward skips negative tokens");
  free(table), free(out), free(g), free(dt0), free(dt), free(want), free(got), free(dt2);
}

/* ---- cross-entropy ---------------------------------------------------------------------------- */

static void test_cross_entropy(void) {
  printf("cross-entropy\n");
  size_t n = 5, V = 19;
  int tgt[5] = {3, -1, 18, 0, -7};
  float *x = uniform(n * V, -3.0f, 3.0f), *dl = uniform(n * V, -1.0f, 1.0f), *dr = alloc_f(n * V);
  float scale = 0.7f;
  float loss = titans_cross_entropy(dl, x, tgt, n, V, scale);
  float loss_r = titans__cross_entropy_ref(dr, x, tgt, n, V, scale);
  fd_ctx c = {0};
  c.x = to_d(x, n * V), c.tok = tgt, c.rows = n, c.cols = V, c.scale = 1.0;
  double want = loss_ce(&c);
  th_close("loss vs double (3 of 5 targets counted; relative)", fabs(loss - want) / want, 1e-6);
  th_close("loss vs scalar reference (relative)", fabs(loss - loss_r) / want, 1e-6);
  c.scale = scale;
  double *fd = alloc_d(n * V), *got = to_d(dl, n * V);
  fd_grad(fd, c.x, n * V, loss_ce, &c);
  th_close("dlogits = scale * (softmax - onehot) / count vs central differences", max_rel_d(got, fd, n * V, FD_FLOOR),
           FD_TOL);
  int ign = 1;
  for (size_t j = 0; j < V; j++) ign &= dl[V + j] == 0.0f && dl[4 * V + j] == 0.0f;
  th_check(ign, "ignored rows (targets -1, -7) get zero gradient");
  th_close("dlogits vs scalar reference", th_max_abs_diff(dl, dr, n * V), 1e-7);
  float loss_only = titans_cross_entropy(NULL, x, tgt, n, V, scale);
  th_check(loss_only == loss, "dlogits = NULL gives the same loss (%.9g vs %.9g)", loss_only, loss);

  /* stability: logits around 1e4 (their exp overflows float); the loss is shift invariant, so it must
     equal the loss of the logits minus 1e4 computed in double. ulp(1e4) = 1e-3 limits the match. */
  for (size_t i = 0; i < n * V; i++) x[i] = 1e4f + (float)(i % 7) - 3.0f * (float)(i % 3);
  loss = titans_cross_entropy(dl, x, tgt, n, V, 1.0f);
  free(c.x);
  c.x = to_d(x, n * V), c.scale = 1.0;
  want = loss_ce(&c);
  th_check(isfinite(loss) && th_all_finite(dl, n * V), "logits ~ 1e4: loss %.7g and gradients finite", loss);
  th_close("logits ~ 1e4: loss vs double (relative)", fabs(loss - want) / want, 1e-6);
  x[0] = 3e38f, x[1] = -3e38f;
  loss = titans_cross_entropy(dl, x, tgt, 1, V, 1.0f);
  th_check(loss == (float)(3e38f - x[3]), "logits +-3e38 in a row: loss %g = max - target logit, no NaN", loss);

  /* every target ignored: loss 0, gradient 0; a target >= V: NaN and nothing written */
  int none[5] = {-1, -1, -1, -1, -1}, bad[5] = {0, 1, 19, 2, 3};
  for (size_t i = 0; i < n * V; i++) dl[i] = 5.0f;
  loss = titans_cross_entropy(dl, x, none, n, V, 1.0f);
  int zero = 1;
  for (size_t i = 0; i < n * V; i++) zero &= dl[i] == 0.0f;
  th_check(loss == 0.0f && zero, "all targets ignored: loss %g, gradient zero", loss);
  for (size_t i = 0; i < n * V; i++) dl[i] = 5.0f;
  loss = titans_cross_entropy(dl, x, bad, n, V, 1.0f);
  int untouched = 1;
  for (size_t i = 0; i < n * V; i++) untouched &= dl[i] == 5.0f;
  th_check(isnan(loss) && untouched, "a target == V returns NaN and writes nothing");

  /* a large case (threaded) against the reference */
  size_t n2 = 300, V2 = 517;
  int *t2 = (int *)malloc(n2 * sizeof(int));
  for (size_t i = 0; i < n2; i++) t2[i] = i % 9 == 4 ? -1 : (int)(titans_rng_u64(&rng) % V2);
  float *x2 = uniform(n2 * V2, -8.0f, 8.0f), *d2 = alloc_f(n2 * V2), *d2r = alloc_f(n2 * V2);
  float l2 = titans_cross_entropy(d2, x2, t2, n2, V2, 1.0f), l2r = titans__cross_entropy_ref(d2r, x2, t2, n2, V2, 1.0f);
  th_close("300 x 517: loss vs reference (relative)", fabs(l2 - l2r) / l2r, 1e-6);
  th_close("300 x 517: dlogits vs reference (absolute; entries <= 1/267)", th_max_abs_diff(d2, d2r, n2 * V2), 1e-8);
  free(x), free(dl), free(dr), free(c.x), free(fd), free(got), free(t2), free(x2), free(d2), free(d2r);
}

/* ---- AdamW ------------------------------------------------------------------------------------ */

static void test_adamw(void) {
  printf("AdamW\n");
  /* one element by hand: p = 1, g = 0.5, lr 0.1, betas (0.9, 0.999), eps 1e-8, wd 0.01, step 1:
     m = 0.05, v = 0.00025, mhat = 0.5, vhat = 0.25, p = 1 - 0.1 (0.5 / (0.5 + 1e-8) + 0.01 * 1)
       = 0.899000002 */
  float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
  const titans_adamw_arrays one = {&p, &g, &m, &v, 1};
  titans_adamw_update(&one, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
  th_close("one element, step 1, by hand: p = 0.899000002", fabs((double)p - 0.899000002), 1e-7);
  /* the moments use the float betas: 1 - 0.9f = 0.100000024, 1 - 0.999f = 0.00099998713 */
  double m_hand = 0.5 * (1.0 - (double)0.9f), v_hand = 0.25 * (1.0 - (double)0.999f);
  th_close("one element, step 1, by hand: m = 0.5 (1 - 0.9f), v = 0.25 (1 - 0.999f) (relative)",
           fmax(fabs(m - m_hand) / m_hand, fabs(v - v_hand) / v_hand), 1.2e-7);
  /* two steps over odd sizes, against the formulas in double and against the scalar reference */
  const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  double e_hand = 0.0, e_ref = 0.0, e_mv = 0.0;
  for (size_t si = 0; si < NSIZES; si++) {
    size_t n = sizes[si];
    float *pf = uniform(n, -1.0f, 1.0f), *mf = alloc_f(n), *vf = alloc_f(n);
    float *pr = copy_f(pf, n), *mr = alloc_f(n), *vr = alloc_f(n);
    double *pd = to_d(pf, n), *md = alloc_d(n), *vd = alloc_d(n);
    for (long step = 1; step <= 2; step++) {
      float *gr = uniform(n, -1.0f, 1.0f);
      const titans_adamw_arrays a = {pf, gr, mf, vf, n};
      titans_adamw_update(&a, lr, b1, b2, eps, wd, step);
      titans__adamw_update_ref(pr, gr, mr, vr, n, lr, b1, b2, eps, wd, step);
      for (size_t i = 0; i < n; i++) {
        double gi = gr[i];
        md[i] = (double)b1 * md[i] + (1.0 - (double)b1) * gi;
        vd[i] = (double)b2 * vd[i] + (1.0 - (double)b2) * gi * gi;
        double mh = md[i] / (1.0 - pow(b1, (double)step)), vh = vd[i] / (1.0 - pow(b2, (double)step));
        pd[i] -= (double)lr * (mh / (sqrt(vh) + (double)eps) + (double)wd * pd[i]);
      }
      free(gr);
    }
    double *pg = to_d(pf, n);
    e_hand = fmax(e_hand, max_rel_d(pg, pd, n, 1e-2));
    e_ref = fmax(e_ref, th_max_rel_diff(pf, pr, n, 1e-2));
    e_mv = fmax(e_mv, fmax(th_max_abs_diff(mf, mr, n), th_max_abs_diff(vf, vr, n)));
    free(pf), free(mf), free(vf), free(pr), free(mr), free(vr), free(pd), free(md), free(vd), free(pg);
  }
  /* parameters of size ~1 move by ~lr: float holds them to 6e-8, a few roundings in the update */
  th_close("two steps vs the formulas in double (n = 0 .. 200003; relative, floor 1e-2)", e_hand, 3e-7);
  th_close("two steps vs scalar reference: param (relative, floor 1e-2)", e_ref, 3e-7);
  /* |m| <= 0.2, v <= 0.1: one rounding apart (fma vs multiply-add) is <= 1.5e-8 */
  th_close("two steps vs scalar reference: m and v (absolute)", e_mv, 3e-8);
}

/* ---- threads ---------------------------------------------------------------------------------- */

#ifdef _OPENMP
/* Every kernel on a large input with 1, 2 and 3 threads: results must be bit-identical. */
static void test_threads(void) {
  printf("thread independence (1, 2, 3 threads: bit-identical) and calls from inside a parallel region\n");
  int saved = omp_get_max_threads();
  size_t n = 300001, rows = 300, cols = 301, T = 257, C = 260, K = 4, V = 517, nt = 1400, d = 200;
  float *x = uniform(n, -5.0f, 5.0f), *g = uniform(n, -1.0f, 1.0f), *gain = uniform(cols, 0.5f, 1.5f);
  float *w = uniform(C * K, -1.0f, 1.0f), *tail = uniform((K - 1) * C, -1.0f, 1.0f);
  int *tok = (int *)malloc(nt * sizeof(int));
  for (size_t i = 0; i < nt; i++) tok[i] = (int)(titans_rng_u64(&rng) % 50) - (i % 17 == 0);
  /* outputs of every kernel, one slab per thread count, filled in order through a cursor */
  size_t slab = 3 * n + 5 * rows * cols + 2 * rows + cols + 2 * T * C + C * K + 50 * d + 1 + rows * V;
  float *res[3];
  for (int k = 0; k < 3; k++) {
    omp_set_num_threads(k + 1);
    float *r = res[k] = alloc_f(slab);
    float *silu = r, *dsilu = r + n, *par = r + 2 * n;
    r += 3 * n;
    titans_silu_forward(silu, x, n);
    titans_silu_backward(dsilu, g, x, n);
    memcpy(par, x, n * sizeof(float));
    float *mm = alloc_f(n), *vv = alloc_f(n);
    const titans_adamw_arrays a = {par, g, mm, vv, n};
    titans_adamw_update(&a, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
    free(mm), free(vv);
    float *sm = r, *dsm = r + rows * cols;
    r += 2 * rows * cols;
    titans_softmax_forward(sm, x, rows, cols);
    titans_softmax_backward(dsm, g, sm, rows, cols);
    float *rn = r, *rstd = r + rows * cols, *drn = rstd + rows, *dgain = drn + rows * cols;
    r = dgain + cols;
    titans_rmsnorm_forward(rn, rstd, x, gain, rows, cols);
    titans_rmsnorm_backward(drn, dgain, g, x, gain, rstd, rows, cols);
    float *l2 = r, *rnorm = r + rows * cols;
    r = rnorm + rows;
    titans_l2norm_forward(l2, rnorm, x, rows, cols);
    float *cv = r, *dcv = r + T * C, *dw = dcv + T * C;
    r = dw + C * K;
    titans_conv_forward(cv, x, tail, w, T, C, K);
    titans_conv_backward(dcv, dw, g, x, tail, w, T, C, K);
    titans_embedding_backward(r, g, tok, nt, d);
    r += 50 * d;
    r[0] = titans_cross_entropy(r + 1, x, tok, rows, V, 1.0f);
  }
  omp_set_num_threads(saved);
  th_check(memcmp(res[0], res[1], slab * sizeof(float)) == 0 && memcmp(res[0], res[2], slab * sizeof(float)) == 0,
           "silu, adamw, softmax, rmsnorm, l2norm, conv, embedding, cross-entropy: identical with 1, 2, 3 threads");

  /* called from inside a parallel region: each thread runs the kernel serially on its own data */
  float *y2 = alloc_f(2 * n);
  int team = 0;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    team = omp_get_num_threads();
    int id = omp_get_thread_num();
    if (id < 2) titans_silu_forward(y2 + (size_t)id * n, x, n);
  }
  th_check(memcmp(y2, res[0], n * sizeof(float)) == 0 && (team < 2 || memcmp(y2 + n, res[0], n * sizeof(float)) == 0),
           "silu called by %d threads of an enclosing parallel region gives the same result", team);
  for (int k = 0; k < 3; k++) free(res[k]);
  free(x), free(g), free(gain), free(w), free(tail), free(tok), free(y2);
}
#endif

/* titans_alloc_bytes: zeroed, 64-byte aligned blocks (the kernels' vector loads then never straddle two
   cache lines) of every size, NULL when the size overflows; titans_free takes them back. */
static void test_alloc(void) {
  const size_t sizes[] = {0, 1, 3, 64, 100, 4096, (size_t)1 << 20, ((size_t)3 << 20) + 5};
  size_t misaligned = 0, nonzero = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    unsigned char *p = (unsigned char *)titans_alloc_bytes(sizes[i], 1);
    float *f = titans_alloc_floats(sizes[i] + 1);
    if (!p || !f) {
      th_check(0, "alloc of %zu bytes failed", sizes[i]);
      continue;
    }
    misaligned += ((uintptr_t)p % 64 != 0) + ((uintptr_t)f % 64 != 0);
    for (size_t j = 0; j < sizes[i]; j++) nonzero += p[j] != 0;
    for (size_t j = 0; j <= sizes[i]; j++) nonzero += f[j] != 0.0f;
    memset(p, 0xAB, sizes[i]); /* the whole block is ours */
    titans_free(p);
    titans_free(f);
  }
  th_check(misaligned == 0 && nonzero == 0, "alloc: 64-byte aligned and zeroed (%zu misaligned, %zu nonzero)",
           misaligned, nonzero);
  th_check(titans_alloc_bytes(SIZE_MAX, 1) == NULL && titans_alloc_bytes(SIZE_MAX / 2, 4) == NULL &&
               titans_alloc_bytes(SIZE_MAX - 10, 1) == NULL,
           "alloc: sizes that overflow give NULL");
  titans_free(NULL);
}

int main(void) {
  titans_rng_seed(&rng, 1234);
  test_alloc();
  test_exp();
  test_activation_accuracy();
  test_elementwise_vs_ref();
  test_rows_vs_ref();
  test_fd_activations();
  test_fd_rows();
  test_conv();
  test_embedding();
  test_cross_entropy();
  test_adamw();
#ifdef _OPENMP
  test_threads();
#endif
  return th_summary("test_ops");
}
