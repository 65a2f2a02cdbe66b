/* ================================================================================================
   8. Checkpoints and tokenizer (SPEC section 6)
   ================================================================================================
   Every file is a safetensors file (section 6) of F32 tensors whose __metadata__ (all values strings)
   says what it holds:
       "format":    "titans.h"
       "version":   "0.1.0" (the writer's TITANS_VERSION; a file of another major version is refused)
       "kind":      "model" | "trainer" | "session"
       "config":    the titans_config as JSON (every field, the memory's under "mem"; see
                    titans_config_to_json), so a file alone rebuilds its model
       "tokenizer": "byte" (optional)
       "user":      the caller's string (optional), e.g. a training program's data position
   A model file holds every parameter under its SPEC 6 name ("tok_emb", "layers.0.mem.w0.1", ...). A
   trainer file adds "adam.m.<name>", "adam.v.<name>" for each parameter and the metadata "step" and
   "train_config" (JSON): everything an exact resume needs. A session file holds the tensors of
   titans_session_state under their names, "config" and "model_hash" (of the weights it ran on).

   Loading checks everything and never trusts a number in the file: the metadata, the configuration
   (titans_config_check, and a configuration is refused before anything is allocated when its
   parameters need more floats than the file holds), each tensor's presence, dtype and exact shape,
   no tensor left over, finite values (AdamW second moments also >= 0). A failed load leaves the object empty (model, trainer) or reset
   (session) with the reason in its error buffer. Saves are atomic ("<path>.tmp", then rename).

       titans_model m;
       if (titans_model_load(&m, "model.safetensors") != TITANS_OK) fprintf(stderr, "%s\n", m.error);
       ...
       titans_model_save(&m, "copy.safetensors");
       titans_model_free(&m);

   The writer/reader-level functions (titans_model_write, titans_model_read, ...) work on a
   titans_st_writer / titans_st_reader, so a caller can add metadata of its own or read from memory;
   they are available under TITANS_NO_STDIO, the path functions are not. See docs/checkpoints.md. */

/* ---- tokenizer ---- */
typedef enum titans_tokenizer_kind {
  TITANS_TOKENIZER_BYTE = 0, /* one token per byte: ids 0..255, vocabulary 256 */
  TITANS_TOKENIZER_COUNT = 1
} titans_tokenizer_kind;

typedef struct titans_tokenizer {
  int kind;    /* titans_tokenizer_kind */
  int vocab;   /* number of token ids (256 for bytes) */
  void *data;  /* tables of a trained tokenizer (NULL for bytes); owned */
  char error[TITANS_ERR_MSG_SIZE];
} titans_tokenizer;

/* "byte"; NULL for an unknown kind. */
TITANSDEF const char *titans_tokenizer_name(int kind);
/* The kind of a name above, or -1. */
TITANSDEF int titans_tokenizer_from_name(const char *name);
TITANSDEF int titans_tokenizer_init(titans_tokenizer *tok, int kind);
TITANSDEF void titans_tokenizer_free(titans_tokenizer *tok);
/* Text -> ids. *n_ids receives the number of ids the text needs; ids [max_ids] (may be NULL to count)
   receives them when they fit, else TITANS_ERR_ARG. */
TITANSDEF int titans_tokenizer_encode(titans_tokenizer *tok, int *ids, size_t max_ids, size_t *n_ids,
                                      const char *text, size_t n_bytes);
/* Ids -> text (raw bytes, not NUL-terminated). *n_bytes receives the bytes the ids need; out
   [max_bytes] (may be NULL to count) receives them when they fit, else TITANS_ERR_ARG. An id outside
   0..vocab-1 is TITANS_ERR_ARG. Decoding a sequence piece by piece gives the bytes of the whole. */
TITANSDEF int titans_tokenizer_decode(titans_tokenizer *tok, char *out, size_t max_bytes, size_t *n_bytes,
                                      const int *ids, size_t n_ids);
/* Record the tokenizer in a file's metadata ("tokenizer": name). */
TITANSDEF int titans_tokenizer_write(const titans_tokenizer *tok, titans_st_writer *w);
/* Initialise tok from a file's metadata. A file without the key gets the byte tokenizer when vocab is
   256 (TITANS_ERR_FORMAT otherwise); the tokenizer's vocabulary must equal vocab (the model's). */
TITANSDEF int titans_tokenizer_read(titans_tokenizer *tok, const titans_st_reader *r, int vocab);

