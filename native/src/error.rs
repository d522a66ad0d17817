// Error codes of the C ABI and the per-thread "last error" message that goes with them.
// Every exported function returns a non-negative value on success and one of these codes
// on failure; `dyn_last_error` then says what was wrong (on the calling thread).

use std::cell::RefCell;

pub const E_INVALID: i32 = -1;
pub const E_RANGE: i32 = -2;
pub const E_NOT_FOUND: i32 = -3;
pub const E_SIZE: i32 = -4;
pub const E_OS: i32 = -5;
pub const E_NO_CUDA: i32 = -6;
pub const E_CUDA: i32 = -7;
pub const E_FULL: i32 = -8;
pub const E_BUSY: i32 = -9;
pub const E_PANIC: i32 = -10;

#[derive(Debug, Clone)]
pub struct Error {
    pub code: i32,
    pub msg: String,
}

pub type Res<T> = Result<T, Error>;

pub fn err<T>(code: i32, msg: impl Into<String>) -> Res<T> {
    Err(Error {
        code,
        msg: msg.into(),
    })
}

/// The OS error of the last failed libc call, with what we were doing.
pub fn os_err<T>(what: impl AsRef<str>) -> Res<T> {
    let e = std::io::Error::last_os_error();
    err(E_OS, format!("{}: {}", what.as_ref(), e))
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

pub fn set_last_error(msg: &str) {
    LAST_ERROR.with(|m| {
        let mut m = m.borrow_mut();
        m.clear();
        m.push_str(msg);
    });
}

pub fn with_last_error<R>(f: impl FnOnce(&str) -> R) -> R {
    LAST_ERROR.with(|m| f(&m.borrow()))
}

/// Runs an exported function's body: converts errors to codes (message kept for
/// `dyn_last_error`) and panics to `E_PANIC`, so nothing unwinds into the caller.
pub fn guard(f: impl FnOnce() -> Res<i32>) -> i32 {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_last_error(&e.msg);
            e.code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!("internal error in the native library: {what}"));
            E_PANIC
        }
    }
}
