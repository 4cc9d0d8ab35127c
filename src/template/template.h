/* Chat templates: a Jinja subset interpreter that renders a model's tokenizer.chat_template the way
 * Python jinja2 does under Hugging Face's apply_chat_template (ImmutableSandboxedEnvironment,
 * trim_blocks, lstrip_blocks, loopcontrols, HF's tojson, raise_exception and strftime_now globals).
 * Invariant: a construct the interpreter does not implement is rejected by tmpl_parse with a message
 * naming it and its line; a template that parses either renders what jinja2 renders or fails. */
#ifndef VLLMC_TEMPLATE_H
#define VLLMC_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "vllmc.h"

/* Supported: {{ }}, {% if/elif/else %}, {% for %} (tuple targets, `if` filter, else, loop.index/index0/
 * revindex/revindex0/first/last/length/previtem/nextitem/depth/cycle, break/continue), {% set %} (names,
 * tuples, namespace attributes, block set with filters), {% macro %} (defaults, keywords, caller),
 * {% call %} (no caller arguments), {% raw %}, {% generation %}, comments, '-'/'+' whitespace control;
 * literals, arithmetic, comparisons (chained), in/not in, and/or/not, x if c else y, ~, [], {}, (),
 * attribute/item access with the sandbox's rules, slicing, calls with *args and **kwargs; the filters,
 * tests and str/dict/list methods listed in tmpl_builtins.c; the globals named in tmpl_render.
 * Refused when parsed: include/import/extends/block/filter/with/autoescape/do, recursive loops,
 * unknown filters, tests, methods and functions, varargs/kwargs in macros, non-ASCII identifiers.
 * Refused when rendered (jinja2 would print an object address or rely on Python-only behaviour):
 * printing generators (|map, |select, ...), ranges and functions; '%' string formatting; integers
 * beyond 64 bits; slicing non-sequences; case mapping outside the scripts with exact tables (Latin-1,
 * Latin Extended-A, basic Greek and Cyrillic, fullwidth Latin; uncased scripts pass through).
 * Known differences: errors that jinja2 raises lazily inside a generator (e.g. |items of a string
 * that is never iterated) are raised eagerly; a generator can be iterated more than once;
 * repr() of unusual Unicode (which code points are "printable") is approximated. */
struct tmpl; /* a compiled template; immutable after tmpl_parse, so one may render it from many threads */

/* Bounds on one render. Any zero field takes its default. Going past one is a render error. */
struct tmpl_limits {
    size_t max_output_bytes;  /* default 64 MiB: the rendered text and each captured macro/set block */
    size_t max_memory_bytes;  /* default 256 MiB: every value the render creates */
    uint64_t max_steps;       /* default 50 M: statements, expressions and loop iterations */
    int max_depth;            /* default 2000: nested evaluation (macro calls, nested expressions) */
};

/* Compile template text (data, size), UTF-8, not necessarily NUL-terminated.
 * Returns VLLMC_OK and *out (free with tmpl_free), VLLMC_ERR_INVALID for a syntax error, or
 * VLLMC_ERR_UNSUPPORTED for a construct this interpreter does not implement (include, call blocks,
 * unknown filters/tests/methods, ...); vllmc_last_error() then reads "chat template line N: ...". */
vllmc_status tmpl_parse(const char *data, size_t size, struct tmpl **out);
void tmpl_free(struct tmpl *t); /* accepts NULL */

/* Render with the variables of a JSON object `ctx` (each member becomes a template variable).
 * Besides them the template sees raise_exception(msg), strftime_now(fmt), namespace(), range() and
 * dict(). JSON numbers become ints when integral and within +-2^53, else floats (cJSON keeps no
 * number text: use tmpl_render_json to keep "1.0" a float).
 * On success *out is a malloc'd NUL-terminated string (caller frees) and *out_len its length.
 * A failing render (raise_exception, a type error, a limit) returns VLLMC_ERR_INVALID and
 * vllmc_last_error() names it; raise_exception's message is kept verbatim after "chat template: ".
 * lim may be NULL. */
vllmc_status tmpl_render(const struct tmpl *t, const cJSON *ctx, const struct tmpl_limits *lim,
                         char **out, size_t *out_len);

/* Same, with the context given as JSON text (data, size); numbers keep Python's int/float
 * distinction from their spelling ("1" int, "1.0" / "1e3" float), as json.loads does.
 * chat_defaults non-NULL: first apply tmpl_apply_chat_defaults with its tokens. */
struct tmpl_chat_defaults { const char *bos_token, *eos_token; };
vllmc_status tmpl_render_json(const struct tmpl *t, const char *json, size_t size,
                              const struct tmpl_chat_defaults *chat_defaults, const struct tmpl_limits *lim,
                              char **out, size_t *out_len);

/* Fill in what transformers' apply_chat_template passes when the caller leaves it out:
 * tools = null, documents = null, add_generation_prompt = false, and bos_token / eos_token when given
 * (NULL: left as is). Existing members are never replaced. Returns VLLMC_ERR_OOM or VLLMC_OK. */
vllmc_status tmpl_apply_chat_defaults(cJSON *ctx, const char *bos_token, const char *eos_token);

#endif
