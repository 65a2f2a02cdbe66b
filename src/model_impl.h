/* ---- 7. Models, training, sessions (implementation) ------------------------------------------- */

static const char *const titans__block_names[TITANS_BLOCK_COUNT] = {"attn", "swa", "mac", "mag", "mal", "lmm", "lm2"};

TITANSDEF const char *titans_block_name(int kind) {
  return kind >= 0 && kind < TITANS_BLOCK_COUNT ? titans__block_names[kind] : NULL;
}

TITANSDEF int titans_block_from_name(const char *name) {
  for (int k = 0; k < TITANS_BLOCK_COUNT; k++)
    if (name && strcmp(name, titans__block_names[k]) == 0) return k;
  return -1;
}

static int titans__has_attn(int kind) { return kind != TITANS_BLOCK_LMM; }
static int titans__has_mem(int kind) {
  return kind == TITANS_BLOCK_MAC || kind == TITANS_BLOCK_MAG || kind == TITANS_BLOCK_MAL || kind == TITANS_BLOCK_LMM;
}
static int titans__has_gate(int kind) { return kind == TITANS_BLOCK_MAC || kind == TITANS_BLOCK_MAG; }

TITANSDEF titans_config titans_config_default(int block, int vocab, int d, int n_layers) {
  titans_config c;
  memset(&c, 0, sizeof c);
  c.block = block;
  c.vocab = vocab;
  c.d = d;
  c.n_layers = n_layers;
  c.attn_heads = d / 64 > 1 ? d / 64 : 1;
  c.ffn_hidden = ((4 * d + 7) / 8) * 8;
  c.window = 64;
  c.segment = 64;
  c.n_persist = titans__has_mem(block) && block != TITANS_BLOCK_LMM ? 4 : 0;
  c.tied = 1;
  c.max_context = 4096;
  c.mem = titans_mem_config_default(d);
  return c;
}

TITANSDEF int titans_config_check(const titans_config *c, char *err) {
  if (c->block < 0 || c->block >= TITANS_BLOCK_COUNT)
    return titans__error(err, TITANS_ERR_ARG, "config: unknown block kind %d", c->block);
  if (c->block == TITANS_BLOCK_LM2)
    return titans__error(err, TITANS_ERR_ARG, "config: the LM2 block is not implemented in this version");
  if (c->vocab < 1 || c->vocab > (1 << 24)) return titans__error(err, TITANS_ERR_ARG, "config: vocab = %d, want 1..2^24", c->vocab);
  if (c->d < 2 || c->d > 65536) return titans__error(err, TITANS_ERR_ARG, "config: d = %d, want 2..65536", c->d);
  if (c->n_layers < 1 || c->n_layers > 1024)
    return titans__error(err, TITANS_ERR_ARG, "config: n_layers = %d, want 1..1024", c->n_layers);
  if (c->ffn_hidden < 1 || c->ffn_hidden > 1 << 20)
    return titans__error(err, TITANS_ERR_ARG, "config: ffn_hidden = %d, want 1..2^20", c->ffn_hidden);
  if (titans__has_attn(c->block)) {
    if (c->attn_heads < 1 || c->d % c->attn_heads != 0 || (c->d / c->attn_heads) % 2 != 0)
      return titans__error(err, TITANS_ERR_ARG, "config: attn_heads = %d must divide d = %d into even head widths",
                           c->attn_heads, c->d);
    if (c->n_persist < 0 || c->n_persist > 4096)
      return titans__error(err, TITANS_ERR_ARG, "config: n_persist = %d, want 0..4096", c->n_persist);
  } else if (c->n_persist != 0) {
    return titans__error(err, TITANS_ERR_ARG, "config: the LMM block has no persistent tokens (n_persist = %d)", c->n_persist);
  }
  if ((c->block == TITANS_BLOCK_SWA || c->block == TITANS_BLOCK_MAG || c->block == TITANS_BLOCK_MAL) &&
      (c->window < 1 || c->window > 1 << 24))
    return titans__error(err, TITANS_ERR_ARG, "config: window = %d, want 1..2^24", c->window);
  if (c->block == TITANS_BLOCK_ATTN && (c->max_context < 1 || c->max_context > 1 << 24))
    return titans__error(err, TITANS_ERR_ARG, "config: max_context = %d, want 1..2^24", c->max_context);
  if (c->tied != 0 && c->tied != 1) return titans__error(err, TITANS_ERR_ARG, "config: tied must be 0 or 1");
  if (titans__has_mem(c->block)) {
    int rc = titans_mem_config_check(&c->mem, err);
    if (rc) return rc;
    if (c->mem.d != c->d) return titans__error(err, TITANS_ERR_ARG, "config: mem.d = %d differs from d = %d", c->mem.d, c->d);
  }
  if (c->block == TITANS_BLOCK_MAC && (c->segment < 1 || c->segment > 1 << 16 || c->segment % c->mem.chunk != 0))
    return titans__error(err, TITANS_ERR_ARG, "config: segment = %d must be a multiple of the chunk %d (and <= 65536)",
                         c->segment, c->mem.chunk);
  return TITANS_OK;
}

/* ---- parameter layout ------------------------------------------------------------------------- */

/* out = "layers.<l>." (no stdio needed). */
static void titans__layer_prefix(char *out, int l) {
  char digits[12];
  int n = 0;
  do {
    digits[n++] = (char)('0' + l % 10);
    l /= 10;
  } while (l > 0);
  memcpy(out, "layers.", 7);
  for (int i = 0; i < n; i++) out[7 + i] = digits[n - 1 - i];
  out[7 + n] = '.';
  out[8 + n] = 0;
}

/* The one place that fixes the model's parameter order and names. Records into list (may be NULL) and
   binds w (may be NULL; w->layers must have n_layers entries). Returns the parameter count; *offset
   advances to the total. */
static size_t titans__model_walk(const titans_config *c, titans_weights *w, float *slab, titans_param *list, size_t max,
                                 size_t *offset) {
  size_t count = 0, o, d = (size_t)c->d, ff = (size_t)c->ffn_hidden, V = (size_t)c->vocab;
  char prefix[64];
#define TITANS__PARAM(ptr, name, kind, nd, a, b_)                                                        \
  o = titans__param_push(list, max, &count, offset, prefix, name, kind, nd, a, b_, 0);                  \
  if (w) (ptr) = slab + o;
  prefix[0] = 0;
  TITANS__PARAM(w->tok_emb, "tok_emb", TITANS_PARAM_MATRIX, 2, V, d)
  for (int l = 0; l < c->n_layers; l++) {
    titans_layer dummy, *L = w ? &w->layers[l] : &dummy;
    if (w) memset(L, 0, sizeof *L);
    titans__layer_prefix(prefix, l);
    TITANS__PARAM(L->norm1, "norm1", TITANS_PARAM_GAIN, 1, d, 0)
    if (titans__has_attn(c->block)) {
      TITANS__PARAM(L->attn_wq, "attn.wq", TITANS_PARAM_MATRIX, 2, d, d)
      TITANS__PARAM(L->attn_wk, "attn.wk", TITANS_PARAM_MATRIX, 2, d, d)
      TITANS__PARAM(L->attn_wv, "attn.wv", TITANS_PARAM_MATRIX, 2, d, d)
      TITANS__PARAM(L->attn_wo, "attn.wo", TITANS_PARAM_MATRIX, 2, d, d)
      if (c->n_persist > 0) {
        TITANS__PARAM(L->persist, "persist", TITANS_PARAM_TOKENS, 2, (size_t)c->n_persist, d)
      }
    }
    if (titans__has_gate(c->block)) {
      TITANS__PARAM(L->gate_norm_y, "gate.norm_y", TITANS_PARAM_GAIN, 1, d, 0)
      TITANS__PARAM(L->gate_norm_m, "gate.norm_m", TITANS_PARAM_GAIN, 1, d, 0)
    }
    if (titans__has_mem(c->block)) {
      char mp[80];
      size_t pl = strlen(prefix);
      memcpy(mp, prefix, pl);
      memcpy(mp + pl, "mem.", 5);
      count += titans__mem_walk(&c->mem, w ? &L->mem : NULL, slab, list ? list + (count < max ? count : max) : NULL,
                                max > count ? max - count : 0, mp, offset);
    }
    TITANS__PARAM(L->norm2, "norm2", TITANS_PARAM_GAIN, 1, d, 0)
    TITANS__PARAM(L->ffn_w1, "ffn.w1", TITANS_PARAM_MATRIX, 2, ff, d)
    TITANS__PARAM(L->ffn_w3, "ffn.w3", TITANS_PARAM_MATRIX, 2, ff, d)
    TITANS__PARAM(L->ffn_w2, "ffn.w2", TITANS_PARAM_MATRIX, 2, d, ff)
  }
  prefix[0] = 0;
  TITANS__PARAM(w->norm_f, "norm_f", TITANS_PARAM_GAIN, 1, d, 0)
  if (!c->tied) {
    TITANS__PARAM(w->lm_head, "lm_head", TITANS_PARAM_MATRIX, 2, V, d)
  } else if (w) {
    w->lm_head = NULL;
  }
#undef TITANS__PARAM
  return count;
}

TITANSDEF void titans_weights_bind(titans_weights *w, titans_layer *layers, const titans_config *cfg, float *slab) {
  size_t offset = 0;
  w->layers = layers;
  titans__model_walk(cfg, w, slab, NULL, 0, &offset);
}

TITANSDEF int titans_model_init(titans_model *m, const titans_config *cfg) {
  memset(m, 0, sizeof *m);
  int rc = titans_config_check(cfg, m->error);
  if (rc) return rc;
  m->cfg = *cfg;
  /* Size first in double: a config whose parameter count is absurd is refused before any size_t
     arithmetic can wrap. */
  double per_layer = 4.0 * cfg->d * cfg->d + 3.0 * cfg->d * cfg->ffn_hidden + (double)cfg->n_persist * cfg->d;
  if (titans__has_mem(cfg->block)) per_layer += (double)titans_mem_param_count(&cfg->mem);
  double total = per_layer * cfg->n_layers + 2.0 * cfg->vocab * cfg->d;
  if (total > 4e9) return titans__error(m->error, TITANS_ERR_ARG, "model: %.3g parameters is more than this version supports", total);
  size_t offset = 0;
  m->n_params = titans__model_walk(cfg, NULL, NULL, NULL, 0, &offset);
  m->n_floats = offset;
  m->params = titans_alloc_floats(m->n_floats);
  m->plist = (titans_param *)titans_alloc_bytes(m->n_params, sizeof(titans_param));
  m->w.layers = (titans_layer *)titans_alloc_bytes((size_t)cfg->n_layers, sizeof(titans_layer));
  if (!m->params || !m->plist || !m->w.layers) {
    titans_model_free(m);
    return titans__error(m->error, TITANS_ERR_NOMEM, "model: cannot allocate %zu parameters", offset);
  }
  offset = 0;
  titans__model_walk(cfg, &m->w, m->params, m->plist, m->n_params, &offset);
  return TITANS_OK;
}

