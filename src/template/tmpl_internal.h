/* Internals of the chat-template interpreter shared by its four files: the arena, the value model
 * (Python semantics: int/float/bool/None/str/list/tuple/dict plus jinja's Undefined), the AST and the
 * render state. Values are immutable once built, except namespaces; everything a render creates
 * lives in its arena and dies with it. Strings are UTF-8 and always NUL-terminated. */
#ifndef VLLMC_TMPL_INTERNAL_H
#define VLLMC_TMPL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include "common/common.h"
#include "template/template.h"

/* ---- arena: bump allocation in chunks, with a cap on the total ---- */
struct tmpl_chunk;
struct tmpl_arena {
    struct tmpl_chunk *head;
    size_t used_total, cap_total; /* cap_total 0: unlimited */
    bool oom;
};
void *tmpl_arena_alloc(struct tmpl_arena *a, size_t n); /* zeroed; NULL (and a->oom) past the cap */
void tmpl_arena_free(struct tmpl_arena *a);

/* ---- values ---- */
enum tv_kind {
    TV_UNDEF, TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STR, TV_LIST, TV_DICT,
    TV_NS,      /* namespace(): a mutable dict of attributes */
    TV_LOOP,    /* the `loop` variable of a for loop */
    TV_MACRO,   /* a macro defined by the template */
    TV_BUILTIN, /* a global function (raise_exception, range, ...) */
    TV_METHOD,  /* a bound method such as 'abc'.split */
};
#define TV_F_TUPLE 1  /* TV_LIST that is a Python tuple */
#define TV_F_MARKUP 2 /* TV_STR that is a markupsafe.Markup (from |safe) */
#define TV_F_GEN 4     /* TV_LIST standing for a Python generator/iterator (|map, |select, |items...):
                        * iterable, always true, but no len(), no indexing, and unprintable */
#define TV_F_ITEMS 8   /* TV_LIST standing for dict.items() / keys() / values() views */
#define TV_F_KEYS 16
#define TV_F_VALUES 32
#define TV_F_RANGE 64 /* TV_LIST from range(): indexable, but prints as range(a, b) and does not concatenate */
#define TV_F_VIEW (TV_F_ITEMS | TV_F_KEYS | TV_F_VALUES)
#define TV_F_LISTKIND (TV_F_TUPLE | TV_F_GEN | TV_F_VIEW | TV_F_RANGE)

struct tstr { size_t len; char p[]; };
struct tlist { size_t n, cap; struct tv *v; };
struct tdict {
    size_t n, cap;
    struct tv *k, *v;   /* insertion order */
    uint32_t *idx;      /* open-addressing index (slot = entry + 1, 0 empty) once n > 16; else NULL */
    size_t idx_cap;     /* power of two */
};
struct tloop;
struct tmacro;
struct tmethod;

struct tv {
    uint8_t kind, flags;
    union {
        bool b;
        int64_t i;
        double f;
        struct tstr *s;   /* TV_STR; TV_UNDEF: the missing name or NULL */
        struct tlist *l;  /* TV_LIST */
        struct tdict *d;  /* TV_DICT, TV_NS */
        struct tloop *loop;
        struct tmacro *macro;
        struct tmethod *m;
        int builtin;
    } u;
};

/* ---- AST ---- */
enum tnode_kind {
    /* statements */
    TN_DATA, TN_OUTPUT, TN_IF, TN_FOR, TN_SET, TN_SET_BLOCK, TN_MACRO, TN_BREAK, TN_CONTINUE, TN_BLOCK, TN_CALL_BLOCK,
    /* expressions */
    TN_CONST, TN_NAME, TN_ATTR, TN_ITEM, TN_SLICE, TN_CALL, TN_FILTER, TN_TEST, TN_BIN, TN_NEG, TN_POS,
    TN_NOT, TN_AND, TN_OR, TN_COND, TN_COMPARE, TN_CONCAT, TN_LIST, TN_TUPLE, TN_DICT, TN_CAPTURE,
};

