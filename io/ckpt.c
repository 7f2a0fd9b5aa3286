/*
 * ckpt.c -- checkpoint.h5: one HDF5 dataset per array (global shape, rows written in
 * pieces), with attributes layout, crc32 (of the array's bytes in row order), offsets
 * (row offset of each rank's part, sharded arrays) and metadata on the root group as
 * "meta:KEY" (a fixed-length string, a 64-bit integer or a double). Serial HDF5, rank 0
 * only.
 *
 * The bytes are not all that decides what a rank gets back: the name it is found by,
 * the dtype, the shape, the layout and the row offsets do too, and a damaged one would
 * restore the wrong rows silently. So each array also carries "check": CRC-32s of its
 * name, dtype, shape, layout and offsets (integers as little-endian bytes), and the root
 * carries "format" (2) and "index_check": CRC-32s of the list of array names and of the
 * metadata. Reading the index compares them all and names what does not match; the
 * caller treats that as a corrupt checkpoint. Files without "format" (written before the
 * checks existed) are read as before, with the structural checks only, provided they
 * carry the checksum header below (those written before the header are refused).
 *
 * Those checks run after HDF5 has parsed the file, and HDF5 1.10 does not survive every
 * damaged file: a corrupt object header crashes it (H5O__msg_iterate_real, reached from
 * H5Aopen / H5Aiterate2), and we cannot fix the library. So no byte that HDF5 parses
 * reaches it unchecked. The file starts with a 4096-byte HDF5 user block (HDF5 finds its
 * superblock after it and never reads it) holding our header, little-endian:
 *
 *   0  "\211MTCK\r\n\032"   magic (a text-mode copy or a truncation shows)
 *   8  u32 1               header version
 *  12  u32 n               raw-data regions skipped by the file checksum (at most 254)
 *  16  u64                 file length in bytes
 *  24  u32                 CRC-32 of the file from byte 4096 on, the n regions left out
 *  28  u32                 CRC-32 of the user block but this field (header and the rest)
 *  32  n x (u64 offset, u64 length)   the regions: ascending, apart, after the user block
 *
 * The regions are the stored bytes of the root's numeric contiguous datasets (the arrays):
 * HDF5 reads them as numbers only, never as addresses or sizes, and our own per-array
 * crc32 checks them when they are read. Everything else (superblock, object headers,
 * B-trees, heaps, attribute values, and any global heap a future writer adds) is covered.
 * mt__ckpt_open compares the length and both checksums before H5Fopen sees the file, so
 * a damaged file is MT_EFORMAT naming it and saying what, and HDF5 never parses it.
 * Writing costs a read of the metadata (kilobytes, from the page cache) after H5Fclose
 * and one 4 KiB write before the fsync; arrays past the 254 largest are read back too.
 * Measured on a 256 MiB checkpoint of four arrays: 0.6 ms to list the arrays, checksum
 * and write the header, against about 0.2 s to write and fsync the file; checking it
 * before H5Fopen, well under 1 ms.
 *
 * Why not HDF5's own checksums (H5Pset_libver_bounds to the 1.8/1.10 format: superblock
 * v2/3, object header v2, v2 B-trees and fractal heaps are checksummed)? They do not cover
 * all of a checkpoint: an "OHDR" signature damaged to 0x01 makes HDF5 1.10 decode the
 * object header as version 1, which has no checksum; a superblock version byte damaged to
 * 0 or 1 likewise; attributes past 8 on an object move to a fractal heap, where values
 * over 4 KiB are "huge" objects stored without a checksum; a variable-length string
 * would live in the global heap, never checksummed. Our checksum does not depend on which
 * structures HDF5 picks. Files without the header (written before it existed, or not by
 * mpitrain) are refused with a message saying so: reading them is exactly the risk. The
 * checksum guards against damage (disk, copy, truncation), not a forger: whoever can
 * write the run directory can write a valid checkpoint anyway.
 */
#include "h5.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define CKPT_FORMAT 2
enum { CHECK_NAME, CHECK_DTYPE, CHECK_SHAPE, CHECK_LAYOUT, CHECK_OFFSETS, NCHECKS };
static const char *const check_what[NCHECKS] = {"name", "dtype", "shape", "layout",
                                                "row offsets"};

/* The system's reason for the HDF5 failure just seen (the sec2 driver records it as
 * "error message = '...'" on the error stack), else errno's; call with the lock held,
 * right after the failing call. */
typedef struct {
    char *buf;
    size_t n;
} reason;

static herr_t find_reason(unsigned n, const H5E_error2_t *e, void *arg)
{
    reason *r = arg;
    const char *m = e->desc ? strstr(e->desc, "error message = '") : NULL;
    if (m && !r->buf[0]) {
        m += strlen("error message = '");
        size_t len = strcspn(m, "'");
        snprintf(r->buf, r->n, "%.*s", (int)(len < r->n ? len : r->n - 1), m);
    }
    return 0;
}

static const char *why_failed(char *buf, size_t n, int err)
{
    reason r = {buf, n};
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, find_reason, &r);
    if (!buf[0])
        snprintf(buf, n, "%s", err ? strerror(err) : "HDF5 error");
    return buf;
}

/* ------------------------------------------------------------ the checksum header */

#define UB_SIZE 4096u
#define HDR_FIXED 32u
#define MAX_REGIONS ((UB_SIZE - HDR_FIXED) / 16u)
static const unsigned char ub_magic[8] = {0211, 'M', 'T', 'C', 'K', '\r', '\n', 032};
static const unsigned char h5_magic[8] = {0211, 'H', 'D', 'F', '\r', '\n', 032, '\n'};

typedef struct {
    uint64_t off, len;
} region;

typedef struct {
    region *r;
    int n;
    size_t cap;
    bool oom;
} regions;

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* CRC-32 of the user block but its own checksum field. */
static uint32_t header_crc(const unsigned char *ub)
{
    uLong c = crc32(crc32(0, NULL, 0), ub, 28);
    return (uint32_t)crc32(c, ub + HDR_FIXED, UB_SIZE - HDR_FIXED);
}

static int full_pread(int fd, unsigned char *buf, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t got = pread(fd, buf, n, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            if (got == 0)
                errno = EIO; /* shorter than fstat said: it changed under us */
            return -1;
        }
        buf += got, n -= (size_t)got, off += (uint64_t)got;
    }
    return 0;
}

