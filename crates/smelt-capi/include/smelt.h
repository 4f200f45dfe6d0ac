/*
 * smelt.h - C API of smelt: machine-aware broadcast trees and collectives for
 * multicores (after Kaestle et al., "Machine-Aware Atomic Broadcast Trees for
 * Multicores", OSDI 2016).
 *
 * Link with -lsmelt (libsmelt.so or libsmelt.a built by `cargo build -p smelt-capi`;
 * the static library also needs -lhwloc -lpthread -ldl -lm). C99; usable from C++ (the
 * declarations are extern "C") and from Fortran through iso_c_binding (every type is
 * an opaque pointer, a fixed-width integer, size_t, double or a C string).
 *
 * Conventions
 *  - Every function returns an int status: SMELT_OK (0) or one of SMELT_ERR_*. On
 *    failure smelt_last_error() describes the problem in one line.
 *  - Objects (smelt_world, smelt_model, smelt_tree, smelt_group, smelt_member,
 *    smelt_kvs, smelt_kvs_client, ...) are handles: opaque pointer-sized values that the library
 *    checks on every call and that are never addresses (do not dereference, compare
 *    them only for equality). Create them with the *_load / *_build / *_create /
 *    smelt_group_attach / smelt_job_join / smelt_kvs_open functions and release them
 *    with the matching *_free / smelt_member_detach / smelt_job_leave /
 *    smelt_kvs_close (which accept NULL; smelt_kvs_close also releases the store's
 *    client handles). Misusing a
 *    handle is an error, never undefined behaviour: a handle freed twice, used after
 *    its free, passed where another kind is expected, or not a handle at all gives
 *    SMELT_ERR_INVALID_HANDLE (NULL gives SMELT_ERR_INVALID_ARGUMENT).
 *  - Strings are NUL-terminated UTF-8. Arrays are (pointer, count) pairs and must be
 *    valid for the duration of the call. Output pointers must not be NULL.
 *  - CPUs are OS CPU ids (as in /proc/cpuinfo, hwloc PU os_index, taskset).
 *  - No function lets an internal error unwind into C: an internal bug becomes
 *    SMELT_ERR_PANIC.
 *
 * Threads
 *  - smelt_last_error() is per thread: read it on the thread whose call failed.
 *  - Model, tree and group handles may be used from any threads, also at the same
 *    time. Freeing one while another thread uses it is safe: that call finishes on
 *    its own reference; calls that start after the free get SMELT_ERR_INVALID_HANDLE.
 *  - A member handle is used by one thread at a time (it may move between threads).
 *    A call with a member handle that another thread is using right now returns
 *    SMELT_ERR_BUSY at once and does nothing (the other call is unaffected);
 *    smelt_member_detach of a member in use, and smelt_group_free of a group with a
 *    member attached or running, return SMELT_ERR_BUSY too.
 *  - The member handle smelt_group_run passes to a body is valid until that body
 *    returns (smelt_group_run waits for any other thread's call with it to end);
 *    afterwards it gives SMELT_ERR_INVALID_HANDLE. It cannot be detached.
 *  - Every member takes part in every collective, in the same order, with the same
 *    len. A collective whose members disagree (a len that differs from the root's, a
 *    different collective, a NULL buffer or operator on one member) fails on every
 *    member, within a few message latencies, with the same status and message (the
 *    first failure of the group, naming the member at fault), and the group stays
 *    failed: free it and create a new one.
 *
 * Typical use: one world, every service (the same program runs as threads, under
 * `smelt launch -n N`, or under mpirun)
 *     smelt_world *w;   smelt_world_from_env(&w);  // or smelt_world_run(n, body, arg) for
 *                                                  // threads, smelt_world_from_mpi(comm, &w)
 *     smelt_member *m;  smelt_world_collectives(w, NULL, &m);  // tree collectives ("auto")
 *     smelt_am_endpoint *e; smelt_world_endpoint(w, 0, &e);    // active messages
 *     smelt_global *a;  smelt_world_global(w, SMELT_GLOBAL_U64, len, 0, &a);
 *     smelt_allreduce_typed(m, &x, 1, SMELT_UINT64, SMELT_OP_SUM); ...
 *     smelt_global_free(a); smelt_am_endpoint_free(e); smelt_member_free(m);
 *     smelt_world_free(w);
 *
 * Groups over a tree of your own (threads of this process)
 *     smelt_model *m;   smelt_model_load("model.json", &m);     // smelt probe -o model.json
 *     smelt_tree  *t;   smelt_tree_build(m, "adaptive-shuffled", NULL, 0, -1, &t);
 *     smelt_group *g;   smelt_group_create(t, &g);
 *     smelt_group_run(g, body, &state);   // body(member, &state) on one pinned thread per member
 *     ... inside body: smelt_barrier(member); smelt_broadcast(member, buf, len); ...
 *     smelt_group_free(g); smelt_tree_free(t); smelt_model_free(m);
 */
#ifndef SMELT_H
#define SMELT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes ------------------------------------------------------------- */

#define SMELT_OK 0
#define SMELT_ERR_INVALID_ARGUMENT 1 /* NULL pointer, unknown name, number out of range */
#define SMELT_ERR_IO 2               /* a file could not be read */
#define SMELT_ERR_MODEL 3            /* a model file is malformed or invalid */
#define SMELT_ERR_TREE 4             /* a tree could not be built (CPU not in the model...) */
#define SMELT_ERR_RUNTIME 5          /* the runtime failed (member gone, pinning failed...) */
#define SMELT_ERR_TIMEOUT 6          /* an operation did not complete in time */
#define SMELT_ERR_BUFFER 7           /* a caller buffer is too small */
#define SMELT_ERR_PANIC 8            /* internal error (a bug); do not reuse the object */
#define SMELT_ERR_INVALID_HANDLE 9   /* freed/detached/expired handle, wrong kind, not a handle */
#define SMELT_ERR_BUSY 10            /* member handle in use by another thread; member already
                                        attached or running; group still has members out */

