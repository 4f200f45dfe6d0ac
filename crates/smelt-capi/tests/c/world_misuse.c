/* world_misuse.c - world mistakes are errors, not crashes or hangs: no launcher's
 * environment, garbage in it, NULLs, bad sizes, freed and wrong-kind handles, members
 * that make different services in the same place, bad tree names, members released
 * with the wrong call; and services made from a world outlive its handle.
 *
 *   world_misuse            the checks above (threads), "world misuse ok" at the end
 *   world_misuse mismatch   under `smelt launch -n 2`: rank 0 makes an endpoint where
 *                           rank 1 makes a global array; each prints "mismatch: <status>
 *                           <message>" (the member that comes second fails naming the
 *                           mismatch; the first may fail too, its peer gone)
 *   world_misuse mpi-bad-len  under mpirun (built with -DSMELT_TEST_MPI): member 1
 *                           broadcasts 16 bytes where the others broadcast 8; every
 *                           member prints "bad len: <status> <message>" and exits 0 when
 *                           its call failed with SMELT_ERR_INVALID_ARGUMENT */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#ifdef SMELT_TEST_MPI
#include <mpi.h>
#endif
#include <smelt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"

#define IS(call, code) EXPECT((call) == (code))
#define SAYS(text) EXPECT(strstr(smelt_last_error(), (text)) != NULL)

enum { ECHO = 1, ECHOED = 2 };

static uint64_t echoed;

static void on_echo(void *user, const smelt_am_token *token, size_t from, const uint64_t *args,
                    size_t nargs, const void *data, size_t len) {
    (void)user; (void)from; (void)nargs; (void)data; (void)len;
    smelt_am_reply(token, ECHOED, args, 1);
}

static void on_echoed(void *user, const smelt_am_token *token, size_t from,
                      const uint64_t *args, size_t nargs, const void *data, size_t len) {
    (void)user; (void)token; (void)from; (void)nargs; (void)data; (void)len;
    echoed = args[0];
}

static void on_item(void *user, size_t me, const void *item, size_t size) {
    (void)user; (void)me; (void)item; (void)size;
}

static int mismatch(void) {
    smelt_world *w;
    size_t me = 0;
    if (smelt_world_from_env(&w) != SMELT_OK || smelt_world_rank(w, &me) != SMELT_OK) {
        fprintf(stderr, "no world: %s\n", smelt_last_error());
        return 1;
    }
    int rc;
    if (me == 0) {
        smelt_am_endpoint *ep;
        rc = smelt_world_endpoint(w, 0, &ep);
    } else {
        smelt_global *a;
        rc = smelt_world_global(w, SMELT_GLOBAL_U64, 1000, 3000, &a);
    }
    printf("mismatch: %d %s\n", rc, smelt_last_error());
    smelt_world_free(w);
    return 0;
}

#ifdef SMELT_TEST_MPI
static int bad_len(int argc, char **argv) {
    smelt_world *w;
    smelt_member *m;
    size_t me = 0;
    char buf[16] = "fifteen bytes..";
    MPI_Init(&argc, &argv);
    if (smelt_world_from_mpi(MPI_COMM_WORLD, &w) != SMELT_OK ||
        smelt_world_rank(w, &me) != SMELT_OK ||
        smelt_world_collectives(w, NULL, &m) != SMELT_OK) {
        fprintf(stderr, "no world: %s\n", smelt_last_error());
        return 1;
    }
    int rc = smelt_broadcast(m, buf, me == 1 ? 16 : 8);
    printf("bad len: %d %s\n", rc, smelt_last_error());
    smelt_member_free(m);
    smelt_world_free(w);
    MPI_Finalize();
    return rc == SMELT_ERR_INVALID_ARGUMENT ? 0 : 1;
}
#endif

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "mismatch") == 0) return mismatch();
#ifdef SMELT_TEST_MPI
    if (argc > 1 && strcmp(argv[1], "mpi-bad-len") == 0) return bad_len(argc, argv);
