// The mocker's time model: how long one simulated forward pass takes (DESIGN §7, fitted
// on vLLM by the reference mocker), scaled down by a speedup ratio.

import { InvalidArgumentError } from "../../../runtime/errors.ts";

/**
 * Milliseconds to prefill `newTokens` batched uncached tokens in one forward pass.
 *
 * @param newTokens prompt tokens computed in the pass (cache hits excluded)
 * @returns 4.209989e-7*T^2 + 1.518344e-2*T + 16.50142, or 0 when there is nothing to prefill
 * @example
 * ```ts
 * prefillTimeMs(1000); // ≈ 32.1
 * ```
 */
export function prefillTimeMs(newTokens: number): number {
  if (newTokens <= 0) return 0;
  return 4.209989e-7 * newTokens * newTokens + 1.518344e-2 * newTokens + 16.50142;
}

/**
 * Milliseconds of one decode pass at KV usage fraction `kvUsage`.
 *
 * @param kvUsage active KV blocks / total blocks, in [0, 1]
 * @returns -25.74*u^2 + 54.01*u + 5.74
 * @example
 * ```ts
 * decodeTimeMs(0.5); // ≈ 26.3
 * ```
 */
export function decodeTimeMs(kvUsage: number): number {
  const u = Math.min(1, Math.max(0, kvUsage));
  return -25.74 * u * u + 54.01 * u + 5.74;
}

/**
 * Simulated ms to copy one KV block between mocker workers by default (peer KV fetch): an
 * 8B-class model's 16-token block (32 layers x 8 KV heads x 128 x K and V in bf16: 2 MiB) over
 * a 25 GB/s link (a 200 Gb/s RDMA NIC).
 */
export const DEFAULT_KV_FETCH_MS_PER_BLOCK = 0.084;

/**
 * Simulated ms to copy one KV block back from a mocker's host tier into its GPU by default: the
 * same 2 MiB block over PCIe Gen5 x16 from pinned host memory, about 50 GB/s.
 */
export const DEFAULT_KV_ONBOARD_MS_PER_BLOCK = 0.042;

/** What one forward pass did, as far as timing goes. */
export interface StepShape {
  /** Uncached prompt (or recomputed) tokens prefilled in the pass. */
  prefillTokens: number;
  /** Sequences that decoded one token in the pass. */
  decodeSequences: number;
  /** Active KV blocks / total blocks during the pass. */
  kvUsage: number;
}

/**
 * Milliseconds of one forward pass. A mixed pass (chunked prefill beside decodes) costs
 * the prefill time of its prefill tokens plus one decode time: the two polynomials were
 * fitted on pure passes; adding them charges both parts, so a mixed pass is never
 * cheaper than either part alone.
 *
 * @param shape the pass's prefill tokens, decoding sequences and KV usage
 * @param speedupRatio divides the time (1 = real time)
 * @returns the duration in ms (0 for an empty pass)
 * @throws {InvalidArgumentError} a speedup ratio that is not a positive number
 * @example
 * ```ts
 * stepTimeMs({ prefillTokens: 512, decodeSequences: 8, kvUsage: 0.2 }, 10);
 * ```
 */
export function stepTimeMs(shape: StepShape, speedupRatio = 1): number {
  checkSpeedupRatio(speedupRatio);
  const prefill = prefillTimeMs(shape.prefillTokens);
  const decode = shape.decodeSequences > 0 ? decodeTimeMs(shape.kvUsage) : 0;
  return (prefill + decode) / speedupRatio;
}

/** @throws {InvalidArgumentError} a speedup ratio that is not a positive finite number */
export function checkSpeedupRatio(speedupRatio: number): void {
  if (!(speedupRatio > 0) || !Number.isFinite(speedupRatio)) {
    throw new InvalidArgumentError(
      `speedupRatio must be a positive number, got ${speedupRatio}`,
    );
  }
}
