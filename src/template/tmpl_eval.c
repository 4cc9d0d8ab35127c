/* Chat-template evaluator: walks the AST with jinja2's scoping (each for-loop iteration and each macro
 * call gets its own frame; `set` writes the innermost frame; macros see their defining scope live),
 * Python operator semantics, and hard bounds on steps, depth, memory and output so that no template
 * and no input can loop forever or exhaust the machine. */
#include <math.h>
#include <string.h>
#include "template/tmpl_internal.h"

#define EXEC_BREAK 1
#define EXEC_CONTINUE 2

static int eval(struct tmpl_rt *rt, const struct tnode *n, struct tv *out);
static int folds(struct tmpl_rt *rt, const struct tnode *n, int depth, bool *out);
static int exec_body(struct tmpl_rt *rt, struct tframe *f, struct tnode *const *body, int n);

/* ---------------- frames ---------------- */
static struct tframe *frame_new(struct tmpl_rt *rt, struct tframe *parent) {
    struct tframe *f = tmpl_arena_alloc(&rt->arena, sizeof *f);
    if (!f) { tmpl_fail(rt, "render exceeded the memory limit (%zu bytes)", rt->lim.max_memory_bytes); return NULL; }
    f->parent = parent;
    return f;
}

static int frame_set(struct tmpl_rt *rt, struct tframe *f, const char *name, struct tv v) {
    for (int i = 0; i < f->n; i++) if (!strcmp(f->names[i], name)) { f->vals[i] = v; return 0; }
    if (f->n == f->cap) {
        int nc = f->cap ? f->cap * 2 : 8;
        const char **nn = tmpl_arena_alloc(&rt->arena, (size_t)nc * sizeof *nn);
        struct tv *nv = tmpl_arena_alloc(&rt->arena, (size_t)nc * sizeof *nv);
        if (!nn || !nv) return tmpl_fail(rt, "render exceeded the memory limit (%zu bytes)", rt->lim.max_memory_bytes);
        if (f->n) { memcpy(nn, f->names, (size_t)f->n * sizeof *nn); memcpy(nv, f->vals, (size_t)f->n * sizeof *nv); }
        f->names = nn;
        f->vals = nv;
        f->cap = nc;
    }
    f->names[f->n] = name;
    f->vals[f->n] = v;
    f->n++;
    return 0;
}

static bool frame_get(struct tframe *f, const char *name, struct tv *out) {
    for (; f; f = f->parent)
        for (int i = 0; i < f->n; i++)
            if (!strcmp(f->names[i], name)) { *out = f->vals[i]; return true; }
    return false;
}

/* ---------------- helpers ---------------- */
static int tick(struct tmpl_rt *rt, int line) {
    rt->line = line;
    if (++rt->steps > rt->lim.max_steps) return tmpl_fail(rt, "render exceeded the step limit (%llu)", (unsigned long long)rt->lim.max_steps);
    return rt->failed ? -1 : 0;
}

int tmpl_contains(struct tmpl_rt *rt, struct tv hay, struct tv needle, bool *out) {
    if (tmpl_charge(rt, hay.kind == TV_STR ? hay.u.s->len : hay.kind == TV_LIST ? hay.u.l->n * 8 : hay.kind == TV_DICT ? hay.u.d->n * 8 : 0))
        return -1;
    switch (hay.kind) {
    case TV_UNDEF: *out = false; return 0;
    case TV_STR:
        if (needle.kind != TV_STR) return tmpl_fail(rt, "'in <string>' requires string as left operand, not %s", tv_type_name(needle));
        if (needle.u.s->len == 0) { *out = true; return 0; }
        *out = false;
        for (size_t i = 0; i + needle.u.s->len <= hay.u.s->len; i++)
            if (!memcmp(hay.u.s->p + i, needle.u.s->p, needle.u.s->len)) { *out = true; break; }
        return 0;
    case TV_LIST:
        *out = false;
        for (size_t i = 0; i < hay.u.l->n; i++) if (tv_eq(hay.u.l->v[i], needle)) { *out = true; break; }
        return 0;
    case TV_DICT: {
        struct tv dummy;
        if (!tv_hashable(needle)) return tmpl_fail(rt, "unhashable type: '%s'", tv_type_name(needle));
        *out = tv_dict_get(hay.u.d, needle, &dummy);
        return 0;
    }
    default:
        return tmpl_fail(rt, "argument of type '%s' is not iterable", tv_type_name(hay));
    }
}

static int int_result(struct tmpl_rt *rt, bool overflow, int64_t r, struct tv *out) {
    if (overflow) return tmpl_fail(rt, "integer overflow (Python integers are unbounded; this interpreter's are 64-bit)");
    *out = tv_int(r);
    return 0;
}

static int repeat(struct tmpl_rt *rt, struct tv seq, int64_t times, struct tv *out) {
    if (times < 0) times = 0;
    if (seq.kind == TV_STR) {
        if (seq.u.s->len && (uint64_t)times > rt->lim.max_output_bytes / seq.u.s->len)
            return tmpl_fail(rt, "string repetition exceeds the output limit");
        if (!seq.u.s->len) times = 0; /* '' * 10**16 must not loop */
        struct tsb b = {.limit = rt->lim.max_output_bytes};
        for (int64_t i = 0; i < times; i++) if (tsb_put(rt, &b, seq.u.s->p, seq.u.s->len)) { tsb_free(&b); return -1; }
        if (tv_str_sb(rt, &b, out)) return -1;
        out->flags = seq.flags & TV_F_MARKUP;
        return 0;
    }
    size_t n = seq.u.l->n;
    if (n && (uint64_t)times > (rt->lim.max_memory_bytes / sizeof(struct tv)) / n) return tmpl_fail(rt, "list repetition exceeds the memory limit");
    if (tv_list(rt, n * (size_t)times, out)) return -1;
    for (int64_t t = 0; n && t < times; t++) memcpy(out->u.l->v + (size_t)t * n, seq.u.l->v, n * sizeof *seq.u.l->v);
    out->u.l->n = n * (size_t)times;
    out->flags = seq.flags & TV_F_TUPLE;
    return 0;
}

