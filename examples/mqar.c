/* mqar: trains and evaluates a titans.h model on multi-query associative recall (examples/mqar.h, Zoology's
   MQAR), through the library's API: titans_train_step_targets with filler as the input and the value as the
   target, titans_forward_logits for the held-out accuracy (the fraction of queries whose argmax is the value).
   The model is an ordinary checkpoint (titans_model_load reads it) whose metadata holds the task.

     ./mqar train --block attn --d 64 --vocab 8192 --train 64:4,128:8,256:16 --steps 2000 --out attn.safetensors
     ./mqar eval --model attn.safetensors --eval 256:16,512:64
     ./mqar plot --results runs.tsv --out mqar.svg       (accuracy against recurrent state floats)

   docs/mqar.md: the task, the options, the runs and their results. */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "mqar.h"

#include <errno.h>
#include <stdarg.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MQAR_MAX_TASKS 16

typedef struct task_list {
  int n;
  int len[MQAR_MAX_TASKS];   /* L */
  int pairs[MQAR_MAX_TASKS]; /* K */
  int spread[MQAR_MAX_TASKS]; /* D of the long-range layout (L:K:D), 0 for Zoology's (L:K) */
} task_list;

typedef struct options {
  const char *cmd, *out, *model, *results, *plot_in;
  int block, d, layers, heads, mem_heads, mem_depth, chunk, window, segment, slots, gated_delta, lookup_init, no_forget,
      per_token_grad, least_squares;
  double theta_max, emb_shared;
  int vocab, random_filler, curriculum, threads, seed_given, batch_given;
  double alpha, lr;
  long steps, batch, warmup, log_every, eval_every, eval_examples;
  uint64_t seed;
  task_list train, eval;
} options;

static void usage_fail(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "mqar %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(2);
}

static double now_seconds(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *usage_text =
    "usage: mqar train [options]          train a model on MQAR, print progress and held-out accuracy\n"
    "       mqar eval --model PATH [--eval L:K,...] [--eval-examples N] [--seed S] [--batch B]\n"
    "         (the task, seed and batch of the run by default, from the checkpoint's metadata)\n"
    "       mqar plot --results FILE --out FILE.svg   accuracy against recurrent state floats\n"
    "task:   --vocab V (8192)  --train L:K,... (64:4)  --eval L:K,... (the training tasks)  --alpha A (0.01)\n"
    "        a task L:K:D is the long-range layout: the pairs spread through the first (L - D) / 2 positions,\n"
    "        the queries after a gap of D (docs/mqar.md)\n"
    "        --random-filler (filler tokens uniform in [0, V); default 0)  --curriculum (the steps in phases,\n"
    "        phase p training on the first p + 1 tasks; default every task from the start, round robin)\n"
    "model:  --block attn|swa|mac|mag|mal|lmm|lm2 (attn)  --d 64  --layers 2  --heads H  --mem-heads H\n"
    "        --mem-depth N  --chunk B  --window W (64)  --segment C  --slots N  --theta-max X\n"
    "        --gated-delta (the memory as a gated delta rule: depth 1, no momentum, unbounded step,\n"
    "        titans_mem_config_gated_delta: chunk 16 computed as chunk 1)  --per-token-grad 0|1 (1: each token's\n"
    "        error at the weights before it with any --chunk, the delta rule's chunked form; 0: a chunk's\n"
    "        gradients at its start; default the configuration's, cfg.mem.per_token_grad)\n"
    "        --no-forget (the memory forgets nothing: alpha_t = 0,\n"
    "        cfg.mem.no_forget)  --least-squares (the memory as the least-squares fit of values on keys, depth 1,\n"
    "        theta_max 100 unless given: cfg.mem.least_squares, docs/model.md 1.11)\n"
    "        --lookup-init (titans_lookup_init_default: memory keys on the previous token)\n"
    "        --emb-shared X (every token embedding starts with one shared vector, X times\n"
    "        the normal std: attention can then attend by position; titans_lookup_init.emb_shared)\n"
    "train:  --steps 1000  --batch 32  --lr 3e-3  --warmup (steps / 10)  --seed 1  --threads N\n"
    "        --log-every 50  --eval-every 200 (0: at the end only)  --eval-examples 256\n"
    "        --out PATH (mqar.safetensors; plot: mqar.svg)  --results FILE (append one line per evaluated task)\n";

#include "args.h"

/* "64:4,128:8,4096:64:128" into tasks (L:K, or L:K:D for the long-range layout); 0 or -1 for a malformed list */
static int parse_tasks(const char *s, task_list *tl) {
  tl->n = 0;
  while (*s) {
    int len, pairs, spread = 0, used = 0, more = 0;
    if (tl->n == MQAR_MAX_TASKS || sscanf(s, "%d:%d%n", &len, &pairs, &used) != 2 || len < 1 || pairs < 1) return -1;
    s += used;
    if (*s == ':' && (sscanf(s, ":%d%n", &spread, &more) != 1 || spread < 1)) return -1;
    s += more;
    tl->len[tl->n] = len;
    tl->spread[tl->n] = spread;
    tl->pairs[tl->n++] = pairs;
    if (*s == ',')
      s++;
    else if (*s)
      return -1;
  }
  return tl->n ? 0 : -1;
}

static void format_tasks(char *out, size_t size, const task_list *tl) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < tl->n && used < size; i++)
    used += tl->spread[i] ? (size_t)snprintf(out + used, size - used, "%s%d:%d:%d", i ? "," : "", tl->len[i],
                                             tl->pairs[i], tl->spread[i])
                          : (size_t)snprintf(out + used, size - used, "%s%d:%d", i ? "," : "", tl->len[i], tl->pairs[i]);
}

