/* ---- 2. GEMM (declarations) ------------------------------------------------------------------- */

/* Row-major C[m x n] = alpha * op(A) * op(B) + beta * C.
   op(A) is m x k: A is stored [m, lda] (lda >= k) when trans_a == 0, [k, lda] (lda >= m) when 1.
   op(B) is k x n: B is stored [k, ldb] (ldb >= n) when trans_b == 0, [n, ldb] (ldb >= k) when 1.
   When beta == 0, C is not read (NaN in C does not propagate). Never allocates; threads over output
   tiles with OpenMP when the product is large and the caller is not already inside a parallel
   region. Each C element is summed over k in a fixed order, whatever the thread count. */
TITANSDEF void titans_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const float *a,
                           size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc);

/* The plain scalar reference of titans_gemm (same contract, no SIMD, no threads); tests and
   benchmarks compare the fast path against it. */
TITANSDEF void titans_gemm_ref(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const float *a,
                               size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc);
