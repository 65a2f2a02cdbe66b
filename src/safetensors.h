/* ---- 6. Safetensors files (declarations) ------------------------------------------------------

   The checkpoint format of SPEC section 6, as Python's safetensors writes it:
       [8 bytes: N, little-endian u64] [N bytes: JSON header] [data: raw little-endian tensor bytes]
   The header maps each tensor name to {"dtype":"F32","shape":[...],"data_offsets":[begin,end]}
   (offsets count from the end of the header) and may hold "__metadata__": {"key":"value",...}
   whose values are all strings.

   Reading: titans_st_reader_parse (a memory buffer) or titans_st_reader_load (a path) validates the
   whole file against its real size before returning TITANS_OK; a malformed, truncated, oversized or
   hostile file returns TITANS_ERR_FORMAT (TITANS_ERR_IO, TITANS_ERR_NOMEM) with a message in
   reader.error. It accepts exactly what Python's safetensors accepts, less: tensors of more than
   TITANS_ST_MAX_DIMS dimensions, names longer than TITANS_ST_MAX_NAME bytes, a "\u0000" in a
   string, a key repeated inside one JSON object (serde keeps the last one; we refuse), a
   "__metadata__" that is neither an object of strings nor null. Unknown fields inside a tensor's entry
   are checked to be JSON and ignored, as serde does.

       titans_st_reader r;
       if (titans_st_reader_load(&r, "model.safetensors") != TITANS_OK) puts(r.error);
       size_t shape[2] = {64, 16};
       float w[64 * 16];
       if (titans_st_read_f32(&r, "layers.0.attn.wq", w, 2, shape) != TITANS_OK) puts(r.error);
       const char *cfg = titans_st_meta(&r, "config");    // NULL when absent
       titans_st_reader_free(&r);

   Writing: collect F32 tensors (borrowed, not copied) and string metadata in a titans_st_writer, then
   serialise to memory or save to a path atomically ("<path>.tmp", then rename). The output is
   deterministic and byte-identical to what Python's safetensors writes for the same F32 tensors and
   (for at most one key, whose order Python does not fix) metadata: tensors sorted by name, data
   contiguous in that order, header padded with spaces to a multiple of 8 bytes. */

#define TITANS_ST_MAX_DIMS 8                 /* dimensions of one tensor */
#define TITANS_ST_MAX_NAME 4096              /* bytes of a tensor name (UTF-8, without the NUL) */
#define TITANS_ST_MAX_HEADER 100000000u      /* bytes of the JSON header (Python's limit) */

/* Element types, with Python's names (titans_st_dtype_name). F4 is 4 bits, F6_* 6 bits a element: a
   tensor of those must hold a whole number of bytes. */
typedef enum titans_st_dtype {
  TITANS_ST_BOOL, TITANS_ST_F4, TITANS_ST_F6_E2M3, TITANS_ST_F6_E3M2, TITANS_ST_U8, TITANS_ST_I8,
  TITANS_ST_F8_E5M2, TITANS_ST_F8_E4M3, TITANS_ST_F8_E8M0, TITANS_ST_F8_E4M3FNUZ, TITANS_ST_F8_E5M2FNUZ,
  TITANS_ST_I16, TITANS_ST_U16, TITANS_ST_F16, TITANS_ST_BF16, TITANS_ST_I32, TITANS_ST_U32, TITANS_ST_F32,
  TITANS_ST_C64, TITANS_ST_F64, TITANS_ST_I64, TITANS_ST_U64,
  TITANS_ST_DTYPE_COUNT
} titans_st_dtype;

/* "F32", "BF16", ...; "?" for a value out of range. */
TITANSDEF const char *titans_st_dtype_name(titans_st_dtype dtype);
/* Bits of one element (32 for F32); 0 for a value out of range. */
TITANSDEF size_t titans_st_dtype_bits(titans_st_dtype dtype);

/* One tensor of a parsed file. Everything points into the reader; valid until titans_st_reader_free. */
typedef struct titans_st_tensor {
  const char *name;                  /* NUL-terminated UTF-8 */
  titans_st_dtype dtype;
  size_t ndim;                       /* 0..TITANS_ST_MAX_DIMS; 0 is a scalar (one element) */
  size_t shape[TITANS_ST_MAX_DIMS];  /* [ndim], the rest 0 */
  size_t numel;                      /* product of shape */
  size_t nbytes;                     /* numel * bits / 8 = data_offsets end - begin */
  size_t offset;                     /* data_offsets begin, from the start of the data region */
  const unsigned char *data;         /* [nbytes] little-endian, inside the file's bytes; not aligned */
} titans_st_tensor;

/* A parsed file. Read the fields, change none of them. */
typedef struct titans_st_reader {
  const unsigned char *bytes;   /* [size] the whole file: the caller's buffer, or owned (below) */
  size_t size;
  unsigned char *owned;         /* [size] the file's bytes when read from a path, else NULL */
  size_t header_len;            /* N */
  titans_st_tensor *tensors;    /* [n_tensors] sorted by name (strcmp: bytes, i.e. code points) */
  size_t n_tensors;
  const char **meta;            /* [n_meta][2] key, value, sorted by key */
  size_t n_meta;
  char *strings;                /* [header_len + 1] arena of the decoded names, keys and values */
  char error[TITANS_ERR_MSG_SIZE]; /* message of the last error, "" when none */
} titans_st_reader;

