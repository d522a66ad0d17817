/**
 * The request plane (requests in, an acknowledgement back) and the response stream
 * (frames from the worker back to the caller). Two implementations: NATS + TCP
 * call-home ({@linkcode NatsRequestPlane}) and in-process ({@linkcode LocalRequestPlane}).
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
  type Subscription,
} from "./types.ts";
export { decodeRequest, encodeRequest, jsonFrame, parseFrame } from "./wire.ts";
export { LocalHub, LocalRequestBus, LocalRequestPlane } from "./local.ts";
export { NatsRequestPlane, type NatsRequestPlaneOptions } from "./nats.ts";
export { TcpFrameConn, TcpResponseServer } from "./tcp_stream.ts";
