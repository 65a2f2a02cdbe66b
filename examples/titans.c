/* titans: train a Titans language model on a text file, then generate text from it.

     ./titans                      train a small model on the built-in text and print a sample
     ./titans train [options]      train (see ./titans help train)
     ./titans generate [options]   generate from a checkpoint (see ./titans help generate)
     ./titans eval [options]       loss by position over long held-out streams (see ./titans help eval)
     ./titans needle [options]     retrieval of a needle stated long ago (see ./titans help needle)

   A program built on titans.h only: the library computes, this file reads files, parses arguments,
   prints, draws the loss plot and keeps the training run reproducible. Everything a resumed run needs
   (weights, optimizer moments, step, the data's identity, the loss history) is in one trainer
   checkpoint; the data sampler draws the batch of step s from (seed, s) alone, so a run resumed from
   step s is bit-identical to one that never stopped. The retrieval tasks of needle and train --task are
   in longctx.h. See docs/usage.md, docs/checkpoints.md and docs/long_context.md. */
#define _POSIX_C_SOURCE 200809L /* mkdir, rmdir, stat */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "default_text.h"
#include "longctx.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _WIN32
#include <direct.h>
#include <sys/stat.h>
#ifndef S_ISDIR
#define S_ISDIR(mode) (((mode) & _S_IFMT) == _S_IFDIR)
#endif
#else
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- small utilities ------------------------------------------------------------------------- */

static void fail(const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "titans: error: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(1);
}

/* A usage error: the message, a pointer to help, exit code 2. */
static void usage_fail(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fprintf(stderr, "titans %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(run './titans help %s' for the options)\n", cmd);
  exit(2);
}

static double now_seconds(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) fail("out of memory (%zu bytes)", n);
  return p;
}

/* The most --data reads by default: 1 GiB (the tokens take 4 bytes per byte of text on top of it). */
#define DATA_MAX_BYTES (1L << 30)

/* The whole file, at most max bytes; NULL (errno set: EFBIG when it holds more) when it cannot be
   read. Reads in pieces, so a file that never ends (/dev/zero) stops at the cap. */
static char *read_file(const char *path, size_t *size, size_t max) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = (char *)xmalloc(cap);
  for (;;) {
    if (n > max) {
      fclose(f);
      free(buf);
      errno = EFBIG;
      return NULL;
    }
    if (n == cap) {
      cap = cap > max / 2 ? max + 1 : 2 * cap; /* max + 1: room to see that the file holds more */
      char *nb = (char *)realloc(buf, cap);
      if (!nb) fail("out of memory reading %s", path);
      buf = nb;
    }
    errno = 0;
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  int bad = ferror(f) ? (errno ? errno : EIO) : 0; /* what the read said: EISDIR for a directory */
  fclose(f);
  if (bad) {
    free(buf);
    errno = bad;
    return NULL;
  }
  *size = n;
  return buf;
}

static int file_exists(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f) fclose(f);
  return f != NULL;
}

/* Exits (1) unless path can be read and starts as a safetensors file does: an 8-byte little-endian header
   length within the limit and the file, then a JSON object. The message says what the file is not. */
static void check_safetensors_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) fail("cannot read %s: %s", path, strerror(errno));
  unsigned char head[9];
  size_t got = fread(head, 1, sizeof head, f);
  int err = ferror(f) ? errno : 0;
  long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  fclose(f);
  if (err || size < 0) fail("cannot read %s: %s", path, strerror(err ? err : EIO)); /* e.g. a directory */
  if (got < 8) fail("%s is not a safetensors file (%zu bytes, fewer than the 8 of the header length)", path, got);
  unsigned long long header_len = 0;
  for (int i = 7; i >= 0; i--) header_len = header_len << 8 | head[i];
  if (header_len > TITANS_ST_MAX_HEADER)
    fail("%s is not a safetensors file (header length %llu is over the limit of %u bytes)", path, header_len,
         (unsigned)TITANS_ST_MAX_HEADER);
  if (header_len > (unsigned long long)size - 8)
    fail("%s is truncated or not a safetensors file (header length %llu, but the file has %ld bytes)", path,
         header_len, size);
  if (got < 9 || head[8] != '{') fail("%s is not a safetensors file (its header is not a JSON object)", path);
}

/* Exits (1) with a library message about the file at path, naming the file once: the reader's messages
   start with the path already ("path: safetensors: ..."), the checkpoint checks' do not. */
static void fail_file(const char *path, const char *msg) {
  size_t n = strlen(path);
  if (!strncmp(msg, path, n) && !strncmp(msg + n, ": ", 2)) msg += n + 2;
  fail("%s: %s", path, msg);
}

/* A model (or trainer) checkpoint and its tokenizer; exits (1) with a message naming the file when it is not one. */
static void load_model(titans_model *m, titans_tokenizer *tok, const char *path) {
  check_safetensors_file(path);
  if (titans_model_load_ex(m, tok, NULL, path) != TITANS_OK) fail_file(path, m->error);
}

static char *path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = (char *)xmalloc(a + b + 2);
  memcpy(p, dir, a);
  p[a] = '/';
  memcpy(p + a + 1, name, b + 1);
  return p;
}

/* Directories made by make_dirs in this run, outermost first. At exit the ones still empty are removed,
   so a run that failed before writing anything leaves no folder behind. */
#define MAX_CREATED_DIRS 64
static char *created_dirs[MAX_CREATED_DIRS];
static int n_created_dirs;

static void remove_empty_created_dirs(void) {
  for (int i = n_created_dirs - 1; i >= 0; i--) {
#ifdef _WIN32
    _rmdir(created_dirs[i]); /* fails, harmlessly, when something was written into it */
#else
    rmdir(created_dirs[i]);
#endif
    free(created_dirs[i]);
  }
  n_created_dirs = 0;
}

static int is_directory(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* mkdir -p: creates path and its missing parents, remembering what it created (see above). */
static void make_dirs(const char *path) {
  size_t n = strlen(path);
  char *prefix = (char *)xmalloc(n + 1);
  memcpy(prefix, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (i < n && prefix[i] != '/') continue;
    if (prefix[i - 1] == '/') continue; /* "a//b" or a trailing slash */
    char saved = prefix[i];
    prefix[i] = 0;
#ifdef _WIN32
    int rc = _mkdir(prefix);
#else
    int rc = mkdir(prefix, 0777);
#endif
    if (rc == 0 && n_created_dirs < MAX_CREATED_DIRS) {
      if (n_created_dirs == 0) atexit(remove_empty_created_dirs);
      created_dirs[n_created_dirs] = (char *)xmalloc(i + 1);
      memcpy(created_dirs[n_created_dirs++], prefix, i + 1);
    } else if (rc != 0 && errno != EEXIST) fail("cannot create the directory %s: %s", prefix, strerror(errno));
    else if (rc != 0 && !is_directory(prefix)) fail("cannot create the directory %s: %s is a file", path, prefix);
    prefix[i] = saved;
  }
  free(prefix);
}

/* Fails unless a file can be created, written and closed in dir: found now, not after the training. */
static void check_writable_dir(const char *dir) {
  char *probe = path_join(dir, ".titans-write-test");
  FILE *f = fopen(probe, "wb");
  int ok = f != NULL && fputc('x', f) != EOF;
  if (f && fclose(f) != 0) ok = 0;
  int err = errno;
  remove(probe);
  free(probe);
  if (!ok) fail("cannot write in the directory %s: %s", dir, strerror(err));
}

static uint64_t fnv1a(const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* The durations of the last ETA_WINDOW steps: the ETA goes by the recent speed, so that slow first steps
   (or a pause) do not stretch it for the rest of the run. */
#define ETA_WINDOW 20
typedef struct recent_steps {
  double seconds[ETA_WINDOW];
  long n; /* steps added */
} recent_steps;

static void recent_steps_add(recent_steps *r, double seconds) { r->seconds[r->n++ % ETA_WINDOW] = seconds; }

static double recent_steps_mean(const recent_steps *r) {
  long n = r->n < ETA_WINDOW ? r->n : ETA_WINDOW;
  double sum = 0;
  for (long i = 0; i < n; i++) sum += r->seconds[i];
  return n ? sum / (double)n : 0;
}

static void fmt_duration(char *out, size_t size, double s) {
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(out, size, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else if (t >= 60) snprintf(out, size, "%ldm%02lds", t / 60, t % 60);
  else snprintf(out, size, "%lds", t);
}

/* ---- argument parsing ------------------------------------------------------------------------- */

#include "args.h"

static uint64_t arg_u64(args *a, const char *opt) {
  const char *s = arg_value(a, opt);
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-') usage_fail(a->cmd, "%s %s: want a non-negative integer", opt, s);
  return (uint64_t)v;
}

/* "16K" -> 16384, "1M" -> 1048576 (K = 1024, M = 1024^2, G = 1024^3) into *out; 0 when malformed or too
   large. */
static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  if (!*s || *s == '-') return 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return 0;
  unsigned long long unit = 1;
  if (*end == 'K' || *end == 'k') unit = 1ull << 10, end++;
  else if (*end == 'M' || *end == 'm') unit = 1ull << 20, end++;
  else if (*end == 'G' || *end == 'g') unit = 1ull << 30, end++;
  if (*end || v > (unsigned long long)SIZE_MAX / unit) return 0;
  *out = (size_t)(v * unit);
  return 1;
}

/* A size in lo..hi, e.g. --len 16K. */
static size_t arg_size(args *a, const char *opt, size_t lo, size_t hi) {
  const char *s = arg_value(a, opt);
  size_t v;
  if (!parse_size(s, &v) || v < lo || v > hi)
    usage_fail(a->cmd, "%s %s: want a size in %zu..%zu (K = 1024, M = 1024^2)", opt, s, lo, hi);
  return v;
}

#define MAX_LIST 64 /* values a comma-separated option may list */

/* Splits option opt's value, a comma-separated list, into at most max pieces of under 64 bytes each;
   returns the count (at least 1). The value itself is *value, for messages. */
static size_t arg_list_pieces(args *a, const char *opt, char (*pieces)[64], size_t max, const char **value) {
  const char *s = arg_value(a, opt);
  size_t n = 0;
  *value = s;
  for (const char *p = s;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (n == max || len == 0 || len >= 64) usage_fail(a->cmd, "%s %s: want a list of at most %zu values", opt, s, max);
    memcpy(pieces[n], p, len);
    pieces[n++][len] = 0;
    if (!comma) break;
    p = comma + 1;
  }
  return n;
}

/* A comma-separated list of sizes in lo..hi (e.g. 1K,4K,16K or 10,50,90) into out [max]; returns the
   count (at least 1). */
static size_t arg_size_list(args *a, const char *opt, size_t *out, size_t max, size_t lo, size_t hi) {
  char pieces[MAX_LIST][64];
  const char *s;
  size_t n = arg_list_pieces(a, opt, pieces, max < MAX_LIST ? max : MAX_LIST, &s);
  for (size_t i = 0; i < n; i++)
    if (!parse_size(pieces[i], &out[i]) || out[i] < lo || out[i] > hi)
      usage_fail(a->cmd, "%s %s: '%s' is not in %zu..%zu (K = 1024)", opt, s, pieces[i], lo, hi);
  return n;
}

/* A comma-separated list of numbers in lo..hi (e.g. 0.0001,0.0000001) into out [max]; returns the count
   (at least 1). */
static size_t arg_double_list(args *a, const char *opt, double *out, size_t max, double lo, double hi) {
  char pieces[MAX_LIST][64], *end;
  const char *s;
  size_t n = arg_list_pieces(a, opt, pieces, max < MAX_LIST ? max : MAX_LIST, &s);
  for (size_t i = 0; i < n; i++) {
    errno = 0;
    out[i] = strtod(pieces[i], &end);
    if (errno || end == pieces[i] || *end || !(out[i] >= lo && out[i] <= hi))
      usage_fail(a->cmd, "%s %s: '%s' is not a number in %g..%g", opt, s, pieces[i], lo, hi);
  }
  return n;
}

/* 16384 -> "16K", 1048576 -> "1M", 1000 -> "1000". */
static void fmt_size(char *out, size_t size, size_t v) {
  if (v >= (1u << 20) && v % (1u << 20) == 0) snprintf(out, size, "%zuM", v >> 20);
  else if (v >= 1024 && v % 1024 == 0) snprintf(out, size, "%zuK", v >> 10);
  else snprintf(out, size, "%zu", v);
}

/* ---- data ------------------------------------------------------------------------------------- */

/* The token ids of a text, split into the first 90% (training) and the last 10% (validation). */
typedef struct dataset {
  int *ids;       /* [n] */
  size_t n, n_train;
  uint64_t hash;  /* of the text's bytes: a resumed run must read the same data */
  char *name;     /* the file's name, printable ASCII */
} dataset;

static void dataset_init(dataset *ds, titans_tokenizer *tok, const char *text, size_t len, const char *name) {
  ds->ids = (int *)xmalloc(len * sizeof(int));
  if (titans_tokenizer_encode(tok, ds->ids, len, &ds->n, text, len) != TITANS_OK) fail("%s", tok->error);
  ds->n_train = ds->n - ds->n / 10;
  ds->hash = fnv1a(text, len);
  /* the name goes into checkpoint metadata (UTF-8, one line): printable ASCII only */
  size_t n = strlen(name);
  char *clean = (char *)xmalloc(n + 1);
  for (size_t i = 0; i <= n; i++) clean[i] = i == n ? 0 : (name[i] >= 0x20 && name[i] < 0x7f) ? name[i] : '?';
  ds->name = clean;
}

/* --doc-len: row b of step s reads window s mod W (W = doc_len / T windows per document) of document
   s / W, a stretch of the training split at an offset drawn from (seed, document) alone, so a resumed run
   reads what the uninterrupted one did. tokens [B, T + 1]. */
static void sample_doc_batch(int *tokens, const dataset *ds, size_t B, size_t T, size_t doc_len, uint64_t seed,
                             long step) {
  size_t windows = doc_len / T, w = (size_t)step % windows;
  titans_rng rng;
  titans_rng_seed(&rng, longctx_mix64(seed ^ 0xD0C5D0C5D0C5D0C5ull, (uint64_t)step / windows));
  size_t span = ds->n_train - windows * T; /* offsets 0..span-1 keep a whole document inside the split */
  for (size_t b = 0; b < B; b++) {
    size_t off = (size_t)(titans_rng_u64(&rng) % span);
    memcpy(tokens + b * (T + 1), ds->ids + off + w * T, (T + 1) * sizeof(int));
  }
}

/* tokens [B, T + 1]: B windows of the training split at offsets drawn from (seed, step) alone. */
static void sample_batch(int *tokens, const dataset *ds, size_t B, size_t T, uint64_t seed, long step) {
  titans_rng rng;
  titans_rng_seed(&rng, longctx_mix64(seed, (uint64_t)step)); /* one stream per (seed, step) */
  size_t span = ds->n_train - T; /* offsets 0..span-1; n_train >= T + 1 */
  for (size_t b = 0; b < B; b++) {
    size_t off = (size_t)(titans_rng_u64(&rng) % span);
    memcpy(tokens + b * (T + 1), ds->ids + off, (T + 1) * sizeof(int));
  }
}

/* Mean loss over n_batches fixed batches spread evenly over the validation split. */
static float validation_loss(titans_trainer *t, const dataset *ds, size_t B, size_t T, size_t n_batches, int *tokens) {
  size_t n_val = ds->n - ds->n_train, windows = n_batches * B, span = n_val - (T + 1);
  double total = 0.0;
  for (size_t k = 0; k < n_batches; k++) {
    for (size_t b = 0; b < B; b++) {
      size_t w = k * B + b, off = windows > 1 ? (size_t)((double)span * (double)w / (double)(windows - 1)) : 0;
      memcpy(tokens + b * (T + 1), ds->ids + ds->n_train + off, (T + 1) * sizeof(int));
    }
    float loss;
    if (titans_eval_loss(t, tokens, B, T, &loss) != TITANS_OK) fail("validation: %s", t->error);
    total += loss;
  }
  return (float)(total / (double)n_batches);
}

/* data-parallel training over MPI when built with -DTITANS_MPI (make mpi); one process otherwise */
#include "titans_mpi.h"

/* ---- loss history (kept in the trainer checkpoint, so a resumed run plots the whole curve) ------- */

typedef struct series {
  long *step;
  float *loss;
  size_t n, cap;
} series;

static void series_push(series *s, long step, float loss) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 256;
    long *ns = (long *)realloc(s->step, s->cap * sizeof(long));
    float *nl = (float *)realloc(s->loss, s->cap * sizeof(float));
    if (!ns || !nl) fail("out of memory");
    s->step = ns;
    s->loss = nl;
  }
  s->step[s->n] = step;
  s->loss[s->n] = loss;
  s->n++;
}

static void series_free(series *s) {
  free(s->step);
  free(s->loss);
  memset(s, 0, sizeof *s);
}

/* A growing string. */
typedef struct text {
  char *s;
  size_t n, cap;
} text;

static void text_printf(text *t, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    size_t room = t->cap - t->n;
    va_start(ap, fmt);
    int k = t->s ? vsnprintf(t->s + t->n, room, fmt, ap) : -1;
    va_end(ap);
    if (k >= 0 && (size_t)k < room) {
      t->n += (size_t)k;
      return;
    }
    size_t ncap = t->cap ? 2 * t->cap : 1024;
    while (k >= 0 && ncap - t->n <= (size_t)k) ncap *= 2;
    char *ns = (char *)realloc(t->s, ncap);
    if (!ns) fail("out of memory");
    t->s = ns;
    t->cap = ncap;
  }
}

/* " step:loss step:loss ..." with floats printed so they read back exactly. */
static void series_format(text *t, const char *key, const series *s) {
  text_printf(t, "%s=", key);
  for (size_t i = 0; i < s->n; i++) text_printf(t, "%s%ld:%.9g", i ? " " : "", s->step[i], (double)s->loss[i]);
  text_printf(t, "\n");
}

/* The value of "key=" at the start of a line of meta, up to the end of the line, or NULL. */
static const char *meta_find(const char *meta, const char *key, size_t *len) {
  size_t kl = strlen(key);
  for (const char *p = meta; p && *p;) {
    if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
      const char *v = p + kl + 1, *e = strchr(v, '\n');
      *len = e ? (size_t)(e - v) : strlen(v);
      return v;
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  return NULL;
}

static int meta_u64(const char *meta, const char *key, uint64_t *out) {
  size_t len;
  const char *v = meta_find(meta, key, &len);
  if (!v) return 0;
  char *end;
  *out = (uint64_t)strtoull(v, &end, 10);
  return end == v + len && len > 0;
}

static int series_parse(series *s, const char *meta, const char *key) {
  size_t len;
  const char *v = meta_find(meta, key, &len), *end;
  if (!v) return 0;
  end = v + len;
  while (v < end) {
    char *e;
    long step = strtol(v, &e, 10);
    if (e == v || *e != ':') return 0;
    v = e + 1;
    float loss = strtof(v, &e);
    if (e == v) return 0;
    v = e;
    series_push(s, step, loss);
    while (v < end && *v == ' ') v++;
  }
  return 1;
}

/* ---- SVG plot of the losses --------------------------------------------------------------------- */

/* A "nice" tick spacing (1, 2 or 5 times a power of ten) for about n ticks over span. */
static double nice_step(double span, int n) {
  double raw = span / n, p = pow(10.0, floor(log10(raw))), f = raw / p;
  return (f < 1.5 ? 1.0 : f < 3.5 ? 2.0 : f < 7.5 ? 5.0 : 10.0) * p;
}

static void svg_polyline(FILE *f, const series *s, double (*px)(double, const double *),
                         double (*py)(double, const double *), const double *view, const char *style) {
  if (s->n == 0) return;
  fprintf(f, "<polyline fill=\"none\" %s points=\"", style);
  for (size_t i = 0; i < s->n; i++)
    fprintf(f, "%s%.1f,%.1f", i ? " " : "", px((double)s->step[i], view), py((double)s->loss[i], view));
  fprintf(f, "\"/>\n");
}

/* view = {x0, x1, y0, y1, left, right, top, bottom} (data range, then plot area in pixels) */
static double svg_px(double x, const double *v) { return v[4] + (x - v[0]) / (v[1] - v[0]) * (v[5] - v[4]); }
static double svg_py(double y, const double *v) { return v[7] - (y - v[2]) / (v[3] - v[2]) * (v[7] - v[6]); }

/* Training loss (raw and smoothed) and validation loss against the step. Returns 0 on success. */
static int write_svg(const char *path, const series *train, const series *val, const char *title) {
  const double W = 800, H = 480;
  double view[8] = {0, 1, 0, 1, 70, W - 20, 40, H - 50};
  double ymin = INFINITY, ymax = -INFINITY, xmax = 1;
  const series *all[2] = {train, val};
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < all[k]->n; i++) {
      if (all[k]->loss[i] < ymin) ymin = all[k]->loss[i];
      if (all[k]->loss[i] > ymax) ymax = all[k]->loss[i];
      if (all[k]->step[i] > xmax) xmax = (double)all[k]->step[i];
    }
  if (!(ymin <= ymax)) ymin = 0, ymax = 1;
  if (ymax - ymin < 1e-3) ymin -= 0.5, ymax += 0.5;
  double ys = nice_step(ymax - ymin, 6), xs = nice_step(xmax, 8);
  view[1] = xmax;
  view[2] = floor(ymin / ys) * ys;
  view[3] = ceil(ymax / ys) * ys;

  /* The raw training loss is noisy: also draw its centred moving average over about 1/30 of the run
     (centred, so the curve does not lag behind a falling loss; narrower near the ends). */
  series smooth = {0, 0, 0, 0};
  size_t half = train->n / 60;
  double *prefix = (double *)xmalloc((train->n + 1) * sizeof(double));
  prefix[0] = 0;
  for (size_t i = 0; i < train->n; i++) prefix[i + 1] = prefix[i] + train->loss[i];
  for (size_t i = 0; i < train->n; i++) {
    size_t h = half < i ? half : i;
    if (h > train->n - 1 - i) h = train->n - 1 - i; /* symmetric near the ends: no bias toward one side */
    size_t lo = i - h, hi = i + h + 1;
    series_push(&smooth, train->step[i], (float)((prefix[hi] - prefix[lo]) / (double)(hi - lo)));
  }
  free(prefix);

  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
             "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%.0f\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">", W / 2);
  for (const char *c = title; *c; c++) /* escape the few XML specials */
    if (*c == '<') fputs("&lt;", f);
    else if (*c == '>') fputs("&gt;", f);
    else if (*c == '&') fputs("&amp;", f);
    else fputc(*c, f);
  fprintf(f, "</text>\n");
  /* grid, ticks and labels */
  for (double y = view[2]; y <= view[3] + 1e-9 * ys; y += ys) {
    double py = svg_py(y, view);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", view[4], py, view[5],
            py);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", view[4] - 6, py + 4,
            fabs(y) < 1e-12 ? 0.0 : y);
  }
  for (double x = 0; x <= xmax + 1e-9 * xs; x += xs) {
    double px = svg_px(x, view);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", px, view[6], px,
            view[7]);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", px, view[7] + 18, x);
  }
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", view[4],
          view[6], view[5] - view[4], view[7] - view[6]);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n", (view[4] + view[5]) / 2, H - 12);
  fprintf(
      f,
      "<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 16 %.1f)\">loss (nats/token)</text>\n",
      (view[6] + view[7]) / 2, (view[6] + view[7]) / 2);
  /* curves */
  svg_polyline(f, train, svg_px, svg_py, view, "stroke=\"#9ecae1\" stroke-width=\"1\"");
  svg_polyline(f, &smooth, svg_px, svg_py, view, "stroke=\"#08519c\" stroke-width=\"2\"");
  svg_polyline(f, val, svg_px, svg_py, view, "stroke=\"#e6550d\" stroke-width=\"2\"");
  for (size_t i = 0; i < val->n; i++)
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#e6550d\"/>\n", svg_px((double)val->step[i], view),
            svg_py(val->loss[i], view));
  /* legend */
  const char *names[3] = {"training loss", "training loss (smoothed)", "validation loss"};
  const char *colors[3] = {"#9ecae1", "#08519c", "#e6550d"};
  double lx = view[5] - 200, ly = view[6] + 12;
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"190\" height=\"62\" fill=\"white\" stroke=\"#999\"/>\n", lx, ly);
  for (int k = 0; k < 3; k++) {
    double y = ly + 16 + 18 * k;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n", lx + 8, y,
            lx + 32, y, colors[k]);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx + 40, y + 4, names[k]);
  }
  fprintf(f, "</svg>\n");
  series_free(&smooth);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    remove(tmp);
    return -1;
  }
  /* rename replaces the old file atomically (POSIX): a reader sees the old plot or the new one */
  if (rename(tmp, path) == 0) return 0;
#ifdef _WIN32
  if (remove(path) == 0 && rename(tmp, path) == 0) return 0; /* Windows' rename does not replace */
#endif
  remove(tmp);
  return -1;
}

/* ---- interruptions ------------------------------------------------------------------------------- */

/* The first SIGINT / SIGTERM during train or generate only sets this flag (the signal's number): train
   finishes its current step, generate its current token; then they save what they hold (the checkpoint,
   the memory state) and exit with 128 + the number. */
static volatile sig_atomic_t stop_signal = 0;

/* What a second signal removes before the program dies of it: the temporary file of a save it cuts short
   ("<file>.tmp", as the library and write_svg name them) and the folders this run created that are still
   empty (make_dirs), so that nothing half-written or empty is left; the last complete save stays. */
#define MAX_TEMP_FILES 40
static char *temp_files[MAX_TEMP_FILES];
static int n_temp_files;

static void note_temp_file_of(const char *path) {
  if (n_temp_files == MAX_TEMP_FILES) return;
  size_t n = strlen(path);
  char *tmp = (char *)xmalloc(n + 5);
  memcpy(tmp, path, n);
  memcpy(tmp + n, ".tmp", 5);
  temp_files[n_temp_files++] = tmp;
}

static char stop_hint[160]; /* what the first signal prints: what the command does now */

