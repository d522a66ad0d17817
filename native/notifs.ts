/** Notifications between agents: their record on the wire, and draining an agent's queue. */

import { check, dec, enc, type Native } from "./ffi.ts";

/**
 * One notification record: the sender's name (u16 LE length, then UTF-8), then the body.
 *
 * @param from the sending agent's name
 * @param body the message
 * @returns the record to push on the peer's queue
 */
export function notifRecord(from: string, body: Uint8Array): Uint8Array<ArrayBuffer> {
  const name = enc.encode(from);
  const msg = new Uint8Array(2 + name.length + body.length);
  new DataView(msg.buffer).setUint16(0, name.length, true);
  msg.set(name, 2);
  msg.set(body, 2 + name.length);
  return msg;
}

/**
 * Takes every notification queued so far.
 *
 * @param n the native library
 * @param ringId the agent's queue
 * @param buf scratch space for one drain
 * @returns messages (UTF-8 decoded) by sending agent, in arrival order
 */
export function drainNotifs(n: Native, ringId: number, buf: Uint8Array): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (;;) {
    const len = check(n, n.dyn_ring_drain(ringId, buf), "getNewNotifs");
    if (len === 0) return out;
    const view = new DataView(buf.buffer, buf.byteOffset, len);
    for (let at = 0; at + 4 <= len;) {
      const size = view.getUint32(at, true);
      const rec = buf.subarray(at + 4, at + 4 + size);
      at += 4 + size;
      const nameLen = rec.length >= 2 ? rec[0]! | (rec[1]! << 8) : 0;
      const from = dec.decode(rec.subarray(2, 2 + nameLen));
      const body = dec.decode(rec.subarray(Math.min(rec.length, 2 + nameLen)));
      const list = out.get(from);
      if (list) list.push(body);
      else out.set(from, [body]);
    }
  }
}
