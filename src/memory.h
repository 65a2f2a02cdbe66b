/* ================================================================================================
   4. Neural long-term memory layer (SPEC section 1)
   ================================================================================================
   Per head h, the memory is an MLP M(z; W) with weights W = (W_0 .. W_{L-1}), W_i [n_{i+1}, n_i],
   n_0 = n_L = d_h, inner widths n_hid = e * d_h. Each token t writes (k_t, v_t) by one step of gradient
   descent with momentum S and weight decay on l_t(W) = ||M(k_t; W) - v_t||^2, the gradient taken at the
   weights of its chunk's start, then reads y_t = M(q_t; W_t). See docs/memory.md for the chunked form
   and the derivation of the backward pass.

   Objects:
     titans_mem_config   sizes and options (SPEC 1.1)
     titans_mem_weights  named pointers into a parameter slab the caller owns (SPEC 1.2)
     titans_mem_state    the streaming state of B sequences (SPEC 1.7): memory weights, momentum,
                         position and conv tails; save/restore/copy
     titans_mem_ctx      activations one training forward saves for its backward
   A layer's call sequence for training:
     titans_mem_state_reset(&st, &cfg, &w);                 (W = w0, S = 0, position 0)
     titans_mem_forward(&cfg, &w, &st, out, x, T, &ctx);    (saves what the backward needs)
     titans_mem_backward(&cfg, &w, &grad, dx, dout, x, &ctx, 1);
   and for inference the same forward with ctx = NULL, in any split of the sequence. */

#define TITANS_MEM_MAX_DEPTH 8

typedef struct titans_mem_config {
  int d;           /* model width (input and output of the layer) */
  int heads;       /* H, memory heads */
  int head_dim;    /* d_h; d_m = heads * head_dim */
  int depth;       /* L_M >= 1 memory MLP layers (1 = matrix memory) */
  int hidden_mult; /* e: inner width n_hid = e * d_h (depth >= 2) */
  int chunk;       /* b, tokens per chunk of the inner mini-batch */
  int conv_width;  /* K_c, causal depthwise conv width; 0 = no conv */
  int residual;    /* 1: M(z) = z + MLP(z) */
  float theta_max; /* upper bound of the inner learning rate */
} titans_mem_config;

/* Defaults of SPEC 1.1 for width d: H = 4, d_h = d / 4, L_M = 2, e = 4, b = 16, K_c = 4, no residual,
   theta_max = 0.02. The inner learning rate is bounded so because the inner loss is a sum over d_h
   components and a chunk applies b gradients taken at one point: with random inputs, theta = 0.1
   diverges within a few hundred tokens for (d_h, b) = (16, 16) and (64, 16), and theta = 0.05 for
   (16, 64), while theta <= 0.02 stayed bounded in all of them (docs/memory.md). */
TITANSDEF titans_mem_config titans_mem_config_default(int d);
/* TITANS_OK, or TITANS_ERR_ARG with a message in err (TITANS_ERR_MSG_SIZE bytes, may be NULL). */
TITANSDEF int titans_mem_config_check(const titans_mem_config *cfg, char *err);

typedef struct titans_mem_weights {
  float *wq, *wk, *wv;             /* [d_m, d] projections */
  float *conv_q, *conv_k, *conv_v; /* [d_m, K_c] causal depthwise convs (NULL when K_c = 0) */
  float *lr_w, *mom_w, *decay_w;   /* [H, d] gates: inner learning rate, momentum, forgetting */
  float *lr_b, *mom_b, *decay_b;   /* [H] */
  float *w0[TITANS_MEM_MAX_DEPTH]; /* w0[i]: [H, n_{i+1}, n_i] each head's initial memory weights */
  float *out_norm;                 /* [d_h] RMSNorm gain on retrieved vectors (shared by heads) */
  float *wg;                       /* [d_m, d] output gate */
  float *wo;                       /* [d, d_m] output projection */
} titans_mem_weights;

/* One named parameter of a layout: name (e.g. "layers.0.mem.w0.1"), shape, offset into the slab. */
typedef enum titans_param_kind {
  TITANS_PARAM_MATRIX = 0, /* gets weight decay */
  TITANS_PARAM_GAIN = 1,   /* norm gains: no decay */
  TITANS_PARAM_BIAS = 2,   /* no decay */
  TITANS_PARAM_TOKENS = 3  /* persistent tokens, memory banks: no decay */
} titans_param_kind;