static void on_stop_signal(int sig) {
  if (!stop_signal) {
    stop_signal = sig;
    signal(sig, on_stop_signal); /* where a handler is reset on delivery, the second signal still comes here */
#ifndef _WIN32
    ssize_t written = write(2, stop_hint, strlen(stop_hint)); /* async-signal-safe, unlike fprintf */
    (void)written;
#endif
    return;
  }
  /* the second: quit at once (unlink and rmdir are async-signal-safe; rmdir fails on a folder in use) */
  for (int i = 0; i < n_temp_files; i++) {
#ifdef _WIN32
    remove(temp_files[i]);
#else
    unlink(temp_files[i]);
#endif
  }
  for (int i = n_created_dirs - 1; i >= 0; i--) {
#ifdef _WIN32
    _rmdir(created_dirs[i]);
#else
    rmdir(created_dirs[i]);
#endif
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

/* From now on the first SIGINT / SIGTERM sets stop_signal and prints "titans: <doing>; Ctrl-C again quits at once". */
static void catch_stop_signals(const char *doing) {
  snprintf(stop_hint, sizeof stop_hint, "\ntitans: %s; Ctrl-C again quits at once\n", doing);
  signal(SIGINT, on_stop_signal);
  signal(SIGTERM, on_stop_signal);
}

static void release_stop_signals(void) {
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
}

/* ---- generation --------------------------------------------------------------------------------- */

/* How generation draws each token: titans_sample_ex's options and the sampler's seed. */
typedef struct sampling {
  float temperature; /* 0: the most likely token */
  int top_k;         /* keep the k most likely tokens (0: all) */
  float top_p;       /* keep the smallest set of tokens whose probability reaches top_p (1: all) */
  uint64_t seed;     /* of the sampler's random numbers */
} sampling;

/* Feed prompt ids (or one newline when there are none), then sample n tokens, writing each token's
   bytes to out as it comes. Every sampled token is fed back, so the session ends having read it all.
   A stop signal (stop_signal) ends it after the current token. */
static void generate_text(titans_session *s, titans_tokenizer *tok, const int *prompt, size_t n_prompt, long n,
                          const sampling *how, FILE *out) {
  float temperature = how->temperature, top_p = how->top_p;
  int top_k = how->top_k;
  uint64_t seed = how->seed;
  size_t V = (size_t)s->model->cfg.vocab;
  float *logits = (float *)xmalloc(V * sizeof(float));
  int nl = '\n';
  titans_rng rng;
  titans_rng_seed(&rng, seed);
  if (n_prompt == 0) prompt = &nl, n_prompt = 1;
  if (titans_session_feed(s, prompt, n_prompt, logits) != TITANS_OK) fail("generate: %s", s->error);
  for (long i = 0; i < n && !stop_signal; i++) {
    int id, rc = titans_sample_ex(logits, V, temperature, top_k, top_p, &rng, &id);
    if (rc != TITANS_OK) fail("generate: sampling: %s", titans_status_string(rc));
    char bytes[16];
    size_t nb;
    if (titans_tokenizer_decode(tok, bytes, sizeof bytes, &nb, &id, 1) != TITANS_OK) fail("generate: %s", tok->error);
    fwrite(bytes, 1, nb, out);
    fflush(out);
    if (titans_session_feed(s, &id, 1, logits) != TITANS_OK) fail("generate: %s", s->error);
  }
  free(logits);
}

/* --samples N: the prompt (or one newline) read once by s, then N continuations sampled at once by a
   session batch whose streams start as copies of s (stream i's sampler seeded with seed + i), each token of
   every stream fed back; printed one after another when all are done (or after the current token on a
   stop signal). */
static void generate_samples(titans_session *s, titans_tokenizer *tok, const char *prompt, const int *ids,
                             size_t n_prompt, long n, size_t samples, const sampling *how) {
  float temperature = how->temperature, top_p = how->top_p;
  int top_k = how->top_k;
  uint64_t seed = how->seed;
  size_t V = (size_t)s->model->cfg.vocab;
  float *logits = (float *)xmalloc(samples * V * sizeof(float));  /* [samples, V] */
  int *next = (int *)xmalloc(samples * sizeof(int));               /* [samples] */
  titans_rng *rng = (titans_rng *)xmalloc(samples * sizeof *rng);  /* [samples] */
  char **text = (char **)xmalloc(samples * sizeof(char *));        /* [samples] each sample's bytes */
  size_t *len = (size_t *)xmalloc(samples * sizeof(size_t)), cap = 256; /* [samples] */
  int nl = '\n';
  if (n_prompt == 0) ids = &nl, n_prompt = 1;
  if (titans_session_feed(s, ids, n_prompt, logits) != TITANS_OK) fail("generate: %s", s->error);
  titans_session_batch b;
  if (titans_session_batch_init(&b, s->model, samples) != TITANS_OK) fail("generate: %s", b.error);
  for (size_t i = 0; i < samples; i++) {
    if (titans_session_batch_put(&b, i, s) != TITANS_OK) fail("generate: %s", b.error);
    memcpy(logits + i * V, logits, V * sizeof(float));
    titans_rng_seed(&rng[i], seed + i);
    text[i] = (char *)xmalloc(cap);
    len[i] = 0;
  }
  for (long t = 0; t < n && !stop_signal; t++) {
    if (cap < 16 * ((size_t)t + 1)) { /* t + 1 tokens of at most 16 bytes each */
      cap *= 2;
      for (size_t i = 0; i < samples; i++)
        if (!(text[i] = (char *)realloc(text[i], cap))) fail("out of memory (%zu bytes)", cap);
    }
    for (size_t i = 0; i < samples; i++) {
      int rc = titans_sample_ex(logits + i * V, V, temperature, top_k, top_p, &rng[i], &next[i]);
      if (rc != TITANS_OK) fail("generate: sample %zu: sampling: %s", i + 1, titans_status_string(rc));
      size_t nb;
      if (titans_tokenizer_decode(tok, text[i] + len[i], 16, &nb, &next[i], 1) != TITANS_OK)
        fail("generate: %s", tok->error);
      len[i] += nb;
    }
    if (titans_session_batch_feed(&b, next, logits) != TITANS_OK) fail("generate: %s", b.error);
  }
  for (size_t i = 0; i < samples; i++) {
    printf("%s=== sample %zu of %zu\n%s", i ? "\n" : "", i + 1, samples, prompt);
    fwrite(text[i], 1, len[i], stdout);
    free(text[i]);
  }
  titans_session_batch_free(&b);
  free(logits);
  free(next);
  free(rng);
  free(text);
  free(len);
}

/* ---- train ------------------------------------------------------------------------------------ */

static const char *program_path = "./titans"; /* argv[0], for the --resume command we print */

/* One argument as the shell reads it back: as is when it is plain, else in single quotes. */
static void print_shell_word(FILE *f, const char *w) {
  int plain = *w != 0;
  for (const char *c = w; *c; c++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%", *c)) plain = 0;
  if (plain) {
    fputs(w, f);
    return;
  }
  fputc('\'', f);
  for (const char *c = w; *c; c++)
    if (*c == '\'') fputs("'\\''", f);
    else fputc(*c, f);
  fputc('\'', f);
}

/* The command that continues this run: the same arguments without --stop-at, and --resume. */
static void print_resume_command(FILE *f, int argc, char **argv) {
  int has_resume = 0;
  fputs("  ", f);
  print_shell_word(f, program_path);
  fputs(" train", f);
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--stop-at")) {
      i++;
      continue;
    }
    if (!strcmp(argv[i], "--resume")) has_resume = 1;
    fputc(' ', f);
    print_shell_word(f, argv[i]);
  }
  fputs(has_resume ? "\n" : " --resume\n", f);
}

#define MAX_STAGES 32 /* of a --lens curriculum */
#define MAX_ALPHA_LAYERS 64 /* layers an --alpha-init list can name one by one */

typedef struct train_opts {
  const char *data, *out, *prompt;
  long data_max; /* the most bytes --data reads */
  int block, d, layers, heads, mem_heads, mem_depth, chunk, segment, window, persist, ffn;
  int mem_head_dim; /* --mem-head-dim: each memory head's width d_h (0: d / mem_heads) */
  long seq, batch, steps, warmup, val_every, val_batches, save_every, log_every, sample_len, stop_at;
  double lr, temperature, theta_max, surprise_bound; /* surprise_bound < 0: the library's default */
  uint64_t seed;
  int resume, threads;
  int recompute;                 /* --recompute: titans_trainer_set_recompute (MAC's activations a segment at a time) */
  int reduce_blocking;           /* --reduce blocking: titans-mpi sums the gradient after the backward, not during it */
  int task;                      /* LONGCTX_PASSKEY or LONGCTX_PROSE; -1: plain text only */
  double task_frac;              /* fraction of rows that are retrieval examples */
  size_t lens[MAX_STAGES], n_lens; /* the length curriculum (--lens), one stage per entry */
  long doc_len;                  /* > 0: each row reads documents of doc_len tokens window by window (streams) */
  int slots;                     /* LM2 bank slots (0: the library's default) */
  int mac_learns_input;          /* --mac-learns-input: MAC's memory learns from the block input X, not y */
  int answer_loss;               /* --task: the loss sees only the answers */
  int lens_mix;                  /* --lens-mix: stage i draws each step's length from lens[0..i] */
  size_t end_jitter;             /* --end-jitter: an example ends 0..end_jitter-1 tokens before its row's end */
  size_t min_rows;               /* --min-rows: at least this many sequences a step at every length (1 with --task;
                                    0 = not given) */
  int needles;                   /* --needles: prose examples hold 1..needles needles (uniform per example) */
  int ask_all;                   /* --ask-all: a prose example asks for each of its needles, all answers trained */
  int ask_earlier;               /* --ask-earlier: with --doc-len, a prose example also asks an earlier one's needle */
  int key_words;                 /* --key-words: LONGCTX_WORDS_TRAIN (the 16 words), _RANDOM or _TEXT */
  const char *haystack;          /* --haystack: the examples' filler ("sentences" or a file); NULL: the kind's own */
  double statements;             /* --statements F: with --haystack mixed, that fraction of the technical text's
                                    lines are sentences stating numbers (longctx_tech_statement) */
  double columns;                /* --columns F: with --haystack mixed, that fraction of its other lines are
                                    blocks of columns of long numbers (longctx_tech_columns) */
  double numbers;                /* --numbers F: each example writes a fraction uniform in [0, F) of its filler's
                                    words as numbers (longctx_options.number_words) */
  double decoys;                 /* --decoys F: longctx_options.decoy_numbers, that fraction of those numbers
                                    starting with a needle's first digits */
  int alike_words;               /* --alike-words: longctx_options.alike_words, the further needles' key words
                                    as long as the asked one's */
  double alike_numbers;          /* --alike-numbers F: longctx_options.alike_numbers, that fraction of the further
                                    needles' numbers starting with the asked one's first digits */
  double theta_init[MAX_ALPHA_LAYERS];     /* where the write gate starts, per layer (0: the library's) */
  size_t n_theta_init;                     /* 1: theta_init[0] for every layer; else one per layer */
  double eta_init;                         /* where the momentum gate starts (0: the library's) */
  double alpha_init[MAX_ALPHA_LAYERS];     /* where its forgetting gate starts, per layer (--alpha-init X or X,Y,...) */
  size_t n_alpha_init;                     /* 1: alpha_init[0] for every layer; else one per layer */
  double w0_scale;                         /* the memory's initial weights w0 times this (1: the library's) */
  int conv_uniform;                        /* 1: the memory's conv taps start uniform (PyTorch's Conv1d default) */
  int key_shift;                           /* 1: the memory's key conv starts on the previous token */
  int key_ngram;                           /* >= 1: ... and stays there (--key-shift-fixed: 1; --key-ngram N: on the
                                              N tokens before): its other taps are zeroed after every step */
  int gate_key;                            /* 1: the memory's write gate also reads its key (cfg.mem.gate_key) */
  int qk_linear;                           /* 1: the memory's queries and keys skip the SiLU (cfg.mem.qk_linear) */
  double write_cost;                       /* a cost on writing (titans_train_config.write_cost; 0: none) */
  long write_cost_from;                    /* ... from this step on (titans_train_config.write_cost_from) */
  double write_cost_log;                   /* a cost on log theta (titans_train_config.write_cost_log; 0: none) */
  int write_cost_filler_only;              /* --task: the costs spare the needles (set_write_cost_skip) */
  int no_forget;                           /* 1: the memory forgets nothing, alpha_t = 0 (cfg.mem.no_forget) */
  int per_token_grad;                      /* 1: each token's inner gradient at the weights before it
                                              (cfg.mem.per_token_grad; needs --mem-depth 1 --surprise-bound 0) */
  int least_squares;                       /* 1: the least-squares memory (cfg.mem.least_squares; no momentum,
                                              no forgetting; needs --mem-depth 1) */
  int forget_fit;                          /* 1: with least_squares, the fit's confidence decays by alpha_t
                                              (cfg.mem.no_forget 0; docs/model.md 1.11) */
  double emb_scale;                        /* the token embeddings times this at initialisation (1) */
  double head_gain;                        /* > 0: the final norm's gain starts here (0: the library's 1) */
  double attn_identity; /* > 0: attention starts attending to its own token (wq = wk = X I, wv = wo = I) */
} train_opts;

static void help_train(void) {
  printf("usage: ./titans train [options]   (./titans with no arguments trains with the defaults)\n"
         "Trains a byte-level language model on a text file and prints a sample at the end.\n"
         "  --data FILE         text to learn (default: the built-in text, examples/default_text.h)\n"
         "  --data-max N        refuse a --data file of more than N bytes (2^30 = 1 GiB)\n"
         "  --block KIND        mag | mac | mal | lmm | lm2 | attn | swa (default mag)\n"
         "  --d N               model width (128)\n"
         "  --layers N          blocks (2)\n"
         "  --heads N           attention heads (d / 64, at least 1)\n"
         "  --mem-heads N       memory heads (4); --mem-depth N memory MLP depth (2; 1: a matrix memory)\n"
         "  --mem-head-dim N    each memory head's width d_h, its keys' and values' size (d / mem-heads)\n"
         "  --chunk N           memory chunk size b (16); --segment N MAC segment C, LM2 tokens per write (64)\n"
         "  --slots N           LM2 memory bank slots (16)\n"
         "  --mac-learns-input  MAC's memory learns from the block's input X instead of the attention output y\n"
         "                      (the paper's); a departure, measured in docs/long_context.md\n"
         "  --window N          sliding window w (64); --persist N persistent tokens (mag: one chunk, 16;\n"
         "                      mac, mal: 4; the baselines: 0)\n"
         "  --ffn N             FFN hidden width (4 d)\n"
         "  --theta-max X       upper bound of the memory's inner learning rate (0.1)\n"
         "  --surprise-bound X  bound tau on each token's inner gradient norm (1; 0: unbounded)\n"
         "  --seq T             tokens per training sequence (128)\n"
         "  --batch B           sequences per step (16)\n"
         "  --steps N           optimizer steps (500)\n"
         "  --lr X              peak learning rate (2e-3); --warmup N warm-up steps (steps / 10)\n"
         "  --seed S            seed of the weights and of the data sampler (1234)\n"
         "  --val-every N       validation loss on the held-out last 10%% every N steps (100; 0 = only at the end)\n"
         "  --val-batches N     batches per validation (4)\n"
         "  --save-every N      checkpoint every N steps (steps / 10, at least 1; 0 = only at the end);\n"
         "                      Ctrl-C or SIGTERM also saves, after the current step\n"
         "  --log-every N       progress line every N steps (steps / 50)\n"
         "  --out DIR           where model.safetensors, trainer.safetensors and loss.svg go (out)\n"
         "  --resume            continue from DIR/trainer.safetensors (same data and options: bit-identical\n"
         "                      to a run that never stopped; --steps may be raised to train longer)\n"
         "  --stop-at N         stop (and save) after step N, as if interrupted; --resume goes on from there\n"
         "  --prompt TEXT       start of the sample printed at the end (\"The \"); --sample-len N bytes (400)\n"
         "  --temperature X     of the sample (0.8)\n"
         "  --threads N         OpenMP threads (default: OMP_NUM_THREADS or all cores)\n"
         "  --recompute         keep less, compute it again in the backward (MAC's segments, every kind's FFN):\n"
         "                      the same result in about a tenth of the memory (docs/model.md 5.3)\n"
         "  --reduce HOW        titans-mpi on several ranks: overlap (default) sums each layer's gradient while the\n"
         "                      layers below are differentiated; blocking sums all of it after the backward\n");
  printf(
      "Long reads (docs/long_context.md):\n"
      "  --doc-len N         each batch row reads a stretch of N tokens of the text as --seq windows in order,\n"
      "                      its memory (and SWA's window) carried from one window to the next: truncated\n"
      "                      backpropagation through time (default 4096 when the training split holds two\n"
      "                      such stretches, 0 with --task; 0 = off: every window starts afresh). With --task:\n"
      "                      each row's memory carries from one example to the next (one stream per --lens\n"
      "                      length) until it has read N tokens, so training sees the memory of long reads\n"
      "  --theta-init X      the memory's inner learning rate starts at X theta_max (0.5; a list X,Y,... gives\n"
      "                      each layer its own: 1e-12 shuts a layer's writes for good, its gate's gradient\n"
      "                      then below AdamW's eps)\n"
      "  --eta-init X        its momentum gate starts at X (0.5); --alpha-init X its forgetting gate (0.01;\n"
      "                      a list X,Y,... gives each layer its own, lowest first)\n"
      "  --w0-scale X        the memory's initial weights w0 times X (1)\n"
      "  --conv-uniform      the memory's conv taps start uniform in +-1/sqrt(K) (default: near identity)\n"
      "  --key-shift         the memory's key conv starts on the previous token, its queries equal to its keys\n"
      "  --key-shift-fixed   --key-shift, and the key conv stays a one-tap conv on the previous token: its\n"
      "                      other taps are set to 0 after every step (keys that cannot drift, docs/long_context.md)\n"
      "  --key-ngram N       --key-shift-fixed on the N tokens before: the key's channels in N groups, group g\n"
      "                      reading token t-1-g, the query's the same groups one token later (conv width N+1)\n"
      "  --gate-key          the memory's write gate (theta) also reads the key, so it can write a token or not\n"
      "                      by the tokens before it, not by the token alone (not in the paper; docs/model.md 1.3)\n"
      "  --qk-linear         the memory's queries and keys skip the SiLU, so keys of unrelated tokens need not\n"
      "                      overlap (not in the paper; docs/model.md 1.3)\n"
      "  --write-cost X      the loss trained gains X times the mean write gate theta_t / theta_max (summed over\n"
      "                      memory layers and heads), so the memory writes only where it pays (0; not in the\n"
      "                      paper; docs/model.md 5)\n"
      "  --write-cost-from N the cost applies from step N on, once the memory has learned what to write (0)\n"
      "  --write-cost-log X  the loss trained gains X times the mean log(theta_t / theta_max), from the same step:\n"
      "                      its pull on a gate does not fade as the gate shuts, and spares a saturated one (0)\n"
      "  --write-cost-filler-only  with --task: both costs leave the needles' writes alone, so they shut the\n"
      "                      gates on the filler only (titans_trainer_set_write_cost_skip; off, the numbers\n"
      "                      recipe: on)\n"
      "  --write-cost-everywhere  the costs on every position (undoes --write-cost-filler-only)\n"
      "  --no-forget         the memory forgets nothing: alpha_t = 0, --alpha-init unused (not in the paper;\n"
      "                      docs/model.md 1.3)\n"
      "  --per-token-grad    each token's inner gradient at the weights just before it, as with chunk 1, for any\n"
      "                      --chunk (the delta rule's chunked form; needs --mem-depth 1 --surprise-bound 0;\n"
      "                      docs/model.md 1.10)\n");
  printf("  --least-squares     the memory is the least-squares fit of the values on the keys, each token weighted\n"
      "                      by its write gate, so a later key does not move an earlier key's value (recursive\n"
      "                      least squares; no momentum, no forgetting; --theta-max 100 and --surprise-bound 0\n"
      "                      unless given; needs --mem-depth 1; not in the paper; docs/model.md 1.11)\n"
      "  --forget-fit        with --least-squares: each token first decays the fit's confidence by alpha_t\n"
      "                      (its G = I - P by 1 - alpha_t; the values stay), from --alpha-init\n"
      "  --emb-scale X       the token embeddings start X times the library's normal(0, 0.02) (1)\n"
      "  --head-gain X       the final norm's gain starts at X: the tied head's logits x X (1)\n"
      "  --attn-identity X   attention starts copying its own token: wq = wk = X I, wv = wo = I (0: off)\n");
  printf("Retrieval training (docs/long_context.md):\n"
         "  --task KIND         rows are retrieval examples: passkey | prose | copy (the needle at a uniform depth),\n"
         "                      and the defaults become the retrieval recipe: --block mac --d 64 (prose 128)\n"
         "                      --doc-len 0 --mem-heads 1 --mem-depth 1 --theta-max 1 --eta-init 0.02\n"
         "                      --alpha-init 1e-7 --head-gain 0.5\n"
         "                      --surprise-bound 6 --key-ngram 12 --emb-scale 10 --attn-identity 1.5 (mac, mal)\n"
         "                      --mac-learns-input (mac) --lens-mix --end-jitter 64 --answer-loss --steps 3000\n"
         "                      --lens 256,1024,4096,16384 (prose; passkey also 65536; copy to 4096), --needles 4\n"
         "                      --numbers 0.05 --min-rows 2 --key-words text --ask-all (prose), --haystack\n"
         "                      sentences (passkey); any option given wins\n"
         "  --recipe none       with --task: start from the plain defaults above instead of the recipe\n"
         "  --recipe numbers    with --task prose: the recipe for text with numbers: the retrieval recipe with\n"
         "                      --block lmm --theta-init 1e-12,0.5 (the first memory shut) --haystack mixed\n"
         "                      --write-cost 0.3 --write-cost-from 1000 --write-cost-log 0.01\n"
         "                      --write-cost-filler-only; any option given wins\n"
         "  --needles N         prose: each example holds 1..N needles (uniform) of different key words (1)\n"
         "  --ask-all           prose: an example asks for every needle it holds, the others' questions and\n"
         "                      answers just before its own question, every answer trained (off; the prose\n"
         "                      recipe: on): a long row trains several answers, not the few digits of one\n"
         "  --ask-earlier       prose with --doc-len: an example also asks for a needle of an earlier example of\n"
         "                      its row (a key word an earlier example bound and this one does not, with the\n"
         "                      number it was bound to last), its answer trained (off; negative so far:\n"
         "                      docs/long_context.md)\n"
         "  --key-words SET     prose: the key words, 'train' (16 words, the other 16 held out for needle),\n"
         "                      'random' (4 to 8 random letters each) or 'text' (words of 5 to 8 letters of\n"
         "                      the training text); never a held-out word (train; the prose recipe: text)\n");
  printf("  --haystack H        the examples' filler: 'sentences' (plain sentences in random order), 'mixed'\n"
         "                      (the training split alternating every 4 KB with generated technical text,\n"
         "                      about 90 digits a KB), a file, or 'own', the kind's own: prose the training\n"
         "                      split, passkey its fixed cycle (own; the passkey recipe: sentences)\n"
         "  --statements F      with --haystack mixed: this fraction of the technical text's lines are sentences\n"
         "                      that state numbers (\"The default timeout is 500.\"), the filler's, unasked (0)\n"
         "  --columns F         with --haystack mixed: this fraction of its other lines are blocks of columns of\n"
         "                      numbers of 3 to 10 digits (du, ls -l, wc, df, dd, tables), unasked (0)\n"
         "  --numbers F         each example writes a fraction, uniform in [0, F), of its filler's words as\n"
         "                      numbers no question asks for: the memory learns to bind a number to its key,\n"
         "                      not to every number it reads (0)\n"
         "  --decoys F          prose: this fraction of those numbers start with the first 1 to 6 digits of\n"
         "                      a needle's number, the same digits in another context (0)\n"
         "  --alike-words       prose: every example's further key words have as many letters as the asked\n"
         "                      one's, keys that differ in the word's letters alone (off)\n"
         "  --alike-numbers F   prose: this fraction of the further needles' numbers start with the asked one's\n"
         "                      first 1 to 6 digits, so only the key word tells which number follows (0)\n"
         "  --task-frac F       fraction of rows that are examples, the rest plain text windows (1)\n"
         "  --lens LIST         length curriculum, e.g. 256,512,1024,2048: the steps split into equal stages,\n"
         "                      stage i trains on sequences of LIST[i] tokens, max(1, batch * LIST[0] / LIST[i])\n"
         "                      of them (default: --seq only); validation stays on --seq windows of plain text\n"
         "  --lens-mix          stage i draws each step's length uniformly from LIST[0..i], so the lengths of\n"
         "                      earlier stages stay in the mix (default: stage i trains on LIST[i] only)\n"
         "  --end-jitter N      each example ends 0..N-1 tokens (uniform) before its row's end, filler outside\n"
         "                      the loss after the answer: the question ends at every position of a segment\n"
         "                      (default 0: rows end with the answer; needle lengths like 4K then end the\n"
         "                      question at a position of a segment training never showed)\n"
         "  --answer-loss       the loss sees only the answers of the examples (default: every token)\n");
}

/* The retrieval recipe, the defaults of a --task run (docs/long_context.md, "The retrieval recipe"): a MAC
   of d 64 (prose: 128) whose one matrix memory head starts as a look-up (keys on the previous token, held there;
   attention starting as the identity; embeddings x 10), writes in one shot (theta_max 1, momentum 0.02)
   and almost never forgets (1e-7 a token), learns from the block input, bounds each token's surprise at
   6, and trains 3,000 steps on a mixed length curriculum with the loss on the answers only (prose: 1 to 4
   needles of different key words an example, each a word of the training text, keys of the 12 tokens
   before, which carry the word, and up to 5% of the filler's words written as numbers no question asks
   for; passkey: its filler plain sentences in random order). It writes these into o before the command
   line is parsed, so every option given still wins; --recipe none keeps the plain defaults. `block` is
   the --block given, or -1. */
static void retrieval_recipe(train_opts *o, int task, int block) {
  static const size_t prose_lens[] = {256, 1024, 4096, 16384}, passkey_lens[] = {256, 1024, 4096, 16384, 65536},
                      copy_lens[] = {256, 1024, 4096};
  const size_t *lens = task == LONGCTX_PROSE ? prose_lens : task == LONGCTX_COPY ? copy_lens : passkey_lens;
  size_t n_lens = task == LONGCTX_PROSE ? 4 : task == LONGCTX_COPY ? 3 : 5;
  o->block = block >= 0 ? block : TITANS_BLOCK_MAC;
  o->d = task == LONGCTX_PROSE ? 128 : 64; /* prose: a memory head of 128 holds four keys, and one to 1M */
  o->doc_len = 0;
  o->mem_heads = 1, o->mem_depth = 1;
  o->theta_max = 1, o->eta_init = 0.02, o->alpha_init[0] = 1e-7, o->n_alpha_init = 1;
  o->surprise_bound = 6;
  o->key_shift = 1;
  o->key_ngram = 12; /* keys of the 12 tokens before: they carry the key word, so several needles bind */
  o->emb_scale = 10;
  o->head_gain = 0.5; /* the head's logits x 0.5 at first: no confident self-prediction, no 40 clipped steps */
  if (o->block == TITANS_BLOCK_MAC || o->block == TITANS_BLOCK_MAL) o->attn_identity = 1.5;
  if (o->block == TITANS_BLOCK_MAC) o->mac_learns_input = 1;
  memcpy(o->lens, lens, n_lens * sizeof(size_t)), o->n_lens = n_lens;
  o->lens_mix = 1, o->end_jitter = 64, o->answer_loss = 1;
  if (task == LONGCTX_PROSE) {
    o->needles = 4;    /* 1..4 keyed needles an example: binding, not "a number" */
    o->numbers = 0.05; /* numbers amid the text no question asks for: text with digits keeps its needle */
    o->min_rows = 2;   /* two examples a step at 4K and 16K: fewer steps whose one wrong answer is the gradient */
    o->key_words = LONGCTX_WORDS_TEXT; /* thousands of real key words, not 16: unseen words bind as well */
    o->ask_all = 1;    /* every needle asked: a long step's gradient is not one wrong answer's few digits */
  }
  /* passkey: plain sentences in random order, not the one 90-byte cycle: a model trained on the cycle lost
     the key amid sentences (4K 40/0/100%, 16K 0%), one trained amid sentences keeps it in both */
  if (task == LONGCTX_PASSKEY) o->haystack = "sentences";
  o->steps = 3000;
}

/* --recipe numbers, on top of the prose retrieval recipe: an LMM (unless --block says otherwise) whose first
   memory never writes (its write gate starts at 1e-12 theta_max and stays near it: the second memory, whose
   keys do not drift, answers alone), trained amid technical text dense in numbers (--haystack mixed), with
   costs on writing from step 1,000, on theta_t and on log theta_t, both on the filler only (the needles'
   writes spared). Amid the numbers the write gate learns to pass by digits that do not follow a needle's
   words, and the costs keep it from writing the text between, the two erasers of a needle amid real text
   (docs/long_context.md, "The numbers recipe"; the log cost on the filler only since session 25). */
static void numbers_recipe(train_opts *o) {
  o->haystack = "mixed"; /* the gates (--theta-init) are set once --layers is known: parse_train */
  o->write_cost = 0.3, o->write_cost_from = 1000;
  o->write_cost_log = 0.01, o->write_cost_filler_only = 1;
}

/* Whether opt is among the arguments (an option, or a value spelled as one). */
static int arg_given(int argc, char **argv, const char *opt) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], opt)) return 1;
  return 0;
}

/* The value of the last `opt VALUE` in argv, or NULL: the options that choose the defaults of the rest. */
static const char *arg_peek(int argc, char **argv, const char *opt) {
  const char *v = NULL;
  for (int i = 0; i + 1 < argc; i++)
    if (!strcmp(argv[i], opt)) v = argv[++i];
  return v;
}

