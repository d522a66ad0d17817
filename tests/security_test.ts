// Authentication and TLS against real servers started with them on: NATS user/password,
// NATS token, etcd users, TLS to both (trusting a test CA through the environment), and
// secrets kept out of errors and out of a worker's debug logs.

import assert from "node:assert/strict";
import { DistributedRuntime } from "../mod.ts";
import { haveOpenssl, makeTestCerts } from "./_helpers/certs.ts";
import { haveServers, startEtcd, startNats, testRequestPlane } from "./_helpers/servers.ts";

const WORKER = new URL("./_helpers/worker_proc.ts", import.meta.url).pathname;
const NATS_PASS = "n4ts-s3cret-pw";
const NATS_TOKEN = "n4ts-t0ken-s3cret";
const ETCD_PASS = "etcd-r00t-s3cret";
const WRONG = "wr0ng-guess-pw";

type Env = Record<string, string>;

/**
 * Two runtimes from `env` (as two processes would build them): one serves an endpoint,
 * the other discovers it and calls it. Fails unless the reply comes back whole.
 */
async function roundTrip(env: Env): Promise<void> {
  const worker = await DistributedRuntime.fromEnv({ env: { ...env, DYN_LOG: "error" } });
  let caller: DistributedRuntime | undefined;
  try {
    const serving = worker.namespace("sec").component("worker").endpoint("generate")
      .serveEndpoint(async function* (req: { text: string }) {
        for (const w of req.text.split(" ")) yield w;
      });
    // Registration failing (e.g. etcd refusing the put) must fail the test, not hang it.
    const failed = serving.then(() => {
      throw new Error("the endpoint stopped serving before the call");
    });
    caller = await DistributedRuntime.fromEnv({ env: { ...env, DYN_LOG: "error" } });
    const client = await caller.namespace("sec").component("worker").endpoint("generate")
      .client();
    await Promise.race([client.waitForInstances({ timeoutMs: 10_000 }), failed]);
    const got: string[] = [];
    for await (const w of await client.generate({ text: "over the secured planes" })) {
      got.push(w as string);
    }
    assert.deepEqual(got, ["over", "the", "secured", "planes"]);
    failed.catch(() => {});
  } finally {
    await caller?.shutdown();
    await worker.shutdown();
  }
}

/** Asserts that building a runtime from `env` fails with `pattern`, and names no secret. */
async function refused(env: Env, pattern: RegExp, secrets: string[]): Promise<Error> {
  let error: Error | undefined;
  try {
    const rt = await DistributedRuntime.fromEnv({ env: { ...env, DYN_LOG: "error" } });
    await rt.shutdown();
  } catch (err) {
    error = err as Error;
  }
  assert.ok(error, `expected the connection to be refused (${pattern})`);
  assert.match(error.message, pattern);
  assertNoSecrets(describe(error), secrets);
  return error;
}

/** The message, stack and causes of an error, as a crash report would print them. */
function describe(err: unknown): string {
  const parts: string[] = [];
  for (let e = err, i = 0; e !== undefined && i < 10; i++) {
    parts.push(e instanceof Error ? `${e.stack ?? e.message}` : String(e));
    e = e instanceof Error ? e.cause : undefined;
  }
  return parts.join("\ncaused by: ");
}

function assertNoSecrets(text: string, secrets: string[]): void {
  for (const s of secrets) {
    assert.ok(!text.includes(s), `a secret (${s.slice(0, 4)}...) appears in:\n${text}`);
  }
}

