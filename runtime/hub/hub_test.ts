import assert from "node:assert/strict";
import { DistributedRuntime } from "../distributed_runtime.ts";
import { DynamoError, InvalidArgumentError, NoInstancesError } from "../errors.ts";
import { encodeRequest } from "../transport/mod.ts";
import { TcpFrameConn } from "../transport/tcp_stream.ts";
import type { WatchEvent } from "../discovery/mod.ts";
import type { EventMessage } from "../events/mod.ts";
import {
  HubAuthError,
  HubConnection,
  HubConnectionError,
  HubDiscovery,
  HubEventPlane,
  HubObjectStore,
  HubRequestPlane,
  HubServer,
  parseHubAddress,
} from "./mod.ts";
import { decodeMessage, encodeMessage } from "./protocol.ts";

/** Polls `check` until true, or fails after `ms` naming what was expected. */
async function eventually(check: () => boolean | Promise<boolean>, ms: number, what: string) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Collects watch events in the background. */
function record(d: HubDiscovery, prefix: string) {
  const events: WatchEvent[] = [];
  const abort = new AbortController();
  let error: unknown;
  const done = (async () => {
    try {
      for await (const ev of d.watch(prefix, { signal: abort.signal })) events.push(ev);
    } catch (err) {
      error = err;
    }
  })();
  return {
    events,
    get error() {
      return error;
    },
    done,
    stop: async () => (abort.abort(), await done),
  };
}

Deno.test("HubServer refuses a wrong or missing token with a clear HubAuthError", async () => {
  const hub = await HubServer.start({ token: "s3cret" });
  try {
    await assert.rejects(
      HubConnection.connect(hub.address, { token: "wrong" }),
      (err: unknown) =>
        err instanceof HubAuthError && /wrong hub token/.test(err.message) &&
        err.message.includes(hub.address),
    );
    await assert.rejects(
      HubConnection.connect(hub.address),
      (err: unknown) => err instanceof HubAuthError && /DYN_HUB_TOKEN/.test(err.message),
    );
    await assert.rejects(
      DistributedRuntime.connect({
        discovery: "hub",
        requestPlane: "hub",
        hubAddress: hub.address,
        hubToken: "nope",
      }),
      HubAuthError,
    );
    const ok = await HubConnection.connect(hub.address, { token: "s3cret" });
    assert.equal(ok.connected, true);
    await ok.close();
    assert.deepEqual(hub.env(), { DYN_HUB: hub.address, DYN_HUB_TOKEN: "s3cret" });
  } finally {
    await hub.close();
  }
});

Deno.test("HubConnection says which hub it cannot reach, and checks the address", async () => {
  const hub = await HubServer.start();
  const address = hub.address;
  await hub.close();
  await assert.rejects(
    HubConnection.connect(address, { timeoutMs: 2000 }),
    (err: unknown) =>
      err instanceof HubConnectionError &&
      err.message.includes(`cannot reach the hub at ${address}`),
  );
  await assert.rejects(HubConnection.connect("localhost"), InvalidArgumentError);
  assert.deepEqual(parseHubAddress("[::1]:4300"), { hostname: "::1", port: 4300 });
  assert.throws(() => parseHubAddress("host:0"), InvalidArgumentError);
});

Deno.test("a client whose connection drops loses its keys at once; others see the deletes", async () => {
  const hub = await HubServer.start();
  const dying = await HubDiscovery.connect(hub.address);
  const observer = await HubDiscovery.connect(hub.address);
  try {
    const lease = await dying.grantLease(30);
    await dying.put("v1/instances/ns/c/e/" + lease.id, "{}", { lease });
    await dying.put("v1/other", "kept"); // no lease: outlives its writer
    const w = record(observer, "v1/instances/");
    await eventually(() => w.events.some((e) => e.type === "synced"), 2000, "the watch syncs");
    assert.equal(hub.store.leaseCount, 1);
    const before = Date.now();
    await dying.hub.close(); // the socket closes, as when the process is killed
    await eventually(
      () => w.events.some((e) => e.type === "delete"),
      1000,
      "the dead client's key is deleted",
    );
    assert.ok(Date.now() - before < 1000);
    assert.equal(hub.store.leaseCount, 0);
    assert.equal(await observer.get("v1/other"), "kept");
    await w.stop();
  } finally {
    await dying.close();
    await observer.close();
    await hub.close();
  }
});