static void parse_train(int argc, char **argv, train_opts *o) {
  args a = {argc, 0, argv, "train"};
  memset(o, 0, sizeof *o);
  o->out = "out";
  o->prompt = "The ";
  /* MAG reading long stretches window by window (--doc-len) is the default: measured on tiny Shakespeare,
     it beats the sliding-window baseline trained the same way at every position from 64 to 16K
     (docs/long_context.md), while every memory kind trained on independent 128-token windows gets
     worse the further it reads. */
  o->block = TITANS_BLOCK_MAG;
  o->data_max = DATA_MAX_BYTES;
  o->d = 128;
  o->layers = 2;
  o->mem_heads = 4;
  /* The library's deep memory (depth 2, theta_max 0.1, surprise bound 1): measured on tiny Shakespeare it
     trains about as well as the matrix memory did (validation 1.8197 against 1.8156), and the bound keeps the inner
     loop finite where depth 2 used to diverge (docs/long_context.md, the stability map). */
  o->mem_depth = 2;
  o->doc_len = -1;     /* 4096 when the training split holds two such documents, else off */
  o->surprise_bound = -1; /* the library's default */
  o->w0_scale = 1.0;
  o->emb_scale = 1.0;
  o->alpha_init[0] = 0.01,
  o->n_alpha_init = 1; /* forgetting starts at 1% a token (the library's init: 2%); measured, docs/long_context.md */
  o->chunk = 16;
  o->segment = 0; /* the library's (64); MAC and LM2 only */
  o->window = 64;
  o->persist = -1; /* the kind's default */
  o->seq = 128;
  o->batch = 16;
  o->steps = 500;
  o->warmup = -1;
  o->lr = 2e-3;
  o->seed = 1234;
  o->val_every = 100;
  o->val_batches = 4;
  o->log_every = -1;
  o->save_every = -1;
  o->sample_len = 400;
  o->temperature = 0.8;
  o->task = -1;
  o->task_frac = -1; /* unset: 1 with --task */
  const char *task = arg_peek(argc, argv, "--task"), *recipe = arg_peek(argc, argv, "--recipe");
  const char *block = arg_peek(argc, argv, "--block");
  if (recipe && strcmp(recipe, "none") && strcmp(recipe, "retrieval") && strcmp(recipe, "numbers"))
    usage_fail("train", "--recipe %s: want retrieval (the default with --task), numbers or none", recipe);
  if (recipe && !task) usage_fail("train", "--recipe goes with --task");
  int numbers = recipe && !strcmp(recipe, "numbers");
  if (numbers && longctx_kind_from_name(task) != LONGCTX_PROSE) usage_fail("train", "--recipe numbers is for --task prose");
  if (task && longctx_kind_from_name(task) >= 0 && !(recipe && !strcmp(recipe, "none")))
    retrieval_recipe(o, longctx_kind_from_name(task), block ? titans_block_from_name(block) : numbers ? TITANS_BLOCK_LMM : -1);
  if (numbers) numbers_recipe(o);
  for (a.i = 0; a.i < argc; a.i++) {
    const char *s = argv[a.i];
    if (!strcmp(s, "--data")) o->data = arg_value(&a, s);
    else if (!strcmp(s, "--data-max")) o->data_max = arg_long(&a, s, 1, 1L << 30);
    else if (!strcmp(s, "--out")) o->out = arg_value(&a, s);
    else if (!strcmp(s, "--prompt")) o->prompt = arg_value(&a, s);
    else if (!strcmp(s, "--block")) {
      const char *k = arg_value(&a, s);
      o->block = titans_block_from_name(k);
      if (o->block < 0) usage_fail("train", "--block %s: want mac, mag, mal, lmm, lm2, attn or swa", k);
    } else if (!strcmp(s, "--d")) o->d = (int)arg_long(&a, s, 2, 65536);
    else if (!strcmp(s, "--layers")) o->layers = (int)arg_long(&a, s, 1, 1024);
    else if (!strcmp(s, "--heads")) o->heads = (int)arg_long(&a, s, 1, 65536);
    else if (!strcmp(s, "--mem-heads")) o->mem_heads = (int)arg_long(&a, s, 1, 65536);
    else if (!strcmp(s, "--mem-head-dim")) o->mem_head_dim = (int)arg_long(&a, s, 1, 65536);
    else if (!strcmp(s, "--mem-depth")) o->mem_depth = (int)arg_long(&a, s, 1, TITANS_MEM_MAX_DEPTH);
    else if (!strcmp(s, "--chunk")) o->chunk = (int)arg_long(&a, s, 1, 4096);
    else if (!strcmp(s, "--segment")) o->segment = (int)arg_long(&a, s, 1, 65536);
    else if (!strcmp(s, "--slots")) o->slots = (int)arg_long(&a, s, 1, 65536);
    else if (!strcmp(s, "--mac-learns-input")) o->mac_learns_input = 1;
    else if (!strcmp(s, "--window")) o->window = (int)arg_long(&a, s, 1, 1 << 24);
    else if (!strcmp(s, "--persist")) o->persist = (int)arg_long(&a, s, 0, 4096);
    else if (!strcmp(s, "--ffn")) o->ffn = (int)arg_long(&a, s, 1, 1 << 20);
    else if (!strcmp(s, "--theta-max")) o->theta_max = arg_double(&a, s, 1e-9, 100.0);
    else if (!strcmp(s, "--surprise-bound")) o->surprise_bound = arg_double(&a, s, 0.0, 1e6);
    else if (!strcmp(s, "--seq")) o->seq = arg_long(&a, s, 1, 1 << 20);
    else if (!strcmp(s, "--batch")) o->batch = arg_long(&a, s, 1, 1 << 16);
    else if (!strcmp(s, "--steps")) o->steps = arg_long(&a, s, 1, 1L << 30);
    else if (!strcmp(s, "--warmup")) o->warmup = arg_long(&a, s, 0, 1L << 30);
    else if (!strcmp(s, "--lr")) o->lr = arg_double(&a, s, 0.0, 10.0);
    else if (!strcmp(s, "--seed")) o->seed = arg_u64(&a, s);
    else if (!strcmp(s, "--val-every")) o->val_every = arg_long(&a, s, 0, 1L << 30);
    else if (!strcmp(s, "--val-batches")) o->val_batches = arg_long(&a, s, 1, 1 << 16);
    else if (!strcmp(s, "--save-every")) o->save_every = arg_long(&a, s, 0, 1L << 30);
    else if (!strcmp(s, "--log-every")) o->log_every = arg_long(&a, s, 1, 1L << 30);
    else if (!strcmp(s, "--sample-len")) o->sample_len = arg_long(&a, s, 0, 1L << 30);
    else if (!strcmp(s, "--stop-at")) o->stop_at = arg_long(&a, s, 1, 1L << 30);
    else if (!strcmp(s, "--temperature")) o->temperature = arg_double(&a, s, 0.0, 100.0);
    else if (!strcmp(s, "--threads")) o->threads = (int)arg_long(&a, s, 1, 4096);
    else if (!strcmp(s, "--reduce")) {
      const char *how = arg_value(&a, s);
      if (strcmp(how, "overlap") && strcmp(how, "blocking"))
        usage_fail("train", "--reduce %s: want overlap or blocking", how);
      o->reduce_blocking = !strcmp(how, "blocking");
    } else if (!strcmp(s, "--resume")) o->resume = 1;
    else if (!strcmp(s, "--recompute")) o->recompute = 1;
    else if (!strcmp(s, "--recipe")) arg_value(&a, s); /* read above, before the defaults */
    else if (!strcmp(s, "--task")) {
      const char *k = arg_value(&a, s);
      o->task = longctx_kind_from_name(k);
      if (o->task < 0) usage_fail("train", "--task %s: want passkey, prose or copy", k);
    } else if (!strcmp(s, "--task-frac")) o->task_frac = arg_double(&a, s, 0.0, 1.0);
    else if (!strcmp(s, "--lens")) o->n_lens = arg_size_list(&a, s, o->lens, MAX_STAGES, 1, (size_t)1 << 20);
    else if (!strcmp(s, "--lens-mix")) o->lens_mix = 1;
    else if (!strcmp(s, "--min-rows")) o->min_rows = (size_t)arg_long(&a, s, 1, 1 << 16);
    else if (!strcmp(s, "--end-jitter")) o->end_jitter = (size_t)arg_long(&a, s, 0, 1L << 20);
    else if (!strcmp(s, "--needles")) o->needles = (int)arg_long(&a, s, 1, LONGCTX_MAX_NEEDLES);
    else if (!strcmp(s, "--ask-all")) o->ask_all = 1;
    else if (!strcmp(s, "--ask-earlier")) o->ask_earlier = 1;
    else if (!strcmp(s, "--key-words")) {
      const char *w = arg_value(&a, s);
      o->key_words = longctx_word_set_parse(w);
      if (o->key_words < 0 || o->key_words == LONGCTX_WORDS_HELDOUT)
        usage_fail("train", "--key-words %s: want train, random or text", w);
    } else if (!strcmp(s, "--haystack")) o->haystack = arg_value(&a, s);
    else if (!strcmp(s, "--statements")) o->statements = arg_double(&a, s, 0, 1);
    else if (!strcmp(s, "--columns")) o->columns = arg_double(&a, s, 0, 1);
    else if (!strcmp(s, "--numbers")) o->numbers = arg_double(&a, s, 0, 1);
    else if (!strcmp(s, "--decoys")) o->decoys = arg_double(&a, s, 0, 1);
    else if (!strcmp(s, "--alike-words")) o->alike_words = 1;
    else if (!strcmp(s, "--alike-numbers")) o->alike_numbers = arg_double(&a, s, 0, 1);
    else if (!strcmp(s, "--doc-len")) o->doc_len = arg_long(&a, s, 0, 1L << 30);
    else if (!strcmp(s, "--answer-loss")) o->answer_loss = 1;
    else if (!strcmp(s, "--theta-init"))
      o->n_theta_init = arg_double_list(&a, s, o->theta_init, MAX_ALPHA_LAYERS, 1e-12, 0.999999);
    else if (!strcmp(s, "--w0-scale")) o->w0_scale = arg_double(&a, s, 1e-6, 1e3);
    else if (!strcmp(s, "--conv-uniform")) o->conv_uniform = 1;
    else if (!strcmp(s, "--key-shift")) o->key_shift = 1;
    else if (!strcmp(s, "--key-shift-fixed")) {
      o->key_shift = 1;
      if (!o->key_ngram) o->key_ngram = 1; /* the recipe's or a --key-ngram given before stays */
    }
    else if (!strcmp(s, "--key-ngram")) {
      o->key_ngram = (int)arg_long(&a, s, 1, 64);
      o->key_shift = 1;
    }
    else if (!strcmp(s, "--gate-key")) o->gate_key = 1;
    else if (!strcmp(s, "--qk-linear")) o->qk_linear = 1;
    else if (!strcmp(s, "--write-cost")) o->write_cost = arg_double(&a, s, 0.0, 1e6);
    else if (!strcmp(s, "--write-cost-from")) o->write_cost_from = arg_long(&a, s, 0, 1L << 30);
    else if (!strcmp(s, "--write-cost-log")) o->write_cost_log = arg_double(&a, s, 0.0, 1e6);
    else if (!strcmp(s, "--write-cost-filler-only")) o->write_cost_filler_only = 1;
    else if (!strcmp(s, "--write-cost-everywhere")) o->write_cost_filler_only = 0;
    else if (!strcmp(s, "--no-forget")) o->no_forget = 1;
    else if (!strcmp(s, "--per-token-grad")) o->per_token_grad = 1;
    else if (!strcmp(s, "--least-squares")) o->least_squares = 1;
    else if (!strcmp(s, "--forget-fit")) o->forget_fit = 1;
    else if (!strcmp(s, "--emb-scale")) o->emb_scale = arg_double(&a, s, 1e-3, 1e3);
    else if (!strcmp(s, "--head-gain")) o->head_gain = arg_double(&a, s, 0.0, 1e3);
    else if (!strcmp(s, "--attn-identity")) o->attn_identity = arg_double(&a, s, 0, 1e3); /* 0: off */
    else if (!strcmp(s, "--eta-init")) o->eta_init = arg_double(&a, s, 1e-6, 0.999999);
    else if (!strcmp(s, "--alpha-init"))
      o->n_alpha_init = arg_double_list(&a, s, o->alpha_init, MAX_ALPHA_LAYERS, 1e-9, 0.999999);
    else if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      help_train();
      exit(0);
    } else usage_fail("train", "unknown option '%s'", s);
  }
  if (o->warmup < 0) o->warmup = o->steps / 10;
  if (o->save_every < 0) o->save_every = o->steps / 10 > 0 ? o->steps / 10 : 1; /* lose at most a tenth of a run */
  if (o->stop_at && o->stop_at >= o->steps)
    usage_fail("train", "--stop-at %ld is not before the last step (--steps %ld)", o->stop_at, o->steps);
  if (o->log_every < 0) o->log_every = o->steps / 50 > 0 ? o->steps / 50 : 1;
  /* the memory's head width is d / mem-heads: refuse what would have to be rounded */
  titans_block_info kind = titans_block_describe(o->block);
  int has_mem = kind.memory;
  if (has_mem && !o->mem_head_dim && o->d % o->mem_heads != 0)
    usage_fail("train", "--mem-heads %d does not divide --d %d (each memory head is d / mem-heads wide)", o->mem_heads,
               o->d);
  if (o->forget_fit && !o->least_squares)
    usage_fail("train", "--forget-fit decays a least-squares fit's confidence: give --least-squares (else see "
               "--alpha-init, --no-forget)");
  if (o->least_squares) { /* a weight in a fit: 100 writes a new key 99% at once; no bound (its write cannot overshoot) */
    if (!arg_given(argc, argv, "--theta-max")) o->theta_max = 100;
    if (!arg_given(argc, argv, "--surprise-bound")) o->surprise_bound = 0;
  }
  if (numbers && !arg_peek(argc, argv, "--theta-init")) { /* the numbers recipe: the first memory shut, any depth */
    if (o->layers > MAX_ALPHA_LAYERS) usage_fail("train", "--recipe numbers: more than %d layers: give --theta-init", MAX_ALPHA_LAYERS);
    for (int l = 0; l < o->layers; l++) o->theta_init[l] = l == 0 ? 1e-12 : 0.5;
    o->n_theta_init = (size_t)o->layers;
  }
  if (o->n_theta_init > 1 && o->n_theta_init != (size_t)o->layers)
    usage_fail("train", "--theta-init lists %zu values for %d layers (give one value, or one per layer)",
               o->n_theta_init, o->layers);
  if (o->n_alpha_init > 1 && o->n_alpha_init != (size_t)o->layers)
    usage_fail("train", "--alpha-init lists %zu values for %d layers (give one value, or one per layer)",
               o->n_alpha_init, o->layers);
  if (o->slots && !kind.bank) usage_fail("train", "--slots goes with --block lm2");
  if (o->segment && !kind.segment)
    usage_fail("train", "--segment goes with --block mac or lm2 (a %s block has no segment)",
               titans_block_name(o->block));
  if (o->mac_learns_input && o->block != TITANS_BLOCK_MAC)
    usage_fail("train", "--mac-learns-input goes with --block mac");
  if (o->doc_len < 0 && o->task >= 0) o->doc_len = 0;
  if (o->doc_len > 0 && o->task < 0 && o->doc_len < o->seq)
    usage_fail("train", "--doc-len %ld is shorter than one window (--seq %ld)", o->doc_len, o->seq);
  if (o->task < 0) {
    if (o->task_frac >= 0 || o->n_lens || o->answer_loss || o->lens_mix || o->end_jitter || o->needles || o->haystack ||
        o->numbers > 0 || o->decoys > 0 || o->min_rows || o->key_words || o->ask_all || o->ask_earlier ||
        o->write_cost_filler_only || o->alike_words || o->alike_numbers > 0)
      usage_fail("train", "--task-frac, --lens, --lens-mix, --min-rows, --end-jitter, --answer-loss, --needles, "
                 "--key-words, --ask-all, --ask-earlier, --haystack, --numbers, --decoys, --alike-words, "
                 "--alike-numbers and --write-cost-filler-only go with --task");
    return;
  }
  if (o->write_cost_filler_only && !(o->write_cost > 0 || o->write_cost_log > 0)) {
    if (arg_given(argc, argv, "--write-cost-filler-only"))
      usage_fail("train", "--write-cost-filler-only says where a cost on writing applies: give --write-cost or "
                 "--write-cost-log");
    o->write_cost_filler_only = 0; /* the numbers recipe's, with its costs set to 0: nothing to place */
  }
  if ((o->needles > 1 || o->key_words || o->ask_all || o->ask_earlier || o->alike_words || o->alike_numbers > 0) &&
      o->task != LONGCTX_PROSE)
    usage_fail("train", "--needles, --key-words, --ask-all, --ask-earlier, --alike-words and --alike-numbers go with "
                        "--task prose");
  if (o->ask_earlier && o->doc_len <= 0) /* without a carried memory an earlier example is not in the row's memory */
    usage_fail("train", "--ask-earlier goes with --doc-len (the memory carried from one example to the next)");
  if (o->decoys > 0 && (o->task != LONGCTX_PROSE || o->numbers <= 0)) /* a fraction of --numbers' numbers */
    usage_fail("train", "--decoys goes with --task prose and --numbers above 0 (the decoys are some of its numbers)");
  if (o->statements > 0 && !(o->haystack && !strcmp(o->haystack, "mixed"))) /* lines of its technical text */
    usage_fail("train", "--statements goes with --haystack mixed (the recipe numbers' filler)");
  if (o->columns > 0 && !(o->haystack && !strcmp(o->haystack, "mixed"))) /* lines of its technical text */
    usage_fail("train", "--columns goes with --haystack mixed (the recipe numbers' filler)");
  if (o->haystack && !strcmp(o->haystack, "own")) o->haystack = NULL; /* the kind's own filler, the recipe's aside */
  if (o->needles == 0) o->needles = 1;
  if (o->min_rows == 0) o->min_rows = 1;
  if (o->task_frac < 0) o->task_frac = 1;
  if (o->n_lens == 0) o->lens[0] = (size_t)o->seq, o->n_lens = 1;
  /* a row is the example (context + question) and its answer: T + 1 tokens */
  size_t shortest = longctx_min_length(o->task) + longctx_answer_len(o->task) - 1;
  for (size_t i = 0; i < o->n_lens; i++)
    if (o->lens[i] < shortest)
      usage_fail("train", "a %s example needs sequences of at least %zu tokens (--seq or --lens)",
                 longctx_kind_name(o->task), shortest);
  for (size_t i = 0; i < o->n_lens && o->doc_len > 0; i++)
    if ((size_t)o->doc_len < o->lens[i])
      usage_fail("train", "--doc-len %ld is shorter than one example (--lens %zu)", o->doc_len, o->lens[i]);
}

static titans_config train_config_of(const train_opts *o);

/* Exits (2) when the options describe no model the library accepts (titans_config_check), naming why:
   found before the data is read and the folder made, not at the first step. */
static void check_model_options(const train_opts *o) {
  titans_config c = train_config_of(o);
  char why[TITANS_ERR_MSG_SIZE];
  if (titans_config_check(&c, why) != TITANS_OK) usage_fail("train", "the options make no model: %s", why);
}

#define DOC_LEN_DEFAULT 4096 /* --doc-len where the model can stream and the text holds two such stretches */

/* --doc-len left at its default: DOC_LEN_DEFAULT where the model of c can stream (titans_stream_unit) and
   the training split holds two such stretches, else 0 (saying so when only the model stands in the way).
   Then a plain run's long reads go by windows of whole stream units: a --seq that is not one is refused
   here (exit 2), naming --doc-len also when it was left at its default. */
static void resolve_doc_len(train_opts *o, const titans_config *c, const dataset *ds) {
  size_t unit = titans_stream_unit(c), T = (size_t)o->seq;
  int by_default = o->doc_len < 0, long_text = ds->n_train >= 2 * DOC_LEN_DEFAULT + T + 1;
  if (by_default) {
    o->doc_len = unit && long_text && DOC_LEN_DEFAULT % T == 0 ? DOC_LEN_DEFAULT : 0;
    if (!unit && long_text)
      printf("note: a %s model with these options cannot stream (titans_stream_init), so --doc-len is 0: every "
             "window starts afresh\n", titans_block_name(c->block));
  }
  if (o->task >= 0 || o->doc_len <= 0 || unit == 0 || T % unit == 0) return; /* unit 0: refused with the stream */
  usage_fail("train", "--doc-len %ld%s reads windows of whole %zu-token units (the memory chunk, or MAC's and LM2's "
             "segment), and --seq %zu is not one: give --seq a multiple of %zu, or --doc-len 0", o->doc_len,
             by_default ? " (the default)" : "", unit, T, unit);
}

static titans_config train_config_of(const train_opts *o) {
  titans_config c = titans_config_default(o->block, 256, o->d, o->layers);
  if (o->heads) c.attn_heads = o->heads;
  if (o->ffn) c.ffn_hidden = o->ffn;
  if (o->persist >= 0 && titans_block_describe(o->block).attention) c.n_persist = o->persist;
  c.window = o->window;
  if (o->segment) c.segment = o->segment;
  c.mem.heads = o->mem_heads;
  c.mem.head_dim = o->mem_head_dim                ? o->mem_head_dim
                   : o->d % o->mem_heads == 0 ? o->d / o->mem_heads
                                              : 0; /* 0: refused by titans_config_check */
  c.mem.depth = o->mem_depth;
  c.mem.chunk = o->chunk;
  if (o->theta_max > 0) c.mem.theta_max = (float)o->theta_max;
  if (o->surprise_bound >= 0) c.mem.surprise_bound = (float)o->surprise_bound;
  /* the library's default for the chunk set above (MAG: one chunk, so that it streams) */
  if (o->persist < 0) c.n_persist = titans_config_default_persist(&c);
  if (o->slots) c.lm2_slots = o->slots;
  if (o->mac_learns_input) c.mac_learns_from = TITANS_MAC_LEARNS_INPUT; /* refused by the check for other kinds */
  if (o->key_ngram > 1 && c.mem.conv_width < o->key_ngram + 1) c.mem.conv_width = o->key_ngram + 1;
  if (o->key_ngram && c.mem.conv_width >= 2) c.mem.key_ngram = o->key_ngram; /* the trainer holds the key there */
  c.mem.gate_key = o->gate_key;
  c.mem.qk_linear = o->qk_linear;
  c.mem.no_forget = o->no_forget;
  c.mem.per_token_grad = o->per_token_grad;
  if (o->least_squares) { /* its write is a fit, not a step: nothing for momentum or forgetting to act on */
    if (c.mem.depth != 1 && titans_block_describe(o->block).memory) /* not made a matrix behind the user's back */
      usage_fail("train", "--least-squares: least_squares needs depth 1 (the memory has depth %d: give --mem-depth 1)",
                 c.mem.depth);
    titans_mem_config_use_least_squares(&c.mem);
    c.mem.no_forget = !o->forget_fit;
  }
  return c;
}

/* ---- retrieval training (--task) ---- */

/* The stage of the --lens curriculum that step `step` is in: the steps split into equal stages. */
static size_t step_stage(const train_opts *o, long step) {
  size_t stage = (size_t)((double)step * (double)o->n_lens / (double)o->steps);
  return stage < o->n_lens ? stage : o->n_lens - 1;
}

/* The shape of the batches of step `step`: stage i of the --lens curriculum (the steps split into equal
   stages) trains on B_i = max(1, B * lens[0] / lens[i]) sequences of T_i = lens[i] tokens, so a step
   holds about as many tokens in every stage. With --lens-mix, stage i draws the length of each of its
   steps uniformly from lens[0..i] (from (seed, step) alone, so a resumed run draws the same): a model
   trained only on its last stage's length forgot the earlier ones (docs/long_context.md). Without
   --task: --batch x --seq. */
static size_t step_length_index(const train_opts *o, long step) {
  size_t stage = step_stage(o, step);
  if (o->lens_mix) { /* a stream of its own, apart from the examples' (seed, step) stream */
    titans_rng rng;
    titans_rng_seed(&rng, longctx_mix64(o->seed ^ 0x4C454E534D495855ull, (uint64_t)step));
    stage = (size_t)(titans_rng_u64(&rng) % (stage + 1));
  }
  return stage;
}

/* --doc-len with --task: where length i's stream is checkpointed (by index: --lens may repeat a length) */
static char *task_stream_path(const train_opts *o, size_t i) {
  char name[64];
  snprintf(name, sizeof name, "stream.stage%zu.safetensors", i);
  return path_join(o->out, name);
}

/* B_i sequences of lens[i] tokens: about as many tokens per step in every stage */
static size_t stage_batch(const train_opts *o, size_t i) {
  size_t b = (size_t)o->batch * o->lens[0] / o->lens[i];
  return b > o->min_rows ? b : o->min_rows; /* min_rows >= 1 with --task */
}

static void step_shape(const train_opts *o, long step, size_t *B, size_t *T) {
  if (o->task < 0) {
    *B = (size_t)o->batch, *T = (size_t)o->seq;
    return;
  }
  size_t i = step_length_index(o, step);
  *T = o->lens[i];
  *B = stage_batch(o, i);
}

/* Questions with their answers, text [n], into row[start, start + n): the answers (answer_len bytes at
   each answer_at[k]) always trained, the rest left out of the loss with answer_only. */
static void put_questions(int *row, size_t start, const char *text, size_t n, const size_t *answer_at,
                          size_t n_answers, size_t answer_len, int answer_only) {
  for (size_t i = 0; i < n; i++) {
    int byte = (unsigned char)text[i];
    row[start + i] = answer_only ? TITANS_NO_LOSS(byte) : byte;
  }
  for (size_t k = 0; k < n_answers; k++)
    for (size_t j = 0; j < answer_len; j++) row[start + answer_at[k] + j] = (unsigned char)text[answer_at[k] + j];
}

/* One training row [T + 1] of a retrieval task: the example (context + question, T + 1 - answer_len - e
   tokens; the needle at a uniform depth; prose filler from the training split), its answer, then e
   tokens of filler outside the loss, e uniform in [0, end_jitter) from the example's seed (0 without
   --end-jitter; never so large that the example gets shorter than its minimum). Without e the question
   of every row of a length that is a multiple of MAC's segment ends at one position of a segment, and
   MAC learned to answer there only (docs/long_context.md). This is the one place that decides which
   targets of an example the loss sees: all of them (the row is the input and, shifted by one, the
   targets), or with answer_only just the answer's (every earlier token marked TITANS_NO_LOSS: still
   read as input, left out of the loss). earlier (--ask-earlier; NULL: none): what the row's earlier
   examples bound; one of them is asked just before the questions of --ask-all, then this example's
   needles join it. skip [T] (NULL: none) gets 1 at the input positions of the needles
   (--write-cost-filler-only). */
static void retrieval_row(int *row, unsigned char *skip, size_t T, uint64_t seed, const train_opts *o,
                          const int *source, size_t source_len, longctx_bindings *earlier) {
  longctx_example ex;
  char why[200];
  int kind = o->task;
  size_t answer_len = longctx_answer_len(kind), end_jitter = o->end_jitter;
  size_t length = T + 1 - answer_len, room = length - longctx_min_length(kind);
  size_t early = end_jitter ? (size_t)(longctx_mix64(seed, 0x454E444A49545452ull) % end_jitter) : 0;
  if (early > room) early = room;
  length -= early;
  /* --needles N: 1..N needles, uniform (a stream of its own: one needle draws what it always drew) */
  int needles = o->needles > 1 ? 1 + (int)(longctx_mix64(seed, 0x4E4545444C4553ull) % (uint64_t)o->needles) : 1;
  /* --numbers F: a fraction uniform in [0, F) of the filler's words are numbers (a stream of its own too) */
  double number_words =
      o->numbers * longctx_unit(longctx_mix64(seed, 0x4E554D57524453ull));
  longctx_options opt = {needles, o->key_words, o->haystack != NULL && kind != LONGCTX_PROSE, number_words,
                         o->decoys, o->alike_words, o->alike_numbers};
  if (longctx_example_init(&ex, kind, length, -1.0, seed, source, source_len, &opt, why) != 0) {
    opt.needles = 1; /* a row too short for its needles holds one */
    if (longctx_example_init(&ex, kind, length, -1.0, seed, source, source_len, &opt, why) != 0) fail("%s", why);
  }
  longctx_tokens(&ex, 0, row, length + answer_len);
  if (skip) longctx_mark_needles(&ex, skip, T);
  for (size_t i = 1; o->answer_loss && i < length; i++) row[i] = TITANS_NO_LOSS(row[i]);
  size_t end = ex.context_len; /* the questions below go over the filler bytes just before row[end] */
  if (o->ask_all) { /* the other needles' questions and answers end the context, the answers trained */
    char asked[LONGCTX_MAX_NEEDLES * 160];
    size_t answer_at[LONGCTX_MAX_NEEDLES], n_answers;
    size_t n = longctx_other_questions(&ex, asked, sizeof asked, answer_at, &n_answers);
    end -= n;
    put_questions(row, end, asked, n, answer_at, n_answers, answer_len, o->answer_loss);
  }
  if (earlier) { /* one binding of an earlier example, asked before those, then this example's join them */
    char asked[200];
    size_t answer_at, n = longctx_earlier_question(earlier, &ex, seed, asked, sizeof asked, &answer_at);
    int fits = n && end >= longctx_needles_end(&ex) + n;
    if (fits) put_questions(row, end - n, asked, n, &answer_at, 1, answer_len, o->answer_loss);
    earlier->examples++;
    earlier->asked += (size_t)fits;
    longctx_bindings_add(earlier, &ex);
  }
  /* after the answer: filler the loss leaves out (nothing before it reads it) */
  for (size_t i = 0; i < early; i++) row[length + answer_len + i] = TITANS_NO_LOSS(longctx_filler_byte(&ex, i));
}

/* tokens [B, T + 1] of a --task run, drawn from (seed, step) alone like sample_batch: per row an example
   seed, then a uniform draw that makes the row a retrieval example (below task_frac) or a plain window of
   the training split (at an offset from the example seed). The examples' filler is source [source_len]
   (the training split, or --haystack). earlier [B] (--ask-earlier; NULL: none): each row's bindings. skip
   [B, T] (NULL: none): 1 at the needles' positions, 0 elsewhere (plain rows: 0). */
static void sample_task_batch(int *tokens, unsigned char *skip, const dataset *ds, const int *source,
                              size_t source_len, const train_opts *o, size_t B, size_t T, long step,
                              longctx_bindings *earlier) {
  titans_rng rng;
  titans_rng_seed(&rng, longctx_mix64(o->seed, (uint64_t)step));
  for (size_t b = 0; b < B; b++) {
    uint64_t example_seed = titans_rng_u64(&rng);
    int *row = tokens + b * (T + 1);
    unsigned char *row_skip = skip ? skip + b * T : NULL;
    if ((double)titans_rng_uniform(&rng) < o->task_frac)
      retrieval_row(row, row_skip, T, example_seed, o, source, source_len, earlier ? &earlier[b] : NULL);
    else {
      memcpy(row, ds->ids + example_seed % (ds->n_train - T), (T + 1) * sizeof(int));
      if (row_skip) memset(row_skip, 0, T);
    }
  }
}

/* --doc-len: whether a stream's call after `calls` calls of windows of T starts a new document, where every
   row's memory restarts (a document holds doc_len / T windows). */
static int document_starts(const train_opts *o, long calls, size_t T) { return calls % (o->doc_len / (long)T) == 0; }

/* --ask-earlier: the batch [B, T + 1] of step, from a stream used calls times before: each row starts a
   new document (its bindings cleared) where the training loop restarts the stream's rows. */
static void earlier_batch(int *tokens, unsigned char *skip, const dataset *ds, const dataset *hay, const train_opts *o,
                          size_t B, size_t T, long step, long calls, longctx_bindings *rows) {
  if (document_starts(o, calls, T))
    for (size_t b = 0; b < B; b++) longctx_bindings_clear(&rows[b]);
  sample_task_batch(tokens, skip, ds, hay->ids ? hay->ids : ds->ids, hay->ids ? hay->n : ds->n_train, o, B, T, step,
                    rows);
}

/* "passkey frac=1 lens=256,512": what a resumed --task run must match. */
static void task_line(char *out, size_t size, const train_opts *o) {
  size_t n = (size_t)snprintf(out, size, "%s frac=%.17g lens=", longctx_kind_name(o->task), o->task_frac);
  for (size_t i = 0; i < o->n_lens && n < size; i++)
    n += (size_t)snprintf(out + n, size - n, "%s%zu", i ? "," : "", o->lens[i]);
  if (o->answer_loss && n < size) n += (size_t)snprintf(out + n, size - n, " answer-loss");
  if (o->lens_mix && n < size) n += (size_t)snprintf(out + n, size - n, " lens-mix");
  if (o->end_jitter && n < size) n += (size_t)snprintf(out + n, size - n, " end-jitter=%zu", o->end_jitter);
  if (o->min_rows > 1 && n < size) n += (size_t)snprintf(out + n, size - n, " min-rows=%zu", o->min_rows);
  if (o->needles > 1 && n < size) n += (size_t)snprintf(out + n, size - n, " needles=%d", o->needles);
  if (o->ask_all && n < size) n += (size_t)snprintf(out + n, size - n, " ask-all");
  if (o->ask_earlier && n < size) n += (size_t)snprintf(out + n, size - n, " ask-earlier");
  if (o->key_words && n < size)
    n += (size_t)snprintf(out + n, size - n, " key-words=%s", longctx_word_set_name(o->key_words));
  if (o->haystack && n < size) n += (size_t)snprintf(out + n, size - n, " haystack=%s", o->haystack);
  if (o->statements > 0 && n < size) n += (size_t)snprintf(out + n, size - n, " statements=%.17g", o->statements);
  if (o->columns > 0 && n < size) n += (size_t)snprintf(out + n, size - n, " columns=%.17g", o->columns);
  if (o->numbers > 0 && n < size) n += (size_t)snprintf(out + n, size - n, " numbers=%.17g", o->numbers);
  if (o->decoys > 0 && n < size) n += (size_t)snprintf(out + n, size - n, " decoys=%.17g", o->decoys);
  if (o->alike_words && n < size) n += (size_t)snprintf(out + n, size - n, " alike-words");
  if (o->alike_numbers > 0 && n < size) n += (size_t)snprintf(out + n, size - n, " alike-numbers=%.17g", o->alike_numbers);
  if (o->write_cost_filler_only && n < size) snprintf(out + n, size - n, " write-cost-filler-only");
}