/* Parse a file held in memory: buf [size] is NOT copied and must outlive the reader. Sets every field
   of *r (an earlier content is not freed: free it first). On failure r holds no allocation and
   r->error says why; titans_st_reader_free(r) is safe either way. Allocates O(header length), never
   more than the buffer's size implies. Returns TITANS_OK, TITANS_ERR_FORMAT or TITANS_ERR_NOMEM. */
TITANSDEF int titans_st_reader_parse(titans_st_reader *r, const void *buf, size_t size);
#ifndef TITANS_NO_STDIO
/* Read the whole file at path into memory (the reader owns it) and parse it as above. Returns
   TITANS_OK, TITANS_ERR_IO (cannot open or read), TITANS_ERR_NOMEM or TITANS_ERR_FORMAT. */
TITANSDEF int titans_st_reader_load(titans_st_reader *r, const char *path);
#endif
/* Release what the reader owns and leave it empty (n_tensors = 0). */
TITANSDEF void titans_st_reader_free(titans_st_reader *r);
TITANSDEF const char *titans_st_reader_error(const titans_st_reader *r);

/* The tensor called name, or NULL (binary search, O(log n)). */
TITANSDEF const titans_st_tensor *titans_st_find(const titans_st_reader *r, const char *name);
/* Tensor i in name order, i < r->n_tensors; NULL when out of range. */
TITANSDEF const titans_st_tensor *titans_st_tensor_at(const titans_st_reader *r, size_t i);
/* Copy tensor name into out [prod(shape)] as floats, after checking that it exists (else
   TITANS_ERR_FORMAT), is F32 (else TITANS_ERR_FORMAT) and has exactly the shape [ndim] (else
   TITANS_ERR_FORMAT, the message naming the tensor and both shapes). ndim > TITANS_ST_MAX_DIMS or a
   NULL argument: TITANS_ERR_ARG. Bit-exact (NaN payloads included); out is untouched on error. */
TITANSDEF int titans_st_read_f32(titans_st_reader *r, const char *name, float *out, size_t ndim,
                                 const size_t *shape);
/* The metadata value of key, or NULL. Values are NUL-terminated UTF-8 owned by the reader. */
TITANSDEF const char *titans_st_meta(const titans_st_reader *r, const char *key);
/* Metadata pair i in key order (i < r->n_meta): returns 1 and sets *key, *value; 0 when out of range. */
TITANSDEF int titans_st_meta_at(const titans_st_reader *r, size_t i, const char **key, const char **value);

/* ---- writer ---- */
typedef struct titans__st_wtensor {
  char *name;                        /* owned copy */
  const float *data;                 /* [numel] borrowed from the caller */
  size_t ndim;
  size_t shape[TITANS_ST_MAX_DIMS];  /* [ndim] */
  size_t numel;
} titans__st_wtensor;

typedef struct titans__st_wmeta {
  char *key, *value;                 /* owned copies */
} titans__st_wmeta;

typedef struct titans_st_writer {
  titans__st_wtensor *tensors;       /* [cap_tensors], n_tensors used */
  size_t n_tensors, cap_tensors;
  titans__st_wmeta *meta;            /* [cap_meta], n_meta used */
  size_t n_meta, cap_meta;
  char error[TITANS_ERR_MSG_SIZE];   /* message of the last error, "" when none */
} titans_st_writer;

/* An empty writer; titans_st_writer_free releases it. */
TITANSDEF void titans_st_writer_init(titans_st_writer *w);
TITANSDEF void titans_st_writer_free(titans_st_writer *w);
TITANSDEF const char *titans_st_writer_error(const titans_st_writer *w);
/* Add an F32 tensor. name is copied (valid UTF-8, at most TITANS_ST_MAX_NAME bytes, not
   "__metadata__", not already added); shape [ndim] is copied (ndim <= TITANS_ST_MAX_DIMS, ndim = 0 is
   a scalar); data [prod(shape)] is BORROWED: it must stay valid and unchanged until the last
   serialise/save call. data may be NULL only when prod(shape) = 0. TITANS_ERR_ARG or
   TITANS_ERR_NOMEM on failure, with nothing added. */
TITANSDEF int titans_st_writer_add_f32(titans_st_writer *w, const char *name, const float *data, size_t ndim,
                                       const size_t *shape);
/* Add a metadata pair; both strings are copied and must be valid UTF-8; a key may be given once.
   TITANS_ERR_ARG or TITANS_ERR_NOMEM on failure, with nothing added. */
TITANSDEF int titans_st_writer_add_meta(titans_st_writer *w, const char *key, const char *value);
/* Serialise into a new buffer *out [*size], allocated with titans_alloc_bytes: free it with
   titans_free. On failure *out = NULL, *size = 0. TITANS_ERR_ARG (header over TITANS_ST_MAX_HEADER)
   or TITANS_ERR_NOMEM. */
TITANSDEF int titans_st_writer_to_memory(titans_st_writer *w, unsigned char **out, size_t *size);
#ifndef TITANS_NO_STDIO
/* Write the file atomically: to "<path>.tmp" (streamed: only the header is buffered), flushed and
   closed with every error checked, then renamed over path. On failure the temporary file is removed,
   an existing file at path is left as it was, and TITANS_ERR_IO (or _ARG, _NOMEM) is returned. Not
   fsync'ed: atomic against a crash of the program, not against a power loss. */
TITANSDEF int titans_st_writer_save(titans_st_writer *w, const char *path);
#endif
