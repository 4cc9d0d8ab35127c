/* Unit tests of the chat-template interpreter: small templates with known jinja2 outputs (expressions,
 * filters, loops, scoping, whitespace control), errors with their messages, parse-time rejection of
 * unsupported constructs, the execution limits, and randomized checks of arithmetic, string methods
 * and tojson against plain C references. */
#include <string.h>
#include "template/template.h"
#include "template/tmpl_internal.h"
#include "test.h"

/* Render `src` with JSON context `ctx`; returns malloc'd output or NULL (error text in *err). */
static char *render_lim(const char *src, const char *ctx, const struct tmpl_limits *lim, char *err, size_t err_size) {
    struct tmpl *t = NULL;
    char *out = NULL;
    size_t n;
    err[0] = 0;
    if (tmpl_parse(src, strlen(src), &t) != VLLMC_OK) {
        snprintf(err, err_size, "PARSE %s", vllmc_last_error());
        return NULL;
    }
    if (tmpl_render_json(t, ctx, strlen(ctx), NULL, lim, &out, &n) != VLLMC_OK) snprintf(err, err_size, "RENDER %s", vllmc_last_error());
    else if (strlen(out) != n) { snprintf(err, err_size, "length mismatch"); free(out); out = NULL; }
    tmpl_free(t);
    return out;
}
static char *render(const char *src, const char *ctx, char *err, size_t err_size) { return render_lim(src, ctx, NULL, err, err_size); }

#define EXPECT(src, ctx, want) do { char e_[1200]; char *o_ = render(src, ctx, e_, sizeof e_); \
    CHECK_MSG(o_ && !strcmp(o_, want), "%s\n   want %s\n   got  %s %s", src, want, o_ ? o_ : "(null)", e_); free(o_); } while (0)
/* expect failure whose message contains `frag` */
#define EXPECT_ERR(src, ctx, frag) do { char e_[1200]; char *o_ = render(src, ctx, e_, sizeof e_); \
    CHECK_MSG(!o_ && strstr(e_, frag), "%s\n   want error containing '%s'\n   got %s / %s", src, frag, o_ ? o_ : "(null)", e_); free(o_); } while (0)

static void test_literals_and_expressions(void) {
    EXPECT("{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ -2 ** 2 }}", "{}", "7|9|64|4");
    EXPECT("{{ 7 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 6 / 3 }}", "{}", "3.5|3|-4|2|-2|2.0");
    EXPECT("{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 1e-5 }}|{{ 0.0001 }}|{{ 1.5e300 * 10 }}|{{ -0.0 }}", "{}",
           "0.30000000000000004|1e+16|1000000000000000.0|1e-05|0.0001|1.5e+301|-0.0");
    EXPECT("{{ true }}{{ False }}{{ none }}{{ None }}", "{}", "TrueFalseNoneNone");
    EXPECT("{{ 'a\\tb\\n' }}|{{ \"q\\\"q\" }}|{{ '\\u00e9\\x41\\101' }}|{{ 'x' 'y' }}|{{ '\\q' }}", "{}", "a\tb\n|q\"q|\xc3\xa9" "AA|xy|\\q");
    EXPECT("{{ 1_000 + 0x10 + 0o7 + 0b11 }}", "{}", "1026");
    EXPECT("{{ 'a' ~ 1 ~ none ~ true ~ undefined_x }}", "{}", "a1NoneTrue");
    EXPECT("{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' != 'b' }}{{ [1, 2] == [1, 2] }}{{ (1, 2) == [1, 2] }}",
           "{}", "TrueFalseTrueTrueTrueTrueFalse");
    EXPECT("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 'z' not in 'abc' }}{{ 'x' in nothing }}", "{}", "TrueTrueTrueTrueFalse");
    EXPECT("{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ none and 1 }}|{{ not 0 }}|{{ not not 'a' }}", "{}", "x|y|None|True|True");
    EXPECT("{{ 'y' if 1 else 'n' }}{{ 'y' if 0 else 'n' }}[{{ 'y' if 0 }}]{{ 'a' if 0 else 'b' if 1 else 'c' }}", "{}", "yn[]b");
    /* filters bind tighter than + : '\n' + (x|trim) + '\n' */
    EXPECT("[{{ '\\n' + x | trim + '\\n' }}]", "{\"x\": \"  hi  \"}", "[\nhi\n]");
    EXPECT("{{ -x|abs }}|{{ [1, 2, 3][1:] }}|{{ 'abc'[::-1] }}|{{ 'héllo'[1] }}|{{ 'héllo'|length }}", "{\"x\": 3}", "3|[2, 3]|cba|é|5");
    EXPECT("{{ {'a': 1, 'b': [1, 'x', none, true, 2.5]} }}|{{ ('a',) }}|{{ \"it's\" }}|{{ [\"it's\"] }}", "{}",
           "{'a': 1, 'b': [1, 'x', None, True, 2.5]}|('a',)|it's|[\"it's\"]");
    EXPECT("{{ ['a\\nb', 'c\\'d\"'] }}", "{}", "['a\\nb', 'c\\'d\"']");
}

