/* Chat-template builtins: jinja2's filters and tests, the Python str/dict/list methods templates call,
 * the global functions HF provides, and the sandboxed attribute/item lookup rules (environment.getattr
 * and getitem of ImmutableSandboxedEnvironment). Each follows the CPython/jinja2 3.1 implementation it
 * names; anything not listed here is rejected when the template is parsed. */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include "template/tmpl_internal.h"

/* ---------------- tables ---------------- */
enum {
    F_ABS, F_CAPITALIZE, F_COUNT, F_D, F_DEFAULT, F_E, F_ESCAPE, F_FIRST, F_FLOAT, F_INDENT, F_INT, F_ITEMS,
    F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN, F_REJECT, F_REJECTATTR, F_REPLACE,
    F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM,
    F_UNIQUE, F_UPPER, F__COUNT
};
static const char *const filter_names[F__COUNT] = {
    "abs", "capitalize", "count", "d", "default", "e", "escape", "first", "float", "indent", "int", "items",
    "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace",
    "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim",
    "unique", "upper",
};

enum {
    T_DEFINED, T_UNDEFINED, T_NONE, T_BOOLEAN, T_FALSE, T_TRUE, T_INTEGER, T_FLOAT, T_NUMBER, T_STRING,
    T_MAPPING, T_SEQUENCE, T_ITERABLE, T_CALLABLE, T_ODD, T_EVEN, T_DIVISIBLEBY, T_EQ, T_NE, T_LT, T_LE, T_GT,
    T_GE, T_IN, T_LOWER, T_UPPER, T_SAMEAS, T_ESCAPED, T__COUNT
};
static const struct { const char *name; int id; } test_names[] = {
    {"defined", T_DEFINED}, {"undefined", T_UNDEFINED}, {"none", T_NONE}, {"boolean", T_BOOLEAN},
    {"false", T_FALSE}, {"true", T_TRUE}, {"integer", T_INTEGER}, {"float", T_FLOAT}, {"number", T_NUMBER},
    {"string", T_STRING}, {"mapping", T_MAPPING}, {"sequence", T_SEQUENCE}, {"iterable", T_ITERABLE},
    {"callable", T_CALLABLE}, {"odd", T_ODD}, {"even", T_EVEN}, {"divisibleby", T_DIVISIBLEBY},
    {"eq", T_EQ}, {"equalto", T_EQ}, {"==", T_EQ}, {"ne", T_NE}, {"!=", T_NE}, {"lt", T_LT},
    {"lessthan", T_LT}, {"<", T_LT}, {"le", T_LE}, {"<=", T_LE}, {"gt", T_GT}, {"greaterthan", T_GT},
    {">", T_GT}, {"ge", T_GE}, {">=", T_GE}, {"in", T_IN}, {"lower", T_LOWER}, {"upper", T_UPPER},
    {"sameas", T_SAMEAS}, {"escaped", T_ESCAPED},
};

const char *const tmpl_builtin_names[BI__COUNT] = {"raise_exception", "strftime_now", "namespace", "range", "dict"};

enum {
    M_STARTSWITH, M_ENDSWITH, M_SPLIT, M_RSPLIT, M_STRIP, M_LSTRIP, M_RSTRIP, M_REPLACE, M_UPPER, M_LOWER,
    M_TITLE, M_CAPITALIZE, M_FIND, M_RFIND, M_SINDEX, M_RINDEX, M_SCOUNT, M_JOIN, M_SPLITLINES, M_ISDIGIT,
    M_ISALPHA, M_ISALNUM, M_ISSPACE, M_ISUPPER, M_ISLOWER, M_REMOVEPREFIX, M_REMOVESUFFIX,
    M_ITEMS, M_KEYS, M_VALUES, M_GET, M_LINDEX, M_LCOUNT, M_CYCLE, M_UNSUPPORTED
};
static const struct { uint8_t kind; const char *name; int id; } methods[] = {
    {TV_STR, "startswith", M_STARTSWITH}, {TV_STR, "endswith", M_ENDSWITH}, {TV_STR, "split", M_SPLIT},
    {TV_STR, "rsplit", M_RSPLIT}, {TV_STR, "strip", M_STRIP}, {TV_STR, "lstrip", M_LSTRIP},
    {TV_STR, "rstrip", M_RSTRIP}, {TV_STR, "replace", M_REPLACE}, {TV_STR, "upper", M_UPPER},
    {TV_STR, "lower", M_LOWER}, {TV_STR, "title", M_TITLE}, {TV_STR, "capitalize", M_CAPITALIZE},
    {TV_STR, "find", M_FIND}, {TV_STR, "rfind", M_RFIND}, {TV_STR, "index", M_SINDEX}, {TV_STR, "rindex", M_RINDEX},
    {TV_STR, "count", M_SCOUNT}, {TV_STR, "join", M_JOIN}, {TV_STR, "splitlines", M_SPLITLINES},
    {TV_STR, "isdigit", M_ISDIGIT}, {TV_STR, "isalpha", M_ISALPHA}, {TV_STR, "isalnum", M_ISALNUM},
    {TV_STR, "isspace", M_ISSPACE}, {TV_STR, "isupper", M_ISUPPER}, {TV_STR, "islower", M_ISLOWER},
    {TV_STR, "removeprefix", M_REMOVEPREFIX}, {TV_STR, "removesuffix", M_REMOVESUFFIX},
    {TV_STR, "casefold", M_UNSUPPORTED}, {TV_STR, "center", M_UNSUPPORTED}, {TV_STR, "encode", M_UNSUPPORTED},
    {TV_STR, "expandtabs", M_UNSUPPORTED}, {TV_STR, "format", M_UNSUPPORTED}, {TV_STR, "format_map", M_UNSUPPORTED},
    {TV_STR, "isascii", M_UNSUPPORTED}, {TV_STR, "isdecimal", M_UNSUPPORTED}, {TV_STR, "isidentifier", M_UNSUPPORTED},
    {TV_STR, "isnumeric", M_UNSUPPORTED}, {TV_STR, "isprintable", M_UNSUPPORTED}, {TV_STR, "istitle", M_UNSUPPORTED},
    {TV_STR, "ljust", M_UNSUPPORTED}, {TV_STR, "maketrans", M_UNSUPPORTED}, {TV_STR, "partition", M_UNSUPPORTED},
    {TV_STR, "rjust", M_UNSUPPORTED}, {TV_STR, "rpartition", M_UNSUPPORTED}, {TV_STR, "swapcase", M_UNSUPPORTED},
    {TV_STR, "translate", M_UNSUPPORTED}, {TV_STR, "zfill", M_UNSUPPORTED},
    {TV_DICT, "items", M_ITEMS}, {TV_DICT, "keys", M_KEYS}, {TV_DICT, "values", M_VALUES}, {TV_DICT, "get", M_GET},
    {TV_DICT, "clear", M_UNSUPPORTED}, {TV_DICT, "copy", M_UNSUPPORTED}, {TV_DICT, "fromkeys", M_UNSUPPORTED},
    {TV_DICT, "pop", M_UNSUPPORTED}, {TV_DICT, "popitem", M_UNSUPPORTED}, {TV_DICT, "setdefault", M_UNSUPPORTED},
    {TV_DICT, "update", M_UNSUPPORTED},
    {TV_LIST, "index", M_LINDEX}, {TV_LIST, "count", M_LCOUNT}, {TV_LIST, "append", M_UNSUPPORTED},
    {TV_LIST, "clear", M_UNSUPPORTED}, {TV_LIST, "copy", M_UNSUPPORTED}, {TV_LIST, "extend", M_UNSUPPORTED},
    {TV_LIST, "insert", M_UNSUPPORTED}, {TV_LIST, "pop", M_UNSUPPORTED}, {TV_LIST, "remove", M_UNSUPPORTED},
    {TV_LIST, "reverse", M_UNSUPPORTED}, {TV_LIST, "sort", M_UNSUPPORTED},
    {TV_LOOP, "cycle", M_CYCLE}, {TV_LOOP, "changed", M_UNSUPPORTED},
};

int tmpl_filter_id(const char *name) {
    for (int i = 0; i < F__COUNT; i++) if (!strcmp(filter_names[i], name)) return i;
    return -1;
}
int tmpl_test_id(const char *name) {
    for (size_t i = 0; i < ARRAY_LEN(test_names); i++) if (!strcmp(test_names[i].name, name)) return test_names[i].id;
    return -1;
}
bool tmpl_method_known(const char *name) {
    for (size_t i = 0; i < ARRAY_LEN(methods); i++) if (methods[i].id != M_UNSUPPORTED && !strcmp(methods[i].name, name)) return true;
    return false;
}
int tmpl_method_lookup(struct tv self, const char *name) {
    uint8_t k = self.kind == TV_NS || (self.flags & (TV_F_GEN | TV_F_VIEW)) ? 255 : self.kind; /* tuples: index/count */
    for (size_t i = 0; i < ARRAY_LEN(methods); i++)
        if (methods[i].kind == k && !strcmp(methods[i].name, name)) {
            if ((self.flags & TV_F_TUPLE) && methods[i].id == M_UNSUPPORTED) return -1;
            return (int)i;
        }
    return -1;
}

