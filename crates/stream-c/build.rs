//! The library is installed as libparalog_stream.so (the Makefile copies
//! cargo's libparalog_stream_c.so): programs linked with -lparalog_stream
//! record that name, so the library must carry it as its soname.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libparalog_stream.so");
}
