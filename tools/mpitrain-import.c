/*
 * mpitrain-import -- convert IDX (MNIST, Fashion-MNIST; gzip or plain) and CSV files into
 * the HDF5 dataset layout mpitrain reads: a group of columns sharing their rows (x, y).
 */
#include <mpitrain.h>

#include "../io/io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
        "usage: mpitrain-import idx --images FILE [--labels FILE] --output OUT.h5 [--group /train]\n"
        "       mpitrain-import csv --input FILE --label COLUMN --output OUT.h5 [--group /train]\n"
        "       mpitrain-import fashion-mnist --output OUT.h5 [--dir DIR]\n"
        "\n"
        "Writes a group of columns that share their first dimension (rows): x (the images or\n"
        "the feature columns) and y (the labels). An existing OUT.h5 gets a new group; an\n"
        "existing group is refused.\n"
        "\n"
        "  idx            IDX files, gzip-compressed or plain (type u8, i8, i16, i32, f32, f64)\n"
        "  csv            a header row, then numeric fields; --label names the label column,\n"
        "                 every other column becomes a feature (x is rows x features, float32)\n"
        "  fashion-mnist  the four Fashion-MNIST files from DIR (default\n"
        "                 /usr/share/datasets/fashion-mnist, Debian package\n"
        "                 dataset-fashion-mnist) into /train (60000) and /test (10000)\n"
        "  --help         this text\n");
}

static const char *opt(int argc, char **argv, const char *name)
{
    size_t n = strlen(name);
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], name) && i + 1 < argc)
            return argv[i + 1];
        if (!strncmp(argv[i], name, n) && argv[i][n] == '=')
            return argv[i] + n + 1;
    }
    return NULL;
}

static int check_options(int argc, char **argv, const char *const *known)
{
    for (int i = 2; i < argc; i++) {
        if (strncmp(argv[i], "--", 2)) {
            fprintf(stderr, "mpitrain-import: unexpected argument '%s' (see --help)\n", argv[i]);
            return -1;
        }
        bool ok = false;
        for (const char *const *k = known; *k; k++) {
            size_t n = strlen(*k);
            if (!strncmp(argv[i], *k, n) && (argv[i][n] == '=' || !argv[i][n])) {
                ok = true;
                if (!argv[i][n])
                    i++;
            }
        }
        if (!ok) {
            fprintf(stderr, "mpitrain-import: unknown option '%s' (see --help)\n", argv[i]);
            return -1;
        }
    }
    return 0;
}

static int need(const char *v, const char *name)
{
    if (!v)
        fprintf(stderr, "mpitrain-import: %s is required (see --help)\n", name);
    return v ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
    const char *cmd = argv[1], *out = opt(argc, argv, "--output");
    const char *group = opt(argc, argv, "--group");
    mt__import_stats st = {0};
    int rc;
    if (!strcmp(cmd, "idx")) {
        static const char *const known[] = {"--images", "--labels", "--output", "--group", NULL};
        const char *images = opt(argc, argv, "--images");
        if (check_options(argc, argv, known) || need(images, "--images") || need(out, "--output"))
            return 2;
        rc = mt__import_idx(images, opt(argc, argv, "--labels"), out, group ? group : "/train", &st);
        if (!rc)
            printf("mpitrain-import: wrote %s\n", st.summary);
    } else if (!strcmp(cmd, "csv")) {
        static const char *const known[] = {"--input", "--label", "--output", "--group", NULL};
        const char *input = opt(argc, argv, "--input"), *label = opt(argc, argv, "--label");
        if (check_options(argc, argv, known) || need(input, "--input") || need(label, "--label") ||
            need(out, "--output"))
            return 2;
        rc = mt__import_csv(input, label, out, group ? group : "/train", &st);
        if (!rc)
            printf("mpitrain-import: wrote %s\n", st.summary);
    } else if (!strcmp(cmd, "fashion-mnist")) {
        static const char *const known[] = {"--dir", "--output", NULL};
        if (check_options(argc, argv, known) || need(out, "--output"))
            return 2;
        const char *dir = opt(argc, argv, "--dir");
        if (!dir)
            dir = "/usr/share/datasets/fashion-mnist";
        const char *parts[2][3] = {{"train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
                                   {"test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}};
        rc = MT_OK;
        for (int i = 0; i < 2 && !rc; i++) {
            char images[4096], labels[4096], grp[16];
            if (snprintf(images, sizeof images, "%s/%s", dir, parts[i][1]) >= (int)sizeof images ||
                snprintf(labels, sizeof labels, "%s/%s", dir, parts[i][2]) >= (int)sizeof labels) {
                fprintf(stderr, "mpitrain-import: --dir: the path is too long (%zu bytes)\n",
                        strlen(dir));
                return 2;
            }
            snprintf(grp, sizeof grp, "/%s", parts[i][0]);
            rc = mt__import_idx(images, labels, out, grp, &st);
            if (!rc)
                printf("mpitrain-import: wrote %s\n", st.summary);
        }
    } else {
        fprintf(stderr, "mpitrain-import: unknown command '%s' (idx, csv or fashion-mnist; "
                        "see --help)\n", cmd);
        return 2;
    }
    if (rc)
        fprintf(stderr, "mpitrain-import: %s\n", mt_last_error());
    return rc ? 1 : 0;
}