/* The string saved with the trainer: what a resumed run must match, and the loss history. */
static char *train_meta(const train_opts *o, const dataset *ds, const series *train, const series *val) {
  text t = {0, 0, 0};
  text_printf(&t, "program=titans train\nseed=%llu\nsampler=splitmix(seed, step)\nbatch=%ld\nseq=%ld\n",
              (unsigned long long)o->seed, o->batch, o->seq);
  text_printf(&t, "val_every=%ld\nval_batches=%ld\ndata=%s\ndata_tokens=%zu\ndata_hash=%llu\n", o->val_every,
              o->val_batches, ds->name, ds->n, (unsigned long long)ds->hash);
  if (o->doc_len > 0) text_printf(&t, "doc_len=%ld\n", o->doc_len); /* only then, as task= below */
  if (o->key_ngram) text_printf(&t, "key_shift_fixed=1\n");
  if (o->key_ngram > 1) text_printf(&t, "key_ngram=%d\n", o->key_ngram);
  if (o->task >= 0) { /* only then: a plain run's files stay as they were */
    char task[512];
    task_line(task, sizeof task, o);
    text_printf(&t, "task=%s\n", task);
  }
  series_format(&t, "train", train);
  series_format(&t, "val", val);
  return t.s;
}

/* A resumed run must see the same data, seed, batch and sequence length, or it would not be the run
   it continues. */
static void check_resume_meta(const char *meta, const train_opts *o, const dataset *ds, const char *path) {
  uint64_t v = 0;
  if (!meta) fail("%s has no training metadata: it was not written by './titans train'", path);
  if (!meta_u64(meta, "seed", &v) || v != o->seed)
    fail("--resume: %s was trained with --seed %llu", path, (unsigned long long)v);
  if (!meta_u64(meta, "batch", &v) || v != (uint64_t)o->batch)
    fail("--resume: %s was trained with --batch %llu", path, (unsigned long long)v);
  if (!meta_u64(meta, "seq", &v) || v != (uint64_t)o->seq)
    fail("--resume: %s was trained with --seq %llu", path, (unsigned long long)v);
  if (!meta_u64(meta, "doc_len", &v)) v = 0;
  if (v != (uint64_t)o->doc_len) fail("--resume: %s was trained with --doc-len %llu", path, (unsigned long long)v);
  if (!meta_u64(meta, "key_shift_fixed", &v)) v = 0;
  if (v != (uint64_t)(o->key_ngram > 0))
    fail("--resume: %s was trained %s --key-shift-fixed", path, v ? "with" : "without");
  if (!meta_u64(meta, "key_ngram", &v)) v = 0;
  if (v != (uint64_t)(o->key_ngram > 1 ? o->key_ngram : 0))
    fail("--resume: %s was trained with --key-ngram %llu", path, (unsigned long long)(v ? v : 1));
  if (!meta_u64(meta, "data_hash", &v) || v != ds->hash)
    fail("--resume: %s was trained on other data (give the same --data)", path);
  size_t len = 0;
  const char *task = meta_find(meta, "task", &len);
  char want[512] = "";
  if (o->task >= 0) task_line(want, sizeof want, o);
  if ((task == NULL) == (o->task < 0) && (!task || (len == strlen(want) && !strncmp(task, want, len)))) return;
  char got[512]; /* the checkpoint's task line, as a string */
  snprintf(got, sizeof got, "%.*s", task ? (int)len : 0, task ? task : "");
  /* a passkey run of the recipe from before its filler was sentences: its line names no haystack */
  int cycle_run = o->task == LONGCTX_PASSKEY && o->haystack && task && !strstr(got, " haystack=");
  fail("--resume: %s was trained with %s%s; these options give %s%s (give the same task options%s)", path,
       task ? "--task " : "no --task", got, o->task >= 0 ? "--task " : "no --task", want,
       cycle_run ? "; a passkey run on its own filler: add --haystack own" : "");
}

/* A resumed run keeps the checkpoint's model and learning-rate schedule: a model option (or --lr,
   --warmup) given with another value than the checkpoint's is refused (exit 2), not silently dropped.
   The same value is fine: the command that continues a run repeats the options it started with. The
   initialisation options (--theta-init, --emb-scale, ...) shaped only the weights of step 0. */
static void check_resume_options(int argc, char **argv, const train_opts *o, const titans_trainer *tr,
                                 const char *path) {
  const titans_config *had = &tr->model->cfg;
  titans_config want = train_config_of(o);
  if (arg_given(argc, argv, "--block") && want.block != had->block)
    usage_fail("train", "--resume: %s is a %s model, not --block %s (leave --block out, or train into another --out)",
               path, titans_block_name(had->block), titans_block_name(want.block));
  const struct {
    const char *opt;
    double want, had;
  } v[] = {{"--d", want.d, had->d},
           {"--layers", want.n_layers, had->n_layers},
           {"--heads", want.attn_heads, had->attn_heads},
           {"--mem-heads", want.mem.heads, had->mem.heads},
           {"--mem-head-dim", want.mem.head_dim, had->mem.head_dim},
           {"--mem-depth", want.mem.depth, had->mem.depth},
           {"--chunk", want.mem.chunk, had->mem.chunk},
           {"--segment", want.segment, had->segment},
           {"--window", want.window, had->window},
           {"--persist", want.n_persist, had->n_persist},
           {"--ffn", want.ffn_hidden, had->ffn_hidden},
           {"--slots", want.lm2_slots, had->lm2_slots},
           {"--mac-learns-input", want.mac_learns_from, had->mac_learns_from},
           {"--theta-max", want.mem.theta_max, had->mem.theta_max},
           {"--surprise-bound", want.mem.surprise_bound, had->mem.surprise_bound},
           {"--gate-key", want.mem.gate_key, had->mem.gate_key},
           {"--qk-linear", want.mem.qk_linear, had->mem.qk_linear},
           {"--no-forget", want.mem.no_forget, had->mem.no_forget},
           {"--per-token-grad", want.mem.per_token_grad, had->mem.per_token_grad},
           {"--least-squares", want.mem.least_squares, had->mem.least_squares},
           {"--lr", (float)o->lr, tr->tc.lr},
           {"--write-cost", (float)o->write_cost, tr->tc.write_cost},
           {"--write-cost-from", (double)o->write_cost_from, (double)tr->tc.write_cost_from},
           {"--write-cost-log", (float)o->write_cost_log, tr->tc.write_cost_log},
           {"--warmup", (double)o->warmup, (double)tr->tc.warmup_steps}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (v[i].want != v[i].had && arg_given(argc, argv, v[i].opt))
      usage_fail("train",
                 "--resume: %s was trained with %s %g, not %g: a resumed run keeps the checkpoint's model and "
                 "learning rate (leave %s out, or train into another --out)",
                 path, v[i].opt, v[i].had, v[i].want, v[i].opt);
}

/* The files a training run's checkpoint writes (all in --out). */
typedef struct checkpoint_paths {
  const char *model;    /* model.safetensors: the weights and the tokenizer */
  const char *trainer;  /* trainer.safetensors: weights, optimizer moments, step, metadata */
  const char *svg;      /* loss.svg: the loss curves */
  char *const *streams; /* [n_streams] one file per stream's memory state */
} checkpoint_paths;

static void save_checkpoint(titans_trainer *t, titans_tokenizer *tok, const train_opts *o, const dataset *ds,
                            const series *train, const series *val, const checkpoint_paths *paths,
                            titans_stream *streams, size_t n_streams) {
  const char *model_path = paths->model, *trainer_path = paths->trainer, *svg_path = paths->svg;
  char *const *stream_paths = paths->streams;
  char *meta = train_meta(o, ds, train, val), small[256], title[256];
  snprintf(small, sizeof small, "program=titans train\nstep=%ld\ndata=%s\n", t->step, ds->name);
  /* the streams first: a trainer checkpoint on disk always has the streams' state of its step beside it;
     a failed save leaves the file of the save before untouched (temporary file, then rename) */
  for (size_t i = 0; i < n_streams; i++)
    if (titans_stream_save(&streams[i], stream_paths[i]) != TITANS_OK)
      fail("%s\n(%s of the save before, if any, is unchanged)", streams[i].error, stream_paths[i]);
  /* a failed save leaves the file of the save before untouched (temporary file, then rename) */
  if (titans_trainer_save(t, tok, meta, trainer_path) != TITANS_OK)
    fail("%s\n(%s of the save before, if any, is unchanged)", t->error, trainer_path);
  if (titans_model_save_ex(t->model, tok, small, model_path) != TITANS_OK)
    fail("%s\n(%s of the save before, if any, is unchanged)", t->model->error, model_path);
  snprintf(title, sizeof title, "%s, d = %d, %d layers: loss on %s", titans_block_name(t->model->cfg.block),
           t->model->cfg.d, t->model->cfg.n_layers, ds->name);
  if (write_svg(svg_path, train, val, title) != 0) fail("cannot write %s: %s", svg_path, strerror(errno));
  free(meta);
}

/* Scales every memory layer's initial weights w0 (--w0-scale): a smaller w0 leaves less of the
   initial map in what a fresh memory returns, so what the memory wrote stands out sooner. */
static void scale_memory_init(titans_model *model, float scale) {
  const titans_config *c = &model->cfg;
  if (scale == 1.0f) return;
  for (int l = 0; l < c->n_layers; l++)
    for (int i = 0; i < c->mem.depth; i++) {
      float *w0 = model->w.layers[l].mem.w0[i]; /* [H, n_{i+1}, n_i]; NULL without a memory */
      if (!w0) continue;
      size_t n_in = (size_t)(i == 0 ? c->mem.head_dim : c->mem.head_dim * c->mem.hidden_mult);
      size_t n_out = (size_t)(i + 1 == c->mem.depth ? c->mem.head_dim : c->mem.head_dim * c->mem.hidden_mult);
      for (size_t j = 0; j < (size_t)c->mem.heads * n_in * n_out; j++) w0[j] *= scale;
    }
}

/* --conv-uniform: every memory conv tap uniform in [-1/sqrt(K), 1/sqrt(K)] (PyTorch's Conv1d default)
   instead of the library's near-identity taps, so q, k and v start as mixes of the last K tokens. */
static void uniform_memory_convs(titans_model *model, uint64_t seed) {
  const titans_config *c = &model->cfg;
  titans_rng rng;
  titans_rng_seed(&rng, seed ^ 0xC0417A95ULL);
  float bound = c->mem.conv_width > 0 ? 1.0f / sqrtf((float)c->mem.conv_width) : 0.0f;
  size_t n = (size_t)c->mem.heads * (size_t)c->mem.head_dim * (size_t)c->mem.conv_width;
  for (int l = 0; l < c->n_layers; l++) {
    titans_mem_weights *w = &model->w.layers[l].mem;
    float *convs[3] = {w->conv_q, w->conv_k, w->conv_v}; /* [d_m, K_c] each; NULL without a memory or a conv */
    for (int k = 0; k < 3; k++)
      if (convs[k])
        for (size_t j = 0; j < n; j++) convs[k][j] = bound * (2.0f * titans_rng_uniform(&rng) - 1.0f);
  }
}

/* 1 when every memory layer's key conv is one tap on the previous token (what --key-shift-fixed keeps). */
static int memory_keys_one_tap(const titans_model *model) {
  const titans_config *c = &model->cfg;
  size_t K = (size_t)c->mem.conv_width, dm = (size_t)c->mem.heads * (size_t)c->mem.head_dim;
  int any = 0;
  for (int l = 0; K >= 2 && l < c->n_layers; l++) {
    const float *ck = model->w.layers[l].mem.conv_k; /* [d_m, K_c]; NULL without a memory */
    if (!ck) continue;
    any = 1;
    for (size_t j = 0; j < dm; j++)
      for (size_t t = 0; t < K; t++)
        if (t != K - 2 && ck[j * K + t] != 0.0f) return 0;
  }
  return any;
}

static void haystack_load(dataset *ds, titans_tokenizer *tok, const char *haystack, const size_t *lens, size_t n_lens,
                          const dataset *text, double statements, double columns, uint64_t seed);

static void task_check(const train_opts *o, const titans_model *model, const dataset *ds, const dataset *hay);

static int cmd_train(int argc, char **argv) {
  train_opts o;
  parse_train(argc, argv, &o);
  if (!o.resume) check_model_options(&o);
#ifdef _OPENMP
  if (o.threads) omp_set_num_threads(o.threads);
#endif
  titans_tokenizer tok;
  titans_tokenizer_init(&tok, TITANS_TOKENIZER_BYTE);

  /* the text */
  char *buf = NULL;
  size_t len = 0;
  if (o.data) {
    buf = read_file(o.data, &len, (size_t)o.data_max);
    if (!buf && errno == EFBIG)
      fail("%s holds more than %ld bytes, the most --data reads (--data-max)", o.data, o.data_max);
    if (!buf) fail("cannot read %s: %s", o.data, strerror(errno));
  } else {
    len = default_text_size();
    buf = (char *)xmalloc(len);
    default_text_copy(buf);
  }
  dataset ds;
  dataset_init(&ds, &tok, buf, len, o.data ? o.data : "the built-in text");
  free(buf);
  dataset hay = {0, 0, 0, 0, 0}; /* --haystack: the examples' filler instead of the training split */
  if (o.haystack) {
    haystack_load(&hay, &tok, o.haystack, o.lens, o.n_lens, &ds, o.statements, o.columns,
                  longctx_mix64(o.seed, 0x48415953ull));
    printf("%s filler: %s (%zu tokens)\n", longctx_kind_name(o.task), hay.name, hay.n);
  }
  size_t T = (size_t)o.seq, B = (size_t)o.batch;
  if (ds.n_train < T + 1)
    fail("%s has %zu bytes: the training split (90%%) needs at least --seq + 1 = %zu", ds.name, ds.n, T + 1);
  if (o.task >= 0 && o.task_frac < 1)
    for (size_t i = 0; i < o.n_lens; i++)
      if (ds.n_train < o.lens[i] + 1) fail("%s: the training split is shorter than --lens %zu + 1", ds.name, o.lens[i]);
  /* long reads by default where the model can stream */
  titans_config wanted = train_config_of(&o); /* the options' model: a resumed run's when they are its own */
  resolve_doc_len(&o, &wanted, &ds);
  int carry_text = o.doc_len > 0 && o.task < 0, carry_examples = o.doc_len > 0 && o.task >= 0; /* --doc-len */
  if (carry_text && (size_t)o.doc_len / T * T + 1 > ds.n_train)
    fail("%s: the training split (%zu tokens) is shorter than one --doc-len stretch (%ld)", ds.name, ds.n_train,
         o.doc_len);
  size_t stage_rows[MAX_STAGES] = {B}; /* every step's global batch splits evenly over the ranks */
  for (size_t i = 0; o.task >= 0 && i < o.n_lens; i++) stage_rows[i] = stage_batch(&o, i);
  dist_check(argc, argv, ds.hash, stage_rows, o.task >= 0 ? o.n_lens : 1);
  int have_val = ds.n - ds.n_train >= T + 1;
  if (!have_val)
    fprintf(stderr, "titans: note: the held-out 10%% of %s is shorter than --seq + 1: no validation\n", ds.name);

  char *model_path = path_join(o.out, "model.safetensors"), *trainer_path = path_join(o.out, "trainer.safetensors");
  char *svg_path = path_join(o.out, "loss.svg");
  note_temp_file_of(model_path);
  note_temp_file_of(trainer_path);
  note_temp_file_of(svg_path);

  titans_model model;
  titans_trainer tr;
  series train = {0, 0, 0, 0}, val = {0, 0, 0, 0};
  if (o.resume) {
    char *meta = NULL;
    titans_tokenizer ftok;
    if (dist_rank == 0 && !file_exists(trainer_path)) fail("--resume: %s does not exist", trainer_path);
    if (dist_rank == 0) check_safetensors_file(trainer_path);
    if (dist_trainer_load(&tr, &model, &ftok, &meta, trainer_path) != TITANS_OK) fail_file(trainer_path, tr.error);
    titans_tokenizer_free(&ftok);
    check_resume_meta(meta, &o, &ds, trainer_path);
    check_resume_options(argc, argv, &o, &tr, trainer_path);
    if (tr.step >= o.steps) { /* every rank sees the same step */
      if (dist_rank == 0)
        printf("nothing to do: %s is at step %ld, and --steps %ld asks for no more (raise --steps to train longer)\n",
               trainer_path, tr.step, o.steps);
      dist_finish();
      exit(0);
    }
    if (!series_parse(&train, meta, "train") || !series_parse(&val, meta, "val"))
      fail("%s: the loss history in its metadata is malformed", trainer_path);
    titans_free(meta); /* the library allocated it */
    /* drop history entries of steps after the checkpoint (none when it was written by this program) */
    while (train.n && train.step[train.n - 1] > tr.step) train.n--;
    while (val.n && val.step[val.n - 1] > tr.step) val.n--;
    if (o.steps != tr.tc.total_steps) {
      printf("note: --steps %ld differs from the checkpoint's %ld: the learning-rate schedule is stretched to %ld\n",
             o.steps, tr.tc.total_steps, o.steps);
      tr.tc.total_steps = o.steps;
    }
    /* a checkpoint of an earlier version has no key_ngram: the resumed run's option says it */
    if (o.key_ngram && model.cfg.mem.conv_width >= 2 && model.cfg.mem.key_ngram == 0) model.cfg.mem.key_ngram = 1;
    printf("resumed %s at step %ld\n", trainer_path, tr.step);
  } else {
    titans_config cfg = train_config_of(&o);
    if (titans_model_init(&model, &cfg) != TITANS_OK) fail("%s", model.error);
    titans_model_init_weights(&model, o.seed);
    for (int l = 0; l < model.cfg.n_layers; l++) /* --theta-init, --alpha-init: one value, or one per layer */
      titans_model_set_layer_gates(&model, l, (float)o.theta_init[o.n_theta_init > 1 ? l : 0], (float)o.eta_init,
                                   (float)o.alpha_init[o.n_alpha_init > 1 ? l : 0]);
    scale_memory_init(&model, (float)o.w0_scale);
    if (o.conv_uniform) uniform_memory_convs(&model, o.seed);
    /* --key-shift, --attn-identity, --emb-scale: the library's look-up initialisation (docs/model.md 5.1) */
    titans_lookup_init lookup = {.key_shift = o.key_shift, .attn_identity = (float)o.attn_identity,
                                 .emb_scale = (float)o.emb_scale, .emb_shared = 0.0f,
                                 .head_gain = (float)o.head_gain};
    titans_model_init_lookup(&model, &lookup);
    titans_train_config tc = titans_train_config_default();
    tc.lr = (float)o.lr;
    tc.min_lr = (float)o.lr / 10;
    tc.warmup_steps = o.warmup;
    tc.total_steps = o.steps;
    tc.write_cost = (float)o.write_cost;
    tc.write_cost_from = o.write_cost_from;
    tc.write_cost_log = (float)o.write_cost_log;
    if (titans_trainer_init(&tr, &model, &tc) != TITANS_OK) fail("%s", tr.error);
  }
  /* everything is checked: now the folder, created with its parents and tried for writing, so a bad --out
     is found before the first step rather than at the first checkpoint */
  if (dist_rank == 0) {
    make_dirs(o.out);
    check_writable_dir(o.out);
  }
  dist_attach(&tr, o.reduce_blocking); /* MPI: the ranks' gradients are summed before every step */
  titans_trainer_set_recompute(&tr, o.recompute);
  const titans_config *c = &model.cfg;
  char heads[48] = ""; /* LMM has no attention */
  if (titans_block_describe(c->block).attention) snprintf(heads, sizeof heads, " %d attention heads,", c->attn_heads);
  printf("model: %s, d = %d, %d layers,%s %zu parameters; data: %s, %zu tokens (%zu for training)\n",
         titans_block_name(c->block), c->d, c->n_layers, heads, model.n_floats, ds.name, ds.n, ds.n_train);
  printf("training: %ld steps of %zu x %zu tokens, lr %g, %d thread%s\n", o.steps, B, T, (double)tr.tc.lr,
         titans_threads(), titans_threads() == 1 ? "" : "s");
  if (o.task >= 0) {
    printf(
        "retrieval task: %s examples in %.0f%% of the rows (the rest plain text), needle depth uniform; length stages:",
        longctx_kind_name(o.task), 100 * o.task_frac);
    for (size_t i = 0; i < o.n_lens; i++) printf(" %zu", o.lens[i]);
    printf(" (validation: plain text, %zu x %zu%s)\n", B, T,
           o.answer_loss ? "; the loss trains only the answers, so the validation loss on text measures what the "
                           "model was not trained on, not retrieval: ./titans needle does" : "");
  }
  fflush(stdout);

  size_t capacity = B * (T + 1); /* tokens of the largest batch: validation's or a stage's */
  for (long step = 0; step < o.steps; step++) {
    size_t Bs, Ts;
    step_shape(&o, step, &Bs, &Ts);
    if (Bs * (Ts + 1) > capacity) capacity = Bs * (Ts + 1);
  }
  int *tokens = (int *)xmalloc(capacity * sizeof(int)); /* [B, T + 1] of the current step */
  /* [B, T] of the current step (--write-cost-filler-only): 1 at the needles' input positions */
  unsigned char *skip = o.write_cost_filler_only ? (unsigned char *)xmalloc(capacity) : NULL;
  /* --doc-len: what the rows carry from one window to the next. Plain text: one stream of B rows, all
     moving to new stretches together. --task: one stream per length of the curriculum (B_i rows each),
     whose rows carry their memory from one example to the next until they have read doc_len tokens. */
  titans_stream streams[MAX_STAGES];
  char *stream_paths[MAX_STAGES];     /* where each stream is checkpointed */
  long stream_calls[MAX_STAGES] = {0}; /* steps so far that used each stream: when its rows restart */
  size_t n_streams = carry_text ? 1 : carry_examples ? o.n_lens : 0;
  if (carry_examples) {
    /* a stream goes on only after windows of whole segments (MAC, LM2) or memory chunks (LMM, MAG) */
    const titans_config *c = &model.cfg;
    int by_segment = titans_block_describe(c->block).segment;
    size_t unit = titans_stream_unit(c);
    for (size_t i = 0; i < o.n_lens; i++)
      if (unit && o.lens[i] % unit != 0)
        fail("--doc-len with --task: every --lens must be a multiple of the %s (%zu), not %zu",
             by_segment ? "segment" : "memory chunk", unit, o.lens[i]);
    for (long step = 0; step < tr.step; step++) stream_calls[step_length_index(&o, step)]++;
    printf("long reads: each row's memory carries from one example to the next until it has read %ld tokens\n",
           o.doc_len);
  } else if (carry_text) {
    stream_calls[0] = tr.step;
    printf("long reads: each row reads %ld-token stretches as %ld windows of %zu, memory carried between windows\n",
           o.doc_len, o.doc_len / (long)T, T);
  }
  /* --ask-earlier: per stream, each row's bindings [stage_batch] since its document began; on --resume
     rebuilt by drawing every batch before (the draws are a function of the seed and the step) */
  longctx_bindings *earlier[MAX_STAGES] = {NULL};
  if (o.ask_earlier) {
    for (size_t i = 0; i < n_streams; i++) {
      earlier[i] = (longctx_bindings *)xmalloc(stage_batch(&o, i) * sizeof(longctx_bindings));
      memset(earlier[i], 0, stage_batch(&o, i) * sizeof(longctx_bindings));
    }
    long calls[MAX_STAGES] = {0}; /* as stream_calls, counted again over the steps replayed */
    for (long step = 0; step < tr.step; step++) {
      size_t Bs, Ts, i = step_length_index(&o, step);
      step_shape(&o, step, &Bs, &Ts);
      earlier_batch(tokens, NULL, &ds, &hay, &o, Bs, Ts, step, calls[i]++, earlier[i]);
    }
  }
  for (size_t i = 0; i < n_streams; i++) {
    size_t rows = carry_text ? B : stage_batch(&o, i), window = carry_text ? T : o.lens[i];
    int rc = titans_stream_init(&streams[i], &model, rows / (size_t)dist_size);
    if (rc == TITANS_ERR_ARG) usage_fail("train", "--doc-len %ld: %s", o.doc_len, streams[i].error);
    if (rc != TITANS_OK) fail("--doc-len: %s", streams[i].error);
    stream_paths[i] = carry_text ? path_join(o.out, "stream.safetensors") : task_stream_path(&o, i);
    note_temp_file_of(stream_paths[i]);
    if (o.resume && !document_starts(&o, stream_calls[i], window)) { /* inside a document: what the rows carried */
      if (dist_stream_load(&streams[i], stream_paths[i]) != TITANS_OK) fail("--resume: %s", streams[i].error);
      printf("resumed the rows' memory from %s\n", stream_paths[i]);
    }
  }
  double train_time = 0, t_start = now_seconds(), tokens_done = 0;
  recent_steps recent = {{0}, 0}; /* for the ETA */
  long first = tr.step, steps_done = 0;
  /* the gradient norm before clipping: its largest value and how often it was far above the clip
     (the signature of a memory whose chunk recurrence amplifies gradients: docs/long_context.md) */
  float grad_max = 0.0f;
  long grad_max_step = 0, grad_far_steps = 0;
  long far_by_length[MAX_STAGES] = {0}, steps_by_length[MAX_STAGES] = {0}; /* --task: the same count per --lens entry */
  size_t Tprev = 0, stage_prev = 0;
  catch_stop_signals("stopping after the current step, to save it");
  while (tr.step < o.steps) {
    long step = tr.step; /* 0-based index of this optimizer step */
    float loss;
    size_t Bs, Ts; /* this step's batch shape (the curriculum's stage with --task) */
    step_shape(&o, step, &Bs, &Ts);
    if (carry_text) sample_doc_batch(tokens, &ds, Bs, Ts, (size_t)o.doc_len, o.seed, step);
    else if (o.task < 0) sample_batch(tokens, &ds, Bs, Ts, o.seed, step);
    else if (o.ask_earlier) {
      size_t i = step_length_index(&o, step);
      earlier_batch(tokens, skip, &ds, &hay, &o, Bs, Ts, step, stream_calls[i], earlier[i]);
    } else
      sample_task_batch(tokens, skip, &ds, hay.ids ? hay.ids : ds.ids, hay.ids ? hay.n : ds.n_train, &o, Bs, Ts, step,
                        NULL);
    if (o.task >= 0 && o.lens_mix) {
      size_t stage = step_stage(&o, step);
      if (step == first || stage != stage_prev) {
        printf("step %5ld/%ld  %s: each step's length drawn from", step, o.steps, longctx_kind_name(o.task));
        for (size_t i = 0; i <= stage; i++) printf("%s%zu", i ? "," : " ", o.lens[i]);
        printf(" (max(%zu, %ld x %zu / length) sequences)\n", o.min_rows, o.batch, o.lens[0]);
      }
      stage_prev = stage;
    } else if (o.task >= 0 && (step == first || Ts != Tprev))
      printf("step %5ld/%ld  %s: %zu sequences of %zu tokens per step\n", step, o.steps, longctx_kind_name(o.task), Bs,
             Ts);
    Tprev = Ts;
    double t0 = now_seconds();
    int rc;
    size_t Bl = Bs / (size_t)dist_size; /* this rank's rows of the batch: Bl from row dist_rank Bl on */
    const int *mine = tokens + (size_t)dist_rank * Bl * (Ts + 1);
    titans_trainer_set_write_cost_skip(&tr, skip ? skip + (size_t)dist_rank * Bl * Ts : NULL); /* [Bl, Ts] */
    if (n_streams) {
      size_t i = carry_text ? 0 : step_length_index(&o, step);
      if (document_starts(&o, stream_calls[i], Ts)) /* a new document for every row of the stream */
        for (size_t b = 0; b < Bl; b++) titans_stream_restart(&streams[i], b);
      rc = titans_train_step_stream(&tr, &streams[i], mine, Ts, &loss);
      if (rc == TITANS_OK) stream_calls[i]++;
    } else rc = titans_train_step(&tr, mine, 1, Bl, Ts, &loss);
    if (rc == TITANS_ERR_NONFINITE)
      fail("%s\nThe run diverged (the weights are those of the step before). Try a lower --lr or --theta-max; "
           "--resume restarts from the last checkpoint.", tr.error);
    if (rc != TITANS_OK) fail("%s%s", tr.error, dist_error); /* MPI: what the failed call said */
    double took = now_seconds() - t0;
    train_time += took;
    if (steps_done > 0) recent_steps_add(&recent, took); /* the first step allocates and warms up */
    tokens_done += (double)(Bs * Ts);
    steps_done++;
    series_push(&train, tr.step, loss);
    if (tr.last_grad_norm > grad_max) grad_max = tr.last_grad_norm, grad_max_step = tr.step;
    int far = tr.tc.clip > 0.0f && tr.last_grad_norm > 10.0f * tr.tc.clip;
    grad_far_steps += far;
    if (o.task >= 0) {
      size_t li = step_length_index(&o, step);
      steps_by_length[li]++, far_by_length[li] += far;
    }
    if (dist_size > 1) stop_signal = dist_max_int(stop_signal); /* a signal to any rank stops them all at this step */
    int last = tr.step == o.steps, stop = o.stop_at && tr.step == o.stop_at, signalled = stop_signal != 0;
    if (tr.step % o.log_every == 0 || last || stop || tr.step == first + 1) {
      /* the first step allocates and warms the caches (it took 6x a later one): the ETA leaves it out,
         and says "--" until two later steps were timed */
      char eta[32] = "--";
      if (recent.n >= 2) fmt_duration(eta, sizeof eta, recent_steps_mean(&recent) * (double)(o.steps - tr.step));
      printf("step %5ld/%ld  loss %.4f  grad %7.3g  lr %.2e  %6.0f tok/s  ETA %s\n", tr.step, o.steps, (double)loss,
             (double)tr.last_grad_norm, (double)tr.last_lr, tokens_done / train_time, eta);
      fflush(stdout);
    }
    if (have_val && dist_rank == 0 && ((o.val_every && tr.step % o.val_every == 0) || last)) {
      float vl = validation_loss(&tr, &ds, B, T, (size_t)o.val_batches, tokens);
      series_push(&val, tr.step, vl);
      printf("step %5ld/%ld  validation loss %.4f\n", tr.step, o.steps, (double)vl);
      fflush(stdout);
    }
    /* an interruption (--stop-at) saves but adds no validation point, so the resumed run's history
       and files are the uninterrupted run's */
    if ((o.save_every && tr.step % o.save_every == 0) || last || stop || signalled) {
      dist_check_weights(&tr);
      titans_stream *rows = dist_streams_gather(streams, n_streams); /* MPI: every rank's rows, on rank 0 */
      if (dist_rank == 0) {
        const checkpoint_paths paths = {model_path, trainer_path, svg_path, stream_paths};
        save_checkpoint(&tr, &tok, &o, &ds, &train, &val, &paths, rows, n_streams);
      }
      dist_streams_release(rows, streams, n_streams);
    }
    if (stop) {
      printf("stopped at step %ld (--stop-at); continue with\n", tr.step);
      print_resume_command(stdout, argc, argv);
      break;
    }
    if (signalled && !last) {
      fflush(stdout);
      if (dist_rank == 0) { /* MPI: the others stop at the same step, quietly */
        fprintf(stderr, "\ntitans: %s at step %ld of %ld: saved %s and %s; continue with\n",
                stop_signal == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)", tr.step, o.steps, model_path,
                trainer_path);
        print_resume_command(stderr, argc, argv);
      }
      break;
    }
  }
  release_stop_signals();
  char took[32];
  fmt_duration(took, sizeof took, now_seconds() - t_start);
  printf("trained %ld steps in %s; wrote %s, %s and %s\n", steps_done, took, model_path, trainer_path, svg_path);
  printf("gradient norm before clipping: largest %.3g (step %ld); %ld of %ld steps above 10x the clip (%g)\n",
         (double)grad_max, grad_max_step, grad_far_steps, steps_done, (double)tr.tc.clip);
  if (o.task >= 0 && o.n_lens > 1) { /* where they were: with --answer-loss, where the answers went wrong */
    printf("  by length:");
    for (size_t i = 0; i < o.n_lens; i++)
      printf("%s %zu: %ld of %ld", i ? "," : "", o.lens[i], far_by_length[i], steps_by_length[i]);
    printf("\n");
  }
  if (o.ask_earlier) { /* how often an earlier needle fitted: a row's last filler bytes hold its question */
    printf("--ask-earlier: examples that asked an earlier example's needle, by length:");
    for (size_t i = 0; i < n_streams; i++) {
      size_t examples = 0, asked = 0;
      for (size_t b = 0; b < stage_batch(&o, i); b++) examples += earlier[i][b].examples, asked += earlier[i][b].asked;
      printf("%s %zu: %zu of %zu", i ? "," : "", o.lens[i], asked, examples);
    }
    printf("\n");
  }
  dist_report(train_time); /* MPI: the all-reduce's share of the steps */
  if (grad_far_steps * 20 > steps_done && o.task >= 0 && o.answer_loss) /* more than 5% of the steps */
    printf("note: with --answer-loss a step's loss is its answers alone, so a step whose few rows answer wrong has a\n"
           "gradient hundreds of times a right one's: most of the steps counted above (--min-rows R averages R rows\n"
           "a step at every length)\n");
  else if (grad_far_steps * 20 > steps_done)
    printf("note: the gradient was often far above the clip, which slows or stalls training. With a memory on long\n"
           "windows (--seq), a smaller inner step helps: --theta-init or --eta-init (docs/long_context.md,\n"
           "\"Momentum and long windows\")\n");

  int status = stop_signal ? 128 + (int)stop_signal : 0; /* 130 for SIGINT, 143 for SIGTERM, as the shell reports */
  if (o.task >= 0 && o.answer_loss && o.sample_len > 0 && !stop_signal && dist_rank == 0)
    task_check(&o, &model, &ds, &hay);
  else if (o.sample_len > 0 && !stop_signal && dist_rank == 0) {
    titans_session s;
    size_t n_prompt;
    if (titans_session_init(&s, &model) != TITANS_OK) fail("%s", s.error);
    int *prompt = (int *)xmalloc((strlen(o.prompt) + 1) * sizeof(int));
    titans_tokenizer_encode(&tok, prompt, strlen(o.prompt), &n_prompt, o.prompt, strlen(o.prompt));
    printf("\nsample (temperature %.2f, top-k 40):\n%s", o.temperature, o.prompt);
    const sampling how = {(float)o.temperature, 40, 1.0f, o.seed};
    generate_text(&s, &tok, prompt, n_prompt, o.sample_len, &how, stdout);
    printf("\n");
    free(prompt);
    titans_session_free(&s);
  }
  for (size_t i = 0; i < n_streams; i++) {
    titans_stream_free(&streams[i]);
    free(stream_paths[i]);
    free(earlier[i]);
  }
  free(tokens);
  free(skip);
  free(hay.ids);
  free(hay.name);
  free(ds.ids);
  free(ds.name);
  series_free(&train);
  series_free(&val);
  free(model_path);
  free(trainer_path);
  free(svg_path);
  titans_trainer_free(&tr);
  titans_model_free(&model);
  titans_tokenizer_free(&tok);
  return status;
}

