/* A Jinja2 subset interpreter for Hugging Face chat templates.
 *
 * Renders the way transformers' apply_chat_template does: jinja2's
 * ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
 * loopcontrols extension, transformers' tojson (ensure_ascii=False, keys in
 * their order) and its globals raise_exception and strftime_now. What the
 * subset covers is listed in docs/models.md ("Chat templates").
 *
 * Errors are values, never prints or aborts, whatever the template:
 *  - WNA16_ERR_UNSUPPORTED: a construct outside the subset; the detail names
 *    it and its line ("chat template line 12: filter \"xyz\" is not supported");
 *  - WNA16_ERR_INVALID_ARGUMENT: a syntax error, a runtime error Jinja would
 *    raise too (undefined attribute, type mismatch), or the template's own
 *    raise_exception('msg'), whose msg is in the detail;
 *  - WNA16_ERR_LIMIT: output past 16 MiB, nesting past the depth cap, or more
 *    work than the step budget (an endless or huge loop);
 *  - WNA16_ERR_OUT_OF_MEMORY. */
#ifndef WNA16_JINJA_H
#define WNA16_JINJA_H

#include "core/common.h"

#include <jansson.h>

/* Limits (why: a template is data from a model repository, so every
 * resource it can ask for is capped). */
#define JINJA_MAX_OUTPUT (16u << 20)  /* bytes of rendered text */
#define JINJA_MAX_DEPTH  200          /* nesting of blocks, expressions, macro calls */
#define JINJA_MAX_STEPS  20000000     /* evaluated nodes and loop iterations */
#define JINJA_MAX_MEMORY (256u << 20) /* working memory (values, scopes) */
#define JINJA_MAX_RANGE  1000000      /* elements one range() may build */

/* Renders template_src (NUL-terminated UTF-8) with the variables of the JSON
 * object vars (NULL: none). *out is malloc'd and NUL-terminated; free it with
 * wna16_free(). On error *out is NULL.
 *
 * strftime_now() reads the clock, or the seconds since the epoch in the
 * environment variable WNA16_CHAT_NOW (for reproducible tests), and formats
 * in UTC when that variable is set, local time otherwise. */
wna16_status wna16_jinja_render(wna16_diag *d, const char *template_src, const json_t *vars,
                                char **out);

#endif
