/*
 * json.c -- jansson as the runtime uses it: telling an allocation that failed from bad
 * JSON while parsing, and dumping a document checked by reading it back (out of memory,
 * jansson can leave a key out and still return text).
 */
#include "runtime.h"

#include <stdlib.h>

/* jansson reports an allocation that failed while parsing as a syntax error, or not at
 * all: its allocations go through json_alloc (chained to the allocator in place), which
 * notes a failure for this thread. */
static json_malloc_t json_next_malloc;
static _Thread_local bool json_failed;
static pthread_once_t json_once = PTHREAD_ONCE_INIT;

static void *json_alloc(size_t n)
{
    void *p = json_next_malloc(n);
    if (!p)
        json_failed = true;
    return p;
}

static void json_hook(void)
{
    json_free_t next_free;
    json_get_alloc_funcs(&json_next_malloc, &next_free);
    json_set_alloc_funcs(json_alloc, next_free);
}

void mt__json_watch(void)
{
    pthread_once(&json_once, json_hook);
    json_failed = false;
}

bool mt__json_oom(const json_error_t *e)
{
    return json_failed || (e && json_error_code(e) == json_error_out_of_memory);
}

char *mt__json_dumps(const json_t *j, size_t flags)
{
    char *text = j ? json_dumps(j, flags) : NULL;
    json_t *back = text ? json_loads(text, 0, NULL) : NULL;
    if (text && !json_equal((json_t *)j, back)) {
        free(text);
        text = NULL;
    }
    json_decref(back);
    return text;
}

json_t *mt__json_parse_line(const char *line, bool *oom)
{
    json_error_t err;
    mt__json_watch();
    json_t *row = json_loads(line, 0, &err);
    if (mt__json_oom(row ? NULL : &err)) { /* even a parse that succeeded may lack a key */
        *oom = true;
        json_decref(row);
        row = NULL;
    }
    return row;
}
