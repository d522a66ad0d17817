// dynamo_native: the KV-block transfer engine behind `native/mod.ts` (NIXL-like).
//
// Everything the TypeScript side holds is a small integer id into the tables below;
// no pointer crosses the C ABI. Memory regions are reference counted, so a transfer in
// flight keeps its regions mapped even if they are released meanwhile. Descriptor lists
// are validated against their regions when created, transfers against their lists, so a
// bad index or size is an error code, never an out-of-bounds copy.
//
// C ABI conventions: ids are positive i32; a negative return is an error code from
// `error.rs` with the message available from `dyn_last_error` on the same thread (for the
// non-blocking `dyn_xfer_post`, from `dyn_xfer_error`).
//
// The exports are declared with `#[deno_bindgen]`: the macro turns each `&[u8]` / `&mut
// [u8]` parameter into a (pointer, u32 length) pair and records the signature, from which
// `deno task build:native` generates the TypeScript bindings (`native/_bindings.ts`).
// Sizes cross as u64 (the macro has no usize), and buffers as bytes: a slice of u64 or
// u32 would be read with its byte length as its element count.

mod cuda;
mod error;
mod kernel;
mod ring;
mod shm;
mod sys;

use error::*;
use ring::Ring;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use deno_bindgen::deno_bindgen;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Bumped whenever an exported signature changes; `mod.ts` refuses a stale build.
pub const ABI_VERSION: u32 = 3;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum MemKind {
    Dram,
    Vram,
}

enum Backing {
    Shm(#[allow(dead_code)] shm::Mapping),
    Vram { device: i32, ipc: bool },
}

struct Region {
    ptr: *mut u8,
    len: usize,
    kind: MemKind,
    backing: Backing,
}

unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        if let Backing::Vram { device, ipc } = self.backing {
            if let Ok(c) = cuda::cuda() {
                if ipc {
                    c.ipc_close(device, self.ptr)
                } else {
                    c.free(device, self.ptr)
                }
            }
        }
        // Shared memory unmaps (and, for its creator, unlinks) in Mapping's Drop.
    }
}

impl Region {
    fn device(&self) -> Option<i32> {
        match self.backing {
            Backing::Vram { device, .. } => Some(device),
            Backing::Shm(_) => None,
        }
    }

    fn check(&self, what: &str, offset: u64, len: u64) -> Res<(usize, usize)> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len as u64 => Ok((offset as usize, len as usize)),
            _ => err(
                E_RANGE,
                format!(
                    "{what}: bytes {offset}..{} are outside the {}-byte region",
                    offset as u128 + len as u128,
                    self.len
                ),
            ),
        }
    }
}

struct Desc {
    region: Arc<Region>,
    offset: usize,
    len: usize,
}

struct Dlist {
    descs: Vec<Desc>,
}

struct Op {
    src: Arc<Region>,
    src_off: usize,
    dst: Arc<Region>,
    dst_off: usize,
    len: usize,
}

const XFER_READY: i32 = 0;
const XFER_BUSY: i32 = 1;
const XFER_DONE: i32 = 2;
const XFER_ERROR: i32 = 3;

struct Xfer {
    ops: Vec<Op>,
    notif: Option<(Arc<Ring>, Vec<u8>)>,
    state: AtomicI32,
    error: Mutex<String>,
}

#[derive(Default)]
struct Tables {
    next: i32,
    regions: HashMap<i32, Arc<Region>>,
    dlists: HashMap<i32, Arc<Dlist>>,
    xfers: HashMap<i32, Arc<Xfer>>,
    rings: HashMap<i32, Arc<Ring>>,
}

impl Tables {
    fn id(&mut self) -> Res<i32> {
        if self.next == i32::MAX {
            return err(E_INVALID, "native id space exhausted");
        }
        self.next += 1;
        Ok(self.next)
    }

