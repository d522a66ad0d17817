// The batched copy kernel of cuda/copy_blocks.cu: its PTX is embedded at build time (when
// nvcc was found), loaded through the CUDA driver API (libcuda, opened with dlopen on first
// use) once per device, and launched for batches whose every side is memory of one device.
// Whatever keeps a batch off the kernel is counted with its reason, and the batch runs as
// one cudaMemcpyAsync per copy instead (cuda.rs).

use crate::cuda::{open_first, sym, Cuda, Stream};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The kernel's PTX; empty when the library was built without nvcc.
pub const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/copy_blocks.ptx"));
/// The virtual architecture the PTX was compiled for ("" without PTX).
pub const PTX_ARCH: &str = env!("DYN_PTX_ARCH");
/// What build.rs said: the nvcc used and its release, or why there is no PTX.
pub const BUILD_NOTE: &str = env!("DYN_PTX_NOTE");

const ENTRY: &[u8] = b"dyn_copy_blocks\0";
const THREADS: c_uint = 256;
const MAX_GRID: usize = 65535;
/// Longest piece one CUDA block copies. Long descriptors are cut into pieces so that a few
/// big copies still spread over many blocks; cuts fall at multiples of CHUNK from each
/// descriptor's start, so every piece keeps its descriptor's src/dst alignment.
pub const CHUNK: usize = 64 << 10;
/// Smallest device buffer for a batch's descriptors (2730 of them).
const MIN_BUFFER: usize = 64 << 10;

/// One copy as the kernel reads it (`DynCopyDesc` in cuda/copy_blocks.cuh).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyDesc {
    pub src: u64,
    pub dst: u64,
    pub len: u64,
}

type CopyOp = (*mut u8, *const u8, usize);

/// The kernel's descriptors for a batch: each copy cut into pieces of at most CHUNK bytes,
/// empty copies left out.
pub fn plan(ops: &[CopyOp]) -> Vec<CopyDesc> {
    let pieces: usize = ops.iter().map(|o| o.2.div_ceil(CHUNK)).sum();
    let mut out = Vec::with_capacity(pieces);
    for &(dst, src, len) in ops {
        let mut at = 0;
        while at < len {
            let n = CHUNK.min(len - at);
            out.push(CopyDesc {
                src: src as u64 + at as u64,
                dst: dst as u64 + at as u64,
                len: n as u64,
            });
            at += n;
        }
    }
    out
}

/// Whether a destination range overlaps another destination or any source. Such a batch
/// needs its copies in order, which one launch does not give (and the kernel assumes
/// disjoint ranges). Sources may overlap each other.
pub fn overlapping(ops: &[CopyOp]) -> bool {
    let mut ranges: Vec<(usize, usize, bool)> = Vec::with_capacity(ops.len() * 2);
    for &(dst, src, len) in ops.iter().filter(|o| o.2 > 0) {
        ranges.push((dst as usize, dst as usize + len, true));
        ranges.push((src as usize, src as usize + len, false));
    }
    ranges.sort_unstable_by_key(|r| r.0);
    // Sorted by start, a range overlaps an earlier one exactly when it starts before that
    // one ends: keep the furthest end of each kind seen so far.
    let (mut dst_end, mut src_end) = (0usize, 0usize);
    for (start, end, is_dst) in ranges {
        if start < dst_end || (is_dst && start < src_end) {
            return true;
        }
        if is_dst {
            dst_end = dst_end.max(end);
        } else {
            src_end = src_end.max(end);
        }
    }
    false
}

/// Whether a device-only batch suits one launch: more than one copy (a single copy is as
/// fast through cudaMemcpyAsync) and no overlapping ranges.
pub fn fits(ops: &[CopyOp]) -> Result<(), String> {
    if ops.len() < 2 {
        return Err("a single copy".into());
    }
    if overlapping(ops) {
        return Err("ranges overlap, so the copies run in order".into());
    }
    Ok(())
}

/// Why the kernel cannot be used at all, when the library has no PTX.
pub fn ptx_missing() -> Option<String> {
    PTX.is_empty()
        .then(|| format!("no PTX embedded: the library was built without it ({BUILD_NOTE})"))
}

// ---------------------------------------------------------------------------------------
// the driver API

type CuResult = c_int;
type Handle = *mut c_void;

/// `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`.
const UNSUPPORTED_PTX_VERSION: CuResult = 222;