/* CRC-32 of bytes [UB_SIZE, size) of fd but the regions (ascending, apart, inside). */
static int file_crc(int fd, uint64_t size, const region *r, int n, uint32_t *out)
{
    size_t cap = 1u << 18;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    uint32_t c = 0;
    uint64_t at = UB_SIZE;
    for (int i = 0; i <= n; i++) {
        uint64_t end = i < n ? r[i].off : size;
        while (at < end) {
            size_t k = end - at < cap ? (size_t)(end - at) : cap;
            if (full_pread(fd, buf, k, at)) {
                free(buf);
                return -1;
            }
            c = mt__crc32(c, buf, k);
            at += k;
        }
        if (i < n)
            at = r[i].off + r[i].len;
    }
    free(buf);
    *out = c;
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const region *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int by_length_down(const void *a, const void *b)
{
    const region *x = a, *y = b;
    return x->len > y->len ? -1 : x->len < y->len;
}

/* A dataset's stored bytes as a region, when HDF5 reads them only as numbers: a numeric
 * type, contiguous storage (H5Dget_offset is defined for nothing else). */
static herr_t add_region(hid_t g, const char *name, const H5L_info_t *info, void *arg)
{
    regions *R = arg;
    if (info->type != H5L_TYPE_HARD)
        return 0;
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
    if (ds < 0)
        return 0; /* a group or a named type: not a region */
    hid_t t = H5Dget_type(ds);
    H5T_class_t cls = H5Tget_class(t);
    haddr_t off = H5Dget_offset(ds);
    hsize_t len = H5Dget_storage_size(ds);
    H5Tclose(t);
    H5Dclose(ds);
    if ((cls != H5T_INTEGER && cls != H5T_FLOAT) || off == HADDR_UNDEF || len == 0)
        return 0;
    if (MT__GROW(R->r, R->cap, (size_t)R->n + 1)) {
        R->oom = true;
        return -1;
    }
    R->r[R->n++] = (region){(uint64_t)off, (uint64_t)len};
    return 0;
}

/* With the lock held, f open: the regions of its arrays, merged, the largest
 * MAX_REGIONS in file order. */
static int collect_regions(hid_t f, regions *R)
{
    hsize_t idx = 0;
    memset(R, 0, sizeof *R);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* H5Dopen2 on a group fails, quietly */
    if (H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, &idx, add_region, R) < 0 && R->oom) {
        free(R->r);
        R->r = NULL;
        return -1;
    }
    if (R->n == 0)
        return 0;
    qsort(R->r, (size_t)R->n, sizeof *R->r, by_offset);
    int m = 0;
    for (int i = 0; i < R->n; i++) {
        if (R->r[i].off < UB_SIZE)
            continue; /* never: HDF5 put the data after its superblock */
        if (m > 0 && R->r[i].off <= R->r[m - 1].off + R->r[m - 1].len) {
            uint64_t end = R->r[i].off + R->r[i].len;
            if (end > R->r[m - 1].off + R->r[m - 1].len)
                R->r[m - 1].len = end - R->r[m - 1].off;
        } else
            R->r[m++] = R->r[i];
    }
    R->n = m;
    if (R->n > (int)MAX_REGIONS) { /* the rest is read back: small arrays */
        qsort(R->r, (size_t)R->n, sizeof *R->r, by_length_down);
        R->n = MAX_REGIONS;
        qsort(R->r, (size_t)R->n, sizeof *R->r, by_offset);
    }
    return 0;
}

/* The header of a closed file whose regions are R; fsync too when sync. */
static int write_header(const char *path, regions *R, bool sync)
{
    int fd = open(path, O_RDWR | O_CLOEXEC), err = 0;
    struct stat st;
    unsigned char *ub = calloc(1, UB_SIZE);
    uint32_t crc = 0;
    if (fd < 0 || !ub || fstat(fd, &st))
        err = !ub ? ENOMEM : errno;
    uint64_t size = err ? 0 : (uint64_t)st.st_size;
    if (!err && size < (uint64_t)UB_SIZE + sizeof h5_magic)
        err = EIO; /* never: HDF5 wrote at least a superblock after the user block */
    int n = 0; /* the regions inside the file (all of them, but the file is what counts) */
    for (int i = 0; !err && i < R->n; i++)
        if (R->r[i].off + R->r[i].len <= size)
            R->r[n++] = R->r[i];
    if (!err && file_crc(fd, size, R->r, n, &crc))
        err = errno;
    if (!err) {
        memcpy(ub, ub_magic, sizeof ub_magic);
        put_u32(ub + 8, 1);
        put_u32(ub + 12, (uint32_t)n);
        put_u64(ub + 16, size);
        put_u32(ub + 24, crc);
        for (int i = 0; i < n; i++) {
            put_u64(ub + HDR_FIXED + 16 * i, R->r[i].off);
            put_u64(ub + HDR_FIXED + 16 * i + 8, R->r[i].len);
        }
        put_u32(ub + 28, header_crc(ub));
        ssize_t w;
        while ((w = pwrite(fd, ub, UB_SIZE, 0)) < 0 && errno == EINTR)
            ;
        if (w != (ssize_t)UB_SIZE)
            err = w < 0 ? errno : EIO;
    }
    if (!err && sync) {
        MT__TRACE("checkpoint", "fsync");
        if (fsync(fd))
            err = errno;
    }
    if (fd >= 0 && close(fd) && !err)
        err = errno;
    free(ub);
    if (err)
        return mt__error(err == ENOMEM ? MT_ENOMEM : MT_EIO,
                         "%s: cannot write its checksum header: %s", path, strerror(err));
    return MT_OK;
}

/* The first `head` bytes of path (fd, `size` bytes) in ub: the header compared with the
 * file. MT_EFORMAT naming what does not match; a read error leaves MT_OK and *err. */
