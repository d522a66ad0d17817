/** Errors of the native transfer engine: one class per failure, collected in `errors`. */

import { DynamoError } from "../runtime/errors.ts";

/** Base class of every failure of the transfer engine. */
export class TransferError extends DynamoError {}

/** The native library is missing, stale or cannot be loaded. */
export class NativeLibraryError extends TransferError {
  /** Where the library was looked for. */
  readonly path: string;
  /** Creates the error for the library file at `path`. */
  constructor(message: string, path: string, options?: ErrorOptions) {
    super(message, options);
    this.path = path;
  }
}

/** A bad argument: wrong type, negative size, malformed metadata, unknown region. */
export class TransferArgumentError extends TransferError {}

/** A descriptor or an index lies outside its region or list. */
export class DescriptorRangeError extends TransferError {}

/** Paired local and remote descriptors differ in size. */
export class SizeMismatchError extends TransferError {}

/** No remote agent of that name was added (or it was removed). */
export class UnknownAgentError extends TransferError {
  readonly agentName: string;
  constructor(agentName: string, message?: string) {
    super(message ?? `unknown agent '${agentName}': add its metadata with addRemoteAgent() first`);
    this.agentName = agentName;
  }
}

/** The memory, list, transfer or agent was released (or closed) before this use. */
export class ReleasedHandleError extends TransferError {}

/** VRAM was asked for where the CUDA runtime or a device is missing. */
export class VramUnavailableError extends TransferError {}

/** The peer's notification queue is full (it does not drain its notifications). */
export class NotificationQueueFullError extends TransferError {}

/** The transfer is still in progress. */
export class TransferBusyError extends TransferError {}

/** A copy failed in the native engine (OS or CUDA error); `code` is the native code. */
export class TransferFailedError extends TransferError {
  readonly code: number;
  constructor(message: string, code: number) {
    super(message);
    this.code = code;
  }
}

/** Every error class of this module, by name. */
export const errors = {
  TransferError,
  NativeLibraryError,
  TransferArgumentError,
  DescriptorRangeError,
  SizeMismatchError,
  UnknownAgentError,
  ReleasedHandleError,
  VramUnavailableError,
  NotificationQueueFullError,
  TransferBusyError,
  TransferFailedError,
};
