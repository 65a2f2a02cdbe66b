/* longctx.h: the retrieval tasks of `./titans needle` and `./titans train --task` (docs/long_context.md).

   An example is a context followed by a question; the answer comes after the question:

     passkey: filler "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back
              again. " repeated, with the needle "The pass key is NNNNN. Remember it. NNNNN is the pass
              key. " inserted once; question "What is the pass key? The pass key is "; answer NNNNN
              (5 digits, each uniform).
     prose:   filler taken from a real text (cyclically from a random offset of a given split), with the
              needle "The special magic number for WORD is NNNNNNN. " inserted once; question "What is
              the special magic number for WORD? The special magic number for WORD is "; answer the
              7 digits. WORD comes from a fixed list of 16 words.
     copy:    the passkey's filler, with the needle "Remember these letters: LLLLLLLLLLLLLLLL. " inserted
              once; question "Repeat the letters: "; answer the 16 letters (each uniform over a-z). A
              dense probe of retrieval beyond the window: after the first letter, each answer letter
              follows from the letters before it, so the per-letter score measures whether the model
              can look up what followed a string it read long ago (chance 1/26); the first letter
              needs the cue alone, as the passkey's first digit does.

   `length` counts the context and the question in bytes (= tokens of the byte tokenizer); the answer
   follows at positions length .. length + answer_len - 1. The needle starts at the start of the filler
   sentence holding byte depth * filler_len of the filler (passkey, copy: a sentence starts after ". "; prose:
   after ". ", "? ", "! " or a newline, looking back at most LONGCTX_SNAP_BACK bytes), so the needle
   never cuts a sentence in two. The last filler sentence before the question may be cut short.

   Nothing is ever held whole: longctx_tokens() computes any range of an example on the fly, so a 1M
   token context costs no memory. Everything is deterministic by a 64-bit seed; the draws, in order:
   answer_len symbols (u64 % 10 digits, or u64 % 26 letters for copy), then for prose the word (u64 % 16) and the source offset
   (u64 % source_len), then the depth when it was asked to be random (uniform in [0, 1)).

   Seeds: training examples use seeds drawn from splitmix(train seed, step) (./titans train), evaluation
   examples use longctx_eval_seed(), which starts from the seed plus LONGCTX_EVAL_SEED_OFFSET, so the two
   never share a stream for the same user seed. Prose examples of an evaluation also draw their filler
   from the held-out 10% of the text, training examples from the training 90%.

   Static functions only: include it where needed (examples/titans.c, tests/test_longctx.c). */
#ifndef TITANS_EXAMPLES_LONGCTX_H
#define TITANS_EXAMPLES_LONGCTX_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { LONGCTX_PASSKEY = 0, LONGCTX_PROSE = 1, LONGCTX_COPY = 2 };

/* Added to the user's seed for evaluation examples (training uses the seed itself). */
#define LONGCTX_EVAL_SEED_OFFSET 0x5EED000000000000ull
/* How far back (bytes) a prose needle looks for a sentence start before giving up and cutting. */
#define LONGCTX_SNAP_BACK 512

