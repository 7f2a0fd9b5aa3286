/*
 * import.c -- importers that write the dataset layout (a group of columns sharing rows):
 * IDX files (MNIST, Fashion-MNIST; gzip or plain) and CSV files (header row, numeric
 * columns, one label column chosen by name). Local, serial HDF5: they run before a job.
 *
 * Malformed input is an error naming the file and the byte offset (IDX) or line number
 * (CSV); nothing is written unless the whole input is good.
 */
#include "h5.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ------------------------------------------------------------ output */

static int write_columns(const char *out_file, const char *group, int ncols,
                         const char *const *names, const mt_dtype *types, const int *ndims,
                         const hsize_t (*dims)[8], const void *const *data)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    FILE *probe = fopen(out_file, "r");
    hid_t f;
    if (probe) {
        fclose(probe);
        f = H5Fopen(out_file, H5F_ACC_RDWR, H5P_DEFAULT);
    } else
        f = H5Fcreate(out_file, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0)
        return mt__error(MT_EIO, "%s: cannot open for writing (not an HDF5 file, or not "
                                 "writable)", out_file);
    int rc = MT_OK;
    hid_t g = H5I_INVALID_HID;
    if (H5Lexists(f, group, H5P_DEFAULT) > 0)
        rc = mt__error(MT_EINVAL, "%s: group %s exists already (remove it or choose another "
                                  "--group)", out_file, group);
    else {
        hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
        H5Pset_create_intermediate_group(lcpl, 1);
        g = H5Gcreate2(f, group, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        H5Pclose(lcpl);
        if (g < 0)
            rc = mt__error(MT_EIO, "%s: cannot create group %s", out_file, group);
    }
    for (int i = 0; i < ncols && !rc; i++) {
        hid_t mt = mt__h5_native(types[i]);
        hid_t sp = H5Screate_simple(ndims[i], dims[i], NULL);
        hid_t d = H5Dcreate2(g, names[i], mt, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (d < 0 || H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data[i]) < 0)
            rc = mt__error(MT_EIO, "%s:%s/%s: write failed", out_file, group, names[i]);
        if (d >= 0)
            H5Dclose(d);
        H5Sclose(sp);
    }
    if (g >= 0)
        H5Gclose(g);
    if (H5Fclose(f) < 0 && !rc)
        rc = mt__error(MT_EIO, "%s: close failed", out_file);
    return rc;
}

/* ------------------------------------------------------------ IDX */

typedef struct {
    mt_dtype dtype;
    size_t esize;
    int ndim;
    hsize_t dims[8];
    size_t count;
    void *data;
} idx_array;

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* n bytes from z into p; the count read (less at the end of the data). */
static size_t gz_read(gzFile z, unsigned char *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        unsigned want = n - done > (1u << 30) ? 1u << 30 : (unsigned)(n - done);
        int got = gzread(z, p + done, want);
        if (got <= 0)
            break;
        done += (size_t)got;
    }
    return done;
}

/* The header is read first and checked (dimensions, their product, its bytes without
 * overflow, no zero-sized dimension); then exactly the data it announces, into memory
 * that grows with the bytes actually there, so a header that lies costs nothing: a plain
 * file must have exactly that size, a gzip stream must hold exactly those bytes. */
