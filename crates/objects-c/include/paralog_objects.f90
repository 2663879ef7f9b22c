! paralog's array objects from Fortran (docs/objects.md, "Fortran"):
! interfaces to the C API (paralog/objects.h, paralog/objects_mpi.h) by
! iso_c_binding. Strings passed to C end with c_null_char; shapes and
! coordinates are in C order (the slowest dimension first), 0-based, so
! a Fortran array a(nx, ny) is the C array [ny][nx]. Compile this file
! with your program (mpif90 ... paralog_objects.f90 prog.f90) and link
! -lparalog_obj_mpi_<mpi> -lparalog_obj.
module paralog_objects
  use iso_c_binding
  implicit none
  integer(c_int), parameter :: PARALOG_OBJ_INT32 = 3, PARALOG_OBJ_FLOAT64 = 10
  interface
    function paralog_obj_errmsg() bind(c) result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
    function paralog_obj_open(url, store) bind(c) result(rc)
      import :: c_char, c_ptr, c_int
      character(kind=c_char), intent(in) :: url(*)
      type(c_ptr), intent(out) :: store
      integer(c_int) :: rc
    end function
    ! A logged store (paralog/objects.h): puts go to the node-local
    ! directory `local`, the node server publishes them to `url`.
    function paralog_obj_open_logged(url, local, store) bind(c) result(rc)
      import :: c_char, c_ptr, c_int
      character(kind=c_char), intent(in) :: url(*), local(*)
      type(c_ptr), intent(out) :: store
      integer(c_int) :: rc
    end function
    subroutine paralog_obj_close(store) bind(c)
      import :: c_ptr
      type(c_ptr), value :: store
    end subroutine
    ! Return once the views of every commit made through the store so far
    ! are made (paralog/objects.h); 0, or an error code.
    function paralog_obj_wait_views(store) bind(c) result(rc)
      import :: c_ptr, c_int
      type(c_ptr), value :: store
      integer(c_int) :: rc
    end function
    function paralog_obj_put(store, name, dtype, ndim, shape, chunks, attrs, data, nbytes, version) &
        bind(c) result(rc)
      import :: c_char, c_ptr, c_int, c_int64_t, c_size_t
      type(c_ptr), value :: store, attrs, data
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int), value :: dtype, ndim
      integer(c_int64_t), intent(in) :: shape(*), chunks(*)
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), intent(out) :: version
      integer(c_int) :: rc
    end function
    function paralog_obj_get(store, name, version, start, count, buf, nbytes, got) bind(c) result(rc)
      import :: c_char, c_ptr, c_int, c_int64_t, c_size_t
      type(c_ptr), value :: store, start, count, buf
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), value :: version
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), intent(out) :: got
      integer(c_int) :: rc
    end function
    function paralog_obj_begin_mpi_f(comm, store, name, dtype, ndim, shape, chunks, attrs, writer) &
        bind(c) result(rc)
      import :: c_char, c_ptr, c_int, c_int64_t
      integer(c_int), value :: comm, dtype, ndim
      type(c_ptr), value :: store, attrs
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), intent(in) :: shape(*), chunks(*)
      type(c_ptr), intent(out) :: writer
      integer(c_int) :: rc
    end function
    function paralog_obj_write_chunk(writer, coords, data, nbytes) bind(c) result(rc)
      import :: c_ptr, c_int, c_int64_t, c_size_t
      type(c_ptr), value :: writer, data
      integer(c_int64_t), intent(in) :: coords(*)
      integer(c_size_t), value :: nbytes
      integer(c_int) :: rc
    end function
    function paralog_obj_write_part(writer, start, count, data, nbytes) bind(c) result(rc)
      import :: c_ptr, c_int, c_int64_t, c_size_t
      type(c_ptr), value :: writer, data
      integer(c_int64_t), intent(in) :: start(*), count(*)
      integer(c_size_t), value :: nbytes
      integer(c_int) :: rc
    end function
    function paralog_obj_commit_mpi_f(comm, store, name, writer, version) bind(c) result(rc)
      import :: c_char, c_ptr, c_int, c_int64_t
      integer(c_int), value :: comm
      type(c_ptr), value :: store, writer
      character(kind=c_char), intent(in) :: name(*)
      integer(c_int64_t), intent(out) :: version
      integer(c_int) :: rc
    end function
  end interface
contains
  ! This thread's last error message as a Fortran string.
  function paralog_obj_message() result(s)
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: p(:)
    integer :: n
    interface
      function strlen(x) bind(c) result(n)
        import :: c_ptr, c_size_t
        type(c_ptr), value :: x
        integer(c_size_t) :: n
      end function
    end interface
    n = int(strlen(paralog_obj_errmsg()))
    call c_f_pointer(paralog_obj_errmsg(), p, [n])
    allocate(character(len=n) :: s)
    s = transfer(p(1:n), s)
  end function
end module
