/* expect.h - the check macro of the C API's misuse tests: a failed check prints where
 * and smelt's last error, and is counted in `failures` (main returns non-zero then). */
#ifndef SMELT_TEST_EXPECT_H
#define SMELT_TEST_EXPECT_H
#include <stdio.h>
#include <smelt.h>

static int failures = 0;

#define EXPECT(cond)                                                                 \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, \
                    __LINE__, #cond, smelt_last_error());                            \
            failures++;                                                              \
        }                                                                            \
    } while (0)

#endif