TITANSDEF void titans_model_free(titans_model *m) {
  titans_free(m->params);
  titans_free(m->plist);
  titans_free(m->w.layers);
  m->params = NULL;
  m->plist = NULL;
  m->w.layers = NULL;
}

TITANSDEF void titans_model_init_weights(titans_model *m, uint64_t seed) {
  const titans_config *c = &m->cfg;
  titans_rng rng;
  titans_rng_seed(&rng, seed);
  size_t d = (size_t)c->d, ff = (size_t)c->ffn_hidden;
  float out_std = 0.02f / sqrtf(2.0f * (float)c->n_layers);
  titans__fill_normal(m->w.tok_emb, (size_t)c->vocab * d, 0.02f, &rng);
  titans__fill_const(m->w.norm_f, d, 1.0f);
  if (m->w.lm_head) titans__fill_normal(m->w.lm_head, (size_t)c->vocab * d, 0.02f, &rng);
  for (int l = 0; l < c->n_layers; l++) {
    titans_layer *L = &m->w.layers[l];
    titans__fill_const(L->norm1, d, 1.0f);
    titans__fill_const(L->norm2, d, 1.0f);
    if (L->attn_wq) {
      titans__fill_normal(L->attn_wq, d * d, 0.02f, &rng);
      titans__fill_normal(L->attn_wk, d * d, 0.02f, &rng);
      titans__fill_normal(L->attn_wv, d * d, 0.02f, &rng);
      titans__fill_normal(L->attn_wo, d * d, out_std, &rng);
    }
    if (L->persist) titans__fill_normal(L->persist, (size_t)c->n_persist * d, 0.02f, &rng);
    if (L->gate_norm_y) {
      titans__fill_const(L->gate_norm_y, d, 1.0f);
      titans__fill_const(L->gate_norm_m, d, 1.0f);
    }
    if (titans__has_mem(c->block)) titans_mem_weights_init(&L->mem, &c->mem, &rng, c->n_layers);
    titans__fill_normal(L->ffn_w1, ff * d, 0.02f, &rng);
    titans__fill_normal(L->ffn_w3, ff * d, 0.02f, &rng);
    titans__fill_normal(L->ffn_w2, d * ff, out_std, &rng);
  }
}

/* ---- training schedule ------------------------------------------------------------------------ */

TITANSDEF titans_train_config titans_train_config_default(void) {
  titans_train_config t;
  t.lr = 4e-4f;
  t.min_lr = 4e-5f;
  t.warmup_steps = 100;
  t.total_steps = 10000;
  t.weight_decay = 0.1f;
  t.beta1 = 0.9f;
  t.beta2 = 0.95f;
  t.eps = 1e-8f;
  t.clip = 1.0f;
  return t;
}

TITANSDEF float titans_lr_at(const titans_train_config *tc, long step) {
  if (tc->warmup_steps > 0 && step < tc->warmup_steps) return tc->lr * (float)(step + 1) / (float)tc->warmup_steps;
  long span = tc->total_steps - tc->warmup_steps;
  if (span <= 0 || step >= tc->total_steps) return tc->min_lr;
  double progress = (double)(step - tc->warmup_steps) / (double)span;
  return tc->min_lr + (tc->lr - tc->min_lr) * (float)(0.5 * (1.0 + cos(3.141592653589793 * progress)));
}

/* ---- activation arena ------------------------------------------------------------------------- */

/* A bump allocator for one forward/backward: blocks are kept between steps; after a step that needed
   more than one block, they are merged into one of the peak size, so the steady state allocates
   nothing. */
#define TITANS__ARENA_BLOCKS 48
typedef struct titans__arena {
  float *blocks[TITANS__ARENA_BLOCKS];
  size_t sizes[TITANS__ARENA_BLOCKS];
  int count;
  size_t used;  /* floats used in the last block */
  size_t total; /* floats handed out since the last reset */
} titans__arena;

static float *titans__arena_alloc(titans__arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15; /* keep every buffer 64-byte aligned relative to its block */
  if (a->count > 0 && n <= a->sizes[a->count - 1] - a->used) {
    float *p = a->blocks[a->count - 1] + a->used;
    a->used += n;
    a->total += n;
    return p;
  }
  if (a->count == TITANS__ARENA_BLOCKS) return NULL;
  size_t size = a->count > 0 ? 2 * a->sizes[a->count - 1] : ((size_t)1 << 20);
  if (size < n) size = n;
  float *b = titans_alloc_floats(size);
  if (!b) return NULL;
  a->blocks[a->count] = b;
  a->sizes[a->count] = size;
  a->count++;
  a->used = n;
  a->total += n;
  return b;
}

/* Zeroed floats */
static float *titans__arena_zalloc(titans__arena *a, size_t n) {
  float *p = titans__arena_alloc(a, n);
  if (p) memset(p, 0, n * sizeof(float));
  return p;
}

static void titans__arena_reset(titans__arena *a) {
  if (a->count > 1) {
    size_t peak = a->total;
    for (int i = 0; i < a->count; i++) titans_free(a->blocks[i]);
    a->count = 0;
    float *b = titans_alloc_floats(peak);
    if (b) {
      a->blocks[0] = b;
      a->sizes[0] = peak;
      a->count = 1;
    }
  }
  a->used = 0;
  a->total = 0;
}

static void titans__arena_free(titans__arena *a) {
  for (int i = 0; i < a->count; i++) titans_free(a->blocks[i]);
  memset(a, 0, sizeof *a);
}

/* n positions start, start + 1, ... (int64 storage carved from the float arena) */
static int64_t *titans__arena_positions(titans__arena *a, size_t n, int64_t start) {
  int64_t *p = (int64_t *)(void *)titans__arena_alloc(a, 2 * n + 2);
  if (p)
    for (size_t i = 0; i < n; i++) p[i] = start + (int64_t)i;
  return p;
}

/* ---- attention sublayer: projections, RoPE, masked attention, output projection -------------- */

typedef struct titans__attn_save {
  float *q;   /* [B, Tq, d] after RoPE */
  float *k;   /* [B, P + Tk, d] (positioned rows after RoPE) */
  float *v;   /* [B, P + Tk, d] */
  float *att; /* [B, Tq, d] attention output (input of wo) */
  float *lse; /* [B, Tq, H] */
} titans__attn_save;

/* out [B, Tq, d] = wo Attn(wq xq, wk src, wv src): src [B, P + Tk, d] holds the always-visible prefix rows
   (no RoPE) then the positioned rows (positions kpos); queries at qpos. */
static int titans__attn_sub_forward(const titans_config *c, const titans_layer *L, titans__arena *ar,
                                    titans__attn_save *sv, float *out, const float *xq, const float *src,
                                    const int64_t *qpos, const int64_t *kpos, size_t B, size_t Tq, size_t P, size_t Tk,
                                    int64_t window) {
  size_t d = (size_t)c->d, H = (size_t)c->attn_heads, da = d / H, S = P + Tk;
  sv->q = titans__arena_alloc(ar, B * Tq * d);
  sv->k = titans__arena_alloc(ar, B * S * d);
  sv->v = titans__arena_alloc(ar, B * S * d);
  sv->att = titans__arena_alloc(ar, B * Tq * d);
  sv->lse = titans__arena_alloc(ar, B * Tq * H);
  if (!sv->q || !sv->k || !sv->v || !sv->att || !sv->lse) return TITANS_ERR_NOMEM;
  titans_gemm(0, 1, B * Tq, d, d, 1.0f, xq, d, L->attn_wq, d, 0.0f, sv->q, d);
  titans_gemm(0, 1, B * S, d, d, 1.0f, src, d, L->attn_wk, d, 0.0f, sv->k, d);
  titans_gemm(0, 1, B * S, d, d, 1.0f, src, d, L->attn_wv, d, 0.0f, sv->v, d);
  for (size_t b = 0; b < B; b++) {
    titans_rope_forward(sv->q + b * Tq * d, qpos, Tq, H, da);
    titans_rope_forward(sv->k + (b * S + P) * d, kpos, Tk, H, da);
    int rc = titans_attention_forward(sv->att + b * Tq * d, sv->lse + b * Tq * H, sv->q + b * Tq * d, sv->k + b * S * d,
                                      sv->v + b * S * d, qpos, kpos, Tq, P, Tk, H, da, window);
    if (rc) return rc;
  }
  titans_gemm(0, 1, B * Tq, d, d, 1.0f, sv->att, d, L->attn_wo, d, 0.0f, out, d);
  return TITANS_OK;
}

/* Backward of titans__attn_sub_forward: accumulates dxq [B, Tq, d], dsrc [B, P + Tk, d] and G's attention
   weights. */
