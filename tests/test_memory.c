/* Tests of the neural long-term memory layer (docs/model.md section 1, properties 7.1 - 7.5):
   - the chunked parallel form equals a plain token-by-token recurrence (written here in double, from
     docs/model.md 1.4 directly) for several chunk sizes, depths, residual and conv settings;
   - every parameter's gradient and the input gradient equal central finite differences of that double
     reference;
   - outputs, final state and gradients equal golden values of an independent PyTorch reference
     (tests/ref/memory_ref.py, autograd through the literal recurrence);
   - streaming in any split equals one call; causality; thread-count independence; state save/load;
     T = 65536 tokens with the default gates stay finite. */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "harness.h"
#include "golden.h"

/* ---- a plain double-precision reference of docs/model.md 1.3 - 1.5 -------------------------------- */

typedef struct ref_model {
  titans_mem_config cfg;
  titans__mem_dims m;
  titans_param list[32];
  size_t nparams, total;
  double *p; /* [total] parameters in the library's slab layout */
} ref_model;

static const double *ref_param(const ref_model *rm, const char *name) {
  for (size_t i = 0; i < rm->nparams; i++)
    if (strcmp(rm->list[i].name, name) == 0) return rm->p + rm->list[i].offset;
  return NULL;
}

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_silu(double x) { return x * ref_sigmoid(x); }

/* M(z; W) of one head: W holds the layers in the state's layout. act[i] [n_i] are the layer inputs,
   z[i] [n_{i+1}] the pre-activations (sized by the caller, max width 64). */
static void ref_mlp(const titans__mem_dims *m, int residual, const double *W, const double *in, double *out,
                    double act[][64], double z[][64]) {
  for (size_t j = 0; j < m->n[0]; j++) act[0][j] = in[j];
  for (size_t i = 0; i < m->L; i++) {
    const double *Wi = W + m->wofs[i];
    for (size_t o = 0; o < m->n[i + 1]; o++) {
      double s = 0;
      for (size_t j = 0; j < m->n[i]; j++) s += Wi[o * m->n[i] + j] * act[i][j];
      z[i][o] = s;
      if (i + 1 < m->L) act[i + 1][o] = ref_silu(s);
    }
  }
  for (size_t j = 0; j < m->dh; j++) out[j] = z[m->L - 1][j] + (residual ? in[j] : 0.0);
}

/* u = grad_W ||M(k; W) - v||^2 in the state's layout */
static void ref_inner_grad(const titans__mem_dims *m, int residual, const double *W, const double *k, const double *v,
                           double *u) {
  double act[TITANS_MEM_MAX_DEPTH + 1][64], z[TITANS_MEM_MAX_DEPTH][64], pred[64], delta[64], prev[64];
  ref_mlp(m, residual, W, k, pred, act, z);
  for (size_t j = 0; j < m->dh; j++) delta[j] = 2.0 * (pred[j] - v[j]);
  for (size_t i = m->L; i-- > 0;) {
    const double *Wi = W + m->wofs[i];
    double *ui = u + m->wofs[i];
    for (size_t o = 0; o < m->n[i + 1]; o++)
      for (size_t j = 0; j < m->n[i]; j++) ui[o * m->n[i] + j] = delta[o] * act[i][j];
    if (i == 0) break;
    for (size_t j = 0; j < m->n[i]; j++) {
      double s = 0;
      for (size_t o = 0; o < m->n[i + 1]; o++) s += Wi[o * m->n[i] + j] * delta[o];
      double sg = ref_sigmoid(z[i - 1][j]);
      prev[j] = s * sg * (1.0 + z[i - 1][j] * (1.0 - sg));
    }
    memcpy(delta, prev, m->n[i] * sizeof(double));
  }
}

/* out [B, T, d]; final W, S [B, H, head_size] (may be NULL). */
/* The per-token inputs of row xr [T, d] (docs/model.md 1.3): vec [3, T, d_m] the q, k, v vectors (q and k
   L2-normalised per head), gates [3, T, H] theta, eta, alpha (eta = 0 with no_momentum); proj [3, T, d_m]
   is work space. */
static void ref_token_inputs(const ref_model *rm, const double *xr, size_t T, double *proj, double *vec,
                             double *gates) {
  const titans__mem_dims *m = &rm->m;
  size_t d = m->d, dm = m->dm, H = m->H, dh = m->dh, K = m->K;
  const char *pn[3] = {"wq", "wk", "wv"}, *cn[3] = {"conv_q", "conv_k", "conv_v"};
  for (int s = 0; s < 3; s++) {
    const double *Wp = ref_param(rm, pn[s]);
    for (size_t t = 0; t < T; t++)
      for (size_t j = 0; j < dm; j++) {
        double acc = 0;
        for (size_t i = 0; i < d; i++) acc += Wp[j * d + i] * xr[t * d + i];
        proj[(s * T + t) * dm + j] = acc;
      }
    for (size_t t = 0; t < T; t++) {
      double *o = vec + (s * T + t) * dm;
      for (size_t j = 0; j < dm; j++) {
        double c = proj[(s * T + t) * dm + j];
        if (K > 0) {
          const double *cw = ref_param(rm, cn[s]);
          c = 0;
          for (size_t q = 0; q < K; q++) {
            long tau = (long)t - (long)K + 1 + (long)q;
            if (tau >= 0) c += cw[j * K + q] * proj[(s * T + (size_t)tau) * dm + j];
          }
        }
        o[j] = s < 2 && rm->cfg.qk_linear ? c : ref_silu(c); /* qk_linear: q and k skip the SiLU */
      }
      if (s < 2)
        for (size_t h = 0; h < H; h++) {
          double ss = 0;
          for (size_t j = 0; j < dh; j++) ss += o[h * dh + j] * o[h * dh + j];
          double inv = 1.0 / sqrt(ss + 1e-6);
          for (size_t j = 0; j < dh; j++) o[h * dh + j] *= inv;
        }
    }
  }
  const char *gw[3] = {"lr_w", "mom_w", "decay_w"}, *gb[3] = {"lr_b", "mom_b", "decay_b"};
  for (int g = 0; g < 3; g++)
    for (size_t t = 0; t < T; t++)
      for (size_t h = 0; h < H; h++) {
        double acc = ref_param(rm, gb[g])[h];
        for (size_t i = 0; i < d; i++) acc += ref_param(rm, gw[g])[h * d + i] * xr[t * d + i];
        if (g == 0 && rm->cfg.gate_key) /* the write gate reads the key too: + lr_k[h] . k_t^h */
          for (size_t j = 0; j < dh; j++) acc += ref_param(rm, "lr_k")[h * dh + j] * vec[(1 * T + t) * dm + h * dh + j];
        gates[(g * T + t) * H + h] = (g == 0 ? rm->cfg.theta_max : 1.0) * ref_sigmoid(acc);
        if (g == 1 && rm->cfg.no_momentum) gates[(g * T + t) * H + h] = 0.0;
        if (g == 2 && rm->cfg.no_forget) gates[(g * T + t) * H + h] = 0.0;
      }
}

/* inv [n, n] := a^-1 by Gauss-Jordan with partial pivoting (a [n, n] is overwritten; n <= 64) */
static void ref_invert(double *a, double *inv, size_t n) {
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++) inv[i * n + j] = i == j;
  for (size_t c = 0; c < n; c++) {
    size_t piv = c;
    for (size_t i = c + 1; i < n; i++)
      if (fabs(a[i * n + c]) > fabs(a[piv * n + c])) piv = i;
    for (size_t j = 0; j < n; j++) {
      double t = a[c * n + j]; a[c * n + j] = a[piv * n + j]; a[piv * n + j] = t;
      t = inv[c * n + j]; inv[c * n + j] = inv[piv * n + j]; inv[piv * n + j] = t;
    }
    double d = a[c * n + c];
    for (size_t j = 0; j < n; j++) a[c * n + j] /= d, inv[c * n + j] /= d;
    for (size_t i = 0; i < n; i++) {
      if (i == c) continue;
      double f = a[i * n + c];
      for (size_t j = 0; j < n; j++) a[i * n + j] -= f * a[c * n + j], inv[i * n + j] -= f * inv[c * n + j];
    }
  }
}

/* least_squares (docs/model.md 1.11), straight from its definition, with no recursion: after token t,
   W = (W_0 + sum_{s<=t} theta_s v_s k_s^T) A^-1 and S = G = I - A^-1, A = I + sum_{s<=t} theta_s k_s k_s^T.
   gram [dh, dh] (A so far) and cross [dh, dh] (W_0 + the sum) carry the sums; W, S [dh, dh] are written;
   work [2, dh, dh]. With forgetting (alpha > 0) the sums so far are first replaced by those of the fit W
   with the decayed confidence, by inverses rather than the library's rank-one updates:
   A = (a A^-1 + (1 - a) I)^-1 with a = 1 - alpha, and cross = W A (the normal equations' W again). */
