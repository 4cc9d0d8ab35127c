/* Chat-template values with Python semantics: the render arena, UTF-8 helpers, str()/repr() and
 * json.dumps() formatting exactly as CPython prints them, equality and ordering, iteration, and the
 * conversion of JSON input (cJSON) into values. Every function here checks sizes and reports errors
 * through tmpl_fail; nothing aborts on bad input. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include "template/tmpl_internal.h"

/* ---------------- arena ---------------- */
struct tmpl_chunk { struct tmpl_chunk *next; size_t size, used; max_align_t data[]; };

void *tmpl_arena_alloc(struct tmpl_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    struct tmpl_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t sz = n > (size_t)60000 ? n : (size_t)60000;
        if (a->cap_total && (a->used_total + sz > a->cap_total || sz > a->cap_total)) { a->oom = true; return NULL; }
        c = malloc(sizeof *c + sz);
        if (!c) { a->oom = true; return NULL; }
        c->next = a->head;
        c->size = sz;
        c->used = 0;
        a->head = c;
        a->used_total += sz;
    }
    void *r = (char *)c->data + c->used;
    c->used += n;
    memset(r, 0, n);
    return r;
}

void tmpl_arena_free(struct tmpl_arena *a) {
    struct tmpl_chunk *c = a->head;
    while (c) { struct tmpl_chunk *n = c->next; free(c); c = n; }
    a->head = NULL;
    a->used_total = 0;
}

int tmpl_fail(struct tmpl_rt *rt, const char *fmt, ...) {
    if (rt->failed) return -1;
    rt->failed = true;
    int k = snprintf(rt->err, sizeof rt->err, "chat template line %d: ", rt->line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt->err + k, sizeof rt->err - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

int tmpl_charge(struct tmpl_rt *rt, size_t units) {
    rt->steps += units >> 6;
    if (rt->lim.max_steps && rt->steps > rt->lim.max_steps)
        return tmpl_fail(rt, "render exceeded the step limit (%llu)", (unsigned long long)rt->lim.max_steps);
    return 0;
}

static int oom(struct tmpl_rt *rt) {
    return tmpl_fail(rt, "render exceeded the memory limit (%zu bytes)", rt->lim.max_memory_bytes);
}

/* ---------------- text buffers ---------------- */
int tsb_put(struct tmpl_rt *rt, struct tsb *b, const char *p, size_t n) {
    if (n >= 64 && tmpl_charge(rt, n)) return -1;
    if (b->limit && (n > b->limit || b->n > b->limit - n))
        return tmpl_fail(rt, "rendered text exceeds the output limit (%zu bytes)", b->limit);
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return tmpl_fail(rt, "out of memory");
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}
int tsb_putc(struct tmpl_rt *rt, struct tsb *b, char c) { return tsb_put(rt, b, &c, 1); }
void tsb_free(struct tsb *b) { free(b->p); b->p = NULL; b->n = b->cap = 0; }

/* ---------------- UTF-8 ---------------- */
size_t utf8_next(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0) { *cp = 0; return 1; }
    if (p[0] < 0x80) { *cp = p[0]; return 1; }
    size_t len = p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC2 && p[0] < 0xE0 ? 2 : 0;
    if (!len || len > n) { *cp = 0xFFFD; return 1; }
    uint32_t c = p[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) { *cp = 0xFFFD; return 1; }
        c = (c << 6) | (p[i] & 0x3F);
    }
    if ((len == 3 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) || (len == 4 && (c < 0x10000 || c > 0x10FFFF))) {
        *cp = 0xFFFD;
        return 1;
    }
    *cp = c;
    return len;
}

size_t utf8_put(char *o, uint32_t c) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3F)); o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

size_t utf8_count(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n;) { uint32_t cp; i += utf8_next(p + i, n - i, &cp); c++; }
    return c;
}

bool py_isspace(uint32_t c) { /* str.isspace(): White_Space plus the \x1c-\x1f separators */
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* str.isprintable() for one code point, for repr(): approximated by the Unicode categories
 * Cc, Cf, Zs (but space), Zl, Zp, Cs, Co and the unassigned ranges most likely to appear. */
static bool py_isprintable(uint32_t c) {
    if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F)) return false;
    if (c == 0x3000 || c == 0xFEFF || (c >= 0xFFF0 && c <= 0xFFFB) || c == 0x061C || c == 0x180E) return false;
    if ((c >= 0xD800 && c <= 0xF8FF) || c >= 0xF0000 || c == 0xFFFE || c == 0xFFFF) return false;
    if (c >= 0xE0000 && c <= 0xE007F) return false;
    return true;
}

