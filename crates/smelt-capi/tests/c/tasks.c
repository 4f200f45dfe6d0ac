/* tasks.c - fork-join tasks from C: fib with smelt_task_spawn/smelt_task_sync on 1, 2
 * and 16 workers against the sequential recursion, a parallel sum over an array split
 * in halves, and the misuse errors (NULL fn, spawn and sync outside a task, run inside
 * a task). Prints "tasks ok" and returns 0 when every check passed. */
#include "expect.h"
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    int n;
    uint64_t result;
} fib_arg;

static uint64_t fib_seq(int n) { return n < 2 ? (uint64_t)n : fib_seq(n - 1) + fib_seq(n - 2); }

static void fib_task(void *p) {
    fib_arg *a = p;
    if (a->n < 2) {
        a->result = (uint64_t)a->n;
        return;
    }
    fib_arg x = {a->n - 1, 0}, y = {a->n - 2, 0};
    EXPECT(smelt_task_spawn(fib_task, &x) == SMELT_OK);
    fib_task(&y);
    EXPECT(smelt_task_sync() == SMELT_OK);
    a->result = x.result + y.result;
}

typedef struct {
    const uint64_t *v;
    size_t lo, hi;
    uint64_t sum;
} sum_arg;

static void sum_task(void *p) {
    sum_arg *a = p;
    if (a->hi - a->lo <= 1000) {
        a->sum = 0;
        for (size_t i = a->lo; i < a->hi; i++) a->sum += a->v[i];
        return;
    }
    size_t mid = a->lo + (a->hi - a->lo) / 2;
    sum_arg l = {a->v, a->lo, mid, 0}, r = {a->v, mid, a->hi, 0};
    EXPECT(smelt_task_spawn(sum_task, &l) == SMELT_OK);
    EXPECT(smelt_task_spawn(sum_task, &r) == SMELT_OK);
    EXPECT(smelt_task_sync() == SMELT_OK);
    a->sum = l.sum + r.sum;
}

static int child_ran = 0;
static void child(void *p) { (void)p; child_ran = 1; }

/* Spawns a child and returns without syncing: the implicit sync waits for it. */
static void no_sync(void *p) {
    int *flag = p;
    EXPECT(smelt_task_spawn(child, NULL) == SMELT_OK);
    *flag = 1;
}

static void misuse_inside(void *p) {
    (void)p;
    EXPECT(smelt_task_run(1, child, NULL) == SMELT_ERR_INVALID_ARGUMENT);
    EXPECT(smelt_task_spawn(NULL, NULL) == SMELT_ERR_INVALID_ARGUMENT);
}

int main(void) {
    size_t counts[] = {1, 2, 16};
    for (int k = 0; k < 3; k++) {
        fib_arg a = {22, 0};
        EXPECT(smelt_task_run(counts[k], fib_task, &a) == SMELT_OK);
        EXPECT(a.result == fib_seq(22));
    }
    size_t n = 100000;
    uint64_t *v = malloc(n * sizeof *v);
    uint64_t want = 0;
    for (size_t i = 0; i < n; i++) {
        v[i] = i * 7 + 3;
        want += v[i];
    }
    sum_arg s = {v, 0, n, 0};
    EXPECT(smelt_task_run(0, sum_task, &s) == SMELT_OK);
    EXPECT(s.sum == want);
    free(v);
    int flag = 0;
    EXPECT(smelt_task_run(2, no_sync, &flag) == SMELT_OK);
    EXPECT(flag == 1 && child_ran == 1);
    /* Misuse: clear errors, never a crash. */
    EXPECT(smelt_task_run(2, NULL, NULL) == SMELT_ERR_INVALID_ARGUMENT);
    EXPECT(smelt_task_spawn(child, NULL) == SMELT_ERR_INVALID_ARGUMENT);
    EXPECT(smelt_task_sync() == SMELT_ERR_INVALID_ARGUMENT);
    EXPECT(smelt_task_run(100000, child, NULL) == SMELT_ERR_INVALID_ARGUMENT);
    EXPECT(smelt_task_run(2, misuse_inside, NULL) == SMELT_OK);
    if (failures == 0) printf("tasks ok\n");
    return failures != 0;
}
