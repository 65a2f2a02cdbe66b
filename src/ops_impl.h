/* ---- 3. Kernels (implementation) -------------------------------------------------------------- */

#define TITANS__OPS_BLOCK 16384    /* floats per elementwise work unit; a multiple of every TITANS__VW */
#define TITANS__OPS_PAR_WORK 65536 /* floats of work below which starting threads costs more than it saves */
#define TITANS__OPS_CB 64          /* channels (columns) per conv / gain / embedding block; multiple of VW */
#define TITANS__OPS_TB 32          /* sequence rows per conv block */
#define TITANS__OPS_SG 8           /* conv taps per pass of the weight gradient */
#define TITANS__OPS_CE_PARTS 64    /* cross-entropy row groups: a fixed count fixes the loss's sum order */

/* ---- private SIMD extensions: what exp, sigmoid, tanh and AdamW need beyond the core layer ------- */
#if defined(TITANS__AVX512)
static inline titans__vf titans__ops_vdiv(titans__vf a, titans__vf b) { return _mm512_div_ps(a, b); }
static inline titans__vf titans__ops_vsqrt(titans__vf a) { return _mm512_sqrt_ps(a); }
static inline titans__vf titans__ops_vabs(titans__vf a) { return _mm512_abs_ps(a); }
/* a < b ? x : y per lane (false when a or b is NaN) */
static inline titans__vf titans__ops_vsel_lt(titans__vf a, titans__vf b, titans__vf x, titans__vf y) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x);
}
/* max(lo, min(hi, x)) keeping NaN: x86 min/max return the second operand when one is NaN */
static inline titans__vf titans__ops_vclamp(titans__vf x, float lo, float hi) {
  return _mm512_max_ps(_mm512_set1_ps(lo), _mm512_min_ps(_mm512_set1_ps(hi), x));
}
static inline titans__vf titans__ops_vround(titans__vf x) {
  return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* 2^n for integral n in [-126, 127], written into the exponent field */
static inline titans__vf titans__ops_vpow2i(titans__vf n) {
  __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
  return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}
/* p 2^n for integral n by adding n to the exponent field; exact while the result stays normal */
static inline titans__vf titans__ops_vldexp(titans__vf p, titans__vf n) {
  __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
}
#elif defined(TITANS__AVX2)
static inline titans__vf titans__ops_vdiv(titans__vf a, titans__vf b) { return _mm256_div_ps(a, b); }
static inline titans__vf titans__ops_vsqrt(titans__vf a) { return _mm256_sqrt_ps(a); }
static inline titans__vf titans__ops_vabs(titans__vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline titans__vf titans__ops_vsel_lt(titans__vf a, titans__vf b, titans__vf x, titans__vf y) {
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
static inline titans__vf titans__ops_vclamp(titans__vf x, float lo, float hi) {
  return _mm256_max_ps(_mm256_set1_ps(lo), _mm256_min_ps(_mm256_set1_ps(hi), x));
}
static inline titans__vf titans__ops_vround(titans__vf x) {
  return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline titans__vf titans__ops_vpow2i(titans__vf n) {
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
static inline titans__vf titans__ops_vldexp(titans__vf p, titans__vf n) {
  __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
}
#elif defined(TITANS__NEON)
static inline titans__vf titans__ops_vdiv(titans__vf a, titans__vf b) { return vdivq_f32(a, b); }
static inline titans__vf titans__ops_vsqrt(titans__vf a) { return vsqrtq_f32(a); }
static inline titans__vf titans__ops_vabs(titans__vf a) { return vabsq_f32(a); }
static inline titans__vf titans__ops_vsel_lt(titans__vf a, titans__vf b, titans__vf x, titans__vf y) {
  return vbslq_f32(vcltq_f32(a, b), x, y);
}
/* NEON min/max return NaN when either operand is NaN */
static inline titans__vf titans__ops_vclamp(titans__vf x, float lo, float hi) {
  return vmaxq_f32(vdupq_n_f32(lo), vminq_f32(vdupq_n_f32(hi), x));
}
static inline titans__vf titans__ops_vround(titans__vf x) { return vrndnq_f32(x); }
static inline titans__vf titans__ops_vpow2i(titans__vf n) {
  return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23));
}
static inline titans__vf titans__ops_vldexp(titans__vf p, titans__vf n) {
  return vreinterpretq_f32_s32(vaddq_s32(vreinterpretq_s32_f32(p), vshlq_n_s32(vcvtnq_s32_f32(n), 23)));
}
#else
static inline titans__vf titans__ops_vdiv(titans__vf a, titans__vf b) { return a / b; }
static inline titans__vf titans__ops_vsqrt(titans__vf a) { return sqrtf(a); }
static inline titans__vf titans__ops_vabs(titans__vf a) { return fabsf(a); }
static inline titans__vf titans__ops_vsel_lt(titans__vf a, titans__vf b, titans__vf x, titans__vf y) {
  return a < b ? x : y;
}
#endif

/* ---- exp, sigmoid, tanh ------------------------------------------------------------------------
   exp(x) = 2^n exp(r) with n = round(x / ln2) and r = x - n ln2 in [-ln2/2, ln2/2] (ln2 split in a
   9-bit head, so n * head is exact, and a tail). exp(r) = 1 + r + r^2 g(r), g a degree-4 Chebyshev
   fit of (exp(r) - 1 - r) / r^2 (made for this file; polynomial error 1.1e-8 relative, 0.1 ulp).
   x is clamped to [-104, 89]: exp is 0 below -103.98 and +Inf above 88.73 in float, and the clamp
   keeps n in [-150, 128]. 2^n is applied in two steps: n1 = clamp(n, -125, 127) is added to the
   exponent bits of p (exact: the result stays normal), then one multiply by 2^(n - n1), n - n1 in
   [-25, 1], rounds once into a subnormal or overflows to +Inf. With a single float multiply there is
   nothing for -ffast-math reassociation to regroup. NaN passes through the clamp and propagates. */
static const float titans__exp_g[5] = {1.39263919e-3f, 8.363345811e-3f, 4.166655336e-2f, 1.666657599e-1f, 0.5f};
static const float titans__ln2_hi = 0.693359375f, titans__ln2_lo = -2.12194440e-4f; /* hi + lo = ln 2 */

/* Scalar exp: the vector code's algorithm, for the tails of vector loops. */
static inline float titans__expf(float x) {
  if (x != x) return x;
  x = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  float n = floorf(x * 1.44269504f + 0.5f);
  float r = x - n * titans__ln2_hi;
  r = r - n * titans__ln2_lo;
  const float *c = titans__exp_g;
  float g = (((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4];
  return ldexpf(1.0f + r * (1.0f + r * g), (int)n);
}

#if defined(TITANS__SCALAR)
static inline titans__vf titans__vexp(titans__vf x) { return titans__expf(x); }
#else
static inline titans__vf titans__vexp(titans__vf x) {
  x = titans__ops_vclamp(x, -104.0f, 89.0f);
  titans__vf n = titans__ops_vround(titans__vmul(x, titans__vset1(1.44269504f)));
  titans__vf r = titans__vfma(n, titans__vset1(-titans__ln2_hi), x);
  r = titans__vfma(n, titans__vset1(-titans__ln2_lo), r);
  const float *c = titans__exp_g;
  titans__vf g = titans__vfma(titans__vset1(c[0]), r, titans__vset1(c[1]));
  g = titans__vfma(g, r, titans__vset1(c[2]));
  g = titans__vfma(g, r, titans__vset1(c[3]));
  g = titans__vfma(g, r, titans__vset1(c[4]));
  titans__vf one = titans__vset1(1.0f);
  titans__vf p = titans__vfma(r, titans__vfma(r, g, one), one);
  titans__vf n1 = titans__ops_vclamp(n, -125.0f, 127.0f);
  return titans__vmul(titans__ops_vldexp(p, n1), titans__ops_vpow2i(titans__vsub(n, n1)));
}
#endif

/* sigma(x) from e = exp(-|x|) <= 1, which never overflows: 1/(1+e) for x >= 0, e/(1+e) below. */
static inline float titans__sigmoidf(float x) {
  float e = titans__expf(-fabsf(x));
  float s = 1.0f / (1.0f + e);
  return x < 0.0f ? e * s : s;
}

static inline titans__vf titans__vsigmoid(titans__vf x) {
  titans__vf zero = titans__vset1(0.0f), one = titans__vset1(1.0f);
  titans__vf e = titans__vexp(titans__vsub(zero, titans__ops_vabs(x)));
  titans__vf s = titans__ops_vdiv(one, titans__vadd(one, e));
  return titans__ops_vsel_lt(x, zero, titans__vmul(e, s), s);
}

/* tanh: below |x| = 0.55, x (1 + x^2 h(x^2)) with h a degree-4 Chebyshev fit of (tanh(x) - x) / x^3
   (error 4e-9 relative), where (1 - e)/(1 + e) would cancel; above, sign(x) (1 - e)/(1 + e) with
   e = exp(-2|x|). */
static const float titans__tanh_h[5] = {-6.610227831e-3f, 2.130938866e-2f, -5.390942883e-2f, 1.333311373e-1f,
                                        -3.333333201e-1f};

static inline float titans__tanhf(float x) {
  float ax = fabsf(x);
  if (ax < 0.55f) {
    const float *c = titans__tanh_h;
    float y = x * x;
    return x * (1.0f + y * ((((c[0] * y + c[1]) * y + c[2]) * y + c[3]) * y + c[4])); /* keeps -0 */
  }
  float e = titans__expf(-2.0f * ax);
  float t = (1.0f - e) / (1.0f + e);
  return x < 0.0f ? -t : t;
}

static inline titans__vf titans__vtanh(titans__vf x) {
  titans__vf zero = titans__vset1(0.0f), one = titans__vset1(1.0f), ax = titans__ops_vabs(x);
  titans__vf e = titans__vexp(titans__vmul(ax, titans__vset1(-2.0f)));
  titans__vf big = titans__ops_vdiv(titans__vsub(one, e), titans__vadd(one, e));
  big = titans__ops_vsel_lt(x, zero, titans__vsub(zero, big), big);
  const float *c = titans__tanh_h;
  titans__vf y = titans__vmul(x, x);
  titans__vf h = titans__vfma(titans__vset1(c[0]), y, titans__vset1(c[1]));
  h = titans__vfma(h, y, titans__vset1(c[2]));
  h = titans__vfma(h, y, titans__vset1(c[3]));
  h = titans__vfma(h, y, titans__vset1(c[4]));
  titans__vf small = titans__vmul(x, titans__vfma(y, h, one)); /* x (1 + y h) keeps the sign of -0 */
  return titans__ops_vsel_lt(ax, titans__vset1(0.55f), small, big);
}

/* ---- threads and row helpers ------------------------------------------------------------------ */
static inline size_t titans__ops_min(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t titans__ops_ceil_div(size_t a, size_t b) { return a / b + (a % b != 0); }
/* a * b + c rounded as the vector lanes round it (one rounding with FMA), for scalar tails that must
   match them bit for bit */
static inline float titans__ops_fmaf(float a, float b, float c) {
#if defined(TITANS__SCALAR)
  return a * b + c;
#else
  return fmaf(a, b, c);
#endif
}

#ifdef _OPENMP
/* Start threads only when the work (floats touched) pays for them, there are at least two units
   (blocks, rows) to share, and the caller is not in a parallel region already (then the kernel runs
   on the calling thread). */
static inline int titans__ops_par(size_t work, size_t units) {
  return work >= TITANS__OPS_PAR_WORK && units > 1 && !omp_in_parallel();
}
#endif

typedef void (*titans__ops_fwd_fn)(float *out, const float *inp, size_t n);
typedef void (*titans__ops_bwd_fn)(float *dinp, const float *dout, const float *saved, size_t n);

/* fn over n floats in blocks of TITANS__OPS_BLOCK, threaded when large. Blocks start at multiples of
   the vector width, so which elements take the scalar tail depends on n only, not on the threads. */
static void titans__ops_map_fwd(titans__ops_fwd_fn fn, float *out, const float *inp, size_t n) {
  ptrdiff_t nb = (ptrdiff_t)titans__ops_ceil_div(n, TITANS__OPS_BLOCK);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(n, (size_t)nb))
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t i0 = (size_t)b * TITANS__OPS_BLOCK;
    fn(out + i0, inp + i0, titans__ops_min(n - i0, TITANS__OPS_BLOCK));
  }
}

static void titans__ops_map_bwd(titans__ops_bwd_fn fn, float *dinp, const float *dout, const float *saved, size_t n) {
  ptrdiff_t nb = (ptrdiff_t)titans__ops_ceil_div(n, TITANS__OPS_BLOCK);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(n, (size_t)nb))
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t i0 = (size_t)b * TITANS__OPS_BLOCK;
    fn(dinp + i0, dout + i0, saved + i0, titans__ops_min(n - i0, TITANS__OPS_BLOCK));
  }
}

/* Largest element of x [n], n >= 1. A NaN may be skipped here; it still reaches the row's result
   through the sum of exps. */
static float titans__ops_rowmax(const float *x, size_t n) {
  float m = x[0];
  size_t i = 0;
  if (n >= TITANS__VW) {
    float lanes[TITANS__VW];
    titans__vf acc = titans__vload(x);
    for (i = TITANS__VW; i + TITANS__VW <= n; i += TITANS__VW) acc = titans__vmax(acc, titans__vload(x + i));
    titans__vstore(lanes, acc);
    for (size_t k = 0; k < TITANS__VW; k++) m = lanes[k] > m ? lanes[k] : m;
  }
  for (; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

/* out [n] = exp(x - shift) (out may be NULL: sum only; may alias x); returns the sum. Runs of 256
   floats are summed in float vector lanes and the runs in double, so a 50000-wide row (a vocabulary)
   keeps its sum accurate to ~1e-7 whatever the vector width. */
static float titans__ops_exp_sum(float *out, const float *x, float shift, size_t n) {
  titans__vf vs = titans__vset1(shift);
  double total = 0.0;
  size_t i = 0;
  while (i + TITANS__VW <= n) {
    titans__vf acc = titans__vset1(0.0f);
    size_t end = titans__ops_min(n, i + 256);
    for (; i + TITANS__VW <= end; i += TITANS__VW) {
      titans__vf e = titans__vexp(titans__vsub(titans__vload(x + i), vs));
      if (out) titans__vstore(out + i, e);
      acc = titans__vadd(acc, e);
    }
    total += (double)titans__vsum(acc);
  }
  for (; i < n; i++) {
    float e = titans__expf(x[i] - shift);
    if (out) out[i] = e;
    total += (double)e;
  }
  return (float)total;
}

/* x [n] *= a */
static inline void titans__ops_scale(float *x, float a, size_t n) {
  titans__vf va = titans__vset1(a);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) titans__vstore(x + i, titans__vmul(titans__vload(x + i), va));
  for (; i < n; i++) x[i] *= a;
}

/* y [n] += a [n] * b [n] */
static inline void titans__ops_fma_row(float *y, const float *a, const float *b, size_t n) {
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW)
    titans__vstore(y + i, titans__vfma(titans__vload(a + i), titans__vload(b + i), titans__vload(y + i)));
  for (; i < n; i++) y[i] += a[i] * b[i];
}

/* sum_i a[i] b[i] c[i] */
static inline float titans__ops_dot3(const float *a, const float *b, const float *c, size_t n) {
  titans__vf acc = titans__vset1(0.0f);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW)
    acc = titans__vfma(titans__vmul(titans__vload(a + i), titans__vload(b + i)), titans__vload(c + i), acc);
  float s = titans__vsum(acc);
  for (; i < n; i++) s += a[i] * b[i] * c[i];
  return s;
}

/* ---- SiLU, sigmoid, tanh ---------------------------------------------------------------------- */
static inline void titans__silu_forward_ref(float *out, const float *inp, size_t n) { /* [n] */
  for (size_t i = 0; i < n; i++) out[i] = inp[i] / (1.0f + expf(-inp[i]));
}

static inline void titans__silu_backward_ref(float *dinp, const float *dout, const float *inp, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float s = 1.0f / (1.0f + expf(-inp[i]));
    dinp[i] += dout[i] * s * (1.0f + inp[i] * (1.0f - s));
  }
}

