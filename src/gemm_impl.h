/* ---- 2. GEMM (implementation) ----------------------------------------------------------------- */

TITANSDEF void titans_gemm_ref(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const float *a,
                               size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  for (size_t i = 0; i < m; i++) {
    for (size_t j = 0; j < n; j++) {
      float acc = 0.0f;
      if (alpha != 0.0f) /* alpha == 0: A and B are not read (as BLAS) */
        for (size_t p = 0; p < k; p++) {
          float av = trans_a ? a[p * lda + i] : a[i * lda + p];
          float bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
          acc += av * bv;
        }
      float ab = alpha == 0.0f || k == 0 ? 0.0f : alpha * acc;
      c[i * ldc + j] = ab + (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]);
    }
  }
}

/* The fast path. Five methods, chosen from the shape alone (titans__gemm_method), never from the
   thread count:
   - direct: op(B) rows contiguous (trans_b == 0) and m small, or op(B) narrow (n <= 256 and k * n
     <= 128K; k <= 256 and k * n <= 32K when trans_a). Tiles of R rows x NV vectors of C keep their sums
     in registers over all of k; A and B are read where they lie, no copies, so a 16 x 64 x 64 product
     costs little more than its FMAs.
   - bdirect: trans_b == 1 with a narrow op(B) (as above, and <= 64K floats) and more rows: op(B) is
     transposed into a stack block once, then the direct method.
   - tdot (AVX-512): trans_b == 1, m <= 16. One vector spans the rows of op(A) (and, when m < 16, several
     k offsets); rows of B are broadcast, and each 16 x 16 tile is transposed in registers at the end.
   - dot: trans_b == 1, rows of op(A) and of B dotted along k, tiles of R x S sums reduced by a fixed
     tree (m <= 2 with k >= 1024 on AVX-512, small m on other ISAs, n <= 16 with a long k).
   - packed (Goto's scheme) for the rest: for each NC-wide column block and KC-deep slice of k, op(B) is
     packed into NR-wide panels [kc, NR] that stay in L2; the MR x NR micro-kernel reads rows of A in
     place (trans_a == 0) or MR-row panels packed MC rows at a time (trans_a == 1).
   Every C element is one chain of FMAs over k in increasing order (cut into slices that depend only on
   k), or lane-wise chains plus a fixed reduction tree (dot, tdot), then C = alpha * sum + beta * C.
   Which tile or thread computes an element does not change that arithmetic, so results are
   bit-identical for any thread count. No heap: scratch lives on the stack, at most 320 KiB (packed). */

#if defined(__GNUC__) || defined(__clang__)
#define TITANS__GEMM_INLINE static inline __attribute__((always_inline))
#define TITANS__GEMM_NOINLINE static __attribute__((noinline))
#elif defined(_MSC_VER)
#define TITANS__GEMM_INLINE static __forceinline
#define TITANS__GEMM_NOINLINE static __declspec(noinline)
#else
#define TITANS__GEMM_INLINE static inline
#define TITANS__GEMM_NOINLINE static
#endif
#ifdef __cplusplus
#define TITANS__GEMM_ALIGN alignas(64)
#else
#define TITANS__GEMM_ALIGN _Alignas(64)
#endif
/* Unroll a loop over a tile's rows or vectors completely: an accumulator array indexed by a loop left
   rolled is kept in memory and written back every k step (seen for 8-row masked tiles). */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8)
#define TITANS__GEMM_UNROLL _Pragma("GCC unroll 32")
#else
#define TITANS__GEMM_UNROLL
#endif
/* Keep a loaded vector in a register: without it GCC folds the load into each FMA that uses it, so
   a vector shared by R FMAs is loaded R times (measured 2x slower for tiles of <= 4 rows). */
#if (defined(__GNUC__) || defined(__clang__)) && (defined(TITANS__AVX512) || defined(TITANS__AVX2))
#define TITANS__GEMM_INREG(x) __asm__("" : "+v"(x))
#else
#define TITANS__GEMM_INREG(x) ((void)0)
#endif
#if defined(__GNUC__) || defined(__clang__)
#define TITANS__GEMM_PREFETCHW(p) __builtin_prefetch((p), 1, 3)
#define TITANS__GEMM_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#define TITANS__GEMM_PREFETCH_L2(p) __builtin_prefetch((p), 0, 2)
#else
#define TITANS__GEMM_PREFETCH_L2(p) ((void)(p))
#define TITANS__GEMM_PREFETCH(p) ((void)(p))
#define TITANS__GEMM_PREFETCHW(p) ((void)(p))
#endif

/* Micro-tile of the packed method: MR rows x NV vectors (NR = NV * VW columns), about 16-24
   accumulators so that the FMA latency is hidden and the registers are not exhausted. */
#ifndef TITANS__GEMM_MR
#if defined(TITANS__AVX512)
#define TITANS__GEMM_MR 8
#define TITANS__GEMM_NV 2
#elif defined(TITANS__AVX2)
#define TITANS__GEMM_MR 6
#define TITANS__GEMM_NV 2
#elif defined(TITANS__NEON)
#define TITANS__GEMM_MR 8
#define TITANS__GEMM_NV 2
#else
#define TITANS__GEMM_MR 4
#define TITANS__GEMM_NV 4
#endif
#endif
#define TITANS__GEMM_NR (TITANS__GEMM_NV * TITANS__VW)
#ifndef TITANS__GEMM_KC
#define TITANS__GEMM_KC 256 /* depth of a k slice: an [KC, MR] A panel stays in L1 */
#endif
#ifndef TITANS__GEMM_NC
#define TITANS__GEMM_NC 256 /* width of a column block: the [KC, NC] B block (256 KiB) stays in L2 */
#endif
#ifndef TITANS__GEMM_MC
#define TITANS__GEMM_MC 64 /* rows of op(A) packed at once: [MC, KC] = 64 KiB, whole cache lines of A */
#endif
#define TITANS__GEMM_DR 8     /* most rows in a direct tile */
#define TITANS__GEMM_BD_FLOATS 65536 /* floats of op(B) the bdirect method copies: 256 KiB of stack */
#define TITANS__GEMM_DNV 8    /* most vectors in a direct tile (a 1-row tile: 8 FMA chains) */
#define TITANS__GEMM_DACC 24  /* most accumulators in a direct tile (6 rows x 4 vectors) */

#define TITANS__GEMM_KD 1024  /* k slice of the dot method when op(A) must be packed: [16, KD] = 64 KiB */
#define TITANS__GEMM_SMALL 16 /* m (or n) up to this uses the direct or dot method */
#ifndef TITANS__GEMM_PAR_WORK
#define TITANS__GEMM_PAR_WORK 1048576.0 /* m*n*k per thread below which threads do not pay off */
#endif