/* ---------------- argument helpers ---------------- */
static bool arg(struct targs *a, int pos, const char *kw, struct tv *out) {
    if (pos >= 0 && pos < a->n_pos) { *out = a->v[pos]; return true; }
    for (int i = 0; kw && i < a->n_kw; i++)
        if (!strcmp(a->kw_names[i], kw)) { *out = a->v[a->n_pos + i]; return true; }
    return false;
}
static int arg_str(struct tmpl_rt *rt, struct targs *a, int pos, const char *kw, const char *what, struct tv *out) {
    if (!arg(a, pos, kw, out)) return tmpl_fail(rt, "%s: missing argument '%s'", what, kw);
    if (out->kind != TV_STR) return tmpl_fail(rt, "%s: argument '%s' must be str, not %s", what, kw, tv_type_name(*out));
    return 0;
}
static bool arg_bool(struct targs *a, int pos, const char *kw, bool dflt) {
    struct tv v;
    return arg(a, pos, kw, &v) ? tv_truthy(v) : dflt;
}
static int arg_int(struct tmpl_rt *rt, struct targs *a, int pos, const char *kw, int64_t dflt, int64_t *out) {
    struct tv v;
    *out = dflt;
    if (!arg(a, pos, kw, &v) || v.kind == TV_NONE) return 0;
    if (v.kind == TV_INT) *out = v.u.i;
    else if (v.kind == TV_BOOL) *out = v.u.b;
    else return tmpl_fail(rt, "argument '%s' must be an integer, not %s", kw, tv_type_name(v));
    return 0;
}

/* ---------------- string helpers ---------------- */
static struct tv mk_str_flags(struct tv v, uint8_t flags) { v.flags = flags; return v; }

/* Case mapping with Python's results for the scripts listed here (ASCII, Latin-1, Latin Extended-A,
 * basic Greek and Cyrillic, fullwidth Latin) and for ranges known to have no case (CJK, kana, Hangul,
 * emoji, punctuation, symbols, RTL and Indic scripts). Any other code point is refused rather than
 * mapped wrongly. up/lo: simple mappings (0 = special, see below); cased: Python's "cased". */
static bool case_info(uint32_t c, uint32_t *up, uint32_t *lo, bool *cased) {
    *up = *lo = c;
    *cased = false;
    if (c < 0x80) {
        if (c >= 'a' && c <= 'z') *up = c - 32, *cased = true;
        else if (c >= 'A' && c <= 'Z') *lo = c + 32, *cased = true;
        return true;
    }
    if (c < 0x100) {
        if (c == 0xAA || c == 0xBA) { *cased = true; return true; }
        if (c == 0xB5) { *up = 0x39C; *cased = true; return true; }
        if (c < 0xC0 || c == 0xD7 || c == 0xF7) return true;
        *cased = true;
        if (c == 0xDF) *up = 0; /* "SS" */
        else if (c == 0xFF) *up = 0x178;
        else if (c < 0xDF) *lo = c + 32;
        else *up = c - 32;
        return true;
    }
    if (c < 0x180) {
        *cased = true;
        switch (c) {
        case 0x130: *lo = 0; return true;      /* "i\u0307" */
        case 0x131: *up = 'I'; return true;
        case 0x138: return true;
        case 0x149: *up = 0; return true;      /* "\u02bcN" */
        case 0x178: *lo = 0xFF; return true;
        case 0x17F: *up = 'S'; return true;
        }
        bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
        bool is_upper = odd_upper ? (c & 1) : !(c & 1);
        if (is_upper) *lo = c + 1; else *up = c - 1;
        return true;
    }
    if ((c >= 0x300 && c <= 0x36F && c != 0x345) || c == 0x2BC) return true;
    if ((c >= 0x391 && c <= 0x3A9 && c != 0x3A2) || (c >= 0x3B1 && c <= 0x3C9)) {
        *cased = true;
        if (c == 0x3A3) *lo = 0;        /* final-sigma rule: refused in lower() */
        else if (c == 0x3C2) *up = 0x3A3;
        else if (c <= 0x3A9) *lo = c + 32;
        else *up = c - 32;
        return true;
    }
    if (c >= 0x400 && c <= 0x45F) {
        *cased = true;
        if (c < 0x410) *lo = c + 80;
        else if (c < 0x430) *lo = c + 32;
        else if (c < 0x450) *up = c - 32;
        else *up = c - 80;
        return true;
    }
    if (c >= 0xFF21 && c <= 0xFF3A) { *lo = c + 32; *cased = true; return true; }
    if (c >= 0xFF41 && c <= 0xFF5A) { *up = c - 32; *cased = true; return true; }
    static const uint32_t uncased[][2] = {
        {0x0590, 0x08FF}, {0x0900, 0x0DFF}, {0x0E00, 0x0FFF}, {0x1000, 0x109F}, {0x2000, 0x206F}, {0x20A0, 0x20CF},
        {0x2190, 0x23FF}, {0x2500, 0x27BF}, {0x2900, 0x2BFF}, {0x2E80, 0x9FFF}, {0xA000, 0xA4CF}, {0xAC00, 0xD7AF},
        {0xE000, 0xF8FF}, {0xF900, 0xFAFF}, {0xFE00, 0xFE0F}, {0xFE30, 0xFE4F}, {0xFF00, 0xFF20}, {0xFF3B, 0xFF40},
        {0xFF5B, 0xFFEF}, {0x1F000, 0x1F0FF}, {0x1F1E6, 0x1F1FF}, {0x1F200, 0x1FAFF}, {0x20000, 0x3FFFF},
    };
    for (size_t i = 0; i < ARRAY_LEN(uncased); i++) if (c >= uncased[i][0] && c <= uncased[i][1]) return true;
    return false;
}

static bool cp_is_upper(uint32_t c) { uint32_t u, l; bool k; return case_info(c, &u, &l, &k) && k && l != c; }
static bool cp_is_lower(uint32_t c) { uint32_t u, l; bool k; return case_info(c, &u, &l, &k) && k && l == c; }

/* fails (refusal) when the text holds a code point whose case mapping is not known exactly */
static int case_check(struct tmpl_rt *rt, const struct tstr *s) {
    for (size_t i = 0; i < s->len;) {
        uint32_t c, u, l;
        bool k;
        i += utf8_next(s->p + i, s->len - i, &c);
        if (!case_info(c, &u, &l, &k)) return tmpl_fail(rt, "unsupported: case mapping of U+%04X", (unsigned)c);
    }
    return 0;
}

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE, CASE_JINJA_TITLE };
static int str_case(struct tmpl_rt *rt, const struct tstr *s, int mode, struct tv *out) {
    struct tsb b = {.limit = rt->lim.max_output_bytes};
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < s->len;) {
        uint32_t c, up_c, lo_c;
        bool cased;
        size_t l = utf8_next(s->p + i, s->len - i, &c);
        i += l;
        if (!case_info(c, &up_c, &lo_c, &cased)) { tsb_free(&b); return tmpl_fail(rt, "unsupported: case mapping of U+%04X", (unsigned)c); }
        bool up;
        switch (mode) {
        case CASE_UPPER: up = true; break;
        case CASE_LOWER: up = false; break;
        case CASE_CAPITALIZE: up = first; break;
        case CASE_TITLE: up = !prev_cased; break;
        default: up = first; break; /* jinja title: after -, whitespace, ( { [ < */
        }
        uint32_t o = up ? up_c : lo_c;
        const char *special = NULL;
        if (o == 0) {
            if (c == 0xDF) special = mode == CASE_UPPER ? "SS" : "Ss"; /* title/capitalize use the titlecase "Ss" */
            else if (c == 0x149) special = mode == CASE_UPPER ? "\xCA\xBCN" : "\xCA\xBCN";
            else if (c == 0x130) special = "i\xCC\x87";
            else { tsb_free(&b); return tmpl_fail(rt, "unsupported: lower() of U+03A3 (Greek final-sigma rule)"); }
        }
        char enc[4];
        if (special ? tsb_put(rt, &b, special, strlen(special)) : tsb_put(rt, &b, enc, utf8_put(enc, o))) goto fail;
        first = false;
        prev_cased = cased;
        if (mode == CASE_JINJA_TITLE) first = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    }
    return tv_str_sb(rt, &b, out);
fail:
    tsb_free(&b);
    return -1;
}

static bool in_chars(uint32_t c, const struct tstr *chars) {
    if (!chars) return py_isspace(c);
    for (size_t i = 0; i < chars->len;) {
        uint32_t d;
        i += utf8_next(chars->p + i, chars->len - i, &d);
        if (d == c) return true;
    }
    return false;
}

static int str_strip(struct tmpl_rt *rt, const struct tstr *s, const struct tstr *chars, bool left, bool right, struct tv *out) {
    size_t b = 0, e = s->len;
    if (left) {
        while (b < e) {
            uint32_t c;
            size_t l = utf8_next(s->p + b, e - b, &c);
            if (!in_chars(c, chars)) break;
            b += l;
        }
    }
    if (right) {
        size_t keep = b;
        for (size_t i = b; i < e;) {
            uint32_t c;
            i += utf8_next(s->p + i, e - i, &c);
            if (!in_chars(c, chars)) keep = i;
        }
        e = keep;
    }
    return tv_str(rt, s->p + b, e - b, out);
}

static const char *memfind(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++) if (h[i] == n[0] && !memcmp(h + i, n, nn)) return h + i;
    return NULL;
}
static const char *memrfind(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;) if (!memcmp(h + i, n, nn)) return h + i;
    return NULL;
}

