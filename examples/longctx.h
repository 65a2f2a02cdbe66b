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
   answer_len symbols (u64 % 10 digits, or u64 % 26 letters for copy), then for prose the word (u64 % 16) and the source
   offset (u64 % source_len), then the depth when it was asked to be random (uniform in [0, 1)).

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
/* The key words of prose needles. Training draws from the first set only; the second set is held out,
   so `needle --key-words heldout` asks for keys a model never saw in training. */
static const char *const longctx_words[16] = {"apple",  "river",  "lantern", "meadow", "violin", "harbor",
                                              "falcon", "copper", "willow",  "thunder", "marble", "saffron",
                                              "compass", "orchid", "glacier", "pepper"};
static const char *const longctx_heldout_words[16] = {"banana", "canyon", "ember",  "forest", "garnet", "hollow",
                                                      "island", "jasper", "kettle", "lemon",  "mirror", "nickel",
                                                      "ocean",  "parrot", "quartz", "rocket"};
/* LONGCTX_WORDS_RANDOM: each key word is 4 to 8 random letters (never a held-out word), so a model
   trained on them cannot lean on 16 words it knows by heart and must bind whatever word it reads.
   LONGCTX_WORDS_TEXT: each key word is a word of the example's own source text (5 to 8 letters, lowered,
   never a held-out word): thousands of real words instead of 16. */
enum { LONGCTX_WORDS_TRAIN = 0, LONGCTX_WORDS_HELDOUT = 1, LONGCTX_WORDS_RANDOM = 2, LONGCTX_WORDS_TEXT = 3 };
#define LONGCTX_TEXT_WORD_MIN 5
#define LONGCTX_TEXT_WORD_MAX 8

/* The option's name of a word set ("train", "heldout", "random", "text"). */
static const char *longctx_word_set_name(int word_set) {
  static const char *const names[] = {"train", "heldout", "random", "text"};
  return word_set >= 0 && word_set <= LONGCTX_WORDS_TEXT ? names[word_set] : "?";
}

/* The word set a name names, or -1. */
static int longctx_word_set_parse(const char *name) {
  for (int set = 0; set <= LONGCTX_WORDS_TEXT; set++)
    if (!strcmp(name, longctx_word_set_name(set))) return set;
  return -1;
}

/* The most needles one example holds (each with its own key word and number). */
#define LONGCTX_MAX_NEEDLES 8

/* Plain sentences, the kind the passkey's filler is made of, for a haystack that is not periodic:
   longctx_sentence_text() strings them in an order drawn from a seed. */
static const char *const longctx_sentences[] = {
    "The grass is green. ", "The sky is blue. ", "The sun is yellow. ", "Here we go. ", "There and back again. ",
    "The river runs to the sea. ", "A cat sleeps on the warm wall. ", "The bread is fresh today. ",
    "Rain falls on the old roof. ", "The road turns left at the hill. ", "Birds sing in the morning. ",
    "The door is open. ", "We walk to the market. ", "The tea is hot. ", "Snow covers the field. ",
    "The clock ticks on the shelf. ", "A boat drifts past the pier. ", "The lamp gives a soft light. ",
    "Children play in the yard. ", "The wind moves the trees. ", "The soup needs more salt. ",
    "A dog barks far away. ", "The train leaves at noon. ", "Leaves turn red in the fall. ",
    "The window faces the east. ", "She reads a long book. ", "The stars come out at night. ",
    "He paints the fence white. ", "The milk is in the jar. ", "Clouds gather over the town. ",
    "The bridge is made of stone. ", "We sit by the fire. ", "The garden smells of mint. ",
    "A bell rings in the tower. ", "The path is wet with dew. ", "The fish swim in the pond. ",
    "The baker wakes before dawn. ", "Our house has a red door. ", "The moon is full tonight. ",
    "The kettle begins to sing. "};
#define LONGCTX_N_SENTENCES (sizeof longctx_sentences / sizeof longctx_sentences[0])

/* What an example holds beyond its kind, length and depth. {1, LONGCTX_WORDS_TRAIN, 0, 0} is the
   single-needle example (opt NULL in longctx_example_init). */
typedef struct longctx_options {
  int needles;         /* needles in the context, 1..LONGCTX_MAX_NEEDLES (above 1: prose only); the question
                          asks for the first one drawn, which sits at the asked depth, the others at uniform
                          depths, each with a key word of its own */
  int word_set;        /* LONGCTX_WORDS_TRAIN, _HELDOUT, _RANDOM or _TEXT (words of the source) */
  int filler_from_source; /* passkey and copy: the filler is read from the source, as prose's is, not the
                             fixed sentence cycle */
  double number_words; /* the fraction of the filler's words (runs of letters) written as numbers, a random
                          digit for each letter: numbers amid the text that no question asks for (0: none) */
  double decoy_numbers; /* prose: the fraction of those numbers that are decoys, starting with the first 1 to 6
                           digits of a needle's number (random digits after): the same digits in another
                           context, which a memory that writes every number writes over the needle's (0: none) */
  int alike_words;     /* prose: every further needle's key word has as many letters as the asked one's (random
                          letters of that length when the word set has too few): keys that differ in the word's
                          letters alone, feared and measured no harder to bind (session 26) (0: any length) */
  double alike_numbers; /* prose: the fraction of further needles whose number starts with exactly the asked
                           one's first 1 to answer_len - 1 digits (the count uniform; which needles and how many
                           digits from a stream of their own), their own digits after: keys that differ in the
                           word alone until the numbers part, where a memory that binds the digits before rather
                           than the word answers with another needle's rest (0: independent digits; 1: all, which
                           in training leaves the first digit the same in every needle, session 27) */
} longctx_options;