/* The message of the last failed call on the calling thread ("" after a success).
 * Valid until the next smelt call on the same thread. Never NULL. */
const char *smelt_last_error(void);

/* The library version, e.g. "0.1.0" (static storage). */
const char *smelt_version(void);

/* ---- worlds ------------------------------------------------------------------------
 * A world is the members of one job and how they reach each other; a smelt_world
 * handle is one member's (docs/glossary.md: rank, size, node, CPU). Members are
 * threads of this process (smelt_world_threads, smelt_world_run), processes started
 * by `smelt launch -n N -- ./prog` (smelt_world_from_env), or MPI ranks
 * (smelt_world_from_mpi; libsmelt built with the `mpi` feature). Every service is
 * made from a world: smelt_world_collectives (tree collectives), smelt_world_endpoint
 * (active messages; offload lanes are such endpoints given to smelt_offload_start),
 * smelt_world_agg (aggregation), smelt_world_global (global arrays), so one program
 * runs them all in one job, in one shared-memory segment, whoever started it.
 *
 * Making a service is a collective call, as MPI_Comm_dup is: every member makes the
 * same services, in the same order, with the same arguments (a member that makes
 * something else fails with SMELT_ERR_INVALID_ARGUMENT naming the mismatch; one that
 * never comes makes the others fail after their timeout). A world handle may be read
 * (rank, size, ...) from any thread; make services from it on one thread at a time.
 * Freeing a world leaves the services made from it working. */
typedef struct smelt_world smelt_world;

/* Joins the job this process was started in by `smelt launch` (or by a launcher that
 * set SMELT_JOB, SMELT_JOB_KEY and SMELT_RANK). SMELT_ERR_RUNTIME, naming the variable,
 * when they are missing or hold garbage or the job is gone. */
int smelt_world_from_env(smelt_world **world);

/* The n (1..4096) worlds of a job of threads of this process, in worlds[0..n): world r
 * is member r; give each to one thread. Member r is given the r-th CPU this process may
 * use when there are n of them (pin a thread there with smelt_world_pin), else the
 * members are unpinned. */
int smelt_world_threads(size_t n, smelt_world **worlds);

/* Body run by smelt_world_run on each member's thread. */
typedef void (*smelt_world_fn)(smelt_world *world, void *arg);

/* Runs fn(world, arg) on n (1..4096) threads, one per member of a new job of threads
 * (CPUs as smelt_world_threads; each thread pinned to its member's CPU), and returns
 * once every body returned. The world handle is valid until its body returns. fn must
 * not unwind (no C++ exception or longjmp out of it). */
int smelt_world_run(size_t n, smelt_world_fn fn, void *arg);

/* A world of the members of an MPI communicator (after MPI_Init; a collective call
 * over comm): rank and size are comm's, nodes are the ranks that share memory
 * (MPI_COMM_TYPE_SHARED, or groups of SMELT_RANKS_PER_NODE consecutive ranks).
 * smelt_world_from_mpi is declared when <mpi.h> is included before smelt.h;
 * smelt_world_from_mpi_f takes a Fortran handle (MPI_Comm_c2f / a Fortran integer).
 * With a libsmelt built without the `mpi` feature both return
 * SMELT_ERR_INVALID_ARGUMENT saying so. */
#if defined(MPI_VERSION)
int smelt_world_from_mpi(MPI_Comm comm, smelt_world **world);
#endif
int smelt_world_from_mpi_f(int32_t comm, smelt_world **world);

/* This member's rank (0..size), the number of members. */
int smelt_world_rank(const smelt_world *world, size_t *rank);
int smelt_world_size(const smelt_world *world, size_t *size);

/* This member's node and the number of nodes (nodes may be NULL). */
int smelt_world_node(const smelt_world *world, size_t *node, size_t *nodes);

/* This member's OS CPU, or -1 for a member without one. */
int smelt_world_cpu(const smelt_world *world, int64_t *cpu);

/* Pins the calling thread to this member's CPU; *pinned (pinned may be NULL) is 1 if
 * it was pinned, 0 for a member without a CPU. */
int smelt_world_pin(const smelt_world *world, int *pinned);

/* Releases a world (NULL is ignored; SMELT_ERR_INVALID_HANDLE if already freed). */
int smelt_world_free(smelt_world *world);

/* ---- models --------------------------------------------------------------------- */

/* A machine model: CPUs, their hierarchy, pairwise send/receive costs. */
typedef struct smelt_model smelt_model;

/* Loads and validates a model file written by `smelt probe -o` or `smelt import`. */
int smelt_model_load(const char *path, smelt_model **model);

/* A synthetic model: sockets x cores_per_socket CPUs (at most 4096) numbered 0..,
 * costs send_ns / recv_ns within a socket and remote_factor times that across sockets. */
int smelt_model_synthetic(uint32_t sockets, uint32_t cores_per_socket, double send_ns,
                          double recv_ns, double remote_factor, smelt_model **model);

/* Number of CPUs of the model. */
int smelt_model_ncpus(const smelt_model *model, size_t *n);

/* Copies the model's OS CPU ids into cpus[0..len); SMELT_ERR_BUFFER if len is smaller
 * than smelt_model_ncpus. */
int smelt_model_cpus(const smelt_model *model, uint32_t *cpus, size_t len);

/* Releases a model (NULL is ignored; SMELT_ERR_INVALID_HANDLE if already freed).
 * Trees built from it stay valid. */
int smelt_model_free(smelt_model *model);

/* ---- trees ---------------------------------------------------------------------- */

/* A broadcast tree: members (OS CPU ids, numbered 0..size), a root, and each member's
 * children in send order. */
