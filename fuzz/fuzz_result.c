/*
 * fuzz_result.c -- mt_result_load and the resume-side readers of a run directory.
 *
 * The run directory is a good one (written once at start-up: run.json keeping one
 * checkpoint, params.json, two result.json rows, progress.csv, a real checkpoint.h5);
 * the first byte of the input picks which file the rest of the input replaces:
 *   0 run.json      (mt_result_load; mt__run_load and the pick of a valid checkpoint)
 *   1 result.json   (mt_result_load's last row; the superseding of rows on resume)
 *   2 params.json   (mt_result_load's checkpoint ranking)
 *   3 error.txt     (with status "failed")
 * and the file is put back afterwards. Every outcome must be MT_OK or an error with a
 * message; no crash, no leak.
 */
#include "driver.h"
#include "../io/h5.h"

#include <zlib.h>

static char run_dir[4200];
static const char *names[] = {"run.json", "result.json", "params.json", "error.txt"};

static const char run_json[] =
    "{\"status\": \"finished\", \"attempts\": 1, \"failures\": 0, \"next_checkpoint_index\": 2,"
    " \"training_iteration\": 2, \"time_total_s\": 0.5, \"checkpoints\": ["
    "{\"name\": \"checkpoint_000000\", \"index\": 0, \"training_iteration\": 1,"
    " \"metrics\": {\"loss\": 0.5, \"acc\": 0.75}},"
    "{\"name\": \"checkpoint_000001\", \"index\": 1, \"training_iteration\": 2,"
    " \"metrics\": {\"loss\": 0.25, \"acc\": 0.875}}],"
    " \"latest\": \"checkpoint_000001\"}\n";
static const char failed_json[] =
    "{\"status\": \"failed\", \"attempts\": 2, \"failures\": 2, \"next_checkpoint_index\": 0,"
    " \"training_iteration\": 0, \"time_total_s\": 0, \"checkpoints\": []}\n";
static const char params_json[] =
    "{\"scaling\": {\"num_workers\": 2, \"cpus_per_worker\": 1}, \"run\": {\"name\": \"r\","
    " \"storage_path\": \"/tmp\", \"verbose\": 1, \"checkpoint\": {\"num_to_keep\": 2,"
    " \"score_attribute\": \"acc\", \"score_order\": \"max\", \"frequency\": 1, \"at_end\": false},"
    " \"failure\": {\"max_failures\": 0, \"stall_warn_s\": 60, \"stall_timeout_s\": 0}},"
    " \"data\": {\"datasets_to_split\": null, \"memory_limit\": 0}}\n";
static const char result_json[] =
    "{\"loss\": 0.5, \"acc\": 0.75, \"training_iteration\": 1, \"timestamp\": 1700000000,"
    " \"time_this_iter_s\": 0.25, \"time_total_s\": 0.25, \"checkpoint_dir_name\": \"checkpoint_000000\","
    " \"per_rank\": {\"loss\": {\"min\": 0.5, \"mean\": 0.5, \"max\": 0.5}}}\n"
    "{\"loss\": 0.25, \"acc\": 0.875, \"training_iteration\": 2, \"timestamp\": 1700000001,"
    " \"time_this_iter_s\": 0.25, \"time_total_s\": 0.5, \"checkpoint_dir_name\": \"checkpoint_000001\"}\n";
static const char progress_csv[] =
    "loss,acc,training_iteration,timestamp,time_this_iter_s,time_total_s,checkpoint_dir_name\n"
    "0.5,0.75,1,1700000000,0.25,0.25,checkpoint_000000\n"
    "0.25,0.875,2,1700000001,0.25,0.5,checkpoint_000001\n";

static void put(const char *name, const char *text)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", run_dir, name);
    fuzz_write(path, text, strlen(text));
}

static void good_files(void)
{
    put("run.json", run_json);
    put("params.json", params_json);
    put("result.json", result_json);
    put("error.txt", "rank 1: out of memory\n");
}

/* One small real checkpoint, written by the library's own writer. */
static void write_checkpoint(const char *name)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", run_dir, name);
    if (mt__mkdirs(path))
        abort();
    snprintf(path, sizeof path, "%s/%s/checkpoint.h5", run_dir, name);
    hid_t f, ds;
    float w[6] = {1, 2, 3, 4, 5, 6};
    uint64_t dims[2] = {3, 2};
    uint32_t crc = (uint32_t)crc32(crc32(0, NULL, 0), (const Bytef *)w, sizeof w);
    if (mt__ckpt_create(path, &f) || mt__ckpt_add_array(f, "w", MT_F32, 2, dims, &ds) ||
        mt__ckpt_rows(ds, MT_F32, 0, 3, w, true) || mt__ckpt_finish_array(ds, MT_REPLICATED, crc, NULL, 0) ||
        mt__ckpt_set_meta(f, "epoch", "1") || mt__ckpt_close(f, path, false)) {
        fprintf(stderr, "%s\n", mt_last_error());
        exit(2);
    }
}

static void fuzz_setup(const char *scratch)
{
    snprintf(run_dir, sizeof run_dir, "%s/run", scratch);
    write_checkpoint("checkpoint_000000");
    write_checkpoint("checkpoint_000001");
    put("progress.csv", progress_csv);
    good_files();
}

static void check(int rc)
{
    if (rc && !*mt_last_error())
        abort(); /* an error without a message */
}

static void fuzz_one(const uint8_t *data, size_t len)
{
    if (len < 1)
        return;
    int mode = data[0] % 4;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", run_dir, names[mode]);
    if (mode == 3)
        put("run.json", failed_json);
    fuzz_write(path, data + 1, len - 1);

    mt_result *r = NULL;
    int rc = mt_result_load(run_dir, &r);
    check(rc);
    if (rc && r)
        abort(); /* an error leaves nothing to free */
    if (r) {
        (void)mt_result_error(r);
        for (size_t i = 0; i < mt_result_num_best(r); i++) {
            const mt_metrics *m = NULL;
            const mt_checkpoint *ck = mt_result_best(r, i, &m);
            if (!ck || !m)
                abort();
            for (size_t k = 0; k < mt_metrics_count(m); k++)
                (void)mt_metrics_key(m, k);
        }
        mt_result_free(&r);
    }
    if (mode == 0) { /* what a resume does with run.json */
        mt__rundir run = {0};
        rc = mt__run_load(&run, run_dir);
        check(rc);
        int k;
        if (!rc)
            mt__checkpoint_pick_valid(&run, INT64_MAX, &k);
        mt__run_free(&run);
    } else if (mode == 1) {
        mt__rundir run = {0};
        run.dir = mt__strdup(run_dir);
        check(mt__run_supersede(&run, 1));
        mt__run_free(&run);
        snprintf(path, sizeof path, "%s/result.superseded.json", run_dir);
        unlink(path);
    }
    good_files();
}