Deno.test("when the hub goes away, leases are lost and watches end with HubConnectionError", async () => {
  const hub = await HubServer.start();
  const d = await HubDiscovery.connect(hub.address, { timeoutMs: 1000 });
  try {
    const lease = await d.grantLease(10);
    const w = record(d, "k/");
    await eventually(() => w.events.some((e) => e.type === "synced"), 2000, "the watch syncs");
    await hub.close();
    await eventually(() => lease.lost.aborted, 1000, "the lease is lost");
    assert.ok(lease.lost.reason instanceof HubConnectionError);
    await w.done;
    assert.ok(w.error instanceof HubConnectionError, `watch ended with ${w.error}`);
    await assert.rejects(d.get("k/x"), /cannot reach the hub/);
    await lease.revoke(); // nothing left to revoke: no error
  } finally {
    await d.close();
    await hub.close();
  }
});

Deno.test("a runtime re-registers and serves again after the hub restarts on its port", async () => {
  let hub = await HubServer.start();
  const { port } = parseHubAddress(hub.address);
  const opts = {
    discovery: "hub",
    requestPlane: "hub",
    hubAddress: hub.address,
    connectTimeoutMs: 1000,
  } as const;
  const worker = await DistributedRuntime.connect(opts);
  const endpoint = worker.namespace("ns").component("c").endpoint("e");
  endpoint.serveEndpoint(async function* (req: { n: number }) {
    yield req.n + 1;
  }).catch(() => {});
  let caller: DistributedRuntime | undefined;
  try {
    await eventually(() => hub.store.list("v1/instances/").length === 1, 2000, "it registers");
    await hub.close();
    hub = await HubServer.start({ port });
    await eventually(
      () => hub.store.list("v1/instances/").length === 1,
      5000,
      "the worker re-registers on the new hub",
    );
    caller = await DistributedRuntime.connect(opts);
    const client = await caller.namespace("ns").component("c").endpoint("e").client();
    await client.waitForInstances({ timeoutMs: 2000 });
    const items = [];
    for await (const x of await client.generate({ n: 41 })) items.push(x);
    assert.deepEqual(items, [42]);
  } finally {
    await caller?.shutdown();
    await worker.shutdown();
    await hub.close();
  }
});

Deno.test("HubEventPlane subscriptions come back after the hub restarts on its port", async () => {
  let hub = await HubServer.start();
  const { port } = parseHubAddress(hub.address);
  const sub = await HubEventPlane.connect(hub.address, { timeoutMs: 1000 });
  const pub = await HubEventPlane.connect(hub.address, { timeoutMs: 1000 });
  try {
    const events = sub.subscribe("a.>");
    await events.ready;
    await hub.close();
    hub = await HubServer.start({ port });
    await eventually(() => hub.connectionCount === 2, 5000, "both clients reconnect on their own");
    // A call answered on the same connection: the re-subscription before it is in place.
    await sub.hub.call({ op: "get", key: "x" });
    await pub.publish("a.b", new Uint8Array([7]));
    for await (const e of events) {
      assert.deepEqual([e.subject, [...e.payload]], ["a.b", [7]]);
      break;
    }
  } finally {
    await sub.close();
    await pub.close();
    await hub.close();
  }
});