/* ---------------- float repr ---------------- */
void py_float_repr(double f, char *buf, size_t size) {
    if (isnan(f)) { snprintf(buf, size, "nan"); return; }
    if (isinf(f)) { snprintf(buf, size, f < 0 ? "-inf" : "inf"); return; }
    char tmp[40];
    int prec;
    for (prec = 0; prec < 17; prec++) { /* the shortest %.Ne that reads back exactly, as Python's repr */
        snprintf(tmp, sizeof tmp, "%.*e", prec, f);
        const double back = strtod(tmp, NULL);
        if (back == f) break;
        /* The nearest N-digit decimal can miss f where the other one bracketing f reads back (2^-24 is
         * 5.9604644775390625e-08: to 16 digits the tie rounds to ...062, which reads back as another double,
         * while ...063 reads back as 2^-24): step the last digit towards f. */
        char alt[40];
        memcpy(alt, tmp, sizeof alt);
        char *e = strchr(alt, 'e');
        const int up = (back < f) != (f < 0); /* away from zero in magnitude */
        char *q = e - 1;
        for (; q >= alt && (*q == '.' || *q == (up ? '9' : '0')); q--)
            if (*q != '.') *q = up ? '0' : '9';
        if (q < alt || *q == '-' || (!up && q == alt + (alt[0] == '-') && *q == '1' && q + 1 == e)) continue;
        *q = (char)(*q + (up ? 1 : -1));
        if (alt[alt[0] == '-'] == '0') continue; /* 1.000e5 stepped down: a leading zero; no shorter form */
        if (strtod(alt, NULL) == f) { memcpy(tmp, alt, sizeof tmp); break; }
    }
    if (prec == 17) snprintf(tmp, sizeof tmp, "%.16e", f);
    /* tmp: [-]d[.ddd]e[+-]XX */
    bool neg = tmp[0] == '-';
    const char *m = tmp + neg;
    char digits[24];
    int nd = 0;
    const char *e = strchr(m, 'e');
    for (const char *q = m; q < e; q++) if (*q != '.') digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int exp10 = atoi(e + 1);
    int decpt = exp10 + 1;
    char *o = buf;
    size_t left = size;
#define PUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_; left -= (size_t)w_; } while (0)
    if (neg) PUT("-");
    if (digits[0] == '0' && nd == 1) { PUT("0.0"); return; }
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            PUT("0.");
            for (int i = 0; i < -decpt; i++) PUT("0");
            PUT("%s", digits);
        } else if (decpt >= nd) {
            PUT("%s", digits);
            for (int i = nd; i < decpt; i++) PUT("0");
            PUT(".0");
        } else {
            PUT("%.*s.%s", decpt, digits, digits + decpt);
        }
    } else {
        PUT("%c", digits[0]);
        if (nd > 1) PUT(".%s", digits + 1);
        PUT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
#undef PUT
}

/* ---------------- constructors ---------------- */
struct tstr *tstr_new(struct tmpl_arena *a, const char *p, size_t n) {
    struct tstr *s = tmpl_arena_alloc(a, sizeof *s + n + 1);
    if (!s) return NULL;
    s->len = n;
    if (n) memcpy(s->p, p, n);
    s->p[n] = 0;
    return s;
}

int tv_str(struct tmpl_rt *rt, const char *p, size_t n, struct tv *out) {
    struct tstr *s = tstr_new(&rt->arena, p, n);
    if (!s) return oom(rt);
    memset(out, 0, sizeof *out);
    out->kind = TV_STR;
    out->u.s = s;
    return 0;
}

int tv_str_sb(struct tmpl_rt *rt, struct tsb *b, struct tv *out) {
    int rc = tv_str(rt, b->p ? b->p : "", b->n, out);
    tsb_free(b);
    return rc;
}

int tv_list(struct tmpl_rt *rt, size_t cap, struct tv *out) {
    struct tlist *l = tmpl_arena_alloc(&rt->arena, sizeof *l);
    if (!l) return oom(rt);
    if (cap) {
        if (cap > SIZE_MAX / sizeof(struct tv) || !(l->v = tmpl_arena_alloc(&rt->arena, cap * sizeof(struct tv)))) return oom(rt);
        l->cap = cap;
    }
    memset(out, 0, sizeof *out);
    out->kind = TV_LIST;
    out->u.l = l;
    return 0;
}

