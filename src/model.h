/* ================================================================================================
   7. Models, training and inference sessions (SPEC sections 3 and 5)
   ================================================================================================
   A language model: tok_emb [V, d] -> n_layers blocks of one kind -> RMSNorm(norm_f) -> logits
   (tied: tok_emb h; untied: lm_head h). Every block is pre-norm with residuals:
       h = x + Mixer(RMSNorm(x; norm1)),   out = h + FFN(RMSNorm(h; norm2)),  FFN = SwiGLU
   Mixers: ATTN (full causal attention), SWA (sliding window), MAC, MAG, MAL, LMM (SPEC 3.1 - 3.4);
   LM2 is reserved for a later version.

   Use:
       titans_config cfg = titans_config_default(TITANS_BLOCK_MAC, 256, 128, 4);
       titans_model model;   titans_model_init(&model, &cfg);  titans_model_init_weights(&model, 1234);
       titans_trainer tr;    titans_trainer_init(&tr, &model, NULL);
       titans_train_step(&tr, tokens, 1, B, T, &loss);        // tokens [1, B, T + 1]
       titans_session s;     titans_session_init(&s, &model);
       titans_session_feed(&s, prompt, n, logits);            // logits [V] after the last token
       int next = titans_sample(logits, cfg.vocab, 0.8f, 40, 0.95f, &rng);
*/

typedef enum titans_block_kind {
  TITANS_BLOCK_ATTN = 0, /* baseline: full causal attention */
  TITANS_BLOCK_SWA = 1,  /* baseline: sliding-window attention */
  TITANS_BLOCK_MAC = 2,  /* memory as context */
  TITANS_BLOCK_MAG = 3,  /* memory as gating */
  TITANS_BLOCK_MAL = 4,  /* memory as layer */
  TITANS_BLOCK_LMM = 5,  /* memory only */
  TITANS_BLOCK_LM2 = 6,  /* reserved (SPEC 4): not implemented in this version */
  TITANS_BLOCK_COUNT = 7
} titans_block_kind;

/* "attn", "swa", "mac", "mag", "mal", "lmm", "lm2"; NULL for an unknown kind. */
TITANSDEF const char *titans_block_name(int kind);
/* The kind of a name above, or -1. */
TITANSDEF int titans_block_from_name(const char *name);

typedef struct titans_config {
  int block;        /* titans_block_kind */
  int vocab;        /* V */
  int d;            /* model width */
  int n_layers;     /* blocks */
  int attn_heads;   /* H_a; d_a = d / H_a (even, for RoPE) */
  int ffn_hidden;   /* d_ff of the SwiGLU FFN */
  int window;       /* sliding window w (SWA, MAG, MAL) */
  int segment;      /* C, MAC segment length (a multiple of mem.chunk) */
  int n_persist;    /* N_p persistent tokens per layer (any kind with attention; 0 = none) */
  int tied;         /* 1: logits use tok_emb; 0: a separate lm_head */
  int max_context;  /* ATTN sessions keep at most this many keys (then the oldest are dropped) */
  titans_mem_config mem; /* the memory layer (MAC, MAG, MAL, LMM); mem.d == d */
} titans_config;

/* Documented defaults for a kind, vocabulary and width: H_a = max(1, d / 64), d_ff = 4 d rounded to a
   multiple of 8 (2/3 of that for the SwiGLU's three matrices would also be reasonable; we keep 4 d as
   simple), w = 64, C = 64, N_p = 4 for the memory kinds and 0 for the baselines, tied embeddings,
   max_context = 4096, mem = titans_mem_config_default(d) with b = 16. */
TITANSDEF titans_config titans_config_default(int block, int vocab, int d, int n_layers);
/* TITANS_OK or TITANS_ERR_ARG with a message in err (may be NULL). */
TITANSDEF int titans_config_check(const titans_config *cfg, char *err);

typedef struct titans_layer {
  float *norm1, *norm2;                         /* [d] */
  float *attn_wq, *attn_wk, *attn_wv, *attn_wo; /* [d, d] (NULL for LMM) */
  float *persist;                               /* [N_p, d] (NULL when N_p = 0) */
  float *gate_norm_y, *gate_norm_m;             /* [d] (MAC, MAG) */
  titans_mem_weights mem;                       /* (MAC, MAG, MAL, LMM) */
  float *ffn_w1, *ffn_w3;                       /* [d_ff, d] */
  float *ffn_w2;                                /* [d, d_ff] */
} titans_layer;

typedef struct titans_weights {
  float *tok_emb;       /* [V, d] */
  float *norm_f;        /* [d] */
  float *lm_head;       /* [V, d], NULL when tied */
  titans_layer *layers; /* [n_layers] */
} titans_weights;

typedef struct titans_model {
  titans_config cfg;
  size_t n_floats;       /* floats of all parameters */
  float *params;         /* [n_floats] the parameter slab */
  titans_param *plist;   /* [n_params] names (SPEC 6), shapes, offsets into params */
  size_t n_params;
  titans_weights w;      /* named pointers into params */
  char error[TITANS_ERR_MSG_SIZE];
} titans_model;

/* Allocates a model of cfg with all parameters zero. */
TITANSDEF int titans_model_init(titans_model *m, const titans_config *cfg);
/* SPEC 5 initialisation from a seed (deterministic). */
TITANSDEF void titans_model_init_weights(titans_model *m, uint64_t seed);
TITANSDEF void titans_model_free(titans_model *m);
/* Points w (with its own layers array of n_layers entries, caller-provided) into any slab of the model's
   layout, e.g. a gradient slab. */