static int push_str(struct tmpl_rt *rt, struct tv *list, const char *p, size_t n) {
    struct tv s;
    return tv_str(rt, p, n, &s) || tv_list_push(rt, list, s) ? -1 : 0;
}

static int str_split(struct tmpl_rt *rt, const struct tstr *s, struct targs *a, bool from_right, struct tv *out) {
    struct tv sep;
    int64_t maxsplit;
    bool have_sep = arg(a, 0, "sep", &sep) && sep.kind != TV_NONE;
    if (arg_int(rt, a, 1, "maxsplit", -1, &maxsplit)) return -1;
    if (have_sep && sep.kind != TV_STR) return tmpl_fail(rt, "must be str or None, not %s", tv_type_name(sep));
    if (have_sep && sep.u.s->len == 0) return tmpl_fail(rt, "empty separator");
    if (tv_list(rt, 0, out)) return -1;
    if (have_sep) {
        const char *sp = sep.u.s->p;
        size_t sn = sep.u.s->len;
        if (!from_right) {
            size_t i = 0;
            for (int64_t k = 0; maxsplit < 0 || k < maxsplit; k++) {
                const char *f = memfind(s->p + i, s->len - i, sp, sn);
                if (!f) break;
                if (push_str(rt, out, s->p + i, (size_t)(f - (s->p + i)))) return -1;
                i = (size_t)(f - s->p) + sn;
            }
            return push_str(rt, out, s->p + i, s->len - i);
        }
        size_t e = s->len;
        struct tv rev;
        if (tv_list(rt, 0, &rev)) return -1;
        for (int64_t k = 0; maxsplit < 0 || k < maxsplit; k++) {
            const char *f = memrfind(s->p, e, sp, sn);
            if (!f) break;
            size_t at = (size_t)(f - s->p);
            if (push_str(rt, &rev, s->p + at + sn, e - at - sn)) return -1;
            e = at;
        }
        if (push_str(rt, &rev, s->p, e)) return -1;
        for (size_t i = rev.u.l->n; i-- > 0;) if (tv_list_push(rt, out, rev.u.l->v[i])) return -1;
        return 0;
    }
    /* whitespace split */
    size_t n = s->len;
    if (!from_right) {
        size_t i = 0;
        int64_t k = 0;
        for (;;) {
            while (i < n) { uint32_t c; size_t l = utf8_next(s->p + i, n - i, &c); if (!py_isspace(c)) break; i += l; }
            if (i >= n) return 0;
            if (maxsplit >= 0 && k >= maxsplit) return push_str(rt, out, s->p + i, n - i);
            size_t b = i;
            while (i < n) { uint32_t c; size_t l = utf8_next(s->p + i, n - i, &c); if (py_isspace(c)) break; i += l; }
            if (push_str(rt, out, s->p + b, i - b)) return -1;
            k++;
        }
    }
    /* rsplit(None): split words, then re-join the leftmost ones beyond maxsplit */
    struct tv words;
    if (str_split(rt, s, &(struct targs){0}, false, &words)) return -1;
    size_t nw = words.u.l->n;
    if (maxsplit < 0 || (size_t)maxsplit >= nw) { *out = words; return 0; }
    size_t keep = (size_t)maxsplit, head_words = nw - keep;
    /* head: from the start of the text (leading whitespace kept: rsplit strips from the right only)
     * to the end of word head_words-1 */
    size_t i = 0, cnt = 0, he = 0;
    while (i < n && cnt < head_words) {
        while (i < n) { uint32_t c; size_t l = utf8_next(s->p + i, n - i, &c); if (!py_isspace(c)) break; i += l; }
        while (i < n) { uint32_t c; size_t l = utf8_next(s->p + i, n - i, &c); if (py_isspace(c)) break; i += l; }
        he = i;
        cnt++;
    }
    if (push_str(rt, out, s->p, he)) return -1;
    for (size_t w = head_words; w < nw; w++) if (tv_list_push(rt, out, words.u.l->v[w])) return -1;
    return 0;
}

static int str_replace(struct tmpl_rt *rt, const struct tstr *s, const struct tstr *old, const struct tstr *new_,
                       int64_t count, struct tv *out) {
    struct tsb b = {.limit = rt->lim.max_output_bytes};
    size_t i = 0;
    int64_t k = 0;
    if (old->len == 0) {
        while (count < 0 || k < count) {
            if (tsb_put(rt, &b, new_->p, new_->len)) goto fail;
            k++;
            if (i >= s->len) break;
            uint32_t c;
            size_t l = utf8_next(s->p + i, s->len - i, &c);
            if (tsb_put(rt, &b, s->p + i, l)) goto fail;
            i += l;
        }
    } else {
        while (count < 0 || k < count) {
            const char *f = memfind(s->p + i, s->len - i, old->p, old->len);
            if (!f) break;
            if (tsb_put(rt, &b, s->p + i, (size_t)(f - (s->p + i))) || tsb_put(rt, &b, new_->p, new_->len)) goto fail;
            i = (size_t)(f - s->p) + old->len;
            k++;
        }
    }
    if (tsb_put(rt, &b, s->p + i, s->len - i)) goto fail;
    return tv_str_sb(rt, &b, out);
fail:
    tsb_free(&b);
    return -1;
}

static bool str_has_prefix(const struct tstr *s, const struct tstr *x, bool suffix) {
    if (x->len > s->len) return false;
    return !memcmp(suffix ? s->p + s->len - x->len : s->p, x->p, x->len);
}

static int str_splitlines(struct tmpl_rt *rt, const struct tstr *s, bool keep, struct tv *out) {
    if (tv_list(rt, 0, out)) return -1;
    size_t i = 0, b = 0;
    while (i < s->len) {
        uint32_t c;
        size_t l = utf8_next(s->p + i, s->len - i, &c);
        bool br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!br) { i += l; continue; }
        size_t e = i;
        i += l;
        if (c == '\r' && i < s->len && s->p[i] == '\n') i++;
        if (push_str(rt, out, s->p + b, (keep ? i : e) - b)) return -1;
        b = i;
    }
    if (b < s->len && push_str(rt, out, s->p + b, s->len - b)) return -1;
    return 0;
}

/* jinja2 do_indent: s += "\n", then splitlines() and re-join */
static int do_indent(struct tmpl_rt *rt, struct tv v, struct targs *a, struct tv *out) {
    struct tv w, lines;
    char pad[1001];
    size_t pad_n = 4;
    memset(pad, ' ', sizeof pad);
    if (arg(a, 0, "width", &w)) {
        if (w.kind == TV_STR) {
            if (w.u.s->len >= sizeof pad) return tmpl_fail(rt, "indent: width string too long");
            memcpy(pad, w.u.s->p, w.u.s->len);
            pad_n = w.u.s->len;
        } else if (w.kind == TV_INT || w.kind == TV_BOOL) {
            int64_t n = w.kind == TV_BOOL ? w.u.b : w.u.i;
            if (n > 1000) return tmpl_fail(rt, "indent: unsupported width");
            pad_n = n < 0 ? 0 : (size_t)n;
        } else return tmpl_fail(rt, "indent: width must be an int or a string");
    }
    bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    if (v.kind != TV_STR) return tmpl_fail(rt, "unsupported operand type(s) for +=: '%s' and 'str'", tv_type_name(v));
    struct tsb b = {.limit = rt->lim.max_output_bytes};
    if (tsb_put(rt, &b, v.u.s->p, v.u.s->len) || tsb_putc(rt, &b, '\n')) { tsb_free(&b); return -1; }
    struct tstr *sn = tstr_new(&rt->arena, b.p, b.n);
    tsb_free(&b);
    if (!sn) return tmpl_fail(rt, "render exceeded the memory limit");
    if (str_splitlines(rt, sn, false, &lines)) return -1;
    struct tlist *l = lines.u.l;
    if (first && tsb_put(rt, &b, pad, pad_n)) goto fail;
    for (size_t i = 0; i < l->n; i++) {
        const struct tstr *ln = l->v[i].u.s;
        if (i && tsb_putc(rt, &b, '\n')) goto fail;
        if (i && (blank || ln->len) && tsb_put(rt, &b, pad, pad_n)) goto fail;
        if (tsb_put(rt, &b, ln->p, ln->len)) goto fail;
    }
    if (tv_str_sb(rt, &b, out)) return -1;
    out->flags = v.flags & TV_F_MARKUP;
    return 0;
fail:
    tsb_free(&b);
    return -1;
}

/* Markup escaping (markupsafe.escape) */
static int html_escape(struct tmpl_rt *rt, const struct tstr *s, struct tv *out) {
    struct tsb b = {.limit = rt->lim.max_output_bytes};
    for (size_t i = 0; i < s->len; i++) {
        const char *r = NULL;
        switch (s->p[i]) {
        case '&': r = "&amp;"; break;
        case '<': r = "&lt;"; break;
        case '>': r = "&gt;"; break;
        case '\'': r = "&#39;"; break;
        case '"': r = "&#34;"; break;
        }
        if (r ? tsb_put(rt, &b, r, strlen(r)) : tsb_putc(rt, &b, s->p[i])) { tsb_free(&b); return -1; }
    }
    if (tv_str_sb(rt, &b, out)) return -1;
    out->flags = TV_F_MARKUP;
    return 0;
}