Deno.test("HubRequestPlane: nobody serving fails fast with NoInstancesError; requests reach a server", async () => {
  const hub = await HubServer.start();
  const worker = await HubRequestPlane.connect(hub.address);
  const caller = await HubRequestPlane.connect(hub.address);
  try {
    const payload = encodeRequest({
      id: "r1",
      request_type: "single_in",
      response_type: "many_out",
      connection_info: { tcp: { address: "127.0.0.1:1", stream_id: "s" } },
    }, { hello: "world" });
    const started = Date.now();
    await assert.rejects(caller.request("nobody.here", payload), NoInstancesError);
    assert.ok(Date.now() - started < 500);
    const got = Promise.withResolvers<Uint8Array>();
    const sub = await worker.serve("ns.ep-1", (p) => got.resolve(p as Uint8Array));
    await caller.request("ns.ep-1", payload);
    assert.deepEqual(await got.promise, payload);
    await sub.unsubscribe();
    await assert.rejects(caller.request("ns.ep-1", payload), NoInstancesError);
  } finally {
    await worker.close();
    await caller.close();
    await hub.close();
  }
});

Deno.test("HubObjectStore stores a 3 MiB blob and returns copies", async () => {
  const hub = await HubServer.start();
  const conn = await HubConnection.connect(hub.address);
  try {
    const store = new HubObjectStore(conn);
    const data = crypto.getRandomValues(new Uint8Array(65536));
    const big = new Uint8Array(3 * 1024 * 1024);
    for (let off = 0; off < big.length; off += data.length) big.set(data, off);
    assert.equal(await store.has("sha256/abc:tokenizer.json"), false);
    assert.equal(await store.get("sha256/abc:tokenizer.json"), undefined);
    await store.put("sha256/abc:tokenizer.json", big);
    assert.equal(await store.has("sha256/abc:tokenizer.json"), true);
    assert.deepEqual(await store.get("sha256/abc:tokenizer.json"), big);
  } finally {
    await conn.close();
    await hub.close();
  }
});

Deno.test("HubEventPlane delivers by NATS-style wildcards across connections", async () => {
  const hub = await HubServer.start();
  const a = await HubEventPlane.connect(hub.address);
  const b = await HubEventPlane.connect(hub.address);
  try {
    const all = b.subscribe("ns.kv.>");
    const one = b.subscribe("ns.*.w1");
    const gone = b.subscribe("ns.kv.w1");
    await Promise.all([all.ready, one.ready, gone.ready]);
    await gone.unsubscribe();
    const enc = new TextEncoder();
    await a.publish("ns.kv.w1", enc.encode("1"));
    await a.publish("ns.metrics.w1", enc.encode("2"));
    await a.publish("ns.kv.w2", enc.encode("3"));
    const take = async (sub: AsyncIterable<EventMessage>, n: number) => {
      const out: string[] = [];
      for await (const e of sub) {
        out.push(`${e.subject}=${new TextDecoder().decode(e.payload)}`);
        if (out.length === n) break;
      }
      return out;
    };
    assert.deepEqual(await take(all, 2), ["ns.kv.w1=1", "ns.kv.w2=3"]);
    assert.deepEqual(await take(one, 2), ["ns.kv.w1=1", "ns.metrics.w1=2"]);
    assert.deepEqual(await take(gone, 1), [], "an ended subscription yields nothing");
    await assert.rejects(a.publish("ns.*", enc.encode("x")), InvalidArgumentError);
  } finally {
    await a.close();
    await b.close();
    await hub.close();
  }
});

Deno.test("runtimes on the hub share its event plane", async () => {
  const hub = await HubServer.start();
  const opts = { discovery: "hub", requestPlane: "hub", hubAddress: hub.address } as const;
  const a = await DistributedRuntime.connect(opts);
  const b = await DistributedRuntime.connect(opts);
  try {
    assert.equal(b.events.kind, "hub");
    const sub = b.events.subscribe("ns_c.events.>");
    await sub.ready;
    await a.events.publish("ns_c.events.kv", new Uint8Array([1, 2]));
    for await (const e of sub) {
      assert.deepEqual([e.subject, [...e.payload]], ["ns_c.events.kv", [1, 2]]);
      break;
    }
  } finally {
    await a.shutdown();
    await b.shutdown();
    await hub.close();
  }
  assert.equal(hub.connectionCount, 0);
});

