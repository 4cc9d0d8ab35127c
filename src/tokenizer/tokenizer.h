/* Tokenizers built from a GGUF vocabulary (tokenizer.ggml.*): byte-level BPE (model "gpt2") with the
 * pre-tokenizers real files name (qwen35, qwen2, llama-bpe, gpt2, default, ...) and SentencePiece-style
 * BPE (model "llama") with byte fallback. Added/special tokens are matched before pre-tokenization.
 * A loaded tokenizer is immutable and owns copies of everything it needs (the gguf_ctx may be freed
 * afterwards); every function taking a const tokenizer is safe to call from several threads at once. */
#ifndef VLLMC_TOKENIZER_H
#define VLLMC_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/common.h"
#include "gguf/gguf.h"

struct tokenizer;

/* Token attributes, as in tokenizer.ggml.token_type. */
enum tokenizer_token_type {
    TOKENIZER_TOKEN_UNDEFINED = 0,
    TOKENIZER_TOKEN_NORMAL = 1,
    TOKENIZER_TOKEN_UNKNOWN = 2,
    TOKENIZER_TOKEN_CONTROL = 3,
    TOKENIZER_TOKEN_USER_DEFINED = 4,
    TOKENIZER_TOKEN_UNUSED = 5,
    TOKENIZER_TOKEN_BYTE = 6,
};

enum tokenizer_model {
    TOKENIZER_MODEL_BPE = 1, /* "gpt2": byte-level BPE, merges by rank */
    TOKENIZER_MODEL_SPM = 2, /* "llama": SentencePiece BPE by score, byte fallback <0xXX> */
};

/* Encode flags. */
#define TOKENIZER_ENCODE_PARSE_SPECIAL 1u /* text of control/user-defined tokens becomes that token */
#define TOKENIZER_ENCODE_ADD_SPECIAL 2u   /* add BOS/EOS where the vocabulary asks for it
                                            (tokenizer.ggml.add_bos_token / add_eos_token) */

/* Decode flags. */
#define TOKENIZER_DECODE_SKIP_SPECIAL 1u  /* control tokens (BOS, <|im_end|>, ...) produce no text */
#define TOKENIZER_DECODE_REPLACE_INVALID 2u /* stream: bytes that can never form valid UTF-8 become U+FFFD */

/* Load from a parsed GGUF (keys tokenizer.ggml.*). Errors: VLLMC_ERR_UNSUPPORTED for an unknown
 * tokenizer model or pre-tokenizer name (the message names it), VLLMC_ERR_CORRUPT for missing or
 * inconsistent arrays. *out is owned by the caller (tokenizer_destroy). */
vllmc_status tokenizer_load_gguf(const struct gguf_ctx *ctx, struct tokenizer **out);
void tokenizer_destroy(struct tokenizer *t); /* accepts NULL */

/* In-memory construction (tests, fuzzers, tools): the same inputs as the GGUF keys.
 * tokens[i] is token i's GGUF text (byte-level BPE: GPT-2 byte-to-unicode form; SPM: "▁" for space).
 * types and scores may be NULL (all NORMAL / all 0); merges ("left right") may be NULL for SPM.
 * pre is the tokenizer.ggml.pre name (NULL = "default"). bos/eos < 0 mean none. */
struct tokenizer_spec {
    const char *model;          /* "gpt2" or "llama" */
    const char *pre;            /* "qwen35", "qwen2", "llama-bpe", "gpt2", "default", ... */
    uint32_t n_tokens;
    const struct gguf_str *tokens;
    const int32_t *types;
    const float *scores;
    uint32_t n_merges;
    const struct gguf_str *merges;
    int32_t bos_id, eos_id, eot_id, unk_id, pad_id;
    bool add_bos, add_eos;
    int add_space_prefix;       /* SPM only: -1 = vocabulary default (true) */
};
vllmc_status tokenizer_create(const struct tokenizer_spec *spec, struct tokenizer **out);

/* Vocabulary facts. Ids are int32; -1 means "none". */
uint32_t tokenizer_n_vocab(const struct tokenizer *t);
enum tokenizer_model tokenizer_model_type(const struct tokenizer *t);
const char *tokenizer_pre_name(const struct tokenizer *t);
int32_t tokenizer_bos(const struct tokenizer *t);
int32_t tokenizer_eos(const struct tokenizer *t);
bool tokenizer_add_bos(const struct tokenizer *t);
/* End-of-generation: EOS, EOT and the other end markers llama.cpp treats as such
 * (<|im_end|>, <|endoftext|>, <|eot_id|>, <|end|>, fim pad/rep/sep, ...). */
bool tokenizer_is_eog(const struct tokenizer *t, int32_t id);
bool tokenizer_is_control(const struct tokenizer *t, int32_t id);
enum tokenizer_token_type tokenizer_token_type(const struct tokenizer *t, int32_t id);
/* Exact lookup of a token's GGUF text; -1 if absent. */
int32_t tokenizer_find(const struct tokenizer *t, const char *text, size_t len);
/* The GGUF text of a token (not NUL-terminated); NULL for an id out of range. */
const char *tokenizer_token_text(const struct tokenizer *t, int32_t id, size_t *len);