static int parse_idx(const char *file, idx_array *a)
{
    gzFile z = gzopen(file, "rb"); /* reads plain files too */
    if (!z)
        return mt__error(errno == ENOENT ? MT_ENOTFOUND : MT_EIO, "%s: cannot open: %s", file,
                         strerror(errno));
    unsigned char head[4 + 4 * 8], *raw = NULL;
    int rc = MT_OK;
    size_t got = gz_read(z, head, 4);
    if (got < 4 || head[0] || head[1]) {
        rc = mt__error(MT_EFORMAT, "%s: bad magic at byte 0 (an IDX file starts with two zero "
                                   "bytes, a type byte and a dimension count)", file);
        goto out;
    }
    switch (head[2]) {
    case 0x08: a->dtype = MT_U8; a->esize = 1; break;
    case 0x09: case 0x0B: case 0x0C: a->dtype = MT_I32; a->esize = head[2] == 0x09 ? 1 : head[2] == 0x0B ? 2 : 4; break;
    case 0x0D: a->dtype = MT_F32; a->esize = 4; break;
    case 0x0E: a->dtype = MT_F64; a->esize = 8; break;
    default:
        rc = mt__error(MT_EFORMAT, "%s: unknown IDX type 0x%02x at byte 2", file, head[2]);
        goto out;
    }
    a->ndim = head[3];
    if (a->ndim < 1 || a->ndim > 8) {
        rc = mt__error(MT_EFORMAT, "%s: %d dimensions at byte 3 (need 1 to 8)", file, a->ndim);
        goto out;
    }
    size_t hlen = 4 + 4 * (size_t)a->ndim;
    if ((got += gz_read(z, head + 4, hlen - 4)) < hlen) {
        rc = mt__error(MT_EFORMAT, "%s: truncated: the header needs %zu bytes, the file has %zu",
                       file, hlen, got);
        goto out;
    }
    a->count = 1;
    size_t bytes = 0;
    for (int d = 0; d < a->ndim; d++) {
        a->dims[d] = be32(head + 4 + 4 * d);
        if (a->dims[d] == 0) {
            rc = mt__error(MT_EFORMAT, "%s: dimension %d (byte %d) is 0: %s", file, d, 4 + 4 * d,
                           d == 0 ? "no rows to import" : "rows of no elements");
            goto out;
        }
        if (__builtin_mul_overflow(a->count, (size_t)a->dims[d], &a->count)) {
            rc = mt__error(MT_EFORMAT, "%s: the dimensions in bytes 4 to %zu multiply past "
                           "what memory can hold", file, hlen - 1);
            goto out;
        }
    }
    if (__builtin_mul_overflow(a->count, a->esize, &bytes) ||
        __builtin_mul_overflow(a->count, mt_dtype_size(a->dtype), &(size_t){0})) {
        rc = mt__error(MT_EFORMAT, "%s: %zu elements of %zu bytes: more than memory can hold",
                       file, a->count, a->esize);
        goto out;
    }
    char shape[8 * 12] = "";
    for (int d = 0, n = 0; d < a->ndim; d++)
        n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%llu", d ? "x" : "",
                      (unsigned long long)a->dims[d]);
    if (gzdirect(z)) { /* not compressed: the size on disk must be what the header says */
        FILE *plain = fopen(file, "rb");
        long size = -1;
        if (plain && fseek(plain, 0, SEEK_END) == 0)
            size = ftell(plain);
        if (plain)
            fclose(plain);
        if (size >= 0 && (uint64_t)size != hlen + (uint64_t)bytes) {
            rc = mt__error(MT_EFORMAT, "%s: the header announces %s x %zu bytes = %zu bytes of "
                           "data after byte %zu; the file has %lld", file, shape, a->esize,
                           bytes, hlen, (long long)size - (long long)hlen);
            goto out;
        }
    }
    /* read in pieces that grow with the data actually there (not with the claim) */
    size_t have = 0, cap = 0;
    while (have < bytes) {
        size_t want = bytes - have < ((size_t)64 << 20) ? bytes - have : (size_t)64 << 20;
        if (have + want > cap) {
            size_t ncap = cap ? cap * 2 : want;
            if (ncap > bytes)
                ncap = bytes;
            if (ncap < have + want)
                ncap = have + want;
            unsigned char *grown = realloc(raw, ncap);
            if (!grown) {
                rc = mt__error(MT_ENOMEM, "%s: out of memory reading %zu bytes", file, ncap);
                goto out;
            }
            raw = grown;
            cap = ncap;
        }
        size_t n = gz_read(z, raw + have, want);
        have += n;
        if (n < want)
            break;
    }
    unsigned char extra;
    int err = 0;
    const char *zmsg = gzerror(z, &err);
    if (err < 0) {
        rc = mt__error(MT_EFORMAT, "%s: corrupt gzip data after %zu bytes: %s", file,
                       hlen + have, zmsg);
        goto out;
    }
    if (have < bytes) {
        rc = mt__error(MT_EFORMAT, "%s: truncated: %zu bytes of data expected from byte %zu, "
                                   "the file ends at byte %zu", file, bytes, hlen, hlen + have);
        goto out;
    }
    if (gz_read(z, &extra, 1) != 0) {
        rc = mt__error(MT_EFORMAT, "%s: more data than the header announces (%zu bytes after "
                                   "byte %zu)", file, bytes, hlen);
        goto out;
    }
    a->data = malloc(a->count * mt_dtype_size(a->dtype) + 1);
    if (!a->data) {
        rc = mt__error(MT_ENOMEM, "%s: out of memory", file);
        goto out;
    }
    const unsigned char *p = raw;
    for (size_t i = 0; i < a->count; i++, p += a->esize) {
        uint64_t v = 0;
        for (size_t k = 0; k < a->esize; k++)
            v = v << 8 | p[k];
        switch (a->dtype) {
        case MT_U8: ((uint8_t *)a->data)[i] = (uint8_t)v; break;
        case MT_I32:
            ((int32_t *)a->data)[i] = a->esize == 1 ? (int8_t)v : a->esize == 2 ? (int16_t)v : (int32_t)(uint32_t)v;
            break;
        case MT_F32: { uint32_t u = (uint32_t)v; float fv; memcpy(&fv, &u, 4); ((float *)a->data)[i] = fv; break; }
        case MT_F64: { double dv; memcpy(&dv, &v, 8); ((double *)a->data)[i] = dv; break; }
        default: break;
        }
    }
