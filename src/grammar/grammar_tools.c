/* Tool-call grammars (grammar.h): a model family's call syntax around
 * JSON whose "arguments" follow each tool's parameters schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "grammar/grammar_internal.h"

/* call-i ::= "{" ws "\"name\"" ws ":" ws "\"NAME\"" ws "," ws "\"KEY\"" ws ":" ws args-i ws "}" */
static wna16_status add_call(wna16_diag *d, grammar_builder *b, size_t i, const grammar_tool *t,
                             const char *args_key, bool strict) {
    if (!t->name || !*t->name)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "tool %zu has no name", i);
    char args[64], call[64];
    snprintf(args, sizeof args, "tool%zu-args", i);
    snprintf(call, sizeof call, "tool%zu", i);
    wna16_status st = t->parameters
                          ? grammar_builder_add_json_schema(d, b, args, t->parameters,
                                                            strlen(t->parameters), strict,
                                                            GRAMMAR_WS_FLEXIBLE)
                          : grammar_builder_add_json_object(d, b, args, GRAMMAR_WS_FLEXIBLE);
    if (st) {
        wna16_diag_prefix(d, "tool '%s' parameters: ", t->name);
        return st;
    }
    wna16_buf body = {0};
    json_t *name = json_string(t->name);
    char *quoted = name ? json_dumps(name, JSON_ENCODE_ANY) : NULL;
    json_decref(name);
    if (!quoted) {
        wna16_buf_free(&body);
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "tool %zu: the name is not UTF-8", i);
    }
    wna16_buf_printf(&body, "\"{\" tools-ws \"\\\"name\\\"\" tools-ws \":\" tools-ws ");
    grammar_gbnf_literal(&body, quoted, strlen(quoted));
    free(quoted);
    wna16_buf_printf(&body, " tools-ws \",\" tools-ws \"\\\"%s\\\"\" tools-ws \":\" tools-ws %s tools-ws \"}\"",
                     args_key, args);
    st = body.failed ? wna16_fail(d, WNA16_ERR_OUT_OF_MEMORY, "out of memory")
                     : grammar_builder_add_rule(d, b, call, body.data);
    wna16_buf_free(&body);
    return st;
}

wna16_status grammar_compile_tool_calls(wna16_diag *d, grammar_tool_format format,
                                        const grammar_tool *tools, size_t n_tools, bool parallel,
                                        bool strict, const grammar_limits *limits, grammar **out) {
    *out = NULL;
    if (!n_tools) return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "no tools to call");
    if (format != GRAMMAR_TOOLS_HERMES && format != GRAMMAR_TOOLS_LLAMA3_JSON &&
        format != GRAMMAR_TOOLS_MISTRAL)
        return wna16_fail(d, WNA16_ERR_INVALID_ARGUMENT, "unknown tool-call format %d", (int)format);
    grammar_builder *b;
    WNA16_TRY(grammar_builder_create(d, limits, &b));
    const char *key = format == GRAMMAR_TOOLS_LLAMA3_JSON ? "parameters" : "arguments";
    wna16_status st = grammar_builder_add_rule(d, b, "tools-ws", "(\" \" | \"\\n\" [ \\t]{0,20})?");
    for (size_t i = 0; !st && i < n_tools; i++) st = add_call(d, b, i, &tools[i], key, strict);
    wna16_buf alts = {0};
    for (size_t i = 0; i < n_tools; i++) wna16_buf_printf(&alts, "%stool%zu", i ? " | " : "", i);
    if (!st) st = grammar_builder_add_rule(d, b, "call", alts.data);
    wna16_buf_free(&alts);
    const char *root = NULL;
    switch (format) {
    case GRAMMAR_TOOLS_HERMES:
        root = parallel ? "\"<tool_call>\\n\" call \"\\n</tool_call>\" (\"\\n<tool_call>\\n\" call "
                          "\"\\n</tool_call>\")*"
                        : "\"<tool_call>\\n\" call \"\\n</tool_call>\"";
        break;
    case GRAMMAR_TOOLS_LLAMA3_JSON: root = parallel ? "call (\"; \" call)*" : "call"; break;
    case GRAMMAR_TOOLS_MISTRAL:
        root = parallel ? "\"[TOOL_CALLS]\" \"[\" tools-ws call (tools-ws \",\" tools-ws call)* tools-ws \"]\""
                        : "\"[TOOL_CALLS]\" \"[\" tools-ws call tools-ws \"]\"";
        break;
    }
    if (!st) st = grammar_builder_add_rule(d, b, "root", root);
    if (!st) st = grammar_builder_compile(d, b, "root", out);
    grammar_builder_free(b);
    return st;
}
