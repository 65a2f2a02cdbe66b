/* Reader of golden-value files (tests/ref/memory_golden.bin, written by tests/ref/memory_ref.py).
   Header-only, static functions, C11, independent of titans.h.

   Format (little-endian): the 8 bytes "TTNSGOLD", u32 record count, then per record: u32 name length,
   the name bytes (no NUL), u32 ndim, ndim x u32 dims, prod(dims) float32 values (row-major).

   Usage:
     golden_file g;
     if (golden_load(&g, "tests/ref/memory_golden.bin") != 0) { puts(g.err); ... }
     const golden_tensor *t = golden_find(&g, "case0.out");  // NULL when absent
     ... t->data[i], t->ndim, t->dims[k], t->count ...
     golden_free(&g);

   The loader validates every length against the bytes left, so a truncated or corrupt file gives an
   error (never a read past the end). Values are copied into an aligned float array (the records are
   not 4-byte aligned in the file) and decoded byte by byte, so the host's endianness does not matter. */
#ifndef TITANS_TEST_GOLDEN_H
#define TITANS_TEST_GOLDEN_H
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_MAX_DIMS 8

typedef struct golden_tensor {
  const char *name;               /* NUL-terminated copy of the record's name */
  int ndim;                       /* 0 .. GOLDEN_MAX_DIMS */
  size_t dims[GOLDEN_MAX_DIMS];   /* [ndim] */
  size_t count;                   /* prod(dims) (1 when ndim == 0) */
  const float *data;              /* [count], row-major */
} golden_tensor;

typedef struct golden_file {
  size_t n;                       /* number of records */
  golden_tensor *t;               /* [n] */
  char *names;                    /* all names, NUL-terminated, back to back */
  float *values;                  /* all values, back to back */
  char err[200];                  /* why golden_load / golden_parse failed */
} golden_file;