static void ref_least_squares_token(size_t dh, double *gram, double *cross, const double *k, const double *v,
                                    double theta, double alpha, double *W, double *S, double *work) {
  double *a = work, *inv = work + dh * dh;
  if (alpha != 0.0) {
    memcpy(a, gram, dh * dh * sizeof(double));
    ref_invert(a, inv, dh); /* inv = P */
    for (size_t j = 0; j < dh * dh; j++) inv[j] = (1.0 - alpha) * inv[j] + alpha * (j % (dh + 1) == 0);
    memcpy(a, inv, dh * dh * sizeof(double));
    ref_invert(a, gram, dh);
    for (size_t i = 0; i < dh; i++)
      for (size_t j = 0; j < dh; j++) {
        double acc = 0;
        for (size_t l = 0; l < dh; l++) acc += W[i * dh + l] * gram[l * dh + j];
        cross[i * dh + j] = acc;
      }
  }
  for (size_t i = 0; i < dh; i++)
    for (size_t j = 0; j < dh; j++) {
      gram[i * dh + j] += theta * k[i] * k[j];
      cross[i * dh + j] += theta * v[i] * k[j];
    }
  memcpy(a, gram, dh * dh * sizeof(double));
  ref_invert(a, inv, dh);
  for (size_t i = 0; i < dh; i++)
    for (size_t j = 0; j < dh; j++) {
      double acc = 0;
      for (size_t l = 0; l < dh; l++) acc += cross[i * dh + l] * inv[l * dh + j];
      W[i * dh + j] = acc;
      S[i * dh + j] = (i == j) - inv[i * dh + j];
    }
}

static void ref_forward(const ref_model *rm, const double *x, size_t B, size_t T, double *out, double *Wfin,
                        double *Sfin) {
  const titans__mem_dims *m = &rm->m;
  size_t d = m->d, dm = m->dm, H = m->H, dh = m->dh, hs = m->head_size;
  double *proj = calloc(3 * T * dm, sizeof(double)), *vec = calloc(3 * T * dm, sizeof(double));
  double *gates = calloc(3 * T * H, sizeof(double)), *y = calloc(T * dm, sizeof(double));
  double *W = calloc(hs, sizeof(double)), *S = calloc(hs, sizeof(double)), *Wc = calloc(hs, sizeof(double));
  double *u = calloc(hs, sizeof(double));
  double *gram = calloc(dh * dh, sizeof(double)), *cross = calloc(dh * dh, sizeof(double)); /* least_squares */
  double *lswork = calloc(2 * dh * dh, sizeof(double));
  for (size_t r = 0; r < B; r++) {
    const double *xr = x + r * T * d;
    ref_token_inputs(rm, xr, T, proj, vec, gates);
    for (size_t h = 0; h < H; h++) {
      for (size_t i = 0; i < m->L; i++) {
        size_t sz = m->n[i + 1] * m->n[i];
        const double *w0 = ref_param(rm, i == 0 ? "w0.0" : i == 1 ? "w0.1" : "w0.2") + h * sz;
        memcpy(W + m->wofs[i], w0, sz * sizeof(double));
      }
      memset(S, 0, hs * sizeof(double));
      if (rm->cfg.least_squares) { /* A = I, cross = W_0 */
        memcpy(cross, W, hs * sizeof(double));
        for (size_t j = 0; j < hs; j++) gram[j] = j % (dh + 1) == 0;
      }
      for (size_t t = 0; t < T; t++) {
        /* W^(c): the chunk's start; with per_token_grad the weights just before the token */
        if (t % m->b == 0 || rm->cfg.per_token_grad) memcpy(Wc, W, hs * sizeof(double));
        const double *q = vec + (0 * T + t) * dm + h * dh, *k = vec + (1 * T + t) * dm + h * dh;
        const double *v = vec + (2 * T + t) * dm + h * dh;
        double th = gates[(0 * T + t) * H + h], et = gates[(1 * T + t) * H + h], al = gates[(2 * T + t) * H + h];
        double act[TITANS_MEM_MAX_DEPTH + 1][64], z[TITANS_MEM_MAX_DEPTH][64];
        if (rm->cfg.least_squares) {
          ref_least_squares_token(dh, gram, cross, k, v, th, al, W, S, lswork);
          ref_mlp(m, 0, W, q, y + t * dm + h * dh, act, z);
          continue;
        }
        ref_inner_grad(m, rm->cfg.residual, Wc, k, v, u);
        if (rm->cfg.surprise_bound > 0) { /* theta_t u_t -> theta_t u_t / sqrt(1 + |u_t|^2 / tau^2) */
          double usq = 0, tau = rm->cfg.surprise_bound;
          for (size_t j = 0; j < hs; j++) usq += u[j] * u[j];
          th /= sqrt(1.0 + usq / (tau * tau));
        }
        for (size_t j = 0; j < hs; j++) {
          S[j] = et * S[j] - th * u[j];
          W[j] = (1.0 - al) * W[j] + S[j];
        }
        ref_mlp(m, rm->cfg.residual, W, q, y + t * dm + h * dh, act, z);
      }
      if (Wfin) memcpy(Wfin + (r * H + h) * hs, W, hs * sizeof(double));
      if (Sfin) memcpy(Sfin + (r * H + h) * hs, S, hs * sizeof(double));
    }
    const double *gain = ref_param(rm, "out_norm"), *wg = ref_param(rm, "wg"), *wo = ref_param(rm, "wo");
    for (size_t t = 0; t < T; t++) {
      double gated[256];
      for (size_t h = 0; h < H; h++) {
        double ss = 0;
        for (size_t j = 0; j < dh; j++) ss += y[t * dm + h * dh + j] * y[t * dm + h * dh + j];
        double inv = 1.0 / sqrt(ss / (double)dh + 1e-6);
        for (size_t j = 0; j < dh; j++) gated[h * dh + j] = y[t * dm + h * dh + j] * inv * gain[j];
      }
      for (size_t j = 0; j < dm; j++) {
        double acc = 0;
        for (size_t i = 0; i < d; i++) acc += wg[j * d + i] * xr[t * d + i];
        gated[j] *= ref_silu(acc);
      }
      for (size_t o = 0; o < d; o++) {
        double acc = 0;
        for (size_t j = 0; j < dm; j++) acc += wo[o * dm + j] * gated[j];
        out[(r * T + t) * d + o] = acc;
      }
    }
  }
  free(proj); free(vec); free(gates); free(y); free(W); free(S); free(Wc); free(u);
  free(gram); free(cross); free(lswork);
}

/* ---- fixtures --------------------------------------------------------------------------------- */

typedef struct fixture {
  titans_mem_config cfg;
  size_t B, T, total;
  float *slab, *grad_slab; /* [total] */
  titans_mem_weights w, g;
  float *x, *dout;         /* [B, T, d] */
  ref_model rm;
} fixture;

static titans_mem_config make_cfg(int d, int H, int dh, int L, int e, int b, int K, int res, float theta_max) {
  titans_mem_config c = titans_mem_config_default(d); /* every field set, key_ngram 0 among them */
  c.heads = H; c.head_dim = dh; c.depth = L; c.hidden_mult = e; c.chunk = b; c.conv_width = K;
  c.residual = res; c.theta_max = theta_max; c.surprise_bound = 0.0f;
  return c;
}

/* cfg whose write gate reads the key (gate_key, docs/model.md 1.3) */
static titans_mem_config keyed_gate(titans_mem_config c) {
  c.gate_key = 1;
  return c;
}

/* cfg whose queries and keys skip the SiLU (qk_linear, docs/model.md 1.3) */
static titans_mem_config linear_qk(titans_mem_config c) {
  c.qk_linear = 1;
  return c;
}

/* cfg whose tokens' gradients are taken at the weights before each (per_token_grad, docs/model.md 1.10) */
static titans_mem_config per_token(titans_mem_config c) {
  c.per_token_grad = 1;
  return c;
}

/* cfg of the least-squares memory (least_squares, docs/model.md 1.11) from a depth-1 cfg */
static titans_mem_config least_sq(titans_mem_config c) {
  titans_mem_config_use_least_squares(&c);
  return c;
}

/* cfg of a least-squares memory whose fit's confidence decays by alpha_t (no_forget 0, docs/model.md 1.11) */
static titans_mem_config least_sq_forgetting(titans_mem_config c) {
  c = least_sq(c);
  c.no_forget = 0;
  return c;
}

/* cfg with the surprise bound tau (docs/model.md 1.4) */
static titans_mem_config bounded(titans_mem_config c, float tau) {
  c.surprise_bound = tau;
  return c;
}

/* Random parameters in a range where the gates are not saturated and the memory moves. */
static void fixture_init(fixture *f, titans_mem_config cfg, size_t B, size_t T, uint64_t seed) {
  memset(f, 0, sizeof *f);
  f->cfg = cfg; f->B = B; f->T = T;
  f->total = titans_mem_param_count(&cfg);
  f->slab = titans_alloc_floats(f->total);
  f->grad_slab = titans_alloc_floats(f->total);
  titans_mem_weights_bind(&f->w, &cfg, f->slab);
  titans_mem_weights_bind(&f->g, &cfg, f->grad_slab);
  titans_rng rng;
  titans_rng_seed(&rng, seed);
  f->rm.cfg = cfg;
  f->rm.m = titans__mem_get_dims(&cfg);
  f->rm.nparams = titans_mem_param_list(f->rm.list, 32, &cfg, "", 0);
  for (size_t i = 0; i < f->rm.nparams; i++) {
    titans_param *p = &f->rm.list[i];
    float *dst = f->slab + p->offset;
    for (size_t j = 0; j < p->size; j++) {
      float z = titans_rng_normal(&rng);
      if (strncmp(p->name, "w0.", 3) == 0) dst[j] = z / sqrtf((float)p->shape[2]);
      else if (strcmp(p->name, "out_norm") == 0) dst[j] = 1.0f + 0.1f * z;
      else if (strncmp(p->name, "conv_", 5) == 0)
        dst[j] = 0.3f * z + ((j % p->shape[1]) == p->shape[1] - 1 ? 1.0f : 0.0f);
      else if (strcmp(p->name, "decay_b") == 0) dst[j] = -2.0f + 0.5f * z;
      else if (p->kind == TITANS_PARAM_BIAS) dst[j] = 0.5f * z;
      else dst[j] = 0.4f * z;
    }
  }
  f->rm.total = f->total;
  f->rm.p = calloc(f->total, sizeof(double));
  for (size_t i = 0; i < f->total; i++) f->rm.p[i] = f->slab[i];
  f->x = titans_alloc_floats(B * T * (size_t)cfg.d);
  f->dout = titans_alloc_floats(B * T * (size_t)cfg.d);
  for (size_t i = 0; i < B * T * (size_t)cfg.d; i++) {
    f->x[i] = titans_rng_normal(&rng);
    f->dout[i] = titans_rng_normal(&rng);
  }
}

