/*
 * runtime.h -- the runtime layer's internal interface: contexts, config resolution, the
 * trainer. Sits on collectives/ and io/.
 */
#ifndef MT_RUNTIME_H
#define MT_RUNTIME_H

#include "../collectives/collectives.h"

#define MT__NAME_MAX 200

typedef struct {
    char *name, *file, *group;
} mt__dataset_spec;

struct mt_context {
    mt__comm *comm;
    int verbose;
    mt_data_config data;          /* borrowed from the trainer */
    const mt__dataset_spec *specs; /* borrowed from the trainer */
    int nspecs;
    mt_shard **shards;            /* opened by mt_get_dataset_shard, closed with the context */
    int nshards;
    int world_size, world_rank;
    mt__topology topo;
    int num_cpus;
    int attempt;
    char *name;
    char *run_dir;
};

/* Collective over world: a context with a private communicator and the topology. */
int mt__context_create(mt_context **out, MPI_Comm world);
void mt__context_destroy(mt_context **c);
/* Make c the calling thread's current context (NULL to clear). */
void mt__context_set_current(mt_context *c);

/* Close every shard the context opened (collective: HDF5 closes files collectively). */
void mt__shards_close(mt_context *c);

/* CPUs in the calling thread's affinity mask (1 when it cannot be read). */
int mt__affinity_cpus(char *list, size_t list_len);

/* $HOME/mpitrain_results (or ./mpitrain_results without HOME). */
const char *mt__default_storage_path(void);

#endif