static int check_header(const char *path, int fd, const unsigned char *ub, size_t head,
                        uint64_t size, int *err)
{
    if (head >= sizeof h5_magic && !memcmp(ub, h5_magic, sizeof h5_magic))
        return mt__error(MT_EFORMAT, "%s: an HDF5 file without a checkpoint checksum header "
                         "(written before mpitrain checksummed checkpoints, or not by "
                         "mpitrain): not read, since damaged HDF5 metadata can crash the HDF5 "
                         "library", path);
    if (head < sizeof ub_magic || memcmp(ub, ub_magic, sizeof ub_magic))
        return mt__error(MT_EFORMAT, "%s: not a checkpoint file (%s)", path,
                         size == 0 ? "empty" : "no checkpoint header at its start");
    if (size < UB_SIZE)
        return mt__error(MT_EFORMAT, "%s: truncated: %llu bytes, less than its %u-byte "
                         "header", path, (unsigned long long)size, UB_SIZE);
    if (get_u32(ub + 28) != header_crc(ub))
        return mt__error(MT_EFORMAT, "%s: its checkpoint header is damaged (the header "
                         "checksum does not match)", path);
    if (get_u32(ub + 8) != 1)
        return mt__error(MT_EFORMAT, "%s: checkpoint header version %u is not one this "
                         "version reads (1)", path, get_u32(ub + 8));
    if (get_u64(ub + 16) != size)
        return mt__error(MT_EFORMAT, "%s: the file is %llu bytes but its header says %llu "
                         "(truncated or appended to)", path, (unsigned long long)size,
                         (unsigned long long)get_u64(ub + 16));
    uint32_t n = get_u32(ub + 12), crc = 0;
    region r[MAX_REGIONS];
    bool fine = n <= MAX_REGIONS;
    uint64_t at = UB_SIZE;
    for (uint32_t i = 0; fine && i < n; i++) {
        r[i].off = get_u64(ub + HDR_FIXED + 16 * i);
        r[i].len = get_u64(ub + HDR_FIXED + 16 * i + 8);
        fine = r[i].off >= at && r[i].len <= size && r[i].off <= size - r[i].len;
        at = r[i].off + r[i].len;
    }
    if (!fine) /* the header checksum matched: a writer's defect, still never trusted */
        return mt__error(MT_EFORMAT, "%s: its checkpoint header lists impossible regions",
                         path);
    if (file_crc(fd, size, r, (int)n, &crc)) {
        *err = errno;
        return MT_OK;
    }
    if (crc != get_u32(ub + 24))
        return mt__error(MT_EFORMAT, "%s: damaged: the checksum of its HDF5 metadata does "
                         "not match its header", path);
    return MT_OK;
}

/* Local. Before HDF5 sees path: its header, length and checksums (see the top of this
 * file). MT_EFORMAT (missing, damaged, no header), MT_ENOMEM. */
static int verify_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return mt__error(MT_EFORMAT, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    unsigned char *ub = malloc(UB_SIZE);
    int rc = MT_OK, err = 0;
    if (!ub)
        err = ENOMEM;
    else if (fstat(fd, &st))
        err = errno;
    else if (!S_ISREG(st.st_mode))
        rc = mt__error(MT_EFORMAT, "%s: not a regular file", path);
    uint64_t size = rc || err ? 0 : (uint64_t)st.st_size;
    size_t head = size < UB_SIZE ? (size_t)size : UB_SIZE;
    if (!rc && !err && full_pread(fd, ub, head, 0))
        err = errno;
    if (!rc && !err)
        rc = check_header(path, fd, ub, head, size, &err);
    if (!rc && err)
        rc = mt__error(err == ENOMEM ? MT_ENOMEM : MT_EFORMAT, "%s: cannot read: %s", path,
                       strerror(err));
    free(ub);
    close(fd);
    return rc;
}

/* ------------------------------------------------------------ files */

int mt__ckpt_create(const char *path, hid_t *out)
{
    char why[256];
    mt__h5_lock();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    errno = 0;
    hid_t f = fcpl < 0 || H5Pset_userblock(fcpl, UB_SIZE) < 0
                  ? H5I_INVALID_HID
                  : H5Fcreate(path, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    if (f < 0)
        why_failed(why, sizeof why, errno);
    if (fcpl >= 0)
        H5Pclose(fcpl);
    mt__h5_unlock();
    if (f < 0)
        return mt__error(MT_EIO, "%s: cannot create the checkpoint file: %s", path, why);
    *out = f;
    return MT_OK;
}

int mt__ckpt_open(const char *path, hid_t *out)
{
    int rc = verify_file(path);
    if (rc)
        return rc;
    mt__h5_lock();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    mt__h5_unlock();
    if (f < 0)
        return mt__error(MT_EFORMAT, "%s: cannot open (missing, truncated or not HDF5)", path);
    *out = f;
    return MT_OK;
}

int mt__ckpt_close(hid_t f, const char *path, bool sync)
{
    char why[256];
    unsigned intent = 0;
    regions R = {0};
    mt__h5_lock();
    /* a file this process writes gets its header once HDF5 is done with it */
    bool writing = H5Fget_intent(f, &intent) >= 0 && (intent & H5F_ACC_RDWR);
    int oom = writing ? collect_regions(f, &R) : 0;
    errno = 0;
    herr_t e = H5Fclose(f);
    if (e < 0)
        why_failed(why, sizeof why, errno);
    mt__h5_unlock();
    if (e < 0) {
        free(R.r);
        return mt__error(MT_EIO, "%s: close failed: %s", path, why);
    }
    if (oom)
        return mt__error(MT_ENOMEM, "%s: out of memory listing its arrays", path);
    if (writing) {
        int rc = write_header(path, &R, sync);
        free(R.r);
        return rc;
    }
    if (sync) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        int bad = fd < 0 || fsync(fd) != 0, err = errno;
        if (fd >= 0)
            close(fd);
        if (bad)
            return mt__error(MT_EIO, "%s: fsync failed: %s", path, strerror(err));
    }
    return MT_OK;
}

int mt__ckpt_reseal(const char *path)
{
    regions R = {0};
    mt__h5_lock();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hsize_t ub = 0;
    hid_t fcpl = f < 0 ? H5I_INVALID_HID : H5Fget_create_plist(f);
    if (fcpl >= 0) {
        H5Pget_userblock(fcpl, &ub);
        H5Pclose(fcpl);
    }
    int oom = f >= 0 && ub == UB_SIZE ? collect_regions(f, &R) : 0;
    if (f >= 0)
        H5Fclose(f);
    mt__h5_unlock();
    if (f < 0 || ub != UB_SIZE) {
        free(R.r);
        return mt__error(MT_EFORMAT, "%s: not an HDF5 file with a %u-byte user block", path,
                         UB_SIZE);
    }
    if (oom)
        return mt__error(MT_ENOMEM, "%s: out of memory listing its arrays", path);
    int rc = write_header(path, &R, false);
    free(R.r);
    return rc;
}

