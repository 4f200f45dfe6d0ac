/* bcast_reduce.c - smelt from C: broadcast a buffer from the root, then reduce one
 * integer per member with a C function as the operator, over Smelt's adaptive tree.
 * Members are attached from threads the program creates itself (smelt_group_attach),
 * the alternative to smelt_group_run.
 *
 *   cc -I crates/smelt-capi/include examples/c/bcast_reduce.c -L target/release -lsmelt -lpthread -o bcast_reduce
 *   LD_LIBRARY_PATH=target/release ./bcast_reduce [model.json]
 *
 * Prints "broadcast ok" and "reduce ok: sum = S" (S = sum of the member indices + 1). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <smelt.h>
#include "example_check.h"

#define MSG "hello from the root"

/* The reduction operator: element-wise sum of int64 values. */
static void sum_i64(void *inout, const void *in, size_t len, void *arg) {
    (void)arg;
    int64_t *a = inout;
    const int64_t *b = in;
    for (size_t i = 0; i < len / sizeof(int64_t); i++) a[i] += b[i];
}

struct worker {
    smelt_group *group;
    size_t index;
    int ok;
    int64_t result; /* at the root */
    int is_root;
};

static void *work(void *p) {
    struct worker *w = p;
    smelt_member *m = NULL;
    CHECK(smelt_group_attach(w->group, w->index, &m));
    CHECK(smelt_member_is_root(m, &w->is_root));
    char buf[64];
    memset(buf, 0, sizeof buf);
    if (w->is_root) strcpy(buf, MSG);
    CHECK(smelt_broadcast(m, buf, sizeof buf));
    w->ok = strcmp(buf, MSG) == 0;
    int64_t v = (int64_t)w->index + 1;
    CHECK(smelt_reduce(m, &v, sizeof v, sum_i64, NULL));
    w->result = v;
    CHECK(smelt_member_detach(m));
    return NULL;
}

int main(int argc, char **argv) {
    smelt_model *model = NULL;
    if (argc > 1) {
        CHECK(smelt_model_load(argv[1], &model));
    } else {
        CHECK(smelt_model_synthetic(1, 2, 50.0, 50.0, 1.0, &model));
    }
    size_t n = 0;
    CHECK(smelt_model_ncpus(model, &n));
    uint32_t *all = malloc(n * sizeof *all);
    uint32_t *cpus = malloc(n * sizeof *cpus);
    CHECK(smelt_model_cpus(model, all, n));
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (CPU_ISSET(all[i], &set)) cpus[k++] = all[i];
    if (k == 0) {
        fprintf(stderr, "none of the model's CPUs is available\n");
        return 1;
    }
    smelt_tree *tree = NULL;
    CHECK(smelt_tree_build(model, NULL, cpus, k, -1, &tree));
    smelt_group *group = NULL;
    CHECK(smelt_group_create(tree, &group));

    struct worker *ws = calloc(k, sizeof *ws);
    pthread_t *th = calloc(k, sizeof *th);
    for (size_t i = 0; i < k; i++) {
        ws[i].group = group;
        ws[i].index = i;
        pthread_create(&th[i], NULL, work, &ws[i]);
    }
    int64_t expect = (int64_t)(k * (k + 1) / 2), sum = -1;
    int all_ok = 1;
    for (size_t i = 0; i < k; i++) {
        pthread_join(th[i], NULL);
        all_ok &= ws[i].ok;
        if (ws[i].is_root) sum = ws[i].result;
    }
    CHECK(smelt_group_free(group));
    CHECK(smelt_tree_free(tree));
    CHECK(smelt_model_free(model));
    free(all);
    free(cpus);
    free(ws);
    free(th);
    if (!all_ok) {
        fprintf(stderr, "broadcast FAILED\n");
        return 1;
    }
    printf("broadcast ok: %zu members\n", k);
    if (sum != expect) {
        fprintf(stderr, "reduce FAILED: sum = %lld, expected %lld\n", (long long)sum, (long long)expect);
        return 1;
    }
    printf("reduce ok: sum = %lld\n", (long long)sum);
    return 0;
}