int tv_list_push(struct tmpl_rt *rt, struct tv *list, struct tv item) {
    struct tlist *l = list->u.l;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 8;
        struct tv *nv = tmpl_arena_alloc(&rt->arena, nc * sizeof *nv);
        if (!nv) return oom(rt);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = item;
    return 0;
}

int tv_dict(struct tmpl_rt *rt, struct tv *out) {
    struct tdict *d = tmpl_arena_alloc(&rt->arena, sizeof *d);
    if (!d) return oom(rt);
    memset(out, 0, sizeof *out);
    out->kind = TV_DICT;
    out->u.d = d;
    return 0;
}

/* Hash consistent with tv_eq on hashable keys: 1, 1.0 and True hash alike (as in Python). */
static uint64_t tv_hash(struct tv v) {
    uint64_t h;
    switch (v.kind) {
    case TV_STR:
        h = 1469598103934665603ull;
        for (size_t i = 0; i < v.u.s->len; i++) h = (h ^ (unsigned char)v.u.s->p[i]) * 1099511628211ull;
        return h;
    case TV_BOOL: return (uint64_t)v.u.b * 0x9E3779B97F4A7C15ull;
    case TV_INT: return (uint64_t)v.u.i * 0x9E3779B97F4A7C15ull;
    case TV_FLOAT:
        if (v.u.f == floor(v.u.f) && fabs(v.u.f) < 9.2e18) return (uint64_t)(int64_t)v.u.f * 0x9E3779B97F4A7C15ull;
        memcpy(&h, &v.u.f, sizeof h);
        return h * 0xC2B2AE3D27D4EB4Full;
    case TV_LIST:
        h = 0x27D4EB2F165667C5ull;
        for (size_t i = 0; i < v.u.l->n; i++) h = (h ^ tv_hash(v.u.l->v[i])) * 0x100000001B3ull;
        return h;
    case TV_NONE: return 0x51ED270B27D4EB4Full;
    default: return (uint64_t)(uintptr_t)v.u.d * 0x9E3779B97F4A7C15ull;
    }
}

static size_t dict_find(const struct tdict *d, struct tv key) { /* entry index or SIZE_MAX */
    if (d->idx) {
        size_t mask = d->idx_cap - 1;
        for (size_t s = (size_t)(tv_hash(key) >> 7) & mask;; s = (s + 1) & mask) {
            uint32_t e = d->idx[s];
            if (!e) return SIZE_MAX;
            if (tv_eq(d->k[e - 1], key)) return e - 1;
        }
    }
    for (size_t i = 0; i < d->n; i++) if (tv_eq(d->k[i], key)) return i;
    return SIZE_MAX;
}

static void dict_index_put(struct tdict *d, size_t entry) {
    size_t mask = d->idx_cap - 1, s = (size_t)(tv_hash(d->k[entry]) >> 7) & mask;
    while (d->idx[s]) s = (s + 1) & mask;
    d->idx[s] = (uint32_t)(entry + 1);
}

int tv_dict_set(struct tmpl_rt *rt, struct tdict *d, struct tv key, struct tv val) {
    size_t at = dict_find(d, key);
    if (at != SIZE_MAX) { d->v[at] = val; return 0; } /* Python keeps the first position */
    if (d->n >= UINT32_MAX / 4) return oom(rt);
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 8;
        struct tv *nk = tmpl_arena_alloc(&rt->arena, nc * sizeof *nk), *nv = tmpl_arena_alloc(&rt->arena, nc * sizeof *nv);
        if (!nk || !nv) return oom(rt);
        if (d->n) { memcpy(nk, d->k, d->n * sizeof *nk); memcpy(nv, d->v, d->n * sizeof *nv); }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
    if (d->n > 16 && (!d->idx || d->n * 2 > d->idx_cap)) { /* (re)build the index at load <= 1/4 */
        size_t cap = 64;
        while (cap < d->n * 4) cap *= 2;
        uint32_t *idx = tmpl_arena_alloc(&rt->arena, cap * sizeof *idx);
        if (!idx) return oom(rt);
        d->idx = idx;
        d->idx_cap = cap;
        for (size_t i = 0; i < d->n; i++) dict_index_put(d, i);
    } else if (d->idx) dict_index_put(d, d->n - 1);
    return 0;
}

