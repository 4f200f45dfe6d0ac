/* MPI's predefined handles for the interposer.
 *
 * Why this file exists: MPI_INT, MPI_SUM, MPI_IN_PLACE and friends are preprocessor
 * macros whose values differ between MPI implementations (addresses of library
 * globals in Open MPI, integer codes in MPICH). bindgen cannot turn such macros into
 * Rust, and rsmpi's own C shim (mpi-sys) exports only the handles rsmpi uses (no
 * MPI_INT, MPI_LONG, MPI_BYTE, MPI_IN_PLACE, ...). Compiled with the MPI's own
 * compiler wrapper, this file names each handle once, so the interposer is correct
 * for whichever MPI ABI it is built against. */
#include <mpi.h>
#include <stdbool.h>

/* Classes returned by smelt_mpi_type_class (keep in sync with interpose/ffi.rs). */
enum {
    SMELT_T_DERIVED = 0,  /* not a predefined datatype */
    SMELT_T_SIGNED = 1,   /* signed integer of *size bytes */
    SMELT_T_UNSIGNED = 2, /* unsigned integer of *size bytes */
    SMELT_T_FLOAT = 3,    /* IEEE floating point of *size bytes */
    SMELT_T_BOOL = 4,     /* C _Bool */
    SMELT_T_BYTE = 5,     /* MPI_BYTE */
    SMELT_T_CHAR = 6,     /* MPI_CHAR: a character, not a number (broadcast only) */
    SMELT_T_OTHER = 7,    /* another predefined datatype (pairs, complex, long double...) */
    SMELT_T_NULL = 8,     /* MPI_DATATYPE_NULL */
    SMELT_T_FINT = 9      /* Fortran INTEGER: no logical operations (MPI's rules) */
};

#define IS(h, cls, sz)          \
    if (t == (h)) {             \
        *size = (int)(sz);      \
        return (cls);           \
    }

/* Fortran types: their size is the Fortran compiler's, known to MPI at run time. */
static int fortran(MPI_Datatype t, int cls, int *size)
{
    int s = 0;
    if (PMPI_Type_size(t, &s) != MPI_SUCCESS || (s != 1 && s != 2 && s != 4 && s != 8))
        return SMELT_T_OTHER;
    if (cls == SMELT_T_FLOAT && s != 4 && s != 8)
        return SMELT_T_OTHER;
    *size = s;
    return cls;
}

int smelt_mpi_type_class(MPI_Datatype t, int *size)
{
    *size = 0;
    if (t == MPI_DATATYPE_NULL)
        return SMELT_T_NULL;
    IS(MPI_INT, SMELT_T_SIGNED, sizeof(int))
    IS(MPI_DOUBLE, SMELT_T_FLOAT, sizeof(double))
    IS(MPI_FLOAT, SMELT_T_FLOAT, sizeof(float))
    IS(MPI_LONG, SMELT_T_SIGNED, sizeof(long))
    IS(MPI_UNSIGNED, SMELT_T_UNSIGNED, sizeof(unsigned))
    IS(MPI_UNSIGNED_LONG, SMELT_T_UNSIGNED, sizeof(unsigned long))
    IS(MPI_LONG_LONG, SMELT_T_SIGNED, sizeof(long long))
    IS(MPI_LONG_LONG_INT, SMELT_T_SIGNED, sizeof(long long))
    IS(MPI_UNSIGNED_LONG_LONG, SMELT_T_UNSIGNED, sizeof(unsigned long long))
    IS(MPI_SHORT, SMELT_T_SIGNED, sizeof(short))
    IS(MPI_UNSIGNED_SHORT, SMELT_T_UNSIGNED, sizeof(unsigned short))
    IS(MPI_SIGNED_CHAR, SMELT_T_SIGNED, 1)
    IS(MPI_UNSIGNED_CHAR, SMELT_T_UNSIGNED, 1)
    IS(MPI_INT8_T, SMELT_T_SIGNED, 1)
    IS(MPI_INT16_T, SMELT_T_SIGNED, 2)
    IS(MPI_INT32_T, SMELT_T_SIGNED, 4)
    IS(MPI_INT64_T, SMELT_T_SIGNED, 8)
    IS(MPI_UINT8_T, SMELT_T_UNSIGNED, 1)
    IS(MPI_UINT16_T, SMELT_T_UNSIGNED, 2)
    IS(MPI_UINT32_T, SMELT_T_UNSIGNED, 4)
    IS(MPI_UINT64_T, SMELT_T_UNSIGNED, 8)
    IS(MPI_C_BOOL, SMELT_T_BOOL, sizeof(bool))
    IS(MPI_BYTE, SMELT_T_BYTE, 1)
    IS(MPI_CHAR, SMELT_T_CHAR, 1)
    if (t == MPI_INTEGER)
        return fortran(t, SMELT_T_FINT, size);
    if (t == MPI_REAL)
        return fortran(t, SMELT_T_FLOAT, size);
    if (t == MPI_DOUBLE_PRECISION)
        return fortran(t, SMELT_T_FLOAT, size);
    {
        int ni = 0, na = 0, nd = 0, combiner = 0;
        if (PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) == MPI_SUCCESS &&
            combiner == MPI_COMBINER_NAMED)
            return SMELT_T_OTHER;
    }
    return SMELT_T_DERIVED;
}

/* Operations: 1..10 the ones smelt reduces, then the predefined ones it leaves to MPI;
 * 0 for a user-defined operation. */
int smelt_mpi_op_class(MPI_Op op)
{
    if (op == MPI_SUM) return 1;
    if (op == MPI_PROD) return 2;
    if (op == MPI_MIN) return 3;
    if (op == MPI_MAX) return 4;
    if (op == MPI_LAND) return 5;
    if (op == MPI_LOR) return 6;
    if (op == MPI_LXOR) return 7;
    if (op == MPI_BAND) return 8;
    if (op == MPI_BOR) return 9;
    if (op == MPI_BXOR) return 10;
    if (op == MPI_MAXLOC || op == MPI_MINLOC) return 11;
    if (op == MPI_REPLACE || op == MPI_NO_OP) return 12;
    if (op == MPI_OP_NULL) return 13;
    return 0;
}

void *const smelt_mpi_in_place = MPI_IN_PLACE;
const MPI_Datatype smelt_mpi_byte = MPI_BYTE;
const MPI_Datatype smelt_mpi_int64 = MPI_INT64_T;
const MPI_Datatype smelt_mpi_uint64 = MPI_UINT64_T;
const MPI_Op smelt_mpi_op_min = MPI_MIN;
const MPI_Op smelt_mpi_op_bor = MPI_BOR;
const MPI_Comm smelt_mpi_comm_world = MPI_COMM_WORLD;
const MPI_Comm smelt_mpi_comm_null = MPI_COMM_NULL;
const int smelt_mpi_undefined = MPI_UNDEFINED;
const int smelt_mpi_thread_multiple = MPI_THREAD_MULTIPLE;
const int smelt_mpi_keyval_invalid = MPI_KEYVAL_INVALID;
const int smelt_mpi_success = MPI_SUCCESS;
MPI_Status *const smelt_mpi_status_ignore = MPI_STATUS_IGNORE;
