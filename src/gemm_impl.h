/* ---- 2. GEMM (implementation) ----------------------------------------------------------------- */

TITANSDEF void titans_gemm_ref(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const float *a,
                               size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  for (size_t i = 0; i < m; i++) {
    for (size_t j = 0; j < n; j++) {
      float acc = 0.0f;
      for (size_t p = 0; p < k; p++) {
        float av = trans_a ? a[p * lda + i] : a[i * lda + p];
        float bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv;
      }
      c[i * ldc + j] = alpha * acc + (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]);
    }
  }
}

/* Placeholder-free interim fast path: the reference. Replaced by the blocked SIMD kernel. */
TITANSDEF void titans_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const float *a,
                           size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  titans_gemm_ref(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
