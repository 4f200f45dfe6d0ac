/* global_misuse.c - global-array mistakes are errors, not crashes: a bad element type,
 * length or member count, NULLs, an entry point of the wrong element type, indices out
 * of range, a bad accumulate operation, a freed handle, a handle of another kind. */
#include <smelt.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "expect.h"

#define IS(call, code) EXPECT((call) == (code))

int main(void) {
    smelt_global *a, *f;
    IS(smelt_global_create(0, 10, 2, 0, &a), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_global_create(6, 10, 2, 0, &a), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_global_create(SMELT_GLOBAL_U64, 0, 2, 0, &a), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_global_create(SMELT_GLOBAL_U64, 10, 0, 0, &a), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_global_create(SMELT_GLOBAL_U64, 10, 2, 0, NULL), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_global_create(SMELT_GLOBAL_U64, 10, 1, 0, &a), SMELT_OK);
    IS(smelt_global_create(SMELT_GLOBAL_F64, 4, 1, 0, &f), SMELT_OK);

    /* The wrong element type, both ways, with a message naming both types. */
    double d[2] = {1.0, 2.0};
    uint64_t u[3] = {1, 2, 3};
    IS(smelt_global_put_f64(a, 0, d, 2), SMELT_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(smelt_last_error(), "uint64_t") && strstr(smelt_last_error(), "double"));
    IS(smelt_global_get_u64(f, 0, u, 1), SMELT_ERR_INVALID_ARGUMENT);
    int32_t i32 = 1;
    IS(smelt_global_accumulate_i32(a, 0, &i32, 1, SMELT_GLOBAL_SUM), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_global_fetch_accumulate_u32(a, 0, 1, SMELT_GLOBAL_SUM, NULL), SMELT_ERR_INVALID_ARGUMENT);

    /* Out of range: past the end, a range crossing it, an index near 2^64. */
    IS(smelt_global_get_u64(a, 10, u, 1), SMELT_ERR_INVALID_ARGUMENT);
    EXPECT(strstr(smelt_last_error(), "out of range") != NULL);
    IS(smelt_global_put_u64(a, 8, u, 3), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_global_accumulate_u64(a, UINT64_MAX, u, 2, SMELT_GLOBAL_SUM), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_global_fetch_accumulate_u64(a, 10, 1, SMELT_GLOBAL_SUM, NULL), SMELT_ERR_INVALID_ARGUMENT);
    /* A bad operation, NULL buffers, a bad member. */
    IS(smelt_global_accumulate_u64(a, 0, u, 1, 7), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_global_put_u64(a, 0, NULL, 2), SMELT_ERR_INVALID_ARGUMENT);
    IS(smelt_global_get_u64(a, 0, NULL, 2), SMELT_ERR_INVALID_ARGUMENT);
    uint64_t s, e;
    IS(smelt_global_block(a, 1, &s, &e), SMELT_ERR_INVALID_ARGUMENT);

    /* What works still works after the mistakes. */
    IS(smelt_global_put_u64(a, 7, u, 3), SMELT_OK);
    uint64_t old = 0;
    IS(smelt_global_fetch_accumulate_u64(a, 9, 10, SMELT_GLOBAL_SUM, &old), SMELT_OK);
    EXPECT(old == 3);
    IS(smelt_global_get_u64(a, 9, &old, 1), SMELT_OK);
    EXPECT(old == 13);
    int type = 0;
    uint64_t len = 0;
    size_t members = 0;
    IS(smelt_global_info(f, &type, &len, &members), SMELT_OK);
    EXPECT(type == SMELT_GLOBAL_F64 && len == 4 && members == 1);
    IS(smelt_global_barrier(a), SMELT_OK);

    /* A freed handle, twice; a handle of another kind. */
    IS(smelt_global_free(a), SMELT_OK);
    IS(smelt_global_get_u64(a, 0, u, 1), SMELT_ERR_INVALID_HANDLE);
    IS(smelt_global_free(a), SMELT_ERR_INVALID_HANDLE);
    smelt_am_endpoint *eps[2];
    IS(smelt_am_threads(2, 0, eps), SMELT_OK);
    IS(smelt_global_barrier((smelt_global *)eps[0]), SMELT_ERR_INVALID_HANDLE);
    IS(smelt_am_endpoint_free(eps[0]), SMELT_OK);
    IS(smelt_am_endpoint_free(eps[1]), SMELT_OK);
    IS(smelt_global_free(f), SMELT_OK);
    IS(smelt_global_free(NULL), SMELT_OK);

    if (failures) return 1;
    printf("global misuse ok\n");
    return 0;
}
