/* libFuzzer target for the chat-template parser and renderer. Input: template text, optionally
 * followed by a NUL byte and a JSON context; without one (or with invalid JSON) a fixed chat-like
 * context is used. Small limits keep every render bounded in time, memory and output. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "template/template.h"

static const char default_ctx[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi <think>x</think>\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"r\", \"tool_calls\": [{\"type\": \"function\","
    " \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [1.5, \"x\", null, true]}}}]},"
    " {\"role\": \"tool\", \"content\": \"out\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"t\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}],"
    " \"add_generation_prompt\": true, \"enable_thinking\": false, \"n\": 3, \"f\": 2.5}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = (const char *)data;
    const char *nul = memchr(p, 0, size);
    size_t tmpl_size = nul ? (size_t)(nul - p) : size;
    struct tmpl *t = NULL;
    if (tmpl_parse(p, tmpl_size, &t) != VLLMC_OK) return 0;
    struct tmpl_limits lim = {.max_output_bytes = 1 << 20, .max_memory_bytes = 64 << 20, .max_steps = 200000, .max_depth = 400};
    char *out = NULL;
    size_t out_len = 0;
    if (nul && tmpl_render_json(t, nul + 1, size - tmpl_size - 1, NULL, &lim, &out, &out_len) == VLLMC_OK) {
        free(out);
        out = NULL;
    } else if (tmpl_render_json(t, default_ctx, sizeof default_ctx - 1, NULL, &lim, &out, &out_len) == VLLMC_OK) {
        if (strlen(out) > out_len) abort(); /* the length must cover the text */
    }
    free(out);
    tmpl_free(t);
    return 0;
}
