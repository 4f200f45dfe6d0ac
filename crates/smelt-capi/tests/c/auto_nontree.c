/* auto_nontree.c - a group over an `auto` tree (algo NULL) runs the allreduce by the
 * non-tree algorithm SMELT_TUNE picks (run by tests/c_examples.rs with
 * SMELT_TUNE='barrier=dissemination;allreduce=recursive-doubling'; prints
 * "auto_nontree ok" and exits 0 when every check holds).
 *
 *  1. 5 members (not a power of two): 100 rounds of barrier + allreduce of a sum,
 *     every result right;
 *  2. an allreduce with a non-commutative operator (a*10+b) gives every member the
 *     result in recursive doubling's order: rank 4 folds into rank 0, then (0,1),
 *     (2,3), then the two pairs: ((1·5)·2)·(3·4) = 1554 for values 1..5 — a tree
 *     would combine in another order;
 *  3. with the agreement step run by dissemination too: one member calls
 *     smelt_broadcast while the others call smelt_barrier; every member fails within
 *     seconds (not at the group's timeout) with the same message naming it. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <smelt.h>

#include "expect.h"

static void sum_u64(void *inout, const void *in, size_t len, void *arg) {
    (void)arg;
    uint64_t a, b;
    if (len != 8) return;
    memcpy(&a, inout, 8);
    memcpy(&b, in, 8);
    a += b;
    memcpy(inout, &a, 8);
}

static int bad_sums = 0;
static int errors = 0;

static void rounds(smelt_member *m, void *arg) {
    (void)arg;
    size_t i = 0;
    if (smelt_member_index(m, &i) != SMELT_OK) { errors++; return; }
    for (int r = 0; r < 100; r++) {
        uint64_t v = (uint64_t)i + 1 + (uint64_t)r;
        if (smelt_barrier(m) != SMELT_OK) { errors++; return; }
        if (smelt_allreduce(m, &v, 8, sum_u64, NULL) != SMELT_OK) { errors++; return; }
        if (v != 15 + 5 * (uint64_t)r) bad_sums++;
    }
}

static void shift_add(void *inout, const void *in, size_t len, void *arg) {
    (void)arg;
    uint64_t a, b;
    if (len != 8) return;
    memcpy(&a, inout, 8);
    memcpy(&b, in, 8);
    a = a * 10 + b;
    memcpy(inout, &a, 8);
}

static void ordered(smelt_member *m, void *arg) {
    (void)arg;
    size_t i = 0;
    if (smelt_member_index(m, &i) != SMELT_OK) { errors++; return; }
    uint64_t v = (uint64_t)i + 1;
    if (smelt_allreduce(m, &v, 8, shift_add, NULL) != SMELT_OK) { errors++; return; }
    if (v != 1554) {
        fprintf(stderr, "member %zu: %llu, not recursive doubling's 1554\n", i,
                (unsigned long long)v);
        bad_sums++;
    }
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t bad_member = 0;
static int rcs[5];
static char msgs[5][256];
static double took[5];

static void mismatch(smelt_member *m, void *arg) {
    (void)arg;
    size_t i = 0;
    if (smelt_member_index(m, &i) != SMELT_OK || i >= 5) { errors++; return; }
    uint64_t v = 7;
    double start = now();
    rcs[i] = i == bad_member ? smelt_broadcast(m, &v, 8) : smelt_barrier(m);
    took[i] = now() - start;
    snprintf(msgs[i], sizeof msgs[i], "%s", smelt_last_error());
}

int main(void) {
    smelt_model *m = NULL;
    smelt_tree *t = NULL;
    smelt_group *g = NULL;
    EXPECT(smelt_model_synthetic(1, 5, 50.0, 60.0, 1.0, &m) == SMELT_OK);
    EXPECT(smelt_tree_build(m, NULL, NULL, 0, -1, &t) == SMELT_OK);
    EXPECT(smelt_group_create(t, &g) == SMELT_OK);
    EXPECT(smelt_group_run(g, rounds, NULL) == SMELT_OK);
    EXPECT(bad_sums == 0 && errors == 0);
    EXPECT(smelt_group_free(g) == SMELT_OK);

    EXPECT(smelt_group_create(t, &g) == SMELT_OK);
    EXPECT(smelt_group_run(g, ordered, NULL) == SMELT_OK);
    EXPECT(bad_sums == 0 && errors == 0);
    EXPECT(smelt_group_free(g) == SMELT_OK);
    size_t root = 0;
    EXPECT(smelt_tree_root(t, &root) == SMELT_OK);
    bad_member = (root + 1) % 5;
    EXPECT(smelt_group_create(t, &g) == SMELT_OK);
    EXPECT(smelt_group_run(g, mismatch, NULL) == SMELT_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(smelt_last_error(), "smelt_broadcast called while the root called smelt_barrier") != NULL);
    for (int i = 0; i < 5; i++) {
        EXPECT(rcs[i] == SMELT_ERR_INVALID_ARGUMENT);
        EXPECT(strcmp(msgs[i], smelt_last_error()) == 0);
        EXPECT(took[i] < 5.0);
    }
    EXPECT(smelt_group_free(g) == SMELT_OK);
    EXPECT(smelt_tree_free(t) == SMELT_OK);
    EXPECT(smelt_model_free(m) == SMELT_OK);
    if (failures == 0) printf("auto_nontree ok\n");
    return failures != 0;
}