/* Field use by kind:
 *  DATA/CONST: val.  OUTPUT: a.  IF: a cond, kids body, kids2 else.  BLOCK: kids.
 *  FOR: names targets, a iterable, b filter (opt), kids body, kids2 else.
 *  SET: names targets (n>1 unpacks) or name (namespace var) + names[0] (attribute) with op=1; b value.
 *  SET_BLOCK: names[0] target, kids body, a filter chain over TN_CAPTURE (opt).
 *  MACRO: name, names params, kids2 defaults (NULL entries), kids body; op=1 if the body uses `caller`.
 *  CALL_BLOCK: a the TN_CALL, b a parameterless TN_MACRO named "caller" holding the block body.
 *  NAME: name.  ATTR: a, name.  ITEM: a, b.  SLICE: a, b start, c stop, d step (each opt).
 *  CALL: a callee, kids positional, names + kids2 keyword, c *args (opt), d **kwargs (opt).
 *  FILTER/TEST: op id, name, a operand, kids positional, names + kids2 keyword, c/d as for CALL.  BIN: op, a, b.  NEG/POS/NOT: a.  AND/OR: a, b.
 *  COND: a value, b cond, c else (opt).  COMPARE: a, kids operands, ops.  CONCAT/LIST/TUPLE: kids.
 *  DICT: kids keys, kids2 values. */
struct tnode {
    uint8_t kind;
    int line, op;
    struct tnode *a, *b, *c, *d;
    struct tnode **kids, **kids2;
    int n_kids, n_kids2;
    const char **names;
    int n_names;
    const char *name;
    int *ops;
    struct tv val;
};

enum tmpl_op {
    OP_NONE, OP_ADD, OP_SUB, OP_DIV, OP_FLOORDIV, OP_MUL, OP_MOD, OP_POW, OP_TILDE, OP_LBRACKET, OP_RBRACKET,
    OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE, OP_EQ, OP_NE, OP_GT, OP_GTEQ, OP_LT, OP_LTEQ, OP_ASSIGN,
    OP_DOT, OP_COLON, OP_PIPE, OP_COMMA, OP_SEMICOLON,
    OP_IN, OP_NOTIN, /* comparison operators only */
};

struct tmpl {
    struct tmpl_arena arena; /* nodes, names and constants */
    struct tnode **body;
    int n_body;
};

/* ---- render state ---- */
struct tsb { char *p; size_t n, cap, limit; }; /* malloc'd growable text */

struct tframe {
    struct tframe *parent;
    const char **names;
    struct tv *vals;
    int n, cap;
};

struct tloop {
    struct tlist *items;
    size_t i;
    int depth;
};
struct tmacro { const struct tnode *def; struct tframe *scope; };
struct tmethod { struct tv self; int id; };

struct tmpl_rt {
    struct tmpl_arena arena;
    struct tmpl_limits lim;
    uint64_t steps;
    int depth;
    int line;
    bool failed;
    char err[1024];
    struct tsb *out;
    struct tframe *root;
    struct tframe *globals; /* the context variables and builtins */
    struct tframe *frame;   /* the scope expressions read */
    struct tv capture;      /* the text a {% set x | filter %} block captured */
};

/* Record the first error ("chat template line N: ..."); returns -1. */
int tmpl_fail(struct tmpl_rt *rt, const char *fmt, ...) VLLMC_PRINTF(2, 3);
/* Charge `units` of work (bytes or items scanned) to the step budget: one step per 64 units, so long
 * strings and lists cannot turn a bounded number of steps into unbounded time. -1 past the limit. */
int tmpl_charge(struct tmpl_rt *rt, size_t units);

/* tsb: append; -1 (and rt error) past the limit or out of memory */
int tsb_put(struct tmpl_rt *rt, struct tsb *b, const char *p, size_t n);
int tsb_putc(struct tmpl_rt *rt, struct tsb *b, char c);
void tsb_free(struct tsb *b);

/* ---- UTF-8 and Python string helpers (tmpl_value.c) ---- */
size_t utf8_next(const char *p, size_t n, uint32_t *cp); /* bytes of the code point at p (>=1); bad byte = U+FFFD len 1 */
size_t utf8_put(char *out, uint32_t cp);                  /* 1..4 bytes */
size_t utf8_count(const char *p, size_t n);
bool py_isspace(uint32_t cp);
void py_float_repr(double f, char *buf, size_t size); /* Python repr(float) */

