/* ---- 5. Attention (implementation) ------------------------------------------------------------ */

/* Bit-exactness between the code paths (fused and two-pass backward, batched forward and KV cache,
   any thread count) rests on the private helpers below: a dot product is one vector accumulator,
   reduced, then a scalar tail, whether computed alone or four at a time; a sum of scaled rows adds one
   fma per element and term (multiply-add in the scalar tail) in term order, however the terms are
   grouped into calls; exp is one function. They are private copies (not titans__dot / titans__axpy) so
   the guarantee does not depend on how the core implements those. */

/* Multiply-adds with one rounding rule for the whole part, so a scalar tail element gets the bits of a
   vector lane whatever the compiler's contraction setting (C++ and GNU C contract a * b + c into an
   fma by default, ISO C does not): fused whenever the hardware fuses (the SIMD layer's fma, or fmaf
   where it is fast), a plain multiply-add otherwise (then no compiler can fuse either). */
static inline float titans__attn_fma(float a, float b, float c) {
#if !defined(TITANS__SCALAR) || defined(FP_FAST_FMAF)
  return fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

#ifdef TITANS__SCALAR
static inline titans__vf titans__attn_vfma(titans__vf a, titans__vf b, titans__vf c) {
  return titans__attn_fma(a, b, c);
}
#else
static inline titans__vf titans__attn_vfma(titans__vf a, titans__vf b, titans__vf c) { return titans__vfma(a, b, c); }
#endif

static inline float titans__attn_dot(const float *a, const float *b, size_t n) {
  titans__vf acc = titans__vset1(0.0f);
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) acc = titans__attn_vfma(titans__vload(a + i), titans__vload(b + i), acc);
  float s = titans__vsum(acc);
  for (; i < n; i++) s = titans__attn_fma(a[i], b[i], s);
  return s;
}

/* s[t] = a . b_t for t < 4, each bit-identical to titans__attn_dot(a, b_t, n); four independent chains
   hide the fma latency. */
static inline void titans__attn_dot4(float *s, const float *a, const float *b0, const float *b1, const float *b2,
                                     const float *b3, size_t n) {
  titans__vf c0 = titans__vset1(0.0f), c1 = c0, c2 = c0, c3 = c0;
  size_t i = 0;
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf va = titans__vload(a + i);
    c0 = titans__attn_vfma(va, titans__vload(b0 + i), c0);
    c1 = titans__attn_vfma(va, titans__vload(b1 + i), c1);
    c2 = titans__attn_vfma(va, titans__vload(b2 + i), c2);
    c3 = titans__attn_vfma(va, titans__vload(b3 + i), c3);
  }
  float s0 = titans__vsum(c0), s1 = titans__vsum(c1), s2 = titans__vsum(c2), s3 = titans__vsum(c3);
  for (; i < n; i++) {
    s0 = titans__attn_fma(a[i], b0[i], s0);
    s1 = titans__attn_fma(a[i], b1[i], s1);
    s2 = titans__attn_fma(a[i], b2[i], s2);
    s3 = titans__attn_fma(a[i], b3[i], s3);
  }
  s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3;
}

/* y += alpha[0] x_0 + ... + alpha[m-1] x_{m-1}, added in that order, one fma per element and term
   (multiply-add in the scalar tail), so any split of the terms into calls gives the same bits; y stays
   in registers across the m rows, four vectors at a time so that four independent fma chains hide the
   latency. */
static void titans__attn_axpy_many(float *y, const float *alpha, const float *const *x, size_t m, size_t n) {
  size_t i = 0;
  for (; i + 4 * TITANS__VW <= n; i += 4 * TITANS__VW) {
    titans__vf a0 = titans__vload(y + i), a1 = titans__vload(y + i + TITANS__VW);
    titans__vf a2 = titans__vload(y + i + 2 * TITANS__VW), a3 = titans__vload(y + i + 3 * TITANS__VW);
    for (size_t t = 0; t < m; t++) {
      titans__vf va = titans__vset1(alpha[t]);
      const float *xt = x[t] + i;
      a0 = titans__attn_vfma(va, titans__vload(xt), a0);
      a1 = titans__attn_vfma(va, titans__vload(xt + TITANS__VW), a1);
      a2 = titans__attn_vfma(va, titans__vload(xt + 2 * TITANS__VW), a2);
      a3 = titans__attn_vfma(va, titans__vload(xt + 3 * TITANS__VW), a3);
    }
    titans__vstore(y + i, a0);
    titans__vstore(y + i + TITANS__VW, a1);
    titans__vstore(y + i + 2 * TITANS__VW, a2);
    titans__vstore(y + i + 3 * TITANS__VW, a3);
  }
  for (; i + TITANS__VW <= n; i += TITANS__VW) {
    titans__vf acc = titans__vload(y + i);
    for (size_t t = 0; t < m; t++) acc = titans__attn_vfma(titans__vset1(alpha[t]), titans__vload(x[t] + i), acc);
    titans__vstore(y + i, acc);
  }
  for (; i < n; i++) {
    float acc = y[i];
    for (size_t t = 0; t < m; t++) acc = titans__attn_fma(alpha[t], x[t][i], acc);
    y[i] = acc;
  }
}

/* exp(x) in float from plain arithmetic that compilers vectorise (the softmax evaluates it once per
   pair, and a libm call per pair costs a third of the forward): Cody-Waite reduction x = n ln2 + r,
   a degree-7 polynomial for e^r (Cephes expf coefficients), scaling by 2^n through the exponent bits.
   Relative error below 1.4 ulp on [-87, 1]; 0 below -87.3 (where expf is subnormal); NaN stays NaN.
   Every code path of the kernels uses it, so they agree bit for bit. */
static inline float titans__attn_exp(float x) {
  const float lo = -87.33654f, hi = 88.0f, log2e = 1.44269504088896341f;
  const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f, shifter = 12582912.0f; /* 1.5 * 2^23 */
  float xc = x > lo ? x : lo;
  xc = xc < hi ? xc : hi;
  float t = xc * log2e + shifter; /* adding 1.5 * 2^23 rounds to an integer, held in t's low bits */
  float n = t - shifter;
  float r = xc - n * ln2_hi;
  r = r - n * ln2_lo;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  int32_t ti, bits;
  memcpy(&ti, &t, sizeof(ti));
  bits = (ti - 0x4B400000 + 127) * (1 << 23); /* 2^n, n in [-126, 127] */
  float scale;
  memcpy(&scale, &bits, sizeof(scale));
  y = y * scale;
  return x < lo ? 0.0f : (x != x ? x : y);
}

