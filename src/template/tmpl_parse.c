/* Chat-template lexer and parser: template text -> AST, replicating jinja2 3.1's lexer (trim_blocks,
 * lstrip_blocks, '-'/'+' whitespace control, one trailing newline dropped, \r\n -> \n) and its
 * expression grammar and precedence. Anything outside the supported subset is rejected here with
 * "chat template line N: unsupported ..." so it can never render differently from jinja2. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include "template/tmpl_internal.h"

enum tok_kind { TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END, TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP, TK_EOF };

struct ttok {
    uint8_t kind;
    int op, line;
    const char *s; /* DATA/NAME/STRING: NUL-terminated, in the template arena */
    size_t n;
    int64_t i;
    double f;
};

#define PARSE_MAX_DEPTH 200

struct tparser {
    struct tmpl *t;
    struct ttok *toks;
    int n_toks, cap_toks, pos;
    vllmc_status st;
    char err[512];
    int depth;
    const char **macros; /* every macro name defined anywhere: calls to them pass the parse check */
    int n_macros, cap_macros;
    int in_macro, in_for;
    struct tnode *cur_macro; /* the macro being parsed: gets op=1 when its body references `caller` */
};

static int perr(struct tparser *p, vllmc_status st, int line, const char *fmt, ...) VLLMC_PRINTF(4, 5);
static int perr(struct tparser *p, vllmc_status st, int line, const char *fmt, ...) {
    if (p->st != VLLMC_OK) return -1;
    int k = snprintf(p->err, sizeof p->err, "chat template line %d: ", line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + k, sizeof p->err - (size_t)k, fmt, ap);
    va_end(ap);
    p->st = st;
    return -1;
}
#define SYNTAX(p, line, ...) perr(p, VLLMC_ERR_INVALID, line, __VA_ARGS__)
#define UNSUP(p, line, ...) perr(p, VLLMC_ERR_UNSUPPORTED, line, __VA_ARGS__)

static void *palloc(struct tparser *p, size_t n) {
    void *r = tmpl_arena_alloc(&p->t->arena, n);
    if (!r) perr(p, VLLMC_ERR_OOM, 0, "out of memory");
    return r;
}
static char *pstrdup(struct tparser *p, const char *s, size_t n) {
    char *r = palloc(p, n + 1);
    if (r) { memcpy(r, s, n); r[n] = 0; }
    return r;
}

/* ================= lexer ================= */

static int push_tok(struct tparser *p, struct ttok t) {
    if (p->n_toks == p->cap_toks) {
        int nc = p->cap_toks ? p->cap_toks * 2 : 256;
        struct ttok *nt = realloc(p->toks, (size_t)nc * sizeof *nt);
        if (!nt) return perr(p, VLLMC_ERR_OOM, t.line, "out of memory");
        p->toks = nt;
        p->cap_toks = nc;
    }
    p->toks[p->n_toks++] = t;
    return 0;
}

static size_t ws_len_at(const char *s, size_t n, size_t i) { /* Python \s run length at i */
    size_t j = i;
    while (j < n) {
        uint32_t cp;
        size_t l = utf8_next(s + j, n - j, &cp);
        if (!py_isspace(cp)) break;
        j += l;
    }
    return j - i;
}
static size_t rstrip_len(const char *s, size_t n) { /* length of s after Python rstrip() */
    size_t keep = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = utf8_next(s + i, n - i, &cp);
        i += l;
        if (!py_isspace(cp)) keep = i;
    }
    return keep;
}
static int count_nl(const char *s, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += s[i] == '\n';
    return c;
}

/* Data before a tag, with jinja's '-' and lstrip_blocks handling. */
static int emit_data(struct tparser *p, const char *s, size_t n, char sign, bool is_var, bool line_starting, int line) {
    if (sign == '-') n = rstrip_len(s, n);
    else if (sign != '+' && !is_var) {
        size_t l_pos = 0;
        for (size_t i = n; i > 0; i--) if (s[i - 1] == '\n') { l_pos = i; break; }
        if ((l_pos > 0 || line_starting) && l_pos < n && ws_len_at(s, n, l_pos) == n - l_pos) n = l_pos;
    }
    if (!n) return 0;
    struct ttok t = {.kind = TK_DATA, .line = line, .n = n};
    if (!(t.s = pstrdup(p, s, n))) return -1;
    return push_tok(p, t);
}

static const struct { const char *s; int op; } lex_ops[] = {
    {"//", OP_FLOORDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE}, {">=", OP_GTEQ}, {"<=", OP_LTEQ},
    {"+", OP_ADD}, {"-", OP_SUB}, {"/", OP_DIV}, {"*", OP_MUL}, {"%", OP_MOD}, {"~", OP_TILDE},
    {"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"(", OP_LPAREN}, {")", OP_RPAREN}, {"{", OP_LBRACE},
    {"}", OP_RBRACE}, {">", OP_GT}, {"<", OP_LT}, {"=", OP_ASSIGN}, {".", OP_DOT}, {":", OP_COLON},
    {"|", OP_PIPE}, {",", OP_COMMA}, {";", OP_SEMICOLON},
};

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decode a string literal body with Python's unicode-escape rules. */
static int lex_string(struct tparser *p, const char *s, size_t n, int line, struct ttok *t) {
    char *o = palloc(p, n + 1);
    if (!o) return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) { o[k++] = s[i]; continue; }
        char c = s[++i];
        uint32_t cp = 0;
        int nhex = 0;
        switch (c) {
        case '\n': continue;
        case '\\': o[k++] = '\\'; continue;
        case '\'': o[k++] = '\''; continue;
        case '"': o[k++] = '"'; continue;
        case 'a': o[k++] = 7; continue;
        case 'b': o[k++] = 8; continue;
        case 'f': o[k++] = 12; continue;
        case 'n': o[k++] = '\n'; continue;
        case 'r': o[k++] = '\r'; continue;
        case 't': o[k++] = '\t'; continue;
        case 'v': o[k++] = 11; continue;
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        case 'N': return UNSUP(p, line, "unsupported string escape \\N{...}");
        default:
            if (c >= '0' && c <= '7') {
                int d = 0;
                while (d < 3 && i < n && s[i] >= '0' && s[i] <= '7') cp = cp * 8 + (uint32_t)(s[i++] - '0'), d++;
                i--;
                k += utf8_put(o + k, cp);
                continue;
            }
            o[k++] = '\\';
            i--; /* keep the backslash and the character as they are */
            continue;
        }
        for (int d = 0; d < nhex; d++) {
            int h = i + 1 + (size_t)d < n ? hexval(s[i + 1 + d]) : -1;
            if (h < 0) return SYNTAX(p, line, "truncated \\%c escape in string literal", c);
            cp = cp * 16 + (uint32_t)h;
        }
        i += (size_t)nhex;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return UNSUP(p, line, "unsupported string escape for code point U+%X", (unsigned)cp);
        k += utf8_put(o + k, cp); /* a \x/\u escape is never longer than its UTF-8 form */
    }
    o[k] = 0;
    t->s = o;
    t->n = k;
    return 0;
}

