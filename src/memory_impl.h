/* ---- 4. Neural long-term memory layer (implementation) ---------------------------------------- */

/* Sizes derived from a config. Memory layer i (0-based) maps width n[i] to n[i+1]: W_i [n[i+1], n[i]]. */
typedef struct titans__mem_dims {
  size_t d, H, dh, dm, L, b, K; /* model width, heads, head width, H*dh, depth, chunk, conv width */
  size_t n[TITANS_MEM_MAX_DEPTH + 1];  /* layer widths n_0 .. n_L */
  size_t wofs[TITANS_MEM_MAX_DEPTH];   /* offset of W_i inside one head's weights */
  size_t head_size;                    /* floats of one head's weights: sum_i n[i+1] n[i] */
  size_t nmax;                         /* largest width */
} titans__mem_dims;

static titans__mem_dims titans__mem_get_dims(const titans_mem_config *c) {
  titans__mem_dims m;
  memset(&m, 0, sizeof m);
  m.d = (size_t)c->d;
  m.H = (size_t)c->heads;
  m.dh = (size_t)c->head_dim;
  m.dm = m.H * m.dh;
  m.L = (size_t)c->depth;
  m.b = (size_t)c->chunk;
  m.K = (size_t)c->conv_width;
  for (size_t i = 0; i <= m.L; i++) m.n[i] = (i == 0 || i == m.L) ? m.dh : m.dh * (size_t)c->hidden_mult;
  m.nmax = m.dh;
  for (size_t i = 0; i < m.L; i++) {
    m.wofs[i] = m.head_size;
    m.head_size += m.n[i + 1] * m.n[i];
    if (m.n[i + 1] > m.nmax) m.nmax = m.n[i + 1];
  }
  return m;
}

TITANSDEF titans_mem_config titans_mem_config_default(int d) {
  titans_mem_config c;
  c.d = d;
  c.heads = 4;
  c.head_dim = d / 4 > 0 ? d / 4 : 1;
  c.depth = 2;
  c.hidden_mult = 4;
  c.chunk = 16;
  c.conv_width = 4;
  c.residual = 0;
  c.theta_max = 0.02f;
  return c;
}

TITANSDEF int titans_mem_config_check(const titans_mem_config *c, char *err) {
  /* The bounds keep every size product far from overflow (d_m, n_hid <= 2^16, b <= 2^12). */
  if (c->d < 1 || c->d > 65536) return titans__error(err, TITANS_ERR_ARG, "memory: d = %d, want 1..65536", c->d);
  if (c->heads < 1 || c->head_dim < 1 || (long)c->heads * c->head_dim > 65536)
    return titans__error(err, TITANS_ERR_ARG, "memory: heads = %d, head_dim = %d, want >= 1 and product <= 65536",
                         c->heads, c->head_dim);
  if (c->depth < 1 || c->depth > TITANS_MEM_MAX_DEPTH)
    return titans__error(err, TITANS_ERR_ARG, "memory: depth = %d, want 1..%d", c->depth, TITANS_MEM_MAX_DEPTH);
  if (c->depth >= 2 && (c->hidden_mult < 1 || (long)c->hidden_mult * c->head_dim > 65536))
    return titans__error(err, TITANS_ERR_ARG, "memory: hidden_mult = %d, want >= 1 and hidden width <= 65536",
                         c->hidden_mult);
  if (c->chunk < 1 || c->chunk > 4096) return titans__error(err, TITANS_ERR_ARG, "memory: chunk = %d, want 1..4096", c->chunk);
  if (c->conv_width < 0 || c->conv_width > 64)
    return titans__error(err, TITANS_ERR_ARG, "memory: conv_width = %d, want 0..64", c->conv_width);
  if (c->residual != 0 && c->residual != 1) return titans__error(err, TITANS_ERR_ARG, "memory: residual must be 0 or 1");
  if (!(c->theta_max > 0.0f) || !isfinite(c->theta_max))
    return titans__error(err, TITANS_ERR_ARG, "memory: theta_max must be a positive finite number");
  return TITANS_OK;
}

/* ---- parameter layout ------------------------------------------------------------------------- */

/* Appends one parameter at *offset: records it in list (when there is room) and returns its offset. */
static size_t titans__param_push(titans_param *list, size_t max, size_t *count, size_t *offset, const char *prefix,
                                 const char *name, int kind, int ndim, size_t s0, size_t s1, size_t s2) {
  size_t shape[3] = {s0, s1, s2}, size = 1, at = *offset;
  for (int i = 0; i < ndim; i++) size *= shape[i];
  if (list && *count < max) {
    titans_param *p = &list[*count];
    memset(p, 0, sizeof *p);
    size_t lp = strlen(prefix), ln = strlen(name);
    if (lp + ln >= sizeof p->name) lp = ln = 0; /* cannot happen with the library's prefixes */
    memcpy(p->name, prefix, lp);
    memcpy(p->name + lp, name, ln);
    p->ndim = ndim;
    for (int i = 0; i < ndim; i++) p->shape[i] = shape[i];
    p->size = size;
    p->offset = at;
    p->kind = kind;
  }
  (*count)++;
  *offset += size;
  return at;
}

/* The one place that fixes the order of the memory layer's parameters: records the list and/or binds
   the pointers of w (either may be NULL). Returns the number of parameters; *offset advances. */
static size_t titans__mem_walk(const titans_mem_config *cfg, titans_mem_weights *w, float *slab, titans_param *list,
                               size_t max, const char *prefix, size_t *offset) {
  titans__mem_dims m = titans__mem_get_dims(cfg);
  size_t count = 0, o;
  static const char *const w0_names[TITANS_MEM_MAX_DEPTH] = {"w0.0", "w0.1", "w0.2", "w0.3",
                                                             "w0.4", "w0.5", "w0.6", "w0.7"};
#define TITANS__MEM_PARAM(field, name, kind, nd, a, b_, c_)                                 \
  o = titans__param_push(list, max, &count, offset, prefix, name, kind, nd, a, b_, c_); \
  if (w) w->field = slab + o;
  TITANS__MEM_PARAM(wq, "wq", TITANS_PARAM_MATRIX, 2, m.dm, m.d, 0)
  TITANS__MEM_PARAM(wk, "wk", TITANS_PARAM_MATRIX, 2, m.dm, m.d, 0)
  TITANS__MEM_PARAM(wv, "wv", TITANS_PARAM_MATRIX, 2, m.dm, m.d, 0)
  if (m.K > 0) {
    TITANS__MEM_PARAM(conv_q, "conv_q", TITANS_PARAM_MATRIX, 2, m.dm, m.K, 0)
    TITANS__MEM_PARAM(conv_k, "conv_k", TITANS_PARAM_MATRIX, 2, m.dm, m.K, 0)
    TITANS__MEM_PARAM(conv_v, "conv_v", TITANS_PARAM_MATRIX, 2, m.dm, m.K, 0)
  } else if (w) {
    w->conv_q = w->conv_k = w->conv_v = NULL;
  }
  TITANS__MEM_PARAM(lr_w, "lr_w", TITANS_PARAM_MATRIX, 2, m.H, m.d, 0)
  TITANS__MEM_PARAM(lr_b, "lr_b", TITANS_PARAM_BIAS, 1, m.H, 0, 0)
  TITANS__MEM_PARAM(mom_w, "mom_w", TITANS_PARAM_MATRIX, 2, m.H, m.d, 0)
  TITANS__MEM_PARAM(mom_b, "mom_b", TITANS_PARAM_BIAS, 1, m.H, 0, 0)
  TITANS__MEM_PARAM(decay_w, "decay_w", TITANS_PARAM_MATRIX, 2, m.H, m.d, 0)
  TITANS__MEM_PARAM(decay_b, "decay_b", TITANS_PARAM_BIAS, 1, m.H, 0, 0)
  for (size_t i = 0; i < m.L; i++) {
    TITANS__MEM_PARAM(w0[i], w0_names[i], TITANS_PARAM_MATRIX, 3, m.H, m.n[i + 1], m.n[i])
  }
  if (w)
    for (size_t i = m.L; i < TITANS_MEM_MAX_DEPTH; i++) w->w0[i] = NULL;
  TITANS__MEM_PARAM(out_norm, "out_norm", TITANS_PARAM_GAIN, 1, m.dh, 0, 0)
  TITANS__MEM_PARAM(wg, "wg", TITANS_PARAM_MATRIX, 2, m.dm, m.d, 0)
  TITANS__MEM_PARAM(wo, "wo", TITANS_PARAM_MATRIX, 2, m.d, m.dm, 0)
#undef TITANS__MEM_PARAM
  return count;
}

TITANSDEF size_t titans_mem_param_count(const titans_mem_config *cfg) {
  size_t offset = 0;
  titans__mem_walk(cfg, NULL, NULL, NULL, 0, "", &offset);
  return offset;
}

TITANSDEF void titans_mem_weights_bind(titans_mem_weights *w, const titans_mem_config *cfg, float *slab) {
  size_t offset = 0;
  titans__mem_walk(cfg, w, slab, NULL, 0, "", &offset);
}

TITANSDEF size_t titans_mem_param_list(titans_param *list, size_t max, const titans_mem_config *cfg, const char *prefix,
                                       size_t base_offset) {
  return titans__mem_walk(cfg, NULL, NULL, list, max, prefix ? prefix : "", &base_offset);
}

static void titans__fill_normal(float *p, size_t n, float std, titans_rng *rng) {
  for (size_t i = 0; i < n; i++) p[i] = std * titans_rng_normal(rng);
}

static void titans__fill_const(float *p, size_t n, float value) {
  for (size_t i = 0; i < n; i++) p[i] = value;
}

