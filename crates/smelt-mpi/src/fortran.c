/* Fortran entry points of the calls smelt takes.
 *
 * Why this file exists: Open MPI's Fortran bindings (libmpi_mpifh: mpi_bcast_, ...)
 * call PMPI_Bcast and friends directly, so a Fortran program never reaches the C
 * MPI_Bcast the interposer defines. Exported by the interposer (interpose/fortran.rs,
 * preloaded first), the Fortran symbols come here, where their arguments are
 * converted and the interposer's C functions called: handles with
 * MPI_*_f2c, Fortran MPI_IN_PLACE and MPI_BOTTOM (addresses of common blocks the MPI
 * library defines) to the C constants, the C return code into `ierr`. Every mangling
 * Fortran compilers use is defined: name_ (gfortran, ifort, flang), name__ (g77, f2c),
 * NAME and name.
 *
 * MPI_FINALIZE is taken too, so the interposer releases its state and prints its
 * SMELT_MPI_VERBOSE summary for Fortran programs as for C ones.
 *
 * Where this MPI's Fortran MPI_IN_PLACE cannot be recognized (none of the symbols
 * below exists), the calls that may be given it (reduce, allreduce, gather, scatter)
 * are passed unchanged to the MPI library's own Fortran binding (found with
 * dlsym(RTLD_NEXT)): they are never run with a misread buffer. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stddef.h>

/* The entry points' bodies, called by the exported symbols (interpose/fortran.rs: a
 * Rust library exports only its own symbols); `name` is the symbol called, for the
 * fall-back's lookup. */
void smelt_mpi_f_bcast(void *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, const char *);
void smelt_mpi_f_reduce(void *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *,
                        const char *);
void smelt_mpi_f_allreduce(void *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *,
                           const char *);
void smelt_mpi_f_barrier(MPI_Fint *, MPI_Fint *, const char *);
void smelt_mpi_f_gather(void *, MPI_Fint *, MPI_Fint *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *,
                        MPI_Fint *, const char *);
void smelt_mpi_f_scatter(void *, MPI_Fint *, MPI_Fint *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *,
                         MPI_Fint *, const char *);
void smelt_mpi_f_finalize(MPI_Fint *, const char *);

/* Open MPI: MPI_IN_PLACE and MPI_BOTTOM in Fortran are common blocks whose name
 * depends on the Fortran compiler's mangling; libmpi defines the one of the compiler
 * it was built with. Weak: absent ones are NULL. MANGLED lists the four, in the
 * order WEAK_MANGLED declares them. */
#define WEAK_MANGLED(lower, UPPER)                \
    extern char lower##_ __attribute__((weak));  \
    extern char lower __attribute__((weak));     \
    extern char lower##__ __attribute__((weak)); \
    extern char UPPER __attribute__((weak))
#define MANGLED(lower, UPPER) {&lower##_, &lower, &lower##__, &UPPER}
WEAK_MANGLED(mpi_fortran_in_place, MPI_FORTRAN_IN_PLACE);
WEAK_MANGLED(mpi_fortran_bottom, MPI_FORTRAN_BOTTOM);
/* MPICH: pointers to its common blocks, set when its Fortran library initializes. */
extern void *MPIR_F_MPI_IN_PLACE __attribute__((weak));
extern void *MPIR_F_MPI_BOTTOM __attribute__((weak));

/* One Fortran constant: its Open MPI common blocks (by mangling; NULL where absent)
 * and MPICH's pointer to it (`mpich` itself NULL where absent). */
struct fconst {
    const void *open_mpi[4];
    void *const *mpich;
};

static const struct fconst in_place = {MANGLED(mpi_fortran_in_place, MPI_FORTRAN_IN_PLACE),
                                       &MPIR_F_MPI_IN_PLACE};
static const struct fconst bottom = {MANGLED(mpi_fortran_bottom, MPI_FORTRAN_BOTTOM), &MPIR_F_MPI_BOTTOM};

/* True when `p` is the Fortran constant `c`. */
static int is_const(const void *p, const struct fconst *c)
{
    if (p == NULL)
        return 0;
    for (int i = 0; i < 4; i++)
        if (p == c->open_mpi[i])
            return 1;
    return c->mpich != NULL && *c->mpich != NULL && p == *c->mpich;
}

static int is_in_place(const void *p)
{
    return is_const(p, &in_place);
}

static int is_bottom(const void *p)
{
    return is_const(p, &bottom);
}

/* True when this MPI's Fortran MPI_IN_PLACE can be recognized. */
static int in_place_known(void)
{
    for (int i = 0; i < 4; i++)
        if (in_place.open_mpi[i] != NULL)
            return 1;
    return in_place.mpich != NULL && *in_place.mpich != NULL;
}

