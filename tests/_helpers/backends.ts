// The backends the contract suite runs against: the embedded default (memory + local),
// the hub (a HubServer in the test process, runtimes connected over loopback TCP), memory
// discovery with the TCP request plane, and etcd + NATS (requests on the NATS plane or on
// the TCP plane) on real servers started for the test.

import { DistributedRuntime, type DistributedRuntimeOptions, EmbeddedCluster } from "../../mod.ts";
import { HubServer } from "../../runtime/hub/mod.ts";
import { haveServers, type Servers, startServers } from "./servers.ts";

/** A way to build runtimes that see each other. */
export interface Backend {
  readonly name: string;
  /** Set when the backend runs on real servers. */
  readonly servers?: Servers;
  /** A new runtime ("a new process") on this backend. */
  runtime(options?: Partial<DistributedRuntimeOptions>): Promise<DistributedRuntime>;
  /** Shuts down every runtime built here, then the servers. */
  close(): Promise<void>;
}

/** Names and availability of the backends, for `Deno.test({ ignore })`. */
export const BACKENDS: { name: string; available: boolean; open: () => Promise<Backend> }[] = [
  { name: "embedded (memory + local)", available: true, open: openEmbedded },
  { name: "hub", available: true, open: openHub },
  { name: "memory + TCP", available: true, open: openMemoryTcp },
  { name: "etcd + NATS", available: haveServers(), open: openReal },
  { name: "etcd + TCP (events on NATS)", available: haveServers(), open: openRealTcp },
];

function tracker(
  name: string,
  make: (o: Partial<DistributedRuntimeOptions>) => Promise<DistributedRuntime>,
  servers?: Servers,
  stop: () => Promise<void> = async () => await servers?.stop(),
): Backend {
  const runtimes = new Set<DistributedRuntime>();
  return {
    name,
    servers,
    async runtime(options = {}) {
      const rt = await make(options);
      runtimes.add(rt);
      return rt;
    },
    async close() {
      await Promise.allSettled([...runtimes].map((rt) => rt.shutdown()));
      await stop();
    },
  };
}

/** The embedded default: runtimes share one in-process cluster. */
export function openEmbedded(): Promise<Backend> {
  const cluster = new EmbeddedCluster();
  return Promise.resolve(
    tracker("embedded", (o) =>
      DistributedRuntime.connect({
        discovery: "memory",
        requestPlane: "local",
        embedded: cluster,
        ...o,
      })),
  );
}

/** In-process discovery, requests over the TCP plane on loopback. */
export function openMemoryTcp(): Promise<Backend> {
  const cluster = new EmbeddedCluster();
  return Promise.resolve(
    tracker("memory + TCP", (o) =>
      DistributedRuntime.connect({
        discovery: "memory",
        requestPlane: "tcp",
        embedded: cluster,
        ...o,
      })),
  );
}

/** A hub on a free loopback port; every runtime connects to it over TCP. */
export async function openHub(): Promise<Backend> {
  const hub = await HubServer.start({ token: "contract-test" });
  return tracker(
    "hub",
    (o) =>
      DistributedRuntime.connect({
        discovery: "hub",
        requestPlane: "hub",
        hubAddress: hub.address,
        hubToken: "contract-test",
        ...o,
      }),
    undefined,
    () => hub.close(),
  );
}

/** Real etcd + NATS, started on free loopback ports; requests over the NATS plane. */
export async function openReal(): Promise<Backend> {
  const servers = await startServers();
  return tracker("etcd + NATS", (o) =>
    DistributedRuntime.connect({
      ...servers.runtimeOptions,
      requestPlane: "nats",
      ...o,
    }), servers);
}

/** Real etcd + NATS, started on free loopback ports; requests over the TCP plane. */
export async function openRealTcp(): Promise<Backend> {
  const servers = await startServers();
  return tracker("etcd + TCP", (o) =>
    DistributedRuntime.connect({
      ...servers.runtimeOptions,
      requestPlane: "tcp",
      ...o,
    }), servers);
}

/** Resolves `p`, or rejects after `ms` with a message saying what was awaited. */
export function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    p,
    new Promise<never>((
      _,
      reject,
    ) => (timer = setTimeout(
      () => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)),
      ms,
    ))),
  ]).finally(() => clearTimeout(timer));
}

/** Polls `check` until it returns true, or fails after `ms` naming what was expected. */
export async function eventually(
  check: () => boolean | Promise<boolean>,
  ms: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