static void fixture_free(fixture *f) {
  titans_free(f->slab); titans_free(f->grad_slab); titans_free(f->x); titans_free(f->dout); free(f->rm.p);
}

static double *to_double(const float *a, size_t n) {
  double *o = calloc(n ? n : 1, sizeof(double)); /* calloc: GCC 12 warned of a read of malloc's memory */
  for (size_t i = 0; i < n; i++) o[i] = a[i];
  return o;
}

/* max |a - b| / max(|b|) over n: error relative to the largest reference value */
static double rel_to_max(const float *a, const double *b, size_t n) {
  double mx = 1e-12, md = 0;
  for (size_t i = 0; i < n; i++) if (fabs(b[i]) > mx) mx = fabs(b[i]);
  for (size_t i = 0; i < n; i++) {
    double dd = fabs((double)a[i] - b[i]);
    if (dd != dd) return INFINITY;
    if (dd > md) md = dd;
  }
  return md / mx;
}

static void cfg_label(char *buf, size_t n, const titans_mem_config *c, size_t T) {
  snprintf(buf, n, "L=%d b=%d K=%d res=%d tau=%g H=%d dh=%d T=%zu%s%s%s%s%s%s", c->depth, c->chunk, c->conv_width,
           c->residual, (double)c->surprise_bound, c->heads, c->head_dim, T, c->gate_key ? " gate_key" : "",
           c->no_momentum ? " no_momentum" : "", c->no_forget ? " no_forget" : "",
           c->per_token_grad ? " per_token_grad" : "", c->qk_linear ? " qk_linear" : "",
           c->least_squares ? " least_squares" : "");
}

/* ---- 7.1: chunked == recurrence --------------------------------------------------------------- */

static void test_chunked_vs_recurrence(titans_mem_config cfg, size_t B, size_t T) {
  fixture f;
  fixture_init(&f, cfg, B, T, 1234 + (uint64_t)cfg.chunk * 7 + (uint64_t)cfg.depth);
  titans_mem_state st;
  titans_mem_state_init(&st, &cfg, B);
  titans_mem_state_reset(&st, &f.w);
  size_t n = B * T * (size_t)cfg.d, hsz = B * (size_t)cfg.heads * f.rm.m.head_size;
  float *out = titans_alloc_floats(n);
  int rc = titans_mem_forward(&cfg, &f.w, &st, out, f.x, T, NULL);
  double *x = to_double(f.x, n), *ro = calloc(n, sizeof(double)), *rw = calloc(hsz, sizeof(double));
  double *rs = calloc(hsz, sizeof(double));
  ref_forward(&f.rm, x, B, T, ro, rw, rs);
  char label[128], what[256];
  cfg_label(label, sizeof label, &cfg, T);
  int finite = 1;
  for (size_t i = 0; i < n; i++) finite &= isfinite(ro[i]) != 0;
  th_check(finite, "the double reference stays finite (%s)", label);
  snprintf(what, sizeof what, "chunked vs recurrence, outputs (%s) rc=%d", label, rc);
  th_close(what, rc ? INFINITY : rel_to_max(out, ro, n), 2e-5);
  snprintf(what, sizeof what, "chunked vs recurrence, final W and S (%s)", label);
  th_close(what, fmax(rel_to_max(st.w, rw, hsz), rel_to_max(st.s, rs, hsz)), 2e-5);
  free(x); free(ro); free(rw); free(rs);
  titans_free(out);
  titans_mem_state_free(&st);
  fixture_free(&f);
}

/* The bound is exercised: with tau = cfg's the outputs differ from the unbounded layer's (so the
   comparisons above test it), and with a tau far above every |u_t| they equal them. */
static void test_bound_acts(titans_mem_config cfg) {
  size_t B = 2, T = 23;
  fixture f;
  fixture_init(&f, cfg, B, T, 77);
  size_t n = B * T * (size_t)cfg.d;
  float *o[3];
  float taus[3] = {cfg.surprise_bound, 0.0f, 1e9f};
  for (int i = 0; i < 3; i++) {
    titans_mem_config c = bounded(cfg, taus[i]);
    titans_mem_state st;
    titans_mem_state_init(&st, &c, B);
    titans_mem_state_reset(&st, &f.w);
    o[i] = titans_alloc_floats(n);
    titans_mem_forward(&c, &f.w, &st, o[i], f.x, T, NULL);
    titans_mem_state_free(&st);
  }
  double diff = 0, same = 0, mx = 0;
  for (size_t j = 0; j < n; j++) {
    diff = fmax(diff, fabs((double)o[0][j] - o[1][j]));
    same = fmax(same, fabs((double)o[2][j] - o[1][j]));
    mx = fmax(mx, fabs((double)o[1][j]));
  }
  th_check(diff > 0.05 * mx, "surprise bound tau=%g changes the outputs by %.3g of their max %.3g",
           (double)cfg.surprise_bound, diff / mx, mx);
  th_close("surprise bound tau=1e9 vs none (relative to the max output)", same / mx, 1e-6);
  for (int i = 0; i < 3; i++) titans_free(o[i]);
  fixture_free(&f);
}

/* ---- 7.4: gradients against central differences of the double reference ---------------------- */

/* sum over the B rows, T tokens and H heads of theta_t / theta_max (in_log: of log(theta_t / theta_max)):
   what a cost on writing weighs */
static double ref_write_sum(const ref_model *rm, const double *x, size_t B, size_t T, int in_log,
                            const unsigned char *skip) {
  const titans__mem_dims *m = &rm->m;
  double *proj = calloc(3 * T * m->dm, sizeof(double)), *vec = calloc(3 * T * m->dm, sizeof(double)),
         *gates = calloc(3 * T * m->H, sizeof(double)), sum = 0;
  for (size_t b = 0; b < B; b++) {
    ref_token_inputs(rm, x + b * T * m->d, T, proj, vec, gates);
    for (size_t j = 0; j < T * m->H; j++) { /* gates[0 .. T H): theta, [T, H] */
      if (skip && skip[b * T + j / m->H]) continue; /* a position the costs leave alone */
      double frac = gates[j] / rm->cfg.theta_max;
      sum += in_log ? log(frac) : frac;
    }
  }
  free(proj); free(vec); free(gates);
  return sum;
}

/* sum(out . dout) + write_cost * ref_write_sum + write_cost_log * its log form, both over the positions
   skip [B, T] (NULL: all) leaves: the loss whose gradient the backward returns when the ctx's write_cost,
   write_cost_log and write_cost_skip are set */
static double ref_loss(const ref_model *rm, const double *x, const float *dout, size_t B, size_t T,
                       double write_cost, double write_cost_log, const unsigned char *skip) {
  size_t n = B * T * rm->m.d;
  double *o = calloc(n, sizeof(double)), L = 0;
  ref_forward(rm, x, B, T, o, NULL, NULL);
  for (size_t i = 0; i < n; i++) L += o[i] * dout[i];
  free(o);
  if (write_cost != 0) L += write_cost * ref_write_sum(rm, x, B, T, 0, skip);
  if (write_cost_log != 0) L += write_cost_log * ref_write_sum(rm, x, B, T, 1, skip);
  return L;
}

/* write_cost, write_cost_log, skip [B, T] or NULL: the ctx's (a caller's costs on writing, added to the
   loss the backward differentiates, and the positions they leave alone) */
