! omp_barrier.f90 - smelt from Fortran and OpenMP: build Smelt's adaptive-shuffled tree
! over N members (N = OMP_NUM_THREADS), attach one OpenMP thread per member, and run
! barriers, a broadcast, a reduce and an allreduce with Fortran bind(C) operators; then
! the same allreduce once more from smelt_group_run's own threads with a Fortran body.
!
!   cargo build --release -p smelt-capi
!   gfortran -std=f2008 -fopenmp crates/smelt-capi/include/smelt.f90 \
!       examples/fortran/omp_barrier.f90 -L target/release -lsmelt -o omp_barrier
!   OMP_NUM_THREADS=4 LD_LIBRARY_PATH=target/release ./omp_barrier [model.json] [rounds]
!
! Without a model file (or with "") it uses a synthetic model of N CPUs (2 sockets when
! N is even and at least 4); with one, the tree spans the model's first N CPUs. Members
! whose CPU this process may not use run unpinned, so N may exceed the CPU count.
! Prints "fortran: N members, R barriers, allreduce sum = S, OK" with S = N(N+1)/2;
! any failure is reported on stderr and ends the program with error stop.

module omp_barrier_ops
    use, intrinsic :: iso_c_binding
    use, intrinsic :: iso_fortran_env, only: error_unit
    use smelt
    implicit none

contains

    ! smelt_reduce_op: element-wise sum of integer(c_int64_t) values.
    subroutine sum_i64(inout, input, len, arg) bind(C)
        type(c_ptr), value :: inout
        type(c_ptr), value :: input
        integer(c_size_t), value :: len
        type(c_ptr), value :: arg
        integer(c_int64_t), dimension(:), pointer :: a, b
        integer(c_size_t) :: n
        if (c_associated(arg)) error stop 3 ! the example passes no argument
        n = len/c_sizeof(0_c_int64_t)
        if (n == 0) return
        call c_f_pointer(inout, a, [n])
        call c_f_pointer(input, b, [n])
        a = a + b
    end subroutine sum_i64

    ! smelt_member_fn for smelt_group_run: allreduce of (index+1); each member stores
    ! the result in its own slot of the integer(c_int64_t) array that arg points to.
    subroutine run_body(member, arg) bind(C)
        type(c_ptr), value :: member
        type(c_ptr), value :: arg
        integer(c_int64_t), dimension(:), pointer :: results
        integer(c_int64_t), target :: x
        integer(c_size_t) :: idx, n
        integer(c_int) :: rc
        rc = smelt_member_index(member, idx)
        if (rc /= SMELT_OK) return ! smelt_group_run reports nothing here: leave -1
        ! The array has one slot per member; its size is not passed: read it from slot 0.
        call c_f_pointer(arg, results, [1])
        n = int(results(1), c_size_t)
        call c_f_pointer(arg, results, [n + 1])
        x = int(idx, c_int64_t) + 1
        rc = smelt_allreduce(member, c_loc(x), c_sizeof(x), c_funloc(sum_i64), c_null_ptr)
        if (rc == SMELT_OK) results(idx + 2) = x
    end subroutine run_body

    ! Ends the program unless rc is SMELT_OK, with smelt_last_error's message.
    subroutine check(rc, what)
        integer(c_int), intent(in) :: rc
        character(len=*), intent(in) :: what
        if (rc == SMELT_OK) return
        !$omp critical (report)
        write (error_unit, '(a, " failed (", i0, "): ", a)') what, rc, smelt_error_message()
        !$omp end critical (report)
        error stop 1
    end subroutine check

    ! Ends the program with msg unless ok.
    subroutine expect(ok, msg)
        logical, intent(in) :: ok
        character(len=*), intent(in) :: msg
        if (ok) return
        !$omp critical (report)
        write (error_unit, '("FAILED: ", a)') msg
        !$omp end critical (report)
        error stop 2
    end subroutine expect

end module omp_barrier_ops