TITANSDEF void titans_mem_weights_init(const titans_mem_weights *w, const titans_mem_config *cfg, titans_rng *rng,
                                       int n_layers) {
  titans__mem_dims m = titans__mem_get_dims(cfg);
  float out_std = 0.02f / sqrtf(2.0f * (float)(n_layers > 0 ? n_layers : 1));
  titans__fill_normal(w->wq, m.dm * m.d, 0.02f, rng);
  titans__fill_normal(w->wk, m.dm * m.d, 0.02f, rng);
  titans__fill_normal(w->wv, m.dm * m.d, 0.02f, rng);
  if (m.K > 0) {
    /* Near-identity taps: the layer starts as its plain projections (a conv of small random taps would
       shrink q, k, v by ~50x and slow early training). */
    float *convs[3] = {w->conv_q, w->conv_k, w->conv_v};
    for (int c = 0; c < 3; c++) {
      titans__fill_normal(convs[c], m.dm * m.K, 0.02f, rng);
      for (size_t j = 0; j < m.dm; j++) convs[c][j * m.K + m.K - 1] += 1.0f;
    }
  }
  titans__fill_normal(w->lr_w, m.H * m.d, 0.02f, rng);
  titans__fill_normal(w->mom_w, m.H * m.d, 0.02f, rng);
  titans__fill_normal(w->decay_w, m.H * m.d, 0.02f, rng);
  /* Gates start small and stable: theta = theta_max / 2, eta ~ 0.9, alpha ~ 0.02 (logits of those). */
  titans__fill_const(w->lr_b, m.H, 0.0f);
  titans__fill_const(w->mom_b, m.H, 2.1972246f);
  titans__fill_const(w->decay_b, m.H, -3.8918203f);
  for (size_t i = 0; i < m.L; i++) titans__fill_normal(w->w0[i], m.H * m.n[i + 1] * m.n[i], 1.0f / sqrtf((float)m.n[i]), rng);
  titans__fill_const(w->out_norm, m.dh, 1.0f);
  titans__fill_normal(w->wg, m.dm * m.d, 0.02f, rng);
  titans__fill_normal(w->wo, m.d * m.dm, out_std, rng);
}

/* ---- scalar pieces ---------------------------------------------------------------------------- */

static inline float titans__mem_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/* SiLU'(z) = s (1 + z (1 - s)), s = sigmoid(z) (the chunk kernels keep s beside z) */
static inline float titans__silu_d1(float z, float s) { return s * (1.0f + z * (1.0f - s)); }
/* SiLU''(z) = s (1 - s) (2 + z (1 - 2 s)) */
static inline float titans__silu_d2(float z, float s) { return s * (1.0f - s) * (2.0f + z * (1.0f - 2.0f * s)); }

/* The chunk coefficients of SPEC 1.6 for n tokens with gates theta, eta, alpha [n]:
   A, B, E [n]; C, D [n, n] lower triangular (zero above the diagonal). Built by the recurrences
   A_t = (1-alpha_t) A_{t-1}, E_t = eta_t E_{t-1}, B_t = (1-alpha_t) B_{t-1} + E_t,
   D_{t,i} = eta_t D_{t-1,i}, D_{t,t} = theta_t, C_{t,i} = (1-alpha_t) C_{t-1,i} + D_{t,i},
   which form every product directly (never a ratio of cumulative products). */
static void titans__mem_coeffs(float *A, float *B, float *E, float *C, float *D, const float *theta, const float *eta,
                               const float *alpha, size_t n) {
  for (size_t t = 0; t < n; t++) {
    float keep = 1.0f - alpha[t];
    float Ap = t ? A[t - 1] : 1.0f, Bp = t ? B[t - 1] : 0.0f, Ep = t ? E[t - 1] : 1.0f;
    E[t] = eta[t] * Ep;
    A[t] = keep * Ap;
    B[t] = keep * Bp + E[t];
    float *Ct = C + t * n, *Dt = D + t * n;
    const float *Cp = C + (t - 1) * n, *Dp = D + (t - 1) * n;
    for (size_t i = 0; i < t; i++) {
      Dt[i] = eta[t] * Dp[i];
      Ct[i] = keep * Cp[i] + Dt[i];
    }
    Dt[t] = theta[t];
    Ct[t] = theta[t];
    for (size_t i = t + 1; i < n; i++) Ct[i] = Dt[i] = 0.0f;
  }
}

/* Backward of titans__mem_coeffs. dA, dB, dE [n], dC, dD [n, n] hold the gradients of the outputs and
   are used as the adjoint accumulators (overwritten). Accumulates dtheta, deta, dalpha [n]. */
static void titans__mem_coeffs_backward(float *dtheta, float *deta, float *dalpha, float *dA, float *dB, float *dE,
                                        float *dC, float *dD, const float *A, const float *B, const float *E,
                                        const float *C, const float *D, const float *eta, const float *alpha,
                                        size_t n) {
  for (size_t t = n; t-- > 0;) {
    float keep = 1.0f - alpha[t];
    float Ap = t ? A[t - 1] : 1.0f, Bp = t ? B[t - 1] : 0.0f, Ep = t ? E[t - 1] : 1.0f;
    float *dCt = dC + t * n, *dDt = dD + t * n;
    /* A_t = keep A_{t-1} */
    dalpha[t] -= dA[t] * Ap;
    if (t) dA[t - 1] += keep * dA[t];
    /* B_t = keep B_{t-1} + E_t */
    dalpha[t] -= dB[t] * Bp;
    if (t) dB[t - 1] += keep * dB[t];
    dE[t] += dB[t];
    /* C_{t,i} = keep C_{t-1,i} + D_{t,i} (i < t); C_{t,t} = D_{t,t} */
    for (size_t i = 0; i <= t; i++) dDt[i] += dCt[i];
    if (t) {
      const float *Cp = C + (t - 1) * n, *Dp = D + (t - 1) * n;
      float *dCp = dC + (t - 1) * n, *dDp = dD + (t - 1) * n;
      float da = 0.0f, de = 0.0f;
      for (size_t i = 0; i < t; i++) {
        da += dCt[i] * Cp[i];
        dCp[i] += keep * dCt[i];
        /* D_{t,i} = eta_t D_{t-1,i} */
        de += dDt[i] * Dp[i];
        dDp[i] += eta[t] * dDt[i];
      }
      dalpha[t] -= da;
      deta[t] += de;
    }
    dtheta[t] += dDt[t];
    /* E_t = eta_t E_{t-1} */
    deta[t] += dE[t] * Ep;
    if (t) dE[t - 1] += eta[t] * dE[t];
  }
}

/* ---- the chunk kernel ------------------------------------------------------------------------- */

/* Work space of one thread for one piece of at most b tokens of one head. */
typedef struct titans__mem_work {
  float *cA, *cB, *cE;                       /* [b] chunk coefficients */
  float *cC, *cD;                            /* [b, b] */
  float *th, *et, *al;                       /* [b] gates of the piece */
  float *vv;                                 /* [b, dh] values */
  float *ak[TITANS_MEM_MAX_DEPTH];           /* ak[i] [b, n_i]: key path input of layer i (ak[0] = keys) */
  float *zk[TITANS_MEM_MAX_DEPTH];           /* zk[i] [b, n_{i+1}]: key path pre-activations */
  float *sk[TITANS_MEM_MAX_DEPTH];           /* sk[i] [b, n_{i+1}]: sigmoid(zk[i]) (i < L-1) */
  float *sq[TITANS_MEM_MAX_DEPTH];           /* sq[i] [b, n_{i+1}]: sigmoid(zq[i]) (i < L-1) */
  float *gk[TITANS_MEM_MAX_DEPTH];           /* gk[i] [b, n_{i+1}]: delta[i+1] W_{i+1} (i < L-1) */
  float *delta[TITANS_MEM_MAX_DEPTH];        /* delta[i] [b, n_{i+1}]: d l / d zk[i] */
  float *aq[TITANS_MEM_MAX_DEPTH];           /* aq[i] [b, n_i]: query path input of layer i (aq[0] = queries) */
  float *zq[TITANS_MEM_MAX_DEPTH];           /* zq[i] [b, n_{i+1}]: query path pre-activations */
  float *p1[TITANS_MEM_MAX_DEPTH];           /* p1[i] [b, n_{i+1}]: aq[i] W_i^T */
  float *p2[TITANS_MEM_MAX_DEPTH];           /* p2[i] [b, n_{i+1}]: aq[i] S_i^T */
  float *mx[TITANS_MEM_MAX_DEPTH];           /* mx[i] [b, b]: aq[i] ak[i]^T */
  float *cm;                                 /* [b, b] C o mx */
  float *tmp, *tmp2;                         /* [b, nmax] */
  /* backward only */
  float *dA, *dB, *dE, *dth, *det, *dal;     /* [b] */
  float *dC, *dD, *t1, *dmx;                 /* [b, b] */
  float *ddelta[TITANS_MEM_MAX_DEPTH];       /* [b, n_{i+1}] */
  float *dzk[TITANS_MEM_MAX_DEPTH];          /* [b, n_{i+1}] */
  float *dak[TITANS_MEM_MAX_DEPTH];          /* [b, n_i] */
  float *dz, *dp1, *dp2, *daq;               /* [b, nmax] */
  float *dq, *dv;                            /* [b, dh] */
  float *dW, *dS, *dWend, *dSend;            /* [head_size] */
} titans__mem_work;

/* Carves a work struct out of buf (NULL: only counts). Returns the number of floats used. */
static size_t titans__mem_work_carve(titans__mem_work *wk, float *buf, const titans__mem_dims *m, int backward) {
  size_t used = 0, b = m->b;
#define TITANS__TAKE(ptr, count)        \
  do {                                  \
    if (buf) (ptr) = buf + used;        \
    used += (count);                    \
  } while (0)
  titans__mem_work dummy;
  if (!wk) wk = &dummy;
  memset(wk, 0, sizeof *wk); /* every field is set below when buf is given; this keeps compilers sure */
  TITANS__TAKE(wk->cA, b); TITANS__TAKE(wk->cB, b); TITANS__TAKE(wk->cE, b);
  TITANS__TAKE(wk->cC, b * b); TITANS__TAKE(wk->cD, b * b);
  TITANS__TAKE(wk->th, b); TITANS__TAKE(wk->et, b); TITANS__TAKE(wk->al, b);
  TITANS__TAKE(wk->vv, b * m->dh);
  for (size_t i = 0; i < m->L; i++) {
    TITANS__TAKE(wk->ak[i], b * m->n[i]);
    TITANS__TAKE(wk->zk[i], b * m->n[i + 1]);
    TITANS__TAKE(wk->sk[i], b * m->n[i + 1]);
    TITANS__TAKE(wk->sq[i], b * m->n[i + 1]);
    TITANS__TAKE(wk->gk[i], b * m->n[i + 1]);
    TITANS__TAKE(wk->delta[i], b * m->n[i + 1]);
    TITANS__TAKE(wk->aq[i], b * m->n[i]);
    TITANS__TAKE(wk->zq[i], b * m->n[i + 1]);
    TITANS__TAKE(wk->p1[i], b * m->n[i + 1]);
    TITANS__TAKE(wk->p2[i], b * m->n[i + 1]);
    TITANS__TAKE(wk->mx[i], b * b);
  }
  TITANS__TAKE(wk->cm, b * b);
  TITANS__TAKE(wk->tmp, b * m->nmax);
  TITANS__TAKE(wk->tmp2, b * m->nmax);
  if (backward) {
    TITANS__TAKE(wk->dA, b); TITANS__TAKE(wk->dB, b); TITANS__TAKE(wk->dE, b);
    TITANS__TAKE(wk->dth, b); TITANS__TAKE(wk->det, b); TITANS__TAKE(wk->dal, b);
    TITANS__TAKE(wk->dC, b * b); TITANS__TAKE(wk->dD, b * b);
    TITANS__TAKE(wk->t1, b * b); TITANS__TAKE(wk->dmx, b * b);
    for (size_t i = 0; i < m->L; i++) {
      TITANS__TAKE(wk->ddelta[i], b * m->n[i + 1]);
      TITANS__TAKE(wk->dzk[i], b * m->n[i + 1]);
      TITANS__TAKE(wk->dak[i], b * m->n[i]);
    }
    TITANS__TAKE(wk->dz, b * m->nmax); TITANS__TAKE(wk->dp1, b * m->nmax);
    TITANS__TAKE(wk->dp2, b * m->nmax); TITANS__TAKE(wk->daq, b * m->nmax);
    TITANS__TAKE(wk->dq, b * m->dh); TITANS__TAKE(wk->dv, b * m->dh);
    TITANS__TAKE(wk->dW, m->head_size); TITANS__TAKE(wk->dS, m->head_size);
    TITANS__TAKE(wk->dWend, m->head_size); TITANS__TAKE(wk->dSend, m->head_size);
  }
#undef TITANS__TAKE
  return used;
}