static void titans__silu_fwd_span(float *out, const float *inp, size_t n) {
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf x = titans__vload(inp + i);
    titans__vstore(out + i, titans__vmul(x, titans__vsigmoid(x)));
  }
  for (; i < n; i++) out[i] = inp[i] * titans__sigmoidf(inp[i]);
}

/* SiLU'(x) = s + x s (1 - s) = s (1 + x (1 - s)), s = sigma(x) */
static void titans__silu_bwd_span(float *dinp, const float *dout, const float *inp, size_t n) {
  titans__vf one = titans__vset1(1.0f);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf x = titans__vload(inp + i), s = titans__vsigmoid(x);
    titans__vf dx = titans__vmul(s, titans__vfma(x, titans__vsub(one, s), one));
    titans__vstore(dinp + i, titans__vfma(titans__vload(dout + i), dx, titans__vload(dinp + i)));
  }
  for (; i < n; i++) {
    float s = titans__sigmoidf(inp[i]);
    dinp[i] += dout[i] * (s * (1.0f + inp[i] * (1.0f - s)));
  }
}

TITANSDEF void titans_silu_forward(float *out, const float *inp, size_t n) {
  titans__ops_map_fwd(titans__silu_fwd_span, out, inp, n);
}

TITANSDEF void titans_silu_backward(float *dinp, const float *dout, const float *inp, size_t n) {
  titans__ops_map_bwd(titans__silu_bwd_span, dinp, dout, inp, n);
}