/* ---------------- attribute / item access ---------------- */
static int loop_attr(struct tmpl_rt *rt, struct tloop *lp, const char *name, struct tv *out) {
    int64_t n = (int64_t)lp->items->n, i = (int64_t)lp->i;
    (void)rt;
    if (!strcmp(name, "index")) *out = tv_int(i + 1);
    else if (!strcmp(name, "index0")) *out = tv_int(i);
    else if (!strcmp(name, "revindex")) *out = tv_int(n - i);
    else if (!strcmp(name, "revindex0")) *out = tv_int(n - i - 1);
    else if (!strcmp(name, "first")) *out = tv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = tv_bool(i == n - 1);
    else if (!strcmp(name, "length")) *out = tv_int(n);
    else if (!strcmp(name, "depth")) *out = tv_int(lp->depth);
    else if (!strcmp(name, "depth0")) *out = tv_int(lp->depth - 1);
    else if (!strcmp(name, "previtem")) *out = i > 0 ? lp->items->v[i - 1] : tv_undef();
    else if (!strcmp(name, "nextitem")) *out = i + 1 < n ? lp->items->v[i + 1] : tv_undef();
    else return 1;
    return 0;
}

static int make_method(struct tmpl_rt *rt, struct tv self, int idx, struct tv *out) {
    struct tmethod *m = tmpl_arena_alloc(&rt->arena, sizeof *m);
    if (!m) return tmpl_fail(rt, "render exceeded the memory limit");
    m->self = self;
    m->id = idx;
    memset(out, 0, sizeof *out);
    out->kind = TV_METHOD;
    out->u.m = m;
    return 0;
}

int tmpl_getattr(struct tmpl_rt *rt, struct tv obj, const char *name, struct tv *out) {
    if (obj.kind == TV_UNDEF) {
        if (obj.u.s) return tmpl_fail(rt, "'%s' is undefined", obj.u.s->p);
        return tmpl_fail(rt, "cannot read attribute '%s' of an undefined value", name);
    }
    *out = tv_undef();
    if (name[0] == '_' && name[1] == '_') return 0; /* the sandbox hides dunder attributes */
    if (obj.kind == TV_LOOP) {
        if (loop_attr(rt, obj.u.loop, name, out) == 0) return 0;
    }
    int idx = tmpl_method_lookup(obj, name);
    if (idx >= 0) return make_method(rt, obj, idx, out);
    if (obj.kind == TV_DICT || obj.kind == TV_NS) tv_dict_get_str(obj.u.d, name, out);
    return 0;
}