TITANSDEF void titans_weights_bind(titans_weights *w, titans_layer *layers, const titans_config *cfg, float *slab);

/* ---- training ---- */
typedef struct titans_train_config {
  float lr;            /* peak learning rate (4e-4) */
  float min_lr;        /* floor of the cosine (lr / 10) */
  long warmup_steps;   /* linear warm-up (100) */
  long total_steps;    /* length of the cosine schedule (10000) */
  float weight_decay;  /* on matrices only (0.1) */
  float beta1, beta2;  /* 0.9, 0.95 */
  float eps;           /* 1e-8 */
  float clip;          /* global gradient-norm clip (1.0; 0 = none) */
} titans_train_config;

TITANSDEF titans_train_config titans_train_config_default(void);
/* The learning rate of step s (0-based): linear warm-up, then cosine down to min_lr. */
TITANSDEF float titans_lr_at(const titans_train_config *tc, long step);

struct titans__fwd; /* saved activations (private) */

typedef struct titans_trainer {
  titans_model *model;
  titans_train_config tc;
  float *grads;        /* [n_floats] gradient slab (same layout as the parameters) */
  float *adam_m;       /* [n_floats] first moments */
  float *adam_v;       /* [n_floats] second moments */
  long step;           /* optimizer steps taken */
  float last_grad_norm, last_lr;
  struct titans__fwd *fwd; /* activations of the current micro-batch */
  char error[TITANS_ERR_MSG_SIZE];
} titans_trainer;

/* tc may be NULL for the defaults. */
TITANSDEF int titans_trainer_init(titans_trainer *t, titans_model *m, const titans_train_config *tc);
TITANSDEF void titans_trainer_free(titans_trainer *t);
/* One optimizer step: forward and backward of n_micro micro-batches of B sequences (gradients
   accumulated and averaged), global-norm clipping, AdamW at titans_lr_at(step). tokens
   [n_micro, B, T + 1]: positions 0..T-1 are inputs, 1..T their next-token targets. *loss is the mean
   loss. A non-finite loss or gradient returns TITANS_ERR_NONFINITE naming the step, and the weights
   and optimizer state stay as they were before the call. */
TITANSDEF int titans_train_step(titans_trainer *t, const int *tokens, size_t n_micro, size_t B, size_t T, float *loss);
/* Mean loss of tokens [B, T + 1] without gradients. */
TITANSDEF int titans_eval_loss(titans_trainer *t, const int *tokens, size_t B, size_t T, float *loss);
/* Lower level: forward and backward of one batch, ADDING scale * gradient into t->grads. *loss is the
   mean loss of the batch. */
TITANSDEF int titans_forward_backward(titans_trainer *t, const int *tokens, size_t B, size_t T, float scale, float *loss);
/* Logits of a whole batch in one call (the reference the sessions are tested against): logits
   [B, T, V] for inputs tokens [B, T]. */
TITANSDEF int titans_forward_logits(titans_trainer *t, const int *tokens, size_t B, size_t T, float *logits);

/* ---- inference sessions ---- */
struct titans__session_layer; /* per-layer state (private) */

typedef struct titans_session {
  const titans_model *model;   /* shared, read-only: several sessions may run at once on threads */
  long long position;          /* tokens fed */
  float position_code[3];      /* the position as three exact 21-bit pieces (for titans_session_state) */
  struct titans__session_layer *layers;
  float *work;                 /* scratch of one token */
  size_t work_size;
  char error[TITANS_ERR_MSG_SIZE];
} titans_session;

TITANSDEF int titans_session_init(titans_session *s, const titans_model *m);
TITANSDEF void titans_session_free(titans_session *s);
/* Back to the state of a new session (position 0, memories at w0, caches empty). */
TITANSDEF void titans_session_reset(titans_session *s);
/* dst (initialised on the same model) becomes an independent copy of src: a fork. */
TITANSDEF int titans_session_copy(titans_session *dst, const titans_session *src);
/* Feed n tokens one after another; logits [V] (may be NULL) receives the logits after the last. */
TITANSDEF int titans_session_feed(titans_session *s, const int *tokens, size_t n, float *logits);
/* The session's state as named float tensors (memory weights and momentum, conv tails, KV caches,
   position) for saving: fills up to max entries, returns the count. Pointers stay valid until the
   session is freed; writing into them and calling titans_session_state_loaded restores a state. */
typedef struct titans_tensor_ref {
  char name[96];
  float *data;
  size_t count;
} titans_tensor_ref;
TITANSDEF size_t titans_session_state(titans_session *s, titans_tensor_ref *list, size_t max);
/* Validates a state written into the tensors of titans_session_state (finite, consistent). */
TITANSDEF int titans_session_state_loaded(titans_session *s);

/* ---- sampling ---- */
/* A token from logits [V]: temperature <= 0 is greedy (argmax); otherwise softmax(logits / T), then
   keep the top_k most likely (0 = all), then the smallest set whose probability reaches top_p
   (>= 1 = all), and draw with rng. */
TITANSDEF int titans_sample(const float *logits, size_t V, float temperature, int top_k, float top_p, titans_rng *rng);