Deno.test("HubServer drops a client that stops pinging, and rejects garbage", async () => {
  const hub = await HubServer.start({ pingMs: 50 });
  try {
    const { hostname, port } = parseHubAddress(hub.address);
    const silent = new TcpFrameConn(await Deno.connect({ hostname, port }));
    await silent.send(encodeMessage({ op: "hello", v: 1 }));
    const welcome = await silent.receive();
    assert.equal(decodeMessage(welcome!).msg.ev, "welcome");
    assert.equal(hub.connectionCount, 1);
    await eventually(() => hub.connectionCount === 0, 2000, "the silent client is dropped");
    assert.equal(await silent.receive(), null);
    silent.close();

    const rude = new TcpFrameConn(await Deno.connect({ hostname, port }));
    await rude.send(encodeMessage({ op: "hello", v: 99 }));
    const bye = decodeMessage((await rude.receive())!).msg;
    assert.equal(bye.ev, "bye");
    assert.match(String(bye.error?.message), /version 99/);
    rude.close();
  } finally {
    await hub.close();
  }
});

Deno.test("DistributedRuntime.fromEnv: DYN_HUB picks the hub; ETCD_ENDPOINTS/NATS_SERVER win over it", async () => {
  const hub = await HubServer.start({ token: "t" });
  try {
    const rt = await DistributedRuntime.fromEnv({ env: { ...hub.env(), DYN_LOG: "error" } });
    assert.equal(rt.discovery.kind, "hub");
    assert.equal(rt.plane.kind, "hub");
    assert.equal(rt.objects.kind, "hub");
    assert.equal(hub.store.leaseCount, 1);
    await rt.shutdown();
    assert.equal(hub.store.leaseCount, 0);
    await eventually(() => hub.connectionCount === 0, 1000, "the runtime disconnects");
    // NATS on a closed port: the error names NATS, so the hub was not used.
    await assert.rejects(
      DistributedRuntime.fromEnv({
        env: { ...hub.env(), NATS_SERVER: "nats://127.0.0.1:1", DYN_LOG: "error" },
        connectTimeoutMs: 500,
      }),
      (err: unknown) => err instanceof DynamoError && /NATS/.test(err.message),
    );
    assert.equal(hub.connectionCount, 0);
  } finally {
    await hub.close();
  }
});

Deno.test("HubServer drops a client whose reply fails to send, as if it disconnected", async () => {
  // Pings too rare to matter: only the failed write may drop the client.
  const hub = await HubServer.start({ pingMs: 60_000 });
  const send = TcpFrameConn.prototype.send;
  // The hub's replies carry "re"; one naming the poisoned key fails to send, as a write to
  // a broken socket does.
  TcpFrameConn.prototype.send = function (frame) {
    const { msg } = decodeMessage(frame);
    if (msg.re !== undefined && msg.value === "poison") {
      return Promise.reject(new Error("broken pipe"));
    }
    return send.call(this, frame);
  };
  const { hostname, port } = parseHubAddress(hub.address);
  const conn = new TcpFrameConn(await Deno.connect({ hostname, port }));
  try {
    await conn.send(encodeMessage({ op: "hello", v: 1 }));
    assert.equal(decodeMessage((await conn.receive())!).msg.ev, "welcome");
    await conn.send(encodeMessage({ op: "grant", id: 1, ttl: 60 }));
    const lease = decodeMessage((await conn.receive())!).msg.lease;
    await conn.send(encodeMessage({ op: "put", id: 2, key: "k", value: "poison", lease }));
    assert.equal(decodeMessage((await conn.receive())!).msg.re, 2);
    assert.equal(hub.connectionCount, 1);
    await conn.send(encodeMessage({ op: "get", id: 3, key: "k" }));
    // Dropped like a disconnect: the connection closes and its lease's keys are gone.
    await eventually(() => hub.connectionCount === 0, 2000, "the hub drops the client");
    assert.equal(await conn.receive(), null);
    assert.equal(hub.store.get("k"), undefined);
  } finally {
    TcpFrameConn.prototype.send = send;
    conn.close();
    await hub.close();
  }
});
