/*
 * driver.h -- the one main() of every fuzz harness.
 *
 * A harness defines fuzz_setup (once per process: a scratch folder, fixtures) and
 * fuzz_one (one input; must leave no state behind, so that the same process can take the
 * next input). Built with afl-cc, main is AFL++'s persistent loop over shared-memory
 * inputs; built with the normal compiler, main replays every file (or every file of every
 * folder) named on the command line, which is how `make check` runs the seed corpus and
 * the regression inputs of fuzz/regressions/. Harnesses never call MPI_Init: what they
 * exercise is local (serial HDF5 on rank 0, JSON files).
 */
#ifndef MT_FUZZ_DRIVER_H
#define MT_FUZZ_DRIVER_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/runtime.h"

static void fuzz_setup(const char *scratch);
static void fuzz_one(const uint8_t *data, size_t len);

static char fuzz_scratch[4096];

/* Write len bytes to path (the harness's file under test). */
static void fuzz_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len) {
        perror(path);
        exit(2);
    }
    fclose(f);
}

static void fuzz_rmtree_scratch(void)
{
    if (fuzz_scratch[0])
        mt__rmtree(fuzz_scratch);
}

static void fuzz_start(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(fuzz_scratch, sizeof fuzz_scratch, "%s/mt-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fuzz_scratch)) {
        perror(fuzz_scratch);
        exit(2);
    }
    atexit(fuzz_rmtree_scratch);
    fuzz_setup(fuzz_scratch);
}

#ifdef __AFL_FUZZ_TESTCASE_LEN
__AFL_FUZZ_INIT();

int main(void)
{
    fuzz_start();
    __AFL_INIT();
    const unsigned char *buf = __AFL_FUZZ_TESTCASE_BUF;
    while (__AFL_LOOP(2000))
        fuzz_one(buf, (size_t)__AFL_FUZZ_TESTCASE_LEN);
    return 0;
}
#else
static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t cap = 1 << 16, n = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += got) == cap) {
            uint8_t *grown = realloc(buf, cap *= 2);
            if (!grown)
                free(buf);
            buf = grown;
        }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", path);
        return 1;
    }
    fuzz_one(buf, n);
    free(buf);
    return 0;
}

static int replay(const char *path, int *count)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        perror(path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        ++*count;
        return replay_file(path);
    }
    DIR *d = opendir(path);
    if (!d) {
        perror(path);
        return 1;
    }
    int bad = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        bad |= replay(sub, count);
    }
    closedir(d);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE-OR-FOLDER...  (replays each input once)\n", argv[0]);
        return 2;
    }
    fuzz_start();
    int bad = 0, count = 0;
    for (int i = 1; i < argc; i++)
        bad |= replay(argv[i], &count);
    printf("%s: %d inputs replayed\n", argv[0], count);
    return bad;
}
#endif

#endif
