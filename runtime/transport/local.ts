// The in-process request plane of the embedded default: subjects in a map, response
// streams as pairs of bounded queues. Same semantics as NATS + TCP, no sockets.

import { AsyncQueue } from "../_queue.ts";
import { DynamoError, InvalidArgumentError, NoInstancesError } from "../errors.ts";
import type {
  ConnectionInfo,
  Frame,
  FrameConn,
  PendingStream,
  RawRequestHandler,
  RequestOptions,
  RequestPayload,
  RequestPlane,
  Subscription,
} from "./types.ts";

/** Frames a local stream holds before the sender must wait. */
const LOCAL_STREAM_CAPACITY = 256;

/**
 * One side of an in-process stream. Items travel by reference (no JSON): a handler must
 * not change an object after yielding it.
 */
class LocalFrameConn implements FrameConn {
  readonly carriesValues = true;
  readonly inbound = new AsyncQueue<Frame>({ capacity: LOCAL_STREAM_CAPACITY });
  peer!: LocalFrameConn;
  #closed = false;

  /** True once either side closed: nothing sent now would be read. */
  get closed(): boolean {
    return this.#closed || this.peer.inbound.closed;
  }

  send(frame: Frame): Promise<void> | void {
    if (this.#closed || this.peer.inbound.closed) {
      throw new DynamoError("response stream connection is closed");
    }
    const pushed = this.peer.inbound.push(frame);
    if (pushed instanceof Promise) return pushed.then(() => {});
  }

  receive(): Promise<Frame | null> {
    const r = this.inbound.poll();
    if (r !== undefined) return Promise.resolve(r.done ? null : r.value);
    return this.inbound.next().then(frameOrNull);
  }

  /**
   * A frame already queued, without waiting: the frame, null once the peer closed and all
   * was read, or undefined when nothing has arrived yet.
   */
  poll(): Frame | null | undefined {
    const r = this.inbound.poll();
    return r === undefined ? undefined : r.done ? null : r.value;
  }

  end(): Promise<void> {
    this.close();
    return Promise.resolve();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.inbound.clear();
    this.peer.inbound.close(); // the peer drains what it was sent, then sees the close
  }
}

function frameOrNull(r: IteratorResult<Frame>): Frame | null {
  return r.done ? null : r.value;
}

function pipe(): [LocalFrameConn, LocalFrameConn] {
  const a = new LocalFrameConn();
  const b = new LocalFrameConn();
  a.peer = b;
  b.peer = a;
  return [a, b];
}

/**
 * What the runtimes of one embedded cluster share on the request plane: served subjects
 * and reserved response streams.
 */
export class LocalRequestBus {
  /** Handlers of each served subject. */
  readonly subjects: Map<string, Set<RawRequestHandler>> = new Map();
  /** Reserved response streams by stream id, each waiting for the worker's connection. */
  readonly pending: Map<string, (conn: FrameConn) => void> = new Map();
}

/**
 * The former name of {@linkcode LocalRequestBus} ("hub" now names only `runtime/hub/`).
 * @deprecated Use {@linkcode LocalRequestBus}.
 */
export const LocalHub: typeof LocalRequestBus = LocalRequestBus;
/** @deprecated Use {@linkcode LocalRequestBus}. */
export type LocalHub = LocalRequestBus;

/** The in-process request plane (embedded default). */
export class LocalRequestPlane implements RequestPlane {
  readonly kind = "local";
  /** Requests may travel as values (no encoding) on this plane. */
  readonly carriesValues = true;
  /** The state shared with the other runtimes of the cluster. */
  readonly bus: LocalRequestBus;
  #subs = new Set<Subscription>();
  #closed = false;

  /**
   * Creates a runtime's request plane on the cluster's shared bus.
   * @param bus shared state (default: a new, private bus)
   */
  constructor(bus: LocalRequestBus = new LocalRequestBus()) {
    this.bus = bus;
  }

  /** @deprecated Use {@linkcode LocalRequestPlane.bus}. */
  get hub(): LocalRequestBus {
    return this.bus;
  }

  serve(subject: string, handler: RawRequestHandler): Promise<Subscription> {
    this.#open();
    let set = this.bus.subjects.get(subject);
    if (!set) this.bus.subjects.set(subject, set = new Set());
    set.add(handler);
    const bus = this.bus;
    const subs = this.#subs;
    const sub: Subscription = {
      unsubscribe() {
        subs.delete(sub);
        const s = bus.subjects.get(subject);
        s?.delete(handler);
        if (s?.size === 0) bus.subjects.delete(subject);
        return Promise.resolve();
      },
    };
    subs.add(sub);
    return Promise.resolve(sub);
  }

  request(subject: string, payload: RequestPayload, options: RequestOptions = {}): Promise<void> {
    this.#open();
    options.signal?.throwIfAborted();
    const handlers = this.bus.subjects.get(subject);
    if (!handlers || handlers.size === 0) return Promise.reject(new NoInstancesError(subject));
    // Queue groups pick one member; one subject per instance makes this the only one.
    const handler = handlers.values().next().value as RawRequestHandler;
    // Bytes are copied (nothing shared across the "wire"); values are handed over as they are.
    const delivered = payload instanceof Uint8Array ? payload.slice() : payload;
    // Acknowledged once the handler has it (as a NATS reply): a worker dials back from its
    // handler at once, so the caller sees the connection by then and needs no ack deadline.
    return new Promise<void>((resolve) =>
      queueMicrotask(() => {
        try {
          handler(delivered);
        } finally {
          resolve();
        }
      })
    );
  }

  expectStream(streamId: string): PendingStream {
    this.#open();
    let deliver!: (conn: FrameConn) => void;
    const connection = new Promise<FrameConn>((resolve) => (deliver = resolve));
    this.bus.pending.set(streamId, deliver);
    return {
      connectionInfo: { local: { stream_id: streamId } },
      connection,
      cancel: () => void this.bus.pending.delete(streamId),
    };
  }

  dial(info: ConnectionInfo): Promise<FrameConn> {
    if (!("local" in info)) {
      return Promise.reject(
        new InvalidArgumentError(`not a local connection info: ${JSON.stringify(info)}`),
      );
    }
    const deliver = this.bus.pending.get(info.local.stream_id);
    if (!deliver) {
      return Promise.reject(new DynamoError(`caller of stream ${info.local.stream_id} is gone`));
    }
    this.bus.pending.delete(info.local.stream_id);
    const [worker, caller] = pipe();
    deliver(caller);
    return Promise.resolve(worker);
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const sub of [...this.#subs]) await sub.unsubscribe();
  }

  #open(): void {
    if (this.#closed) throw new DynamoError("local request plane is closed");
  }
}
