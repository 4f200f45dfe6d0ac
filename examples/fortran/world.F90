! world.F90 - a Fortran program on a smelt world: each member gets its world from
! `smelt launch`'s environment (smelt_world_from_env) or from MPI_COMM_WORLD
! (smelt_world_from_mpi_f; built with -DSMELT_EXAMPLE_MPI by mpif90), makes tree
! collectives from it (smelt_world_collectives), and checks an allreduce, a broadcast
! and a barrier against plain arithmetic for some rounds. Member 0 prints
! "fortran world ok: N members (HOW), R rounds"; a failure prints the call and
! smelt's message and stops with a non-zero code.
!
!   gfortran -std=f2008 -cpp -J build crates/smelt-capi/include/smelt.f90 \
!       examples/fortran/world.F90 -L target/debug -lsmelt -o world_f
!   LD_LIBRARY_PATH=target/debug target/debug/smelt launch -n 4 -- ./world_f env 100
!
!   mpif90 -cpp -DSMELT_EXAMPLE_MPI -J build crates/smelt-capi/include/smelt.f90 \
!       examples/fortran/world.F90 -L target/debug -lsmelt -o world_f_mpi
!   mpirun -n 4 ./world_f_mpi mpi 100     (libsmelt built with --features mpi)
program world_example
    use, intrinsic :: iso_c_binding, only: c_int, c_int32_t, c_int64_t, c_size_t, c_ptr, &
        c_loc
    use smelt
#ifdef SMELT_EXAMPLE_MPI
    use mpi
#endif
    implicit none
    type(c_ptr) :: w, m
    integer(c_size_t) :: rank, n, node, nodes, idx, size
    integer(c_int64_t), target :: x, b
    integer(c_int) :: is_root
    character(len=32) :: mode, arg
    character(len=:), allocatable :: how
    integer :: rounds, k
#ifdef SMELT_EXAMPLE_MPI
    integer :: ierr
#endif

    rounds = 20
    call get_command_argument(1, mode)
    if (command_argument_count() >= 2) then
        call get_command_argument(2, arg)
        read (arg, *) rounds
    end if
    if (trim(mode) == "mpi") then
#ifdef SMELT_EXAMPLE_MPI
        how = "MPI ranks"
        call MPI_Init(ierr)
        call check(smelt_world_from_mpi_f(int(MPI_COMM_WORLD, c_int32_t), w), &
            "smelt_world_from_mpi_f")
#else
        print '(a)', "world_f: built without MPI (mpif90 -cpp -DSMELT_EXAMPLE_MPI)"
        error stop 64
#endif
    else if (trim(mode) == "env") then
        how = "processes"
        call check(smelt_world_from_env(w), "smelt_world_from_env")
    else
        print '(a)', "usage: world_f env|mpi [ROUNDS]"
        error stop 64
    end if

    call check(smelt_world_rank(w, rank), "smelt_world_rank")
    call check(smelt_world_size(w, n), "smelt_world_size")
    call check(smelt_world_node(w, node, nodes), "smelt_world_node")
    if (rank >= n .or. node >= nodes) call fail("rank, size, node or nodes out of range")

    call check(smelt_world_collectives(w, smelt_cstr("auto"), m), "smelt_world_collectives")
    call check(smelt_member_index(m, idx), "smelt_member_index")
    call check(smelt_member_size(m, size), "smelt_member_size")
    if (idx /= rank .or. size /= n) call fail("the member's rank or size is not the world's")
    call check(smelt_member_is_root(m, is_root), "smelt_member_is_root")
    do k = 0, rounds - 1
        x = int(rank, c_int64_t) + 1 + k
        call check(smelt_allreduce_typed(m, c_loc(x), 1_c_size_t, SMELT_INT64, SMELT_OP_SUM), &
            "smelt_allreduce_typed")
        if (x /= int(n * (n + 1) / 2, c_int64_t) + int(n, c_int64_t) * k) &
            call fail("the allreduce's sum is wrong")
        b = 0
        if (is_root == 1) b = 4242 + k
        call check(smelt_broadcast(m, c_loc(b), 8_c_size_t), "smelt_broadcast")
        if (b /= 4242 + k) call fail("the broadcast's value is wrong")
    end do
    call check(smelt_barrier(m), "smelt_barrier")
    call smelt_member_free(m)
    call smelt_world_free(w)
    if (rank == 0) print '(a,i0,a,a,a,i0,a)', "fortran world ok: ", n, " members (", how, &
        "), ", rounds, " rounds"
#ifdef SMELT_EXAMPLE_MPI
    if (trim(mode) == "mpi") call MPI_Finalize(ierr)
#endif

contains

    subroutine check(rc, what)
        integer(c_int), intent(in) :: rc
        character(len=*), intent(in) :: what
        if (rc /= SMELT_OK) then
            print '(a,a,i0,a,a)', what, " failed (", rc, "): ", smelt_error_message()
            error stop 1
        end if
    end subroutine check

    subroutine fail(why)
        character(len=*), intent(in) :: why
        print '(a)', why
        error stop 2
    end subroutine fail

end program world_example