bool tv_dict_get(const struct tdict *d, struct tv key, struct tv *out) {
    size_t at = dict_find(d, key);
    if (at == SIZE_MAX) return false;
    *out = d->v[at];
    return true;
}

bool tv_dict_get_str(const struct tdict *d, const char *key, struct tv *out) {
    size_t n = strlen(key);
    if (d->idx) {
        struct tv k = {0};
        struct tstr *ks = malloc(sizeof *ks + n + 1); /* a key to hash; small and short-lived */
        if (ks) {
            ks->len = n;
            memcpy(ks->p, key, n + 1);
            k.kind = TV_STR;
            k.u.s = ks;
            bool r = tv_dict_get(d, k, out);
            free(ks);
            return r;
        }
    }
    for (size_t i = 0; i < d->n; i++) {
        const struct tv *k = &d->k[i];
        if (k->kind == TV_STR && k->u.s->len == n && !memcmp(k->u.s->p, key, n)) { *out = d->v[i]; return true; }
    }
    return false;
}

/* ---------------- semantics ---------------- */
bool tv_is_num(struct tv v) { return v.kind == TV_BOOL || v.kind == TV_INT || v.kind == TV_FLOAT; }
double tv_num(struct tv v) { return v.kind == TV_FLOAT ? v.u.f : v.kind == TV_INT ? (double)v.u.i : v.kind == TV_BOOL ? v.u.b : 0; }

bool tv_hashable(struct tv v) {
    if (v.kind == TV_DICT) return false;
    if (v.kind != TV_LIST) return true;
    if (v.flags & (TV_F_GEN | TV_F_RANGE)) return true;
    if (!(v.flags & TV_F_TUPLE)) return false;
    for (size_t i = 0; i < v.u.l->n; i++) if (!tv_hashable(v.u.l->v[i])) return false;
    return true;
}

bool tv_truthy(struct tv v) {
    switch (v.kind) {
    case TV_UNDEF: case TV_NONE: return false;
    case TV_BOOL: return v.u.b;
    case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0;
    case TV_STR: return v.u.s->len > 0;
    case TV_LIST: return (v.flags & TV_F_GEN) || v.u.l->n > 0;
    case TV_DICT: return v.u.d->n > 0;
    default: return true;
    }
}

const char *tv_type_name(struct tv v) {
    switch (v.kind) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST:
        return v.flags & TV_F_TUPLE ? "tuple" : v.flags & TV_F_GEN ? "generator" : v.flags & TV_F_RANGE ? "range" : v.flags & TV_F_ITEMS ? "dict_items"
             : v.flags & TV_F_KEYS ? "dict_keys" : v.flags & TV_F_VALUES ? "dict_values" : "list";
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_LOOP: return "LoopContext";
    case TV_MACRO: return "Macro";
    default: return "function";
    }
}

static bool num_eq(struct tv a, struct tv b) {
    if (a.kind != TV_FLOAT && b.kind != TV_FLOAT) {
        int64_t x = a.kind == TV_BOOL ? a.u.b : a.u.i, y = b.kind == TV_BOOL ? b.u.b : b.u.i;
        return x == y;
    }
    return tv_num(a) == tv_num(b);
}

bool tv_eq(struct tv a, struct tv b) {
    if (tv_is_num(a) && tv_is_num(b)) return num_eq(a, b);
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case TV_UNDEF: case TV_NONE: return true;
    case TV_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->p, b.u.s->p, a.u.s->len);
    case TV_LIST:
        if ((a.flags & TV_F_LISTKIND) != (b.flags & TV_F_LISTKIND) || a.u.l->n != b.u.l->n) return false;
        if (a.flags & (TV_F_GEN | TV_F_VIEW)) return a.u.l == b.u.l;
        for (size_t i = 0; i < a.u.l->n; i++) if (!tv_eq(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case TV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            struct tv o;
            if (!tv_dict_get(b.u.d, a.u.d->k[i], &o) || !tv_eq(a.u.d->v[i], o)) return false;
        }
        return true;
    case TV_NS: return a.u.d == b.u.d;
    case TV_LOOP: return a.u.loop == b.u.loop;
    case TV_MACRO: return a.u.macro == b.u.macro;
    case TV_BUILTIN: return a.u.builtin == b.u.builtin;
    case TV_METHOD: { /* Python: the same method of the same object (identity; for scalars, equal values) */
        const struct tv x = a.u.m->self, y = b.u.m->self;
        if (a.u.m->id != b.u.m->id || x.kind != y.kind) return false;
        if (x.kind == TV_STR) return x.u.s == y.u.s;
        if (x.kind == TV_LIST) return x.u.l == y.u.l;
        if (x.kind == TV_DICT || x.kind == TV_NS) return x.u.d == y.u.d;
        return tv_eq(x, y);
    }
    default: return false;
    }
}