static int markup_escape(struct tmpl_rt *rt, struct tv s, struct tv *out) {
    if (s.flags & TV_F_MARKUP) { *out = s; return 0; }
    struct tsb b = {.limit = rt->lim.max_output_bytes};
    for (size_t i = 0; i < s.u.s->len; i++) {
        const char *r = NULL;
        switch (s.u.s->p[i]) {
        case '&': r = "&amp;"; break;
        case '<': r = "&lt;"; break;
        case '>': r = "&gt;"; break;
        case '\'': r = "&#39;"; break;
        case '"': r = "&#34;"; break;
        }
        if (r ? tsb_put(rt, &b, r, strlen(r)) : tsb_putc(rt, &b, s.u.s->p[i])) { tsb_free(&b); return -1; }
    }
    return tv_str_sb(rt, &b, out);
}

static const char *op_sym(int op) {
    switch (op) {
    case OP_ADD: return "+";
    case OP_SUB: return "-";
    case OP_MUL: return "*";
    case OP_DIV: return "/";
    case OP_FLOORDIV: return "//";
    case OP_MOD: return "%";
    case OP_POW: return "**";
    default: return "?";
    }
}

static int binop(struct tmpl_rt *rt, int op, struct tv a, struct tv b, struct tv *out) {
    if (op == OP_MOD && a.kind == TV_STR) return tmpl_fail(rt, "unsupported: printf-style string formatting with '%%'");
    if (a.kind == TV_UNDEF || b.kind == TV_UNDEF) {
        struct tv u = a.kind == TV_UNDEF ? a : b;
        if (u.u.s) return tmpl_fail(rt, "'%s' is undefined", u.u.s->p);
        return tmpl_fail(rt, "undefined value used with '%s'", op_sym(op));
    }
    bool num = tv_is_num(a) && tv_is_num(b);
    bool ints = num && a.kind != TV_FLOAT && b.kind != TV_FLOAT;
    int64_t x = a.kind == TV_BOOL ? a.u.b : a.u.i, y = b.kind == TV_BOOL ? b.u.b : b.u.i, r = 0;
    double fx = tv_num(a), fy = tv_num(b);
    switch (op) {
    case OP_ADD:
        if (ints) { bool of = __builtin_add_overflow(x, y, &r); return int_result(rt, of, r, out); }
        if (num) { *out = tv_float(fx + fy); return 0; }
        if (a.kind == TV_STR && b.kind == TV_STR) {
            uint8_t fl = (a.flags | b.flags) & TV_F_MARKUP;
            if (fl && (markup_escape(rt, a, &a) || markup_escape(rt, b, &b))) return -1;
            struct tsb s = {.limit = rt->lim.max_output_bytes};
            if (tsb_put(rt, &s, a.u.s->p, a.u.s->len) || tsb_put(rt, &s, b.u.s->p, b.u.s->len)) { tsb_free(&s); return -1; }
            if (tv_str_sb(rt, &s, out)) return -1;
            out->flags = fl;
            return 0;
        }
        if (a.kind == TV_LIST && b.kind == TV_LIST && (a.flags & TV_F_LISTKIND) == (b.flags & TV_F_LISTKIND) &&
            !(a.flags & (TV_F_GEN | TV_F_VIEW | TV_F_RANGE))) {
            size_t n = a.u.l->n + b.u.l->n;
            if (tv_list(rt, n, out)) return -1;
            if (a.u.l->n) memcpy(out->u.l->v, a.u.l->v, a.u.l->n * sizeof(struct tv));
            if (b.u.l->n) memcpy(out->u.l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(struct tv));
            out->u.l->n = n;
            out->flags = a.flags & TV_F_TUPLE;
            return 0;
        }
        break;
    case OP_SUB:
        if (ints) { bool of = __builtin_sub_overflow(x, y, &r); return int_result(rt, of, r, out); }
        if (num) { *out = tv_float(fx - fy); return 0; }
        break;
    case OP_MUL:
        if (ints) { bool of = __builtin_mul_overflow(x, y, &r); return int_result(rt, of, r, out); }
        if (num) { *out = tv_float(fx * fy); return 0; }
        if ((a.kind == TV_STR || (a.kind == TV_LIST && !(a.flags & (TV_F_GEN | TV_F_VIEW | TV_F_RANGE)))) && (b.kind == TV_INT || b.kind == TV_BOOL))
            return repeat(rt, a, y, out);
        if ((b.kind == TV_STR || (b.kind == TV_LIST && !(b.flags & (TV_F_GEN | TV_F_VIEW | TV_F_RANGE)))) && (a.kind == TV_INT || a.kind == TV_BOOL))
            return repeat(rt, b, x, out);
        break;
    case OP_DIV:
        if (num) {
            if (fy == 0) return tmpl_fail(rt, "division by zero");
            *out = tv_float(ints ? (double)x / (double)y : fx / fy);
            return 0;
        }
        break;
    case OP_FLOORDIV: case OP_MOD:
        if (ints) {
            if (y == 0) return tmpl_fail(rt, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) return op == OP_MOD ? int_result(rt, false, 0, out) : int_result(rt, true, 0, out);
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) { q -= 1; m += y; }
            *out = tv_int(op == OP_MOD ? m : q);
            return 0;
        }
        if (num) {
            if (fy == 0) return tmpl_fail(rt, "float division by zero");
            double mod = fmod(fx, fy), div = (fx - mod) / fy, fl;
            if (mod != 0) { if ((fy < 0) != (mod < 0)) { mod += fy; div -= 1.0; } }
            else mod = copysign(0.0, fy);
            if (div != 0) { fl = floor(div); if (div - fl > 0.5) fl += 1.0; }
            else fl = copysign(0.0, fx / fy);
            *out = tv_float(op == OP_MOD ? mod : fl);
            return 0;
        }
        if (op == OP_MOD && a.kind == TV_STR) return tmpl_fail(rt, "unsupported: printf-style string formatting with '%%'");
        break;
    case OP_POW:
        if (ints && y >= 0) {
            int64_t acc = 1, base = x;
            bool of = false;
            for (int64_t e = y; e > 0; e >>= 1) {
                if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) { of = true; break; }
                if (e > 1 && __builtin_mul_overflow(base, base, &base)) { of = true; break; }
            }
            return int_result(rt, of, acc, out);
        }
        if (num) {
            if (fx == 0 && fy < 0) return tmpl_fail(rt, "0.0 cannot be raised to a negative power");
            if (fx < 0 && fy != floor(fy)) return tmpl_fail(rt, "unsupported: complex result of '**'");
            *out = tv_float(pow(fx, fy));
            if (isinf(out->u.f) && isfinite(fx) && isfinite(fy)) return tmpl_fail(rt, "numerical result out of range");
            return 0;
        }
        break;
    }
    return tmpl_fail(rt, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op), tv_type_name(a), tv_type_name(b));
}

