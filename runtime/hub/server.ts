// The hub: one process hosts the embedded planes (keys and leases, subjects, blobs,
// events) and serves them to the other processes of a local deployment over TCP.

import { AsyncQueue } from "../_queue.ts";
import { MemoryStore } from "../discovery/memory.ts";
import type { WatchEvent } from "../discovery/types.ts";
import { InvalidArgumentError } from "../errors.ts";
import { subjectMatches } from "../events/subject.ts";
import { type Logger, silentLogger } from "../logger.ts";
import { MemoryObjectStore } from "../objects/memory.ts";
import { TcpFrameConn } from "../transport/tcp_stream.ts";
import {
  decodeMessage,
  encodeMessage,
  formatHubAddress,
  HUB_PROTOCOL_VERSION,
  type HubMessage,
  tokensEqual,
  type WireError,
} from "./protocol.ts";

/** Options of {@linkcode HubServer.start}. */
export interface HubServerOptions {
  /** Interface to bind (default "127.0.0.1": only this machine can connect). */
  hostname?: string;
  /** Port (default 0: any free port; read it from `address`). */
  port?: number;
  /** A shared secret clients must present in their handshake (DYN_HUB_TOKEN). */
  token?: string;
  /** How often clients ping, in ms (default 2500); a client silent for 4 periods is dropped. */
  pingMs?: number;
  /** Deadline for a client's handshake in ms (default 5000). */
  handshakeTimeoutMs?: number;
  logger?: Logger;
}

interface Peer {
  readonly id: number;
  readonly conn: TcpFrameConn;
  name: string;
  lastSeen: number;
  closed: boolean;
  readonly leases: Set<string>;
  readonly watches: Map<number, { queue: AsyncQueue<WatchEvent>; unwatch: () => void }>;
  /** sid -> subject */
  readonly subs: Map<number, string>;
  /** esid -> subject pattern */
  readonly esubs: Map<number, string>;
}

interface Route {
  readonly targets: Map<string, { peer: Peer; sid: number }>;
  next: number;
}

interface PendingRequest {
  from: Peer;
  id: number;
  worker: Peer;
  subject: string;
}

class HandshakeError extends Error {
  readonly wire: WireError;
  constructor(wire: WireError) {
    super(wire.message);
    this.wire = wire;
  }
}

/**
 * The hub of a local deployment: discovery (a {@linkcode MemoryStore}), request routing
 * by subject, a {@linkcode MemoryObjectStore} and an event bus, served over one
 * multiplexed TCP connection per client process. Leases live as long as the connection
 * that granted them: a process that dies loses its keys as soon as its socket closes.
 *
 * @example
 * ```ts
 * const hub = await HubServer.start({ token: crypto.randomUUID() });
 * const child = new Deno.Command("deno", { args: ["run", "-A", "worker.ts"], env: hub.env() });
 * // ...
 * await hub.close();
 * ```
 */
export class HubServer {
  /** `host:port` clients dial (DYN_HUB). */
  readonly address: string;
  /** The hub's keys and leases. */
  readonly store: MemoryStore = new MemoryStore();
  /** The hub's blobs. */
  readonly objects: MemoryObjectStore = new MemoryObjectStore();
  readonly #listener: Deno.TcpListener;
  readonly #token: string | undefined;
  readonly #pingMs: number;
  readonly #handshakeTimeoutMs: number;
  readonly #logger: Logger;
  readonly #peers = new Set<Peer>();
  readonly #loops = new Set<Promise<void>>();
  readonly #routes = new Map<string, Route>();
  readonly #pending = new Map<number, PendingRequest>();
  readonly #esubs = new Set<{ peer: Peer; esid: number; pattern: string }>();
  readonly #reaper: ReturnType<typeof setInterval>;
  readonly #accepting: Promise<void>;
  #nextPeer = 1;
  #lastReap = Date.now();
  #nextRid = 1;
  #closed: Promise<void> | undefined;