static bool norm_index(int64_t i, size_t n, size_t *out) {
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

int tmpl_getitem(struct tmpl_rt *rt, struct tv obj, struct tv key, struct tv *out) {
    if (obj.kind == TV_UNDEF) {
        if (obj.u.s) return tmpl_fail(rt, "'%s' is undefined", obj.u.s->p);
        return tmpl_fail(rt, "cannot index an undefined value");
    }
    *out = tv_undef();
    bool int_key = key.kind == TV_INT || key.kind == TV_BOOL;
    int64_t ik = key.kind == TV_BOOL ? key.u.b : key.u.i;
    size_t i;
    switch (obj.kind) {
    case TV_DICT:
        if (tv_dict_get(obj.u.d, key, out)) return 0;
        break;
    case TV_LIST:
        if (obj.flags & (TV_F_GEN | TV_F_VIEW)) return 0; /* not subscriptable */
        if (int_key) { if (norm_index(ik, obj.u.l->n, &i)) *out = obj.u.l->v[i]; return 0; }
        break;
    case TV_STR:
        if (int_key) {
            size_t n = utf8_count(obj.u.s->p, obj.u.s->len);
            if (!norm_index(ik, n, &i)) return 0;
            size_t b = 0;
            uint32_t c;
            for (size_t k = 0; k < i; k++) b += utf8_next(obj.u.s->p + b, obj.u.s->len - b, &c);
            if (tv_str(rt, obj.u.s->p + b, utf8_next(obj.u.s->p + b, obj.u.s->len - b, &c), out)) return -1;
            out->flags = obj.flags & TV_F_MARKUP;
            return 0;
        }
        break;
    default: break;
    }
    if (key.kind == TV_STR) return tmpl_getattr(rt, obj, key.u.s->p, out);
    return 0;
}

/* ---------------- tests ---------------- */
int tmpl_call_test(struct tmpl_rt *rt, int id, struct tv v, struct targs *a, bool *out) {
    struct tv x;
    switch (id) {
    case T_DEFINED: *out = v.kind != TV_UNDEF; return 0;
    case T_UNDEFINED: *out = v.kind == TV_UNDEF; return 0;
    case T_NONE: *out = v.kind == TV_NONE; return 0;
    case T_BOOLEAN: *out = v.kind == TV_BOOL; return 0;
    case T_FALSE: *out = v.kind == TV_BOOL && !v.u.b; return 0;
    case T_TRUE: *out = v.kind == TV_BOOL && v.u.b; return 0;
    case T_INTEGER: *out = v.kind == TV_INT; return 0;
    case T_FLOAT: *out = v.kind == TV_FLOAT; return 0;
    case T_NUMBER: *out = tv_is_num(v); return 0;
    case T_STRING: *out = v.kind == TV_STR; return 0;
    case T_MAPPING: *out = v.kind == TV_DICT; return 0;
    case T_SEQUENCE:
        *out = v.kind == TV_STR || (v.kind == TV_LIST && !(v.flags & (TV_F_GEN | TV_F_VIEW))) || v.kind == TV_DICT || v.kind == TV_UNDEF;
        return 0;
    case T_ITERABLE: *out = v.kind == TV_STR || v.kind == TV_LIST || v.kind == TV_DICT || v.kind == TV_UNDEF; return 0;
    case T_CALLABLE:
        *out = v.kind == TV_MACRO || v.kind == TV_BUILTIN || v.kind == TV_METHOD || v.kind == TV_UNDEF || v.kind == TV_LOOP;
        return 0;
    case T_ESCAPED: *out = v.kind == TV_STR && (v.flags & TV_F_MARKUP); return 0;
    case T_ODD: case T_EVEN: case T_DIVISIBLEBY: {
        /* value % num == (1 for odd, else 0), Python modulo on ints and floats */
        struct tv d = tv_int(2);
        if (id == T_DIVISIBLEBY && !arg(a, 0, "num", &d)) return tmpl_fail(rt, "divisibleby needs an argument");
        if (!tv_is_num(v) || !tv_is_num(d)) return tmpl_fail(rt, "unsupported operand type(s) for %%: '%s' and '%s'", tv_type_name(v), tv_type_name(d));
        double r;
        if (v.kind != TV_FLOAT && d.kind != TV_FLOAT) {
            int64_t x = v.kind == TV_BOOL ? v.u.b : v.u.i, y = d.kind == TV_BOOL ? d.u.b : d.u.i;
            if (y == 0) return tmpl_fail(rt, "integer division or modulo by zero");
            int64_t m = y == -1 ? 0 : x % y;
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            r = (double)m;
        } else {
            double x = tv_num(v), y = tv_num(d);
            if (y == 0) return tmpl_fail(rt, "float modulo");
            r = fmod(x, y);
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
        }
        *out = id == T_ODD ? r == 1 : r == 0;
        return 0;
    }
    case T_LOWER: case T_UPPER: {
        struct tv s;
        if (tv_to_str(rt, v, &s) || case_check(rt, s.u.s)) return -1;
        bool any = false, ok = true;
        for (size_t i = 0; i < s.u.s->len;) {
            uint32_t c;
            i += utf8_next(s.u.s->p + i, s.u.s->len - i, &c);
            if (cp_is_upper(c)) { any = true; if (id == T_LOWER) ok = false; }
            else if (cp_is_lower(c)) { any = true; if (id == T_UPPER) ok = false; }
        }
        *out = any && ok;
        return 0;
    }
    case T_SAMEAS:
        if (!arg(a, 0, "other", &x)) return tmpl_fail(rt, "sameas needs an argument");
        if (v.kind != x.kind) *out = false;
        else if (v.kind == TV_NONE || v.kind == TV_UNDEF) *out = v.kind == TV_NONE;
        else if (v.kind == TV_BOOL) *out = v.u.b == x.u.b;
        else if (v.kind == TV_INT) *out = v.u.i == x.u.i && v.u.i >= -5 && v.u.i <= 256;
        else if (v.kind == TV_STR) *out = v.u.s == x.u.s;
        else *out = v.u.l == x.u.l;
        return 0;
    case T_IN: {
        if (!arg(a, 0, "seq", &x)) return tmpl_fail(rt, "test 'in' needs an argument");
        extern int tmpl_contains(struct tmpl_rt *rt, struct tv hay, struct tv needle, bool *out);
        return tmpl_contains(rt, x, v, out);
    }
    default: {
        if (!arg(a, 0, "other", &x)) return tmpl_fail(rt, "comparison test needs an argument");
        if (id == T_EQ) { *out = tv_eq(v, x); return 0; }
        if (id == T_NE) { *out = !tv_eq(v, x); return 0; }
        bool lt;
        if (id == T_LT) return tv_lt(rt, v, x, out);
        if (id == T_GT) return tv_lt(rt, x, v, out);
        if (id == T_LE) { if (tv_lt(rt, x, v, &lt)) return -1; *out = !lt; return 0; }
        if (tv_lt(rt, v, x, &lt)) return -1; /* T_GE */
        *out = !lt;
        return 0;
    }
    }
}

/* ---------------- filters ---------------- */
static int sort_list(struct tmpl_rt *rt, struct tv *items, size_t n, bool reverse, bool case_sensitive, const char *attr);
static int sort_key(struct tmpl_rt *rt, struct tv item, bool case_sensitive, const char *attr, struct tv *key);

static int get_attr_path(struct tmpl_rt *rt, struct tv item, const char *path, struct tv *out) {
    /* jinja make_attrgetter: dotted path, integer parts index, each step via getitem */
    char part[256];
    *out = item;
    while (*path) {
        size_t l = strcspn(path, ".");
        if (l >= sizeof part) return tmpl_fail(rt, "attribute path too long");
        memcpy(part, path, l);
        part[l] = 0;
        struct tv key;
        char *end;
        long long iv = strtoll(part, &end, 10);
        if (l && *end == 0) key = tv_int(iv);
        else if (tv_str(rt, part, l, &key)) return -1;
        if (tmpl_getitem(rt, *out, key, out)) return -1;
        path += l + (path[l] == '.');
    }
    return 0;
}

static int select_items(struct tmpl_rt *rt, struct tv seq, struct targs *a, bool by_attr, bool reject, struct tv *out) {
    struct tlist *l;
    if (!tv_truthy(seq)) { /* jinja: `if value:` guards the loop, so a falsy input is an empty generator */
        if (tv_list(rt, 0, out)) return -1;
        out->flags = TV_F_GEN;
        return 0;
    }
    if (tv_iter_list(rt, seq, &l) || tv_list(rt, 0, out)) return -1;
    int off = 0;
    struct tv attr = {0}, tname;
    if (by_attr) {
        if (arg_str(rt, a, 0, "attr", "selectattr", &attr)) return -1;
        off = 1;
    }
    int test = -1;
    if (a->n_pos > off) {
        if (a->v[off].kind != TV_STR) return tmpl_fail(rt, "test name must be a string");
        tname = a->v[off];
        if ((test = tmpl_test_id(tname.u.s->p)) < 0) return tmpl_fail(rt, "unsupported test '%s'", tname.u.s->p);
        off++;
    }
    struct targs ta = {a->v ? a->v + off : NULL, a->n_pos - off, 0, NULL};
    for (size_t i = 0; i < l->n; i++) {
        struct tv x = l->v[i];
        if (by_attr && get_attr_path(rt, x, attr.u.s->p, &x)) return -1;
        bool ok;
        if (test >= 0) { if (tmpl_call_test(rt, test, x, &ta, &ok)) return -1; }
        else ok = tv_truthy(x);
        if (ok != reject && tv_list_push(rt, out, l->v[i])) return -1;
    }
    out->flags = TV_F_GEN;
    return 0;
}

static int do_tojson(struct tmpl_rt *rt, struct tv v, struct targs *a, struct tv *out) {
    /* HF: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
    struct tjson_opts o = {.ensure_ascii = arg_bool(a, 0, "ensure_ascii", false), .sort_keys = arg_bool(a, 3, "sort_keys", false),
                           .indent = -1, .item_sep = ", ", .key_sep = ": "};
    struct tv x;
    if (arg(a, 1, "indent", &x) && x.kind != TV_NONE) {
        if (x.kind != TV_INT || x.u.i < 0 || x.u.i > 64) return tmpl_fail(rt, "tojson: unsupported indent");
        o.indent = (int)x.u.i;
        o.item_sep = ",";
    }
    if (arg(a, 2, "separators", &x) && x.kind != TV_NONE) {
        if (x.kind != TV_LIST || x.u.l->n != 2 || x.u.l->v[0].kind != TV_STR || x.u.l->v[1].kind != TV_STR)
            return tmpl_fail(rt, "tojson: separators must be a pair of strings");
        o.item_sep = x.u.l->v[0].u.s->p;
        o.key_sep = x.u.l->v[1].u.s->p;
    }
    struct tsb b = {.limit = rt->lim.max_output_bytes};
    if (tv_write_json(rt, &b, v, &o, 0)) { tsb_free(&b); return -1; }
    return tv_str_sb(rt, &b, out);
}

static int do_length(struct tmpl_rt *rt, struct tv v, struct tv *out) {
    switch (v.kind) {
    case TV_UNDEF: *out = tv_int(0); return 0;
    case TV_STR: *out = tv_int((int64_t)utf8_count(v.u.s->p, v.u.s->len)); return 0;
    case TV_LIST:
        if (v.flags & TV_F_GEN) break;
        *out = tv_int((int64_t)v.u.l->n);
        return 0;
    case TV_DICT: *out = tv_int((int64_t)v.u.d->n); return 0;
    default: break;
    }
    return tmpl_fail(rt, "object of type '%s' has no len()", tv_type_name(v));
}

static int do_minmax(struct tmpl_rt *rt, struct tv v, struct targs *a, bool want_max, struct tv *out) {
    struct tlist *l;
    if (tv_iter_list(rt, v, &l)) return -1;
    if (!l->n) { *out = tv_undef(); return 0; }
    struct tv attr;
    const char *path = arg(a, 1, "attribute", &attr) && attr.kind == TV_STR ? attr.u.s->p : NULL;
    const bool case_sensitive = arg_bool(a, 0, "case_sensitive", false);
    /* Python's max/min: one pass, replacing only on a strict win, so the first of equal items is kept */
    size_t best = 0;
    struct tv best_key;
    if (sort_key(rt, l->v[0], case_sensitive, path, &best_key)) return -1;
    for (size_t i = 1; i < l->n; i++) {
        struct tv key;
        bool wins;
        if (sort_key(rt, l->v[i], case_sensitive, path, &key) ||
            (want_max ? tv_lt(rt, best_key, key, &wins) : tv_lt(rt, key, best_key, &wins))) return -1;
        if (wins) { best = i; best_key = key; }
    }
    *out = l->v[best];
    return 0;
}

int tmpl_call_filter(struct tmpl_rt *rt, int id, struct tv v, struct targs *a, struct tv *out) {
    struct tv x, y, s;
    struct tlist *l;
    switch (id) {
    case F_ABS:
        if (v.kind == TV_INT) { if (v.u.i == INT64_MIN) return tmpl_fail(rt, "integer overflow"); *out = tv_int(v.u.i < 0 ? -v.u.i : v.u.i); return 0; }
        if (v.kind == TV_BOOL) { *out = tv_int(v.u.b); return 0; }
        if (v.kind == TV_FLOAT) { *out = tv_float(fabs(v.u.f)); return 0; }
        return tmpl_fail(rt, "bad operand type for abs(): '%s'", tv_type_name(v));
    case F_CAPITALIZE: case F_LOWER: case F_UPPER: case F_TITLE:
        if (tv_to_str(rt, v, &s)) return -1;
        if (str_case(rt, s.u.s, id == F_CAPITALIZE ? CASE_CAPITALIZE : id == F_LOWER ? CASE_LOWER : id == F_UPPER ? CASE_UPPER : CASE_JINJA_TITLE, out))
            return -1;
        if (id != F_TITLE) out->flags = s.flags & TV_F_MARKUP; /* jinja's title joins plain str pieces */
        return 0;
    case F_COUNT: case F_LENGTH: return do_length(rt, v, out);
    case F_D: case F_DEFAULT:
        if (v.kind == TV_UNDEF || (arg_bool(a, 1, "boolean", false) && !tv_truthy(v))) {
            if (!arg(a, 0, "default_value", out) && tv_str(rt, "", 0, out)) return -1;
        } else *out = v;
        return 0;
    case F_E: case F_ESCAPE:
        if (v.kind == TV_STR && (v.flags & TV_F_MARKUP)) { *out = v; return 0; }
        if (tv_to_str(rt, v, &s)) return -1;
        return html_escape(rt, s.u.s, out);
    case F_FIRST: case F_LAST:
        if (id == F_LAST && v.kind == TV_LIST && (v.flags & TV_F_GEN)) return tmpl_fail(rt, "'generator' object is not reversible");
        if (tv_iter_list(rt, v, &l)) return -1;
        *out = l->n ? l->v[id == F_FIRST ? 0 : l->n - 1] : tv_undef();
        if (id == F_LAST && v.kind == TV_STR && l->n) out->flags = v.flags & TV_F_MARKUP; /* reversed() indexes the Markup */
        return 0;
    case F_FLOAT: case F_INT: {
        bool is_int = id == F_INT;
        if (v.kind == TV_UNDEF) return tmpl_fail(rt, "undefined value converted with |%s", is_int ? "int" : "float");
        if (!arg(a, 0, "default", &x)) x = is_int ? tv_int(0) : tv_float(0);
        if (v.kind == TV_INT || v.kind == TV_BOOL) { *out = is_int ? tv_int(v.kind == TV_BOOL ? v.u.b : v.u.i) : tv_float(tv_num(v)); return 0; }
        if (v.kind == TV_FLOAT) {
            if (!is_int) { *out = v; return 0; }
            if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) { *out = x; return 0; }
            *out = tv_int((int64_t)v.u.f);
            return 0;
        }
        if (v.kind == TV_STR) {
            struct tv t;
            if (str_strip(rt, v.u.s, NULL, true, true, &t)) return -1;
            const char *p = t.u.s->p;
            char *end;
            if (t.u.s->len && memchr(p, '_', t.u.s->len) == NULL) {
                if (is_int) {
                    errno = 0;
                    long long n = strtoll(p, &end, 10);
                    if (*end == 0 && errno == 0 && p[0] != ' ') { *out = tv_int(n); return 0; }
                }
                double d = strtod(p, &end);
                if (*end == 0 && !(p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))) {
                    if (!is_int) { *out = tv_float(d); return 0; }
                    if (isfinite(d) && fabs(d) < 9.2e18) { *out = tv_int((int64_t)d); return 0; }
                }
            }
        }
        *out = x;
        return 0;
    }
    case F_INDENT: return do_indent(rt, v, a, out);
    case F_ITEMS:
        if (v.kind == TV_UNDEF) return tv_list(rt, 0, out);
        if (v.kind != TV_DICT) return tmpl_fail(rt, "Can only get item pairs from a mapping.");
        if (tv_list(rt, v.u.d->n, out)) return -1;
        for (size_t i = 0; i < v.u.d->n; i++) {
            struct tv t;
            if (tv_list(rt, 2, &t)) return -1;
            t.flags = TV_F_TUPLE;
            t.u.l->v[0] = v.u.d->k[i];
            t.u.l->v[1] = v.u.d->v[i];
            t.u.l->n = 2;
            out->u.l->v[i] = t;
        }
        out->u.l->n = v.u.d->n;
        out->flags = TV_F_GEN;
        return 0;
    case F_JOIN: {
        if (tv_iter_list(rt, v, &l)) return -1;
        struct tv sep, attr;
        bool has_sep = arg(a, 0, "d", &sep);
        bool has_attr = arg(a, 1, "attribute", &attr) && attr.kind != TV_NONE;
        if (has_sep && tv_to_str(rt, sep, &sep)) return -1;
        if (has_attr && attr.kind != TV_STR) return tmpl_fail(rt, "join: attribute must be a string");
        struct tsb b = {.limit = rt->lim.max_output_bytes};
        for (size_t i = 0; i < l->n; i++) {
            struct tv item = l->v[i];
            if ((i && has_sep && tsb_put(rt, &b, sep.u.s->p, sep.u.s->len)) || (has_attr && get_attr_path(rt, item, attr.u.s->p, &item)) ||
                tv_write_str(rt, &b, item)) {
                tsb_free(&b);
                return -1;
            }
        }
        return tv_str_sb(rt, &b, out);
    }
    case F_LIST:
        if (tv_iter_list(rt, v, &l) || tv_list(rt, l->n, out)) return -1;
        if (l->n) memcpy(out->u.l->v, l->v, l->n * sizeof *l->v);
        out->u.l->n = l->n;
        return 0;
    case F_MAP: {
        if (!tv_truthy(v)) {
            if (tv_list(rt, 0, out)) return -1;
            out->flags = TV_F_GEN;
            return 0;
        }
        if (tv_iter_list(rt, v, &l) || tv_list(rt, l->n, out)) return -1;
        struct tv attr, dflt;
        bool by_attr = arg(a, -1, "attribute", &attr);
        bool has_dflt = arg(a, -1, "default", &dflt);
        int fid = -1;
        if (!by_attr) {
            if (a->n_pos < 1 || a->v[0].kind != TV_STR) return tmpl_fail(rt, "map: needs a filter name or attribute=");
            if ((fid = tmpl_filter_id(a->v[0].u.s->p)) < 0) return tmpl_fail(rt, "map: unsupported filter '%s'", a->v[0].u.s->p);
        } else if (attr.kind != TV_STR) return tmpl_fail(rt, "map: attribute must be a string");
        struct targs fa = {a->n_pos > 0 ? a->v + 1 : NULL, a->n_pos > 0 ? a->n_pos - 1 : 0, 0, NULL};
        for (size_t i = 0; i < l->n; i++) {
            struct tv r;
            if (by_attr) {
                if (get_attr_path(rt, l->v[i], attr.u.s->p, &r)) return -1;
                if (r.kind == TV_UNDEF && has_dflt) r = dflt;
            } else if (tmpl_call_filter(rt, fid, l->v[i], &fa, &r)) return -1;
            out->u.l->v[i] = r;
        }
        out->u.l->n = l->n;
        out->flags = TV_F_GEN;
        return 0;
    }
    case F_MAX: case F_MIN: return do_minmax(rt, v, a, id == F_MAX, out);
    case F_REJECT: case F_SELECT: return select_items(rt, v, a, false, id == F_REJECT, out);
    case F_REJECTATTR: case F_SELECTATTR: return select_items(rt, v, a, true, id == F_REJECTATTR, out);
    case F_REPLACE: {
        int64_t count;
        if (!arg(a, 0, "old", &x) || !arg(a, 1, "new", &y)) return tmpl_fail(rt, "replace needs old and new");
        if (arg_int(rt, a, 2, "count", -1, &count) || tv_to_str(rt, v, &s) || tv_to_str(rt, x, &x) || tv_to_str(rt, y, &y)) return -1;
        return str_replace(rt, s.u.s, x.u.s, y.u.s, count, out);
    }
    case F_REVERSE:
        if (v.kind == TV_STR) {
            struct tsb b = {.limit = rt->lim.max_output_bytes};
            if (tv_iter_list(rt, v, &l)) return -1;
            for (size_t i = l->n; i-- > 0;) if (tsb_put(rt, &b, l->v[i].u.s->p, l->v[i].u.s->len)) { tsb_free(&b); return -1; }
            if (tv_str_sb(rt, &b, out)) return -1;
            out->flags = v.flags & TV_F_MARKUP; /* value[::-1] */
            return 0;
        }
        if (tv_iter_list(rt, v, &l) || tv_list(rt, l->n, out)) return -1;
        for (size_t i = 0; i < l->n; i++) out->u.l->v[i] = l->v[l->n - 1 - i];
        out->u.l->n = l->n;
        /* reversed() gives an iterator for lists, dicts and views; a generator goes through list() */
        if (!(v.kind == TV_LIST && (v.flags & TV_F_GEN)) && v.kind != TV_UNDEF) out->flags = TV_F_GEN;
        return 0;
    case F_ROUND: {
        int64_t prec;
        if (arg_int(rt, a, 0, "precision", 0, &prec)) return -1;
        if (arg(a, 1, "method", &x) && !(x.kind == TV_STR && !strcmp(x.u.s->p, "common")))
            return tmpl_fail(rt, "round: only method='common' is supported");
        if (v.kind == TV_INT || v.kind == TV_BOOL) { *out = tv_int(v.kind == TV_BOOL ? v.u.b : v.u.i); return 0; }
        if (v.kind != TV_FLOAT) return tmpl_fail(rt, "round: needs a number, not %s", tv_type_name(v));
        if (prec < 0 || prec > 30 || !isfinite(v.u.f)) return tmpl_fail(rt, "round: unsupported precision");
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, v.u.f);
        *out = tv_float(strtod(buf, NULL));
        return 0;
    }
    case F_SAFE:
        if (tv_to_str(rt, v, &s)) return -1;
        *out = mk_str_flags(s, TV_F_MARKUP);
        return 0;
    case F_SORT: {
        struct tv attr;
        bool has_attr = arg(a, 2, "attribute", &attr) && attr.kind == TV_STR;
        if (tv_iter_list(rt, v, &l) || tv_list(rt, l->n, out)) return -1;
        if (l->n) memcpy(out->u.l->v, l->v, l->n * sizeof *l->v);
        out->u.l->n = l->n;
        return sort_list(rt, out->u.l->v, l->n, arg_bool(a, 0, "reverse", false), arg_bool(a, 1, "case_sensitive", false),
                         has_attr ? attr.u.s->p : NULL);
    }
    case F_STRING: return tv_to_str(rt, v, out);
    case F_SUM: {
        struct tv attr;
        bool has_attr = arg(a, 0, "attribute", &attr) && attr.kind == TV_STR;
        if (!arg(a, 1, "start", out)) *out = tv_int(0);
        if (tv_iter_list(rt, v, &l)) return -1;
        for (size_t i = 0; i < l->n; i++) {
            struct tv item = l->v[i];
            if (has_attr && get_attr_path(rt, item, attr.u.s->p, &item)) return -1;
            if (!tv_is_num(item) || !tv_is_num(*out)) return tmpl_fail(rt, "sum: unsupported operand types");
            if (item.kind == TV_FLOAT || out->kind == TV_FLOAT) *out = tv_float(tv_num(*out) + tv_num(item));
            else {
                int64_t r;
                if (__builtin_add_overflow((int64_t)tv_num(*out), (int64_t)tv_num(item), &r)) return tmpl_fail(rt, "integer overflow");
                *out = tv_int(r);
            }
        }
        return 0;
    }
    case F_TOJSON: return do_tojson(rt, v, a, out);
    case F_TRIM: {
        struct tv chars;
        bool has = arg(a, 0, "chars", &chars) && chars.kind != TV_NONE;
        if (has && chars.kind != TV_STR) return tmpl_fail(rt, "trim: chars must be a string");
        if (tv_to_str(rt, v, &s)) return -1;
        uint8_t fl = s.flags;
        if (str_strip(rt, s.u.s, has ? chars.u.s : NULL, true, true, out)) return -1;
        out->flags = fl;
        return 0;
    }
    case F_UNIQUE: {
        bool cs = arg_bool(a, 0, "case_sensitive", false);
        struct tv attr;
        bool has_attr = arg(a, 1, "attribute", &attr) && attr.kind == TV_STR;
        if (tv_iter_list(rt, v, &l) || tv_list(rt, 0, out)) return -1;
        struct tv seen;
        if (tv_list(rt, 0, &seen)) return -1;
        for (size_t i = 0; i < l->n; i++) {
            struct tv key = l->v[i];
            if (has_attr && get_attr_path(rt, key, attr.u.s->p, &key)) return -1;
            if (!tv_hashable(key)) return tmpl_fail(rt, "unhashable type: '%s'", tv_type_name(key));
            if (!cs && key.kind == TV_STR && str_case(rt, key.u.s, CASE_LOWER, &key)) return -1;
            bool dup = false;
            for (size_t k = 0; k < seen.u.l->n && !dup; k++) dup = tv_eq(seen.u.l->v[k], key);
            if (!dup && (tv_list_push(rt, &seen, key) || tv_list_push(rt, out, l->v[i]))) return -1;
        }
        out->flags = TV_F_GEN;
        return 0;
    }
    default: return tmpl_fail(rt, "internal: unknown filter id %d", id);
    }
}

