// server_page.h: the chat page `strata serve` sends for GET /, its icon, and
// the Markdown renderer it loads.
#ifndef STRATA_SERVER_PAGE_H
#define STRATA_SERVER_PAGE_H

#include <stddef.h>

// A complete HTML document (UTF-8, NUL-terminated).
extern const char server_page_html[];
// The page's icon, an SVG document (GET /favicon.ico).
extern const char server_page_favicon[];
// Where Debian's libjs-marked puts the Markdown renderer the page loads.
#define SERVER_PAGE_MARKED_PATH "/usr/share/javascript/marked/marked.min.js"
// The renderer's script (malloc'd, *len bytes), or NULL when it is not installed.
char *server_page_marked(size_t *len);

#endif