/* ---- visible ranges: maximal non-decreasing runs of a position array, bisection within each ---- */

typedef struct titans__attn_runs {
  const int64_t *pos;                          /* [n] */
  size_t n;
  size_t nruns;                                /* 0 with n > 0: too many runs, scan instead */
  size_t start[TITANS_ATTN_MAX_RUNS + 1];      /* run r is [start[r], start[r + 1]) */
} titans__attn_runs;

static void titans__attn_runs_init(titans__attn_runs *r, const int64_t *pos, size_t n) {
  r->pos = pos;
  r->n = n;
  r->nruns = 0;
  if (n == 0) return;
  size_t nr = 0;
  r->start[0] = 0;
  for (size_t j = 1; j <= n; j++) {
    if (j == n || pos[j] < pos[j - 1]) {
      if (nr == TITANS_ATTN_MAX_RUNS) { /* too many runs: scan mode */
        r->nruns = 0;
        return;
      }
      r->start[++nr] = j;
    }
  }
  r->nruns = nr;
}

/* Iterates, in index order, over the maximal stretches [b, e) of indices j with lo <= pos[j] <= hi. */
typedef struct titans__attn_iter {
  const titans__attn_runs *r;
  int64_t lo, hi; /* inclusive bounds */
  size_t run;     /* next run (bisection mode) */
  size_t idx;     /* next index (scan mode) */
} titans__attn_iter;

static void titans__attn_iter_init(titans__attn_iter *it, const titans__attn_runs *r, int64_t lo, int64_t hi) {
  it->r = r;
  it->lo = lo;
  it->hi = hi;
  it->run = 0;
  it->idx = 0;
}

static int titans__attn_iter_next(titans__attn_iter *it, size_t *b, size_t *e) {
  const titans__attn_runs *r = it->r;
  const int64_t *pos = r->pos;
  if (r->nruns > 0) {
    while (it->run < r->nruns) {
      size_t r0 = r->start[it->run], r1 = r->start[it->run + 1];
      it->run++;
      size_t a = r0, z = r1; /* first index with pos >= lo */
      while (a < z) {
        size_t mid = a + (z - a) / 2;
        if (pos[mid] < it->lo) a = mid + 1;
        else z = mid;
      }
      size_t lo_idx = a;
      z = r1; /* first index with pos > hi */
      while (a < z) {
        size_t mid = a + (z - a) / 2;
        if (pos[mid] <= it->hi) a = mid + 1;
        else z = mid;
      }
      if (lo_idx < a) {
        *b = lo_idx;
        *e = a;
        return 1;
      }
    }
    return 0;
  }
  size_t j = it->idx, n = r->n;
  while (j < n && (pos[j] < it->lo || pos[j] > it->hi)) j++;
  if (j == n) {
    it->idx = n;
    return 0;
  }
  *b = j;
  while (j < n && pos[j] >= it->lo && pos[j] <= it->hi) j++;
  *e = j;
  it->idx = j;
  return 1;
}

/* Positions of the keys a query at qp sees: (qp - window, qp], as inclusive bounds without overflow. */
static void titans__attn_key_bounds(int64_t qp, int64_t window, int64_t *lo, int64_t *hi) {
  *hi = qp;
  *lo = (window > 0 && qp >= INT64_MIN + window) ? qp - window + 1 : INT64_MIN;
}

/* Positions of the queries that see a key at kp: [kp, kp + window). */
static void titans__attn_query_bounds(int64_t kp, int64_t window, int64_t *lo, int64_t *hi) {
  *lo = kp;
  *hi = (window > 0 && kp <= INT64_MAX - (window - 1)) ? kp + (window - 1) : INT64_MAX;
}

/* ---- online softmax over tiles of keys, for a block of query rows ------------------------------ */

/* A query folds its visible keys into its softmax one tile at a time: the prefix in chunks of
   TITANS_ATTN_TILE rows, then the positioned keys in groups of consecutive keys whose positions share
   floor(pos / TITANS_ATTN_TILE) (at most TITANS_ATTN_TILE keys a group). A tile updates the running
   maximum once (rescaling the sums when it grows) and adds its terms in key order. For positions that
   increase along the keys the tiles depend only on the keys a query sees, not on which queries are
   processed alongside nor on where a ring buffer wraps: the batched forward and the KV cache then
   fold the same tiles and give the same bits. */

#define TITANS__ATTN_QB 8 /* query rows that share each key and value load in the forward */

/* The online-softmax state of a block of query rows of one head. */
typedef struct titans__attn_rows {
  size_t n, d_a;
  float scale;
  const float *q[TITANS__ATTN_QB];                   /* [d_a] */
  float *o[TITANS__ATTN_QB];                         /* [d_a] running numerator, then the output */
  float m[TITANS__ATTN_QB];                          /* running max of the scores, -INFINITY before any */
  float l[TITANS__ATTN_QB];                          /* running sum of exp(score - m) */
  int64_t lo[TITANS__ATTN_QB], hi[TITANS__ATTN_QB];  /* positions of the keys the row sees */
} titans__attn_rows;

/* The pending tile of keys. */
typedef struct titans__attn_tile {
  size_t n;
  int positioned;  /* 0: prefix rows, visible to every query */
  int64_t group;   /* floor(pos / TITANS_ATTN_TILE) of the tile's keys */
  const float *k[TITANS_ATTN_TILE], *v[TITANS_ATTN_TILE]; /* [d_a] head slices */
  int64_t pos[TITANS_ATTN_TILE];
} titans__attn_tile;

static void titans__attn_rows_init(titans__attn_rows *R, size_t d_a, float scale) {
  R->n = 0;
  R->d_a = d_a;
  R->scale = scale;
}

static void titans__attn_rows_add(titans__attn_rows *R, float *o, const float *q, int64_t qpos, int64_t window) {
  size_t r = R->n++;
  R->q[r] = q;
  R->o[r] = o;
  R->m[r] = -INFINITY;
  R->l[r] = 0.0f;
  memset(o, 0, R->d_a * sizeof(float));
  titans__attn_key_bounds(qpos, window, &R->lo[r], &R->hi[r]);
}