typedef struct longctx_example {
  int kind;                /* LONGCTX_PASSKEY, LONGCTX_PROSE or LONGCTX_COPY */
  size_t length;           /* context + question, in tokens (bytes) */
  size_t context_len;      /* length - question_len */
  size_t filler_len;       /* context_len - the needles' bytes */
  size_t needle_at;        /* first byte of the asked needle (needle 0) in the context */
  double depth;            /* the asked depth (fraction of the filler before the asked needle) */
  size_t needle_len, question_len, answer_len; /* needle_len: the asked needle's */
  char needle[128];        /* [needle_len] the asked needle */
  char question[160];      /* [question_len] */
  char answer[24];         /* [answer_len] digits (letters for copy) */
  const int *source;       /* [source_len] token ids (bytes) the filler is read from, cyclically; NULL: the
                              fixed sentence cycle (passkey, copy) */
  size_t source_len, source_offset;
  double number_words;     /* longctx_options.number_words */
  double decoy_numbers;    /* longctx_options.decoy_numbers */
  uint64_t number_key;     /* the stream that picks those words and their digits (from the seed) */
  /* every needle, the asked one included, in the order they come in the context */
  size_t n_needles;
  size_t insert_at[LONGCTX_MAX_NEEDLES];  /* the filler byte each needle goes before */
  size_t others_len[LONGCTX_MAX_NEEDLES]; /* [n_needles] each needle's length */
  char others[LONGCTX_MAX_NEEDLES][128];  /* [n_needles][others_len] each needle's text */
  char words[LONGCTX_MAX_NEEDLES][16];    /* prose: the key word of each (in drawing order: words[0] asked) */
  char numbers[LONGCTX_MAX_NEEDLES][24];  /* prose: the number of each, in the same order (numbers[0]: answer) */
} longctx_example;