/* Python slice of a list/tuple/str/range. jinja2 compiles a[x:y] to a direct Python subscription (not
 * environment.getitem), so slicing anything else raises. */
static int slice(struct tmpl_rt *rt, struct tv obj, const struct tnode *n, struct tv *out) {
    struct tv parts[3] = {tv_none(), tv_none(), tv_none()};
    const struct tnode *pn[3] = {n->b, n->c, n->d};
    for (int i = 0; i < 3; i++) if (pn[i] && eval(rt, pn[i], &parts[i])) return -1;
    if (obj.kind == TV_UNDEF) return tmpl_getitem(rt, obj, tv_none(), out);
    /* (jinja2's optimizer folds a slice of a constant through getitem instead, giving Undefined: that
     * case is refused here rather than imitated) */
    if (obj.kind == TV_DICT) return tmpl_fail(rt, "unhashable type: 'slice' (unsupported: slicing a dict)");
    if ((obj.kind != TV_LIST && obj.kind != TV_STR) || (obj.flags & (TV_F_GEN | TV_F_VIEW)))
        return tmpl_fail(rt, "'%s' object is not subscriptable (unsupported: slicing a %s)", tv_type_name(obj), tv_type_name(obj));
    int64_t v[3];
    bool given[3];
    for (int i = 0; i < 3; i++) {
        given[i] = parts[i].kind != TV_NONE;
        if (!given[i]) continue;
        if (parts[i].kind != TV_INT && parts[i].kind != TV_BOOL)
            return tmpl_fail(rt, "slice indices must be integers or None or have an __index__ method");
        v[i] = parts[i].kind == TV_BOOL ? parts[i].u.b : parts[i].u.i;
    }
    int64_t step = given[2] ? v[2] : 1;
    if (step == 0) return tmpl_fail(rt, "slice step cannot be zero");
    struct tlist *items;
    if (tv_iter_list(rt, obj, &items)) return -1;
    int64_t len = (int64_t)items->n, start, stop;
    if (step > 0) {
        start = given[0] ? v[0] : 0;
        stop = given[1] ? v[1] : len;
        if (start < 0) start = VLLMC_MAX(start + len, 0);
        if (start > len) start = len;
        if (stop < 0) stop = VLLMC_MAX(stop + len, 0);
        if (stop > len) stop = len;
    } else {
        start = given[0] ? v[0] : len - 1;
        stop = given[1] ? v[1] : -1 - len; /* "before the first element" */
        if (start < 0) start = VLLMC_MAX(start + len, -1);
        if (start >= len) start = len - 1;
        if (given[1]) { if (stop < 0) stop = VLLMC_MAX(stop + len, -1); if (stop >= len) stop = len - 1; }
        else stop = -1;
    }
    struct tv res;
    if (tv_list(rt, 0, &res)) return -1;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        if (tv_list_push(rt, &res, items->v[i])) return -1;
    if (obj.kind == TV_LIST) { res.flags = obj.flags & (TV_F_TUPLE | TV_F_RANGE); *out = res; return 0; }
    struct tsb b = {.limit = rt->lim.max_output_bytes};
    for (size_t i = 0; i < res.u.l->n; i++)
        if (tsb_put(rt, &b, res.u.l->v[i].u.s->p, res.u.l->v[i].u.s->len)) { tsb_free(&b); return -1; }
    if (tv_str_sb(rt, &b, out)) return -1;
    out->flags = obj.flags & TV_F_MARKUP;
    return 0;
}

/* evaluate positional + keyword args of a CALL/FILTER/TEST node, *args and **kwargs expanded;
 * `extra` slots are left free at the end for the caller to append keyword arguments */