struct Driver {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    ctx_get_current: unsafe extern "C" fn(*mut Handle) -> CuResult,
    ctx_get_device: unsafe extern "C" fn(*mut c_int) -> CuResult,
    module_load_data: unsafe extern "C" fn(*mut Handle, *const c_void) -> CuResult,
    module_get_function: unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CuResult,
    #[allow(clippy::type_complexity)]
    launch_kernel: unsafe extern "C" fn(
        Handle,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        Stream,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    get_error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
}

unsafe impl Send for Driver {}
unsafe impl Sync for Driver {}

const DRIVER_CANDIDATES: &[&str] = &["libcuda.so.1", "libcuda.so"];

fn driver() -> Result<&'static Driver, String> {
    static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();
    DRIVER
        .get_or_init(load_driver)
        .as_ref()
        .map_err(Clone::clone)
}

fn load_driver() -> Result<Driver, String> {
    let (lib, path) = open_first(DRIVER_CANDIDATES)
        .map_err(|last| format!("the CUDA driver library (libcuda) was not found ({last})"))?;
    let d = unsafe {
        Driver {
            init: sym(lib, "cuInit", path)?,
            ctx_get_current: sym(lib, "cuCtxGetCurrent", path)?,
            ctx_get_device: sym(lib, "cuCtxGetDevice", path)?,
            module_load_data: sym(lib, "cuModuleLoadData", path)?,
            module_get_function: sym(lib, "cuModuleGetFunction", path)?,
            launch_kernel: sym(lib, "cuLaunchKernel", path)?,
            get_error_name: sym(lib, "cuGetErrorName", path)?,
            get_error_string: sym(lib, "cuGetErrorString", path)?,
        }
    };
    let rc = unsafe { (d.init)(0) };
    if rc != 0 {
        return Err(format!("cuInit: {}", d.describe(rc)));
    }
    Ok(d)
}

impl Driver {
    fn describe(&self, rc: CuResult) -> String {
        let text = |f: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult| {
            let mut p: *const c_char = std::ptr::null();
            if unsafe { f(rc, &mut p) } != 0 || p.is_null() {
                None
            } else {
                Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            }
        };
        match (text(self.get_error_name), text(self.get_error_string)) {
            (Some(n), Some(s)) => format!("{n}: {s} (error {rc})"),
            (Some(n), None) => format!("{n} (error {rc})"),
            _ => format!("error {rc}"),
        }
    }

    fn check(&self, rc: CuResult, what: &str) -> Result<(), String> {
        if rc == 0 {
            Ok(())
        } else {
            Err(format!("{what}: {}", self.describe(rc)))
        }
    }
}

/// A loaded kernel (`CUfunction`); it belongs to its device's primary context, which lives
/// as long as the process (the library never resets a device).
#[derive(Clone, Copy)]
struct Function(Handle);
unsafe impl Send for Function {}

/// The kernel for `device`, loading the PTX into the device's primary context on first
/// use (the JIT runs once per device). The caller has made that context current on this
/// thread (`Cuda::set_device` then a runtime call that creates the context); this is
/// checked, as a module used from another context would not work.
fn function(device: i32) -> Result<(&'static Driver, Function), String> {
    if let Some(why) = ptx_missing() {
        return Err(why);
    }
    let d = driver()?;
    let mut ctx: Handle = std::ptr::null_mut();
    d.check(unsafe { (d.ctx_get_current)(&mut ctx) }, "cuCtxGetCurrent")?;
    if ctx.is_null() {
        return Err("no CUDA context is current on this thread".into());
    }
    let mut current: c_int = -1;
    d.check(
        unsafe { (d.ctx_get_device)(&mut current) },
        "cuCtxGetDevice",
    )?;
    if current != device {
        return Err(format!(
            "the current CUDA context is device {current}'s, not device {device}'s"
        ));
    }
    static LOADED: OnceLock<Mutex<HashMap<i32, Result<Function, String>>>> = OnceLock::new();
    let mut loaded = lock(LOADED.get_or_init(Default::default));
    let f = loaded
        .entry(device)
        .or_insert_with(|| load_module(d))
        .clone()?;
    Ok((d, f))
}

fn load_module(d: &Driver) -> Result<Function, String> {
    let ptx = CString::new(PTX).map_err(|_| "the embedded PTX contains a NUL byte".to_string())?;
    let mut module: Handle = std::ptr::null_mut();
    let rc = unsafe { (d.module_load_data)(&mut module, ptx.as_ptr() as *const c_void) };
    if rc != 0 {
        let hint = if rc == UNSUPPORTED_PTX_VERSION {
            " (the driver is older than the nvcc that built the library)"
        } else {
            ""
        };
        return Err(format!(
            "cuModuleLoadData ({PTX_ARCH} PTX): {}{hint}",
            d.describe(rc)
        ));
    }
    let mut f: Handle = std::ptr::null_mut();
    d.check(
        unsafe { (d.module_get_function)(&mut f, module, ENTRY.as_ptr() as *const c_char) },
        "cuModuleGetFunction(dyn_copy_blocks)",
    )?;
    Ok(Function(f))
}

