/* reference_kernels.h: plain scalar references of titans.h's kernels, for the tests and benchmarks
   that check the fast paths against them (titans.h ships only what it runs). Include it after titans.h
   with TITANS_IMPLEMENTATION defined: some of them read the header's internal helpers. */
#ifndef TITANS_REFERENCE_KERNELS_H
#define TITANS_REFERENCE_KERNELS_H
#include <math.h>

/* titans_gemm's contract (C = alpha op(A) op(B) + beta C) in plain loops: no SIMD, no threads. */
static inline void titans_gemm_ref(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, titans_cmat a,
                                   titans_cmat b, float beta, titans_mat c) {
  for (size_t i = 0; i < m; i++) {
    for (size_t j = 0; j < n; j++) {
      float acc = 0.0f;
      if (alpha != 0.0f) /* alpha == 0: A and B are not read (as BLAS) */
        for (size_t p = 0; p < k; p++) {
          float av = trans_a ? a.p[p * a.ld + i] : a.p[i * a.ld + p];
          float bv = trans_b ? b.p[j * b.ld + p] : b.p[p * b.ld + j];
          acc += av * bv;
        }
      float ab = alpha == 0.0f || k == 0 ? 0.0f : alpha * acc;
      c.p[i * c.ld + j] = ab + (beta == 0.0f ? 0.0f : beta * c.p[i * c.ld + j]);
    }
  }
}

static inline void titans__silu_forward_ref(float *out, const float *inp, size_t n) { /* [n] */
  for (size_t i = 0; i < n; i++) out[i] = inp[i] / (1.0f + expf(-inp[i]));
}

static inline void titans__silu_backward_ref(float *dinp, const float *dout, const float *inp, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float s = 1.0f / (1.0f + expf(-inp[i]));
    dinp[i] += dout[i] * s * (1.0f + inp[i] * (1.0f - s));
  }
}

static inline void titans__sigmoid_forward_ref(float *out, const float *inp, size_t n) { /* [n] */
  for (size_t i = 0; i < n; i++) out[i] = 1.0f / (1.0f + expf(-inp[i]));
}

static inline void titans__sigmoid_backward_ref(float *dinp, const float *dout, const float *out, size_t n) {
  for (size_t i = 0; i < n; i++) dinp[i] += dout[i] * out[i] * (1.0f - out[i]);
}

static inline void titans__tanh_forward_ref(float *out, const float *inp, size_t n) { /* [n] */
  for (size_t i = 0; i < n; i++) out[i] = tanhf(inp[i]);
}

static inline void titans__tanh_backward_ref(float *dinp, const float *dout, const float *out, size_t n) {
  for (size_t i = 0; i < n; i++) dinp[i] += dout[i] * (1.0f - out[i] * out[i]);
}

static inline void titans__softmax_forward_ref(float *out, const float *inp, size_t rows, size_t cols) {
  for (size_t r = 0; r < rows; r++) {
    const float *x = inp + r * cols; /* [cols] */
    float *y = out + r * cols;       /* [cols] */
    float mx = -INFINITY, sum = 0.0f;
    for (size_t j = 0; j < cols; j++) mx = x[j] > mx ? x[j] : mx;
    if (mx == -INFINITY) mx = 0.0f;
    for (size_t j = 0; j < cols; j++) sum += (y[j] = expf(x[j] - mx));
    for (size_t j = 0; j < cols; j++) y[j] = sum == 0.0f ? 0.0f : y[j] / sum;
  }
}

static inline void titans__softmax_backward_ref(float *dinp, const float *dout, const float *out, size_t rows,
                                                size_t cols) {
  for (size_t r = 0; r < rows; r++) {
    const float *g = dout + r * cols, *y = out + r * cols; /* [cols] */
    float dot = 0.0f;
    for (size_t j = 0; j < cols; j++) dot += g[j] * y[j];
    for (size_t j = 0; j < cols; j++) dinp[r * cols + j] += y[j] * (g[j] - dot);
  }
}

static inline void titans__rmsnorm_forward_ref(float *out, float *rstd, const float *inp, const float *gain,
                                               size_t rows, size_t cols) {
  for (size_t r = 0; r < rows; r++) {
    const float *x = inp + r * cols; /* [cols] */
    float ss = 0.0f;
    for (size_t j = 0; j < cols; j++) ss += x[j] * x[j];
    rstd[r] = 1.0f / sqrtf((cols ? ss / (float)cols : 0.0f) + 1e-6f);
    for (size_t j = 0; j < cols; j++) out[r * cols + j] = x[j] * rstd[r] * gain[j];
  }
}