/* ---- configurations as JSON ---- */
/* Every field of cfg as one JSON object, e.g. {"block":"mac","vocab":256,...,"mem":{"d":128,...}}:
   integers as integers, floats in the shortest decimal form that reads back to the same float. out
   [size] receives the NUL-terminated text (TITANS_ERR_ARG when it does not fit; 1024 bytes always do).
   Locale-independent, no stdio. */
TITANSDEF int titans_config_to_json(const titans_config *cfg, char *out, size_t size);
/* Parse what titans_config_to_json writes: every field exactly once, no other key, integers in range
   (no fraction or exponent), finite floats; then titans_config_check. TITANS_OK or TITANS_ERR_FORMAT
   (TITANS_ERR_ARG from the check) with a message in err (TITANS_ERR_MSG_SIZE bytes, may be NULL). */
TITANSDEF int titans_config_from_json(titans_config *cfg, const char *json, char *err);
/* The same for a training configuration (checked: finite, lr >= 0, 0 <= beta < 1, eps > 0, ...). */
TITANSDEF int titans_train_config_to_json(const titans_train_config *tc, char *out, size_t size);
TITANSDEF int titans_train_config_from_json(titans_train_config *tc, const char *json, char *err);

/* ---- models ---- */
/* Add the model's parameters (borrowed: keep m alive and unchanged until the writer is saved) and
   the metadata format, version, kind = "model", config and, when tok is not NULL, tokenizer. Errors go
   to m->error. */
TITANSDEF int titans_model_write(titans_model *m, const titans_tokenizer *tok, titans_st_writer *w);
/* Allocate m (its previous content is not freed) from a parsed model or trainer file and copy its
   parameters; tok (may be NULL) is initialised with titans_tokenizer_read. On failure m holds no
   allocation and m->error says why. */
TITANSDEF int titans_model_read(titans_model *m, titans_tokenizer *tok, titans_st_reader *r);
#ifndef TITANS_NO_STDIO
TITANSDEF int titans_model_save(titans_model *m, const char *path);
TITANSDEF int titans_model_load(titans_model *m, const char *path);
/* With a tokenizer and a caller string ("user" metadata; both may be NULL). load_ex sets *user_meta
   (may be NULL) to a copy of the file's string (free with titans_free), NULL when it has none. */
TITANSDEF int titans_model_save_ex(titans_model *m, const titans_tokenizer *tok, const char *user_meta,
                                   const char *path);
TITANSDEF int titans_model_load_ex(titans_model *m, titans_tokenizer *tok, char **user_meta, const char *path);
#endif

/* ---- trainers (exact resume) ---- */
/* Everything a titans_trainer needs to continue bit for bit: parameters, AdamW moments, step, train
   configuration; plus the caller's string (user_meta, may be NULL), e.g. a data sampler's state. */
TITANSDEF int titans_trainer_write(titans_trainer *t, const titans_tokenizer *tok, const char *user_meta,
                                   titans_st_writer *w);
/* Rebuild model and trainer from a trainer file: m and t are uninitialised on entry; on success m is
   allocated from the file's configuration, t is initialised on m with the file's train configuration,
   moments and step. tok and user_meta as in titans_model_load_ex. On failure nothing stays allocated
   and t->error (and m->error) say why. */
TITANSDEF int titans_trainer_read(titans_trainer *t, titans_model *m, titans_tokenizer *tok, char **user_meta,
                                  titans_st_reader *r);
#ifndef TITANS_NO_STDIO
TITANSDEF int titans_trainer_save(titans_trainer *t, const titans_tokenizer *tok, const char *user_meta,
                                  const char *path);
TITANSDEF int titans_trainer_load(titans_trainer *t, titans_model *m, titans_tokenizer *tok, char **user_meta,
                                  const char *path);
#endif

/* ---- sessions ---- */
/* A 64-bit hash of the model's parameter bytes (FNV-style over 8-byte words), recorded in session
   files: a state only means something for the weights it ran on. */
TITANSDEF uint64_t titans_model_hash(const titans_model *m);
/* The session's state (titans_session_state), borrowed like the model's parameters, with kind =
   "session", the model's config and hash. */
TITANSDEF int titans_session_write(titans_session *s, titans_st_writer *w);
/* Restore a state into s (initialised on its model): the file's config and model hash must be the
   session's, every state tensor present with its exact size, none left over, all finite; then
   titans_session_state_loaded. On failure the session is reset and s->error says why. */
TITANSDEF int titans_session_read(titans_session *s, titans_st_reader *r);
#ifndef TITANS_NO_STDIO
TITANSDEF int titans_session_save(titans_session *s, const char *path);
TITANSDEF int titans_session_load(titans_session *s, const char *path);
#endif