static int eval_args_extra(struct tmpl_rt *rt, const struct tnode *n, struct targs *a, int extra) {
    struct tv dyn_args = tv_none(), dyn_kw = tv_none();
    struct tlist *star = NULL;
    memset(a, 0, sizeof *a);
    if (n->c) {
        if (eval(rt, n->c, &dyn_args)) return -1;
        if (dyn_args.kind == TV_UNDEF || dyn_args.kind == TV_DICT) return tmpl_fail(rt, "unsupported *args value of type %s", tv_type_name(dyn_args));
        if (tv_iter_list(rt, dyn_args, &star)) return -1;
    }
    if (n->d) {
        if (eval(rt, n->d, &dyn_kw)) return -1;
        if (dyn_kw.kind != TV_DICT) return tmpl_fail(rt, "argument after ** must be a mapping, not %s", tv_type_name(dyn_kw));
        for (size_t i = 0; i < dyn_kw.u.d->n; i++)
            if (dyn_kw.u.d->k[i].kind != TV_STR) return tmpl_fail(rt, "keywords must be strings");
    }
    size_t n_star = star ? star->n : 0, n_dkw = n->d ? dyn_kw.u.d->n : 0;
    size_t n_pos = (size_t)n->n_kids + n_star, n_kw = (size_t)n->n_kids2 + n_dkw, total = n_pos + n_kw + (size_t)extra;
    if (total > 100000) return tmpl_fail(rt, "too many call arguments");
    if (total) {
        a->v = tmpl_arena_alloc(&rt->arena, total * sizeof *a->v);
        a->kw_names = tmpl_arena_alloc(&rt->arena, (n_kw + (size_t)extra + 1) * sizeof *a->kw_names);
        if (!a->v || !a->kw_names) return tmpl_fail(rt, "render exceeded the memory limit");
    }
    for (int i = 0; i < n->n_kids; i++) if (eval(rt, n->kids[i], &a->v[i])) return -1;
    for (size_t i = 0; i < n_star; i++) a->v[(size_t)n->n_kids + i] = star->v[i];
    for (int i = 0; i < n->n_kids2; i++) {
        if (eval(rt, n->kids2[i], &a->v[n_pos + (size_t)i])) return -1;
        a->kw_names[i] = n->names[i];
    }
    for (size_t i = 0; i < n_dkw; i++) {
        for (size_t k = 0; k < (size_t)n->n_kids2 + i; k++)
            if (!strcmp(a->kw_names[k], dyn_kw.u.d->k[i].u.s->p)) return tmpl_fail(rt, "got multiple values for keyword argument '%s'", a->kw_names[k]);
        a->v[n_pos + (size_t)n->n_kids2 + i] = dyn_kw.u.d->v[i];
        a->kw_names[(size_t)n->n_kids2 + i] = dyn_kw.u.d->k[i].u.s->p;
    }
    a->n_pos = (int)n_pos;
    a->n_kw = (int)n_kw;
    return 0;
}
static int eval_args(struct tmpl_rt *rt, const struct tnode *n, struct targs *a) { return eval_args_extra(rt, n, a, 0); }

static int call_value(struct tmpl_rt *rt, struct tv fn, struct targs *a, struct tv *out) {
    switch (fn.kind) {
    case TV_MACRO: return tmpl_call_macro(rt, fn.u.macro, a, out);
    case TV_BUILTIN: return tmpl_call_builtin(rt, fn.u.builtin, a, out);
    case TV_METHOD: return tmpl_call_method(rt, fn.u.m, a, out);
    case TV_UNDEF:
        if (fn.u.s) return tmpl_fail(rt, "'%s' is undefined", fn.u.s->p);
        return tmpl_fail(rt, "called an undefined value (no such attribute or method)");
    default: return tmpl_fail(rt, "'%s' object is not callable", tv_type_name(fn));
    }
}

static int undefined_name(struct tmpl_rt *rt, const char *name, struct tv *out) {
    *out = tv_undef();
    out->u.s = tstr_new(&rt->arena, name, strlen(name));
    return out->u.s ? 0 : tmpl_fail(rt, "render exceeded the memory limit");
}