static inline void titans__sigmoid_forward_ref(float *out, const float *inp, size_t n) { /* [n] */
  for (size_t i = 0; i < n; i++) out[i] = 1.0f / (1.0f + expf(-inp[i]));
}

static inline void titans__sigmoid_backward_ref(float *dinp, const float *dout, const float *out, size_t n) {
  for (size_t i = 0; i < n; i++) dinp[i] += dout[i] * out[i] * (1.0f - out[i]);
}

static void titans__sigmoid_fwd_span(float *out, const float *inp, size_t n) {
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) titans__vstore(out + i, titans__vsigmoid(titans__vload(inp + i)));
  for (; i < n; i++) out[i] = titans__sigmoidf(inp[i]);
}

/* sigma' = y (1 - y) from the output y */
static void titans__sigmoid_bwd_span(float *dinp, const float *dout, const float *out, size_t n) {
  titans__vf one = titans__vset1(1.0f);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf y = titans__vload(out + i);
    titans__vf dy = titans__vmul(titans__vload(dout + i), titans__vmul(y, titans__vsub(one, y)));
    titans__vstore(dinp + i, titans__vadd(titans__vload(dinp + i), dy));
  }
  for (; i < n; i++) dinp[i] += dout[i] * (out[i] * (1.0f - out[i]));
}