int mt__ckpt_add_array(hid_t f, const char *name, mt_dtype t, int ndim, const uint64_t *dims,
                       hid_t *out)
{
    hsize_t d[8];
    for (int i = 0; i < ndim; i++)
        d[i] = dims[i];
    char why[256] = "", file[1024] = "";
    mt__h5_lock();
    hid_t sp = H5Screate_simple(ndim, d, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    /* every row gets written: no fill pass over the file first */
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    errno = 0;
    hid_t ds = H5Dcreate2(f, name, mt__h5_native(t), sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds < 0) {
        why_failed(why, sizeof why, errno);
        H5Fget_name(f, file, sizeof file);
    }
    H5Pclose(dcpl);
    H5Sclose(sp);
    mt__h5_unlock();
    if (ds < 0)
        return mt__error(MT_EIO, "%s: checkpoint array %s: cannot create: %s", file, name, why);
    *out = ds;
    return MT_OK;
}

/* Rows [row, row + nrows) of dataset ds from data (C order). */
int mt__ckpt_rows(hid_t ds, mt_dtype t, uint64_t row, uint64_t nrows, void *data, bool write)
{
    if (nrows == 0)
        return MT_OK;
    mt__h5_lock();
    hid_t fs = H5Dget_space(ds);
    int nd = H5Sget_simple_extent_ndims(fs);
    if (nd < 1 || nd > 8) { /* the index refused such an array; never fill dims[8] */
        H5Sclose(fs);
        mt__h5_unlock();
        return mt__error(MT_EFORMAT, "checkpoint: an array has %d dimensions (1 to 8)", nd);
    }
    hsize_t dims[8], start[8] = {0}, count[8];
    H5Sget_simple_extent_dims(fs, dims, NULL);
    start[0] = row;
    count[0] = nrows;
    for (int i = 1; i < nd; i++)
        count[i] = dims[i];
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t ms = H5Screate_simple(nd, count, NULL);
    errno = 0;
    herr_t e = write ? H5Dwrite(ds, mt__h5_native(t), ms, fs, H5P_DEFAULT, data)
                     : H5Dread(ds, mt__h5_native(t), ms, fs, H5P_DEFAULT, data);
    char why[256] = "", file[1024] = "", name[300] = "";
    if (e < 0) {
        why_failed(why, sizeof why, errno);
        H5Fget_name(ds, file, sizeof file);
        H5Iget_name(ds, name, sizeof name);
    }
    H5Sclose(ms);
    H5Sclose(fs);
    mt__h5_unlock();
    if (e < 0)
        return mt__error(write ? MT_EIO : MT_EFORMAT, "%s: array %s: %s of rows %llu..%llu "
                         "failed: %s", file, name[0] == '/' ? name + 1 : name,
                         write ? "write" : "read", (unsigned long long)row,
                         (unsigned long long)(row + nrows), why);
    return MT_OK;
}

static void attr_write(hid_t obj, const char *name, hid_t type, hsize_t n, const void *v)
{
    hid_t sp = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type, v);
    H5Aclose(a);
    H5Sclose(sp);
}

static uLong crc_u64(uLong crc, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return crc32(crc, b, 8);
}

static uLong crc_str(uLong crc, const char *s)
{
    return crc32(crc, (const Bytef *)s, (uInt)strlen(s) + 1);
}

/* The checks of everything but the bytes that decides what a rank gets back. */
static void array_checks(const mt__ckpt_array *a, uint32_t c[NCHECKS])
{
    uLong z = crc32(0, NULL, 0), v;
    c[CHECK_NAME] = (uint32_t)crc_str(z, a->name);
    c[CHECK_DTYPE] = (uint32_t)crc_u64(z, (uint64_t)a->dtype);
    v = crc_u64(z, (uint64_t)a->ndim);
    for (int i = 0; i < a->ndim && i < 8; i++)
        v = crc_u64(v, a->dims[i]);
    c[CHECK_SHAPE] = (uint32_t)v;
    c[CHECK_LAYOUT] = (uint32_t)crc_u64(z, (uint64_t)(int64_t)a->layout);
    v = crc_u64(z, (uint64_t)a->noffsets);
    for (int i = 0; i < a->noffsets; i++)
        v = crc_u64(v, (uint64_t)a->offsets[i]);
    c[CHECK_OFFSETS] = (uint32_t)v;
}

static mt_dtype dtype_of(hid_t ft);

int mt__ckpt_finish_array(hid_t ds, int layout, uint32_t crc, const int64_t *offsets,
                          int noffsets)
{
    mt__h5_lock();
    attr_write(ds, "layout", H5T_NATIVE_INT, 0, &layout);
    attr_write(ds, "crc32", H5T_NATIVE_UINT32, 0, &crc);
    if (offsets && noffsets > 0)
        attr_write(ds, "offsets", H5T_NATIVE_INT64, (hsize_t)noffsets, offsets);
    /* the checks, of what the file holds (the reader computes them the same way) */
    mt__ckpt_array a = {.layout = layout, .offsets = (int64_t *)offsets,
                        .noffsets = offsets && noffsets > 0 ? noffsets : 0};
    char path[300] = "";
    H5Iget_name(ds, path, sizeof path);
    snprintf(a.name, sizeof a.name, "%s", path[0] == '/' ? path + 1 : path);
    hid_t ft = H5Dget_type(ds), sp = H5Dget_space(ds);
    a.dtype = dtype_of(ft);
    a.ndim = H5Sget_simple_extent_ndims(sp);
    hsize_t d[8] = {0};
    if (a.ndim >= 1 && a.ndim <= 8)
        H5Sget_simple_extent_dims(sp, d, NULL);
    for (int i = 0; i < a.ndim && i < 8; i++)
        a.dims[i] = d[i];
    H5Tclose(ft);
    H5Sclose(sp);
    uint32_t c[NCHECKS];
    array_checks(&a, c);
    attr_write(ds, "check", H5T_NATIVE_UINT32, NCHECKS, c);
    char why[256] = "", file[1024] = "";
    errno = 0;
    H5Fget_name(ds, file, sizeof file);
    herr_t e = H5Dclose(ds);
    if (e < 0)
        why_failed(why, sizeof why, errno);
    mt__h5_unlock();
    return e < 0 ? mt__error(MT_EIO, "%s: array %s: close failed: %s", file, a.name, why) : MT_OK;
}

int mt__ckpt_set_meta(hid_t f, const char *key, const char *value)
{
    return mt__ckpt_set_meta_typed(f, key, MT__META_STR, value);
}