/// Loads the kernel for `device` now, as a batch would: Ok when it is ready, else why not.
pub fn probe(device: i32) -> Result<(), String> {
    if let Some(why) = ptx_missing() {
        return Err(why);
    }
    let c = crate::cuda::cuda_device(device).map_err(|e| e.msg)?;
    c.init_context(device).map_err(|e| e.msg)?;
    function(device).map(|_| ())
}

// ---------------------------------------------------------------------------------------
// launching a batch

/// Device buffers for descriptor lists, per device, each owned by one batch at a time.
/// They are kept and reused, since cudaMalloc and cudaFree can synchronise the whole
/// device; a buffer too small for a batch is replaced by one of the next power of two, so
/// there are never more buffers than batches that ran at once.
fn buffers() -> MutexGuard<'static, HashMap<i32, Vec<Buffer>>> {
    static B: OnceLock<Mutex<HashMap<i32, Vec<Buffer>>>> = OnceLock::new();
    lock(B.get_or_init(Default::default))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Buffer {
    ptr: usize,
    cap: usize,
}

/// One batch's launch. It holds the batch's descriptors (host and device copies) until it
/// is dropped, which must be after the stream is synchronised: then the device buffer goes
/// back for another batch.
pub struct Launch {
    device: i32,
    buffer: Option<Buffer>,
    descs: Vec<CopyDesc>,
}

impl Launch {
    pub fn new(device: i32) -> Self {
        Launch {
            device,
            buffer: None,
            descs: Vec::new(),
        }
    }