static void test_attribute_semantics(void) {
    const char *ctx = "{\"m\": {\"role\": \"user\", \"items\": \"shadow\", \"n\": null}, \"l\": [10, 20, 30]}";
    EXPECT("{{ m.role }}|{{ m['role'] }}|{{ m.missing }}|{{ m.missing is defined }}|{{ m['items'] }}", ctx, "user|user||False|shadow");
    EXPECT("{{ m.n.x }}|{{ l[1] }}|{{ l[-1] }}|{{ l[5] }}|{{ l.0 }}|{{ m.items()|list }}", ctx,
           "|20|30||10|[('role', 'user'), ('items', 'shadow'), ('n', None)]");
    EXPECT_ERR("{{ nothing.attr }}", ctx, "'nothing' is undefined");
    EXPECT_ERR("{{ nothing['k'] }}", ctx, "'nothing' is undefined");
    EXPECT_ERR("{{ m.missing.deeper }}", ctx, "undefined");
    EXPECT_ERR("{{ m.n.split('x') }}", ctx, "undefined");
    EXPECT_ERR("{{ 'a' + nothing }}", ctx, "'nothing' is undefined");
    EXPECT_ERR("{{ 'a' + 1 }}", ctx, "unsupported operand type(s) for +: 'str' and 'int'");
    EXPECT_ERR("{% for x in 5 %}{% endfor %}", ctx, "'int' object is not iterable");
    EXPECT_ERR("{{ 1 / 0 }}", ctx, "division by zero");
    EXPECT_ERR("{{ l < 'a' }}", ctx, "'<' not supported");
}

static void test_filters_and_methods(void) {
    const char *ctx = "{\"s\": \"  Hello World  \", \"w\": [\"b\", \"A\", \"c\"], \"d\": {\"x\": 1, \"y\": [1.0, \"é\"]}}";
    EXPECT("[{{ s|trim }}][{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ s|upper }}][{{ s|lower }}]", ctx,
           "[Hello World][Hello World][Hello World  ][  Hello World][  HELLO WORLD  ][  hello world  ]");
    EXPECT("{{ s.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}", ctx,
           "['Hello', 'World']['a', 'b', '', 'c']['a', 'b,c']['a,b', 'c']");
    EXPECT("{{ s.startswith('  H') }}{{ s.endswith('x') }}{{ 'abc'.replace('b', 'BB') }}{{ 'aaa'|replace('a', 'b', 2) }}", ctx, "TrueFalseaBBcbba");
    EXPECT("{{ d|tojson }}|{{ w|tojson }}|{{ 'é\"\\n'|tojson }}|{{ d|tojson(indent=2) }}", ctx,
           "{\"x\": 1, \"y\": [1.0, \"é\"]}|[\"b\", \"A\", \"c\"]|\"é\\\"\\n\"|{\n  \"x\": 1,\n  \"y\": [\n    1.0,\n    \"é\"\n  ]\n}");
    EXPECT("{{ w|join(',') }}|{{ w|first }}|{{ w|last }}|{{ w|length }}|{{ w|sort|list }}|{{ w|reverse|list }}", ctx,
           "b,A,c|b|c|3|['A', 'b', 'c']|['c', 'A', 'b']");
    EXPECT("{{ nothing|default('dv') }}|{{ ''|default('dv', true) }}|{{ 3|string ~ 'x' }}|{{ '5'|int + 1 }}|{{ 'x'|int }}", ctx, "dv|dv|3x|6|0");
    EXPECT("{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}", ctx, "x=1;y=[1.0, 'é'];");
    EXPECT("{{ [{'r': 'a'}, {'r': 'b'}, {}]|selectattr('r', 'equalto', 'b')|list }}|{{ [{'r': 'a'}, {}]|rejectattr('r')|list }}", ctx,
           "[{'r': 'b'}]|[{}]");
    EXPECT("{{ [{'r': 'a'}, {'r': 'b'}]|map(attribute='r')|join('+') }}|{{ [1, 2, 3, 4]|select('even')|list }}", ctx, "a+b|[2, 4]");
    EXPECT("{{ 'x'|safe + '<b>' }}|{{ 'x' ~ ('<b>'|safe) }}", ctx, "x&lt;b&gt;|x<b>");
    EXPECT_ERR("{{ 'abc'|items }}", ctx, "Can only get item pairs from a mapping");
    EXPECT_ERR("{{ [1]|map(attribute='a') }}", ctx, "cannot print a generator");
}