static options default_options(const char *cmd) {
  options o;
  memset(&o, 0, sizeof o);
  o.cmd = cmd;
  o.block = TITANS_BLOCK_ATTN;
  o.d = 64;
  o.layers = 2;
  o.window = 64;
  o.vocab = 8192;
  o.alpha = 0.01;
  o.lr = 3e-3;
  o.steps = 1000;
  o.batch = 32;
  o.warmup = -1;
  o.per_token_grad = -1; /* the configuration's */
  o.log_every = 50;
  o.eval_every = 200;
  o.eval_examples = 256;
  o.seed = 1;
  parse_tasks("64:4", &o.train);
  return o;
}

static options parse_options(const char *cmd, int argc, char **argv) {
  options o = default_options(cmd);
  args a = {argc, 1, argv, cmd};
  for (; a.i < argc; a.i++) {
    const char *s = argv[a.i];
    if (!strcmp(s, "--block")) {
      const char *k = arg_value(&a, s);
      if ((o.block = titans_block_from_name(k)) < 0)
        usage_fail(cmd, "--block %s: want attn, swa, mac, mag, mal, lmm or lm2", k);
    } else if (!strcmp(s, "--d"))
      o.d = (int)arg_long(&a, s, 2, 65536);
    else if (!strcmp(s, "--layers"))
      o.layers = (int)arg_long(&a, s, 1, 1024);
    else if (!strcmp(s, "--heads"))
      o.heads = (int)arg_long(&a, s, 1, 65536);
    else if (!strcmp(s, "--mem-heads"))
      o.mem_heads = (int)arg_long(&a, s, 1, 65536);
    else if (!strcmp(s, "--mem-depth"))
      o.mem_depth = (int)arg_long(&a, s, 1, TITANS_MEM_MAX_DEPTH);
    else if (!strcmp(s, "--chunk"))
      o.chunk = (int)arg_long(&a, s, 1, 4096);
    else if (!strcmp(s, "--window"))
      o.window = (int)arg_long(&a, s, 1, 1 << 24);
    else if (!strcmp(s, "--segment"))
      o.segment = (int)arg_long(&a, s, 1, 65536);
    else if (!strcmp(s, "--slots"))
      o.slots = (int)arg_long(&a, s, 1, 65536);
    else if (!strcmp(s, "--theta-max"))
      o.theta_max = arg_double(&a, s, 1e-9, 100.0);
    else if (!strcmp(s, "--gated-delta"))
      o.gated_delta = 1;
    else if (!strcmp(s, "--no-forget"))
      o.no_forget = 1;
    else if (!strcmp(s, "--least-squares"))
      o.least_squares = 1;
    else if (!strcmp(s, "--per-token-grad"))
      o.per_token_grad = (int)arg_long(&a, s, 0, 1);
    else if (!strcmp(s, "--lookup-init"))
      o.lookup_init = 1;
    else if (!strcmp(s, "--emb-shared"))
      o.emb_shared = arg_double(&a, s, 0.0, 100.0);
    else if (!strcmp(s, "--vocab"))
      o.vocab = (int)arg_long(&a, s, 4, 1 << 24);
    else if (!strcmp(s, "--alpha"))
      o.alpha = arg_double(&a, s, 1e-6, 100.0);
    else if (!strcmp(s, "--random-filler"))
      o.random_filler = 1;
    else if (!strcmp(s, "--curriculum"))
      o.curriculum = 1;
    else if (!strcmp(s, "--train") || !strcmp(s, "--eval")) {
      const char *v = arg_value(&a, s);
      if (parse_tasks(v, !strcmp(s, "--train") ? &o.train : &o.eval))
        usage_fail(cmd, "%s %s: want L:K or L:K:D separated by commas (at most %d)", s, v, MQAR_MAX_TASKS);
    } else if (!strcmp(s, "--steps"))
      o.steps = arg_long(&a, s, 1, 1L << 30);
    else if (!strcmp(s, "--batch")) {
      o.batch = arg_long(&a, s, 1, 1 << 16);
      o.batch_given = 1;
    } else if (!strcmp(s, "--lr"))
      o.lr = arg_double(&a, s, 0.0, 10.0);
    else if (!strcmp(s, "--warmup"))
      o.warmup = arg_long(&a, s, 0, 1L << 30);
    else if (!strcmp(s, "--seed")) {
      o.seed = (uint64_t)arg_long(&a, s, 0, 1L << 30);
      o.seed_given = 1;
    } else if (!strcmp(s, "--threads"))
      o.threads = (int)arg_long(&a, s, 1, 4096);
    else if (!strcmp(s, "--log-every"))
      o.log_every = arg_long(&a, s, 1, 1L << 30);
    else if (!strcmp(s, "--eval-every"))
      o.eval_every = arg_long(&a, s, 0, 1L << 30);
    else if (!strcmp(s, "--eval-examples"))
      o.eval_examples = arg_long(&a, s, 1, 1L << 24);
    else if (!strcmp(s, "--out"))
      o.out = arg_value(&a, s);
    else if (!strcmp(s, "--model"))
      o.model = arg_value(&a, s);
    else if (!strcmp(s, "--results"))
      o.results = arg_value(&a, s);
    else if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      fputs(usage_text, stdout);
      exit(0);
    } else
      usage_fail(cmd, "unknown option %s (mqar --help)", s);
  }
  if (o.warmup < 0) o.warmup = o.steps / 10;