/* o_r += sum_t p_r[t] v_t over the visible t of four rows (p and vis rows TITANS_ATTN_TILE apart; vis
   NULL: all visible): each value row is loaded once for the four. Bit-identical to
   titans__attn_axpy_many on each row's visible terms. */
static void titans__attn_pv4(float *const *o, const float *p, const unsigned char *vis, const float *const *v,
                             size_t nt, size_t d_a) {
  const size_t W = TITANS_ATTN_TILE;
  size_t i = 0;
  for (; i + TITANS__VW <= d_a; i += TITANS__VW) {
    titans__vf a0 = titans__vload(o[0] + i), a1 = titans__vload(o[1] + i);
    titans__vf a2 = titans__vload(o[2] + i), a3 = titans__vload(o[3] + i);
    if (!vis) {
      for (size_t t = 0; t < nt; t++) {
        titans__vf vv = titans__vload(v[t] + i);
        a0 = titans__attn_vfma(titans__vset1(p[t]), vv, a0);
        a1 = titans__attn_vfma(titans__vset1(p[W + t]), vv, a1);
        a2 = titans__attn_vfma(titans__vset1(p[2 * W + t]), vv, a2);
        a3 = titans__attn_vfma(titans__vset1(p[3 * W + t]), vv, a3);
      }
    } else {
      for (size_t t = 0; t < nt; t++) {
        titans__vf vv = titans__vload(v[t] + i);
        if (vis[t]) a0 = titans__attn_vfma(titans__vset1(p[t]), vv, a0);
        if (vis[W + t]) a1 = titans__attn_vfma(titans__vset1(p[W + t]), vv, a1);
        if (vis[2 * W + t]) a2 = titans__attn_vfma(titans__vset1(p[2 * W + t]), vv, a2);
        if (vis[3 * W + t]) a3 = titans__attn_vfma(titans__vset1(p[3 * W + t]), vv, a3);
      }
    }
    titans__vstore(o[0] + i, a0);
    titans__vstore(o[1] + i, a1);
    titans__vstore(o[2] + i, a2);
    titans__vstore(o[3] + i, a3);
  }
  for (; i < d_a; i++) {
    float a[4];
    for (size_t r = 0; r < 4; r++) a[r] = o[r][i];
    for (size_t t = 0; t < nt; t++)
      for (size_t r = 0; r < 4; r++)
        if (!vis || vis[r * W + t]) a[r] = titans__attn_fma(p[r * W + t], v[t][i], a[r]);
    for (size_t r = 0; r < 4; r++) o[r][i] = a[r];
  }
}

/* Fold the pending tile into every row of the block. */
static void titans__attn_fold(titans__attn_rows *R, titans__attn_tile *T) {
  const size_t W = TITANS_ATTN_TILE;
  size_t nt = T->n, n = R->n, d_a = R->d_a;
  float S[TITANS__ATTN_QB * TITANS_ATTN_TILE], s4[4];
  unsigned char vis_buf[TITANS__ATTN_QB * TITANS_ATTN_TILE];
  const unsigned char *vis = NULL; /* NULL: every row sees every key of the tile (the common case) */
  const float *qr[TITANS__ATTN_QB];
  size_t ri[TITANS__ATTN_QB];
  if (nt == 0) return;
  if (T->positioned) {
    int64_t pmin = T->pos[0], pmax = T->pos[0];
    for (size_t t = 1; t < nt; t++) {
      pmin = T->pos[t] < pmin ? T->pos[t] : pmin;
      pmax = T->pos[t] > pmax ? T->pos[t] : pmax;
    }
    for (size_t r = 0; r < n && !vis; r++)
      if (pmin < R->lo[r] || pmax > R->hi[r]) vis = vis_buf;
  }
  /* scores q.k * scale of the visible pairs; a key row is loaded once for four query rows */
  for (size_t t = 0; t < nt; t++) {
    size_t m = 0, u = 0;
    for (size_t r = 0; r < n; r++) {
      int vr = !vis || (T->pos[t] >= R->lo[r] && T->pos[t] <= R->hi[r]);
      if (vis) {
        vis_buf[r * W + t] = (unsigned char)vr;
        S[r * W + t] = 0.0f; /* defined values where no score is computed: the exp loop reads them */
      }
      if (vr) ri[m] = r, qr[m++] = R->q[r];
    }
    for (; u + 4 <= m; u += 4) {
      titans__attn_dot4(s4, T->k[t], qr[u], qr[u + 1], qr[u + 2], qr[u + 3], d_a);
      for (size_t w = 0; w < 4; w++) S[ri[u + w] * W + t] = s4[w] * R->scale;
    }
    for (; u < m; u++) S[ri[u] * W + t] = titans__attn_dot(T->k[t], qr[u], d_a) * R->scale;
  }
  /* per row: the tile's maximum, rescale if it grew, weights exp(s - m), their sum in key order */
  for (size_t r = 0; r < n; r++) {
    float *s = S + r * W;
    const unsigned char *vr = vis ? vis + r * W : NULL;
    size_t t0 = 0;
    while (t0 < nt && vr && !vr[t0]) t0++;
    if (t0 == nt) continue;
    float mt = s[t0];
    for (size_t t = t0 + 1; t < nt; t++)
      if ((!vr || vr[t]) && s[t] > mt) mt = s[t];
    if (mt > R->m[r]) {
      if (R->m[r] != -INFINITY) { /* nothing to rescale before the first key */
        float c = titans__attn_exp(R->m[r] - mt);
        R->l[r] *= c;
        for (size_t i = 0; i < d_a; i++) R->o[r][i] *= c;
      }
      R->m[r] = mt;
    }
    float l = R->l[r], mr = R->m[r];
    for (size_t t = 0; t < nt; t++) s[t] = titans__attn_exp(s[t] - mr); /* all t: vectorises */
    for (size_t t = t0; t < nt; t++)
      if (!vr || vr[t]) l += s[t];
    R->l[r] = l;
  }
  /* o += p v: four rows at a time share the value loads; the rest row by row */
  size_t r = 0;
  for (; r + 4 <= n; r += 4) titans__attn_pv4(R->o + r, S + r * W, vis ? vis + r * W : NULL, T->v, nt, d_a);
  for (; r < n; r++) {
    float p[TITANS_ATTN_TILE];
    const float *vl[TITANS_ATTN_TILE];
    size_t m = 0;
    for (size_t t = 0; t < nt; t++)
      if (!vis || vis[r * W + t]) p[m] = S[r * W + t], vl[m++] = T->v[t];
    titans__attn_axpy_many(R->o[r], p, vl, m, d_a);
  }
  T->n = 0;
}