TITANSDEF void titans_sigmoid_forward(float *out, const float *inp, size_t n) {
  titans__ops_map_fwd(titans__sigmoid_fwd_span, out, inp, n);
}

TITANSDEF void titans_sigmoid_backward(float *dinp, const float *dout, const float *out, size_t n) {
  titans__ops_map_bwd(titans__sigmoid_bwd_span, dinp, dout, out, n);
}

static inline void titans__tanh_forward_ref(float *out, const float *inp, size_t n) { /* [n] */
  for (size_t i = 0; i < n; i++) out[i] = tanhf(inp[i]);
}

static inline void titans__tanh_backward_ref(float *dinp, const float *dout, const float *out, size_t n) {
  for (size_t i = 0; i < n; i++) dinp[i] += dout[i] * (1.0f - out[i] * out[i]);
}

static void titans__tanh_fwd_span(float *out, const float *inp, size_t n) {
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) titans__vstore(out + i, titans__vtanh(titans__vload(inp + i)));
  for (; i < n; i++) out[i] = titans__tanhf(inp[i]);
}

/* tanh' = 1 - y^2 from the output y */
static void titans__tanh_bwd_span(float *dinp, const float *dout, const float *out, size_t n) {
  titans__vf one = titans__vset1(1.0f);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf y = titans__vload(out + i);
    titans__vf dy = titans__vsub(one, titans__vmul(y, y));
    titans__vstore(dinp + i, titans__vfma(titans__vload(dout + i), dy, titans__vload(dinp + i)));
  }
  for (; i < n; i++) dinp[i] += dout[i] * (1.0f - out[i] * out[i]);
}

TITANSDEF void titans_tanh_forward(float *out, const float *inp, size_t n) {
  titans__ops_map_fwd(titans__tanh_fwd_span, out, inp, n);
}