#ifdef _OPENMP
  if (o.threads) omp_set_num_threads(o.threads);
#endif
  return o;
}

/* The model's configuration from the options (the library's defaults for what they leave out). */
static titans_config model_config(const options *o) {
  titans_config c = titans_config_default(o->block, o->vocab, o->d, o->layers);
  if (o->gated_delta) c.mem = titans_mem_config_gated_delta(o->d);
  if (o->heads) c.attn_heads = o->heads;
  if (o->mem_heads) {
    c.mem.heads = o->mem_heads;
    c.mem.head_dim = o->d / o->mem_heads;
  }
  if (o->mem_depth) c.mem.depth = o->mem_depth;
  if (o->chunk) c.mem.chunk = o->chunk;
  c.mem.no_forget = o->no_forget;
  if (o->per_token_grad >= 0) c.mem.per_token_grad = o->per_token_grad;
  if (o->theta_max > 0) c.mem.theta_max = (float)o->theta_max;
  if (o->least_squares) { /* a fit has no step to bound, carry on or forget (docs/model.md 1.11) */
    titans_mem_config_use_least_squares(&c.mem);
    if (!(o->theta_max > 0)) c.mem.theta_max = 100.0f;
  }
  c.window = o->window;
  if (o->segment) c.segment = o->segment;
  if (o->slots) c.lm2_slots = o->slots;
  int longest = 0;
  for (int i = 0; i < o->train.n; i++) longest = o->train.len[i] > longest ? o->train.len[i] : longest;
  if (c.max_context < longest) c.max_context = longest;
  if (o->lookup_init && c.mem.conv_width >= 2)
    c.mem.key_ngram = 1; /* the trainer holds the key on the previous token */
  return c;
}

/* Floats a model of configuration c carries from token to token at sequence length L, summed over layers as
   Zoology's state_size sums its mixers' (a DeltaNet layer counts heads x d_k x d_v, its conv tails not):
   every layer's memory matrices (and momentum when it has one), the keys and values an attention keeps
   (L for full attention, the window for SWA, MAG, MAL, a segment's retrieved and own tokens for MAC), LM2's
   bank. Parameters (persistent tokens, w0) and the short conv tails are not counted. */
