/*
 * crc32.c -- CRC-32 (the gzip/zlib polynomial, zlib's conventions: start from 0, feed
 * pieces in order) at memory speed, for checkpoint arrays.
 *
 * Why not zlib's crc32: every byte of a checkpoint is summed on its way to disk and back,
 * and zlib 1.2's table-driven loop runs at 1.1-1.7 GB/s here, slower than the disk
 * (measured: a 512 MiB share took 0.35-0.49 s, as long as writing it). Intel's ISA-L
 * (Debian's libisal-dev) picks a folding implementation for the CPU at run time
 * (PCLMULQDQ, AVX-512 where present; plain C elsewhere): measured on 256 MiB here,
 * 10-27 GB/s against zlib's 3.2-5.3 GB/s. crc32_gzip_refl gives the number zlib gives,
 * so files written before stay valid; tests/test_io.c compares the two on every length
 * to 1 KiB, at every alignment, and in pieces.
 */
#include "common.h"

#include <isa-l/crc.h>
#include <stdint.h>

uint32_t mt__crc32(uint32_t crc, const void *data, size_t len)
{
    return crc32_gzip_refl(crc, data, (uint64_t)len);
}