/* stable merge sort with jinja's sort key (lower-cased strings unless case_sensitive, optional attribute) */
/* jinja's sort / min / max key: the attribute path's value, lowered unless case_sensitive */
static int sort_key(struct tmpl_rt *rt, struct tv item, bool case_sensitive, const char *attr, struct tv *key) {
    *key = item;
    if (attr && get_attr_path(rt, item, attr, key)) return -1;
    if (!case_sensitive && key->kind == TV_STR && str_case(rt, key->u.s, CASE_LOWER, key)) return -1;
    return 0;
}

/* jinja's sort compares one-item lists [key] (make_multi_attrgetter), and Python compares lists item by item
 * after an == test: equal keys are never ordered, so undefined keys (equal to each other) sort without error */
static int key_lt(struct tmpl_rt *rt, struct tv a, struct tv b, bool *out) {
    if (tv_eq(a, b)) { *out = false; return 0; }
    return tv_lt(rt, a, b, out);
}

static int sort_list(struct tmpl_rt *rt, struct tv *items, size_t n, bool reverse, bool case_sensitive, const char *attr) {
    if (n < 2) return 0;
    struct tv *keys = tmpl_arena_alloc(&rt->arena, n * sizeof *keys), *tmpk = tmpl_arena_alloc(&rt->arena, n * sizeof *tmpk);
    struct tv *tmpv = tmpl_arena_alloc(&rt->arena, n * sizeof *tmpv);
    if (!keys || !tmpk || !tmpv) return tmpl_fail(rt, "render exceeded the memory limit");
    for (size_t i = 0; i < n; i++)
        if (sort_key(rt, items[i], case_sensitive, attr, &keys[i])) return -1;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = VLLMC_MIN(lo + w, n), hi = VLLMC_MIN(lo + 2 * w, n), i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                bool take_right;
                /* reverse=True in Python sorts descending but stays stable */
                if (reverse ? key_lt(rt, keys[i], keys[j], &take_right) : key_lt(rt, keys[j], keys[i], &take_right)) return -1;
                if (take_right) { tmpk[k] = keys[j]; tmpv[k++] = items[j++]; }
                else { tmpk[k] = keys[i]; tmpv[k++] = items[i++]; }
            }
            while (i < mid) { tmpk[k] = keys[i]; tmpv[k++] = items[i++]; }
            while (j < hi) { tmpk[k] = keys[j]; tmpv[k++] = items[j++]; }
        }
        memcpy(keys, tmpk, n * sizeof *keys);
        memcpy(items, tmpv, n * sizeof *items);
    }
    return 0;
}