static double state_floats(const titans_config *c, int L) {
  const titans_mem_config *m = &c->mem;
  double mem = 0.0, d = c->d;
  if (c->block == TITANS_BLOCK_MAC || c->block == TITANS_BLOCK_MAG || c->block == TITANS_BLOCK_MAL ||
      c->block == TITANS_BLOCK_LMM) {
    double n_hid = (double)m->hidden_mult * m->head_dim, weights = 0.0;
    for (int l = 0; l < m->depth; l++) {
      double in = l == 0 ? m->head_dim : n_hid, out = l == m->depth - 1 ? m->head_dim : n_hid;
      weights += in * out;
    }
    /* W, and S beside it unless there is no momentum; a least-squares memory keeps G = I - P there instead */
    mem = (double)m->heads * weights * (m->no_momentum && !m->least_squares ? 1.0 : 2.0);
  }
  double window = c->window < L ? c->window : L, kv = 0.0;
  switch (c->block) {
  case TITANS_BLOCK_ATTN:
    kv = 2.0 * L * d;
    break;
  case TITANS_BLOCK_SWA:
  case TITANS_BLOCK_MAG:
  case TITANS_BLOCK_MAL:
    kv = 2.0 * window * d;
    break;
  case TITANS_BLOCK_MAC:
    kv = 2.0 * 2.0 * (c->segment < L ? c->segment : L) * d;
    break;
  case TITANS_BLOCK_LM2:
    kv = 2.0 * L * d + (double)c->lm2_slots * d;
    break;
  default:
    break;
  }
  return c->n_layers * (mem + kv);
}

/* Tokens of one forward at most (when a row is shorter): the trainer keeps every activation of a call, and a
   memory of chunk 1 keeps its state at every token (a head of 64 x 64: 16 KB a token and layer). */
#define MQAR_TOKENS_PER_CALL ((size_t)1 << 15)

/* Rows of an evaluation forward: the answers' logits [rows, K, V] under about 2^25 floats, the tokens under
   MQAR_TOKENS_PER_CALL. */
static size_t eval_rows(const mqar_config *task, long batch) {
  size_t per_row = (size_t)task->n_pairs * (size_t)task->vocab, rows = ((size_t)1 << 25) / (per_row ? per_row : 1);
  size_t by_tokens = MQAR_TOKENS_PER_CALL / (size_t)task->seq_len;
  rows = rows < by_tokens ? rows : by_tokens;
  if (rows < 1) rows = 1;
  return rows < (size_t)batch ? rows : (size_t)batch;
}

/* Fraction of the queries of `examples` held-out examples (split 1) whose argmax logit is the value; -1 on error.
   The head runs on the queries alone (titans_forward_logits_targets). */
static double accuracy(titans_trainer *tr, const mqar_config *task, uint64_t seed, long examples, long batch) {
  size_t L = (size_t)task->seq_len, V = (size_t)task->vocab, K = (size_t)task->n_pairs, rows = eval_rows(task, batch);
  int *inputs = malloc(rows * L * sizeof(int)), *targets = malloc(rows * L * sizeof(int)); /* [rows, L] each */
  int *asked_for = malloc(rows * K * sizeof(int));                                         /* [rows * K] */
  float *logits = titans_alloc_floats(rows * K * V);                                       /* [rows * K, V] */
  long right = 0, asked = 0, rc = !inputs || !targets || !asked_for || !logits;
  for (long e = 0; !rc && e < examples; e += (long)rows) {
    size_t n = (size_t)(examples - e) < rows ? (size_t)(examples - e) : rows, got = 0, k = 0;
    rc = mqar_batch(task, seed, 1, (uint64_t)e, n, inputs, targets) ||
         titans_forward_logits_targets(tr, inputs, targets, n, L, logits, &got);
    for (size_t j = 0; !rc && j < n * L; j++)
      if (targets[j] >= 0) asked_for[k++] = targets[j];
    for (size_t j = 0; !rc && j < got && j < k; j++) {
      const float *z = logits + j * V;
      size_t best = 0;
      for (size_t v = 1; v < V; v++) best = z[v] > z[best] ? v : best;
      right += (int)best == asked_for[j];
      asked++;
    }
  }
  free(asked_for);
  free(inputs);
  free(targets);
  titans_free(logits);
  return rc || !asked ? -1.0 : (double)right / (double)asked;
}

