/* titans_mpi.h: data-parallel `./titans train` over MPI, for examples/titans.c (docs/mpi.md).

   Built with -DTITANS_MPI and mpicc (`make mpi`), `mpirun -np N ./titans-mpi train --batch B` trains the run
   `./titans train --batch B` does: rank r trains rows r B/N .. (r + 1) B/N - 1 of every step's global batch
   (drawn, as in one process, from the seed and the step alone, so the data order does not depend on N);
   the gradients, losses and target counts are summed over the ranks, so the clipped AdamW step is the same
   on every rank: by default overlapped with the backward (titans_trainer_set_reduce_overlap: an
   MPI_Iallreduce per range of the gradient as the backward finishes it, top layer first, MPI_Waitall
   before the step), with --reduce blocking after it (titans_trainer_set_reduce: one MPI_Allreduce). Rank 0
   alone prints, validates and writes the checkpoints; a stream's rows (--doc-len) live on the rank that
   trains them and are gathered to rank 0 for each checkpoint, so a run saved at N ranks resumes at any M that
   divides the batch. Rank 0 reads the checkpoints of --resume and sends their bytes to the others (no shared
   folder is needed).

   Without TITANS_MPI every function below is the one-process case (rank 0 of 1), so titans.c calls them
   unconditionally. The functions are named dist_*; titans.c's own helpers (fail, read_file, fnv1a) are
   used, so include this after them. */
#ifndef TITANS_EXAMPLE_MPI_H
#define TITANS_EXAMPLE_MPI_H

static int dist_rank = 0, dist_size = 1; /* this process's rank, the ranks of the run */
static char dist_error[320] = "";        /* the failed MPI call and MPI's words for it ("" when none failed) */

#ifdef TITANS_MPI
#include <mpi.h>

static double dist_reduce_seconds = 0; /* time the steps waited for the gradient all-reduce (rank 0's) */
static double dist_start_seconds = 0;  /* (overlapped) time the backward spent starting its ranges */
static double dist_wait_seconds = 0;   /* time spent waiting for the slowest rank before the wait */
static long dist_reduce_calls = 0;
static int dist_overlap = 0;           /* 1: the reduction overlaps the backward */

/* rc of an MPI call: 0 when it succeeded; else 1, with the call and MPI's message in dist_error (the first
   failure's: later ones are its consequences). MPI_COMM_WORLD returns its errors (dist_init) instead of
   aborting the job. */
static int dist_failed(int rc, const char *call) {
  if (rc == MPI_SUCCESS) return 0;
  if (!dist_error[0]) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    snprintf(dist_error, sizeof dist_error, "\nrank %d: %s failed: %s", dist_rank, call, msg);
  }
  return 1;
}

/* An MPI call outside training that must succeed: a clear error and exit (mpirun then ends the others). */
static void dist_must(int rc, const char *call) {
  if (dist_failed(rc, call)) fail("MPI: %s", dist_error + 1);
}

/* MPI_Init; the other ranks' stdout goes to /dev/null (their errors still reach stderr). */
static void dist_init(int *argc, char ***argv) {
  MPI_Init(argc, argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); /* failures reach dist_failed, not an abort */
  MPI_Comm_rank(MPI_COMM_WORLD, &dist_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &dist_size);
  if (dist_rank != 0 && !freopen("/dev/null", "w", stdout)) fail("rank %d: cannot redirect stdout", dist_rank);
}

static void dist_finish(void) { MPI_Finalize(); }

