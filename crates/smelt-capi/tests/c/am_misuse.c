/* am_misuse.c - active-message mistakes are errors, not crashes: NULLs, handler 0,
 * 9 words, unknown destinations, a token used twice, after its handler returned, or
 * made up, a reply from a reply's handler, a handler calling its own endpoint. */
#include <smelt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "expect.h"

#define IS(call, code) EXPECT((call) == (code))

enum { ECHO = 1, GOT = 2 };

static const smelt_am_token *kept;
static int seen_twice, seen_in_reply, seen_busy;
static smelt_am_endpoint *self_ep;

static void on_echo(void *user, const smelt_am_token *t, size_t from, const uint64_t *args,
                    size_t nargs, const void *data, size_t len) {
    (void)user; (void)from; (void)args; (void)nargs; (void)data; (void)len;
    kept = t;
    if (smelt_am_reply(t, GOT, NULL, 0) != SMELT_OK) exit(10);
    seen_twice = smelt_am_reply(t, GOT, NULL, 0);
    seen_busy = smelt_am_poll(self_ep, NULL);
}

static void on_got(void *user, const smelt_am_token *t, size_t from, const uint64_t *args,
                   size_t nargs, const void *data, size_t len) {
    (void)user; (void)from; (void)args; (void)nargs; (void)data; (void)len;
    seen_in_reply = smelt_am_reply(t, GOT, NULL, 0);
}

int main(void) {
    smelt_am_endpoint *eps[2];
    IS(smelt_am_threads(0, 0, eps), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_am_threads(2, 1, eps), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_am_threads(2, 0, NULL), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_am_threads(2, 0, eps), SMELT_OK);
    self_ep = eps[1];
    IS(smelt_am_register(eps[1], 0, on_echo, NULL), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_am_register(eps[1], ECHO, NULL, NULL), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_am_register(eps[1], ECHO, on_echo, NULL), SMELT_OK);
    IS(smelt_am_register(eps[0], GOT, on_got, NULL), SMELT_OK);
    uint64_t w[9] = {0};
    IS(smelt_am_request(eps[0], 1, ECHO, w, 9), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_am_request(eps[0], 7, ECHO, w, 1), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_am_request(eps[0], 1, 0, w, 1), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_am_request(eps[0], 1, ECHO, NULL, 2), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_am_request(eps[0], 1, ECHO, w, 2), SMELT_OK);
    size_t n = 0;
    while (n == 0) IS(smelt_am_poll(eps[1], &n), SMELT_OK);
    IS(seen_twice, SMELT_ERR_INVALID_ARGUMENT);
    IS(seen_busy, SMELT_ERR_BUSY);
    IS(smelt_am_quiesce(eps[0], 10000), SMELT_OK);
    IS(seen_in_reply, SMELT_ERR_INVALID_ARGUMENT);
    /* The token of a handler that returned, and a made-up one. */
    IS(smelt_am_reply(kept, GOT, NULL, 0), SMELT_ERR_INVALID_HANDLE);
    IS(smelt_am_reply((const smelt_am_token *)(uintptr_t)12345, GOT, NULL, 0),
       SMELT_ERR_INVALID_HANDLE);
    /* NULL is an argument mistake, as for every handle. */
    IS(smelt_am_reply(NULL, GOT, NULL, 0), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_am_reply_bulk(NULL, GOT, NULL, 0, NULL, 0), SMELT_ERR_INVALID_ARGUMENT);
    /* Nothing comes: a bounded wait. */
    IS(smelt_am_wait(eps[0], 20, NULL), SMELT_ERR_TIMEOUT);
    IS(smelt_am_endpoint_free(eps[1]), SMELT_OK);
    IS(smelt_am_endpoint_free(eps[1]), SMELT_ERR_INVALID_HANDLE);
    /* The other side left: reported once, then requests to it fail. */
    IS(smelt_am_poll(eps[0], NULL), SMELT_ERR_RUNTIME);
    IS(smelt_am_request(eps[0], 1, ECHO, w, 1), SMELT_ERR_RUNTIME);
    IS(smelt_am_endpoint_free(eps[0]), SMELT_OK);
    if (failures) return 1;
    printf("am misuse ok\n");
    return 0;
}
