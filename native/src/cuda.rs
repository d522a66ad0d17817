// The CUDA runtime, loaded lazily with dlopen on first VRAM use, so the library builds
// and loads where CUDA is absent. Every VRAM entry point goes through `cuda()`, which
// says why VRAM is unavailable (no libcudart, no driver, no device) instead of failing.

use crate::error::{err, Res, E_CUDA, E_INVALID, E_NO_CUDA};
use crate::kernel;
use crate::sys;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// `cudaIpcMemHandle_t`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcHandle {
    pub reserved: [u8; 64],
}

type CudaError = c_int;
/// `cudaStream_t`, which is also the driver API's `CUstream`.
pub type Stream = *mut c_void;

/// `cudaMemcpyHostToDevice`.
const MEMCPY_HOST_TO_DEVICE: c_int = 1;
/// `cudaMemcpyDefault`: direction inferred from the pointers (unified addressing).
const MEMCPY_DEFAULT: c_int = 4;
/// `cudaStreamNonBlocking`.
const STREAM_NON_BLOCKING: c_uint = 1;
/// `cudaIpcMemLazyEnablePeerAccess`.
const IPC_LAZY_PEER: c_uint = 1;

pub struct Cuda {
    get_device_count: unsafe extern "C" fn(*mut c_int) -> CudaError,
    set_device: unsafe extern "C" fn(c_int) -> CudaError,
    malloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> CudaError,
    free: unsafe extern "C" fn(*mut c_void) -> CudaError,
    memset: unsafe extern "C" fn(*mut c_void, c_int, usize) -> CudaError,
    memcpy: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> CudaError,
    memcpy_async:
        unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, Stream) -> CudaError,
    stream_create: unsafe extern "C" fn(*mut Stream, c_uint) -> CudaError,
    stream_sync: unsafe extern "C" fn(Stream) -> CudaError,
    stream_destroy: unsafe extern "C" fn(Stream) -> CudaError,
    ipc_get: unsafe extern "C" fn(*mut IpcHandle, *mut c_void) -> CudaError,
    ipc_open: unsafe extern "C" fn(*mut *mut c_void, IpcHandle, c_uint) -> CudaError,
    ipc_close: unsafe extern "C" fn(*mut c_void) -> CudaError,
    error_string: unsafe extern "C" fn(CudaError) -> *const c_char,
    pub device_count: i32,
}

const CANDIDATES: &[&str] = &[
    "libcudart.so",
    "libcudart.so.13",
    "libcudart.so.12",
    "libcudart.so.11.0",
    "/usr/local/cuda/lib64/libcudart.so",
    "/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so",
    "/usr/local/cuda/targets/sbsa-linux/lib/libcudart.so",
    "/usr/lib/x86_64-linux-gnu/libcudart.so",
];

static CUDA: OnceLock<Result<Cuda, String>> = OnceLock::new();

/// The loaded runtime with at least one device, or `E_NO_CUDA` saying why not.
pub fn cuda() -> Res<&'static Cuda> {
    match CUDA.get_or_init(load) {
        Ok(c) => Ok(c),
        Err(m) => err(E_NO_CUDA, m.clone()),
    }
}

/// The loaded runtime, checked to have device `device`.
pub fn cuda_device(device: i32) -> Res<&'static Cuda> {
    let c = cuda()?;
    if device < 0 || device >= c.device_count {
        return err(
            E_INVALID,
            format!(
                "CUDA device {device} does not exist ({} present)",
                c.device_count
            ),
        );
    }
    Ok(c)
}

/// The address of `name` in `lib` as a function pointer of type `T`.
pub(crate) unsafe fn sym<T: Copy>(lib: *mut c_void, name: &str, path: &str) -> Result<T, String> {
    let c = CString::new(name).unwrap();
    let p = sys::dlsym(lib, c.as_ptr());
    if p.is_null() {
        return Err(format!("{path} has no symbol {name}"));
    }
    Ok(std::mem::transmute_copy::<*mut c_void, T>(&p))
}

