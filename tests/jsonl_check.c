/*
 * jsonl_check FILE SUITE...: every line of FILE is a JSON object, and each SUITE named
 * appears in some line's "suite" field. For the benchmark's --json output.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: jsonl_check FILE [SUITE...]\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "jsonl_check: cannot read %s\n", argv[1]);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    int n = 0, bad = 0, *seen = calloc((size_t)argc, sizeof *seen);
    while (getline(&line, &cap, f) > 0) {
        n++;
        json_error_t err;
        json_t *j = json_loads(line, 0, &err);
        if (!json_is_object(j)) {
            fprintf(stderr, "jsonl_check: %s:%d: not a JSON object: %s\n", argv[1], n, err.text);
            bad++;
        }
        const char *suite = json_string_value(json_object_get(j, "suite"));
        for (int i = 2; suite && i < argc; i++)
            seen[i] |= !strcmp(suite, argv[i]);
        json_decref(j);
    }
    free(line);
    fclose(f);
    for (int i = 2; i < argc; i++)
        if (!seen[i]) {
            fprintf(stderr, "jsonl_check: %s: no line of suite %s\n", argv[1], argv[i]);
            bad++;
        }
    free(seen);
    printf("jsonl_check: %s: %d lines%s\n", argv[1], n, bad ? ", INVALID" : ", valid");
    return bad || !n;
}
