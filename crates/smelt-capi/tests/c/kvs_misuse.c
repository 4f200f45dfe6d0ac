/* kvs_misuse.c - misusing the key-value store's C API is a status and a message, never
 * a crash (run by tests/c_examples.rs; prints "kvs misuse ok" and exits 0 when every
 * check holds, else names each failed check and exits 1): a bad configuration, NULL
 * arguments, an oversized key or value, a buffer too small, a handle of the wrong
 * kind, use after close and a second close. */
#include <stdio.h>
#include <string.h>
#include <smelt.h>

#include "expect.h"

#define HAS(text) (strstr(smelt_last_error(), text) != NULL)

int main(void) {
    smelt_kvs_config cfg;
    smelt_kvs *kvs = NULL;
    EXPECT(smelt_kvs_config_init(NULL) == SMELT_ERR_INVALID_ARGUMENT);
    EXPECT(smelt_kvs_config_init(&cfg) == SMELT_OK);
    EXPECT(cfg.replicas == 3 && cfg.key_len == 8 && cfg.value_len == 16);

    /* Configurations it cannot build. */
    EXPECT(smelt_kvs_open(NULL, &kvs) == SMELT_ERR_INVALID_ARGUMENT && HAS("cfg is NULL"));
    EXPECT(smelt_kvs_open(&cfg, NULL) == SMELT_ERR_INVALID_ARGUMENT && HAS("kvs is NULL"));
    cfg.protocol = "raft";
    EXPECT(smelt_kvs_open(&cfg, &kvs) == SMELT_ERR_INVALID_ARGUMENT &&
           HAS("unknown protocol 'raft'"));
    cfg.protocol = "2pc";
    cfg.tree = "spiral";
    EXPECT(smelt_kvs_open(&cfg, &kvs) == SMELT_ERR_INVALID_ARGUMENT && HAS("spiral"));
    cfg.tree = NULL;
    cfg.replicas = 0;
    EXPECT(smelt_kvs_open(&cfg, &kvs) == SMELT_ERR_INVALID_ARGUMENT &&
           HAS("at least one replica"));
    cfg.replicas = 3;
    cfg.clients = 2;

    EXPECT(smelt_kvs_open(&cfg, &kvs) == SMELT_OK);
    smelt_kvs_client *c = NULL, *d = NULL;
    EXPECT(smelt_kvs_client_at(kvs, 0, &c) == SMELT_OK);
    EXPECT(smelt_kvs_client_at(kvs, 1, &d) == SMELT_OK && d != c);
    EXPECT(smelt_kvs_client_at(kvs, 2, &d) == SMELT_ERR_INVALID_ARGUMENT && HAS("out of range"));
    EXPECT(smelt_kvs_client_at(NULL, 0, &d) == SMELT_ERR_INVALID_ARGUMENT);
    EXPECT(smelt_kvs_client_at(kvs, 0, NULL) == SMELT_ERR_INVALID_ARGUMENT);

    /* Oversized key and value: nothing is sent. */
    EXPECT(smelt_kvs_set(c, "123456789", 9, "v", 1) == SMELT_ERR_INVALID_ARGUMENT &&
           HAS("key of 9 bytes"));
    char big[17] = {0};
    EXPECT(smelt_kvs_set(c, "k", 1, big, sizeof big) == SMELT_ERR_INVALID_ARGUMENT &&
           HAS("value of 17 bytes"));

    /* NULL arguments. */
    char buf[16];
    size_t len = 0;
    int found = 0;
    EXPECT(smelt_kvs_set(NULL, "k", 1, "v", 1) == SMELT_ERR_INVALID_ARGUMENT &&
           HAS("client is NULL"));
    EXPECT(smelt_kvs_set(c, NULL, 1, "v", 1) == SMELT_ERR_INVALID_ARGUMENT && HAS("key is NULL"));
    EXPECT(smelt_kvs_set(c, "k", 1, NULL, 1) == SMELT_ERR_INVALID_ARGUMENT &&
           HAS("value is NULL"));
    EXPECT(smelt_kvs_get(c, "k", 1, buf, sizeof buf, NULL, &found) == SMELT_ERR_INVALID_ARGUMENT);
    EXPECT(smelt_kvs_get(c, "k", 1, buf, sizeof buf, &len, NULL) == SMELT_ERR_INVALID_ARGUMENT);
    EXPECT(smelt_kvs_get(c, "k", 1, NULL, 4, &len, &found) == SMELT_ERR_INVALID_ARGUMENT);

    /* A buffer too small: SMELT_ERR_BUFFER, with the length it needs. */
    EXPECT(smelt_kvs_set(c, "k", 1, "0123456789", 10) == SMELT_OK);
    EXPECT(smelt_kvs_get(c, "k", 1, buf, 4, &len, &found) == SMELT_ERR_BUFFER && len == 10 &&
           found == 1);
    EXPECT(smelt_kvs_get(c, "k", 1, buf, sizeof buf, &len, &found) == SMELT_OK && len == 10 &&
           memcmp(buf, "0123456789", 10) == 0);

    /* Handles of the wrong kind. */
    EXPECT(smelt_kvs_set((smelt_kvs_client *)kvs, "k", 1, "v", 1) == SMELT_ERR_INVALID_HANDLE &&
           HAS("kvs handle, not a kvs client handle"));
    EXPECT(smelt_kvs_close((smelt_kvs *)c) == SMELT_ERR_INVALID_HANDLE);
    EXPECT(smelt_tree_free((smelt_tree *)kvs) == SMELT_ERR_INVALID_HANDLE);

    /* Close, then use after close and a second close. */
    EXPECT(smelt_kvs_close(kvs) == SMELT_OK);
    EXPECT(smelt_kvs_set(c, "k", 1, "v", 1) == SMELT_ERR_INVALID_HANDLE &&
           HAS("its store was closed"));
    EXPECT(smelt_kvs_get(c, "k", 1, buf, sizeof buf, &len, &found) == SMELT_ERR_INVALID_HANDLE);
    EXPECT(smelt_kvs_client_at(kvs, 0, &d) == SMELT_ERR_INVALID_HANDLE);
    EXPECT(smelt_kvs_close(kvs) == SMELT_ERR_INVALID_HANDLE && HAS("already closed"));
    EXPECT(smelt_kvs_close(NULL) == SMELT_OK);

    if (failures) return 1;
    printf("kvs misuse ok\n");
    return 0;
}