/* ---- partial vectors: a lane mask for the first cnt (1..VW) lanes -------------------------------- */
#if defined(TITANS__AVX512)
typedef __mmask16 titans__gemm_mask;
static inline titans__gemm_mask titans__gemm_mask_n(size_t cnt) { return (__mmask16)((1u << cnt) - 1u); }
static inline titans__vf titans__gemm_vload_m(const float *p, titans__gemm_mask m) {
  return _mm512_maskz_loadu_ps(m, p);
}
static inline void titans__gemm_vstore_m(float *p, titans__vf v, titans__gemm_mask m) {
  _mm512_mask_storeu_ps(p, m, v);
}
#elif defined(TITANS__AVX2)
typedef __m256i titans__gemm_mask;
static inline titans__gemm_mask titans__gemm_mask_n(size_t cnt) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline titans__vf titans__gemm_vload_m(const float *p, titans__gemm_mask m) { return _mm256_maskload_ps(p, m); }
static inline void titans__gemm_vstore_m(float *p, titans__vf v, titans__gemm_mask m) { _mm256_maskstore_ps(p, m, v); }
#else
typedef size_t titans__gemm_mask;
static inline titans__gemm_mask titans__gemm_mask_n(size_t cnt) { return cnt; }
static inline titans__vf titans__gemm_vload_m(const float *p, titans__gemm_mask m) {
  float t[TITANS__VW];
  for (size_t i = 0; i < TITANS__VW; i++) t[i] = i < m ? p[i] : 0.0f;
  return titans__vload(t);
}
static inline void titans__gemm_vstore_m(float *p, titans__vf v, titans__gemm_mask m) {
  float t[TITANS__VW];
  titans__vstore(t, v);
  for (size_t i = 0; i < m; i++) p[i] = t[i];
}
#endif

/* out = alpha * acc + beta * C, stored to c (vector ops, so every lane is rounded the same way);
   beta == 0 does not read C. */
TITANS__GEMM_INLINE void titans__gemm_put(float *c, titans__vf acc, titans__vf va, titans__vf vb, float beta) {
  titans__vf o = titans__vmul(va, acc);
  if (beta != 0.0f) o = titans__vfma(vb, titans__vload(c), o);
  titans__vstore(c, o);
}
TITANS__GEMM_INLINE void titans__gemm_put_m(float *c, titans__vf acc, titans__vf va, titans__vf vb, float beta,
                                            titans__gemm_mask m) {
  titans__vf o = titans__vmul(va, acc);
  if (beta != 0.0f) o = titans__vfma(vb, titans__gemm_vload_m(c, m), o);
  titans__gemm_vstore_m(c, o, m);
}

/* Four horizontal sums at once: out[q] = sum of the lanes of vq, always by the same tree (lane i plus
   lane i + VW/2, then i + VW/4, ..., as titans__gemm_hsum_tree), whichever slot a vector is in. */
#if defined(TITANS__AVX512)
TITANS__GEMM_INLINE void titans__gemm_reduce4(float *out /* [4] */, __m512 v0, __m512 v1, __m512 v2, __m512 v3) {
  __m512 w01 = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x44), _mm512_shuffle_f32x4(v0, v1, 0xEE));
  __m512 w23 = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, 0x44), _mm512_shuffle_f32x4(v2, v3, 0xEE));
  __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
  x = _mm512_add_ps(x, _mm512_shuffle_ps(x, x, 0x4E)); /* lane i + lane i^2 in each 128-bit quarter */
  x = _mm512_add_ps(x, _mm512_shuffle_ps(x, x, 0xB1)); /* lane i + lane i^1 */
  __m512 y = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), x);
  _mm_storeu_ps(out, _mm512_castps512_ps128(y));
}
#elif defined(TITANS__AVX2)
TITANS__GEMM_INLINE void titans__gemm_reduce4(float *out /* [4] */, __m256 v0, __m256 v1, __m256 v2, __m256 v3) {
  __m256 w01 = _mm256_add_ps(_mm256_permute2f128_ps(v0, v1, 0x20), _mm256_permute2f128_ps(v0, v1, 0x31));
  __m256 w23 = _mm256_add_ps(_mm256_permute2f128_ps(v2, v3, 0x20), _mm256_permute2f128_ps(v2, v3, 0x31));
  __m256 x = _mm256_add_ps(_mm256_shuffle_ps(w01, w23, 0x44), _mm256_shuffle_ps(w01, w23, 0xEE));
  x = _mm256_add_ps(x, _mm256_shuffle_ps(x, x, 0xB1));
  /* lanes 0, 2 hold the sums of v0, v2; lanes 4, 6 those of v1, v3 */
  __m128 lo = _mm256_castps256_ps128(x), hi = _mm256_extractf128_ps(x, 1);
  _mm_storeu_ps(out, _mm_shuffle_ps(_mm_unpacklo_ps(lo, hi), _mm_unpackhi_ps(lo, hi), 0x44));
}
#else
static inline float titans__gemm_hsum_tree(titans__vf v) {
  float t[TITANS__VW];
  titans__vstore(t, v);
  for (size_t w = TITANS__VW / 2; w >= 1; w /= 2)
    for (size_t i = 0; i < w; i++) t[i] += t[i + w];
  return t[0];
}
TITANS__GEMM_INLINE void titans__gemm_reduce4(float *out /* [4] */, titans__vf v0, titans__vf v1, titans__vf v2,
                                              titans__vf v3) {
  out[0] = titans__gemm_hsum_tree(v0);
  out[1] = titans__gemm_hsum_tree(v1);
  out[2] = titans__gemm_hsum_tree(v2);
  out[3] = titans__gemm_hsum_tree(v3);
}
#endif