static mqar_config task_at(const task_list *tl, int i, int vocab, double alpha, int random_filler) {
  mqar_config t = {vocab, tl->len[i], tl->pairs[i], alpha, random_filler, tl->spread[i]};
  return t;
}

/* What sets a run apart from its block's defaults, for a results line: "gated-delta", its chunk when not 1,
   "per-token" (per_token_grad, other than the gated delta rule's), "least-squares" (which implies no
   forgetting) or "no-forget", "lookup" (--lookup-init), "sharedX" (--emb-shared X), joined by '+'; "-" for
   none. */
static void variant_name(char *out, size_t size, const options *o, const titans_config *c) {
  int used = snprintf(out, size, "%s", o->gated_delta ? "gated-delta" : "");
  /* the gated delta rule's chunk only when it changes the function (a chunk's gradients at its start) */
  if (o->gated_delta && c->mem.chunk != 1 && !c->mem.per_token_grad)
    used += snprintf(out + used, size - (size_t)used, "-b%d", c->mem.chunk);
  if (!o->gated_delta && c->mem.per_token_grad)
    used += snprintf(out + used, size - (size_t)used, "%sper-token", used ? "+" : "");
  if (c->mem.least_squares) used += snprintf(out + used, size - (size_t)used, "%sleast-squares", used ? "+" : "");
  else if (o->no_forget) used += snprintf(out + used, size - (size_t)used, "%sno-forget", used ? "+" : "");
  if (o->lookup_init) used += snprintf(out + used, size - (size_t)used, "%slookup", used ? "+" : "");
  if (o->emb_shared > 0) snprintf(out + used, size - (size_t)used, "%sshared%g", used ? "+" : "", o->emb_shared);
  if (!out[0]) snprintf(out, size, "-");
}

/* Evaluates every task of tl: prints one line each and appends them to results (may be NULL); *mean (may be
   NULL) gets the mean accuracy. Returns 0 or -1. */
static int evaluate(titans_trainer *tr, const options *o, const task_list *tl, const char *label, long step,
                    double *mean) {
  const titans_config *c = &tr->model->cfg;
  FILE *res = o->results ? fopen(o->results, "a") : NULL;
  if (o->results && !res) usage_fail(o->cmd, "cannot append to %s: %s", o->results, strerror(errno));
  double sum = 0.0;
  int rc = 0;
  char variant[64];
  variant_name(variant, sizeof variant, o, c);
  for (int i = 0; i < tl->n; i++) {
    mqar_config task = task_at(tl, i, c->vocab, o->alpha, o->random_filler);
    double acc = accuracy(tr, &task, o->seed, o->eval_examples, o->batch);
    if (acc < 0) {
      fprintf(stderr, "mqar %s: evaluating L %d K %d failed: %s\n", o->cmd, task.seq_len, task.n_pairs, tr->error);
      rc = -1;
      break;
    }
    sum += acc;
    double state = state_floats(c, task.seq_len);
    char spread[32] = "";
    if (task.spread) snprintf(spread, sizeof spread, "  D %d", task.spread);
    printf("  %-6s step %6ld  L %5d  K %4d%s  accuracy %.4f  (%ld examples)  state %.0f floats\n", label, step,
           task.seq_len, task.n_pairs, spread, acc, o->eval_examples, state);
    if (res)
      fprintf(res, "%s\t%s\td=%d\tlayers=%d\tV=%d\tL=%d\tK=%d\tacc=%.4f\tstate=%.0f\tstep=%ld\tspread=%d\n",
              titans_block_name(c->block), variant, c->d, c->n_layers, c->vocab,
              task.seq_len, task.n_pairs, acc, state, step, task.spread);
  }
  if (res) fclose(res);
  if (mean) *mean = tl->n ? sum / tl->n : 0.0;
  return rc;
}

/* The task of training step s: round robin over the tasks, or over the first p + 1 in phase p of a curriculum. */
static int task_of_step(const options *o, long s) {
  int active = o->train.n;
  if (o->curriculum) {
    active = (int)(1 + s * o->train.n / o->steps);
    if (active > o->train.n) active = o->train.n;
  }
  return (int)(s % active);
}

/* The metadata names the task and how it was trained; no_forget and per_token_grad are the model's
   configuration (a least-squares memory forgets nothing without --no-forget being given). */