/* One token inside {{ }} / {% %}; returns bytes consumed or -1. */
static long lex_one(struct tparser *p, const char *s, size_t n, size_t i, int line, struct ttok *t) {
    const char *c = s + i;
    size_t rem = n - i;
    memset(t, 0, sizeof *t);
    t->line = line;
    /* float: digits (. digits)? e[+-]digits | digits . digits, not after '.' */
    if (isdigit((unsigned char)c[0])) {
        bool after_dot = i > 0 && s[i - 1] == '.'; /* jinja's float rule has (?<!\.) */
        size_t j = 0;
        while (j < rem && (isdigit((unsigned char)c[j]) || (c[j] == '_' && j + 1 < rem && isdigit((unsigned char)c[j + 1])))) j++;
        size_t int_end = j, fe = 0;
        if (!after_dot && j + 1 < rem && c[j] == '.' && isdigit((unsigned char)c[j + 1])) {
            j++;
            while (j < rem && (isdigit((unsigned char)c[j]) || (c[j] == '_' && j + 1 < rem && isdigit((unsigned char)c[j + 1])))) j++;
            fe = j;
        }
        size_t e = fe ? fe : int_end;
        if (!after_dot && e < rem && (c[e] == 'e' || c[e] == 'E')) {
            size_t k = e + 1;
            if (k < rem && (c[k] == '+' || c[k] == '-')) k++;
            if (k < rem && isdigit((unsigned char)c[k])) {
                while (k < rem && (isdigit((unsigned char)c[k]) || (c[k] == '_' && k + 1 < rem && isdigit((unsigned char)c[k + 1])))) k++;
                fe = k;
            }
        }
        if (fe) {
            char buf[128];
            size_t m = 0;
            for (size_t q = 0; q < fe && m + 1 < sizeof buf; q++) if (c[q] != '_') buf[m++] = c[q];
            buf[m] = 0;
            t->kind = TK_FLOAT;
            t->f = strtod(buf, NULL);
            return (long)fe;
        }
        /* integer */
        if (c[0] == '0' && rem > 1 && strchr("xXoObB", c[1])) {
            int base = (c[1] == 'x' || c[1] == 'X') ? 16 : (c[1] == 'o' || c[1] == 'O') ? 8 : 2;
            size_t k = 2;
            uint64_t v = 0;
            int nd = 0;
            while (k < rem) {
                if (c[k] == '_' && k + 1 < rem && hexval(c[k + 1]) >= 0 && hexval(c[k + 1]) < base) { k++; continue; }
                int h = hexval(c[k]);
                if (h < 0 || h >= base) break;
                if (v > (uint64_t)INT64_MAX / (uint64_t)base) return UNSUP(p, line, "integer literal too large");
                v = v * (uint64_t)base + (uint64_t)h;
                nd++, k++;
            }
            if (nd) { t->kind = TK_INT; t->i = (int64_t)v; return (long)k; }
        }
        if (c[0] == '0') { /* 0(_?0)* */
            size_t k = 1;
            while (k < rem && (c[k] == '0' || (c[k] == '_' && k + 1 < rem && c[k + 1] == '0'))) k++;
            t->kind = TK_INT;
            return (long)k;
        }
        uint64_t v = 0;
        for (size_t q = 0; q < int_end; q++) {
            if (c[q] == '_') continue;
            if (v > ((uint64_t)INT64_MAX - 9) / 10) return UNSUP(p, line, "integer literal too large");
            v = v * 10 + (uint64_t)(c[q] - '0');
        }
        t->kind = TK_INT;
        t->i = (int64_t)v;
        return (long)int_end;
    }
    if (isalpha((unsigned char)c[0]) || c[0] == '_') {
        size_t j = 1;
        while (j < rem && (isalnum((unsigned char)c[j]) || c[j] == '_')) j++;
        if (j < rem && (unsigned char)c[j] >= 0x80) return UNSUP(p, line, "unsupported non-ASCII identifier");
        t->kind = TK_NAME;
        t->n = j;
        if (!(t->s = pstrdup(p, c, j))) return -1;
        return (long)j;
    }
    if ((unsigned char)c[0] >= 0x80) return UNSUP(p, line, "unsupported non-ASCII identifier");
    if (c[0] == '\'' || c[0] == '"') {
        size_t j = 1;
        while (j < rem && c[j] != c[0]) j += (c[j] == '\\' && j + 1 < rem) ? 2 : 1;
        if (j >= rem) return SYNTAX(p, line, "unterminated string literal");
        t->kind = TK_STRING;
        if (lex_string(p, c + 1, j - 1, line, t) < 0) return -1;
        return (long)j + 1;
    }
    for (size_t k = 0; k < ARRAY_LEN(lex_ops); k++) {
        size_t l = strlen(lex_ops[k].s);
        if (l <= rem && !memcmp(c, lex_ops[k].s, l)) {
            t->kind = TK_OP;
            t->op = lex_ops[k].op;
            return (long)l;
        }
    }
    return SYNTAX(p, line, "unexpected character '%c'", c[0]);
}

/* Match "{%[-+]?\s*raw\s*(-%}\s*|%})" at s[i]; returns its length or 0. */
static size_t match_raw_begin(const char *s, size_t n, size_t i) {
    size_t j = i + 2;
    if (j < n && (s[j] == '-' || s[j] == '+')) j++;
    j += ws_len_at(s, n, j);
    if (j + 3 > n || memcmp(s + j, "raw", 3)) return 0;
    j += 3;
    j += ws_len_at(s, n, j);
    if (j + 3 <= n && !memcmp(s + j, "-%}", 3)) return j + 3 + ws_len_at(s, n, j + 3) - i;
    if (j + 2 <= n && !memcmp(s + j, "%}", 2)) return j + 2 - i;
    return 0;
}

