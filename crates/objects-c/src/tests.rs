//! The C functions called as C would: a round trip, and bad arguments
//! (NULL pointers, types, dimensions, buffers, ids) refused with a code
//! and a message instead of a crash.

use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

use super::*;

fn msg() -> String {
    unsafe { CStr::from_ptr(paralog_obj_errmsg()) }
        .to_string_lossy()
        .into_owned()
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn open(dir: &Path) -> *mut ObjStore {
    let mut s = null_mut();
    let url = c(dir.to_str().unwrap());
    assert_eq!(
        unsafe { paralog_obj_open(url.as_ptr(), &mut s) },
        errors::OK,
        "{}",
        msg()
    );
    s
}

#[test]
fn round_trip_and_chunked() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let name = c("a/b");
    let (shape, chunks) = ([5u64, 3], [2u64, 2]);
    let data: Vec<i32> = (0..15).collect();
    let mut v = 0u64;
    let rc = unsafe {
        paralog_obj_put(
            s,
            name.as_ptr(),
            3,
            2,
            shape.as_ptr(),
            chunks.as_ptr(),
            c(r#"{"k":1}"#).as_ptr(),
            data.as_ptr() as *const c_void,
            60,
            &mut v,
        )
    };
    assert_eq!((rc, v), (errors::OK, 1), "{}", msg());
    let mut out = [0i32; 4];
    let (start, count) = ([3u64, 1], [2u64, 2]);
    let mut got = 0;
    let rc = unsafe {
        paralog_obj_get(
            s,
            name.as_ptr(),
            -1,
            start.as_ptr(),
            count.as_ptr(),
            out.as_mut_ptr() as *mut c_void,
            16,
            &mut got,
        )
    };
    assert_eq!(
        (rc, got, out),
        (errors::OK, 1, [10, 11, 13, 14]),
        "{}",
        msg()
    );
    let mut info: ObjInfo = unsafe { std::mem::zeroed() };
    assert_eq!(
        unsafe { paralog_obj_info(s, name.as_ptr(), 1, &mut info) },
        errors::OK
    );
    assert_eq!(
        (info.dtype, info.ndim, info.shape[..2].to_vec()),
        (3, 2, vec![5, 3])
    );
    assert_eq!((info.n_chunks, info.chunk_bytes), (6, 16));

    // Chunked: begin, one writer writes the 2 chunks, commit.
    let mut id = [0 as c_char; ID_LEN];
    let (shape, chunks) = ([4u64], [2u64]);
    let n2 = c("c");
    let rc = unsafe {
        paralog_obj_begin(
            s,
            n2.as_ptr(),
            5,
            1,
            shape.as_ptr(),
            chunks.as_ptr(),
            null(),
            id.as_mut_ptr(),
        )
    };
    assert_eq!(rc, errors::OK, "{}", msg());
    let mut w = null_mut();
    let rc = unsafe {
        paralog_obj_join(
            s,
            n2.as_ptr(),
            id.as_ptr(),
            5,
            1,
            shape.as_ptr(),
            chunks.as_ptr(),
            &mut w,
        )
    };
    assert_eq!(rc, errors::OK, "{}", msg());
    let mut wid = [0 as c_char; ID_LEN];
    assert_eq!(
        unsafe { paralog_obj_writer_id(w, wid.as_mut_ptr()) },
        errors::OK
    );
    assert_eq!(id, wid);
    for (i, bytes) in [[1u8, 2], [3, 4]].iter().enumerate() {
        let at = [i as u64];
        let rc =
            unsafe { paralog_obj_write_chunk(w, at.as_ptr(), bytes.as_ptr() as *const c_void, 2) };
        assert_eq!(rc, errors::OK, "{}", msg());
    }
    // The same chunk again: an overlap, naming the chunk.
    let rc = unsafe {
        paralog_obj_write_chunk(w, [1u64].as_ptr(), [0u8; 2].as_ptr() as *const c_void, 2)
    };
    assert_eq!(rc, errors::EOVERLAP);
    assert!(msg().contains("chunk [1] was already written"), "{}", msg());
    assert_eq!(unsafe { paralog_obj_finish(w) }, errors::OK);
    assert_eq!(
        unsafe { paralog_obj_commit(s, n2.as_ptr(), id.as_ptr(), &mut v) },
        errors::OK
    );
    assert_eq!(v, 1);
    unsafe { paralog_obj_close(s) };
}

#[test]
fn bad_arguments_are_codes_and_messages() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let name = c("x");
    let (shape, chunks) = ([8u64], [4u64]);
    let put = |s, name: *const c_char, dtype, nd, nbytes| unsafe {
        paralog_obj_put(
            s,
            name,
            dtype,
            nd,
            shape.as_ptr(),
            chunks.as_ptr(),
            null(),
            [0u8; 64].as_ptr() as *const c_void,
            nbytes,
            null_mut(),
        )
    };
    // Each call, then its message (the message is the thread's last).
    let cases: [(&dyn Fn() -> c_int, &str); 6] = [
        (
            &|| put(null_mut(), name.as_ptr(), 5, 1, 8),
            "the store is NULL",
        ),
        (&|| put(s, null(), 5, 1, 8), "name is NULL"),
        (&|| put(s, name.as_ptr(), 11, 1, 8), "x: element type 11"),
        (&|| put(s, name.as_ptr(), 5, 0, 8), "x: 0 dimensions"),
        (&|| put(s, name.as_ptr(), 5, 33, 8), "x: 33 dimensions"),
        (
            &|| put(s, name.as_ptr(), 3, 1, 8),
            "x: 8 bytes given for int32 [8]",
        ),
    ];
    for (call, said) in cases {
        assert_eq!(call(), errors::EINVAL, "{said}");
        assert!(msg().contains(said), "{} lacks {said:?}", msg());
    }
    assert_eq!(put(s, c("../y").as_ptr(), 5, 1, 8), errors::ENAME);
    let mut w = null_mut();
    let rc = unsafe {
        paralog_obj_join(
            s,
            name.as_ptr(),
            c("12").as_ptr(),
            5,
            1,
            shape.as_ptr(),
            chunks.as_ptr(),
            &mut w,
        )
    };
    assert_eq!(rc, errors::EINVAL);
    assert!(msg().contains("\"12\" is not 32 hex digits"), "{}", msg());
    let mut buf = [0u8; 8];
    let rc = unsafe {
        paralog_obj_get(
            s,
            name.as_ptr(),
            -1,
            null(),
            null(),
            buf.as_mut_ptr() as *mut c_void,
            8,
            null_mut(),
        )
    };
    assert_eq!(rc, errors::ENOTFOUND);
    unsafe { paralog_obj_close(s) };
}
