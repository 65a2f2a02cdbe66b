/* libFuzzer target for the session-state loader (titans_session_read) of a fixed small model, see
   tests/fuzz_common.h for the input:
     make fuzz
   An accepted state must feed (or report an error), and a session that fed must save a state that
   loads again; a refused one leaves the session reset and usable. */
#define TITANS_IMPLEMENTATION
#include "titans.h"
#include "fuzz_common.h"

static unsigned char *tmpl;
static size_t tlen;
static titans_model model;

static void make_template(void) {
  titans_config c = fuzz_config();
  FUZZ_ASSERT(titans_model_init(&model, &c) == TITANS_OK);
  titans_model_init_weights(&model, 1);
  titans_session s;
  FUZZ_ASSERT(titans_session_init(&s, &model) == TITANS_OK);
  int toks[6] = {1, 5, 9, 2, 3, 7};
  FUZZ_ASSERT(titans_session_feed(&s, toks, 6, NULL) == TITANS_OK);
  titans_st_writer w;
  titans_st_writer_init(&w);
  FUZZ_ASSERT(titans_session_write(&s, &w) == TITANS_OK);
  FUZZ_ASSERT(titans_st_writer_to_memory(&w, &tmpl, &tlen) == TITANS_OK);
  titans_st_writer_free(&w);
  titans_session_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!tmpl) make_template();
  unsigned char *owned;
  size_t len;
  const unsigned char *bytes = fuzz_bytes(data, size, tmpl, tlen, &len, &owned);
  titans_st_reader r;
  titans_session s;
  FUZZ_ASSERT(titans_session_init(&s, &model) == TITANS_OK);
  if (titans_st_reader_parse(&r, bytes, len) == TITANS_OK) {
    int rc = titans_session_read(&s, &r);
    if (rc != TITANS_OK) FUZZ_ASSERT(s.position == 0 && !s.broken); /* refused: reset, usable */
    int tok = 3;
    float logits[16];
    rc = titans_session_feed(&s, &tok, 1, logits);
    FUZZ_ASSERT(rc == TITANS_OK || rc == TITANS_ERR_NONFINITE || rc == TITANS_ERR_STATE);
    if (rc == TITANS_OK) {
      titans_st_writer w;
      titans_st_writer_init(&w);
      unsigned char *buf = NULL;
      size_t n = 0;
      FUZZ_ASSERT(titans_session_write(&s, &w) == TITANS_OK);
      FUZZ_ASSERT(titans_st_writer_to_memory(&w, &buf, &n) == TITANS_OK);
      titans_st_reader r2;
      titans_session t;
      FUZZ_ASSERT(titans_st_reader_parse(&r2, buf, n) == TITANS_OK);
      FUZZ_ASSERT(titans_session_init(&t, &model) == TITANS_OK);
      FUZZ_ASSERT(titans_session_read(&t, &r2) == TITANS_OK && t.position == s.position);
      titans_session_free(&t);
      titans_st_reader_free(&r2);
      titans_free(buf);
      titans_st_writer_free(&w);
    }
    titans_st_reader_free(&r);
  }
  titans_session_free(&s);
  free(owned);
  return 0;
}