#if defined(TITANS__AVX512)
/* In registers: r[i] lane q becomes r[q] lane i (a 16 x 16 transpose, 64 shuffles). */
TITANS__GEMM_INLINE void titans__gemm_tr16(__m512 *r) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);     /* per 128-bit lane: x0 y0 x1 y1 */
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]); /* x2 y2 x3 y3 */
  }
  for (int g = 0; g < 4; g++) { /* u[4g + c], lane L: rows 4g..4g+3 at column 4L + c */
    u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  for (int c = 0; c < 4; c++) {
    __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    __m512 v2 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE), v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(v0, v1, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(v0, v1, 0xDD);
    r[8 + c] = _mm512_shuffle_f32x4(v2, v3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(v2, v3, 0xDD);
  }
}

/* dst[q * lddst + r] = src[r * ldsrc + q] for r, q < 16. */
TITANS__GEMM_INLINE void titans__gemm_transpose16(float *dst, size_t lddst, const float *src, size_t ldsrc) {
  __m512 r[16];
  for (size_t i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ldsrc);
  titans__gemm_tr16(r);
  for (size_t i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * lddst, r[i]);
}

#endif

/* ---- direct method: op(B) rows read in place ----------------------------------------------------- */

/* One R x (NV * VW) tile: C = alpha * op(A) op(B) + beta * C with op(B)[p, j] = b[p * ldb + j] and
   op(A)[r, p] = a[r * lda + p] (TA == 0) or a[p * lda + r] (TA == 1; the layout is a compile-time
   constant so that the R row offsets need no registers). When masked (then NV == 1) only the lanes in
   mlast exist. */
TITANS__GEMM_INLINE void titans__gemm_direct_tile(const int TA, const size_t R, const size_t NV, const int masked,
                                                  float *c /* [R, ldc] */, size_t ldc, const float *a, size_t lda,
                                                  const float *b /* [k, ldb] */, size_t ldb, size_t k,
                                                  titans__gemm_mask mlast, float alpha, float beta) {
  titans__vf acc[TITANS__GEMM_DACC]; /* [R][NV]: sized to what tiles use, or GCC keeps it in memory */
  for (size_t r = 0; r < R; r++)
    for (size_t v = 0; v < NV; v++) acc[r * NV + v] = titans__vset1(0.0f);
  for (size_t p = 0; p < k; p++) {
    const float *bp = b + p * ldb;
    titans__vf bv[TITANS__GEMM_DNV];
    if (masked) bv[0] = titans__gemm_vload_m(bp, mlast);
    else
      for (size_t v = 0; v < NV; v++) bv[v] = titans__vload(bp + v * TITANS__VW);
    if (R > 1)
      for (size_t v = 0; v < NV; v++) TITANS__GEMM_INREG(bv[v]);
    for (size_t r = 0; r < R; r++) {
      titans__vf av = titans__vset1(TA ? a[p * lda + r] : a[r * lda + p]);
      for (size_t v = 0; v < NV; v++) acc[r * NV + v] = titans__vfma(av, bv[v], acc[r * NV + v]);
    }
  }
  titans__vf va = titans__vset1(alpha), vb = titans__vset1(beta);
  TITANS__GEMM_UNROLL
  for (size_t r = 0; r < R; r++) {
    if (masked) titans__gemm_put_m(c + r * ldc, acc[r], va, vb, beta, mlast);
    else
      for (size_t v = 0; v < NV; v++) titans__gemm_put(c + r * ldc + v * TITANS__VW, acc[r * NV + v], va, vb, beta);
  }
}

/* Columns [0, n) of an R-row block: tiles of NV vectors, then narrower ones, the last vector masked. */
TITANS__GEMM_INLINE void titans__gemm_direct_rows(const int TA, const size_t R, const size_t NV, float *c, size_t ldc,
                                                  const float *a, size_t lda, const float *b, size_t ldb, size_t n,
                                                  size_t k, float alpha, float beta) {
  titans__gemm_mask full = titans__gemm_mask_n(TITANS__VW);
  size_t j = 0;
  for (; j + NV * TITANS__VW <= n; j += NV * TITANS__VW)
    titans__gemm_direct_tile(TA, R, NV, 0, c + j, ldc, a, lda, b + j, ldb, k, full, alpha, beta);
  if (NV > 4 && j + 4 * TITANS__VW <= n) { /* what remains: at most one tile of each halved width */
    titans__gemm_direct_tile(TA, R, 4, 0, c + j, ldc, a, lda, b + j, ldb, k, full, alpha, beta);
    j += 4 * TITANS__VW;
  }
  if (NV > 2 && j + 2 * TITANS__VW <= n) {
    titans__gemm_direct_tile(TA, R, 2, 0, c + j, ldc, a, lda, b + j, ldb, k, full, alpha, beta);
    j += 2 * TITANS__VW;
  }
  for (; j + TITANS__VW <= n; j += TITANS__VW)
    titans__gemm_direct_tile(TA, R, 1, 0, c + j, ldc, a, lda, b + j, ldb, k, full, alpha, beta);
  if (j < n)
    titans__gemm_direct_tile(TA, R, 1, 1, c + j, ldc, a, lda, b + j, ldb, k, titans__gemm_mask_n(n - j), alpha, beta);
}

/* An R-row block (R <= 8): NV chosen so that R x NV stays near 16-24 accumulators (8 for one row). */
TITANS__GEMM_INLINE void titans__gemm_direct_block(const int TA, size_t rows, float *c, size_t ldc, const float *a,
                                                   size_t lda, const float *b, size_t ldb, size_t n, size_t k,
                                                   float alpha, float beta) {
  switch (rows) {
    case 1: titans__gemm_direct_rows(TA, 1, 8, c, ldc, a, lda, b, ldb, n, k, alpha, beta); break;
    case 2: titans__gemm_direct_rows(TA, 2, 4, c, ldc, a, lda, b, ldb, n, k, alpha, beta); break;
    case 3: titans__gemm_direct_rows(TA, 3, 4, c, ldc, a, lda, b, ldb, n, k, alpha, beta); break;
    case 4: titans__gemm_direct_rows(TA, 4, 4, c, ldc, a, lda, b, ldb, n, k, alpha, beta); break;
    case 5: titans__gemm_direct_rows(TA, 5, 4, c, ldc, a, lda, b, ldb, n, k, alpha, beta); break;
    case 6: titans__gemm_direct_rows(TA, 6, 4, c, ldc, a, lda, b, ldb, n, k, alpha, beta); break;
    case 7: titans__gemm_direct_rows(TA, 7, 2, c, ldc, a, lda, b, ldb, n, k, alpha, beta); break;
    default: titans__gemm_direct_rows(TA, 8, 2, c, ldc, a, lda, b, ldb, n, k, alpha, beta); break;
  }
}

/* One function per layout of A: GCC allocates the registers of the many tile loops better in two
   smaller functions than in one (it kept loop counters in vector registers). */
TITANS__GEMM_NOINLINE void titans__gemm_direct_block_n(size_t rows, float *c, size_t ldc, const float *a, size_t lda,
                                                       const float *b, size_t ldb, size_t n, size_t k, float alpha,
                                                       float beta) {
  titans__gemm_direct_block(0, rows, c, ldc, a, lda, b, ldb, n, k, alpha, beta);
}
TITANS__GEMM_NOINLINE void titans__gemm_direct_block_t(size_t rows, float *c, size_t ldc, const float *a, size_t lda,
                                                       const float *b, size_t ldb, size_t n, size_t k, float alpha,
                                                       float beta) {
  titans__gemm_direct_block(1, rows, c, ldc, a, lda, b, ldb, n, k, alpha, beta);
}

/* C [m, n] = alpha * op(A) op(B) + beta * C by direct tiles of up to 8 rows. Column blocks outside, so
   that the [k, cb] strip of B is read from memory once and from L2 by the following row tiles. */
static void titans__gemm_direct(int trans_a, size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda,
                                const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  size_t cb = (size_t)131072 / (k ? k : 1); /* 512 KiB of B per column block */
  cb = cb < 128 ? 128 : cb - cb % 128;
  if (m <= TITANS__GEMM_DR) cb = n; /* one row tile: nothing to reuse */
  for (size_t j = 0; j < n; j += cb) {
    size_t nb = n - j < cb ? n - j : cb;
    for (size_t i = 0; i < m; i += TITANS__GEMM_DR) {
      size_t rows = m - i < TITANS__GEMM_DR ? m - i : TITANS__GEMM_DR;
      float *ci = c + i * ldc + j;
      if (trans_a) titans__gemm_direct_block_t(rows, ci, ldc, a + i, lda, b + j, ldb, nb, k, alpha, beta);
      else titans__gemm_direct_block_n(rows, ci, ldc, a + i * lda, lda, b + j, ldb, nb, k, alpha, beta);
    }
  }
}

/* The direct method after copying op(B) = B^T ([n, ldb] rows along k) into a contiguous [k, n] block:
   for trans_b == 1 with a small op(B) and many rows, where packing A (as the packed method does) would
   cost a large fraction of the FMAs. */
TITANS__GEMM_NOINLINE void titans__gemm_bdirect(int trans_a, size_t m, size_t n, size_t k, float alpha, const float *a,
                                                size_t lda, const float *b, size_t ldb, float beta, float *c,
                                                size_t ldc) {
  TITANS__GEMM_ALIGN float bt[TITANS__GEMM_BD_FLOATS]; /* [k, n] */
  size_t j = 0;
  TITANS_ASSERT((double)k * (double)n <= (double)TITANS__GEMM_BD_FLOATS);
#if defined(TITANS__AVX512)
  for (; j + 16 <= n; j += 16) {
    size_t p = 0;
    for (; p + 16 <= k; p += 16) titans__gemm_transpose16(bt + p * n + j, n, b + j * ldb + p, ldb);
    for (; p < k; p++)
      for (size_t q = 0; q < 16; q++) bt[p * n + j + q] = b[(j + q) * ldb + p];
  }
#endif
  for (; j < n; j++)
    for (size_t p = 0; p < k; p++) bt[p * n + j] = b[j * ldb + p];
  titans__gemm_direct(trans_a, m, n, k, alpha, a, lda, bt, n, beta, c, ldc);
}

/* ---- dot method: rows of op(A) and of B, both contiguous along k --------------------------------- */

/* R x S dot products: C[r, s] = alpha * sum_p a[r * lda + p] * b[s * ldb + p] + beta * C[r, s] for
   s < ns (rows s >= ns of b are not read; their slots repeat row ns - 1 and are not stored). */
TITANS__GEMM_INLINE void titans__gemm_dot_tile(const size_t R, const size_t S, float *c /* [R, ldc] */, size_t ldc,
                                               const float *a /* [R, lda] */, size_t lda,
                                               const float *b /* [ns, ldb] */, size_t ldb, size_t ns, size_t k,
                                               float alpha, float beta) {
  const float *bs[8];
  titans__vf acc[4][8];
  for (size_t s = 0; s < S; s++) bs[s] = b + (s < ns ? s : ns - 1) * ldb;
  for (size_t r = 0; r < R; r++)
    for (size_t s = 0; s < S; s++) acc[r][s] = titans__vset1(0.0f);
  size_t p = 0;
  for (; p + TITANS__VW <= k; p += TITANS__VW) {
    titans__vf bv[8];
    for (size_t s = 0; s < S; s++) {
      bv[s] = titans__vload(bs[s] + p);
      if (R > 1) TITANS__GEMM_INREG(bv[s]);
    }
    for (size_t r = 0; r < R; r++) {
      titans__vf av = titans__vload(a + r * lda + p);
      for (size_t s = 0; s < S; s++) acc[r][s] = titans__vfma(av, bv[s], acc[r][s]);
    }
  }
  if (p < k) { /* the tail: masked lanes add 0 * 0 */
    titans__gemm_mask mk = titans__gemm_mask_n(k - p);
    titans__vf bv[8];
    for (size_t s = 0; s < S; s++) bv[s] = titans__gemm_vload_m(bs[s] + p, mk);
    for (size_t r = 0; r < R; r++) {
      titans__vf av = titans__gemm_vload_m(a + r * lda + p, mk);
      for (size_t s = 0; s < S; s++) acc[r][s] = titans__vfma(av, bv[s], acc[r][s]);
    }
  }
  for (size_t r = 0; r < R; r++) {
    for (size_t s0 = 0; s0 < S; s0 += 4) {
      float sum[4];
      titans__gemm_reduce4(sum, acc[r][s0], acc[r][s0 + 1], acc[r][s0 + 2], acc[r][s0 + 3]);
      for (size_t q = 0; q < 4 && s0 + q < ns; q++) {
        float *cp = c + r * ldc + s0 + q;
        float o = alpha * sum[q];
        if (beta != 0.0f) o += beta * *cp;
        *cp = o;
      }
    }
  }
}

/* The S columns starting at b for an R-row block of a: a tile of S = 8 (R <= 2) or two of S = 4. */
TITANS__GEMM_INLINE void titans__gemm_dot_cols8(const size_t R, float *c, size_t ldc, const float *a, size_t lda,
                                                const float *b, size_t ldb, size_t ns, size_t k, float alpha,
                                                float beta) {
  if (R <= 2) {
    titans__gemm_dot_tile(R, 8, c, ldc, a, lda, b, ldb, ns, k, alpha, beta);
  } else {
    titans__gemm_dot_tile(R, 4, c, ldc, a, lda, b, ldb, ns < 4 ? ns : 4, k, alpha, beta);
    if (ns > 4) titans__gemm_dot_tile(R, 4, c + 4, ldc, a, lda, b + 4 * ldb, ldb, ns - 4, k, alpha, beta);
  }
}

static void titans__gemm_dot_block(size_t rows, float *c, size_t ldc, const float *a, size_t lda, const float *b,
                                   size_t ldb, size_t ns, size_t k, float alpha, float beta) {
  switch (rows) {
    case 1: titans__gemm_dot_cols8(1, c, ldc, a, lda, b, ldb, ns, k, alpha, beta); break;
    case 2: titans__gemm_dot_cols8(2, c, ldc, a, lda, b, ldb, ns, k, alpha, beta); break;
    case 3: titans__gemm_dot_cols8(3, c, ldc, a, lda, b, ldb, ns, k, alpha, beta); break;
    default: titans__gemm_dot_cols8(4, c, ldc, a, lda, b, ldb, ns, k, alpha, beta); break;
  }
}

/* C [m, n] = alpha * A B^T + beta * C with A [m, lda], B [n, ldb] (rows along k). The operand with
   fewer rows is walked by the inner loop so that it stays in cache. */
static void titans__gemm_dot(size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda, const float *b,
                             size_t ldb, float beta, float *c, size_t ldc) {
  if (m <= n) {
    for (size_t j = 0; j < n; j += 8)
      for (size_t i = 0; i < m; i += 4)
        titans__gemm_dot_block(m - i < 4 ? m - i : 4, c + i * ldc + j, ldc, a + i * lda, lda, b + j * ldb, ldb,
                               n - j < 8 ? n - j : 8, k, alpha, beta);
  } else {
    for (size_t i = 0; i < m; i += 4)
      for (size_t j = 0; j < n; j += 8)
        titans__gemm_dot_block(m - i < 4 ? m - i : 4, c + i * ldc + j, ldc, a + i * lda, lda, b + j * ldb, ldb,
                               n - j < 8 ? n - j : 8, k, alpha, beta);
  }
}

/* The dot method for trans_a == 1 (op(A) = A^T, A [k, lda]) and m <= TITANS__GEMM_SMALL: op(A) is
   copied in k slices of KD into [m, KD] rows; slices after the first add to C. */
TITANS__GEMM_NOINLINE void titans__gemm_dot_ta(size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda,
                                               const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  TITANS__GEMM_ALIGN float at[TITANS__GEMM_SMALL * TITANS__GEMM_KD]; /* [m, kd] */
  for (size_t p0 = 0; p0 < k; p0 += TITANS__GEMM_KD) {
    size_t kd = k - p0 < TITANS__GEMM_KD ? k - p0 : TITANS__GEMM_KD;
    for (size_t p = 0; p < kd; p++)
      for (size_t i = 0; i < m; i++) at[i * kd + p] = a[(p0 + p) * lda + i];
    titans__gemm_dot(m, n, kd, alpha, at, kd, b + p0, ldb, p0 == 0 ? beta : 1.0f, c, ldc);
  }
}

/* ---- transposed dot method (AVX-512): trans_b == 1 and m <= 16 ------------------------------------
   One vector covers all rows of op(A): with mp = m rounded up to a power of two and G = 16 / mp, lane
   i * G + q holds row i at k offset q, so a step consumes G values of k. at [kd / G][16] is op(A) packed
   that way (zero padded). For 16 rows j of B, acc[j] += broadcast(b[j, p .. p + G)) * at[p / G]; then
   the 16 x 16 tile is transposed in registers, the G lanes of a row are added by a fixed tree, and row
   i of C receives 16 consecutive values. */
#if defined(TITANS__AVX512) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define TITANS__GEMM_HAVE_TDOT 1

/* b[0 .. G) repeated over the vector (only the first cnt < G read when masked). */
TITANS__GEMM_INLINE __m512 titans__gemm_bcast(const size_t G, const float *b, int masked, size_t cnt) {
  if (G == 1) return _mm512_set1_ps(*b);
  if (G == 2) /* two floats by an unaligned 64-bit load */
    return _mm512_broadcast_f32x2(masked ? _mm_load_ss(b)
                                         : _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)b)));
  if (G == 4)
    return _mm512_broadcast_f32x4(masked ? _mm_maskz_loadu_ps((__mmask8)((1u << cnt) - 1u), b) : _mm_loadu_ps(b));
  if (G == 8)
    return _mm512_broadcast_f32x8(masked ? _mm256_maskz_loadu_ps((__mmask8)((1u << cnt) - 1u), b) : _mm256_loadu_ps(b));
  return masked ? _mm512_maskz_loadu_ps((__mmask16)((1u << cnt) - 1u), b) : _mm512_loadu_ps(b);
}