int tv_lt(struct tmpl_rt *rt, struct tv a, struct tv b, bool *out) {
    if (tv_is_num(a) && tv_is_num(b)) {
        if (a.kind != TV_FLOAT && b.kind != TV_FLOAT) {
            int64_t x = a.kind == TV_BOOL ? a.u.b : a.u.i, y = b.kind == TV_BOOL ? b.u.b : b.u.i;
            *out = x < y;
        } else *out = tv_num(a) < tv_num(b);
        return 0;
    }
    if (a.kind == TV_STR && b.kind == TV_STR) { /* UTF-8 byte order is code point order */
        size_t n = VLLMC_MIN(a.u.s->len, b.u.s->len);
        int c = memcmp(a.u.s->p, b.u.s->p, n);
        *out = c < 0 || (c == 0 && a.u.s->len < b.u.s->len);
        return 0;
    }
    if (a.kind == TV_LIST && b.kind == TV_LIST && (a.flags & TV_F_LISTKIND) == (b.flags & TV_F_LISTKIND) &&
        !(a.flags & (TV_F_GEN | TV_F_VIEW | TV_F_RANGE))) {
        size_t n = VLLMC_MIN(a.u.l->n, b.u.l->n);
        for (size_t i = 0; i < n; i++) {
            if (tv_eq(a.u.l->v[i], b.u.l->v[i])) continue;
            return tv_lt(rt, a.u.l->v[i], b.u.l->v[i], out);
        }
        *out = a.u.l->n < b.u.l->n;
        return 0;
    }
    if (a.kind == TV_UNDEF || b.kind == TV_UNDEF) return tmpl_fail(rt, "cannot compare an undefined value");
    return tmpl_fail(rt, "'<' not supported between instances of '%s' and '%s'", tv_type_name(a), tv_type_name(b));
}

