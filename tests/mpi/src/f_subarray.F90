! f_usempi and f_mpif08 (one source, built twice: -DMPI_F08 gives f_mpif08):
! the header + 2-D subarray pattern of header_subarray.c through the Fortran
! bindings, `use mpi` (integer handles) or `use mpi_f08` (derived-type
! handles, optional ierror).
!
! Rank 0 writes a 64-byte header (MPI_File_write_at); every rank sets a
! subarray view (MPI_ORDER_FORTRAN) of a 48x64 (Fortran order, i.e. C's
! 64x48) integer array after the header and writes its block, f_usempi with
! MPI_File_write_at_all, f_mpif08 with MPI_File_write_all (individual file
! pointer); MPI_File_sync; then a second write through a new view
! overwrites the sub-block rows 16..47, cols 8..39 (split by rows, so ranks
! overwrite other ranks' bytes); close.  Geometry and values are those of
! header_subarray.c: bytes 64.. of the output equal header_subarray.dat's
! (only the header text differs).
!
! Hazard: Fortran bindings (Open MPI's mpif.h / use mpi / use mpi_f08,
! MPICH's mpi_f08) call PMPI_File_* directly, so a shim that wraps only
! MPI_File_* misses this program's open/sync/close.
#ifdef MPI_F08
program f_mpif08
  use mpi_f08
#else
program f_usempi
  use mpi
#endif
  use, intrinsic :: iso_fortran_env, only: error_unit
  implicit none
  integer, parameter :: ROWS = 64, COLS = 48, HDR = 64
  integer, parameter :: SUB_R0 = 16, SUB_NR = 32, SUB_C0 = 8, SUB_NC = 32
  integer(kind=MPI_OFFSET_KIND), parameter :: zero = 0
#ifdef MPI_F08
  character(len=*), parameter :: PROG = 'f_mpif08'
  type(MPI_File) :: fh
#else
  character(len=*), parameter :: PROG = 'f_usempi'
  integer :: fh
#endif
  integer :: ierr, rank, nprocs, r0, nr, c0, nc, nsnap = 0
  integer :: dims(2) = 0
  integer, allocatable :: buf(:,:)
  character(len=:), allocatable :: path
  character(len=HDR) :: header
  logical :: snapshot = .false.

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  call MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN, ierr)
  call check(ierr, 'MPI_Comm_set_errhandler')
  call parse_args()
  if (nprocs > SUB_NR) call fail('supports at most 32 ranks')

  call MPI_File_open(MPI_COMM_WORLD, path, ior(MPI_MODE_CREATE, MPI_MODE_RDWR), &
                     MPI_INFO_NULL, fh, ierr)
  call check(ierr, 'MPI_File_open')

  ! epoch 1: header by rank 0, then every rank's grid block
  if (rank == 0) then
    write(header, '(a,a,a,i0,a)') 'PLTEST ', PROG, ' 64x48 int32 nprocs=', nprocs, achar(10)
    header(len_trim(header) + 1:) = repeat(achar(0), HDR)  ! NUL padding, not blanks
    call MPI_File_write_at(fh, zero, header, HDR, MPI_CHARACTER, MPI_STATUS_IGNORE, ierr)
    call check(ierr, 'MPI_File_write_at (header)')
  end if
  call MPI_Dims_create(nprocs, 2, dims, ierr)
  call check(ierr, 'MPI_Dims_create')
  call split(ROWS, dims(1), rank / dims(2), r0, nr)
  call split(COLS, dims(2), mod(rank, dims(2)), c0, nc)
  call write_block(1, r0, nr, c0, nc)
  call MPI_File_sync(fh, ierr)
  call check(ierr, 'MPI_File_sync')
  call MPI_Barrier(MPI_COMM_WORLD, ierr)
  call check(ierr, 'MPI_Barrier')
  call epoch_done()

  ! epoch 2: a sub-block across the process grid, split by rows
  call split(SUB_NR, nprocs, rank, r0, nr)
  call write_block(2, SUB_R0 + r0, nr, SUB_C0, SUB_NC)
  call MPI_File_close(fh, ierr)
  call check(ierr, 'MPI_File_close')
  call epoch_done()

  call MPI_Finalize(ierr)

contains

  ! View the [nr x nc] block at (r0, c0) and write it (write_at_all at 0
  ! of the view, or with mpi_f08 write_all at the individual file pointer).
  subroutine write_block(epoch, r0, nr, c0, nc)
    integer, intent(in) :: epoch, r0, nr, c0, nc
#ifdef MPI_F08
    type(MPI_Datatype) :: ftype
    integer :: i, j
#else
    integer :: ftype, i, j
#endif
    call MPI_Type_create_subarray(2, [COLS, ROWS], [nc, nr], [c0, r0], MPI_ORDER_FORTRAN, &
                                  MPI_INTEGER, ftype, ierr)
    call check(ierr, 'MPI_Type_create_subarray')
    call MPI_Type_commit(ftype, ierr)
    call check(ierr, 'MPI_Type_commit')
    call MPI_File_set_view(fh, int(HDR, MPI_OFFSET_KIND), MPI_INTEGER, ftype, 'native', &
                           MPI_INFO_NULL, ierr)
    call check(ierr, 'MPI_File_set_view')
    call MPI_Type_free(ftype, ierr)
    if (allocated(buf)) deallocate(buf)
    allocate(buf(nc, nr))
    do i = 1, nr
      do j = 1, nc
        buf(j, i) = epoch * 1000000 + (r0 + i - 1) * 1000 + (c0 + j - 1)
      end do
    end do
#ifdef MPI_F08
    call MPI_File_write_all(fh, buf, nr * nc, MPI_INTEGER, MPI_STATUS_IGNORE, ierr)
    call check(ierr, 'MPI_File_write_all')
#else
    call MPI_File_write_at_all(fh, zero, buf, nr * nc, MPI_INTEGER, MPI_STATUS_IGNORE, ierr)
    call check(ierr, 'MPI_File_write_at_all')
#endif
  end subroutine write_block

  subroutine split(n, parts, idx, start, cnt)
    integer, intent(in) :: n, parts, idx
    integer, intent(out) :: start, cnt
    cnt = n / parts
    start = idx * cnt + min(idx, mod(n, parts))
    if (idx < mod(n, parts)) cnt = cnt + 1
  end subroutine split

  ! With --snapshot: barrier, rank 0 copies the file to <path>.epoch<N>, barrier.
  subroutine epoch_done()
    character(len=32) :: suffix
    if (.not. snapshot) return
    nsnap = nsnap + 1
    write(suffix, '(a,i0)') '.epoch', nsnap
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    call check(ierr, 'MPI_Barrier')
    if (rank == 0) call copy_file(path, path // trim(suffix))
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    call check(ierr, 'MPI_Barrier')
  end subroutine epoch_done

  subroutine parse_args()
    character(len=4096) :: arg
    integer :: i
    do i = 1, command_argument_count()
      call get_command_argument(i, arg)
      if (trim(arg) == '--snapshot') then
        snapshot = .true.
      else if (arg(1:2) /= '--' .and. .not. allocated(path)) then
        path = trim(arg) // '/' // PROG // '.dat'
      else
        call fail('usage: ' // PROG // ' OUTDIR [--snapshot]')
      end if
    end do
    if (.not. allocated(path)) call fail('usage: ' // PROG // ' OUTDIR [--snapshot]')
  end subroutine parse_args

  subroutine check(code, what)
    integer, intent(in) :: code
    character(len=*), intent(in) :: what
    character(len=MPI_MAX_ERROR_STRING) :: msg
    integer :: length, e
    if (code == MPI_SUCCESS) return
    call MPI_Error_string(code, msg, length, e)
    call fail(what // ' failed: ' // msg(1:length))
  end subroutine check

  subroutine fail(msg)
    character(len=*), intent(in) :: msg
    integer :: e
    write(error_unit, '(a,a,i0,a,a)') PROG, ': rank ', rank, ': ', msg
    flush(error_unit)
    call MPI_Abort(MPI_COMM_WORLD, 1, e)
    stop 1
  end subroutine fail

  include 'snapcopy.inc'

end program