TITANS__GEMM_INLINE void titans__gemm_tdot_tile(const size_t G, float *c /* [m, ldc] */, size_t ldc, size_t m,
                                                const float *at /* [ceil(k / G), 16] */,
                                                const float *b /* [nj, ldb] */, size_t ldb, size_t nj, size_t k,
                                                float alpha, float beta) {
  __m512 acc[16];
  const float *bs[16];
  for (size_t j = 0; j < 16; j++) { /* rows past nj repeat the last one and are not stored */
    bs[j] = b + (j < nj ? j : nj - 1) * ldb;
    acc[j] = _mm512_setzero_ps();
  }
  size_t p = 0;
  for (; p + G <= k; p += G, at += 16) {
    __m512 av = _mm512_loadu_ps(at);
    if (G >= 4 && p % 16 == 0 && p + 128 < k) /* 16 row streams: help the prefetcher, 8 lines ahead */
      for (size_t j = 0; j < 16; j++) TITANS__GEMM_PREFETCH(bs[j] + p + 128);
    for (size_t j = 0; j < 16; j++) acc[j] = _mm512_fmadd_ps(titans__gemm_bcast(G, bs[j] + p, 0, G), av, acc[j]);
  }
  if (p < k) { /* k tail: the missing b values load as 0, at is zero there too */
    __m512 av = _mm512_loadu_ps(at);
    for (size_t j = 0; j < 16; j++)
      acc[j] = _mm512_fmadd_ps(titans__gemm_bcast(G, bs[j] + p, 1, k - p), av, acc[j]);
  }
  titans__gemm_tr16(acc); /* acc[i * G + q] lane j: row i of C, column j, partial sum q */
  for (size_t w = G / 2; w >= 1; w /= 2)
    for (size_t i = 0; i < 16 / G; i++)
      for (size_t q = 0; q < w; q++) acc[i * G + q] = _mm512_add_ps(acc[i * G + q], acc[i * G + q + w]);
  __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  __mmask16 mj = (__mmask16)((1u << nj) - 1u);
  for (size_t i = 0; i < m; i++) {
    if (nj == 16) titans__gemm_put(c + i * ldc, acc[i * G], va, vb, beta);
    else titans__gemm_put_m(c + i * ldc, acc[i * G], va, vb, beta, mj);
  }
}