static void test_gradients_with_cost(titans_mem_config cfg, size_t B, size_t T, float write_cost,
                                     float write_cost_log, const unsigned char *skip) {
  fixture f;
  fixture_init(&f, cfg, B, T, 99 + (uint64_t)cfg.depth);
  size_t n = B * T * (size_t)cfg.d;
  titans_mem_state st;
  titans_mem_ctx ctx;
  titans_mem_state_init(&st, &cfg, B);
  titans_mem_ctx_init(&ctx);
  titans_mem_state_reset(&st, &f.w);
  float *out = titans_alloc_floats(n), *dx = titans_alloc_floats(n);
  int rc = titans_mem_forward(&cfg, &f.w, &st, out, f.x, T, &ctx);
  ctx.write_cost = write_cost;
  ctx.write_cost_log = write_cost_log;
  ctx.write_cost_skip = skip;
  if (!rc) rc = titans_mem_backward(&cfg, &f.w, &f.g, dx, f.dout, f.x, &ctx, 1);
  char label[160], what[300];
  cfg_label(label, sizeof label - 32, &cfg, T);
  if (write_cost != 0) snprintf(label + strlen(label), sizeof label - strlen(label), " write_cost=%g", (double)write_cost);
  if (write_cost_log != 0)
    snprintf(label + strlen(label), sizeof label - strlen(label), " log cost=%g", (double)write_cost_log);
  if (skip) snprintf(label + strlen(label), sizeof label - strlen(label), " skipping some positions");
  double *x = to_double(f.x, n), h = 1e-5, worst = 0;
  const char *worst_name = "";
  for (size_t pi = 0; pi < f.rm.nparams; pi++) {
    titans_param *p = &f.rm.list[pi];
    double *fd = calloc(p->size, sizeof(double));
    for (size_t j = 0; j < p->size; j++) {
      double *v = f.rm.p + p->offset + j, keep = *v;
      *v = keep + h;
      double lp = ref_loss(&f.rm, x, f.dout, B, T, write_cost, write_cost_log, skip);
      *v = keep - h;
      double lm = ref_loss(&f.rm, x, f.dout, B, T, write_cost, write_cost_log, skip);
      *v = keep;
      fd[j] = (lp - lm) / (2 * h);
    }
    double e = rel_to_max(f.grad_slab + p->offset, fd, p->size);
    snprintf(what, sizeof what, "gradient of %s vs central differences (%s)", p->name, label);
    th_close(what, rc ? INFINITY : e, 1e-4);
    if (e > worst) { worst = e; worst_name = p->name; }
    free(fd);
  }
  double *fdx = calloc(n, sizeof(double));
  for (size_t j = 0; j < n; j++) {
    double keep = x[j];
    x[j] = keep + h;
    double lp = ref_loss(&f.rm, x, f.dout, B, T, write_cost, write_cost_log, skip);
    x[j] = keep - h;
    double lm = ref_loss(&f.rm, x, f.dout, B, T, write_cost, write_cost_log, skip);
    x[j] = keep;
    fdx[j] = (lp - lm) / (2 * h);
  }
  snprintf(what, sizeof what, "gradient of the input x vs central differences (%s); worst parameter %s", label,
           worst_name);
  th_close(what, rc ? INFINITY : rel_to_max(dx, fdx, n), 1e-4);
  free(fdx); free(x);
  titans_free(out); titans_free(dx);
  titans_mem_ctx_free(&ctx);
  titans_mem_state_free(&st);
  fixture_free(&f);
}

static void test_gradients(titans_mem_config cfg, size_t B, size_t T) {
  test_gradients_with_cost(cfg, B, T, 0.0f, 0.0f, NULL);
}

/* ---- the gated delta rule (titans_mem_config_gated_delta, docs/model.md 1.9) ----------------------- */

/* Fed one token a call, the memory's weights after every token equal Gated DeltaNet's recurrence
   W_t = (1 - alpha_t) W_{t-1} - beta_t (W_{t-1} k_t - v_t) k_t^T with beta_t = 2 theta_t, written here in
   double on the reference's k, v and gates; its momentum stays 0. A whole call gives the same outputs. */
/* chunk > 1 takes per_token_grad: the delta rule's chunked form must give the same memory */
static void test_gated_delta(size_t B, size_t T, int chunk) {
  titans_mem_config cfg = titans_mem_config_gated_delta(8);
  cfg.heads = 2;
  cfg.head_dim = 4;
  cfg.chunk = chunk;
  cfg.per_token_grad = chunk > 1;
  fixture f;
  fixture_init(&f, cfg, B, T, 4321);
  size_t d = 8, dm = 8, H = 2, dh = 4, hs = dh * dh;
  titans_mem_state st, whole;
  titans_mem_state_init(&st, &cfg, B);
  titans_mem_state_init(&whole, &cfg, B);
  titans_mem_state_reset(&st, &f.w);
  titans_mem_state_reset(&whole, &f.w);
  double *x = to_double(f.x, B * T * d), *proj = calloc(3 * T * dm, sizeof(double));
  double *vec = calloc(3 * B * T * dm, sizeof(double)), *gates = calloc(3 * B * T * H, sizeof(double));
  double *W = calloc(B * H * hs, sizeof(double)); /* [B, H, d_h, d_h] */
  for (size_t r = 0; r < B; r++)
    ref_token_inputs(&f.rm, x + r * T * d, T, proj, vec + r * 3 * T * dm, gates + r * 3 * T * H);
  const double *w0 = ref_param(&f.rm, "w0.0");
  for (size_t r = 0; r < B; r++) memcpy(W + r * H * hs, w0, H * hs * sizeof(double));
  float *out = titans_alloc_floats(B * T * d), *one = titans_alloc_floats(B * d), *xt = titans_alloc_floats(B * d);
  double worst = 0.0;
  int rc = 0;
  for (size_t t = 0; t < T; t++) {
    for (size_t r = 0; r < B; r++) memcpy(xt + r * d, f.x + (r * T + t) * d, d * sizeof(float));
    rc |= titans_mem_forward(&cfg, &f.w, &st, one, xt, 1, NULL);
    for (size_t r = 0; r < B; r++)
      for (size_t h = 0; h < H; h++) {
        const double *vr = vec + r * 3 * T * dm, *gr = gates + r * 3 * T * H;
        const double *k = vr + (1 * T + t) * dm + h * dh, *v = vr + (2 * T + t) * dm + h * dh;
        double beta = 2.0 * gr[(0 * T + t) * H + h], alpha = gr[(2 * T + t) * H + h], err[4];
        double *Wh = W + (r * H + h) * hs; /* [d_h out, d_h in] */
        for (size_t i = 0; i < dh; i++) { /* err = W k - v */
          err[i] = -v[i];
          for (size_t j = 0; j < dh; j++) err[i] += Wh[i * dh + j] * k[j];
        }
        for (size_t i = 0; i < dh; i++)
          for (size_t j = 0; j < dh; j++) Wh[i * dh + j] = (1.0 - alpha) * Wh[i * dh + j] - beta * err[i] * k[j];
      }
    worst = fmax(worst, rel_to_max(st.w, W, B * H * hs));
  }
  char what[200];
  snprintf(what, sizeof what, "gated delta rule (chunk %d): the memory after each token fed one a call vs "
           "W_t = (1 - alpha) W - beta (W k - v) k^T in double", chunk);
  th_close(what, rc ? INFINITY : worst, 2e-5);
  rc = titans_mem_forward(&cfg, &f.w, &whole, out, f.x, T, NULL);
  snprintf(what, sizeof what, "gated delta rule (chunk %d): one call over the whole sequence leaves the same memory",
           chunk);
  th_close(what, rc ? INFINITY : rel_to_max(whole.w, W, B * H * hs), 2e-5);
  free(x); free(proj); free(vec); free(gates); free(W);
  titans_free(out); titans_free(one); titans_free(xt);
  titans_mem_state_free(&st);
  titans_mem_state_free(&whole);
  fixture_free(&f);
}

/* ---- golden values of the PyTorch reference --------------------------------------------------- */

static void test_golden(const char *path) {
  golden_file g;
  if (golden_load(&g, path) != 0) {
    th_check(0, "load golden file %s: %s", path, g.err);
    return;
  }
  const golden_tensor *nc = golden_find(&g, "num_cases");
  int ncases = nc ? (int)nc->data[0] : 0;
  th_check(ncases > 0, "golden file has %d cases", ncases);
  for (int c = 0; c < ncases; c++) {
    const golden_tensor *gc = golden_findf(&g, "case%d.config", c);
    const float *cf = gc->data;
    titans_mem_config cfg = make_cfg((int)cf[0], (int)cf[1], (int)cf[2], (int)cf[3], (int)cf[4], (int)cf[5], (int)cf[6],
                                     (int)cf[7], cf[8]);
    if (gc->count > 11) cfg.surprise_bound = cf[11]; /* tau, the surprise bound (12-field files) */
    if (gc->count > 12) cfg.gate_key = (int)cf[12]; /* the write gate reads the key (13-field files) */
    size_t B = (size_t)cf[9], T = (size_t)cf[10], n = B * T * (size_t)cfg.d;
    size_t total = titans_mem_param_count(&cfg), np;
    titans_param list[32];
    np = titans_mem_param_list(list, 32, &cfg, "", 0);
    float *slab = titans_alloc_floats(total), *gslab = titans_alloc_floats(total);
    titans_mem_weights w, gw;
    titans_mem_weights_bind(&w, &cfg, slab);
    titans_mem_weights_bind(&gw, &cfg, gslab);
    int missing = 0;
    for (size_t i = 0; i < np; i++) {
      const golden_tensor *t = golden_findf(&g, "case%d.%s", c, list[i].name);
      if (!t || t->count != list[i].size) { missing++; continue; }
      memcpy(slab + list[i].offset, t->data, t->count * sizeof(float));
    }
    char label[128], what[300];
    cfg_label(label, sizeof label, &cfg, T);
    th_check(missing == 0, "golden case %d (%s): all %zu parameters present with the expected sizes", c, label, np);
    titans_mem_state st;
    titans_mem_ctx ctx;
    titans_mem_state_init(&st, &cfg, B);
    titans_mem_ctx_init(&ctx);
    titans_mem_state_reset(&st, &w);
    float *out = titans_alloc_floats(n), *dx = titans_alloc_floats(n);
    const float *x = golden_findf(&g, "case%d.x", c)->data, *dout = golden_findf(&g, "case%d.dout", c)->data;
    int rc = titans_mem_forward(&cfg, &w, &st, out, x, T, &ctx);
    if (!rc) rc = titans_mem_backward(&cfg, &w, &gw, dx, dout, x, &ctx, 1);
    const golden_tensor *gout = golden_findf(&g, "case%d.out", c);
    snprintf(what, sizeof what, "golden case %d (%s): outputs vs PyTorch", c, label);
    th_close(what, rc ? INFINITY : th_max_rel_diff(out, gout->data, n, 1.0), 2e-5);
    /* final state, per layer */
    titans__mem_dims m = titans__mem_get_dims(&cfg);
    double sd = 0;
    for (size_t i = 0; i < m.L; i++) {
      const golden_tensor *gwt = golden_findf(&g, "case%d.state.w.%zu", c, i),
                          *gst = golden_findf(&g, "case%d.state.s.%zu", c, i);
      size_t sz = m.n[i + 1] * m.n[i];
      for (size_t rh = 0; rh < B * m.H; rh++) {
        double a = th_max_rel_diff(st.w + rh * m.head_size + m.wofs[i], gwt->data + rh * sz, sz, 1.0);
        double b2 = th_max_rel_diff(st.s + rh * m.head_size + m.wofs[i], gst->data + rh * sz, sz, 1.0);
        sd = fmax(sd, fmax(a, b2));
      }
    }
    snprintf(what, sizeof what, "golden case %d: final memory weights and momentum vs PyTorch", c);
    th_close(what, sd, 2e-5);
    double worst = 0;
    const char *worst_name = "";
    for (size_t i = 0; i < np; i++) {
      const golden_tensor *t = golden_findf(&g, "case%d.grad.%s", c, list[i].name);
      if (!t) { worst = INFINITY; worst_name = list[i].name; break; }
      double *ref = to_double(t->data, t->count);
      double e = rel_to_max(gslab + list[i].offset, ref, t->count);
      free(ref);
      if (e > worst || e != e) { worst = e; worst_name = list[i].name; }
    }
    const golden_tensor *gx = golden_findf(&g, "case%d.grad.x", c);
    double *refx = to_double(gx->data, n);
    double ex = rel_to_max(dx, refx, n);
    free(refx);
    snprintf(what, sizeof what,
             "golden case %d: parameter gradients vs PyTorch autograd (worst: %.80s, relative to its max)", c,
             worst_name);
    th_close(what, rc ? INFINITY : worst, 1e-4);
    snprintf(what, sizeof what, "golden case %d: input gradient vs PyTorch autograd", c);
    th_close(what, rc ? INFINITY : ex, 1e-4);
    titans_free(out); titans_free(dx); titans_free(slab); titans_free(gslab);
    titans_mem_ctx_free(&ctx);
    titans_mem_state_free(&st);
  }
  golden_free(&g);
}