  private constructor(listener: Deno.TcpListener, advertise: string, options: HubServerOptions) {
    this.#listener = listener;
    this.#token = options.token;
    this.#pingMs = options.pingMs ?? 2500;
    this.#handshakeTimeoutMs = options.handshakeTimeoutMs ?? 5000;
    this.#logger = options.logger ?? silentLogger;
    this.address = formatHubAddress(advertise, (listener.addr as Deno.NetAddr).port);
    this.#reaper = setInterval(() => this.#reap(), this.#pingMs);
    this.#accepting = this.#acceptLoop();
  }

  /**
   * Binds the hub and starts serving.
   * @throws {InvalidArgumentError} a bad port, token or ping interval
   * @throws {Deno.errors.AddrInUse} the port is taken
   */
  static start(options: HubServerOptions = {}): Promise<HubServer> {
    try {
      const port = options.port ?? 0;
      if (!Number.isInteger(port) || port < 0 || port > 65535) {
        throw new InvalidArgumentError(`hub port must be 0..65535, got ${port}`);
      }
      if (options.token !== undefined && options.token === "") {
        throw new InvalidArgumentError("hub token must not be empty (leave it unset for none)");
      }
      if (options.pingMs !== undefined && !(options.pingMs >= 10)) {
        throw new InvalidArgumentError(`hub pingMs must be >= 10, got ${options.pingMs}`);
      }
      const hostname = options.hostname ?? "127.0.0.1";
      const listener = Deno.listen({ hostname, port, transport: "tcp" });
      const advertise = hostname === "0.0.0.0" ? "127.0.0.1" : hostname === "::" ? "::1" : hostname;
      const server = new HubServer(listener, advertise, options);
      server.#logger.info("hub listening", { address: server.address, token: !!options.token });
      return Promise.resolve(server);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** What a child process needs in its environment to join: DYN_HUB (and DYN_HUB_TOKEN). */
  env(): Record<string, string> {
    return {
      DYN_HUB: this.address,
      ...(this.#token !== undefined ? { DYN_HUB_TOKEN: this.#token } : {}),
    };
  }

  /** Connected client processes. */
  get connectionCount(): number {
    return this.#peers.size;
  }

  /** Stops listening and drops every connection (their leases and keys with them). */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      clearInterval(this.#reaper);
      try {
        this.#listener.close();
      } catch {
        // already closed
      }
      for (const peer of [...this.#peers]) this.#drop(peer, "hub shutting down");
      await this.#accepting;
      await Promise.allSettled([...this.#loops]);
      this.#logger.info("hub stopped", { address: this.address });
    })();
    return this.#closed;
  }

  async #acceptLoop(): Promise<void> {
    try {
      for await (const raw of this.#listener) {
        const loop = this.#serve(raw);
        this.#loops.add(loop);
        loop.catch(() => {}).finally(() => this.#loops.delete(loop));
      }
    } catch {
      // listener closed
    }
  }

  async #serve(raw: Deno.Conn): Promise<void> {
    const conn = new TcpFrameConn(raw);
    let peer: Peer;
    try {
      peer = await this.#handshake(conn);
    } catch (err) {
      const wire: WireError = err instanceof HandshakeError
        ? err.wire
        : { code: "error", message: `bad handshake: ${(err as Error).message}` };
      this.#logger.warn("refused a hub client", { reason: wire.message });
      try {
        await conn.send(encodeMessage({ ev: "bye", error: wire }));
        await conn.end();
      } catch {
        conn.close();
      }
      return;
    }
    if (this.#closed) {
      this.#drop(peer, "hub shutting down");
      return;
    }
    // Its welcome could not be written: it was dropped already.
    if (peer.closed) return;
    this.#peers.add(peer);
    this.#logger.debug("hub client connected", { peer: peer.id, name: peer.name });
    let reason = "connection closed";
    try {
      for (;;) {
        const frame = await conn.receive();
        if (frame === null) break;
        peer.lastSeen = Date.now();
        const { msg, bytes } = decodeMessage(frame);
        this.#handle(peer, msg, bytes);
      }
    } catch (err) {
      reason = `protocol error: ${(err as Error).message}`;
    }
    this.#drop(peer, reason);
  }

  async #handshake(conn: TcpFrameConn): Promise<Peer> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const expired = new Promise<"timeout">((r) =>
      timer = setTimeout(() => r("timeout"), this.#handshakeTimeoutMs)
    );
    try {
      const frame = await Promise.race([conn.receive(), expired]);
      if (frame === "timeout") {
        throw new HandshakeError({
          code: "error",
          message: `no hello within ${this.#handshakeTimeoutMs} ms`,
        });
      }
      if (frame === null) throw new Error("closed before its hello");
      const { msg } = decodeMessage(frame);
      if (msg.op !== "hello") {
        throw new HandshakeError({ code: "error", message: `expected hello, got "${msg.op}"` });
      }
      if (msg.v !== HUB_PROTOCOL_VERSION) {
        throw new HandshakeError({
          code: "error",
          message:
            `protocol version ${msg.v} is not supported (this hub speaks ${HUB_PROTOCOL_VERSION})`,
        });
      }
      if (
        this.#token !== undefined &&
        (typeof msg.token !== "string" || !tokensEqual(msg.token, this.#token))
      ) {
        throw new HandshakeError({
          code: "unauthorized",
          message: typeof msg.token === "string"
            ? "wrong hub token (DYN_HUB_TOKEN must be the hub's token)"
            : "this hub needs a token: set DYN_HUB_TOKEN (or hubToken) to the hub's token",
        });
      }
      const peer: Peer = {
        id: this.#nextPeer++,
        conn,
        name: typeof msg.name === "string" ? msg.name : "",
        lastSeen: Date.now(),
        closed: false,
        leases: new Set(),
        watches: new Map(),
        subs: new Map(),
        esubs: new Map(),
      };
      void this.#send(peer, { ev: "welcome", v: HUB_PROTOCOL_VERSION, ping_ms: this.#pingMs });
      return peer;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Drops clients that stopped pinging (hung, or the link is gone without a reset). */
  #reap(): void {
    const now = Date.now();
    // A late tick means the hub's process was blocked and pings may sit unread: start over.
    if (now - this.#lastReap > this.#pingMs * 2) {
      for (const peer of this.#peers) peer.lastSeen = now;
    }
    this.#lastReap = now;
    const limit = now - this.#pingMs * 4;
    for (const peer of [...this.#peers]) {
      if (peer.lastSeen < limit) this.#drop(peer, "client stopped pinging");
    }
  }

  /**
   * Sends to a peer. A write that fails, at once or later, drops the peer as a disconnect
   * does (leases revoked, routes and subscriptions gone): a peer we cannot write to
   * would otherwise keep its keys and keep being routed requests. The promise (when the
   * connection applies backpressure) never rejects.
   */
  #send(peer: Peer, msg: HubMessage, bytes?: Uint8Array): Promise<void> | void {
    if (peer.closed) return;
    let sent: Promise<void> | void;
    try {
      sent = peer.conn.send(encodeMessage(msg, bytes));
    } catch (err: unknown) {
      return this.#writeFailed(peer, err);
    }
    if (!sent) return;
    return sent.then(
      // The connection closes itself when a buffered write fails.
      () => peer.conn.closed ? this.#writeFailed(peer, "connection closed") : undefined,
      (err: unknown) => this.#writeFailed(peer, err),
    );
  }

  #writeFailed(peer: Peer, err: unknown): void {
    if (peer.closed) return;
    const error = err instanceof Error ? err.message : String(err);
    this.#logger.warn("hub dropped a client it could not write to", {
      peer: peer.id,
      name: peer.name,
      error,
    });
    this.#drop(peer, `write failed: ${error}`);
  }

  #reply(peer: Peer, id: unknown, fields: HubMessage = {}, bytes?: Uint8Array): void {
    if (typeof id !== "number") return;
    // #send handles a failed write itself (it drops the peer); this only keeps a bug in
    // that handling from going unseen.
    this.#send(peer, { ...fields, re: id }, bytes)?.catch((err: unknown) =>
      this.#logger.error("hub reply failed", { peer: peer.id, error: String(err) })
    );
  }

  #fail(peer: Peer, id: unknown, error: WireError): void {
    this.#reply(peer, id, { error });
  }

  #handle(peer: Peer, msg: HubMessage, bytes: Uint8Array): void {
    try {
      this.#dispatch(peer, msg, bytes);
    } catch (err) {
      this.#fail(peer, msg.id, {
        code: err instanceof InvalidArgumentError ? "invalid_argument" : "error",
        message: err instanceof Error ? err.message : String(err),
      });
    }
  }

  #dispatch(peer: Peer, msg: HubMessage, bytes: Uint8Array): void {
    const id = msg.id;
    switch (msg.op) {
      case "ping":
        return void this.#send(peer, { ev: "pong" });
      // discovery
      case "grant": {
        const ttl = msg.ttl;
        if (typeof ttl !== "number" || !(ttl > 0) || !Number.isFinite(ttl)) {
          throw new InvalidArgumentError(`lease TTL must be > 0 seconds, got ${ttl}`);
        }
        const lease = this.store.grant(ttl);
        peer.leases.add(lease.id);
        return this.#reply(peer, id, { lease: lease.id });
      }
      case "revoke": {
        const lease = str(msg, "lease");
        for (const p of this.#peers) p.leases.delete(lease);
        this.store.revoke(lease);
        return this.#reply(peer, id);
      }
      case "put": {
        const lease = msg.lease === undefined ? undefined : str(msg, "lease");
        this.store.put(str(msg, "key"), str(msg, "value"), lease);
        return this.#reply(peer, id);
      }
      case "get": {
        const value = this.store.get(str(msg, "key"));
        return this.#reply(peer, id, value === undefined ? {} : { value });
      }
      case "del":
        this.store.delete(str(msg, "key"));
        return this.#reply(peer, id);
      case "list":
        return this.#reply(peer, id, { kvs: this.store.list(str(msg, "prefix")) });
      case "watch":
        return this.#watch(peer, num(msg, "wid"), str(msg, "prefix"), id);
      case "unwatch": {
        const w = peer.watches.get(num(msg, "wid"));
        peer.watches.delete(num(msg, "wid"));
        w?.unwatch();
        w?.queue.close();
        return this.#reply(peer, id);
      }
      // request plane
      case "serve": {
        const sid = num(msg, "sid");
        const subject = str(msg, "subject");
        peer.subs.set(sid, subject);
        let route = this.#routes.get(subject);
        if (!route) this.#routes.set(subject, route = { targets: new Map(), next: 0 });
        route.targets.set(`${peer.id}:${sid}`, { peer, sid });
        return this.#reply(peer, id);
      }
      case "unserve":
        this.#unserve(peer, num(msg, "sid"));
        return this.#reply(peer, id);
      case "req":
        return this.#request(peer, id, str(msg, "subject"), bytes);
      case "ack":
      case "nack": {
        const rid = num(msg, "rid");
        const pending = this.#pending.get(rid);
        if (!pending || pending.worker !== peer) return;
        this.#pending.delete(rid);
        if (msg.op === "ack") return this.#reply(pending.from, pending.id);
        return this.#fail(pending.from, pending.id, {
          code: "no_responders",
          message: `nobody serves ${pending.subject}`,
        });
      }
      // objects
      case "oput":
        void this.objects.put(str(msg, "name"), bytes);
        return this.#reply(peer, id);
      case "oget": {
        const name = str(msg, "name");
        // MemoryObjectStore answers at once; its promise only wraps the Map.
        void this.objects.get(name).then((blob) =>
          this.#reply(peer, id, { found: blob !== undefined }, blob)
        );
        return;
      }
      case "ohas":
        void this.objects.has(str(msg, "name")).then((found) => this.#reply(peer, id, { found }));
        return;
      // events
      case "esub": {
        const esid = num(msg, "esid");
        const pattern = str(msg, "subject");
        peer.esubs.set(esid, pattern);
        this.#esubs.add({ peer, esid, pattern });
        return this.#reply(peer, id);
      }
      case "eunsub": {
        const esid = num(msg, "esid");
        peer.esubs.delete(esid);
        for (const s of this.#esubs) if (s.peer === peer && s.esid === esid) this.#esubs.delete(s);
        return this.#reply(peer, id);
      }
      case "pub": {
        const subject = str(msg, "subject");
        for (const s of this.#esubs) {
          if (subjectMatches(s.pattern, subject)) {
            this.#send(s.peer, { ev: "event", esid: s.esid, subject }, bytes)?.catch((err) =>
              this.#logger.error("hub event delivery failed", { error: String(err) })
            );
          }
        }
        return this.#reply(peer, id);
      }
      default:
        throw new InvalidArgumentError(`unknown hub operation ${JSON.stringify(msg.op)}`);
    }
  }

  #watch(peer: Peer, wid: number, prefix: string, id: unknown): void {
    const queue = new AsyncQueue<WatchEvent>();
    const unwatch = this.store.watch(prefix, queue);
    peer.watches.set(wid, { queue, unwatch });
    this.#reply(peer, id);
    // One pump per watch, so a watcher that reads slowly holds back only its own events.
    void (async () => {
      for await (const event of queue) {
        if (peer.closed) break;
        await this.#send(peer, { ev: "watch", wid, event });
      }
    })().catch(() => {}).finally(() => unwatch());
  }

  #request(peer: Peer, id: unknown, subject: string, bytes: Uint8Array): void {
    const route = this.#routes.get(subject);
    const targets = route ? [...route.targets.values()] : [];
    if (!route || targets.length === 0) {
      return this.#fail(peer, id, { code: "no_responders", message: `nobody serves ${subject}` });
    }
    const target = targets[route.next++ % targets.length]!;
    if (typeof id !== "number") return;
    const rid = this.#nextRid++;
    this.#pending.set(rid, { from: peer, id, worker: target.peer, subject });
    // A failed write drops the worker, which fails this request back to its caller.
    this.#send(target.peer, { ev: "msg", sid: target.sid, rid }, bytes)?.catch((err) =>
      this.#logger.error("hub request forwarding failed", { error: String(err) })
    );
  }

  #unserve(peer: Peer, sid: number): void {
    const subject = peer.subs.get(sid);
    if (subject === undefined) return;
    peer.subs.delete(sid);
    const route = this.#routes.get(subject);
    route?.targets.delete(`${peer.id}:${sid}`);
    if (route?.targets.size === 0) this.#routes.delete(subject);
  }

  #drop(peer: Peer, reason: string): void {
    if (peer.closed) return;
    peer.closed = true;
    this.#peers.delete(peer);
    peer.conn.close();
    // The process is gone: its keys go with it at once, and nobody routes to it any more.
    for (const lease of peer.leases) this.store.revoke(lease);
    peer.leases.clear();
    for (const { queue, unwatch } of peer.watches.values()) {
      unwatch();
      queue.close();
    }
    peer.watches.clear();
    for (const sid of [...peer.subs.keys()]) this.#unserve(peer, sid);
    for (const s of this.#esubs) if (s.peer === peer) this.#esubs.delete(s);
    for (const [rid, pending] of this.#pending) {
      if (pending.from === peer) this.#pending.delete(rid);
      else if (pending.worker === peer) {
        this.#pending.delete(rid);
        this.#fail(pending.from, pending.id, {
          code: "no_responders",
          message: `the process serving ${pending.subject} went away`,
        });
      }
    }
    this.#logger.debug("hub client left", { peer: peer.id, name: peer.name, reason });
  }
}

function str(msg: HubMessage, field: string): string {
  const v = msg[field];
  if (typeof v !== "string") {
    throw new InvalidArgumentError(`hub "${msg.op}" needs a string ${field}, got ${typeof v}`);
  }
  return v;
}

function num(msg: HubMessage, field: string): number {
  const v = msg[field];
  if (typeof v !== "number") {
    throw new InvalidArgumentError(`hub "${msg.op}" needs a numeric ${field}, got ${typeof v}`);
  }
  return v;
}
