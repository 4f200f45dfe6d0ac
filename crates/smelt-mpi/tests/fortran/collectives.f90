! Checks MPI_BCAST, MPI_REDUCE, MPI_ALLREDUCE, MPI_BARRIER, MPI_GATHER and MPI_SCATTER
! called from Fortran (`use mpi`) against plain arithmetic: every root, with and
! without MPI_IN_PLACE, INTEGER, REAL and DOUBLE PRECISION, on MPI_COMM_WORLD and on a
! communicator with the ranks reordered. Prints "fortran: OK <checks>" on rank 0; on a
! wrong result prints what differed and calls MPI_ABORT(2).
program fortran_collectives
    use mpi
    implicit none
    integer :: ierr, wrank, wsize, comm, checks, total

    call MPI_INIT(ierr)
    call MPI_COMM_RANK(MPI_COMM_WORLD, wrank, ierr)
    call MPI_COMM_SIZE(MPI_COMM_WORLD, wsize, ierr)
    checks = 0
    call check_comm(MPI_COMM_WORLD)
    ! Even ranks first: with emulated nodes, nodes of ranks out of order.
    call MPI_COMM_SPLIT(MPI_COMM_WORLD, 0, mod(wrank, 2) * wsize + wrank, comm, ierr)
    call check_comm(comm)
    call MPI_COMM_FREE(comm, ierr)
    call MPI_REDUCE(checks, total, 1, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
    if (wrank == 0) print '(a, i0, a)', 'fortran: OK ', total, ' checks'
    call MPI_FINALIZE(ierr)

contains

    subroutine fail(what, root, got, want)
        character(len=*), intent(in) :: what
        integer, intent(in) :: root
        double precision, intent(in) :: got, want
        integer :: e
        write (0, '(a, a, a, i0, a, i0, a, g0, a, g0)') 'fortran: WRONG ', what, ' root ', root, &
            ' world rank ', wrank, ': got ', got, ' want ', want
        call MPI_ABORT(MPI_COMM_WORLD, 2, e)
    end subroutine fail

    subroutine ok(e, what)
        integer, intent(in) :: e
        character(len=*), intent(in) :: what
        if (e /= MPI_SUCCESS) call fail(what // ' ierr', -1, dble(e), dble(MPI_SUCCESS))
        checks = checks + 1
    end subroutine ok

    subroutine check_comm(c)
        integer, intent(in) :: c
        integer, parameter :: n = 5, m = 3
        integer :: rank, size, root, i, k, e
        integer :: ia(n), ib(n), isum(n), imax(n)
        real :: ra(m), rb(m)
        double precision :: da(m), db(m)
        integer, allocatable :: all(:), mine(:)

        call MPI_COMM_RANK(c, rank, e)
        call MPI_COMM_SIZE(c, size, e)
        allocate (all(2 * size), mine(2))
        do i = 1, n
            isum(i) = 0
            imax(i) = -huge(0)
            do k = 0, size - 1
                isum(i) = isum(i) + val(k, i)
                imax(i) = max(imax(i), val(k, i))
            end do
        end do
        do root = 0, size - 1
            ! Broadcast.
            ia = -1
            if (rank == root) ia = [(1000 * root + i, i = 1, n)]
            call MPI_BCAST(ia, n, MPI_INTEGER, root, c, e)
            call ok(e, 'MPI_BCAST')
            do i = 1, n
                if (ia(i) /= 1000 * root + i) call fail('MPI_BCAST', root, dble(ia(i)), dble(1000 * root + i))
            end do
            ! Reduce (sum), then in place at the root (max).
            ia = [(val(rank, i), i = 1, n)]
            ib = -7
            call MPI_REDUCE(ia, ib, n, MPI_INTEGER, MPI_SUM, root, c, e)
            call ok(e, 'MPI_REDUCE')
            if (rank == root) then
                do i = 1, n
                    if (ib(i) /= isum(i)) call fail('MPI_REDUCE sum', root, dble(ib(i)), dble(isum(i)))
                end do
                ib = ia
                call MPI_REDUCE(MPI_IN_PLACE, ib, n, MPI_INTEGER, MPI_MAX, root, c, e)
                do i = 1, n
                    if (ib(i) /= imax(i)) call fail('MPI_REDUCE in place max', root, dble(ib(i)), dble(imax(i)))
                end do
            else
                call MPI_REDUCE(ia, ib, n, MPI_INTEGER, MPI_MAX, root, c, e)
            end if
            call ok(e, 'MPI_REDUCE in place')
            ! Gather two integers from each rank, then in place at the root.
            mine = [10 * rank + 1, 10 * rank + 2]
            all = -1
            call MPI_GATHER(mine, 2, MPI_INTEGER, all, 2, MPI_INTEGER, root, c, e)
            call ok(e, 'MPI_GATHER')
            if (rank == root) call check_parts(all, size, 0, 'MPI_GATHER', root)
            all = -1
            if (rank == root) then
                all(2 * root + 1:2 * root + 2) = mine
                call MPI_GATHER(MPI_IN_PLACE, 2, MPI_INTEGER, all, 2, MPI_INTEGER, root, c, e)
                call check_parts(all, size, 0, 'MPI_GATHER in place', root)
            else
                call MPI_GATHER(mine, 2, MPI_INTEGER, all, 2, MPI_INTEGER, root, c, e)
            end if
            call ok(e, 'MPI_GATHER in place')
            ! Scatter, then in place at the root.
            do k = 0, size - 1
                all(2 * k + 1:2 * k + 2) = [10 * k + 5, 10 * k + 6]
            end do
            mine = -1
            call MPI_SCATTER(all, 2, MPI_INTEGER, mine, 2, MPI_INTEGER, root, c, e)
            call ok(e, 'MPI_SCATTER')
            if (mine(1) /= 10 * rank + 5 .or. mine(2) /= 10 * rank + 6) &
                call fail('MPI_SCATTER', root, dble(mine(1)), dble(10 * rank + 5))
            mine = -1
            if (rank == root) then
                call MPI_SCATTER(all, 2, MPI_INTEGER, MPI_IN_PLACE, 2, MPI_INTEGER, root, c, e)
                if (all(2 * root + 1) /= 10 * root + 5) &
                    call fail('MPI_SCATTER in place', root, dble(all(2 * root + 1)), dble(10 * root + 5))
            else
                call MPI_SCATTER(all, 2, MPI_INTEGER, mine, 2, MPI_INTEGER, root, c, e)
                if (mine(1) /= 10 * rank + 5) call fail('MPI_SCATTER in place', root, dble(mine(1)), dble(10 * rank + 5))
            end if
            call ok(e, 'MPI_SCATTER in place')
        end do
        ! Allreduce: INTEGER sum, in place; REAL min; DOUBLE PRECISION sum, in place
        ! (quarters: exact in any order).
        ia = [(val(rank, i), i = 1, n)]
        call MPI_ALLREDUCE(MPI_IN_PLACE, ia, n, MPI_INTEGER, MPI_SUM, c, e)
        call ok(e, 'MPI_ALLREDUCE')
        do i = 1, n
            if (ia(i) /= isum(i)) call fail('MPI_ALLREDUCE in place sum', -1, dble(ia(i)), dble(isum(i)))
        end do
        ra = [(real(rank * i) - 0.5, i = 1, m)]
        call MPI_ALLREDUCE(ra, rb, m, MPI_REAL, MPI_MIN, c, e)
        call ok(e, 'MPI_ALLREDUCE')
        do i = 1, m
            if (rb(i) /= -0.5) call fail('MPI_ALLREDUCE real min', -1, dble(rb(i)), -0.5d0)
        end do
        da = [(0.25d0 * (rank + i), i = 1, m)]
        db = da
        call MPI_ALLREDUCE(MPI_IN_PLACE, db, m, MPI_DOUBLE_PRECISION, MPI_SUM, c, e)
        call ok(e, 'MPI_ALLREDUCE')
        do i = 1, m
            if (db(i) /= 0.25d0 * (size * (size - 1) / 2 + size * i)) &
                call fail('MPI_ALLREDUCE double sum', -1, db(i), 0.25d0 * (size * (size - 1) / 2 + size * i))
        end do
        do i = 1, 20
            call MPI_BARRIER(c, e)
            call ok(e, 'MPI_BARRIER')
        end do
        deallocate (all, mine)
    end subroutine check_comm

    integer function val(rank, i)
        integer, intent(in) :: rank, i
        val = mod(rank * 7919 + i * 104729, 100003) - 50000
    end function val

    subroutine check_parts(all, size, base, what, root)
        integer, intent(in) :: all(:), size, base, root
        character(len=*), intent(in) :: what
        integer :: k
        do k = 0, size - 1
            if (all(2 * k + 1) /= 10 * k + 1 + base .or. all(2 * k + 2) /= 10 * k + 2 + base) &
                call fail(what, root, dble(all(2 * k + 1)), dble(10 * k + 1 + base))
        end do
    end subroutine check_parts
end program fortran_collectives