/* splitmix64's finaliser over a pair: one independent stream per (a, b). Also ./titans train's sampler. */
static uint64_t longctx_mix64(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A draw's top 53 bits as a double in [0, 1). */
static double longctx_unit(uint64_t bits) { return (double)(bits >> 11) * (1.0 / 9007199254740992.0); }

/* splitmix64: the example's own random stream. */
static uint64_t longctx_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* out [n] = plain sentences of longctx_sentences in an order drawn from seed (each sentence uniform and
   independent of the ones before it), the last one cut at n: a haystack of the passkey's kind of text
   that no model can predict from its own period. */
static void longctx_sentence_text(int *out, size_t n, uint64_t seed) {
  size_t i = 0;
  while (i < n) {
    const char *s = longctx_sentences[longctx_mix64(seed, (uint64_t)i) % LONGCTX_N_SENTENCES];
    for (size_t k = 0; s[k] && i < n; k++) out[i++] = (unsigned char)s[k];
  }
}

/* Names for longctx_technical_text's constants, fields and functions (upper case there, lower in prose). */
static const char *const longctx_tech_words[] = {
    "buffer", "count", "size",   "flag",   "mode",    "port",  "timeout", "retry",  "limit", "offset", "index",
    "level",  "state", "error",  "clock",  "rate",    "width", "height",  "depth",  "block", "page",   "sector",
    "channel", "device", "queue", "signal", "vector", "table", "frame",   "packet", "stream", "cache", "mask",
    "shift",  "base",  "version", "user",  "group",   "file",  "path",    "name",   "type",  "class",  "event",
    "timer",  "power", "pin",    "irq",    "bus",     "reg",   "ctrl",    "status", "data",  "addr",   "len",
    "max",    "min",   "default", "id",    "node",    "link",  "slot",    "unit",   "word"};
#define LONGCTX_N_TECH_WORDS (sizeof longctx_tech_words / sizeof longctx_tech_words[0])

/* A number of 1 to `max_digits` digits, the count uniform: small and large numbers alike. */
static unsigned long longctx_tech_number(uint64_t *rng, int max_digits) {
  int digits = 1 + (int)(longctx_next(rng) % (uint64_t)max_digits);
  unsigned long ten = 1;
  for (int k = 0; k < digits; k++) ten *= 10;
  return (unsigned long)(longctx_next(rng) % ten);
}

/* One line (or a short block) of technical text into line [size]; returns its length. Every draw is a
   statement of its own, in order: C leaves the order of a call's arguments open, and the text must be the
   same from every compiler. */
static size_t longctx_tech_line(char *line, size_t size, uint64_t *rng) {
  const char *w[4]; /* names, lower case */
  char up[2][16];   /* the first two in upper case, for constants */
  for (int k = 0; k < 4; k++) w[k] = longctx_tech_words[longctx_next(rng) % LONGCTX_N_TECH_WORDS];
  for (int k = 0; k < 2; k++) {
    size_t j = 0;
    for (; w[k][j] && j < 15; j++) up[k][j] = (char)(w[k][j] >= 'a' && w[k][j] <= 'z' ? w[k][j] - 32 : w[k][j]);
    up[k][j] = 0;
  }
  int kind = (int)(longctx_next(rng) % 16), rows = 2 + (int)(longctx_next(rng) % 6), n = 0;
  unsigned long v[6]; /* the line's numbers, drawn in order; each template takes what it needs */
  static const int digits[16][6] = {{7}, {6}, {3}, {0}, {2, 2, 2, 2, 2, 5}, {1, 2, 3, 2}, {0}, {0}, {4},
                                    {3, 3, 3, 3, 5}}; /* kinds 6, 7, 10-15: none */
  for (int k = 0; k < 6; k++) v[k] = digits[kind][k] ? longctx_tech_number(rng, digits[kind][k]) : 0;
  switch (kind) {
  case 0: /* hexadecimal of 2, 4 or 8 digits (the row count's draw doubles as the width's) */
    n = snprintf(line, size, "#define %s_%s 0x%0*lX\n", up[0], up[1], 2 << (rows % 3), v[0]); break;
  case 1: n = snprintf(line, size, "#define %s_%s %lu\n", up[0], up[1], v[0]); break;
  case 2: /* an enumeration: consecutive values from a random start */
    n = snprintf(line, size, "enum %s_%s {\n", w[2], w[3]);
    for (int r = 0; r < rows + 1 && n > 0 && n < (int)size; r++)
      n += snprintf(line + n, size - (size_t)n, "\t%s_%s = %lu,\n", up[0],
                    longctx_tech_words[(v[0] + (unsigned long)r * 7) % LONGCTX_N_TECH_WORDS], v[0] + (unsigned long)r);
    if (n > 0 && n < (int)size) n += snprintf(line + n, size - (size_t)n, "};\n");
    break;
  case 3: /* a table of numbers of one width */
    for (int r = 0, width = 1 + rows % 5; r < rows && n >= 0 && n < (int)size; r++) {
      unsigned long t[4];
      for (int k = 0; k < 4; k++) t[k] = longctx_tech_number(rng, width);
      n += snprintf(line + n, size - (size_t)n, "\t{ %lu, %lu, %lu, %lu },\n", t[0], t[1], t[2], t[3]);
    }
    break;
  case 4: n = snprintf(line, size, "%04lu-%02lu-%02lu %02lu:%02lu:%02lu %s[%lu]: %s %s\n", 1990 + v[5] % 36,
                       1 + v[0] % 12, 1 + v[1] % 28, v[2] % 24, v[3] % 60, v[4] % 60, w[0], v[5], w[1], w[2]); break;
  case 5: n = snprintf(line, size, "%s-%s version %lu.%lu.%lu, released %lu\n", w[0], w[1], v[0], v[1], v[2],
                       1990 + v[3] % 36); break;
  case 6: n = snprintf(line, size, "/* the %s of the %s, before the %s is set */\n", w[0], w[1], w[2]); break;
  case 7: n = snprintf(line, size, "int %s_%s(struct %s *%s);\n", w[0], w[1], w[2], w[3]); break;
  case 8: n = snprintf(line, size, "%s/%s.c:%lu: warning: %s may be used before it is set\n", w[0], w[1], v[0],
                       w[2]); break;
  case 9: n = snprintf(line, size, "\t.%s = %lu.%lu.%lu.%lu:%lu,\n", w[0], v[0] % 256, v[1] % 256, v[2] % 256,
                        v[3] % 256, v[4]); break;
  case 10: case 11: case 12: /* comments: text without numbers, as much of a header is */
    n = snprintf(line, size, "/*\n * Set the %s of each %s before its %s: a %s that is not set\n * reads as the default.\n */\n",
                 w[0], w[1], w[2], w[3]); break;
  case 13: case 14:
    n = snprintf(line, size, "struct %s_%s {\n\tunsigned long %s;\n\tstruct %s *%s;\n};\n", w[0], w[1], w[2], w[3], w[0]);
    break;
  default: n = snprintf(line, size, "extern const char *%s_%s_name(void);\n", w[0], w[1]); break;
  }
  return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/* One sentence of documentation that states numbers into line [size]; returns its length: "The default
   timeout is 500.", "This results in 16 bytes.", numbers after "is", "to", "in", "of", "than" in a
   manual's prose, as a needle's number follows "is". Each template's words and numbers (1 to 7 digits,
   the count uniform) are drawn in order before it is written. */
static size_t longctx_tech_statement(char *line, size_t size, uint64_t *rng) {
  const char *w[3];
  unsigned long v[2];
  for (int k = 0; k < 3; k++) w[k] = longctx_tech_words[longctx_next(rng) % LONGCTX_N_TECH_WORDS];
  for (int k = 0; k < 2; k++) v[k] = longctx_tech_number(rng, 7);
  int n = 0;
  switch (longctx_next(rng) % 8) {
  case 0: n = snprintf(line, size, "The default %s is %lu, and the %s is %lu. ", w[0], v[0], w[1], v[1]); break;
  case 1:
    n = snprintf(line, size, "When the %s is %lu, the %s of each %s is set to %lu. ", w[0], v[0], w[1], w[2], v[1]);
    break;
  case 2: n = snprintf(line, size, "This results in %lu bytes; the %s is %lu by default. ", v[0], w[0], v[1]); break;
  case 3: n = snprintf(line, size, "If the %s is %lu or more, %s returns %lu. ", w[0], v[0], w[1], v[1]); break;
  case 4: n = snprintf(line, size, "Each %s holds up to %lu entries (its %s is %lu). ", w[0], v[0], w[1], v[1]); break;
  case 5: n = snprintf(line, size, "The %s must be at least %lu and less than %lu. ", w[0], v[0], v[1]); break;
  case 6: n = snprintf(line, size, "The %s count is %lu; a %s of %lu means no limit.\n", w[0], v[0], w[1], v[1]);
    break;
  default: n = snprintf(line, size, "Its %s is %lu, the %s of the %s is %lu.\n", w[0], v[0], w[1], w[2], v[1]); break;
  }
  return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/* A number of exactly `digits` digits (1 to 12; a leading digit 1-9), for columns whose widths vary. */
static unsigned long long longctx_tech_wide_number(uint64_t *rng, int digits) {
  unsigned long long low = 1;
  for (int k = 1; k < digits; k++) low *= 10;
  return low + longctx_next(rng) % (9 * low);
}

/* One block of columns of long numbers into line [size], as programs print them and manuals quote them
   (du, ls -l, wc, df, dd, a table of counts): numbers of 3 to 10 digits separated by spaces or tabs, none
   after the words a needle's number follows, none asked; returns its length. session 34's write trace
   found the GNU info manuals' such columns ("600k   877703", "59703296 bytes") written as hard as a
   needle, and longctx_tech_line has none (its tables are of 1 to 5 digits in braces). */
static size_t longctx_tech_columns(char *line, size_t size, uint64_t *rng) {
  const char *w[3]; /* names; w[2] is drawn but unused (the text session 35's runs trained amid) */
  for (int k = 0; k < 3; k++) w[k] = longctx_tech_words[longctx_next(rng) % LONGCTX_N_TECH_WORDS];
  int kind = (int)(longctx_next(rng) % 6), rows = 2 + (int)(longctx_next(rng) % 5), n = 0;
  for (int r = 0; r < rows && n >= 0 && n < (int)size; r++) {
    const char *name = longctx_tech_words[longctx_next(rng) % LONGCTX_N_TECH_WORDS];
    unsigned long long v[4]; /* the row's numbers, 3 to 10 digits each, drawn in order */
    for (int k = 0; k < 4; k++) v[k] = longctx_tech_wide_number(rng, 3 + (int)(longctx_next(rng) % 8));
    char *at = line + n;
    size_t left = size - (size_t)n;
    switch (kind) {
    case 0: /* du: a size, in kilobytes or as is, then a path */
      n += snprintf(at, left, "%llu%s\t%s/%s\n", v[0], v[1] % 2 ? "k" : "", w[0], name); break;
    case 1: /* ls -l */
      n += snprintf(at, left, "-rw-r--r-- 1 %s %s %10llu %s %2llu %02llu:%02llu %s.%s\n", w[0], w[0], v[0],
                    v[1] % 2 ? "Mar" : "Oct", 1 + v[1] % 28, v[2] % 24, v[3] % 60, name, w[1]); break;
    case 2: /* wc: lines, words, bytes */
      n += snprintf(at, left, "%8llu %8llu %8llu %s.txt\n", v[0] % 100000, v[1], v[2], name); break;
    case 3: /* df */
      if (r == 0) n += snprintf(at, left, "Filesystem     1K-blocks       Used  Available Use%% Mounted on\n");
      if (n > 0 && n < (int)size)
        n += snprintf(line + n, size - (size_t)n, "/dev/sd%c%llu %10llu %10llu %10llu %3llu%% /%s\n",
                      (char)('a' + v[3] % 4), 1 + v[3] % 9, v[0], v[1], v[2], v[3] % 100, name);
      break;
    case 4: /* dd: records and bytes */
      n += snprintf(at, left, "%llu+0 records in\n%llu+0 records out\n%llu bytes copied, %llu.%llu s\n", v[0], v[0],
                    v[1], v[2] % 100, v[3] % 1000); break;
    default: /* a table of counts: a name, then three right-aligned columns */
      n += snprintf(at, left, "%-12s %10llu %10llu %10llu\n", name, v[0], v[1], v[2]); break;
    }
  }
  return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/* out [n] = technical text drawn from seed: #define'd constants in decimal and hexadecimal, enumerations,
   tables, dated log lines, versions, compiler warnings with line numbers, addresses, and lines without
   numbers (comments, prototypes, structures) between; about 90 digits a KB, as the C headers denser than
   40 digits a KB that session 19 trained amid (91.6). Numbers in many formats and contexts that no
   question asks for: amid them a write gate learns to pass digits by that do not follow a needle's words
   (docs/long_context.md). statement_share (0 to 1) of its lines are sentences that state numbers
   (longctx_tech_statement; train --statements) and column_share of the others blocks of columns of long
   numbers (longctx_tech_columns; train --columns); at 0 no draw is spent on either, the text of before. */
static void longctx_technical_text(int *out, size_t n, uint64_t seed, double statement_share, double column_share) {
  uint64_t rng = longctx_mix64(seed, 0x54454348ull);
  char line[1024]; /* [len] one line or block */
  size_t i = 0;
  while (i < n) {
    int statement = statement_share > 0 && longctx_unit(longctx_next(&rng)) < statement_share;
    int columns = !statement && column_share > 0 && longctx_unit(longctx_next(&rng)) < column_share;
    size_t len = statement ? longctx_tech_statement(line, sizeof line, &rng)
                 : columns ? longctx_tech_columns(line, sizeof line, &rng)
                           : longctx_tech_line(line, sizeof line, &rng);
    for (size_t k = 0; k < len && i < n; k++) out[i++] = (unsigned char)line[k];
  }
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

/* Byte j of the filler before any word becomes a number. */
static int longctx_text_byte(const longctx_example *ex, size_t j) {
  if (!ex->source) return (unsigned char)longctx_filler[j % (sizeof longctx_filler - 1)];
  return ex->source[(ex->source_offset + j) % ex->source_len];
}

static int longctx_is_letter(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* Words longer than this stay words (it bounds the look back for a word's start). */
#define LONGCTX_NUMBER_MAX_LEN 12

/* Byte j of the filler (j < filler_len): the text's, or a digit when it is a letter of a word drawn to be
   a number (ex->number_words). A word is drawn by its first byte's place, each of its digits by its own,
   so any byte is found without reading the filler before it. */
static int longctx_filler_byte(const longctx_example *ex, size_t j) {
  int c = longctx_text_byte(ex, j);
  if (ex->number_words <= 0 || !longctx_is_letter(c)) return c;
  size_t start = j;
  while (start > 0 && j - start < LONGCTX_NUMBER_MAX_LEN && longctx_is_letter(longctx_text_byte(ex, start - 1)))
    start--;
  size_t end = j + 1; /* one past the word's last letter, or start + LONGCTX_NUMBER_MAX_LEN + 1 */
  while (end - start <= LONGCTX_NUMBER_MAX_LEN && end < ex->filler_len && longctx_is_letter(longctx_text_byte(ex, end)))
    end++;
  if (end - start > LONGCTX_NUMBER_MAX_LEN || (start > 0 && longctx_is_letter(longctx_text_byte(ex, start - 1))))
    return c; /* a very long word */
  double draw = longctx_unit(longctx_mix64(ex->number_key, (uint64_t)start));
  if (draw >= ex->number_words) return c;
  if (ex->decoy_numbers > 0 && ex->n_needles > 0) { /* a decoy: a needle's first digits */
    uint64_t h = longctx_mix64(ex->number_key ^ 0xDEC0DEC0ull, (uint64_t)start);
    double decoy_draw = longctx_unit(h);
    const char *number = ex->numbers[(h & 0xFF) % ex->n_needles];
    size_t prefix = 1 + (size_t)((h >> 8) & 0xFF) % 6, at = j - start;
    if (decoy_draw < ex->decoy_numbers && at < prefix && number[at]) return number[at];
  }
  return '0' + (int)(longctx_mix64(ex->number_key ^ 0xD161D161ull, (uint64_t)j) % 10);
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

/* A uniform draw in [0, 1) from the example's stream. */
static double longctx_uniform(uint64_t *rng) { return longctx_unit(longctx_next(rng)); }

/* The filler byte a needle at depth (a fraction of the filler) goes before: the start of the sentence
   holding byte depth * filler_len, looking back at most LONGCTX_SNAP_BACK bytes, else that byte. */
static size_t longctx_needle_place(const longctx_example *ex, double depth) {
  size_t target = (size_t)(depth * (double)ex->filler_len), at = target;
  while (at > 0 && target - at < LONGCTX_SNAP_BACK && !longctx_sentence_starts(ex, at)) at--;
  return longctx_sentence_starts(ex, at) ? at : target;
}

/* Places needles texts [n][128] (drawing order: 0 is the asked one) at depths [n] of ex's filler and
   stores them in the order they come in the context (a stable insertion sort: equal places keep the
   drawing order), with needle_at the asked one's first token. ex's filler and filler_len are set. */
static void longctx_layout_needles(longctx_example *ex, const char (*texts)[128], const double *depths, int n) {
  int order[LONGCTX_MAX_NEEDLES];
  size_t place[LONGCTX_MAX_NEEDLES];
  ex->n_needles = (size_t)n;
  for (int k = 0; k < n; k++) {
    place[k] = longctx_needle_place(ex, depths[k]);
    int j = k;
    while (j > 0 && place[order[j - 1]] > place[k]) order[j] = order[j - 1], j--;
    order[j] = k;
  }
  size_t before = 0; /* needle bytes before the current one */
  for (int j = 0; j < n; j++) {
    int k = order[j];
    ex->insert_at[j] = place[k];
    ex->others_len[j] = strlen(texts[k]);
    memcpy(ex->others[j], texts[k], sizeof ex->others[j]);
    if (k == 0) ex->needle_at = place[k] + before;
    before += ex->others_len[j];
  }
}

static int longctx_is_heldout_word(const char *word) {
  for (int j = 0; j < 16; j++)
    if (!strcmp(word, longctx_heldout_words[j])) return 1;
  return 0;
}

/* A word of source [source_len] into out [16] (LONGCTX_WORDS_TEXT): from a place drawn from word_rng, the
   first whole word (a run of letters with no letter either side, the source read cyclically) of
   LONGCTX_TEXT_WORD_MIN..MAX letters that is no held-out word, lowered. A word's chance is its share of
   the text's places, so frequent words come often. Returns -1 when the source has no such word. */
static int longctx_text_word(const int *source, size_t source_len, uint64_t *word_rng, char *out) {
  if (!source || source_len < 2) return -1;
  size_t start = (size_t)(longctx_next(word_rng) % source_len);
  for (size_t i = 0; i < source_len; i++) {
    size_t at = (start + i) % source_len;
    if (!longctx_is_letter(source[at]) || longctx_is_letter(source[(at + source_len - 1) % source_len])) continue;
    size_t len = 0;
    while (len <= LONGCTX_TEXT_WORD_MAX && len < source_len && longctx_is_letter(source[(at + len) % source_len])) {
      if (len < LONGCTX_TEXT_WORD_MAX) out[len] = (char)(source[(at + len) % source_len] | 0x20); /* lowered */
      len++;
    }
    if (len < LONGCTX_TEXT_WORD_MIN || len > LONGCTX_TEXT_WORD_MAX) continue;
    out[len] = 0;
    if (!longctx_is_heldout_word(out)) return 0;
  }
  return -1;
}

/* One key word into out [16]: drawn from rng out of the word set, or (LONGCTX_WORDS_RANDOM) 4 to 8 letters
   from word_rng, a stream of their own, or (LONGCTX_WORDS_TEXT) a word of source [source_len] placed by
   word_rng (random letters if the source has none: longctx_text_word); rng moves one draw either way, so
   the example's other draws (its number, filler, depths) are the same for every word set. */
static void longctx_key_word(int word_set, const int *source, size_t source_len, uint64_t *rng, uint64_t *word_rng,
                             char *out) {
  const char *const *words = word_set == LONGCTX_WORDS_HELDOUT ? longctx_heldout_words : longctx_words;
  uint64_t draw = longctx_next(rng);
  if (word_set == LONGCTX_WORDS_TRAIN || word_set == LONGCTX_WORDS_HELDOUT) {
    snprintf(out, 16, "%s", words[draw % 16]);
    return;
  }
  if (word_set == LONGCTX_WORDS_TEXT && longctx_text_word(source, source_len, word_rng, out) == 0) return;
  do {
    size_t len = 4 + (size_t)(longctx_next(word_rng) % 5);
    for (size_t i = 0; i < len; i++) out[i] = (char)('a' + (int)(longctx_next(word_rng) % 26));
    out[len] = 0;
  } while (longctx_is_heldout_word(out));
}

/* Sets up example ex of a kind, length (context + question) and depth in [0, 1] (a negative depth:
   drawn uniformly) from seed, with opt's needles, key words and filler. Prose (and passkey or copy with
   opt->filler_from_source) reads its filler from source [source_len] (token ids = bytes, at least 1).
   opt NULL: one needle, the training words, the kind's own filler. Returns 0, or -1 with a message in
   err [200] when the options or the length do not fit.
   The draws, in order: the asked needle's answer, (prose) its word, (source filler) the offset, (random)
   its depth; then per further needle its number, its word (redrawn until unlike the words before and, with
   alike_words, as long as the asked one's) and its depth. So one needle with the training words draws
   exactly what it always drew. alike_numbers draws nothing from these streams: the same example with
   only the further numbers' first digits replaced. */
static int longctx_example_init(longctx_example *ex, int kind, size_t length, double depth, uint64_t seed,
                                const int *source, size_t source_len, const longctx_options *opt, char *err) {
  static const longctx_options one_needle = {1, LONGCTX_WORDS_TRAIN, 0, 0.0, 0.0, 0, 0.0};
  if (!opt) opt = &one_needle;
  uint64_t rng = seed;
  memset(ex, 0, sizeof *ex);
  ex->number_words = opt->number_words;
  ex->decoy_numbers = kind == LONGCTX_PROSE ? opt->decoy_numbers : 0.0;
  ex->number_key = longctx_mix64(seed, 0x4E554D42455253ull); /* not drawn from rng: the draws below stay */
  ex->kind = kind;
  ex->length = length;
  ex->answer_len = longctx_answer_len(kind);
  int n = opt->needles;
  if (n < 1 || n > LONGCTX_MAX_NEEDLES || (n > 1 && kind != LONGCTX_PROSE)) {
    snprintf(err, 200, "%d needles: want 1 to %d, and more than one for the prose task only", n, LONGCTX_MAX_NEEDLES);
    return -1;
  }
  uint64_t word_rng = longctx_mix64(seed, 0x4B4559574F5244ull); /* random and text words' draws */
  for (size_t i = 0; i < ex->answer_len; i++)
    ex->answer[i] = (char)(longctx_first_symbol(kind) + (int)(longctx_next(&rng) % (uint64_t)longctx_alphabet(kind)));
  if (kind == LONGCTX_PROSE || opt->filler_from_source) {
    if (!source || source_len == 0) {
      snprintf(err, 200, "the %s task needs a source text for its filler", longctx_kind_name(kind));
      return -1;
    }
  }
  if (kind == LONGCTX_COPY) {
    snprintf(ex->needle, sizeof ex->needle, "Remember these letters: %s. ", ex->answer);
    snprintf(ex->question, sizeof ex->question, "Repeat the letters: ");
  } else if (kind == LONGCTX_PASSKEY) {
    snprintf(ex->needle, sizeof ex->needle, "The pass key is %s. Remember it. %s is the pass key. ", ex->answer,
             ex->answer);
    snprintf(ex->question, sizeof ex->question, "What is the pass key? The pass key is ");
  } else {
    longctx_key_word(opt->word_set, source, source_len, &rng, &word_rng, ex->words[0]);
    const char *word = ex->words[0];
    snprintf(ex->needle, sizeof ex->needle, "The special magic number for %s is %s. ", word, ex->answer);
    memcpy(ex->numbers[0], ex->answer, sizeof ex->numbers[0]);
    snprintf(ex->question, sizeof ex->question,
             "What is the special magic number for %s? The special magic number for %s is ", word, word);
  }
  if (kind == LONGCTX_PROSE || opt->filler_from_source) {
    ex->source = source;
    ex->source_len = source_len;
    ex->source_offset = (size_t)(longctx_next(&rng) % source_len);
  }
  if (depth < 0) depth = longctx_uniform(&rng);
  if (depth > 1) depth = 1;
  ex->depth = depth;
  ex->needle_len = strlen(ex->needle);
  ex->question_len = strlen(ex->question);
  /* the other needles: [n] texts and depths in drawing order (index 0: the asked one) */
  char texts[LONGCTX_MAX_NEEDLES][128];
  double depths[LONGCTX_MAX_NEEDLES];
  size_t total = ex->needle_len;
  memcpy(texts[0], ex->needle, sizeof texts[0]);
  depths[0] = depth;
  for (int k = 1; k < n; k++) {
    char *number = ex->numbers[k];
    for (size_t i = 0; i < ex->answer_len; i++) number[i] = (char)('0' + (int)(longctx_next(&rng) % 10));
    number[ex->answer_len] = 0;
    /* which further needles share a prefix, and how long each is, from streams of their own */
    uint64_t pick = longctx_mix64(seed, 0x414C494B4500ull + (uint64_t)k);
    uint64_t prefix_draw = longctx_mix64(seed, 0x50524546495800ull + (uint64_t)k);
    if (longctx_unit(pick) < opt->alike_numbers) {
      /* exactly the asked number's first 1 .. answer_len - 1 digits: they part after */
      size_t shared = 1 + (size_t)(prefix_draw % (ex->answer_len - 1));
      memcpy(number, ex->answer, shared);
      if (number[shared] == ex->answer[shared]) /* another of the 9 other digits, uniform */
        number[shared] = (char)('0' + (number[shared] - '0' + 1 + (int)((prefix_draw >> 32) % 9)) % 10);
    }
    int dup, tries = 0;
    do { /* a word unlike the ones before (n <= 8 of 16 words; a source of too few words: random letters) */
      int set = tries++ < 64 ? opt->word_set : LONGCTX_WORDS_RANDOM;
      longctx_key_word(set, source, source_len, &rng, &word_rng, ex->words[k]), dup = 0;
      for (int j = 0; j < k; j++) dup |= !strcmp(ex->words[j], ex->words[k]);
      if (opt->alike_words && strlen(ex->words[k]) != strlen(ex->words[0]))
        dup = 1; /* redrawn; after 64 draws of the set, random words of 4 to 8 letters: every set's lengths */
    } while (dup);
    snprintf(texts[k], sizeof texts[k], "The special magic number for %s is %s. ", ex->words[k], number);
    depths[k] = longctx_uniform(&rng);
    total += strlen(texts[k]);
  }
  if (length < longctx_min_length(kind) || length < ex->question_len + total + 16) {
    size_t need = ex->question_len + total + 16;
    if (need < longctx_min_length(kind)) need = longctx_min_length(kind);
    snprintf(err, 200, "a %s example of %d needle%s needs a length of at least %zu tokens (asked: %zu)",
             longctx_kind_name(kind), n, n > 1 ? "s" : "", need, length);
    return -1;
  }
  ex->context_len = length - ex->question_len;
  ex->filler_len = ex->context_len - total;
  longctx_layout_needles(ex, (const char(*)[128])texts, depths, n);
  return 0;
}

/* Token (byte) i of the example: context (filler with the needles inserted), question, then the answer
   (i < length + answer_len). */
static int longctx_token(const longctx_example *ex, size_t i) {
  if (i >= ex->context_len) {
    if (i < ex->length) return (unsigned char)ex->question[i - ex->context_len];
    return (unsigned char)ex->answer[i - ex->length];
  }
  size_t shift = 0; /* needle bytes before i */
  for (size_t k = 0; k < ex->n_needles; k++) {
    size_t at = ex->insert_at[k] + shift;
    if (i < at) break;
    if (i < at + ex->others_len[k]) return (unsigned char)ex->others[k][i - at];
    shift += ex->others_len[k];
  }
  return longctx_filler_byte(ex, i - shift);
}

/* mark [n]: 1 at the positions of the first n tokens that belong to a needle, 0 elsewhere. */
static void longctx_mark_needles(const longctx_example *ex, unsigned char *mark, size_t n) {
  memset(mark, 0, n);
  size_t shift = 0; /* needle bytes before needle k */
  for (size_t k = 0; k < ex->n_needles; k++) {
    size_t at = ex->insert_at[k] + shift;
    for (size_t j = 0; j < ex->others_len[k] && at + j < n; j++) mark[at + j] = 1;
    shift += ex->others_len[k];
  }
}

/* The first context byte after the last needle (0 without needles). */
static size_t longctx_needles_end(const longctx_example *ex) {
  size_t needle_bytes = 0;
  for (size_t k = 0; k < ex->n_needles; k++) needle_bytes += ex->others_len[k];
  return ex->n_needles ? ex->insert_at[ex->n_needles - 1] + needle_bytes : 0;
}

/* How many needles the context holds after the asked one (0: the asked needle is the last written). */
static size_t longctx_needles_after(const longctx_example *ex) {
  size_t needle_bytes = 0; /* of the needles before needle k in the context */
  for (size_t k = 0; k < ex->n_needles; k++) {
    if (ex->insert_at[k] + needle_bytes == ex->needle_at) return ex->n_needles - 1 - k;
    needle_bytes += ex->others_len[k];
  }
  return 0;
}

/* Prose with several needles: the questions for the needles not asked at the end (drawing order 1..n-1),
   each followed by its answer, as one text out [cap] of "What is the special magic number for W? The
   special magic number for W is N. " (the question's own words), for the end of the context, just before
   the example's question. answer_at [LONGCTX_MAX_NEEDLES] gets each answer's offset in out and
   *n_answers their count. Returns the text's length, or 0 (nothing asked) with fewer than two needles or
   when the text does not fit between the last needle and the question. A training row asks all its
   needles so: more answers in a long row, whose gradient is otherwise the few digits of one answer. */
static size_t longctx_other_questions(const longctx_example *ex, char *out, size_t cap, size_t *answer_at,
                                      size_t *n_answers) {
  size_t len = 0;
  *n_answers = 0;
  if (ex->kind != LONGCTX_PROSE || ex->n_needles < 2) return 0;
  for (size_t k = 1; k < ex->n_needles; k++) {
    int wrote = snprintf(out + len, cap - len, "What is the special magic number for %s? The special magic number for %s is ",
                         ex->words[k], ex->words[k]);
    if (wrote < 0 || (size_t)wrote + ex->answer_len + 2 >= cap - len) return *n_answers = 0, 0;
    len += (size_t)wrote;
    answer_at[(*n_answers)++] = len;
    len += (size_t)snprintf(out + len, cap - len, "%s. ", ex->numbers[k]);
  }
  if (len + longctx_needles_end(ex) > ex->context_len) return *n_answers = 0, 0;
  return len;
}

/* How many of the first len places two strings agree at (either ending ends the count). */
static size_t longctx_places_shared(const char *a, const char *b, size_t len) {
  size_t n = 0;
  for (size_t i = 0; i < len && a[i] && b[i]; i++) n += a[i] == b[i];
  return n;
}

/* Whose number a wrong answer to a prose example of several needles is: closer, place by place, to another
   needle's number than to the asked one's (a binding error; WHOLE when it is that number) or not (wrong digits
   of the right number; a tie counts here). */
enum { LONGCTX_ANSWER_RIGHT, LONGCTX_ANSWER_DIGITS, LONGCTX_ANSWER_BINDING, LONGCTX_ANSWER_WHOLE };

static int longctx_answer_kind(const longctx_example *ex, const char *answer) {
  if (!strcmp(answer, ex->answer)) return LONGCTX_ANSWER_RIGHT;
  size_t own = longctx_places_shared(answer, ex->answer, ex->answer_len), closest = 0;
  int whole = 0;
  for (size_t k = 1; k < ex->n_needles; k++) { /* 0: the asked needle */
    size_t shared = longctx_places_shared(answer, ex->numbers[k], ex->answer_len);
    if (shared > closest) closest = shared;
    whole |= !strcmp(answer, ex->numbers[k]);
  }
  if (closest <= own) return LONGCTX_ANSWER_DIGITS;
  return whole ? LONGCTX_ANSWER_WHOLE : LONGCTX_ANSWER_BINDING;
}

/* ---- questions for an earlier example's needle (train --ask-earlier) -------------------------------
   A row whose memory is carried from one example to the next (--doc-len) remembers the key words its
   earlier examples bound and the number each was bound to last; an example may then also ask for one of
   them, so that the loss rewards a memory that keeps a needle past the example that stated it. */
#define LONGCTX_EARLIER_MAX 32 /* bindings a row keeps: the most recent; older ones are never asked */

typedef struct longctx_binding {
  char word[16];   /* the key word */
  char number[24]; /* the number it was bound to last */
} longctx_binding;

typedef struct longctx_bindings {
  size_t n;                                   /* bindings held, oldest first */
  longctx_binding held[LONGCTX_EARLIER_MAX];  /* [n] distinct words */
  size_t examples, asked;                     /* the row's examples so far and those that asked an earlier one */
} longctx_bindings;

/* A new document: no binding held (the counts go on). */
static void longctx_bindings_clear(longctx_bindings *b) { b->n = 0; }

/* After an example: each of its needles binds its word to its number, replacing an earlier binding of
   that word (the value asked later is the last one stated); the oldest binding goes when full. */
static void longctx_bindings_add(longctx_bindings *b, const longctx_example *ex) {
  if (ex->kind != LONGCTX_PROSE) return;
  for (size_t k = 0; k < ex->n_needles; k++) {
    size_t j = 0;
    while (j < b->n && strcmp(b->held[j].word, ex->words[k]) != 0) j++;
    if (j == b->n && b->n == LONGCTX_EARLIER_MAX) j = 0; /* full: the oldest goes */
    if (j < b->n) {
      memmove(&b->held[j], &b->held[j + 1], (b->n - j - 1) * sizeof b->held[0]);
      b->n--;
    }
    snprintf(b->held[b->n].word, sizeof b->held[0].word, "%s", ex->words[k]);
    snprintf(b->held[b->n].number, sizeof b->held[0].number, "%s", ex->numbers[k]);
    b->n++;
  }
}

/* The question for one earlier binding whose word the example ex does not bind again, drawn uniformly by
   seed, with its answer: "What is the special magic number for W? The special magic number for W is N. "
   into out [cap], *answer_at the offset of N. Returns its length, 0 when no binding can be asked. */
static size_t longctx_earlier_question(const longctx_bindings *b, const longctx_example *ex, uint64_t seed, char *out,
                                       size_t cap, size_t *answer_at) {
  size_t askable[LONGCTX_EARLIER_MAX], n = 0;
  for (size_t j = 0; j < b->n; j++) {
    int again = 0;
    for (size_t k = 0; k < ex->n_needles; k++) again |= strcmp(b->held[j].word, ex->words[k]) == 0;
    if (!again) askable[n++] = j;
  }
  if (n == 0) return 0;
  const longctx_binding *h = &b->held[askable[longctx_mix64(seed, 0x45415246494552ull) % n]];
  int wrote = snprintf(out, cap, "What is the special magic number for %s? The special magic number for %s is ", h->word,
                       h->word);
  if (wrote < 0 || (size_t)wrote + strlen(h->number) + 3 > cap) return 0;
  *answer_at = (size_t)wrote;
  return (size_t)wrote + (size_t)snprintf(out + wrote, cap - (size_t)wrote, "%s. ", h->number);
}

/* out [n] = tokens from..from+n-1 of the example (see longctx_token). */
static void longctx_tokens(const longctx_example *ex, size_t from, int *out, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = longctx_token(ex, from + i);
}

#endif