static int lex(struct tparser *p, const char *src, size_t size) {
    /* newlines -> \n, drop one trailing newline (keep_trailing_newline=False) */
    char *s = malloc(size + 1);
    if (!s) return perr(p, VLLMC_ERR_OOM, 0, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < size; i++) {
        if (src[i] == '\r') { s[n++] = '\n'; if (i + 1 < size && src[i + 1] == '\n') i++; }
        else s[n++] = src[i];
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    if (memchr(s, 0, n)) { free(s); return SYNTAX(p, 1, "NUL byte in template"); }

    size_t pos = 0;
    int line = 1;
    bool line_starting = true;
    int rc = 0;
    while (pos < n && rc == 0) {
        size_t q = pos;
        while (q + 1 < n && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#'))) q++;
        if (q + 1 >= n) { /* the rest is data */
            struct ttok t = {.kind = TK_DATA, .line = line, .n = n - pos};
            if (!(t.s = pstrdup(p, s + pos, n - pos))) { rc = -1; break; }
            rc = push_tok(p, t);
            break;
        }
        char kind = s[q + 1];
        char sign = (q + 2 < n && (s[q + 2] == '-' || s[q + 2] == '+')) ? s[q + 2] : 0;
        size_t raw_len = kind == '%' ? match_raw_begin(s, n, q) : 0;
        if (emit_data(p, s + pos, q - pos, sign, kind == '{', line_starting, line) < 0) { rc = -1; break; }
        line += count_nl(s + pos, q - pos);
        if (raw_len) {
            size_t b = q + raw_len, e = b;
            line_starting = s[b - 1] == '\n';
            line += count_nl(s + q, raw_len);
            /* find {%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?) */
            size_t tag_end = 0;
            char esign = 0;
            for (; e + 1 < n; e++) {
                if (s[e] != '{' || s[e + 1] != '%') continue;
                size_t j = e + 2;
                char sg = (j < n && (s[j] == '-' || s[j] == '+')) ? s[j] : 0;
                if (sg) j++;
                j += ws_len_at(s, n, j);
                if (j + 6 > n || memcmp(s + j, "endraw", 6)) continue;
                j += 6;
                j += ws_len_at(s, n, j);
                if (j + 3 <= n && !memcmp(s + j, "+%}", 3)) tag_end = j + 3;
                else if (j + 3 <= n && !memcmp(s + j, "-%}", 3)) tag_end = j + 3 + ws_len_at(s, n, j + 3);
                else if (j + 2 <= n && !memcmp(s + j, "%}", 2)) tag_end = j + 2 + (j + 2 < n && s[j + 2] == '\n');
                else continue;
                esign = sg;
                break;
            }
            if (!tag_end) { rc = SYNTAX(p, line, "missing end of raw directive"); break; }
            if (emit_data(p, s + b, e - b, esign, false, line_starting, line) < 0) { rc = -1; break; }
            line += count_nl(s + b, tag_end - b);
            line_starting = s[tag_end - 1] == '\n';
            pos = tag_end;
            continue;
        }
        size_t i = q + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t e = i;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= n) { rc = SYNTAX(p, line, "missing end of comment tag"); break; }
            size_t end = e + 2;
            if (e > i && s[e - 1] == '-') end += ws_len_at(s, n, end);
            else if (!(e > i && s[e - 1] == '+') && end < n && s[end] == '\n') end++;
            line += count_nl(s + q, end - q);
            line_starting = s[end - 1] == '\n';
            pos = end;
            continue;
        }
        bool is_var = kind == '{';
        struct ttok bt = {.kind = is_var ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, .line = line};
        if ((rc = push_tok(p, bt)) < 0) break;
        char stack[64];
        int sp = 0;
        for (;;) {
            if (i >= n) { rc = SYNTAX(p, line, "unexpected end of template inside a tag"); break; }
            if (sp == 0) {
                size_t end = 0;
                if (is_var) {
                    if (i + 3 <= n && !memcmp(s + i, "-}}", 3)) end = i + 3 + ws_len_at(s, n, i + 3);
                    else if (i + 2 <= n && !memcmp(s + i, "}}", 2)) end = i + 2;
                } else {
                    if (i + 3 <= n && !memcmp(s + i, "+%}", 3)) end = i + 3;
                    else if (i + 3 <= n && !memcmp(s + i, "-%}", 3)) end = i + 3 + ws_len_at(s, n, i + 3);
                    else if (i + 2 <= n && !memcmp(s + i, "%}", 2)) end = i + 2 + (i + 2 < n && s[i + 2] == '\n');
                }
                if (end) {
                    struct ttok et = {.kind = is_var ? TK_VAR_END : TK_BLOCK_END, .line = line};
                    rc = push_tok(p, et);
                    line += count_nl(s + i, end - i);
                    line_starting = s[end - 1] == '\n';
                    pos = end;
                    break;
                }
            }
            size_t w = ws_len_at(s, n, i);
            if (w) { line += count_nl(s + i, w); i += w; continue; }
            struct ttok t;
            long l = lex_one(p, s, n, i, line, &t);
            if (l < 0) { rc = -1; break; }
            if (t.kind == TK_OP) {
                if (t.op == OP_LBRACE || t.op == OP_LPAREN || t.op == OP_LBRACKET) {
                    if (sp == (int)sizeof stack) { rc = UNSUP(p, line, "brackets nested too deeply"); break; }
                    stack[sp++] = t.op == OP_LBRACE ? '}' : t.op == OP_LPAREN ? ')' : ']';
                } else if (t.op == OP_RBRACE || t.op == OP_RPAREN || t.op == OP_RBRACKET) {
                    char want = t.op == OP_RBRACE ? '}' : t.op == OP_RPAREN ? ')' : ']';
                    if (!sp || stack[sp - 1] != want) { rc = SYNTAX(p, line, "unexpected '%c'", want); break; }
                    sp--;
                }
            }
            line += count_nl(s + i, (size_t)l);
            if ((rc = push_tok(p, t)) < 0) break;
            i += (size_t)l;
        }
    }
    free(s);
    if (rc == 0) {
        struct ttok t = {.kind = TK_EOF, .line = line};
        rc = push_tok(p, t);
    }
    return rc;
}

/* ================= parser ================= */

static struct ttok *cur(struct tparser *p) { return &p->toks[p->pos]; }
static struct ttok *peek(struct tparser *p, int k) {
    int i = p->pos + k;
    return &p->toks[i < p->n_toks ? i : p->n_toks - 1];
}
static void adv(struct tparser *p) { if (p->pos < p->n_toks - 1) p->pos++; }
static bool is_op(struct tparser *p, int op) { return cur(p)->kind == TK_OP && cur(p)->op == op; }
static bool is_name(struct tparser *p, const char *s) { return cur(p)->kind == TK_NAME && !strcmp(cur(p)->s, s); }
static const char *tok_desc(struct ttok *t) {
    switch (t->kind) {
    case TK_NAME: return t->s;
    case TK_STRING: return "string literal";
    case TK_INT: case TK_FLOAT: return "number";
    case TK_OP: for (size_t k = 0; k < ARRAY_LEN(lex_ops); k++) if (lex_ops[k].op == t->op) return lex_ops[k].s; return "operator";
    case TK_VAR_END: return "}}";
    case TK_BLOCK_END: return "%}";
    case TK_EOF: return "end of template";
    default: return "text";
    }
}
static int expect_op(struct tparser *p, int op, const char *what) {
    if (!is_op(p, op)) return SYNTAX(p, cur(p)->line, "expected '%s', got '%s'", what, tok_desc(cur(p)));
    adv(p);
    return 0;
}
static int expect_block_end(struct tparser *p) {
    if (cur(p)->kind != TK_BLOCK_END) return SYNTAX(p, cur(p)->line, "expected end of statement '%%}', got '%s'", tok_desc(cur(p)));
    adv(p);
    return 0;
}

static struct tnode *mk(struct tparser *p, int kind, int line) {
    struct tnode *n = palloc(p, sizeof *n);
    if (n) { n->kind = (uint8_t)kind; n->line = line; }
    return n;
}

