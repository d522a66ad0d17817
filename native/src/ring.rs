// Notification queue in shared memory: a bounded multi-producer queue (Vyukov's sequence
// numbered slots) that any process mapping the segment can push to, and that the owning
// agent drains. Lock-free 64-bit atomics work across processes on the same mapping.
//
// Layout: [0..8) magic, [8..12) slots, [12..16) slot size, [64..72) enqueue position,
// [128..136) dequeue position, then `slots` slots from byte 192, each
// [seq u64][len u32][pad u32][payload: slot size - 16 bytes].

use crate::error::{err, Res, E_FULL, E_INVALID};
use crate::shm::{self, Mapping};
use std::sync::atomic::{fence, AtomicU64, Ordering};

const MAGIC: u64 = 0x3147_4e49_524e_5944; // "DYNRING1" little-endian
const HEADER: usize = 192;
const SLOT_HEADER: usize = 16;

pub struct Ring {
    map: Mapping,
    slots: u64,
    slot_size: usize,
}

impl Ring {
    pub fn create(slots: u32, slot_size: u32) -> Res<Ring> {
        if !(2..=65536).contains(&slots) || !slots.is_power_of_two() {
            return err(
                E_INVALID,
                format!("notification slots must be a power of two in 2..65536, got {slots}"),
            );
        }
        if !(64..=65536).contains(&slot_size) || slot_size % 8 != 0 {
            return err(
                E_INVALID,
                format!(
                    "notification slot size must be a multiple of 8 in 64..65536, got {slot_size}"
                ),
            );
        }
        let len = HEADER + slots as usize * slot_size as usize;
        let map = shm::create(len)?;
        let ring = Ring {
            map,
            slots: slots as u64,
            slot_size: slot_size as usize,
        };
        unsafe {
            for i in 0..ring.slots {
                ring.seq(i).store(i, Ordering::Relaxed);
            }
            (ring.map.ptr.add(8) as *mut u32).write(slots);
            (ring.map.ptr.add(12) as *mut u32).write(slot_size);
            fence(Ordering::Release);
            ring.atomic(0).store(MAGIC, Ordering::Release);
        }
        Ok(ring)
    }

    pub fn open(name: &str) -> Res<Ring> {
        let map = shm::open(name, None)?;
        if map.len < HEADER {
            return err(
                E_INVALID,
                format!("{name} is not a notification queue (too small)"),
            );
        }
        let (slots, slot_size) = unsafe {
            if (*(map.ptr as *const AtomicU64)).load(Ordering::Acquire) != MAGIC {
                return err(
                    E_INVALID,
                    format!("{name} is not a notification queue (bad magic)"),
                );
            }
            (
                (map.ptr.add(8) as *const u32).read(),
                (map.ptr.add(12) as *const u32).read(),
            )
        };
        let ok = slots.is_power_of_two()
            && slot_size as usize >= SLOT_HEADER + 8
            && HEADER + slots as usize * slot_size as usize <= map.len;
        if !ok {
            return err(
                E_INVALID,
                format!("{name} is not a notification queue (bad geometry)"),
            );
        }
        Ok(Ring {
            map,
            slots: slots as u64,
            slot_size: slot_size as usize,
        })
    }

    pub fn name(&self) -> &str {
        &self.map.name
    }

    pub fn payload_capacity(&self) -> usize {
        self.slot_size - SLOT_HEADER
    }

    fn atomic(&self, offset: usize) -> &AtomicU64 {
        unsafe { &*(self.map.ptr.add(offset) as *const AtomicU64) }
    }

    fn slot(&self, pos: u64) -> *mut u8 {
        let i = (pos & (self.slots - 1)) as usize;
        unsafe { self.map.ptr.add(HEADER + i * self.slot_size) }
    }

    fn seq(&self, pos: u64) -> &AtomicU64 {
        unsafe { &*(self.slot(pos) as *const AtomicU64) }
    }

    pub fn push(&self, msg: &[u8]) -> Res<()> {
        if msg.len() > self.payload_capacity() {
            return err(
                E_INVALID,
                format!(
                    "notification of {} bytes exceeds the {}-byte limit",
                    msg.len(),
                    self.payload_capacity()
                ),
            );
        }
        let enq = self.atomic(64);
        let mut pos = enq.load(Ordering::Relaxed);
        loop {
            let seq = self.seq(pos).load(Ordering::Acquire);
            let dif = seq.wrapping_sub(pos) as i64;
            if dif == 0 {
                match enq.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => break,
                    Err(actual) => pos = actual,
                }
            } else if dif < 0 {
                return err(
                    E_FULL,
                    format!(
                        "notification queue {} is full ({} undelivered messages)",
                        self.name(),
                        self.slots
                    ),
                );
            } else {
                pos = enq.load(Ordering::Relaxed);
            }
        }
        unsafe {
            let s = self.slot(pos);
            (s.add(8) as *mut u32).write(msg.len() as u32);
            std::ptr::copy_nonoverlapping(msg.as_ptr(), s.add(SLOT_HEADER), msg.len());
        }
        self.seq(pos).store(pos + 1, Ordering::Release);
        Ok(())
    }

    /// Moves queued messages into `out` as `[u32 LE length][bytes]` records, stopping when
    /// the queue is empty or the next record does not fit. Returns the bytes written.
    pub fn drain(&self, out: &mut [u8]) -> usize {
        let deq = self.atomic(128);
        let cap = self.payload_capacity();
        let mut written = 0;
        loop {
            let mut pos = deq.load(Ordering::Relaxed);
            let len = loop {
                let seq = self.seq(pos).load(Ordering::Acquire);
                let dif = seq.wrapping_sub(pos + 1) as i64;
                if dif < 0 {
                    return written;
                }
                if dif > 0 {
                    pos = deq.load(Ordering::Relaxed);
                    continue;
                }
                // A peer can write garbage into shared memory; never read past the slot.
                let len = unsafe { (self.slot(pos).add(8) as *const u32).read() as usize }.min(cap);
                if written + 4 + len > out.len() {
                    return written;
                }
                match deq.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => break len,
                    Err(actual) => pos = actual,
                }
            };
            out[written..written + 4].copy_from_slice(&(len as u32).to_le_bytes());
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.slot(pos).add(SLOT_HEADER),
                    out.as_mut_ptr().add(written + 4),
                    len,
                );
            }
            written += 4 + len;
            self.seq(pos).store(pos + self.slots, Ordering::Release);
        }
    }
}