static void test_tests(void) {
    const char *ctx = "{\"n\": null, \"s\": \"x\", \"l\": [], \"d\": {}, \"i\": 4, \"f\": 1.5, \"b\": false}";
    EXPECT("{{ n is none }}{{ s is string }}{{ l is sequence }}{{ d is mapping }}{{ d is sequence }}{{ i is integer }}{{ f is float }}", ctx,
           "TrueTrueTrueTrueTrueTrueTrue");
    EXPECT("{{ b is false }}{{ b is true }}{{ i is even }}{{ i is odd }}{{ i is divisibleby 2 }}{{ u is defined }}{{ u is undefined }}", ctx,
           "TrueFalseTrueFalseTrueFalseTrue");
    EXPECT("{{ n is iterable }}{{ s is iterable }}{{ u is sequence }}{{ i is number }}{{ b is number }}{{ s is not string }}", ctx,
           "FalseTrueTrueTrueTrueFalse");
    EXPECT("{{ not u is defined }}{{ 3 is gt 2 }}{{ 3 is in [1, 3] }}{{ 'ab' is lower }}", ctx, "TrueTrueTrueTrue");
}

static void test_loops_and_scoping(void) {
    EXPECT("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
           "{}", "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
    EXPECT("{% for x in [1, 2, 3] %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}", "{}", "[|2][1|3][2|]");
    EXPECT("{% for x in range(6) if x is odd %}{{ x }}{{ loop.last }},{% else %}none{% endfor %}", "{}", "1False,3False,5True,");
    EXPECT("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", "{}", "empty");
    EXPECT("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", "{}", "0134");
    EXPECT("{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", "{}", "37");
    /* sets inside a loop stay inside the iteration; namespaces carry state out */
    EXPECT("{% set x = 5 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}{% endfor %}{{ x }}", "{}", "[5][5]5");
    EXPECT("{% set ns = namespace(c=0) %}{% for i in range(4) %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}", "{}", "6");
    EXPECT("{% if true %}{% set y = 1 %}{% endif %}{{ y }}", "{}", "1");
    EXPECT("{% for m in msgs[::-1] %}{{ m }}{% endfor %}", "{\"msgs\": [1, 2, 3]}", "321");
    /* macros: defaults, keywords, call-time view of top-level variables, own scope */
    EXPECT("{% macro m(a, b=2, c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(1, c='z') }}", "{}", "12None|13None|12z");
    EXPECT("{% set y = 1 %}{% macro m() %}{{ y }}{% endmacro %}{% set y = 3 %}{{ m() }}", "{}", "3");
    EXPECT("{% macro m() %}{{ z }}{% endmacro %}{% for i in [1] %}{% set z = 7 %}[{{ m() }}]{% endfor %}", "{}", "[]");
    EXPECT("{% macro m(x) %}  {{ x }}  {% endmacro %}[{{ m('v')|trim }}]", "{}", "[v]");
    EXPECT("{% set b %} a{{ 1 }} {% endset %}[{{ b }}]{% set c | upper %}q{% endset %}{{ c }}", "{}", "[ a1 ]Q");
    EXPECT("{% macro m(a) %}[{{ a }}:{{ caller() }}]{% endmacro %}{% set v = 5 %}{% call m(1) %}v={{ v }}{% endcall %}", "{}", "[1:v=5]");
    EXPECT("{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(*[7, 8]) }}|{{ m(**{'a': 3}) }}|{{ [m][0](*[4]) }}", "{}", "78|32|42");
    EXPECT_ERR("{% macro m() %}x{% endmacro %}{% call m() %}{% endcall %}", "{}", "no keyword argument 'caller'");
    EXPECT_ERR("{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}", "{}", "'caller' is undefined");
    EXPECT_ERR("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "{}", "takes not more than 1 argument");
    EXPECT_ERR("{% macro m(a) %}{% endmacro %}{{ m(q=2) }}", "{}", "no keyword argument 'q'");
    EXPECT_ERR("{% set x = 1 %}{% set x.a = 2 %}", "{}", "non-namespace");
}

static void test_whitespace_control(void) {
    /* trim_blocks removes the newline after a block tag; lstrip_blocks strips indentation before one */
    EXPECT("a\n  {% if true %}\n  b\n  {% endif %}\nc", "{}", "a\n  b\nc");
    EXPECT("a  {%- if true -%}  b  {%- endif -%}  c", "{}", "abc");
    EXPECT("a\n{{- ' x ' -}}\nb", "{}", "a x b");
    EXPECT("  {%+ if true %}x{% endif %}", "{}", "  x");
    EXPECT("{% if true +%}\nx{% endif %}", "{}", "\nx");
    EXPECT("a {# comment #} b\n  {# own line #}\nc", "{}", "a  b\nc");
    EXPECT("{{ 'x' }}\n{{ 'y' }}\n", "{}", "x\ny");      /* one trailing newline dropped */
    EXPECT("line1\r\nline2\r\n\r\n", "{}", "line1\nline2\n");
    EXPECT("{% raw %}{{ x }}{% endraw %}", "{}", "{{ x }}");
    EXPECT("{{ {'a': {'b': 1}} }}", "{}", "{'a': {'b': 1}}"); /* '}}' inside braces is not the tag end */
}

static void test_errors_and_unsupported(void) {
    char e[1200];
    struct { const char *src, *frag; } cases[] = {
        {"ok\n{% include 'x.j2' %}", "line 2: unsupported construct '{% include %}'"},
        {"{% extends 'base' %}", "unsupported construct"},
        {"{% macro m() %}{{ caller() }}{% endmacro %}{% call(x) m() %}{% endcall %}", "unsupported call block with caller arguments"},
        {"{% call m() %}{% endcall %}", "unsupported function 'm()'"},
        {"{% filter upper %}x{% endfilter %}", "unsupported construct"},
        {"{{ x|wordwrap }}", "unsupported filter 'wordwrap'"},
        {"{{ x is prime }}", "unsupported test 'prime'"},
        {"a\nb\n{{ x.format(1) }}", "line 3: unsupported method 'format()'"},
        {"{{ lipsum() }}", "unsupported function 'lipsum()'"},
        {"{% for x in y recursive %}{% endfor %}", "unsupported recursive"},
        {"{% macro m() %}{{ varargs }}{% endmacro %}", "unsupported macro feature 'varargs'"},
        {"{{ f(*args) }}", "unsupported"},
        {"{% if x %}", "missing"},
        {"{% for x in y %}{% endif %}", "misplaced"},
        {"{{ 1 + }}", "line 1"},
        {"{{ 'abc }}", "unterminated string"},
        {"{# never closed", "missing end of comment"},
        {"{{ x ]] }}", "unexpected"},
        {"{% break %}", "outside of a for loop"},
        {"{{ 99999999999999999999 }}", "integer literal too large"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct tmpl *t = NULL;
        vllmc_status st = tmpl_parse(cases[i].src, strlen(cases[i].src), &t);
        CHECK_MSG(st != VLLMC_OK && t == NULL && strstr(vllmc_last_error(), cases[i].frag), "%s -> %s (want '%s')", cases[i].src,
                  st == VLLMC_OK ? "parsed" : vllmc_last_error(), cases[i].frag);
        tmpl_free(t);
    }
    /* raise_exception keeps its message verbatim */
    char *o = render("{{ raise_exception('No user query found in messages.') }}", "{}", e, sizeof e);
    CHECK(!o && !strcmp(e, "RENDER chat template: No user query found in messages."));
    free(o);
    /* errors carry the line of the failing expression */
    EXPECT_ERR("a\nb\n{{ 1 + 'x' }}", "{}", "line 3:");
    EXPECT_ERR("{{ x }}", "[1, 2]", "must be a JSON object");
    EXPECT_ERR("{{ x }}", "{\"x\": ", "not valid JSON");
    EXPECT_ERR("{{ s }}", "{\"s\": \"a\\u0000b\"}", "NUL character"); /* cJSON would cut the string short */
    EXPECT("{{ s }}", "{\"s\": \"a\\\\u0000b\"}", "a\\u0000b");
}

static void test_limits(void) {
    char e[1200];
    struct tmpl_limits lim = {.max_steps = 100000};
    char *o = render_lim("{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}", "{}", &lim, e, sizeof e);
    CHECK_MSG(!o && strstr(e, "step limit"), "%s", e);
    free(o);
    struct tmpl_limits lim2 = {.max_output_bytes = 1000};
    o = render_lim("{% for i in range(10000) %}xxxxxxxxxx{% endfor %}", "{}", &lim2, e, sizeof e);
    CHECK_MSG(!o && strstr(e, "output limit"), "%s", e);
    free(o);
    o = render("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", "{}", e, sizeof e);
    CHECK_MSG(!o && strstr(e, "nested too deeply"), "%s", e);
    free(o);
    struct tmpl_limits lim3 = {.max_memory_bytes = 1 << 20};
    o = render_lim("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}", "{}",
                   &lim3, e, sizeof e);
    CHECK_MSG(!o && (strstr(e, "memory limit") || strstr(e, "output limit")), "%s", e);
    free(o);
    EXPECT_ERR("{{ range(1000000) }}", "{}", "Range too big");
    EXPECT_ERR("{{ 'ab' * 100000000000 }}", "{}", "exceeds");
    /* parser nesting is bounded too */
    static char deep[4000];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int i = 0; i < 500; i++) deep[k++] = '-';
    k += (size_t)snprintf(deep + k, sizeof deep - k, "1 }}");
    struct tmpl *t = NULL;
    CHECK(tmpl_parse(deep, k, &t) != VLLMC_OK && strstr(vllmc_last_error(), "nested too deeply"));
    tmpl_free(t);
}

/* ---- randomized checks against C references ---- */
static int64_t py_floordiv(int64_t a, int64_t b) { int64_t q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) q--; return q; }
static int64_t py_mod(int64_t a, int64_t b) { int64_t m = a % b; if (m != 0 && ((m < 0) != (b < 0))) m += b; return m; }

static void test_random_arithmetic(void) {
    for (int it = 0; it < 200; it++) {
        int64_t a = (int64_t)(test_rand_u64() % 2000001) - 1000000, b = (int64_t)(test_rand_u64() % 2001) - 1000;
        if (b == 0) b = 7;
        char ctx[128], want[256], e[1200];
        snprintf(ctx, sizeof ctx, "{\"a\": %lld, \"b\": %lld}", (long long)a, (long long)b);
        snprintf(want, sizeof want, "%lld|%lld|%lld|%lld|%lld|%s", (long long)(a + b), (long long)(a - b), (long long)(a * b),
                 (long long)py_floordiv(a, b), (long long)py_mod(a, b), a < b ? "True" : "False");
        char *o = render("{{ a + b }}|{{ a - b }}|{{ a * b }}|{{ a // b }}|{{ a % b }}|{{ a < b }}", ctx, e, sizeof e);
        CHECK_MSG(o && !strcmp(o, want), "a=%lld b=%lld want %s got %s %s", (long long)a, (long long)b, want, o ? o : "", e);
        free(o);
    }
}

static void test_random_float_repr(void) {
    /* Python repr is the shortest string that reads back exactly; check round-trip and shortness */
    for (int it = 0; it < 2000; it++) {
        uint64_t bits = test_rand_u64();
        double f;
        if (it % 2) f = (test_rand_uniform() - 0.5) * pow(10.0, (int)(test_rand_u64() % 40) - 20);
        else { memcpy(&f, &bits, sizeof f); if (!isfinite(f)) continue; }
        char buf[64];
        py_float_repr(f, buf, sizeof buf);
        CHECK_MSG(strtod(buf, NULL) == f, "%.17g -> %s does not round-trip", f, buf);
        CHECK_MSG(strchr(buf, '.') || strchr(buf, 'e') || strstr(buf, "inf") || strstr(buf, "nan"), "%s lacks '.' or exponent", buf);
    }
    const struct { double f; const char *s; } known[] = {
        {1.0, "1.0"}, {0.5, "0.5"}, {1e16, "1e+16"}, {1.5e16, "1.5e+16"}, {123456789012345678.0, "1.2345678901234568e+17"},
        {1e-4, "0.0001"}, {1.2e-5, "1.2e-05"}, {5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"},
        {-2.5, "-2.5"}, {100.0, "100.0"}, {0.1, "0.1"}, {1/3.0, "0.3333333333333333"},
    };
    for (size_t i = 0; i < ARRAY_LEN(known); i++) {
        char buf[64];
        py_float_repr(known[i].f, buf, sizeof buf);
        CHECK_MSG(!strcmp(buf, known[i].s), "repr(%.17g) = %s, want %s", known[i].f, buf, known[i].s);
    }
}

static void test_random_strings(void) {
    /* random ASCII words with random padding: trim/strip/split/upper/length against C */
    for (int it = 0; it < 200; it++) {
        char s[64], core[64];
        int pad_l = (int)(test_rand_u64() % 4), pad_r = (int)(test_rand_u64() % 4), n = 1 + (int)(test_rand_u64() % 20), k = 0;
        for (int i = 0; i < n; i++) core[i] = (char)('a' + test_rand_u64() % 26);
        core[n] = 0;
        for (int i = 0; i < pad_l; i++) s[k++] = " \t\n"[test_rand_u64() % 3];
        memcpy(s + k, core, (size_t)n);
        k += n;
        for (int i = 0; i < pad_r; i++) s[k++] = " \t\n"[test_rand_u64() % 3];
        s[k] = 0;
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "s", s);
        char *ctx = cJSON_PrintUnformatted(c);
        char want[400], upper[64], e[1200];
        for (int i = 0; i <= n; i++) upper[i] = (char)(core[i] >= 'a' ? core[i] - 32 : core[i]);
        snprintf(want, sizeof want, "%s|%s|%d|%s|['%s']", core, core, k, upper, core);
        char *o = render("{{ s|trim }}|{{ s.strip() }}|{{ s|length }}|{{ s.strip().upper() }}|{{ s.split() }}", ctx, e, sizeof e);
        CHECK_MSG(o && !strcmp(o, want), "s=%s want %s got %s %s", s, want, o ? o : "", e);
        free(o);
        free(ctx);
        cJSON_Delete(c);
    }
}

static void test_random_tojson_roundtrip(void) {
    /* random nested JSON: tojson output parses back (cJSON) to an equal value, and ints stay ints */
    for (int it = 0; it < 100; it++) {
        cJSON *root = cJSON_CreateObject(), *v = cJSON_CreateArray();
        for (int i = 0; i < 6; i++) {
            switch (test_rand_u64() % 5) {
            case 0: cJSON_AddItemToArray(v, cJSON_CreateNumber((double)(int)(test_rand_u64() % 100000) - 50000)); break;
            case 1: cJSON_AddItemToArray(v, cJSON_CreateNumber(test_rand_normal() * 1000)); break;
            case 2: { char w[9]; for (int q = 0; q < 8; q++) w[q] = (char)(32 + test_rand_u64() % 95); w[8] = 0; cJSON_AddItemToArray(v, cJSON_CreateString(w)); break; }
            case 3: cJSON_AddItemToArray(v, cJSON_CreateBool(test_rand_u64() & 1)); break;
            default: { cJSON *o = cJSON_CreateObject(); cJSON_AddStringToObject(o, "k", "é\n\"x\""); cJSON_AddNullToObject(o, "z"); cJSON_AddItemToArray(v, o); }
            }
        }
        cJSON_AddItemToObject(root, "v", v);
        struct tmpl *t = NULL;
        char *out = NULL;
        size_t n;
        CHECK(tmpl_parse("{{ v|tojson }}", 14, &t) == VLLMC_OK);
        CHECK(tmpl_render(t, root, NULL, &out, &n) == VLLMC_OK);
        cJSON *back = out ? cJSON_Parse(out) : NULL;
        CHECK_MSG(back && cJSON_Compare(back, v, true), "tojson round-trip failed: %s", out ? out : "(null)");
        cJSON_Delete(back);
        free(out);
        tmpl_free(t);
        cJSON_Delete(root);
    }
}

static void test_number_kinds(void) {
    /* JSON text keeps Python's int/float distinction */
    EXPECT("{{ a }}|{{ b }}|{{ c }}|{{ d }}|{{ [a, b]|tojson }}", "{\"a\": 1, \"b\": 1.0, \"c\": 1e3, \"d\": -12345678901234}", "1|1.0|1000.0|-12345678901234|[1, 1.0]");
    EXPECT("{{ s }}{{ n }}", "{\"s\": \"1.5 \\\" 2\", \"n\": 3}", "1.5 \" 23");
}

static void test_chat_defaults(void) {
    cJSON *c = cJSON_Parse("{\"messages\": [], \"add_generation_prompt\": true}");
    CHECK(tmpl_apply_chat_defaults(c, "<s>", NULL) == VLLMC_OK);
    struct tmpl *t = NULL;
    char *out = NULL;
    const char *src = "{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}{{ bos_token }}{{ eos_token is defined }}";
    CHECK(tmpl_parse(src, strlen(src), &t) == VLLMC_OK);
    CHECK(tmpl_render(t, c, NULL, &out, NULL) == VLLMC_OK && out && !strcmp(out, "TrueTrueTrue<s>False"));
    free(out);
    tmpl_free(t);
    cJSON_Delete(c);
}

static void test_real_templates(void) {
    /* every shared template parses, and renders a small conversation */
    const char *names[] = {"Qwen3.5-4B", "Qwen-Qwen3-0.6B", "Qwen-Qwen2.5-7B-Instruct", "Qwen-QwQ-32B", "Qwen3-Coder"};
    const char *conv = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": true, \"tools\": null}";
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        char path[256];
        const char *shared = getenv("VLLMC_SHARED") ? getenv("VLLMC_SHARED") : "../shared";
        snprintf(path, sizeof path, "%s/testdata/chat-templates/%s.jinja", shared, names[i]);
        FILE *f = fopen(path, "rb");
        CHECK_MSG(f != NULL, "%s not found (set VLLMC_SHARED to the shared/ folder)", path);
        if (!f) continue;
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        struct tmpl *t = NULL;
        char *out = NULL;
        CHECK_MSG(tmpl_parse(buf, n, &t) == VLLMC_OK, "%s: %s", names[i], vllmc_last_error());
        CHECK_MSG(t && tmpl_render_json(t, conv, strlen(conv), NULL, NULL, &out, NULL) == VLLMC_OK, "%s: %s", names[i], vllmc_last_error());
        CHECK_MSG(out && strstr(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), "%s: %s", names[i], out ? out : "");
        free(out);
        tmpl_free(t);
    }
}

int main(void) {
    test_seed_auto("test_template");
    test_literals_and_expressions();
    test_attribute_semantics();
    test_filters_and_methods();
    test_tests();
    test_loops_and_scoping();
    test_whitespace_control();
    test_errors_and_unsupported();
    test_limits();
    test_random_arithmetic();
    test_random_float_repr();
    test_random_strings();
    test_random_tojson_roundtrip();
    test_number_kinds();
    test_chat_defaults();
    test_real_templates();
    return test_finish("test_template");
}