/* growable node arrays built in malloc'd memory then copied into the arena */
struct nvec { struct tnode **v; const char **names; int n, cap; };
static int nvec_push(struct tparser *p, struct nvec *nv, struct tnode *node, const char *name) {
    if (nv->n == nv->cap) {
        int nc = nv->cap ? nv->cap * 2 : 8;
        struct tnode **v = realloc(nv->v, (size_t)nc * sizeof *v);
        if (v) nv->v = v;
        const char **nm = v ? realloc(nv->names, (size_t)nc * sizeof *nm) : NULL;
        if (nm) nv->names = nm;
        if (!v || !nm) return perr(p, VLLMC_ERR_OOM, 0, "out of memory");
        nv->cap = nc;
    }
    nv->v[nv->n] = node;
    nv->names[nv->n] = name;
    nv->n++;
    return 0;
}
static void nvec_free(struct nvec *nv) { free(nv->v); free(nv->names); memset(nv, 0, sizeof *nv); }
static struct tnode **nvec_nodes(struct tparser *p, struct nvec *nv) {
    if (!nv->n) return NULL;
    struct tnode **r = palloc(p, (size_t)nv->n * sizeof *r);
    if (r) memcpy(r, nv->v, (size_t)nv->n * sizeof *r);
    return r;
}
static const char **nvec_names(struct tparser *p, struct nvec *nv) {
    if (!nv->n) return NULL;
    const char **r = palloc(p, (size_t)nv->n * sizeof *r);
    if (r) memcpy(r, nv->names, (size_t)nv->n * sizeof *r);
    return r;
}

static struct tnode *parse_expr(struct tparser *p, bool with_condexpr);
static struct tnode *parse_unary(struct tparser *p, bool with_filter);
static struct tnode *parse_or(struct tparser *p);

static bool enter(struct tparser *p) {
    if (++p->depth > PARSE_MAX_DEPTH) { UNSUP(p, cur(p)->line, "template nested too deeply"); return false; }
    return true;
}
#define LEAVE(p, r) do { (p)->depth--; return (r); } while (0)

/* (args) after a callee/filter/test: positional and keyword arguments into node kids/names/kids2 */
static int parse_call_args(struct tparser *p, struct tnode *n) {
    struct nvec pos = {0}, kw = {0};
    int rc = expect_op(p, OP_LPAREN, "(");
    while (rc == 0 && !is_op(p, OP_RPAREN)) {
        if ((pos.n + kw.n || n->c || n->d) && (rc = expect_op(p, OP_COMMA, ","))) break;
        if (is_op(p, OP_RPAREN)) break;
        if (is_op(p, OP_MUL) || is_op(p, OP_POW)) { /* *args / **kwargs, after the other arguments */
            bool star = is_op(p, OP_MUL);
            if (n->d || (star && n->c)) { rc = SYNTAX(p, cur(p)->line, "invalid syntax for function call expression"); break; }
            /* jinja: keywords may follow *args, nothing may follow **kwargs */
            adv(p);
            struct tnode *v = parse_expr(p, true);
            if (!v) { rc = -1; break; }
            if (star) n->c = v; else n->d = v;
            continue;
        }
        bool is_kw = cur(p)->kind == TK_NAME && peek(p, 1)->kind == TK_OP && peek(p, 1)->op == OP_ASSIGN;
        if (n->d || (!is_kw && n->c)) { rc = SYNTAX(p, cur(p)->line, "invalid syntax for function call expression"); break; }
        if (is_kw) {
            const char *k = cur(p)->s;
            adv(p), adv(p);
            struct tnode *v = parse_expr(p, true);
            if (!v || (rc = nvec_push(p, &kw, v, k))) { rc = -1; break; }
        } else {
            if (kw.n) { rc = SYNTAX(p, cur(p)->line, "positional argument after keyword argument"); break; }
            struct tnode *v = parse_expr(p, true);
            if (!v || (rc = nvec_push(p, &pos, v, NULL))) { rc = -1; break; }
        }
    }
    if (rc == 0) rc = expect_op(p, OP_RPAREN, ")");
    if (rc == 0) {
        n->n_kids = pos.n; n->kids = nvec_nodes(p, &pos);
        n->n_kids2 = kw.n; n->kids2 = nvec_nodes(p, &kw);
        n->n_names = kw.n; n->names = nvec_names(p, &kw);
        if (p->st) rc = -1;
    }
    nvec_free(&pos);
    nvec_free(&kw);
    return rc;
}

static struct tnode *parse_tuple(struct tparser *p, bool with_condexpr, bool explicit_parens) {
    int line = cur(p)->line;
    struct nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n) {
            if (!is_op(p, OP_COMMA)) break;
            adv(p);
            is_tuple = true;
        }
        /* end of tuple: jinja stops at these */
        struct ttok *t = cur(p);
        if (t->kind == TK_VAR_END || t->kind == TK_BLOCK_END || (t->kind == TK_OP && (t->op == OP_RPAREN || t->op == OP_RBRACKET || t->op == OP_ASSIGN)) ||
            (t->kind == TK_NAME && (!strcmp(t->s, "in") || !strcmp(t->s, "recursive")))) {
            if (items.n) break;
            if (!explicit_parens) { SYNTAX(p, t->line, "expected an expression, got '%s'", tok_desc(t)); nvec_free(&items); return NULL; }
            break;
        }
        struct tnode *e = parse_expr(p, with_condexpr);
        if (!e || nvec_push(p, &items, e, NULL)) { nvec_free(&items); return NULL; }
    }
    struct tnode *r;
    if (!is_tuple && items.n == 1) r = items.v[0];
    else if ((r = mk(p, TN_TUPLE, line))) { r->n_kids = items.n; r->kids = nvec_nodes(p, &items); }
    nvec_free(&items);
    return p->st ? NULL : r;
}

static struct tnode *parse_list_or_dict(struct tparser *p, bool dict) {
    int line = cur(p)->line;
    adv(p);
    struct nvec keys = {0}, vals = {0};
    int close = dict ? OP_RBRACE : OP_RBRACKET;
    while (!is_op(p, close)) {
        if (keys.n && expect_op(p, OP_COMMA, ",")) goto fail;
        if (is_op(p, close)) break;
        struct tnode *k = parse_expr(p, true);
        if (!k || nvec_push(p, &keys, k, NULL)) goto fail;
        if (dict) {
            if (expect_op(p, OP_COLON, ":")) goto fail;
            struct tnode *v = parse_expr(p, true);
            if (!v || nvec_push(p, &vals, v, NULL)) goto fail;
        }
    }
    adv(p);
    struct tnode *r = mk(p, dict ? TN_DICT : TN_LIST, line);
    if (r) {
        r->n_kids = keys.n; r->kids = nvec_nodes(p, &keys);
        r->n_kids2 = vals.n; r->kids2 = nvec_nodes(p, &vals);
    }
    nvec_free(&keys); nvec_free(&vals);
    return p->st ? NULL : r;
fail:
    nvec_free(&keys); nvec_free(&vals);
    return NULL;
}

static bool known_callable_name(struct tparser *p, const char *name) {
    for (int i = 0; i < BI__COUNT; i++) if (!strcmp(tmpl_builtin_names[i], name)) return true;
    for (int i = 0; i < p->n_macros; i++) if (!strcmp(p->macros[i], name)) return true;
    return p->in_macro && !strcmp(name, "caller");
}