/* Upper bound of the number of ids encode can produce for text_len bytes. */
size_t tokenizer_bound(const struct tokenizer *t, size_t text_len);

/* Encode text into ids. Any bytes are accepted: byte-level BPE reads each malformed UTF-8 byte as U+FFFD, as
 * llama.cpp does (so decode gives EF BF BD there); SPM keeps such bytes through <0xXX> byte tokens.
 * Special-token text is matched before pre-tokenization, longest token text first (llama.cpp's order):
 * control/unknown tokens only with TOKENIZER_ENCODE_PARSE_SPECIAL, user-defined tokens always.
 * ids must hold cap entries; cap >= tokenizer_bound(t, len) always suffices. If cap is too small the
 * call returns VLLMC_ERR_INVALID and *n_ids is the count needed. */
vllmc_status tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, unsigned flags,
                              int32_t *ids, size_t cap, size_t *n_ids);
/* Same, allocating: *ids is malloc'd (caller frees), *n_ids its length. */
vllmc_status tokenizer_encode_alloc(const struct tokenizer *t, const char *text, size_t len, unsigned flags,
                                    int32_t **ids, size_t *n_ids);

/* The bytes one token stands for (byte-level BPE decoded, "▁" -> " ", <0xXX> -> that byte). Control tokens
 * give their text, e.g. "<|im_end|>". Not NUL-terminated, may be partial UTF-8. NULL (len 0) for a bad id. */
const char *tokenizer_piece(const struct tokenizer *t, int32_t id, size_t *len);

/* Ids -> bytes. Writes at most cap bytes to out and sets *n_out to the full length; returns
 * VLLMC_ERR_INVALID if cap was too small (nothing useful in out) or an id is out of range.
 * SPM vocabularies drop the space prefix the encoder added in front of the first piece. */
vllmc_status tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n_ids, unsigned flags,
                              char *out, size_t cap, size_t *n_out);
/* Same, allocating a NUL-terminated *out (caller frees). */
vllmc_status tokenizer_decode_alloc(const struct tokenizer *t, const int32_t *ids, size_t n_ids, unsigned flags,
                                    char **out, size_t *n_out);

/* Incremental detokenizer for streaming. Feed tokens one at a time; each call returns the bytes that became
 * safe to show: only complete UTF-8 sequences (a partial sequence waits for the next token; a byte that can
 * never complete a sequence is passed through as is, or as U+FFFD with TOKENIZER_DECODE_REPLACE_INVALID,
 * so the output is then always valid UTF-8). Caller-owned struct, no allocation.
 * Stop strings (optional, tokenizer_stream_set_stops): text that could still be the start of a stop string is
 * held back until it is ruled out, so a stop string is never split across chunks and never shown; when one
 * completes, that feed returns the text before it and sets `stopped` (later feeds return nothing). */
#define TOKENIZER_STREAM_MAX_PENDING 4
#define TOKENIZER_STREAM_MAX_STOP 256   /* longest stop string, bytes */
#define TOKENIZER_STREAM_MAX_STOPS 16
struct tokenizer_stream {
    const struct tokenizer *tok;
    unsigned flags;           /* TOKENIZER_DECODE_* */
    bool first;               /* no token shown yet (SPM space-prefix removal) */
    uint8_t pending[TOKENIZER_STREAM_MAX_PENDING];
    uint32_t n_pending;
    /* stop strings: caller-owned, must outlive the stream */
    const char *stops[TOKENIZER_STREAM_MAX_STOPS];
    size_t stop_lens[TOKENIZER_STREAM_MAX_STOPS];
    uint32_t n_stops;
    char hold[TOKENIZER_STREAM_MAX_STOP];
    uint32_t n_hold;
    bool stopped;             /* a stop string completed: stop generating */
    int32_t stop_index;       /* which one (-1 if none) */
};
void tokenizer_stream_init(struct tokenizer_stream *s, const struct tokenizer *t, unsigned flags);
/* Stop strings (n <= TOKENIZER_STREAM_MAX_STOPS, each 1..TOKENIZER_STREAM_MAX_STOP bytes; empty ones ignored).
 * Call before the first feed. VLLMC_ERR_INVALID if too many or too long. */
vllmc_status tokenizer_stream_set_stops(struct tokenizer_stream *s, const char *const *stops, size_t n);
/* Most bytes one feed (or flush) can return: held-back stop-string text + 3 x (pending bytes + longest piece). */
size_t tokenizer_stream_bound(const struct tokenizer *t);
/* Feed one id: writes newly safe bytes to out (cap >= tokenizer_stream_bound) and their count to *n_out.
 * VLLMC_ERR_INVALID for an id out of range or cap too small. */
vllmc_status tokenizer_stream_feed(struct tokenizer_stream *s, int32_t id, char *out, size_t cap, size_t *n_out);
/* End of stream: emits whatever is still held (an incomplete sequence as its raw bytes or U+FFFD, and text
 * held for a stop string that never completed; nothing once stopped). */
size_t tokenizer_stream_flush(struct tokenizer_stream *s, char *out, size_t cap);

#endif
