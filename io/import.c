/*
 * import.c -- importers that write the dataset layout (a group of columns sharing rows):
 * IDX files (MNIST, Fashion-MNIST; gzip or plain) and CSV files (header row, numeric
 * columns, one label column chosen by name). Local, serial HDF5: they run before a job.
 *
 * Malformed input is an error naming the file and the byte offset (IDX) or line number
 * (CSV); nothing is written unless the whole input is good.
 */
#include "io.h"

#include <errno.h>
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

static int read_all(const char *file, unsigned char **out, size_t *len)
{
    gzFile z = gzopen(file, "rb"); /* reads plain files too */
    if (!z)
        return mt__error(errno == ENOENT ? MT_ENOTFOUND : MT_EIO, "%s: cannot open: %s", file,
                         strerror(errno));
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    int got;
    while (buf && (got = gzread(z, buf + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)got;
        if (n == cap) {
            unsigned char *grown = realloc(buf, cap *= 2);
            if (!grown) {
                free(buf);
                buf = NULL;
            }
            buf = grown;
        }
    }
    int err = 0;
    const char *zmsg = buf ? gzerror(z, &err) : "";
    int rc = MT_OK;
    if (!buf)
        rc = mt__error(MT_ENOMEM, "%s: out of memory reading", file);
    else if (err < 0)
        rc = mt__error(MT_EFORMAT, "%s: corrupt gzip data after %zu bytes: %s", file, n, zmsg);
    gzclose(z);
    if (rc) {
        free(buf);
        return rc;
    }
    *out = buf;
    *len = n;
    return MT_OK;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int parse_idx(const char *file, idx_array *a)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    int rc = read_all(file, &buf, &len);
    if (rc)
        return rc;
    if (len < 4 || buf[0] || buf[1]) {
        rc = mt__error(MT_EFORMAT, "%s: bad magic at byte 0 (an IDX file starts with two zero "
                                   "bytes, a type byte and a dimension count)", file);
        goto out;
    }
    switch (buf[2]) {
    case 0x08: a->dtype = MT_U8; a->esize = 1; break;
    case 0x09: case 0x0B: case 0x0C: a->dtype = MT_I32; a->esize = buf[2] == 0x09 ? 1 : buf[2] == 0x0B ? 2 : 4; break;
    case 0x0D: a->dtype = MT_F32; a->esize = 4; break;
    case 0x0E: a->dtype = MT_F64; a->esize = 8; break;
    default:
        rc = mt__error(MT_EFORMAT, "%s: unknown IDX type 0x%02x at byte 2", file, buf[2]);
        goto out;
    }
    a->ndim = buf[3];
    if (a->ndim < 1 || a->ndim > 8) {
        rc = mt__error(MT_EFORMAT, "%s: %d dimensions at byte 3 (need 1 to 8)", file, a->ndim);
        goto out;
    }
    size_t head = 4 + 4 * (size_t)a->ndim;
    if (len < head) {
        rc = mt__error(MT_EFORMAT, "%s: truncated: the header needs %zu bytes, the file has %zu",
                       file, head, len);
        goto out;
    }
    a->count = 1;
    bool huge = false; /* count * 8 must not wrap, or the size check below would pass */
    for (int d = 0; d < a->ndim; d++) {
        a->dims[d] = be32(buf + 4 + 4 * d);
        if (a->dims[d] && a->count > SIZE_MAX / 8 / a->dims[d])
            huge = true;
        else
            a->count *= a->dims[d];
    }
    if (huge || len - head < a->count * a->esize) {
        rc = mt__error(MT_EFORMAT, "%s: truncated: %zu bytes of data expected from byte %zu, "
                                   "the file ends at byte %zu", file, a->count * a->esize, head,
                       len);
        goto out;
    }
    a->data = malloc(a->count * mt_dtype_size(a->dtype) + 1);
    if (!a->data) {
        rc = mt__error(MT_ENOMEM, "%s: out of memory", file);
        goto out;
    }
    const unsigned char *p = buf + head;
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
    free(buf);
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
        char shape[64] = "";
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
    int n, cap;
} row;

/* Split a line at commas (no quoting of numbers is needed; quotes are stripped). */
static int split(char *line, row *r)
{
    r->n = 0;
    char *p = line;
    for (;;) {
        if (r->n == r->cap) {
            int cap = r->cap ? 2 * r->cap : 16;
            char **f = realloc(r->fields, (size_t)cap * sizeof *f);
            if (!f)
                return -1;
            r->fields = f;
            r->cap = cap;
        }
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
    size_t rows = 0, rows_cap = 0;
    bool integral = true;
    if (getline(&line, &cap, f) < 0 || split(line, &r) < 0 || (r.n == 1 && !*r.fields[0])) {
        rc = mt__error(MT_EFORMAT, "%s: line 1: no header row", csv);
        goto out;
    }
    ncols = r.n;
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
        if (rows == rows_cap) {
            rows_cap = rows_cap ? 2 * rows_cap : 1024;
            double *gx = realloc(x, rows_cap * (size_t)(ncols - 1) * sizeof *x);
            double *gy = realloc(y, rows_cap * sizeof *y);
            if (gx)
                x = gx;
            if (gy)
                y = gy;
            if (!gx || !gy) {
                rc = mt__error(MT_ENOMEM, "%s: out of memory at line %ld", csv, lineno);
                goto out;
            }
        }
        for (int i = 0, k = 0; i < ncols; i++) {
            char *end;
            errno = 0;
            double v = strtod(r.fields[i], &end);
            if (!*r.fields[i] || *end || errno || !isfinite(v)) {
                rc = mt__error(MT_EFORMAT, "%s: line %ld, column %d (%s): '%s' is not a number",
                               csv, lineno, i + 1, i == label ? label_column : "feature",
                               r.fields[i]);
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
    free(line);
    free(r.fields);
    free(x);
    free(y);
    fclose(f);
    return rc;
}
