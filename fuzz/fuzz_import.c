/*
 * fuzz_import.c -- the importers (io/import.c) on hostile input.
 *
 * The first byte picks the case:
 *   0  an IDX file (gzip or plain: gzopen reads both), images only
 *   1  two IDX files, images then labels: the next two bytes (big endian) are the
 *      length of the images part, the rest is the labels file
 *   2  a CSV file whose label column is "label"
 * Whatever the input, the importer must return MT_OK or an error with a message, write
 * nothing on error, and neither crash nor leak.
 */
#include "driver.h"

static char images[4200], labels[4200], csv[4200], out[4200];

static void fuzz_setup(const char *scratch)
{
    snprintf(images, sizeof images, "%s/images.idx", scratch);
    snprintf(labels, sizeof labels, "%s/labels.idx", scratch);
    snprintf(csv, sizeof csv, "%s/table.csv", scratch);
    snprintf(out, sizeof out, "%s/out.h5", scratch);
}

static void fuzz_one(const uint8_t *data, size_t len)
{
    if (len < 1)
        return;
    int mode = data[0] % 3, rc;
    data++, len--;
    mt__import_stats st;
    if (mode == 0) {
        fuzz_write(images, data, len);
        rc = mt__import_idx(images, NULL, out, "/train", &st);
    } else if (mode == 1) {
        if (len < 2)
            return;
        size_t n = (size_t)data[0] << 8 | data[1];
        data += 2, len -= 2;
        if (n > len)
            n = len;
        fuzz_write(images, data, n);
        fuzz_write(labels, data + n, len - n);
        rc = mt__import_idx(images, labels, out, "/train", &st);
    } else {
        fuzz_write(csv, data, len);
        rc = mt__import_csv(csv, "label", out, "/train", &st);
    }
    if (rc && !*mt_last_error())
        abort(); /* an error without a message */
    if (rc && access(out, F_OK) == 0)
        abort(); /* "nothing is written unless the whole input is good" */
    unlink(out);
}