typedef struct smelt_tree smelt_tree;

/* Builds a tree over ncpus OS CPU ids (all CPUs of the model when cpus is NULL and
 * ncpus is 0) with algorithm `algo`: "auto" (also used when algo is NULL: SMELT_TUNE,
 * else this host's tuning file from `smelt tune`, else the simulator's best
 * prediction), "adaptive-shuffled" (Smelt's tree), "adaptive", "adaptive-sorted",
 * "optimized", "sequential", "binary", "fibonacci", "knomial:K", "mst", "cluster",
 * "bad". root is the OS CPU id of the root, or -1 for the cheapest one. */
int smelt_tree_build(const smelt_model *model, const char *algo, const uint32_t *cpus,
                     size_t ncpus, int64_t root, smelt_tree **tree);

/* Number of members. */
int smelt_tree_size(const smelt_tree *tree, size_t *n);

/* OS CPU id of member `index`. */
int smelt_tree_member_cpu(const smelt_tree *tree, size_t index, uint32_t *cpu);

/* Member index of the root. */
int smelt_tree_root(const smelt_tree *tree, size_t *index);

/* The simulator's predicted time in ns of op ("broadcast", "ab", "reduce", "allreduce",
 * "barrier", "gather", "scatter", "2pc") over the tree, under the model the tree was
 * built from. */
int smelt_tree_predict(const smelt_tree *tree, const char *op, double *ns);

/* Writes the tree as JSON ({"members": [cpu, ...], "root": cpu, "children": {"cpu": [cpu, ...]}}) into buf
 * (len bytes including the NUL) and its length without NUL into *needed (if needed is
 * not NULL). SMELT_ERR_BUFFER if it does not fit: call with len 0 to learn the size. */
int smelt_tree_to_json(const smelt_tree *tree, char *buf, size_t len, size_t *needed);

/* Releases a tree (NULL is ignored; SMELT_ERR_INVALID_HANDLE if already freed). Groups
 * created from it stay valid. */
int smelt_tree_free(smelt_tree *tree);

/* ---- groups and collectives ----------------------------------------------------- */

/* A group: one member per tree member, connected by queuepairs along the tree edges. */
typedef struct smelt_group smelt_group;

/* One member's handle, used by one thread at a time (SMELT_ERR_BUSY otherwise). */
typedef struct smelt_member smelt_member;

/* Creates a group over the tree (the tree may be freed afterwards). Collectives wait
 * at most 30 s for a peer. */
int smelt_group_create(const smelt_tree *tree, smelt_group **group);

/* As smelt_group_create, with collectives that give up after timeout_ms (>= 1)
 * milliseconds without progress from a peer (SMELT_ERR_TIMEOUT). */
int smelt_group_create_timeout(const smelt_tree *tree, uint64_t timeout_ms, smelt_group **group);

/* Number of members. */
int smelt_group_size(const smelt_group *group, size_t *n);

/* Body run by each member: fn(member, arg). */
typedef void (*smelt_member_fn)(smelt_member *member, void *arg);

/* Runs fn once per member, each on its own thread pinned to the member's CPU, and
 * returns when all have returned; may be called again for another phase. The member
 * handle is valid until fn returns. Every member must take part in every collective,
 * in the same order: a member that skips one makes the others fail after the group
 * timeout (smelt_group_create_timeout). Returns the first error a member's collective
 * returned, if any (SMELT_ERR_BUSY if a member is attached or the group is running
 * already); after an error do not reuse the group: free it and create a new one. fn
 * must not unwind (no C++ exception or longjmp out of it). */
int smelt_group_run(smelt_group *group, smelt_member_fn fn, void *arg);

/* Attaches the calling thread as member `index` (and pins it to the member's CPU):
 * for applications that manage their own threads. Each member is attached at most
 * once at a time (SMELT_ERR_BUSY otherwise); release it with smelt_member_detach
 * before smelt_group_free. */
int smelt_group_attach(smelt_group *group, size_t index, smelt_member **member);

/* Detaches a member attached with smelt_group_attach (NULL is ignored); the handle is
 * invalid afterwards (SMELT_ERR_INVALID_HANDLE if detached already, SMELT_ERR_BUSY
 * while another thread uses it). */
int smelt_member_detach(smelt_member *member);

/* Member index (0..size) and OS CPU of a member; is_root is 1 at the root, else 0;
 * size is the number of members of its group (or job, for smelt_job_join). */
int smelt_member_index(const smelt_member *member, size_t *index);
int smelt_member_size(const smelt_member *member, size_t *n);
int smelt_member_cpu(const smelt_member *member, uint32_t *cpu);
int smelt_member_is_root(const smelt_member *member, int *is_root);

/* Collectives. Each one starts by checking that every member called it with the
 * root's len (one word up the tree and one down, before any data moves); see
 * "Threads" above for what happens when they do not agree. */

/* Barrier: returns once every member has entered it. */
int smelt_barrier(smelt_member *member);

/* Broadcast: the root's len bytes of buf are copied into every member's buf (len must
 * be the same on every member). */
int smelt_broadcast(smelt_member *member, void *buf, size_t len);

/* Reduction operator: combine `in` into `inout` (len bytes each), e.g. element-wise
 * sum of integers. Must be associative and commutative. arg is passed through. */
typedef void (*smelt_reduce_op)(void *inout, const void *in, size_t len, void *arg);

/* Reduce: combines every member's len bytes of buf with op along the tree; the result
 * is in the root's buf (other members' buf contents are unspecified afterwards). */
int smelt_reduce(smelt_member *member, void *buf, size_t len, smelt_reduce_op op, void *arg);

/* Allreduce: reduce, then broadcast of the result to every member's buf. */
int smelt_allreduce(smelt_member *member, void *buf, size_t len, smelt_reduce_op op, void *arg);

