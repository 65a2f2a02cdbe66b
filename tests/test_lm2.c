/* LM2 (docs/model.md section 4) against golden values of an independent float64 PyTorch reference of a
   whole LM2 language model (tests/ref/lm2_ref.py, tests/ref/lm2_golden.bin): logits, loss and the
   gradient of every parameter of the batch forward and backward, and the logits of a session fed one
   token at a time. The cases cover two writes and a partial last segment, a segment that divides T, a
   segment longer than T (no write), persistent tokens or none, tied or untied heads, 1 to 4 heads.
   The generic properties (central differences, causality, forks, saved states, threads, overfitting)
   are in test_model.c, test_inference.c and test_checkpoint.c, which run every block kind. */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "harness.h"
#include "golden.h"

/* fields of caseN.config */
enum {
  CF_V,
  CF_D,
  CF_HEADS,
  CF_LAYERS,
  CF_FFN,
  CF_WINDOW,
  CF_PERSIST,
  CF_SEGMENT,
  CF_SLOTS,
  CF_TIED,
  CF_B,
  CF_T,
  CF_COUNT
};

static titans_config config_of(const float *cf) {
  titans_config c = titans_config_default(TITANS_BLOCK_LM2, (int)cf[CF_V], (int)cf[CF_D], (int)cf[CF_LAYERS]);
  c.attn_heads = (int)cf[CF_HEADS];
  c.ffn_hidden = (int)cf[CF_FFN];
  c.window = (int)cf[CF_WINDOW];
  c.n_persist = (int)cf[CF_PERSIST];
  c.segment = (int)cf[CF_SEGMENT];
  c.lm2_slots = (int)cf[CF_SLOTS];
  c.tied = (int)cf[CF_TIED];
  return c;
}

/* max |a - b| over the tensor, relative to max |b| (the tensor's own scale) */
static double rel_to_max(const float *a, const float *b, size_t n) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d != d) return INFINITY;
    diff = d > diff ? d : diff;
    scale = fabs((double)b[i]) > scale ? fabs((double)b[i]) : scale;
  }
  return diff / scale;
}

static void test_case(golden_file *g, int k) {
  const golden_tensor *gc = golden_findf(g, "case%d.config", k);
  if (!th_check(gc && gc->count == CF_COUNT, "case %d: a config of %d fields", k, CF_COUNT)) return;
  titans_config c = config_of(gc->data);
  size_t B = (size_t)gc->data[CF_B], T = (size_t)gc->data[CF_T], V = (size_t)c.vocab;
  char label[160];
  snprintf(label, sizeof label, "case %d (d %d, %d heads, %d layers, window %d, N_p %d, C %d, N_s %d, %s, T %zu)", k,
           c.d, c.attn_heads, c.n_layers, c.window, c.n_persist, c.segment, c.lm2_slots, c.tied ? "tied" : "untied", T);
  titans_model m;
  titans_trainer t;
  if (!th_check(titans_model_init(&m, &c) == TITANS_OK, "%s: model init (%s)", label, m.error)) return;
  int missing = 0;
  for (size_t p = 0; p < m.n_params; p++) {
    const golden_tensor *gp = golden_findf(g, "case%d.param.%s", k, m.plist[p].name);
    if (!gp || gp->count != m.plist[p].size) {
      missing++;
      continue;
    }
    memcpy(m.params + m.plist[p].offset, gp->data, gp->count * sizeof(float));
  }
  th_check(missing == 0, "%s: the reference has every one of the %zu parameters, in the library's names and shapes",
           label, m.n_params);
  titans_trainer_init(&t, &m, NULL);
  const golden_tensor *gt = golden_findf(g, "case%d.tokens", k), *gl = golden_findf(g, "case%d.logits", k);
  const golden_tensor *gloss = golden_findf(g, "case%d.loss", k);
  int *tokens = (int *)malloc(B * (T + 1) * sizeof(int)), *inputs = (int *)malloc(B * T * sizeof(int));
  float *logits = titans_alloc_floats(B * T * V), *step = titans_alloc_floats(V);
  for (size_t i = 0; i < B * (T + 1); i++) tokens[i] = (int)gt->data[i];
  for (size_t b = 0; b < B; b++) memcpy(inputs + b * T, tokens + b * (T + 1), T * sizeof(int));
  /* the batch forward */
  int rc = titans_forward_logits(&t, inputs, B, T, logits);
  th_close(label, rc ? INFINITY : rel_to_max(logits, gl->data, B * T * V), 2e-6);
  /* loss and gradients */
  float loss = 0;
  memset(t.grads, 0, m.n_floats * sizeof(float));
  rc = titans_forward_backward(&t, tokens, B, T, 1.0f, &loss);
  th_close("  loss vs the reference (relative)", rc ? INFINITY : fabs(loss - gloss->data[0]) / fabs(gloss->data[0]),
           1e-6);
  double worst = 0;
  const char *worst_name = "";
  int absent = 0;
  for (size_t p = 0; p < m.n_params; p++) {
    const golden_tensor *gg = golden_findf(g, "case%d.grad.%s", k, m.plist[p].name);
    if (!gg || gg->count != m.plist[p].size) {
      absent++;
      continue;
    }
    double e = rel_to_max(t.grads + m.plist[p].offset, gg->data, gg->count);
    if (e > worst) worst = e, worst_name = m.plist[p].name;
  }
  char what[200];
  snprintf(what, sizeof what, "  every parameter's gradient vs autograd (relative to the tensor's largest; worst %s)",
           worst_name);
  th_close(what, rc || absent ? INFINITY : worst, 2e-5);
  /* a session fed one token at a time: the online write against the reference's whole-segment softmax */
  titans_session s;
  double sd = 0;
  if (th_check(titans_session_init(&s, &m) == TITANS_OK, "  session init")) {
    for (size_t b = 0; b < B; b++) {
      titans_session_reset(&s);
      for (size_t i = 0; i < T; i++) {
        rc = titans_session_feed(&s, inputs + b * T + i, 1, step);
        if (rc) sd = INFINITY;
        double e = rel_to_max(step, gl->data + (b * T + i) * V, V);
        sd = e > sd ? e : sd;
      }
    }
    th_close("  a session fed token by token vs the reference's logits", sd, 2e-6);
    titans_session_free(&s);
  }
  free(tokens);
  free(inputs);
  titans_free(logits);
  titans_free(step);
  titans_trainer_free(&t);
  titans_model_free(&m);
}

int main(void) {
  const char *path = "tests/ref/lm2_golden.bin";
  golden_file g;
  printf("LM2 against the PyTorch reference (%s)\n", path);
  if (!th_check(golden_load(&g, path) == 0, "load %s: %s", path, g.err)) return th_summary("test_lm2");
  const golden_tensor *nc = golden_find(&g, "num_cases");
  int n = nc ? (int)nc->data[0] : 0;
  th_check(n > 0, "the golden file has %d cases", n);
  for (int k = 0; k < n; k++) test_case(&g, k);
  golden_free(&g);
  return th_summary("test_lm2");
}