/* ---- generate ----------------------------------------------------------------------------------- */

static void help_generate(void) {
  printf("usage: ./titans generate --model FILE [options]\n"
         "Prints the prompt, then text sampled from the model as it is generated.\n"
         "  --model FILE        a checkpoint: DIR/model.safetensors (or DIR/trainer.safetensors) of ./titans train\n"
         "  --prompt TEXT       text the model reads first (default: none)\n"
         "  -n N                bytes to generate (500)\n"
         "  --temperature X     0 = always the most likely byte (0.8)\n"
         "  --top-k K           sample among the K most likely (40; 0 = all)\n"
         "  --top-p P           ... then the smallest set of probability P (0.95; 1 = all)\n"
         "  --seed S            of the sampler (default: from the clock)\n"
         "  --state FILE        the model's memory: read from FILE when it exists, written back at the end,\n"
         "                      so the model remembers what it read across runs\n"
         "  --samples N         N continuations of the prompt sampled at once (a session batch; sample i\n"
         "                      seeded with S + i), printed one after another at the end (1; not with --state)\n"
         "  --threads N         OpenMP threads\n");
}

static int cmd_generate(int argc, char **argv) {
  args a = {argc, 0, argv, "generate"};
  const char *model_path = NULL, *prompt = "", *state_path = NULL;
  long n = 500;
  double temperature = 0.8, top_p = 0.95;
  int top_k = 40, threads = 0;
  long samples = 1;
  uint64_t seed = (uint64_t)time(NULL);
  for (a.i = 0; a.i < argc; a.i++) {
    const char *s = argv[a.i];
    if (!strcmp(s, "--model")) model_path = arg_value(&a, s);
    else if (!strcmp(s, "--samples")) samples = arg_long(&a, s, 1, 4096);
    else if (!strcmp(s, "--prompt")) prompt = arg_value(&a, s);
    else if (!strcmp(s, "--state")) state_path = arg_value(&a, s);
    else if (!strcmp(s, "-n")) n = arg_long(&a, s, 0, LONG_MAX);
    else if (!strcmp(s, "--temperature")) temperature = arg_double(&a, s, 0.0, 100.0);
    else if (!strcmp(s, "--top-k")) top_k = (int)arg_long(&a, s, 0, 1 << 24);
    else if (!strcmp(s, "--top-p")) top_p = arg_double(&a, s, 0.0, 1.0);
    else if (!strcmp(s, "--seed")) seed = arg_u64(&a, s);
    else if (!strcmp(s, "--threads")) threads = (int)arg_long(&a, s, 1, 4096);
    else if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      help_generate();
      return 0;
    } else usage_fail("generate", "unknown option '%s'", s);
  }
  if (!model_path) usage_fail("generate", "--model FILE is required");
  if (samples > 1 && state_path)
    usage_fail("generate", "--state with --samples %ld: the continuations' memories differ, so which to save?",
               samples);
#ifdef _OPENMP
  if (threads) omp_set_num_threads(threads);
#else
  (void)threads;
#endif
  titans_model model;
  titans_tokenizer tok;
  load_model(&model, &tok, model_path);
  titans_session s;
  if (titans_session_init(&s, &model) != TITANS_OK) fail("%s", s.error);
  if (state_path && file_exists(state_path)) {
    check_safetensors_file(state_path);
    if (titans_session_load(&s, state_path) != TITANS_OK) fail("%s: %s", state_path, s.error);
    fprintf(stderr, "titans: read the memory state %s (%lld tokens seen)\n", state_path, s.position);
  }
  size_t n_prompt, plen = strlen(prompt);
  int *ids = (int *)xmalloc((plen + 1) * sizeof(int));
  if (titans_tokenizer_encode(&tok, ids, plen, &n_prompt, prompt, plen) != TITANS_OK) fail("%s", tok.error);
  if (samples == 1) fwrite(prompt, 1, plen, stdout);
  if (state_path) note_temp_file_of(state_path);
  catch_stop_signals(state_path ? "stopping after the current token, to save the memory state"
                                : "stopping after the current token");
  const sampling how = {(float)temperature, top_k, (float)top_p, seed};
  if (samples > 1) generate_samples(&s, &tok, prompt, ids, n_prompt, n, (size_t)samples, &how);
  else generate_text(&s, &tok, ids, n_prompt, n, &how, stdout);
  printf("\n");
  fflush(stdout);
  if (stop_signal)
    fprintf(stderr, "titans: %s\n", stop_signal == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)");
  if (state_path) {
    if (titans_session_save(&s, state_path) != TITANS_OK) fail("%s: %s", state_path, s.error);
    fprintf(stderr, "titans: wrote the memory state %s (%lld tokens seen)\n", state_path, s.position);
  }
  release_stop_signals();
  free(ids);
  titans_session_free(&s);
  titans_model_free(&model);
  titans_tokenizer_free(&tok);
  return stop_signal ? 128 + (int)stop_signal : 0; /* 130 for SIGINT, 143 for SIGTERM, as the shell reports */
}

/* ---- shared by eval and needle: sizes, models, plots ------------------------------------------------ */

/* The text of --data (or the built-in text) as a dataset of byte ids. */
static void dataset_load(dataset *ds, titans_tokenizer *tok, const char *path) {
  char *buf;
  size_t len = 0;
  if (path) {
    buf = read_file(path, &len, (size_t)DATA_MAX_BYTES);
    if (!buf && errno == EFBIG) fail("%s holds more than %ld bytes, the most --data reads", path, DATA_MAX_BYTES);
    if (!buf) fail("cannot read %s: %s", path, strerror(errno));
  } else {
    len = default_text_size();
    buf = (char *)xmalloc(len);
    default_text_copy(buf);
  }
  dataset_init(ds, tok, buf, len, path ? path : "the built-in text");
  free(buf);
}

/* The filler of --haystack H: "sentences", plain sentences in an order drawn from seed (longctx.h), as
   many tokens as the longest of lens [n_lens] and 64K more (read from a random place, never wrapping
   within an example); "mixed" (train), the training split of `text` alternating every 4,096 tokens with
   as much technical text dense in numbers (longctx_technical_text, `statements` of its lines sentences
   stating numbers, `columns` of the others columns of long numbers); or the whole text of file H.
   ds->n_train = ds->n: all of it is filler. */
static void haystack_load(dataset *ds, titans_tokenizer *tok, const char *haystack, const size_t *lens, size_t n_lens,
                          const dataset *text, double statements, double columns, uint64_t seed) {
  int sentences = !strcmp(haystack, "sentences"), mixed = !strcmp(haystack, "mixed");
  if (!sentences && !mixed) {
    dataset_load(ds, tok, haystack);
    ds->n_train = ds->n;
    return;
  }
  size_t n = 65536; /* [n] tokens of filler */
  for (size_t i = 0; sentences && i < n_lens; i++) n = lens[i] + 65536 > n ? lens[i] + 65536 : n;
  if (mixed) n = 2 * text->n_train;
  char name[200]; /* what the log says the filler is */
  snprintf(name, sizeof name, "%s%s%s",
           sentences ? "plain sentences in random order"
                     : "the training split alternating every 4 KB with technical text dense in numbers",
           mixed && statements > 0 ? ", some of its lines sentences stating numbers" : "",
           mixed && columns > 0 ? ", some of its lines columns of long numbers" : "");
  memset(ds, 0, sizeof *ds);
  ds->ids = (int *)xmalloc(n * sizeof(int));
  if (sentences) longctx_sentence_text(ds->ids, n, seed);
  else {
    int *technical = (int *)xmalloc(text->n_train * sizeof(int)); /* [n_train] */
    longctx_technical_text(technical, text->n_train, seed, statements, columns);
    for (size_t at = 0, out = 0; at < text->n_train; at += 4096) {
      size_t take = text->n_train - at < 4096 ? text->n_train - at : 4096;
      memcpy(ds->ids + out, text->ids + at, take * sizeof(int)), out += take;
      memcpy(ds->ids + out, technical + at, take * sizeof(int)), out += take;
    }
    free(technical);
  }
  ds->n = ds->n_train = n;
  ds->name = (char *)xmalloc(strlen(name) + 1);
  memcpy(ds->name, name, strlen(name) + 1);
}

#define MAX_MODELS 16

/* The models of --model options, read-only once loaded (sessions on threads share them). */
typedef struct model_set {
  size_t n;
  titans_model model[MAX_MODELS];
  const char *path[MAX_MODELS];
  char label[MAX_MODELS][64]; /* short names for tables and legends */
} model_set;

/* "runs/mac/model.safetensors" -> "mac" (the folder of a ./titans train checkpoint), else the file name. */
static void model_label(char *out, size_t size, const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if ((!strcmp(base, "model.safetensors") || !strcmp(base, "trainer.safetensors")) && base > path + 1) {
    const char *dir_end = base - 1, *dir = dir_end;
    while (dir > path && dir[-1] != '/') dir--;
    snprintf(out, size, "%.*s", (int)(dir_end - dir), dir);
  } else snprintf(out, size, "%s", base);
}

static void models_load(model_set *ms) {
  for (size_t i = 0; i < ms->n; i++) {
    titans_tokenizer tok;
    load_model(&ms->model[i], &tok, ms->path[i]);
    int byte_level = tok.kind == TITANS_TOKENIZER_BYTE && ms->model[i].cfg.vocab == 256;
    titans_tokenizer_free(&tok);
    if (!byte_level) fail("%s: not a byte-level model (these instruments feed bytes)", ms->path[i]);
    model_label(ms->label[i], sizeof ms->label[i], ms->path[i]);
    for (size_t j = 0; j < i; j++) /* two models from folders of the same name: tell them apart */
      if (!strcmp(ms->label[i], ms->label[j])) snprintf(ms->label[i], sizeof ms->label[i], "model %zu", i + 1);
    const titans_config *c = &ms->model[i].cfg;
    const char *kind = titans_block_name(c->block);
    printf("model %zu: %s = %s (%s, d = %d, %d layers, %zu parameters)\n", i + 1, ms->label[i], ms->path[i],
           kind ? kind : "?", c->d, c->n_layers, ms->model[i].n_floats);
  }
}

static void models_free(model_set *ms) {
  for (size_t i = 0; i < ms->n; i++) titans_model_free(&ms->model[i]);
}

/* -log softmax(logits)[target] in nats, computed in double. */
static double next_token_loss(const float *logits, size_t V, int target) {
  float max = logits[0];
  for (size_t i = 1; i < V; i++)
    if (logits[i] > max) max = logits[i];
  double sum = 0.0;
  for (size_t i = 0; i < V; i++) sum += exp((double)logits[i] - (double)max);
  return log(sum) + (double)max - (double)logits[target];
}

static int argmax(const float *logits, size_t V) {
  size_t best = 0;
  for (size_t i = 1; i < V; i++)
    if (logits[i] > logits[best]) best = i;
  return (int)best;
}

/* The first error of jobs running on threads (the rest are dropped); jobs skip once it is set. */
typedef struct job_error {
  int set;
  char msg[TITANS_ERR_MSG_SIZE + 64];
} job_error;

static void job_error_set(job_error *e, const char *what, const char *why) {
#ifdef _OPENMP
#pragma omp critical(titans_job_error)
#endif
  {
    if (!e->set) snprintf(e->msg, sizeof e->msg, "%s: %s", what, why);
    e->set = 1;
  }
}

/* Progress on stderr, at most every few seconds, from the thread that owns it (thread 0). */
typedef struct progress {
  const char *what;
  double t_start, t_last;
  long long total; /* units of work, e.g. tokens */
} progress;

static void progress_report(progress *p, long long done, int final) {
  double now = now_seconds();
#ifdef _OPENMP
  if (omp_get_thread_num() != 0) return;
#endif
  if (!final && now - p->t_last < 5.0) return;
  p->t_last = now;
  double rate = (double)done / (now - p->t_start + 1e-9);
  char eta[32];
  fmt_duration(eta, sizeof eta, rate > 0 ? (double)(p->total - done) / rate : 0);
  fprintf(stderr, "%s: %5.1f%% (%lld/%lld tokens, %.0f tok/s) ETA %s\n", p->what,
          100.0 * (double)done / (double)p->total, done, p->total, rate, eta);
}

static void svg_text(FILE *f, const char *s) { /* escapes the XML specials */
  for (const char *c = s; *c; c++)
    if (*c == '<') fputs("&lt;", f);
    else if (*c == '>') fputs("&gt;", f);
    else if (*c == '&') fputs("&amp;", f);
    else if (*c == '"') fputs("&quot;", f);
    else fputc(*c, f);
}

static const char *const curve_colors[8] = {"#e6550d", "#3182bd", "#31a354", "#756bb1",
                                            "#636363", "#d6616b", "#8c6d31", "#17becf"};

/* Finishes an SVG written to "path.tmp": closes it and renames it over path. Returns 0 on success. */
static int svg_close(FILE *f, const char *tmp, const char *path) {
  fprintf(f, "</svg>\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    remove(tmp);
    return -1;
  }
  remove(path); /* rename cannot replace a file on Windows */
  return rename(tmp, path) == 0 ? 0 : -1;
}

/* Curves y [n_curves, n_points] against x [n_points] (x > 0) on a log x axis, with a legend of names.
   Returns 0 on success. */
static int write_curves_svg(const char *path, const char *title, const char *xlabel, const char *ylabel,
                            size_t n_curves, const char *const *names, size_t n_points, const double *x,
                            const double *y) {
  const double W = 800, H = 480;
  double view[8] = {0, 1, 0, 1, 70, W - 20, 40, H - 50}; /* data range in log2(x), then the plot area */
  double ymin = INFINITY, ymax = -INFINITY;
  for (size_t i = 0; i < n_curves * n_points; i++)
    if (isfinite(y[i])) ymin = fmin(ymin, y[i]), ymax = fmax(ymax, y[i]);
  if (!(ymin <= ymax)) ymin = 0, ymax = 1;
  if (ymax - ymin < 1e-3) ymin -= 0.5, ymax += 0.5;
  double ys = nice_step(ymax - ymin, 6);
  view[0] = 0;
  view[1] = ceil(log2(n_points ? fmax(x[n_points - 1], 2.0) : 2.0));
  view[2] = floor(ymin / ys) * ys;
  view[3] = ceil(ymax / ys) * ys;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
             "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%.0f\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">", W / 2);
  svg_text(f, title);
  fprintf(f, "</text>\n");
  for (double v = view[2]; v <= view[3] + 1e-9 * ys; v += ys) {
    double py = svg_py(v, view);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", view[4], py, view[5],
            py);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", view[4] - 6, py + 4,
            fabs(v) < 1e-12 ? 0.0 : v);
  }
  int every = view[1] > 12 ? 2 : 1; /* powers of two, every other one when there are many */
  for (int k = 0; k <= (int)view[1]; k += every) {
    double px = svg_px(k, view);
    char label[32];
    fmt_size(label, sizeof label, (size_t)1 << k);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", px, view[6], px,
            view[7]);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", px, view[7] + 18, label);
  }
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", view[4],
          view[6], view[5] - view[4], view[7] - view[6]);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (view[4] + view[5]) / 2, H - 12);
  svg_text(f, xlabel);
  fprintf(f, "</text>\n<text x=\"16\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 16 %.1f)\">",
          (view[6] + view[7]) / 2, (view[6] + view[7]) / 2);
  svg_text(f, ylabel);
  fprintf(f, "</text>\n");
  for (size_t c = 0; c < n_curves; c++) {
    const char *color = curve_colors[c % 8];
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
    for (size_t i = 0; i < n_points; i++)
      fprintf(f, "%s%.1f,%.1f", i ? " " : "", svg_px(log2(x[i]), view), svg_py(y[c * n_points + i], view));
    fprintf(f, "\"/>\n");
    for (size_t i = 0; i < n_points; i++)
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", svg_px(log2(x[i]), view),
              svg_py(y[c * n_points + i], view), color);
  }
  double lx = view[4] + 10, ly = view[6] + 10;
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"220\" height=\"%.1f\" fill=\"white\" stroke=\"#999\"/>\n", lx, ly,
          12.0 + 18.0 * (double)n_curves);
  for (size_t c = 0; c < n_curves; c++) {
    double yy = ly + 16 + 18 * (double)c;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>\n", lx + 8, yy,
            lx + 32, yy, curve_colors[c % 8]);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", lx + 40, yy + 4);
    svg_text(f, names[c]);
    fprintf(f, "</text>\n");
  }
  return svg_close(f, tmp, path);
}

/* One heat map per model side by side: rows = lengths, columns = depths, cells = exact-match fraction
   value [n_models, n_rows, n_cols] in [0, 1]. Returns 0 on success. */
static int write_heatmap_svg(const char *path, const char *title, size_t n_models, const char *const *names,
                             size_t n_rows, const size_t *lengths, size_t n_cols, const double *depths,
                             const double *value) {
  const double cell_w = 64, cell_h = 30, left = 60, top = 70, gap = 40;
  double panel_w = (double)n_cols * cell_w, W = left + (double)n_models * (panel_w + gap) + 10;
  double H = top + (double)n_rows * cell_h + 50;
  if (W < 420) W = 420;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
             "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%.0f\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">", W / 2);
  svg_text(f, title);
  fprintf(f, "</text>\n");
  for (size_t m = 0; m < n_models; m++) {
    double x0 = left + (double)m * (panel_w + gap);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\">", x0 + panel_w / 2, top - 30);
    svg_text(f, names[m]);
    fprintf(f, "</text>\n");
    for (size_t c = 0; c < n_cols; c++)
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">depth %g%%</text>\n",
              x0 + ((double)c + 0.5) * cell_w, top - 8, 100 * depths[c]);
    for (size_t r = 0; r < n_rows; r++) {
      double y0 = top + (double)r * cell_h;
      if (m == 0) {
        char label[32];
        fmt_size(label, sizeof label, lengths[r]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", left - 8, y0 + cell_h / 2 + 4, label);
      }
      for (size_t c = 0; c < n_cols; c++) {
        double v = value[(m * n_rows + r) * n_cols + c];
        int shade = (int)(255 - 200 * v); /* white (0%) to dark blue (100%) */
        fprintf(
            f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" fill=\"rgb(%d,%d,255)\" stroke=\"#999\"/>\n",
            x0 + (double)c * cell_w, y0, cell_w, cell_h, shade, shade);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"%s\">%.0f%%</text>\n",
                x0 + ((double)c + 0.5) * cell_w, y0 + cell_h / 2 + 4, v > 0.6 ? "white" : "black", 100 * v);
      }
    }
  }
  fprintf(
      f,
      "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"middle\">rows: context length (tokens); cells: exact match</text>\n",
      W / 2, H - 16);
  return svg_close(f, tmp, path);
}

/* Peak resident memory of this process in MB, or -1 where unknown. */
static double peak_rss_mb(void) {
#if defined(__unix__) || defined(__APPLE__)
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
#ifdef __APPLE__
  return (double)ru.ru_maxrss / (1024.0 * 1024.0); /* bytes on macOS */
#else
  return (double)ru.ru_maxrss / 1024.0; /* kilobytes on Linux and the BSDs */
#endif
#else
  return -1;
#endif
}

static void set_threads(int threads) {
#ifdef _OPENMP
  if (threads) omp_set_num_threads(threads);
#else
  (void)threads;
#endif
}

/* ---- eval: loss by position ------------------------------------------------------------------- */

static void help_eval(void) {
  printf("usage: ./titans eval --model FILE [--model FILE2 ...] [options]\n"
         "Streams the held-out last 10%% of the text through a session per model, one token per call (the\n"
         "memory learning as it reads, as in generate), and prints the mean next-token loss (nats/byte) by\n"
         "position bucket [0,1), [1,2), [2,4), ... All models read the same streams; with two or more, the\n"
         "difference of each to the LAST model (the control, e.g. an SWA baseline) is printed too.\n"
         "  --model FILE        a checkpoint of ./titans train (repeat for more models, up to %d)\n"
         "  --data FILE         the text (default: the built-in text); the same split as train\n"
         "  --len N             tokens per stream (16K, or the largest power of two the held-out split\n"
         "                      holds when it is shorter; K = 1024, M = 1024^2)\n"
         "  --streams N         streams from evenly spaced offsets of the held-out split (8)\n"
         "  --svg FILE          the plot of loss against position (eval.svg)\n"
         "  --threads N         OpenMP threads; streams run in parallel, one per thread\n", MAX_MODELS);
}

typedef struct eval_opts {
  model_set models;
  const char *data, *svg;
  size_t len, streams;
  int threads;
} eval_opts;

static void parse_eval(int argc, char **argv, eval_opts *o) {
  args a = {argc, 0, argv, "eval"};
  memset(o, 0, sizeof *o);
  o->svg = "eval.svg";
  o->len = 0; /* 16K, or less when the held-out split is shorter (cmd_eval) */
  o->streams = 8;
  for (a.i = 0; a.i < argc; a.i++) {
    const char *s = argv[a.i];
    if (!strcmp(s, "--model")) {
      if (o->models.n == MAX_MODELS) usage_fail("eval", "at most %d models", MAX_MODELS);
      o->models.path[o->models.n++] = arg_value(&a, s);
    } else if (!strcmp(s, "--data")) o->data = arg_value(&a, s);
    else if (!strcmp(s, "--svg")) o->svg = arg_value(&a, s);
    else if (!strcmp(s, "--len")) o->len = arg_size(&a, s, 2, (size_t)1 << 36);
    else if (!strcmp(s, "--streams")) o->streams = (size_t)arg_long(&a, s, 1, 1 << 20);
    else if (!strcmp(s, "--threads")) o->threads = (int)arg_long(&a, s, 1, 4096);
    else if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      help_eval();
      exit(0);
    } else usage_fail("eval", "unknown option '%s'", s);
  }
  if (o->models.n == 0) usage_fail("eval", "--model FILE is required");
}

/* Position p (0-based: the p-th token fed, predicting token p + 1) -> its bucket: [0,1) is 0, [1,2) is 1,
   [2,4) is 2, ..., [2^(k-1), 2^k) is k. */
static size_t position_bucket(size_t p) {
  size_t k = 0;
  while (p) p >>= 1, k++;
  return k;
}

/* Feeds ids [len + 1] one token at a time and adds each next-token loss into loss_sum [buckets] by
   position. Progress goes into *done (tokens, shared by the threads). */
static int eval_stream(titans_session *s, const int *ids, size_t len, double *loss_sum, long long *done,
                       progress *prog) {
  size_t V = (size_t)s->model->cfg.vocab;
  float *logits = (float *)xmalloc(V * sizeof(float)); /* [V] */
  int rc = TITANS_OK;
  for (size_t t = 0; t < len && rc == TITANS_OK; t++) {
    rc = titans_session_feed(s, &ids[t], 1, logits);
    if (rc == TITANS_OK) loss_sum[position_bucket(t)] += next_token_loss(logits, V, ids[t + 1]);
    if ((t + 1) % 256 == 0 || t + 1 == len) {
      long long now_done;
      long long add = (t + 1) % 256 == 0 ? 256 : (long long)((t + 1) % 256);
#ifdef _OPENMP
#pragma omp atomic capture
#endif
      now_done = *done += add;
      progress_report(prog, now_done, 0);
    }
  }
  free(logits);
  return rc;
}

/* The mean loss per bucket over the streams: mean [n_models, buckets] from sums [n_models, streams,
   buckets], in a fixed order so the result does not depend on the threads. */
static void eval_means(double *mean, const double *sums, const double *count, size_t n_models, size_t streams,
                       size_t buckets) {
  for (size_t m = 0; m < n_models; m++)
    for (size_t k = 0; k < buckets; k++) {
      double total = 0.0;
      for (size_t s = 0; s < streams; s++) total += sums[(m * streams + s) * buckets + k];
      mean[m * buckets + k] = total / count[k];
    }
}