static inline uint32_t golden__u32(const unsigned char *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Reads a u32 at *pos if 4 bytes are left; advances *pos. */
static inline int golden__take_u32(const unsigned char *buf, size_t size, size_t *pos, uint32_t *out) {
  if (size - *pos < 4) return -1;
  *out = golden__u32(buf + *pos);
  *pos += 4;
  return 0;
}

static inline void golden_free(golden_file *g) {
  free(g->t);
  free(g->names);
  free(g->values);
  g->t = NULL;
  g->names = NULL;
  g->values = NULL;
  g->n = 0;
}

/* One pass over the records. With fill == 0 it validates and counts name bytes and values; with
   fill != 0 it copies them into g (allocated from the counts of the first pass). Returns 0 or -1. */
static inline int golden__walk(golden_file *g, const unsigned char *buf, size_t size, int fill,
                               size_t *name_bytes, size_t *value_count) {
  size_t pos = 12, nb = 0, nv = 0;
  for (size_t r = 0; r < g->n; r++) {
    uint32_t len, ndim, dim;
    size_t count = 1;
    if (golden__take_u32(buf, size, &pos, &len) != 0 || size - pos < len) {
      snprintf(g->err, sizeof g->err, "golden: record %zu: truncated name", r);
      return -1;
    }
    const unsigned char *name = buf + pos;
    pos += len;
    if (golden__take_u32(buf, size, &pos, &ndim) != 0 || ndim > GOLDEN_MAX_DIMS) {
      snprintf(g->err, sizeof g->err, "golden: record %zu: truncated or bad ndim", r);
      return -1;
    }
    golden_tensor *t = fill ? &g->t[r] : NULL;
    for (uint32_t k = 0; k < ndim; k++) {
      if (golden__take_u32(buf, size, &pos, &dim) != 0) {
        snprintf(g->err, sizeof g->err, "golden: record %zu: truncated dims", r);
        return -1;
      }
      if (dim != 0 && count > (size - pos) / 4 / dim) { /* more values than bytes left */
        snprintf(g->err, sizeof g->err, "golden: record %zu: data runs past the end", r);
        return -1;
      }
      count *= dim;
      if (t) t->dims[k] = dim;
    }
    if (count > (size - pos) / 4) {
      snprintf(g->err, sizeof g->err, "golden: record %zu: data runs past the end", r);
      return -1;
    }
    if (t) {
      char *dst_name = g->names + nb;
      float *dst = g->values + nv;
      memcpy(dst_name, name, len);
      dst_name[len] = '\0';
      for (size_t i = 0; i < count; i++) {
        uint32_t bits = golden__u32(buf + pos + 4 * i);
        memcpy(&dst[i], &bits, 4);
      }
      t->name = dst_name;
      t->ndim = (int)ndim;
      t->count = count;
      t->data = dst;
    }
    pos += 4 * count;
    nb += (size_t)len + 1;
    nv += count;
  }
  if (pos != size) {
    snprintf(g->err, sizeof g->err, "golden: %zu bytes after the last record", size - pos);
    return -1;
  }
  *name_bytes = nb;
  *value_count = nv;
  return 0;
}

/* Parses a whole file held in memory (the bytes may be freed afterwards). Returns 0, or -1 with
   g->err set and g empty. */
static inline int golden_parse(golden_file *g, const void *bytes, size_t size) {
  const unsigned char *buf = (const unsigned char *)bytes;
  size_t nb = 0, nv = 0;
  memset(g, 0, sizeof *g);
  if (size < 12 || memcmp(buf, "TTNSGOLD", 8) != 0) {
    snprintf(g->err, sizeof g->err, "golden: not a golden file (bad magic or too short)");
    return -1;
  }
  g->n = golden__u32(buf + 8);
  if (g->n > (size - 12) / 8) { /* a record takes at least 8 bytes */
    snprintf(g->err, sizeof g->err, "golden: record count %zu does not fit the file", g->n);
    g->n = 0;
    return -1;
  }
  if (golden__walk(g, buf, size, 0, &nb, &nv) != 0) {
    g->n = 0;
    return -1;
  }
  g->t = (golden_tensor *)calloc(g->n ? g->n : 1, sizeof *g->t);
  g->names = (char *)malloc(nb ? nb : 1);
  g->values = (float *)malloc((nv ? nv : 1) * sizeof(float));
  if (!g->t || !g->names || !g->values) {
    golden_free(g);
    snprintf(g->err, sizeof g->err, "golden: out of memory");
    return -1;
  }
  if (golden__walk(g, buf, size, 1, &nb, &nv) != 0) { /* cannot fail: same bytes as pass 1 */
    golden_free(g);
    return -1;
  }
  return 0;
}

/* Loads and parses the file at path. Returns 0, or -1 with g->err set. */
static inline int golden_load(golden_file *g, const char *path) {
  FILE *f = fopen(path, "rb");
  unsigned char *buf = NULL;
  long size = -1;
  int rc = -1;
  memset(g, 0, sizeof *g);
  if (!f) {
    snprintf(g->err, sizeof g->err, "golden: cannot open %s", path);
    return -1;
  }
  if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
  if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
    snprintf(g->err, sizeof g->err, "golden: cannot size %s", path);
  } else if (!(buf = (unsigned char *)malloc(size ? (size_t)size : 1))) {
    snprintf(g->err, sizeof g->err, "golden: out of memory for %s", path);
  } else if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
    snprintf(g->err, sizeof g->err, "golden: cannot read %s", path);
  } else {
    rc = golden_parse(g, buf, (size_t)size);
  }
  free(buf);
  fclose(f);
  return rc;
}

/* The record called name, or NULL. */
static inline const golden_tensor *golden_find(const golden_file *g, const char *name) {
  for (size_t i = 0; i < g->n; i++)
    if (strcmp(g->t[i].name, name) == 0) return &g->t[i];
  return NULL;
}

/* printf-style name lookup, e.g. golden_findf(&g, "case%d.grad.%s", i, "wq"). */
static inline const golden_tensor *golden_findf(const golden_file *g, const char *fmt, ...) {
  char name[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof name) return NULL;
  return golden_find(g, name);
}
#endif