static int titans__attn_sub_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                     titans__arena *ar, const titans__attn_save *sv, float *dxq, float *dsrc,
                                     const float *dout, const float *xq, const float *src, const int64_t *qpos,
                                     const int64_t *kpos, size_t B, size_t Tq, size_t P, size_t Tk, int64_t window) {
  size_t d = (size_t)c->d, H = (size_t)c->attn_heads, da = d / H, S = P + Tk;
  float *datt = titans__arena_alloc(ar, B * Tq * d), *dq = titans__arena_zalloc(ar, B * Tq * d);
  float *dk = titans__arena_zalloc(ar, B * S * d), *dv = titans__arena_zalloc(ar, B * S * d);
  if (!datt || !dq || !dk || !dv) return TITANS_ERR_NOMEM;
  /* out = att wo^T */
  titans_gemm(1, 0, d, d, B * Tq, 1.0f, dout, d, sv->att, d, 1.0f, G->attn_wo, d);
  titans_gemm(0, 0, B * Tq, d, d, 1.0f, dout, d, L->attn_wo, d, 0.0f, datt, d);
  for (size_t b = 0; b < B; b++) {
    int rc = titans_attention_backward(dq + b * Tq * d, dk + b * S * d, dv + b * S * d, datt + b * Tq * d,
                                       sv->q + b * Tq * d, sv->k + b * S * d, sv->v + b * S * d, sv->att + b * Tq * d,
                                       sv->lse + b * Tq * H, qpos, kpos, Tq, P, Tk, H, da, window);
    if (rc) return rc;
    titans_rope_backward(dq + b * Tq * d, qpos, Tq, H, da);
    titans_rope_backward(dk + (b * S + P) * d, kpos, Tk, H, da);
  }
  /* q = xq wq^T, k = src wk^T, v = src wv^T */
  titans_gemm(1, 0, d, d, B * Tq, 1.0f, dq, d, xq, d, 1.0f, G->attn_wq, d);
  titans_gemm(0, 0, B * Tq, d, d, 1.0f, dq, d, L->attn_wq, d, 1.0f, dxq, d);
  titans_gemm(1, 0, d, d, B * S, 1.0f, dk, d, src, d, 1.0f, G->attn_wk, d);
  titans_gemm(0, 0, B * S, d, d, 1.0f, dk, d, L->attn_wk, d, 1.0f, dsrc, d);
  titans_gemm(1, 0, d, d, B * S, 1.0f, dv, d, src, d, 1.0f, G->attn_wv, d);
  titans_gemm(0, 0, B * S, d, d, 1.0f, dv, d, L->attn_wv, d, 1.0f, dsrc, d);
  return TITANS_OK;
}

/* ---- Gate(y, m) = RMSNorm(y; norm_y) * sigmoid(RMSNorm(m; norm_m)) ------------------------------ */

typedef struct titans__gate_save {
  float *yn, *sg;        /* [rows, d] RMSNorm(y), sigmoid(RMSNorm(m)) */
  float *rstd_y, *rstd_m; /* [rows] */
} titans__gate_save;

static int titans__gate_forward(titans__arena *ar, titans__gate_save *sv, float *out, const float *y, const float *m,
                                const float *norm_y, const float *norm_m, size_t rows, size_t d) {
  sv->yn = titans__arena_alloc(ar, rows * d);
  sv->sg = titans__arena_alloc(ar, rows * d);
  sv->rstd_y = titans__arena_alloc(ar, rows);
  sv->rstd_m = titans__arena_alloc(ar, rows);
  if (!sv->yn || !sv->sg || !sv->rstd_y || !sv->rstd_m) return TITANS_ERR_NOMEM;
  titans_rmsnorm_forward(sv->yn, sv->rstd_y, y, norm_y, rows, d);
  titans_rmsnorm_forward(sv->sg, sv->rstd_m, m, norm_m, rows, d);
  titans_sigmoid_forward(sv->sg, sv->sg, rows * d);
  for (size_t j = 0; j < rows * d; j++) out[j] = sv->yn[j] * sv->sg[j];
  return TITANS_OK;
}

/* accumulates dy, dm [rows, d] and the gains' gradients */
static int titans__gate_backward(titans__arena *ar, const titans__gate_save *sv, float *dy, float *dm, float *dnorm_y,
                                 float *dnorm_m, const float *dout, const float *y, const float *m, const float *norm_y,
                                 const float *norm_m, size_t rows, size_t d) {
  float *dyn = titans__arena_alloc(ar, rows * d), *dmn = titans__arena_alloc(ar, rows * d);
  if (!dyn || !dmn) return TITANS_ERR_NOMEM;
  for (size_t j = 0; j < rows * d; j++) {
    float s = sv->sg[j];
    dyn[j] = dout[j] * s;
    dmn[j] = dout[j] * sv->yn[j] * s * (1.0f - s);
  }
  titans_rmsnorm_backward(dy, dnorm_y, dyn, y, norm_y, sv->rstd_y, rows, d);
  titans_rmsnorm_backward(dm, dnorm_m, dmn, m, norm_m, sv->rstd_m, rows, d);
  return TITANS_OK;
}

/* ---- SwiGLU FFN: w2 (SiLU(w1 x) * (w3 x)) ------------------------------------------------------- */

typedef struct titans__ffn_save {
  float *u1, *u3, *act; /* [rows, d_ff] w1 x, w3 x, SiLU(u1) * u3 */
} titans__ffn_save;

static int titans__ffn_forward(const titans_config *c, const titans_layer *L, titans__arena *ar, titans__ffn_save *sv,
                               float *out, const float *x, size_t rows) {
  size_t d = (size_t)c->d, ff = (size_t)c->ffn_hidden;
  sv->u1 = titans__arena_alloc(ar, rows * ff);
  sv->u3 = titans__arena_alloc(ar, rows * ff);
  sv->act = titans__arena_alloc(ar, rows * ff);
  if (!sv->u1 || !sv->u3 || !sv->act) return TITANS_ERR_NOMEM;
  titans_gemm(0, 1, rows, ff, d, 1.0f, x, d, L->ffn_w1, d, 0.0f, sv->u1, ff);
  titans_gemm(0, 1, rows, ff, d, 1.0f, x, d, L->ffn_w3, d, 0.0f, sv->u3, ff);
  titans_silu_forward(sv->act, sv->u1, rows * ff);
  for (size_t j = 0; j < rows * ff; j++) sv->act[j] *= sv->u3[j];
  titans_gemm(0, 1, rows, d, ff, 1.0f, sv->act, ff, L->ffn_w2, ff, 0.0f, out, d);
  return TITANS_OK;
}

/* accumulates dx [rows, d] and G's FFN weights */
static int titans__ffn_backward(const titans_config *c, const titans_layer *L, const titans_layer *G, titans__arena *ar,
                                const titans__ffn_save *sv, float *dx, const float *dout, const float *x, size_t rows) {
  size_t d = (size_t)c->d, ff = (size_t)c->ffn_hidden;
  float *dact = titans__arena_alloc(ar, rows * ff), *du1 = titans__arena_zalloc(ar, rows * ff);
  float *du3 = titans__arena_alloc(ar, rows * ff);
  if (!dact || !du1 || !du3) return TITANS_ERR_NOMEM;
  titans_gemm(1, 0, d, ff, rows, 1.0f, dout, d, sv->act, ff, 1.0f, G->ffn_w2, ff);
  titans_gemm(0, 0, rows, ff, d, 1.0f, dout, d, L->ffn_w2, ff, 0.0f, dact, ff);
  /* act = SiLU(u1) * u3: du3 = dact * SiLU(u1) (= act / u3, recomputed to avoid the division), du1 via SiLU' */
  titans_silu_forward(du3, sv->u1, rows * ff);
  for (size_t j = 0; j < rows * ff; j++) {
    du3[j] *= dact[j];
    dact[j] *= sv->u3[j];
  }
  titans_silu_backward(du1, dact, sv->u1, rows * ff);
  titans_gemm(1, 0, ff, d, rows, 1.0f, du1, ff, x, d, 1.0f, G->ffn_w1, d);
  titans_gemm(1, 0, ff, d, rows, 1.0f, du3, ff, x, d, 1.0f, G->ffn_w3, d);
  titans_gemm(0, 0, rows, d, ff, 1.0f, du1, ff, L->ffn_w1, d, 1.0f, dx, d);
  titans_gemm(0, 0, rows, d, ff, 1.0f, du3, ff, L->ffn_w3, d, 1.0f, dx, d);
  return TITANS_OK;
}

/* ---- per-layer activations -------------------------------------------------------------------- */

typedef struct titans__mac_seg {
  size_t t0, n;        /* first position and length of the segment */
  float *xs;           /* [B, n, d] the segment of the normalised block input */
  float *hm;           /* [B, n, d] retrieved memory (MAC step 1) */
  float *src;          /* [B, P + 2n, d] persist || Hm || X */
  float *y;            /* [B, n, d] attention output (step 2) */
  float *mm;           /* [B, n, d] memory output (step 3) */
  int64_t *kpos;       /* [2n] 0..n-1, 0..n-1 */
  titans__attn_save at;
  titans__gate_save gate;
} titans__mac_seg;

typedef struct titans__layer_fwd {
  const float *x_in;     /* [B, T, d] block input */
  float *xn, *rstd1;     /* [B, T, d] RMSNorm(x; norm1), [B * T] */
  float *mix;            /* [B, T, d] mixer output */
  float *h, *hn, *rstd2; /* [B, T, d] x + mix, RMSNorm(h; norm2), [B * T] */
  titans__ffn_save ffn;
  float *src;            /* [B, P + T, d] key source / memory input: persist || xn (MAL: the memory output) */
  float *mem_in;         /* [B, N_p + T, d] memory input (MAG, MAL; LMM: xn) */
  float *mem_out;        /* [B, N_p + T, d] memory output (MAG, MAL; LMM: [B, T, d]) */
  float *y, *m;          /* [B, T, d] MAG: gate inputs; MAL: y = the attention's queries */
  titans__attn_save at;
  titans__gate_save gate;
  titans__mac_seg *segs; /* [nseg] (MAC) */
  size_t nseg;
  titans_mem_state st;   /* kept between steps */
  int st_ready;
  titans_mem_ctx *ctxs;  /* [nctx] kept between steps (MAC: 2 per segment) */
  size_t nctx;
} titans__layer_fwd;

struct titans__fwd {
  size_t B, T;
  titans__arena arena;
  titans__layer_fwd *layers; /* [n_layers] */
  int *inputs, *targets;     /* [B * T] */
  int64_t *pos;              /* [T] 0..T-1 */
  float **x;                 /* [n_layers + 1] residual stream: x[0] embeddings, x[l + 1] block l's output */
  float *xf, *rstdf;         /* [B, T, d] final norm, [B * T] */
  float *logits;             /* [B, T, V] */
};

static titans_mem_ctx *titans__layer_ctx(titans__layer_fwd *lf, size_t i) {
  if (i >= lf->nctx) {
    size_t n = i + 1 > 2 * lf->nctx ? i + 1 : 2 * lf->nctx;
    titans_mem_ctx *c = (titans_mem_ctx *)titans_alloc_bytes(n, sizeof(titans_mem_ctx));
    if (!c) return NULL;
    if (lf->ctxs) memcpy(c, lf->ctxs, lf->nctx * sizeof(titans_mem_ctx));
    for (size_t j = lf->nctx; j < n; j++) titans_mem_ctx_init(&c[j]);
    titans_free(lf->ctxs);
    lf->ctxs = c;
    lf->nctx = n;
  }
  return &lf->ctxs[i];
}