/* floor(pos / TITANS_ATTN_TILE) without overflow */
static int64_t titans__attn_group(int64_t pos) {
  int64_t g = pos / TITANS_ATTN_TILE;
  return (g * TITANS_ATTN_TILE > pos) ? g - 1 : g;
}

static void titans__attn_tile_begin(titans__attn_tile *T, int positioned) {
  T->n = 0;
  T->positioned = positioned;
  T->group = 0;
}

/* Add a key (head slices k, v) to the pending tile; folds the tile first when the key starts a new one. */
static void titans__attn_tile_add(titans__attn_rows *R, titans__attn_tile *T, const float *k, const float *v,
                                  int64_t pos) {
  int64_t g = T->positioned ? titans__attn_group(pos) : 0;
  if (T->n == TITANS_ATTN_TILE || (T->n > 0 && g != T->group)) titans__attn_fold(R, T);
  if (T->n == 0) T->group = g;
  T->k[T->n] = k;
  T->v[T->n] = v;
  T->pos[T->n] = pos;
  T->n++;
}

/* Normalise the outputs; lse[r * stride] = log-sum-exp (-INFINITY, output zero, where no key was seen). */
static void titans__attn_rows_finish(titans__attn_rows *R, float *lse, size_t stride) {
  for (size_t r = 0; r < R->n; r++) {
    float l = -INFINITY;
    if (R->m[r] != -INFINITY) {
      float inv = 1.0f / R->l[r];
      for (size_t i = 0; i < R->d_a; i++) R->o[r][i] *= inv;
      l = R->m[r] + logf(R->l[r]);
    }
    if (lse) lse[r * stride] = l;
  }
}

static float titans__attn_scale(size_t d_a) { return (float)(1.0 / sqrt((double)d_a)); }

/* ---- argument checks ------------------------------------------------------------------------- */

/* Checks the shapes of a call; *ld = H * d_a. */
static int titans__attn_check(size_t Tq, size_t P, size_t Tk, size_t H, size_t d_a, int64_t window,
                              size_t *ld) {
  size_t rows, n;
  if (H == 0 || d_a == 0 || window < 0) return TITANS_ERR_ARG;
  if (!titans_size_mul(H, d_a, ld) || !titans_size_add(P, Tk, &rows)) return TITANS_ERR_ARG;
  if (!titans_size_mul(rows, *ld, &n) || !titans_size_mul(Tq, *ld, &n)) return TITANS_ERR_ARG;
  if (!titans_size_mul(n, sizeof(float), &n)) return TITANS_ERR_ARG;
  return TITANS_OK;
}

/* ---- RoPE ------------------------------------------------------------------------------------ */

#define TITANS__ROPE_STACK 256 /* inverse frequencies kept on the stack up to this half width */

static int titans__rope_apply(float *x, const int64_t *pos, size_t T, size_t H, size_t d_a, int inverse) {
  size_t ld, n;
  if (T == 0) return TITANS_OK;
  if (!x || !pos || H == 0 || d_a == 0 || d_a % 2 != 0) return TITANS_ERR_ARG;
  if (!titans_size_mul(H, d_a, &ld) || !titans_size_mul(T, ld, &n)) return TITANS_ERR_ARG;
  size_t half = d_a / 2;
  double inv_stack[TITANS__ROPE_STACK];
  int cached = half <= TITANS__ROPE_STACK;
  if (cached)
    for (size_t i = 0; i < half; i++) inv_stack[i] = pow(TITANS_ROPE_BASE, -2.0 * (double)i / (double)d_a);
  const double *inv = inv_stack;
#ifdef _OPENMP
  int par = n >= 16384 && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
#endif
  for (ptrdiff_t tt = 0; tt < (ptrdiff_t)T; tt++) {
    size_t t = (size_t)tt;
    float *row = x + t * ld;
    double p = (double)pos[t];
    for (size_t i = 0; i < half; i++) {
      double f = cached ? inv[i] : pow(TITANS_ROPE_BASE, -2.0 * (double)i / (double)d_a);
      double ang = p * f;
      double c = cos(ang), s = sin(ang);
      if (inverse) s = -s;
      for (size_t h = 0; h < H; h++) {
        float *xh = row + h * d_a;
        double x1 = xh[i], x2 = xh[i + half];
        xh[i] = (float)(x1 * c - x2 * s);
        xh[i + half] = (float)(x1 * s + x2 * c);
      }
    }
  }
  return TITANS_OK;
}

TITANSDEF int titans_rope_forward(float *x, const int64_t *pos, size_t T, size_t H, size_t d_a) {
  return titans__rope_apply(x, pos, T, H, d_a, 0);
}

TITANSDEF int titans_rope_backward(float *dx, const int64_t *pos, size_t T, size_t H, size_t d_a) {
  return titans__rope_apply(dx, pos, T, H, d_a, 1);
}

/* ---- forward --------------------------------------------------------------------------------- */

#define TITANS__ATTN_QTILE 16 /* query rows per task */
#define TITANS__ATTN_KTILE 16 /* key rows per task (two-pass backward) */
#define TITANS__ATTN_PAR_WORK 65536 /* multiply-adds below which a call runs on one thread */

/* Head h, query rows [i0, i1) (at most TITANS__ATTN_QB): the prefix, then every key that some row may
   see (the rows' visibility filters the pairs). kh, vh point at the head's slice of row 0. */
