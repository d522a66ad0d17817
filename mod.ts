/**
 * dynamo for Deno: a distributed LLM-inference runtime.
 *
 * @example
 * ```ts
 * import { dynamoWorker } from "./mod.ts";
 * await dynamoWorker(async (runtime) => {
 *   const endpoint = runtime.namespace("demo").component("backend").endpoint("generate");
 *   await endpoint.serveEndpoint(async function* (req: { text: string }) {
 *     for (const word of req.text.split(/\s+/)) yield { text: word };
 *   });
 * });
 * ```
 * @module
 */

export * from "./runtime/mod.ts";
export * from "./llm/mod.ts";
