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
// The SDK: @service classes, configuration, graphs (dynamo serve / deploy).
export * from "./runtime/sdk/mod.ts";
// The event plane (KV events, metrics): publish/subscribe on NATS-style subjects.
export {
  componentEventSubject,
  type EventMessage,
  type EventPlane,
  type EventSubscribeOptions,
  type EventSubscription,
  LocalEventBus,
  LocalEventPlane,
  NatsEventPlane,
  QueueSubscription,
  subjectMatches,
} from "./runtime/events/mod.ts";
// Native KV transfer (NIXL-like) through Deno FFI; the library loads on first use
// (`deno task build:native` builds it).
export {
  type AllocateOptions,
  type BlockLayout,
  type CudaKernelStatus,
  type CudaKernelStatusOptions,
  DlistHandle,
  loadNativeLibrary,
  MemoryRegion,
  type MemType,
  NativeLibraryError,
  TransferAgent,
  type TransferAgentOptions,
  TransferError,
  type VramStatus,
  VramUnavailableError,
  type WaitXferOptions,
  type XferDesc,
  type XferDescInput,
  type XferDescList,
  XferHandle,
  type XferOp,
  type XferState,
} from "./native/mod.ts";
// Disaggregated prefill/decode: the remote-prefill decision, prefill queues, KV bytes moved
// by the TransferAgent between a decode and a prefill worker (examples/disagg/).
export * from "./llm/disagg/mod.ts";
// Interop with the reference system (ai-dynamo 1.6.1): discover its workers in etcd and call them.
export * from "./runtime/reference/mod.ts";