static void write_checkpoint(titans_model *m, const options *o, double mean_acc) {
  char tasks[512], meta[1024];
  format_tasks(tasks, sizeof tasks, &o->train);
  snprintf(meta, sizeof meta,
           "mqar: alpha=%g random_filler=%d train=%s curriculum=%d steps=%ld batch=%ld lr=%g seed=%llu gated_delta=%d "
           "lookup_init=%d emb_shared=%g no_forget=%d per_token_grad=%d mean_accuracy=%.4f",
           o->alpha, o->random_filler, tasks, o->curriculum, o->steps, o->batch, o->lr, (unsigned long long)o->seed,
           o->gated_delta, o->lookup_init, o->emb_shared, m->cfg.mem.no_forget, m->cfg.mem.per_token_grad, mean_acc);
  if (titans_model_save_ex(m, NULL, meta, o->out) != TITANS_OK) usage_fail(o->cmd, "saving %s: %s", o->out, m->error);
  printf("saved %s (task in its metadata: %s)\n", o->out, meta);
}

static int cmd_train(options *o) {
  char err[TITANS_ERR_MSG_SIZE];
  if (!o->out) o->out = "mqar.safetensors";
  if (!o->eval.n) o->eval = o->train;
  for (int i = 0; i < o->train.n; i++) {
    mqar_config t = task_at(&o->train, i, o->vocab, o->alpha, o->random_filler);
    if (mqar_check(&t, err, sizeof err)) usage_fail(o->cmd, "%s", err);
  }
  titans_config c = model_config(o);
  if (titans_config_check(&c, err)) usage_fail(o->cmd, "%s", err);
  titans_model m;
  if (titans_model_init(&m, &c)) usage_fail(o->cmd, "%s", m.error);
  titans_model_init_weights(&m, o->seed);
  if (o->lookup_init || o->emb_shared > 0) {
    /* --lookup-init: the library's look-up start; --emb-shared alone: the shared vector and nothing else.
       One call, so that the shared vector is added before the embeddings' scale as documented. */
    titans_lookup_init li = {.key_shift = 0, .attn_identity = 0.0f, .emb_scale = 1.0f, .emb_shared = 0.0f};
    if (o->lookup_init) li = titans_lookup_init_default();
    li.head_gain = 0.0f; /* the head as it was: docs/mqar.md's runs were made before head_gain existed */
    li.emb_shared = (float)o->emb_shared;
    titans_model_init_lookup(&m, &li);
  }
  titans_train_config tc = titans_train_config_for_steps(o->steps);
  tc.lr = (float)o->lr;
  tc.min_lr = tc.lr / 10;
  tc.warmup_steps = o->warmup;
  titans_trainer tr;
  if (titans_trainer_init(&tr, &m, &tc)) usage_fail(o->cmd, "%s", tr.error);
  int longest = 0;
  for (int i = 0; i < o->train.n; i++) longest = o->train.len[i] > longest ? o->train.len[i] : longest;
  size_t B = (size_t)o->batch;
  int *inputs = malloc(B * (size_t)longest * sizeof(int)),
      *targets = malloc(B * (size_t)longest * sizeof(int)); /* [B, L] */
  if (!inputs || !targets) usage_fail(o->cmd, "out of memory");
  printf("mqar: %s d %d layers %d, %zu parameters, V %d, train %d task(s)%s, %ld steps of %ld, lr %g\n",
         titans_block_name(c.block), c.d, c.n_layers, m.n_floats, c.vocab, o->train.n,
         o->curriculum ? " (curriculum)" : "", o->steps, o->batch, o->lr);
  double start = now_seconds(), loss_sum = 0.0, mean_acc = 0.0;
  long loss_n = 0;
  for (long s = 0; s < o->steps; s++) {
    int ti = task_of_step(o, s);
    mqar_config task = task_at(&o->train, ti, o->vocab, o->alpha, o->random_filler);
    if (mqar_batch(&task, o->seed, 0, (uint64_t)s * B, B, inputs, targets)) usage_fail(o->cmd, "making a batch failed");
    float loss = 0.0f;
    /* micro-batches of at most MQAR_TOKENS_PER_CALL tokens (halving while the rows split evenly): each row
       holds K targets, so the mean of the micro-batches' means is the batch's mean */
    size_t micro = B;
    while (micro % 2 == 0 && micro * (size_t)task.seq_len > MQAR_TOKENS_PER_CALL) micro /= 2;
    if (titans_train_step_targets(&tr, inputs, targets, B / micro, micro, (size_t)task.seq_len, &loss))
      usage_fail(o->cmd, "step %ld: %s", s, tr.error);
    loss_sum += loss;
    loss_n++;
    if ((s + 1) % o->log_every == 0 || s + 1 == o->steps) {
      printf("step %6ld/%ld  L %4d K %3d  loss %.4f  lr %.2e  %.0f s\n", s + 1, o->steps, task.seq_len, task.n_pairs,
             loss_sum / loss_n, tr.last_lr, now_seconds() - start);
      fflush(stdout);
      loss_sum = 0.0;
      loss_n = 0;
    }
    if (o->eval_every && (s + 1) % o->eval_every == 0 && s + 1 < o->steps)
      evaluate(&tr, o, &o->eval, "eval", s + 1, NULL);
  }
  printf("trained in %.0f s; held-out accuracy (seed %llu, split 1):\n", now_seconds() - start,
         (unsigned long long)o->seed);
  if (evaluate(&tr, o, &o->eval, "final", o->steps, &mean_acc)) usage_fail(o->cmd, "evaluation failed");
  write_checkpoint(&m, o, mean_acc);
  free(inputs);
  free(targets);
  titans_trainer_free(&tr);
  titans_model_free(&m);
  return 0;
}