Deno.test({
  name: "NATS user/password: the right ones serve and call; wrong or missing ones are refused",
  ignore: !haveServers(),
  async fn(t) {
    const [etcd, nats] = await Promise.all([
      startEtcd(),
      startNats({ user: { user: "dynamo", pass: NATS_PASS } }),
    ]);
    const base = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    try {
      await t.step(
        "NATS_USER and NATS_PASSWORD from the environment are used",
        () => roundTrip({ ...base, NATS_USER: "dynamo", NATS_PASSWORD: NATS_PASS }),
      );
      await t.step("a wrong password is refused without echoing either password", async () => {
        await refused(
          { ...base, NATS_USER: "dynamo", NATS_PASSWORD: WRONG },
          /cannot connect to NATS.*authorization/i,
          [WRONG, NATS_PASS],
        );
      });
      await t.step("no credentials are refused", async () => {
        await refused(base, /cannot connect to NATS.*authorization/i, [NATS_PASS]);
      });
      await t.step("credentials written into the server URL are masked in the error", async () => {
        const [host] = nats.url.replace("nats://", "").split("/");
        await refused(
          { ...base, NATS_SERVER: `nats://dynamo:${WRONG}@${host}` },
          /cannot connect to NATS at nats:\/\/\*\*\*@/,
          [WRONG],
        );
      });
    } finally {
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name: "NATS token: the right one serves and calls; a wrong or missing one is refused",
  ignore: !haveServers(),
  async fn(t) {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats({ token: NATS_TOKEN })]);
    const base = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    try {
      await t.step(
        "NATS_TOKEN from the environment is used",
        () => roundTrip({ ...base, NATS_TOKEN }),
      );
      await t.step("a wrong token is refused without echoing either token", async () => {
        await refused(
          { ...base, NATS_TOKEN: WRONG },
          /cannot connect to NATS.*authorization/i,
          [WRONG, NATS_TOKEN],
        );
      });
      await t.step("no token is refused", async () => {
        await refused(base, /cannot connect to NATS.*authorization/i, [NATS_TOKEN]);
      });
    } finally {
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name: "etcd with auth enabled: the right user registers, discovers and calls; others are refused",
  ignore: !haveServers(),
  async fn(t) {
    const [etcd, nats] = await Promise.all([
      startEtcd({ rootPassword: ETCD_PASS }),
      startNats(),
    ]);
    const base = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    try {
      await t.step(
        "ETCD_USERNAME and ETCD_PASSWORD from the environment are used",
        () => roundTrip({ ...base, ETCD_USERNAME: "root", ETCD_PASSWORD: ETCD_PASS }),
      );
      await t.step("a wrong password is refused without echoing either password", async () => {
        await refused(
          { ...base, ETCD_USERNAME: "root", ETCD_PASSWORD: WRONG },
          /etcd.*authentication failed/i,
          [WRONG, ETCD_PASS],
        );
      });
      await t.step("without credentials nothing can be registered", async () => {
        // etcd 3.4 grants leases to anyone; the first key written is what it refuses.
        let rt: DistributedRuntime | undefined;
        try {
          rt = await DistributedRuntime.fromEnv({ env: { ...base, DYN_LOG: "error" } });
          await assert.rejects(
            rt.namespace("sec").component("worker").endpoint("generate")
              .serveEndpoint(async function* () {}),
            /user name is empty|permission denied|authentication/i,
          );
        } catch (err) {
          // ...or, on servers that check leases too, the connection itself.
          if (rt) throw err;
          assert.match((err as Error).message, /etcd/i);
        } finally {
          await rt?.shutdown();
        }
      });
    } finally {
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name: "TLS to NATS and etcd: trusting the test CA works end to end; not trusting it fails",
  ignore: !haveServers() || !haveOpenssl(),
  async fn(t) {
    const certs = await makeTestCerts();
    const tls = { certFile: certs.certFile, keyFile: certs.keyFile };
    const [etcd, nats] = await Promise.all([
      startEtcd({ tls: { ...tls, caFile: certs.caFile } }),
      startNats({ tls }),
    ]);
    const base = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    const trusted = { ...base, ETCD_TLS_CA: certs.caFile, NATS_TLS_CA: certs.caFile };
    try {
      assert.match(etcd.url, /^https:\/\//);
      await t.step(
        "with ETCD_TLS_CA and NATS_TLS_CA a call goes through",
        () => roundTrip(trusted),
      );
      await t.step(
        "etcd at an IP address needs ETCD_TLS_SERVER_NAME, and works with it",
        async () => {
          const byIp = { ...trusted, ETCD_ENDPOINTS: etcd.url.replace("localhost", "127.0.0.1") };
          await refused(byIp, /etcd over TLS needs a host name.*ETCD_TLS_SERVER_NAME/, []);
          await roundTrip({ ...byIp, ETCD_TLS_SERVER_NAME: "localhost" });
        },
      );
      await t.step("NATS without the CA (system roots) fails on the certificate", async () => {
        await refused(
          { ...base, ETCD_TLS_CA: certs.caFile },
          /cannot connect to NATS.*(certificate|issuer|self.signed)/i,
          [],
        );
      });
      await t.step("NATS trusting another CA fails on the certificate", async () => {
        await refused(
          { ...trusted, NATS_TLS_CA: certs.otherCaFile },
          /cannot connect to NATS.*(certificate|issuer|self.signed)/i,
          [],
        );
      });
      await t.step("etcd trusting another CA fails", async () => {
        await refused(
          { ...trusted, ETCD_TLS_CA: certs.otherCaFile },
          /etcd.*(certificate|issuer|self.signed)/i,
          [],
        );
      });
      await t.step("a CA file that does not exist is named in the error", async () => {
        await refused(
          { ...trusted, NATS_TLS_CA: `${certs.dir}/missing.pem` },
          /NATS TLS CA file ".*missing\.pem"/,
          [],
        );
      });
    } finally {
      await Promise.all([etcd.stop(), nats.stop()]);
      await certs.remove();
    }
  },
});

Deno.test({
  name: "TLS client certificates: NATS and etcd that verify clients take the runtime's " +
    "certificate and refuse a runtime without one",
  ignore: !haveServers() || !haveOpenssl(),
  async fn(t) {
    const certs = await makeTestCerts();
    // The server's pair is signed by the test CA and allows client authentication: the
    // runtime presents it as its client certificate.
    const pair = { certFile: certs.certFile, keyFile: certs.keyFile };
    const [etcd, nats] = await Promise.all([
      startEtcd({ tls: { ...pair, caFile: certs.caFile, verifyClients: true } }),
      startNats({ tls: { ...pair, verifyClientsCa: certs.caFile } }),
    ]);
    const trusting = {
      ETCD_ENDPOINTS: etcd.url,
      NATS_SERVER: nats.url,
      ETCD_TLS_CA: certs.caFile,
      NATS_TLS_CA: certs.caFile,
    };
    const withCerts = {
      ...trusting,
      ETCD_TLS_CERT: certs.certFile,
      ETCD_TLS_KEY: certs.keyFile,
      NATS_TLS_CERT: certs.certFile,
      NATS_TLS_KEY: certs.keyFile,
    };
    try {
      await t.step(
        "with <PLANE>_TLS_CERT and _KEY a call goes through",
        () => roundTrip(withCerts),
      );
      await t.step("NATS without a client certificate is refused", async () => {
        const { NATS_TLS_CERT: _c, NATS_TLS_KEY: _k, ...env } = withCerts;
        await refused(env, /cannot connect to NATS/i, []);
      });
      await t.step("etcd without a client certificate is refused", async () => {
        const { ETCD_TLS_CERT: _c, ETCD_TLS_KEY: _k, ...env } = withCerts;
        await refused(env, /etcd/i, []);
      });
      await t.step("a certificate without its key is refused before connecting", async () => {
        const { NATS_TLS_KEY: _k, ...env } = withCerts;
        await refused(env, /NATS TLS needs both a client certificate and its key/, []);
      });
    } finally {
      await Promise.all([etcd.stop(), nats.stop()]);
      await certs.remove();
    }
  },
});

/**
 * Runs the test worker with `env` (and DYN_LOG=debug) until it has registered and served
 * `call`, or exited; then SIGTERM (SIGKILL after 10 s). Returns what it printed.
 */
async function workerOutput(
  env: Env,
  call: (() => Promise<void>) | undefined,
): Promise<{ code: number; output: string; ready: boolean }> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", WORKER],
    env: { ...env, DYN_LOG: "debug", DYN_REQUEST_PLANE: testRequestPlane() },
    stdout: "piped",
    stderr: "piped",
    stdin: "null",
  }).spawn();
  let output = "";
  let ready = false;
  const readyOrExit = Promise.withResolvers<void>();
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      output += chunk;
      // The "serving" line comes once the instance is registered.
      if (!ready && output.includes("serving endpoint=")) {
        ready = true;
        readyOrExit.resolve();
      }
    }
  };
  const pumps = Promise.all([pump(child.stdout), pump(child.stderr)]);
  const timer = setTimeout(() => readyOrExit.resolve(), 30_000);
  child.status.then(() => readyOrExit.resolve());
  try {
    await readyOrExit.promise;
    if (ready && call) await call();
  } finally {
    clearTimeout(timer);
    try {
      child.kill("SIGTERM");
    } catch {
      // already exited
    }
  }
  const kill = setTimeout(() => child.kill("SIGKILL"), 10_000);
  const status = await child.status;
  clearTimeout(kill);
  await pumps;
  assert.notEqual(status.signal, "SIGKILL", `the worker ignored SIGTERM for 10 s:\n${output}`);
  return { code: status.code, output, ready };
}