/* op(A) rows [m, k slice] into at [ceil(kd / G), 16]: at[g * 16 + i * G + q] = op(A)[i, p0 + g * G + q],
   zero where i >= m or p0 + g * G + q >= p0 + kd. */
TITANS__GEMM_INLINE void titans__gemm_tdot_pack(float *at, const size_t G, int trans_a, size_t m, const float *a,
                                                 size_t lda, size_t p0, size_t kd) {
  size_t groups = (kd + G - 1) / G, full = kd / G, mp = 16 / G;
  if (trans_a) { /* op(A)[i, p] = a[p * lda + i]: row p of a holds the m values of a k step */
    if (G == 1) {
      __mmask16 mm = (__mmask16)((1u << m) - 1u);
      for (size_t p = 0; p < kd; p++) _mm512_storeu_ps(at + p * 16, _mm512_maskz_loadu_ps(mm, a + (p0 + p) * lda));
      return;
    }
    for (size_t g = 0; g < groups; g++)
      for (size_t i = 0; i < mp; i++)
        for (size_t q = 0; q < G; q++) {
          size_t p = g * G + q;
          at[g * 16 + i * G + q] = i < m && p < kd ? a[(p0 + p) * lda + i] : 0.0f;
        }
    return;
  }
  if (G == 1) { /* 16 x 16 transposes; rows past m repeat row m - 1 and are zeroed by the mask */
    __mmask16 mm = (__mmask16)((1u << m) - 1u);
    size_t p = 0;
    for (; p + 16 <= kd; p += 16) {
      __m512 r[16];
      for (size_t i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(a + (i < m ? i : m - 1) * lda + p0 + p);
      titans__gemm_tr16(r);
      for (size_t q = 0; q < 16; q++) _mm512_storeu_ps(at + (p + q) * 16, _mm512_maskz_mov_ps(mm, r[q]));
    }
    for (; p < kd; p++)
      for (size_t i = 0; i < 16; i++) at[p * 16 + i] = i < m ? a[i * lda + p0 + p] : 0.0f;
    return;
  }
  for (size_t i = 0; i < mp; i++) { /* G > 1: row i's k values are already in the right order, G at a time */
    const float *src = a + i * lda + p0;
    float *dst = at + i * G;
    if (i >= m) {
      for (size_t g = 0; g < groups; g++)
        for (size_t q = 0; q < G; q++) dst[g * 16 + q] = 0.0f;
      continue;
    }
    for (size_t g = 0; g < full; g++) memcpy(dst + g * 16, src + g * G, G * sizeof(float));
    if (full < groups)
      for (size_t q = 0; q < G; q++) dst[full * 16 + q] = full * G + q < kd ? src[full * G + q] : 0.0f;
  }
}

/* One k slice: pack op(A), then the column tiles. */
TITANS__GEMM_INLINE void titans__gemm_tdot_slice(const size_t G, float *at, int trans_a, size_t m, size_t n,
                                                 size_t p0, size_t kd, float alpha, const float *a, size_t lda,
                                                 const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  titans__gemm_tdot_pack(at, G, trans_a, m, a, lda, p0, kd);
  for (size_t j = 0; j < n; j += 16)
    titans__gemm_tdot_tile(G, c + j, ldc, m, at, b + j * ldb + p0, ldb, n - j < 16 ? n - j : 16, kd, alpha, beta);
}

TITANS__GEMM_NOINLINE void titans__gemm_tdot(int trans_a, size_t m, size_t n, size_t k, float alpha, const float *a,
                                             size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  TITANS__GEMM_ALIGN float at[TITANS__GEMM_KD * 16]; /* op(A) slice, lanes as above */
  for (size_t p0 = 0; p0 < k; p0 += TITANS__GEMM_KD) {
    size_t kd = k - p0 < TITANS__GEMM_KD ? k - p0 : TITANS__GEMM_KD;
    float bs = p0 == 0 ? beta : 1.0f; /* later slices add to C */
    if (m <= 1) titans__gemm_tdot_slice(16, at, trans_a, m, n, p0, kd, alpha, a, lda, b, ldb, bs, c, ldc);
    else if (m <= 2) titans__gemm_tdot_slice(8, at, trans_a, m, n, p0, kd, alpha, a, lda, b, ldb, bs, c, ldc);
    else if (m <= 4) titans__gemm_tdot_slice(4, at, trans_a, m, n, p0, kd, alpha, a, lda, b, ldb, bs, c, ldc);
    else if (m <= 8) titans__gemm_tdot_slice(2, at, trans_a, m, n, p0, kd, alpha, a, lda, b, ldb, bs, c, ldc);
    else titans__gemm_tdot_slice(1, at, trans_a, m, n, p0, kd, alpha, a, lda, b, ldb, bs, c, ldc);
  }
}
#endif

/* ---- packed method -------------------------------------------------------------------------------- */


/* op(B)[p0 : p0 + kc, j0 : j0 + nc] into panels bp [ceil(nc / NR)][kc][NR], zero padded to NR. */
static void titans__gemm_pack_b(float *bp, const float *b, size_t ldb, int trans_b, size_t p0, size_t kc, size_t j0,
                                size_t nc) {
  for (size_t jp = 0; jp < nc; jp += TITANS__GEMM_NR) {
    size_t w = nc - jp < TITANS__GEMM_NR ? nc - jp : TITANS__GEMM_NR;
    float *dst = bp + jp * kc;
    if (!trans_b) {
      const float *src = b + p0 * ldb + j0 + jp;
      if (w == TITANS__GEMM_NR) {
        for (size_t p = 0; p < kc; p++)
          for (size_t v = 0; v < TITANS__GEMM_NV; v++)
            titans__vstore(dst + p * TITANS__GEMM_NR + v * TITANS__VW, titans__vload(src + p * ldb + v * TITANS__VW));
      } else {
        for (size_t p = 0; p < kc; p++)
          for (size_t j = 0; j < TITANS__GEMM_NR; j++) dst[p * TITANS__GEMM_NR + j] = j < w ? src[p * ldb + j] : 0.0f;
      }
    } else {
      const float *src = b + (j0 + jp) * ldb + p0; /* op(B)[p, j] = src[j * ldb + p] */
#if defined(TITANS__AVX512)
      if (w == TITANS__GEMM_NR) {
        size_t p = 0;
        for (; p + 16 <= kc; p += 16)
          for (size_t h = 0; h < TITANS__GEMM_NR; h += 16)
            titans__gemm_transpose16(dst + p * TITANS__GEMM_NR + h, TITANS__GEMM_NR, src + h * ldb + p, ldb);
        for (; p < kc; p++)
          for (size_t j = 0; j < TITANS__GEMM_NR; j++) dst[p * TITANS__GEMM_NR + j] = src[j * ldb + p];
        continue;
      }
#endif
      for (size_t j = 0; j < TITANS__GEMM_NR; j++) {
        if (j < w)
          for (size_t p = 0; p < kc; p++) dst[p * TITANS__GEMM_NR + j] = src[j * ldb + p];
        else
          for (size_t p = 0; p < kc; p++) dst[p * TITANS__GEMM_NR + j] = 0.0f;
      }
    }
  }
}

/* op(A)[i0 : i0 + mb, p0 : p0 + kc] into panels ap [ceil(mb / MR)][kc][MR] (zero padded to MR rows) for
   trans_a == 1: op(A)[i, p] = a[p * lda + i], so row p of a holds the block's mb consecutive i, read whole.
   (For trans_a == 0 the micro-kernel reads the rows of A in place.) */
static void titans__gemm_pack_a(float *ap, const float *a, size_t lda, size_t i0, size_t mb, size_t p0, size_t kc) {
  for (size_t p = 0; p < kc; p++) {
    const float *src = a + (p0 + p) * lda + i0;
    for (size_t ip = 0; ip < mb; ip += TITANS__GEMM_MR) {
      size_t mr = mb - ip < TITANS__GEMM_MR ? mb - ip : TITANS__GEMM_MR;
      float *dst = ap + ip * kc + p * TITANS__GEMM_MR;
#if (defined(TITANS__AVX512) || defined(TITANS__AVX2)) && TITANS__GEMM_MR == 8
      if (mr == 8) { /* a plain copy: masked stores are slow on some cores */
        _mm256_storeu_ps(dst, _mm256_loadu_ps(src + ip));
        continue;
      }
#endif
      for (size_t r = 0; r < TITANS__GEMM_MR; r++) dst[r] = r < mr ? src[ip + r] : 0.0f;
    }
  }
}

/* One MR x NR tile: C[0:mr, 0:nr] = alpha * sum_p op(A)[r, p] bp[p][.] + beta * C. op(A) is either a
   packed panel ap [kc][MR] (zero padded) or, when in_place, the rows a + r * lda themselves (rows past mr
   repeat row mr - 1). bp is zero padded, so the loop always runs on the full tile; only the stores are
   cut to mr x nr. */
TITANS__GEMM_INLINE void titans__gemm_micro_body(const int in_place, float *c /* [mr, ldc] */, size_t ldc,
                                                 const float *a, size_t lda, const float *bp /* [kc, NR] */,
                                                 size_t kc, float alpha, float beta, size_t mr, size_t nr) {
  titans__vf acc[TITANS__GEMM_MR][TITANS__GEMM_NV];
  const float *ar[TITANS__GEMM_MR];
  for (size_t r = 0; r < TITANS__GEMM_MR; r++) {
    ar[r] = in_place ? a + (r < mr ? r : mr - 1) * lda : a + r;
    for (size_t v = 0; v < TITANS__GEMM_NV; v++) acc[r][v] = titans__vset1(0.0f);
  }
  for (size_t r = 0; r < mr; r++) { /* the C tile arrives in cache while the loop runs */
    TITANS__GEMM_PREFETCHW(c + r * ldc);
    TITANS__GEMM_PREFETCHW(c + r * ldc + nr - 1);
  }
  for (size_t p = 0; p < kc; p++) {
    titans__vf bv[TITANS__GEMM_NV];
    for (size_t v = 0; v < TITANS__GEMM_NV; v++) bv[v] = titans__vload(bp + p * TITANS__GEMM_NR + v * TITANS__VW);
    for (size_t r = 0; r < TITANS__GEMM_MR; r++) {
      titans__vf av = titans__vset1(in_place ? ar[r][p] : a[p * TITANS__GEMM_MR + r]);
      for (size_t v = 0; v < TITANS__GEMM_NV; v++) acc[r][v] = titans__vfma(av, bv[v], acc[r][v]);
    }
  }
  titans__vf va = titans__vset1(alpha), vb = titans__vset1(beta);
  if (mr == TITANS__GEMM_MR && nr == TITANS__GEMM_NR) {
    for (size_t r = 0; r < TITANS__GEMM_MR; r++)
      for (size_t v = 0; v < TITANS__GEMM_NV; v++)
        titans__gemm_put(c + r * ldc + v * TITANS__VW, acc[r][v], va, vb, beta);
  } else {
    for (size_t r = 0; r < TITANS__GEMM_MR; r++) {
      if (r >= mr) break;
      for (size_t v = 0; v < TITANS__GEMM_NV; v++) {
        size_t col = v * TITANS__VW;
        if (col >= nr) break;
        size_t cnt = nr - col < TITANS__VW ? nr - col : TITANS__VW;
        titans__gemm_put_m(c + r * ldc + col, acc[r][v], va, vb, beta, titans__gemm_mask_n(cnt));
      }
    }
  }
}

/* Not inlined: the kernel's registers are then allocated on their own, whatever the loops around it. */
TITANS__GEMM_NOINLINE void titans__gemm_micro(float *c, size_t ldc, const float *ap /* [kc, MR] */,
                                            const float *bp /* [kc, NR] */, size_t kc, float alpha, float beta,
                                            size_t mr, size_t nr) {
  titans__gemm_micro_body(0, c, ldc, ap, 0, bp, kc, alpha, beta, mr, nr);
}
TITANS__GEMM_NOINLINE void titans__gemm_micro_in_place(float *c, size_t ldc, const float *a /* [mr, lda] */,
                                                     size_t lda, const float *bp /* [kc, NR] */, size_t kc,
                                                     float alpha, float beta, size_t mr, size_t nr) {
  titans__gemm_micro_body(1, c, ldc, a, lda, bp, kc, alpha, beta, mr, nr);
}

/* A stream of prefetches into L2 over a block of rows (rows x row_bytes, stride apart), issued a few
   lines at a time between micro-kernel calls, so that the next block to pack is in cache when its
   turn comes (its rows often lie in different pages, which the hardware prefetcher does not follow). */
typedef struct titans__gemm_pf {
  const char *base;
  size_t rows, row_bytes, stride, r, off, per_step;
} titans__gemm_pf;

static void titans__gemm_pf_init(titans__gemm_pf *pf, const float *base, size_t rows, size_t row_floats,
                                 size_t stride_floats, size_t steps) {
  pf->base = (const char *)base;
  pf->rows = base ? rows : 0;
  pf->row_bytes = row_floats * sizeof(float);
  pf->stride = stride_floats * sizeof(float);
  pf->r = 0;
  pf->off = 0;
  pf->per_step = (pf->rows * (pf->row_bytes / 64 + 1) + steps - 1) / (steps ? steps : 1);
}

TITANS__GEMM_INLINE void titans__gemm_pf_step(titans__gemm_pf *pf) {
  for (size_t i = 0; i < pf->per_step && pf->r < pf->rows; i++) {
    const char *row = pf->base + pf->r * pf->stride;
    if (pf->off < pf->row_bytes) {
      TITANS__GEMM_PREFETCH_L2(row + pf->off);
      pf->off += 64;
    } else { /* the row's last byte: its line may be one more */
      TITANS__GEMM_PREFETCH_L2(row + pf->row_bytes - 1);
      pf->off = 0;
      pf->r++;
    }
  }
}

TITANS__GEMM_NOINLINE void titans__gemm_packed(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha,
                                               const float *a, size_t lda, const float *b, size_t ldb, float beta,
                                               float *c, size_t ldc) {
  TITANS__GEMM_ALIGN float bpack[TITANS__GEMM_KC * TITANS__GEMM_NC]; /* [NC / NR][kc][NR] */
  TITANS__GEMM_ALIGN float apack[TITANS__GEMM_KC * TITANS__GEMM_MC]; /* [MC / MR][kc][MR] */
  /* whole panels per block (the buffers hold KC * MC and KC * NC floats) */
  const size_t MR = TITANS__GEMM_MR, NR = TITANS__GEMM_NR;
  const size_t MC = TITANS__GEMM_MC / MR * MR, NC = TITANS__GEMM_NC / NR * NR;
  size_t nslices = (k + TITANS__GEMM_KC - 1) / TITANS__GEMM_KC;
  size_t kslice = (k + nslices - 1) / nslices; /* equal slices, a function of k only */
  titans__gemm_pf pfa;
  for (size_t jc = 0; jc < n; jc += NC) {
    size_t nc = n - jc < NC ? n - jc : NC, ntiles = (nc + NR - 1) / NR;
    for (size_t pc = 0; pc < k; pc += kslice) {
      size_t kc = k - pc < kslice ? k - pc : kslice;
      float beta_s = pc == 0 ? beta : 1.0f; /* later slices add to C */
      titans__gemm_pack_b(bpack, b, ldb, trans_b, pc, kc, jc, nc);
      for (size_t ic = 0; ic < m; ic += MC) {
        size_t mb = m - ic < MC ? m - ic : MC;
        if (!trans_a) { /* rows of A are read in place: packing them costs more than it saves */
          for (size_t ir = 0; ir < mb; ir += MR)
            for (size_t jr = 0; jr < nc; jr += NR)
              titans__gemm_micro_in_place(c + (ic + ir) * ldc + jc + jr, ldc, a + (ic + ir) * lda + pc, lda,
                                          bpack + jr * kc, kc, alpha, beta_s, mb - ir < MR ? mb - ir : MR,
                                          nc - jr < NR ? nc - jr : NR);
          continue;
        }
        titans__gemm_pack_a(apack, a, lda, ic, mb, pc, kc);
        { /* the next A block: next rows, else the first rows of the next slice or column block */
          size_t in = ic + MC, pn = pc, calls = (mb + MR - 1) / MR * ntiles;
          int any = 1;
          if (in >= m) {
            in = 0;
            pn = pc + kslice;
            if (pn >= k) { pn = 0; any = jc + NC < n; }
          }
          size_t mn = m - in < MC ? m - in : MC, kn = k - pn < kslice ? k - pn : kslice;
          titans__gemm_pf_init(&pfa, any ? a + pn * lda + in : NULL, kn, mn, lda, calls);
        }
        for (size_t ir = 0; ir < mb; ir += MR)
          for (size_t jr = 0; jr < nc; jr += NR) {
            titans__gemm_pf_step(&pfa);
            titans__gemm_micro(c + (ic + ir) * ldc + jc + jr, ldc, apack + ir * kc, bpack + jr * kc, kc, alpha, beta_s,
                               mb - ir < MR ? mb - ir : MR, nc - jr < NR ? nc - jr : NR);
          }
      }
    }
  }
}

/* ---- dispatch and threads ------------------------------------------------------------------------- */

enum { TITANS__GEMM_DIRECT, TITANS__GEMM_DOT, TITANS__GEMM_TDOT, TITANS__GEMM_PACKED, TITANS__GEMM_BDIRECT };

typedef struct titans__gemm_job {
  int trans_a, trans_b, method;
  size_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  const float *a, *b;
  float *c;
} titans__gemm_job;

/* Rows [i0, i1) x columns [j0, j1) of the job's C, by its method. */
static void titans__gemm_run(const titans__gemm_job *g, size_t i0, size_t i1, size_t j0, size_t j1) {
  size_t m = i1 - i0, n = j1 - j0, k = g->k;
  const float *a = g->a + (g->trans_a ? i0 : i0 * g->lda);
  const float *b = g->b + (g->trans_b ? j0 * g->ldb : j0);
  float *c = g->c + i0 * g->ldc + j0;
  if (m == 0 || n == 0) return;
  if (g->method == TITANS__GEMM_DIRECT) {
    titans__gemm_direct(g->trans_a, m, n, k, g->alpha, a, g->lda, b, g->ldb, g->beta, c, g->ldc);
#if defined(TITANS__GEMM_HAVE_TDOT)
  } else if (g->method == TITANS__GEMM_TDOT) {
    titans__gemm_tdot(g->trans_a, m, n, k, g->alpha, a, g->lda, b, g->ldb, g->beta, c, g->ldc);
#endif
  } else if (g->method == TITANS__GEMM_BDIRECT) {
    titans__gemm_bdirect(g->trans_a, m, n, k, g->alpha, a, g->lda, b, g->ldb, g->beta, c, g->ldc);
  } else if (g->method == TITANS__GEMM_DOT) {
    if (g->trans_a) titans__gemm_dot_ta(m, n, k, g->alpha, a, g->lda, b, g->ldb, g->beta, c, g->ldc);
    else titans__gemm_dot(m, n, k, g->alpha, a, g->lda, b, g->ldb, g->beta, c, g->ldc);
  } else {
    titans__gemm_packed(g->trans_a, g->trans_b, m, n, k, g->alpha, a, g->lda, b, g->ldb, g->beta, c, g->ldc);
  }
}

#ifdef _OPENMP
/* The pieces the threads share: C cut along one dimension into about 4 pieces per thread, claimed
   dynamically, so that a thread the OS runs late finds its share done by the others instead of holding
   everyone up. Columns for few rows of C (or when the packed method's blocks stay squarer that way),
   rows otherwise. Pieces stay large enough that what each piece packs again (op(B) for row pieces,
   op(A) for column pieces) costs little: 256 columns or 128 rows, 64 columns for the small-m methods. */
typedef struct titans__gemm_split {
  int by_cols;
  size_t step, count;
} titans__gemm_split;

static titans__gemm_split titans__gemm_split_for(const titans__gemm_job *g, int nt) {
  titans__gemm_split sp;
  int packed = g->method == TITANS__GEMM_PACKED;
  sp.by_cols = packed ? g->n >= g->m : g->m <= TITANS__GEMM_SMALL;
  size_t len = sp.by_cols ? g->n : g->m, quantum = sp.by_cols ? TITANS__GEMM_NR : TITANS__GEMM_MR;
  size_t least = sp.by_cols ? (packed ? 256 : 64) : 128, want = (size_t)nt * 4;
  if (quantum < 16) quantum = 16; /* whole vectors and whole 16-column tiles of the transposed dot */
  size_t step = (len + want - 1) / want;
  if (step < least) step = least;
  step = (step + quantum - 1) / quantum * quantum;
  sp.step = step;
  sp.count = (len + step - 1) / step;
  return sp;
}

static void titans__gemm_piece(const titans__gemm_job *g, const titans__gemm_split *sp, size_t i) {
  size_t lo = i * sp->step, len = sp->by_cols ? g->n : g->m, hi = lo + sp->step < len ? lo + sp->step : len;
  if (sp->by_cols) titans__gemm_run(g, 0, g->m, lo, hi);
  else titans__gemm_run(g, lo, hi, 0, g->n);
}
#endif

/* The method for a shape (measured on an AVX-512 core; the shape alone decides, never the threads).
   Small m: direct (trans_b == 0) or the (transposed) dot method, except m > 8 with an op(B) of many MiB,
   which the packed method streams better. Otherwise direct or bdirect while op(B) is narrow (n <= 256)
   and small: packing A, as the packed method does, would cost about 32 / n of the FMAs. */
static int titans__gemm_method(int trans_a, int trans_b, size_t m, size_t n, size_t k) {
  double kn = (double)k * (double)n;
  if (m <= TITANS__GEMM_SMALL) {
    if (m > 8 && kn > 2097152.0) return TITANS__GEMM_PACKED;
    if (!trans_b) return TITANS__GEMM_DIRECT;
#if defined(TITANS__GEMM_HAVE_TDOT)
    if (m <= 2 && k >= 1024) return TITANS__GEMM_DOT; /* fewer B rows in flight at once */
    return TITANS__GEMM_TDOT;
#else
    return trans_a ? TITANS__GEMM_PACKED : TITANS__GEMM_DOT;
#endif
  }
  /* op(A) = A^T in place steps to a new row of A every k: fine for a short k only */
  int narrow = trans_a ? k <= 256 && kn <= 32768.0 : n <= 256 && kn <= 131072.0;
  if (!trans_b) return n <= TITANS__GEMM_SMALL || narrow ? TITANS__GEMM_DIRECT : TITANS__GEMM_PACKED;
  if (narrow && kn <= (double)TITANS__GEMM_BD_FLOATS) return TITANS__GEMM_BDIRECT;
  if (n <= TITANS__GEMM_SMALL && !trans_a) return TITANS__GEMM_DOT;
  return TITANS__GEMM_PACKED;
}

TITANSDEF void titans_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const float *a,
                           size_t lda, const float *b, size_t ldb, float beta, float *c, size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) { /* C = beta * C, A and B not read (as BLAS) */
    for (size_t i = 0; i < m; i++)
      for (size_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  titans__gemm_job g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = lda;
  g.ldb = ldb;
  g.ldc = ldc;
  g.alpha = alpha;
  g.beta = beta;
  g.a = a;
  g.b = b;
  g.c = c;
  g.method = titans__gemm_method(trans_a, trans_b, m, n, k);
#ifdef _OPENMP
  {
    double work = (double)m * (double)n * (double)k;
    if (work >= 2.0 * TITANS__GEMM_PAR_WORK) { /* small calls skip the OpenMP queries altogether */
      int nt = omp_get_max_threads();
      if (work < TITANS__GEMM_PAR_WORK * nt) nt = (int)(work / TITANS__GEMM_PAR_WORK);
      if (nt > 1 && !omp_in_parallel()) {
        titans__gemm_split sp = titans__gemm_split_for(&g, nt);
        if (sp.count > 1) {
          long count = (long)sp.count;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
          for (long i = 0; i < count; i++) titans__gemm_piece(&g, &sp, (size_t)i);
          return;
        }
      }
    }
  }
#endif
  titans__gemm_run(&g, 0, m, 0, n);
}