/* value of "key=" in the metadata string, copied into out; 0 or -1 when absent */
static int meta_field(const char *meta, const char *key, char *out, size_t size) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, " %s=", key);
  const char *p = meta ? strstr(meta, pattern) : NULL;
  if (!p) return -1;
  p += strlen(pattern);
  size_t n = strcspn(p, " ");
  if (n >= size) return -1;
  memcpy(out, p, n);
  out[n] = '\0';
  return 0;
}

static int cmd_eval(options *o) {
  if (!o->model) usage_fail(o->cmd, "--model PATH is required");
  titans_model m;
  char *meta = NULL, v[512];
  if (titans_model_load_ex(&m, NULL, &meta, o->model)) usage_fail(o->cmd, "%s", m.error);
  if (!meta || strncmp(meta, "mqar:", 5)) usage_fail(o->cmd, "%s has no MQAR task in its metadata", o->model);
  if (!meta_field(meta, "alpha", v, sizeof v)) o->alpha = atof(v);
  if (!meta_field(meta, "random_filler", v, sizeof v)) o->random_filler = atoi(v);
  if (!meta_field(meta, "gated_delta", v, sizeof v)) o->gated_delta = atoi(v);
  if (!meta_field(meta, "lookup_init", v, sizeof v)) o->lookup_init = atoi(v);
  if (!meta_field(meta, "emb_shared", v, sizeof v)) o->emb_shared = atof(v);
  if (!meta_field(meta, "no_forget", v, sizeof v)) o->no_forget = atoi(v);
  /* the held-out examples of the run's seed, in the run's batches (the same sums, so the same answers) */
  if (!o->seed_given && !meta_field(meta, "seed", v, sizeof v)) o->seed = strtoull(v, NULL, 10);
  if (!o->batch_given && !meta_field(meta, "batch", v, sizeof v)) o->batch = atol(v);
  if (!o->eval.n && (meta_field(meta, "train", v, sizeof v) || parse_tasks(v, &o->eval)))
    usage_fail(o->cmd, "%s: no --eval tasks and none in its metadata", o->model);
  printf("%s: %s d %d layers %d, V %d; %s\n", o->model, titans_block_name(m.cfg.block), m.cfg.d, m.cfg.n_layers,
         m.cfg.vocab, meta);
  titans_trainer tr;
  if (titans_trainer_init(&tr, &m, NULL)) usage_fail(o->cmd, "%s", tr.error);
  int rc = evaluate(&tr, o, &o->eval, "eval", 0, NULL);
  titans_free(meta);
  titans_trainer_free(&tr);
  titans_model_free(&m);
  return rc ? 1 : 0;
}

/* Published points of Zoology's accuracy-against-state figure, as issue 39 reads them off (floats, accuracy). */
typedef struct published_point {
  const char *name;
  double state, accuracy;
} published_point;

static const published_point zoology_points[] = {{"DeltaNet", 9e3, 0.79},        {"DeltaNet", 35e3, 0.96},
                                                 {"Gated DeltaNet", 17e3, 0.89}, {"GLA", 5e3, 0.53},
                                                 {"Mamba-2", 8e3, 0.52},         {"sliding window", 10e3, 0.08}};

/* One run's line of a results file (evaluate writes them). */
typedef struct result_line {
  char block[16], variant[32];
  int d, L, K;
  double acc, state;
  long step;
} result_line;