/* ---- 7.3 streaming, 7.2 causality, 7.5 threads, state save/load -------------------------------- */

static void run_split(fixture *f, float *out, const size_t *splits, size_t nsplits) {
  titans_mem_state st;
  titans_mem_state_init(&st, &f->cfg, f->B);
  titans_mem_state_reset(&st, &f->w);
  size_t d = (size_t)f->cfg.d, t = 0;
  float *xs = titans_alloc_floats(f->B * f->T * d), *os = titans_alloc_floats(f->B * f->T * d);
  for (size_t s = 0; s < nsplits && t < f->T; s++) {
    size_t len = splits[s] < f->T - t ? splits[s] : f->T - t;
    for (size_t r = 0; r < f->B; r++) memcpy(xs + r * len * d, f->x + (r * f->T + t) * d, len * d * sizeof(float));
    titans_mem_forward(&f->cfg, &f->w, &st, os, xs, len, NULL);
    for (size_t r = 0; r < f->B; r++) memcpy(out + (r * f->T + t) * d, os + r * len * d, len * d * sizeof(float));
    t += len;
  }
  titans_free(xs); titans_free(os);
  titans_mem_state_free(&st);
}

static void test_streaming(titans_mem_config cfg) {
  fixture f;
  size_t T = 37;
  fixture_init(&f, cfg, 2, T, 555);
  size_t n = f.B * T * (size_t)cfg.d;
  float *whole = titans_alloc_floats(n), *split = titans_alloc_floats(n);
  size_t one[1] = {T}, ones[64], odd[] = {3, 7, 1, 2, 11, 5, 8};
  for (int i = 0; i < 64; i++) ones[i] = 1;
  run_split(&f, whole, one, 1);
  run_split(&f, split, ones, 64);
  char label[128], what[256];
  cfg_label(label, sizeof label, &cfg, T);
  snprintf(what, sizeof what, "streaming one token at a time == one call (%s)", label);
  th_close(what, th_max_rel_diff(split, whole, n, 1.0), 1e-5);
  run_split(&f, split, odd, sizeof odd / sizeof odd[0]);
  snprintf(what, sizeof what, "streaming in splits 3,7,1,2,11,5,8 (inside chunks) == one call (%s)", label);
  th_close(what, th_max_rel_diff(split, whole, n, 1.0), 1e-5);
  titans_free(whole); titans_free(split);
  fixture_free(&f);
}

static void test_causality(titans_mem_config cfg) {
  fixture f;
  size_t T = 29, d = (size_t)cfg.d;
  fixture_init(&f, cfg, 1, T, 77);
  float *a = titans_alloc_floats(T * d), *b = titans_alloc_floats(T * d);
  size_t one[1] = {T};
  run_split(&f, a, one, 1);
  int ok = 1;
  double after = 0;
  for (size_t j = 0; j < T; j += 5) {
    float keep = f.x[j * d];
    f.x[j * d] += 1.0f;
    run_split(&f, b, one, 1);
    f.x[j * d] = keep;
    if (memcmp(a, b, j * d * sizeof(float)) != 0) ok = 0;
    after = fmax(after, th_max_abs_diff(a + j * d, b + j * d, d));
  }
  char label[128];
  cfg_label(label, sizeof label, &cfg, T);
  th_check(ok && after > 0, "causality: changing token j changes no output before j, bit for bit, and does change "
                            "position j (%s; change at j up to %.3g)", label, after);
  titans_free(a); titans_free(b);
  fixture_free(&f);
}

/* One training forward + backward of f's inputs from the reset state: out, dx [B, T, d] (dx zeroed
   first), the gradients in f->grad_slab (zeroed first); stage timers into stage unless it is NULL. */
static void fixture_train_pass(fixture *f, titans_mem_config cfg, size_t T, float *out, float *dx, double *stage) {
  titans_mem_state st;
  titans_mem_ctx ctx;
  titans_mem_state_init(&st, &cfg, f->B);
  titans_mem_ctx_init(&ctx);
  titans_mem_state_reset(&st, &f->w);
  memset(f->grad_slab, 0, f->total * sizeof(float));
  memset(dx, 0, f->B * T * (size_t)cfg.d * sizeof(float));
  ctx.stage_seconds = stage;
  titans_mem_forward(&cfg, &f->w, &st, out, f->x, T, &ctx);
  titans_mem_backward(&cfg, &f->w, &f->g, dx, f->dout, f->x, &ctx, 1);
  titans_mem_ctx_free(&ctx);
  titans_mem_state_free(&st);
}

static void test_threads_and_state(titans_mem_config cfg) {
  fixture f;
  size_t T = 48, d = (size_t)cfg.d;
  fixture_init(&f, cfg, 3, T, 4242);
  size_t n = f.B * T * d;
  float *o1 = titans_alloc_floats(n), *o2 = titans_alloc_floats(n);
  float *dx1 = titans_alloc_floats(n), *dx2 = titans_alloc_floats(n);
  float *g1 = titans_alloc_floats(f.total);
  int nruns = 2;
#ifdef _OPENMP
  int saved_threads = omp_get_max_threads();
#endif
  for (int run = 0; run < nruns; run++) {
#ifdef _OPENMP
    omp_set_num_threads(run == 0 ? 1 : 2);
#endif
    fixture_train_pass(&f, cfg, T, run ? o2 : o1, run ? dx2 : dx1, NULL);
    if (run == 0) memcpy(g1, f.grad_slab, f.total * sizeof(float));
  }
#ifdef _OPENMP
  omp_set_num_threads(saved_threads);
#endif
  th_check(th_all_finite(o1, n) && memcmp(o1, o2, n * sizeof(float)) == 0 && memcmp(dx1, dx2, n * sizeof(float)) == 0 &&
               memcmp(g1, f.grad_slab, f.total * sizeof(float)) == 0,
           "1 and 2 threads give finite, bit-identical outputs and gradients (max diff %.3g)",
           th_max_abs_diff(o1, o2, n));

  /* save after 19 tokens, continue; load the saved state into a fresh one and continue: bit-identical */
  titans_mem_state a, b, c;
  titans_mem_state_init(&a, &cfg, f.B);
  titans_mem_state_init(&b, &cfg, f.B);
  titans_mem_state_init(&c, &cfg, f.B);
  titans_mem_state_reset(&a, &f.w);
  size_t t0 = 19, t1 = T - t0;
  float *xa = titans_alloc_floats(f.B * t0 * d), *xb = titans_alloc_floats(f.B * t1 * d);
  for (size_t r = 0; r < f.B; r++) {
    memcpy(xa + r * t0 * d, f.x + r * T * d, t0 * d * sizeof(float));
    memcpy(xb + r * t1 * d, f.x + (r * T + t0) * d, t1 * d * sizeof(float));
  }
  titans_mem_forward(&cfg, &f.w, &a, o1, xa, t0, NULL);
  size_t nf = titans_mem_state_floats(&a);
  float *buf = titans_alloc_floats(nf);
  titans_mem_state_save(&a, buf);
  int rc = titans_mem_state_load(&b, buf, nf);
  int rc2 = titans_mem_state_copy(&c, &a);
  titans_mem_forward(&cfg, &f.w, &a, o1, xb, t1, NULL);
  titans_mem_forward(&cfg, &f.w, &b, o2, xb, t1, NULL);
  th_check(rc == 0 && memcmp(o1, o2, f.B * t1 * d * sizeof(float)) == 0,
           "a saved and loaded state continues bit-identically (rc %d, position %lld)", rc, b.position);
  titans_mem_forward(&cfg, &f.w, &c, o2, xb, t1, NULL);
  th_check(rc2 == 0 && memcmp(o1, o2, f.B * t1 * d * sizeof(float)) == 0,
           "a copied (forked) state continues bit-identically");
  buf[0] = -1.0f;
  th_check(titans_mem_state_load(&b, buf, nf) == TITANS_ERR_FORMAT, "a corrupt saved state is rejected: %s", b.error);
  th_check(titans_mem_state_load(&b, buf, nf - 1) == TITANS_ERR_FORMAT,
           "a saved state of the wrong size is rejected: %s", b.error);
  titans_free(buf); titans_free(xa); titans_free(xb);
  titans_mem_state_free(&a); titans_mem_state_free(&b); titans_mem_state_free(&c);
  titans_free(o1); titans_free(o2); titans_free(dx1); titans_free(dx2); titans_free(g1);
  fixture_free(&f);
}

