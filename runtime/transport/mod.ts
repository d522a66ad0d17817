/**
 * The request plane (requests in, an acknowledgement back) and the response stream
 * (frames from the worker back to the caller). Implementations: TCP, requests and streams
 * multiplexed on persistent caller-to-worker connections ({@linkcode TcpRequestPlane});
 * NATS with pooled TCP call-home streams ({@linkcode NatsRequestPlane}); in-process
 * ({@linkcode LocalRequestPlane}).
 * @module
 */

export {
  type ConnectionInfo,
  type Frame,
  type FrameConn,
  FrameType,
  type PendingStream,
  type RawRequestHandler,
  type RequestHeader,
  type RequestMessage,
  type RequestOptions,
  type RequestPayload,
  type RequestPlane,
  type RequestTraceHeaders,
  type Subscription,
} from "./types.ts";
export { decodeRequest, encodeRequest, jsonFrame, parseFrame } from "./wire.ts";
export { LocalHub, LocalRequestBus, LocalRequestPlane } from "./local.ts";
export { NatsRequestPlane, type NatsRequestPlaneOptions } from "./nats.ts";
export { CallHomePool, TcpFrameConn, TcpResponseServer } from "./tcp_stream.ts";
export {
  type ReferenceRequestHandler,
  TcpRequestPlane,
  type TcpRequestPlaneOptions,
} from "./tcp.ts";
export { MuxConnection, MuxKind, MuxStream } from "./mux.ts";