/* Typed reductions: count values of a predefined type, combined with a predefined
 * operation by smelt's vectorised kernels (no callback per fragment; lent between
 * threads; the allreduce runs the algorithm the group's table picks for the size).
 * Integers wrap; float min/max ignore a NaN; logical results are 1 or 0; bitwise and
 * logical operations on SMELT_FLOAT/SMELT_DOUBLE are SMELT_ERR_INVALID_ARGUMENT. Every
 * member must pass the same count, type and op (checked, as len is above). */
#define SMELT_INT8 1
#define SMELT_UINT8 2
#define SMELT_INT16 3
#define SMELT_UINT16 4
#define SMELT_INT32 5
#define SMELT_UINT32 6
#define SMELT_INT64 7
#define SMELT_UINT64 8
#define SMELT_FLOAT 9
#define SMELT_DOUBLE 10
#define SMELT_OP_SUM 1
#define SMELT_OP_PROD 2
#define SMELT_OP_MIN 3
#define SMELT_OP_MAX 4
#define SMELT_OP_BAND 5
#define SMELT_OP_BOR 6
#define SMELT_OP_BXOR 7
#define SMELT_OP_LAND 8
#define SMELT_OP_LOR 9
#define SMELT_OP_LXOR 10
int smelt_reduce_typed(smelt_member *member, void *buf, size_t count, int type, int op);
int smelt_allreduce_typed(smelt_member *member, void *buf, size_t count, int type, int op);

/* ---- processes ---------------------------------------------------------------- */

/* A job of processes: `smelt launch -n N -- ./prog args` starts N copies of prog, each
 * pinned to its CPU, with SMELT_JOB (the job's shared-memory segment), SMELT_JOB_KEY,
 * SMELT_RANK (0..N), SMELT_SIZE (N) and SMELT_CPU in its environment. Each process
 * calls smelt_job_join once and gets a member handle that works with every member
 * call above (smelt_member_index / _size / _cpu / _is_root, smelt_barrier,
 * smelt_broadcast, smelt_reduce, smelt_allreduce; same rules, same failing together:
 * a failure on one process - a wrong len, a timeout, a process that died - fails the
 * collective on every process with the same message). The member belongs to the
 * process, not to a group: there is no smelt_group to create or free. */

/* Joins the job this process was started in. SMELT_ERR_RUNTIME (and a one-line
 * smelt_last_error()) if the process was not started by `smelt launch` (SMELT_JOB is
 * not set: test getenv("SMELT_JOB") to run without a launcher), the segment is gone
 * or stale (every member joined already, the launcher ended) or the rank joined
 * already. */
int smelt_job_join(smelt_member **member);

/* Leaves the job (NULL is ignored): the handle is invalid afterwards
 * (SMELT_ERR_INVALID_HANDLE if it was left already, SMELT_ERR_BUSY while another
 * thread uses it, SMELT_ERR_INVALID_ARGUMENT for a member of a smelt_group). Leave
 * after your last collective; a process that exits without leaving is fine too. */
int smelt_job_leave(smelt_member *member);

/* Tree collectives from a world (a collective call): this member's member of a group of
 * every member of the world, rank = the world's rank, used with every member call
 * above. tree: a smelt_tree_build algo name ("binary", "knomial:4", ...) or "auto"
 * (also NULL: SMELT_TUNE, else this host's tuning file, else the simulator's
 * prediction; in a job `smelt launch` made, its --tree and --model), built over the
 * members' CPUs on the world's model (the launcher's --model, else SMELT_MODEL, this
 * host's cached probe, else a uniform model), ranks kept the world's. Members without
 * CPUs of their own (unpinned threads, more members than CPUs) get a flat tree.
 * Collectives wait at most 30 s for a peer. Release with smelt_member_free.
 * On a world of MPI ranks on several nodes the collectives are hierarchical (a tree in
 * each node, MPI between the nodes' leaders; libsmelt built with `mpi`): the root is
 * rank 0; broadcasts and reductions with a C operator move 8 bytes per step (meant for
 * small buffers: typed reductions move whole vectors); members whose calls differ
 * all return SMELT_ERR_INVALID_ARGUMENT with one message and stay usable. */
int smelt_world_collectives(smelt_world *world, const char *tree, smelt_member **member);

/* Releases a member made by smelt_world_collectives (NULL is ignored), after its last
 * collective; SMELT_ERR_INVALID_ARGUMENT for a member of a group or job. */
int smelt_member_free(smelt_member *member);

/* Releases a group (NULL is ignored). SMELT_ERR_BUSY, and the group stays, while a
 * member is attached or running; SMELT_ERR_INVALID_HANDLE if already freed. */
int smelt_group_free(smelt_group *group);

/* ---- a replicated key-value store ---------------------------------------------- */

/* A replicated key-value store (docs/kvs.md): replicas are threads of this process;
 * sets are ordered by 1Paxos (the acceptor broadcasting over a smelt tree), two-phase
 * commit or a plain atomic broadcast and applied in the same order by every replica;
 * gets are answered by the client's home replica from its own copy. With 1Paxos and
 * 2PC a set returns once every replica has it, so every get that starts afterwards,
 * from any client, sees it or a later value (linearizable). */
typedef struct smelt_kvs smelt_kvs;

/* One client of a store: its own request ids and home replica (client c's home is
 * replica c % replicas). */
typedef struct smelt_kvs_client smelt_kvs_client;