static void titans__attn_forward_block(float *out, float *lse, const float *q, const float *kh, const float *vh,
                                       const int64_t *qpos, const titans__attn_runs *kr, size_t i0, size_t i1,
                                       size_t P, size_t H, size_t h, size_t d_a, int64_t window, float scale) {
  size_t ld = H * d_a;
  titans__attn_rows R;
  titans__attn_tile T;
  titans__attn_rows_init(&R, d_a, scale);
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (size_t i = i0; i < i1; i++) {
    titans__attn_rows_add(&R, out + i * ld + h * d_a, q + i * ld + h * d_a, qpos[i], window);
    lo = R.lo[i - i0] < lo ? R.lo[i - i0] : lo;
    hi = R.hi[i - i0] > hi ? R.hi[i - i0] : hi;
  }
  titans__attn_tile_begin(&T, 0);
  for (size_t j = 0; j < P; j++) titans__attn_tile_add(&R, &T, kh + j * ld, vh + j * ld, 0);
  titans__attn_fold(&R, &T);
  titans__attn_tile_begin(&T, 1);
  titans__attn_iter it;
  titans__attn_iter_init(&it, kr, lo, hi);
  size_t b, e;
  while (titans__attn_iter_next(&it, &b, &e))
    for (size_t j = b; j < e; j++) titans__attn_tile_add(&R, &T, kh + (P + j) * ld, vh + (P + j) * ld, kr->pos[j]);
  titans__attn_fold(&R, &T);
  titans__attn_rows_finish(&R, lse ? lse + i0 * H + h : NULL, H);
}

#ifdef _OPENMP
/* An upper bound of the multiply-adds of a call (in double: never overflows); decides on threads. */
static double titans__attn_work(size_t Tq, size_t P, size_t Tk, size_t ld) {
  return (double)Tq * ((double)P + (double)Tk) * (double)ld;
}
#endif

TITANSDEF int titans_attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                                       const int64_t *qpos, const int64_t *kpos, size_t Tq, size_t P, size_t Tk,
                                       size_t H, size_t d_a, int64_t window) {
  size_t ld;
  int st = titans__attn_check(Tq, P, Tk, H, d_a, window, &ld);
  if (st != TITANS_OK) return st;
  if (Tq == 0) return TITANS_OK;
  if (!out || !q || !qpos || ((P + Tk) > 0 && (!k || !v)) || (Tk > 0 && !kpos)) return TITANS_ERR_ARG;
  titans__attn_runs kr;
  titans__attn_runs_init(&kr, kpos, Tk);
  float scale = titans__attn_scale(d_a);
  size_t ntile = (Tq + TITANS__ATTN_QTILE - 1) / TITANS__ATTN_QTILE;
  size_t ntask = H * ntile;
#ifdef _OPENMP
  int par = ntask > 1 && titans__attn_work(Tq, P, Tk, ld) >= TITANS__ATTN_PAR_WORK && !omp_in_parallel();
#pragma omp parallel for schedule(dynamic, 1) if (par)
#endif
  for (ptrdiff_t task = 0; task < (ptrdiff_t)ntask; task++) {
    size_t h = (size_t)task % H, i0 = (size_t)task / H * TITANS__ATTN_QTILE;
    size_t i1 = i0 + TITANS__ATTN_QTILE < Tq ? i0 + TITANS__ATTN_QTILE : Tq;
    const float *kh = k ? k + h * d_a : NULL, *vh = v ? v + h * d_a : NULL;
    for (size_t b = i0; b < i1; b += TITANS__ATTN_QB)
      titans__attn_forward_block(out, lse, q, kh, vh, qpos, &kr, b, b + TITANS__ATTN_QB < i1 ? b + TITANS__ATTN_QB : i1,
                                 P, H, h, d_a, window, scale);
  }
  return TITANS_OK;
}

/* ---- backward -------------------------------------------------------------------------------- */

/* Everything of one backward call. */
typedef struct titans__attn_bwd {
  float *dq, *dk, *dv;
  const float *dout, *q, *k, *v, *out, *lse;
  const int64_t *qpos, *kpos;
  size_t Tq, P, Tk, H, d_a, ld;
  int64_t window;
  float scale;
  titans__attn_runs kr, qr;
} titans__attn_bwd;

/* The pairs of one key with n query rows (head slices; n <= TITANS_ATTN_TILE):
       p = exp(q.k * scale - lse)  (the forward's softmax weight),  g = scale * p * (dout.v - D)
   with D = dout.out of the row. Every scheme of the backward computes its pairs here, so they agree
   bit for bit. */
static void titans__attn_bwd_pairs(float *p, float *g, const float *kj, const float *vj, const float *const *qr,
                                   const float *const *dr, const float *lse, const float *D, size_t n, size_t d_a,
                                   float scale) {
  float s[TITANS_ATTN_TILE], dp[TITANS_ATTN_TILE];
  size_t t = 0;
  for (; t + 4 <= n; t += 4) {
    titans__attn_dot4(s + t, kj, qr[t], qr[t + 1], qr[t + 2], qr[t + 3], d_a); /* = q.k of the forward */
    titans__attn_dot4(dp + t, vj, dr[t], dr[t + 1], dr[t + 2], dr[t + 3], d_a);
  }
  for (; t < n; t++) {
    s[t] = titans__attn_dot(kj, qr[t], d_a);
    dp[t] = titans__attn_dot(vj, dr[t], d_a);
  }
  for (t = 0; t < n; t++) p[t] = titans__attn_exp(s[t] * scale - lse[t]);
  for (t = 0; t < n; t++) g[t] = scale * (p[t] * (dp[t] - D[t]));
}

/* The rows of a query tile that see at least one key. */
typedef struct titans__attn_qtile {
  size_t n;
  const float *q[TITANS__ATTN_QTILE];     /* [d_a] head slices of the rows */
  const float *dout[TITANS__ATTN_QTILE];
  float *dq[TITANS__ATTN_QTILE];
  float lse[TITANS__ATTN_QTILE], D[TITANS__ATTN_QTILE];
  int64_t lo[TITANS__ATTN_QTILE], hi[TITANS__ATTN_QTILE]; /* positions of the keys each row sees */
} titans__attn_qtile;

#define TITANS__ATTN_KGROUP 8 /* keys whose dq terms are added in one pass over dq */

/* Keys b..e-1 (rows of k, v) against the rows of a query tile: dq_r += sum_j g k_j (keys in order);
   when dkdv, dk_j += sum_r g q_r and dv_j += sum_r p dout_r (rows in order). Each key row is read
   and written once per tile instead of once per query row. */