out:
    free(raw);
    gzclose(z);
    return rc;
}

int mt__import_idx(const char *images, const char *labels, const char *out_file,
                   const char *group, mt__import_stats *st)
{
    idx_array x = {0}, y = {0};
    int rc = parse_idx(images, &x);
    if (!rc && labels)
        rc = parse_idx(labels, &y);
    if (!rc && labels && x.dims[0] != y.dims[0])
        rc = mt__error(MT_EFORMAT, "%s has %llu rows but %s has %llu", images,
                       (unsigned long long)x.dims[0], labels, (unsigned long long)y.dims[0]);
    if (!rc) {
        const char *names[] = {"x", "y"};
        mt_dtype types[] = {x.dtype, y.dtype};
        int nd[] = {x.ndim, y.ndim};
        hsize_t dims[2][8];
        memcpy(dims[0], x.dims, sizeof dims[0]);
        memcpy(dims[1], y.dims, sizeof dims[1]);
        const void *data[] = {x.data, y.data};
        rc = write_columns(out_file, group, labels ? 2 : 1, names, types, nd,
                           (const hsize_t(*)[8])dims, data);
    }
    if (!rc && st) {
        st->rows = (int64_t)x.dims[0];
        st->ncols = labels ? 2 : 1;
        char shape[8 * 12] = ""; /* 8 dimensions of at most 10 digits and an 'x' */
        size_t n = 0;
        for (int d = 0; d < x.ndim; d++)
            n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%llu", d ? "x" : "",
                                  (unsigned long long)x.dims[d]);
        snprintf(st->summary, sizeof st->summary, "%s:%s: %lld rows; x %s %s%s%s", out_file,
                 group, (long long)st->rows, shape, mt__dtype_name(x.dtype),
                 labels ? ", y " : "", labels ? mt__dtype_name(y.dtype) : "");
    }
    free(x.data);
    free(y.data);
    return rc;
}

/* ------------------------------------------------------------ CSV */

typedef struct {
    char **fields;
    int n;
    size_t cap;
} row;

/* Split a line at commas (no quoting of numbers is needed; quotes are stripped). */
static int split(char *line, row *r)
{
    r->n = 0;
    char *p = line;
    for (;;) {
        if (MT__GROW(r->fields, r->cap, (size_t)r->n + 1))
            return -1;
        char *end = strchr(p, ',');
        if (end)
            *end = '\0';
        char *s = p;
        while (*s == ' ' || *s == '"')
            s++;
        size_t len = strlen(s);
        while (len && (s[len - 1] == ' ' || s[len - 1] == '"' || s[len - 1] == '\r' ||
                       s[len - 1] == '\n'))
            s[--len] = '\0';
        r->fields[r->n++] = s;
        if (!end)
            return 0;
        p = end + 1;
    }
}