int mt__ckpt_set_meta_typed(hid_t f, const char *key, int type, const char *value)
{
    char name[300];
    snprintf(name, sizeof name, "meta:%s", key);
    int64_t i = type == MT__META_I64 ? strtoll(value, NULL, 10) : 0;
    double d = type == MT__META_F64 ? strtod(value, NULL) : 0;
    const void *buf = type == MT__META_I64 ? (const void *)&i
                      : type == MT__META_F64 ? (const void *)&d : (const void *)value;
    mt__h5_lock();
    hid_t st = type == MT__META_I64 ? H5Tcopy(H5T_STD_I64LE)
               : type == MT__META_F64 ? H5Tcopy(H5T_IEEE_F64LE) : H5Tcopy(H5T_C_S1);
    if (type == MT__META_STR)
        H5Tset_size(st, strlen(value) + 1);
    hid_t mem = type == MT__META_I64 ? H5T_NATIVE_INT64 : type == MT__META_F64 ? H5T_NATIVE_DOUBLE
                                                                            : st;
    hid_t sp = H5Screate(H5S_SCALAR);
    errno = 0;
    hid_t a = H5Acreate2(f, name, st, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t e = a < 0 ? -1 : H5Awrite(a, mem, buf);
    char why[256] = "", file[1024] = "";
    if (e < 0) {
        why_failed(why, sizeof why, errno);
        H5Fget_name(f, file, sizeof file);
    }
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(st);
    mt__h5_unlock();
    return e < 0 ? mt__error(MT_EIO, "%s: metadata %s: write failed: %s", file, key, why) : MT_OK;
}

/* ------------------------------------------------------------ reading the index */

static mt_dtype dtype_of(hid_t ft)
{
    H5T_class_t cls = H5Tget_class(ft);
    size_t size = H5Tget_size(ft);
    if (cls == H5T_FLOAT)
        return size == 4 ? MT_F32 : MT_F64;
    if (cls == H5T_INTEGER)
        return size == 1 ? MT_U8 : size == 4 ? MT_I32 : MT_I64;
    return 0;
}

typedef struct {
    mt__ckpt_index *ix;
    int checked;        /* arrays that carry "check" */
    char why[512];      /* what did not match */
} lister;

/* Structure a reader relies on, whatever the format: a known layout, offsets that start
 * at 0, never go down and end at the row count. */
static bool plausible(const mt__ckpt_array *a, char *why, size_t n)
{
    if (a->layout != 0 && a->layout != 1) {
        snprintf(why, n, "array %s: layout is %d (0 or 1 expected)", a->name, a->layout);
        return false;
    }
    if (a->noffsets > 0) {
        bool ok = a->offsets[0] == 0 && (uint64_t)a->offsets[a->noffsets - 1] == a->dims[0];
        for (int i = 1; ok && i < a->noffsets; i++)
            ok = a->offsets[i] >= a->offsets[i - 1];
        if (!ok) {
            snprintf(why, n, "array %s: attribute offsets does not split its %llu rows",
                     a->name, (unsigned long long)a->dims[0]);
            return false;
        }
    }
    return true;
}

/* A one-element numeric attribute into *out (mem: its native type); -1 otherwise (a
 * many-element attribute read into one number would overflow it). */
static int read_scalar_attr(hid_t obj, const char *name, hid_t mem, void *out)
{
    if (H5Aexists(obj, name) <= 0)
        return -1;
    hid_t at = H5Aopen(obj, name, H5P_DEFAULT);
    if (at < 0)
        return -1;
    hid_t sp = H5Aget_space(at), ft = H5Aget_type(at);
    int ok = H5Sget_simple_extent_npoints(sp) == 1 &&
             (H5Tget_class(ft) == H5T_INTEGER || H5Tget_class(ft) == H5T_FLOAT) &&
             H5Aread(at, mem, out) >= 0;
    H5Tclose(ft);
    H5Sclose(sp);
    H5Aclose(at);
    return ok ? 0 : -1;
}

/* Reading the index is reading a file from outside: every size is checked against the
 * fixed fields it lands in (at most 8 dimensions, names that fit, one element per scalar
 * attribute, metadata of one fixed-length string, shapes the stored bytes hold). */
static herr_t list_array(hid_t g, const char *name, const H5L_info_t *info, void *arg)
{
    lister *L = arg;
    mt__ckpt_index *ix = L->ix;
    if (strlen(name) >= sizeof ix->arrays[0].name) {
        snprintf(L->why, sizeof L->why, "an array name of %zu bytes (at most %zu)", strlen(name),
                 sizeof ix->arrays[0].name - 1);
        return -1;
    }
    if (MT__GROW(ix->arrays, ix->cap, (size_t)ix->n + 1)) {
        ix->oom = true;
        snprintf(L->why, sizeof L->why, "out of memory");
        return -1;
    }
    mt__ckpt_array *a = &ix->arrays[ix->n];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
    if (ds < 0) {
        snprintf(L->why, sizeof L->why, "%s is not an array (dataset)", name);
        return -1;
    }
    hid_t ft = H5Dget_type(ds), sp = H5Dget_space(ds);
    a->dtype = dtype_of(ft);
    a->ndim = H5Sget_simple_extent_ndims(sp);
    hsize_t d[8];
    int ok = a->dtype && a->ndim >= 1 && a->ndim <= 8; /* before dims land in d[8] */
    if (ok)
        H5Sget_simple_extent_dims(sp, d, NULL);
    uint64_t bytes = mt_dtype_size(a->dtype);
    for (int i = 0; ok && i < a->ndim; i++) {
        a->dims[i] = d[i];
        if (d[i] > INT64_MAX || (d[i] && bytes > UINT64_MAX / 2 / d[i])) {
            snprintf(L->why, sizeof L->why, "array %s: its shape does not fit in memory sizes",
                     name);
            ok = 0;
        }
        bytes *= d[i];
    }
    if (!ok && !L->why[0] && !a->dtype)
        snprintf(L->why, sizeof L->why, "array %s: not a numeric type", name);
    else if (!ok && !L->why[0])
        snprintf(L->why, sizeof L->why, "array %s has %d dimensions (1 to 8 are possible)", name,
                 a->ndim);
    /* checkpoints are written whole and uncompressed: a shape the stored bytes do not hold
     * is a lie (a 2 KB file claiming 2^40 rows), refused before anything reads it */
    if (ok && H5Dget_storage_size(ds) != bytes) {
        snprintf(L->why, sizeof L->why, "array %s claims %llu bytes but the file holds %llu for "
                 "it", name, (unsigned long long)bytes,
                 (unsigned long long)H5Dget_storage_size(ds));
        ok = 0;
    }
    hid_t at;
    if (ok && (read_scalar_attr(ds, "layout", H5T_NATIVE_INT, &a->layout) ||
               (a->layout != 0 && a->layout != 1))) {
        snprintf(L->why, sizeof L->why, "array %s: attribute layout is missing or not 0 or 1",
                 name);
        ok = 0;
    }
    if (ok && read_scalar_attr(ds, "crc32", H5T_NATIVE_UINT32, &a->crc)) {
        snprintf(L->why, sizeof L->why, "array %s: attribute crc32 is missing or not one number",
                 name);
        ok = 0;
    }
    if (ok && H5Aexists(ds, "offsets") > 0 && (at = H5Aopen(ds, "offsets", H5P_DEFAULT)) >= 0) {
        hid_t asp = H5Aget_space(at);
        hssize_t n = H5Sget_simple_extent_npoints(asp);
        if (n >= 2 && n <= 1 << 20 && (a->offsets = malloc((size_t)n * sizeof(int64_t)))) {
            a->noffsets = (int)n;
            ok = H5Aread(at, H5T_NATIVE_INT64, a->offsets) >= 0;
        } else {
            ok = 0;
            if (n >= 2 && n <= 1 << 20)
                ix->oom = true;
        }
        if (!ok)
            snprintf(L->why, sizeof L->why, "array %s: its offsets attribute is unreadable", name);
        H5Sclose(asp);
        H5Aclose(at);
    }
    if (ok && H5Aexists(ds, "check") > 0) {
        uint32_t want[NCHECKS] = {0}, have[NCHECKS];
        hid_t cat = H5Aopen(ds, "check", H5P_DEFAULT), csp = H5Aget_space(cat);
        ok = H5Sget_simple_extent_npoints(csp) == NCHECKS &&
             H5Aread(cat, H5T_NATIVE_UINT32, want) >= 0;
        H5Sclose(csp);
        H5Aclose(cat);
        if (!ok)
            snprintf(L->why, sizeof L->why, "array %s: its check attribute is unreadable", name);
        array_checks(a, have);
        for (int i = 0; ok && i < NCHECKS; i++)
            if (have[i] != want[i]) {
                snprintf(L->why, sizeof L->why, "array %s: the checksum of its %s does not "
                         "match (damaged metadata)", name, check_what[i]);
                ok = 0;
            }
        L->checked++;
    }
    if (ok)
        ok = plausible(a, L->why, sizeof L->why);
    H5Tclose(ft);
    H5Sclose(sp);
    H5Dclose(ds);
    if (!ok) {
        free(a->offsets);
        a->offsets = NULL;
        return -1;
    }
    ix->n++;
    return 0;
}

static herr_t list_meta(hid_t obj, const char *name, const H5A_info_t *info, void *arg)
{
    lister *L = arg;
    mt__ckpt_index *ix = L->ix;
    if (strncmp(name, "meta:", 5))
        return 0;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) {
        snprintf(L->why, sizeof L->why, "metadata %s cannot be opened", name + 5);
        return -1;
    }
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    size_t n = H5Tget_size(t);
    H5T_class_t cls = H5Tget_class(t);
    /* one fixed-length string, 64-bit integer or double: what mt__ckpt_set_meta_typed
     * writes, and all the buffer holds */
    int type = cls == H5T_INTEGER ? MT__META_I64 : cls == H5T_FLOAT ? MT__META_F64 : MT__META_STR;
    int scalar = H5Sget_simple_extent_npoints(sp) == 1;
    int one = scalar && (type == MT__META_STR ? cls == H5T_STRING && H5Tis_variable_str(t) == 0 &&
                                                    n > 0 && n <= (16u << 20)
                                              : n == 8);
    H5Sclose(sp);
    char *v = one ? calloc(type == MT__META_STR ? n + 1 : 32, 1) : NULL;
    size_t need = (size_t)ix->nmeta + 1;
    bool room = !MT__GROW(ix->meta_keys, ix->keys_cap, need) &&
                !MT__GROW(ix->meta_values, ix->values_cap, need) &&
                !MT__GROW(ix->meta_types, ix->types_cap, need);
    int64_t iv = 0;
    double dv = 0;
    herr_t got = !one ? -1
                 : type == MT__META_I64 ? H5Aread(a, H5T_NATIVE_INT64, &iv)
                 : type == MT__META_F64 ? H5Aread(a, H5T_NATIVE_DOUBLE, &dv)
                 : v ? H5Aread(a, t, v) : 0;
    if (got >= 0 && v && type == MT__META_I64)
        snprintf(v, 32, "%lld", (long long)iv);
    else if (got >= 0 && v && type == MT__META_F64)
        snprintf(v, 32, "%.17g", dv);
    int rc = -1;
    if (!one) {
        snprintf(L->why, sizeof L->why, "metadata %s: not one fixed-length string, 64-bit "
                 "integer or double", name + 5);
    } else if (!v || !room) {
        ix->oom = true;
        free(v);
    } else if (got < 0) {
        free(v);
        snprintf(L->why, sizeof L->why, "metadata %s is unreadable", name + 5);
    } else if (!(ix->meta_keys[ix->nmeta] = strdup(name + 5))) {
        ix->oom = true;
        free(v);
    } else {
        ix->meta_types[ix->nmeta] = type;
        ix->meta_values[ix->nmeta++] = v;
        rc = 0;
    }
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

/* CRC-32s of the array names and of the metadata, in the file's name order. */
static void index_checks(const mt__ckpt_index *ix, uint32_t c[2])
{
    uLong names = crc_u64(crc32(0, NULL, 0), (uint64_t)ix->n);
    uLong meta = crc_u64(crc32(0, NULL, 0), (uint64_t)ix->nmeta);
    for (int i = 0; i < ix->n; i++)
        names = crc_str(names, ix->arrays[i].name);
    for (int i = 0; i < ix->nmeta; i++) {
        meta = crc_str(crc_str(meta, ix->meta_keys[i]), ix->meta_values[i] ? ix->meta_values[i] : "");
        if (ix->meta_types && ix->meta_types[i] != MT__META_STR) /* strings: as before types */
            meta = crc_u64(meta, (uint64_t)ix->meta_types[i]);
    }
    c[0] = (uint32_t)names;
    c[1] = (uint32_t)meta;
}

/* With the HDF5 lock held: the arrays and metadata; unless `sealing`, the file-level
 * checks too. */
static int read_index(hid_t f, const char *path, mt__ckpt_index *ix, bool sealing)
{
    lister L = {.ix = ix};
    memset(ix, 0, sizeof *ix);
    hsize_t idx = 0, aidx = 0;
    herr_t e = H5Literate(f, H5_INDEX_NAME, H5_ITER_INC, &idx, list_array, &L);
    if (e >= 0)
        e = H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_INC, &aidx, list_meta, &L);
    if (e >= 0 && !sealing) {
        int format = 0;
        hid_t at = H5Aexists(f, "format") > 0 ? H5Aopen(f, "format", H5P_DEFAULT) : -1;
        if (at >= 0) {
            if (H5Aread(at, H5T_NATIVE_INT, &format) < 0)
                format = -1;
            H5Aclose(at);
        }
        uint32_t want[2] = {0}, have[2];
        if (format == 0 && L.checked > 0) {
            snprintf(L.why, sizeof L.why, "its arrays carry checks but the file has no format "
                     "attribute (damaged metadata)");
            e = -1;
        } else if (format != 0 && format != CKPT_FORMAT) {
            snprintf(L.why, sizeof L.why, "format %d is not one this version reads (%d)", format,
                     CKPT_FORMAT);
            e = -1;
        } else if (format == CKPT_FORMAT) {
            at = H5Aexists(f, "index_check") > 0 ? H5Aopen(f, "index_check", H5P_DEFAULT) : -1;
            if (at < 0 || H5Aread(at, H5T_NATIVE_UINT32, want) < 0) {
                snprintf(L.why, sizeof L.why, "its index_check attribute is missing or unreadable");
                e = -1;
            }
            if (at >= 0)
                H5Aclose(at);
            index_checks(ix, have);
            if (e >= 0 && L.checked != ix->n) {
                snprintf(L.why, sizeof L.why, "%d of its %d arrays have no check attribute "
                         "(damaged metadata)", ix->n - L.checked, ix->n);
                e = -1;
            } else if (e >= 0 && (have[0] != want[0] || have[1] != want[1])) {
                snprintf(L.why, sizeof L.why, "the checksum of its %s does not match (damaged "
                         "metadata: an array or key added, removed or changed)",
                         have[0] != want[0] ? "list of arrays" : "metadata");
                e = -1;
            }
        }
    }
    if (e < 0) {
        bool oom = ix->oom;
        mt__ckpt_index_free(ix);
        return oom ? mt__error(MT_ENOMEM, "%s: out of memory reading the checkpoint index", path)
                   : mt__error(MT_EFORMAT, "%s: corrupt checkpoint index: %s", path,
                               L.why[0] ? L.why : "unreadable");
    }
    return MT_OK;
}

