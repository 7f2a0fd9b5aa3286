/*
 * fuzz_ckpt.c -- the checkpoint reader on a hostile checkpoint.h5.
 *
 * The input is the file itself. It goes through what restore does with a stored
 * checkpoint: rank 0's pick of the newest valid checkpoint (open, index, read every
 * array, checksums), the index and its description for the trip to the other ranks, and
 * mt_checkpoint_dims / mt_checkpoint_get / mt_checkpoint_get_meta outside fit. Every
 * outcome must be MT_OK or an error with a message; no crash, no leak.
 */
#include "driver.h"

static char dir[4200], h5[4300];

static void fuzz_setup(const char *scratch)
{
    snprintf(dir, sizeof dir, "%s/checkpoint_000000", scratch);
    snprintf(h5, sizeof h5, "%s/checkpoint.h5", dir);
    if (mt__mkdirs(dir)) {
        fprintf(stderr, "%s\n", mt_last_error());
        exit(2);
    }
}

static void pick(const char *scratch)
{
    mt__rundir run = {0};
    run.dir = mt__strdup(scratch);
    run.kept = calloc(1, sizeof *run.kept);
    if (!run.dir || !run.kept)
        abort();
    snprintf(run.kept[0].name, sizeof run.kept[0].name, "checkpoint_000000");
    run.kept[0].metrics = mt_metrics_new();
    run.nkept = 1;
    int k;
    mt__checkpoint_pick_valid(&run, INT64_MAX, &k);
    mt__run_free(&run);
}

static void read_all(const mt_checkpoint *ck)
{
    for (size_t i = 0; i < mt_checkpoint_num_arrays(ck); i++) {
        const char *name = mt_checkpoint_array_name(ck, i);
        int nd;
        size_t dims[8], n = 1;
        if (mt_checkpoint_dims(ck, name, &nd, dims))
            abort(); /* it is in the index */
        for (int d = 0; d < nd; d++)
            n = dims[d] && n > SIZE_MAX / dims[d] ? SIZE_MAX : n * dims[d];
        if (n > (1u << 22))
            continue; /* the reader streams; the harness need not hold a huge array */
        double *out = malloc(n ? n * sizeof *out : 1);
        if (!out)
            abort();
        int rc = mt_checkpoint_get(ck, name, MT_F64, out, n);
        if (rc && !*mt_last_error())
            abort();
        free(out);
    }
    for (size_t i = 0; i < mt_checkpoint_num_meta(ck); i++)
        (void)mt_checkpoint_get_meta(ck, mt_checkpoint_meta_key(ck, i));
}

static void fuzz_one(const uint8_t *data, size_t len)
{
    fuzz_write(h5, data, len);
    pick(fuzz_scratch);
    mt_checkpoint *ck = NULL;
    if (mt__checkpoint_open_stored(dir, &ck) == MT_OK) {
        read_all(ck);
        char *text = mt__checkpoint_describe(ck);
        mt_checkpoint *copy = NULL;
        if (text && mt__checkpoint_from_description(text, &copy) == MT_OK)
            mt_checkpoint_free(&copy);
        free(text);
        mt_checkpoint_free(&ck);
    } else if (ck)
        abort(); /* an error leaves nothing to free */
    unlink(h5);
}
