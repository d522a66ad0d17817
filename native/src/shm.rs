// POSIX shared memory: segments named `/dynamo-<pid>-<n>-<random>` that another process
// maps by name. Space is reserved up front (posix_fallocate) so that a full /dev/shm is
// an error at allocation time instead of a SIGBUS on first touch.

use crate::error::{err, os_err, Res, E_INVALID, E_OS};
use crate::sys;
use std::ffi::CString;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

/// Prefix of every segment this library creates; `open` maps nothing else.
pub const PREFIX: &str = "/dynamo-";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A mapping of a shared-memory segment. Unmapped on drop; the creator also unlinks the
/// name (mappings other processes hold stay valid after that).
pub struct Mapping {
    pub ptr: *mut u8,
    pub len: usize,
    pub name: String,
    owner: bool,
}

unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        unsafe {
            sys::munmap(self.ptr as *mut c_void, self.len);
            if self.owner {
                if let Ok(c) = CString::new(self.name.clone()) {
                    sys::shm_unlink(c.as_ptr());
                }
            }
        }
    }
}

fn unique_name() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let pid = unsafe { sys::getpid() };
    format!("{PREFIX}{pid}-{n}-{:08x}", crate::random_u64() as u32)
}

/// Creates a zero-filled segment of `len` bytes and maps it read-write.
pub fn create(len: usize) -> Res<Mapping> {
    if len == 0 {
        return err(E_INVALID, "cannot allocate 0 bytes of shared memory");
    }
    if len > i64::MAX as usize {
        return err(E_INVALID, format!("shared memory size {len} is too large"));
    }
    let name = unique_name();
    let cname = CString::new(name.clone()).expect("generated names have no NUL");
    unsafe {
        let fd = sys::shm_open(
            cname.as_ptr(),
            sys::O_RDWR | sys::O_CREAT | sys::O_EXCL,
            0o600,
        );
        if fd < 0 {
            return os_err(format!("shm_open({name}) failed"));
        }
        let rc = sys::posix_fallocate(fd, 0, len as i64);
        if rc != 0 {
            let fallback = rc == sys::EOPNOTSUPP || rc == sys::EINVAL;
            if !fallback || sys::ftruncate(fd, len as i64) != 0 {
                sys::close(fd);
                sys::shm_unlink(cname.as_ptr());
                let e = std::io::Error::from_raw_os_error(rc);
                return err(
                    E_OS,
                    format!("cannot reserve {len} bytes of shared memory for {name} (is /dev/shm full?): {e}"),
                );
            }
        }
        let p = sys::mmap(
            std::ptr::null_mut(),
            len,
            sys::PROT_READ | sys::PROT_WRITE,
            sys::MAP_SHARED,
            fd,
            0,
        );
        sys::close(fd);
        if sys::map_failed(p) {
            let e = std::io::Error::last_os_error();
            sys::shm_unlink(cname.as_ptr());
            return err(E_OS, format!("mmap of {len} bytes for {name} failed: {e}"));
        }
        Ok(Mapping {
            ptr: p as *mut u8,
            len,
            name,
            owner: true,
        })
    }
}

/// Maps an existing segment created by this library (in any process). `len` is how many
/// bytes to map; `None` maps the whole segment. The segment must hold at least `len`.
pub fn open(name: &str, len: Option<usize>) -> Res<Mapping> {
    if !name.starts_with(PREFIX) || name[1..].contains('/') || name.len() > 200 {
        return err(
            E_INVALID,
            format!("'{name}' is not a shared-memory segment name of this library"),
        );
    }
    let cname = match CString::new(name) {
        Ok(c) => c,
        Err(_) => return err(E_INVALID, "shared-memory name contains NUL"),
    };
    unsafe {
        let fd = sys::shm_open(cname.as_ptr(), sys::O_RDWR, 0);
        if fd < 0 {
            return os_err(format!(
                "cannot open shared memory {name} (released, or its process exited?)"
            ));
        }
        let size = sys::lseek(fd, 0, sys::SEEK_END);
        if size < 0 {
            let r = os_err(format!("cannot size shared memory {name}"));
            sys::close(fd);
            return r;
        }
        let size = size as usize;
        let want = len.unwrap_or(size);
        if want == 0 || want > size {
            sys::close(fd);
            return err(
                E_INVALID,
                format!("shared memory {name} holds {size} bytes, {want} were expected"),
            );
        }
        let p = sys::mmap(
            std::ptr::null_mut(),
            want,
            sys::PROT_READ | sys::PROT_WRITE,
            sys::MAP_SHARED,
            fd,
            0,
        );
        sys::close(fd);
        if sys::map_failed(p) {
            return os_err(format!("mmap of shared memory {name} failed"));
        }
        Ok(Mapping {
            ptr: p as *mut u8,
            len: want,
            name: name.to_string(),
            owner: false,
        })
    }
}
