! smelt.f90 - Fortran 2008 bindings of smelt's C API (smelt.h), through iso_c_binding.
!
! Compile this module with your program and link libsmelt:
!     gfortran -std=f2008 -fopenmp crates/smelt-capi/include/smelt.f90 prog.f90 \
!         -L target/release -lsmelt -o prog
!     LD_LIBRARY_PATH=target/release ./prog
!
! Every interface below matches its declaration in smelt.h; see smelt.h for what each
! function does. Type mapping:
!   smelt_model* / smelt_tree* / smelt_group* / smelt_member*  -> type(c_ptr), value
!   T **out (an object created by the call)                    -> type(c_ptr), intent(out)
!   size_t       -> integer(c_size_t)
!   int          -> integer(c_int)
!   int64_t      -> integer(c_int64_t)
!   uint32_t     -> integer(c_int32_t)  (Fortran has no unsigned integers: same size
!                                        and bits; CPU ids and counts fit in 0..2**31-1)
!   uint64_t     -> integer(c_int64_t)  (same remark; timeouts fit in 0..2**63-1)
!   double       -> real(c_double)
!   const char * -> character(kind=c_char), dimension(*): the caller NUL-terminates,
!                   e.g. "adaptive-shuffled"//c_null_char
!   void *buf    -> type(c_ptr), value: pass c_loc(x) of a variable with `target`
!   function pointers (smelt_reduce_op, smelt_member_fn) -> type(c_funptr), value:
!                   pass c_funloc(f) of a bind(C) procedure with the abstract interface
!                   smelt_reduce_op / smelt_member_fn below.
! Strings returned by the library (smelt_last_error, smelt_version) are type(c_ptr);
! smelt_error_message() and smelt_version_string() turn them into Fortran strings.
!
! Handles are checked by the library (smelt.h, "Conventions" and "Threads"): a freed or
! expired handle gives SMELT_ERR_INVALID_HANDLE, a member handle used by two threads
! at once SMELT_ERR_BUSY. The release functions, which return a status in C
! (smelt_model_free, smelt_tree_free, smelt_group_free, smelt_member_detach,
! smelt_job_leave, smelt_world_free, smelt_member_free), are
! subroutines here with an optional status argument:
!     call smelt_group_free(group)          ! or: call smelt_group_free(group, rc)
module smelt
    use, intrinsic :: iso_c_binding, only: c_int, c_int32_t, c_int64_t, c_size_t, &
        c_double, c_char, c_ptr, c_funptr, c_null_char, c_associated, c_f_pointer
    implicit none
    private :: c_int, c_int32_t, c_int64_t, c_size_t, c_double, c_char, c_ptr, &
        c_funptr, c_null_char, c_associated, c_f_pointer, c_strlen
    private :: smelt_model_free_c, smelt_tree_free_c, smelt_group_free_c, &
        smelt_member_detach_c, smelt_job_leave_c, smelt_world_free_c, smelt_member_free_c

    ! ---- status codes (smelt.h) --------------------------------------------------
    integer(c_int), parameter, public :: SMELT_OK = 0
    integer(c_int), parameter, public :: SMELT_ERR_INVALID_ARGUMENT = 1
    integer(c_int), parameter, public :: SMELT_ERR_IO = 2
    integer(c_int), parameter, public :: SMELT_ERR_MODEL = 3
    integer(c_int), parameter, public :: SMELT_ERR_TREE = 4
    integer(c_int), parameter, public :: SMELT_ERR_RUNTIME = 5
    integer(c_int), parameter, public :: SMELT_ERR_TIMEOUT = 6
    integer(c_int), parameter, public :: SMELT_ERR_BUFFER = 7
    integer(c_int), parameter, public :: SMELT_ERR_PANIC = 8
    integer(c_int), parameter, public :: SMELT_ERR_INVALID_HANDLE = 9
    integer(c_int), parameter, public :: SMELT_ERR_BUSY = 10

    ! ---- typed reductions (smelt.h: SMELT_INT8 ..., SMELT_OP_SUM ...) -------------
    integer(c_int), parameter, public :: SMELT_INT32 = 5
    integer(c_int), parameter, public :: SMELT_INT64 = 7
    integer(c_int), parameter, public :: SMELT_FLOAT = 9
    integer(c_int), parameter, public :: SMELT_DOUBLE = 10
    integer(c_int), parameter, public :: SMELT_OP_SUM = 1
    integer(c_int), parameter, public :: SMELT_OP_PROD = 2
    integer(c_int), parameter, public :: SMELT_OP_MIN = 3
    integer(c_int), parameter, public :: SMELT_OP_MAX = 4

    ! ---- callbacks -----------------------------------------------------------------
    abstract interface
        ! typedef void (*smelt_reduce_op)(void *inout, const void *in, size_t len, void *arg);
        ! Combine `input` into `inout` (len bytes each). Pass c_funloc(your_op).
        subroutine smelt_reduce_op(inout, input, len, arg) bind(C)
            import :: c_ptr, c_size_t
            type(c_ptr), value :: inout
            type(c_ptr), value :: input
            integer(c_size_t), value :: len
            type(c_ptr), value :: arg
        end subroutine smelt_reduce_op

        ! typedef void (*smelt_member_fn)(smelt_member *member, void *arg);
        subroutine smelt_member_fn(member, arg) bind(C)
            import :: c_ptr
            type(c_ptr), value :: member
            type(c_ptr), value :: arg
        end subroutine smelt_member_fn
    end interface

    interface
        ! size_t strlen(const char *s); (C library, for the string helpers)
        function c_strlen(s) bind(C, name="strlen") result(n)
            import :: c_ptr, c_size_t
            type(c_ptr), value :: s
            integer(c_size_t) :: n
        end function c_strlen

        ! ---- errors and version --------------------------------------------------------
        ! const char *smelt_last_error(void);
        function smelt_last_error() bind(C, name="smelt_last_error") result(msg)
            import :: c_ptr
            type(c_ptr) :: msg
        end function smelt_last_error

        ! const char *smelt_version(void);
        function smelt_version() bind(C, name="smelt_version") result(v)
            import :: c_ptr
            type(c_ptr) :: v
        end function smelt_version

        ! ---- worlds ----------------------------------------------------------------------
        ! A world per member (smelt.h, "worlds"): from `smelt launch`'s environment or from
        ! an MPI communicator's Fortran handle (MPI_COMM_WORLD of `use mpi`; libsmelt built
        ! with the `mpi` feature), then every service from it.
        ! int smelt_world_from_env(smelt_world **world);
        function smelt_world_from_env(world) bind(C, name="smelt_world_from_env") result(rc)
            import :: c_int, c_ptr
            type(c_ptr), intent(out) :: world
            integer(c_int) :: rc
        end function smelt_world_from_env

        ! int smelt_world_from_mpi_f(int32_t comm, smelt_world **world);
        ! comm: a Fortran communicator handle (integer), e.g. MPI_COMM_WORLD.
        function smelt_world_from_mpi_f(comm, world) &
                bind(C, name="smelt_world_from_mpi_f") result(rc)
            import :: c_int, c_int32_t, c_ptr
            integer(c_int32_t), value :: comm
            type(c_ptr), intent(out) :: world
            integer(c_int) :: rc
        end function smelt_world_from_mpi_f

        ! int smelt_world_rank(const smelt_world *world, size_t *rank);
        function smelt_world_rank(world, rank) bind(C, name="smelt_world_rank") result(rc)
            import :: c_int, c_size_t, c_ptr
            type(c_ptr), value :: world
            integer(c_size_t), intent(out) :: rank
            integer(c_int) :: rc
        end function smelt_world_rank

        ! int smelt_world_size(const smelt_world *world, size_t *size);
        function smelt_world_size(world, size) bind(C, name="smelt_world_size") result(rc)
            import :: c_int, c_size_t, c_ptr
            type(c_ptr), value :: world
            integer(c_size_t), intent(out) :: size
            integer(c_int) :: rc
        end function smelt_world_size

        ! int smelt_world_node(const smelt_world *world, size_t *node, size_t *nodes);
        function smelt_world_node(world, node, nodes) bind(C, name="smelt_world_node") result(rc)
            import :: c_int, c_size_t, c_ptr
            type(c_ptr), value :: world
            integer(c_size_t), intent(out) :: node
            integer(c_size_t), intent(out) :: nodes
            integer(c_int) :: rc
        end function smelt_world_node

        ! int smelt_world_cpu(const smelt_world *world, int64_t *cpu);  (-1: no CPU)
        function smelt_world_cpu(world, cpu) bind(C, name="smelt_world_cpu") result(rc)
            import :: c_int, c_int64_t, c_ptr
            type(c_ptr), value :: world
            integer(c_int64_t), intent(out) :: cpu
            integer(c_int) :: rc
        end function smelt_world_cpu

        ! int smelt_world_collectives(smelt_world *world, const char *tree,
        !     smelt_member **member);  tree: "auto"//c_null_char, or an algo name.
        function smelt_world_collectives(world, tree, member) &
                bind(C, name="smelt_world_collectives") result(rc)
            import :: c_int, c_char, c_ptr
            type(c_ptr), value :: world
            character(kind=c_char), dimension(*), intent(in) :: tree
            type(c_ptr), intent(out) :: member
            integer(c_int) :: rc
        end function smelt_world_collectives

        ! int smelt_member_free(smelt_member *member);  (public: subroutine below)
        function smelt_member_free_c(member) bind(C, name="smelt_member_free") result(rc)
            import :: c_int, c_ptr
            type(c_ptr), value :: member
            integer(c_int) :: rc
        end function smelt_member_free_c

        ! int smelt_world_free(smelt_world *world);  (public: subroutine below)
        function smelt_world_free_c(world) bind(C, name="smelt_world_free") result(rc)
            import :: c_int, c_ptr
            type(c_ptr), value :: world
            integer(c_int) :: rc
        end function smelt_world_free_c

        ! ---- models ----------------------------------------------------------------------
        ! int smelt_model_load(const char *path, smelt_model **model);
        function smelt_model_load(path, model) bind(C, name="smelt_model_load") result(rc)
            import :: c_int, c_char, c_ptr
            character(kind=c_char), dimension(*), intent(in) :: path
            type(c_ptr), intent(out) :: model
            integer(c_int) :: rc
        end function smelt_model_load

        ! int smelt_model_synthetic(uint32_t sockets, uint32_t cores_per_socket,
        !     double send_ns, double recv_ns, double remote_factor, smelt_model **model);
        function smelt_model_synthetic(sockets, cores_per_socket, send_ns, recv_ns, &
                remote_factor, model) bind(C, name="smelt_model_synthetic") result(rc)
            import :: c_int, c_int32_t, c_double, c_ptr
            integer(c_int32_t), value :: sockets
            integer(c_int32_t), value :: cores_per_socket
            real(c_double), value :: send_ns
            real(c_double), value :: recv_ns
            real(c_double), value :: remote_factor
            type(c_ptr), intent(out) :: model
            integer(c_int) :: rc
        end function smelt_model_synthetic

        ! int smelt_model_ncpus(const smelt_model *model, size_t *n);
        function smelt_model_ncpus(model, n) bind(C, name="smelt_model_ncpus") result(rc)
            import :: c_int, c_size_t, c_ptr
            type(c_ptr), value :: model
            integer(c_size_t), intent(out) :: n
            integer(c_int) :: rc
        end function smelt_model_ncpus

        ! int smelt_model_cpus(const smelt_model *model, uint32_t *cpus, size_t len);
        function smelt_model_cpus(model, cpus, len) bind(C, name="smelt_model_cpus") result(rc)
            import :: c_int, c_int32_t, c_size_t, c_ptr
            type(c_ptr), value :: model
            integer(c_int32_t), dimension(*), intent(out) :: cpus
            integer(c_size_t), value :: len
            integer(c_int) :: rc
        end function smelt_model_cpus

        ! int smelt_model_free(smelt_model *model);  (public: subroutine smelt_model_free below)
        function smelt_model_free_c(model) bind(C, name="smelt_model_free") result(rc)
            import :: c_int, c_ptr
            type(c_ptr), value :: model
            integer(c_int) :: rc
        end function smelt_model_free_c

        ! ---- trees -----------------------------------------------------------------------
        ! int smelt_tree_build(const smelt_model *model, const char *algo,
        !     const uint32_t *cpus, size_t ncpus, int64_t root, smelt_tree **tree);
        ! With ncpus = 0 the tree spans all CPUs of the model (cpus is then not read: pass
        ! any array, e.g. a zero-size one). root = -1: the cheapest root.
        function smelt_tree_build(model, algo, cpus, ncpus, root, tree) &
                bind(C, name="smelt_tree_build") result(rc)
            import :: c_int, c_char, c_int32_t, c_int64_t, c_size_t, c_ptr
            type(c_ptr), value :: model
            character(kind=c_char), dimension(*), intent(in) :: algo
            integer(c_int32_t), dimension(*), intent(in) :: cpus
            integer(c_size_t), value :: ncpus
            integer(c_int64_t), value :: root
            type(c_ptr), intent(out) :: tree
            integer(c_int) :: rc
        end function smelt_tree_build

        ! int smelt_tree_size(const smelt_tree *tree, size_t *n);
        function smelt_tree_size(tree, n) bind(C, name="smelt_tree_size") result(rc)
            import :: c_int, c_size_t, c_ptr
            type(c_ptr), value :: tree
            integer(c_size_t), intent(out) :: n
            integer(c_int) :: rc
        end function smelt_tree_size

        ! int smelt_tree_member_cpu(const smelt_tree *tree, size_t index, uint32_t *cpu);
        function smelt_tree_member_cpu(tree, index, cpu) &
                bind(C, name="smelt_tree_member_cpu") result(rc)
            import :: c_int, c_int32_t, c_size_t, c_ptr
            type(c_ptr), value :: tree
            integer(c_size_t), value :: index
            integer(c_int32_t), intent(out) :: cpu
            integer(c_int) :: rc
        end function smelt_tree_member_cpu

        ! int smelt_tree_root(const smelt_tree *tree, size_t *index);
        function smelt_tree_root(tree, index) bind(C, name="smelt_tree_root") result(rc)
            import :: c_int, c_size_t, c_ptr
            type(c_ptr), value :: tree
            integer(c_size_t), intent(out) :: index
            integer(c_int) :: rc
        end function smelt_tree_root

        ! int smelt_tree_predict(const smelt_tree *tree, const char *op, double *ns);
        function smelt_tree_predict(tree, op, ns) bind(C, name="smelt_tree_predict") result(rc)
            import :: c_int, c_char, c_double, c_ptr
            type(c_ptr), value :: tree
            character(kind=c_char), dimension(*), intent(in) :: op
            real(c_double), intent(out) :: ns
            integer(c_int) :: rc
        end function smelt_tree_predict

        ! int smelt_tree_free(smelt_tree *tree);  (public: subroutine smelt_tree_free below)
        function smelt_tree_free_c(tree) bind(C, name="smelt_tree_free") result(rc)
            import :: c_int, c_ptr
            type(c_ptr), value :: tree
            integer(c_int) :: rc
        end function smelt_tree_free_c

        ! ---- groups and collectives ------------------------------------------------------
        ! int smelt_group_create(const smelt_tree *tree, smelt_group **group);
        function smelt_group_create(tree, group) bind(C, name="smelt_group_create") result(rc)
            import :: c_int, c_ptr
            type(c_ptr), value :: tree
            type(c_ptr), intent(out) :: group
            integer(c_int) :: rc
        end function smelt_group_create

        ! int smelt_group_create_timeout(const smelt_tree *tree, uint64_t timeout_ms,
        !     smelt_group **group);
        function smelt_group_create_timeout(tree, timeout_ms, group) &
                bind(C, name="smelt_group_create_timeout") result(rc)
            import :: c_int, c_int64_t, c_ptr
            type(c_ptr), value :: tree
            integer(c_int64_t), value :: timeout_ms
            type(c_ptr), intent(out) :: group
            integer(c_int) :: rc
        end function smelt_group_create_timeout

        ! int smelt_group_size(const smelt_group *group, size_t *n);
        function smelt_group_size(group, n) bind(C, name="smelt_group_size") result(rc)
            import :: c_int, c_size_t, c_ptr
            type(c_ptr), value :: group
            integer(c_size_t), intent(out) :: n
            integer(c_int) :: rc
        end function smelt_group_size

        ! int smelt_group_run(smelt_group *group, smelt_member_fn fn, void *arg);
        ! fn = c_funloc(body), body a bind(C) subroutine with interface smelt_member_fn.
        function smelt_group_run(group, fn, arg) bind(C, name="smelt_group_run") result(rc)
            import :: c_int, c_ptr, c_funptr
            type(c_ptr), value :: group
            type(c_funptr), value :: fn
            type(c_ptr), value :: arg
            integer(c_int) :: rc
        end function smelt_group_run

        ! int smelt_group_attach(smelt_group *group, size_t index, smelt_member **member);
        function smelt_group_attach(group, index, member) &
                bind(C, name="smelt_group_attach") result(rc)
            import :: c_int, c_size_t, c_ptr
            type(c_ptr), value :: group
            integer(c_size_t), value :: index
            type(c_ptr), intent(out) :: member
            integer(c_int) :: rc
        end function smelt_group_attach

        ! int smelt_member_detach(smelt_member *member);  (public: subroutine below)
        function smelt_member_detach_c(member) bind(C, name="smelt_member_detach") result(rc)
            import :: c_int, c_ptr
            type(c_ptr), value :: member
            integer(c_int) :: rc
        end function smelt_member_detach_c

        ! int smelt_member_index(const smelt_member *member, size_t *index);
        function smelt_member_index(member, index) bind(C, name="smelt_member_index") result(rc)
            import :: c_int, c_size_t, c_ptr
            type(c_ptr), value :: member
            integer(c_size_t), intent(out) :: index
            integer(c_int) :: rc
        end function smelt_member_index

        ! int smelt_member_size(const smelt_member *member, size_t *n);
        function smelt_member_size(member, n) bind(C, name="smelt_member_size") result(rc)
            import :: c_int, c_size_t, c_ptr
            type(c_ptr), value :: member
            integer(c_size_t), intent(out) :: n
            integer(c_int) :: rc
        end function smelt_member_size

        ! int smelt_member_cpu(const smelt_member *member, uint32_t *cpu);
        function smelt_member_cpu(member, cpu) bind(C, name="smelt_member_cpu") result(rc)
            import :: c_int, c_int32_t, c_ptr
            type(c_ptr), value :: member
            integer(c_int32_t), intent(out) :: cpu
            integer(c_int) :: rc
        end function smelt_member_cpu

        ! int smelt_member_is_root(const smelt_member *member, int *is_root);
        function smelt_member_is_root(member, is_root) &
                bind(C, name="smelt_member_is_root") result(rc)
            import :: c_int, c_ptr
            type(c_ptr), value :: member
            integer(c_int), intent(out) :: is_root
            integer(c_int) :: rc
        end function smelt_member_is_root

        ! int smelt_barrier(smelt_member *member);
        function smelt_barrier(member) bind(C, name="smelt_barrier") result(rc)
            import :: c_int, c_ptr
            type(c_ptr), value :: member
            integer(c_int) :: rc
        end function smelt_barrier

        ! int smelt_broadcast(smelt_member *member, void *buf, size_t len);
        function smelt_broadcast(member, buf, len) bind(C, name="smelt_broadcast") result(rc)
            import :: c_int, c_size_t, c_ptr
            type(c_ptr), value :: member
            type(c_ptr), value :: buf
            integer(c_size_t), value :: len
            integer(c_int) :: rc
        end function smelt_broadcast

        ! int smelt_reduce(smelt_member *member, void *buf, size_t len, smelt_reduce_op op,
        !     void *arg);
        function smelt_reduce(member, buf, len, op, arg) bind(C, name="smelt_reduce") result(rc)
            import :: c_int, c_size_t, c_ptr, c_funptr
            type(c_ptr), value :: member
            type(c_ptr), value :: buf
            integer(c_size_t), value :: len
            type(c_funptr), value :: op
            type(c_ptr), value :: arg
            integer(c_int) :: rc
        end function smelt_reduce

        ! int smelt_allreduce(smelt_member *member, void *buf, size_t len, smelt_reduce_op op,
        !     void *arg);
        function smelt_allreduce(member, buf, len, op, arg) &
                bind(C, name="smelt_allreduce") result(rc)
            import :: c_int, c_size_t, c_ptr, c_funptr
            type(c_ptr), value :: member
            type(c_ptr), value :: buf
            integer(c_size_t), value :: len
            type(c_funptr), value :: op
            type(c_ptr), value :: arg
            integer(c_int) :: rc
        end function smelt_allreduce

        ! int smelt_allreduce_typed(smelt_member *member, void *buf, size_t count, int type,
        !     int op);  buf = c_loc(x); type SMELT_INT64 ..., op SMELT_OP_SUM ...
        function smelt_allreduce_typed(member, buf, count, type, op) &
                bind(C, name="smelt_allreduce_typed") result(rc)
            import :: c_int, c_size_t, c_ptr
            type(c_ptr), value :: member
            type(c_ptr), value :: buf
            integer(c_size_t), value :: count
            integer(c_int), value :: type
            integer(c_int), value :: op
            integer(c_int) :: rc
        end function smelt_allreduce_typed

        ! int smelt_job_join(smelt_member **member);
        ! Joins the job this process was started in by `smelt launch -n N -- ./prog`.
        function smelt_job_join(member) bind(C, name="smelt_job_join") result(rc)
            import :: c_int, c_ptr
            type(c_ptr), intent(out) :: member
            integer(c_int) :: rc
        end function smelt_job_join

        ! int smelt_job_leave(smelt_member *member);  (public: subroutine below)
        function smelt_job_leave_c(member) bind(C, name="smelt_job_leave") result(rc)
            import :: c_int, c_ptr
            type(c_ptr), value :: member
            integer(c_int) :: rc
        end function smelt_job_leave_c

        ! int smelt_group_free(smelt_group *group);  (public: subroutine smelt_group_free below)
        function smelt_group_free_c(group) bind(C, name="smelt_group_free") result(rc)
            import :: c_int, c_ptr
            type(c_ptr), value :: group
            integer(c_int) :: rc
        end function smelt_group_free_c
    end interface