/* (Re)creates the layer's memory state for batch B and resets it to w0. */
static int titans__layer_state(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf, size_t B) {
  if (!lf->st_ready || lf->st.batch != B) {
    if (lf->st_ready) titans_mem_state_free(&lf->st);
    lf->st_ready = 0;
    if (titans_mem_state_init(&lf->st, &c->mem, B)) return TITANS_ERR_NOMEM;
    lf->st_ready = 1;
  }
  titans_mem_state_reset(&lf->st, &L->mem);
  return TITANS_OK;
}

/* dst [B, P + T, d] = prefix rows || body rows, per batch row. prefix [P, d] is shared by the rows when
   prefix_stride is 0, else row b's prefix starts at prefix + b * prefix_stride. */
static void titans__concat_prefix(float *dst, const float *prefix, size_t prefix_stride, const float *body, size_t B,
                                  size_t P, size_t T, size_t d) {
  for (size_t b = 0; b < B; b++) {
    float *o = dst + b * (P + T) * d;
    if (P) memcpy(o, prefix + b * prefix_stride, P * d * sizeof(float));
    memcpy(o + P * d, body + b * T * d, T * d * sizeof(float));
  }
}

/* The inverse split of a gradient [B, P + T, d]: prefix rows summed over the batch into dprefix (when
   not NULL), body rows added into dbody [B, T, d]. */
static void titans__split_prefix_grad(float *dprefix, float *dbody, const float *dsrc, size_t B, size_t P, size_t T,
                                      size_t d) {
  for (size_t b = 0; b < B; b++) {
    const float *s = dsrc + b * (P + T) * d;
    if (P && dprefix) titans__axpy(dprefix, 1.0f, s, P * d);
    titans__axpy(dbody + b * T * d, 1.0f, s + P * d, T * d);
  }
}

/* rows [t0, t0 + n) of every batch row of src [B, T, d] into dst [B, n, d] (add = 0) or added (add = 1) */
static void titans__rows_slice(float *dst, const float *src, size_t B, size_t T, size_t t0, size_t n, size_t d, int add) {
  for (size_t b = 0; b < B; b++) {
    if (add) titans__axpy(dst + b * n * d, 1.0f, src + (b * T + t0) * d, n * d);
    else memcpy(dst + b * n * d, src + (b * T + t0) * d, n * d * sizeof(float));
  }
}

/* the reverse: src [B, n, d] into rows [t0, t0 + n) of dst [B, T, d] (add: accumulate) */
static void titans__rows_unslice(float *dst, const float *src, size_t B, size_t T, size_t t0, size_t n, size_t d, int add) {
  for (size_t b = 0; b < B; b++) {
    if (add) titans__axpy(dst + (b * T + t0) * d, 1.0f, src + b * n * d, n * d);
    else memcpy(dst + (b * T + t0) * d, src + b * n * d, n * d * sizeof(float));
  }
}

#define TITANS__TRY(expr)        \
  do {                           \
    int titans__rc_ = (expr);    \
    if (titans__rc_) return titans__rc_; \
  } while (0)
#define TITANS__NEED(ptr)        \
  do {                           \
    if (!(ptr)) return TITANS_ERR_NOMEM; \
  } while (0)

/* ---- mixers ------------------------------------------------------------------------------------ */

static int64_t titans__window(const titans_config *c) {
  return c->block == TITANS_BLOCK_ATTN ? 0 : (int64_t)c->window;
}

/* ATTN, SWA, MAG, MAL: xn (or y for MAL) attends over src = prefix || body at positions 0..T-1. */
static int titans__mixer_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf, titans__arena *ar,
                                 const int64_t *pos, size_t B, size_t T);
static int titans__mixer_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                  titans__layer_fwd *lf, titans__arena *ar, float *dxn, const float *dmix,
                                  const int64_t *pos, size_t B, size_t T);

static int titans__mac_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf, titans__arena *ar,
                               size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist, C = (size_t)c->segment;
  lf->nseg = (T + C - 1) / C;
  lf->segs = (titans__mac_seg *)(void *)titans__arena_alloc(ar, lf->nseg * (sizeof(titans__mac_seg) / sizeof(float) + 1));
  /* all contexts first: growing the pool moves it, so no pointer into it is taken before */
  TITANS__NEED(lf->segs && titans__layer_ctx(lf, 2 * lf->nseg - 1));
  TITANS__TRY(titans__layer_state(c, L, lf, B));
  for (size_t s = 0; s < lf->nseg; s++) {
    titans__mac_seg *sg = &lf->segs[s];
    size_t n = T - s * C < C ? T - s * C : C;
    sg->t0 = s * C;
    sg->n = n;
    sg->xs = titans__arena_alloc(ar, B * n * d);
    sg->hm = titans__arena_alloc(ar, B * n * d);
    sg->src = titans__arena_alloc(ar, B * (P + 2 * n) * d);
    sg->y = titans__arena_alloc(ar, B * n * d);
    sg->mm = titans__arena_alloc(ar, B * n * d);
    sg->kpos = (int64_t *)(void *)titans__arena_alloc(ar, 4 * n + 2);
    titans_mem_ctx *cr = &lf->ctxs[2 * s], *cu = &lf->ctxs[2 * s + 1];
    TITANS__NEED(sg->xs && sg->hm && sg->src && sg->y && sg->mm && sg->kpos && cr && cu);
    for (size_t i = 0; i < n; i++) sg->kpos[i] = sg->kpos[n + i] = (int64_t)i;
    titans__rows_slice(sg->xs, lf->xn, B, T, sg->t0, n, d, 0);
    /* 1. retrieve with the weights committed at the segment's start */
    TITANS__TRY(titans_mem_retrieve(&c->mem, &L->mem, &lf->st, sg->hm, sg->xs, n, cr));
    /* 2. attention over persist || Hm || X, local positions */
    for (size_t b = 0; b < B; b++) {
      float *o = sg->src + b * (P + 2 * n) * d;
      if (P) memcpy(o, L->persist, P * d * sizeof(float));
      memcpy(o + P * d, sg->hm + b * n * d, n * d * sizeof(float));
      memcpy(o + (P + n) * d, sg->xs + b * n * d, n * d * sizeof(float));
    }
    TITANS__TRY(titans__attn_sub_forward(c, L, ar, &sg->at, sg->y, sg->xs, sg->src, sg->kpos, sg->kpos, B, n, P, 2 * n, 0));
    /* 3. the memory learns from the attention output */
    TITANS__TRY(titans_mem_forward(&c->mem, &L->mem, &lf->st, sg->mm, sg->y, n, cu));
    /* 4. gate */
    float *out = titans__arena_alloc(ar, B * n * d);
    TITANS__NEED(out);
    TITANS__TRY(titans__gate_forward(ar, &sg->gate, out, sg->y, sg->mm, L->gate_norm_y, L->gate_norm_m, B * n, d));
    titans__rows_unslice(lf->mix, out, B, T, sg->t0, n, d, 0);
  }
  return TITANS_OK;
}

static int titans__mac_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                titans__layer_fwd *lf, titans__arena *ar, float *dxn, const float *dmix, size_t B,
                                size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist;
  titans__mem_dims m = titans__mem_get_dims(&c->mem);
  size_t dstate = B * m.H * 2 * m.head_size, dtail = 4 * B * (m.K > 0 ? m.K - 1 : 0) * m.dm;
  const float *dnext_state = NULL, *dnext_tail_u = NULL, *dnext_tail_r = NULL;
  for (size_t s = lf->nseg; s-- > 0;) {
    titans__mac_seg *sg = &lf->segs[s];
    size_t n = sg->n, S = P + 2 * n;
    titans_mem_ctx *cr = &lf->ctxs[2 * s], *cu = &lf->ctxs[2 * s + 1];
    float *dout = titans__arena_alloc(ar, B * n * d), *dy = titans__arena_zalloc(ar, B * n * d);
    float *dmm = titans__arena_zalloc(ar, B * n * d), *dxs = titans__arena_zalloc(ar, B * n * d);
    float *dsrc = titans__arena_zalloc(ar, B * S * d), *dhm = titans__arena_zalloc(ar, B * n * d);
    TITANS__NEED(dout && dy && dmm && dxs && dsrc && dhm);
    titans__rows_slice(dout, dmix, B, T, sg->t0, n, d, 0);
    TITANS__TRY(titans__gate_backward(ar, &sg->gate, dy, dmm, G->gate_norm_y, G->gate_norm_m, dout, sg->y, sg->mm,
                                      L->gate_norm_y, L->gate_norm_m, B * n, d));
    /* the update of segment s feeds every later segment through the state it leaves */
    if (dnext_state) {
      memcpy(cu->dstate_final, dnext_state, dstate * sizeof(float));
      memcpy(cu->dtails_final, dnext_tail_u, dtail * sizeof(float));
    }
    TITANS__TRY(titans_mem_backward(&c->mem, &L->mem, &G->mem, dy, dmm, sg->y, cu, 0));
    TITANS__TRY(titans__attn_sub_backward(c, L, G, ar, &sg->at, dxs, dsrc, dy, sg->xs, sg->src, sg->kpos, sg->kpos, B,
                                          n, P, 2 * n, 0));
    for (size_t b = 0; b < B; b++) {
      const float *o = dsrc + b * S * d;
      if (P) titans__axpy(G->persist, 1.0f, o, P * d);
      titans__axpy(dhm + b * n * d, 1.0f, o + P * d, n * d);
      titans__axpy(dxs + b * n * d, 1.0f, o + (P + n) * d, n * d);
    }
    /* the retrieval read the state the update started from; its conv tail is the X stream's */
    memcpy(cr->dstate_final, cu->dstate_init, dstate * sizeof(float));
    if (dnext_tail_r) memcpy(cr->dtails_final, dnext_tail_r, dtail * sizeof(float));
    TITANS__TRY(titans_mem_backward(&c->mem, &L->mem, &G->mem, dxs, dhm, sg->xs, cr, s == 0));
    /* the update stream's tails of segment s - 1 are read by this update; the X stream's by this retrieval */
    dnext_state = cr->dstate_init;
    dnext_tail_u = cu->dtails_init;
    dnext_tail_r = cr->dtails_init;
    titans__rows_unslice(dxn, dxs, B, T, sg->t0, n, d, 1);
  }
  return TITANS_OK;
}