typedef struct titans_param {
  char name[96];
  int ndim;
  size_t shape[4];
  size_t size;   /* product of the shape */
  size_t offset; /* in floats from the start of the slab */
  int kind;      /* titans_param_kind */
} titans_param;

/* Number of floats of the layer's parameters. */
TITANSDEF size_t titans_mem_param_count(const titans_mem_config *cfg);
/* Points w's fields into slab (titans_mem_param_count floats) in the canonical order. */
TITANSDEF void titans_mem_weights_bind(titans_mem_weights *w, const titans_mem_config *cfg, float *slab);
/* Describes the parameters: fills up to max entries of list (may be NULL) with names prefix + name,
   offsets starting at base_offset; returns the number of parameters. */
TITANSDEF size_t titans_mem_param_list(titans_param *list, size_t max, const titans_mem_config *cfg,
                                       const char *prefix, size_t base_offset);
/* Initialisation of SPEC 5: normal(0, 0.02) matrices, wo scaled by 1/sqrt(2 n_layers), w0 normal(0,
   1/sqrt(fan_in)), conv taps identity (last tap 1) plus normal(0, 0.02), gains 1, gate biases for
   theta = theta_max / 2, eta ~ 0.9, alpha ~ 0.02. */
TITANSDEF void titans_mem_weights_init(const titans_mem_weights *w, const titans_mem_config *cfg, titans_rng *rng,
                                       int n_layers);

typedef struct titans_mem_state {
  titans_mem_config cfg;
  size_t batch;       /* B rows */
  size_t head_size;   /* floats of one head's memory weights: sum_i n_{i+1} n_i */
  long long position; /* tokens consumed (the same for every row) */
  float *w_chunk;     /* [B, H, head_size] weights at the current chunk's start (inner gradients) */
  float *w;           /* [B, H, head_size] running weights W_t */
  float *s_chunk;     /* [B, H, head_size] momentum at the current chunk's start (kept for save/load) */
  float *s;           /* [B, H, head_size] running momentum S_t */
  float *tail_q, *tail_k, *tail_v; /* [B, K_c - 1, d_m] last projected inputs of the update stream */
  float *tail_rq;     /* [B, K_c - 1, d_m] last projected queries of the retrieval stream (MAC) */
  float *scratch;     /* per-call work space, grown on demand */
  size_t scratch_size;
  char error[TITANS_ERR_MSG_SIZE];
} titans_mem_state;

TITANSDEF int titans_mem_state_init(titans_mem_state *st, const titans_mem_config *cfg, size_t batch);
TITANSDEF void titans_mem_state_free(titans_mem_state *st);
/* W = w0 for every row, S = 0, position 0, conv tails zero. */
TITANSDEF void titans_mem_state_reset(titans_mem_state *st, const titans_mem_weights *w);
/* dst (initialised with the same config and batch) becomes a copy of src: a fork. */
TITANSDEF int titans_mem_state_copy(titans_mem_state *dst, const titans_mem_state *src);
/* Serialisation to a flat float buffer: titans_mem_state_floats() floats, position included. */
TITANSDEF size_t titans_mem_state_floats(const titans_mem_state *st);
TITANSDEF void titans_mem_state_save(const titans_mem_state *st, float *buf);
TITANSDEF int titans_mem_state_load(titans_mem_state *st, const float *buf, size_t count);

/* Activations saved by a training forward. Owns its buffers; reusable across calls of the same or
   smaller size. */