    /// Queues the whole batch as one kernel launch on `s`, whose device's context is
    /// current. An error says why the kernel was not launched (nothing of the batch was
    /// copied then); the caller copies the batch another way.
    pub fn enqueue(&mut self, c: &Cuda, s: Stream, ops: &[CopyOp]) -> Result<(), String> {
        let (d, f) = function(self.device)?;
        self.descs = plan(ops);
        if self.descs.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::size_of_val(self.descs.as_slice());
        let buf = self.buffer(c, bytes)?;
        c.upload(buf as *mut u8, self.descs.as_ptr() as *const u8, bytes, s)
            .map_err(|e| e.msg)?;
        let mut ptr = buf as u64;
        let mut n = self.descs.len() as u64;
        let mut params = [
            &mut ptr as *mut u64 as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
        ];
        let grid = self.descs.len().min(MAX_GRID) as c_uint;
        d.check(
            unsafe {
                (d.launch_kernel)(
                    f.0,
                    grid,
                    1,
                    1,
                    THREADS,
                    1,
                    1,
                    0,
                    s,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel(dyn_copy_blocks)",
        )
    }

    /// A device buffer of at least `bytes` for this batch (a free one that fits, else a
    /// new one, freeing a free one too small).
    fn buffer(&mut self, c: &Cuda, bytes: usize) -> Result<usize, String> {
        let spare = {
            let mut all = buffers();
            let free = all.entry(self.device).or_default();
            let fit = (0..free.len())
                .filter(|&i| free[i].cap >= bytes)
                .min_by_key(|&i| free[i].cap);
            match fit {
                Some(i) => Some(free.swap_remove(i)),
                None => free.pop(),
            }
        };
        let buf = match spare {
            Some(b) if b.cap >= bytes => b,
            small => {
                if let Some(b) = small {
                    c.free_raw(b.ptr as *mut u8);
                }
                let cap = bytes.next_power_of_two().max(MIN_BUFFER);
                let ptr = c.malloc_raw(cap).map_err(|e| e.msg)?;
                Buffer {
                    ptr: ptr as usize,
                    cap,
                }
            }
        };
        let ptr = buf.ptr;
        self.buffer = Some(buf);
        Ok(ptr)
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            buffers().entry(self.device).or_default().push(b);
        }
    }
}

// ---------------------------------------------------------------------------------------
// which path batches took

static KERNEL_BATCHES: AtomicU64 = AtomicU64::new(0);
static COPY_BATCHES: AtomicU64 = AtomicU64::new(0);
static LAST_COPY_REASON: Mutex<String> = Mutex::new(String::new());

/// Counts a device batch: launched as the kernel (Ok) or run as copies (Err: why).
pub fn count(route: Result<(), String>) {
    match route {
        Ok(()) => {
            KERNEL_BATCHES.fetch_add(1, Ordering::Relaxed);
        }
        Err(why) => {
            COPY_BATCHES.fetch_add(1, Ordering::Relaxed);
            *lock(&LAST_COPY_REASON) = why;
        }
    }
}

/// The kernel's status as JSON (snake_case fields): what was built in, whether it loads on
/// the probed device (`probe`'s result), and the batch counters of this process.
pub fn info_json(probe: Result<(), String>) -> String {
    let reason = match &probe {
        Ok(()) => "null".to_string(),
        Err(why) => json_string(why),
    };
    format!(
        "{{\"ptx_embedded\":{},\"ptx_bytes\":{},\"ptx_arch\":{},\"build_note\":{},\"loaded\":{},\"reason\":{},\"kernel_batches\":{},\"copy_batches\":{},\"last_copy_reason\":{}}}",
        !PTX.is_empty(),
        PTX.len(),
        json_string(PTX_ARCH),
        json_string(BUILD_NOTE),
        probe.is_ok(),
        reason,
        KERNEL_BATCHES.load(Ordering::Relaxed),
        COPY_BATCHES.load(Ordering::Relaxed),
        json_string(&lock(&LAST_COPY_REASON)),
    )
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(dst: usize, src: usize, len: usize) -> CopyOp {
        (dst as *mut u8, src as *const u8, len)
    }

    #[test]
    fn plan_cuts_long_copies_and_keeps_alignment() {
        let ops = [
            op(0x10_0003, 0x90_0013, 2 * CHUNK + 5),
            op(0x40_0000, 0xa0_0000, 0),
            op(0x50_0000, 0xb0_0000, 7),
        ];
        let p = plan(&ops);
        assert_eq!(p.len(), 4);
        assert_eq!(p[0].len as usize, CHUNK);
        assert_eq!(p[2].len, 5);
        assert_eq!(p[2].dst as usize, 0x10_0003 + 2 * CHUNK);
        assert_eq!(p[2].src as usize, 0x90_0013 + 2 * CHUNK);
        assert_eq!(
            p[3],
            CopyDesc {
                src: 0xb0_0000,
                dst: 0x50_0000,
                len: 7
            }
        );
        assert!(p.iter().all(|d| (d.src ^ d.dst) & 15 == 0 || d.len == 7));
        let total: u64 = p.iter().map(|d| d.len).sum();
        assert_eq!(total as usize, 2 * CHUNK + 12);
    }

    #[test]
    fn overlap_is_found_between_destinations_and_sources_only() {
        // Disjoint, and sources overlapping each other: fine.
        assert!(!overlapping(&[op(0, 1000, 100), op(100, 1050, 100)]));
        // Two destinations overlap.
        assert!(overlapping(&[op(0, 1000, 100), op(99, 2000, 10)]));
        // A destination overlaps another copy's source, either order.
        assert!(overlapping(&[op(0, 1000, 100), op(2000, 50, 10)]));
        assert!(overlapping(&[op(2000, 50, 10), op(0, 1000, 100)]));
        // A copy onto itself, and one whose ranges meet only at an edge.
        assert!(overlapping(&[op(500, 500, 10)]));
        assert!(!overlapping(&[op(0, 100, 100), op(200, 300, 100)]));
        // Empty copies overlap nothing.
        assert!(!overlapping(&[op(0, 1000, 100), op(50, 60, 0)]));
    }

    #[test]
    fn fits_wants_several_disjoint_copies() {
        assert!(fits(&[op(0, 1000, 10)]).is_err());
        assert!(fits(&[op(0, 1000, 10), op(10, 0, 10)]).is_err());
        assert!(fits(&[op(0, 1000, 10), op(10, 1010, 10)]).is_ok());
    }

    #[test]
    fn info_is_json_with_escaped_strings() {
        let s = info_json(Err("no \"GPU\"\n\\".into()));
        assert!(s.contains("\"loaded\":false"));
        assert!(s.contains("\"reason\":\"no \\\"GPU\\\"\\u000a\\\\\""));
        assert!(s.contains(&format!("\"ptx_embedded\":{}", !PTX.is_empty())));
    }

    #[test]
    fn embedded_ptx_has_the_entry_point() {
        if PTX.is_empty() {
            assert!(ptx_missing().unwrap().contains("no PTX embedded"));
        } else {
            assert!(PTX.contains(".entry dyn_copy_blocks("));
            assert!(PTX.contains(&format!(".target sm_{}", &PTX_ARCH["compute_".len()..])));
        }
    }
}