static struct tnode *parse_primary(struct tparser *p) {
    struct ttok *t = cur(p);
    struct tnode *n = NULL;
    if (t->kind == TK_NAME) {
        const char *s = t->s;
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "false") || !strcmp(s, "False")) {
            if ((n = mk(p, TN_CONST, t->line))) n->val = tv_bool(s[0] == 't' || s[0] == 'T');
        } else if (!strcmp(s, "none") || !strcmp(s, "None")) {
            if ((n = mk(p, TN_CONST, t->line))) n->val = tv_none();
        } else {
            if (!strcmp(s, "varargs") || !strcmp(s, "kwargs"))
                if (p->in_macro) { UNSUP(p, t->line, "unsupported macro feature '%s'", s); return NULL; }
            if (!strcmp(s, "caller") && p->cur_macro) p->cur_macro->op = 1;
            if ((n = mk(p, TN_NAME, t->line))) n->name = s;
        }
        adv(p);
        return n;
    }
    if (t->kind == TK_STRING) {
        /* adjacent string literals concatenate */
        struct tsb b = {0};
        int line = t->line;
        while (cur(p)->kind == TK_STRING) {
            size_t need = b.n + cur(p)->n + 1;
            if (need > b.cap) {
                char *np = realloc(b.p, need * 2);
                if (!np) { free(b.p); perr(p, VLLMC_ERR_OOM, line, "out of memory"); return NULL; }
                b.p = np; b.cap = need * 2;
            }
            memcpy(b.p + b.n, cur(p)->s, cur(p)->n);
            b.n += cur(p)->n;
            adv(p);
        }
        if ((n = mk(p, TN_CONST, line))) {
            struct tstr *s = tstr_new(&p->t->arena, b.p ? b.p : "", b.n);
            if (!s) { free(b.p); perr(p, VLLMC_ERR_OOM, line, "out of memory"); return NULL; }
            n->val.kind = TV_STR;
            n->val.u.s = s;
        }
        free(b.p);
        return n;
    }
    if (t->kind == TK_INT || t->kind == TK_FLOAT) {
        if ((n = mk(p, TN_CONST, t->line))) n->val = t->kind == TK_INT ? tv_int(t->i) : tv_float(t->f);
        adv(p);
        return n;
    }
    if (t->kind == TK_OP && t->op == OP_LPAREN) {
        adv(p);
        n = parse_tuple(p, true, true);
        if (n && expect_op(p, OP_RPAREN, ")")) return NULL;
        return n;
    }
    if (t->kind == TK_OP && (t->op == OP_LBRACKET || t->op == OP_LBRACE)) return parse_list_or_dict(p, t->op == OP_LBRACE);
    SYNTAX(p, t->line, "unexpected '%s'", tok_desc(t));
    return NULL;
}

static struct tnode *parse_call(struct tparser *p, struct tnode *callee);

/* a[i], a[start:stop:step] (each part optional) */
static struct tnode *parse_subscript(struct tparser *p, struct tnode *obj) {
    int line = cur(p)->line;
    adv(p); /* [ */
    struct tnode *start = NULL, *stop = NULL, *step = NULL;
    if (!is_op(p, OP_COLON)) {
        if (!(start = parse_expr(p, true))) return NULL;
        if (!is_op(p, OP_COLON)) {
            if (expect_op(p, OP_RBRACKET, "]")) return NULL;
            struct tnode *r = mk(p, TN_ITEM, line);
            if (r) { r->a = obj; r->b = start; }
            return r;
        }
    }
    adv(p); /* : */
    if (!is_op(p, OP_COLON) && !is_op(p, OP_RBRACKET) && !(stop = parse_expr(p, true))) return NULL;
    if (is_op(p, OP_COLON)) {
        adv(p);
        if (!is_op(p, OP_RBRACKET) && !(step = parse_expr(p, true))) return NULL;
    }
    if (expect_op(p, OP_RBRACKET, "]")) return NULL;
    struct tnode *r = mk(p, TN_SLICE, line);
    if (r) { r->a = obj; r->b = start; r->c = stop; r->d = step; }
    return r;
}

static struct tnode *parse_postfix(struct tparser *p, struct tnode *n) {
    while (n) {
        if (is_op(p, OP_DOT)) {
            int line = cur(p)->line;
            adv(p);
            struct ttok *t = cur(p);
            struct tnode *r;
            if (t->kind == TK_NAME) {
                if (!(r = mk(p, TN_ATTR, line))) return NULL;
                r->a = n;
                r->name = t->s;
            } else if (t->kind == TK_INT) {
                if (!(r = mk(p, TN_ITEM, line)) || !(r->b = mk(p, TN_CONST, line))) return NULL;
                r->a = n;
                r->b->val = tv_int(t->i);
            } else {
                SYNTAX(p, t->line, "expected a name after '.', got '%s'", tok_desc(t));
                return NULL;
            }
            adv(p);
            n = r;
        } else if (is_op(p, OP_LBRACKET)) {
            n = parse_subscript(p, n);
        } else if (is_op(p, OP_LPAREN)) {
            n = parse_call(p, n);
        } else break;
    }
    return n;
}

static struct tnode *parse_call(struct tparser *p, struct tnode *callee) {
    if (callee->kind == TN_ATTR && !tmpl_method_known(callee->name)) {
        UNSUP(p, callee->line, "unsupported method '%s()'", callee->name);
        return NULL;
    }
    if (callee->kind == TN_NAME && !known_callable_name(p, callee->name)) {
        UNSUP(p, callee->line, "unsupported function '%s()'", callee->name);
        return NULL;
    }
    struct tnode *c = mk(p, TN_CALL, cur(p)->line);
    if (!c) return NULL;
    c->a = callee;
    if (parse_call_args(p, c)) return NULL;
    return c;
}

static int parse_dotted_name(struct tparser *p, const char **out) {
    if (cur(p)->kind != TK_NAME) return SYNTAX(p, cur(p)->line, "expected a name, got '%s'", tok_desc(cur(p)));
    const char *name = cur(p)->s;
    adv(p);
    while (is_op(p, OP_DOT) && peek(p, 1)->kind == TK_NAME) {
        adv(p);
        size_t a = strlen(name), b = strlen(cur(p)->s);
        char *s = palloc(p, a + b + 2);
        if (!s) return -1;
        memcpy(s, name, a);
        s[a] = '.';
        memcpy(s + a + 1, cur(p)->s, b + 1);
        name = s;
        adv(p);
    }
    *out = name;
    return 0;
}

static struct tnode *parse_filter(struct tparser *p, struct tnode *n) {
    int line = cur(p)->line;
    adv(p); /* | */
    const char *name;
    if (parse_dotted_name(p, &name)) return NULL;
    int id = tmpl_filter_id(name);
    if (id < 0) { UNSUP(p, line, "unsupported filter '%s'", name); return NULL; }
    struct tnode *f = mk(p, TN_FILTER, line);
    if (!f) return NULL;
    f->op = id;
    f->name = name;
    f->a = n;
    if (is_op(p, OP_LPAREN) && parse_call_args(p, f)) return NULL;
    return f;
}

