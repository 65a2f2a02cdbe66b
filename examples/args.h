/* args.h: the command-line reading shared by the example programs (./titans, ./mqar). The including
   program defines usage_fail(cmd, fmt, ...) before it: print the message and exit with status 2. */
#ifndef TITANS_EXAMPLES_ARGS_H
#define TITANS_EXAMPLES_ARGS_H
#include <errno.h>
#include <stdlib.h>

typedef struct args {
  int argc, i;
  char **argv;
  const char *cmd;
} args;

static const char *arg_value(args *a, const char *opt) {
  if (a->i + 1 >= a->argc) usage_fail(a->cmd, "%s needs a value", opt);
  return a->argv[++a->i];
}

static long arg_long(args *a, const char *opt, long lo, long hi) {
  const char *s = arg_value(a, opt);
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    usage_fail(a->cmd, "%s %s: want an integer in %ld..%ld", opt, s, lo, hi);
  return v;
}

static double arg_double(args *a, const char *opt, double lo, double hi) {
  const char *s = arg_value(a, opt);
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= lo && v <= hi))
    usage_fail(a->cmd, "%s %s: want a number in %g..%g", opt, s, lo, hi);
  return v;
}

#endif /* TITANS_EXAMPLES_ARGS_H */