/* How a store is built. Fill it with smelt_kvs_config_init, then change fields. */
typedef struct smelt_kvs_config {
    size_t replicas;             /* replicas (threads), >= 1; default 3 */
    size_t clients;              /* clients; default 3 */
    const char *protocol;        /* "1paxos" (default, also NULL), "2pc", "broadcast"
                                    (not linearizable across replicas: for benchmarks) */
    const char *tree;            /* the broadcast tree: a smelt_tree_build algo name;
                                    NULL = "adaptive-shuffled" */
    size_t key_len;              /* longest key in bytes, <= 255; default 8 */
    size_t value_len;            /* longest value in bytes; default 16 */
    size_t capacity;             /* slots per channel (48 bytes each; one message takes
                                    14 + key_len + value_len bytes); default 64 */
    uint64_t attempt_timeout_ms; /* a client's wait per attempt (1..86400000); 2000 */
    uint64_t close_timeout_ms;   /* smelt_kvs_close's wait for the replicas; 10000 */
    uint32_t attempts;           /* attempts per operation, >= 1 (a retry reuses the
                                    request id: a set is applied once); default 3 */
    int failover;                /* 1Paxos view change when a replica stops: 1 or 0;
                                    default 1 */
} smelt_kvs_config;

/* Fills *cfg with the defaults above. */
int smelt_kvs_config_init(smelt_kvs_config *cfg);

/* Starts a store (one thread per replica) and its clients. The strings in *cfg are
 * read during the call only. SMELT_ERR_INVALID_ARGUMENT (and a one-line message) for a
 * configuration it cannot build: zero replicas, an unknown protocol or tree, keys
 * longer than 255 bytes, values too long for the channels' capacity, ... */
int smelt_kvs_open(const smelt_kvs_config *cfg, smelt_kvs **kvs);

/* The handle of client `index` (0..clients): the same handle on every call, valid
 * until smelt_kvs_close. SMELT_ERR_INVALID_ARGUMENT for an index out of range. */
int smelt_kvs_client_at(const smelt_kvs *kvs, size_t index, smelt_kvs_client **client);

/* Number of clients. */
int smelt_kvs_nclients(const smelt_kvs *kvs, size_t *n);

/* Sets key (key_len bytes, at most cfg.key_len) to value (value_len bytes, at most
 * cfg.value_len); key or value may be NULL when its length is 0. Returns once the set
 * is committed at every replica (1Paxos, 2PC). SMELT_ERR_INVALID_ARGUMENT for a key or
 * value too long (nothing is sent); SMELT_ERR_TIMEOUT after every attempt went
 * unanswered (the set may or may not have been applied, at most once);
 * SMELT_ERR_RUNTIME when a replica it depends on failed. */
int smelt_kvs_set(smelt_kvs_client *client, const void *key, size_t key_len,
                  const void *value, size_t value_len);

/* Reads key at the client's home replica. A key never set: *found = 0, *len = 0. Else
 * *found = 1, *len = the value's length, and the value in value[0..*len) (room for
 * cap bytes; value may be NULL when cap is 0). SMELT_ERR_BUFFER, with *found and *len
 * set, when the value is longer than cap (no value is longer than cfg.value_len).
 * len and found must not be NULL. Errors otherwise as smelt_kvs_set. */
int smelt_kvs_get(smelt_kvs_client *client, const void *key, size_t key_len, void *value,
                  size_t cap, size_t *len, int *found);

/* Closes a store (NULL is ignored): invalidates every client handle (waiting for a
 * call in flight on another thread to end, at most attempts x attempt_timeout_ms),
 * lets the replicas finish what was ordered, stops them, and checks that every replica
 * applied the same log (SMELT_ERR_RUNTIME if not). The store and client handles are
 * invalid afterwards, whatever it returns: a later use of either, or a second close,
 * gives SMELT_ERR_INVALID_HANDLE.
 *
 * Threads: a smelt_kvs handle may be used from any threads at once (smelt_kvs_client,
 * smelt_kvs_nclients, smelt_kvs_close). A client handle is used by one thread at a time
 * and may move between threads; a call with a client handle that another thread is
 * using right now returns SMELT_ERR_BUSY at once and does nothing. Give each thread
 * its own client for concurrent operations. */
int smelt_kvs_close(smelt_kvs *kvs);

/* ---- active messages ------------------------------------------------------------ */

/* Active messages (docs/am.md): endpoints with handler tables. A request runs handler
 * `handler` (1..255) at endpoint `dest`, which must reply exactly once through the
 * token it is given; the reply runs a handler back at the requester. Short messages
 * carry up to 8 argument words; bulk ones add a data block (pipelined in 8 KiB
 * chunks, handed to the handler whole; at most 64 MiB). Messages from one endpoint to
 * another are handled in the order sent. Each endpoint has a 64-bit tag that requests
 * must present: a request with a wrong tag, to an unregistered handler, whose handler
 * did not reply, or any reply nobody asked for, comes back to its sender's handler 0
 * (smelt_am_on_returned) with reason SMELT_AM_WRONG_TAG ... SMELT_AM_TOO_LARGE and never
 * reaches a handler. A sender facing a full queue runs its own handlers meanwhile, so
 * endpoints flooding each other never deadlock. */
typedef struct smelt_am_endpoint smelt_am_endpoint;

/* The token of a running request handler: valid until the handler returns, on the
 * thread that runs it (a stale or made-up token gives SMELT_ERR_INVALID_HANDLE). */
typedef struct smelt_am_token smelt_am_token;

/* Why a message came back to handler 0. */
enum {
    SMELT_AM_WRONG_TAG = 1,
    SMELT_AM_UNKNOWN_HANDLER = 2,
    SMELT_AM_NO_REPLY = 3,
    SMELT_AM_HANDLER_PANICKED = 4,
    SMELT_AM_UNEXPECTED_REPLY = 5,
    SMELT_AM_TOO_LARGE = 6
};

/* A request or reply handler: `user` as registered, the token (reply through it in a
 * request's handler), the sender's index, the argument words and the data block
 * (valid during the call only). */
typedef void (*smelt_am_handler)(void *user, const smelt_am_token *token, size_t from,
                                 const uint64_t *args, size_t nargs, const void *data,
                                 size_t len);

