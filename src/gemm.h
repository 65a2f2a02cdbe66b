/* ---- 2. GEMM (declarations) ------------------------------------------------------------------- */

/* Row-major C[m x n] = alpha * op(A) * op(B) + beta * C.
   op(A) is m x k: A is stored [m, lda] (lda >= k) when trans_a == 0, [k, lda] (lda >= m) when 1.
   op(B) is k x n: B is stored [k, ldb] (ldb >= n) when trans_b == 0, [n, ldb] (ldb >= k) when 1.
   When beta == 0, C is not read (NaN in C does not propagate). When k == 0 or alpha == 0, C = beta * C
   and A, B are not read (as BLAS). Columns of A, B, C past the widths (the padding up to lda, ldb, ldc)
   are never read or written. Never allocates: scratch lives on the stack (at most about 330 KiB per
   thread); threads over output tiles with OpenMP when the product is large (m*n*k >= 2^20 per thread)
   and the caller is not already inside a parallel region (where cores are shared with other busy
   processes, OMP_WAIT_POLICY=passive keeps OpenMP's spin-waiting from stalling a threaded call until
   the OS runs the other thread). Each C element is summed over k in a fixed order that depends on the
   shape only, whatever the thread count: results are bit-identical for any number of threads. */
TITANSDEF void titans_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const float *a,
                           size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc);

/* The plain scalar reference of titans_gemm (same contract, no SIMD, no threads); tests and
   benchmarks compare the fast path against it. */
TITANSDEF void titans_gemm_ref(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const float *a,
                               size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc);
