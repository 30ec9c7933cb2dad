// server_page.h: the chat page `strata serve` sends for GET /.
#ifndef STRATA_SERVER_PAGE_H
#define STRATA_SERVER_PAGE_H

// A complete HTML document (UTF-8, NUL-terminated).
extern const char server_page_html[];

#endif