/* ---------------- str() / repr() ---------------- */
static int write_str_repr(struct tmpl_rt *rt, struct tsb *b, const struct tstr *s) {
    bool has_sq = memchr(s->p, '\'', s->len) != NULL, has_dq = memchr(s->p, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (tsb_putc(rt, b, q)) return -1;
    for (size_t i = 0; i < s->len;) {
        uint32_t cp;
        size_t l = utf8_next(s->p + i, s->len - i, &cp);
        char esc[16];
        const char *w = esc;
        size_t wn;
        if (cp == (uint32_t)q || cp == '\\') { esc[0] = '\\'; esc[1] = (char)cp; wn = 2; }
        else if (cp == '\n') { w = "\\n"; wn = 2; }
        else if (cp == '\r') { w = "\\r"; wn = 2; }
        else if (cp == '\t') { w = "\\t"; wn = 2; }
        else if (!py_isprintable(cp)) {
            wn = (size_t)snprintf(esc, sizeof esc, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", (unsigned)cp);
        } else { w = s->p + i; wn = l; }
        if (tsb_put(rt, b, w, wn)) return -1;
        i += l;
    }
    return tsb_putc(rt, b, q);
}

static int write_value(struct tmpl_rt *rt, struct tsb *b, struct tv v, bool repr, int depth) {
    char buf[64];
    if (depth > 200) return tmpl_fail(rt, "value nested too deeply to print");
    switch (v.kind) {
    case TV_UNDEF: return repr ? tsb_put(rt, b, "Undefined", 9) : 0;
    case TV_NONE: return tsb_put(rt, b, "None", 4);
    case TV_BOOL: return v.u.b ? tsb_put(rt, b, "True", 4) : tsb_put(rt, b, "False", 5);
    case TV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i); return tsb_put(rt, b, buf, strlen(buf));
    case TV_FLOAT: py_float_repr(v.u.f, buf, sizeof buf); return tsb_put(rt, b, buf, strlen(buf));
    case TV_STR:
        if (!repr) return tsb_put(rt, b, v.u.s->p, v.u.s->len);
        if ((v.flags & TV_F_MARKUP) && tsb_put(rt, b, "Markup(", 7)) return -1;
        if (write_str_repr(rt, b, v.u.s)) return -1;
        return (v.flags & TV_F_MARKUP) ? tsb_putc(rt, b, ')') : 0;
    case TV_LIST: {
        bool tup = v.flags & TV_F_TUPLE;
        if (v.flags & TV_F_GEN) return tmpl_fail(rt, "cannot print a generator (Python prints its address); add |list");
        if (v.flags & TV_F_RANGE) return tmpl_fail(rt, "unsupported: cannot print a range object; add |list");
        if ((v.flags & TV_F_VIEW) && (tsb_put(rt, b, tv_type_name(v), strlen(tv_type_name(v))) || tsb_putc(rt, b, '('))) return -1;
        if (tsb_putc(rt, b, tup ? '(' : '[')) return -1;
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i && tsb_put(rt, b, ", ", 2)) return -1;
            if (write_value(rt, b, v.u.l->v[i], true, depth + 1)) return -1;
        }
        if (tup && v.u.l->n == 1 && tsb_putc(rt, b, ',')) return -1;
        if (tsb_putc(rt, b, tup ? ')' : ']')) return -1;
        return (v.flags & TV_F_VIEW) ? tsb_putc(rt, b, ')') : 0;
    }
    case TV_DICT:
        if (tsb_putc(rt, b, '{')) return -1;
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i && tsb_put(rt, b, ", ", 2)) return -1;
            if (write_value(rt, b, v.u.d->k[i], true, depth + 1) || tsb_put(rt, b, ": ", 2) ||
                write_value(rt, b, v.u.d->v[i], true, depth + 1))
                return -1;
        }
        return tsb_putc(rt, b, '}');
    default:
        return tmpl_fail(rt, "cannot print a %s value (its text in Python is an object address)", tv_type_name(v));
    }
}

int tv_write_str(struct tmpl_rt *rt, struct tsb *b, struct tv v) { return write_value(rt, b, v, false, 0); }
int tv_write_repr(struct tmpl_rt *rt, struct tsb *b, struct tv v) { return write_value(rt, b, v, true, 0); }

int tv_to_str(struct tmpl_rt *rt, struct tv v, struct tv *out) {
    if (v.kind == TV_STR) { *out = v; return 0; }
    struct tsb b = {.limit = rt->lim.max_output_bytes};
    if (tv_write_str(rt, &b, v)) { tsb_free(&b); return -1; }
    return tv_str_sb(rt, &b, out);
}

/* ---------------- json.dumps ---------------- */
static int json_string(struct tmpl_rt *rt, struct tsb *b, const char *p, size_t n, bool ensure_ascii) {
    if (tsb_putc(rt, b, '"')) return -1;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = utf8_next(p + i, n - i, &cp);
        char esc[16];
        const char *w = esc;
        size_t wn = 2;
        switch (cp) {
        case '"': w = "\\\""; break;
        case '\\': w = "\\\\"; break;
        case '\n': w = "\\n"; break;
        case '\r': w = "\\r"; break;
        case '\t': w = "\\t"; break;
        case '\b': w = "\\b"; break;
        case '\f': w = "\\f"; break;
        default:
            if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    wn = (size_t)snprintf(esc, sizeof esc, "\\u%04x\\u%04x", (unsigned)(0xD800 | (v >> 10)), (unsigned)(0xDC00 | (v & 0x3FF)));
                } else wn = (size_t)snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
            } else { w = p + i; wn = l; }
        }
        if (tsb_put(rt, b, w, wn)) return -1;
        i += l;
    }
    return tsb_putc(rt, b, '"');
}

static int json_indent(struct tmpl_rt *rt, struct tsb *b, const struct tjson_opts *o, int level) {
    if (tsb_putc(rt, b, '\n')) return -1;
    for (int i = 0; i < level * o->indent; i++) if (tsb_putc(rt, b, ' ')) return -1;
    return 0;
}

