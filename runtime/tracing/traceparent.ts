// The W3C Trace Context `traceparent` value: version-traceid-parentid-flags, all lowercase hex.

/** A parsed `traceparent`. */
export interface TraceParent {
  /** 32 hex digits, not all zero. */
  traceId: string;
  /** The parent span's id: 16 hex digits, not all zero. */
  spanId: string;
  /** The trace flags byte (bit 0: sampled). */
  flags: number;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
const ZERO_TRACE = "0".repeat(32);
const ZERO_SPAN = "0".repeat(16);

/**
 * Parses a `traceparent` header value; anything malformed (or version ff, or an all-zero id)
 * gives `undefined`, as W3C Trace Context says a receiver treats a bad header: as no parent.
 *
 * @param value the header's value
 * @returns the trace id, parent span id and flags, or undefined
 * @example
 * ```ts
 * const p = parseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
 * console.log(p?.traceId); // 0af7651916cd43dd8448eb211c80319c
 * ```
 */
export function parseTraceparent(value: string | null | undefined): TraceParent | undefined {
  if (typeof value !== "string" || value.length > 512) return undefined;
  const m = TRACEPARENT.exec(value.trim());
  if (m === null) return undefined;
  const [, version, traceId, spanId, flags, rest] = m;
  // Version 00 has exactly four fields; later versions may add some (kept forward-compatible).
  if (version === "ff" || (version === "00" && rest !== undefined)) return undefined;
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return undefined;
  return { traceId: traceId!, spanId: spanId!, flags: parseInt(flags!, 16) };
}

/**
 * Formats a `traceparent` value (version 00).
 *
 * @param p trace id, span id and flags
 * @returns the header value
 */
export function formatTraceparent(p: TraceParent): string {
  return `00-${p.traceId}-${p.spanId}-${(p.flags & 0xff).toString(16).padStart(2, "0")}`;
}
