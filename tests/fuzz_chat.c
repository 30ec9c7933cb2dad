// fuzz_chat.c: libFuzzer target for chat-template detection, which reads
// tokenizer.chat_template from untrusted GGUF files: detects arbitrary bytes
// as a template and, when that succeeds, renders a short conversation with
// the result. Detection and rendering must either succeed or fail with a
// message, never read out of bounds.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct chat_format fmt;
    if (chat_detect_on((const char *)data, size, (struct chat_date){2025, 3, 4}, &fmt) != 0) {
        ST_ASSERT(st_last_error()[0] != '\0');
        return 0;
    }
    ST_ASSERT(memchr(fmt.default_system, '\0', sizeof(fmt.default_system)) != NULL);
    ST_ASSERT(memchr(fmt.date_string, '\0', sizeof(fmt.date_string)) != NULL);
    strcpy(fmt.bos, "<s>");
    static const struct chat_message msgs[] = {
        {"system", "sys"}, {"user", "hi"}, {"assistant", "<think>a</think>b"}, {"user", "?"}};
    for (int n = 0; n <= 4; n++) {
        char *s = chat_render(&fmt, msgs, n, n % 2 == 0);
        ST_ASSERT(s || st_last_error()[0] != '\0');
        free(s);
    }
    return 0;
}