static int titans__mixer_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf, titans__arena *ar,
                                 const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist;
  switch (c->block) {
    case TITANS_BLOCK_ATTN:
    case TITANS_BLOCK_SWA:
      TITANS__NEED(lf->src = titans__arena_alloc(ar, B * (P + T) * d));
      titans__concat_prefix(lf->src, L->persist, 0, lf->xn, B, P, T, d);
      return titans__attn_sub_forward(c, L, ar, &lf->at, lf->mix, lf->xn, lf->src, pos, pos, B, T, P, T, titans__window(c));
    case TITANS_BLOCK_MAG: {
      TITANS__NEED(lf->src = titans__arena_alloc(ar, B * (P + T) * d));
      TITANS__NEED(lf->y = titans__arena_alloc(ar, B * T * d));
      TITANS__NEED(lf->m = titans__arena_alloc(ar, B * T * d));
      TITANS__NEED(lf->mem_out = titans__arena_alloc(ar, B * (P + T) * d));
      titans_mem_ctx *cx = titans__layer_ctx(lf, 0);
      TITANS__NEED(cx);
      titans__concat_prefix(lf->src, L->persist, 0, lf->xn, B, P, T, d);
      lf->mem_in = lf->src;
      TITANS__TRY(titans__attn_sub_forward(c, L, ar, &lf->at, lf->y, lf->xn, lf->src, pos, pos, B, T, P, T, titans__window(c)));
      TITANS__TRY(titans__layer_state(c, L, lf, B));
      TITANS__TRY(titans_mem_forward(&c->mem, &L->mem, &lf->st, lf->mem_out, lf->mem_in, P + T, cx));
      for (size_t b = 0; b < B; b++) memcpy(lf->m + b * T * d, lf->mem_out + (b * (P + T) + P) * d, T * d * sizeof(float));
      return titans__gate_forward(ar, &lf->gate, lf->mix, lf->y, lf->m, L->gate_norm_y, L->gate_norm_m, B * T, d);
    }
    case TITANS_BLOCK_MAL: {
      TITANS__NEED(lf->mem_in = titans__arena_alloc(ar, B * (P + T) * d));
      TITANS__NEED(lf->mem_out = titans__arena_alloc(ar, B * (P + T) * d));
      TITANS__NEED(lf->y = titans__arena_alloc(ar, B * T * d));
      titans_mem_ctx *cx = titans__layer_ctx(lf, 0);
      TITANS__NEED(cx);
      titans__concat_prefix(lf->mem_in, L->persist, 0, lf->xn, B, P, T, d);
      TITANS__TRY(titans__layer_state(c, L, lf, B));
      TITANS__TRY(titans_mem_forward(&c->mem, &L->mem, &lf->st, lf->mem_out, lf->mem_in, P + T, cx));
      for (size_t b = 0; b < B; b++) memcpy(lf->y + b * T * d, lf->mem_out + (b * (P + T) + P) * d, T * d * sizeof(float));
      lf->src = lf->mem_out; /* the memory's outputs at the persistent positions are the visible prefix */
      return titans__attn_sub_forward(c, L, ar, &lf->at, lf->mix, lf->y, lf->src, pos, pos, B, T, P, T, titans__window(c));
    }
    case TITANS_BLOCK_LMM: {
      titans_mem_ctx *cx = titans__layer_ctx(lf, 0);
      TITANS__NEED(cx);
      TITANS__TRY(titans__layer_state(c, L, lf, B));
      return titans_mem_forward(&c->mem, &L->mem, &lf->st, lf->mix, lf->xn, T, cx);
    }
    case TITANS_BLOCK_MAC:
      return titans__mac_forward(c, L, lf, ar, B, T);
    default:
      return TITANS_ERR_ARG;
  }
}

static int titans__mixer_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                  titans__layer_fwd *lf, titans__arena *ar, float *dxn, const float *dmix,
                                  const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, P = (size_t)c->n_persist;
  switch (c->block) {
    case TITANS_BLOCK_ATTN:
    case TITANS_BLOCK_SWA: {
      float *dsrc = titans__arena_zalloc(ar, B * (P + T) * d);
      TITANS__NEED(dsrc);
      TITANS__TRY(titans__attn_sub_backward(c, L, G, ar, &lf->at, dxn, dsrc, dmix, lf->xn, lf->src, pos, pos, B, T, P, T,
                                            titans__window(c)));
      titans__split_prefix_grad(G->persist, dxn, dsrc, B, P, T, d);
      return TITANS_OK;
    }
    case TITANS_BLOCK_MAG: {
      float *dy = titans__arena_zalloc(ar, B * T * d), *dm = titans__arena_zalloc(ar, B * T * d);
      float *dsrc = titans__arena_zalloc(ar, B * (P + T) * d), *dmo = titans__arena_zalloc(ar, B * (P + T) * d);
      TITANS__NEED(dy && dm && dsrc && dmo);
      TITANS__TRY(titans__gate_backward(ar, &lf->gate, dy, dm, G->gate_norm_y, G->gate_norm_m, dmix, lf->y, lf->m,
                                        L->gate_norm_y, L->gate_norm_m, B * T, d));
      TITANS__TRY(titans__attn_sub_backward(c, L, G, ar, &lf->at, dxn, dsrc, dy, lf->xn, lf->src, pos, pos, B, T, P, T,
                                            titans__window(c)));
      for (size_t b = 0; b < B; b++) memcpy(dmo + (b * (P + T) + P) * d, dm + b * T * d, T * d * sizeof(float));
      TITANS__TRY(titans_mem_backward(&c->mem, &L->mem, &G->mem, dsrc, dmo, lf->mem_in, &lf->ctxs[0], 1));
      titans__split_prefix_grad(G->persist, dxn, dsrc, B, P, T, d);
      return TITANS_OK;
    }
    case TITANS_BLOCK_MAL: {
      float *dyq = titans__arena_zalloc(ar, B * T * d), *dmo = titans__arena_zalloc(ar, B * (P + T) * d);
      float *dmi = titans__arena_zalloc(ar, B * (P + T) * d);
      TITANS__NEED(dyq && dmo && dmi);
      TITANS__TRY(titans__attn_sub_backward(c, L, G, ar, &lf->at, dyq, dmo, dmix, lf->y, lf->src, pos, pos, B, T, P, T,
                                            titans__window(c)));
      for (size_t b = 0; b < B; b++) titans__axpy(dmo + (b * (P + T) + P) * d, 1.0f, dyq + b * T * d, T * d);
      TITANS__TRY(titans_mem_backward(&c->mem, &L->mem, &G->mem, dmi, dmo, lf->mem_in, &lf->ctxs[0], 1));
      titans__split_prefix_grad(G->persist, dxn, dmi, B, P, T, d);
      return TITANS_OK;
    }
    case TITANS_BLOCK_LMM:
      return titans_mem_backward(&c->mem, &L->mem, &G->mem, dxn, dmix, lf->xn, &lf->ctxs[0], 1);
    case TITANS_BLOCK_MAC:
      return titans__mac_backward(c, L, G, lf, ar, dxn, dmix, B, T);
    default:
      return TITANS_ERR_ARG;
  }
}

/* ---- blocks ------------------------------------------------------------------------------------ */

/* x_out [B, T, d] = h + FFN(RMSNorm(h)), h = x + Mixer(RMSNorm(x)) */
static int titans__block_forward(const titans_config *c, const titans_layer *L, titans__layer_fwd *lf, titans__arena *ar,
                                 float *x_out, const float *x, const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, n = B * T;
  lf->x_in = x;
  TITANS__NEED(lf->xn = titans__arena_alloc(ar, n * d));
  TITANS__NEED(lf->rstd1 = titans__arena_alloc(ar, n));
  TITANS__NEED(lf->mix = titans__arena_alloc(ar, n * d));
  TITANS__NEED(lf->h = titans__arena_alloc(ar, n * d));
  TITANS__NEED(lf->hn = titans__arena_alloc(ar, n * d));
  TITANS__NEED(lf->rstd2 = titans__arena_alloc(ar, n));
  titans_rmsnorm_forward(lf->xn, lf->rstd1, x, L->norm1, n, d);
  TITANS__TRY(titans__mixer_forward(c, L, lf, ar, pos, B, T));
  for (size_t j = 0; j < n * d; j++) lf->h[j] = x[j] + lf->mix[j];
  titans_rmsnorm_forward(lf->hn, lf->rstd2, lf->h, L->norm2, n, d);
  TITANS__TRY(titans__ffn_forward(c, L, ar, &lf->ffn, x_out, lf->hn, n));
  for (size_t j = 0; j < n * d; j++) x_out[j] += lf->h[j];
  return TITANS_OK;
}

/* dx [B, T, d] (written) from dx_out */
static int titans__block_backward(const titans_config *c, const titans_layer *L, const titans_layer *G,
                                  titans__layer_fwd *lf, titans__arena *ar, float *dx, const float *dx_out,
                                  const int64_t *pos, size_t B, size_t T) {
  size_t d = (size_t)c->d, n = B * T;
  float *dh = titans__arena_alloc(ar, n * d), *dhn = titans__arena_zalloc(ar, n * d);
  float *dxn = titans__arena_zalloc(ar, n * d);
  TITANS__NEED(dh && dhn && dxn);
  memcpy(dh, dx_out, n * d * sizeof(float));
  TITANS__TRY(titans__ffn_backward(c, L, G, ar, &lf->ffn, dhn, dx_out, lf->hn, n));
  titans_rmsnorm_backward(dh, G->norm2, dhn, lf->h, L->norm2, lf->rstd2, n, d);
  TITANS__TRY(titans__mixer_backward(c, L, G, lf, ar, dxn, dh, pos, B, T));
  memcpy(dx, dh, n * d * sizeof(float));
  titans_rmsnorm_backward(dx, G->norm1, dxn, lf->x_in, L->norm1, lf->rstd1, n, d);
  return TITANS_OK;
}

/* ---- the whole model -------------------------------------------------------------------------- */

static void titans__fwd_free(struct titans__fwd *f, int n_layers) {
  if (!f) return;
  titans__arena_free(&f->arena);
  if (f->layers) {
    for (int l = 0; l < n_layers; l++) {
      titans__layer_fwd *lf = &f->layers[l];
      if (lf->st_ready) titans_mem_state_free(&lf->st);
      for (size_t i = 0; i < lf->nctx; i++) titans_mem_ctx_free(&lf->ctxs[i]);
      titans_free(lf->ctxs);
    }
    titans_free(f->layers);
  }
  titans_free(f->x);
  titans_free(f);
}

/* Forward of inputs [B, T] (tokens [B, T + 1] when with_targets: inputs and next-token targets) up to
   the logits, saving every activation in t->fwd. */
