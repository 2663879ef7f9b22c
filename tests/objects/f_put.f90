! tests/objects/mpi_put.c in Fortran (the C API through paralog_objects.f90):
! each rank one ROWS x 4096 int32 chunk, values (global row * 4096 + column
! + SALT); rank 0 reads the array back. Prints "version N" and "read back
! equal" (rank 0), or "rank R: error CODE: MESSAGE" and stops with 3. With
! VIEW (the path of the version's HDF5 view), rank 0 then waits for its
! views (paralog_obj_wait_views) and prints "views made" if VIEW exists
! (before closing the store, which would wait too).
!   f_put STORE NAME ROWS SALT [VIEW | --local DIR | --parts]
! With --parts the chunks have 1.5 x ROWS rows and each rank writes its
! rows with paralog_obj_write_part (chunks written in parts by two ranks).
! With --local DIR the store is logged (paralog_obj_open_logged): the
! commit's version is 0 and nothing is read back (the node server, or
! `paralog obj publish DIR`, publishes it).
program f_put
  use mpi
  use iso_c_binding
  use paralog_objects
  implicit none
  integer :: ierr, rank, nranks, rows, salt, r, c
  integer(c_int) :: rc
  integer(c_int64_t) :: shape(2), chunks(2), coords(2), start(2), count(2), version, got
  integer(c_int32_t), allocatable, target :: mine(:, :), all(:, :)
  type(c_ptr) :: store, writer
  character(len=512) :: url, name, arg, view
  logical :: made, logged, parts

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call get_command_argument(1, url)
  call get_command_argument(2, name)
  call get_command_argument(3, arg)
  read (arg, *) rows
  call get_command_argument(4, arg)
  read (arg, *) salt
  shape = [int(rows * nranks, c_int64_t), 4096_c_int64_t]
  chunks = [int(rows, c_int64_t), 4096_c_int64_t]
  call get_command_argument(5, view)
  logged = trim(view) == '--local'
  parts = trim(view) == '--parts'
  if (parts) then
    view = ''
    chunks(1) = int(rows + rows / 2, c_int64_t)
  end if
  if (logged) then
    call get_command_argument(6, arg)
    rc = paralog_obj_open_logged(trim(url)//c_null_char, trim(arg)//c_null_char, store)
  else
    rc = paralog_obj_open(trim(url)//c_null_char, store)
  end if
  if (rc /= 0) call fail(rc)
  rc = paralog_obj_begin_mpi_f(MPI_COMM_WORLD, store, trim(name)//c_null_char, PARALOG_OBJ_INT32, 2, &
                               shape, chunks, c_null_ptr, writer)
  if (rc /= 0) call fail(rc)
  allocate (mine(4096, rows))
  do r = 1, rows
    do c = 1, 4096
      mine(c, r) = ((rank * rows + r - 1) * 4096 + c - 1) + salt
    end do
  end do
  if (parts) then
    start = [int(rank * rows, c_int64_t), 0_c_int64_t]
    count = [int(rows, c_int64_t), 4096_c_int64_t]
    rc = paralog_obj_write_part(writer, start, count, c_loc(mine), int(4 * 4096 * rows, c_size_t))
  else
    coords = [int(rank, c_int64_t), 0_c_int64_t]
    rc = paralog_obj_write_chunk(writer, coords, c_loc(mine), int(4 * 4096 * rows, c_size_t))
  end if
  if (rc /= 0) call fail(rc)
  rc = paralog_obj_commit_mpi_f(MPI_COMM_WORLD, store, trim(name)//c_null_char, writer, version)
  if (rc /= 0) call fail(rc)
  if (rank == 0 .and. logged) then
    print '(a,i0)', 'logged, version ', version
  else if (rank == 0) then
    print '(a,i0)', 'version ', version
    allocate (all(4096, rows * nranks))
    rc = paralog_obj_get(store, trim(name)//c_null_char, version, c_null_ptr, c_null_ptr, c_loc(all), &
                         int(4 * 4096 * rows * nranks, c_size_t), got)
    if (rc /= 0) call fail(rc)
    do r = 1, rows * nranks
      do c = 1, 4096
        if (all(c, r) /= (r - 1) * 4096 + c - 1 + salt) then
          print '(a)', 'read back DIFFERS'
          stop 4
        end if
      end do
    end do
    print '(a)', 'read back equal'
    if (len_trim(view) > 0) then
      rc = paralog_obj_wait_views(store)
      if (rc /= 0) call fail(rc)
      inquire (file=trim(view), exist=made)
      if (made) print '(a)', 'views made'
    end if
  end if
  call paralog_obj_close(store)
  call MPI_Finalize(ierr)
contains
  subroutine fail(code)
    integer(c_int), intent(in) :: code
    print '(a,i0,a,i0,a,a)', 'rank ', rank, ': error ', code, ': ', paralog_obj_message()
    call MPI_Finalize(ierr)
    stop 3
  end subroutine
end program