int mt__ckpt_read_index(hid_t f, const char *path, mt__ckpt_index *ix)
{
    mt__h5_lock();
    int rc = read_index(f, path, ix, false);
    mt__h5_unlock();
    return rc;
}

int mt__ckpt_seal(hid_t f, const char *path)
{
    mt__ckpt_index ix;
    mt__h5_lock();
    int rc = read_index(f, path, &ix, true);
    if (!rc) {
        uint32_t c[2];
        int format = CKPT_FORMAT;
        index_checks(&ix, c);
        attr_write(f, "index_check", H5T_NATIVE_UINT32, 2, c);
        attr_write(f, "format", H5T_NATIVE_INT, 0, &format);
        mt__ckpt_index_free(&ix);
        if (H5Aexists(f, "format") <= 0 || H5Aexists(f, "index_check") <= 0)
            rc = mt__error(MT_EIO, "%s: cannot write the index checks", path);
    }
    mt__h5_unlock();
    return rc;
}

void mt__ckpt_index_free(mt__ckpt_index *ix)
{
    for (int i = 0; i < ix->n; i++)
        free(ix->arrays[i].offsets);
    free(ix->arrays);
    for (int i = 0; i < ix->nmeta; i++) {
        free(ix->meta_keys[i]);
        free(ix->meta_values[i]);
    }
    free(ix->meta_keys);
    free(ix->meta_values);
    free(ix->meta_types);
    memset(ix, 0, sizeof *ix);
}