static struct tnode *parse_test(struct tparser *p, struct tnode *n) {
    int line = cur(p)->line;
    adv(p); /* is */
    bool negated = false;
    if (is_name(p, "not")) { negated = true; adv(p); }
    const char *name;
    if (parse_dotted_name(p, &name)) return NULL;
    int id = tmpl_test_id(name);
    if (id < 0) { UNSUP(p, line, "unsupported test '%s'", name); return NULL; }
    struct tnode *t = mk(p, TN_TEST, line);
    if (!t) return NULL;
    t->op = id;
    t->name = name;
    t->a = n;
    struct ttok *c = cur(p);
    if (is_op(p, OP_LPAREN)) {
        if (parse_call_args(p, t)) return NULL;
    } else if ((c->kind == TK_NAME || c->kind == TK_STRING || c->kind == TK_INT || c->kind == TK_FLOAT ||
                (c->kind == TK_OP && (c->op == OP_LPAREN || c->op == OP_LBRACKET || c->op == OP_LBRACE))) &&
               !(c->kind == TK_NAME && (!strcmp(c->s, "else") || !strcmp(c->s, "or") || !strcmp(c->s, "and")))) {
        if (c->kind == TK_NAME && !strcmp(c->s, "is")) { SYNTAX(p, c->line, "you cannot chain multiple tests with is"); return NULL; }
        struct tnode *arg = parse_primary(p);
        arg = parse_postfix(p, arg);
        if (!arg) return NULL;
        t->kids = palloc(p, sizeof *t->kids);
        if (!t->kids) return NULL;
        t->kids[0] = arg;
        t->n_kids = 1;
    }
    if (negated) {
        struct tnode *nn = mk(p, TN_NOT, line);
        if (!nn) return NULL;
        nn->a = t;
        return nn;
    }
    return t;
}

static struct tnode *parse_filter_expr(struct tparser *p, struct tnode *n) {
    while (n) {
        if (is_op(p, OP_PIPE)) n = parse_filter(p, n);
        else if (is_name(p, "is")) n = parse_test(p, n);
        else if (is_op(p, OP_LPAREN)) n = parse_call(p, n);
        else break;
    }
    return n;
}

static struct tnode *parse_unary(struct tparser *p, bool with_filter) {
    if (!enter(p)) return NULL;
    struct tnode *n;
    int line = cur(p)->line;
    if (is_op(p, OP_SUB) || is_op(p, OP_ADD)) {
        int k = is_op(p, OP_SUB) ? TN_NEG : TN_POS;
        adv(p);
        struct tnode *x = parse_unary(p, false);
        if (!x || !(n = mk(p, k, line))) LEAVE(p, NULL);
        n->a = x;
    } else n = parse_primary(p);
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    LEAVE(p, n);
}

static struct tnode *mk_bin(struct tparser *p, int op, int line, struct tnode *a, struct tnode *b) {
    if (!a || !b) return NULL;
    struct tnode *n = mk(p, TN_BIN, line);
    if (n) { n->op = op; n->a = a; n->b = b; }
    return n;
}

static struct tnode *parse_pow(struct tparser *p) {
    struct tnode *l = parse_unary(p, true);
    while (l && is_op(p, OP_POW)) { int line = cur(p)->line; adv(p); l = mk_bin(p, OP_POW, line, l, parse_unary(p, true)); }
    return l;
}
static struct tnode *parse_math2(struct tparser *p) {
    struct tnode *l = parse_pow(p);
    while (l && (is_op(p, OP_MUL) || is_op(p, OP_DIV) || is_op(p, OP_FLOORDIV) || is_op(p, OP_MOD))) {
        int op = cur(p)->op, line = cur(p)->line;
        adv(p);
        l = mk_bin(p, op, line, l, parse_pow(p));
    }
    return l;
}
static struct tnode *parse_concat(struct tparser *p) {
    struct tnode *l = parse_math2(p);
    if (!l || !is_op(p, OP_TILDE)) return l;
    struct nvec v = {0};
    int line = cur(p)->line;
    if (nvec_push(p, &v, l, NULL)) return NULL;
    while (is_op(p, OP_TILDE)) {
        adv(p);
        struct tnode *r = parse_math2(p);
        if (!r || nvec_push(p, &v, r, NULL)) { nvec_free(&v); return NULL; }
    }
    struct tnode *n = mk(p, TN_CONCAT, line);
    if (n) { n->n_kids = v.n; n->kids = nvec_nodes(p, &v); }
    nvec_free(&v);
    return p->st ? NULL : n;
}
static struct tnode *parse_math1(struct tparser *p) {
    struct tnode *l = parse_concat(p);
    while (l && (is_op(p, OP_ADD) || is_op(p, OP_SUB))) {
        int op = cur(p)->op, line = cur(p)->line;
        adv(p);
        l = mk_bin(p, op, line, l, parse_concat(p));
    }
    return l;
}
static struct tnode *parse_compare(struct tparser *p) {
    int line = cur(p)->line;
    struct tnode *first = parse_math1(p);
    if (!first) return NULL;
    struct nvec v = {0};
    int ops[64], n_ops = 0;
    for (;;) {
        int op = 0;
        struct ttok *t = cur(p);
        if (t->kind == TK_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT || t->op == OP_LTEQ || t->op == OP_GT || t->op == OP_GTEQ)) {
            op = t->op;
            adv(p);
        } else if (is_name(p, "in")) {
            op = OP_IN;
            adv(p);
        } else if (is_name(p, "not") && peek(p, 1)->kind == TK_NAME && !strcmp(peek(p, 1)->s, "in")) {
            op = OP_NOTIN;
            adv(p), adv(p);
        } else break;
        if (n_ops == (int)ARRAY_LEN(ops)) { nvec_free(&v); UNSUP(p, line, "comparison chain too long"); return NULL; }
        struct tnode *r = parse_math1(p);
        if (!r || nvec_push(p, &v, r, NULL)) { nvec_free(&v); return NULL; }
        ops[n_ops++] = op;
    }
    if (!n_ops) return first;
    struct tnode *n = mk(p, TN_COMPARE, line);
    if (n) {
        n->a = first;
        n->n_kids = v.n;
        n->kids = nvec_nodes(p, &v);
        if ((n->ops = palloc(p, (size_t)n_ops * sizeof(int)))) memcpy(n->ops, ops, (size_t)n_ops * sizeof(int));
    }
    nvec_free(&v);
    return p->st ? NULL : n;
}
static struct tnode *parse_not(struct tparser *p) {
    if (is_name(p, "not")) {
        int line = cur(p)->line;
        adv(p);
        if (!enter(p)) return NULL;
        struct tnode *x = parse_not(p);
        p->depth--;
        struct tnode *n = x ? mk(p, TN_NOT, line) : NULL;
        if (n) n->a = x;
        return n;
    }
    return parse_compare(p);
}
static struct tnode *parse_and(struct tparser *p) {
    struct tnode *l = parse_not(p);
    while (l && is_name(p, "and")) {
        int line = cur(p)->line;
        adv(p);
        struct tnode *r = parse_not(p), *n = r ? mk(p, TN_AND, line) : NULL;
        if (!n) return NULL;
        n->a = l; n->b = r; l = n;
    }
    return l;
}
static struct tnode *parse_or(struct tparser *p) {
    struct tnode *l = parse_and(p);
    while (l && is_name(p, "or")) {
        int line = cur(p)->line;
        adv(p);
        struct tnode *r = parse_and(p), *n = r ? mk(p, TN_OR, line) : NULL;
        if (!n) return NULL;
        n->a = l; n->b = r; l = n;
    }
    return l;
}
static struct tnode *parse_expr(struct tparser *p, bool with_condexpr) {
    if (!enter(p)) return NULL;
    struct tnode *e = parse_or(p);
    while (with_condexpr && e && is_name(p, "if")) {
        int line = cur(p)->line;
        adv(p);
        struct tnode *cond = parse_or(p), *els = NULL;
        if (!cond) LEAVE(p, NULL);
        if (is_name(p, "else")) {
            adv(p);
            if (!(els = parse_expr(p, true))) LEAVE(p, NULL);
        }
        struct tnode *n = mk(p, TN_COND, line);
        if (!n) LEAVE(p, NULL);
        n->a = e; n->b = cond; n->c = els;
        e = n;
    }
    LEAVE(p, e);
}

