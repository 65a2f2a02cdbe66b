/* ---- 5. Attention (declarations) -------------------------------------------------------------- */

/* Kernels of the short-term memory (SPEC section 2): RoPE, one masked multi-head attention forward and
   backward that covers every mask the blocks need, and a bounded KV cache for inference.

   Layout. A buffer of H heads of width d_a is [rows, H * d_a]: head h of row t is the slice
   x[t * H * d_a + h * d_a .. + d_a). Positions are int64_t (long is 32 bits on some platforms).

   The mask. Keys are a prefix of P always-visible rows (persistent memory tokens, SPEC 2) followed by
   Tk positioned rows with positions kpos[0..Tk). The query with position qpos[i] sees
       - every prefix row, and
       - positioned key j iff  kpos[j] <= qpos[i]  and  (window == 0 or kpos[j] > qpos[i] - window).
   This one rule gives every attention of the blocks:
       - full causal self-attention:   P = 0, kpos = qpos = [0..T), window = 0;
       - sliding window w (SWA):       the same with window = w (a query at t sees (t - w, t]);
       - persistent tokens (MAG, MAL): P = N_p, keys = [persist k || K] (no RoPE on the prefix rows);
       - MAC (SPEC 3.1), one segment of C tokens, keys = [persist || Hm || X], queries from X:
         P = N_p, Tk = 2C, kpos = [0..C-1, 0..C-1], qpos = [0..C-1], window = 0. Hm_j and X_j both
         carry position j, so the query at i sees Hm_j and X_j for j <= i and no later retrieved token.

   A block's attention (per sequence): q = x wq^T, k = [persist; x] wk^T, v likewise (titans_gemm);
   titans_rope_forward on q and on the Tk positioned rows of k; titans_attention_forward; out wo^T.
   Backward: titans_attention_backward, then titans_rope_backward on dq and on the positioned rows
   of dk; the prefix rows of dk, dv are the persistent tokens' gradients (through wk, wv).

   No order of kpos is required. The kernels split kpos (and qpos in the backward) into maximal
   non-decreasing runs: with at most TITANS_ATTN_MAX_RUNS runs (one for causal/SWA, two for MAC) each
   query finds its visible keys by binary search in every run, so SWA costs O(window) per query;
   with more runs they scan every key. Keys are always visited in index order, prefix first.

   Numerics. Scores are q.k / sqrt(d_a) in float; the softmax is computed online, tile by tile, with the
   running maximum subtracted (flash-attention style), so no [Tq, Tk] score matrix is ever formed and
   the forward allocates nothing. A tile is the prefix in chunks of TITANS_ATTN_TILE rows, then runs of
   consecutive keys whose positions share floor(pos / TITANS_ATTN_TILE): for increasing positions a
   query's tiles depend only on the keys it sees, so the batched forward and the KV cache give the same
   bits. exp is a private polynomial (< 1.4 ulp) that vectorises. A query that sees no key (not possible
   in the blocks) outputs zeros and has lse = -INFINITY. The forward saves the log-sum-exp of each
   (row, head); the backward recomputes the scores from it.

   Speed (one AVX-512 core, d_a = 64, causal T = 2048): forward and backward each about 30-40 GFLOP/s
   (4 and 10 flops per visible (query, key) pair and head dimension). */

#define TITANS_ROPE_BASE 10000.0 /* SPEC 0: RoPE base */
#define TITANS_ATTN_TILE 64      /* keys per online-softmax tile */
#define TITANS_ATTN_MAX_RUNS 16  /* sorted position runs searched by bisection; more runs => scan */

/* RoPE in place on x [T, H * d_a], rotate-half convention: within each head, the pair
   (x[i], x[i + d_a/2]) for i < d_a/2 is rotated by the angle pos[t] * BASE^(-2i / d_a):
       x[i]       <- x[i] cos - x[i + d_a/2] sin
       x[i + d_a/2] <- x[i] sin + x[i + d_a/2] cos
   Angle, sin, cos and the rotation are computed in double (positions in the millions stay exact) and
   rounded once to float. d_a must be even (TITANS_ERR_ARG otherwise). Threads over rows. */
TITANSDEF int titans_rope_forward(float *x,            /* [T, H * d_a] in place */
                                  const int64_t *pos,  /* [T] absolute positions */
                                  size_t T, size_t H, size_t d_a);

/* Backward of titans_rope_forward: the rotation is orthogonal, so the gradient with respect to the
   input is the rotation by the negative angle of the gradient with respect to the output. Applied in
   place: dx holds dL/d(rotated x) on entry and dL/d(x) on return (an overwrite, not an accumulation,
   as the forward overwrites x). */
TITANSDEF int titans_rope_backward(float *dx,           /* [T, H * d_a] in place */
                                   const int64_t *pos,  /* [T] */
                                   size_t T, size_t H, size_t d_a);

/* Masked multi-head attention forward (mask: see above). For each query row i and head h:
       out[i, h] = sum_j softmax_j(q[i, h] . k[j, h] / sqrt(d_a)) v[j, h]   over the visible keys j
       lse[i, h] = log sum_j exp(q[i, h] . k[j, h] / sqrt(d_a))            (-INFINITY if none visible)
   lse may be NULL (inference). out must not overlap q, k or v. Allocates nothing. Threads over heads x tiles of query rows; every
   output element is computed by one thread in a fixed order (bit-identical for any thread count).
   Returns TITANS_ERR_ARG for d_a == 0, H == 0, window < 0, sizes that overflow, or a NULL buffer that
   is needed. */
