/*
 * trace_probe DIR THREADS SPANS: the tracer (common/trace.c) under threads, for
 * tests/timeline.sh. Traces into DIR/trace/rank_0.json while THREADS named threads each
 * open SPANS outer spans holding one inner span (more than a thread's buffer, so buffers
 * go to the file while recording), and end (their buffers go to the file as they exit);
 * the main thread records around them. The script then checks the file's format and
 * counts: THREADS * SPANS "inner" spans, on THREADS + 1 named threads.
 */
#include "../common/common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int spans;

static void inner(void)
{
    MT__TRACE("collective", "inner");
}

static void *work(void *arg)
{
    (void)arg;
    mt__trace_thread("worker");
    for (int i = 0; i < spans; i++) {
        MT__TRACE_ARG("fusion", "outer", i);
        inner();
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: trace_probe DIR THREADS SPANS\n");
        return 2;
    }
    int n = atoi(argv[2]);
    spans = atoi(argv[3]);
    pthread_t t[64];
    if (n < 1 || n > 64 || spans < 1)
        return 2;
    mt__trace_start(true, argv[1], 0);
    if (!mt__trace_path())
        return 1;
    {
        MT__TRACE("data", "main");
        for (int i = 0; i < n; i++)
            if (pthread_create(&t[i], NULL, work, NULL) != 0)
                return 1;
        for (int i = 0; i < n; i++)
            pthread_join(t[i], NULL);
    }
    mt__trace_stop();
    if (mt__trace_path())
        return 1; /* nothing is being written any more */
    /* off again: nothing more is written, and a second stop is harmless */
    inner();
    mt__trace_stop();
    printf("%s\n", argv[1]);
    return 0;
}