TITANSDEF void titans_tanh_backward(float *dinp, const float *dout, const float *out, size_t n) {
  titans__ops_map_bwd(titans__tanh_bwd_span, dinp, dout, out, n);
}

/* ---- softmax ---------------------------------------------------------------------------------- */
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

static void titans__softmax_row(float *out, const float *inp, size_t n) { /* [n] */
  if (n == 0) return;
  float mx = titans__ops_rowmax(inp, n);
  if (mx == -INFINITY) mx = 0.0f; /* all -Inf: every exp is 0 and the row becomes zeros */
  float sum = titans__ops_exp_sum(out, inp, mx, n);
  titans__ops_scale(out, sum == 0.0f ? 0.0f : 1.0f / sum, n); /* a NaN sum keeps the row NaN */
}

/* dx += y (g - y.g) */
static void titans__softmax_bwd_row(float *dx, const float *g, const float *y, size_t n) { /* [n] */
  float dot = titans__dot(g, y, n);
  titans__vf vd = titans__vset1(dot);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf gy = titans__vsub(titans__vload(g + i), vd);
    titans__vstore(dx + i, titans__vfma(titans__vload(y + i), gy, titans__vload(dx + i)));
  }
  for (; i < n; i++) dx[i] += y[i] * (g[i] - dot);
}

TITANSDEF void titans_softmax_forward(float *out, const float *inp, size_t rows, size_t cols) {
  ptrdiff_t nr = (ptrdiff_t)rows;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(rows * cols, rows))
#endif
  for (ptrdiff_t r = 0; r < nr; r++) titans__softmax_row(out + (size_t)r * cols, inp + (size_t)r * cols, cols);
}

TITANSDEF void titans_softmax_backward(float *dinp, const float *dout, const float *out, size_t rows, size_t cols) {
  ptrdiff_t nr = (ptrdiff_t)rows;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(rows * cols, rows))
#endif
  for (ptrdiff_t r = 0; r < nr; r++) {
    size_t o = (size_t)r * cols;
    titans__softmax_bwd_row(dinp + o, dout + o, out + o, cols);
  }
}

/* ---- RMSNorm ---------------------------------------------------------------------------------- */
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

/* out [n] = x * rstd * gain; returns rstd = 1 / sqrt(mean(x^2) + 1e-6) */
static float titans__rmsnorm_row(float *out, const float *x, const float *gain, size_t n) {
  float ms = n ? titans__dot(x, x, n) / (float)n : 0.0f;
  float s = 1.0f / sqrtf(ms + 1e-6f);
  titans__vf vs = titans__vset1(s);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW)
    titans__vstore(out + i, titans__vmul(titans__vmul(titans__vload(x + i), vs), titans__vload(gain + i)));
  for (; i < n; i++) out[i] = x[i] * s * gain[i];
  return s;
}

/* Differentiates out_j = x_j s gain_j, s = (mean(x^2) + eps)^(-1/2), ds/dx_j = -s^3 x_j / n:
   dx_j += s (g_j gain_j - x_j s^2 (sum_i g_i gain_i x_i) / n); and, when dgain is not NULL,
   dgain_j += g_j x_j s exactly as titans__rmsnorm_dgain_row adds it. */
static void titans__rmsnorm_bwd_row(float *dx, float *dgain, const float *g, const float *x, const float *gain,
                                    float s, size_t n) {
  float c = n ? s * s * titans__ops_dot3(g, gain, x, n) / (float)n : 0.0f;
  titans__vf vs = titans__vset1(s), vc = titans__vset1(-c);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf gi = titans__vload(g + i), xi = titans__vload(x + i);
    titans__vf t = titans__vfma(xi, vc, titans__vmul(gi, titans__vload(gain + i)));
    titans__vstore(dx + i, titans__vfma(vs, t, titans__vload(dx + i)));
    if (dgain) titans__vstore(dgain + i, titans__vfma(titans__vmul(gi, xi), vs, titans__vload(dgain + i)));
  }
  for (; i < n; i++) {
    dx[i] += s * (g[i] * gain[i] - x[i] * c);
    if (dgain) dgain[i] = titans__ops_fmaf(g[i] * x[i], s, dgain[i]);
  }
}

/* dgain [m] += g [m] * x [m] * s for one row. The threaded and the serial backward both add every
   row through this, in row order, so dgain comes out bit-identical whatever the thread count. */
static inline void titans__rmsnorm_dgain_row(float *dgain, const float *g, const float *x, float s, size_t m) {
  titans__vf vs = titans__vset1(s);
  size_t i = 0;
  for (; i + TITANS__VW <= m; i += TITANS__VW)
    titans__vstore(dgain + i, titans__vfma(titans__vmul(titans__vload(g + i), titans__vload(x + i)), vs,
                                           titans__vload(dgain + i)));
  for (; i < m; i++) dgain[i] = titans__ops_fmaf(g[i] * x[i], s, dgain[i]);
}

TITANSDEF void titans_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *gain, size_t rows,
                                      size_t cols) {
  ptrdiff_t nr = (ptrdiff_t)rows;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(rows * cols, rows))
#endif
  for (ptrdiff_t r = 0; r < nr; r++) {
    size_t o = (size_t)r * cols;
    rstd[r] = titans__rmsnorm_row(out + o, inp + o, gain, cols);
  }
}