    /// Registers a region under a new id.
    fn add_region(&mut self, region: Region) -> Res<i32> {
        let id = self.id()?;
        self.regions.insert(id, Arc::new(region));
        Ok(id)
    }

    fn region(&self, id: i32) -> Res<Arc<Region>> {
        self.regions.get(&id).cloned().map_or_else(
            || {
                err(
                    E_NOT_FOUND,
                    format!("memory region {id} does not exist (released?)"),
                )
            },
            Ok,
        )
    }
}

fn tables() -> MutexGuard<'static, Tables> {
    static T: OnceLock<Mutex<Tables>> = OnceLock::new();
    T.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// Native-endian u64s of a byte buffer (its length a multiple of 8); copied, as the
/// buffer from JavaScript need not be aligned.
fn u64s(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// Native-endian u32s of a byte buffer (its length a multiple of 4).
fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn write_name(name: &str, out: &mut [u8]) -> Res<()> {
    if name.len() + 1 > out.len() {
        return err(
            E_INVALID,
            format!("name buffer of {} bytes is too small", out.len()),
        );
    }
    out[..name.len()].copy_from_slice(name.as_bytes());
    out[name.len()] = 0;
    Ok(())
}

/// Runs a batch of copies: plain memmove for host memory, one CUDA stream for the batch
/// when any side is VRAM (one launch of the copy kernel when every side is memory of
/// that one device, see `cuda::Cuda::copy_batch`).
fn run_ops(ops: &[Op]) -> Res<()> {
    let device = ops
        .iter()
        .find_map(|o| o.dst.device().or_else(|| o.src.device()));
    match device {
        None => {
            for o in ops {
                unsafe { std::ptr::copy(o.src.ptr.add(o.src_off), o.dst.ptr.add(o.dst_off), o.len) }
            }
            Ok(())
        }
        Some(device) => {
            let c = cuda::cuda()?;
            let batch: Vec<_> = ops
                .iter()
                .map(|o| unsafe {
                    (
                        o.dst.ptr.add(o.dst_off),
                        o.src.ptr.add(o.src_off) as *const u8,
                        o.len,
                    )
                })
                .collect();
            let device_only = if ops
                .iter()
                .any(|o| o.src.kind == MemKind::Dram || o.dst.kind == MemKind::Dram)
            {
                Err("host memory on one side")
            } else if ops
                .iter()
                .any(|o| o.src.device() != Some(device) || o.dst.device() != Some(device))
            {
                Err("regions on more than one device")
            } else {
                Ok(())
            };
            c.copy_batch(device, &batch, device_only)
        }
    }
}

// ---------------------------------------------------------------------------------------
// exported C ABI

/// ABI version of this build (see `ABI_VERSION`).
#[deno_bindgen]
fn dyn_abi_version() -> u32 {
    ABI_VERSION
}

/// Copies the calling thread's last error message into `out` (truncated to `cap`);
/// returns its full length in bytes.
#[deno_bindgen]
fn dyn_last_error(out: &mut [u8]) -> u64 {
    with_last_error(|m| copy_out(m, out))
}

/// A random token identifying this process's instance of the library: agents in the
/// same process recognise each other by it and copy directly.
#[deno_bindgen]
fn dyn_process_token() -> u64 {
    static TOKEN: OnceLock<u64> = OnceLock::new();
    *TOKEN.get_or_init(|| random_u64() ^ ((unsafe { sys::getpid() } as u64) << 32))
}

/// Number of CUDA devices, or `E_NO_CUDA` (message says why VRAM is unavailable).
#[deno_bindgen]
fn dyn_vram_probe() -> i32 {
    guard(|| Ok(cuda::cuda()?.device_count))
}

/// The batched copy kernel's status as JSON: whether its PTX is embedded, whether it
/// loads on `device` (this loads it, as the first batch would), why not, and how many VRAM
/// batches ran as one launch or as per-copy cudaMemcpyAsync. Returns the JSON's full
/// length; `out` gets as much as fits.
#[deno_bindgen]
fn dyn_cuda_kernel_info(device: i32, out: &mut [u8]) -> u64 {
    let json = std::panic::catch_unwind(|| kernel::info_json(kernel::probe(device)))
        .unwrap_or_else(|_| kernel::info_json(Err("internal error while probing".into())));
    copy_out(&json, out)
}

/// Copies the embedded PTX of the copy kernel (empty without nvcc at build time) into
/// `out`; returns its full length.
#[deno_bindgen]
fn dyn_cuda_kernel_ptx(out: &mut [u8]) -> u64 {
    copy_out(kernel::PTX, out)
}

/// Copies as much of `s` as fits into `out`; returns the full length of `s`.
fn copy_out(s: &str, out: &mut [u8]) -> u64 {
    let n = s.len().min(out.len());
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    s.len() as u64
}

/// Allocates `bytes` of zeroed shared memory; writes its segment name (NUL-terminated)
/// into `name_out`. Returns the region id.
#[deno_bindgen]
fn dyn_region_alloc_dram(bytes: u64, name_out: &mut [u8]) -> i32 {
    guard(|| {
        let map = shm::create(usize::try_from(bytes).unwrap_or(usize::MAX))?;
        write_name(&map.name, name_out)?;
        tables().add_region(Region {
            ptr: map.ptr,
            len: map.len,
            kind: MemKind::Dram,
            backing: Backing::Shm(map),
        })
    })
}

/// Maps another agent's shared-memory region by segment name. Returns the region id.
#[deno_bindgen]
fn dyn_region_open_dram(name: &[u8], bytes: u64) -> i32 {
    guard(|| {
        let name = std::str::from_utf8(name).map_err(|_| Error {
            code: E_INVALID,
            msg: "segment name is not UTF-8".into(),
        })?;
        let map = shm::open(name, Some(usize::try_from(bytes).unwrap_or(usize::MAX)))?;
        tables().add_region(Region {
            ptr: map.ptr,
            len: map.len,
            kind: MemKind::Dram,
            backing: Backing::Shm(map),
        })
    })
}

/// Allocates `bytes` of zeroed device memory on `device`; writes its 64-byte CUDA IPC
/// handle into `ipc_out`. Returns the region id.
#[deno_bindgen]
fn dyn_region_alloc_vram(bytes: u64, device: i32, ipc_out: &mut [u8]) -> i32 {
    guard(|| {
        let c = cuda::cuda_device(device)?;
        if bytes == 0 {
            return err(E_INVALID, "cannot allocate 0 bytes of VRAM");
        }
        if ipc_out.len() != 64 {
            let n = ipc_out.len();
            return err(E_INVALID, format!("the IPC handle buffer must be 64 bytes, got {n}"));
        }
        let len = usize::try_from(bytes).unwrap_or(usize::MAX);
        let ptr = c.alloc(device, len)?;
        let region = Region {
            ptr,
            len,
            kind: MemKind::Vram,
            backing: Backing::Vram { device, ipc: false },
        };
        let h = c.ipc_handle(ptr)?; // on error, `region` drops and frees the memory
        ipc_out.copy_from_slice(&h.reserved);
        tables().add_region(region)
    })
}

/// Opens another process's device memory from its 64-byte CUDA IPC handle.
#[deno_bindgen]
fn dyn_region_open_vram(ipc: &[u8], bytes: u64, device: i32) -> i32 {
    guard(|| {
        if ipc.len() != 64 {
            let n = ipc.len();
            return err(E_INVALID, format!("a CUDA IPC handle is 64 bytes, got {n}"));
        }
        let c = cuda::cuda_device(device)?;
        let h = ipc;
        let mut handle = cuda::IpcHandle { reserved: [0; 64] };
        handle.reserved.copy_from_slice(h);
        let ptr = c.ipc_open(device, handle)?;
        let len = usize::try_from(bytes).unwrap_or(usize::MAX);
        let region = Region {
            ptr,
            len,
            kind: MemKind::Vram,
            backing: Backing::Vram { device, ipc: true },
        };
        tables().add_region(region)
    })
}

/// Releases a region id. The memory goes once no prepared list or transfer uses it.
#[deno_bindgen]
fn dyn_region_free(id: i32) -> i32 {
    guard(|| {
        let r = tables().regions.remove(&id);
        match r {
            Some(_) => Ok(0),
            None => err(
                E_NOT_FOUND,
                format!("memory region {id} does not exist (released?)"),
            ),
        }
    })
}

/// Copies `src` into the region at `offset`.
#[deno_bindgen]
fn dyn_region_write(id: i32, offset: u64, src: &[u8]) -> i32 {
    guard(|| {
        let r = tables().region(id)?;
        let (off, n) = r.check("write", offset, src.len() as u64)?;
        if n == 0 {
            return Ok(0);
        }
        match r.device() {
            None => unsafe { std::ptr::copy(src.as_ptr(), r.ptr.add(off), n) },
            Some(d) => cuda::cuda()?.copy(d, unsafe { r.ptr.add(off) }, src.as_ptr(), n)?,
        }
        Ok(0)
    })
}

/// Fills `dst` from the region at `offset`.
#[deno_bindgen]
fn dyn_region_read(id: i32, offset: u64, dst: &mut [u8]) -> i32 {
    guard(|| {
        let r = tables().region(id)?;
        let (off, n) = r.check("read", offset, dst.len() as u64)?;
        if n == 0 {
            return Ok(0);
        }
        match r.device() {
            None => unsafe { std::ptr::copy(r.ptr.add(off), dst.as_mut_ptr(), n) },
            Some(d) => cuda::cuda()?.copy(d, dst.as_mut_ptr(), unsafe { r.ptr.add(off) }, n)?,
        }
        Ok(0)
    })
}

/// One contiguous copy between two regions (memmove for host memory, cudaMemcpy else).
#[deno_bindgen]
fn dyn_region_copy(src: i32, src_off: u64, dst: i32, dst_off: u64, len: u64) -> i32 {
    guard(|| {
        let (s, d) = {
            let t = tables();
            (t.region(src)?, t.region(dst)?)
        };
        let (so, n) = s.check("copy source", src_off, len)?;
        let (dof, _) = d.check("copy destination", dst_off, len)?;
        run_ops(&[Op {
            src: s,
            src_off: so,
            dst: d,
            dst_off: dof,
            len: n,
        }])?;
        Ok(0)
    })
}

/// Creates a descriptor list from (region id, offset, length) triples of native-endian
/// u64s; every descriptor is checked against its region, and all must be the same memory
/// type.
#[deno_bindgen]
fn dyn_dlist_create(entries: &[u8]) -> i32 {
    guard(|| {
        if entries.len() % 24 != 0 {
            let n = entries.len();
            return err(
                E_INVALID,
                format!("descriptor entries are 24-byte triples, got {n} bytes"),
            );
        }
        let e = u64s(entries);
        let mut t = tables();
        let mut descs = Vec::with_capacity(e.len() / 3);
        let mut kind = None;
        for (i, d) in e.chunks_exact(3).enumerate() {
            let rid = i32::try_from(d[0]).unwrap_or(-1);
            let region = t.region(rid).map_err(|e| Error {
                code: e.code,
                msg: format!("descriptor {i}: {}", e.msg),
            })?;
            if d[2] == 0 {
                return err(E_INVALID, format!("descriptor {i} has length 0"));
            }
            let (offset, len) = region.check(&format!("descriptor {i}"), d[1], d[2])?;
            if *kind.get_or_insert(region.kind) != region.kind {
                return err(
                    E_INVALID,
                    format!("descriptor {i} mixes DRAM and VRAM in one list"),
                );
            }
            descs.push(Desc {
                region,
                offset,
                len,
            });
        }
        let id = t.id()?;
        t.dlists.insert(id, Arc::new(Dlist { descs }));
        Ok(id)
    })
}

#[deno_bindgen]
fn dyn_dlist_free(id: i32) -> i32 {
    guard(|| match tables().dlists.remove(&id) {
        Some(_) => Ok(0),
        None => err(
            E_NOT_FOUND,
            format!("descriptor list {id} does not exist (released?)"),
        ),
    })
}

/// Prepares a transfer: pairs `local[lidx[i]]` with `remote[ridx[i]]`; `op` 1 = WRITE
/// (local -> remote), 0 = READ (remote -> local). `ring` (0 = none) receives `msg` once
/// every copy has completed.
#[deno_bindgen]
fn dyn_xfer_create(
    op: i32,
    local: i32,
    lidx: &[u8],
    remote: i32,
    ridx: &[u8],
    ring: i32,
    msg: &[u8],
) -> i32 {
    guard(|| {
        if op != 0 && op != 1 {
            return err(
                E_INVALID,
                format!("transfer operation must be 0 (READ) or 1 (WRITE), got {op}"),
            );
        }
        if lidx.len() % 4 != 0 || ridx.len() % 4 != 0 {
            return err(E_INVALID, "index lists are u32s: their byte lengths must be multiples of 4");
        }
        let (lidx, ridx) = (u32s(lidx), u32s(ridx));
        let (ln, rn) = (lidx.len(), ridx.len());
        if ln != rn {
            return err(
                E_INVALID,
                format!("index lists differ in length: {ln} local, {rn} remote"),
            );
        }
        let mut t = tables();
        let l = t.dlists.get(&local).cloned().map_or_else(
            || {
                err(
                    E_NOT_FOUND,
                    format!("local descriptor list {local} does not exist (released?)"),
                )
            },
            Ok,
        )?;
        let r = t.dlists.get(&remote).cloned().map_or_else(
            || {
                err(
                    E_NOT_FOUND,
                    format!("remote descriptor list {remote} does not exist (released?)"),
                )
            },
            Ok,
        )?;
        let notif = if ring == 0 {
            None
        } else {
            let q = t.rings.get(&ring).cloned().map_or_else(
                || {
                    err(
                        E_NOT_FOUND,
                        format!("notification queue {ring} does not exist (released?)"),
                    )
                },
                Ok,
            )?;
            if msg.len() > q.payload_capacity() {
                return err(
                    E_INVALID,
                    format!(
                        "notification of {} bytes exceeds the {}-byte limit",
                        msg.len(),
                        q.payload_capacity()
                    ),
                );
            }
            Some((q, msg.to_vec()))
        };
        let mut ops = Vec::with_capacity(lidx.len());
        for (i, (&li, &ri)) in lidx.iter().zip(ridx.iter()).enumerate() {
            let ld = l.descs.get(li as usize).map_or_else(
                || err(E_RANGE, format!("local index {li} at position {i} is out of range (the list has {} descriptors)", l.descs.len())),
                Ok,
            )?;
            let rd = r.descs.get(ri as usize).map_or_else(
                || err(E_RANGE, format!("remote index {ri} at position {i} is out of range (the list has {} descriptors)", r.descs.len())),
                Ok,
            )?;
            if ld.len != rd.len {
                return err(
                    E_SIZE,
                    format!("sizes differ at position {i}: local descriptor {li} has {} bytes, remote descriptor {ri} has {}", ld.len, rd.len),
                );
            }
            let (src, dst) = if op == 1 { (ld, rd) } else { (rd, ld) };
            ops.push(Op {
                src: src.region.clone(),
                src_off: src.offset,
                dst: dst.region.clone(),
                dst_off: dst.offset,
                len: ld.len,
            });
        }
        let id = t.id()?;
        t.xfers.insert(
            id,
            Arc::new(Xfer {
                ops,
                notif,
                state: AtomicI32::new(XFER_READY),
                error: Mutex::new(String::new()),
            }),
        );
        Ok(id)
    })
}

fn xfer(id: i32) -> Res<Arc<Xfer>> {
    tables().xfers.get(&id).cloned().map_or_else(
        || {
            err(
                E_NOT_FOUND,
                format!("transfer {id} does not exist (released?)"),
            )
        },
        Ok,
    )
}

/// Marks a prepared transfer in progress (on the caller's thread, so that its state is
/// "in progress" from the moment `transfer()` returns); E_BUSY if it already is.
#[deno_bindgen]
fn dyn_xfer_arm(id: i32) -> i32 {
    guard(|| {
        let x = xfer(id)?;
        let mut cur = x.state.load(Ordering::Acquire);
        loop {
            if cur == XFER_BUSY {
                return err(E_BUSY, format!("transfer {id} is already in progress"));
            }
            match x
                .state
                .compare_exchange(cur, XFER_BUSY, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(0),
                Err(actual) => cur = actual,
            }
        }
    })
}

/// Runs an armed transfer to completion: every copy, then the notification (bound
/// non-blocking, off the JS thread). Returns 0, or an error code with the message kept
/// for `dyn_xfer_error`.
#[deno_bindgen(non_blocking)]
fn dyn_xfer_run(id: i32) -> i32 {
    guard(|| {
        let x = xfer(id)?;
        if x.state.load(Ordering::Acquire) != XFER_BUSY {
            return err(E_INVALID, format!("transfer {id} was not armed"));
        }
        let result = run_ops(&x.ops).and_then(|_| match &x.notif {
            Some((q, m)) => q.push(m),
            None => Ok(()),
        });
        match result {
            Ok(()) => {
                x.state.store(XFER_DONE, Ordering::Release);
                Ok(0)
            }
            Err(e) => {
                *x.error.lock().unwrap_or_else(|p| p.into_inner()) = e.msg.clone();
                x.state.store(XFER_ERROR, Ordering::Release);
                Err(e)
            }
        }
    })
}

/// Arms and runs a transfer on the calling thread (small host-memory transfers).
#[deno_bindgen]
fn dyn_xfer_post(id: i32) -> i32 {
    let rc = dyn_xfer_arm(id);
    if rc < 0 {
        return rc;
    }
    dyn_xfer_run(id)
}

/// 0 prepared, 1 in progress, 2 done, 3 failed; or E_NOT_FOUND.
#[deno_bindgen]
fn dyn_xfer_state(id: i32) -> i32 {
    guard(|| match tables().xfers.get(&id) {
        Some(x) => Ok(x.state.load(Ordering::Acquire)),
        None => err(
            E_NOT_FOUND,
            format!("transfer {id} does not exist (released?)"),
        ),
    })
}

/// Copies the failure message of a transfer into `out`; returns its full length.
#[deno_bindgen]
fn dyn_xfer_error(id: i32, out: &mut [u8]) -> u64 {
    let x = tables().xfers.get(&id).cloned();
    let msg = match x {
        Some(x) => x.error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        None => format!("transfer {id} does not exist (released?)"),
    };
    copy_out(&msg, out)
}

/// Releases a transfer; refused (E_BUSY) while it is in progress.
#[deno_bindgen]
fn dyn_xfer_free(id: i32) -> i32 {
    guard(|| {
        let mut t = tables();
        let busy = match t.xfers.get(&id) {
            None => {
                return err(
                    E_NOT_FOUND,
                    format!("transfer {id} does not exist (released?)"),
                )
            }
            Some(x) => x.state.load(Ordering::Acquire) == XFER_BUSY,
        };
        if busy {
            return err(
                E_BUSY,
                format!("transfer {id} is in progress; wait for it before releasing"),
            );
        }
        t.xfers.remove(&id);
        Ok(0)
    })
}

/// Creates this agent's notification queue in shared memory; writes its name to
/// `name_out`. Returns the queue id.
#[deno_bindgen]
fn dyn_ring_create(slots: u32, slot_size: u32, name_out: &mut [u8]) -> i32 {
    guard(|| {
        let q = Ring::create(slots, slot_size)?;
        write_name(q.name(), name_out)?;
        let mut t = tables();
        let id = t.id()?;
        t.rings.insert(id, Arc::new(q));
        Ok(id)
    })
}

/// Opens another agent's notification queue by name. Returns the queue id.
#[deno_bindgen]
fn dyn_ring_open(name: &[u8]) -> i32 {
    guard(|| {
        let name = std::str::from_utf8(name).map_err(|_| Error {
            code: E_INVALID,
            msg: "queue name is not UTF-8".into(),
        })?;
        let q = Ring::open(name)?;
        let mut t = tables();
        let id = t.id()?;
        t.rings.insert(id, Arc::new(q));
        Ok(id)
    })
}

/// Largest message the queue takes, in bytes.
#[deno_bindgen]
fn dyn_ring_capacity(id: i32) -> i32 {
    guard(|| match tables().rings.get(&id) {
        Some(q) => Ok(q.payload_capacity() as i32),
        None => err(
            E_NOT_FOUND,
            format!("notification queue {id} does not exist (released?)"),
        ),
    })
}

#[deno_bindgen]
fn dyn_ring_push(id: i32, msg: &[u8]) -> i32 {
    guard(|| {
        let q = tables().rings.get(&id).cloned().map_or_else(
            || {
                err(
                    E_NOT_FOUND,
                    format!("notification queue {id} does not exist (released?)"),
                )
            },
            Ok,
        )?;
        q.push(msg)?;
        Ok(0)
    })
}

/// Moves queued messages into `out` as [u32 LE length][bytes] records; returns the number
/// of bytes written (0 when the queue is empty).
#[deno_bindgen]
fn dyn_ring_drain(id: i32, out: &mut [u8]) -> i32 {
    guard(|| {
        let q = tables().rings.get(&id).cloned().map_or_else(
            || {
                err(
                    E_NOT_FOUND,
                    format!("notification queue {id} does not exist (released?)"),
                )
            },
            Ok,
        )?;
        let cap = out.len().min(i32::MAX as usize);
        let out = &mut out[..cap];
        Ok(q.drain(out) as i32)
    })
}

#[deno_bindgen]
fn dyn_ring_free(id: i32) -> i32 {
    guard(|| match tables().rings.remove(&id) {
        Some(_) => Ok(0),
        None => err(
            E_NOT_FOUND,
            format!("notification queue {id} does not exist (released?)"),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_round_trip_and_full() {
        let q = Ring::create(4, 64).unwrap();
        for i in 0..4u8 {
            q.push(&[i; 10]).unwrap();
        }
        assert_eq!(q.push(b"x").unwrap_err().code, E_FULL);
        let other = Ring::open(q.name()).unwrap();
        let mut out = [0u8; 1024];
        let n = other.drain(&mut out);
        assert_eq!(n, 4 * 14);
        assert_eq!(&out[0..4], &10u32.to_le_bytes());
        assert_eq!(out[4 + 14 * 3], 3);
        assert_eq!(q.drain(&mut out), 0);
        q.push(b"again").unwrap();
        assert_eq!(q.drain(&mut out), 9);
    }

    // The exports as Deno calls them: each buffer as (pointer, u32 byte length).
    fn raw(b: &[u8]) -> (*const (), u32) {
        (b.as_ptr() as *const (), b.len() as u32)
    }

    fn bytes<T: Copy, const N: usize>(v: [T; N]) -> Vec<u8> {
        let n = std::mem::size_of::<T>() * N;
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, n) }.to_vec()
    }

    fn dlist(triple: [u64; 3]) -> i32 {
        let b = bytes(triple);
        let (p, n) = raw(&b);
        dyn_dlist_create(p, n)
    }

    fn xfer(local: i32, li: u32, remote: i32, ri: u32) -> i32 {
        let (l, r, msg) = (bytes([li]), bytes([ri]), [0u8; 0]);
        let ((lp, ln), (rp, rn), (mp, mn)) = (raw(&l), raw(&r), raw(&msg));
        dyn_xfer_create(1, local, lp, ln, remote, rp, rn, 0, mp, mn)
    }

    fn alloc_dram(bytes: u64) -> i32 {
        let mut name = [0u8; 128];
        dyn_region_alloc_dram(bytes, name.as_mut_ptr() as *const (), name.len() as u32)
    }

    #[test]
    fn armed_transfer_is_busy_until_run() {
        let a = alloc_dram(4096);
        let b = alloc_dram(4096);
        let la = dlist([a as u64, 0, 1024]);
        let lb = dlist([b as u64, 1024, 1024]);
        let long = dlist([b as u64, 0, 2048]);
        assert!(la > 0 && lb > 0 && long > 0);
        assert_eq!(xfer(la, 0, lb, 1), E_RANGE);
        assert_eq!(xfer(la, 0, long, 0), E_SIZE);
        assert_eq!(dlist([a as u64, 4000, 100]), E_RANGE);
        let x = xfer(la, 0, lb, 0);
        assert!(x > 0);
        assert_eq!(dyn_xfer_run(x), E_INVALID); // not armed
        assert_eq!(dyn_xfer_arm(x), 0);
        assert_eq!(dyn_xfer_state(x), XFER_BUSY);
        assert_eq!(dyn_xfer_arm(x), E_BUSY);
        assert_eq!(dyn_xfer_free(x), E_BUSY);
        assert_eq!(dyn_xfer_run(x), 0);
        assert_eq!(dyn_xfer_state(x), XFER_DONE);
        // The memory outlives its ids while a transfer holds it.
        assert_eq!(dyn_region_free(a), 0);
        assert_eq!(dyn_xfer_post(x), 0);
        assert_eq!(dyn_xfer_free(x), 0);
        for id in [la, lb, long] {
            assert_eq!(dyn_dlist_free(id), 0);
        }
        assert_eq!(dyn_region_free(b), 0);
    }

    #[test]
    fn buffers_of_the_wrong_size_are_refused() {
        let a = alloc_dram(4096);
        let short = [0u8; 20]; // not a whole (region, offset, length) triple
        let (p, n) = raw(&short);
        assert_eq!(dyn_dlist_create(p, n), E_INVALID);
        let la = dlist([a as u64, 0, 1024]);
        let (odd, msg) = ([0u8; 3], [0u8; 0]);
        let ((op, on), (mp, mn)) = (raw(&odd), raw(&msg));
        assert_eq!(dyn_xfer_create(1, la, op, on, la, op, on, 0, mp, mn), E_INVALID);
        let ipc = [0u8; 10];
        let (ip, iz) = raw(&ipc);
        assert_eq!(dyn_region_open_vram(ip, iz, 4096, 0), E_INVALID);
        assert_eq!(dyn_dlist_free(la), 0);
        assert_eq!(dyn_region_free(a), 0);
    }

    #[test]
    fn shm_region_bounds() {
        let id = alloc_dram(4096);
        assert!(id > 0);
        let data = [7u8; 16];
        let (p, n) = raw(&data);
        assert_eq!(dyn_region_write(id, 4080, p, n), 0);
        assert_eq!(dyn_region_write(id, 4081, p, n), E_RANGE);
        assert_eq!(dyn_region_write(id, u64::MAX, p, n), E_RANGE);
        assert_eq!(dyn_region_free(id), 0);
        assert_eq!(dyn_region_free(id), E_NOT_FOUND);
    }
}