static int eval_inner(struct tmpl_rt *rt, const struct tnode *n, struct tv *out) {
    struct tv a, b;
    switch (n->kind) {
    case TN_CONST: *out = n->val; return 0;
    case TN_CAPTURE: *out = rt->capture; return 0;
    case TN_NAME:
        if (frame_get(rt->frame, n->name, out)) return 0;
        return undefined_name(rt, n->name, out);
    case TN_ATTR:
        if (eval(rt, n->a, &a)) return -1;
        return tmpl_getattr(rt, a, n->name, out);
    case TN_ITEM:
        if (eval(rt, n->a, &a) || eval(rt, n->b, &b)) return -1;
        return tmpl_getitem(rt, a, b, out);
    case TN_SLICE:
        if (eval(rt, n->a, &a)) return -1;
        return slice(rt, a, n, out);
    case TN_CALL: {
        struct targs args;
        if (eval(rt, n->a, &a) || eval_args(rt, n, &args)) return -1;
        rt->line = n->line;
        return call_value(rt, a, &args, out);
    }
    case TN_FILTER: {
        struct targs args;
        if (eval(rt, n->a, &a) || eval_args(rt, n, &args)) return -1;
        rt->line = n->line;
        return tmpl_call_filter(rt, n->op, a, &args, out);
    }
    case TN_TEST: {
        struct targs args;
        bool r;
        if (eval(rt, n->a, &a) || eval_args(rt, n, &args)) return -1;
        rt->line = n->line;
        if (tmpl_call_test(rt, n->op, a, &args, &r)) return -1;
        *out = tv_bool(r);
        return 0;
    }
    case TN_BIN:
        if (eval(rt, n->a, &a) || eval(rt, n->b, &b)) return -1;
        rt->line = n->line;
        if (n->op == OP_POW && ((a.kind == TV_INT && a.u.i < 0) || (a.kind == TV_FLOAT && signbit(a.u.f)))) {
            bool fa, fb;
            if (folds(rt, n->a, 0, &fa) || (fa && folds(rt, n->b, 0, &fb))) return -1;
            if (!fa || fb) return binop(rt, n->op, a, b, out);
            struct tv m; /* -(|a| ** b), as Python reads jinja2's "-2 ** n" (see folds) */
            if (a.kind == TV_INT) { if (int_result(rt, a.u.i == INT64_MIN, -a.u.i, &m)) return -1; }
            else m = tv_float(-a.u.f);
            if (binop(rt, n->op, m, b, &m)) return -1;
            if (m.kind == TV_INT) return int_result(rt, m.u.i == INT64_MIN, -m.u.i, out);
            *out = tv_float(-m.u.f);
            return 0;
        }
        return binop(rt, n->op, a, b, out);
    case TN_NEG: case TN_POS:
        if (eval(rt, n->a, &a)) return -1;
        if (a.kind == TV_INT || a.kind == TV_BOOL) {
            int64_t x = a.kind == TV_BOOL ? a.u.b : a.u.i;
            if (n->kind == TN_POS) { *out = tv_int(x); return 0; }
            return int_result(rt, x == INT64_MIN, -x, out);
        }
        if (a.kind == TV_FLOAT) { *out = tv_float(n->kind == TN_NEG ? -a.u.f : a.u.f); return 0; }
        return tmpl_fail(rt, "bad operand type for unary %s: '%s'", n->kind == TN_NEG ? "-" : "+", tv_type_name(a));
    case TN_NOT:
        if (eval(rt, n->a, &a)) return -1;
        *out = tv_bool(!tv_truthy(a));
        return 0;
    case TN_AND: case TN_OR:
        if (eval(rt, n->a, &a)) return -1;
        if (tv_truthy(a) == (n->kind == TN_OR)) { *out = a; return 0; }
        return eval(rt, n->b, out);
    case TN_COND:
        if (eval(rt, n->b, &b)) return -1;
        if (tv_truthy(b)) return eval(rt, n->a, out);
        if (n->c) return eval(rt, n->c, out);
        *out = tv_undef();
        return 0;
    case TN_COMPARE: {
        if (eval(rt, n->a, &a)) return -1;
        for (int i = 0; i < n->n_kids; i++) {
            bool r;
            if (eval(rt, n->kids[i], &b)) return -1;
            rt->line = n->line;
            switch (n->ops[i]) {
            case OP_EQ: r = tv_eq(a, b); break;
            case OP_NE: r = !tv_eq(a, b); break;
            case OP_LT: if (tv_lt(rt, a, b, &r)) return -1; break;
            case OP_GT: if (tv_lt(rt, b, a, &r)) return -1; break;
            case OP_LTEQ: if (tv_lt(rt, b, a, &r)) return -1; r = !r; break;
            case OP_GTEQ: if (tv_lt(rt, a, b, &r)) return -1; r = !r; break;
            case OP_IN: if (tmpl_contains(rt, b, a, &r)) return -1; break;
            default: if (tmpl_contains(rt, b, a, &r)) return -1; r = !r; break; /* not in */
            }
            if (!r) { *out = tv_bool(false); return 0; }
            a = b;
        }
        *out = tv_bool(true);
        return 0;
    }
    case TN_CONCAT: {
        struct tsb s = {.limit = rt->lim.max_output_bytes};
        for (int i = 0; i < n->n_kids; i++)
            if (eval(rt, n->kids[i], &a) || tv_write_str(rt, &s, a)) { tsb_free(&s); return -1; }
        return tv_str_sb(rt, &s, out);
    }
    case TN_LIST: case TN_TUPLE:
        if (tv_list(rt, (size_t)n->n_kids, out)) return -1;
        for (int i = 0; i < n->n_kids; i++) if (eval(rt, n->kids[i], &out->u.l->v[i])) return -1;
        out->u.l->n = (size_t)n->n_kids;
        if (n->kind == TN_TUPLE) out->flags = TV_F_TUPLE;
        return 0;
    case TN_DICT: {
        struct tv d;
        if (tv_dict(rt, &d)) return -1;
        for (int i = 0; i < n->n_kids; i++) {
            if (eval(rt, n->kids[i], &a) || eval(rt, n->kids2[i], &b)) return -1;
            if (!tv_hashable(a)) return tmpl_fail(rt, "unhashable type: '%s'", tv_type_name(a));
            if (tv_dict_set(rt, d.u.d, a, b)) return -1;
        }
        *out = d;
        return 0;
    }
    default:
        return tmpl_fail(rt, "internal: unexpected node %d in an expression", n->kind);
    }
}

/* Does jinja2's optimizer fold n to a constant (nodes.as_const)? Constants and the operators,
 * comparisons, containers, subscripts, tests and filters over them, and/or/if-else as Python
 * short-circuits them (the taken side alone must fold); not names, calls or the filters that take the
 * context. It matters for `a ** b`: jinja2 compiles it to the Python text "(a ** b)", and a folded a
 * is written as its repr, so when a folds to a negative number and b does not, Python reads "-2 ** n"
 * as -(2 ** n): {{ -2 ** n }} with n = 2 renders -4. The tests of and/or/if-else are evaluated here;
 * they are constants, and evaluating the `**` evaluates them anyway. */