/* Handler 0: a message that came back, with why, who sent it back, the handler it was
 * sent to, its argument words and its data length (the data is not sent back). */
typedef void (*smelt_am_returned)(void *user, int reason, size_t by, uint8_t handler,
                                  const uint64_t *args, size_t nargs, size_t data_len);

/* Makes the n endpoints of a job of threads (capacity: slots of 48 bytes per link
 * each way, at least 2; 0 = 256) and stores their handles in eps[0..n): endpoint i is
 * destination i. Give each endpoint to one thread: a handle is used by one thread at
 * a time (SMELT_ERR_BUSY otherwise, and from a handler calling its own endpoint). */
int smelt_am_threads(size_t n, size_t capacity, smelt_am_endpoint **eps);

/* A collective call: this member's endpoint of a new set of endpoints over every member
 * of the world (endpoint i is member i; capacity as smelt_am_threads's). Between
 * processes each member learns every other's tag before it returns. Several calls make
 * several sets (endpoint i of one set talks to the endpoints of that set only): make
 * one per offload lane, register its handlers, and give them to smelt_offload_start
 * (in a world of MPI ranks on several nodes a lane's thread makes MPI calls: initialise
 * MPI with MPI_THREAD_MULTIPLE). */
int smelt_world_endpoint(smelt_world *world, size_t capacity, smelt_am_endpoint **ep);

/* Releases an endpoint (NULL is ignored); the other endpoints see it leave: a poll
 * reports it once (SMELT_ERR_RUNTIME, "endpoint i is gone") and requests to it fail. */
int smelt_am_endpoint_free(smelt_am_endpoint *ep);

/* This endpoint's index and the number of endpoints of the job. */
int smelt_am_rank(const smelt_am_endpoint *ep, size_t *me, size_t *n);

/* Registers h with user as handler index (1..255; 0 is smelt_am_on_returned's). */
int smelt_am_register(smelt_am_endpoint *ep, uint8_t index, smelt_am_handler h, void *user);

/* Registers handler 0. Without one, returned messages are only counted. */
int smelt_am_on_returned(smelt_am_endpoint *ep, smelt_am_returned h, void *user);

/* Sends a request of nargs (<= 8) words to handler `handler` of dest. */
int smelt_am_request(smelt_am_endpoint *ep, size_t dest, uint8_t handler,
                     const uint64_t *args, size_t nargs);

/* Sends a request with a data block of len bytes (SMELT_ERR_BUFFER past 64 MiB). */
int smelt_am_request_bulk(smelt_am_endpoint *ep, size_t dest, uint8_t handler,
                          const uint64_t *args, size_t nargs, const void *data, size_t len);

/* Replies to the request being handled (sent when the handler returns). A second
 * reply, or one from a reply's handler: SMELT_ERR_INVALID_ARGUMENT. */
int smelt_am_reply(const smelt_am_token *token, uint8_t handler, const uint64_t *args,
                   size_t nargs);

/* Replies with a data block. */
int smelt_am_reply_bulk(const smelt_am_token *token, uint8_t handler, const uint64_t *args,
                        size_t nargs, const void *data, size_t len);

/* Runs the handlers of the messages waiting now (at most 64); *handled (may be NULL)
 * = how many ran. SMELT_ERR_RUNTIME once per endpoint that left and when a handler
 * panicked; the endpoint goes on. */
int smelt_am_poll(smelt_am_endpoint *ep, size_t *handled);

/* Waits at most timeout_ms for messages and runs their handlers (SMELT_ERR_TIMEOUT if
 * none came). */
int smelt_am_wait(smelt_am_endpoint *ep, uint64_t timeout_ms, size_t *handled);

/* Runs handlers until every request this endpoint sent was answered (replied to or
 * come back), for at most timeout_ms. */
int smelt_am_quiesce(smelt_am_endpoint *ep, uint64_t timeout_ms);

/* This endpoint's tag, and the tag it presents to dest (either pointer may be NULL). */
int smelt_am_tags(const smelt_am_endpoint *ep, size_t dest, uint64_t *tag, uint64_t *dest_tag);

/* Sets the tag this endpoint presents to dest. */
int smelt_am_set_dest_tag(smelt_am_endpoint *ep, size_t dest, uint64_t tag);

/* ---- Offload threads (smelt_offload_*) ----
 * Application threads hand active-message requests to communication threads through
 * lock-free queues; each endpoint given to a pool becomes a lane with its own thread,
 * which posts the requests and runs the endpoint's handlers (so handlers run on that
 * thread). In dynamic mode an idle thread sleeps and the next request wakes it through
 * a sleeping bit in its queue's counter (no lock or system call on the fast path).
 * A pool handle may be used by any number of threads at once. A handler must not flush
 * its own lane (it would wait for itself until the timeout). */
typedef struct smelt_offload smelt_offload;

#define SMELT_OFFLOAD_DIRECT 0  /* no thread: the caller runs each command itself */
#define SMELT_OFFLOAD_STATIC 1  /* a thread per lane, always running */
#define SMELT_OFFLOAD_DYNAMIC 2 /* a thread per lane, asleep while idle */

typedef struct smelt_offload_counters {
    uint64_t commands; /* commands executed */
    uint64_t requests; /* requests posted */
    uint64_t handled;  /* messages handled (replies, and requests that arrived) */
    uint64_t errors;   /* commands that failed */
    uint64_t sleeps;   /* times the thread slept (dynamic) */
    uint64_t wakes;    /* times a request woke it */
    uint64_t queued;   /* commands queued now */
} smelt_offload_counters;

/* Starts a pool over the n endpoints eps[0..n] (their handles become invalid: the pool
 * owns them; lane i is eps[i]), in mode SMELT_OFFLOAD_*, the thread of lane i pinned to
 * cpus[i] (cpus NULL and ncpus 0: not pinned; else ncpus must be n). */
