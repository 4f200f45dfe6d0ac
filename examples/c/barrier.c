/* barrier.c - smelt from C: build Smelt's adaptive tree for this machine (or for a
 * model file) and run barriers on one pinned thread per member.
 *
 *   cc -I crates/smelt-capi/include examples/c/barrier.c -L target/release -lsmelt -o barrier
 *   LD_LIBRARY_PATH=target/release ./barrier [model.json] [rounds]
 *
 * Without a model file it uses a synthetic model of the CPUs 0..N-1 this process may
 * use (N = min(available CPUs, 4)). Prints "barrier ok: M members x R rounds". */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <smelt.h>
#include "example_check.h"

struct state {
    int rounds;
    atomic_int entered; /* members that entered round r, summed over rounds */
    atomic_int errors;
    int members;
};

static void body(smelt_member *m, void *arg) {
    struct state *s = arg;
    for (int r = 0; r < s->rounds; r++) {
        atomic_fetch_add(&s->entered, 1);
        if (smelt_barrier(m) != SMELT_OK) {
            atomic_fetch_add(&s->errors, 1);
            return;
        }
        /* After the barrier of round r, every member has entered round r. */
        if (atomic_load(&s->entered) < (r + 1) * s->members) atomic_fetch_add(&s->errors, 1);
    }
}

int main(int argc, char **argv) {
    smelt_model *model = NULL;
    if (argc > 1 && argv[1][0] != '\0') {
        CHECK(smelt_model_load(argv[1], &model));
    } else {
        CHECK(smelt_model_synthetic(1, 2, 50.0, 50.0, 1.0, &model));
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 1000;

    /* Use the model's CPUs that this process may run on (at most 4). */
    size_t n = 0;
    CHECK(smelt_model_ncpus(model, &n));
    uint32_t *all = malloc(n * sizeof *all);
    uint32_t cpus[4];
    size_t k = 0;
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    CHECK(smelt_model_cpus(model, all, n));
    for (size_t i = 0; i < n && k < 4; i++)
        if (CPU_ISSET(all[i], &set)) cpus[k++] = all[i];
    free(all);
    if (k == 0) {
        fprintf(stderr, "none of the model's CPUs is available\n");
        return 1;
    }

    smelt_tree *tree = NULL;
    CHECK(smelt_tree_build(model, "adaptive-shuffled", cpus, k, -1, &tree));
    double predicted = 0;
    CHECK(smelt_tree_predict(tree, "barrier", &predicted));
    smelt_group *group = NULL;
    CHECK(smelt_group_create(tree, &group));

    struct state s = {.rounds = rounds, .members = (int)k};
    atomic_init(&s.entered, 0);
    atomic_init(&s.errors, 0);
    CHECK(smelt_group_run(group, body, &s));

    CHECK(smelt_group_free(group));
    CHECK(smelt_tree_free(tree));
    CHECK(smelt_model_free(model));
    if (atomic_load(&s.errors) != 0) {
        fprintf(stderr, "barrier FAILED: %d errors\n", atomic_load(&s.errors));
        return 1;
    }
    printf("barrier ok: %zu members x %d rounds (predicted %.0f ns per barrier)\n", k, rounds, predicted);
    return 0;
}