static int folds(struct tmpl_rt *rt, const struct tnode *n, int depth, bool *out) {
    static const char *const ctx_filters[] = {"map", "select", "reject", "selectattr", "rejectattr", "random"};
#define FOLDS(x) do { if (folds(rt, (x), depth + 1, out)) return -1; if (!*out) return 0; } while (0)
    struct tv t;
    *out = false;
    if (depth > 64) return 0;
    switch (n->kind) {
    case TN_CONST: break;
    case TN_NEG: case TN_POS: case TN_NOT: case TN_ATTR: FOLDS(n->a); break;
    case TN_BIN: case TN_ITEM: FOLDS(n->a); FOLDS(n->b); break;
    case TN_AND: case TN_OR:
        FOLDS(n->a);
        if (eval(rt, n->a, &t)) return -1;
        if (tv_truthy(t) != (n->kind == TN_OR)) FOLDS(n->b); /* else it folds to the left side */
        break;
    case TN_COND:
        FOLDS(n->b);
        if (eval(rt, n->b, &t)) return -1;
        if (tv_truthy(t)) FOLDS(n->a);
        else if (n->c) FOLDS(n->c);
        else return 0;
        break;
    case TN_FILTER: case TN_TEST: case TN_COMPARE: case TN_LIST: case TN_TUPLE: case TN_DICT: case TN_CONCAT:
        if (n->c || n->d) return 0;
        if (n->kind == TN_FILTER)
            for (size_t i = 0; i < sizeof ctx_filters / sizeof ctx_filters[0]; i++)
                if (n->name && !strcmp(n->name, ctx_filters[i])) return 0;
        if (n->a) FOLDS(n->a);
        for (int i = 0; i < n->n_kids; i++) if (n->kids[i]) FOLDS(n->kids[i]);
        for (int i = 0; i < n->n_kids2; i++) if (n->kids2[i]) FOLDS(n->kids2[i]);
        break;
    default: return 0;
    }
#undef FOLDS
    *out = true;
    return 0;
}

static int eval(struct tmpl_rt *rt, const struct tnode *n, struct tv *out) {
    if (tick(rt, n->line)) return -1;
    if (++rt->depth > rt->lim.max_depth) { rt->depth--; return tmpl_fail(rt, "render nested too deeply (limit %d)", rt->lim.max_depth); }
    int rc = eval_inner(rt, n, out);
    rt->depth--;
    return rc;
}

/* ---------------- statements ---------------- */
static int assign_targets(struct tmpl_rt *rt, struct tframe *f, const char *const *names, int n, struct tv v) {
    if (n == 1) return frame_set(rt, f, names[0], v);
    struct tlist *l;
    if (tv_iter_list(rt, v, &l)) return -1;
    if (l->n != (size_t)n)
        return tmpl_fail(rt, l->n < (size_t)n ? "not enough values to unpack (expected %d, got %zu)" : "too many values to unpack (expected %d, got %zu)", n, l->n);
    for (int i = 0; i < n; i++) if (frame_set(rt, f, names[i], l->v[i])) return -1;
    return 0;
}

static int exec_for(struct tmpl_rt *rt, struct tframe *f, const struct tnode *n) {
    struct tv seq;
    struct tlist *items;
    if (eval(rt, n->a, &seq)) return -1;
    rt->line = n->line;
    if (seq.kind == TV_UNDEF && seq.u.s == NULL) { /* an undefined attribute iterates as empty */ }
    if (tv_iter_list(rt, seq, &items)) return -1;
    if (n->b) { /* {% for x in seq if cond %}: filter first, so loop.length/last see the filtered list */
        struct tv kept;
        if (tv_list(rt, 0, &kept)) return -1;
        for (size_t i = 0; i < items->n; i++) {
            struct tframe *tf = frame_new(rt, f);
            struct tv c;
            if (!tf || assign_targets(rt, tf, n->names, n->n_names, items->v[i])) return -1;
            struct tframe *saved = rt->frame;
            rt->frame = tf;
            int rc = eval(rt, n->b, &c);
            rt->frame = saved;
            if (rc) return -1;
            if (tv_truthy(c) && tv_list_push(rt, &kept, items->v[i])) return -1;
        }
        items = kept.u.l;
    }
    if (items->n == 0) {
        struct tframe *ef = frame_new(rt, f);
        return ef ? exec_body(rt, ef, n->kids2, n->n_kids2) : -1;
    }
    struct tloop *lp = tmpl_arena_alloc(&rt->arena, sizeof *lp);
    if (!lp) return tmpl_fail(rt, "render exceeded the memory limit");
    lp->items = items;
    lp->depth = 1;
    struct tv loopv = {0};
    loopv.kind = TV_LOOP;
    loopv.u.loop = lp;
    for (size_t i = 0; i < items->n; i++) {
        if (tick(rt, n->line)) return -1;
        lp->i = i;
        struct tframe *it = frame_new(rt, f);
        if (!it || assign_targets(rt, it, n->names, n->n_names, items->v[i]) || frame_set(rt, it, "loop", loopv)) return -1;
        int rc = exec_body(rt, it, n->kids, n->n_kids);
        if (rc < 0) return -1;
        if (rc == EXEC_BREAK) break;
    }
    return 0;
}

/* Render body into a fresh buffer; *out gets the text. */
static int capture(struct tmpl_rt *rt, struct tframe *f, struct tnode *const *body, int n, struct tv *out) {
    struct tsb buf = {.limit = rt->lim.max_output_bytes};
    struct tsb *saved = rt->out;
    rt->out = &buf;
    int rc = exec_body(rt, f, body, n);
    rt->out = saved;
    if (rc < 0) { tsb_free(&buf); return -1; }
    return tv_str_sb(rt, &buf, out);
}