#endif

    /* No launcher: the variable is named. Garbage in it: that variable is named. */
    smelt_world *w = NULL, *ws[4] = {NULL, NULL, NULL, NULL};
    IS(smelt_world_from_env(&w), SMELT_ERR_RUNTIME);
    SAYS("SMELT_JOB");
    setenv("SMELT_JOB", "/nonexistent/smelt-job", 1);
    setenv("SMELT_JOB_KEY", "00112233445566778899aabbccddeeff", 1);
    setenv("SMELT_RANK", "first", 1);
    IS(smelt_world_from_env(&w), SMELT_ERR_RUNTIME);
    SAYS("SMELT_RANK");
    setenv("SMELT_RANK", "0", 1);
    IS(smelt_world_from_env(&w), SMELT_ERR_RUNTIME);
    SAYS("SMELT_JOB");
    unsetenv("SMELT_JOB");
    unsetenv("SMELT_JOB_KEY");
    unsetenv("SMELT_RANK");
    IS(smelt_world_from_env(NULL), SMELT_ERR_INVALID_ARGUMENT);

    /* MPI: a clear error, whether or not this build has MPI (MPI is not initialised). */
    EXPECT(smelt_world_from_mpi_f(0, &w) != SMELT_OK);
    EXPECT(strlen(smelt_last_error()) > 0);

    /* Sizes and NULLs. */
    IS(smelt_world_threads(0, ws), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_world_threads(5000, ws), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_world_threads(2, NULL), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_world_run(2, NULL, NULL), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_world_run(0, NULL, NULL), SMELT_ERR_INVALID_ARGUMENT);

    /* A world of 2 threads: who is who. */
    IS(smelt_world_threads(2, ws), SMELT_OK);
    size_t r = 9, n = 9, node = 9, nodes = 9;
    int64_t cpu = -9;
    IS(smelt_world_rank(ws[1], &r), SMELT_OK);
    IS(smelt_world_size(ws[1], &n), SMELT_OK);
    IS(smelt_world_node(ws[1], &node, &nodes), SMELT_OK);
    IS(smelt_world_node(ws[1], &node, NULL), SMELT_OK);
    IS(smelt_world_cpu(ws[1], &cpu), SMELT_OK);
    EXPECT(r == 1 && n == 2 && node == 0 && nodes == 1 && cpu >= -1);
    IS(smelt_world_rank(ws[0], NULL), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_world_rank(NULL, &r), SMELT_ERR_INVALID_ARGUMENT);

    /* Services: bad arguments are errors. */
    smelt_member *m[2];
    IS(smelt_world_collectives(ws[0], "spiral", &m[0]), SMELT_ERR_INVALID_ARGUMENT);
    SAYS("spiral");
    IS(smelt_world_collectives(ws[0], "binary", NULL), SMELT_ERR_INVALID_ARGUMENT);
    smelt_agg_worker *wk[2];
    IS(smelt_world_agg(ws[0], 0, SMELT_AGG_WW, 8, 0, 0, 0, on_item, NULL, wk),
       SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_world_agg(ws[0], 1, SMELT_AGG_WW, 8, 0, 0, 0, NULL, NULL, wk),
       SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_world_agg(ws[0], 1, 99, 8, 0, 0, 0, on_item, NULL, wk), SMELT_ERR_INVALID_ARGUMENT);
    smelt_global *g;
    IS(smelt_world_global(ws[0], 9, 10, 0, &g), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_world_global(ws[0], SMELT_GLOBAL_U64, 10, 0, NULL), SMELT_ERR_INVALID_ARGUMENT);
    smelt_am_endpoint *ep[2];
    IS(smelt_world_endpoint(ws[0], 0, NULL), SMELT_ERR_INVALID_ARGUMENT);

    /* Members of threads make their parts without meeting: one thread makes both. A
     * member released the wrong way is refused and stays usable. */
    IS(smelt_world_collectives(ws[0], "binary", &m[0]), SMELT_OK);
    IS(smelt_world_collectives(ws[1], "binary", &m[1]), SMELT_OK);
    size_t idx = 9, size = 9;
    IS(smelt_member_index(m[1], &idx), SMELT_OK);
    IS(smelt_member_size(m[1], &size), SMELT_OK);
    EXPECT(idx == 1 && size == 2);
    IS(smelt_job_leave(m[0]), SMELT_ERR_INVALID_ARGUMENT);
    SAYS("smelt_member_free");
    IS(smelt_member_detach(m[0]), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_member_free(m[0]), SMELT_OK);
    IS(smelt_member_free(m[0]), SMELT_ERR_INVALID_HANDLE);
    IS(smelt_member_free(m[1]), SMELT_OK);
    IS(smelt_member_free(NULL), SMELT_OK);

    /* Endpoints outlive their worlds' handles. */
    IS(smelt_world_endpoint(ws[0], 0, &ep[0]), SMELT_OK);
    IS(smelt_world_endpoint(ws[1], 0, &ep[1]), SMELT_OK);
    IS(smelt_am_register(ep[1], ECHO, on_echo, NULL), SMELT_OK);
    IS(smelt_am_register(ep[0], ECHOED, on_echoed, NULL), SMELT_OK);

    /* A member that makes something else where the other made an endpoint. */
    IS(smelt_world_global(ws[0], SMELT_GLOBAL_U64, 10, 0, &g), SMELT_OK);
    IS(smelt_world_agg(ws[1], 1, SMELT_AGG_WW, 8, 0, 0, 0, on_item, NULL, wk),
       SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_global_free(g), SMELT_OK);

    /* Freed worlds: every call is an error; double free too; a handle of another kind. */
    IS(smelt_world_free(ws[0]), SMELT_OK);
    IS(smelt_world_free(ws[1]), SMELT_OK);
    IS(smelt_world_free(ws[1]), SMELT_ERR_INVALID_HANDLE);
    IS(smelt_world_rank(ws[0], &r), SMELT_ERR_INVALID_HANDLE);
    SAYS("already freed");
    IS(smelt_world_endpoint(ws[0], 0, &ep[0]), SMELT_ERR_INVALID_HANDLE);
    IS(smelt_world_free(NULL), SMELT_OK);
    smelt_model *model;
    IS(smelt_model_synthetic(1, 2, 1.0, 1.0, 1.0, &model), SMELT_OK);
    IS(smelt_world_size((smelt_world *)model, &n), SMELT_ERR_INVALID_HANDLE);
    SAYS("model handle");
    IS(smelt_world_free((smelt_world *)model), SMELT_ERR_INVALID_HANDLE);
    IS(smelt_model_free(model), SMELT_OK);

    /* ... and the endpoints still talk. */
    uint64_t v = 77;
    IS(smelt_am_request(ep[0], 1, ECHO, &v, 1), SMELT_OK);
    for (int i = 0; i < 1000 && echoed != 77; i++) {
        IS(smelt_am_poll(ep[1], NULL), SMELT_OK);
        IS(smelt_am_poll(ep[0], NULL), SMELT_OK);
    }
    EXPECT(echoed == 77);
    IS(smelt_am_quiesce(ep[0], 5000), SMELT_OK);
    IS(smelt_am_endpoint_free(ep[0]), SMELT_OK);
    IS(smelt_am_endpoint_free(ep[1]), SMELT_OK);

    if (failures) return 1;
    printf("world misuse ok\n");
    return 0;
}
