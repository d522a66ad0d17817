// What both ends of a response stream share: the fixed frames, and a handler's error as it
// travels (with its class name, and an upstream's HTTP status).

import { EngineShutdownError, ProtocolError, RemoteError, UpstreamError } from "./errors.ts";
import { type Frame, FrameType } from "./transport/mod.ts";

export const encoder = new TextEncoder();
export const EMPTY = new Uint8Array(0);
export const SENTINEL: Frame = { type: FrameType.Sentinel, payload: EMPTY };
export const HEARTBEAT: Frame = { type: FrameType.Heartbeat, payload: EMPTY };
/** The "accepted" prologue, `{}` (read, never changed). */
export const PROLOGUE_OK: Frame = Object.freeze({
  type: FrameType.Prologue,
  payload: encoder.encode("{}"),
});
/** The "accepted" prologue on connections that carry values (read, never changed). */
export const PROLOGUE_OK_VALUE: Frame = Object.freeze({
  type: FrameType.Prologue,
  payload: EMPTY,
  value: Object.freeze({}),
});

/** A handler's error as it travels: message and class name (and an upstream's HTTP status). */
export interface WireError {
  message: string;
  name: string;
  status?: number;
}

/** A handler's error frame as the caller throws it. */
export function toRemoteError(err: unknown): Error {
  if (typeof err !== "object" || err === null) {
    return new ProtocolError(`malformed error frame: ${JSON.stringify(err)}`);
  }
  const { name, message, status } = err as Partial<WireError>;
  if (name === "EngineShutdownError") return new EngineShutdownError(String(message));
  if (name === "UpstreamError" && typeof status === "number") {
    return new UpstreamError(status, String(message));
  }
  return new RemoteError(String(message), String(name));
}

/** A handler's error as it is sent. */
export function wireError(err: unknown): WireError {
  if (err instanceof UpstreamError) {
    return { message: err.message, name: err.name, status: err.status };
  }
  if (err instanceof Error) return { message: err.message, name: err.name };
  return { message: String(err), name: "Error" };
}