static int exec_stmt(struct tmpl_rt *rt, struct tframe *f, const struct tnode *n) {
    struct tv v;
    if (tick(rt, n->line)) return -1;
    switch (n->kind) {
    case TN_DATA: return tsb_put(rt, rt->out, n->val.u.s->p, n->val.u.s->len);
    case TN_OUTPUT:
        if (eval(rt, n->a, &v)) return -1;
        rt->line = n->line;
        return tv_write_str(rt, rt->out, v);
    case TN_IF:
        if (eval(rt, n->a, &v)) return -1;
        return tv_truthy(v) ? exec_body(rt, f, n->kids, n->n_kids) : exec_body(rt, f, n->kids2, n->n_kids2);
    case TN_FOR: return exec_for(rt, f, n);
    case TN_BREAK: return EXEC_BREAK;
    case TN_CONTINUE: return EXEC_CONTINUE;
    case TN_BLOCK: return exec_body(rt, f, n->kids, n->n_kids);
    case TN_CALL_BLOCK: {
        struct tmacro *cm = tmpl_arena_alloc(&rt->arena, sizeof *cm);
        struct targs args;
        struct tv fn, caller = {0};
        if (!cm) return tmpl_fail(rt, "render exceeded the memory limit");
        cm->def = n->b;
        cm->scope = f;
        caller.kind = TV_MACRO;
        caller.u.macro = cm;
        if (eval(rt, n->a->a, &fn) || eval_args_extra(rt, n->a, &args, 1)) return -1;
        args.v[args.n_pos + args.n_kw] = caller;
        args.kw_names[args.n_kw] = "caller";
        args.n_kw++;
        rt->line = n->line;
        if (call_value(rt, fn, &args, &v)) return -1;
        return tv_write_str(rt, rt->out, v);
    }
    case TN_SET:
        if (eval(rt, n->b, &v)) return -1;
        rt->line = n->line;
        if (n->op == 1) {
            struct tv ns;
            if (!frame_get(f, n->name, &ns) || ns.kind != TV_NS) return tmpl_fail(rt, "cannot assign attribute on non-namespace object");
            struct tv k;
            return tv_str(rt, n->names[0], strlen(n->names[0]), &k) || tv_dict_set(rt, ns.u.d, k, v) ? -1 : 0;
        }
        return assign_targets(rt, f, n->names, n->n_names, v);
    case TN_SET_BLOCK: {
        struct tframe *bf = frame_new(rt, f); /* jinja renders the block in a sub-scope */
        if (!bf || capture(rt, bf, n->kids, n->n_kids, &v)) return -1;
        if (n->a) {
            struct tv saved = rt->capture;
            rt->capture = v;
            int rc = eval(rt, n->a, &v);
            rt->capture = saved;
            if (rc) return -1;
        }
        return frame_set(rt, f, n->names[0], v);
    }
    case TN_MACRO: {
        struct tmacro *m = tmpl_arena_alloc(&rt->arena, sizeof *m);
        if (!m) return tmpl_fail(rt, "render exceeded the memory limit");
        m->def = n;
        m->scope = f;
        v = (struct tv){0};
        v.kind = TV_MACRO;
        v.u.macro = m;
        return frame_set(rt, f, n->name, v);
    }
    default:
        return tmpl_fail(rt, "internal: unexpected node %d as a statement", n->kind);
    }
}

static int exec_body(struct tmpl_rt *rt, struct tframe *f, struct tnode *const *body, int n) {
    if (++rt->depth > rt->lim.max_depth) { rt->depth--; return tmpl_fail(rt, "render nested too deeply (limit %d)", rt->lim.max_depth); }
    struct tframe *saved = rt->frame;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        rt->frame = f;
        rc = exec_stmt(rt, f, body[i]);
    }
    rt->frame = saved;
    rt->depth--;
    return rc;
}

int tmpl_call_macro(struct tmpl_rt *rt, struct tmacro *m, struct targs *a, struct tv *out) {
    const struct tnode *d = m->def;
    if (a->n_pos > d->n_names)
        return tmpl_fail(rt, "macro '%s' takes not more than %d argument(s)", d->name, d->n_names);
    struct tframe *f = frame_new(rt, m->scope);
    if (!f) return -1;
    struct tv caller;
    bool have_caller = false;
    for (int i = 0; i < a->n_kw; i++) {
        int k;
        if (d->op == 1 && !strcmp(a->kw_names[i], "caller")) { caller = a->v[a->n_pos + i]; have_caller = true; continue; }
        for (k = 0; k < d->n_names; k++) if (!strcmp(d->names[k], a->kw_names[i])) break;
        if (k == d->n_names) return tmpl_fail(rt, "macro '%s' takes no keyword argument '%s'", d->name, a->kw_names[i]);
        if (k < a->n_pos) return tmpl_fail(rt, "macro '%s' got multiple values for argument '%s'", d->name, a->kw_names[i]);
    }
    struct tframe *saved = rt->frame;
    rt->frame = f;
    for (int k = 0; k < d->n_names; k++) {
        struct tv v = tv_undef();
        bool have = k < a->n_pos;
        if (have) v = a->v[k];
        for (int i = 0; !have && i < a->n_kw; i++)
            if (!strcmp(d->names[k], a->kw_names[i])) { v = a->v[a->n_pos + i]; have = true; }
        if (!have && d->kids2[k] && eval(rt, d->kids2[k], &v)) { rt->frame = saved; return -1; }
        if (!have && !d->kids2[k] && undefined_name(rt, d->names[k], &v)) { rt->frame = saved; return -1; }
        if (frame_set(rt, f, d->names[k], v)) { rt->frame = saved; return -1; }
    }
    rt->frame = saved;
    if (d->op == 1) {
        if (!have_caller && undefined_name(rt, "caller", &caller)) return -1;
        if (frame_set(rt, f, "caller", caller)) return -1;
    }
    return capture(rt, f, d->kids, d->n_kids, out);
}