/* Copies n rows of width w from a strided source [n, ld] to a packed [n, w]. */
static void titans__copy_rows(float *dst, const float *src, size_t n, size_t w, size_t ld) {
  for (size_t t = 0; t < n; t++) memcpy(dst + t * w, src + t * ld, w * sizeof(float));
}

/* Adds a packed [n, w] into strided rows [n, ld]. */
static void titans__add_rows(float *dst, size_t ld, const float *src, size_t n, size_t w) {
  for (size_t t = 0; t < n; t++) titans__axpy(dst + t * ld, 1.0f, src + t * w, w);
}

/* out[t, :] = s[t] * in[t, :] over [n, w] */
static void titans__scale_rows(float *out, const float *s, const float *in, size_t n, size_t w) {
  for (size_t t = 0; t < n; t++)
    for (size_t j = 0; j < w; j++) out[t * w + j] = s[t] * in[t * w + j];
}

/* s = sigmoid(z) (vectorised) and y = SiLU(z) = z s over n floats; s is kept for the derivatives. */
static void titans__silu_keep(float *y, float *s, const float *z, size_t n) {
  titans_sigmoid_forward(s, z, n);
  for (size_t j = 0; j < n; j++) y[j] = z[j] * s[j];
}

/* One piece of n <= b tokens of one head, from a running state (W, S) inside a chunk whose inner
   gradients are taken at wgrad (the chunk-start weights; the same pointer as w at a chunk start).
   q, k, v [n, ld] (head slice at column 0), gates theta, eta, alpha [n] with stride gstride.
   Writes y [n, ld] (unless y is NULL). When w_out / s_out are not NULL, writes the state after the piece there (they may
   alias w / s: the update is done in place after every read of the old state). Leaves in wk everything
   the backward needs. */
static void titans__mem_piece_forward(const titans__mem_dims *m, int residual, float *y, const float *q,
                                      const float *k, const float *v, size_t ld, const float *theta,
                                      const float *eta, const float *alpha, size_t gstride, const float *wgrad,
                                      const float *w, const float *s, float *w_out, float *s_out, size_t n,
                                      titans__mem_work *wk) {
  const size_t L = m->L, dh = m->dh;
  for (size_t t = 0; t < n; t++) {
    wk->th[t] = theta[t * gstride];
    wk->et[t] = eta[t * gstride];
    wk->al[t] = alpha[t * gstride];
  }
  titans__copy_rows(wk->ak[0], k, n, dh, ld);
  titans__copy_rows(wk->aq[0], q, n, dh, ld);
  titans__copy_rows(wk->vv, v, n, dh, ld);
  titans__mem_coeffs(wk->cA, wk->cB, wk->cE, wk->cC, wk->cD, wk->th, wk->et, wk->al, n);

  /* Key path through the chunk-start weights: zk[i] = ak[i] Wg_i^T, ak[i+1] = SiLU(zk[i]). */
  for (size_t i = 0; i < L; i++) {
    titans_gemm(0, 1, n, m->n[i + 1], m->n[i], 1.0f, wk->ak[i], m->n[i], wgrad + m->wofs[i], m->n[i], 0.0f, wk->zk[i],
                m->n[i + 1]);
    if (i + 1 < L) titans__silu_keep(wk->ak[i + 1], wk->sk[i], wk->zk[i], n * m->n[i + 1]);
  }
  /* Errors of the inner loss: delta[L-1] = 2 (M(k) - v); delta[i] = (delta[i+1] W_{i+1}) o SiLU'(zk[i]). */
  for (size_t t = 0; t < n; t++)
    for (size_t j = 0; j < dh; j++) {
      float pred = wk->zk[L - 1][t * dh + j] + (residual ? wk->ak[0][t * dh + j] : 0.0f);
      wk->delta[L - 1][t * dh + j] = 2.0f * (pred - wk->vv[t * dh + j]);
    }
  for (size_t i = L - 1; i-- > 0;) {
    size_t wi = m->n[i + 1];
    titans_gemm(0, 0, n, wi, m->n[i + 2], 1.0f, wk->delta[i + 1], m->n[i + 2], wgrad + m->wofs[i + 1], wi, 0.0f,
                wk->gk[i], wi);
    for (size_t j = 0; j < n * wi; j++) wk->delta[i][j] = wk->gk[i][j] * titans__silu_d1(wk->zk[i][j], wk->sk[i][j]);
  }

  /* Query path through the per-token weights W_t = A_t W + B_t S - sum_i C_{t,i} u_i:
     zq[i] = diag(A) aq[i] W_i^T + diag(B) aq[i] S_i^T - (C o (aq[i] ak[i]^T)) delta[i]. */
  for (size_t i = 0; i < L; i++) {
    size_t ni = m->n[i], no = m->n[i + 1];
    titans_gemm(0, 1, n, no, ni, 1.0f, wk->aq[i], ni, w + m->wofs[i], ni, 0.0f, wk->p1[i], no);
    titans_gemm(0, 1, n, no, ni, 1.0f, wk->aq[i], ni, s + m->wofs[i], ni, 0.0f, wk->p2[i], no);
    titans_gemm(0, 1, n, n, ni, 1.0f, wk->aq[i], ni, wk->ak[i], ni, 0.0f, wk->mx[i], n);
    for (size_t t = 0; t < n * n; t++) wk->cm[t] = wk->cC[t] * wk->mx[i][t];
    for (size_t t = 0; t < n; t++)
      for (size_t j = 0; j < no; j++)
        wk->zq[i][t * no + j] = wk->cA[t] * wk->p1[i][t * no + j] + wk->cB[t] * wk->p2[i][t * no + j];
    titans_gemm(0, 0, n, no, n, -1.0f, wk->cm, n, wk->delta[i], no, 1.0f, wk->zq[i], no);
    if (i + 1 < L) titans__silu_keep(wk->aq[i + 1], wk->sq[i], wk->zq[i], n * no);
  }
  if (y)
    for (size_t t = 0; t < n; t++)
      for (size_t j = 0; j < dh; j++)
        y[t * ld + j] = wk->zq[L - 1][t * dh + j] + (residual ? wk->aq[0][t * dh + j] : 0.0f);

  /* State after the piece: W' = A_n W + B_n S - delta^T diag(C_n,.) ak, S' = E_n S - delta^T diag(D_n,.) ak.
     W' first: it reads the old S, which the S update then overwrites. */
  if (!w_out) return;
  const float *crow = wk->cC + (n - 1) * n, *drow = wk->cD + (n - 1) * n;
  float An = wk->cA[n - 1], Bn = wk->cB[n - 1], En = wk->cE[n - 1];
  for (size_t i = 0; i < L; i++) {
    size_t ni = m->n[i], no = m->n[i + 1], sz = ni * no;
    const float *wi = w + m->wofs[i], *si = s + m->wofs[i];
    float *wo = w_out + m->wofs[i], *so = s_out + m->wofs[i];
    for (size_t j = 0; j < sz; j++) wo[j] = An * wi[j] + Bn * si[j];
    titans__scale_rows(wk->tmp, crow, wk->ak[i], n, ni);
    titans_gemm(1, 0, no, ni, n, -1.0f, wk->delta[i], no, wk->tmp, ni, 1.0f, wo, ni);
    for (size_t j = 0; j < sz; j++) so[j] = En * si[j];
    titans__scale_rows(wk->tmp, drow, wk->ak[i], n, ni);
    titans_gemm(1, 0, no, ni, n, -1.0f, wk->delta[i], no, wk->tmp, ni, 1.0f, so, ni);
  }
}

/* rowdot[t] = sum_j a[t, j] b[t, j] over [n, w], added into out[t] scaled by sign */
static void titans__rowdot_acc(float *out, float sign, const float *a, const float *b, size_t n, size_t w) {
  for (size_t t = 0; t < n; t++) out[t] += sign * titans__dot(a + t * w, b + t * w, w);
}

/* Backward of one whole chunk (piece starting at a chunk start, so the inner gradients are taken at w).
   Inputs: the chunk's q, k, v, gates as in the forward; w, s [head_size] the state at the chunk start;
   dy [n, ld] the gradient of y; wk->dWend, wk->dSend the gradient of the state after the chunk.
   Outputs: wk->dW, wk->dS the gradient of the state at the chunk start; accumulates dq, dk, dv [n, ld]
   and dtheta, deta, dalpha [n] (stride gstride). */
