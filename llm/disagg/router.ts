// The decode worker's per-request choice between local and remote prefill (seed 000's
// DisaggregatedRouter): remote when the uncached part of the prompt is long and the
// prefill queue has room. The thresholds can change while the worker runs.

import { InvalidArgumentError } from "../../runtime/errors.ts";

/** What {@linkcode DisaggRouter.shouldPrefillRemote} decides on. */
export interface PrefillDecisionInput {
  /** Prompt tokens to prefill. */
  prefillLength: number;
  /** Leading prompt tokens already in the decode worker's KV cache. */
  prefixHitLength: number;
  /** Remote prefill requests waiting in the queue now. */
  queueSize: number;
}

/** Options of {@linkcode DisaggRouter}. */
export interface DisaggRouterOptions {
  /** Longest uncached prefill done locally; default 1000 (seed 000). */
  maxLocalPrefillLength?: number;
  /** Queue length from which requests stay local; default Infinity. */
  maxPrefillQueueSize?: number;
}

/** Seed 000's default `max_local_prefill_length`. */
export const DEFAULT_MAX_LOCAL_PREFILL_LENGTH = 1000;

/**
 * The disaggregation decision, as a pure function: remote when
 * `prefillLength - prefixHitLength > maxLocalPrefillLength` and
 * `queueSize < maxQueueSize`.
 *
 * @param input the request's lengths and the queue's size
 * @param limits the thresholds
 * @returns true to prefill on a prefill worker
 * @example
 * ```ts
 * shouldPrefillRemote({ prefillLength: 2000, prefixHitLength: 0, queueSize: 0 },
 *   { maxLocalPrefillLength: 1000, maxQueueSize: 8 }); // true
 * ```
 */
export function shouldPrefillRemote(
  input: PrefillDecisionInput,
  limits: { maxLocalPrefillLength?: number; maxQueueSize?: number } = {},
): boolean {
  const max = limits.maxLocalPrefillLength ?? DEFAULT_MAX_LOCAL_PREFILL_LENGTH;
  const maxQueue = limits.maxQueueSize ?? Infinity;
  return input.prefillLength - input.prefixHitLength > max && input.queueSize < maxQueue;
}

/**
 * Holds the thresholds of {@linkcode shouldPrefillRemote} and lets an operator change
 * them at run time (`setMaxLocalPrefillLength`, `setMaxPrefillQueueSize`).
 *
 * @example
 * ```ts
 * const router = new DisaggRouter({ maxLocalPrefillLength: 512 });
 * router.shouldPrefillRemote({ prefillLength: 600, prefixHitLength: 0, queueSize: 0 }); // true
 * router.setMaxLocalPrefillLength(1000); // now false for the same request
 * ```
 */
export class DisaggRouter {
  #maxLocal: number;
  #maxQueue: number;

  /**
   * Creates a router with the given thresholds.
   *
   * @param options the initial thresholds
   * @throws {InvalidArgumentError} a negative or non-numeric threshold
   */
  constructor(options: DisaggRouterOptions = {}) {
    this.#maxLocal = checkLimit(
      options.maxLocalPrefillLength ?? DEFAULT_MAX_LOCAL_PREFILL_LENGTH,
      "maxLocalPrefillLength",
    );
    this.#maxQueue = checkLimit(options.maxPrefillQueueSize ?? Infinity, "maxPrefillQueueSize");
  }

  /** Longest uncached prefill done locally. */
  get maxLocalPrefillLength(): number {
    return this.#maxLocal;
  }

  /** Queue length from which requests stay local. */
  get maxPrefillQueueSize(): number {
    return this.#maxQueue;
  }

  /**
   * Sets the longest uncached prefill done locally.
   *
   * @param value new threshold (>= 0)
   * @throws {InvalidArgumentError} a negative or non-numeric value
   */
  setMaxLocalPrefillLength(value: number): void {
    this.#maxLocal = checkLimit(value, "maxLocalPrefillLength");
  }

  /**
   * Sets the queue length from which requests stay local.
   *
   * @param value new queue limit (>= 0; Infinity for none)
   * @throws {InvalidArgumentError} a negative or non-numeric value
   */
  setMaxPrefillQueueSize(value: number): void {
    this.#maxQueue = checkLimit(value, "maxPrefillQueueSize");
  }

  /**
   * Decides whether a request prefills on a prefill worker.
   *
   * @param input the request's lengths and the queue's size
   * @returns true to prefill on a prefill worker
   * @throws {InvalidArgumentError} a length is negative or not a number
   */
  shouldPrefillRemote(input: PrefillDecisionInput): boolean {
    for (const k of ["prefillLength", "prefixHitLength", "queueSize"] as const) {
      const v = input?.[k];
      if (typeof v !== "number" || !(v >= 0)) {
        throw new InvalidArgumentError(`${k} must be a number >= 0, got ${v}`);
      }
    }
    return shouldPrefillRemote(input, {
      maxLocalPrefillLength: this.#maxLocal,
      maxQueueSize: this.#maxQueue,
    });
  }
}

function checkLimit(v: number, name: string): number {
  if (typeof v !== "number" || !(v >= 0)) {
    throw new InvalidArgumentError(`${name} must be a number >= 0, got ${v}`);
  }
  return v;
}