static void eval_print(const eval_opts *o, const double *mean, const double *count, size_t buckets) {
  const model_set *ms = &o->models;
  printf("\nmean next-token loss (nats/byte) by position, %zu streams of %zu tokens:\n", o->streams, o->len);
  printf("%-14s %8s", "position", "count");
  for (size_t m = 0; m < ms->n; m++) printf(" %12.12s", ms->label[m]);
  for (size_t m = 0; m + 1 < ms->n; m++) {
    char diff[160];
    snprintf(diff, sizeof diff, "%s-%s", ms->label[m], ms->label[ms->n - 1]);
    printf(" %14.14s", diff);
  }
  printf("\n");
  for (size_t k = 0; k < buckets; k++) {
    char range[80], lo[32], hi[32];
    fmt_size(lo, sizeof lo, k ? (size_t)1 << (k - 1) : 0);
    fmt_size(hi, sizeof hi, (size_t)1 << k);
    snprintf(range, sizeof range, "[%s,%s)", lo, hi);
    printf("%-14s %8.0f", range, count[k]);
    for (size_t m = 0; m < ms->n; m++) printf(" %12.4f", mean[m * buckets + k]);
    for (size_t m = 0; m + 1 < ms->n; m++) printf(" %+14.4f", mean[m * buckets + k] - mean[(ms->n - 1) * buckets + k]);
    printf("\n");
  }
  if (ms->n >= 2)
    printf("(differences: each model minus the last, %s, on the same streams; negative = better than it)\n",
           ms->label[ms->n - 1]);
}

static int cmd_eval(int argc, char **argv) {
  eval_opts o;
  parse_eval(argc, argv, &o);
  set_threads(o.threads);
  titans_tokenizer tok;
  titans_tokenizer_init(&tok, TITANS_TOKENIZER_BYTE);
  dataset ds;
  dataset_load(&ds, &tok, o.data);
  size_t n_val = ds.n - ds.n_train, len = o.len, streams = o.streams;
  if (len == 0) { /* the default: 16K, or the largest power of two that fits */
    len = 16384;
    while (len > 2 && n_val < len + 1) len /= 2;
    if (n_val < len + 1)
      fail("the held-out 10%% of %s has %zu tokens: too few to evaluate (a stream reads at least 3)", ds.name, n_val);
    if (len < 16384) printf("note: --len %zu (the held-out split of %s has %zu tokens)\n", len, ds.name, n_val);
    o.len = len;
  }
  if (n_val < len + 1)
    fail("the held-out 10%% of %s has %zu tokens: --len can be at most %zu", ds.name, n_val, n_val > 1 ? n_val - 1 : 0);
  models_load(&o.models);
  size_t n_models = o.models.n, buckets = position_bucket(len - 1) + 1, span = n_val - (len + 1);
  printf("data: %s, held-out split of %zu tokens (from token %zu)\n", ds.name, n_val, ds.n_train);
  if (streams * (len + 1) > n_val)
    printf("note: %zu streams of %zu tokens overlap (the held-out split has %zu): they start at evenly spaced "
           "offsets, so they share text\n", streams, len + 1, n_val);
  size_t *offset = (size_t *)xmalloc(streams * sizeof(size_t)); /* [streams] into the held-out split */
  for (size_t s = 0; s < streams; s++)
    offset[s] = streams > 1 ? (size_t)((double)span * (double)s / (double)(streams - 1)) : 0;
  double *count = (double *)xmalloc(buckets * sizeof(double)); /* [buckets] positions per bucket, all streams */
  for (size_t k = 0; k < buckets; k++) count[k] = 0;
  for (size_t t = 0; t < len; t++) count[position_bucket(t)] += (double)streams;
  double *sums = (double *)calloc(n_models * streams * buckets, sizeof(double)); /* [n_models, streams, buckets] */
  if (!sums) fail("out of memory");

  progress prog = {"eval", now_seconds(), now_seconds(), (long long)(n_models * streams * len)};
  long long done = 0;
  job_error err = {0, ""};
  long jobs = (long)(n_models * streams);
  fflush(stdout);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
  for (long j = 0; j < jobs; j++) {
    size_t m = (size_t)j / streams, s = (size_t)j % streams;
    titans_session sess;
    if (err.set) continue;
    if (titans_session_init(&sess, &o.models.model[m]) != TITANS_OK) {
      job_error_set(&err, o.models.path[m], sess.error);
      continue;
    }
    if (eval_stream(&sess, ds.ids + ds.n_train + offset[s], len, sums + (size_t)j * buckets, &done, &prog) != TITANS_OK)
      job_error_set(&err, o.models.path[m], sess.error);
    titans_session_free(&sess);
  }
  if (err.set) fail("eval: %s", err.msg);
  double took = now_seconds() - prog.t_start;
  fprintf(stderr, "eval: %lld tokens in %.1f s (%.0f tok/s, %d thread%s)\n", prog.total, took,
          (double)prog.total / took, titans_threads(), titans_threads() == 1 ? "" : "s");

  double *mean = (double *)xmalloc(n_models * buckets * sizeof(double)); /* [n_models, buckets] */
  eval_means(mean, sums, count, n_models, streams, buckets);
  eval_print(&o, mean, count, buckets);

  double *x = (double *)xmalloc(buckets * sizeof(double)); /* [buckets] mean tokens read (position + 1) */
  for (size_t k = 0; k < buckets; k++) {
    size_t lo = k ? (size_t)1 << (k - 1) : 0, hi = (size_t)1 << k;
    if (hi > len) hi = len;
    x[k] = 0.5 * (double)(lo + hi - 1) + 1.0;
  }
  const char *names[MAX_MODELS];
  for (size_t m = 0; m < n_models; m++) names[m] = o.models.label[m];
  char title[512];
  snprintf(title, sizeof title, "next-token loss by position: %zu streams of the held-out part of %s", streams,
           ds.name);
  if (write_curves_svg(o.svg, title, "tokens read (position + 1, log scale)", "loss (nats/byte)", n_models, names,
                       buckets, x, mean) != 0)
    fail("cannot write %s: %s", o.svg, strerror(errno));
  printf("wrote %s\n", o.svg);
  free(x);
  free(mean);
  free(sums);
  free(count);
  free(offset);
  models_free(&o.models);
  free(ds.ids);
  free(ds.name);
  titans_tokenizer_free(&tok);
  return 0;
}

/* ---- needle: retrieval of a needle stated once, long ago ---------------------------------------- */

#define MAX_CELLS 32 /* lengths, depths */

static void help_needle(void) {
  printf("usage: ./titans needle --model FILE [--model FILE2 ...] [options]\n"
         "For each (length, depth, trial): streams a retrieval example (context + question, made on the fly)\n"
         "through a session, decodes the answer greedily and scores exact match and per-digit accuracy.\n"
         "The tasks are described in docs/long_context.md.\n"
         "  --model FILE        a checkpoint of ./titans train (repeat for more models, up to %d)\n"
         "  --task KIND         passkey (5 digits in repeated filler) | prose (7 digits in real text) |\n"
         "                      copy (16 letters in the passkey's filler, to be repeated) (passkey)\n"
         "  --len LIST          context + question lengths in tokens (1K,4K,16K; K = 1024, M = 1024^2)\n"
         "  --depth LIST        needle depths in %% of the filler (10,50,90)\n"
         "  --trials N          examples per (length, depth) (5)\n"
         "  --data FILE         prose: the text whose held-out last 10%% is the filler (default: built-in)\n"
         "  --haystack H        the filler instead: FILE (a whole text, read from a random place per trial) or\n"
         "                      'sentences' (plain sentences in random order); any task\n"
         "  --needles N         prose: N needles of different key words, the question asks for one (1)\n"
         "  --key-words SET     prose: the key words asked, 'train' (the 16 training draws from), 'heldout'\n"
         "                      (16 never trained on), 'random' (4 to 8 random letters each) or 'text' (words\n"
         "                      of 5 to 8 letters of the haystack, no held-out one) (train)\n"
         "  --numbers F         the filler writes this fraction of its words as numbers no question asks for,\n"
         "                      a random digit per letter (0)\n"
         "  --decoys F          prose: this fraction of those numbers start with the first 1 to 6 digits of\n"
         "                      a needle's number (0)\n"
         "  --alike-words       prose: the other needles' key words have as many letters as the asked one's\n"
         "                      (random letters of that length when the set has too few): keys by place that\n"
         "                      differ in the word's letters alone\n"
         "  --alike-numbers F   prose: this fraction of the other needles' numbers start with the asked one's\n"
         "                      first 1 to 6 digits (the count uniform), only the key word tells them apart (0)\n"
         "  --seed S            of the examples (1); evaluation examples never share a stream with training's\n"
         "  --svg FILE          heat map of exact match, one panel per model (needle.svg)\n"
         "  --trace FILE        write trace: the first model reads the first trial of the first (length, depth)\n"
         "                      one token at a time; FILE gets, per memory chunk and layer, how far the memory's\n"
         "                      state moved (L2 norm of its change) and where the needles are; FILE.svg plots it\n",
         MAX_MODELS);
  printf("  --curve FILE        how long the memory holds the needle, instead of the table: each model reads\n"
         "                      --trials examples of the first length and depth, and every --curve-every\n"
         "                      tokens after the asked needle a copy of its session is asked the question;\n"
         "                      FILE gets one line per probe (TSV), FILE.svg the fraction of trials answered\n"
         "                      exactly against the tokens read since the needle\n"
         "  --curve-every N     tokens between probes (the first length / 64)\n"
         "  --key-cosines       how much the memories' keys overlap, instead of the table: each model reads\n"
         "                      --trials examples of the first length at each depth, and per memory layer the\n"
         "                      mean cosine of its keys is printed between the needles' keys at the same place\n"
         "                      of their numbers, between two places of one number, and between text positions,\n"
         "                      and (matrix memories) how far the writes after a needle moved the values read at\n"
         "                      its number's keys over how far its own write did, by the needles after it (prose,\n"
         "                      2 or more needles; memories whose keys read the tokens before, key_ngram)\n"
         "  --no-forget         a diagnostic: every memory's forgetting gate alpha_t held at 0 while the\n"
         "                      models read (cfg.mem.no_forget), to see what forgetting costs the needle\n"
         "  --alpha X           a diagnostic: every memory's forgetting gate set to start at X (its bias; the\n"
         "                      gate's weights stay) and forgetting on, to see what forgetting would do\n"
         "  --answers FILE      one line per trial (TSV): model, length, depth, trial, the asked key word and\n"
         "                      number, the answer, its right digits, and whose number the answer is (the\n"
         "                      asked needle's, another needle's: a binding error, or none)\n"
         "  --threads N         OpenMP threads; cells (model, length, depth) run in parallel, one per thread\n"
         "A cell's passkey and copy trials read their common filler (up to the needle) once.\n");
}

typedef struct needle_opts {
  model_set models;
  int kind, threads;
  int needles, word_set;     /* --needles, --key-words: longctx_options */
  double numbers;            /* --numbers: longctx_options.number_words */
  double decoys;             /* --decoys: longctx_options.decoy_numbers */
  int alike_words;           /* --alike-words: longctx_options.alike_words */
  double alike_numbers;      /* --alike-numbers F: longctx_options.alike_numbers */
  const char *data, *svg, *haystack, *trace, *answers; /* answers: --answers FILE, one line per trial */
  const char *curve;         /* --curve FILE: the needle's hold along the haystack instead of the table */
  int key_cosines;           /* --key-cosines: how much the memories' keys overlap, instead of the table */
  size_t curve_every;        /* --curve-every: tokens between probes (0: the first length / 64) */
  int no_forget;             /* --no-forget: alpha_t = 0 in every model read (a diagnostic) */
  double alpha;              /* --alpha X: every model's forgetting gate set to start at X (a diagnostic; 0: as is) */
  const int *source;         /* [source_len] the filler's text (token ids): the held-out split of --data for
                                prose, or --haystack; NULL: the passkey's fixed cycle */
  size_t source_len;
  size_t lens[MAX_CELLS], n_lens, depth_pct[MAX_CELLS], n_depths, trials;
  uint64_t seed;
} needle_opts;

static void parse_needle(int argc, char **argv, needle_opts *o) {
  args a = {argc, 0, argv, "needle"};
  memset(o, 0, sizeof *o);
  o->kind = LONGCTX_PASSKEY;
  o->svg = "needle.svg";
  o->lens[0] = 1024, o->lens[1] = 4096, o->lens[2] = 16384, o->n_lens = 3;
  o->depth_pct[0] = 10, o->depth_pct[1] = 50, o->depth_pct[2] = 90, o->n_depths = 3;
  o->trials = 5;
  o->seed = 1;
  o->needles = 1;
  o->word_set = LONGCTX_WORDS_TRAIN;
  for (a.i = 0; a.i < argc; a.i++) {
    const char *s = argv[a.i];
    if (!strcmp(s, "--model")) {
      if (o->models.n == MAX_MODELS) usage_fail("needle", "at most %d models", MAX_MODELS);
      o->models.path[o->models.n++] = arg_value(&a, s);
    } else if (!strcmp(s, "--task")) {
      const char *k = arg_value(&a, s);
      o->kind = longctx_kind_from_name(k);
      if (o->kind < 0) usage_fail("needle", "--task %s: want passkey, prose or copy", k);
    } else if (!strcmp(s, "--len")) o->n_lens = arg_size_list(&a, s, o->lens, MAX_CELLS, 1, (size_t)1 << 36);
    else if (!strcmp(s, "--depth")) o->n_depths = arg_size_list(&a, s, o->depth_pct, MAX_CELLS, 0, 100);
    else if (!strcmp(s, "--trials")) o->trials = (size_t)arg_long(&a, s, 1, 1 << 20);
    else if (!strcmp(s, "--data")) o->data = arg_value(&a, s);
    else if (!strcmp(s, "--haystack")) o->haystack = arg_value(&a, s);
    else if (!strcmp(s, "--trace")) o->trace = arg_value(&a, s);
    else if (!strcmp(s, "--answers")) o->answers = arg_value(&a, s);
    else if (!strcmp(s, "--curve")) o->curve = arg_value(&a, s);
    else if (!strcmp(s, "--key-cosines")) o->key_cosines = 1;
    else if (!strcmp(s, "--curve-every")) o->curve_every = (size_t)arg_long(&a, s, 1, 1L << 30);
    else if (!strcmp(s, "--no-forget")) o->no_forget = 1;
    else if (!strcmp(s, "--alpha")) o->alpha = arg_double(&a, s, 1e-9, 0.999999);
    else if (!strcmp(s, "--needles")) o->needles = (int)arg_long(&a, s, 1, LONGCTX_MAX_NEEDLES);
    else if (!strcmp(s, "--numbers")) o->numbers = arg_double(&a, s, 0, 1);
    else if (!strcmp(s, "--decoys")) o->decoys = arg_double(&a, s, 0, 1);
    else if (!strcmp(s, "--alike-words")) o->alike_words = 1;
    else if (!strcmp(s, "--alike-numbers")) o->alike_numbers = arg_double(&a, s, 0, 1);
    else if (!strcmp(s, "--key-words")) {
      const char *w = arg_value(&a, s);
      o->word_set = longctx_word_set_parse(w);
      if (o->word_set < 0) usage_fail("needle", "--key-words %s: want train, heldout, random or text", w);
    } else if (!strcmp(s, "--svg")) o->svg = arg_value(&a, s);
    else if (!strcmp(s, "--seed")) o->seed = arg_u64(&a, s);
    else if (!strcmp(s, "--threads")) o->threads = (int)arg_long(&a, s, 1, 4096);
    else if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      help_needle();
      exit(0);
    } else usage_fail("needle", "unknown option '%s'", s);
  }
  if (o->models.n == 0) usage_fail("needle", "--model FILE is required");
  if ((o->needles > 1 || o->word_set != LONGCTX_WORDS_TRAIN || o->alike_words || o->alike_numbers > 0) &&
      o->kind != LONGCTX_PROSE)
    usage_fail("needle", "--needles, --key-words, --alike-words and --alike-numbers go with --task prose");
  if (o->decoys > 0 && (o->kind != LONGCTX_PROSE || o->numbers <= 0))
    usage_fail("needle", "--decoys goes with --task prose and --numbers above 0 (the decoys are some of its numbers)");
  if (o->haystack && o->data) usage_fail("needle", "--data and --haystack both name the filler: give one");
  if (o->haystack && !strcmp(o->haystack, "mixed"))
    usage_fail("needle", "--haystack mixed is a training filler (the training text with generated numbers); "
               "evaluate amid text the model never read");
  for (size_t i = 0; i < o->n_lens; i++)
    if (o->lens[i] < longctx_min_length(o->kind))
      usage_fail("needle", "--len %zu: a %s example needs at least %zu tokens", o->lens[i], longctx_kind_name(o->kind),
                 longctx_min_length(o->kind));
}

/* Streams tokens [from, to) of example ex through s in pieces of a small buffer; with logits [V], the
   prediction after the last token lands there. Counts the tokens into *done for the progress line. */
static int needle_feed(titans_session *s, const longctx_example *ex, size_t from, size_t to, float *logits,
                       long long *done, progress *prog) {
  enum { PIECE = 4096 };
  int piece[PIECE]; /* [PIECE] the next tokens of the example */
  int rc = TITANS_OK;
  for (size_t at = from; at < to && rc == TITANS_OK; at += PIECE) {
    size_t n = to - at < PIECE ? to - at : PIECE;
    longctx_tokens(ex, at, piece, n);
    rc = titans_session_feed(s, piece, n, at + n == to ? logits : NULL);
    long long now_done;
#ifdef _OPENMP
#pragma omp atomic capture
#endif
    now_done = *done += (long long)n;
    progress_report(prog, now_done, 0);
  }
  return rc;
}

/* Streams example ex from token `from` (s has read the tokens before it) to the end of the question,
   then decodes the answer greedily, feeding each decoded token back. Returns the number of answer
   symbols right (all of them = exact match) in *correct, and the answer decoded in guessed
   [ex->answer_len] unless it is NULL. */
static int needle_trial(titans_session *s, const longctx_example *ex, size_t from, size_t *correct, char *guessed,
                        long long *done, progress *prog) {
  size_t V = (size_t)s->model->cfg.vocab;
  float *logits = (float *)xmalloc(V * sizeof(float)); /* [V] */
  int rc = needle_feed(s, ex, from, ex->length, logits, done, prog);
  *correct = 0;
  for (size_t i = 0; i < ex->answer_len && rc == TITANS_OK; i++) {
    int guess = argmax(logits, V);
    *correct += guess == (unsigned char)ex->answer[i];
    if (guessed) guessed[i] = guess >= 32 && guess < 127 ? (char)guess : '?';
    if (i + 1 < ex->answer_len) rc = titans_session_feed(s, &guess, 1, logits);
  }
  free(logits);
  return rc;
}

/* The end of a --task run that trained on the answers only: a text sample would say nothing (the model
   was never taught text), so it answers the first trial of `./titans needle --seed 1` at the longest
   training length and depths 10 / 50 / 90%, the filler the held-out split (prose) or the run's own. */
static void task_check(const train_opts *o, const titans_model *model, const dataset *ds, const dataset *hay) {
  static const double depths[3] = {0.1, 0.5, 0.9};
  size_t length = o->lens[o->n_lens - 1];
  const int *source = hay->ids; /* [source_len] */
  size_t source_len = hay->n;
  if (!source && o->task == LONGCTX_PROSE) source = ds->ids + ds->n_train, source_len = ds->n - ds->n_train;
  longctx_example ex[3];
  char why[200];
  int ok = 0;
  longctx_options opt = {o->needles, LONGCTX_WORDS_TRAIN, source != NULL && o->task != LONGCTX_PROSE, 0.0, 0.0, 0, 0};
  for (; opt.needles >= 1; opt.needles--) { /* as many needles as the run trained on, or as fit */
    ok = 1;
    for (size_t i = 0; i < 3 && ok; i++)
      ok = longctx_example_init(&ex[i], o->task, length, depths[i], longctx_eval_seed(1, length, depths[i], 0), source,
                                source_len, &opt, why) == 0;
    if (ok) break;
  }
  printf("\nretrieval check: %d needle%s in %zu tokens of %s; `./titans needle` gives the full table\n", opt.needles,
         opt.needles > 1 ? "s" : "", length, source ? (hay->ids ? hay->name : "held-out text") : "the fixed filler");
  titans_session s;
  if (!ok || titans_session_init(&s, model) != TITANS_OK) {
    printf("  not run: %s\n", ok ? s.error : why);
    return;
  }
  progress prog = {"retrieval check", now_seconds(), now_seconds(), (long long)(3 * length)};
  long long done = 0;
  for (size_t i = 0; i < 3; i++) {
    char guessed[sizeof ex[i].answer] = {0};
    size_t correct = 0;
    int rc = titans_session_reset(&s);
    if (rc == TITANS_OK) rc = needle_trial(&s, &ex[i], 0, &correct, guessed, &done, &prog);
    if (rc != TITANS_OK) {
      printf("  not run: %s\n", s.error);
      break;
    }
    int prose = o->task == LONGCTX_PROSE;
    printf("  depth %2.0f%%: %s%s%s%.*s, answered \"%s\" (%s)\n", 100 * depths[i], prose ? "the number for \"" : "",
           prose ? ex[i].words[0] : "", prose ? "\" is " : "the answer is ", (int)ex[i].answer_len, ex[i].answer,
           guessed, correct == ex[i].answer_len ? "right" : "wrong");
  }
  titans_session_free(&s);
}

/* Sets up the example of trial `trial` of the cell (length, depth). Returns 0, or -1 with the reason in
   why [200]. */
static int needle_example(const needle_opts *o, size_t length, double depth, size_t trial, longctx_example *ex,
                          char *why) {
  longctx_options opt = {o->needles, o->word_set, o->source != NULL && o->kind != LONGCTX_PROSE, o->numbers,
                         o->decoys, o->alike_words, o->alike_numbers};
  return longctx_example_init(ex, o->kind, length, depth, longctx_eval_seed(o->seed, length, depth, trial),
                                   o->source, o->source_len, &opt, why);
}

/* The tokens every trial of the cell (length, depth) reads alike before its needle: the passkey's and
   copy's filler is a fixed text, so they are read once per cell, and each trial continues from a copy of
   that session (the same result as reading every trial from its first token: a session's state depends
   on its tokens, not on how they were split among calls). Prose reads its filler from a random place per
   trial: 0. Returns SIZE_MAX with the reason in why [200] when an example cannot be set up. */
static size_t needle_shared_prefix(const needle_opts *o, size_t length, double depth, char *why) {
  size_t shared = o->source ? 0 : length;
  longctx_example ex;
  for (size_t trial = 0; trial < o->trials; trial++) {
    if (needle_example(o, length, depth, trial, &ex, why) != 0) return SIZE_MAX;
    if (ex.needle_at < shared) shared = ex.needle_at;
  }
  return shared;
}

/* What the trials of one cell (model, length, depth) scored: the right symbols and exact matches, and
   (--answers) each trial's answer. */
typedef struct needle_tally {
  size_t digits, exact;
  char (*answers)[24]; /* [trials] each trial's answer, NUL-ended; NULL: not kept */
} needle_tally;

/* The trials of one cell (model, length, depth), adding to *tally; the shared prefix
   (needle_shared_prefix) is read once. Returns 0, or -1 with the reason in err. */
static int needle_cell(const needle_opts *o, const titans_model *model, const char *model_path, size_t length,
                       double depth, needle_tally *tally, long long *done, progress *prog, job_error *err) {
  size_t answer_len = longctx_answer_len(o->kind);
  longctx_example ex;
  char why[200];
  titans_session prefix, sess;
  size_t shared = needle_shared_prefix(o, length, depth, why);
  if (shared == SIZE_MAX || needle_example(o, length, depth, 0, &ex, why) != 0) {
    job_error_set(err, "example", why);
    return -1;
  }
  if (titans_session_init(&prefix, model) != TITANS_OK) {
    job_error_set(err, model_path, prefix.error);
    return -1;
  }
  if (titans_session_init(&sess, model) != TITANS_OK) {
    job_error_set(err, model_path, sess.error);
    titans_session_free(&prefix);
    return -1;
  }
  int rc = needle_feed(&prefix, &ex, 0, shared, NULL, done, prog); /* every trial's tokens alike up to shared */
  const char *failed = prefix.error;
  for (size_t trial = 0; trial < o->trials && rc == TITANS_OK; trial++) {
    size_t correct = 0;
    needle_example(o, length, depth, trial, &ex, why); /* succeeded in needle_shared_prefix */
    rc = titans_session_copy(&sess, &prefix);
    char *answer = tally->answers ? tally->answers[trial] : NULL;
    if (rc == TITANS_OK) rc = needle_trial(&sess, &ex, shared, &correct, answer, done, prog);
    failed = sess.error;
    tally->digits += correct;
    tally->exact += correct == answer_len;
  }
  if (rc != TITANS_OK) job_error_set(err, model_path, failed);
  titans_session_free(&sess);
  titans_session_free(&prefix);
  return rc == TITANS_OK ? 0 : -1;
}

/* Per model: a table of lengths x depths, each cell "exact % (exact/trials) per-digit accuracy". */
static void needle_print(const needle_opts *o, const size_t *exact, const size_t *digits, size_t answer_len) {
  const model_set *ms = &o->models;
  for (size_t m = 0; m < ms->n; m++) {
    printf("\n%s, model %s: exact match %% (exact/trials) and per-digit accuracy, %zu trials per cell\n",
           longctx_kind_name(o->kind), ms->label[m], o->trials);
    printf("%-8s", "length");
    for (size_t c = 0; c < o->n_depths; c++) {
      char h[32];
      snprintf(h, sizeof h, "depth %zu%%", o->depth_pct[c]);
      printf(c + 1 < o->n_depths ? "  %-18s" : "  %s", h);
    }
    printf("\n");
    for (size_t r = 0; r < o->n_lens; r++) {
      char label[32];
      fmt_size(label, sizeof label, o->lens[r]);
      printf("%-8s", label);
      for (size_t c = 0; c < o->n_depths; c++) {
        size_t cell = (m * o->n_lens + r) * o->n_depths + c;
        char text[64];
        snprintf(text, sizeof text, "%3.0f%% (%zu/%zu) %.2f", 100.0 * (double)exact[cell] / (double)o->trials,
                 exact[cell], o->trials, (double)digits[cell] / (double)(o->trials * answer_len));
        printf(c + 1 < o->n_depths ? "  %-18s" : "  %s", text);
      }
      printf("\n");
    }
  }
  int alphabet = longctx_alphabet(o->kind);
  printf("\nchance: exact match %g (%d^-%zu), per %s %.3f\n", pow((double)alphabet, -(double)answer_len), alphabet,
         answer_len, o->kind == LONGCTX_COPY ? "letter" : "digit", 1.0 / alphabet);
}

/* The floats of one conv tail ([K_c - 1, d_m]) of a "mem.state" tensor of a one-row session of c. */
static size_t mem_state_tail_floats(const titans_config *c) {
  return (c->mem.conv_width > 0 ? (size_t)(c->mem.conv_width - 1) : 0) * (size_t)c->mem.heads * (size_t)c->mem.head_dim;
}

/* The running memory weights W_t of each memory layer of a one-row session, one layer after the other,
   into keep [total floats] (may be NULL); returns total. A layer's "mem.state" tensor (titans_session_state)
   is the layout of titans_mem_state_save without its 3 position floats: W at the chunk's start, W_t, S at
   the chunk's start and S_t (each [H, head_size]), then the four conv tails ([K_c - 1, d_m] each: q, k, v
   and MAC's retrieval queries). The trace measures W_t alone: the tails change with every token read,
   whether the memory writes or not. */
