// Connecting a runtime's backends: the discovery store, the request plane and the hub
// connection they may share, with TLS files read and checked first.

import type { Discovery } from "./discovery/types.ts";
import { MemoryDiscovery } from "./discovery/memory.ts";
import { EtcdDiscovery } from "./discovery/etcd.ts";
import { InvalidArgumentError } from "./errors.ts";
import type { EventPlane } from "./events/types.ts";
import { HubConnection } from "./hub/connection.ts";
import { HubDiscovery } from "./hub/discovery.ts";
import type { HubEventPlane } from "./hub/events.ts";
import { HubRequestPlane } from "./hub/request_plane.ts";
import type { DistributedRuntimeOptions, EmbeddedCluster, TlsFiles } from "./runtime_options.ts";
import type { RequestPlane } from "./transport/types.ts";
import { LocalRequestPlane } from "./transport/local.ts";
import { NatsRequestPlane } from "./transport/nats.ts";
import { TcpRequestPlane } from "./transport/tcp.ts";

/** `<PREFIX>_TLS_CA`, `_CERT`, `_KEY` as TlsFiles, or undefined when none is set. */
export function tlsFromEnv(
  env: Record<string, string | undefined>,
  prefix: string,
): TlsFiles | undefined {
  const files: TlsFiles = {};
  if (env[`${prefix}_TLS_CA`]) files.caFile = env[`${prefix}_TLS_CA`];
  if (env[`${prefix}_TLS_CERT`]) files.certFile = env[`${prefix}_TLS_CERT`];
  if (env[`${prefix}_TLS_KEY`]) files.keyFile = env[`${prefix}_TLS_KEY`];
  if (prefix === "ETCD" && env.ETCD_TLS_SERVER_NAME) files.serverName = env.ETCD_TLS_SERVER_NAME;
  return Object.keys(files).length > 0 ? files : undefined;
}

/** Reads the PEM files of `tls`; a missing or unreadable file names the option and path. */
export async function readTls(
  tls: TlsFiles,
  what: string,
): Promise<{ ca?: Uint8Array; cert?: Uint8Array; key?: Uint8Array }> {
  if ((tls.certFile === undefined) !== (tls.keyFile === undefined)) {
    throw new InvalidArgumentError(
      `${what} TLS needs both a client certificate and its key, got only the ${
        tls.certFile === undefined ? "key" : "certificate"
      }`,
    );
  }
  const read = async (path: string | undefined, role: string) => {
    if (path === undefined) return undefined;
    try {
      return await Deno.readFile(path);
    } catch (err) {
      throw new InvalidArgumentError(
        `cannot read the ${what} TLS ${role} file "${path}": ${(err as Error).message}`,
      );
    }
  };
  const [ca, cert, key] = await Promise.all([
    read(tls.caFile, "CA"),
    read(tls.certFile, "certificate"),
    read(tls.keyFile, "key"),
  ]);
  return { ca, cert, key };
}

/** Connects to the hub when a "hub" backend is asked for. */
export async function connectHub(
  options: DistributedRuntimeOptions,
): Promise<HubConnection | undefined> {
  if (options.discovery !== "hub" && options.requestPlane !== "hub") return undefined;
  if (!options.hubAddress) {
    throw new InvalidArgumentError(
      'the "hub" backends need hubAddress (host:port of `dynamo hub`; DYN_HUB in the environment)',
    );
  }
  return await HubConnection.connect(options.hubAddress, {
    token: options.hubToken,
    timeoutMs: options.connectTimeoutMs,
    logger: options.logger,
  });
}

export async function makeDiscovery(
  options: DistributedRuntimeOptions,
  embedded: EmbeddedCluster,
  hub: HubConnection | undefined,
): Promise<Discovery> {
  const d = options.discovery ?? "memory";
  if (typeof d === "object") return d;
  if (d === "memory") return new MemoryDiscovery(embedded.store);
  if (d === "hub" && hub) return new HubDiscovery(hub);
  if (d === "etcd") {
    const endpoints = options.etcdEndpoints ?? ["http://127.0.0.1:2379"];
    const tls = options.etcdTls ? await readTls(options.etcdTls, "etcd") : undefined;
    return new EtcdDiscovery({
      endpoints: (Array.isArray(endpoints) ? endpoints : [endpoints]).map((
        e,
      ) => (/^https?:\/\//.test(e) ? e : `${tls ? "https" : "http"}://${e}`)),
      auth: options.etcdAuth,
      tls: tls && {
        rootCertificate: tls.ca,
        privateKey: tls.key,
        certChain: tls.cert,
        serverName: options.etcdTls?.serverName,
      },
      callTimeoutMs: options.connectTimeoutMs,
    });
  }
  throw new InvalidArgumentError(
    `discovery must be "etcd", "memory" or "hub", got ${JSON.stringify(d)}`,
  );
}

export async function makePlane(
  options: DistributedRuntimeOptions,
  embedded: EmbeddedCluster,
  hub: HubConnection | undefined,
): Promise<RequestPlane> {
  const p = options.requestPlane ?? "local";
  if (typeof p === "object") return p;
  if (p === "local") return new LocalRequestPlane(embedded.requests);
  if (p === "hub" && hub) {
    return new HubRequestPlane(hub, { tcp: { hostname: options.tcpHost ?? "127.0.0.1" } });
  }
  const nats = async () => {
    const tls = options.natsTls ? await readTls(options.natsTls, "NATS") : undefined;
    return await NatsRequestPlane.connect({
      servers: options.natsServer ?? "nats://127.0.0.1:4222",
      ...options.natsAuth,
      ...(tls && { tls: pemStrings(tls) }),
      tcp: { hostname: options.tcpHost ?? "127.0.0.1" },
    });
  };
  if (p === "nats") return await nats();
  if (p === "tcp") {
    // With etcd, events and objects go over NATS as on the NATS plane; requests do not.
    return new TcpRequestPlane({
      hostname: options.tcpHost ?? "127.0.0.1",
      connectTimeoutMs: options.connectTimeoutMs,
      nats: options.discovery === "etcd" ? await nats() : undefined,
      logger: options.logger,
    });
  }
  throw new InvalidArgumentError(
    `requestPlane must be "tcp", "nats", "local" or "hub", got ${JSON.stringify(p)}`,
  );
}

/** nats.js's TLS options take PEM text. */
export function pemStrings(t: { ca?: Uint8Array; cert?: Uint8Array; key?: Uint8Array }) {
  const d = new TextDecoder();
  const out: { ca?: string; cert?: string; key?: string } = {};
  if (t.ca) out.ca = d.decode(t.ca);
  if (t.cert) out.cert = d.decode(t.cert);
  if (t.key) out.key = d.decode(t.key);
  return out;
}

/** The hub's event plane as an EventPlane (its unsubscribe() returns nothing). */
export function hubEventPlane(p: HubEventPlane): EventPlane {
  return {
    kind: p.kind,
    publish: (subject, payload) => p.publish(subject, payload),
    subscribe(subject, options) {
      const sub = p.subscribe(subject, options);
      return {
        ready: sub.ready,
        unsubscribe: () => Promise.resolve(sub.unsubscribe()),
        [Symbol.asyncIterator]: () => sub[Symbol.asyncIterator](),
      };
    },
    close: () => p.close(),
  };
}
