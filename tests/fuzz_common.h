/* Shared by the loader fuzz targets (fuzz_model.c, fuzz_trainer.c, fuzz_session.c).
   An input is read one of two ways, chosen by its first byte:
   - raw (bit 0 clear): the rest is the file;
   - edited (bit 0 set): a valid file of the target's kind, made once, with the rest of the input
     applied as edits of 4 bytes (a 24-bit offset into the file, a byte to write there), and, when
     bit 1 is set, cut to a length taken from the second byte. Random bytes rarely make a safetensors
     header a loader reaches past; edits of a valid file reach its configuration JSON, shapes, values
     and metadata, so the loaders' deep checks are fuzzed without a seed corpus. */
#ifndef TITANS_FUZZ_COMMON_H
#define TITANS_FUZZ_COMMON_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_ASSERT(x) \
  do {                 \
    if (!(x)) abort(); \
  } while (0)

/* The small model every target starts from: MAC, two layers, every kind of tensor. */
static titans_config fuzz_config(void) {
  titans_config c = titans_config_default(TITANS_BLOCK_MAC, 16, 8, 2);
  c.attn_heads = 2;
  c.ffn_hidden = 8;
  c.segment = 4;
  c.n_persist = 2;
  c.mem.heads = 2;
  c.mem.head_dim = 4;
  c.mem.hidden_mult = 2;
  c.mem.chunk = 2;
  c.mem.conv_width = 2;
  return c;
}

/* The bytes to load: *owned is set when they were allocated (free with free()). */
static const unsigned char *fuzz_bytes(const uint8_t *data, size_t size, const unsigned char *tmpl, size_t tlen,
                                       size_t *out_len, unsigned char **owned) {
  *owned = NULL;
  if (size == 0) {
    *out_len = 0;
    return data;
  }
  if (!(data[0] & 1)) {
    *out_len = size - 1;
    return data + 1;
  }
  unsigned char *b = (unsigned char *)malloc(tlen);
  FUZZ_ASSERT(b);
  memcpy(b, tmpl, tlen);
  size_t len = tlen, i = 1;
  if ((data[0] & 2) && size > 1) {
    len = tlen * data[1] / 256;
    i = 2;
  }
  for (; i + 4 <= size; i += 4) {
    size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8 | (size_t)data[i + 2] << 16) % tlen;
    b[off] = data[i + 3];
  }
  *owned = b;
  *out_len = len;
  return b;
}

/* A model small enough to run a few tokens through in a fuzz iteration. */
static int fuzz_small(const titans_model *m) { return m->n_floats <= ((size_t)1 << 16) && m->cfg.mem.chunk <= 64; }

/* Runs a few tokens through a loaded model: any status but a crash is fine, and a session that
   feeds without error must save a state that loads again. */
static void fuzz_run_session(const titans_model *m) {
  if (!fuzz_small(m)) return;
  titans_session s, t;
  if (titans_session_init(&s, m) != TITANS_OK) return;
  int toks[3] = {0, 1, 2};
  for (int i = 0; i < 3; i++) toks[i] %= m->cfg.vocab;
  int rc = titans_session_feed(&s, toks, 3, NULL);
  if (rc == TITANS_OK && titans_session_init(&t, m) == TITANS_OK) {
    titans_st_writer w;
    titans_st_writer_init(&w);
    unsigned char *buf = NULL;
    size_t n = 0;
    FUZZ_ASSERT(titans_session_write(&s, &w) == TITANS_OK);
    FUZZ_ASSERT(titans_st_writer_to_memory(&w, &buf, &n) == TITANS_OK);
    titans_st_reader r;
    FUZZ_ASSERT(titans_st_reader_parse(&r, buf, n) == TITANS_OK);
    FUZZ_ASSERT(titans_session_read(&t, &r) == TITANS_OK && t.position == s.position);
    titans_st_reader_free(&r);
    titans_free(buf);
    titans_st_writer_free(&w);
    titans_session_free(&t);
  }
  titans_session_free(&s);
}
#endif