static void titans__mem_piece_backward(const titans__mem_dims *m, int residual, float *dq, float *dk, float *dv,
                                       float *dtheta, float *deta, float *dalpha, const float *dy, const float *q,
                                       const float *k, const float *v, size_t ld, const float *theta,
                                       const float *eta, const float *alpha, size_t gstride, const float *w,
                                       const float *s, size_t n, titans__mem_work *wk) {
  const size_t L = m->L, dh = m->dh, hs = m->head_size;
  titans__mem_piece_forward(m, residual, NULL, q, k, v, ld, theta, eta, alpha, gstride, w, w, s, NULL, NULL, n, wk);
  memset(wk->dW, 0, hs * sizeof(float));
  memset(wk->dS, 0, hs * sizeof(float));
  memset(wk->dA, 0, n * sizeof(float));
  memset(wk->dB, 0, n * sizeof(float));
  memset(wk->dE, 0, n * sizeof(float));
  memset(wk->dth, 0, n * sizeof(float));
  memset(wk->det, 0, n * sizeof(float));
  memset(wk->dal, 0, n * sizeof(float));
  memset(wk->dC, 0, n * n * sizeof(float));
  memset(wk->dD, 0, n * n * sizeof(float));
  for (size_t i = 0; i < L; i++) {
    memset(wk->ddelta[i], 0, n * m->n[i + 1] * sizeof(float));
    memset(wk->dzk[i], 0, n * m->n[i + 1] * sizeof(float));
    memset(wk->dak[i], 0, n * m->n[i] * sizeof(float));
  }
  memset(wk->dq, 0, n * dh * sizeof(float));
  memset(wk->dv, 0, n * dh * sizeof(float));

  /* State after the chunk: W' = A_n W + B_n S - delta^T diag(c) ak; S' = E_n S - delta^T diag(dd) ak. */
  const float *crow = wk->cC + (n - 1) * n, *drow = wk->cD + (n - 1) * n;
  float *dcrow = wk->dC + (n - 1) * n, *ddrow = wk->dD + (n - 1) * n;
  float An = wk->cA[n - 1], Bn = wk->cB[n - 1], En = wk->cE[n - 1];
  for (size_t i = 0; i < L; i++) {
    size_t ni = m->n[i], no = m->n[i + 1], sz = ni * no, o = m->wofs[i];
    const float *dWe = wk->dWend + o, *dSe = wk->dSend + o;
    titans__axpy(wk->dW + o, An, dWe, sz);
    titans__axpy(wk->dS + o, Bn, dWe, sz);
    titans__axpy(wk->dS + o, En, dSe, sz);
    wk->dA[n - 1] += titans__dot(dWe, w + o, sz);
    wk->dB[n - 1] += titans__dot(dWe, s + o, sz);
    wk->dE[n - 1] += titans__dot(dSe, s + o, sz);
    /* through ak: R1 = delta dW', R2 = delta dS' [n, ni] */
    titans_gemm(0, 0, n, ni, no, 1.0f, wk->delta[i], no, dWe, ni, 0.0f, wk->tmp, ni);
    titans_gemm(0, 0, n, ni, no, 1.0f, wk->delta[i], no, dSe, ni, 0.0f, wk->tmp2, ni);
    titans__rowdot_acc(dcrow, -1.0f, wk->tmp, wk->ak[i], n, ni);
    titans__rowdot_acc(ddrow, -1.0f, wk->tmp2, wk->ak[i], n, ni);
    for (size_t t = 0; t < n; t++)
      for (size_t j = 0; j < ni; j++)
        wk->dak[i][t * ni + j] -= crow[t] * wk->tmp[t * ni + j] + drow[t] * wk->tmp2[t * ni + j];
    /* through delta: Q1 = ak dW'^T, Q2 = ak dS'^T [n, no] */
    titans_gemm(0, 1, n, no, ni, 1.0f, wk->ak[i], ni, dWe, ni, 0.0f, wk->tmp, no);
    titans_gemm(0, 1, n, no, ni, 1.0f, wk->ak[i], ni, dSe, ni, 0.0f, wk->tmp2, no);
    for (size_t t = 0; t < n; t++)
      for (size_t j = 0; j < no; j++)
        wk->ddelta[i][t * no + j] -= crow[t] * wk->tmp[t * no + j] + drow[t] * wk->tmp2[t * no + j];
  }

  /* Query path, last layer first. dz = d zq[i]. */
  titans__copy_rows(wk->dz, dy, n, dh, ld);
  if (residual) titans__add_rows(wk->dq, dh, wk->dz, n, dh);
  for (size_t i = L; i-- > 0;) {
    size_t ni = m->n[i], no = m->n[i + 1], o = m->wofs[i];
    /* zq[i] = diag(A) p1 + diag(B) p2 - (C o mx) delta[i] */
    titans__rowdot_acc(wk->dA, 1.0f, wk->dz, wk->p1[i], n, no);
    titans__rowdot_acc(wk->dB, 1.0f, wk->dz, wk->p2[i], n, no);
    titans_gemm(0, 1, n, n, no, 1.0f, wk->dz, no, wk->delta[i], no, 0.0f, wk->t1, n);
    for (size_t t = 0; t < n; t++)
      for (size_t j = 0; j < n; j++) {
        size_t tj = t * n + j;
        wk->dC[tj] -= wk->t1[tj] * wk->mx[i][tj];
        wk->dmx[tj] = -wk->cC[tj] * wk->t1[tj];
        wk->cm[tj] = wk->cC[tj] * wk->mx[i][tj];
      }
    titans_gemm(1, 0, n, no, n, -1.0f, wk->cm, n, wk->dz, no, 1.0f, wk->ddelta[i], no);
    titans__scale_rows(wk->dp1, wk->cA, wk->dz, n, no);
    titans__scale_rows(wk->dp2, wk->cB, wk->dz, n, no);
    /* p1 = aq W^T, p2 = aq S^T, mx = aq ak^T */
    titans_gemm(0, 0, n, ni, no, 1.0f, wk->dp1, no, w + o, ni, 0.0f, wk->daq, ni);
    titans_gemm(0, 0, n, ni, no, 1.0f, wk->dp2, no, s + o, ni, 1.0f, wk->daq, ni);
    titans_gemm(0, 0, n, ni, n, 1.0f, wk->dmx, n, wk->ak[i], ni, 1.0f, wk->daq, ni);
    titans_gemm(1, 0, no, ni, n, 1.0f, wk->dp1, no, wk->aq[i], ni, 1.0f, wk->dW + o, ni);
    titans_gemm(1, 0, no, ni, n, 1.0f, wk->dp2, no, wk->aq[i], ni, 1.0f, wk->dS + o, ni);
    titans_gemm(1, 0, n, ni, n, 1.0f, wk->dmx, n, wk->aq[i], ni, 1.0f, wk->dak[i], ni);
    if (i > 0) {
      /* aq[i] = SiLU(zq[i-1]) */
      for (size_t j = 0; j < n * ni; j++) wk->dz[j] = wk->daq[j] * titans__silu_d1(wk->zq[i - 1][j], wk->sq[i - 1][j]);
    } else {
      for (size_t j = 0; j < n * dh; j++) wk->dq[j] += wk->daq[j];
    }
  }

  /* Key path, the error recursion first: delta[i] = gk[i] o SiLU'(zk[i]), gk[i] = delta[i+1] W_{i+1}. */
  for (size_t i = 0; i + 1 < L; i++) {
    size_t no = m->n[i + 1], nn = m->n[i + 2], o1 = m->wofs[i + 1];
    float *dg = wk->tmp;
    for (size_t j = 0; j < n * no; j++) {
      float z = wk->zk[i][j];
      float sg = wk->sk[i][j];
      dg[j] = wk->ddelta[i][j] * titans__silu_d1(z, sg);
      wk->dzk[i][j] += wk->ddelta[i][j] * wk->gk[i][j] * titans__silu_d2(z, sg);
    }
    titans_gemm(0, 1, n, nn, no, 1.0f, dg, no, w + o1, no, 1.0f, wk->ddelta[i + 1], nn);
    titans_gemm(1, 0, nn, no, n, 1.0f, wk->delta[i + 1], nn, dg, no, 1.0f, wk->dW + o1, no);
  }
  /* delta[L-1] = 2 (zk[L-1] + residual k - v) */
  for (size_t j = 0; j < n * dh; j++) {
    float g = 2.0f * wk->ddelta[L - 1][j];
    wk->dzk[L - 1][j] += g;
    wk->dv[j] -= g;
    if (residual) wk->dak[0][j] += g;
  }
  /* zk[i] = ak[i] W_i^T, ak[i] = SiLU(zk[i-1]) */
  for (size_t i = L; i-- > 0;) {
    size_t ni = m->n[i], no = m->n[i + 1], o = m->wofs[i];
    titans_gemm(1, 0, no, ni, n, 1.0f, wk->dzk[i], no, wk->ak[i], ni, 1.0f, wk->dW + o, ni);
    titans_gemm(0, 0, n, ni, no, 1.0f, wk->dzk[i], no, w + o, ni, 1.0f, wk->dak[i], ni);
    if (i > 0)
      for (size_t j = 0; j < n * ni; j++) wk->dzk[i - 1][j] += wk->dak[i][j] * titans__silu_d1(wk->zk[i - 1][j], wk->sk[i - 1][j]);
  }

  /* Gates through the coefficients. */
  titans__mem_coeffs_backward(wk->dth, wk->det, wk->dal, wk->dA, wk->dB, wk->dE, wk->dC, wk->dD, wk->cA, wk->cB,
                              wk->cE, wk->cC, wk->cD, wk->et, wk->al, n);
  for (size_t t = 0; t < n; t++) {
    dtheta[t * gstride] += wk->dth[t];
    deta[t * gstride] += wk->det[t];
    dalpha[t * gstride] += wk->dal[t];
  }
  titans__add_rows(dq, ld, wk->dq, n, dh);
  titans__add_rows(dk, ld, wk->dak[0], n, dh);
  titans__add_rows(dv, ld, wk->dv, n, dh);
}

/* ---- streaming state -------------------------------------------------------------------------- */