int mt__ckpt_open_array(hid_t f, const char *name, hid_t *out)
{
    mt__h5_lock();
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    mt__h5_unlock();
    if (ds < 0)
        return mt__error(MT_EFORMAT, "checkpoint array %s: cannot open", name);
    *out = ds;
    return MT_OK;
}

void mt__ckpt_close_array(hid_t ds)
{
    mt__h5_lock();
    H5Dclose(ds);
    mt__h5_unlock();
}

/* ------------------------------------------------------------ writer and reader objects */

/* What the runtime holds while it writes or reads checkpoint.h5: the file and the one
 * array in progress, behind a type that carries no HDF5 handle across the layer.
 *
 * A writer has a thread of its own for rows handed over with mt__ckpt_writer_queue: it
 * writes them in order (HDF5 under the process-wide lock, then starts their writeback)
 * while the caller receives the next piece into another buffer, so the receive, the copy
 * into the page cache and the disk overlap instead of taking turns. Everything but the
 * queue (the file, the array) is touched by the caller only when nothing is queued. The
 * first failure stops the writing of later pieces (they are skipped, not read); its
 * message goes back to the caller's thread. Without a thread (it could not be started),
 * queued rows are written at once, with the same results. */
#define QUEUE_CAP 2

typedef struct {
    uint64_t row, nrows;
    const void *data;
} queued;

struct mt__ckpt_writer {
    char *path;
    hid_t f, ds;  /* the file; the array begun and not yet ended (or invalid) */
    mt_dtype t;
    int kick_fd;  /* the file, to start its writeback early (-1: none) */
    pthread_t thread;
    bool threaded, quit;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* a piece queued, written, or quit */
    queued q[QUEUE_CAP];
    int head, n;             /* n: queued and not yet written (the one being written too) */
    int status;              /* the first failure, its message in why */
    char why[MT__MSG_LEN];
};

struct mt__ckpt_reader {
    char *path;
    hid_t f, ds;  /* the file; the array selected (or invalid) */
    mt_dtype t;
};

int mt__ckpt_writer_create(const char *path, mt__ckpt_writer **out)
{
    *out = NULL;
    mt__ckpt_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = mt__strdup(path))) {
        free(w);
        return mt__error(MT_ENOMEM, "%s: out of memory creating the checkpoint file", path);
    }
    w->ds = H5I_INVALID_HID;
    int rc = mt__ckpt_create(path, &w->f);
    if (rc) {
        free(w->path);
        free(w);
        return rc;
    }
    w->kick_fd = open(path, O_RDONLY | O_CLOEXEC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    *out = w;
    return MT_OK;
}

