// The few libc functions the engine needs, declared by hand: std already links libc, and
// crates (the `libc` crate included) cannot be fetched where this library is built.

use std::os::raw::{c_char, c_int, c_void};

pub type OffT = i64;

extern "C" {
    pub fn shm_open(name: *const c_char, oflag: c_int, mode: u32) -> c_int;
    pub fn shm_unlink(name: *const c_char) -> c_int;
    pub fn ftruncate(fd: c_int, length: OffT) -> c_int;
    pub fn posix_fallocate(fd: c_int, offset: OffT, len: OffT) -> c_int;
    pub fn lseek(fd: c_int, offset: OffT, whence: c_int) -> OffT;
    pub fn close(fd: c_int) -> c_int;
    pub fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        offset: OffT,
    ) -> *mut c_void;
    pub fn munmap(addr: *mut c_void, len: usize) -> c_int;
    pub fn getpid() -> c_int;
    pub fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    pub fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    pub fn dlerror() -> *const c_char;
}

pub const O_RDWR: c_int = 2;
#[cfg(target_os = "macos")]
pub const O_CREAT: c_int = 0x200;
#[cfg(target_os = "macos")]
pub const O_EXCL: c_int = 0x800;
#[cfg(not(target_os = "macos"))]
pub const O_CREAT: c_int = 0o100;
#[cfg(not(target_os = "macos"))]
pub const O_EXCL: c_int = 0o200;

pub const PROT_READ: c_int = 1;
pub const PROT_WRITE: c_int = 2;
pub const MAP_SHARED: c_int = 1;
pub const SEEK_END: c_int = 2;
pub const RTLD_NOW: c_int = 2;

/// `errno` codes that posix_fallocate may return where the filesystem cannot reserve
/// space up front; ftruncate is the fallback there.
pub const EOPNOTSUPP: c_int = if cfg!(target_os = "macos") { 102 } else { 95 };
pub const EINVAL: c_int = 22;

pub fn map_failed(p: *mut c_void) -> bool {
    p as isize == -1 || p.is_null()
}