static int json_key(struct tmpl_rt *rt, struct tsb *b, struct tv k, const struct tjson_opts *o) {
    char buf[64];
    switch (k.kind) {
    case TV_STR: return json_string(rt, b, k.u.s->p, k.u.s->len, o->ensure_ascii);
    case TV_INT: snprintf(buf, sizeof buf, "\"%lld\"", (long long)k.u.i); break;
    case TV_FLOAT: buf[0] = '"'; py_float_repr(k.u.f, buf + 1, sizeof buf - 2); strcat(buf, "\""); break;
    case TV_BOOL: snprintf(buf, sizeof buf, "\"%s\"", k.u.b ? "true" : "false"); break;
    case TV_NONE: snprintf(buf, sizeof buf, "\"null\""); break;
    default: return tmpl_fail(rt, "keys must be str, int, float, bool or None, not %s", tv_type_name(k));
    }
    return tsb_put(rt, b, buf, strlen(buf));
}

int tv_write_json(struct tmpl_rt *rt, struct tsb *b, struct tv v, const struct tjson_opts *o, int level) {
    char buf[64];
    if (level > 200) return tmpl_fail(rt, "value nested too deeply for tojson");
    switch (v.kind) {
    case TV_NONE: return tsb_put(rt, b, "null", 4);
    case TV_BOOL: return v.u.b ? tsb_put(rt, b, "true", 4) : tsb_put(rt, b, "false", 5);
    case TV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i); return tsb_put(rt, b, buf, strlen(buf));
    case TV_FLOAT:
        if (isnan(v.u.f)) return tsb_put(rt, b, "NaN", 3);
        if (isinf(v.u.f)) return v.u.f < 0 ? tsb_put(rt, b, "-Infinity", 9) : tsb_put(rt, b, "Infinity", 8);
        py_float_repr(v.u.f, buf, sizeof buf);
        return tsb_put(rt, b, buf, strlen(buf));
    case TV_STR: return json_string(rt, b, v.u.s->p, v.u.s->len, o->ensure_ascii);
    case TV_LIST: {
        if (v.flags & (TV_F_GEN | TV_F_VIEW | TV_F_RANGE)) return tmpl_fail(rt, "Object of type %s is not JSON serializable", tv_type_name(v));
        if (!v.u.l->n) return tsb_put(rt, b, "[]", 2);
        if (tsb_putc(rt, b, '[')) return -1;
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i && tsb_put(rt, b, o->item_sep, strlen(o->item_sep))) return -1;
            if (o->indent >= 0 && json_indent(rt, b, o, level + 1)) return -1;
            if (tv_write_json(rt, b, v.u.l->v[i], o, level + 1)) return -1;
        }
        if (o->indent >= 0 && json_indent(rt, b, o, level)) return -1;
        return tsb_putc(rt, b, ']');
    }
    case TV_DICT: {
        struct tdict *d = v.u.d;
        if (!d->n) return tsb_put(rt, b, "{}", 2);
        size_t *order = tmpl_arena_alloc(&rt->arena, d->n * sizeof *order);
        if (!order) return oom(rt);
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) { /* insertion sort: stable, small dicts */
            for (size_t i = 1; i < d->n; i++) {
                for (size_t j = i; j > 0; j--) {
                    bool lt;
                    if (tv_lt(rt, d->k[order[j]], d->k[order[j - 1]], &lt)) return -1;
                    if (!lt) break;
                    size_t t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
                }
            }
        }
        if (tsb_putc(rt, b, '{')) return -1;
        for (size_t i = 0; i < d->n; i++) {
            if (i && tsb_put(rt, b, o->item_sep, strlen(o->item_sep))) return -1;
            if (o->indent >= 0 && json_indent(rt, b, o, level + 1)) return -1;
            if (json_key(rt, b, d->k[order[i]], o) || tsb_put(rt, b, o->key_sep, strlen(o->key_sep)) ||
                tv_write_json(rt, b, d->v[order[i]], o, level + 1))
                return -1;
        }
        if (o->indent >= 0 && json_indent(rt, b, o, level)) return -1;
        return tsb_putc(rt, b, '}');
    }
    default:
        return tmpl_fail(rt, "Object of type %s is not JSON serializable", tv_type_name(v));
    }
}