/* Two chained training calls (as MAC makes, one segment at a time) give the gradients of one call:
   the gradient of the first call's final state and conv tails comes back from the second. */
/* The stage timers (ctx.stage_seconds): a forward + backward with them gives the same bits as one
   without, and adds a positive, finite time to every stage; a second call adds to the first. */
static void test_stage_timers(titans_mem_config cfg) {
  fixture f;
  size_t T = 32, d = (size_t)cfg.d;
  fixture_init(&f, cfg, 2, T, 77);
  size_t n = f.B * T * d;
  float *out[2] = {titans_alloc_floats(n), titans_alloc_floats(n)},
        *dx[2] = {titans_alloc_floats(n), titans_alloc_floats(n)};
  float *g0 = titans_alloc_floats(f.total);
  double stage[TITANS_MEM_STAGES] = {0}, first[TITANS_MEM_STAGES];
  for (int run = 0; run < 3; run++) {
    int k = run ? 1 : 0;
    fixture_train_pass(&f, cfg, T, out[k], dx[k], run ? stage : NULL);
    if (run == 0) memcpy(g0, f.grad_slab, f.total * sizeof(float));
    if (run == 1) memcpy(first, stage, sizeof stage);
  }
  int positive = 1, grew = 1;
  for (int i = 0; i < TITANS_MEM_STAGES; i++) {
    positive &= first[i] > 0.0 && first[i] < 60.0;
    grew &= stage[i] > first[i];
  }
  th_check(memcmp(out[0], out[1], n * sizeof(float)) == 0 && memcmp(dx[0], dx[1], n * sizeof(float)) == 0 &&
               memcmp(g0, f.grad_slab, f.total * sizeof(float)) == 0,
           "stage timers: outputs and gradients bit-identical with and without them");
  th_check(positive && grew,
           "stage timers: every stage gets a positive time (%.3g .. %.3g ms), a second call adds to it",
           1e3 * first[TITANS_MEM_STAGE_OUTPUT], 1e3 * first[TITANS_MEM_STAGE_RECURRENCE_BACKWARD]);
  for (int k = 0; k < 2; k++) {
    titans_free(out[k]);
    titans_free(dx[k]);
  }
  titans_free(g0);
  fixture_free(&f);
}

static void test_chained_backward(titans_mem_config cfg, size_t T1, size_t T2) {
  fixture f;
  size_t B = 2, T = T1 + T2, d = (size_t)cfg.d, n = B * T * d;
  fixture_init(&f, cfg, B, T, 808);
  titans_mem_state st;
  titans_mem_ctx c0, c1, c2;
  titans_mem_state_init(&st, &cfg, B);
  titans_mem_ctx_init(&c0); titans_mem_ctx_init(&c1); titans_mem_ctx_init(&c2);
  float *out = titans_alloc_floats(n), *dx = titans_alloc_floats(n), *g_one = titans_alloc_floats(f.total);
  titans_mem_state_reset(&st, &f.w);
  titans_mem_forward(&cfg, &f.w, &st, out, f.x, T, &c0);
  titans_mem_backward(&cfg, &f.w, &f.g, dx, f.dout, f.x, &c0, 1);
  memcpy(g_one, f.grad_slab, f.total * sizeof(float));
  /* the same sequence in two calls */
  float *x1 = titans_alloc_floats(B * T1 * d), *x2 = titans_alloc_floats(B * T2 * d);
  float *d1 = titans_alloc_floats(B * T1 * d), *d2 = titans_alloc_floats(B * T2 * d);
  float *dx1 = titans_alloc_floats(B * T1 * d), *dx2 = titans_alloc_floats(B * T2 * d);
  float *o1 = titans_alloc_floats(B * T1 * d), *o2 = titans_alloc_floats(B * T2 * d), *dxs = titans_alloc_floats(n);
  for (size_t r = 0; r < B; r++) {
    memcpy(x1 + r * T1 * d, f.x + r * T * d, T1 * d * sizeof(float));
    memcpy(x2 + r * T2 * d, f.x + (r * T + T1) * d, T2 * d * sizeof(float));
    memcpy(d1 + r * T1 * d, f.dout + r * T * d, T1 * d * sizeof(float));
    memcpy(d2 + r * T2 * d, f.dout + (r * T + T1) * d, T2 * d * sizeof(float));
  }
  memset(f.grad_slab, 0, f.total * sizeof(float));
  titans_mem_state_reset(&st, &f.w);
  titans_mem_forward(&cfg, &f.w, &st, o1, x1, T1, &c1);
  titans_mem_forward(&cfg, &f.w, &st, o2, x2, T2, &c2);
  titans_mem_backward(&cfg, &f.w, &f.g, dx2, d2, x2, &c2, 0);
  titans__mem_dims m = titans__mem_get_dims(&cfg);
  size_t K1 = m.K > 0 ? m.K - 1 : 0;
  memcpy(c1.dstate_final, c2.dstate_init, B * m.H * 2 * m.head_size * sizeof(float));
  memcpy(c1.dtails_final, c2.dtails_init, 4 * B * K1 * m.dm * sizeof(float));
  titans_mem_backward(&cfg, &f.w, &f.g, dx1, d1, x1, &c1, 1);
  for (size_t r = 0; r < B; r++) {
    memcpy(dxs + r * T * d, dx1 + r * T1 * d, T1 * d * sizeof(float));
    memcpy(dxs + (r * T + T1) * d, dx2 + r * T2 * d, T2 * d * sizeof(float));
  }
  double *ref = to_double(g_one, f.total), *refx = to_double(dx, n);
  char label[128], what[256];
  cfg_label(label, sizeof label, &cfg, T);
  snprintf(what, sizeof what, "two chained calls (%zu + %zu tokens) give the parameter gradients of one call (%s)", T1,
           T2, label);
  th_close(what, rel_to_max(f.grad_slab, ref, f.total), 1e-5);
  snprintf(what, sizeof what, "two chained calls give the input gradient of one call (%s)", label);
  th_close(what, rel_to_max(dxs, refx, n), 1e-5);
  free(ref); free(refx);
  titans_free(x1); titans_free(x2); titans_free(d1); titans_free(d2); titans_free(dx1); titans_free(dx2);
  titans_free(o1); titans_free(o2); titans_free(dxs); titans_free(out); titans_free(dx); titans_free(g_one);
  titans_mem_ctx_free(&c0); titans_mem_ctx_free(&c1); titans_mem_ctx_free(&c2);
  titans_mem_state_free(&st);
  fixture_free(&f);
}

/* ---- long run with the default gates ---------------------------------------------------------- */

/* cfg at d = 64, chunk 64; what: its name in the check */
static void test_long_run_finite(titans_mem_config cfg, const char *what) {
  size_t T = 65536, d = 64, n = T * d;
  size_t total = titans_mem_param_count(&cfg);
  float *slab = titans_alloc_floats(total), *gslab = titans_alloc_floats(total);
  titans_mem_weights w, g;
  titans_mem_weights_bind(&w, &cfg, slab);
  titans_mem_weights_bind(&g, &cfg, gslab);
  titans_rng rng;
  titans_rng_seed(&rng, 7);
  titans_mem_weights_init(&w, &cfg, &rng, 4);
  float *x = titans_alloc_floats(n), *out = titans_alloc_floats(n), *dx = titans_alloc_floats(n);
  for (size_t i = 0; i < n; i++) x[i] = titans_rng_normal(&rng);
  titans_mem_state st;
  titans_mem_ctx ctx;
  titans_mem_state_init(&st, &cfg, 1);
  titans_mem_ctx_init(&ctx);
  titans_mem_state_reset(&st, &w);
  int rc = titans_mem_forward(&cfg, &w, &st, out, x, T, &ctx);
  if (!rc) rc = titans_mem_backward(&cfg, &w, &g, dx, out, x, &ctx, 1); /* dout = out: loss = |out|^2 / 2 */
  size_t hs = st.head_size * (size_t)cfg.heads;
  th_check(rc == 0 && th_all_finite(out, n) && th_all_finite(st.w, hs) && th_all_finite(st.s, hs) &&
               th_all_finite(gslab, total) && th_all_finite(dx, n),
           "T = 65536 random tokens with the default gates, %s: outputs, state and gradients finite (rc %d)", what, rc);
  if (cfg.least_squares) { /* G = I - P with P = (I + sum theta k k^T)^-1: its diagonal lies in [0, 1] */
    double lo = INFINITY, hi = -INFINITY;
    for (size_t j = 0; j < (size_t)cfg.head_dim; j++) {
      double g = st.s[j * (size_t)cfg.head_dim + j];
      lo = fmin(lo, g), hi = fmax(hi, g);
    }
    th_check(lo >= -1e-4 && hi <= 1.0 + 1e-4, "  and its G's diagonal stays within [0, 1] (%.6f .. %.6f)", lo, hi);
  }
  titans_mem_ctx_free(&ctx);
  titans_mem_state_free(&st);
  titans_free(slab); titans_free(gslab); titans_free(x); titans_free(out); titans_free(dx);
}

