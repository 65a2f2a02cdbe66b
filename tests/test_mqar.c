/* Tests of the MQAR task generator (examples/mqar.h): the layout of every example (distinct keys and values
   from their halves of the vocabulary, each key queried once after the context with its value as the
   target and filler after it), the law of the gaps against its formula, determinism, and the refused
   configurations. */
#include "examples/mqar.h"
#include "tests/harness.h"

/* The problems of one example, or 0: what the header promises about its layout. */
static int layout_errors(const mqar_config *c, const int *in, const int *tg) {
  int V = c->vocab, L = c->seq_len, K = c->n_pairs, half = V / 2, errors = 0, labelled = 0;
  for (int i = 0; i < K; i++) {
    int key = in[2 * i], value = in[2 * i + 1];
    errors += key < 1 || key >= half || value < half || value >= V;
    errors += tg[2 * i] != -1 || tg[2 * i + 1] != -1;
    for (int j = 0; j < i; j++) errors += in[2 * j] == key || in[2 * j + 1] == value;
  }
  for (int t = 2 * K; t < L; t++) {
    if (in[t] < 0 || in[t] >= V) errors++;
    if (tg[t] < 0) {
      errors += tg[t] != -1 || (!c->random_filler && in[t] != 0);
      continue;
    }
    labelled++;
    errors += (t - 2 * K) % 2 != 0; /* queries sit two apart from the context's end */
    int pair = -1;
    for (int i = 0; i < K; i++)
      if (in[2 * i] == in[t]) pair = i;
    errors += pair < 0 || tg[t] != in[2 * pair + 1];
    errors += t + 1 < L && tg[t + 1] != -1; /* the position after a query holds filler */
    errors += t + 1 < L && !c->random_filler && in[t + 1] != 0;
  }
  return errors + (labelled != K);
}

static void test_layout(mqar_config c, int n) {
  int *in = malloc((size_t)c.seq_len * sizeof(int)), *tg = malloc((size_t)c.seq_len * sizeof(int));
  int bad = 0, rc = 0;
  for (int e = 0; e < n; e++) {
    rc |= mqar_example(&c, 42, (uint64_t)(e % 2), (uint64_t)e, in, tg);
    bad += layout_errors(&c, in, tg) != 0;
  }
  th_check(!rc && bad == 0, "V %d, L %d, K %d, %s filler: %d of %d examples break the layout", c.vocab, c.seq_len,
           c.n_pairs, c.random_filler ? "random" : "zero", bad, n);
  free(in);
  free(tg);
}

/* One query (K = 1): the gap g is drawn with probability (g + 1)^(alpha - 1) / sum; K = 4 with alpha = 1
   (uniform weights): each gap is in the sample with probability K / space (without replacement). */
static void test_gap_law(void) {
  enum { N = 40000 };
  mqar_config c = {64, 58, 1, 0.01, 0, 0};
  int space = (c.seq_len - 2) / 2, in[64], tg[64];
  double *count = calloc((size_t)space, sizeof(double)), z = 0.0, worst = 0.0;
  for (int g = 0; g < space; g++) z += pow(g + 1.0, c.alpha - 1.0);
  for (int e = 0; e < N; e++) {
    mqar_example(&c, 7, 0, (uint64_t)e, in, tg);
    for (int t = 2; t < c.seq_len; t++)
      if (tg[t] >= 0) count[(t - 2) / 2] += 1.0;
  }
  for (int g = 0; g < space; g++) {
    double p = pow(g + 1.0, c.alpha - 1.0) / z, sd = sqrt(N * p * (1.0 - p));
    worst = fmax(worst, fabs(count[g] - N * p) / sd);
  }
  th_check(worst < 5.0,
           "K 1, space %d, alpha 0.01: every gap's frequency within 5 sd of its formula (worst %.2f sd; "
           "gap 0: %.3f, want %.3f)",
           space, worst, count[0] / N, 1.0 / z);
  mqar_config u = {64, 48, 4, 1.0, 0, 0};
  int uspace = (u.seq_len - 8) / 2;
  memset(count, 0, (size_t)space * sizeof(double));
  for (int e = 0; e < N; e++) {
    mqar_example(&u, 8, 0, (uint64_t)e, in, tg);
    for (int t = 8; t < u.seq_len; t++)
      if (tg[t] >= 0) count[(t - 8) / 2] += 1.0;
  }
  worst = 0.0;
  double p = 4.0 / uspace, sd = sqrt(N * p * (1.0 - p));
  for (int g = 0; g < uspace; g++) worst = fmax(worst, fabs(count[g] - N * p) / sd);
  th_check(worst < 5.0, "K 4 of %d gaps, uniform weights: each gap drawn in %.3f of the examples (worst %.2f sd)",
           uspace, p, worst);
  free(count);
}

static void test_determinism(void) {
  mqar_config c = {8192, 256, 16, 0.01, 1, 0};
  int a[256], at[256], b[256], bt[256], o[256], ot[256], s[256], st[256];
  mqar_example(&c, 1, 0, 5, a, at);
  mqar_example(&c, 1, 0, 6, o, ot); /* another example between: no hidden state */
  mqar_example(&c, 1, 0, 5, b, bt);
  mqar_example(&c, 1, 1, 5, s, st);
  th_check(!memcmp(a, b, sizeof a) && !memcmp(at, bt, sizeof at), "an example is a function of (seed, split, index)");
  th_check(memcmp(a, o, sizeof a) && memcmp(a, s, sizeof a), "another index or split gives another example");
  int batch_in[3 * 256], batch_tg[3 * 256];
  mqar_batch(&c, 1, 0, 4, 3, batch_in, batch_tg);
  th_check(!memcmp(batch_in + 256, a, sizeof a) && !memcmp(batch_tg + 256, at, sizeof at),
           "row 1 of the batch from index 4 is example 5");
}

