/*
 * ckpt_seal.c -- the sealed header of checkpoint.h5: the checksum over every byte HDF5
 * parses, written when a file this process wrote is closed and checked before HDF5 opens
 * a file (ckpt.c calls both).
 *
 * The index checks (ckpt_index.c) run after HDF5 has parsed the file, and HDF5 1.10 does not survive every
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ------------------------------------------------------------ the checksum header */

#define UB_SIZE MT__CKPT_UB_SIZE
#define HDR_FIXED 32u
#define MAX_REGIONS ((UB_SIZE - HDR_FIXED) / 16u)
static const unsigned char ub_magic[8] = {0211, 'M', 'T', 'C', 'K', '\r', '\n', 032};
static const unsigned char h5_magic[8] = {0211, 'H', 'D', 'F', '\r', '\n', 032, '\n'};

typedef mt__ckpt_region region;
typedef mt__ckpt_regions regions;

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
int mt__ckpt_collect_regions(hid_t f, regions *R)
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
int mt__ckpt_write_header(const char *path, regions *R, bool sync)
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
int mt__ckpt_verify(const char *path)
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
    int oom = f >= 0 && ub == UB_SIZE ? mt__ckpt_collect_regions(f, &R) : 0;
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
    int rc = mt__ckpt_write_header(path, &R, false);
    free(R.r);
    return rc;
}