int smelt_offload_start(smelt_am_endpoint *const *eps, size_t n, int mode, const uint32_t *cpus,
                        size_t ncpus, smelt_offload **pool);

/* Queues a short request (nargs <= 8 words) to destination dest of lane's endpoint. An
 * error found on the communication thread is returned by the lane's next flush. */
int smelt_offload_request(smelt_offload *pool, size_t lane, size_t dest, uint8_t handler,
                          const uint64_t *args, size_t nargs);

/* Waits at most timeout_ms until every command queued on lane so far was executed and
 * every request answered (SMELT_ERR_TIMEOUT otherwise). */
int smelt_offload_flush(smelt_offload *pool, size_t lane, uint64_t timeout_ms);

/* The counters of lane. */
int smelt_offload_stats(const smelt_offload *pool, size_t lane, smelt_offload_counters *stats);

/* Stops the pool within timeout_ms (what is still queued then is dropped; *left, if left
 * is not NULL, counts the dropped commands and unanswered requests) and stores the
 * endpoints as new handles in eps[0..n] (n = the number of lanes), or frees them if eps
 * is NULL. The pool handle is invalid afterwards. */
int smelt_offload_stop(smelt_offload *pool, uint64_t timeout_ms, smelt_am_endpoint **eps,
                       size_t n, uint64_t *left);

/* ---- Global arrays (smelt_global_*) -------------------------------------------- */

/* Global arrays (docs/global.md): len elements of one type spread in blocks over the
 * `members` threads of this program (member m owns [m*b, (m+1)*b), b = ceil(len /
 * members); smelt_global_block says which), read, written and combined by global index
 * from any thread at once. Element types are checked: calling the entry point of
 * another type than the array's (smelt_global_get_f64 on a SMELT_GLOBAL_U64 array) is
 * SMELT_ERR_INVALID_ARGUMENT naming both types, as is an index range outside the array.
 * Consistency: sequential consistency for data-race-free programs; synchronise with
 * smelt_global_barrier, or with smelt_global_fence_writeback (SD_fence) before an
 * accumulate another thread observes and smelt_global_fence_invalidate (SI_fence)
 * after observing it. Accumulates never lose an update. */
typedef struct smelt_global smelt_global;

#define SMELT_GLOBAL_U64 1 /* uint64_t */
#define SMELT_GLOBAL_I64 2 /* int64_t */
#define SMELT_GLOBAL_F64 3 /* double */
#define SMELT_GLOBAL_U32 4 /* uint32_t */
#define SMELT_GLOBAL_I32 5 /* int32_t */

#define SMELT_GLOBAL_SUM 0     /* integer sums wrap */
#define SMELT_GLOBAL_MIN 1
#define SMELT_GLOBAL_MAX 2
#define SMELT_GLOBAL_REPLACE 3 /* an atomic swap */

/* Makes an array of len (>= 1) zeroed elements of type SMELT_GLOBAL_*, over `members`
 * (>= 1) threads: the number that meet at smelt_global_barrier, which waits at most
 * timeout_ms (0: 30 s; SMELT_ERR_TIMEOUT, after which the array's barrier is unusable). */
int smelt_global_create(int type, uint64_t len, size_t members, uint64_t timeout_ms,
                        smelt_global **array);

/* A collective call: this member's handle on a new array of len zeroed elements of type
 * SMELT_GLOBAL_*, spread over every member of the world (member m owns block m; in a
 * job of processes the elements live in the job's shared memory); barriers meet the
 * world's members and wait at most timeout_ms (0: 30 s). Every member passes the same
 * type and len. */
int smelt_world_global(smelt_world *world, int type, uint64_t len, uint64_t timeout_ms,
                       smelt_global **array);

/* The array's element type (SMELT_GLOBAL_*), length and number of members. */
int smelt_global_info(const smelt_global *array, int *type, uint64_t *len, size_t *members);

/* The indices member `member` owns: [*start, *end) (empty past the last block). */
int smelt_global_block(const smelt_global *array, size_t member, uint64_t *start,
                       uint64_t *end);

/* Per type T in u64 (uint64_t), i64 (int64_t), f64 (double), u32 (uint32_t), i32
 * (int32_t):
 *   smelt_global_get_T(array, index, out, count)          reads count elements
 *   smelt_global_put_T(array, index, data, count)         writes count elements
 *   smelt_global_accumulate_T(array, index, data, count, op)
 *                               combines each element atomically (SMELT_GLOBAL_SUM ...)
 *   smelt_global_fetch_accumulate_T(array, index, value, op, old)
 *                               combines one element atomically; *old (if old is not
 *                               NULL) gets its value before: a fetch-and-add with SUM */
#define SMELT_GLOBAL_TYPED(T, ctype)                                                       \
    int smelt_global_get_##T(smelt_global *array, uint64_t index, ctype *out, size_t count); \
    int smelt_global_put_##T(smelt_global *array, uint64_t index, const ctype *data,          \
                             size_t count);                                                \
    int smelt_global_accumulate_##T(smelt_global *array, uint64_t index, const ctype *data,   \
                                    size_t count, int op);                                 \
    int smelt_global_fetch_accumulate_##T(smelt_global *array, uint64_t index, ctype value,   \
                                          int op, ctype *old);
SMELT_GLOBAL_TYPED(u64, uint64_t)
SMELT_GLOBAL_TYPED(i64, int64_t)
SMELT_GLOBAL_TYPED(f64, double)
SMELT_GLOBAL_TYPED(u32, uint32_t)
SMELT_GLOBAL_TYPED(i32, int32_t)
#undef SMELT_GLOBAL_TYPED

/* The write-back fence (SD_fence): the calling thread's writes are complete, ordered
 * before its later operations. */