Deno.test({
  name: "secrets never reach a worker's output, with DYN_LOG=debug, served or refused",
  ignore: !haveServers(),
  async fn(t) {
    const [etcd, nats] = await Promise.all([
      startEtcd({ rootPassword: ETCD_PASS }),
      startNats({ user: { user: "dynamo", pass: NATS_PASS } }),
    ]);
    const tokenNats = await startNats({ token: NATS_TOKEN, jetstream: false });
    const base = { ETCD_ENDPOINTS: etcd.url, ETCD_USERNAME: "root", ETCD_PASSWORD: ETCD_PASS };
    const good = { ...base, NATS_SERVER: nats.url, NATS_USER: "dynamo", NATS_PASSWORD: NATS_PASS };
    const secrets = [ETCD_PASS, NATS_PASS, NATS_TOKEN, WRONG];
    try {
      await t.step("a worker that serves and answers a call logs no password", async () => {
        const { output, ready } = await workerOutput(good, async () => {
          const caller = await DistributedRuntime.fromEnv({
            env: { ...good, DYN_LOG: "error", DYN_REQUEST_PLANE: testRequestPlane() },
          });
          try {
            const client = await caller.namespace("xproc").component("worker").endpoint(
              "generate",
            ).client();
            await client.waitForInstances({ timeoutMs: 10_000 });
            let n = 0;
            for await (const _ of await client.generate({ n: 3 })) n++;
            assert.equal(n, 3);
          } finally {
            await caller.shutdown();
          }
        });
        assert.ok(ready, `the worker did not serve:\n${output}`);
        // Debug logging was really on: the runtime's connect line is there.
        assert.match(output, /runtime connected/);
        assertNoSecrets(output, secrets);
      });
      await t.step("a worker with a NATS token logs no token", async () => {
        const env = { ...base, NATS_SERVER: tokenNats.url, NATS_TOKEN };
        const { output, ready } = await workerOutput(env, undefined);
        assert.ok(ready, `the worker did not serve:\n${output}`);
        assert.match(output, /runtime connected/);
        assertNoSecrets(output, secrets);
      });
      for (
        const [what, env] of [
          ["a wrong NATS password", { ...good, NATS_PASSWORD: WRONG }],
          ["a wrong NATS token", { ...base, NATS_SERVER: tokenNats.url, NATS_TOKEN: WRONG }],
          ["a wrong etcd password", { ...good, ETCD_PASSWORD: WRONG }],
        ] as const
      ) {
        await t.step(`a worker refused for ${what} crashes without printing it`, async () => {
          const { code, output, ready } = await workerOutput(env, undefined);
          assert.ok(!ready, `the worker served with ${what}:\n${output}`);
          assert.notEqual(code, 0);
          assert.match(output, /authorization|authentication/i);
          assertNoSecrets(output, secrets);
        });
      }
    } finally {
      await Promise.all([etcd.stop(), nats.stop(), tokenNats.stop()]);
    }
  },
});
