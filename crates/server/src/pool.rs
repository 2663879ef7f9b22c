//! A fixed pool of I/O buffers: the drain's memory is bounded by the pool,
//! whatever the size of the files or the number of epochs waiting.

use std::sync::{Condvar, Mutex};

pub struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
    ready: Condvar,
    buf_size: usize,
}

pub struct Buffer<'a> {
    pool: &'a BufferPool,
    buf: Option<Vec<u8>>,
}

impl BufferPool {
    /// `total` bytes in buffers of `buf_size` (at least one buffer).
    pub fn new(total: usize, buf_size: usize) -> BufferPool {
        let n = (total / buf_size).max(1);
        BufferPool {
            free: Mutex::new((0..n).map(|_| Vec::new()).collect()),
            ready: Condvar::new(),
            buf_size,
        }
    }

    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// Take a buffer, waiting for one if all are in use. Memory is only
    /// allocated on first use of each buffer.
    pub fn get(&self) -> Buffer<'_> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(mut b) = free.pop() {
                b.resize(self.buf_size, 0);
                return Buffer {
                    pool: self,
                    buf: Some(b),
                };
            }
            free = self.ready.wait(free).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl std::ops::Deref for Buffer<'_> {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        self.buf.as_ref().expect("present until drop")
    }
}

impl std::ops::DerefMut for Buffer<'_> {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        self.buf.as_mut().expect("present until drop")
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            self.pool
                .free
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(b);
            self.pool.ready.notify_one();
        }
    }
}