int smelt_global_fence_writeback(smelt_global *array);

/* The invalidate fence (SI_fence): the calling thread's later reads see every write
 * made visible before a synchronisation it observed. */
int smelt_global_fence_invalidate(smelt_global *array);

/* Waits until `members` threads called it: a write-back fence, the meeting, an
 * invalidate fence. */
int smelt_global_barrier(smelt_global *array);

/* Frees the array (NULL: nothing); its handle is invalid afterwards. */
int smelt_global_free(smelt_global *array);

/* ---- Message aggregation (smelt_agg_*) ----------------------------------------
 * Fixed-size items gathered in buffers of g items and shipped as one active message
 * (TramLib's schemes). A job has `processes` groups of `workers` threads; each group
 * shares one active-message endpoint. Worker w is worker w % workers of process
 * w / workers. A worker handle is used by one thread at a time (SMELT_ERR_BUSY). */
typedef struct smelt_agg_worker smelt_agg_worker;

/* Schemes: a buffer per destination worker (WW); per destination process, sorted
 * to workers at the destination (WPS) or at the source (WSP); one buffer per
 * (source process, destination process) shared by the process's workers through
 * atomics (PP); no aggregation, every item its own active message (NONE). */
enum {
    SMELT_AGG_WW = 0,
    SMELT_AGG_WPS = 1,
    SMELT_AGG_WSP = 2,
    SMELT_AGG_PP = 3,
    SMELT_AGG_NONE = 4
};

/* The handler of items delivered to worker `me`: called with the worker's user
 * pointer on the thread that calls that worker's insert, poll, flush or terminate;
 * the item is valid during the call. A handler must not call its own worker (it
 * would get SMELT_ERR_BUSY). */
typedef void (*smelt_agg_handler)(void *user, size_t me, const void *item, size_t size);

/* Makes the processes*workers workers (at most 4096) and stores their handles in
 * out[0..processes*workers). Items have item_size bytes (1..4096); buffer_items is g
 * (0 = 1024). Full buffers always go out, and every partial buffer at
 * smelt_agg_flush and smelt_agg_terminate; idle_flush != 0 also ships them when a
 * poll finds nothing to handle; timeout_us > 0 ships a buffer whose first item is
 * older than that at the next insert or poll. users[w] (users may be NULL) is worker
 * w's pointer for the handler. */
int smelt_agg_threads(size_t processes, size_t workers, int scheme, size_t item_size,
                      size_t buffer_items, int idle_flush, uint64_t timeout_us,
                      smelt_agg_handler h, void *const *users, smelt_agg_worker **out);

/* A collective call: this member's `workers` workers of an aggregator over every member
 * of the world (each member a process of the aggregator: worker w of the job is worker
 * w % workers of member w / workers), in out[0..workers); every member passes the same
 * arguments but users (users[i]: this member's worker i's pointer; may be NULL). */
int smelt_world_agg(smelt_world *world, size_t workers, int scheme, size_t item_size,
                    size_t buffer_items, int idle_flush, uint64_t timeout_us,
                    smelt_agg_handler h, void *const *users, smelt_agg_worker **out);

/* Inserts an item of `size` bytes (the item size) for worker dest. */
int smelt_agg_insert(smelt_agg_worker *w, const void *item, size_t size, size_t dest);

/* Sends what waits, runs the endpoint's handlers, hands this worker's items to its
 * handler (*handled, may be NULL: how many) and applies the flush policy. */
int smelt_agg_poll(smelt_agg_worker *w, size_t *handled);

/* Ships this worker's partial buffers (for PP, its process's shared ones). */
int smelt_agg_flush(smelt_agg_worker *w);

/* Collective (every worker calls it): returns once every item inserted by any worker
 * has been delivered and handled; SMELT_ERR_TIMEOUT after timeout_ms. */
int smelt_agg_terminate(smelt_agg_worker *w, uint64_t timeout_ms);

/* This worker's index and the number of workers. */
int smelt_agg_rank(const smelt_agg_worker *w, size_t *me, size_t *n);

/* Items inserted by, and handled at, this worker, and the messages it sent (buffers
 * it shipped); each output may be NULL. */
int smelt_agg_stats(const smelt_agg_worker *w, uint64_t *inserted, uint64_t *handled,
                    uint64_t *messages);

/* Releases a worker (NULL is ignored). Free every worker after all terminated. */
int smelt_agg_worker_free(smelt_agg_worker *w);

/* ---- Fork-join tasks (smelt_task_*) ----
 * Cilk-style spawn and sync over smelt-tasks' work-stealing pool (a Chase-Lev deque per
 * worker, idle workers asleep; docs/tasks.md). smelt_task_run runs fn(arg) as the root
 * task on a pool of `workers` threads (0: one per available CPU; the pool is kept for the
 * next call with the same count) and returns once it and every task it spawned finished.
 * Inside a task (a function run by smelt_task_run or smelt_task_spawn), smelt_task_spawn
 * makes fn(arg) a child task that any worker may run, and smelt_task_sync waits until every
 * child the calling task spawned so far finished, running other tasks meanwhile. A task's
 * children are synced when it returns (implicit sync). fn must not unwind or longjmp out;
 * arg must stay valid, and be usable from any thread, until the child finished.
 * Errors: SMELT_ERR_INVALID_ARGUMENT for a NULL fn, spawn or sync outside a task, or
 * smelt_task_run inside a task; SMELT_ERR_RUNTIME when a task failed. */
typedef void (*smelt_task_fn)(void *arg);
int smelt_task_run(size_t workers, smelt_task_fn fn, void *arg);
int smelt_task_spawn(smelt_task_fn fn, void *arg);
int smelt_task_sync(void);

#ifdef __cplusplus
}
#endif

#endif /* SMELT_H */