contains

    ! smelt_model_free: SMELT_OK, or an error code in rc when present.
    subroutine smelt_model_free(model, rc)
        type(c_ptr), intent(in) :: model
        integer(c_int), intent(out), optional :: rc
        integer(c_int) :: r
        r = smelt_model_free_c(model)
        if (present(rc)) rc = r
    end subroutine smelt_model_free

    ! smelt_tree_free: SMELT_OK, or an error code in rc when present.
    subroutine smelt_tree_free(tree, rc)
        type(c_ptr), intent(in) :: tree
        integer(c_int), intent(out), optional :: rc
        integer(c_int) :: r
        r = smelt_tree_free_c(tree)
        if (present(rc)) rc = r
    end subroutine smelt_tree_free

    ! smelt_group_free: SMELT_OK, or an error code in rc when present.
    subroutine smelt_group_free(group, rc)
        type(c_ptr), intent(in) :: group
        integer(c_int), intent(out), optional :: rc
        integer(c_int) :: r
        r = smelt_group_free_c(group)
        if (present(rc)) rc = r
    end subroutine smelt_group_free

    ! smelt_member_detach: SMELT_OK, or an error code in rc when present.
    subroutine smelt_member_detach(member, rc)
        type(c_ptr), intent(in) :: member
        integer(c_int), intent(out), optional :: rc
        integer(c_int) :: r
        r = smelt_member_detach_c(member)
        if (present(rc)) rc = r
    end subroutine smelt_member_detach

    ! smelt_job_leave: SMELT_OK, or an error code in rc when present.
    subroutine smelt_job_leave(member, rc)
        type(c_ptr), intent(in) :: member
        integer(c_int), intent(out), optional :: rc
        integer(c_int) :: r
        r = smelt_job_leave_c(member)
        if (present(rc)) rc = r
    end subroutine smelt_job_leave

    ! smelt_world_free: SMELT_OK, or an error code in rc when present.
    subroutine smelt_world_free(world, rc)
        type(c_ptr), intent(in) :: world
        integer(c_int), intent(out), optional :: rc
        integer(c_int) :: r
        r = smelt_world_free_c(world)
        if (present(rc)) rc = r
    end subroutine smelt_world_free

    ! smelt_member_free (a member of smelt_world_collectives): SMELT_OK, or an error
    ! code in rc when present.
    subroutine smelt_member_free(member, rc)
        type(c_ptr), intent(in) :: member
        integer(c_int), intent(out), optional :: rc
        integer(c_int) :: r
        r = smelt_member_free_c(member)
        if (present(rc)) rc = r
    end subroutine smelt_member_free

    ! The NUL-terminated C string at p as a Fortran string ("" for a null pointer).
    function smelt_c_string(p) result(s)
        type(c_ptr), intent(in) :: p
        character(len=:), allocatable :: s
        character(kind=c_char), dimension(:), pointer :: chars
        integer(c_size_t) :: n, i
        if (.not. c_associated(p)) then
            s = ""
            return
        end if
        n = c_strlen(p)
        allocate (character(len=n) :: s)
        if (n == 0) return
        call c_f_pointer(p, chars, [n])
        do i = 1, n
            s(i:i) = chars(i)
        end do
    end function smelt_c_string

    ! smelt_last_error() as a Fortran string: the message of the last failed smelt call
    ! on the calling thread ("" after a success).
    function smelt_error_message() result(s)
        character(len=:), allocatable :: s
        s = smelt_c_string(smelt_last_error())
    end function smelt_error_message

    ! smelt_version() as a Fortran string, e.g. "0.1.0".
    function smelt_version_string() result(s)
        character(len=:), allocatable :: s
        s = smelt_c_string(smelt_version())
    end function smelt_version_string

    ! trim(s) followed by NUL, for the character(kind=c_char) arguments.
    function smelt_cstr(s) result(c)
        character(len=*), intent(in) :: s
        character(kind=c_char, len=:), allocatable :: c
        c = trim(s)//c_null_char
    end function smelt_cstr

end module smelt
