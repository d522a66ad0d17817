// Port of seed 000's "Basic Worker Example": takes `{text}` in and streams one `{text}`
// item per whitespace-separated word. Run alone with ETCD_ENDPOINTS and NATS_SERVER set.

import { type DistributedRuntime, dynamoWorker } from "../../mod.ts";

/** Where the worker registers. */
export const NAMESPACE = "hello_world";
export const COMPONENT = "YourWorker";
export const ENDPOINT = "generate";

/** The request the worker takes (a wire type). */
export interface RequestType {
  text: string;
}

/** One streamed item (a wire type). */
export interface ResponseType {
  text: string;
}

/**
 * Streams the words of `request.text`, one item each.
 *
 * @example
 * ```ts
 * for await (const item of generate({ text: "a b" })) console.log(item.text);
 * ```
 */
export async function* generate(request: RequestType): AsyncGenerator<ResponseType> {
  if (typeof request?.text !== "string") {
    throw new TypeError(`request.text must be a string, got ${JSON.stringify(request)}`);
  }
  for (const word of request.text.split(/\s+/)) {
    if (word) yield { text: word };
  }
}

/**
 * Declares the service and serves {@linkcode generate}; resolves when the runtime shuts
 * down.
 */
export async function serveWorker(runtime: DistributedRuntime): Promise<void> {
  const component = runtime.namespace(NAMESPACE).component(COMPONENT);
  await component.createService();
  await component.endpoint(ENDPOINT).serveEndpoint(generate);
}

if (import.meta.main) {
  await dynamoWorker(serveWorker);
}
