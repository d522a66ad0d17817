// The llama.cpp engine's failures, each classified where its cause is known.

import { DynamoError } from "../../../runtime/errors.ts";

/** A model file the engine cannot load: missing, not a GGUF, truncated, or refused by llama.cpp. */
export class LlamaCppLoadError extends DynamoError {
  /** The file that was asked for. */
  readonly path: string;
  /** Why it cannot be loaded, one line. */
  readonly reason: string;
  /** Creates the error for a file and the one-line reason. */
  constructor(path: string, reason: string, options?: ErrorOptions) {
    super(`cannot load model ${path}: ${reason}`, options);
    this.path = path;
    this.reason = reason;
  }
}

/** A request the engine cannot run (no prompt tokens, or a prompt past its context). */
export class LlamaCppRequestError extends DynamoError {}

/**
 * A prefilled sequence state the engine refuses to import: malformed, corrupt, computed with
 * another model or for another prompt, too large, or rejected by llama.cpp. Nothing was
 * generated from it, and the sequence it was loaded into is cleared.
 */
export class LlamaCppStateError extends DynamoError {
  /** Why it was refused, one line. */
  readonly reason: string;
  /** Creates the error for the one-line reason. */
  constructor(reason: string, options?: ErrorOptions) {
    super(`prefilled state refused: ${reason}`, options);
    this.reason = reason;
  }
}