/* Serial: one pass over the rows, dinp and dgain together. Threaded: dinp over rows, then dgain over
   column blocks (it sums over rows, so splitting rows would make two threads add into one element). */
TITANSDEF void titans_rmsnorm_backward(float *dinp, float *dgain, const float *dout, const float *inp,
                                       const float *gain, const float *rstd, size_t rows, size_t cols) {
  ptrdiff_t nr = (ptrdiff_t)rows, nb = (ptrdiff_t)titans__ops_ceil_div(cols, TITANS__OPS_CB);
  int par = 0;
#ifdef _OPENMP
  par = titans__ops_par(rows * cols, rows) && omp_get_max_threads() > 1;
#pragma omp parallel for schedule(static) if (par)
#endif
  for (ptrdiff_t r = 0; r < nr; r++) {
    size_t o = (size_t)r * cols;
    titans__rmsnorm_bwd_row(dinp + o, par ? NULL : dgain, dout + o, inp + o, gain, rstd[r], cols);
  }
  if (!dgain || !par) return;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t j0 = (size_t)b * TITANS__OPS_CB, m = titans__ops_min(cols, j0 + TITANS__OPS_CB) - j0;
    for (size_t r = 0; r < rows; r++)
      titans__rmsnorm_dgain_row(dgain + j0, dout + r * cols + j0, inp + r * cols + j0, rstd[r], m);
  }
}

/* ---- L2Norm ----------------------------------------------------------------------------------- */
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

/* out [n] = x * rnorm; returns rnorm = 1 / sqrt(sum(x^2) + 1e-6) */
static float titans__l2norm_row(float *out, const float *x, size_t n) {
  float s = 1.0f / sqrtf(titans__dot(x, x, n) + 1e-6f);
  titans__vf vs = titans__vset1(s);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) titans__vstore(out + i, titans__vmul(titans__vload(x + i), vs));
  for (; i < n; i++) out[i] = x[i] * s;
  return s;
}

/* Differentiates out_j = x_j s, s = (sum(x^2) + eps)^(-1/2): dx_j += s (g_j - x_j s^2 (g . x)). */
static void titans__l2norm_bwd_row(float *dx, const float *g, const float *x, float s, size_t n) {
  float c = s * s * titans__dot(g, x, n);
  titans__vf vs = titans__vset1(s), vc = titans__vset1(-c);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf t = titans__vfma(titans__vload(x + i), vc, titans__vload(g + i));
    titans__vstore(dx + i, titans__vfma(vs, t, titans__vload(dx + i)));
  }
  for (; i < n; i++) dx[i] += s * (g[i] - x[i] * c);
}

TITANSDEF void titans_l2norm_forward(float *out, float *rnorm, const float *inp, size_t rows, size_t cols) {
  ptrdiff_t nr = (ptrdiff_t)rows;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(rows * cols, rows))
#endif
  for (ptrdiff_t r = 0; r < nr; r++) {
    size_t o = (size_t)r * cols;
    rnorm[r] = titans__l2norm_row(out + o, inp + o, cols);
  }
}

TITANSDEF void titans_l2norm_backward(float *dinp, const float *dout, const float *inp, const float *rnorm,
                                      size_t rows, size_t cols) {
  ptrdiff_t nr = (ptrdiff_t)rows;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(rows * cols, rows))
#endif
  for (ptrdiff_t r = 0; r < nr; r++) {
    size_t o = (size_t)r * cols;
    titans__l2norm_bwd_row(dinp + o, dout + o, inp + o, rnorm[r], cols);
  }
}

/* ---- causal depthwise conv -------------------------------------------------------------------- */

/* Row tau of the sequence extended by its tail: inp row tau for tau >= 0, tail row K-1+tau for
   -(K-1) <= tau < 0, NULL (zeros) there when there is no tail. K >= 1. */