TITANSDEF int titans_attention_forward(float *out,           /* [Tq, H * d_a] */
                                       float *lse,           /* [Tq, H] or NULL */
                                       const float *q,       /* [Tq, H * d_a] */
                                       const float *k,       /* [P + Tk, H * d_a] prefix first */
                                       const float *v,       /* [P + Tk, H * d_a] */
                                       const int64_t *qpos,  /* [Tq] */
                                       const int64_t *kpos,  /* [Tk] of the rows after the prefix */
                                       size_t Tq, size_t P, size_t Tk, size_t H, size_t d_a,
                                       int64_t window);      /* 0 = no window */

/* Backward of titans_attention_forward. ACCUMULATES: dq += dL/dq, dk += dL/dk, dv += dL/dv (prefix
   rows included). Needs the forward's out and lse; recomputes the scores. The gradients must not
   overlap the inputs. Deterministic: every
   gradient element is summed in one fixed order (dq over keys in index order, dk and dv over queries
   in index order) whatever the thread count. It threads over heads in one fused pass (query tiles in
   order, each adding its dq and its dk, dv terms), or, when there are at least three times as many
   threads as heads, in two passes (dq over heads x query tiles, then dk, dv over heads x key tiles)
   that cost about 1.8 times the work but give bit-identical results. The two-pass scheme allocates
   Tq * H floats; if that fails it falls back to the fused pass, so the call never fails for lack of
   memory. */
TITANSDEF int titans_attention_backward(float *dq,           /* [Tq, H * d_a] += */
                                        float *dk,           /* [P + Tk, H * d_a] += */
                                        float *dv,           /* [P + Tk, H * d_a] += */
                                        const float *dout,   /* [Tq, H * d_a] */
                                        const float *q,      /* [Tq, H * d_a] */
                                        const float *k,      /* [P + Tk, H * d_a] */
                                        const float *v,      /* [P + Tk, H * d_a] */
                                        const float *out,    /* [Tq, H * d_a] from the forward */
                                        const float *lse,    /* [Tq, H] from the forward */
                                        const int64_t *qpos, /* [Tq] */
                                        const int64_t *kpos, /* [Tk] */
                                        size_t Tq, size_t P, size_t Tk, size_t H, size_t d_a,
                                        int64_t window);

/* A bounded KV cache for token-by-token inference: the P prefix rows (persistent tokens) and a ring
   of at most `capacity` positioned keys/values. Appending beyond the capacity overwrites the oldest
   row, so memory stays bounded however long the stream runs. Queries use the mask rule above with
   the cache's window. Capacity to choose: SWA (window w): w; full attention: the longest context;
   MAC: 2C (the Hm and X rows of one segment; reset at each segment boundary).
   Keys are stored as given: apply RoPE to them before titans_kv_cache_append. Rows must be appended
   in non-decreasing position order for the ring to keep the rows a later query can see. */
typedef struct titans_kv_cache {
  float *k;         /* [P + capacity, H * d_a]: prefix rows, then the ring slots */
  float *v;         /* [P + capacity, H * d_a] */
  int64_t *pos;     /* [capacity] position of each ring slot */
  size_t P;         /* prefix rows */
  size_t capacity;  /* ring slots */
  size_t H, d_a;    /* heads, head width */
  int64_t window;   /* mask window, 0 = none */
  size_t count;     /* valid ring rows, <= capacity */
  size_t next;      /* ring slot the next append writes */
  char error[256];  /* message of the last error (TITANS__ERRLEN) */
} titans_kv_cache;

/* Allocate a cache (prefix rows zeroed, ring empty). On failure returns TITANS_ERR_ARG (capacity, H or
   d_a zero, window < 0) or TITANS_ERR_NOMEM and leaves a cache that titans_kv_cache_free accepts. */
TITANSDEF int titans_kv_cache_init(titans_kv_cache *cache, size_t P, size_t capacity, size_t H,
                                   size_t d_a, int64_t window);
TITANSDEF void titans_kv_cache_free(titans_kv_cache *cache);
/* Copy the persistent keys/values (projected, no RoPE) into the prefix rows. */
TITANSDEF void titans_kv_cache_set_prefix(titans_kv_cache *cache,
                                          const float *k_prefix,  /* [P, H * d_a] */
                                          const float *v_prefix); /* [P, H * d_a] */
/* Forget every positioned row; the prefix stays. */
TITANSDEF void titans_kv_cache_reset(titans_kv_cache *cache);
/* Fork: dst becomes an independent copy of src. dst must be an initialised cache of the same shape
   (P, capacity, H, d_a; TITANS_ERR_ARG otherwise); nothing is allocated. */
TITANSDEF int titans_kv_cache_copy(titans_kv_cache *dst, const titans_kv_cache *src);
/* Fork into a new cache: dst (uninitialised) is allocated as a copy of src. */
TITANSDEF int titans_kv_cache_clone(titans_kv_cache *dst, const titans_kv_cache *src);
/* Append n rows (n may exceed the capacity: then only the last `capacity` rows stay). */
TITANSDEF int titans_kv_cache_append(titans_kv_cache *cache,
                                     const float *k,      /* [n, H * d_a], RoPE applied */
                                     const float *v,      /* [n, H * d_a] */
                                     const int64_t *pos,  /* [n] */
                                     size_t n);
/* Attention of one query over the cache (prefix, then ring rows oldest first): the result of
   titans_attention_forward for the same visible keys, bit-identical when the cache holds them in the
   batched order with increasing positions (SWA, full attention). lse may be NULL. Threads over heads
   when the cache is large. */
TITANSDEF int titans_kv_cache_attend(titans_kv_cache *cache,
                                     float *out,         /* [H * d_a] */
                                     float *lse,         /* [H] or NULL */
                                     const float *q,     /* [H * d_a], RoPE applied */
                                     int64_t qpos);
/* The message of the cache's last error ("" if none). */
TITANSDEF const char *titans_kv_cache_error(const titans_kv_cache *cache);