/* ---- value constructors and helpers (tmpl_value.c) ---- */
static inline struct tv tv_undef(void) { struct tv v = {0}; v.kind = TV_UNDEF; return v; }
static inline struct tv tv_none(void) { struct tv v = {0}; v.kind = TV_NONE; return v; }
static inline struct tv tv_bool(bool b) { struct tv v = {0}; v.kind = TV_BOOL; v.u.b = b; return v; }
static inline struct tv tv_int(int64_t i) { struct tv v = {0}; v.kind = TV_INT; v.u.i = i; return v; }
static inline struct tv tv_float(double f) { struct tv v = {0}; v.kind = TV_FLOAT; v.u.f = f; return v; }
int tv_str(struct tmpl_rt *rt, const char *p, size_t n, struct tv *out);
int tv_str_sb(struct tmpl_rt *rt, struct tsb *b, struct tv *out); /* takes the text and frees b */
struct tstr *tstr_new(struct tmpl_arena *a, const char *p, size_t n);
int tv_list(struct tmpl_rt *rt, size_t cap, struct tv *out);
int tv_list_push(struct tmpl_rt *rt, struct tv *list, struct tv item);
int tv_dict(struct tmpl_rt *rt, struct tv *out);
int tv_dict_set(struct tmpl_rt *rt, struct tdict *d, struct tv key, struct tv val);
bool tv_dict_get(const struct tdict *d, struct tv key, struct tv *out);
bool tv_dict_get_str(const struct tdict *d, const char *key, struct tv *out);
bool tv_truthy(struct tv v);
bool tv_hashable(struct tv v); /* Python hash() would succeed */
bool tv_eq(struct tv a, struct tv b);
int tv_lt(struct tmpl_rt *rt, struct tv a, struct tv b, bool *out); /* Python a < b; -1 TypeError */
const char *tv_type_name(struct tv v);
bool tv_is_num(struct tv v); /* bool, int or float */
double tv_num(struct tv v);
/* Python str(v) / repr(v) appended to b; -1 for values jinja2 cannot print reproducibly */
int tv_write_str(struct tmpl_rt *rt, struct tsb *b, struct tv v);
int tv_write_repr(struct tmpl_rt *rt, struct tsb *b, struct tv v);
int tv_to_str(struct tmpl_rt *rt, struct tv v, struct tv *out); /* str(v) as a TV_STR (keeps MARKUP) */
/* json.dumps(v, ensure_ascii, indent (<0: none), separators, sort_keys) */
struct tjson_opts { bool ensure_ascii, sort_keys; int indent; const char *item_sep, *key_sep; };
int tv_write_json(struct tmpl_rt *rt, struct tsb *b, struct tv v, const struct tjson_opts *o, int level);
/* Iterate like Python iter(): list/tuple items, dict keys, str code points, Undefined = empty. */
int tv_iter_list(struct tmpl_rt *rt, struct tv v, struct tlist **out);
int tv_from_cjson(struct tmpl_rt *rt, const cJSON *j, const char *text, size_t text_size, struct tv *out);

/* ---- builtins (tmpl_builtins.c) ---- */
enum tmpl_builtin { BI_RAISE_EXCEPTION, BI_STRFTIME_NOW, BI_NAMESPACE, BI_RANGE, BI_DICT, BI__COUNT };
extern const char *const tmpl_builtin_names[BI__COUNT];
int tmpl_filter_id(const char *name);  /* -1 if unknown */
int tmpl_test_id(const char *name);    /* -1 if unknown */
bool tmpl_method_known(const char *name);
/* attribute lookup of a method: -1 if `name` is not a Python method of v's type */
int tmpl_method_lookup(struct tv self, const char *name);
/* args: positional then keyword (kw_names[i] for args[n_pos + i]) */
struct targs { struct tv *v; int n_pos, n_kw; const char **kw_names; };
int tmpl_call_filter(struct tmpl_rt *rt, int id, struct tv val, struct targs *a, struct tv *out);
int tmpl_call_test(struct tmpl_rt *rt, int id, struct tv val, struct targs *a, bool *out);
int tmpl_call_method(struct tmpl_rt *rt, struct tmethod *m, struct targs *a, struct tv *out);
int tmpl_call_builtin(struct tmpl_rt *rt, int id, struct targs *a, struct tv *out);
/* jinja's environment.getattr / getitem (sandboxed) */
int tmpl_getattr(struct tmpl_rt *rt, struct tv obj, const char *name, struct tv *out);
int tmpl_getitem(struct tmpl_rt *rt, struct tv obj, struct tv key, struct tv *out);

/* ---- evaluator (tmpl_eval.c) ---- */
int tmpl_call_macro(struct tmpl_rt *rt, struct tmacro *m, struct targs *a, struct tv *out);

#endif