static inline void titans__rmsnorm_backward_ref(float *dinp, float *dgain, const float *dout, const float *inp,
                                                const float *gain, const float *rstd, size_t rows, size_t cols) {
  for (size_t r = 0; r < rows; r++) {
    const float *g = dout + r * cols, *x = inp + r * cols; /* [cols] */
    float s = rstd[r], dot = 0.0f;
    for (size_t j = 0; j < cols; j++) dot += g[j] * gain[j] * x[j];
    for (size_t j = 0; j < cols; j++) {
      dinp[r * cols + j] += s * (g[j] * gain[j] - x[j] * s * s * dot / (float)cols);
      dgain[j] += g[j] * x[j] * s;
    }
  }
}

static inline void titans__l2norm_forward_ref(float *out, float *rnorm, const float *inp, size_t rows, size_t cols) {
  for (size_t r = 0; r < rows; r++) {
    float ss = 0.0f;
    for (size_t j = 0; j < cols; j++) ss += inp[r * cols + j] * inp[r * cols + j];
    rnorm[r] = 1.0f / sqrtf(ss + 1e-6f);
    for (size_t j = 0; j < cols; j++) out[r * cols + j] = inp[r * cols + j] * rnorm[r];
  }
}

static inline void titans__l2norm_backward_ref(float *dinp, const float *dout, const float *inp, const float *rnorm,
                                               size_t rows, size_t cols) {
  for (size_t r = 0; r < rows; r++) {
    const float *g = dout + r * cols, *x = inp + r * cols; /* [cols] */
    float s = rnorm[r], dot = 0.0f;
    for (size_t j = 0; j < cols; j++) dot += g[j] * x[j];
    for (size_t j = 0; j < cols; j++) dinp[r * cols + j] += s * (g[j] - x[j] * s * s * dot);
  }
}

static inline void titans__conv_forward_ref(float *out, const float *inp, const float *tail, const float *weight,
                                            size_t T, size_t C, size_t K) {
  for (size_t t = 0; t < T; t++) {
    for (size_t j = 0; j < C; j++) {
      float acc = 0.0f;
      for (size_t s = 0; s < K; s++) {
        const float *u = titans__conv_row(inp, tail, (ptrdiff_t)(t + s) - (ptrdiff_t)(K - 1), C, K);
        if (u) acc += weight[j * K + s] * u[j];
      }
      out[t * C + j] = acc;
    }
  }
}

static inline void titans__conv_backward_ref(float *dinp, float *dweight, const float *dout, const float *inp,
                                             const float *tail, const float *weight, size_t T, size_t C, size_t K) {
  for (size_t t = 0; t < T; t++) {
    for (size_t j = 0; j < C; j++) {
      for (size_t s = 0; s < K; s++) {
        ptrdiff_t tau = (ptrdiff_t)(t + s) - (ptrdiff_t)(K - 1);
        const float *u = titans__conv_row(inp, tail, tau, C, K);
        if (u) dweight[j * K + s] += dout[t * C + j] * u[j];
        if (tau >= 0) dinp[(size_t)tau * C + j] += dout[t * C + j] * weight[j * K + s];
      }
    }
  }
}

static inline float titans__cross_entropy_ref(float *dlogits, const float *logits, const int *targets, size_t n,
                                              size_t V, float scale) {
  size_t count = 0;
  for (size_t i = 0; i < n; i++) {
    if (targets[i] >= 0 && (size_t)targets[i] >= V) return NAN;
    count += targets[i] >= 0;
  }
  double total = 0.0;
  for (size_t i = 0; i < n; i++) {
    const float *x = logits + i * V; /* [V] */
    if (targets[i] < 0) {
      if (dlogits) memset(dlogits + i * V, 0, V * sizeof(float));
      continue;
    }
    float mx = -INFINITY, sum = 0.0f;
    for (size_t j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
    for (size_t j = 0; j < V; j++) sum += expf(x[j] - mx);
    total += (double)(mx - x[targets[i]] + logf(sum));
    for (size_t j = 0; dlogits && j < V; j++)
      dlogits[i * V + j] = scale * (expf(x[j] - mx) / sum - (j == (size_t)targets[i])) / (float)count;
  }
  return count ? (float)(total / (double)count) : 0.0f;
}

static inline void titans__adamw_update_ref(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                                            float beta1, float beta2, float eps, float weight_decay, long step) {
  titans__adamw_hp h = titans__adamw_make(lr, beta1, beta2, eps, weight_decay, step);
  for (size_t i = 0; i < n; i++) {
    m[i] = beta1 * m[i] + (1.0f - beta1) * grad[i];
    v[i] = beta2 * v[i] + (1.0f - beta2) * grad[i] * grad[i];
    param[i] -= lr * (m[i] * h.c1 / (sqrtf(v[i]) * h.c2 + eps) + weight_decay * param[i]);
  }
}

#endif /* TITANS_REFERENCE_KERNELS_H */