/* ---------------- methods ---------------- */
static int cp_index_of(const struct tstr *s, const char *at) { return (int)utf8_count(s->p, (size_t)(at - s->p)); }

static int str_predicate(struct tmpl_rt *rt, const struct tstr *s, int id, struct tv *out) {
    if ((id == M_ISUPPER || id == M_ISLOWER) && case_check(rt, s)) return -1;
    bool ok = s->len > 0, any_cased = false;
    for (size_t i = 0; i < s->len;) {
        uint32_t c;
        i += utf8_next(s->p + i, s->len - i, &c);
        if (c >= 0x80 && id != M_ISSPACE && id != M_ISUPPER && id != M_ISLOWER)
            return tmpl_fail(rt, "unsupported: %s() of non-ASCII text", id == M_ISDIGIT ? "isdigit" : id == M_ISALPHA ? "isalpha" : "isalnum");
        bool digit = c >= '0' && c <= '9', alpha = (c | 32) >= 'a' && (c | 32) <= 'z';
        switch (id) {
        case M_ISDIGIT: ok &= digit; break;
        case M_ISALPHA: ok &= alpha; break;
        case M_ISALNUM: ok &= alpha || digit; break;
        case M_ISSPACE: ok &= py_isspace(c); break;
        case M_ISUPPER: if (cp_is_lower(c)) ok = false; if (cp_is_upper(c)) any_cased = true; break;
        case M_ISLOWER: if (cp_is_upper(c)) ok = false; if (cp_is_lower(c)) any_cased = true; break;
        }
    }
    if (id == M_ISUPPER || id == M_ISLOWER) ok = ok && any_cased;
    *out = tv_bool(ok);
    return 0;
}