/* One value the same on every rank? (min and max over the ranks agree) */
static int dist_same_u64(uint64_t v) {
  uint64_t lo = v, hi = v;
  dist_must(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  dist_must(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return lo == hi;
}

/* The largest value over the ranks (a stop signal any rank received stops every rank). */
static int dist_max_int(int v) {
  dist_must(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return v;
}

#define DIST_PIECE ((size_t)1 << 30) /* floats an MPI int count holds, with room */

/* The barrier before a step's wait: apart, the wait for the slowest rank (rank 0 validates alone). */
static void dist_wait_slowest(double *t) {
  MPI_Barrier(MPI_COMM_WORLD); /* an error here shows in the reduction that follows */
  double t1 = MPI_Wtime();
  dist_wait_seconds += t1 - *t;
  *t = t1;
}

/* The reduce function of titans_trainer_set_reduce (--reduce blocking): sums over the ranks after the
   backward, in pieces MPI's int counts hold. */
static int dist_reduce(float *grads, size_t n, double *stats, void *user) {
  (void)user;
  double t0 = MPI_Wtime();
  dist_wait_slowest(&t0);
  for (size_t i = 0; i < n; i += DIST_PIECE) {
    size_t k = n - i < DIST_PIECE ? n - i : DIST_PIECE;
    if (dist_failed(MPI_Allreduce(MPI_IN_PLACE, grads + i, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                    "MPI_Allreduce of the gradient"))
      return 1;
  }
  if (dist_failed(MPI_Allreduce(MPI_IN_PLACE, stats, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
                  "MPI_Allreduce of the loss"))
    return 1;
  dist_reduce_seconds += MPI_Wtime() - t0;
  dist_reduce_calls++;
  return 0;
}

/* The overlapped reduction's requests of this step: one per piece of each range, and the stats'. */
static MPI_Request *dist_requests = NULL; /* [dist_n_requests] of [dist_cap_requests] */
static int dist_n_requests = 0, dist_cap_requests = 0;

static MPI_Request *dist_new_request(void) {
  if (dist_n_requests == dist_cap_requests) {
    dist_cap_requests = dist_cap_requests ? 2 * dist_cap_requests : 64;
    dist_requests = (MPI_Request *)realloc(dist_requests, (size_t)dist_cap_requests * sizeof(MPI_Request));
    if (!dist_requests) fail("out of memory");
  }
  dist_requests[dist_n_requests] = MPI_REQUEST_NULL;
  return &dist_requests[dist_n_requests++];
}

/* The start function of titans_trainer_set_reduce_overlap: the range, final, starts its sum over the ranks. */
static int dist_start(float *range, size_t n, size_t offset, void *user) {
  (void)offset, (void)user;
  double t0 = MPI_Wtime();
  int bad = 0;
  for (size_t i = 0; i < n && !bad; i += DIST_PIECE) {
    size_t k = n - i < DIST_PIECE ? n - i : DIST_PIECE;
    bad = dist_failed(MPI_Iallreduce(MPI_IN_PLACE, range + i, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                     dist_new_request()),
                      "MPI_Iallreduce of the gradient");
  }
  /* OpenMPI moves a non-blocking collective on only inside MPI calls: one here advances the earlier ranges
     (the layers above) before this rank goes back to the backward */
  int done = 0;
  if (!bad) bad = dist_failed(MPI_Testall(dist_n_requests, dist_requests, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
  dist_start_seconds += MPI_Wtime() - t0;
  return bad;
}

/* The finish function: the loss and count summed, then every range's sum waited for. */
static int dist_finish_ranges(float *grads, size_t n, double *stats, void *user) {
  (void)grads, (void)n, (void)user;
  double t0 = MPI_Wtime();
  dist_wait_slowest(&t0);
  int bad = dist_failed(MPI_Iallreduce(MPI_IN_PLACE, stats, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD,
                                       dist_new_request()),
                        "MPI_Iallreduce of the loss");
  bad |= dist_failed(MPI_Waitall(dist_n_requests, dist_requests, MPI_STATUSES_IGNORE), "MPI_Waitall");
  dist_n_requests = 0;
  dist_reduce_seconds += MPI_Wtime() - t0;
  dist_reduce_calls++;
  return bad;
}

/* At the end of training (rank 0 prints): the reduction's share of the steps. */
static void dist_report(double train_time) {
  if (dist_size == 1) return;
  double calls = (double)(dist_reduce_calls ? dist_reduce_calls : 1);
  if (!dist_overlap) {
    printf("data-parallel: %d ranks; the gradient all-reduce took %.3f s of %.3f s of training steps (%.1f%%, %.2f ms "
           "a step), waiting for the slowest rank %.3f s\n",
           dist_size, dist_reduce_seconds, train_time, 100 * dist_reduce_seconds / train_time,
           1e3 * dist_reduce_seconds / calls, dist_wait_seconds);
    return;
  }
  double exposed = dist_reduce_seconds + dist_start_seconds; /* what the backward did not hide */
  printf("data-parallel: %d ranks; the gradient all-reduce, overlapped with the backward, held the steps up %.3f s "
         "of %.3f s of training steps (%.1f%%, %.2f ms a step: %.2f ms starting ranges, %.2f ms waiting for them), "
         "waiting for the slowest rank %.3f s\n",
         dist_size, exposed, train_time, 100 * exposed / train_time, 1e3 * exposed / calls,
         1e3 * dist_start_seconds / calls, 1e3 * dist_reduce_seconds / calls, dist_wait_seconds);
}

/* Rank 0 reads the file, every rank parses its bytes (r must be freed, and *bytes with free). */
static void dist_read_file(titans_st_reader *r, unsigned char **bytes, const char *path) {
  unsigned long long n = 0;
  char *buf = NULL;
  if (dist_rank == 0) {
    size_t size = 0;
    if (!(buf = read_file(path, &size, (size_t)1 << 40))) fail("cannot read %s: %s", path, strerror(errno));
    n = size;
  }
  dist_must(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD), "MPI_Bcast");
  if (dist_rank != 0) buf = (char *)xmalloc(n ? (size_t)n : 1);
  for (unsigned long long i = 0; i < n; i += 1u << 30) {
    unsigned long long k = n - i < (1u << 30) ? n - i : 1u << 30;
    dist_must(MPI_Bcast(buf + i, (int)k, MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
  }
  if (titans_st_reader_parse(r, buf, (size_t)n) != TITANS_OK) fail("%s: %s", path, titans_st_reader_error(r));
  *bytes = (unsigned char *)buf;
}

static int dist_trainer_load(titans_trainer *t, titans_model *m, titans_tokenizer *tok, char **meta, const char *path) {
  titans_st_reader r;
  unsigned char *bytes;
  dist_read_file(&r, &bytes, path);
  int rc = titans_trainer_read(t, m, tok, meta, &r);
  titans_st_reader_free(&r);
  free(bytes);
  return rc;
}

#define DIST_MAX_LAYERS 1024
#define DIST_MAX_ARRAYS (5 + 2 * DIST_MAX_LAYERS)

/* The per-row arrays of a stream of B rows: base, bytes of one row, blocks of B rows (one per layer). */
typedef struct dist_rows {
  unsigned char *p;
  size_t row, blocks;
} dist_rows;

static size_t dist_stream_rows(titans_stream *s, dist_rows *a) {
  const titans_config *c = &s->model->cfg;
  size_t n = 0, L = (size_t)c->n_layers, d = (size_t)c->d;
  if (L > DIST_MAX_LAYERS) fail("--doc-len on several ranks: at most %d layers", DIST_MAX_LAYERS);
  a[n++] = (dist_rows){s->fresh, 1, 1};
  a[n++] = (dist_rows){(unsigned char *)s->attn_tail_rows, sizeof(size_t), 1};
  a[n++] = (dist_rows){(unsigned char *)s->row_position, sizeof(long long), 1};
  if (s->attn_tail) a[n++] = (dist_rows){(unsigned char *)s->attn_tail, (size_t)c->window * d * sizeof(float), L};
  if (s->bank) a[n++] = (dist_rows){(unsigned char *)s->bank, (size_t)c->lm2_slots * d * sizeof(float), L};
  for (size_t l = 0; s->mem && l < L;
       l++) { /* the state's slab: w_chunk, w, s_chunk, s [B, H, hs], then 4 tails [B, K_c - 1, d_m] */
    const titans_mem_state *st = &s->mem[l];
    size_t K = (size_t)st->cfg.conv_width, dm = (size_t)st->cfg.heads * (size_t)st->cfg.head_dim;
    a[n++] = (dist_rows){(unsigned char *)st->w_chunk, (size_t)st->cfg.heads * st->head_size * sizeof(float), 4};
    if (K > 1) a[n++] = (dist_rows){(unsigned char *)st->tail_q, (K - 1) * dm * sizeof(float), 4};
  }
  return n;
}

/* full (B rows, rank 0) gets every rank's rows of local (B / N rows): collective. */
static void dist_stream_gather(titans_stream *full, titans_stream *local) {
  static dist_rows la[DIST_MAX_ARRAYS], fa[DIST_MAX_ARRAYS];
  size_t n = dist_stream_rows(local, la), b = local->batch;
  if (dist_rank == 0) dist_stream_rows(full, fa);
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < la[i].blocks; k++) {
      size_t bytes = b * la[i].row; /* this rank's rows of block k */
      dist_must(MPI_Gather(la[i].p + k * bytes, (int)bytes, MPI_BYTE,
                           dist_rank == 0 ? fa[i].p + k * bytes * (size_t)dist_size : NULL, (int)bytes, MPI_BYTE, 0,
                           MPI_COMM_WORLD),
                "MPI_Gather");
    }
  if (dist_rank != 0) return;
  full->position = local->position; /* the same on every rank */
  full->ended = local->ended;
  for (size_t l = 0; local->mem && l < (size_t)local->model->cfg.n_layers; l++)
    full->mem[l].position = local->mem[l].position;
}

/* local (B / N rows) takes this rank's rows of full (B rows, on every rank). */
static void dist_stream_scatter(titans_stream *local, titans_stream *full) {
  static dist_rows la[DIST_MAX_ARRAYS], fa[DIST_MAX_ARRAYS];
  size_t n = dist_stream_rows(local, la), b = local->batch;
  dist_stream_rows(full, fa);
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < la[i].blocks; k++)
      memcpy(la[i].p + k * b * la[i].row, fa[i].p + (k * (size_t)dist_size + (size_t)dist_rank) * b * la[i].row,
             b * la[i].row);
  local->position = full->position;
  local->ended = full->ended;
  for (size_t l = 0; local->mem && l < (size_t)local->model->cfg.n_layers; l++)
    local->mem[l].position = full->mem[l].position;
}

/* --resume of a stream: rank 0 reads the file of all B rows, each rank keeps its own. */
static int dist_stream_load(titans_stream *local, const char *path) {
  titans_st_reader r;
  unsigned char *bytes;
  titans_stream full;
  dist_read_file(&r, &bytes, path);
  if (titans_stream_init(&full, local->model, local->batch * (size_t)dist_size) != TITANS_OK) fail("%s", full.error);
  int rc = titans_stream_read(&full, &r);
  if (rc) snprintf(local->error, sizeof local->error, "%s", full.error);
  else dist_stream_scatter(local, &full);
  titans_stream_free(&full);
  titans_st_reader_free(&r);
  free(bytes);
  return rc;
}

/* The streams to checkpoint: on rank 0 new streams of the whole batch holding every rank's rows (the
   others get NULL); collective. One process: the streams themselves. */
static titans_stream *dist_streams_gather(titans_stream *local, size_t n) {
  if (dist_size == 1) return local;
  titans_stream *full = NULL;
  if (dist_rank == 0) full = (titans_stream *)xmalloc((n ? n : 1) * sizeof *full);
  for (size_t i = 0; i < n; i++) {
    if (dist_rank == 0 && titans_stream_init(&full[i], local[i].model, local[i].batch * (size_t)dist_size) != TITANS_OK)
      fail("%s", full[i].error);
    dist_stream_gather(dist_rank == 0 ? &full[i] : NULL, &local[i]);
  }
  return full;
}

static void dist_streams_release(titans_stream *full, titans_stream *local, size_t n) {
  if (full == local || !full) return;
  for (size_t i = 0; i < n; i++) titans_stream_free(&full[i]);
  free(full);
}

/* Every rank runs the same command on the same data with the same weights, and every step's batch splits
   evenly: refused with an error otherwise. batches [n]: the global batch of each stage. */
static void dist_check(int argc, char **argv, uint64_t data_hash, const size_t *batches, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < argc; i++) h = (h ^ fnv1a(argv[i], strlen(argv[i]) + 1)) * 1099511628211ull;
  if (!dist_same_u64(h))
    fail("rank %d: the ranks were started with different options (give every rank the same command)", dist_rank);
  if (!dist_same_u64(data_hash))
    fail("rank %d: the ranks read different --data (every rank must read the same text)", dist_rank);
  for (size_t i = 0; i < n; i++)
    if (batches[i] % (size_t)dist_size)
      fail("a batch of %zu rows does not split over %d ranks: give a --batch (and --lens stages) that %d divides",
           batches[i], dist_size, dist_size);
}

/* The ranks hold the same weights and moments (checked at the start and at each checkpoint). */
static void dist_check_weights(const titans_trainer *t) {
  size_t n = t->model->n_floats * sizeof(float);
  uint64_t h =
      fnv1a(t->model->params, n) ^ (fnv1a(t->adam_m, n) * 31u) ^ (fnv1a(t->adam_v, n) * 131u) ^ (uint64_t)t->step;
  if (!dist_same_u64(h))
    fail("rank %d: the ranks' weights differ at step %ld (a rank's MPI reduced differently?)", dist_rank, t->step);
}

/* blocking: the gradient summed after the backward (--reduce blocking), else during it */
static void dist_attach(titans_trainer *t, int blocking) {
  if (dist_size == 1) return;
  dist_check_weights(t);
  dist_overlap = !blocking;
  if (blocking) titans_trainer_set_reduce(t, dist_reduce, NULL);
  else if (titans_trainer_set_reduce_overlap(t, dist_start, dist_finish_ranges, NULL) != TITANS_OK)
    fail("%s", t->error);
  printf("data-parallel: %d ranks (MPI), each trains 1/%d of every batch; %s reduction\n", dist_size, dist_size,
         blocking ? "blocking" : "overlapped");
}

#else /* one process */

static void dist_init(int *argc, char ***argv) { (void)argc, (void)argv; }
static void dist_finish(void) {}
static int dist_max_int(int v) { return v; }
static int dist_trainer_load(titans_trainer *t, titans_model *m, titans_tokenizer *tok, char **meta, const char *path) {
  return titans_trainer_load(t, m, tok, meta, path);
}
static int dist_stream_load(titans_stream *local, const char *path) { return titans_stream_load(local, path); }
static titans_stream *dist_streams_gather(titans_stream *local, size_t n) { (void)n; return local; }
static void dist_streams_release(titans_stream *full, titans_stream *local, size_t n) {
  (void)full, (void)local, (void)n;
}
static void dist_check(int argc, char **argv, uint64_t data_hash, const size_t *batches, size_t n) {
  (void)argc, (void)argv, (void)data_hash, (void)batches, (void)n;
}
static void dist_check_weights(const titans_trainer *t) { (void)t; }
static void dist_attach(titans_trainer *t, int blocking) { (void)t, (void)blocking; }
static void dist_report(double train_time) { (void)train_time; }

#endif /* TITANS_MPI */
#endif /* TITANS_EXAMPLE_MPI_H */