/* The property least_squares exists for (docs/model.md 1.11): n < d_h pairs written one after another with
   a wide-open gate are all read back, each value where it was written, while the delta rule (a full
   step, beta = 1) leaves the earlier pairs moved by the later writes. Keys are random unit vectors of
   d_h = 16 (about 0.25 apart), written through titans_mem_write. Returns the worst relative error. */
static double write_then_read_error(titans_mem_config cfg, float theta, size_t n, int first_half) {
  size_t dh = (size_t)cfg.head_dim;
  titans_mem_weights w;
  float *slab = titans_alloc_floats(titans_mem_param_count(&cfg)), *keys = titans_alloc_floats(n * dh);
  float *values = titans_alloc_floats(n * dh), *out = titans_alloc_floats(n * dh), *gates = titans_alloc_floats(n);
  memset(slab, 0, titans_mem_param_count(&cfg) * sizeof(float)); /* w0 = 0: the memory starts empty */
  titans_mem_weights_bind(&w, &cfg, slab);
  titans_rng rng;
  titans_rng_seed(&rng, 31);
  for (size_t i = 0; i < n; i++) {
    float ss = 0.0f;
    for (size_t j = 0; j < dh; j++) keys[i * dh + j] = titans_rng_normal(&rng), ss += keys[i * dh + j] * keys[i * dh + j];
    for (size_t j = 0; j < dh; j++) keys[i * dh + j] /= sqrtf(ss), values[i * dh + j] = titans_rng_normal(&rng);
    gates[i] = theta;
  }
  titans_mem_state st;
  double worst = INFINITY;
  if (titans_mem_state_init(&st, &cfg, 1) == TITANS_OK) {
    titans_mem_state_reset(&st, &w);
    if (titans_mem_write(&st, 0, 0, keys, values, gates, NULL, NULL, n) == TITANS_OK &&
        titans_mem_read(&st, 0, 0, out, keys, n) == TITANS_OK) {
      worst = 0;
      for (size_t i = 0; i < (first_half ? n / 2 : n); i++) {
        double e = 0, v = 0;
        for (size_t j = 0; j < dh; j++) {
          double d = out[i * dh + j] - values[i * dh + j];
          e += d * d, v += (double)values[i * dh + j] * values[i * dh + j];
        }
        worst = fmax(worst, sqrt(e / v));
      }
    }
    titans_mem_state_free(&st);
  }
  titans_free(slab); titans_free(keys); titans_free(values); titans_free(out); titans_free(gates);
  return worst;
}

static void test_least_squares_recall(void) {
  titans_mem_config ls = least_sq(make_cfg(16, 1, 16, 1, 1, 4, 0, 0, 1.0f));
  titans_mem_config delta = make_cfg(16, 1, 16, 1, 1, 1, 0, 0, 1.0f); /* chunk 1: each step at the weights before */
  delta.no_momentum = 1, delta.no_forget = 1;
  double e_ls = write_then_read_error(ls, 1e4f, 12, 0), e_delta = write_then_read_error(delta, 0.5f, 12, 1);
  th_check(e_ls < 1e-2, "least squares: 12 pairs of d_h = 16 written with theta 1e4 all read back (worst error %.2g of "
           "the value)", e_ls);
  th_check(e_delta > 0.1, "the delta rule with a full step (beta = 1) moves the first 6 of them (worst error %.2g): "
           "the property is the least-squares memory's", e_delta);
}

static void test_bad_input(void) {
  titans_mem_config cfg = make_cfg(8, 2, 4, 9, 2, 4, 4, 0, 0.5f);
  titans_mem_state st;
  th_check(titans_mem_state_init(&st, &cfg, 1) == TITANS_ERR_ARG, "depth 9 is rejected: %s", st.error);
  cfg = make_cfg(8, 2, 4, 2, 2, 0, 4, 0, 0.5f);
  th_check(titans_mem_state_init(&st, &cfg, 1) == TITANS_ERR_ARG, "chunk 0 is rejected: %s", st.error);
  cfg = make_cfg(8, 2, 4, 2, 2, 4, 4, 0, NAN);
  th_check(titans_mem_state_init(&st, &cfg, 1) == TITANS_ERR_ARG, "theta_max NaN is rejected: %s", st.error);
  cfg = make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f);
  titans_mem_state_init(&st, &cfg, 1);
  titans_mem_ctx ctx;
  titans_mem_ctx_init(&ctx);
  size_t total = titans_mem_param_count(&cfg);
  float *slab = titans_alloc_floats(total), x[3 * 8], out[3 * 8];
  memset(x, 0, sizeof x);
  titans_mem_weights w;
  titans_mem_weights_bind(&w, &cfg, slab);
  titans_mem_state_reset(&st, &w);
  titans_mem_forward(&cfg, &w, &st, out, x, 3, NULL);
  th_check(titans_mem_forward(&cfg, &w, &st, out, x, 1, &ctx) == TITANS_ERR_STATE,
           "a training forward that starts inside a chunk is rejected: %s", st.error);
  titans_mem_config other = cfg;
  other.chunk = 2;
  th_check(titans_mem_forward(&other, &w, &st, out, x, 1, NULL) == TITANS_ERR_ARG,
           "a state used with another configuration is rejected: %s", st.error);
  th_check(titans_mem_backward(&cfg, &w, &w, out, x, x, &ctx, 1) == TITANS_ERR_STATE,
           "a backward without a forward is rejected: %s", ctx.error);
  titans_free(slab);
  titans_mem_ctx_free(&ctx);
  titans_mem_state_free(&st);
}