static int titans__model_forward(titans_trainer *t, const int *tokens, size_t B, size_t T, int with_targets) {
  titans_model *mo = t->model;
  const titans_config *c = &mo->cfg;
  struct titans__fwd *f = t->fwd;
  size_t d = (size_t)c->d, V = (size_t)c->vocab, n = B * T, stride = with_targets ? T + 1 : T;
  if (B == 0 || T == 0 || n / B != T || n > ((size_t)1 << 31))
    return titans__error(t->error, TITANS_ERR_ARG, "forward: batch %zu x length %zu is out of range", B, T);
  titans__arena_reset(&f->arena);
  titans__arena *ar = &f->arena;
  f->B = B;
  f->T = T;
  f->inputs = (int *)(void *)titans__arena_alloc(ar, n + 1);
  f->targets = (int *)(void *)titans__arena_alloc(ar, n + 1);
  f->pos = titans__arena_positions(ar, T, 0);
  if (!f->inputs || !f->targets || !f->pos) return titans__error(t->error, TITANS_ERR_NOMEM, "forward: out of memory");
  for (size_t b = 0; b < B; b++)
    for (size_t i = 0; i < T; i++) {
      f->inputs[b * T + i] = tokens[b * stride + i];
      f->targets[b * T + i] = with_targets ? tokens[b * stride + i + 1] : -1;
      if (with_targets && (f->targets[b * T + i] < 0 || f->targets[b * T + i] >= c->vocab))
        return titans__error(t->error, TITANS_ERR_ARG, "forward: target token %d at (%zu, %zu) is outside the vocabulary",
                             f->targets[b * T + i], b, i + 1);
    }
  for (int l = 0; l <= c->n_layers; l++)
    if (!(f->x[l] = titans__arena_alloc(ar, n * d))) return titans__error(t->error, TITANS_ERR_NOMEM, "forward: out of memory");
  if (titans_embedding_forward(f->x[0], f->inputs, mo->w.tok_emb, n, V, d))
    return titans__error(t->error, TITANS_ERR_ARG, "forward: an input token is outside the vocabulary [0, %zu)", V);
  for (int l = 0; l < c->n_layers; l++) {
    int rc = titans__block_forward(c, &mo->w.layers[l], &f->layers[l], ar, f->x[l + 1], f->x[l], f->pos, B, T);
    if (rc) return titans__error(t->error, rc, "forward: layer %d: %s", l, titans_status_string(rc));
  }
  f->xf = titans__arena_alloc(ar, n * d);
  f->rstdf = titans__arena_alloc(ar, n);
  f->logits = titans__arena_alloc(ar, n * V);
  if (!f->xf || !f->rstdf || !f->logits) return titans__error(t->error, TITANS_ERR_NOMEM, "forward: out of memory");
  titans_rmsnorm_forward(f->xf, f->rstdf, f->x[c->n_layers], mo->w.norm_f, n, d);
  const float *head = c->tied ? mo->w.tok_emb : mo->w.lm_head;
  titans_gemm(0, 1, n, V, d, 1.0f, f->xf, d, head, d, 0.0f, f->logits, V);
  return TITANS_OK;
}

/* Backward from dlogits [B * T, V] into t->grads. */
static int titans__model_backward(titans_trainer *t, const float *dlogits) {
  titans_model *mo = t->model;
  const titans_config *c = &mo->cfg;
  struct titans__fwd *f = t->fwd;
  titans__arena *ar = &f->arena;
  size_t d = (size_t)c->d, V = (size_t)c->vocab, n = f->B * f->T;
  titans_weights g;
  titans_layer *glayers = (titans_layer *)(void *)titans__arena_alloc(ar, (size_t)c->n_layers * (sizeof(titans_layer) / sizeof(float) + 1));
  float *dxf = titans__arena_alloc(ar, n * d), *dx = titans__arena_zalloc(ar, n * d), *dprev = titans__arena_alloc(ar, n * d);
  if (!glayers || !dxf || !dx || !dprev) return titans__error(t->error, TITANS_ERR_NOMEM, "backward: out of memory");
  titans_weights_bind(&g, glayers, c, t->grads);
  const float *head = c->tied ? mo->w.tok_emb : mo->w.lm_head;
  float *ghead = c->tied ? g.tok_emb : g.lm_head;
  /* logits = xf head^T */
  titans_gemm(1, 0, V, d, n, 1.0f, dlogits, V, f->xf, d, 1.0f, ghead, d);
  titans_gemm(0, 0, n, d, V, 1.0f, dlogits, V, head, d, 0.0f, dxf, d);
  titans_rmsnorm_backward(dx, g.norm_f, dxf, f->x[c->n_layers], mo->w.norm_f, f->rstdf, n, d);
  for (int l = c->n_layers; l-- > 0;) {
    int rc = titans__block_backward(c, &mo->w.layers[l], &g.layers[l], &f->layers[l], ar, dprev, dx, f->pos, f->B, f->T);
    if (rc) return titans__error(t->error, rc, "backward: layer %d: %s", l, titans_status_string(rc));
    float *tmp = dx;
    dx = dprev;
    dprev = tmp;
  }
  titans_embedding_backward(g.tok_emb, dx, f->inputs, n, d);
  return TITANS_OK;
}

TITANSDEF int titans_trainer_init(titans_trainer *t, titans_model *m, const titans_train_config *tc) {
  memset(t, 0, sizeof *t);
  t->model = m;
  t->tc = tc ? *tc : titans_train_config_default();
  t->grads = titans_alloc_floats(m->n_floats);
  t->adam_m = titans_alloc_floats(m->n_floats);
  t->adam_v = titans_alloc_floats(m->n_floats);
  t->fwd = (struct titans__fwd *)titans_alloc_bytes(1, sizeof(struct titans__fwd));
  if (t->fwd) {
    t->fwd->layers = (titans__layer_fwd *)titans_alloc_bytes((size_t)m->cfg.n_layers, sizeof(titans__layer_fwd));
    t->fwd->x = (float **)titans_alloc_bytes((size_t)m->cfg.n_layers + 1, sizeof(float *));
  }
  if (!t->grads || !t->adam_m || !t->adam_v || !t->fwd || !t->fwd->layers || !t->fwd->x) {
    titans_trainer_free(t);
    return titans__error(t->error, TITANS_ERR_NOMEM, "trainer: cannot allocate 3 x %zu floats", m->n_floats);
  }
  return TITANS_OK;
}

TITANSDEF void titans_trainer_free(titans_trainer *t) {
  titans_free(t->grads);
  titans_free(t->adam_m);
  titans_free(t->adam_v);
  titans__fwd_free(t->fwd, t->model ? t->model->cfg.n_layers : 0);
  t->grads = t->adam_m = t->adam_v = NULL;
  t->fwd = NULL;
}

TITANSDEF int titans_forward_backward(titans_trainer *t, const int *tokens, size_t B, size_t T, float scale, float *loss) {
  int rc = titans__model_forward(t, tokens, B, T, 1);
  if (rc) return rc;
  struct titans__fwd *f = t->fwd;
  size_t n = B * T, V = (size_t)t->model->cfg.vocab;
  float *dlogits = titans__arena_alloc(&f->arena, n * V);
  if (!dlogits) return titans__error(t->error, TITANS_ERR_NOMEM, "backward: out of memory");
  float l = titans_cross_entropy(dlogits, f->logits, f->targets, n, V, scale);
  if (loss) *loss = l;
  if (!isfinite(l)) return titans__error(t->error, TITANS_ERR_NONFINITE, "step %ld: the loss is not finite", t->step);
  return titans__model_backward(t, dlogits);
}

TITANSDEF int titans_train_step(titans_trainer *t, const int *tokens, size_t n_micro, size_t B, size_t T, float *loss) {
  titans_model *mo = t->model;
  if (n_micro == 0) return titans__error(t->error, TITANS_ERR_ARG, "train step: no micro-batch");
  memset(t->grads, 0, mo->n_floats * sizeof(float));
  double total = 0.0;
  for (size_t i = 0; i < n_micro; i++) {
    float l = 0.0f;
    int rc = titans_forward_backward(t, tokens + i * B * (T + 1), B, T, 1.0f / (float)n_micro, &l);
    if (rc) {
      memset(t->grads, 0, mo->n_floats * sizeof(float));
      return rc;
    }
    total += l;
  }
  float mean = (float)(total / (double)n_micro);
  if (loss) *loss = mean;
  double sq = 0.0;
  for (size_t i = 0; i < mo->n_floats; i++) sq += (double)t->grads[i] * t->grads[i];
  float norm = (float)sqrt(sq);
  t->last_grad_norm = norm;
  if (!isfinite(norm) || !isfinite(mean)) {
    memset(t->grads, 0, mo->n_floats * sizeof(float));
    return titans__error(t->error, TITANS_ERR_NONFINITE, "step %ld: non-finite %s; weights left unchanged", t->step,
                         isfinite(mean) ? "gradient" : "loss");
  }
  if (t->tc.clip > 0.0f && norm > t->tc.clip) {
    float s = t->tc.clip / norm;
    for (size_t i = 0; i < mo->n_floats; i++) t->grads[i] *= s;
  }
  float lr = titans_lr_at(&t->tc, t->step);
  t->last_lr = lr;
  for (size_t p = 0; p < mo->n_params; p++) {
    const titans_param *pp = &mo->plist[p];
    float wd = pp->kind == TITANS_PARAM_MATRIX ? t->tc.weight_decay : 0.0f;
    titans_adamw_update(mo->params + pp->offset, t->grads + pp->offset, t->adam_m + pp->offset, t->adam_v + pp->offset,
                        pp->size, lr, t->tc.beta1, t->tc.beta2, t->tc.eps, wd, t->step + 1);
  }
  t->step++;
  return TITANS_OK;
}

TITANSDEF int titans_eval_loss(titans_trainer *t, const int *tokens, size_t B, size_t T, float *loss) {
  int rc = titans__model_forward(t, tokens, B, T, 1);
  if (rc) return rc;
  float l = titans_cross_entropy(NULL, t->fwd->logits, t->fwd->targets, B * T, (size_t)t->model->cfg.vocab, 1.0f);
  if (loss) *loss = l;
  return isfinite(l) ? TITANS_OK : titans__error(t->error, TITANS_ERR_NONFINITE, "eval: the loss is not finite");
}

TITANSDEF int titans_forward_logits(titans_trainer *t, const int *tokens, size_t B, size_t T, float *logits) {
  int rc = titans__model_forward(t, tokens, B, T, 0);
  if (rc) return rc;
  memcpy(logits, t->fwd->logits, B * T * (size_t)t->model->cfg.vocab * sizeof(float));
  return TITANS_OK;
}