static void titans__attn_bwd_qtile_keys(const titans__attn_bwd *c, const titans__attn_qtile *qt, size_t h, size_t b,
                                        size_t e, int dkdv) {
  size_t ld = c->ld, d_a = c->d_a, ho = h * d_a;
  float G[TITANS__ATTN_KGROUP][TITANS__ATTN_QTILE], p[TITANS__ATTN_QTILE], g[TITANS__ATTN_QTILE];
  float lq[TITANS__ATTN_QTILE], Dq[TITANS__ATTN_QTILE];
  unsigned char vis[TITANS__ATTN_KGROUP][TITANS__ATTN_QTILE];
  const float *qr[TITANS__ATTN_QTILE], *dr[TITANS__ATTN_QTILE], *kl[TITANS__ATTN_KGROUP];
  for (size_t j0 = b; j0 < e; j0 += TITANS__ATTN_KGROUP) {
    size_t nk = e - j0 < TITANS__ATTN_KGROUP ? e - j0 : TITANS__ATTN_KGROUP;
    for (size_t t = 0; t < nk; t++) {
      size_t j = j0 + t, m = 0;
      int64_t kp = j < c->P ? 0 : c->kpos[j - c->P];
      for (size_t r = 0; r < qt->n; r++) {
        vis[t][r] = (unsigned char)(j < c->P || (kp >= qt->lo[r] && kp <= qt->hi[r]));
        if (!vis[t][r]) continue;
        qr[m] = qt->q[r], dr[m] = qt->dout[r], lq[m] = qt->lse[r], Dq[m] = qt->D[r];
        m++;
      }
      if (m == 0) continue;
      titans__attn_bwd_pairs(p, g, c->k + j * ld + ho, c->v + j * ld + ho, qr, dr, lq, Dq, m, d_a, c->scale);
      for (size_t r = 0, u = 0; r < qt->n; r++)
        if (vis[t][r]) G[t][r] = g[u++];
      if (dkdv) {
        titans__attn_axpy_many(c->dk + j * ld + ho, g, qr, m, d_a);
        titans__attn_axpy_many(c->dv + j * ld + ho, p, dr, m, d_a);
      }
    }
    for (size_t r = 0; r < qt->n; r++) {
      size_t m = 0;
      for (size_t t = 0; t < nk; t++)
        if (vis[t][r]) {
          g[m] = G[t][r];
          kl[m] = c->k + (j0 + t) * ld + ho;
          m++;
        }
      if (m) titans__attn_axpy_many(qt->dq[r], g, kl, m, d_a);
    }
  }
}

/* Head h, query rows [i0, i1) (at most a tile): dq of the rows and, when dkdv, their dk, dv terms.
   Stores D = dout.out of each row in Dsave [Tq, H] when it is not NULL. */
static void titans__attn_bwd_qtile_run(const titans__attn_bwd *c, size_t h, size_t i0, size_t i1, int dkdv,
                                       float *Dsave) {
  titans__attn_qtile qt;
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  qt.n = 0;
  for (size_t i = i0; i < i1; i++) {
    size_t off = i * c->ld + h * c->d_a, n = qt.n;
    float D = titans__attn_dot(c->dout + off, c->out + off, c->d_a);
    if (Dsave) Dsave[i * c->H + h] = D;
    if (c->lse[i * c->H + h] == -INFINITY) continue; /* sees no key: no gradient */
    qt.q[n] = c->q + off, qt.dout[n] = c->dout + off, qt.dq[n] = c->dq + off;
    qt.lse[n] = c->lse[i * c->H + h], qt.D[n] = D;
    titans__attn_key_bounds(c->qpos[i], c->window, &qt.lo[n], &qt.hi[n]);
    lo = qt.lo[n] < lo ? qt.lo[n] : lo;
    hi = qt.hi[n] > hi ? qt.hi[n] : hi;
    qt.n++;
  }
  if (qt.n == 0) return;
  titans__attn_bwd_qtile_keys(c, &qt, h, 0, c->P, dkdv);
  titans__attn_iter it; /* keys some row of the tile may see; the rows filter them */
  titans__attn_iter_init(&it, &c->kr, lo, hi);
  size_t b, e;
  while (titans__attn_iter_next(&it, &b, &e)) titans__attn_bwd_qtile_keys(c, &qt, h, c->P + b, c->P + e, dkdv);
}

/* Key j, head h, query rows [i0, i1) that see it: the dk, dv terms, as the query-tile pass adds them
   (same pairs, rows in order). D is [Tq, H] from the dq pass. */
static void titans__attn_bwd_key_queries(const titans__attn_bwd *c, const float *D, size_t j, size_t h, size_t i0,
                                         size_t i1) {
  float p[TITANS_ATTN_TILE], g[TITANS_ATTN_TILE], lq[TITANS_ATTN_TILE], Dq[TITANS_ATTN_TILE];
  const float *qr[TITANS_ATTN_TILE], *dr[TITANS_ATTN_TILE];
  size_t ld = c->ld, d_a = c->d_a, ho = h * d_a;
  while (i0 < i1) {
    size_t m = 0, i = i0;
    for (; i < i1 && m < TITANS_ATTN_TILE; i++) {
      if (c->lse[i * c->H + h] == -INFINITY) continue;
      qr[m] = c->q + i * ld + ho, dr[m] = c->dout + i * ld + ho;
      lq[m] = c->lse[i * c->H + h], Dq[m] = D[i * c->H + h];
      m++;
    }
    i0 = i;
    if (m == 0) continue;
    titans__attn_bwd_pairs(p, g, c->k + j * ld + ho, c->v + j * ld + ho, qr, dr, lq, Dq, m, d_a, c->scale);
    titans__attn_axpy_many(c->dk + j * ld + ho, g, qr, m, d_a);
    titans__attn_axpy_many(c->dv + j * ld + ho, p, dr, m, d_a);
  }
}

/* Key j, head h: all query rows that see it, in index order. */
static void titans__attn_bwd_key_run(const titans__attn_bwd *c, const float *D, size_t j, size_t h) {
  if (j < c->P) {
    titans__attn_bwd_key_queries(c, D, j, h, 0, c->Tq);
    return;
  }
  int64_t lo, hi;
  titans__attn_query_bounds(c->kpos[j - c->P], c->window, &lo, &hi);
  titans__attn_iter it;
  titans__attn_iter_init(&it, &c->qr, lo, hi);
  size_t b, e;
  while (titans__attn_iter_next(&it, &b, &e)) titans__attn_bwd_key_queries(c, D, j, h, b, e);
}