static size_t trace_weights(titans_session *s, const titans_config *c, float *keep, size_t cap) {
  titans_tensor_ref refs[256];
  size_t n = titans_session_state(s, refs, 256), at = 0, tails = 4 * mem_state_tail_floats(c);
  for (size_t i = 0; i < n && i < 256; i++) {
    if (!strstr(refs[i].name, "mem.state") || refs[i].count < tails) continue;
    size_t w_floats = (refs[i].count - tails) / 4; /* H x head_size */
    if (at + w_floats > cap) break;
    if (keep) memcpy(keep + at, refs[i].data + w_floats, w_floats * sizeof(float));
    at += w_floats;
  }
  return at;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of the log10 changes y [n_chunks] of the chunks without a needle whose digit count is in
   [lo, hi], into *median (log10); returns how many there were. */
static size_t trace_median(const double *y, const char *has_needle, const unsigned *digits, size_t n_chunks,
                           unsigned lo, unsigned hi, double *median) {
  double *pick = (double *)xmalloc((n_chunks ? n_chunks : 1) * sizeof(double)); /* [n_chunks] */
  size_t n = 0;
  for (size_t ch = 0; ch < n_chunks; ch++)
    if (!has_needle[ch] && digits[ch] >= lo && digits[ch] <= hi) pick[n++] = y[ch];
  qsort(pick, n, sizeof(double), compare_doubles);
  *median = n ? (n % 2 ? pick[n / 2] : 0.5 * (pick[n / 2 - 1] + pick[n / 2])) : 0.0;
  free(pick);
  return n;
}

/* Per memory layer, from log10 changes y [layers, n_chunks]: the largest write of a chunk that holds a
   needle token, how many chunks without one wrote at least a tenth of it (writes that share the
   memory with the needles'), and the median write of the others against it, apart for chunks without
   a digit and chunks of 4 digits or more (digits [n_chunks]): how selective the write gate is amid the
   haystack's text and amid its numbers. */
static void trace_summary(const double *y, const char *has_needle, const unsigned *digits, size_t layers,
                          size_t n_chunks) {
  for (size_t l = 0; l < layers; l++) {
    const double *yl = y + l * n_chunks;
    double needle_max = -1e300, text, numbers;
    size_t others = 0, strong = 0;
    for (size_t ch = 0; ch < n_chunks; ch++)
      if (has_needle[ch] && yl[ch] > needle_max) needle_max = yl[ch];
    for (size_t ch = 0; ch < n_chunks; ch++)
      if (!has_needle[ch]) others++, strong += yl[ch] >= needle_max - 1.0;
    printf("layer %zu: the needles' chunks moved the memory's weights by up to %.3g; %zu of the %zu other chunks "
           "moved them by a tenth of that or more\n", l, pow(10.0, needle_max), strong, others);
    size_t n_text = trace_median(yl, has_needle, digits, n_chunks, 0, 0, &text);
    size_t n_numbers = trace_median(yl, has_needle, digits, n_chunks, 4, UINT_MAX, &numbers);
    printf("layer %zu: median write over the needles' largest: %.3g in the %zu chunks without a digit, %.3g in the %zu "
           "with 4 or more\n", l, n_text ? pow(10.0, text - needle_max) : 0.0, n_text,
           n_numbers ? pow(10.0, numbers - needle_max) : 0.0, n_numbers);
  }
}

/* --trace: the example of the first trial of the first (length, depth) cell, read by a fresh session of
   the first model one token at a time. Per memory chunk (mem.chunk tokens) and layer: the L2 norm of the
   change of the layer's memory weights W_t over the chunk, their norm, and how many needle tokens the
   chunk holds; a TSV to path and a plot (log scale of the change against the position) to path.svg. */
static void needle_trace(const needle_opts *o, const titans_model *model) {
  longctx_example ex;
  char why[200];
  double depth = (double)o->depth_pct[0] / 100.0;
  if (needle_example(o, o->lens[0], depth, 0, &ex, why) != 0) fail("needle --trace: %s", why);
  titans_session s;
  if (titans_session_init(&s, model) != TITANS_OK) fail("%s", s.error);
  const titans_config *c = &model->cfg;
  size_t L = (size_t)c->n_layers, chunk = (size_t)c->mem.chunk, total = trace_weights(&s, c, NULL, SIZE_MAX);
  if (total == 0) fail("needle --trace: %s has no memory to trace", o->models.path[0]);
  size_t per_layer = total / L; /* every memory layer holds weights of the same shape */
  float *before = (float *)xmalloc(total * sizeof(float)), *now = (float *)xmalloc(total * sizeof(float));
  size_t n_chunks = (ex.length + chunk - 1) / chunk;
  double *x = (double *)xmalloc(n_chunks * sizeof(double));     /* [n_chunks] the chunk's last position + 1 */
  double *y = (double *)xmalloc(L * n_chunks * sizeof(double)); /* [L, n_chunks] log10 of the change */
  char *has_needle = (char *)xmalloc(n_chunks);                  /* [n_chunks] 1: a needle token in the chunk */
  unsigned *digits = (unsigned *)xmalloc(n_chunks * sizeof(unsigned)); /* [n_chunks] the chunk's digit tokens */
  FILE *f = fopen(o->trace, "w");
  if (!f) fail("cannot write %s: %s", o->trace, strerror(errno));
  fprintf(f, "# %s, %s example, length %zu, depth %.0f%%, %zu needle(s); per chunk of %zu tokens\n", o->models.path[0],
          longctx_kind_name(o->kind), ex.length, 100 * depth, ex.n_needles, chunk);
  fprintf(f, "chunk_end\tlayer\tweight_change\tweight_norm\tneedle_tokens\ttext\n");
  trace_weights(&s, c, before, total);
  size_t mem_layers = 0;
  for (size_t ch = 0; ch < n_chunks; ch++) {
    size_t from = ch * chunk, to = from + chunk < ex.length ? from + chunk : ex.length, needle_tokens = 0;
    char text[64] = "";
    digits[ch] = 0;
    for (size_t i = from; i < to; i++) {
      int tok = longctx_token(&ex, i);
      if (titans_session_feed(&s, &tok, 1, NULL) != TITANS_OK) fail("%s", s.error);
      digits[ch] += tok >= '0' && tok <= '9';
      if (i - from < sizeof text - 1) /* a chunk of more than 63 tokens shows its first 63 */
        text[i - from] = tok >= 32 && tok < 127 && tok != '\t' ? (char)tok : ' ';
      for (size_t k = 0, shift = 0; k < ex.n_needles; shift += ex.others_len[k], k++) {
        size_t at = ex.insert_at[k] + shift;
        needle_tokens += i >= at && i < at + ex.others_len[k];
      }
    }
    text[to - from < sizeof text - 1 ? to - from : sizeof text - 1] = 0;
    trace_weights(&s, c, now, total);
    x[ch] = (double)to;
    has_needle[ch] = needle_tokens > 0;
    mem_layers = 0;
    for (size_t l = 0; l * per_layer < total; l++, mem_layers++) {
      double change = 0, norm = 0;
      for (size_t i = l * per_layer; i < (l + 1) * per_layer; i++) {
        double dv = (double)now[i] - before[i];
        change += dv * dv, norm += (double)now[i] * now[i];
      }
      y[l * n_chunks + ch] = log10(sqrt(change) + 1e-12);
      fprintf(f, "%zu\t%zu\t%.6g\t%.6g\t%zu\t%s\n", to, l, sqrt(change), sqrt(norm), needle_tokens, text);
    }
    memcpy(before, now, total * sizeof(float));
  }
  if (fclose(f) != 0) fail("cannot write %s: %s", o->trace, strerror(errno));
  char svg[4096], title[256], names[8][32];
  const char *name_ptr[8];
  for (size_t l = 0; l < mem_layers && l < 8; l++)
    snprintf(names[l], sizeof names[l], "layer %zu", l), name_ptr[l] = names[l];
  snprintf(svg, sizeof svg, "%s.svg", o->trace);
  snprintf(title, sizeof title, "memory writes: %s, needle at %zu", longctx_kind_name(o->kind), ex.needle_at);
  if (write_curves_svg(svg, title, "tokens read", "log10 |weight change| per chunk", mem_layers < 8 ? mem_layers : 8,
                       name_ptr, n_chunks, x, y) != 0)
    fail("cannot write %s: %s", svg, strerror(errno));
  printf("wrote %s and %s (the asked needle at token %zu)\n", o->trace, svg, ex.needle_at);
  trace_summary(y, has_needle, digits, mem_layers, n_chunks);
  free(before), free(now), free(x), free(y), free(has_needle), free(digits);
  titans_session_free(&s);
}

/* The probes of one (model, trial) of --curve: feeds the example's context one piece at a time and,
   every `every` tokens after the asked needle, asks a copy of the session the question. The answer is
   read teacher-forced: each symbol scored by the model's top choice, then the right one fed, so "all
   right" is the greedy answer's exact match. right [n_probes] gets each probe's right symbols,
   since_digits [n_probes] the digits read between the needle's end and the probe (may be NULL). */
static int curve_trial(titans_session *s, titans_session *ask, const longctx_example *ex, size_t every,
                       size_t n_probes, size_t *right, size_t *since_digits, long long *done, progress *prog) {
  size_t V = (size_t)s->model->cfg.vocab, from = ex->needle_at + ex->needle_len, digits = 0;
  float *logits = (float *)xmalloc(V * sizeof(float)); /* [V] */
  int question[sizeof ex->question];                   /* [question_len] */
  longctx_tokens(ex, ex->context_len, question, ex->question_len);
  int rc = needle_feed(s, ex, 0, from, NULL, done, prog);
  for (size_t p = 0; p < n_probes && rc == TITANS_OK; p++) {
    size_t to = from + (p + 1) * every, at = to - every;
    for (size_t i = at; i < to; i++) digits += (unsigned)(longctx_token(ex, i) - '0') < 10;
    rc = needle_feed(s, ex, at, to, NULL, done, prog);
    if (rc == TITANS_OK) rc = titans_session_copy(ask, s);
    if (rc == TITANS_OK) rc = titans_session_feed(ask, question, ex->question_len, logits);
    right[p] = 0;
    for (size_t i = 0; i < ex->answer_len && rc == TITANS_OK; i++) {
      int truth = (unsigned char)ex->answer[i];
      right[p] += argmax(logits, V) == truth;
      if (i + 1 < ex->answer_len) rc = titans_session_feed(ask, &truth, 1, logits);
    }
    if (since_digits) since_digits[p] = digits;
  }
  free(logits);
  if (rc != TITANS_OK && !s->error[0]) memcpy(s->error, ask->error, sizeof s->error); /* the copy failed */
  return rc;
}

/* --curve's results: right [n_models, trials, n_probes] (each probe's right symbols) and digits [trials,
   n_probes] (digits read since the needle), probes `every` tokens apart. Writes o->curve (TSV, one line a
   probe), o->curve.svg (the fraction of trials exact against the tokens read since the needle, a curve a
   model) and prints a short table. */
static void curve_write(const needle_opts *o, const size_t *right, const size_t *digits, size_t n_probes,
                        size_t every) {
  size_t length = o->lens[0], n_models = o->models.n, trials = o->trials;
  size_t answer_len = longctx_answer_len(o->kind);
  FILE *f = fopen(o->curve, "w");
  if (!f) fail("cannot write %s: %s", o->curve, strerror(errno));
  fprintf(f, "# %s, length %zu, depth %zu%%, %zu trial(s), a probe every %zu tokens after the needle\n",
          longctx_kind_name(o->kind), length, o->depth_pct[0], trials, every);
  fprintf(f, "model\ttrial\ttokens_since_needle\tdigits_since_needle\tright\tof\texact\n");
  double *x = (double *)xmalloc(n_probes * sizeof(double));            /* [n_probes] tokens since the needle */
  double *y = (double *)xmalloc(n_models * n_probes * sizeof(double)); /* [n_models, n_probes] exact fraction */
  for (size_t p = 0; p < n_probes; p++) x[p] = (double)((p + 1) * every);
  for (size_t m = 0; m < n_models; m++)
    for (size_t p = 0; p < n_probes; p++) {
      size_t exact = 0;
      for (size_t t = 0; t < trials; t++) {
        size_t r = right[(m * trials + t) * n_probes + p];
        exact += r == answer_len;
        fprintf(f, "%s\t%zu\t%zu\t%zu\t%zu\t%zu\t%d\n", o->models.label[m], t, (p + 1) * every,
                digits[t * n_probes + p], r, answer_len, r == answer_len);
      }
      y[m * n_probes + p] = (double)exact / (double)trials;
    }
  if (fclose(f) != 0) fail("cannot write %s: %s", o->curve, strerror(errno));
  printf("\nexact match of %zu trials against tokens read since the needle (mean digits read since it):\n", trials);
  printf("%12s %10s", "tokens", "digits");
  for (size_t m = 0; m < n_models; m++) printf("  %10.10s", o->models.label[m]);
  printf("\n");
  for (size_t p = 0; p < n_probes; p += n_probes > 16 ? n_probes / 16 : 1) {
    double mean_digits = 0;
    for (size_t t = 0; t < trials; t++) mean_digits += (double)digits[t * n_probes + p] / (double)trials;
    printf("%12zu %10.0f", (p + 1) * every, mean_digits);
    for (size_t m = 0; m < n_models; m++) printf("  %9.0f%%", 100 * y[m * n_probes + p]);
    printf("\n");
  }
  char svg[4096], title[256];
  const char *names[MAX_MODELS];
  for (size_t m = 0; m < n_models; m++) names[m] = o->models.label[m];
  snprintf(svg, sizeof svg, "%s.svg", o->curve);
  snprintf(title, sizeof title, "%s: exact match of %zu trials, needle at depth %zu%% of %zu", longctx_kind_name(o->kind),
           trials, o->depth_pct[0], length);
  if (write_curves_svg(svg, title, "tokens read since the needle", "fraction of trials exact", n_models, names,
                       n_probes, x, y) != 0)
    fail("cannot write %s: %s", svg, strerror(errno));
  printf("wrote %s and %s\n", o->curve, svg);
  free(x), free(y);
}

/* The key each memory layer of a one-row session writes the next token with, into keys [max_layers, d_m]
   (one head after another, each L2-normalised); returns the number of memory layers (at most max_layers).
   Only for memories with key_ngram >= 1: their key at t reads the tokens before t alone, all of them in the
   session's key conv tail ([K_c - 1, d_m], the second of the four tails that end a "mem.state" tensor:
   trace_weights), so it is known before t is fed. */
static size_t session_next_keys(titans_session *s, const titans_model *model, float *keys, size_t max_layers) {
  const titans_config *c = &model->cfg;
  size_t K = (size_t)c->mem.conv_width, H = (size_t)c->mem.heads, dh = (size_t)c->mem.head_dim, dm = H * dh;
  size_t tail = mem_state_tail_floats(c), n_mem = 0;
  titans_tensor_ref refs[256];
  size_t n = titans_session_state(s, refs, 256);
  for (size_t i = 0; i < n && i < 256; i++) {
    int layer;
    if (!strstr(refs[i].name, "mem.state") || sscanf(refs[i].name, "layers.%d.", &layer) != 1) continue;
    if (n_mem == max_layers) break;
    size_t w_floats = (refs[i].count - 4 * tail) / 4; /* each of W at the chunk's start, W_t, S, S_t */
    const float *tail_k = refs[i].data + 4 * w_floats + tail;     /* [K_c - 1, d_m] */
    const float *conv_k = model->w.layers[layer].mem.conv_k;      /* [d_m, K_c]; tap K_c - 1 (token t) is 0 */
    float *k = keys + n_mem * dm;
    for (size_t ch = 0; ch < dm; ch++) {
      float z = 0;
      for (size_t j = 0; j + 1 < K; j++) z += conv_k[ch * K + j] * tail_k[j * dm + ch];
      k[ch] = c->mem.qk_linear ? z : z / (1.0f + expf(-z)); /* docs/model.md 1.3 */
    }
    for (size_t h = 0; h < H; h++) {
      float *kh = k + h * dh, ss = 0;
      for (size_t j = 0; j < dh; j++) ss += kh[j] * kh[j];
      for (size_t j = 0; j < dh; j++) kh[j] /= sqrtf(ss + 1e-6f);
    }
    n_mem++;
  }
  return n_mem;
}

/* |(W1 - W0) k|, W0 and W1 [H, d_h, d_h] two states of a matrix memory, k [H * d_h]: how far the value read
   at key k moved between them (over all heads). */
static double matrix_read_change(const float *w0, const float *w1, const float *k, size_t H, size_t dh) {
  double sum = 0;
  for (size_t h = 0; h < H; h++)
    for (size_t i = 0; i < dh; i++) {
      double r = 0;
      for (size_t j = 0; j < dh; j++) r += ((double)w1[(h * dh + i) * dh + j] - w0[(h * dh + i) * dh + j]) * k[h * dh + j];
      sum += r * r;
    }
  return sqrt(sum);
}

/* The cosine of two keys [H * dh] of unit heads, averaged over the heads. */
static double key_cosine(const float *a, const float *b, size_t H, size_t dh) {
  double sum = 0;
  for (size_t i = 0; i < H * dh; i++) sum += (double)a[i] * b[i];
  return sum / (double)H;
}

/* --key-cosines: a write of key k moves the value read at key k' by its error times k . k', so keys that
   overlap disturb each other's facts. Each model reads --trials examples of the first length at every
   depth through a fresh session; per memory layer it prints the mean cosine between the needles' keys at
   the same place of their numbers (where one needle's write lands on another's), between two places of
   one number, and between text positions (every 97th token outside the needles, up to 32 an example).
   For a matrix memory (depth 1, read W k) also the drift: |(W_question - W_after) k| over
   |(W_after - W_before) k|, summed over the places of a needle's number (W_before, W_after: the weights
   before its first digit and after its last), averaged by how many needles come after it. */
enum { KEYS_MAX_TEXT = 32, KEYS_MAX_MEM = 16, KEYS_MAX_PLACES = 24 }; /* answer_len <= 24 (longctx_example) */

/* What one example gives --key-cosines: the keys each memory layer wrote with, and for a matrix memory its
   weights around each needle's number and at the question (trace_weights' layout, w_total floats). */
typedef struct key_sample {
  float *digit_keys;           /* [needles, answer_len, KEYS_MAX_MEM, d_m] the keys at the needles' digits */
  float *text_keys;            /* [KEYS_MAX_TEXT, KEYS_MAX_MEM, d_m] the keys at text positions */
  size_t n_text, n_mem;        /* text positions read; memory layers */
  float *w_before, *w_after;   /* [needles, w_total] before each number's first digit, after its last (or NULL) */
  float *w_end;                /* [w_total] at the question (or NULL) */
  unsigned char *in_needle;    /* [length] 1: a needle's token */
} key_sample;

/* The sums --key-cosines prints the means of, per memory layer. */
typedef struct key_stats {
  double across[KEYS_MAX_MEM][KEYS_MAX_PLACES]; /* cosines of two needles' keys at one place, summed */
  double within[KEYS_MAX_MEM], text[KEYS_MAX_MEM]; /* of two places of one number; of two text positions */
  size_t n_across[KEYS_MAX_PLACES], n_within, n_text;
  double drift[KEYS_MAX_MEM][LONGCTX_MAX_NEEDLES]; /* drift ratios summed by the needles after */
  double own_write[KEYS_MAX_MEM], w_norm[KEYS_MAX_MEM]; /* summed |own write|; summed |W| at the question */
  size_t n_drift[LONGCTX_MAX_NEEDLES], n_examples;
} key_stats;

/* Feeds example ex through the session s (reset first), keeping in ks the keys of every needle digit and
   of some text positions, and for a matrix memory (ks->w_before not NULL) the weight snapshots. */
static void key_sample_read(titans_session *s, const titans_model *model, const longctx_example *ex, size_t length,
                            size_t answer_len, key_sample *ks) {
  const titans_config *c = &model->cfg;
  size_t per_key = KEYS_MAX_MEM * (size_t)c->mem.heads * (size_t)c->mem.head_dim;
  size_t w_total = ks->w_end ? trace_weights(s, c, NULL, SIZE_MAX) : 0;
  size_t number_at[LONGCTX_MAX_NEEDLES], shift = 0; /* each needle's first digit */
  if (titans_session_reset(s) != TITANS_OK) fail("%s", s->error);
  longctx_mark_needles(ex, ks->in_needle, length);
  for (size_t k = 0; k < ex->n_needles; shift += ex->others_len[k], k++)
    number_at[k] = ex->insert_at[k] + shift + (size_t)(strstr(ex->others[k], " is ") - ex->others[k]) + 4;
  ks->n_text = 0;
  for (size_t t = 0; t < ex->context_len; t++) {
    float *into = NULL;
    for (size_t k = 0; k < ex->n_needles; k++) {
      if (t >= number_at[k] && t < number_at[k] + answer_len)
        into = ks->digit_keys + (k * answer_len + (t - number_at[k])) * per_key;
      if (ks->w_end && t == number_at[k]) trace_weights(s, c, ks->w_before + k * w_total, w_total);
      if (ks->w_end && t == number_at[k] + answer_len) trace_weights(s, c, ks->w_after + k * w_total, w_total);
    }
    if (!into && t % 97 == 96 && ks->n_text < KEYS_MAX_TEXT && !ks->in_needle[t])
      into = ks->text_keys + ks->n_text++ * per_key;
    if (into) ks->n_mem = session_next_keys(s, model, into, KEYS_MAX_MEM);
    int tok = longctx_token(ex, t);
    if (titans_session_feed(s, &tok, 1, NULL) != TITANS_OK) fail("%s", s->error);
  }
  if (ks->w_end) trace_weights(s, c, ks->w_end, w_total);
}

/* Adds the cosines of one example's keys (n_needles needles) into st. */
static void key_stats_add_cosines(key_stats *st, const key_sample *ks, size_t n_needles, size_t answer_len, size_t H,
                                  size_t dh) {
  size_t dm = H * dh, per_key = KEYS_MAX_MEM * dm;
  const float *dk = ks->digit_keys;
  for (size_t l = 0; l < ks->n_mem; l++) {
    for (size_t p = 0; p < answer_len; p++)
      for (size_t a = 0; a < n_needles; a++)
        for (size_t b = a + 1; b < n_needles; b++)
          st->across[l][p] += key_cosine(dk + (a * answer_len + p) * per_key + l * dm,
                                         dk + (b * answer_len + p) * per_key + l * dm, H, dh);
    for (size_t k = 0; k < n_needles; k++)
      for (size_t p = 0; p < answer_len; p++)
        for (size_t q = p + 1; q < answer_len; q++)
          st->within[l] += key_cosine(dk + (k * answer_len + p) * per_key + l * dm,
                                      dk + (k * answer_len + q) * per_key + l * dm, H, dh);
    for (size_t a = 0; a < ks->n_text; a++)
      for (size_t b = a + 1; b < ks->n_text; b++)
        st->text[l] += key_cosine(ks->text_keys + a * per_key + l * dm, ks->text_keys + b * per_key + l * dm, H, dh);
  }
  for (size_t p = 0; p < answer_len; p++) st->n_across[p] += n_needles * (n_needles - 1) / 2;
  st->n_within += n_needles * answer_len * (answer_len - 1) / 2;
  st->n_text += ks->n_text * (ks->n_text - 1) / 2;
}

/* Adds the drift of one example's needles (a matrix memory's snapshots, w_total floats each) into st. */
static void key_stats_add_drift(key_stats *st, const key_sample *ks, size_t n_needles, size_t answer_len, size_t H,
                                size_t dh, size_t w_total) {
  size_t dm = H * dh, per_key = KEYS_MAX_MEM * dm;
  for (size_t l = 0; l < ks->n_mem; l++) {
    size_t at = l * H * dh * dh; /* layer l's W in the snapshots */
    for (size_t k = 0; k < n_needles; k++) {
      const float *before = ks->w_before + k * w_total + at, *after = ks->w_after + k * w_total + at;
      double moved = 0, written = 0; /* summed over the places of the number */
      for (size_t p = 0; p < answer_len; p++) {
        const float *key = ks->digit_keys + (k * answer_len + p) * per_key + l * dm;
        moved += matrix_read_change(after, ks->w_end + at, key, H, dh);
        written += matrix_read_change(before, after, key, H, dh);
      }
      st->drift[l][n_needles - 1 - k] += written > 0 ? moved / written : 0.0;
      st->own_write[l] += written;
    }
    double sq = 0;
    for (size_t i = at; i < at + H * dh * dh; i++) sq += (double)ks->w_end[i] * ks->w_end[i];
    st->w_norm[l] += sqrt(sq);
  }
  for (size_t k = 0; k < n_needles; k++) st->n_drift[n_needles - 1 - k]++;
}

/* Prints the means of st for n_mem memory layers (matrix: with the drift). */
static void key_stats_print(const key_stats *st, size_t n_mem, size_t answer_len, int matrix, int needles) {
  for (size_t l = 0; l < n_mem; l++) {
    printf("  memory layer %zu: two needles, the same place of their numbers (1..%zu):", l, answer_len);
    for (size_t p = 0; p < answer_len; p++)
      printf(" %.3f", st->n_across[p] ? st->across[l][p] / (double)st->n_across[p] : 0.0);
    printf("; two places of one number %.3f; two text positions %.3f\n",
           st->n_within ? st->within[l] / (double)st->n_within : 0.0, st->n_text ? st->text[l] / (double)st->n_text : 0.0);
    if (!matrix) continue;
    size_t n_needles_read = 0;
    for (int k = 0; k < needles; k++) n_needles_read += st->n_drift[k];
    if (st->own_write[l] / (double)n_needles_read < 1e-4 * st->w_norm[l] / (double)st->n_examples) { /* a shut gate */
      printf("  memory layer %zu: a needle's write moved the values read at its keys by under 1e-4 of the norm of "
             "the layer's weights: no drift to measure\n", l);
      continue;
    }
    printf("  memory layer %zu: how far the writes after a needle moved the values read at its number's keys, over "
           "how far its own write moved them, by the needles after it (0, 1, ...):", l);
    for (int k = 0; k < needles; k++) printf(" %.3f", st->n_drift[k] ? st->drift[l][k] / (double)st->n_drift[k] : 0.0);
    printf("\n");
  }
}

static void needle_key_cosines(const needle_opts *o) {
  size_t answer_len = longctx_answer_len(o->kind), length = o->lens[0];
  if (o->kind != LONGCTX_PROSE || o->needles < 2) fail("needle --key-cosines: wants --task prose --needles 2 or more");
  printf("\nkeys: mean cosine (over heads, pairs and examples) of the keys each memory layer writes with, %zu "
         "tokens, %zu examples a depth\n", length, o->trials);
  for (size_t mi = 0; mi < o->models.n; mi++) {
    const titans_model *model = &o->models.model[mi];
    const titans_config *c = &model->cfg;
    if (c->mem.key_ngram < 1 || !c->mem.conv_width || c->block == TITANS_BLOCK_LM2 || c->block == TITANS_BLOCK_ATTN ||
        c->block == TITANS_BLOCK_SWA)
      fail("needle --key-cosines: %s has no memory whose keys read only the tokens before (key_ngram)",
           o->models.path[mi]);
    size_t H = (size_t)c->mem.heads, dh = (size_t)c->mem.head_dim, per_key = KEYS_MAX_MEM * H * dh;
    titans_session s;
    if (titans_session_init(&s, model) != TITANS_OK) fail("%s", s.error);
    int matrix = c->mem.depth == 1; /* W_t snapshots for the drift: [n_mem, H, d_h, d_h] each */
    size_t w_total = trace_weights(&s, c, NULL, SIZE_MAX);
    key_sample ks = {0};
    ks.digit_keys = (float *)xmalloc((size_t)LONGCTX_MAX_NEEDLES * answer_len * per_key * sizeof(float));
    ks.text_keys = (float *)xmalloc(KEYS_MAX_TEXT * per_key * sizeof(float));
    ks.in_needle = (unsigned char *)xmalloc(length);
    if (matrix) {
      ks.w_before = (float *)xmalloc((size_t)LONGCTX_MAX_NEEDLES * w_total * sizeof(float));
      ks.w_after = (float *)xmalloc((size_t)LONGCTX_MAX_NEEDLES * w_total * sizeof(float));
      ks.w_end = (float *)xmalloc(w_total * sizeof(float));
    }
    key_stats *st = (key_stats *)calloc(1, sizeof *st);
    if (!st) fail("out of memory");
    for (size_t di = 0; di < o->n_depths; di++)
      for (size_t trial = 0; trial < o->trials; trial++) {
        longctx_example ex;
        char why[200];
        if (needle_example(o, length, (double)o->depth_pct[di] / 100.0, trial, &ex, why) != 0) fail("%s", why);
        key_sample_read(&s, model, &ex, length, answer_len, &ks);
        key_stats_add_cosines(st, &ks, ex.n_needles, answer_len, H, dh);
        if (matrix) key_stats_add_drift(st, &ks, ex.n_needles, answer_len, H, dh, w_total);
        st->n_examples++;
      }
    printf("%s (%s%s):\n", o->models.path[mi], c->mem.qk_linear ? "q, k without SiLU" : "q, k after a SiLU",
           c->mem.least_squares ? "; a least-squares memory" : "");
    key_stats_print(st, ks.n_mem, answer_len, matrix, o->needles);
    titans_session_free(&s);
    free(st), free(ks.digit_keys), free(ks.text_keys), free(ks.in_needle), free(ks.w_before), free(ks.w_after),
        free(ks.w_end);
  }
}

/* --curve: how long each model holds the needle. Trials of the first (length, depth); a probe every
   o->curve_every tokens after the asked needle, as far as the question still fits in the length; the
   models and trials run in parallel, and curve_write writes what they answered. */
static void needle_curve(const needle_opts *o) {
  size_t length = o->lens[0], n_models = o->models.n, trials = o->trials;
  double depth = (double)o->depth_pct[0] / 100.0;
  size_t every = o->curve_every ? o->curve_every : length / 64 ? length / 64 : 1;
  longctx_example ex;
  char why[200];
  size_t n_probes = SIZE_MAX, needle_ends = 0; /* needle_ends: the trials' tokens up to their needles' ends */
  for (size_t t = 0; t < trials; t++) { /* as many probes as every trial has room for */
    if (needle_example(o, length, depth, t, &ex, why) != 0) fail("needle --curve: %s", why);
    size_t room = (ex.context_len - ex.needle_at - ex.needle_len) / every;
    if (room < n_probes) n_probes = room;
    needle_ends += ex.needle_at + ex.needle_len;
  }
  if (n_probes == 0) fail("needle --curve: no probe fits after the needle (--curve-every %zu)", every);
  size_t *right = (size_t *)calloc(n_models * trials * n_probes, sizeof(size_t)); /* [n_models, trials, n_probes] */
  size_t *digits = (size_t *)calloc(trials * n_probes, sizeof(size_t));           /* [trials, n_probes] */
  if (!right || !digits) fail("out of memory");
  progress prog = {"needle --curve", now_seconds(), now_seconds(),
                   (long long)(n_models * (needle_ends + trials * n_probes * every))};
  long long done = 0;
  job_error err = {0, ""};
  long jobs = (long)(n_models * trials);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
  for (long j = 0; j < jobs; j++) {
    size_t m = (size_t)j / trials, t = (size_t)j % trials;
    longctx_example e;
    char why_job[200];
    titans_session s, ask;
    if (err.set) continue;
    if (needle_example(o, length, depth, t, &e, why_job) != 0) {
      job_error_set(&err, "example", why_job);
      continue;
    }
    if (titans_session_init(&s, &o->models.model[m]) != TITANS_OK) {
      job_error_set(&err, o->models.path[m], s.error);
      continue;
    }
    if (titans_session_init(&ask, &o->models.model[m]) != TITANS_OK) {
      job_error_set(&err, o->models.path[m], ask.error);
      titans_session_free(&s);
      continue;
    }
    if (curve_trial(&s, &ask, &e, every, n_probes, right + (m * trials + t) * n_probes,
                    m == 0 ? digits + t * n_probes : NULL, &done, &prog) != TITANS_OK)
      job_error_set(&err, o->models.path[m], s.error);
    titans_session_free(&ask);
    titans_session_free(&s);
  }
  progress_report(&prog, done, 1);
  if (err.set) fail("needle --curve: %s", err.msg);
  curve_write(o, right, digits, n_probes, every);
  free(right), free(digits);
}

/* Several needles: for each model and length, the exact answers over every depth and trial and the misses
   split as longctx_answer_kind splits them (bindings to another needle's number, or digits of the asked
   one's); then the same pooled over the models. answers [n_models, n_lens, n_depths, trials][24]. */
static void needle_print_bindings(const needle_opts *o, char (*answers)[24]) {
  size_t n_models = o->models.n, cells = o->n_lens * o->n_depths;
  size_t *count = (size_t *)calloc((n_models + 1) * (o->n_lens + 1) * 4, sizeof(size_t));
  size_t *after = (size_t *)calloc((n_models + 1) * LONGCTX_MAX_NEEDLES * 2, sizeof(size_t));
  if (!count || !after) fail("out of memory"); /* count [n_models + 1 (all), n_lens + 1 (all), 4: exact, trials,
                                                   bindings, whole]; after [n_models + 1, needles after the
                                                   asked one, 2: misses, trials] */
  for (size_t r = 0; r < o->n_lens; r++)
    for (size_t c = 0; c < o->n_depths; c++)
      for (size_t t = 0; t < o->trials; t++) {
        longctx_example ex;
        char why[200];
        if (needle_example(o, o->lens[r], (double)o->depth_pct[c] / 100.0, t, &ex, why) != 0) fail("needle: %s", why);
        for (size_t m = 0; m < n_models; m++) {
          const char *answer = answers[(m * cells + r * o->n_depths + c) * o->trials + t];
          int kind = longctx_answer_kind(&ex, answer);
          int right = kind == LONGCTX_ANSWER_RIGHT, binding = kind >= LONGCTX_ANSWER_BINDING;
          size_t rows[2] = {m, n_models}, cols[2] = {r, o->n_lens};
          for (int i = 0; i < 2; i++) {
            for (int j = 0; j < 2; j++) {
              size_t *q = count + (rows[i] * (o->n_lens + 1) + cols[j]) * 4;
              q[0] += (size_t)right, q[1]++, q[2] += (size_t)binding, q[3] += (size_t)(kind == LONGCTX_ANSWER_WHOLE);
            }
            size_t *q = after + (rows[i] * LONGCTX_MAX_NEEDLES + longctx_needles_after(&ex)) * 2;
            q[0] += (size_t)!right, q[1]++;
          }
        }
      }
  printf("\nkeyed recall, over the depths: exact/trials (%%); the misses closer, place by place, to another needle's "
         "number (bindings; whole: that number) or to the asked one's (digits)\n%-10s", "model");
  for (size_t r = 0; r < o->n_lens; r++) {
    char label[32];
    fmt_size(label, sizeof label, o->lens[r]);
    printf("  %-16s", label);
  }
  printf("  %-16s  misses: bindings (whole) / digits\n", "all");
  for (size_t m = 0; m < n_models + (n_models > 1); m++) {
    printf("%-10s", m < n_models ? o->models.label[m] : "all models");
    for (size_t r = 0; r <= o->n_lens; r++) {
      const size_t *q = count + (m * (o->n_lens + 1) + r) * 4;
      char text[48];
      snprintf(text, sizeof text, "%zu/%zu (%.1f%%)", q[0], q[1], 100.0 * (double)q[0] / (double)q[1]);
      printf("  %-16s", text);
    }
    const size_t *q = count + (m * (o->n_lens + 1) + o->n_lens) * 4;
    printf("  %zu (%zu) / %zu\n", q[2], q[3], q[1] - q[0] - q[2]);
  }
  /* a needle's value disturbed by the writes of the needles after it shows here (session 28) */
  printf("missed, by how many needles were written after the asked one (every length and depth)\n%-10s", "model");
  for (int k = 0; k < o->needles; k++) printf(k + 1 < o->needles ? "  %-16d" : "  %d", k);
  printf("\n");
  for (size_t m = 0; m < n_models + (n_models > 1); m++) {
    printf("%-10s", m < n_models ? o->models.label[m] : "all models");
    for (int k = 0; k < o->needles; k++) {
      const size_t *q = after + (m * LONGCTX_MAX_NEEDLES + (size_t)k) * 2;
      char text[48] = "-";
      if (q[1]) snprintf(text, sizeof text, "%zu/%zu (%.1f%%)", q[0], q[1], 100.0 * (double)q[0] / (double)q[1]);
      printf(k + 1 < o->needles ? "  %-16s" : "  %s", text);
    }
    printf("\n");
  }
  free(after);
  free(count);
}

/* --answers: one TSV line per trial of every cell, answers [n_models, n_lens, n_depths, trials][24]. For
   prose, "answer_is" says whose number the answer is: the asked needle's ("asked"), another needle's
   ("other:WORD", the binding error an associative memory must not make), or no needle's ("none"). */
static void needle_write_answers(const needle_opts *o, char (*answers)[24]) {
  FILE *f = fopen(o->answers, "w");
  if (!f) fail("cannot write %s: %s", o->answers, strerror(errno));
  fprintf(f, "model\tlength\tdepth\ttrial\tkey_word\tnumber\tanswer\tright_symbols\tanswer_is\tother_needles\n");
  for (size_t m = 0; m < o->models.n; m++)
    for (size_t r = 0; r < o->n_lens; r++)
      for (size_t c = 0; c < o->n_depths; c++)
        for (size_t t = 0; t < o->trials; t++) {
          longctx_example ex;
          char why[200], others[LONGCTX_MAX_NEEDLES * 40] = "", answer_is[40] = "none";
          double depth = (double)o->depth_pct[c] / 100.0;
          if (needle_example(o, o->lens[r], depth, t, &ex, why) != 0) fail("needle: %s", why);
          const char *answer = answers[((m * o->n_lens + r) * o->n_depths + c) * o->trials + t];
          size_t right = longctx_places_shared(answer, ex.answer, ex.answer_len), used = 0;
          if (!strcmp(answer, ex.answer)) snprintf(answer_is, sizeof answer_is, "asked");
          for (size_t k = 1; k < ex.n_needles && o->kind == LONGCTX_PROSE; k++) { /* 0: the asked needle */
            used += (size_t)snprintf(others + used, sizeof others - used, "%s%s=%s", used ? "," : "", ex.words[k],
                                     ex.numbers[k]);
            if (!strcmp(answer, ex.numbers[k])) snprintf(answer_is, sizeof answer_is, "other:%s", ex.words[k]);
          }
          fprintf(f, "%s\t%zu\t%zu\t%zu\t%s\t%s\t%s\t%zu\t%s\t%s\n", o->models.label[m], o->lens[r],
                  o->depth_pct[c], t, o->kind == LONGCTX_PROSE ? ex.words[0] : "-", ex.answer, answer, right,
                  answer_is, used ? others : "-");
        }
  if (fclose(f) != 0) fail("cannot write %s: %s", o->answers, strerror(errno));
  printf("wrote %s (one line per trial)\n", o->answers);
}

static int cmd_needle(int argc, char **argv) {
  needle_opts o;
  parse_needle(argc, argv, &o);
  set_threads(o.threads);
  titans_tokenizer tok;
  titans_tokenizer_init(&tok, TITANS_TOKENIZER_BYTE);
  dataset ds = {0, 0, 0, 0, 0};
  if (o.haystack) {
    haystack_load(&ds, &tok, o.haystack, o.lens, o.n_lens, NULL, 0, 0,
                  longctx_mix64(o.seed + LONGCTX_EVAL_SEED_OFFSET, 0x48415953ull));
    o.source = ds.ids, o.source_len = ds.n;
    printf("%s filler: %s (%zu tokens, read from a random place per trial)\n", longctx_kind_name(o.kind), ds.name,
           ds.n);
  } else if (o.kind == LONGCTX_PROSE) {
    dataset_load(&ds, &tok, o.data);
    if (ds.n == ds.n_train) fail("%s is too short to have a held-out part", ds.name);
    o.source = ds.ids + ds.n_train, o.source_len = ds.n - ds.n_train;
    printf("prose filler: the held-out last 10%% of %s (%zu tokens)\n", ds.name, ds.n - ds.n_train);
  } else if (o.data) usage_fail("needle", "--data is for --task prose (passkey's filler is fixed; see --haystack)");
  if (o.needles > 1 || o.word_set != LONGCTX_WORDS_TRAIN)
    printf("prose: %d needle%s of different key words, the key asked drawn from the %s words\n", o.needles,
           o.needles > 1 ? "s" : "", o.word_set == LONGCTX_WORDS_HELDOUT ? "held-out"
           : o.word_set == LONGCTX_WORDS_RANDOM                                       ? "random"
           : o.word_set == LONGCTX_WORDS_TEXT                                         ? "haystack's"
                                                                                      : "training");
  if (o.numbers > 0) printf("filler: %g of its words written as numbers\n", o.numbers);
  if (o.decoys > 0) printf("filler: %g of those numbers start with a needle's first digits\n", o.decoys);
  if (o.alike_words && o.needles > 1) printf("prose: the other needles' key words as long as the asked one's\n");
  if (o.alike_numbers > 0 && o.needles > 1)
    printf("prose: %g of the other needles' numbers start with the asked one's first digits\n", o.alike_numbers);
  models_load(&o.models);
  if (o.no_forget) { /* a session reads its model's cfg.mem at every step */
    for (size_t i = 0; i < o.models.n; i++) o.models.model[i].cfg.mem.no_forget = 1;
    printf("--no-forget: every memory's forgetting gate alpha_t held at 0 (a diagnostic)\n");
  }
  if (o.alpha > 0) { /* the bias alone: a gate that reads its token keeps its weights */
    if (o.no_forget) usage_fail("needle", "--alpha and --no-forget: give one");
    for (size_t i = 0; i < o.models.n; i++) {
      o.models.model[i].cfg.mem.no_forget = 0;
      titans_model_set_gates(&o.models.model[i], -1.0f, -1.0f, (float)o.alpha);
    }
    printf("--alpha %g: every memory's forgetting gate set to start at %g (a diagnostic)\n", o.alpha, o.alpha);
  }
  if (o.trace) needle_trace(&o, &o.models.model[0]);
  if (o.curve || o.key_cosines) {
    if (o.curve) needle_curve(&o);
    if (o.key_cosines) needle_key_cosines(&o);
    models_free(&o.models);
    free(ds.ids);
    free(ds.name);
    titans_tokenizer_free(&tok);
    return 0;
  }
  size_t n_models = o.models.n, cells = o.n_lens * o.n_depths, answer_len = longctx_answer_len(o.kind);

  size_t *exact = (size_t *)calloc(n_models * cells, sizeof(size_t));  /* [n_models, n_lens, n_depths] */
  size_t *digits = (size_t *)calloc(n_models * cells, sizeof(size_t)); /* [n_models, n_lens, n_depths] */
  if (!exact || !digits) fail("out of memory");
  int keyed = o.kind == LONGCTX_PROSE && o.needles > 1; /* the bindings table needs every answer */
  char(*answers)[24] = NULL; /* [n_models, n_lens, n_depths, trials] --answers, or keyed */
  if ((o.answers || keyed) && !(answers = (char(*)[24])calloc(n_models * cells * o.trials, 24))) fail("out of memory");
  long long total = 0, context_tokens = 0; /* tokens read (shared prefixes once); tokens of all the examples */
  for (size_t r = 0; r < o.n_lens; r++)
    for (size_t c = 0; c < o.n_depths; c++) {
      char why[200];
      size_t shared = needle_shared_prefix(&o, o.lens[r], (double)o.depth_pct[c] / 100.0, why);
      if (shared == SIZE_MAX) fail("needle: %s", why);
      total += (long long)((shared + o.trials * (o.lens[r] - shared)) * n_models);
      context_tokens += (long long)(o.lens[r] * o.trials * n_models);
    }
  progress prog = {"needle", now_seconds(), now_seconds(), total};
  long long done = 0;
  job_error err = {0, ""};
  long jobs = (long)(n_models * cells);
  fflush(stdout);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
  for (long j = 0; j < jobs; j++) {
    /* the longest lengths first, so no thread is left with a long cell at the end */
    size_t c = (size_t)j % o.n_depths, m = (size_t)j / o.n_depths % n_models;
    size_t r = o.n_lens - 1 - (size_t)j / (o.n_depths * n_models);
    size_t cell = (m * o.n_lens + r) * o.n_depths + c;
    needle_tally tally = {0, 0, answers ? answers + cell * o.trials : NULL};
    if (err.set) continue;
    needle_cell(&o, &o.models.model[m], o.models.path[m], o.lens[r], (double)o.depth_pct[c] / 100.0, &tally, &done,
                &prog, &err);
    digits[cell] = tally.digits; /* one job per cell: no other thread writes it */
    exact[cell] = tally.exact;
  }
  if (err.set) fail("needle: %s", err.msg);
  double took = now_seconds() - prog.t_start;

  needle_print(&o, exact, digits, answer_len);
  if (keyed) needle_print_bindings(&o, answers);
  printf("%lld context tokens, %lld read (a cell's trials read their common filler once) in %.1f s: %.0f tok/s read "
         "(%d thread%s); peak RSS %.1f MB\n", context_tokens, total, took, (double)total / took,
         titans_threads(), titans_threads() == 1 ? "" : "s", peak_rss_mb());

  double *frac = (double *)xmalloc(n_models * cells * sizeof(double)); /* [n_models, n_lens, n_depths] */
  double depths[MAX_CELLS];
  for (size_t i = 0; i < n_models * cells; i++) frac[i] = (double)exact[i] / (double)o.trials;
  for (size_t c = 0; c < o.n_depths; c++) depths[c] = (double)o.depth_pct[c] / 100.0;
  const char *names[MAX_MODELS];
  for (size_t m = 0; m < n_models; m++) names[m] = o.models.label[m];
  char title[256];
  snprintf(title, sizeof title, "%s retrieval: exact match over %zu trials (chance %g)", longctx_kind_name(o.kind),
           o.trials, pow((double)longctx_alphabet(o.kind), -(double)answer_len));
  if (write_heatmap_svg(o.svg, title, n_models, names, o.n_lens, o.lens, o.n_depths, depths, frac) != 0)
    fail("cannot write %s: %s", o.svg, strerror(errno));
  printf("wrote %s\n", o.svg);
  if (o.answers) needle_write_answers(&o, answers);
  free(answers);
  free(frac);
  free(exact);
  free(digits);
  models_free(&o.models);
  free(ds.ids);
  free(ds.name);
  titans_tokenizer_free(&tok);
  return 0;
}

/* ---- info --------------------------------------------------------------------------------------- */

static void help_info(void) {
  printf("usage: ./titans info --model FILE | --state FILE\n"
         "Describes a checkpoint: the configuration and the parameter count of every part (embedding, each\n"
         "layer's attention, persistent tokens, memory, FFN, norms and gates, head); for a memory state\n"
         "(generate --state) the tokens seen and the norm of each layer's memory weights and momentum.\n"
         "  --model FILE        model.safetensors or trainer.safetensors (both may be given)\n"
         "  --state FILE        a session's memory state\n");
}

/* 737496 -> "737,496" */
static void fmt_count(char *out, size_t size, size_t v) {
  char digits[32];
  int n = snprintf(digits, sizeof digits, "%zu", v), k = 0;
  for (int i = 0; i < n && (size_t)k + 2 < size; i++) {
    if (i > 0 && (n - i) % 3 == 0) out[k++] = ',';
    out[k++] = digits[i];
  }
  out[k] = 0;
}

/* The parts of a model a parameter may belong to, from its docs/model.md section 6 name. */
enum {
  PART_EMBEDDING,
  PART_ATTENTION,
  PART_PERSIST,
  PART_MEMORY,
  PART_FFN,
  PART_NORMS,
  PART_FINAL_NORM,
  PART_HEAD,
  PART_COUNT
};
static const char *const part_names[PART_COUNT] = {"embedding", "attention", "persistent tokens", "memory",
                                                   "FFN", "norms and gates", "final norm", "head"};

/* The part of parameter `name`; *layer is its layer, or -1 outside the layers. */
static int param_part(const char *name, int *layer) {
  *layer = -1;
  if (!strcmp(name, "tok_emb")) return PART_EMBEDDING;
  if (!strcmp(name, "norm_f")) return PART_FINAL_NORM;
  if (!strcmp(name, "lm_head")) return PART_HEAD;
  char *rest;
  *layer = (int)strtol(name + 7, &rest, 10); /* "layers.{i}.what" */
  rest++;
  if (!strncmp(rest, "attn.", 5)) return PART_ATTENTION;
  if (!strcmp(rest, "persist")) return PART_PERSIST;
  if (!strncmp(rest, "mem.", 4) || !strncmp(rest, "lm2.", 4)) return PART_MEMORY; /* LM2: its bank */
  if (!strncmp(rest, "ffn.", 4)) return PART_FFN;
  return PART_NORMS; /* norm1, norm2, gate.norm_y, gate.norm_m */
}

static double sigmoid_of(float x) { return 1.0 / (1.0 + exp(-(double)x)); }

/* Each memory layer's gates where the input leaves them (sigmoid of the bias, mean over heads): where
   training started them (--theta-init, --eta-init, --alpha-init) and where it moved them. theta is
   printed as a fraction of theta_max, as --theta-init takes it. */
static void print_gate_biases(const titans_model *m) {
  const titans_config *c = &m->cfg;
  for (int l = 0; l < c->n_layers; l++) {
    const titans_mem_weights *w = &m->w.layers[l].mem;
    if (!w->decay_b) continue; /* no memory in this kind */
    double g[3] = {0, 0, 0};
    const float *bias[3] = {w->lr_b, w->mom_b, w->decay_b}; /* [H] each */
    for (int k = 0; k < 3; k++) {
      for (int h = 0; h < c->mem.heads; h++) g[k] += sigmoid_of(bias[k][h]);
      g[k] /= c->mem.heads;
    }
    if (c->mem.no_momentum) g[1] = 0.0; /* the gates these flags turn off are 0, whatever their biases */
    if (c->mem.no_forget) g[2] = 0.0;
    printf("layer %d memory gates at zero input: theta %.3g theta_max, eta %.3g, alpha %.3g\n", l, g[0], g[1], g[2]);
  }
}

static void info_model(titans_st_reader *r, const char *path) {
  titans_model m;
  titans_tokenizer tok;
  if (titans_model_read(&m, &tok, r) != TITANS_OK) fail_file(path, m.error);
  const titans_config *c = &m.cfg;
  const char *kind = titans_st_meta(r, "kind"), *version = titans_st_meta(r, "version"),
             *step = titans_st_meta(r, "step");
  printf("%s: a %s checkpoint", path, kind ? kind : "model");
  if (version) printf(" of titans.h %s", version);
  if (step) printf(", at step %s", step);
  printf("\nmodel: %s, vocabulary %d (%s), d = %d, %d layers", titans_block_name(c->block), c->vocab,
         tok.kind == TITANS_TOKENIZER_BYTE ? "bytes" : "other tokens", c->d, c->n_layers);
  titans_block_info has = titans_block_describe(c->block);
  if (has.attention) printf(", %d attention heads, window %d", c->attn_heads, c->window);
  if (c->block == TITANS_BLOCK_MAC)
    printf(", segment %d%s", c->segment, c->mac_learns_from == TITANS_MAC_LEARNS_INPUT ? ", memory learns from X" : "");
  if (has.bank) printf(", a bank of %d slots written every %d tokens", c->lm2_slots, c->segment);
  printf(", %d persistent tokens, FFN %d, %s embedding\n", c->n_persist, c->ffn_hidden, c->tied ? "tied" : "untied");
  if (has.memory)
    printf("memory: %d heads of %d, depth %d%s, chunk %d, conv %d, theta_max %g, surprise bound %g%s\n", c->mem.heads,
           c->mem.head_dim, c->mem.depth, c->mem.depth == 1 ? " (a matrix memory)" : "", c->mem.chunk,
           c->mem.conv_width, (double)c->mem.theta_max, (double)c->mem.surprise_bound,
           c->mem.surprise_bound > 0 ? "" : " (off)");
  if (c->mem.key_ngram > 1)
    printf("memory keys: from the %d tokens before, one per group of channels (held by the trainer)\n",
           c->mem.key_ngram);
  else if (memory_keys_one_tap(&m))
    printf("memory keys: from the previous token alone (the key conv's other taps are 0)\n");
  if (c->mem.gate_key) printf("memory write gate: reads the key as well as the token\n");
  if (c->mem.qk_linear) printf("memory queries and keys: no SiLU (qk_linear)\n");
  if (c->mem.no_forget) printf("memory forgetting: none (alpha = 0)\n");
  if (c->mem.per_token_grad) printf("memory gradients: each token's at the weights before it (per_token_grad)\n");
  print_gate_biases(&m);
  printf("config: %s\n", titans_st_meta(r, "config"));
  if (titans_st_meta(r, "train_config")) printf("training: %s\n", titans_st_meta(r, "train_config"));

  size_t layers = (size_t)c->n_layers, *count = (size_t *)xmalloc((layers + 1) * PART_COUNT * sizeof(size_t));
  memset(count, 0, (layers + 1) * PART_COUNT * sizeof(size_t)); /* [layers + 1, PART_COUNT]: row `layers` = outside */
  for (size_t i = 0; i < m.n_params; i++) {
    int layer, part = param_part(m.plist[i].name, &layer);
    size_t row = layer >= 0 && (size_t)layer < layers ? (size_t)layer : layers;
    count[row * PART_COUNT + (size_t)part] += m.plist[i].size;
  }
  char num[32];
  fmt_count(num, sizeof num, m.n_floats);
  /* the hash a memory state records of the weights it ran on (info --state prints it too) */
  printf("parameters: %s (weights hash %016llx)\n", num, (unsigned long long)titans_model_hash(&m));
  fmt_count(num, sizeof num, count[layers * PART_COUNT + PART_EMBEDDING]);
  printf("  %-28s %12s\n", "embedding", num);
  for (size_t l = 0; l < layers; l++)
    for (int p = PART_ATTENTION; p <= PART_NORMS; p++) {
      char label[64];
      if (!count[l * PART_COUNT + (size_t)p]) continue;
      snprintf(label, sizeof label, "layer %zu %s", l, part_names[p]);
      fmt_count(num, sizeof num, count[l * PART_COUNT + (size_t)p]);
      printf("  %-28s %12s\n", label, num);
    }
  fmt_count(num, sizeof num, count[layers * PART_COUNT + PART_FINAL_NORM]);
  printf("  %-28s %12s\n", "final norm", num);
  fmt_count(num, sizeof num, count[layers * PART_COUNT + PART_HEAD]);
  printf("  %-28s %12s\n", "head", c->tied ? "(the embedding)" : num);
  free(count);
  titans_model_free(&m);
  titans_tokenizer_free(&tok);
}

static double norm2(const float *x, size_t n) {
  double sq = 0;
  for (size_t i = 0; i < n; i++) sq += (double)x[i] * x[i];
  return sqrt(sq);
}

static void info_state(titans_st_reader *r, const char *path) {
  const char *kind = titans_st_meta(r, "kind"), *json = titans_st_meta(r, "config"),
             *hash = titans_st_meta(r, "model_hash");
  if (!kind || strcmp(kind, "session") != 0)
    fail("%s is not a memory state (its kind is '%s', not 'session'); give models with --model", path,
         kind ? kind : "none");
  titans_config c;
  char err[TITANS_ERR_MSG_SIZE];
  if (!json || titans_config_from_json(&c, json, err) != TITANS_OK)
    fail("%s: %s", path, json ? err : "no configuration");
  float code[3];
  size_t three = 3;
  if (titans_st_read_f32(r, "position", code, 1, &three) != TITANS_OK) fail("%s: %s", path, r->error);
  uint64_t position = 0;
  for (int i = 0; i < 3; i++) position |= (uint64_t)code[i] << (21 * i);
  titans_block_info has = titans_block_describe(c.block); /* c passed titans_config_from_json's check */
  printf("%s: a memory state of a %s model (d = %d, %d layers; weights hash %s), %llu tokens seen\n", path,
         has.name ? has.name : "?", c.d, c.n_layers, hash ? hash : "missing", (unsigned long long)position);
  if (has.bank) { /* layers.{l}.lm2.state: the bank [N_s, d], then the write in progress (its size: the file's) */
    size_t bank = (size_t)c.lm2_slots * (size_t)c.d;
    printf("  %-8s %14s\n", "layer", "|bank|");
    for (int l = 0; l < c.n_layers; l++) {
      char name[64];
      snprintf(name, sizeof name, "layers.%d.lm2.state", l);
      const titans_st_tensor *t = titans_st_find(r, name);
      size_t count = t && t->ndim == 1 && t->shape[0] >= bank ? t->shape[0] : 0;
      if (!count) fail("%s: %s is missing or smaller than the bank [%zu]", path, name, bank);
      float *buf = (float *)xmalloc(count * sizeof(float));
      if (titans_st_read_f32(r, name, buf, 1, &count) != TITANS_OK) fail("%s: %s", path, r->error);
      printf("  %-8d %14.4f\n", l, norm2(buf, bank));
      free(buf);
    }
    return;
  }
  if (!has.memory) return; /* attention only: no memory */
  titans_mem_state st;
  if (titans_mem_state_init(&st, &c.mem, 1) != TITANS_OK) fail("%s: %s", path, st.error);
  size_t n = titans_mem_state_floats(&st), weights = (size_t)c.mem.heads * st.head_size;
  float *buf = (float *)xmalloc(n * sizeof(float)); /* [3 + slab]: position pieces (0 here), then the slab */
  printf("  %-8s %14s %14s\n", "layer", "|W| (weights)", "|S| (momentum)");
  for (int l = 0; l < c.n_layers; l++) {
    char name[64];
    snprintf(name, sizeof name, "layers.%d.mem.state", l);
    size_t slab = n - 3;
    memset(buf, 0, 3 * sizeof(float));
    if (titans_st_read_f32(r, name, buf + 3, 1, &slab) != TITANS_OK) fail("%s: %s", path, r->error);
    if (titans_mem_state_load(&st, buf, n) != TITANS_OK) fail("%s: %s: %s", path, name, st.error);
    printf("  %-8d %14.4f %14.4f\n", l, norm2(st.w, weights), norm2(st.s, weights));
  }
  free(buf);
  titans_mem_state_free(&st);
}

static int cmd_info(int argc, char **argv) {
  args a = {argc, 0, argv, "info"};
  const char *paths[2 * MAX_MODELS];
  int is_state[2 * MAX_MODELS], n = 0;
  for (a.i = 0; a.i < argc; a.i++) {
    const char *s = argv[a.i];
    if ((!strcmp(s, "--model") || !strcmp(s, "--state")) && n == 2 * MAX_MODELS) usage_fail("info", "too many files");
    if (!strcmp(s, "--model")) is_state[n] = 0, paths[n++] = arg_value(&a, s);
    else if (!strcmp(s, "--state")) is_state[n] = 1, paths[n++] = arg_value(&a, s);
    else if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      help_info();
      return 0;
    } else usage_fail("info", "unknown option '%s'", s);
  }
  if (n == 0) usage_fail("info", "give a checkpoint with --model FILE or a memory state with --state FILE");
  for (int i = 0; i < n; i++) {
    titans_st_reader r;
    check_safetensors_file(paths[i]);
    if (titans_st_reader_load(&r, paths[i]) != TITANS_OK) fail_file(paths[i], r.error);
    if (i) printf("\n");
    if (is_state[i]) info_state(&r, paths[i]);
    else info_model(&r, paths[i]);
    titans_st_reader_free(&r);
  }
  return 0;
}