int main(void) {
  printf("memory layer: chunked form vs token-by-token recurrence (double reference)\n");
  int chunks[] = {1, 4, 16, 5};
  for (int ci = 0; ci < 4; ci++)
    for (int L = 1; L <= 3; L++)
      test_chunked_vs_recurrence(make_cfg(8, 2, 4, L, 2, chunks[ci], 4, L == 2, 0.25f), 2, 23);
  test_chunked_vs_recurrence(make_cfg(8, 2, 4, 2, 2, 4, 0, 0, 0.5f), 2, 23);
  test_chunked_vs_recurrence(make_cfg(8, 2, 4, 2, 2, 4, 0, 1, 0.25f), 2, 23);
  test_chunked_vs_recurrence(make_cfg(16, 2, 8, 2, 4, 16, 4, 0, 0.5f), 1, 64);
  /* the one-pass chunk-end update (titans__mem_state_update) at its edges: layers one vector wide
     (d_h = 16: tiles of 1 vector), and a last layer of 6 rows under 48 columns (d_h = 6, e = 8: tiles
     of 4 rows and then single rows; 3 vectors of 16, or 6 of 8), beside the five-pass form of layers
     narrower than a vector (d_h = 6) */
  test_chunked_vs_recurrence(make_cfg(16, 1, 16, 2, 1, 8, 4, 0, 0.5f), 2, 37);
  test_chunked_vs_recurrence(make_cfg(12, 2, 6, 2, 8, 8, 4, 1, 0.25f), 2, 37);
  /* the surprise bound, at a tau small enough that it scales most steps (test_bound_acts checks that) */
  for (int ci = 0; ci < 4; ci++)
    for (int L = 1; L <= 3; L++)
      test_chunked_vs_recurrence(bounded(make_cfg(8, 2, 4, L, 2, chunks[ci], 4, L == 3, 0.5f), 0.5f), 2, 23);
  test_bound_acts(bounded(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f), 0.5f));
  printf("memory layer: the gated delta rule (no momentum), token by token and chunked\n");
  test_gated_delta(2, 19, 1);
  test_gated_delta(2, 19, 8);
  titans_mem_config no_momentum = make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.25f);
  no_momentum.no_momentum = 1;
  test_chunked_vs_recurrence(no_momentum, 2, 23);
  titans_mem_config no_forget = make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.25f);
  no_forget.no_forget = 1;
  test_chunked_vs_recurrence(no_forget, 2, 23);
  no_forget.no_momentum = 1; /* neither: W_t = W_{t-1} - theta_t u_t */
  test_chunked_vs_recurrence(no_forget, 2, 23);
  printf("memory layer: each token's gradient at the weights before it, chunked (per_token_grad)\n");
  for (int ci = 1; ci < 4; ci++) {
    titans_mem_config delta = titans_mem_config_gated_delta(8); /* no momentum, forgetting */
    delta.heads = 2;
    delta.head_dim = 4;
    delta.chunk = chunks[ci];
    test_chunked_vs_recurrence(per_token(delta), 2, 23);
    test_chunked_vs_recurrence(per_token(make_cfg(8, 2, 4, 1, 2, chunks[ci], 4, 1, 0.25f)), 2, 23); /* momentum */
  }
  titans_mem_config exact_no_forget = per_token(make_cfg(8, 2, 4, 1, 2, 8, 0, 0, 0.5f));
  exact_no_forget.no_forget = 1;
  exact_no_forget.no_momentum = 1;
  test_chunked_vs_recurrence(exact_no_forget, 2, 23);
  test_chunked_vs_recurrence(per_token(make_cfg(16, 1, 16, 1, 1, 16, 4, 0, 0.25f)), 2, 37);
  printf("memory layer: the write gate that reads the key (gate_key)\n");
  test_chunked_vs_recurrence(keyed_gate(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 0.5f)), 2, 23);
  test_chunked_vs_recurrence(keyed_gate(bounded(make_cfg(8, 2, 4, 2, 2, 3, 4, 0, 0.5f), 0.5f)), 2, 23);
  printf("memory layer: queries and keys without the SiLU (qk_linear)\n");
  test_chunked_vs_recurrence(linear_qk(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 0.5f)), 2, 23);
  test_chunked_vs_recurrence(linear_qk(bounded(make_cfg(8, 2, 4, 2, 2, 3, 4, 0, 0.5f), 0.5f)), 2, 23);
  printf("memory layer: the least-squares memory (least_squares) against the normal equations\n");
  for (int ci = 0; ci < 4; ci++)
    test_chunked_vs_recurrence(least_sq(make_cfg(8, 2, 4, 1, 2, chunks[ci], 4, 0, 4.0f)), 2, 23);
  test_chunked_vs_recurrence(least_sq(linear_qk(make_cfg(16, 1, 16, 1, 1, 8, 4, 0, 50.0f))), 2, 37);
  test_chunked_vs_recurrence(least_sq(keyed_gate(make_cfg(8, 2, 4, 1, 2, 4, 0, 0, 4.0f))), 1, 23);
  printf("memory layer: a least-squares memory that forgets (its confidence decays by alpha_t), against inverses\n");
  for (int ci = 0; ci < 4; ci++)
    test_chunked_vs_recurrence(least_sq_forgetting(make_cfg(8, 2, 4, 1, 2, chunks[ci], 4, 0, 4.0f)), 2, 23);
  test_chunked_vs_recurrence(least_sq_forgetting(linear_qk(make_cfg(16, 1, 16, 1, 1, 8, 4, 0, 50.0f))), 2, 37);

  printf("memory layer: gradients vs central differences of the double reference (h = 1e-5)\n");
  test_gradients(make_cfg(8, 2, 4, 1, 2, 3, 4, 0, 0.5f), 2, 7);
  test_gradients(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f), 2, 9);
  test_gradients(make_cfg(8, 2, 4, 3, 2, 2, 0, 1, 0.5f), 1, 7);
  test_gradients(make_cfg(12, 2, 6, 2, 8, 4, 4, 0, 0.5f), 1, 9); /* the one-pass update's row and vector tails */
  test_gradients(bounded(make_cfg(8, 2, 4, 1, 2, 3, 4, 0, 0.5f), 0.5f), 2, 7);
  test_gradients(bounded(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f), 0.5f), 2, 9);
  test_gradients(bounded(make_cfg(8, 2, 4, 3, 2, 2, 0, 1, 0.5f), 0.5f), 1, 7);
  titans_mem_config delta = titans_mem_config_gated_delta(8); /* mom_w, mom_b: no gradient (their differences are 0) */
  delta.heads = 2;
  delta.head_dim = 4;
  test_gradients(delta, 2, 7);
  delta.chunk = 3; /* the chunked form without momentum */
  test_gradients(delta, 2, 7);
  delta.chunk = 1;
  delta.no_forget = 1; /* the delta rule without forgetting: decay_w, decay_b get no gradient */
  test_gradients(delta, 2, 7);
  delta.no_forget = 0;
  delta.chunk = 3; /* per_token_grad: the triangular solve's backward */
  test_gradients(per_token(delta), 2, 7);
  delta.chunk = 4;
  delta.no_forget = 1;
  test_gradients(per_token(delta), 2, 9);
  test_gradients(per_token(make_cfg(8, 2, 4, 1, 2, 4, 4, 1, 0.5f)), 2, 9); /* momentum, residual */
  titans_mem_config no_forget_deep = make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f);
  no_forget_deep.no_forget = 1;
  test_gradients(bounded(no_forget_deep, 0.5f), 2, 9);
  test_gradients(keyed_gate(make_cfg(8, 2, 4, 1, 2, 3, 4, 0, 0.5f)), 2, 7);
  test_gradients(keyed_gate(bounded(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f), 0.5f)), 2, 9);
  test_gradients(linear_qk(make_cfg(8, 2, 4, 1, 2, 3, 4, 0, 0.5f)), 2, 7);
  test_gradients(linear_qk(bounded(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f), 0.5f)), 2, 9);
  test_gradients(least_sq(make_cfg(8, 2, 4, 1, 2, 3, 4, 0, 4.0f)), 2, 7);
  test_gradients(least_sq(keyed_gate(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 20.0f))), 2, 9);
  test_gradients(least_sq_forgetting(make_cfg(8, 2, 4, 1, 2, 3, 4, 0, 4.0f)), 2, 7); /* decay_w, decay_b too */
  test_gradients(least_sq_forgetting(keyed_gate(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 20.0f))), 2, 9);
  /* a cost on writing (ctx.write_cost, titans_train_config.write_cost) and its log form (write_cost_log):
     large enough that the write gates' gradients are mostly the costs' */
  test_gradients_with_cost(make_cfg(8, 2, 4, 1, 2, 3, 4, 0, 0.5f), 2, 7, 3.0f, 0.0f, NULL);
  test_gradients_with_cost(keyed_gate(bounded(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f), 0.5f)), 2, 9, 3.0f, 0.0f, NULL);
  test_gradients_with_cost(make_cfg(8, 2, 4, 1, 2, 3, 4, 0, 0.5f), 2, 7, 0.0f, 0.7f, NULL); /* the log cost alone */
  test_gradients_with_cost(bounded(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f), 0.5f), 2, 9, 3.0f, 0.7f, NULL); /* both */
  {
    /* both costs leaving some positions alone (ctx.write_cost_skip: a needle's, say), different ones in
       each row, two heads */
    const unsigned char skip[2 * 9] = {0, 1, 1, 0, 0, 0, 1, 0, 0, /* row 1: */ 1, 0, 0, 0, 0, 1, 1, 1, 0};
    test_gradients_with_cost(bounded(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f), 0.5f), 2, 9, 3.0f, 0.7f, skip);
  }

  printf("memory layer: golden values of the PyTorch reference (tests/ref)\n");
  test_golden("tests/ref/memory_golden.bin");

  printf("memory layer: streaming, causality, threads, state\n");
  test_streaming(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.25f));
  test_streaming(make_cfg(8, 2, 4, 1, 2, 16, 3, 1, 0.25f));
  test_streaming(bounded(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.25f), 0.5f));
  test_streaming(keyed_gate(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 0.25f)));
  test_streaming(per_token(make_cfg(8, 2, 4, 1, 2, 8, 4, 1, 0.25f)));
  test_streaming(linear_qk(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 0.25f)));
  test_streaming(least_sq(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 4.0f)));
  test_streaming(least_sq_forgetting(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 4.0f)));
  test_causality(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f));
  test_causality(keyed_gate(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f)));
  test_causality(linear_qk(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.5f)));
  test_causality(least_sq(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 4.0f)));
  test_causality(least_sq_forgetting(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 4.0f)));
  test_causality(make_cfg(8, 2, 4, 3, 2, 16, 0, 1, 0.5f));
  test_threads_and_state(make_cfg(16, 4, 4, 2, 2, 8, 4, 0, 0.25f));
  test_stage_timers(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.25f));
  test_chained_backward(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.25f), 8, 13);
  test_chained_backward(make_cfg(8, 2, 4, 1, 2, 2, 3, 1, 0.25f), 2, 1);
  test_chained_backward(bounded(make_cfg(8, 2, 4, 2, 2, 4, 4, 0, 0.25f), 0.5f), 8, 13);
  test_chained_backward(keyed_gate(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 0.25f)), 8, 13);
  test_chained_backward(per_token(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 0.25f)), 8, 13);
  test_chained_backward(least_sq(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 4.0f)), 8, 13);
  test_chained_backward(least_sq_forgetting(make_cfg(8, 2, 4, 1, 2, 4, 4, 0, 4.0f)), 8, 13);
  printf("memory layer: the least-squares memory reads back every pair written (titans_mem_write)\n");
  test_least_squares_recall();
  test_bad_input();
  titans_mem_config long_run = titans_mem_config_default(64);
  long_run.chunk = 64;
  test_long_run_finite(long_run, "the default memory");
  /* every token written at theta 50 (the gates' start at theta_max 100): G fills up, P = I - G must stay
     positive for 65,536 rank-1 updates in float */
  long_run.depth = 1, long_run.heads = 1, long_run.head_dim = 64, long_run.theta_max = 100.0f;
  test_long_run_finite(least_sq(long_run), "a least-squares memory of one head of 64");
  test_long_run_finite(least_sq_forgetting(long_run), "a least-squares memory of one head of 64 that forgets");
  return th_summary("test_memory");
}