/* ---- inference sessions ----------------------------------------------------------------------- */

struct titans__session_layer {
  titans_kv_cache kv;          /* attention kinds: prefix rows + a ring of keys/values */
  int has_kv;
  titans_mem_state mem;        /* memory kinds: the running memory */
  titans_mem_state committed;  /* MAC: the memory as it was at the segment's start (retrieval reads it) */
  int has_mem, has_committed;
};

/* Scratch of one token: [17, max(d, d_ff)]: x, xn, mix, h (4 d), u1, u3 (2 w), the mixer's 10 d, and the
   final norm at 16 w. */
static size_t titans__session_work_floats(const titans_config *c) {
  size_t w = (size_t)(c->d > c->ffn_hidden ? c->d : c->ffn_hidden);
  return 17 * w;
}

static size_t titans__kv_capacity(const titans_config *c) {
  switch (c->block) {
    case TITANS_BLOCK_ATTN: return (size_t)c->max_context;
    case TITANS_BLOCK_MAC: return 2 * (size_t)c->segment; /* Hm and X rows of one segment */
    default: return (size_t)c->window;
  }
}

/* y [n, d] = x [n, d] W^T for W [d, d] */
static void titans__linear(float *y, const float *x, const float *W, size_t n, size_t d_out, size_t d_in) {
  titans_gemm(0, 1, n, d_out, d_in, 1.0f, x, d_in, W, d_in, 0.0f, y, d_out);
}

TITANSDEF void titans_session_free(titans_session *s) {
  if (s->layers && s->model) {
    for (int l = 0; l < s->model->cfg.n_layers; l++) {
      struct titans__session_layer *sl = &s->layers[l];
      if (sl->has_kv) titans_kv_cache_free(&sl->kv);
      if (sl->has_mem) titans_mem_state_free(&sl->mem);
      if (sl->has_committed) titans_mem_state_free(&sl->committed);
    }
  }
  titans_free(s->layers);
  titans_free(s->work);
  s->layers = NULL;
  s->work = NULL;
}

TITANSDEF int titans_session_init(titans_session *s, const titans_model *m) {
  memset(s, 0, sizeof *s);
  s->model = m;
  const titans_config *c = &m->cfg;
  size_t d = (size_t)c->d, H = (size_t)c->attn_heads;
  s->layers = (struct titans__session_layer *)titans_alloc_bytes((size_t)c->n_layers, sizeof(struct titans__session_layer));
  s->work_size = titans__session_work_floats(c);
  s->work = titans_alloc_floats(s->work_size);
  if (!s->layers || !s->work) {
    titans_session_free(s);
    return titans__error(s->error, TITANS_ERR_NOMEM, "session: out of memory");
  }
  for (int l = 0; l < c->n_layers; l++) {
    struct titans__session_layer *sl = &s->layers[l];
    int rc = TITANS_OK;
    if (titans__has_attn(c->block)) {
      int64_t window = c->block == TITANS_BLOCK_SWA || c->block == TITANS_BLOCK_MAG || c->block == TITANS_BLOCK_MAL ? c->window : 0;
      rc = titans_kv_cache_init(&sl->kv, (size_t)c->n_persist, titans__kv_capacity(c), H, d / H, window);
      sl->has_kv = rc == TITANS_OK;
    }
    if (!rc && titans__has_mem(c->block)) {
      rc = titans_mem_state_init(&sl->mem, &c->mem, 1);
      sl->has_mem = rc == TITANS_OK;
    }
    if (!rc && c->block == TITANS_BLOCK_MAC) {
      rc = titans_mem_state_init(&sl->committed, &c->mem, 1);
      sl->has_committed = rc == TITANS_OK;
    }
    if (rc) {
      titans_session_free(s);
      return titans__error(s->error, rc, "session: cannot create the state of layer %d", l);
    }
  }
  titans_session_reset(s);
  return TITANS_OK;
}

TITANSDEF void titans_session_reset(titans_session *s) {
  const titans_model *m = s->model;
  const titans_config *c = &m->cfg;
  size_t d = (size_t)c->d, P = (size_t)c->n_persist;
  s->position = 0;
  for (int l = 0; l < c->n_layers; l++) {
    struct titans__session_layer *sl = &s->layers[l];
    const titans_layer *L = &m->w.layers[l];
    if (sl->has_mem) titans_mem_state_reset(&sl->mem, &L->mem);
    if (sl->has_committed) titans_mem_state_copy(&sl->committed, &sl->mem);
    if (!sl->has_kv) continue;
    titans_kv_cache_reset(&sl->kv);
    if (P == 0) continue;
    /* Prefix rows: the persistent tokens (MAL: the memory's outputs for them), projected, no RoPE.
       MAG and MAL feed the persistent tokens to the memory first, as the training forward does. */
    float *pk = titans_alloc_floats(3 * P * d);
    if (!pk) continue; /* leaves zero prefix rows; titans_session_feed reports the allocation failure */
    float *pv = pk + P * d, *src = pk + 2 * P * d;
    memcpy(src, L->persist, P * d * sizeof(float));
    if (c->block == TITANS_BLOCK_MAG || c->block == TITANS_BLOCK_MAL) {
      float *mo = titans_alloc_floats(P * d);
      if (mo) {
        titans_mem_forward(&c->mem, &L->mem, &sl->mem, mo, L->persist, P, NULL);
        if (c->block == TITANS_BLOCK_MAL) memcpy(src, mo, P * d * sizeof(float));
        titans_free(mo);
      }
    }
    titans__linear(pk, src, L->attn_wk, P, d, d);
    titans__linear(pv, src, L->attn_wv, P, d, d);
    titans_kv_cache_set_prefix(&sl->kv, pk, pv);
    titans_free(pk);
  }
}

TITANSDEF int titans_session_copy(titans_session *dst, const titans_session *src) {
  if (dst->model != src->model) return titans__error(dst->error, TITANS_ERR_ARG, "session copy: different models");
  for (int l = 0; l < src->model->cfg.n_layers; l++) {
    struct titans__session_layer *a = &dst->layers[l];
    const struct titans__session_layer *b = &src->layers[l];
    int rc = TITANS_OK;
    if (a->has_kv) rc = titans_kv_cache_copy(&a->kv, &b->kv);
    if (!rc && a->has_mem) rc = titans_mem_state_copy(&a->mem, &b->mem);
    if (!rc && a->has_committed) rc = titans_mem_state_copy(&a->committed, &b->committed);
    if (rc) return titans__error(dst->error, rc, "session copy: layer %d differs in shape", l);
  }
  dst->position = src->position;
  return TITANS_OK;
}

/* Attention of one query row over the cache after appending this token's key/value rows:
   att = Attn(q); out = wo att. k_src rows [nk, d] are projected and appended at position kp. */
static int titans__session_attend(const titans_config *c, const titans_layer *L, struct titans__session_layer *sl,
                                  float *out, const float *xq, const float *k_src, size_t nk, int64_t qp, int64_t kp,
                                  float *work) {
  size_t d = (size_t)c->d, H = (size_t)c->attn_heads, da = d / H;
  float *q = work, *k = work + d, *v = work + 3 * d, *att = work + 5 * d; /* k, v: up to 2 rows */
  int64_t kpos[2] = {kp, kp};
  titans__linear(q, xq, L->attn_wq, 1, d, d);
  titans__linear(k, k_src, L->attn_wk, nk, d, d);
  titans__linear(v, k_src, L->attn_wv, nk, d, d);
  titans_rope_forward(q, &qp, 1, H, da);
  titans_rope_forward(k, kpos, nk, H, da);
  TITANS__TRY(titans_kv_cache_append(&sl->kv, k, v, kpos, nk));
  TITANS__TRY(titans_kv_cache_attend(&sl->kv, att, NULL, q, qp));
  titans__linear(out, att, L->attn_wo, 1, d, d);
  return TITANS_OK;
}

/* Gate of one row: out = RMSNorm(y) * sigmoid(RMSNorm(m)) */
static void titans__session_gate(const titans_layer *L, float *out, const float *y, const float *m, float *tmp, size_t d) {
  float r;
  titans_rmsnorm_forward(out, &r, y, L->gate_norm_y, 1, d);
  titans_rmsnorm_forward(tmp, &r, m, L->gate_norm_m, 1, d);
  titans_sigmoid_forward(tmp, tmp, d);
  for (size_t j = 0; j < d; j++) out[j] *= tmp[j];
}

/* The mixer of one token at position p: mix [d] from xn [d]. work: [10 d] of scratch. */
static int titans__session_mixer(titans_session *s, int l, float *mix, const float *xn, long long p, float *work) {
  const titans_config *c = &s->model->cfg;
  const titans_layer *L = &s->model->w.layers[l];
  struct titans__session_layer *sl = &s->layers[l];
  size_t d = (size_t)c->d;
  float *y = work, *m = work + d, *pair = work + 2 * d, *scratch = work + 4 * d; /* scratch: [7 d] */
  switch (c->block) {
    case TITANS_BLOCK_ATTN:
    case TITANS_BLOCK_SWA:
      return titans__session_attend(c, L, sl, mix, xn, xn, 1, p, p, scratch);
    case TITANS_BLOCK_LMM:
      return titans_mem_forward(&c->mem, &L->mem, &sl->mem, mix, xn, 1, NULL);
    case TITANS_BLOCK_MAG:
      TITANS__TRY(titans__session_attend(c, L, sl, y, xn, xn, 1, p, p, scratch));
      TITANS__TRY(titans_mem_forward(&c->mem, &L->mem, &sl->mem, m, xn, 1, NULL));
      titans__session_gate(L, mix, y, m, scratch, d);
      return TITANS_OK;
    case TITANS_BLOCK_MAL:
      TITANS__TRY(titans_mem_forward(&c->mem, &L->mem, &sl->mem, y, xn, 1, NULL));
      return titans__session_attend(c, L, sl, mix, y, y, 1, p, p, scratch);
    case TITANS_BLOCK_MAC: {
      int64_t i = (int64_t)(p % c->segment);
      if (i == 0 && p > 0) {
        /* a new segment: retrieval reads the memory as it is now; the X stream's conv tail goes on */
        titans__mem_state_commit(&sl->committed, &sl->mem);
        titans_kv_cache_reset(&sl->kv);
      }
      TITANS__TRY(titans_mem_retrieve(&c->mem, &L->mem, &sl->committed, pair, xn, 1, NULL)); /* Hm_i */
      memcpy(pair + d, xn, d * sizeof(float));                                                /* X_i */
      TITANS__TRY(titans__session_attend(c, L, sl, y, xn, pair, 2, i, i, scratch));
      TITANS__TRY(titans_mem_forward(&c->mem, &L->mem, &sl->mem, m, y, 1, NULL));
      titans__session_gate(L, mix, y, m, scratch, d);
      return TITANS_OK;
    }
    default:
      return TITANS_ERR_ARG;
  }
}