program omp_barrier
    use, intrinsic :: iso_c_binding
    use omp_lib
    use smelt
    use omp_barrier_ops
    implicit none

    type(c_ptr) :: model, tree, group, member
    character(len=4096) :: path, arg
    integer :: n, rounds, nargs, r, tid, sockets
    integer(c_size_t) :: ncpus, size, idx, root_index
    integer(c_int32_t), dimension(:), allocatable :: all_cpus
    integer(c_int32_t), dimension(0) :: no_cpus
    integer(c_int32_t) :: cpu
    integer(c_int) :: rc, is_root
    real(c_double) :: predicted
    integer(c_int64_t) :: expected
    integer(c_int64_t), target :: x, bcast(4), pair(2)
    integer(c_int64_t), dimension(:), allocatable, target :: results
    integer :: roots

    nargs = command_argument_count()
    path = ""
    rounds = 200
    if (nargs >= 1) call get_command_argument(1, path)
    if (nargs >= 2) then
        call get_command_argument(2, arg)
        read (arg, *) rounds
    end if
    call omp_set_dynamic(.false.)
    n = omp_get_max_threads()
    call expect(n >= 1, "no OpenMP threads")
    expected = int(n, c_int64_t)*(n + 1)/2

    ! The model, and the tree over N of its CPUs.
    if (len_trim(path) > 0) then
        call check(smelt_model_load(smelt_cstr(path), model), "smelt_model_load("//trim(path)//")")
        call check(smelt_model_ncpus(model, ncpus), "smelt_model_ncpus")
        call expect(ncpus >= n, "the model has fewer CPUs than OMP_NUM_THREADS")
        allocate (all_cpus(ncpus))
        call check(smelt_model_cpus(model, all_cpus, ncpus), "smelt_model_cpus")
        call check(smelt_tree_build(model, smelt_cstr("adaptive-shuffled"), all_cpus, &
            int(n, c_size_t), -1_c_int64_t, tree), "smelt_tree_build")
    else
        sockets = 1
        if (n >= 4 .and. mod(n, 2) == 0) sockets = 2
        call check(smelt_model_synthetic(int(sockets, c_int32_t), int(n/sockets, c_int32_t), &
            50.0_c_double, 60.0_c_double, 3.0_c_double, model), "smelt_model_synthetic")
        call check(smelt_model_ncpus(model, ncpus), "smelt_model_ncpus")
        call expect(ncpus == n, "the synthetic model does not have N CPUs")
        ! ncpus = 0: all CPUs of the model (the array is not read).
        call check(smelt_tree_build(model, smelt_cstr("adaptive-shuffled"), no_cpus, &
            0_c_size_t, -1_c_int64_t, tree), "smelt_tree_build")
    end if
    call check(smelt_tree_size(tree, size), "smelt_tree_size")
    call expect(size == n, "tree size is not N")
    call check(smelt_tree_root(tree, root_index), "smelt_tree_root")
    call check(smelt_tree_member_cpu(tree, root_index, cpu), "smelt_tree_member_cpu")
    call check(smelt_tree_predict(tree, smelt_cstr("barrier"), predicted), "smelt_tree_predict")
    call expect(predicted >= 0, "predicted barrier time is negative")
    ! An unknown operation fails with a message from smelt_last_error.
    rc = smelt_tree_predict(tree, smelt_cstr("gossip"), predicted)
    call expect(rc == SMELT_ERR_INVALID_ARGUMENT, "predict(gossip) did not fail as expected")
    call expect(index(smelt_error_message(), "gossip") > 0, &
        "smelt_last_error does not name the operation: "//smelt_error_message())
    call check(smelt_group_create(tree, group), "smelt_group_create")
    call expect(smelt_error_message() == "", "smelt_last_error is not empty after a success")
    call check(smelt_group_size(group, size), "smelt_group_size")
    call expect(size == n, "group size is not N")
    call smelt_tree_free(tree)
    call smelt_model_free(model)
    write (*, '("smelt ", a, ": ", i0, " members, root CPU ", i0, ", predicted barrier ", i0, " ns")') &
        smelt_version_string(), n, cpu, nint(predicted)

    ! One OpenMP thread per member.
    roots = 0
    !$omp parallel num_threads(n) default(none) &
    !$omp     shared(group, n, rounds, expected, roots) &
    !$omp     private(tid, member, idx, is_root, r, x, bcast, pair)
    tid = omp_get_thread_num()
    call expect(omp_get_num_threads() == n, "OpenMP gave fewer threads than N")
    call check(smelt_group_attach(group, int(tid, c_size_t), member), "smelt_group_attach")
    call check(smelt_member_index(member, idx), "smelt_member_index")
    call expect(idx == tid, "member index is not the thread number")
    call check(smelt_member_is_root(member, is_root), "smelt_member_is_root")
    if (is_root == 1) then
        !$omp atomic
        roots = roots + 1
    end if

    ! Broadcast of 4 integers from the root.
    bcast = 0
    if (is_root == 1) bcast = [42_c_int64_t, -7_c_int64_t, 2_c_int64_t**40, int(n, c_int64_t)]
    call check(smelt_broadcast(member, c_loc(bcast), c_sizeof(bcast)), "smelt_broadcast")
    call expect(all(bcast == [42_c_int64_t, -7_c_int64_t, 2_c_int64_t**40, int(n, c_int64_t)]), &
        "broadcast delivered wrong data")

    do r = 1, rounds
        call check(smelt_barrier(member), "smelt_barrier")
    end do

    ! Reduce of two integers (index+1, 1): the root gets (N(N+1)/2, N).
    pair = [int(tid, c_int64_t) + 1, 1_c_int64_t]
    call check(smelt_reduce(member, c_loc(pair), c_sizeof(pair), c_funloc(sum_i64), c_null_ptr), &
        "smelt_reduce")
    if (is_root == 1) call expect(all(pair == [expected, int(n, c_int64_t)]), "reduce result is wrong")

    ! Allreduce of (index+1): every member gets N(N+1)/2.
    x = int(tid, c_int64_t) + 1
    call check(smelt_allreduce(member, c_loc(x), c_sizeof(x), c_funloc(sum_i64), c_null_ptr), &
        "smelt_allreduce")
    call expect(x == expected, "allreduce result is wrong")
    call smelt_member_detach(member)
    !$omp end parallel
    call expect(roots == 1, "not exactly one member is the root")

    ! The same allreduce on smelt_group_run's threads, with a Fortran body.
    allocate (results(n + 1))
    results = -1
    results(1) = n
    call check(smelt_group_run(group, c_funloc(run_body), c_loc(results)), "smelt_group_run")
    call expect(all(results(2:) == expected), "allreduce under smelt_group_run is wrong")
    call smelt_group_free(group, rc)
    call check(rc, "smelt_group_free")
    ! Handles are checked: a second free is an error code, not undefined behaviour.
    call smelt_group_free(group, rc)
    call expect(rc == SMELT_ERR_INVALID_HANDLE, "a second smelt_group_free did not fail")

    write (*, '("fortran: ", i0, " members, ", i0, " barriers, allreduce sum = ", i0, ", OK")') &
        n, rounds, expected
end program omp_barrier
