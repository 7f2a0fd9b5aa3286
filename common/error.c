/*
 * error.c -- the error table (from MT_ERRNO_MAP in mpitrain.h) and this thread's last
 * detailed message. The message is per thread so training code that runs helper threads
 * never sees another thread's error.
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char last_msg[MT__MSG_LEN];

const char *mt_strerror(int code)
{
    switch (code) {
    case MT_OK:
        return "success";
#define XX(name, c, text)                                                     \
    case MT_##name:                                                           \
        return text;
        MT_ERRNO_MAP(XX)
#undef XX
    }
    return "unknown error";
}

const char *mt_err_name(int code)
{
    switch (code) {
    case MT_OK:
        return "MT_OK";
#define XX(name, c, text)                                                     \
    case MT_##name:                                                           \
        return "MT_" #name;
        MT_ERRNO_MAP(XX)
#undef XX
    }
    return "MT_UNKNOWN";
}

const char *mt_last_error(void)
{
    return last_msg;
}

int mt_set_error(int code, const char *message)
{
    if (!message)
        message = "";
    size_t n = strlen(message);
    if (n >= sizeof last_msg) /* the end says most: a traceback's last line is its error */
        message += n - (sizeof last_msg - 1);
    return mt__error(code, "%s", message);
}

int mt__verror(int code, const char *fmt, va_list ap)
{
    /* through a copy: the arguments may include mt_last_error() itself */
    char msg[MT__MSG_LEN];
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(last_msg, msg, sizeof last_msg);
    return code;
}

int mt__error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mt__verror(code, fmt, ap);
    va_end(ap);
    return code;
}

void mt__error_append(const char *fmt, ...)
{
    size_t n = strlen(last_msg);
    if (n + 2 >= sizeof last_msg)
        return;
    if (n > 0)
        last_msg[n++] = '\n';
    char more[MT__MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(more, sizeof more, fmt, ap);
    va_end(ap);
    snprintf(last_msg + n, sizeof last_msg - n, "%s", more);
}

void mt__error_set_text(const char *text)
{
    if (text != last_msg)
        memmove(last_msg, text, strnlen(text, sizeof last_msg - 1) + 1);
    last_msg[sizeof last_msg - 1] = '\0';
}

void mt__error_after(const char *first)
{
    char second[MT__MSG_LEN];
    snprintf(second, sizeof second, "%s", last_msg);
    mt__error_set_text(first);
    mt__error_append("and %s", second);
}

void mt__error_clear(void)
{
    last_msg[0] = '\0';
}

int mt__mpi_error(int mpi_code, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mpi_code, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", mpi_code);
    return mt__error(MT_EMPI, "%s failed: %s", what, text);
}

char *mt__strdup(const char *s)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        mt__error(MT_ENOMEM, "out of memory copying a string of %zu bytes", strlen(s));
    return d;
}

double mt__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