/// dlopens the first of `candidates` that loads: its handle and name, or the last dlerror.
pub(crate) fn open_first(
    candidates: &[&'static str],
) -> Result<(*mut c_void, &'static str), String> {
    let mut last = String::new();
    for &cand in candidates {
        let c = CString::new(cand).unwrap();
        let h = unsafe { sys::dlopen(c.as_ptr(), sys::RTLD_NOW) };
        if !h.is_null() {
            return Ok((h, cand));
        }
        let e = unsafe { sys::dlerror() };
        if !e.is_null() {
            last = unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned();
        }
    }
    Err(last)
}

fn load() -> Result<Cuda, String> {
    let (lib, path) = open_first(CANDIDATES).map_err(|last| {
        format!("VRAM unavailable: the CUDA runtime (libcudart) was not found ({last})")
    })?;
    let mut c = unsafe {
        Cuda {
            get_device_count: sym(lib, "cudaGetDeviceCount", path)?,
            set_device: sym(lib, "cudaSetDevice", path)?,
            malloc: sym(lib, "cudaMalloc", path)?,
            free: sym(lib, "cudaFree", path)?,
            memset: sym(lib, "cudaMemset", path)?,
            memcpy: sym(lib, "cudaMemcpy", path)?,
            memcpy_async: sym(lib, "cudaMemcpyAsync", path)?,
            stream_create: sym(lib, "cudaStreamCreateWithFlags", path)?,
            stream_sync: sym(lib, "cudaStreamSynchronize", path)?,
            stream_destroy: sym(lib, "cudaStreamDestroy", path)?,
            ipc_get: sym(lib, "cudaIpcGetMemHandle", path)?,
            ipc_open: sym(lib, "cudaIpcOpenMemHandle", path)?,
            ipc_close: sym(lib, "cudaIpcCloseMemHandle", path)?,
            error_string: sym(lib, "cudaGetErrorString", path)?,
            device_count: 0,
        }
    };
    let mut n: c_int = 0;
    let rc = unsafe { (c.get_device_count)(&mut n) };
    if rc != 0 {
        return Err(format!(
            "VRAM unavailable: no usable CUDA device ({path}: cudaGetDeviceCount: {})",
            c.describe(rc)
        ));
    }
    if n <= 0 {
        return Err(format!("VRAM unavailable: no CUDA device ({path})"));
    }
    c.device_count = n;
    Ok(c)
}

impl Cuda {
    fn describe(&self, rc: CudaError) -> String {
        let s = unsafe { (self.error_string)(rc) };
        if s.is_null() {
            format!("error {rc}")
        } else {
            format!(
                "{} (error {rc})",
                unsafe { CStr::from_ptr(s) }.to_string_lossy()
            )
        }
    }

    fn check(&self, rc: CudaError, what: &str) -> Res<()> {
        if rc == 0 {
            Ok(())
        } else {
            err(E_CUDA, format!("{what}: {}", self.describe(rc)))
        }
    }

    pub fn set_device(&self, device: i32) -> Res<()> {
        self.check(unsafe { (self.set_device)(device) }, "cudaSetDevice")
    }

    pub fn alloc(&self, device: i32, len: usize) -> Res<*mut u8> {
        self.set_device(device)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        self.check(
            unsafe { (self.malloc)(&mut p, len) },
            &format!("cudaMalloc({len})"),
        )?;
        if let Err(e) = self.check(unsafe { (self.memset)(p, 0, len) }, "cudaMemset") {
            unsafe { (self.free)(p) };
            return Err(e);
        }
        Ok(p as *mut u8)
    }

    pub fn free(&self, device: i32, p: *mut u8) {
        unsafe {
            (self.set_device)(device);
            (self.free)(p as *mut c_void);
        }
    }

    pub fn ipc_handle(&self, p: *mut u8) -> Res<IpcHandle> {
        let mut h = IpcHandle { reserved: [0; 64] };
        self.check(
            unsafe { (self.ipc_get)(&mut h, p as *mut c_void) },
            "cudaIpcGetMemHandle",
        )?;
        Ok(h)
    }

    pub fn ipc_open(&self, device: i32, h: IpcHandle) -> Res<*mut u8> {
        self.set_device(device)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        self.check(
            unsafe { (self.ipc_open)(&mut p, h, IPC_LAZY_PEER) },
            "cudaIpcOpenMemHandle",
        )?;
        Ok(p as *mut u8)
    }

    pub fn ipc_close(&self, device: i32, p: *mut u8) {
        unsafe {
            (self.set_device)(device);
            (self.ipc_close)(p as *mut c_void);
        }
    }

    /// One synchronous copy; either side may be host or device memory.
    pub fn copy(&self, device: i32, dst: *mut u8, src: *const u8, len: usize) -> Res<()> {
        self.set_device(device)?;
        self.check(
            unsafe {
                (self.memcpy)(
                    dst as *mut c_void,
                    src as *const c_void,
                    len,
                    MEMCPY_DEFAULT,
                )
            },
            "cudaMemcpy",
        )
    }

    /// Makes `device`'s primary context current on the calling thread (cudaSetDevice, then
    /// cudaFree(NULL), which creates the context where cudaSetDevice alone does not), as
    /// driver API calls need.
    pub fn init_context(&self, device: i32) -> Res<()> {
        self.set_device(device)?;
        self.check(
            unsafe { (self.free)(std::ptr::null_mut()) },
            "cudaFree(NULL)",
        )
    }

    /// Device memory on the current device, not zeroed.
    pub(crate) fn malloc_raw(&self, len: usize) -> Res<*mut u8> {
        let mut p: *mut c_void = std::ptr::null_mut();
        self.check(
            unsafe { (self.malloc)(&mut p, len) },
            &format!("cudaMalloc({len})"),
        )?;
        Ok(p as *mut u8)
    }

    pub(crate) fn free_raw(&self, p: *mut u8) {
        unsafe { (self.free)(p as *mut c_void) };
    }

    /// Queues a host-to-device copy on `stream`.
    pub(crate) fn upload(&self, dst: *mut u8, src: *const u8, len: usize, s: Stream) -> Res<()> {
        self.check(
            unsafe {
                (self.memcpy_async)(
                    dst as *mut c_void,
                    src as *const c_void,
                    len,
                    MEMCPY_HOST_TO_DEVICE,
                    s,
                )
            },
            "cudaMemcpyAsync (copy descriptors to the device)",
        )
    }

    /// A batch of copies queued on one stream, then one synchronisation. The batch is one
    /// launch of the copy kernel when `device_only` (every side is memory of `device`) and
    /// the kernel is loaded and fits the batch; otherwise one cudaMemcpyAsync per copy, in
    /// order. Either way the path taken, and why, is counted for `dyn_cuda_kernel_info`.
    pub fn copy_batch(
        &self,
        device: i32,
        ops: &[(*mut u8, *const u8, usize)],
        device_only: Result<(), &str>,
    ) -> Res<()> {
        self.set_device(device)?;
        let mut s: Stream = std::ptr::null_mut();
        self.check(
            unsafe { (self.stream_create)(&mut s, STREAM_NON_BLOCKING) },
            "cudaStreamCreateWithFlags",
        )?;
        let mut launch = kernel::Launch::new(device);
        let route = device_only
            .map_err(String::from)
            .and_then(|()| kernel::fits(ops))
            .and_then(|()| launch.enqueue(self, s, ops));
        let mut result = Ok(());
        if route.is_err() {
            for &(dst, src, len) in ops {
                let rc = unsafe {
                    (self.memcpy_async)(
                        dst as *mut c_void,
                        src as *const c_void,
                        len,
                        MEMCPY_DEFAULT,
                        s,
                    )
                };
                if rc != 0 {
                    result = self.check(rc, "cudaMemcpyAsync");
                    break;
                }
            }
        }
        let sync = self.check(unsafe { (self.stream_sync)(s) }, "cudaStreamSynchronize");
        unsafe { (self.stream_destroy)(s) };
        // Only now may another batch reuse the device copy of the descriptors.
        drop(launch);
        kernel::count(route);
        result.and(sync)
    }
}