int mt__ckpt_writer_begin(mt__ckpt_writer *w, const char *name, mt_dtype t, int ndim,
                          const uint64_t *dims)
{
    w->t = t;
    return mt__ckpt_add_array(w->f, name, t, ndim, dims, &w->ds);
}

/* One piece into the file; the disk starts on its pages at once, instead of all at the
 * final fsync. */
static int write_queued(mt__ckpt_writer *w, const queued *p)
{
    int rc;
    {
        MT__TRACE("checkpoint", "h5write");
        rc = mt__ckpt_rows(w->ds, w->t, p->row, p->nrows, (void *)p->data, true);
    }
    MT__TRACE("checkpoint", "writeback");
    if (!rc && w->kick_fd >= 0)
        sync_file_range(w->kick_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    return rc;
}

/* With w->mu held: the piece at the head is done (rc its outcome). */
static void piece_done(mt__ckpt_writer *w, int rc)
{
    if (rc && !w->status) {
        w->status = rc;
        snprintf(w->why, sizeof w->why, "%s", mt_last_error());
    }
    w->head = (w->head + 1) % QUEUE_CAP;
    w->n--;
    pthread_cond_broadcast(&w->cv);
}

static void *writer_thread(void *arg)
{
    mt__ckpt_writer *w = arg;
    mt__trace_thread("checkpoint writer");
    mt__h5_lock(); /* HDF5's error stack may be this thread's own: quiet it too */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    mt__h5_unlock();
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->n == 0 && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->n == 0)
            break;
        queued p = w->q[w->head];
        bool skip = w->status != MT_OK;
        pthread_mutex_unlock(&w->mu);
        int rc = skip ? MT_OK : write_queued(w, &p);
        pthread_mutex_lock(&w->mu);
        piece_done(w, rc);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int mt__ckpt_writer_queue(mt__ckpt_writer *w, uint64_t row, uint64_t nrows, const void *data)
{
    queued p = {row, nrows, data};
    pthread_mutex_lock(&w->mu);
    if (!w->threaded && !w->quit) /* quit: it could not be started; write at once */
        w->threaded = pthread_create(&w->thread, NULL, writer_thread, w) == 0;
    w->quit = !w->threaded;
    if (!w->threaded) {
        w->n++; /* as if queued: piece_done takes it back */
        int rc = w->status ? MT_OK : write_queued(w, &p);
        piece_done(w, rc);
        pthread_mutex_unlock(&w->mu);
        return MT_OK;
    }
    while (w->n == QUEUE_CAP)
        pthread_cond_wait(&w->cv, &w->mu);
    w->q[(w->head + w->n) % QUEUE_CAP] = p;
    w->n++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return MT_OK;
}

int mt__ckpt_writer_wait(mt__ckpt_writer *w, int pending)
{
    pthread_mutex_lock(&w->mu);
    while (w->n > pending)
        pthread_cond_wait(&w->cv, &w->mu);
    int rc = w->status;
    if (rc)
        mt__error_set_text(w->why);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int mt__ckpt_writer_rows(mt__ckpt_writer *w, uint64_t row, uint64_t nrows, const void *data)
{
    int rc = mt__ckpt_writer_queue(w, row, nrows, data);
    return rc ? rc : mt__ckpt_writer_wait(w, 0);
}

/* The thread ends once the queue is empty. */
static void writer_stop(mt__ckpt_writer *w)
{
    pthread_mutex_lock(&w->mu);
    bool join = w->threaded;
    w->quit = true;
    w->threaded = false;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (join)
        pthread_join(w->thread, NULL);
}

int mt__ckpt_writer_end(mt__ckpt_writer *w, int layout, uint32_t crc, const int64_t *offsets,
                        int noffsets)
{
    int rc = mt__ckpt_writer_wait(w, 0);
    if (w->ds < 0) /* never begun (an earlier failure) */
        return rc;
    hid_t ds = w->ds;
    w->ds = H5I_INVALID_HID;
    int e = mt__ckpt_finish_array(ds, layout, crc, offsets, noffsets);
    return rc ? rc : e;
}

int mt__ckpt_writer_meta(mt__ckpt_writer *w, const char *key, int type, const char *value)
{
    return mt__ckpt_set_meta_typed(w->f, key, type, value);
}

int mt__ckpt_writer_close(mt__ckpt_writer **wp, int status)
{
    mt__ckpt_writer *w = *wp;
    if (!w)
        return status;
    *wp = NULL;
    writer_stop(w);
    if (!status)
        status = mt__ckpt_writer_wait(w, 0);
    if (w->ds >= 0)
        mt__ckpt_close_array(w->ds);
    if (!status)
        status = mt__ckpt_seal(w->f, w->path);
    int e = mt__ckpt_close(w->f, w->path, true);
    if (!status)
        status = e;
    if (w->kick_fd >= 0)
        close(w->kick_fd);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w->path);
    free(w);
    return status;
}

int mt__ckpt_reader_open(const char *path, mt__ckpt_reader **out)
{
    *out = NULL;
    mt__ckpt_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = mt__strdup(path))) {
        free(r);
        return mt__error(MT_ENOMEM, "%s: out of memory opening the checkpoint file", path);
    }
    r->ds = H5I_INVALID_HID;
    int rc = mt__ckpt_open(path, &r->f);
    if (rc) {
        free(r->path);
        free(r);
        return rc;
    }
    *out = r;
    return MT_OK;
}

int mt__ckpt_reader_index(mt__ckpt_reader *r, mt__ckpt_index *ix)
{
    return mt__ckpt_read_index(r->f, r->path, ix);
}

int mt__ckpt_reader_array(mt__ckpt_reader *r, const char *name, mt_dtype t)
{
    if (r->ds >= 0)
        mt__ckpt_close_array(r->ds);
    r->ds = H5I_INVALID_HID;
    r->t = t;
    return mt__ckpt_open_array(r->f, name, &r->ds);
}

int mt__ckpt_reader_rows(mt__ckpt_reader *r, uint64_t row, uint64_t nrows, void *data)
{
    return mt__ckpt_rows(r->ds, r->t, row, nrows, data, false);
}

void mt__ckpt_reader_close(mt__ckpt_reader **rp)
{
    mt__ckpt_reader *r = *rp;
    if (!r)
        return;
    *rp = NULL;
    if (r->ds >= 0)
        mt__ckpt_close_array(r->ds);
    mt__ckpt_close(r->f, r->path, false);
    free(r->path);
    free(r);
}