/* ---------------- iteration ---------------- */
int tv_iter_list(struct tmpl_rt *rt, struct tv v, struct tlist **out) {
    struct tv l = {0};
    if (tmpl_charge(rt, v.kind == TV_LIST ? v.u.l->n : v.kind == TV_STR ? v.u.s->len : v.kind == TV_DICT ? v.u.d->n : 0)) return -1;
    switch (v.kind) {
    case TV_LIST: *out = v.u.l; return 0;
    case TV_UNDEF:
        if (tv_list(rt, 0, &l)) return -1;
        *out = l.u.l;
        return 0;
    case TV_DICT:
        if (tv_list(rt, v.u.d->n, &l)) return -1;
        for (size_t i = 0; i < v.u.d->n; i++) l.u.l->v[i] = v.u.d->k[i];
        l.u.l->n = v.u.d->n;
        *out = l.u.l;
        return 0;
    case TV_STR: {
        size_t n = utf8_count(v.u.s->p, v.u.s->len);
        if (tv_list(rt, n, &l)) return -1;
        for (size_t i = 0, k = 0; i < v.u.s->len; k++) {
            uint32_t cp;
            size_t len = utf8_next(v.u.s->p + i, v.u.s->len - i, &cp);
            if (tv_str(rt, v.u.s->p + i, len, &l.u.l->v[k])) return -1;
            i += len;
        }
        l.u.l->n = n;
        *out = l.u.l;
        return 0;
    }
    default:
        return tmpl_fail(rt, "'%s' object is not iterable", tv_type_name(v));
    }
}

/* ---------------- JSON input ---------------- */
/* Numbers in document order from the JSON text: cJSON keeps only a double, Python keeps int vs float. */
struct numscan { const char *p; size_t n, i; };
static int numscan_next(struct numscan *s, bool *is_float) {
    while (s->i < s->n) {
        char c = s->p[s->i];
        if (c == '"') {
            for (s->i++; s->i < s->n && s->p[s->i] != '"'; s->i++) if (s->p[s->i] == '\\') s->i++;
            s->i++;
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            bool f = false;
            while (s->i < s->n && strchr("+-0123456789.eE", s->p[s->i])) {
                if (strchr(".eE", s->p[s->i])) f = true;
                s->i++;
            }
            *is_float = f;
            return 1;
        }
        s->i++;
    }
    return 0;
}

static int from_cjson(struct tmpl_rt *rt, const cJSON *j, struct numscan *ns, struct tv *out, int depth) {
    if (depth > 200) return tmpl_fail(rt, "JSON input nested too deeply");
    if (cJSON_IsNull(j)) { *out = tv_none(); return 0; }
    if (cJSON_IsBool(j)) { *out = tv_bool(cJSON_IsTrue(j)); return 0; }
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        bool is_float;
        if (ns && numscan_next(ns, &is_float)) {
            if (!is_float && d >= -9.2e18 && d <= 9.2e18) {
                /* re-read the digits: a double cannot hold every int64 */
                *out = tv_int((int64_t)d);
                const char *e = ns->p + ns->i;
                const char *b = e;
                while (b > ns->p && strchr("-0123456789", b[-1])) b--;
                char tmp[32];
                size_t len = (size_t)(e - b);
                if (len < sizeof tmp) { memcpy(tmp, b, len); tmp[len] = 0; out->u.i = strtoll(tmp, NULL, 10); }
            } else *out = tv_float(d);
        } else if (d == floor(d) && fabs(d) <= 9007199254740992.0) *out = tv_int((int64_t)d);
        else *out = tv_float(d);
        return 0;
    }
    if (cJSON_IsString(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        return tv_str(rt, s, strlen(s), out);
    }
    if (cJSON_IsArray(j)) {
        if (tv_list(rt, 0, out)) return -1;
        for (const cJSON *c = j->child; c; c = c->next) {
            struct tv v;
            if (from_cjson(rt, c, ns, &v, depth + 1) || tv_list_push(rt, out, v)) return -1;
        }
        return 0;
    }
    if (cJSON_IsObject(j)) {
        if (tv_dict(rt, out)) return -1;
        for (const cJSON *c = j->child; c; c = c->next) {
            struct tv k, v;
            const char *key = c->string ? c->string : "";
            if (tv_str(rt, key, strlen(key), &k) || from_cjson(rt, c, ns, &v, depth + 1) || tv_dict_set(rt, out->u.d, k, v)) return -1;
        }
        return 0;
    }
    return tmpl_fail(rt, "unsupported JSON value");
}

int tv_from_cjson(struct tmpl_rt *rt, const cJSON *j, const char *text, size_t text_size, struct tv *out) {
    struct numscan ns = {text, text_size, 0};
    return from_cjson(rt, j, text ? &ns : NULL, out, 0);
}