/* ---------------- entry points ---------------- */
static vllmc_status render(const struct tmpl *t, const cJSON *ctx, const char *text, size_t text_size,
                           const struct tmpl_limits *lim, char **out, size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return vllmc_errorf(VLLMC_ERR_INVALID, "chat template: NULL template");
    if (ctx && !cJSON_IsObject(ctx)) return vllmc_errorf(VLLMC_ERR_INVALID, "chat template: the context must be a JSON object");
    struct tmpl_rt rt = {0};
    if (lim) rt.lim = *lim;
    if (!rt.lim.max_output_bytes) rt.lim.max_output_bytes = (size_t)64 << 20;
    if (!rt.lim.max_memory_bytes) rt.lim.max_memory_bytes = (size_t)256 << 20;
    if (!rt.lim.max_steps) rt.lim.max_steps = 50u * 1000 * 1000;
    if (!rt.lim.max_depth) rt.lim.max_depth = 2000;
    rt.arena.cap_total = rt.lim.max_memory_bytes;
    struct tsb main_out = {.limit = rt.lim.max_output_bytes};
    rt.out = &main_out;
    int rc = 0;
    rt.globals = frame_new(&rt, NULL);
    rt.root = rt.globals ? frame_new(&rt, rt.globals) : NULL;
    if (!rt.root) rc = -1;
    for (int i = 0; rc == 0 && i < BI__COUNT; i++) {
        struct tv b = {0};
        b.kind = TV_BUILTIN;
        b.u.builtin = i;
        rc = frame_set(&rt, rt.globals, tmpl_builtin_names[i], b);
    }
    if (rc == 0 && ctx) { /* members one at a time, in document order (the number scan relies on it) */
        struct tv all;
        rc = tv_from_cjson(&rt, ctx, text, text_size, &all);
        for (size_t i = 0; rc == 0 && i < all.u.d->n; i++)
            rc = frame_set(&rt, rt.globals, all.u.d->k[i].u.s->p, all.u.d->v[i]);
    }
    if (rc == 0) {
        rt.frame = rt.root;
        rc = exec_body(&rt, rt.root, t->body, t->n_body);
        rt.frame = NULL;
    }
    vllmc_status st = VLLMC_OK;
    if (rc < 0 || rt.failed) {
        st = vllmc_errorf(VLLMC_ERR_INVALID, "%s", rt.failed ? rt.err : "chat template: render failed");
        tsb_free(&main_out);
    } else {
        if (!main_out.p && tsb_put(&rt, &main_out, "", 0)) st = vllmc_errorf(VLLMC_ERR_OOM, "chat template: out of memory");
        else {
            *out = main_out.p;
            if (out_len) *out_len = main_out.n;
        }
    }
    tmpl_arena_free(&rt.arena);
    return st;
}

vllmc_status tmpl_render(const struct tmpl *t, const cJSON *ctx, const struct tmpl_limits *lim, char **out, size_t *out_len) {
    return render(t, ctx, NULL, 0, lim, out, out_len);
}

vllmc_status tmpl_render_json(const struct tmpl *t, const char *json, size_t size, const struct tmpl_chat_defaults *chat_defaults,
                              const struct tmpl_limits *lim, char **out, size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    /* cJSON strings are NUL-terminated: a \u0000 escape would silently cut the text short */
    for (size_t i = 0, in_str = 0; i < size; i++) {
        if (json[i] == '"') in_str = !in_str;
        else if (in_str && json[i] == '\\' && i + 1 < size) {
            if (json[i + 1] == 'u' && i + 5 < size && !memcmp(json + i + 2, "0000", 4))
                return vllmc_errorf(VLLMC_ERR_UNSUPPORTED, "chat template: unsupported NUL character (\\u0000) in a JSON string");
            i++;
        }
    }
    const char *end = NULL;
    cJSON *ctx = cJSON_ParseWithLengthOpts(json, size, &end, false);
    if (!ctx) return vllmc_errorf(VLLMC_ERR_INVALID, "chat template: context is not valid JSON (near byte %zu)",
                                  end && end >= json ? (size_t)(end - json) : (size_t)0);
    vllmc_status st = VLLMC_OK;
    if (chat_defaults) st = tmpl_apply_chat_defaults(ctx, chat_defaults->bos_token, chat_defaults->eos_token);
    if (st == VLLMC_OK) st = render(t, ctx, json, size, lim, out, out_len);
    cJSON_Delete(ctx);
    return st;
}

vllmc_status tmpl_apply_chat_defaults(cJSON *ctx, const char *bos_token, const char *eos_token) {
    if (!cJSON_IsObject(ctx)) return vllmc_errorf(VLLMC_ERR_INVALID, "chat template: the context must be a JSON object");
    if (!cJSON_HasObjectItem(ctx, "tools") && !cJSON_AddNullToObject(ctx, "tools")) goto oom;
    if (!cJSON_HasObjectItem(ctx, "documents") && !cJSON_AddNullToObject(ctx, "documents")) goto oom;
    if (!cJSON_HasObjectItem(ctx, "add_generation_prompt") && !cJSON_AddFalseToObject(ctx, "add_generation_prompt")) goto oom;
    if (bos_token && !cJSON_HasObjectItem(ctx, "bos_token") && !cJSON_AddStringToObject(ctx, "bos_token", bos_token)) goto oom;
    if (eos_token && !cJSON_HasObjectItem(ctx, "eos_token") && !cJSON_AddStringToObject(ctx, "eos_token", eos_token)) goto oom;
    return VLLMC_OK;
oom:
    return vllmc_errorf(VLLMC_ERR_OOM, "chat template: out of memory");
}