static inline const float *titans__conv_row(const float *inp, const float *tail, ptrdiff_t tau, size_t C, size_t K) {
  if (tau >= 0) return inp + (size_t)tau * C;
  if (!tail) return NULL;
  return tail + (size_t)((ptrdiff_t)K - 1 + tau) * C;
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

/* out rows [t0, t1) x channels [j0, j1): taps added in order s = 0..K-1 with the weight column of tap
   s gathered into a contiguous vector (weight is [C, K]). */
static void titans__conv_fwd_block(float *out, const float *inp, const float *tail, const float *weight, size_t t0,
                                   size_t t1, size_t j0, size_t j1, size_t C, size_t K) {
  float w[TITANS__OPS_CB];
  size_t m = j1 - j0;
  for (size_t t = t0; t < t1; t++) memset(out + t * C + j0, 0, m * sizeof(float));
  for (size_t s = 0; s < K; s++) {
    for (size_t j = 0; j < m; j++) w[j] = weight[(j0 + j) * K + s];
    for (size_t t = t0; t < t1; t++) {
      const float *u = titans__conv_row(inp, tail, (ptrdiff_t)(t + s) - (ptrdiff_t)(K - 1), C, K);
      if (u) titans__ops_fma_row(out + t * C + j0, w, u + j0, m);
    }
  }
}

/* dinp rows [t0, t1) x channels [j0, j1): input row tau fed outputs t = tau + K-1-s, s = 0..K-1. */
static void titans__conv_bwd_inp_block(float *dinp, const float *dout, const float *weight, size_t t0, size_t t1,
                                       size_t j0, size_t j1, size_t T, size_t C, size_t K) {
  float w[TITANS__OPS_CB];
  size_t m = j1 - j0;
  for (size_t s = 0; s < K; s++) {
    for (size_t j = 0; j < m; j++) w[j] = weight[(j0 + j) * K + s];
    for (size_t tau = t0; tau < t1; tau++) {
      size_t t = tau + (K - 1 - s);
      if (t < T) titans__ops_fma_row(dinp + tau * C + j0, w, dout + t * C + j0, m);
    }
  }
}

/* dweight for channels [j0, j1): each tap summed over the whole sequence in order, then added. Up to
   TITANS__OPS_SG taps share one pass over the sequence (their input rows are neighbours in cache). */
static void titans__conv_bwd_w_block(float *dweight, const float *dout, const float *inp, const float *tail,
                                     size_t j0, size_t j1, size_t T, size_t C, size_t K) {
  float acc[TITANS__OPS_SG][TITANS__OPS_CB];
  size_t m = j1 - j0;
  for (size_t s0 = 0; s0 < K; s0 += TITANS__OPS_SG) {
    size_t ns = titans__ops_min(TITANS__OPS_SG, K - s0);
    memset(acc, 0, sizeof acc);
    for (size_t t = 0; t < T; t++) {
      for (size_t s = 0; s < ns; s++) {
        const float *u = titans__conv_row(inp, tail, (ptrdiff_t)(t + s0 + s) - (ptrdiff_t)(K - 1), C, K);
        if (u) titans__ops_fma_row(acc[s], dout + t * C + j0, u + j0, m);
      }
    }
    for (size_t s = 0; s < ns; s++)
      for (size_t j = 0; j < m; j++) dweight[(j0 + j) * K + s0 + s] += acc[s][j];
  }
}

TITANSDEF void titans_conv_forward(float *out, const float *inp, const float *tail, const float *weight, size_t T,
                                   size_t C, size_t K) {
  size_t ncb = titans__ops_ceil_div(C, TITANS__OPS_CB);
  ptrdiff_t nb = (ptrdiff_t)(titans__ops_ceil_div(T, TITANS__OPS_TB) * ncb);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(T * C * (K + 1), (size_t)nb))
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t t0 = (size_t)b / ncb * TITANS__OPS_TB, j0 = (size_t)b % ncb * TITANS__OPS_CB;
    titans__conv_fwd_block(out, inp, tail, weight, t0, titans__ops_min(T, t0 + TITANS__OPS_TB), j0,
                           titans__ops_min(C, j0 + TITANS__OPS_CB), C, K);
  }
}

TITANSDEF void titans_conv_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                    const float *tail, const float *weight, size_t T, size_t C, size_t K) {
  size_t ncb = titans__ops_ceil_div(C, TITANS__OPS_CB);
  ptrdiff_t nb = dinp ? (ptrdiff_t)(titans__ops_ceil_div(T, TITANS__OPS_TB) * ncb) : 0;
  ptrdiff_t nc = dweight ? (ptrdiff_t)ncb : 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(T * C * K, (size_t)nb))
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t t0 = (size_t)b / ncb * TITANS__OPS_TB, j0 = (size_t)b % ncb * TITANS__OPS_CB;
    titans__conv_bwd_inp_block(dinp, dout, weight, t0, titans__ops_min(T, t0 + TITANS__OPS_TB), j0,
                               titans__ops_min(C, j0 + TITANS__OPS_CB), T, C, K);
  }
  /* dweight sums over the sequence: split over channels, so one thread owns each weight */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(T * C * K, (size_t)nc))
#endif
  for (ptrdiff_t b = 0; b < nc; b++) {
    size_t j0 = (size_t)b * TITANS__OPS_CB;
    titans__conv_bwd_w_block(dweight, dout, inp, tail, j0, titans__ops_min(C, j0 + TITANS__OPS_CB), T, C, K);
  }
}

/* ---- embedding -------------------------------------------------------------------------------- */
TITANSDEF int titans_embedding_forward(float *out, const int *tokens, const float *table, size_t n, size_t vocab,
                                       size_t d) {
  for (size_t i = 0; i < n; i++)
    if (tokens[i] < 0 || (size_t)tokens[i] >= vocab) return TITANS_ERR_ARG;
  if (d == 0) return TITANS_OK;
  ptrdiff_t nn = (ptrdiff_t)n;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(n * d, n))
#endif
  for (ptrdiff_t i = 0; i < nn; i++) memcpy(out + (size_t)i * d, table + (size_t)tokens[i] * d, d * sizeof(float));
  return TITANS_OK;
}

/* Repeated tokens add into one table row, so threads split the d columns: each thread adds its
   columns of every token, in token order. */
TITANSDEF void titans_embedding_backward(float *dtable, const float *dout, const int *tokens, size_t n, size_t d) {
  ptrdiff_t nb = (ptrdiff_t)titans__ops_ceil_div(d, TITANS__OPS_CB);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(n * d, (size_t)nb))
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t j0 = (size_t)b * TITANS__OPS_CB, m = titans__ops_min(d, j0 + TITANS__OPS_CB) - j0;
    for (size_t i = 0; i < n; i++)
      if (tokens[i] >= 0) titans__axpy(dtable + (size_t)tokens[i] * d + j0, 1.0f, dout + i * d + j0, m);
  }
}