static int call_method(struct tmpl_rt *rt, struct tmethod *m, struct targs *a, struct tv *out) {
    int id = methods[m->id].id;
    const char *name = methods[m->id].name;
    struct tv self = m->self, x, y;
    if (id == M_UNSUPPORTED) {
        if (self.kind == TV_DICT || self.kind == TV_LIST) return tmpl_fail(rt, "access to attribute '%s' of '%s' object is unsafe", name, tv_type_name(self));
        return tmpl_fail(rt, "unsupported method '%s' of '%s'", name, tv_type_name(self));
    }
    const struct tstr *s = self.kind == TV_STR ? self.u.s : NULL;
    if (s && tmpl_charge(rt, s->len)) return -1; /* every str method scans the string */
    if ((self.kind == TV_LIST || self.kind == TV_DICT) && tmpl_charge(rt, (self.kind == TV_LIST ? self.u.l->n : self.u.d->n) * 8)) return -1;
    switch (id) {
    case M_STARTSWITH: case M_ENDSWITH:
        if (!arg(a, 0, "prefix", &x)) return tmpl_fail(rt, "%s() takes at least 1 argument", name);
        if (a->n_pos > 1) return tmpl_fail(rt, "%s(): start/end arguments are not supported", name);
        if (x.kind == TV_STR) { *out = tv_bool(str_has_prefix(s, x.u.s, id == M_ENDSWITH)); return 0; }
        if (x.kind == TV_LIST && (x.flags & TV_F_TUPLE)) {
            *out = tv_bool(false);
            for (size_t i = 0; i < x.u.l->n; i++) {
                if (x.u.l->v[i].kind != TV_STR) return tmpl_fail(rt, "tuple for %s must only contain str", name);
                if (str_has_prefix(s, x.u.l->v[i].u.s, id == M_ENDSWITH)) *out = tv_bool(true);
            }
            return 0;
        }
        return tmpl_fail(rt, "%s first arg must be str or a tuple of str, not %s", name, tv_type_name(x));
    case M_SPLIT: case M_RSPLIT: return str_split(rt, s, a, id == M_RSPLIT, out);
    case M_STRIP: case M_LSTRIP: case M_RSTRIP: {
        bool has = arg(a, 0, "chars", &x) && x.kind != TV_NONE;
        if (has && x.kind != TV_STR) return tmpl_fail(rt, "%s arg must be None or str", name);
        return str_strip(rt, s, has ? x.u.s : NULL, id != M_RSTRIP, id != M_LSTRIP, out);
    }
    case M_REPLACE: {
        int64_t count;
        if (arg_str(rt, a, 0, "old", name, &x) || arg_str(rt, a, 1, "new", name, &y) || arg_int(rt, a, 2, "count", -1, &count)) return -1;
        return str_replace(rt, s, x.u.s, y.u.s, count, out);
    }
    case M_UPPER: return str_case(rt, s, CASE_UPPER, out);
    case M_LOWER: return str_case(rt, s, CASE_LOWER, out);
    case M_TITLE: return str_case(rt, s, CASE_TITLE, out);
    case M_CAPITALIZE: return str_case(rt, s, CASE_CAPITALIZE, out);
    case M_FIND: case M_RFIND: case M_SINDEX: case M_RINDEX: {
        if (arg_str(rt, a, 0, "sub", name, &x)) return -1;
        if (a->n_pos > 1) return tmpl_fail(rt, "%s(): start/end arguments are not supported", name);
        const char *f = (id == M_FIND || id == M_SINDEX) ? memfind(s->p, s->len, x.u.s->p, x.u.s->len) : memrfind(s->p, s->len, x.u.s->p, x.u.s->len);
        if (!f && (id == M_SINDEX || id == M_RINDEX)) return tmpl_fail(rt, "substring not found");
        *out = tv_int(f ? cp_index_of(s, f) : -1);
        return 0;
    }
    case M_SCOUNT: {
        if (arg_str(rt, a, 0, "sub", name, &x)) return -1;
        if (a->n_pos > 1) return tmpl_fail(rt, "count(): start/end arguments are not supported");
        if (!x.u.s->len) { *out = tv_int((int64_t)utf8_count(s->p, s->len) + 1); return 0; }
        int64_t c = 0;
        for (const char *p = s->p, *e = s->p + s->len; (p = memfind(p, (size_t)(e - p), x.u.s->p, x.u.s->len)); p += x.u.s->len) c++;
        *out = tv_int(c);
        return 0;
    }
    case M_JOIN: {
        struct tlist *l;
        if (!arg(a, 0, "iterable", &x)) return tmpl_fail(rt, "join() takes exactly one argument");
        if (x.kind == TV_UNDEF) return tmpl_fail(rt, "can only join an iterable");
        if (tv_iter_list(rt, x, &l)) return -1;
        struct tsb b = {.limit = rt->lim.max_output_bytes};
        for (size_t i = 0; i < l->n; i++) {
            if (l->v[i].kind != TV_STR) { tsb_free(&b); return tmpl_fail(rt, "sequence item %zu: expected str instance, %s found", i, tv_type_name(l->v[i])); }
            if ((i && tsb_put(rt, &b, s->p, s->len)) || tsb_put(rt, &b, l->v[i].u.s->p, l->v[i].u.s->len)) { tsb_free(&b); return -1; }
        }
        return tv_str_sb(rt, &b, out);
    }
    case M_SPLITLINES: return str_splitlines(rt, s, arg_bool(a, 0, "keepends", false), out);
    case M_ISDIGIT: case M_ISALPHA: case M_ISALNUM: case M_ISSPACE: case M_ISUPPER: case M_ISLOWER:
        return str_predicate(rt, s, id, out);
    case M_REMOVEPREFIX: case M_REMOVESUFFIX:
        if (arg_str(rt, a, 0, "prefix", name, &x)) return -1;
        if (!str_has_prefix(s, x.u.s, id == M_REMOVESUFFIX)) { *out = self; out->flags = 0; return 0; }
        return tv_str(rt, id == M_REMOVEPREFIX ? s->p + x.u.s->len : s->p, s->len - x.u.s->len, out);
    case M_ITEMS:
        if (tmpl_call_filter(rt, F_ITEMS, self, &(struct targs){0}, out)) return -1;
        out->flags = TV_F_ITEMS;
        return 0;
    case M_KEYS: case M_VALUES:
        if (tv_list(rt, self.u.d->n, out)) return -1;
        for (size_t i = 0; i < self.u.d->n; i++) out->u.l->v[i] = id == M_KEYS ? self.u.d->k[i] : self.u.d->v[i];
        out->u.l->n = self.u.d->n;
        out->flags = id == M_KEYS ? TV_F_KEYS : TV_F_VALUES;
        return 0;
    case M_GET:
        if (!arg(a, 0, "key", &x)) return tmpl_fail(rt, "get expected at least 1 argument");
        if (!tv_hashable(x)) return tmpl_fail(rt, "unhashable type: '%s'", tv_type_name(x));
        if (!tv_dict_get(self.u.d, x, out) && !arg(a, 1, "default", out)) *out = tv_none();
        return 0;
    case M_LINDEX: case M_LCOUNT: {
        if (!arg(a, 0, "value", &x)) return tmpl_fail(rt, "%s() takes at least 1 argument", name);
        int64_t c = 0;
        for (size_t i = 0; i < self.u.l->n; i++) {
            if (!tv_eq(self.u.l->v[i], x)) continue;
            if (id == M_LINDEX) { *out = tv_int((int64_t)i); return 0; }
            c++;
        }
        if (id == M_LINDEX) return tmpl_fail(rt, "value is not in list");
        *out = tv_int(c);
        return 0;
    }
    case M_CYCLE:
        if (a->n_pos < 1) return tmpl_fail(rt, "no items for cycling given");
        *out = a->v[self.u.loop->i % (size_t)a->n_pos];
        return 0;
    }
    return tmpl_fail(rt, "internal: unknown method");
}

/* Methods of a Markup string return Markup; replace() and join() escape what they insert. */
int tmpl_call_method(struct tmpl_rt *rt, struct tmethod *m, struct targs *a, struct tv *out) {
    int id = methods[m->id].id;
    bool markup = m->self.kind == TV_STR && (m->self.flags & TV_F_MARKUP);
    if (!markup) return call_method(rt, m, a, out);
    struct tv x;
    if (id == M_REPLACE && a->n_pos >= 2 && a->v[1].kind == TV_STR && html_escape(rt, a->v[1].u.s, &a->v[1])) return -1;
    if (id == M_JOIN && arg(a, 0, "iterable", &x) && x.kind != TV_UNDEF) {
        struct tlist *l;
        struct tv esc;
        if (tv_iter_list(rt, x, &l) || tv_list(rt, l->n, &esc)) return -1;
        for (size_t i = 0; i < l->n; i++) {
            struct tv s = l->v[i];
            if (!(s.kind == TV_STR && (s.flags & TV_F_MARKUP)) && (tv_to_str(rt, s, &s) || html_escape(rt, s.u.s, &s))) return -1;
            esc.u.l->v[i] = s;
        }
        esc.u.l->n = l->n;
        a->v[0] = esc;
    }
    if (call_method(rt, m, a, out)) return -1;
    switch (id) {
    case M_CAPITALIZE: case M_TITLE: case M_LOWER: case M_UPPER: case M_REPLACE: case M_LSTRIP: case M_RSTRIP:
    case M_STRIP: case M_REMOVEPREFIX: case M_REMOVESUFFIX: case M_JOIN:
        out->flags |= TV_F_MARKUP;
        break;
    case M_SPLIT: case M_RSPLIT: case M_SPLITLINES:
        for (size_t i = 0; i < out->u.l->n; i++) out->u.l->v[i].flags |= TV_F_MARKUP;
        break;
    }
    return 0;
}

/* ---------------- global functions ---------------- */
int tmpl_call_builtin(struct tmpl_rt *rt, int id, struct targs *a, struct tv *out) {
    switch (id) {
    case BI_RAISE_EXCEPTION: {
        struct tv msg = tv_undef();
        arg(a, 0, "message", &msg);
        struct tv s;
        if (tv_to_str(rt, msg, &s)) return -1;
        if (!rt->failed) {
            rt->failed = true;
            snprintf(rt->err, sizeof rt->err, "chat template: %s", s.u.s->p);
        }
        return -1;
    }
    case BI_STRFTIME_NOW: {
        struct tv f;
        if (arg_str(rt, a, 0, "format", "strftime_now", &f)) return -1;
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char buf[512];
        size_t n = f.u.s->len ? strftime(buf, sizeof buf, f.u.s->p, &tm) : 0;
        return tv_str(rt, buf, n, out);
    }
    case BI_NAMESPACE: case BI_DICT: {
        if (tv_dict(rt, out)) return -1;
        if (id == BI_NAMESPACE) out->kind = TV_NS;
        for (int i = 0; i < a->n_pos; i++) {
            if (a->v[i].kind != TV_DICT || id == BI_DICT) return tmpl_fail(rt, "%s(): unsupported positional argument", tmpl_builtin_names[id]);
            for (size_t k = 0; k < a->v[i].u.d->n; k++)
                if (tv_dict_set(rt, out->u.d, a->v[i].u.d->k[k], a->v[i].u.d->v[k])) return -1;
        }
        for (int i = 0; i < a->n_kw; i++) {
            struct tv k;
            if (tv_str(rt, a->kw_names[i], strlen(a->kw_names[i]), &k) || tv_dict_set(rt, out->u.d, k, a->v[a->n_pos + i])) return -1;
        }
        return 0;
    }
    case BI_RANGE: {
        int64_t r[3] = {0, 0, 1};
        if (a->n_kw || a->n_pos < 1 || a->n_pos > 3) return tmpl_fail(rt, "range() takes 1 to 3 positional arguments");
        for (int i = 0; i < a->n_pos; i++) {
            struct tv v = a->v[i];
            if (v.kind != TV_INT && v.kind != TV_BOOL) return tmpl_fail(rt, "'%s' object cannot be interpreted as an integer", tv_type_name(v));
            r[a->n_pos == 1 ? 1 : i] = v.kind == TV_BOOL ? v.u.b : v.u.i;
        }
        if (r[2] == 0) return tmpl_fail(rt, "range() arg 3 must not be zero");
        double cnt = ceil(((double)r[1] - (double)r[0]) / (double)r[2]);
        if (cnt < 0) cnt = 0;
        if (cnt > 100000) return tmpl_fail(rt, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        if (tv_list(rt, (size_t)cnt, out)) return -1;
        for (size_t i = 0; i < (size_t)cnt; i++) out->u.l->v[i] = tv_int(r[0] + (int64_t)i * r[2]);
        out->u.l->n = (size_t)cnt;
        out->flags = TV_F_RANGE;
        return 0;
    }
    }
    return tmpl_fail(rt, "internal: unknown builtin");
}