enum { TITANS__ATTN_BWD_AUTO = 0, TITANS__ATTN_BWD_FUSED = 1, TITANS__ATTN_BWD_TWO_PASS = 2 };

/* The backward with a chosen scheme (tests compare them):
   FUSED     one task per head: query tiles in order, each adding its dq and its dk, dv terms;
   TWO_PASS  dq over heads x query tiles, then dk, dv over heads x key tiles (recomputes the pairs).
   Both add every gradient element's terms in the same order with the same arithmetic. */
static int titans__attention_backward_mode(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                           const float *k, const float *v, const float *out, const float *lse,
                                           const int64_t *qpos, const int64_t *kpos, size_t Tq, size_t P, size_t Tk,
                                           size_t H, size_t d_a, int64_t window, int mode) {
  titans__attn_bwd c;
  int st = titans__attn_check(Tq, P, Tk, H, d_a, window, &c.ld);
  if (st != TITANS_OK) return st;
  if (Tq == 0 || P + Tk == 0) return TITANS_OK;
  if (!dq || !dk || !dv || !dout || !q || !k || !v || !out || !lse || !qpos || (Tk > 0 && !kpos))
    return TITANS_ERR_ARG;
  c.dq = dq, c.dk = dk, c.dv = dv, c.dout = dout, c.q = q, c.k = k, c.v = v, c.out = out, c.lse = lse;
  c.qpos = qpos, c.kpos = kpos;
  c.Tq = Tq, c.P = P, c.Tk = Tk, c.H = H, c.d_a = d_a, c.window = window;
  c.scale = titans__attn_scale(d_a);
  titans__attn_runs_init(&c.kr, kpos, Tk);
  titans__attn_runs_init(&c.qr, qpos, Tq);
  int par = 0, nth = 1;
#ifdef _OPENMP
  par = titans__attn_work(Tq, P, Tk, c.ld) >= TITANS__ATTN_PAR_WORK && !omp_in_parallel();
  if (par) nth = omp_get_max_threads();
#endif
  (void)par;
  /* two passes cost ~1.8x the work of the fused pass, which only has H tasks: worth it from 3H threads */
  if (mode == TITANS__ATTN_BWD_AUTO) mode = (size_t)nth >= 3 * H ? TITANS__ATTN_BWD_TWO_PASS : TITANS__ATTN_BWD_FUSED;
  float *D = NULL;
  if (mode == TITANS__ATTN_BWD_TWO_PASS) {
    D = titans_alloc_floats(Tq * H); /* Tq * H <= Tq * ld: checked above */
    if (!D) mode = TITANS__ATTN_BWD_FUSED;
  }
  size_t nqt = (Tq + TITANS__ATTN_QTILE - 1) / TITANS__ATTN_QTILE;
  if (mode == TITANS__ATTN_BWD_FUSED) {
    /* the dk, dv rows of a head are only touched by its task, query tiles in order */
#ifdef _OPENMP
#pragma omp parallel for schedule(static, 1) if (par && H > 1)
#endif
    for (ptrdiff_t hh = 0; hh < (ptrdiff_t)H; hh++)
      for (size_t i0 = 0; i0 < Tq; i0 += TITANS__ATTN_QTILE)
        titans__attn_bwd_qtile_run(&c, (size_t)hh, i0, i0 + TITANS__ATTN_QTILE < Tq ? i0 + TITANS__ATTN_QTILE : Tq, 1,
                                   NULL);
    return TITANS_OK;
  }
  size_t ntask = H * nqt;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) if (par)
#endif
  for (ptrdiff_t task = 0; task < (ptrdiff_t)ntask; task++) {
    size_t h = (size_t)task % H, i0 = (size_t)task / H * TITANS__ATTN_QTILE;
    titans__attn_bwd_qtile_run(&c, h, i0, i0 + TITANS__ATTN_QTILE < Tq ? i0 + TITANS__ATTN_QTILE : Tq, 0, D);
  }
  size_t nkt = (P + Tk + TITANS__ATTN_KTILE - 1) / TITANS__ATTN_KTILE;
  ntask = H * nkt;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) if (par)
#endif
  for (ptrdiff_t task = 0; task < (ptrdiff_t)ntask; task++) {
    size_t h = (size_t)task % H, j0 = (size_t)task / H * TITANS__ATTN_KTILE;
    size_t j1 = j0 + TITANS__ATTN_KTILE < P + Tk ? j0 + TITANS__ATTN_KTILE : P + Tk;
    for (size_t j = j0; j < j1; j++) titans__attn_bwd_key_run(&c, D, j, h);
  }
  titans_free(D);
  return TITANS_OK;
}

TITANSDEF int titans_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                        const float *k, const float *v, const float *out, const float *lse,
                                        const int64_t *qpos, const int64_t *kpos, size_t Tq, size_t P, size_t Tk,
                                        size_t H, size_t d_a, int64_t window) {
  return titans__attention_backward_mode(dq, dk, dv, dout, q, k, v, out, lse, qpos, kpos, Tq, P, Tk, H, d_a, window,
                                         TITANS__ATTN_BWD_AUTO);
}

/* ---- KV cache -------------------------------------------------------------------------------- */

/* The public struct spells the error buffer's size out; it must be the core's. */
typedef char titans__kv_cache_errlen_check[sizeof(((titans_kv_cache *)0)->error) == TITANS__ERRLEN ? 1 : -1];

