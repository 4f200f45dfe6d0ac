/* Checks MPI_Bcast, MPI_Reduce, MPI_Allreduce, MPI_Barrier, MPI_Gather,
 * MPI_Scatter, MPI_Allgather, MPI_Scan, MPI_Exscan, MPI_Reduce_scatter_block and
 * MPI_Alltoall against plain C (and MPI_Ibarrier, MPI_Ibcast, MPI_Iallreduce).
 *
 * Every (datatype x operation x root x in-place x count) on MPI_COMM_WORLD, on
 * MPI_Comm_split(even/odd), on an MPI_Comm_dup of it and on all ranks reordered (even
 * first: with emulated nodes, nodes of ranks that do not follow each other); each
 * result is compared with
 * the same arithmetic done here in C (never with what the MPI library computes).
 * Also: floating-point allreduce results identical on every rank, broadcasts of
 * derived datatypes (contiguous on the root only, and strided), the fallbacks (a
 * user-defined operation, MPI_MAXLOC, a derived type in a reduction, a message past
 * the cut-off) still correct, communicators freed.
 *
 * Prints "collectives: OK <checks>" on rank 0; on a wrong result prints what differed
 * and calls MPI_Abort(2). Usage: collectives [rounds [multiple]] ("multiple": under
 * MPI_THREAD_MULTIPLE). */
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum kind { K_INT, K_FINT, K_FLOAT, K_BOOL, K_BYTE };
enum op { O_SUM, O_PROD, O_MIN, O_MAX, O_LAND, O_LOR, O_LXOR, O_BAND, O_BOR, O_BXOR, N_OPS };
static const char *op_names[N_OPS] = {"SUM", "PROD", "MIN", "MAX", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR"};
static MPI_Op mpi_ops[N_OPS];

typedef void (*gen_fn)(void *buf, int count, int rank, int seed, enum op op);
typedef void (*comb_fn)(void *acc, const void *x, int count, enum op op);

struct type {
    const char *name;
    MPI_Datatype dt;
    size_t size;
    enum kind kind;
    gen_fn gen;
    comb_fn comb;
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t h(int rank, int i, int seed)
{
    return mix(((uint64_t)(unsigned)seed << 40) ^ ((uint64_t)(unsigned)rank << 24) ^ (uint64_t)(unsigned)i);
}

/* comb_NAME: a[i] (acc) combined with x[i] under `op` for every i; the rest of the
 * arguments are the switch's cases on p = a[i], q = x[i] (any other op aborts). */
#define COMB(NAME, T, ...)                                                              \
    static void comb_##NAME(void *acc, const void *xv, int count, enum op op)           \
    {                                                                                   \
        T *a = acc;                                                                     \
        const T *x = xv;                                                                \
        for (int i = 0; i < count; i++) {                                               \
            T p = a[i], q = x[i];                                                       \
            switch (op) {                                                               \
            __VA_ARGS__                                                                 \
            default: abort();                                                           \
            }                                                                           \
        }                                                                               \
    }

/* Integers: any bits (a quarter of them zero, for the logical operations); sums and
 * products wrap. Signed arithmetic is done on the unsigned type U (C's signed overflow
 * is undefined; MPI's is two's complement) and converted back. */
#define INT_TYPE(NAME, T, U)                                                            \
    static void gen_##NAME(void *buf, int count, int rank, int seed, enum op op)        \
    {                                                                                   \
        (void)op;                                                                       \
        T *b = buf;                                                                     \
        for (int i = 0; i < count; i++) {                                               \
            uint64_t x = h(rank, i, seed);                                              \
            b[i] = (x & 3) == 0 ? (T)0 : (T)(x >> 8);                                   \
        }                                                                               \
    }                                                                                   \
    COMB(NAME, T,                                                                       \
         case O_SUM: a[i] = (T)(U)((U)p + (U)q); break;                                 \
         case O_PROD: a[i] = (T)(U)((U)p * (U)q); break;                                \
         case O_MIN: a[i] = p < q ? p : q; break;                                       \
         case O_MAX: a[i] = p > q ? p : q; break;                                       \
         case O_LAND: a[i] = (T)(p && q); break;                                        \
         case O_LOR: a[i] = (T)(p || q); break;                                         \
         case O_LXOR: a[i] = (T)(!p != !q); break;                                      \
         case O_BAND: a[i] = (T)(p & q); break;                                         \
         case O_BOR: a[i] = (T)(p | q); break;                                          \
         case O_BXOR: a[i] = (T)(p ^ q); break;)

/* Floating point: values whose sums and products are exact in any order (multiples
 * of 1/4 for sums, +-1, 2 and 1/2 for products), so C's sequential result is what
 * any tree must give. */
#define FLOAT_TYPE(NAME, T)                                                             \
    static void gen_##NAME(void *buf, int count, int rank, int seed, enum op op)        \
    {                                                                                   \
        T *b = buf;                                                                     \
        static const T f[4] = {1, -1, 2, 0.5};                                          \
        for (int i = 0; i < count; i++) {                                               \
            uint64_t x = h(rank, i, seed);                                              \
            b[i] = op == O_PROD ? f[x & 3] : (T)((int)(x % 2001) - 1000) * (T)0.25;      \
        }                                                                               \
    }                                                                                   \
    COMB(NAME, T,                                                                       \
         case O_SUM: a[i] = p + q; break;                                               \
         case O_PROD: a[i] = p * q; break;                                              \
         case O_MIN: a[i] = q < p ? q : p; break;                                       \
         case O_MAX: a[i] = q > p ? q : p; break;)

INT_TYPE(i8, int8_t, uint32_t)
INT_TYPE(i16, int16_t, uint32_t)
INT_TYPE(i32, int32_t, uint32_t)
INT_TYPE(i64, int64_t, uint64_t)
INT_TYPE(u8, uint8_t, uint32_t)
INT_TYPE(u16, uint16_t, uint32_t)
INT_TYPE(u32, uint32_t, uint32_t)
INT_TYPE(u64, uint64_t, uint64_t)
INT_TYPE(schar, signed char, unsigned)
INT_TYPE(uchar, unsigned char, unsigned)
INT_TYPE(short, short, unsigned)
INT_TYPE(ushort, unsigned short, unsigned)
INT_TYPE(int, int, unsigned)
INT_TYPE(uint, unsigned, unsigned)
INT_TYPE(long, long, unsigned long)
INT_TYPE(ulong, unsigned long, unsigned long)
INT_TYPE(llong, long long, unsigned long long)
INT_TYPE(ullong, unsigned long long, unsigned long long)
FLOAT_TYPE(float, float)
FLOAT_TYPE(double, double)

static void gen_bool(void *buf, int count, int rank, int seed, enum op op)
{
    (void)op;
    bool *b = buf;
    for (int i = 0; i < count; i++)
        b[i] = (h(rank, i, seed) & 1) != 0;
}
static void comb_bool(void *acc, const void *xv, int count, enum op op)
{
    bool *a = acc;
    const bool *x = xv;
    for (int i = 0; i < count; i++) {
        switch (op) {
        case O_LAND: a[i] = a[i] && x[i]; break;
        case O_LOR: a[i] = a[i] || x[i]; break;
        case O_LXOR: a[i] = a[i] != x[i]; break;
        default: abort();
        }
    }
}
static void gen_byte(void *buf, int count, int rank, int seed, enum op op)
{
    (void)op;
    unsigned char *b = buf;
    for (int i = 0; i < count; i++)
        b[i] = (unsigned char)h(rank, i, seed);
}
static void comb_byte(void *acc, const void *xv, int count, enum op op)
{
    unsigned char *a = acc;
    const unsigned char *x = xv;
    for (int i = 0; i < count; i++) {
        switch (op) {
        case O_BAND: a[i] &= x[i]; break;
        case O_BOR: a[i] |= x[i]; break;
        case O_BXOR: a[i] ^= x[i]; break;
        default: abort();
        }
    }
}

#define NTYPES 26
static struct type types[NTYPES];
static int ntypes;

static void add(const char *name, MPI_Datatype dt, size_t size, enum kind kind, gen_fn g, comb_fn c)
{
    types[ntypes++] = (struct type){name, dt, size, kind, g, c};
}

static void init_types(void)
{
    add("MPI_INT8_T", MPI_INT8_T, 1, K_INT, gen_i8, comb_i8);
    add("MPI_INT16_T", MPI_INT16_T, 2, K_INT, gen_i16, comb_i16);
    add("MPI_INT32_T", MPI_INT32_T, 4, K_INT, gen_i32, comb_i32);
    add("MPI_INT64_T", MPI_INT64_T, 8, K_INT, gen_i64, comb_i64);
    add("MPI_UINT8_T", MPI_UINT8_T, 1, K_INT, gen_u8, comb_u8);
    add("MPI_UINT16_T", MPI_UINT16_T, 2, K_INT, gen_u16, comb_u16);
    add("MPI_UINT32_T", MPI_UINT32_T, 4, K_INT, gen_u32, comb_u32);
    add("MPI_UINT64_T", MPI_UINT64_T, 8, K_INT, gen_u64, comb_u64);
    add("MPI_SIGNED_CHAR", MPI_SIGNED_CHAR, 1, K_INT, gen_schar, comb_schar);
    add("MPI_UNSIGNED_CHAR", MPI_UNSIGNED_CHAR, 1, K_INT, gen_uchar, comb_uchar);
    add("MPI_SHORT", MPI_SHORT, sizeof(short), K_INT, gen_short, comb_short);
    add("MPI_UNSIGNED_SHORT", MPI_UNSIGNED_SHORT, sizeof(short), K_INT, gen_ushort, comb_ushort);
    add("MPI_INT", MPI_INT, sizeof(int), K_INT, gen_int, comb_int);
    add("MPI_UNSIGNED", MPI_UNSIGNED, sizeof(int), K_INT, gen_uint, comb_uint);
    add("MPI_LONG", MPI_LONG, sizeof(long), K_INT, gen_long, comb_long);
    add("MPI_UNSIGNED_LONG", MPI_UNSIGNED_LONG, sizeof(long), K_INT, gen_ulong, comb_ulong);
    add("MPI_LONG_LONG", MPI_LONG_LONG, sizeof(long long), K_INT, gen_llong, comb_llong);
    add("MPI_UNSIGNED_LONG_LONG", MPI_UNSIGNED_LONG_LONG, sizeof(long long), K_INT, gen_ullong, comb_ullong);
    add("MPI_FLOAT", MPI_FLOAT, sizeof(float), K_FLOAT, gen_float, comb_float);
    add("MPI_DOUBLE", MPI_DOUBLE, sizeof(double), K_FLOAT, gen_double, comb_double);
    add("MPI_C_BOOL", MPI_C_BOOL, sizeof(bool), K_BOOL, gen_bool, comb_bool);
    add("MPI_BYTE", MPI_BYTE, 1, K_BYTE, gen_byte, comb_byte);
    /* Fortran types, where this MPI has them with the C sizes assumed here. */
    int s = 0;
    if (MPI_Type_size(MPI_INTEGER, &s) == MPI_SUCCESS && s == (int)sizeof(int))
        add("MPI_INTEGER", MPI_INTEGER, sizeof(int), K_FINT, gen_int, comb_int);
    if (MPI_Type_size(MPI_REAL, &s) == MPI_SUCCESS && s == (int)sizeof(float))
        add("MPI_REAL", MPI_REAL, sizeof(float), K_FLOAT, gen_float, comb_float);
    if (MPI_Type_size(MPI_DOUBLE_PRECISION, &s) == MPI_SUCCESS && s == (int)sizeof(double))
        add("MPI_DOUBLE_PRECISION", MPI_DOUBLE_PRECISION, sizeof(double), K_FLOAT, gen_double, comb_double);
}

static bool op_valid(enum kind k, enum op o)
{
    switch (k) {
    case K_INT: return true;
    case K_FINT: return o != O_LAND && o != O_LOR && o != O_LXOR;
    case K_FLOAT: return o <= O_MAX;
    case K_BOOL: return o == O_LAND || o == O_LOR || o == O_LXOR;
    case K_BYTE: return o >= O_BAND;
    }
    return false;
}

static int world_rank;
static long checks;

static void fail(MPI_Comm comm, const char *what, const struct type *t, int op, int root, int inplace,
                 int count, const unsigned char *got, const unsigned char *want)
{
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    size_t first = 0;
    while (first < (size_t)count * t->size && got[first] == want[first])
        first++;
    fprintf(stderr,
            "collectives: WRONG %s %s op=%s root=%d in_place=%d count=%d (rank %d of %d, world rank %d): "
            "first differing byte %zu (element %zu): got 0x%02x want 0x%02x\n",
            what, t->name, op >= 0 ? op_names[op] : "-", root, inplace, count, r, n, world_rank, first,
            first / t->size, got[first], want[first]);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* The sweeps of check_comm and check_gather_scatter: `run(comm, t, count, root, ri, arg)`
 * for every datatype `t`, every count of `counts` (`ncounts` of them) and every distinct
 * root of 0, size - 1 and size / 2 (`ri` its index there: 0 for the first). */
typedef void (*case_fn)(MPI_Comm comm, const struct type *t, int count, int root, int ri, void *arg);

static void sweep(MPI_Comm comm, const int *counts, size_t ncounts, case_fn run, void *arg)
{
    int size;
    MPI_Comm_size(comm, &size);
    int roots[3] = {0, size - 1, size / 2};
    for (int ti = 0; ti < ntypes; ti++)
        for (size_t ci = 0; ci < ncounts; ci++)
            for (int ri = 0; ri < 3; ri++)
                if (ri == 0 || roots[ri] != roots[ri - 1])
                    run(comm, &types[ti], counts[ci], roots[ri], ri, arg);
}

/* check_comm's buffers and seed (going on from case to case). */
struct reduce_state {
    int rank, size, seed;
    unsigned char *send, *recv, *want, *tmp;
};

/* MPI_Bcast, then MPI_Reduce and (for the first root) MPI_Allreduce under every valid op. */
static void check_reduce_case(MPI_Comm comm, const struct type *t, int count, int root, int ri, void *arg)
{
    struct reduce_state *st = arg;
    int rank = st->rank, size = st->size, seed = st->seed;
    unsigned char *send = st->send, *recv = st->recv, *want = st->want, *tmp = st->tmp;
    size_t bytes = (size_t)count * t->size;
    /* Broadcast. */
    seed++;
    t->gen(want, count, root, seed, O_SUM);
    if (rank == root)
        memcpy(recv, want, bytes);
    else
        memset(recv, 0xA5, bytes);
    MPI_Bcast(recv, count, t->dt, root, comm);
    if (memcmp(recv, want, bytes) != 0)
        fail(comm, "MPI_Bcast", t, -1, root, 0, count, recv, want);
    checks++;
    for (int op = 0; op < N_OPS; op++) {
        if (!op_valid(t->kind, op))
            continue;
        for (int inplace = 0; inplace < 2; inplace++) {
            seed++;
            t->gen(want, count, 0, seed, op);
            for (int k = 1; k < size; k++) {
                t->gen(tmp, count, k, seed, op);
                t->comb(want, tmp, count, op);
            }
            /* MPI_Reduce */
            t->gen(send, count, rank, seed, op);
            memset(recv, 0x5A, bytes);
            if (inplace && rank == root) {
                memcpy(recv, send, bytes);
                MPI_Reduce(MPI_IN_PLACE, recv, count, t->dt, mpi_ops[op], root, comm);
            } else {
                MPI_Reduce(send, recv, count, t->dt, mpi_ops[op], root, comm);
            }
            if (rank == root && memcmp(recv, want, bytes) != 0)
                fail(comm, "MPI_Reduce", t, op, root, inplace, count, recv, want);
            checks++;
            if (ri > 0)
                continue; /* allreduce has no root */
            /* MPI_Allreduce */
            memset(recv, 0x5A, bytes);
            if (inplace) {
                memcpy(recv, send, bytes);
                MPI_Allreduce(MPI_IN_PLACE, recv, count, t->dt, mpi_ops[op], comm);
            } else {
                MPI_Allreduce(send, recv, count, t->dt, mpi_ops[op], comm);
            }
            if (memcmp(recv, want, bytes) != 0)
                fail(comm, "MPI_Allreduce", t, op, -1, inplace, count, recv, want);
            checks++;
        }
    }
    st->seed = seed;
}

/* Every datatype, operation and root; `few`: counts 3 and 384 only (else 1, 3, 64, 384
 * and 1000). */
static void check_comm(MPI_Comm comm, int seed0, bool few)
{
    struct reduce_state st = {.seed = seed0};
    MPI_Comm_rank(comm, &st.rank);
    MPI_Comm_size(comm, &st.size);
    static const int all_counts[] = {1, 3, 64, 384, 1000}, few_counts[] = {3, 384};
    const int *counts = few ? few_counts : all_counts;
    size_t ncounts = few ? 2 : 5;
    size_t max = 1000 * 8;
    st.send = malloc(max);
    st.recv = malloc(max);
    st.want = malloc(max);
    st.tmp = malloc(max);
    sweep(comm, counts, ncounts, check_reduce_case, &st);
    free(st.send);
    free(st.recv);
    free(st.want);
    free(st.tmp);
}

/* check_gather_scatter's buffers and seed (going on from case to case). */
struct gather_state {
    int rank, size, seed;
    unsigned char *mine, *all, *want;
};

/* MPI_Gather and MPI_Scatter, each without and with MPI_IN_PLACE. */
static void check_gather_scatter_case(MPI_Comm comm, const struct type *t, int count, int root, int ri, void *arg)
{
    (void)ri;
    struct gather_state *st = arg;
    int rank = st->rank, size = st->size, seed = st->seed;
    unsigned char *mine = st->mine, *all = st->all, *want = st->want;
    size_t bytes = (size_t)count * t->size;
    for (int inplace = 0; inplace < 2; inplace++) {
        seed++;
        for (int k = 0; k < size; k++)
            t->gen(want + k * bytes, count, k, seed, O_SUM);
        /* Gather */
        t->gen(mine, count, rank, seed, O_SUM);
        memset(all, 0x3C, bytes * size);
        if (inplace && rank == root) {
            memcpy(all + root * bytes, mine, bytes);
            MPI_Gather(MPI_IN_PLACE, count, t->dt, all, count, t->dt, root, comm);
        } else {
            MPI_Gather(mine, count, t->dt, all, count, t->dt, root, comm);
        }
        if (rank == root && memcmp(all, want, bytes * size) != 0)
            fail(comm, "MPI_Gather", t, -1, root, inplace, count * size, all, want);
        checks++;
        /* Scatter */
        memset(mine, 0xC3, bytes);
        if (rank == root)
            memcpy(all, want, bytes * size);
        if (inplace && rank == root) {
            MPI_Scatter(all, count, t->dt, MPI_IN_PLACE, count, t->dt, root, comm);
            memcpy(mine, all + root * bytes, bytes);
        } else {
            MPI_Scatter(all, count, t->dt, mine, count, t->dt, root, comm);
        }
        if (memcmp(mine, want + rank * bytes, bytes) != 0)
            fail(comm, "MPI_Scatter", t, -1, root, inplace, count, mine, want + rank * bytes);
        checks++;
    }
    st->seed = seed;
}

/* MPI_Gather and MPI_Scatter: every datatype, counts, roots, in place. */
static void check_gather_scatter(MPI_Comm comm, int seed0)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    static const int counts[] = {1, 3, 64, 300};
    size_t max = 300 * 8;
    struct gather_state st = {rank, size, seed0, malloc(max), malloc(max * size), malloc(max * size)};
    sweep(comm, counts, sizeof counts / sizeof counts[0], check_gather_scatter_case, &st);
    /* Derived datatypes on the root only (same signatures): a dense pair type, and a
     * strided vector (every other int), for gather's receive and scatter's send side. */
    int root = size - 1;
    int *sbuf = malloc(64 * sizeof(int)), *rbuf = malloc(64 * size * 2 * sizeof(int));
    MPI_Datatype pair, strided, strided_r;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    MPI_Type_vector(4, 1, 2, MPI_INT, &strided); /* 4 ints spread over 7 */
    MPI_Type_create_resized(strided, 0, 8 * sizeof(int), &strided_r); /* blocks 8 ints apart */
    MPI_Type_commit(&strided_r);
    for (int i = 0; i < 4; i++)
        sbuf[i] = rank * 100 + i;
    /* gather: 4 ints from everyone into pairs at the root */
    for (int i = 0; i < 4 * size; i++)
        rbuf[i] = -1;
    MPI_Gather(sbuf, 4, MPI_INT, rbuf, 2, pair, root, comm);
    if (rank == root)
        for (int i = 0; i < 4 * size; i++)
            if (rbuf[i] != (i / 4) * 100 + i % 4) {
                fprintf(stderr, "collectives: WRONG pair gather at %d: %d\n", i, rbuf[i]);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
    /* gather into strided blocks at the root */
    for (int i = 0; i < 8 * size; i++)
        rbuf[i] = -1;
    MPI_Gather(sbuf, 4, MPI_INT, rbuf, 1, strided_r, root, comm);
    if (rank == root)
        for (int b = 0; b < size; b++)
            for (int i = 0; i < 8; i++) {
                int want_v = i % 2 == 0 ? b * 100 + i / 2 : -1;
                if (rbuf[b * 8 + i] != want_v) {
                    fprintf(stderr, "collectives: WRONG strided gather at block %d int %d: %d\n", b, i, rbuf[b * 8 + i]);
                    MPI_Abort(MPI_COMM_WORLD, 2);
                }
            }
    /* scatter from strided blocks at the root */
    for (int b = 0; b < size; b++)
        for (int i = 0; i < 8; i++)
            rbuf[b * 8 + i] = i % 2 == 0 ? b * 1000 + i / 2 : -7;
    for (int i = 0; i < 4; i++)
        sbuf[i] = -1;
    MPI_Scatter(rbuf, 1, strided_r, sbuf, 4, MPI_INT, root, comm);
    for (int i = 0; i < 4; i++)
        if (sbuf[i] != rank * 1000 + i) {
            fprintf(stderr, "collectives: WRONG strided scatter at %d: %d\n", i, sbuf[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    /* allgather into strided blocks on every rank (packed), and alltoall from them */
    for (int i = 0; i < 4; i++)
        sbuf[i] = rank * 100 + i;
    for (int i = 0; i < 8 * size; i++)
        rbuf[i] = -1;
    MPI_Allgather(sbuf, 4, MPI_INT, rbuf, 1, strided_r, comm);
    for (int b = 0; b < size; b++)
        for (int i = 0; i < 8; i++)
            if (rbuf[b * 8 + i] != (i % 2 == 0 ? b * 100 + i / 2 : -1)) {
                fprintf(stderr, "collectives: WRONG strided allgather at block %d int %d: %d\n", b, i, rbuf[b * 8 + i]);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
    int *a2a = malloc(4 * size * sizeof(int));
    for (int b = 0; b < size; b++)
        for (int i = 0; i < 8; i++)
            rbuf[b * 8 + i] = i % 2 == 0 ? rank * 1000 + b * 10 + i / 2 : -7;
    MPI_Alltoall(rbuf, 1, strided_r, a2a, 4, MPI_INT, comm);
    for (int b = 0; b < size; b++)
        for (int i = 0; i < 4; i++)
            if (a2a[b * 4 + i] != b * 1000 + rank * 10 + i) {
                fprintf(stderr, "collectives: WRONG strided alltoall from rank %d int %d: %d\n", b, i, a2a[b * 4 + i]);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
    free(a2a);
    checks += 5;
    MPI_Type_free(&pair);
    MPI_Type_free(&strided);
    MPI_Type_free(&strided_r);
    free(sbuf);
    free(rbuf);
    free(st.mine);
    free(st.all);
    free(st.want);
}

/* check_more's buffers and seed (going on from case to case). */
struct more_state {
    int rank, size, seed;
    unsigned char *send, *recv, *want, *tmp;
};

/* MPI_Scan, MPI_Exscan, MPI_Reduce_scatter_block and MPI_Reduce_scatter under every valid op, in place
 * and not; MPI_Allgather and MPI_Alltoall, in place and not. */
static void check_more_case(MPI_Comm comm, const struct type *t, int count, int root, int ri, void *arg)
{
    (void)root;
    if (ri > 0)
        return; /* no root */
    struct more_state *st = arg;
    int rank = st->rank, size = st->size, seed = st->seed;
    unsigned char *send = st->send, *recv = st->recv, *want = st->want, *tmp = st->tmp;
    size_t bytes = (size_t)count * t->size;
    for (int op = 0; op < N_OPS; op++) {
        if (!op_valid(t->kind, op))
            continue;
        for (int inplace = 0; inplace < 2; inplace++) {
            for (int ex = 0; ex < 2; ex++) {
                /* MPI_Scan / MPI_Exscan: the fold over ranks 0..rank (0..rank-1). */
                seed++;
                int upto = ex ? rank - 1 : rank;
                t->gen(want, count, 0, seed, op);
                for (int k = 1; k <= upto; k++) {
                    t->gen(tmp, count, k, seed, op);
                    t->comb(want, tmp, count, op);
                }
                t->gen(send, count, rank, seed, op);
                memset(recv, 0x5A, bytes);
                if (inplace) {
                    memcpy(recv, send, bytes);
                    if (ex)
                        MPI_Exscan(MPI_IN_PLACE, recv, count, t->dt, mpi_ops[op], comm);
                    else
                        MPI_Scan(MPI_IN_PLACE, recv, count, t->dt, mpi_ops[op], comm);
                } else if (ex) {
                    MPI_Exscan(send, recv, count, t->dt, mpi_ops[op], comm);
                } else {
                    MPI_Scan(send, recv, count, t->dt, mpi_ops[op], comm);
                }
                if (upto >= 0 && memcmp(recv, want, bytes) != 0)
                    fail(comm, ex ? "MPI_Exscan" : "MPI_Scan", t, op, -1, inplace, count, recv, want);
                checks++;
            }
            /* MPI_Reduce_scatter_block: count elements per rank of a vector of
             * count x size. */
            seed++;
            int all = count * size;
            t->gen(want, all, 0, seed, op);
            for (int k = 1; k < size; k++) {
                t->gen(tmp, all, k, seed, op);
                t->comb(want, tmp, all, op);
            }
            t->gen(send, all, rank, seed, op);
            memset(recv, 0x5A, bytes * size);
            if (inplace) {
                memcpy(recv, send, bytes * size);
                MPI_Reduce_scatter_block(MPI_IN_PLACE, recv, count, t->dt, mpi_ops[op], comm);
            } else {
                MPI_Reduce_scatter_block(send, recv, count, t->dt, mpi_ops[op], comm);
            }
            if (memcmp(recv, want + rank * bytes, bytes) != 0)
                fail(comm, "MPI_Reduce_scatter_block", t, op, -1, inplace, count, recv, want + rank * bytes);
            checks++;
            /* MPI_Reduce_scatter: parts of different sizes (count or count + 1 elements,
             * none for every third rank), each rank keeping its own. */
            seed++;
            int counts[64], before = 0, total = 0;
            for (int k = 0; k < size && k < 64; k++) {
                counts[k] = k % 3 == 1 ? 0 : count + k % 2;
                if (k < rank)
                    before += counts[k];
                total += counts[k];
            }
            t->gen(want, total, 0, seed, op);
            for (int k = 1; k < size; k++) {
                t->gen(tmp, total, k, seed, op);
                t->comb(want, tmp, total, op);
            }
            t->gen(send, total, rank, seed, op);
            memset(recv, 0x5A, (size_t)total * t->size);
            if (inplace) {
                memcpy(recv, send, (size_t)total * t->size);
                MPI_Reduce_scatter(MPI_IN_PLACE, recv, counts, t->dt, mpi_ops[op], comm);
            } else {
                MPI_Reduce_scatter(send, recv, counts, t->dt, mpi_ops[op], comm);
            }
            size_t mine = (size_t)counts[rank] * t->size, from = (size_t)before * t->size;
            if (memcmp(recv, want + from, mine) != 0)
                fail(comm, "MPI_Reduce_scatter", t, op, -1, inplace, counts[rank], recv, want + from);
            checks++;
        }
    }
    for (int inplace = 0; inplace < 2; inplace++) {
        /* MPI_Allgather */
        seed++;
        for (int k = 0; k < size; k++)
            t->gen(want + k * bytes, count, k, seed, O_SUM);
        t->gen(send, count, rank, seed, O_SUM);
        memset(recv, 0x3C, bytes * size);
        if (inplace) {
            memcpy(recv + rank * bytes, send, bytes);
            MPI_Allgather(MPI_IN_PLACE, count, t->dt, recv, count, t->dt, comm);
        } else {
            MPI_Allgather(send, count, t->dt, recv, count, t->dt, comm);
        }
        if (memcmp(recv, want, bytes * size) != 0)
            fail(comm, "MPI_Allgather", t, -1, -1, inplace, count * size, recv, want);
        checks++;
        /* MPI_Allgatherv: rank k gives count + k % 2 elements, its part 2 elements after
         * the previous one's (the gaps must stay as they were). */
        seed++;
        int counts[64], displs[64], at = 0;
        memset(want, 0x3C, (size_t)(count + 3) * size * t->size);
        for (int k = 0; k < size && k < 64; k++) {
            counts[k] = count + k % 2;
            displs[k] = at;
            t->gen(want + (size_t)at * t->size, counts[k], k, seed, O_SUM);
            at += counts[k] + 2;
        }
        size_t span = (size_t)at * t->size;
        t->gen(send, counts[rank], rank, seed, O_SUM);
        memset(recv, 0x3C, span);
        if (inplace) {
            memcpy(recv + (size_t)displs[rank] * t->size, send, (size_t)counts[rank] * t->size);
            MPI_Allgatherv(MPI_IN_PLACE, counts[rank], t->dt, recv, counts, displs, t->dt, comm);
        } else {
            MPI_Allgatherv(send, counts[rank], t->dt, recv, counts, displs, t->dt, comm);
        }
        if (memcmp(recv, want, span) != 0)
            fail(comm, "MPI_Allgatherv", t, -1, -1, inplace, at, recv, want);
        checks++;
        /* MPI_Alltoall: rank j's send buffer is gen(j) over count x size elements;
         * this rank receives block `rank` of each. */
        seed++;
        for (int j = 0; j < size; j++) {
            t->gen(tmp, count * size, j, seed, O_SUM);
            memcpy(want + j * bytes, tmp + rank * bytes, bytes);
        }
        t->gen(send, count * size, rank, seed, O_SUM);
        memset(recv, 0x3C, bytes * size);
        if (inplace) {
            memcpy(recv, send, bytes * size);
            MPI_Alltoall(MPI_IN_PLACE, count, t->dt, recv, count, t->dt, comm);
        } else {
            MPI_Alltoall(send, count, t->dt, recv, count, t->dt, comm);
        }
        if (memcmp(recv, want, bytes * size) != 0)
            fail(comm, "MPI_Alltoall", t, -1, -1, inplace, count * size, recv, want);
        checks++;
    }
    st->seed = seed;
}

/* The non-blocking collectives (MPI's: smelt counts them): results and requests. */
static void check_nonblocking(MPI_Comm comm)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Request req[3];
    int b[4] = {rank, rank, rank, rank}, x = rank + 1, y = -1;
    MPI_Ibarrier(comm, &req[0]);
    MPI_Ibcast(b, 4, MPI_INT, size - 1, comm, &req[1]);
    MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, comm, &req[2]);
    int done = 0;
    MPI_Status st[3]; /* not MPI_STATUSES_IGNORE: MPICH's prototype makes gcc warn */
    MPI_Test(&req[0], &done, &st[0]);
    MPI_Waitall(3, req, st);
    if (b[0] != size - 1 || b[3] != size - 1 || y != size * (size + 1) / 2 || req[0] != MPI_REQUEST_NULL) {
        fprintf(stderr, "collectives: WRONG non-blocking collectives: bcast %d, allreduce %d\n", b[0], y);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    checks++;
}

/* The collectives of check_more_case: every datatype and operation, counts 1, 3 and 40
 * (`few`: 3 only). */
static void check_more(MPI_Comm comm, int seed0, bool few)
{
    struct more_state st = {.seed = seed0};
    MPI_Comm_rank(comm, &st.rank);
    MPI_Comm_size(comm, &st.size);
    static const int all_counts[] = {1, 3, 40}, few_counts[] = {3};
    size_t max = 44 * 8 * (size_t)st.size;
    st.send = malloc(max);
    st.recv = malloc(max);
    st.want = malloc(max);
    st.tmp = malloc(max);
    sweep(comm, few ? few_counts : all_counts, few ? 1 : 3, check_more_case, &st);
    free(st.send);
    free(st.recv);
    free(st.want);
    free(st.tmp);
    check_nonblocking(comm);
}

/* Floating-point sums that are not exact: every rank must still get identical bits. */
static void check_float_identical(MPI_Comm comm)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    enum { N = 257 };
    double v[N], all[64 * N];
    if (size > 64)
        return;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < N; i++)
            v[i] = (double)(h(rank, i, 777 + round) % 1000003) / 7.0 * (i % 2 ? 1e-3 : 1e5);
        MPI_Allreduce(MPI_IN_PLACE, v, N, MPI_DOUBLE, MPI_SUM, comm);
        MPI_Allgather(v, N, MPI_DOUBLE, all, N, MPI_DOUBLE, comm);
        for (int k = 1; k < size; k++)
            if (memcmp(all, all + k * N, sizeof v) != 0) {
                fprintf(stderr, "collectives: WRONG float allreduce differs between ranks 0 and %d\n", k);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        checks++;
    }
}

static void user_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    int *a = in, *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = (int)((unsigned)a[i] + (unsigned)b[i]);
}

static void pair_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    int n = 2 * *len;
    user_sum(in, inout, &n, NULL);
}

/* What smelt leaves to MPI must still be right. */
static void check_fallbacks(MPI_Comm comm)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    /* A user-defined operation. */
    MPI_Op op;
    MPI_Op_create(user_sum, 1, &op);
    int x[4] = {rank, 1, -rank, 1000}, y[4];
    MPI_Allreduce(x, y, 4, MPI_INT, op, comm);
    int s = size * (size - 1) / 2;
    if (y[0] != s || y[1] != size || y[2] != -s || y[3] != 1000 * size) {
        fprintf(stderr, "collectives: WRONG user-op allreduce\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Op_free(&op);
    checks++;
    /* MPI_MAXLOC */
    struct { int v; int r; } in = {(rank * 7) % size, rank}, out = {-1, -1};
    MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MAXLOC, comm);
    int best = -1, at = -1;
    for (int k = 0; k < size; k++)
        if ((k * 7) % size > best) {
            best = (k * 7) % size;
            at = k;
        }
    if (out.v != best || out.r != at) {
        fprintf(stderr, "collectives: WRONG MAXLOC: got (%d,%d) want (%d,%d)\n", out.v, out.r, best, at);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    checks++;
    /* A derived datatype in a reduction (with a user operation: Open MPI defines the
     * predefined ones on predefined types only). */
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    MPI_Op pair_op;
    MPI_Op_create(pair_sum, 1, &pair_op);
    int p[4] = {1, 2, rank, 3}, q[4] = {0};
    MPI_Reduce(p, q, 2, pair, pair_op, size - 1, comm);
    MPI_Op_free(&pair_op);
    if (rank == size - 1 && (q[0] != size || q[1] != 2 * size || q[2] != s || q[3] != 3 * size)) {
        fprintf(stderr, "collectives: WRONG derived-type reduce\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    checks++;
    /* Broadcast: contiguous derived type on the root, plain ints elsewhere (same
     * signature), then a strided vector (packed). */
    int b[64];
    for (int i = 0; i < 64; i++)
        b[i] = rank == 0 ? i * 3 + 1 : -1;
    if (rank == 0)
        MPI_Bcast(b, 32, pair, 0, comm);
    else
        MPI_Bcast(b, 64, MPI_INT, 0, comm);
    for (int i = 0; i < 64; i++)
        if (b[i] != i * 3 + 1) {
            fprintf(stderr, "collectives: WRONG derived-type bcast at %d\n", i);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    checks++;
    MPI_Datatype vec;
    MPI_Type_vector(8, 1, 2, MPI_INT, &vec); /* every other int of 16 */
    MPI_Type_commit(&vec);
    int root = size - 1;
    for (int i = 0; i < 64; i++)
        b[i] = rank == root ? 100 + i : -1;
    MPI_Bcast(b, 2, vec, root, comm); /* elements at 0,2,..,14 and (extent 15 ints) 15,17,..,29 */
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < 8; i++) {
            int at = e * 15 + 2 * i;
            if (b[at] != 100 + at) {
                fprintf(stderr, "collectives: WRONG vector bcast at %d: %d\n", at, b[at]);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        }
    if (rank != root && b[1] != -1) {
        fprintf(stderr, "collectives: vector bcast wrote a hole\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Type_free(&vec);
    MPI_Type_free(&pair);
    checks++;
    /* Past the cut-off (64 KiB). */
    enum { BIG = 16384 };
    int *big = malloc(BIG * sizeof(int));
    for (int i = 0; i < BIG; i++)
        big[i] = rank + i;
    MPI_Allreduce(MPI_IN_PLACE, big, BIG, MPI_INT, MPI_SUM, comm);
    for (int i = 0; i < BIG; i++)
        if (big[i] != s + size * i) {
            fprintf(stderr, "collectives: WRONG large allreduce at %d\n", i);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    free(big);
    checks++;
}

/* Seconds on the host's monotonic clock (the same for every process of the host). */
/* The same small call again and again (the interposer's hot lane runs repeats with one
 * compare of the arguments; MPI_Allgather too): values, buffers and in-place change from call to call,
 * while datatype, count, root and operation stay; then a change of root, count or
 * datatype, and back. Every result is checked. */
static void check_repeats(MPI_Comm comm)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    double a[4], b[4], r[4];
    int ia[3], ir[3];
    for (int i = 0; i < 60; i++) {
        int root = i < 40 ? 0 : size - 1;
        int count = (i / 10) % 2 ? 2 : 1; /* 1 or 2 doubles, then back */
        double *buf = i % 2 ? a : b;      /* another buffer every other call */
        /* MPI_Bcast */
        for (int k = 0; k < count; k++)
            buf[k] = rank == root ? 1000.0 * i + k : -1.0;
        MPI_Bcast(buf, count, MPI_DOUBLE, root, comm);
        for (int k = 0; k < count; k++)
            if (buf[k] != 1000.0 * i + k) {
                fprintf(stderr, "collectives: WRONG repeated MPI_Bcast call %d: got %g (rank %d)\n", i, buf[k], rank);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        /* MPI_Reduce, in place on the root every third call */
        int inplace = i % 3 == 0;
        for (int k = 0; k < count; k++) {
            buf[k] = rank + i + k;
            r[k] = -7.0;
        }
        if (inplace && rank == root) {
            for (int k = 0; k < count; k++)
                r[k] = buf[k];
            MPI_Reduce(MPI_IN_PLACE, r, count, MPI_DOUBLE, MPI_SUM, root, comm);
        } else {
            MPI_Reduce(buf, r, count, MPI_DOUBLE, MPI_SUM, root, comm);
        }
        for (int k = 0; k < count && rank == root; k++) {
            double want = (double)size * (size - 1) / 2 + (double)size * (i + k);
            if (r[k] != want) {
                fprintf(stderr, "collectives: WRONG repeated MPI_Reduce call %d in_place=%d: got %g want %g\n", i,
                        inplace, r[k], want);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        }
        /* MPI_Allreduce, in place every other call */
        for (int k = 0; k < count; k++)
            r[k] = buf[k] = rank * 2 + i + k;
        MPI_Allreduce(i % 2 ? MPI_IN_PLACE : (void *)buf, r, count, MPI_DOUBLE, MPI_MAX, comm);
        for (int k = 0; k < count; k++)
            if (r[k] != (size - 1) * 2 + i + k) {
                fprintf(stderr, "collectives: WRONG repeated MPI_Allreduce call %d: got %g (rank %d)\n", i, r[k], rank);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        /* MPI_Allgather, in place every other call */
        double g[2 * 64];
        int ip = i % 2 && size <= 64;
        for (int k = 0; k < count * size && k < 2 * 64; k++)
            g[k] = -1.0;
        for (int k = 0; k < count; k++)
            buf[k] = 100.0 * rank + i + k;
        if (ip) {
            for (int k = 0; k < count; k++)
                g[rank * count + k] = buf[k];
            MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, count, MPI_DOUBLE, comm);
        } else if (size <= 64) {
            MPI_Allgather(buf, count, MPI_DOUBLE, g, count, MPI_DOUBLE, comm);
        }
        for (int q = 0; q < size && size <= 64; q++)
            for (int k = 0; k < count; k++)
                if (g[q * count + k] != 100.0 * q + i + k) {
                    fprintf(stderr, "collectives: WRONG repeated MPI_Allgather call %d in_place=%d: got %g\n", i, ip,
                            g[q * count + k]);
                    MPI_Abort(MPI_COMM_WORLD, 2);
                }
        /* Another datatype and operation between repeats, every tenth call. */
        if (i % 10 == 9) {
            for (int k = 0; k < 3; k++)
                ia[k] = rank + k;
            MPI_Allreduce(ia, ir, 3, MPI_INT, MPI_SUM, comm);
            for (int k = 0; k < 3; k++)
                if (ir[k] != size * (size - 1) / 2 + size * k) {
                    fprintf(stderr, "collectives: WRONG MPI_Allreduce between repeats: got %d\n", ir[k]);
                    MPI_Abort(MPI_COMM_WORLD, 2);
                }
        }
        MPI_Barrier(comm);
        checks += 3;
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A barrier: nobody leaves before the last one arrives (a rank arriving 20 ms late;
 * every rank's leaving time compared with its arrival on the host's clock, so a rank
 * the OS runs late itself does not look like an early exit). */
static void check_barrier(MPI_Comm comm)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int late = 0; late < size && late < 4; late++) {
        MPI_Barrier(comm);
        if (rank == late)
            usleep(20000);
        double arrived = now();
        MPI_Barrier(comm);
        double left = now();
        MPI_Bcast(&arrived, 1, MPI_DOUBLE, late, comm);
        if (left < arrived) {
            fprintf(stderr, "collectives: WRONG barrier: rank %d left %.3f ms before rank %d arrived\n", rank,
                    (arrived - left) * 1e3, late);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        checks++;
    }
    for (int i = 0; i < 200; i++)
        MPI_Barrier(comm);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2 && strcmp(argv[2], "multiple") == 0) {
        int provided = 0;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        if (provided != MPI_THREAD_MULTIPLE) {
            fprintf(stderr, "collectives: this MPI does not provide MPI_THREAD_MULTIPLE\n");
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    mpi_ops[O_SUM] = MPI_SUM;
    mpi_ops[O_PROD] = MPI_PROD;
    mpi_ops[O_MIN] = MPI_MIN;
    mpi_ops[O_MAX] = MPI_MAX;
    mpi_ops[O_LAND] = MPI_LAND;
    mpi_ops[O_LOR] = MPI_LOR;
    mpi_ops[O_LXOR] = MPI_LXOR;
    mpi_ops[O_BAND] = MPI_BAND;
    mpi_ops[O_BOR] = MPI_BOR;
    mpi_ops[O_BXOR] = MPI_BXOR;
    init_types();
    for (int r = 0; r < rounds; r++) {
        check_comm(MPI_COMM_WORLD, 1000 * r, false);
        check_more(MPI_COMM_WORLD, 15000 + 1000 * r, false);
        check_gather_scatter(MPI_COMM_WORLD, 3000 + 1000 * r);
        check_float_identical(MPI_COMM_WORLD);
        check_fallbacks(MPI_COMM_WORLD);
        check_barrier(MPI_COMM_WORLD);
        check_repeats(MPI_COMM_WORLD);
        /* Split communicators (even/odd, keys reversed) and a duplicate; freed after. */
        MPI_Comm split, dup;
        MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, -world_rank, &split);
        MPI_Comm_dup(split, &dup);
        check_comm(split, 5000 + 1000 * r, false);
        check_comm(dup, 9000 + 1000 * r, false);
        check_more(split, 17000 + 1000 * r, true);
        check_more(dup, 19000 + 1000 * r, false);
        check_gather_scatter(dup, 7000 + 1000 * r);
        check_float_identical(dup);
        check_fallbacks(dup);
        check_barrier(split);
        MPI_Comm_free(&dup);
        check_barrier(split);
        MPI_Comm_free(&split);
        /* All ranks, reordered (even world ranks first): emulated nodes
         * (SMELT_RANKS_PER_NODE, made in world rank order) then hold ranks that do not
         * follow each other in this communicator, as real nodes may. */
        int wsize;
        MPI_Comm_size(MPI_COMM_WORLD, &wsize);
        MPI_Comm perm;
        MPI_Comm_split(MPI_COMM_WORLD, 0, (world_rank % 2) * wsize + world_rank, &perm);
        check_comm(perm, 11000 + 1000 * r, true);
        check_more(perm, 21000 + 1000 * r, false);
        check_gather_scatter(perm, 13000 + 1000 * r);
        check_barrier(perm);
        check_repeats(perm);
        MPI_Comm_free(&perm);
    }
    long total = 0;
    MPI_Reduce(&checks, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (world_rank == 0)
        printf("collectives: OK %ld checks\n", total);
    MPI_Finalize();
    return 0;
}