/* ---- cross-entropy ---------------------------------------------------------------------------- */
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

/* Loss of one row, -log softmax(x)[target] = (max - x[target]) + log(sum exp(x - max)); when drow is
   not NULL it gets gscale * (softmax - onehot). */
static float titans__ce_row(float *drow, const float *x, int target, size_t V, float gscale) {
  float mx = titans__ops_rowmax(x, V);
  float sum = titans__ops_exp_sum(drow, x, mx, V);
  if (drow) {
    titans__ops_scale(drow, gscale / sum, V);
    drow[target] -= gscale;
  }
  return (mx - x[target]) + logf(sum);
}

TITANSDEF float titans_cross_entropy(float *dlogits, const float *logits, const int *targets, size_t n, size_t V,
                                     float scale) {
  size_t count = 0;
  for (size_t i = 0; i < n; i++) {
    if (targets[i] >= 0 && (size_t)targets[i] >= V) return NAN;
    count += targets[i] >= 0;
  }
  float gscale = count ? scale / (float)count : 0.0f;
  double part[TITANS__OPS_CE_PARTS] = {0}; /* loss sums of fixed row groups, added in order at the end */
  size_t per = titans__ops_ceil_div(n, TITANS__OPS_CE_PARTS);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(n * V, n))
#endif
  for (ptrdiff_t p = 0; p < TITANS__OPS_CE_PARTS; p++) {
    size_t i1 = titans__ops_min(n, ((size_t)p + 1) * per);
    for (size_t i = titans__ops_min(n, (size_t)p * per); i < i1; i++) {
      float *drow = dlogits ? dlogits + i * V : NULL; /* [V] */
      if (targets[i] >= 0) part[p] += titans__ce_row(drow, logits + i * V, targets[i], V, gscale);
      else if (drow && V) memset(drow, 0, V * sizeof(float));
    }
  }
  double total = 0.0;
  for (size_t p = 0; p < TITANS__OPS_CE_PARTS; p++) total += part[p];
  return count ? (float)(total / (double)count) : 0.0f;
}

/* ---- AdamW ------------------------------------------------------------------------------------ */
typedef struct titans__adamw_hp {
  float lr, beta1, beta2, eps, wd;
  float c1; /* 1 / (1 - beta1^step) */
  float c2; /* 1 / sqrt(1 - beta2^step) */
} titans__adamw_hp;

static titans__adamw_hp titans__adamw_make(float lr, float beta1, float beta2, float eps, float wd, long step) {
  titans__adamw_hp h;
  double t = (double)(step < 1 ? 1 : step);
  h.lr = lr;
  h.beta1 = beta1;
  h.beta2 = beta2;
  h.eps = eps;
  h.wd = wd;
  h.c1 = (float)(1.0 / (1.0 - pow((double)beta1, t)));
  h.c2 = (float)(1.0 / sqrt(1.0 - pow((double)beta2, t)));
  return h;
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

static void titans__adamw_span(float *p, const float *g, float *m, float *v, size_t n, const titans__adamw_hp *h) {
  titans__vf b1 = titans__vset1(h->beta1), b2 = titans__vset1(h->beta2), a1 = titans__vset1(1.0f - h->beta1);
  titans__vf a2 = titans__vset1(1.0f - h->beta2), c1 = titans__vset1(h->c1), c2 = titans__vset1(h->c2);
  titans__vf eps = titans__vset1(h->eps), wd = titans__vset1(h->wd), nlr = titans__vset1(-h->lr);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf gi = titans__vload(g + i), pi = titans__vload(p + i);
    titans__vf mi = titans__vfma(b1, titans__vload(m + i), titans__vmul(a1, gi));
    titans__vf vi = titans__vfma(b2, titans__vload(v + i), titans__vmul(titans__vmul(a2, gi), gi));
    titans__vf den = titans__vfma(titans__ops_vsqrt(vi), c2, eps);
    titans__vf upd = titans__vfma(wd, pi, titans__ops_vdiv(titans__vmul(mi, c1), den));
    titans__vstore(m + i, mi);
    titans__vstore(v + i, vi);
    titans__vstore(p + i, titans__vfma(nlr, upd, pi));
  }
  for (; i < n; i++) {
    m[i] = h->beta1 * m[i] + (1.0f - h->beta1) * g[i];
    v[i] = h->beta2 * v[i] + (1.0f - h->beta2) * g[i] * g[i];
    p[i] -= h->lr * (m[i] * h->c1 / (sqrtf(v[i]) * h->c2 + h->eps) + h->wd * p[i]);
  }
}

TITANSDEF void titans_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                                   float beta1, float beta2, float eps, float weight_decay, long step) {
  titans__adamw_hp h = titans__adamw_make(lr, beta1, beta2, eps, weight_decay, step);
  ptrdiff_t nb = (ptrdiff_t)titans__ops_ceil_div(n, TITANS__OPS_BLOCK);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (titans__ops_par(n, (size_t)nb))
#endif
  for (ptrdiff_t b = 0; b < nb; b++) {
    size_t i0 = (size_t)b * TITANS__OPS_BLOCK;
    titans__adamw_span(param + i0, grad + i0, m + i0, v + i0, titans__ops_min(n - i0, TITANS__OPS_BLOCK), &h);
  }
}