static int read_result(const char *line, result_line *r) {
  return sscanf(line, "%15s %31s d=%d %*s %*s L=%d K=%d acc=%lf state=%lf step=%ld", r->block, r->variant, &r->d, &r->L,
                &r->K, &r->acc, &r->state, &r->step) == 8
             ? 0
             : -1;
}

/* x of a state size on the plot's log axis from 10^2 to 10^7 floats */
static double plot_x(double state) {
  double lx = log10(state < 100 ? 100 : state > 1e7 ? 1e7 : state);
  return 60.0 + (lx - 2.0) / 5.0 * 620.0;
}

static double plot_y(double acc) { return 20.0 + (1.0 - acc) * 360.0; }

/* An SVG of accuracy against recurrent state floats: every results line (a labelled dot) and Zoology's points. */
static int cmd_plot(options *o) {
  if (!o->results) usage_fail(o->cmd, "--results FILE is required");
  if (!o->out) o->out = "mqar.svg";
  FILE *in = fopen(o->results, "r");
  if (!in) usage_fail(o->cmd, "cannot read %s: %s", o->results, strerror(errno));
  FILE *out = fopen(o->out, "w");
  if (!out) usage_fail(o->cmd, "cannot write %s: %s", o->out, strerror(errno));
  fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"760\" height=\"430\" font-family=\"sans-serif\" "
               "font-size=\"10\">\n<rect width=\"760\" height=\"430\" fill=\"white\"/>\n");
  for (int e = 2; e <= 7; e++)
    fprintf(out,
            "<line x1=\"%.0f\" y1=\"20\" x2=\"%.0f\" y2=\"380\" stroke=\"#ddd\"/><text x=\"%.0f\" y=\"395\" "
            "text-anchor=\"middle\">1e%d</text>\n",
            plot_x(pow(10, e)), plot_x(pow(10, e)), plot_x(pow(10, e)), e);
  for (int i = 0; i <= 4; i++)
    fprintf(out,
            "<line x1=\"60\" y1=\"%.0f\" x2=\"680\" y2=\"%.0f\" stroke=\"#ddd\"/><text x=\"55\" y=\"%.0f\" "
            "text-anchor=\"end\">%.2f</text>\n",
            plot_y(i / 4.0), plot_y(i / 4.0), plot_y(i / 4.0) + 3, i / 4.0);
  fprintf(out,
          "<text x=\"370\" y=\"420\" text-anchor=\"middle\">recurrent state (floats, log scale)</text>\n"
          "<text x=\"15\" y=\"200\" transform=\"rotate(-90 15 200)\" text-anchor=\"middle\">MQAR accuracy</text>\n");
  for (size_t i = 0; i < sizeof zoology_points / sizeof zoology_points[0]; i++) {
    const published_point *p = &zoology_points[i];
    fprintf(out,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"#999\"/><text x=\"%.1f\" y=\"%.1f\" "
            "fill=\"#777\">%s (Zoology)</text>\n",
            plot_x(p->state) - 3.5, plot_y(p->accuracy) - 3.5, plot_x(p->state) + 6, plot_y(p->accuracy) + 3, p->name);
  }
  char line[512];
  int plotted = 0;
  while (fgets(line, sizeof line, in)) {
    result_line r;
    if (read_result(line, &r)) continue;
    fprintf(out,
            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#c33\"/><text x=\"%.1f\" y=\"%.1f\">%s%s%s d%d "
            "%d:%d</text>\n",
            plot_x(r.state), plot_y(r.acc), plot_x(r.state) + 6, plot_y(r.acc) - 4, r.block,
            strcmp(r.variant, "-") ? " " : "", strcmp(r.variant, "-") ? r.variant : "", r.d, r.L, r.K);
    plotted++;
  }
  fprintf(out, "</svg>\n");
  fclose(in);
  if (fclose(out)) usage_fail(o->cmd, "writing %s failed", o->out);
  printf("wrote %s: %d results and %zu published points\n", o->out, plotted,
         sizeof zoology_points / sizeof zoology_points[0]);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines reach a log file as they are printed */
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    fputs(usage_text, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  options o = parse_options(argv[1], argc - 1, argv + 1);
  if (!strcmp(argv[1], "train")) return cmd_train(&o);
  if (!strcmp(argv[1], "eval")) return cmd_eval(&o);
  if (!strcmp(argv[1], "plot")) return cmd_plot(&o);
  usage_fail(argv[1], "unknown command (train, eval, plot)");
  return 2;
}