TITANSDEF int titans_kv_cache_init(titans_kv_cache *cache, size_t P, size_t capacity, size_t H, size_t d_a,
                                   int64_t window) {
  size_t ld, rows, n;
  memset(cache, 0, sizeof(*cache));
  if (capacity == 0 || H == 0 || d_a == 0 || window < 0)
    return titans__error(cache->error, TITANS_ERR_ARG, "kv cache: capacity, H and d_a must be > 0, window >= 0");
  if (!titans_size_mul(H, d_a, &ld) || !titans_size_add(P, capacity, &rows) || !titans_size_mul(rows, ld, &n))
    return titans__error(cache->error, TITANS_ERR_NOMEM, "kv cache: size overflows");
  cache->k = titans_alloc_floats(n);
  cache->v = titans_alloc_floats(n);
  cache->pos = (int64_t *)titans_alloc_bytes(capacity, sizeof(int64_t));
  if (!cache->k || !cache->v || !cache->pos) {
    titans_kv_cache_free(cache);
    return titans__error(cache->error, TITANS_ERR_NOMEM, "kv cache: out of memory (%zu rows of %zu floats)", rows, ld);
  }
  cache->P = P;
  cache->capacity = capacity;
  cache->H = H;
  cache->d_a = d_a;
  cache->window = window;
  return TITANS_OK;
}

TITANSDEF void titans_kv_cache_free(titans_kv_cache *cache) {
  if (!cache) return;
  titans_free(cache->k);
  titans_free(cache->v);
  titans_free(cache->pos);
  memset(cache, 0, sizeof(*cache));
}

TITANSDEF void titans_kv_cache_set_prefix(titans_kv_cache *cache, const float *k_prefix, const float *v_prefix) {
  size_t n = cache->P * cache->H * cache->d_a;
  if (n == 0) return;
  memcpy(cache->k, k_prefix, n * sizeof(float));
  memcpy(cache->v, v_prefix, n * sizeof(float));
}

TITANSDEF void titans_kv_cache_reset(titans_kv_cache *cache) {
  cache->count = 0;
  cache->next = 0;
}

TITANSDEF int titans_kv_cache_copy(titans_kv_cache *dst, const titans_kv_cache *src) {
  if (dst == src) return TITANS_OK;
  if (!dst->k || dst->P != src->P || dst->capacity != src->capacity || dst->H != src->H || dst->d_a != src->d_a)
    return titans__error(dst->error, TITANS_ERR_ARG, "kv cache copy: shapes differ");
  size_t n = (src->P + src->capacity) * src->H * src->d_a;
  memcpy(dst->k, src->k, n * sizeof(float));
  memcpy(dst->v, src->v, n * sizeof(float));
  memcpy(dst->pos, src->pos, src->capacity * sizeof(int64_t));
  dst->window = src->window;
  dst->count = src->count;
  dst->next = src->next;
  return TITANS_OK;
}

TITANSDEF int titans_kv_cache_clone(titans_kv_cache *dst, const titans_kv_cache *src) {
  int st = titans_kv_cache_init(dst, src->P, src->capacity, src->H, src->d_a, src->window);
  if (st != TITANS_OK) return st;
  return titans_kv_cache_copy(dst, src);
}

TITANSDEF int titans_kv_cache_append(titans_kv_cache *cache, const float *k, const float *v,
                                     const int64_t *pos, size_t n) {
  if (n == 0) return TITANS_OK;
  if (!cache->k) return titans__error(cache->error, TITANS_ERR_STATE, "kv cache append: cache not initialised");
  if (!k || !v || !pos) return titans__error(cache->error, TITANS_ERR_ARG, "kv cache append: NULL buffer");
  size_t ld = cache->H * cache->d_a, cap = cache->capacity;
  size_t first = n > cap ? n - cap : 0; /* older rows would be overwritten within this call */
  for (size_t r = first; r < n; r++) {
    size_t slot = cache->next;
    memcpy(cache->k + (cache->P + slot) * ld, k + r * ld, ld * sizeof(float));
    memcpy(cache->v + (cache->P + slot) * ld, v + r * ld, ld * sizeof(float));
    cache->pos[slot] = pos[r];
    cache->next = slot + 1 == cap ? 0 : slot + 1;
    if (cache->count < cap) cache->count++;
  }
  return TITANS_OK;
}

/* One head of a cached query: prefix, then the visible ring rows oldest first. */
static float titans__kv_cache_attend_head(const titans_kv_cache *c, float *o, const float *qh, size_t h, int64_t qp,
                                          float scale) {
  size_t ld = c->H * c->d_a, cap = c->capacity;
  const float *kh = c->k + h * c->d_a, *vh = c->v + h * c->d_a;
  titans__attn_rows R;
  titans__attn_tile T;
  float lse;
  titans__attn_rows_init(&R, c->d_a, scale);
  titans__attn_rows_add(&R, o, qh, qp, c->window);
  titans__attn_tile_begin(&T, 0);
  for (size_t j = 0; j < c->P; j++) titans__attn_tile_add(&R, &T, kh + j * ld, vh + j * ld, 0);
  titans__attn_fold(&R, &T);
  titans__attn_tile_begin(&T, 1);
  size_t oldest = (c->next + cap - c->count) % cap;
  for (size_t m = 0; m < c->count; m++) {
    size_t s = (oldest + m) % cap;
    if (c->pos[s] >= R.lo[0] && c->pos[s] <= R.hi[0])
      titans__attn_tile_add(&R, &T, kh + (c->P + s) * ld, vh + (c->P + s) * ld, c->pos[s]);
  }
  titans__attn_fold(&R, &T);
  titans__attn_rows_finish(&R, &lse, 1);
  return lse;
}

TITANSDEF int titans_kv_cache_attend(titans_kv_cache *cache, float *out, float *lse, const float *q,
                                     int64_t qpos) {
  if (!cache->k) return titans__error(cache->error, TITANS_ERR_STATE, "kv cache attend: cache not initialised");
  if (!out || !q) return titans__error(cache->error, TITANS_ERR_ARG, "kv cache attend: NULL buffer");
  const titans_kv_cache *c = cache;
  size_t H = c->H, d_a = c->d_a;
  float scale = titans__attn_scale(d_a);
#ifdef _OPENMP
  int par = H > 1 && titans__attn_work(1, c->P, c->count, H * d_a) >= TITANS__ATTN_PAR_WORK && !omp_in_parallel();
#pragma omp parallel for schedule(static, 1) if (par)
#endif
  for (ptrdiff_t hh = 0; hh < (ptrdiff_t)H; hh++) {
    size_t h = (size_t)hh;
    float l = titans__kv_cache_attend_head(c, out + h * d_a, q + h * d_a, h, qpos, scale);
    if (lse) lse[h] = l;
  }
  return TITANS_OK;
}

TITANSDEF const char *titans_kv_cache_error(const titans_kv_cache *cache) { return cache->error; }
