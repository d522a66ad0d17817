// Failures met when speaking to the reference system (ai-dynamo 1.6.1), classified where the
// cause is known: a discovery record that does not parse, and a worker that refuses a request.

import { DynamoError } from "../errors.ts";

/** A reference discovery record (a `v1/instances/...` or `v1/mdc/...` key) that does not parse. */
export class ReferenceRecordError extends DynamoError {
  /** The etcd key of the record. */
  readonly key: string;
  /**
   * Creates the error.
   * @param key the record's key
   * @param reason what was wrong with it
   */
  constructor(key: string, reason: string) {
    super(`reference record ${key}: ${reason}`);
    this.key = key;
  }
}

/**
 * A reference worker did not take a request: its request address refused the connection, closed
 * it before acknowledging, or acknowledged with an error message.
 */
export class ReferenceWorkerRefusedError extends DynamoError {
  /** The worker's request-plane address, `host:port`. */
  readonly address: string;
  /** The worker's own message (its non-empty acknowledgement) or the connection failure. */
  readonly reason: string;
  /**
   * Creates the error.
   * @param address the worker's `host:port`
   * @param reason why it refused
   */
  constructor(address: string, reason: string, options?: ErrorOptions) {
    super(`reference worker at ${address} refused the request: ${reason}`, options);
    this.address = address;
    this.reason = reason;
  }
}
