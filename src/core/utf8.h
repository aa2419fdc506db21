/* UTF-8 helpers shared by the tokenizer and the Jinja interpreter. */
#ifndef WNA16_CORE_UTF8_H
#define WNA16_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of a valid sequence at s (n >= 1 bytes left), 0 if invalid. */
size_t wna16_utf8_valid_len(const uint8_t *s, size_t n);
/* Offset of the first invalid byte, or n when all of s is valid UTF-8. */
size_t wna16_utf8_check(const uint8_t *s, size_t n);
/* Decodes one code point of valid UTF-8; returns its length. */
size_t wna16_utf8_decode(const uint8_t *s, uint32_t *cp);
/* Encodes cp (at most U+10FFFF) into out (4 bytes room); returns its length. */
size_t wna16_utf8_encode(uint32_t cp, char *out);

#endif