TITANSDEF int titans_mem_state_init(titans_mem_state *st, const titans_mem_config *cfg, size_t batch) {
  memset(st, 0, sizeof *st);
  int rc = titans_mem_config_check(cfg, st->error);
  if (rc) return rc;
  if (batch < 1 || batch > ((size_t)1 << 24)) return titans__error(st->error, TITANS_ERR_ARG, "memory state: batch = %zu", batch);
  titans__mem_dims m = titans__mem_get_dims(cfg);
  st->cfg = *cfg;
  st->batch = batch;
  st->head_size = m.head_size;
  size_t per_row = 0, tail = m.K > 0 ? (m.K - 1) * m.dm : 0, total;
  /* 4 weight-sized buffers per head, 4 conv tails per row */
  if (!titans_size_mul(m.H, m.head_size, &per_row) || !titans_size_mul(per_row, 4, &per_row) ||
      !titans_size_add(per_row, 4 * tail, &per_row) || !titans_size_mul(per_row, batch, &total))
    return titans__error(st->error, TITANS_ERR_NOMEM, "memory state: size overflow");
  float *slab = titans_alloc_floats(total);
  if (!slab) return titans__error(st->error, TITANS_ERR_NOMEM, "memory state: cannot allocate %zu floats", total);
  size_t wsz = batch * m.H * m.head_size, tsz = batch * tail;
  st->w_chunk = slab;
  st->w = slab + wsz;
  st->s_chunk = slab + 2 * wsz;
  st->s = slab + 3 * wsz;
  st->tail_q = slab + 4 * wsz;
  st->tail_k = st->tail_q + tsz;
  st->tail_v = st->tail_k + tsz;
  st->tail_rq = st->tail_v + tsz;
  return TITANS_OK;
}

TITANSDEF void titans_mem_state_free(titans_mem_state *st) {
  titans_free(st->w_chunk);
  titans_free(st->scratch);
  memset(st, 0, sizeof *st);
}

/* Floats of the state's slab (weights, momentum, tails), which save/load/copy move as one block. */
static size_t titans__mem_state_slab_floats(const titans_mem_state *st) {
  titans__mem_dims m = titans__mem_get_dims(&st->cfg);
  size_t tail = m.K > 0 ? (m.K - 1) * m.dm : 0;
  return st->batch * (4 * m.H * m.head_size + 4 * tail);
}

TITANSDEF void titans_mem_state_reset(titans_mem_state *st, const titans_mem_weights *w) {
  titans__mem_dims m = titans__mem_get_dims(&st->cfg);
  memset(st->w_chunk, 0, titans__mem_state_slab_floats(st) * sizeof(float));
  for (size_t r = 0; r < st->batch; r++)
    for (size_t h = 0; h < m.H; h++) {
      float *wr = st->w + (r * m.H + h) * m.head_size;
      for (size_t i = 0; i < m.L; i++) {
        size_t sz = m.n[i + 1] * m.n[i];
        memcpy(wr + m.wofs[i], w->w0[i] + h * sz, sz * sizeof(float));
      }
    }
  memcpy(st->w_chunk, st->w, st->batch * m.H * m.head_size * sizeof(float));
  st->position = 0;
}

TITANSDEF int titans_mem_state_copy(titans_mem_state *dst, const titans_mem_state *src) {
  if (dst->batch != src->batch || memcmp(&dst->cfg, &src->cfg, sizeof src->cfg) != 0)
    return titans__error(dst->error, TITANS_ERR_ARG, "memory state copy: configurations or batch sizes differ");
  memcpy(dst->w_chunk, src->w_chunk, titans__mem_state_slab_floats(src) * sizeof(float));
  dst->position = src->position;
  return TITANS_OK;
}

/* dst takes src's memory, momentum, position and update-stream conv tails, and keeps its own
   retrieval-stream tail (MAC commits the memory at a segment start this way). */
static void titans__mem_state_commit(titans_mem_state *dst, const titans_mem_state *src) {
  titans__mem_dims m = titans__mem_get_dims(&src->cfg);
  size_t tail = src->batch * (m.K > 0 ? (m.K - 1) * m.dm : 0);
  memcpy(dst->w_chunk, src->w_chunk, (titans__mem_state_slab_floats(src) - tail) * sizeof(float));
  dst->position = src->position;
}

/* Layout of a saved state: [position as two floats holding 24-bit halves... ] -- see below. */
TITANSDEF size_t titans_mem_state_floats(const titans_mem_state *st) { return 3 + titans__mem_state_slab_floats(st); }

/* The position is stored exactly as three 21-bit pieces (each a float integer < 2^21), so any position
   below 2^63 round-trips through float storage. */
TITANSDEF void titans_mem_state_save(const titans_mem_state *st, float *buf) {
  uint64_t p = (uint64_t)st->position;
  buf[0] = (float)(p & 0x1FFFFF);
  buf[1] = (float)((p >> 21) & 0x1FFFFF);
  buf[2] = (float)((p >> 42) & 0x1FFFFF);
  memcpy(buf + 3, st->w_chunk, titans__mem_state_slab_floats(st) * sizeof(float));
}

TITANSDEF int titans_mem_state_load(titans_mem_state *st, const float *buf, size_t count) {
  if (count != titans_mem_state_floats(st))
    return titans__error(st->error, TITANS_ERR_FORMAT, "memory state load: %zu floats, want %zu", count,
                         titans_mem_state_floats(st));
  uint64_t p = 0;
  for (int i = 0; i < 3; i++) {
    float f = buf[i];
    if (!(f >= 0.0f && f < 2097152.0f) || f != floorf(f))
      return titans__error(st->error, TITANS_ERR_FORMAT, "memory state load: bad position field");
    p |= (uint64_t)f << (21 * i);
  }
  size_t n = titans__mem_state_slab_floats(st);
  for (size_t i = 0; i < n; i++)
    if (!isfinite(buf[3 + i])) return titans__error(st->error, TITANS_ERR_FORMAT, "memory state load: non-finite value");
  memcpy(st->w_chunk, buf + 3, n * sizeof(float));
  st->position = (long long)p;
  return TITANS_OK;
}

TITANSDEF void titans_mem_ctx_init(titans_mem_ctx *ctx) { memset(ctx, 0, sizeof *ctx); }

TITANSDEF void titans_mem_ctx_free(titans_mem_ctx *ctx) {
  titans_free(ctx->proj);
  titans_free(ctx->states);
  memset(ctx, 0, sizeof *ctx);
}

/* ---- layer buffers ---------------------------------------------------------------------------- */

/* Per-call activations of B x T tokens (in a ctx for training, in the state's scratch otherwise). */
typedef struct titans__mem_bufs {
  float *proj[3];  /* [B, T, d_m] q, k, v projections */
  float *conv[3];  /* [B, T, d_m] conv outputs (= proj without conv) */
  float *act[3];   /* [B, T, d_m] SiLU outputs; act[2] is v */
  float *qk[2];    /* [B, T, d_m] L2-normalised q, k */
  float *rnorm[2]; /* [B, T, H] */
  float *gates[3]; /* [B, T, H] theta, eta, alpha */
  float *y, *yn, *g, *gated; /* [B, T, d_m] */
  float *rstd;     /* [B, T, H] */
} titans__mem_bufs;

/* Takes count floats from base at *used (base NULL: only counts). */
static float *titans__take(float *base, size_t *used, size_t count) {
  float *p = base ? base + *used : NULL;
  *used += count;
  return p;
}

static size_t titans__mem_bufs_carve(titans__mem_bufs *bf, float *base, const titans__mem_dims *m, size_t bt) {
  size_t used = 0, v = bt * m->dm, s = bt * m->H;
  for (int i = 0; i < 3; i++) bf->proj[i] = titans__take(base, &used, v);
  for (int i = 0; i < 3; i++) bf->conv[i] = m->K > 0 ? titans__take(base, &used, v) : bf->proj[i];
  for (int i = 0; i < 3; i++) bf->act[i] = titans__take(base, &used, v);
  for (int i = 0; i < 2; i++) bf->qk[i] = titans__take(base, &used, v);
  for (int i = 0; i < 2; i++) bf->rnorm[i] = titans__take(base, &used, s);
  for (int i = 0; i < 3; i++) bf->gates[i] = titans__take(base, &used, s);
  bf->y = titans__take(base, &used, v);
  bf->yn = titans__take(base, &used, v);
  bf->g = titans__take(base, &used, v);
  bf->gated = titans__take(base, &used, v);
  bf->rstd = titans__take(base, &used, s);
  return used;
}

/* Grows *buf to at least count floats (contents lost). */
static int titans__reserve(float **buf, size_t *cap, size_t count) {
  if (*cap >= count && *buf) return 1;
  titans_free(*buf);
  *buf = titans_alloc_floats(count);
  *cap = *buf ? count : 0;
  return *buf != NULL;
}