/* One token through every block; writes the final hidden state into x [d]. */
static int titans__session_token(titans_session *s, int token, float *x) {
  const titans_model *mo = s->model;
  const titans_config *c = &mo->cfg;
  size_t d = (size_t)c->d;
  float *xn = s->work + d, *mix = s->work + 2 * d, *h = s->work + 3 * d, *u1 = s->work + 4 * d;
  size_t ff = (size_t)c->ffn_hidden, wmax = d > ff ? d : ff;
  float *u3 = u1 + wmax, *mixwork = u3 + wmax, r;
  if (titans_embedding_forward(x, &token, mo->w.tok_emb, 1, (size_t)c->vocab, d))
    return titans__error(s->error, TITANS_ERR_ARG, "session: token %d is outside the vocabulary [0, %d)", token, c->vocab);
  for (int l = 0; l < c->n_layers; l++) {
    const titans_layer *L = &mo->w.layers[l];
    titans_rmsnorm_forward(xn, &r, x, L->norm1, 1, d);
    int rc = titans__session_mixer(s, l, mix, xn, s->position, mixwork);
    if (rc) return titans__error(s->error, rc, "session: layer %d at position %lld: %s", l, s->position, titans_status_string(rc));
    for (size_t j = 0; j < d; j++) h[j] = x[j] + mix[j];
    titans_rmsnorm_forward(xn, &r, h, L->norm2, 1, d);
    titans__linear(u1, xn, L->ffn_w1, 1, ff, d);
    titans__linear(u3, xn, L->ffn_w3, 1, ff, d);
    titans_silu_forward(u1, u1, ff);
    for (size_t j = 0; j < ff; j++) u1[j] *= u3[j];
    titans__linear(x, u1, L->ffn_w2, 1, d, ff);
    for (size_t j = 0; j < d; j++) x[j] += h[j];
  }
  s->position++;
  return TITANS_OK;
}

TITANSDEF int titans_session_feed(titans_session *s, const int *tokens, size_t n, float *logits) {
  const titans_model *mo = s->model;
  const titans_config *c = &mo->cfg;
  size_t d = (size_t)c->d;
  float *x = s->work, *xf = s->work + 16 * (d > (size_t)c->ffn_hidden ? d : (size_t)c->ffn_hidden), r;
  for (size_t i = 0; i < n; i++) TITANS__TRY(titans__session_token(s, tokens[i], x));
  if (logits && n > 0) {
    titans_rmsnorm_forward(xf, &r, x, mo->w.norm_f, 1, d);
    titans__linear(logits, xf, c->tied ? mo->w.tok_emb : mo->w.lm_head, 1, (size_t)c->vocab, d);
  }
  return TITANS_OK;
}

/* ---- session state as named tensors ----------------------------------------------------------- */

static size_t titans__push_ref(titans_tensor_ref *list, size_t max, size_t n, const char *prefix, const char *name,
                               float *data, size_t count) {
  if (list && n < max) {
    titans_tensor_ref *r = &list[n];
    size_t lp = strlen(prefix), ln = strlen(name);
    if (lp + ln >= sizeof r->name) lp = ln = 0;
    memcpy(r->name, prefix, lp);
    memcpy(r->name + lp, name, ln);
    r->name[lp + ln] = 0;
    r->data = data;
    r->count = count;
  }
  return n + 1;
}

TITANSDEF size_t titans_session_state(titans_session *s, titans_tensor_ref *list, size_t max) {
  const titans_config *c = &s->model->cfg;
  uint64_t p = (uint64_t)s->position;
  for (int i = 0; i < 3; i++) s->position_code[i] = (float)((p >> (21 * i)) & 0x1FFFFF);
  size_t n = titans__push_ref(list, max, 0, "", "position", s->position_code, 3);
  for (int l = 0; l < c->n_layers; l++) {
    struct titans__session_layer *sl = &s->layers[l];
    char prefix[64];
    titans__layer_prefix(prefix, l);
    if (sl->has_mem) n = titans__push_ref(list, max, n, prefix, "mem.state", sl->mem.w_chunk, titans__mem_state_slab_floats(&sl->mem));
    if (sl->has_committed)
      n = titans__push_ref(list, max, n, prefix, "mem.committed", sl->committed.w_chunk,
                           titans__mem_state_slab_floats(&sl->committed));
    if (sl->has_kv) {
      size_t rows = (sl->kv.P + sl->kv.capacity) * (size_t)c->d;
      n = titans__push_ref(list, max, n, prefix, "kv.k", sl->kv.k, rows);
      n = titans__push_ref(list, max, n, prefix, "kv.v", sl->kv.v, rows);
    }
  }
  return n;
}

/* Rebuilds the ring bookkeeping of a KV cache after `appended` rows were appended since its last reset;
   row r was appended for position pos_of_row(r). */
static void titans__kv_rebuild(titans_kv_cache *kv, long long appended, int mac) {
  size_t cap = kv->capacity;
  kv->count = (size_t)(appended < (long long)cap ? appended : (long long)cap);
  kv->next = (size_t)(appended % (long long)cap);
  for (size_t j = 0; j < kv->count; j++) {
    /* the latest row r < appended with r = j (mod cap) */
    long long r = (long long)j + (long long)cap * ((appended - 1 - (long long)j) / (long long)cap);
    kv->pos[j] = mac ? r / 2 : r;
  }
}

TITANSDEF int titans_session_state_loaded(titans_session *s) {
  const titans_config *c = &s->model->cfg;
  uint64_t p = 0;
  for (int i = 0; i < 3; i++) {
    float f = s->position_code[i];
    if (!(f >= 0.0f && f < 2097152.0f) || f != floorf(f))
      return titans__error(s->error, TITANS_ERR_FORMAT, "session state: bad position");
    p |= (uint64_t)f << (21 * i);
  }
  if (p > ((uint64_t)1 << 62)) return titans__error(s->error, TITANS_ERR_FORMAT, "session state: bad position");
  titans_tensor_ref refs[4];
  for (int l = 0; l < c->n_layers; l++) {
    struct titans__session_layer *sl = &s->layers[l];
    char prefix[64];
    titans__layer_prefix(prefix, l);
    size_t nr = 0;
    if (sl->has_mem) nr = titans__push_ref(refs, 4, nr, prefix, "mem.state", sl->mem.w_chunk, titans__mem_state_slab_floats(&sl->mem));
    if (sl->has_committed)
      nr = titans__push_ref(refs, 4, nr, prefix, "mem.committed", sl->committed.w_chunk, titans__mem_state_slab_floats(&sl->committed));
    for (size_t i = 0; i < nr; i++)
      for (size_t j = 0; j < refs[i].count; j++)
        if (!isfinite(refs[i].data[j]))
          return titans__error(s->error, TITANS_ERR_FORMAT, "session state: %s holds a non-finite value", refs[i].name);
    long long pos = (long long)p;
    if (sl->has_mem) sl->mem.position = pos + (c->block == TITANS_BLOCK_MAG || c->block == TITANS_BLOCK_MAL ? c->n_persist : 0);
    if (sl->has_kv) {
      size_t rows = (sl->kv.P + sl->kv.capacity) * (size_t)c->d;
      for (size_t j = 0; j < rows; j++)
        if (!isfinite(sl->kv.k[j]) || !isfinite(sl->kv.v[j]))
          return titans__error(s->error, TITANS_ERR_FORMAT, "session state: layer %d's KV cache holds a non-finite value", l);
      if (c->block == TITANS_BLOCK_MAC) {
        long long seg_start = pos == 0 ? 0 : ((pos - 1) / c->segment) * c->segment;
        titans__kv_rebuild(&sl->kv, 2 * (pos - seg_start), 1);
        sl->committed.position = seg_start;
      } else {
        titans__kv_rebuild(&sl->kv, pos, 0);
      }
    }
  }
  s->position = (long long)p;
  return TITANS_OK;
}

/* ---- sampling --------------------------------------------------------------------------------- */

typedef struct titans__prob {
  float p;
  int index;
} titans__prob;

/* larger probability first; equal ones by index, so the order is total and the draw deterministic */
static int titans__prob_cmp(const void *a, const void *b) {
  const titans__prob *x = (const titans__prob *)a, *y = (const titans__prob *)b;
  if (x->p != y->p) return x->p > y->p ? -1 : 1;
  return x->index - y->index;
}

TITANSDEF int titans_sample(const float *logits, size_t V, float temperature, int top_k, float top_p, titans_rng *rng) {
  if (V == 0 || V > (size_t)INT_MAX) return -1;
  size_t best = 0;
  for (size_t i = 1; i < V; i++)
    if (logits[i] > logits[best]) best = i;
  if (!(temperature > 0.0f) || !isfinite(logits[best])) return (int)best;
  titans__prob *pr = (titans__prob *)titans_alloc_bytes(V, sizeof(titans__prob));
  if (!pr) return (int)best; /* no memory for the distribution: fall back to greedy */
  for (size_t i = 0; i < V; i++) {
    pr[i].p = logits[i] == logits[i] ? expf((logits[i] - logits[best]) / temperature) : 0.0f;
    pr[i].index = (int)i;
  }
  qsort(pr, V, sizeof *pr, titans__prob_cmp);
  size_t keep = top_k > 0 && (size_t)top_k < V ? (size_t)top_k : V;
  double total = 0.0;
  for (size_t i = 0; i < keep; i++) total += pr[i].p;
  if (top_p > 0.0f && top_p < 1.0f) {
    double acc = 0.0;
    size_t i = 0;
    while (i < keep) {
      acc += pr[i].p;
      i++;
      if (acc >= top_p * total) break;
    }
    keep = i;
    total = acc;
  }
  double u = (double)titans_rng_uniform(rng) * total, acc = 0.0;
  int choice = pr[keep - 1].index;
  for (size_t i = 0; i < keep; i++) {
    acc += pr[i].p;
    if (u < acc) {
      choice = pr[i].index;
      break;
    }
  }
  titans_free(pr);
  return choice;
}