int mt__import_csv(const char *csv, const char *label_column, const char *out_file,
                   const char *group, mt__import_stats *st)
{
    FILE *f = fopen(csv, "r");
    if (!f)
        return mt__error(errno == ENOENT ? MT_ENOTFOUND : MT_EIO, "%s: cannot open: %s", csv,
                         strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    row r = {0};
    int rc = MT_OK, label = -1, ncols = 0;
    long lineno = 1;
    double *x = NULL, *y = NULL;
    char **header = NULL; /* the column names, for messages */
    size_t rows = 0, x_cap = 0, y_cap = 0;
    bool integral = true;
    if (getline(&line, &cap, f) < 0 || split(line, &r) < 0 || (r.n == 1 && !*r.fields[0])) {
        rc = mt__error(MT_EFORMAT, "%s: line 1: no header row", csv);
        goto out;
    }
    ncols = r.n;
    if (!(header = calloc((size_t)ncols, sizeof *header))) {
        rc = mt__error(MT_ENOMEM, "%s: out of memory", csv);
        goto out;
    }
    for (int i = 0; i < ncols; i++)
        if (!(header[i] = strdup(r.fields[i]))) {
            rc = mt__error(MT_ENOMEM, "%s: out of memory", csv);
            goto out;
        }
    for (int i = 0; i < r.n; i++)
        if (!strcmp(r.fields[i], label_column))
            label = i;
    if (label < 0) {
        rc = mt__error(MT_EINVAL, "%s: line 1: no column named '%s' in the header", csv,
                       label_column);
        goto out;
    }
    if (ncols < 2) {
        rc = mt__error(MT_EFORMAT, "%s: line 1: need the label and at least one feature column",
                       csv);
        goto out;
    }
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        if (line[0] == '\n' || (line[0] == '\r' && line[1] == '\n'))
            continue;
        if (split(line, &r) < 0) {
            rc = mt__error(MT_ENOMEM, "%s: out of memory", csv);
            goto out;
        }
        if (r.n != ncols) {
            rc = mt__error(MT_EFORMAT, "%s: line %ld: %d fields, the header has %d", csv, lineno,
                           r.n, ncols);
            goto out;
        }
        /* a row's features (ncols - 1 floats' worth of doubles) and its label */
        if (mt__grow(&x, &x_cap, rows + 1, (size_t)(ncols - 1) * sizeof *x) ||
            MT__GROW(y, y_cap, rows + 1)) {
            rc = mt__error(MT_ENOMEM, "%s: out of memory at line %ld (%zu rows of %d columns)",
                           csv, lineno, rows + 1, ncols);
            goto out;
        }
        for (int i = 0, k = 0; i < ncols; i++) {
            char *end;
            errno = 0;
            double v = strtod(r.fields[i], &end);
            if (!*r.fields[i] || *end || errno || !isfinite(v)) {
                rc = mt__error(MT_EFORMAT, "%s: line %ld, column %d (%s): '%s' is not a number",
                               csv, lineno, i + 1, i == label ? label_column : header[i],
                               r.fields[i]);
                goto out;
            }
            /* features are stored as float32: a value past its range would become inf */
            if (i != label && fabs(v) > FLT_MAX) {
                rc = mt__error(MT_EFORMAT, "%s: line %ld, column %d (%s): '%s' is outside the "
                               "float32 range the features are stored in (+-3.4e38)", csv,
                               lineno, i + 1, header[i], r.fields[i]);
                goto out;
            }
            if (i == label) {
                y[rows] = v;
                integral &= v == floor(v) && fabs(v) < 9e15;
            } else
                x[rows * (size_t)(ncols - 1) + (size_t)k++] = v;
        }
        rows++;
    }
    if (rows == 0) {
        rc = mt__error(MT_EFORMAT, "%s: no data rows after the header", csv);
        goto out;
    }
    {
        float *xf = malloc(rows * (size_t)(ncols - 1) * sizeof *xf);
        int64_t *yi = integral ? malloc(rows * sizeof *yi) : NULL;
        if (!xf || (integral && !yi)) {
            free(xf);
            free(yi);
            rc = mt__error(MT_ENOMEM, "%s: out of memory", csv);
            goto out;
        }
        for (size_t i = 0; i < rows * (size_t)(ncols - 1); i++)
            xf[i] = (float)x[i];
        for (size_t i = 0; integral && i < rows; i++)
            yi[i] = (int64_t)y[i];
        const char *names[] = {"x", "y"};
        mt_dtype types[] = {MT_F32, integral ? MT_I64 : MT_F64};
        int nd[] = {2, 1};
        hsize_t dims[2][8] = {{rows, (hsize_t)(ncols - 1)}, {rows}};
        const void *data[] = {xf, integral ? (const void *)yi : (const void *)y};
        rc = write_columns(out_file, group, 2, names, types, nd, (const hsize_t(*)[8])dims, data);
        free(xf);
        free(yi);
    }
    if (!rc && st) {
        st->rows = (int64_t)rows;
        st->ncols = 2;
        snprintf(st->summary, sizeof st->summary, "%s:%s: %zu rows; x %zux%d f32, y (%s) %s",
                 out_file, group, rows, rows, ncols - 1, label_column, integral ? "i64" : "f64");
    }
out:
    for (int i = 0; header && i < ncols; i++)
        free(header[i]);
    free(header);
    free(line);
    free(r.fields);
    free(x);
    free(y);
    fclose(f);
    return rc;
}