typedef struct titans_mem_ctx {
  size_t batch, T, nchunks, cap_bt, cap_states; /* sizes of the last forward, capacities */
  long long start_position;
  int retrieval;        /* 1 when saved by titans_mem_retrieve */
  float *proj;          /* [3, B, T, d_m] wq x, wk x, wv x (conv inputs) */
  float *conv;          /* [3, B, T, d_m] conv outputs (SiLU inputs); = proj when K_c = 0 */
  float *act;           /* [3, B, T, d_m] SiLU outputs (L2Norm inputs for q, k; v itself) */
  float *qk;            /* [2, B, T, d_m] L2-normalised q, k */
  float *rnorm;         /* [2, B, T, H] L2Norm reciprocal norms */
  float *gates;         /* [3, B, T, H] theta, eta, alpha */
  float *y;             /* [B, T, d_m] retrieved memory outputs */
  float *yn;            /* [B, T, d_m] RMSNorm(y) */
  float *rstd;          /* [B, T, H] RMSNorm reciprocal std */
  float *g;             /* [B, T, d_m] wg x (SiLU input of the output gate) */
  float *gated;         /* [B, T, d_m] yn * SiLU(g) (input of wo) */
  float *states;        /* [B, H, nchunks + 1, 2, head_size] W, S at every chunk start and at the end */
  float *tails;         /* [4, B, K_c - 1, d_m] conv tails at the forward's start (q, k, v, rq) */
  /* Gradient with respect to the final state (input to the backward, zero unless the caller adds to
     it) and with respect to the initial state (output of the backward). */
  float *dstate_final;  /* [B, H, 2, head_size] d W_T, d S_T */
  float *dstate_init;   /* [B, H, 2, head_size] d W_0, d S_0 of the forward's start */
  /* Likewise for the conv tails (streams q, k, v, rq), so chained calls get exact gradients. */
  float *dtails_final;  /* [4, B, K_c - 1, d_m] input, zeroed by the forward */
  float *dtails_init;   /* [4, B, K_c - 1, d_m] output */
  char error[TITANS_ERR_MSG_SIZE];
} titans_mem_ctx;

TITANSDEF void titans_mem_ctx_init(titans_mem_ctx *ctx);
TITANSDEF void titans_mem_ctx_free(titans_mem_ctx *ctx);

/* The memory layer over T new tokens of each of the state's B rows.
   out [B, T, d]: o_t of SPEC 1.5; x [B, T, d]: the layer input. Advances the state by T tokens.
   ctx: NULL for inference; otherwise saves activations for titans_mem_backward (the state's position
   must then be a multiple of the chunk size). Returns TITANS_OK or an error (message in st->error). */
TITANSDEF int titans_mem_forward(const titans_mem_config *cfg, const titans_mem_weights *w, titans_mem_state *st,
                                 float *out, const float *x, size_t T, titans_mem_ctx *ctx);

/* Retrieval only (SPEC 1.5, MAC step 1): out [B, T, d] from M(q_t; W) with the state's current weights;
   changes no memory weights (only the retrieval stream's conv tail moves on). */
TITANSDEF int titans_mem_retrieve(const titans_mem_config *cfg, const titans_mem_weights *w, titans_mem_state *st,
                                  float *out, const float *x, size_t T, titans_mem_ctx *ctx);

/* Backward of the forward (or retrieve) that filled ctx. Accumulates parameter gradients into grad
   (a titans_mem_weights over a gradient slab) and the input gradient into dx [B, T, d]; dout [B, T, d].
   Adds ctx->dstate_final (gradient of the final state, zeroed by the forward) into the recurrence and
   writes ctx->dstate_init. init_from_w0: 1 when the forward started from titans_mem_state_reset, so
   d W_0 flows into grad->w0 (summed over rows). */
TITANSDEF int titans_mem_backward(const titans_mem_config *cfg, const titans_mem_weights *w, const titans_mem_weights *grad,
                                  float *dx, const float *dout, const float *x, titans_mem_ctx *ctx, int init_from_w0);

/* Direct associative-memory access for a host program (no projections, gates given):
   write n (key, value) pairs into head `head` of row `row`: keys, values [n, d_h]; gates theta, eta,
   alpha [n] (NULL eta/alpha = 0, i.e. plain SGD without momentum or forgetting). */
TITANSDEF int titans_mem_write(titans_mem_state *st, size_t row, size_t head, const float *keys, const float *values,
                               const float *theta, const float *eta, const float *alpha, size_t n);
/* read: out [n, d_h] = M(queries[i]; W) with the current weights of (row, head). */
TITANSDEF int titans_mem_read(titans_mem_state *st, size_t row, size_t head, float *out, const float *queries, size_t n);