/* A Fortran buffer as C sees it. */
static void *buf(void *p)
{
    if (is_in_place(p))
        return MPI_IN_PLACE;
    if (is_bottom(p))
        return MPI_BOTTOM;
    return p;
}

/* The MPI library's own binding of `name` (the next definition after this
 * library's), or NULL. */
static void *next(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

typedef void (*reduce_f)(void *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *,
                         MPI_Fint *);
typedef void (*allreduce_f)(void *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *, MPI_Fint *);
typedef void (*rooted_f)(void *, MPI_Fint *, MPI_Fint *, void *, MPI_Fint *, MPI_Fint *, MPI_Fint *,
                         MPI_Fint *, MPI_Fint *);

/* The MPI library's binding of a call that may be given MPI_IN_PLACE, where this
 * library cannot recognize it (looked up once; NULL: run it here regardless). */
#define NEXT_IF_UNKNOWN(type, name)                                                         \
    static type fallback_;                                                                  \
    static int looked_;                                                                     \
    if (!in_place_known()) {                                                                \
        if (!__atomic_load_n(&looked_, __ATOMIC_ACQUIRE)) {                                 \
            __atomic_store_n(&fallback_, (type)next(name), __ATOMIC_RELAXED);               \
            __atomic_store_n(&looked_, 1, __ATOMIC_RELEASE);                                \
        }                                                                                   \
    }                                                                                       \
    type fallback = in_place_known() ? NULL : __atomic_load_n(&fallback_, __ATOMIC_RELAXED)

void smelt_mpi_f_bcast(void *buffer, MPI_Fint *count, MPI_Fint *datatype, MPI_Fint *root, MPI_Fint *comm,
                       MPI_Fint *ierr, const char *name)
{
    (void)name;
    int rc = MPI_Bcast(buf(buffer), (int)*count, PMPI_Type_f2c(*datatype), (int)*root, PMPI_Comm_f2c(*comm));
    if (ierr)
        *ierr = (MPI_Fint)rc;
}

void smelt_mpi_f_reduce(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *datatype, MPI_Fint *op,
                     MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr, const char *name)
{
    NEXT_IF_UNKNOWN(reduce_f, name);
    if (fallback) {
        fallback(sendbuf, recvbuf, count, datatype, op, root, comm, ierr);
        return;
    }
    int rc = MPI_Reduce(buf(sendbuf), buf(recvbuf), (int)*count, PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op),
                        (int)*root, PMPI_Comm_f2c(*comm));
    if (ierr)
        *ierr = (MPI_Fint)rc;
}

void smelt_mpi_f_allreduce(void *sendbuf, void *recvbuf, MPI_Fint *count, MPI_Fint *datatype, MPI_Fint *op,
                        MPI_Fint *comm, MPI_Fint *ierr, const char *name)
{
    NEXT_IF_UNKNOWN(allreduce_f, name);
    if (fallback) {
        fallback(sendbuf, recvbuf, count, datatype, op, comm, ierr);
        return;
    }
    int rc = MPI_Allreduce(buf(sendbuf), buf(recvbuf), (int)*count, PMPI_Type_f2c(*datatype),
                           PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm));
    if (ierr)
        *ierr = (MPI_Fint)rc;
}

void smelt_mpi_f_barrier(MPI_Fint *comm, MPI_Fint *ierr, const char *name)
{
    (void)name;
    int rc = MPI_Barrier(PMPI_Comm_f2c(*comm));
    if (ierr)
        *ierr = (MPI_Fint)rc;
}

/* Gather and scatter: the same arguments, MPI_IN_PLACE possible at either end. */
#define ROOTED(fname, call)                                                                                \
    void fname(void *sendbuf, MPI_Fint *sendcount, MPI_Fint *sendtype, void *recvbuf, MPI_Fint *recvcount, \
               MPI_Fint *recvtype, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *ierr, const char *name)       \
    {                                                                                                      \
        NEXT_IF_UNKNOWN(rooted_f, name);                                                                   \
        if (fallback) {                                                                                    \
            fallback(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, ierr);        \
            return;                                                                                        \
        }                                                                                                  \
        int rc = call(buf(sendbuf), (int)*sendcount, PMPI_Type_f2c(*sendtype), buf(recvbuf),               \
                      (int)*recvcount, PMPI_Type_f2c(*recvtype), (int)*root, PMPI_Comm_f2c(*comm));        \
        if (ierr)                                                                                          \
            *ierr = (MPI_Fint)rc;                                                                          \
    }

ROOTED(smelt_mpi_f_gather, MPI_Gather)
ROOTED(smelt_mpi_f_scatter, MPI_Scatter)

void smelt_mpi_f_finalize(MPI_Fint *ierr, const char *name)
{
    (void)name;
    int rc = MPI_Finalize();
    if (ierr)
        *ierr = (MPI_Fint)rc;
}
