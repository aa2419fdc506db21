/* Typed reads of an optional member of a JSON object (jansson), the one set
 * the parsers of config.json and tokenizer.json share. A member that is
 * absent or null is WNA16_JSON_ABSENT and leaves *out alone; one of another
 * type is WNA16_JSON_WRONG_TYPE, which each caller turns into its own error
 * (its status, and where the field is). */
#ifndef WNA16_CORE_JSON_GET_H
#define WNA16_CORE_JSON_GET_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum wna16_json_got {
    WNA16_JSON_ABSENT,
    WNA16_JSON_FOUND,
    WNA16_JSON_WRONG_TYPE,
} wna16_json_got;

static inline wna16_json_got wna16_json_int(const json_t *o, const char *key, int64_t *out) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return WNA16_JSON_ABSENT;
    if (!json_is_integer(v)) return WNA16_JSON_WRONG_TYPE;
    *out = json_integer_value(v);
    return WNA16_JSON_FOUND;
}

static inline wna16_json_got wna16_json_bool(const json_t *o, const char *key, bool *out) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return WNA16_JSON_ABSENT;
    if (!json_is_boolean(v)) return WNA16_JSON_WRONG_TYPE;
    *out = json_is_true(v);
    return WNA16_JSON_FOUND;
}

/* An integer or a real. */
static inline wna16_json_got wna16_json_number(const json_t *o, const char *key, double *out) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return WNA16_JSON_ABSENT;
    if (!json_is_number(v)) return WNA16_JSON_WRONG_TYPE;
    *out = json_number_value(v);
    return WNA16_JSON_FOUND;
}

#endif
