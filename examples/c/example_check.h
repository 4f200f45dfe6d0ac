/* example_check.h - the check the C examples share: CHECK(call) runs a smelt call and,
 * unless it returns SMELT_OK, prints the call, its status and smelt_last_error() to
 * stderr and exits 1. Include after <smelt.h>, <stdio.h> and <stdlib.h>. */
#ifndef SMELT_EXAMPLE_CHECK_H
#define SMELT_EXAMPLE_CHECK_H

#define CHECK(call)                                                                    \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != SMELT_OK) {                                                         \
            fprintf(stderr, "%s failed (%d): %s\n", #call, rc_, smelt_last_error());   \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

#endif