/* ---- statements ---- */

static int parse_body(struct tparser *p, const char *const *ends, struct nvec *out, const char **which);

static int parse_targets(struct tparser *p, struct nvec *names) {
    for (;;) {
        if (cur(p)->kind != TK_NAME) return SYNTAX(p, cur(p)->line, "expected a variable name, got '%s'", tok_desc(cur(p)));
        if (nvec_push(p, names, NULL, cur(p)->s)) return -1;
        adv(p);
        if (!is_op(p, OP_COMMA)) return 0;
        adv(p);
    }
}

static struct tnode *parse_for(struct tparser *p, int line) {
    struct tnode *n = mk(p, TN_FOR, line);
    struct nvec names = {0}, body = {0}, els = {0};
    const char *which = NULL;
    if (!n) return NULL;
    bool paren = is_op(p, OP_LPAREN);
    if (paren) adv(p);
    if (parse_targets(p, &names) || (paren && expect_op(p, OP_RPAREN, ")"))) goto fail;
    if (!is_name(p, "in")) { SYNTAX(p, cur(p)->line, "expected 'in' in for loop"); goto fail; }
    adv(p);
    if (!(n->a = parse_tuple(p, false, false))) goto fail;
    if (is_name(p, "if")) {
        adv(p);
        if (!(n->b = parse_expr(p, true))) goto fail;
    }
    if (is_name(p, "recursive")) { UNSUP(p, line, "unsupported recursive for loop"); goto fail; }
    if (expect_block_end(p)) goto fail;
    p->in_for++;
    static const char *const ends1[] = {"else", "endfor", NULL}, *const ends2[] = {"endfor", NULL};
    int rc = parse_body(p, ends1, &body, &which);
    p->in_for--;
    if (rc) goto fail;
    if (!strcmp(which, "else") && parse_body(p, ends2, &els, &which)) goto fail;
    n->n_names = names.n; n->names = nvec_names(p, &names);
    n->n_kids = body.n; n->kids = nvec_nodes(p, &body);
    n->n_kids2 = els.n; n->kids2 = nvec_nodes(p, &els);
    nvec_free(&names); nvec_free(&body); nvec_free(&els);
    return p->st ? NULL : n;
fail:
    nvec_free(&names); nvec_free(&body); nvec_free(&els);
    return NULL;
}

static struct tnode *parse_if(struct tparser *p, int line) {
    struct tnode *n = mk(p, TN_IF, line);
    struct nvec body = {0}, els = {0};
    const char *which = NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL}, *const ends2[] = {"endif", NULL};
    if (!n || !(n->a = parse_tuple(p, false, false)) || expect_block_end(p)) return NULL;
    if (parse_body(p, ends, &body, &which)) goto fail;
    n->n_kids = body.n; n->kids = nvec_nodes(p, &body);
    if (!strcmp(which, "elif")) {
        if (!enter(p)) goto fail;
        struct tnode *e = parse_if(p, cur(p)->line);
        p->depth--;
        if (!e || nvec_push(p, &els, e, NULL)) goto fail;
    } else if (!strcmp(which, "else")) {
        if (parse_body(p, ends2, &els, &which)) goto fail;
    }
    n->n_kids2 = els.n; n->kids2 = nvec_nodes(p, &els);
    nvec_free(&body); nvec_free(&els);
    return p->st ? NULL : n;
fail:
    nvec_free(&body); nvec_free(&els);
    return NULL;
}

static struct tnode *parse_set(struct tparser *p, int line) {
    struct tnode *n = mk(p, TN_SET, line);
    struct nvec names = {0}, body = {0};
    const char *which;
    if (!n) return NULL;
    if (cur(p)->kind == TK_NAME && peek(p, 1)->kind == TK_OP && peek(p, 1)->op == OP_DOT) {
        n->name = cur(p)->s;
        adv(p), adv(p);
        if (cur(p)->kind != TK_NAME) { SYNTAX(p, cur(p)->line, "expected an attribute name"); return NULL; }
        if (nvec_push(p, &names, NULL, cur(p)->s)) goto fail;
        adv(p);
        n->op = 1;
    } else if (parse_targets(p, &names)) goto fail;
    n->n_names = names.n; n->names = nvec_names(p, &names);
    if (is_op(p, OP_ASSIGN)) {
        adv(p);
        if (!(n->b = parse_tuple(p, true, false)) || expect_block_end(p)) goto fail;
    } else {
        if (n->op == 1 || names.n != 1) { SYNTAX(p, line, "expected '=' in set"); goto fail; }
        n->kind = TN_SET_BLOCK;
        if (is_op(p, OP_PIPE)) {
            struct tnode *cap = mk(p, TN_CAPTURE, line);
            if (!cap || !(n->a = parse_filter_expr(p, cap))) goto fail;
        }
        static const char *const ends[] = {"endset", NULL};
        if (expect_block_end(p) || parse_body(p, ends, &body, &which)) goto fail;
        n->n_kids = body.n; n->kids = nvec_nodes(p, &body);
    }
    nvec_free(&names); nvec_free(&body);
    return p->st ? NULL : n;
fail:
    nvec_free(&names); nvec_free(&body);
    return NULL;
}

static struct tnode *parse_macro(struct tparser *p, int line) {
    struct tnode *n = mk(p, TN_MACRO, line);
    struct nvec params = {0}, body = {0};
    const char *which;
    if (!n) return NULL;
    if (cur(p)->kind != TK_NAME) { SYNTAX(p, line, "expected a macro name"); return NULL; }
    n->name = cur(p)->s;
    adv(p);
    if (expect_op(p, OP_LPAREN, "(")) return NULL;
    while (!is_op(p, OP_RPAREN)) {
        if (params.n && expect_op(p, OP_COMMA, ",")) goto fail;
        if (cur(p)->kind != TK_NAME) { SYNTAX(p, cur(p)->line, "expected a parameter name"); goto fail; }
        const char *pn = cur(p)->s;
        struct tnode *def = NULL;
        adv(p);
        if (is_op(p, OP_ASSIGN)) {
            adv(p);
            if (!(def = parse_expr(p, true))) goto fail;
        } else if (params.n && params.v[params.n - 1]) {
            SYNTAX(p, line, "non-default argument follows default argument");
            goto fail;
        }
        if (nvec_push(p, &params, def, pn)) goto fail;
    }
    adv(p);
    if (expect_block_end(p)) goto fail;
    static const char *const ends[] = {"endmacro", NULL};
    p->in_macro++;
    int saved_for = p->in_for;
    struct tnode *saved_macro = p->cur_macro;
    p->in_for = 0;
    p->cur_macro = n;
    int rc = parse_body(p, ends, &body, &which);
    p->in_macro--;
    p->in_for = saved_for;
    p->cur_macro = saved_macro;
    if (rc) goto fail;
    n->n_names = params.n; n->names = nvec_names(p, &params);
    n->n_kids2 = params.n; n->kids2 = nvec_nodes(p, &params);
    n->n_kids = body.n; n->kids = nvec_nodes(p, &body);
    nvec_free(&params); nvec_free(&body);
    return p->st ? NULL : n;
fail:
    nvec_free(&params); nvec_free(&body);
    return NULL;
}