static int titans__mem_thread_id(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/* ---- input and output paths ------------------------------------------------------------------- */

/* tail [K-1, dm] becomes the last K-1 rows of [tail; seq], seq [T, dm]. */
static void titans__mem_tail_advance(float *tail, const float *seq, size_t T, size_t K1, size_t dm) {
  if (K1 == 0) return;
  if (T >= K1) {
    memcpy(tail, seq + (T - K1) * dm, K1 * dm * sizeof(float));
  } else {
    memmove(tail, tail + T * dm, (K1 - T) * dm * sizeof(float));
    memcpy(tail + (K1 - T) * dm, seq, T * dm * sizeof(float));
  }
}

/* q (nstreams = 1) or q, k, v and the gates (nstreams = 3) of B x T tokens x [B, T, d].
   tails[s] [B, K-1, d_m] are the conv histories (advanced here); saved[s] (may be NULL) receives a copy of
   them before they advance. */
static void titans__mem_inputs_forward(const titans__mem_dims *m, const titans_mem_config *cfg, const titans_mem_weights *w,
                                       titans__mem_bufs *bf, float *const *tails, float *const *saved, const float *x,
                                       size_t B, size_t T, int nstreams) {
  size_t bt = B * T, K1 = m->K > 0 ? m->K - 1 : 0;
  const float *proj_w[3] = {w->wq, w->wk, w->wv}, *conv_w[3] = {w->conv_q, w->conv_k, w->conv_v};
  for (int si = 0; si < nstreams; si++) {
    titans_gemm(0, 1, bt, m->dm, m->d, 1.0f, x, m->d, proj_w[si], m->d, 0.0f, bf->proj[si], m->dm);
    if (m->K > 0) {
      if (saved && saved[si]) memcpy(saved[si], tails[si], B * K1 * m->dm * sizeof(float));
      for (size_t r = 0; r < B; r++) {
        float *tail = tails[si] + r * K1 * m->dm;
        const float *in = bf->proj[si] + r * T * m->dm;
        titans_conv_forward(bf->conv[si] + r * T * m->dm, in, tail, conv_w[si], T, m->dm, m->K);
        titans__mem_tail_advance(tail, in, T, K1, m->dm);
      }
    }
    titans_silu_forward(bf->act[si], bf->conv[si], bt * m->dm);
    if (si < 2) titans_l2norm_forward(bf->qk[si], bf->rnorm[si], bf->act[si], bt * m->H, m->dh);
  }
  if (nstreams < 3) return;
  /* gates: theta = theta_max sigmoid(lr_w x + lr_b), eta = sigmoid(mom_w x + mom_b), alpha likewise */
  const float *gate_w[3] = {w->lr_w, w->mom_w, w->decay_w}, *gate_b[3] = {w->lr_b, w->mom_b, w->decay_b};
  for (int gi = 0; gi < 3; gi++) {
    float *g = bf->gates[gi];
    titans_gemm(0, 1, bt, m->H, m->d, 1.0f, x, m->d, gate_w[gi], m->d, 0.0f, g, m->H);
    for (size_t t = 0; t < bt; t++)
      for (size_t h = 0; h < m->H; h++) g[t * m->H + h] += gate_b[gi][h];
    titans_sigmoid_forward(g, g, bt * m->H);
    if (gi == 0)
      for (size_t j = 0; j < bt * m->H; j++) g[j] *= cfg->theta_max;
  }
}

/* out [B*T, d] = wo (RMSNorm(y) * SiLU(wg x)) from bf->y */
static void titans__mem_output_forward(const titans__mem_dims *m, const titans_mem_weights *w, titans__mem_bufs *bf,
                                       float *out, const float *x, size_t bt) {
  titans_rmsnorm_forward(bf->yn, bf->rstd, bf->y, w->out_norm, bt * m->H, m->dh);
  titans_gemm(0, 1, bt, m->dm, m->d, 1.0f, x, m->d, w->wg, m->d, 0.0f, bf->g, m->dm);
  titans_silu_forward(bf->gated, bf->g, bt * m->dm);
  for (size_t j = 0; j < bt * m->dm; j++) bf->gated[j] *= bf->yn[j];
  titans_gemm(0, 1, bt, m->d, m->dm, 1.0f, bf->gated, m->dm, w->wo, m->dm, 0.0f, out, m->d);
}

/* ---- forward ---------------------------------------------------------------------------------- */

/* Allocates the call's buffers: in ctx (training) or the state's scratch; plus per-thread work. */
static int titans__mem_prepare(const titans__mem_dims *m, titans_mem_state *st, titans_mem_ctx *ctx, size_t T,
                               titans__mem_bufs *bf, float **work, size_t *work_floats, int backward) {
  size_t bt, nbuf, nwork, total;
  int nth = titans_threads();
  if (!titans_size_mul(st->batch, T, &bt) || bt > ((size_t)1 << 40) / (m->dm + 1))
    return titans__error(st->error, TITANS_ERR_NOMEM, "memory: %zu x %zu tokens is too many", st->batch, T);
  nbuf = titans__mem_bufs_carve(bf, NULL, m, bt);
  *work_floats = titans__mem_work_carve(NULL, NULL, m, backward);
  nwork = *work_floats * (size_t)nth;
  if (!titans_size_add(nwork, ctx ? 0 : nbuf, &total))
    return titans__error(st->error, TITANS_ERR_NOMEM, "memory: size overflow");
  if (!titans__reserve(&st->scratch, &st->scratch_size, total))
    return titans__error(st->error, TITANS_ERR_NOMEM, "memory: cannot allocate %zu floats of work space", total);
  *work = st->scratch;
  if (!ctx) titans__mem_bufs_carve(bf, st->scratch + nwork, m, bt);
  return TITANS_OK;
}

/* Sizes a ctx for B x T tokens and carves its buffers. */
static int titans__mem_ctx_reserve(titans_mem_ctx *ctx, const titans__mem_dims *m, size_t B, size_t T,
                                   titans__mem_bufs *bf, char *err) {
  size_t bt = B * T, nchunks = (T + m->b - 1) / m->b, nbuf = titans__mem_bufs_carve(bf, NULL, m, bt);
  size_t K1 = m->K > 0 ? m->K - 1 : 0;
  size_t states = B * m->H * (nchunks + 1) * 2 * m->head_size;
  size_t extra = 3 * 4 * B * K1 * m->dm + 2 * (B * m->H * 2 * m->head_size);
  size_t bigger = states + extra;
  if (!titans__reserve(&ctx->proj, &ctx->cap_bt, nbuf) || !titans__reserve(&ctx->states, &ctx->cap_states, bigger))
    return titans__error(err, TITANS_ERR_NOMEM, "memory: cannot allocate the training context (%zu + %zu floats)",
                         nbuf, bigger);
  titans__mem_bufs_carve(bf, ctx->proj, m, bt);
  ctx->conv = bf->conv[0];
  ctx->act = bf->act[0];
  ctx->qk = bf->qk[0];
  ctx->rnorm = bf->rnorm[0];
  ctx->gates = bf->gates[0];
  ctx->y = bf->y;
  ctx->yn = bf->yn;
  ctx->g = bf->g;
  ctx->gated = bf->gated;
  ctx->rstd = bf->rstd;
  ctx->tails = ctx->states + states;
  ctx->dstate_final = ctx->tails + 4 * B * K1 * m->dm;
  ctx->dstate_init = ctx->dstate_final + B * m->H * 2 * m->head_size;
  ctx->dtails_final = ctx->dstate_init + B * m->H * 2 * m->head_size;
  ctx->dtails_init = ctx->dtails_final + 4 * B * K1 * m->dm;
  memset(ctx->dstate_final, 0, (2 * B * m->H * 2 * m->head_size + 8 * B * K1 * m->dm) * sizeof(float));
  ctx->batch = B;
  ctx->T = T;
  ctx->nchunks = nchunks;
  return TITANS_OK;
}

/* The recurrence of one (row, head) over T tokens from the state's position; saves chunk-start states
   into states [nchunks + 1, 2, head_size] when not NULL. */
static void titans__mem_recur_one(const titans__mem_dims *m, int residual, titans__mem_bufs *bf, float *wchunk,
                                  float *w, float *schunk, float *s, float *states, long long position, size_t r,
                                  size_t h, size_t T, titans__mem_work *wk) {
  size_t ld = m->dm, base = r * T * ld + h * m->dh, gbase = r * T * m->H + h, hs = m->head_size, c = 0;
  for (size_t t = 0; t < T; c++) {
    size_t off = (size_t)((unsigned long long)(position + (long long)t) % m->b), len = m->b - off;
    if (len > T - t) len = T - t;
    if (off == 0) {
      memcpy(wchunk, w, hs * sizeof(float));
      memcpy(schunk, s, hs * sizeof(float));
    }
    if (states) {
      memcpy(states + c * 2 * hs, w, hs * sizeof(float));
      memcpy(states + c * 2 * hs + hs, s, hs * sizeof(float));
    }
    titans__mem_piece_forward(m, residual, bf->y + base + t * ld, bf->qk[0] + base + t * ld, bf->qk[1] + base + t * ld,
                              bf->act[2] + base + t * ld, ld, bf->gates[0] + gbase + t * m->H,
                              bf->gates[1] + gbase + t * m->H, bf->gates[2] + gbase + t * m->H, m->H, wchunk, w, s,
                              w, s, len, wk);
    t += len;
  }
  if (states) {
    memcpy(states + c * 2 * hs, w, hs * sizeof(float));
    memcpy(states + c * 2 * hs + hs, s, hs * sizeof(float));
  }
}

TITANSDEF int titans_mem_forward(const titans_mem_config *cfg, const titans_mem_weights *w, titans_mem_state *st,
                                 float *out, const float *x, size_t T, titans_mem_ctx *ctx) {
  if (memcmp(cfg, &st->cfg, sizeof *cfg) != 0)
    return titans__error(st->error, TITANS_ERR_ARG, "memory forward: the state was made for another configuration");
  if (T == 0) return TITANS_OK;
  titans__mem_dims m = titans__mem_get_dims(cfg);
  if (ctx && st->position % (long long)m.b != 0)
    return titans__error(st->error, TITANS_ERR_STATE,
                         "memory forward: training calls must start at a chunk boundary (position %lld, chunk %zu)",
                         st->position, m.b);
  titans__mem_bufs bf;
  float *work;
  size_t work_floats, B = st->batch, hs = m.head_size;
  int rc = titans__mem_prepare(&m, st, ctx, T, &bf, &work, &work_floats, 0);
  if (rc) return rc;
  if (ctx) {
    rc = titans__mem_ctx_reserve(ctx, &m, B, T, &bf, st->error);
    if (rc) return rc;
    ctx->start_position = st->position;
    ctx->retrieval = 0;
  }
  size_t K1 = m.K > 0 ? m.K - 1 : 0, tsz = B * K1 * m.dm;
  float *tails[3] = {st->tail_q, st->tail_k, st->tail_v};
  float *saved[3] = {ctx ? ctx->tails : NULL, ctx ? ctx->tails + tsz : NULL, ctx ? ctx->tails + 2 * tsz : NULL};
  titans__mem_inputs_forward(&m, cfg, w, &bf, tails, saved, x, B, T, 3);

  long long tasks = (long long)(B * m.H);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (tasks > 1 && !omp_in_parallel())
#endif
  for (long long task = 0; task < tasks; task++) {
    size_t r = (size_t)task / m.H, h = (size_t)task % m.H, at = (size_t)task * hs;
    titans__mem_work wk;
    titans__mem_work_carve(&wk, work + (size_t)titans__mem_thread_id() * work_floats, &m, 0);
    float *states = ctx ? ctx->states + (size_t)task * (ctx->nchunks + 1) * 2 * hs : NULL;
    titans__mem_recur_one(&m, cfg->residual, &bf, st->w_chunk + at, st->w + at, st->s_chunk + at, st->s + at, states,
                          st->position, r, h, T, &wk);
  }
  st->position += (long long)T;
  titans__mem_output_forward(&m, w, &bf, out, x, B * T);
  return TITANS_OK;
}

/* y [n, ld] = M(q; W) for n <= b queries of one head; leaves activations in wk->aq, wk->zq. */
static void titans__mem_read_block(const titans__mem_dims *m, int residual, float *y, size_t ldy, const float *q,
                                   size_t ld, const float *w, size_t n, titans__mem_work *wk) {
  titans__copy_rows(wk->aq[0], q, n, m->dh, ld);
  for (size_t i = 0; i < m->L; i++) {
    titans_gemm(0, 1, n, m->n[i + 1], m->n[i], 1.0f, wk->aq[i], m->n[i], w + m->wofs[i], m->n[i], 0.0f, wk->zq[i],
                m->n[i + 1]);
    if (i + 1 < m->L) titans__silu_keep(wk->aq[i + 1], wk->sq[i], wk->zq[i], n * m->n[i + 1]);
  }
  for (size_t t = 0; t < n; t++)
    for (size_t j = 0; j < m->dh; j++)
      y[t * ldy + j] = wk->zq[m->L - 1][t * m->dh + j] + (residual ? wk->aq[0][t * m->dh + j] : 0.0f);
}

TITANSDEF int titans_mem_retrieve(const titans_mem_config *cfg, const titans_mem_weights *w, titans_mem_state *st,
                                  float *out, const float *x, size_t T, titans_mem_ctx *ctx) {
  if (memcmp(cfg, &st->cfg, sizeof *cfg) != 0)
    return titans__error(st->error, TITANS_ERR_ARG, "memory retrieve: the state was made for another configuration");
  if (T == 0) return TITANS_OK;
  titans__mem_dims m = titans__mem_get_dims(cfg);
  titans__mem_bufs bf;
  float *work;
  size_t work_floats, B = st->batch, hs = m.head_size;
  int rc = titans__mem_prepare(&m, st, ctx, T, &bf, &work, &work_floats, 0);
  if (rc) return rc;
  if (ctx) {
    rc = titans__mem_ctx_reserve(ctx, &m, B, T, &bf, st->error);
    if (rc) return rc;
    ctx->start_position = st->position;
    ctx->retrieval = 1;
    memcpy(ctx->states, st->w, B * m.H * hs * sizeof(float)); /* [B, H, head_size]: the weights read */
  }
  float *tails[1] = {st->tail_rq};
  size_t K1 = m.K > 0 ? m.K - 1 : 0;
  float *saved[1] = {ctx ? ctx->tails + 3 * B * K1 * m.dm : NULL};
  titans__mem_inputs_forward(&m, cfg, w, &bf, tails, saved, x, B, T, 1);
  long long tasks = (long long)(B * m.H);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (tasks > 1 && !omp_in_parallel())
#endif
  for (long long task = 0; task < tasks; task++) {
    size_t r = (size_t)task / m.H, h = (size_t)task % m.H, base = r * T * m.dm + h * m.dh;
    titans__mem_work wk;
    titans__mem_work_carve(&wk, work + (size_t)titans__mem_thread_id() * work_floats, &m, 0);
    for (size_t t = 0; t < T; t += m.b) {
      size_t n = T - t < m.b ? T - t : m.b;
      titans__mem_read_block(&m, cfg->residual, bf.y + base + t * m.dm, m.dm, bf.qk[0] + base + t * m.dm, m.dm,
                             st->w + (size_t)task * hs, n, &wk);
    }
  }
  titans__mem_output_forward(&m, w, &bf, out, x, B * T);
  return TITANS_OK;
}

/* ---- backward --------------------------------------------------------------------------------- */

/* Gradients of the layer's intermediate vectors during a backward. */
typedef struct titans__mem_grads {
  float *dgated, *dyn, *tmp, *dg, *dy; /* [B, T, d_m] */
  float *dvec[3];                      /* [B, T, d_m] d q, d k, d v (after L2Norm / SiLU) */
  float *dact, *dconv, *dproj;         /* [B, T, d_m] reused per stream */
  float *dgates[3];                    /* [B, T, H] d theta, d eta, d alpha, then of their logits */
} titans__mem_grads;

static size_t titans__mem_grads_carve(titans__mem_grads *gr, float *base, const titans__mem_dims *m, size_t bt) {
  size_t used = 0, v = bt * m->dm;
  gr->dgated = titans__take(base, &used, v);
  gr->dyn = titans__take(base, &used, v);
  gr->tmp = titans__take(base, &used, v);
  gr->dg = titans__take(base, &used, v);
  gr->dy = titans__take(base, &used, v);
  for (int i = 0; i < 3; i++) gr->dvec[i] = titans__take(base, &used, v);
  gr->dact = titans__take(base, &used, v);
  gr->dconv = titans__take(base, &used, v);
  gr->dproj = titans__take(base, &used, v);
  for (int i = 0; i < 3; i++) gr->dgates[i] = titans__take(base, &used, bt * m->H);
  return used;
}

/* out = wo (RMSNorm(y) * SiLU(g)): from dout [bt, d] writes gr->dy and accumulates d wo, d wg, d out_norm, dx. */
static void titans__mem_output_backward(const titans__mem_dims *m, const titans_mem_weights *w,
                                        const titans_mem_weights *grad, titans__mem_bufs *bf, titans__mem_grads *gr,
                                        float *dx, const float *dout, const float *x, size_t bt) {
  size_t n = bt * m->dm;
  titans_gemm(1, 0, m->d, m->dm, bt, 1.0f, dout, m->d, bf->gated, m->dm, 1.0f, grad->wo, m->dm);
  titans_gemm(0, 0, bt, m->dm, m->d, 1.0f, dout, m->d, w->wo, m->dm, 0.0f, gr->dgated, m->dm);
  for (size_t j = 0; j < n; j++) {
    float g = bf->g[j];
    gr->dyn[j] = gr->dgated[j] * g * titans__mem_sigmoid(g);
    gr->tmp[j] = gr->dgated[j] * bf->yn[j];
  }
  memset(gr->dg, 0, n * sizeof(float));
  titans_silu_backward(gr->dg, gr->tmp, bf->g, n);
  titans_gemm(1, 0, m->dm, m->d, bt, 1.0f, gr->dg, m->dm, x, m->d, 1.0f, grad->wg, m->d);
  titans_gemm(0, 0, bt, m->d, m->dm, 1.0f, gr->dg, m->dm, w->wg, m->d, 1.0f, dx, m->d);
  memset(gr->dy, 0, n * sizeof(float));
  titans_rmsnorm_backward(gr->dy, grad->out_norm, gr->dyn, bf->y, w->out_norm, bf->rstd, bt * m->H, m->dh);
}

/* Backward of titans__mem_inputs_forward from gr->dvec (and gr->dgates when nstreams = 3). */
/* The conv of one row reads concat = [tail (K-1 rows); proj (T rows)] and its final tail is the last
   K-1 rows of concat. From dfinal (gradient of the final tail) and dconv (gradient of the conv
   outputs) this adds the gradient of the initial tail into dinit and dfinal's share into dproj
   (all [rows, dm]; weight [dm, K]). */
static void titans__mem_tail_backward(float *dinit, float *dproj, const float *dfinal, const float *dconv,
                                      const float *weight, size_t T, size_t K, size_t dm) {
  size_t K1 = K - 1;
  for (size_t j = 0; j < K1; j++) {
    size_t c = T + j; /* concat index of final tail row j */
    float *dst = c >= K1 ? dproj + (c - K1) * dm : dinit + c * dm;
    titans__axpy(dst, 1.0f, dfinal + j * dm, dm);
  }
  /* output t reads concat[t + s] with tap s; concat index q < K1 is tail row q */
  for (size_t q = 0; q < K1; q++)
    for (size_t t = 0; t <= q && t < T; t++)
      for (size_t c = 0; c < dm; c++) dinit[q * dm + c] += dconv[t * dm + c] * weight[c * K + (q - t)];
}

static void titans__mem_inputs_backward(const titans__mem_dims *m, const titans_mem_config *cfg,
                                        const titans_mem_weights *w, const titans_mem_weights *grad,
                                        titans__mem_bufs *bf, titans__mem_grads *gr, const float *saved_tails,
                                        const float *dtails_final, float *dtails_init, float *dx, const float *x,
                                        size_t B, size_t T, int nstreams) {
  size_t bt = B * T, n = bt * m->dm, K1 = m->K > 0 ? m->K - 1 : 0, tsz = B * K1 * m->dm;
  const float *proj_w[3] = {w->wq, w->wk, w->wv};
  float *proj_g[3] = {grad->wq, grad->wk, grad->wv};
  const float *conv_w[3] = {w->conv_q, w->conv_k, w->conv_v};
  float *conv_g[3] = {grad->conv_q, grad->conv_k, grad->conv_v};
  for (int si = 0; si < nstreams; si++) {
    const float *dact = gr->dvec[si];
    if (si < 2) { /* q, k = L2Norm(act) */
      memset(gr->dact, 0, n * sizeof(float));
      titans_l2norm_backward(gr->dact, gr->dvec[si], bf->act[si], bf->rnorm[si], bt * m->H, m->dh);
      dact = gr->dact;
    }
    float *dconv = m->K > 0 ? gr->dconv : gr->dproj;
    memset(dconv, 0, n * sizeof(float));
    titans_silu_backward(dconv, dact, bf->conv[si], n);
    if (m->K > 0) {
      memset(gr->dproj, 0, n * sizeof(float));
      for (size_t r = 0; r < B; r++) {
        size_t o = r * T * m->dm, to = (size_t)si * tsz + r * K1 * m->dm;
        titans_conv_backward(gr->dproj + o, conv_g[si], gr->dconv + o, bf->proj[si] + o, saved_tails + to,
                             conv_w[si], T, m->dm, m->K);
        if (K1 > 0)
          titans__mem_tail_backward(dtails_init + to, gr->dproj + o, dtails_final + to, gr->dconv + o, conv_w[si], T,
                                    m->K, m->dm);
      }
    }
    titans_gemm(1, 0, m->dm, m->d, bt, 1.0f, gr->dproj, m->dm, x, m->d, 1.0f, proj_g[si], m->d);
    titans_gemm(0, 0, bt, m->d, m->dm, 1.0f, gr->dproj, m->dm, proj_w[si], m->d, 1.0f, dx, m->d);
  }
  if (nstreams < 3) return;
  const float *gate_w[3] = {w->lr_w, w->mom_w, w->decay_w};
  float *gate_gw[3] = {grad->lr_w, grad->mom_w, grad->decay_w}, *gate_gb[3] = {grad->lr_b, grad->mom_b, grad->decay_b};
  for (int gi = 0; gi < 3; gi++) {
    float *dg = gr->dgates[gi];
    const float *gv = bf->gates[gi];
    /* theta = theta_max sigmoid(z): d z = d theta * theta (1 - theta / theta_max); eta, alpha: s (1 - s) */
    float scale = gi == 0 ? 1.0f / cfg->theta_max : 1.0f;
    for (size_t j = 0; j < bt * m->H; j++) dg[j] *= gv[j] * (1.0f - gv[j] * scale);
    titans_gemm(1, 0, m->H, m->d, bt, 1.0f, dg, m->H, x, m->d, 1.0f, gate_gw[gi], m->d);
    for (size_t t = 0; t < bt; t++)
      for (size_t h = 0; h < m->H; h++) gate_gb[gi][h] += dg[t * m->H + h];
    titans_gemm(0, 0, bt, m->d, m->H, 1.0f, dg, m->H, gate_w[gi], m->d, 1.0f, dx, m->d);
  }
}

/* Backward of the recurrence of one (row, head), last chunk first. */
static void titans__mem_recur_backward_one(const titans__mem_dims *m, int residual, titans__mem_bufs *bf,
                                           titans__mem_grads *gr, const float *states, const float *dfinal,
                                           float *dinit, size_t nchunks, size_t r, size_t h, size_t T,
                                           titans__mem_work *wk) {
  size_t ld = m->dm, base = r * T * ld + h * m->dh, gbase = r * T * m->H + h, hs = m->head_size;
  memcpy(wk->dWend, dfinal, hs * sizeof(float));
  memcpy(wk->dSend, dfinal + hs, hs * sizeof(float));
  for (size_t c = nchunks; c-- > 0;) {
    size_t t = c * m->b, len = T - t < m->b ? T - t : m->b, o = base + t * ld, g = gbase + t * m->H;
    const float *wc = states + c * 2 * hs;
    titans__mem_piece_backward(m, residual, gr->dvec[0] + o, gr->dvec[1] + o, gr->dvec[2] + o, gr->dgates[0] + g,
                               gr->dgates[1] + g, gr->dgates[2] + g, gr->dy + o, bf->qk[0] + o, bf->qk[1] + o,
                               bf->act[2] + o, ld, bf->gates[0] + g, bf->gates[1] + g, bf->gates[2] + g, m->H, wc,
                               wc + hs, len, wk);
    memcpy(wk->dWend, wk->dW, hs * sizeof(float));
    memcpy(wk->dSend, wk->dS, hs * sizeof(float));
  }
  memcpy(dinit, wk->dWend, hs * sizeof(float));
  memcpy(dinit + hs, wk->dSend, hs * sizeof(float));
}

/* Backward of the reads of one (row, head) with fixed weights w: dq rows, and d W added into dW. */
static void titans__mem_read_backward_one(const titans__mem_dims *m, int residual, titans__mem_bufs *bf,
                                          titans__mem_grads *gr, const float *w, float *dW, size_t r, size_t h,
                                          size_t T, titans__mem_work *wk) {
  size_t ld = m->dm, base = r * T * ld + h * m->dh;
  for (size_t t = 0; t < T; t += m->b) {
    size_t n = T - t < m->b ? T - t : m->b, o = base + t * ld;
    titans__mem_read_block(m, residual, wk->tmp2, m->dh, bf->qk[0] + o, ld, w, n, wk);
    titans__copy_rows(wk->dz, gr->dy + o, n, m->dh, ld);
    if (residual) titans__add_rows(gr->dvec[0] + o, ld, wk->dz, n, m->dh);
    for (size_t i = m->L; i-- > 0;) {
      size_t ni = m->n[i], no = m->n[i + 1], wo = m->wofs[i];
      titans_gemm(1, 0, no, ni, n, 1.0f, wk->dz, no, wk->aq[i], ni, 1.0f, dW + wo, ni);
      titans_gemm(0, 0, n, ni, no, 1.0f, wk->dz, no, w + wo, ni, 0.0f, wk->daq, ni);
      if (i > 0)
        for (size_t j = 0; j < n * ni; j++) wk->dz[j] = wk->daq[j] * titans__silu_d1(wk->zq[i - 1][j], wk->sq[i - 1][j]);
      else
        titans__add_rows(gr->dvec[0] + o, ld, wk->daq, n, m->dh);
    }
  }
}

TITANSDEF int titans_mem_backward(const titans_mem_config *cfg, const titans_mem_weights *w, const titans_mem_weights *grad,
                                  float *dx, const float *dout, const float *x, titans_mem_ctx *ctx, int init_from_w0) {
  if (!ctx->proj || ctx->T == 0)
    return titans__error(ctx->error, TITANS_ERR_STATE, "memory backward: the context holds no forward");
  titans__mem_dims m = titans__mem_get_dims(cfg);
  size_t B = ctx->batch, T = ctx->T, bt = B * T, hs = m.head_size;
  int nth = titans_threads();
  titans__mem_bufs bf;
  titans__mem_bufs_carve(&bf, ctx->proj, &m, bt);
  titans__mem_grads gr;
  size_t ngrad = titans__mem_grads_carve(&gr, NULL, &m, bt);
  size_t work_floats = titans__mem_work_carve(NULL, NULL, &m, 1);
  float *slab = titans_alloc_floats(ngrad + work_floats * (size_t)nth);
  if (!slab) return titans__error(ctx->error, TITANS_ERR_NOMEM, "memory backward: cannot allocate work space");
  titans__mem_grads_carve(&gr, slab, &m, bt); /* zeroed by the allocation */
  float *work = slab + ngrad;

  titans__mem_output_backward(&m, w, grad, &bf, &gr, dx, dout, x, bt);
  long long tasks = (long long)(B * m.H);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (tasks > 1 && !omp_in_parallel())
#endif
  for (long long task = 0; task < tasks; task++) {
    size_t r = (size_t)task / m.H, h = (size_t)task % m.H;
    titans__mem_work wk;
    titans__mem_work_carve(&wk, work + (size_t)titans__mem_thread_id() * work_floats, &m, 1);
    const float *dfinal = ctx->dstate_final + (size_t)task * 2 * hs;
    float *dinit = ctx->dstate_init + (size_t)task * 2 * hs;
    if (ctx->retrieval) {
      /* the state does not change: d(state before) = d(state after) + what the reads add */
      memcpy(dinit, dfinal, 2 * hs * sizeof(float));
      titans__mem_read_backward_one(&m, cfg->residual, &bf, &gr, ctx->states + (size_t)task * hs, dinit, r, h, T, &wk);
    } else {
      titans__mem_recur_backward_one(&m, cfg->residual, &bf, &gr, ctx->states + (size_t)task * (ctx->nchunks + 1) * 2 * hs,
                                     dfinal, dinit, ctx->nchunks, r, h, T, &wk);
    }
  }
  if (init_from_w0) /* W at the start was w0 for every row: sum the rows in a fixed order */
    for (size_t h = 0; h < m.H; h++)
      for (size_t r = 0; r < B; r++) {
        const float *dw = ctx->dstate_init + (r * m.H + h) * 2 * hs;
        for (size_t i = 0; i < m.L; i++) {
          size_t sz = m.n[i + 1] * m.n[i];
          titans__axpy(grad->w0[i] + h * sz, 1.0f, dw + m.wofs[i], sz);
        }
      }
  size_t K1 = m.K > 0 ? m.K - 1 : 0, slot = ctx->retrieval ? 3 * B * K1 * m.dm : 0;
  memset(ctx->dtails_init, 0, 4 * B * K1 * m.dm * sizeof(float));
  titans__mem_inputs_backward(&m, cfg, w, grad, &bf, &gr, ctx->tails + slot, ctx->dtails_final + slot,
                              ctx->dtails_init + slot, dx, x, B, T, ctx->retrieval ? 1 : 3);
  titans_free(slab);
  return TITANS_OK;
}

/* ---- direct associative access ---------------------------------------------------------------- */

TITANSDEF int titans_mem_write(titans_mem_state *st, size_t row, size_t head, const float *keys, const float *values,
                               const float *theta, const float *eta, const float *alpha, size_t n) {
  titans__mem_dims m = titans__mem_get_dims(&st->cfg);
  if (row >= st->batch || head >= m.H)
    return titans__error(st->error, TITANS_ERR_ARG, "memory write: row %zu / head %zu out of range", row, head);
  if (!keys || !values || !theta) return titans__error(st->error, TITANS_ERR_ARG, "memory write: NULL input");
  size_t work_floats = titans__mem_work_carve(NULL, NULL, &m, 0), zeros_off = work_floats;
  if (!titans__reserve(&st->scratch, &st->scratch_size, work_floats + m.b))
    return titans__error(st->error, TITANS_ERR_NOMEM, "memory write: cannot allocate work space");
  titans__mem_work wk;
  titans__mem_work_carve(&wk, st->scratch, &m, 0);
  float *zeros = st->scratch + zeros_off; /* [b] gates of 0 where eta / alpha are NULL */
  memset(zeros, 0, m.b * sizeof(float));
  size_t at = (row * m.H + head) * m.head_size;
  float *w = st->w + at, *s = st->s + at, *wc = st->w_chunk + at, *sc = st->s_chunk + at;
  /* Each call starts a chunk of its own: the inner gradients of its first b pairs are taken at the
     current weights, and so on. */
  for (size_t t = 0; t < n; t += m.b) {
    size_t len = n - t < m.b ? n - t : m.b;
    memcpy(wc, w, m.head_size * sizeof(float));
    memcpy(sc, s, m.head_size * sizeof(float));
    titans__mem_piece_forward(&m, st->cfg.residual, NULL, keys + t * m.dh, keys + t * m.dh, values + t * m.dh, m.dh,
                              theta + t, eta ? eta + t : zeros, alpha ? alpha + t : zeros, 1, wc, w, s, w, s, len,
                              &wk);
  }
  memcpy(wc, w, m.head_size * sizeof(float));
  memcpy(sc, s, m.head_size * sizeof(float));
  return TITANS_OK;
}

TITANSDEF int titans_mem_read(titans_mem_state *st, size_t row, size_t head, float *out, const float *queries, size_t n) {
  titans__mem_dims m = titans__mem_get_dims(&st->cfg);
  if (row >= st->batch || head >= m.H)
    return titans__error(st->error, TITANS_ERR_ARG, "memory read: row %zu / head %zu out of range", row, head);
  size_t work_floats = titans__mem_work_carve(NULL, NULL, &m, 0);
  if (!titans__reserve(&st->scratch, &st->scratch_size, work_floats))
    return titans__error(st->error, TITANS_ERR_NOMEM, "memory read: cannot allocate work space");
  titans__mem_work wk;
  titans__mem_work_carve(&wk, st->scratch, &m, 0);
  const float *w = st->w + (row * m.H + head) * m.head_size;
  for (size_t t = 0; t < n; t += m.b) {
    size_t len = n - t < m.b ? n - t : m.b;
    titans__mem_read_block(&m, st->cfg.residual, out + t * m.dh, m.dh, queries + t * m.dh, m.dh, w, len, &wk);
  }
  return TITANS_OK;
}