static const char longctx_filler[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
static const char *const longctx_words[16] = {"apple",  "river",  "lantern", "meadow", "violin", "harbor",
                                              "falcon", "copper", "willow",  "thunder", "marble", "saffron",
                                              "compass", "orchid", "glacier", "pepper"};

typedef struct longctx_example {
  int kind;                /* LONGCTX_PASSKEY, LONGCTX_PROSE or LONGCTX_COPY */
  size_t length;           /* context + question, in tokens (bytes) */
  size_t context_len;      /* length - question_len */
  size_t filler_len;       /* context_len - needle_len */
  size_t needle_at;        /* first byte of the needle in the context */
  double depth;            /* the asked depth (fraction of the filler before the needle) */
  size_t needle_len, question_len, answer_len;
  char needle[128];        /* [needle_len] */
  char question[160];      /* [question_len] */
  char answer[24];         /* [answer_len] digits (letters for copy) */
  const int *source;       /* prose: [source_len] token ids (bytes) the filler is read from, cyclically */
  size_t source_len, source_offset;
} longctx_example;

/* splitmix64's finaliser over a pair: one independent stream per (a, b). Also ./titans train's sampler. */
static uint64_t longctx_mix64(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* splitmix64: the example's own random stream. */
static uint64_t longctx_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The seed of evaluation trial `trial` at (length, depth): the same for every model, so all models of
   one run answer the same questions. */
static uint64_t longctx_eval_seed(uint64_t seed, size_t length, double depth, size_t trial) {
  uint64_t depth_key = (uint64_t)(depth * 1e6 + 0.5);
  return longctx_mix64(longctx_mix64(longctx_mix64(seed + LONGCTX_EVAL_SEED_OFFSET, (uint64_t)length), depth_key),
                       (uint64_t)trial);
}

/* "passkey" / "prose" / "copy" -> the kind, or -1. */
static int longctx_kind_from_name(const char *name) {
  if (!strcmp(name, "passkey")) return LONGCTX_PASSKEY;
  if (!strcmp(name, "prose")) return LONGCTX_PROSE;
  if (!strcmp(name, "copy")) return LONGCTX_COPY;
  return -1;
}

static const char *longctx_kind_name(int kind) {
  return kind == LONGCTX_PROSE ? "prose" : kind == LONGCTX_COPY ? "copy" : "passkey";
}

/* Answer symbols of a kind: 5 digits (passkey), 7 digits (prose) or 16 letters (copy). */
static size_t longctx_answer_len(int kind) { return kind == LONGCTX_PROSE ? 7 : kind == LONGCTX_COPY ? 16 : 5; }

/* How many values one answer symbol takes (chance per symbol is its inverse): 10 digits or 26 letters. */
static int longctx_alphabet(int kind) { return kind == LONGCTX_COPY ? 26 : 10; }

/* The first possible answer symbol: '0' or 'a'. */
static char longctx_first_symbol(int kind) { return kind == LONGCTX_COPY ? 'a' : '0'; }

/* The shortest length (context + question) a kind accepts: the needle, the longest question and some
   filler. */
static size_t longctx_min_length(int kind) { return kind == LONGCTX_PROSE ? 160 : 128; }

/* Byte j of the filler (j < filler_len). */
static int longctx_filler_byte(const longctx_example *ex, size_t j) {
  if (ex->kind != LONGCTX_PROSE) return (unsigned char)longctx_filler[j % (sizeof longctx_filler - 1)];
  return ex->source[(ex->source_offset + j) % ex->source_len];
}

/* Does a filler sentence start at byte j? */
static int longctx_sentence_starts(const longctx_example *ex, size_t j) {
  if (j == 0) return 1;
  int prev = longctx_filler_byte(ex, j - 1);
  if (prev == '\n') return 1;
  if (prev != ' ' || j < 2) return 0;
  int end = longctx_filler_byte(ex, j - 2);
  return end == '.' || end == '?' || end == '!';
}

/* Sets up example ex of a kind, length (context + question) and depth in [0, 1] (a negative depth:
   drawn uniformly) from seed. Prose reads its filler from source [source_len] (token ids = bytes,
   at least 1). Returns 0, or -1 with a message in err [200] when the length is too short. */
static int longctx_example_init(longctx_example *ex, int kind, size_t length, double depth, uint64_t seed,
                                const int *source, size_t source_len, char *err) {
  uint64_t rng = seed;
  memset(ex, 0, sizeof *ex);
  ex->kind = kind;
  ex->length = length;
  ex->answer_len = longctx_answer_len(kind);
  for (size_t i = 0; i < ex->answer_len; i++)
    ex->answer[i] = (char)(longctx_first_symbol(kind) + (int)(longctx_next(&rng) % (uint64_t)longctx_alphabet(kind)));
  if (kind == LONGCTX_COPY) {
    snprintf(ex->needle, sizeof ex->needle, "Remember these letters: %s. ", ex->answer);
    snprintf(ex->question, sizeof ex->question, "Repeat the letters: ");
  } else if (kind == LONGCTX_PASSKEY) {
    snprintf(ex->needle, sizeof ex->needle, "The pass key is %s. Remember it. %s is the pass key. ", ex->answer,
             ex->answer);
    snprintf(ex->question, sizeof ex->question, "What is the pass key? The pass key is ");
  } else {
    if (!source || source_len == 0) {
      snprintf(err, 200, "the prose task needs a source text");
      return -1;
    }
    const char *word = longctx_words[longctx_next(&rng) % 16];
    ex->source = source;
    ex->source_len = source_len;
    ex->source_offset = (size_t)(longctx_next(&rng) % source_len);
    snprintf(ex->needle, sizeof ex->needle, "The special magic number for %s is %s. ", word, ex->answer);
    snprintf(ex->question, sizeof ex->question,
             "What is the special magic number for %s? The special magic number for %s is ", word, word);
  }
  if (depth < 0) depth = (double)(longctx_next(&rng) >> 11) * (1.0 / 9007199254740992.0);
  if (depth > 1) depth = 1;
  ex->depth = depth;
  ex->needle_len = strlen(ex->needle);
  ex->question_len = strlen(ex->question);
  if (length < longctx_min_length(kind)) {
    snprintf(err, 200, "a %s example needs a length of at least %zu tokens (asked: %zu)", longctx_kind_name(kind),
             longctx_min_length(kind), length);
    return -1;
  }
  ex->context_len = length - ex->question_len;
  ex->filler_len = ex->context_len - ex->needle_len;
  /* the sentence holding the target byte: look back for its start */
  size_t target = (size_t)(depth * (double)ex->filler_len), at = target;
  while (at > 0 && target - at < LONGCTX_SNAP_BACK && !longctx_sentence_starts(ex, at)) at--;
  ex->needle_at = longctx_sentence_starts(ex, at) ? at : target;
  return 0;
}

/* Token (byte) i of the example: context, question, then the answer (i < length + answer_len). */
static int longctx_token(const longctx_example *ex, size_t i) {
  if (i < ex->needle_at) return longctx_filler_byte(ex, i);
  if (i < ex->needle_at + ex->needle_len) return (unsigned char)ex->needle[i - ex->needle_at];
  if (i < ex->context_len) return longctx_filler_byte(ex, i - ex->needle_len);
  if (i < ex->length) return (unsigned char)ex->question[i - ex->context_len];
  return (unsigned char)ex->answer[i - ex->length];
}

/* out [n] = tokens from..from+n-1 of the example (see longctx_token). */
static void longctx_tokens(const longctx_example *ex, size_t from, int *out, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = longctx_token(ex, from + i);
}

#endif
