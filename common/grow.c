/*
 * grow.c -- the growable array: one place that enlarges an array geometrically and says
 * MT_ENOMEM when it cannot, for every layer's lists (metrics, columns, shards, ...).
 */
#include "common.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int mt__grow(void *arr, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return MT_OK;
    size_t n = *cap ? *cap : 8;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : 2 * n;
    if (size && n > SIZE_MAX / size)
        return MT_ENOMEM;
    /* arr points at a pointer of some object type: read and write it as bytes */
    void *old;
    memcpy(&old, arr, sizeof old);
    size_t bytes = n * size;
    void *grown = realloc(old, bytes ? bytes : 1); /* realloc(p, 0) would free p */
    if (!grown)
        return MT_ENOMEM;
    memcpy(arr, &grown, sizeof grown);
    *cap = n;
    return MT_OK;
}
