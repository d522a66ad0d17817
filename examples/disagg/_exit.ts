// deno-lint-ignore-file no-console -- a worker script prints its fatal error
// The worker scripts' last line of defence: a failure the runtime classified (a DynamoError,
// e.g. JetStream not enabled on the NATS server) is one line that says what to do, not a stack.

import { DynamoError } from "../../mod.ts";

/** Prints a classified failure as one line and exits 1; anything else is rethrown. */
export function exitOnDynamoError(err: unknown): never {
  if (err instanceof DynamoError) {
    console.error(`error: ${err.message}`);
    Deno.exit(1);
  }
  throw err;
}