/* Zoology's layout is what it was before the long-range one existed: a checksum of one example, computed
   with the generator of 95e8a36. */
static void test_zoology_unchanged(void) {
  mqar_config c = {8192, 256, 16, 0.01, 1, 0};
  int in[256], tg[256];
  uint64_t h = 1469598103934665603ull; /* FNV-1a over (input, target) pairs */
  mqar_example(&c, 1, 0, 5, in, tg);
  for (int i = 0; i < 256; i++) {
    h = (h ^ (uint32_t)in[i]) * 1099511628211ull;
    h = (h ^ (uint32_t)tg[i]) * 1099511628211ull;
  }
  th_check(h == 0xd4fee6c7ee31afe1ull, "Zoology's layout unchanged: example 5 of seed 1 hashes to %016llx",
           (unsigned long long)h);
}

/* The long-range layout (spread D): K pairs at even positions of [0, P), filler elsewhere there; K queries at
   positions P + D + 2 j, each key once with its value as the target, filler after; nothing else labelled.
   Every query lies more than D positions after every pair. */
static int spread_errors(const mqar_config *c, const int *in, const int *tg) {
  int V = c->vocab, L = c->seq_len, K = c->n_pairs, half = V / 2, P = mqar_spread_pairs_end(c);
  int Q = mqar_spread_queries_start(c), errors = 0, pairs = 0, queries = 0, last_pair = -1;
  errors += P % 2 != 0 || Q - P != c->spread;
  for (int t = 0; t < P; t += 2) {
    if (tg[t] != -1 || tg[t + 1] != -1) errors++;
    if (in[t] >= 1 && in[t] < half && in[t + 1] >= half) {
      pairs++, last_pair = t + 1;
      for (int u = 0; u < t; u += 2) errors += in[u] == in[t] && in[u + 1] >= half; /* distinct keys */
    } else
      errors += !c->random_filler && (in[t] != 0 || in[t + 1] != 0);
  }
  for (int t = P; t < L; t++) {
    if (tg[t] < 0) {
      errors += tg[t] != -1 || (!c->random_filler && in[t] != 0);
      continue;
    }
    queries++;
    errors += t < Q || (t - Q) % 2 != 0 || t - last_pair <= c->spread;
    int value = -1;
    for (int u = 0; u < P; u += 2)
      if (in[u] == in[t] && in[u + 1] >= half) value = in[u + 1];
    errors += tg[t] != value;
    errors += t + 1 < L && (tg[t + 1] != -1 || (!c->random_filler && in[t + 1] != 0));
  }
  return errors + (pairs != K) + (queries != K);
}

static void test_spread(void) {
  mqar_config settings[] = {{8192, 4096, 64, 0.01, 0, 128}, {8192, 1024, 16, 0.01, 0, 128}, {64, 300, 12, 0.01, 0, 50},
                            {64, 110, 12, 0.01, 0, 60}};
  for (size_t s = 0; s < sizeof settings / sizeof settings[0]; s++) {
    mqar_config c = settings[s];
    int *in = malloc((size_t)c.seq_len * sizeof(int)), *tg = malloc((size_t)c.seq_len * sizeof(int)), bad = 0, rc = 0;
    for (int e = 0; e < 200; e++) {
      rc |= mqar_example(&c, 42, (uint64_t)(e % 2), (uint64_t)e, in, tg);
      bad += spread_errors(&c, in, tg) != 0;
    }
    th_check(!rc && bad == 0, "long range: V %d, L %d, K %d, D %d: %d of 200 examples break the layout", c.vocab,
             c.seq_len, c.n_pairs, c.spread, bad);
    free(in);
    free(tg);
  }
  mqar_config tight = {64, 106, 12, 0.01, 0, 60}, wide = {64, 100, 4, 0.01, 0, 101};
  char err[160] = "";
  th_check(mqar_check(&tight, err, sizeof err) == -1 && mqar_check(&wide, NULL, 0) == -1,
           "long range: too little room for the pairs or a gap longer than L refused (%s)", err);
}

static void test_refused(void) {
  mqar_config bad[] = {
      {8192, 15, 4, 0.01, 0, 0}, {16, 64, 8, 0.01, 0, 0}, {8192, 64, 0, 0.01, 0, 0}, {8192, 64, 4, 0.0, 0, 0}, {2, 64, 1, 0.01, 0, 0}};
  int refused = 0, in[64], tg[64];
  char err[160] = "";
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    refused += mqar_check(&bad[i], err, sizeof err) == -1 && mqar_example(&bad[i], 1, 0, 0, in, tg) == -1;
  th_check(refused == 5, "5 impossible configurations refused (%d), e.g. %s", refused, err);
  mqar_config edge = {16, 28, 7, 0.01, 0, 0}; /* every key of [1, 8) used, L = 4 K */
  th_check(mqar_check(&edge, err, sizeof err) == 0, "K = V/2 - 1 with L = 4 K is accepted");
}

int main(void) {
  printf("mqar: the layout of the examples\n");
  mqar_config settings[] = {{8192, 64, 4, 0.01, 0, 0}, {8192, 128, 8, 0.01, 1, 0}, {8192, 256, 16, 0.01, 0, 0},
                            {64, 256, 16, 0.01, 1, 0}, {16, 28, 7, 0.01, 0, 0},    {8192, 1024, 256, 0.01, 0, 0}};
  for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) test_layout(settings[i], 300);
  printf("mqar: the gaps, determinism, refused configurations\n");
  test_gap_law();
  test_determinism();
  test_refused();
  test_zoology_unchanged();
  printf("mqar: the long-range layout\n");
  test_spread();
  return th_summary("test_mqar");
}