/* ---- main --------------------------------------------------------------------------------------- */

static void help(void) {
  printf(
      "titans " TITANS_VERSION ": Titans language models (titans.h)\n"
      "  ./titans                     train a small model on the built-in text, then print a sample\n"
      "  ./titans train [options]     train on a text file (./titans help train)\n"
      "  ./titans generate [options]  generate from a checkpoint (./titans help generate)\n"
      "  ./titans eval [options]      loss by position over long streams (./titans help eval)\n"
      "  ./titans needle [options]    retrieval of a needle stated long ago (./titans help needle)\n"
      "  ./titans info --model FILE   what a checkpoint (or --state FILE, a memory state) holds (./titans help info)\n"
      "  ./titans --version           the version\n");
}

static int run_command(int argc, char **argv);

int main(int argc, char **argv) {
#ifdef SIGXFSZ
  /* past a file-size limit (ulimit -f) a write fails with EFBIG, which the saves report, instead of the
     signal's default of ending the program without a word and leaving the temporary file */
  signal(SIGXFSZ, SIG_IGN);
#endif
  dist_init(&argc, &argv); /* MPI (-DTITANS_MPI): every rank runs the command; train splits its batches */
  int rc = run_command(argc, argv);
  dist_finish();
  return rc;
}

static int run_command(int argc, char **argv) {
  if (argc > 0 && argv[0]) program_path = argv[0];
  if (argc < 2) return cmd_train(0, argv + 1);
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    printf("titans " TITANS_VERSION "\n");
    return 0;
  }
  /* ./titans [train options] is ./titans train [train options] */
  if (cmd[0] == '-' && strcmp(cmd, "--help") && strcmp(cmd, "-h")) return cmd_train(argc - 1, argv + 1);
  if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
  if (dist_size > 1) fail("only 'train' runs on several ranks (run '%s' as one process)", cmd);
  if (!strcmp(cmd, "generate")) return cmd_generate(argc - 2, argv + 2);
  if (!strcmp(cmd, "eval")) return cmd_eval(argc - 2, argv + 2);
  if (!strcmp(cmd, "needle")) return cmd_needle(argc - 2, argv + 2);
  if (!strcmp(cmd, "info")) return cmd_info(argc - 2, argv + 2);
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    if (argc > 2 && !strcmp(argv[2], "train")) help_train();
    else if (argc > 2 && !strcmp(argv[2], "generate")) help_generate();
    else if (argc > 2 && !strcmp(argv[2], "eval")) help_eval();
    else if (argc > 2 && !strcmp(argv[2], "needle")) help_needle();
    else if (argc > 2 && !strcmp(argv[2], "info")) help_info();
    else if (argc > 2) {
      fprintf(stderr, "titans: no help for '%s': not a command\n", argv[2]);
      help();
      return 2;
    } else help();
    return 0;
  }
  fprintf(stderr, "titans: unknown command '%s'\n", cmd);
  help();
  return 2;
}