static struct tnode *parse_statement(struct tparser *p) {
    int line = cur(p)->line;
    adv(p); /* {% */
    if (cur(p)->kind != TK_NAME) { SYNTAX(p, line, "expected a statement name, got '%s'", tok_desc(cur(p))); return NULL; }
    const char *kw = cur(p)->s;
    adv(p);
    if (!enter(p)) return NULL;
    struct tnode *n = NULL;
    if (!strcmp(kw, "if")) n = parse_if(p, line);
    else if (!strcmp(kw, "for")) n = parse_for(p, line);
    else if (!strcmp(kw, "set")) n = parse_set(p, line);
    else if (!strcmp(kw, "macro")) n = parse_macro(p, line);
    else if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        if (!p->in_for) SYNTAX(p, line, "'%s' outside of a for loop", kw);
        else if ((n = mk(p, kw[0] == 'b' ? TN_BREAK : TN_CONTINUE, line)) && expect_block_end(p)) n = NULL;
    } else if (!strcmp(kw, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        struct nvec body = {0};
        const char *which;
        if ((n = mk(p, TN_BLOCK, line)) && !expect_block_end(p) && !parse_body(p, ends, &body, &which)) {
            n->n_kids = body.n;
            n->kids = nvec_nodes(p, &body);
        } else n = NULL;
        nvec_free(&body);
    } else if (!strcmp(kw, "call")) {
        /* {% call m(args) %}body{% endcall %}: m runs with caller() rendering body at the call site */
        static const char *const ends[] = {"endcall", NULL};
        struct nvec body = {0};
        const char *which;
        if (is_op(p, OP_LPAREN)) UNSUP(p, line, "unsupported call block with caller arguments");
        else if ((n = mk(p, TN_CALL_BLOCK, line)) && (n->a = parse_expr(p, true)) && n->a->kind != TN_CALL) {
            SYNTAX(p, line, "expected call");
        } else if (n && n->a && !expect_block_end(p) && !parse_body(p, ends, &body, &which) && (n->b = mk(p, TN_MACRO, line))) {
            n->b->name = "caller";
            n->b->n_kids = body.n;
            n->b->kids = nvec_nodes(p, &body);
        }
        nvec_free(&body);
    } else if (!strcmp(kw, "include") || !strcmp(kw, "import") || !strcmp(kw, "from") || !strcmp(kw, "extends") ||
               !strcmp(kw, "block") || !strcmp(kw, "filter") || !strcmp(kw, "with") ||
               !strcmp(kw, "autoescape") || !strcmp(kw, "do") || !strcmp(kw, "trans") || !strcmp(kw, "print")) {
        UNSUP(p, line, "unsupported construct '{%% %s %%}'", kw);
    } else SYNTAX(p, line, "unknown or misplaced statement '%s'", kw);
    p->depth--;
    return p->st ? NULL : n;
}

/* Parse statements until `{% <one of ends> ...`; *which gets the end tag (its block end consumed unless
 * the tag has arguments, like elif). ends == NULL parses to EOF. */
static int parse_body(struct tparser *p, const char *const *ends, struct nvec *out, const char **which) {
    int start_line = cur(p)->line;
    for (;;) {
        struct ttok *t = cur(p);
        struct tnode *n = NULL;
        if (t->kind == TK_EOF) {
            if (ends) return SYNTAX(p, start_line, "missing '{%% %s %%}' for the block opened here", ends[ends[1] ? 1 : 0]);
            return 0;
        }
        if (t->kind == TK_DATA) {
            if ((n = mk(p, TN_DATA, t->line))) {
                struct tstr *s = tstr_new(&p->t->arena, t->s, t->n);
                if (!s) return perr(p, VLLMC_ERR_OOM, t->line, "out of memory");
                n->val.kind = TV_STR;
                n->val.u.s = s;
            }
            adv(p);
        } else if (t->kind == TK_VAR_BEGIN) {
            adv(p);
            if ((n = mk(p, TN_OUTPUT, t->line)) && !(n->a = parse_tuple(p, true, false))) return -1;
            if (cur(p)->kind != TK_VAR_END) return SYNTAX(p, cur(p)->line, "expected '}}', got '%s'", tok_desc(cur(p)));
            adv(p);
        } else if (t->kind == TK_BLOCK_BEGIN) {
            struct ttok *kw = peek(p, 1);
            if (kw->kind == TK_NAME && ends) {
                for (int i = 0; ends[i]; i++) {
                    if (strcmp(kw->s, ends[i])) continue;
                    adv(p), adv(p);
                    *which = ends[i];
                    return strcmp(ends[i], "elif") ? expect_block_end(p) : 0;
                }
            }
            n = parse_statement(p);
        } else return SYNTAX(p, t->line, "unexpected '%s'", tok_desc(t));
        if (!n || nvec_push(p, out, n, NULL)) return -1;
    }
}

/* Collect macro names so calls to a macro defined later still pass the parse-time check. */
static int collect_macros(struct tparser *p) {
    for (int i = 0; i + 2 < p->n_toks; i++) {
        if (p->toks[i].kind != TK_BLOCK_BEGIN || p->toks[i + 1].kind != TK_NAME || strcmp(p->toks[i + 1].s, "macro")) continue;
        if (p->toks[i + 2].kind != TK_NAME) continue;
        if (p->n_macros == p->cap_macros) {
            int nc = p->cap_macros ? p->cap_macros * 2 : 8;
            const char **m = realloc(p->macros, (size_t)nc * sizeof *m);
            if (!m) return perr(p, VLLMC_ERR_OOM, 0, "out of memory");
            p->macros = m;
            p->cap_macros = nc;
        }
        p->macros[p->n_macros++] = p->toks[i + 2].s;
    }
    return 0;
}

vllmc_status tmpl_parse(const char *data, size_t size, struct tmpl **out) {
    *out = NULL;
    if (!data && size) return vllmc_errorf(VLLMC_ERR_INVALID, "chat template: NULL data");
    struct tmpl *t = calloc(1, sizeof *t);
    if (!t) return vllmc_errorf(VLLMC_ERR_OOM, "chat template: out of memory");
    struct tparser p = {.t = t};
    struct nvec body = {0};
    if (lex(&p, data ? data : "", size) == 0 && collect_macros(&p) == 0 && parse_body(&p, NULL, &body, NULL) == 0) {
        t->n_body = body.n;
        t->body = nvec_nodes(&p, &body);
    }
    nvec_free(&body);
    free(p.toks);
    free(p.macros);
    if (p.st != VLLMC_OK) {
        tmpl_free(t);
        return vllmc_errorf(p.st, "%s", p.err);
    }
    *out = t;
    return VLLMC_OK;
}

void tmpl_free(struct tmpl *t) {
    if (!t) return;
    tmpl_arena_free(&t->arena);
    free(t);
}
