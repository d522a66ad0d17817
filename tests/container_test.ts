// The container image: `docker build` of the Dockerfile, then `dynamo run in=http out=echo`
// (the image's default command) inside it answers a chat request, runs as a non-root user,
// passes its own health check and stops gracefully on SIGTERM; and with no network at all,
// `out=llamacpp` serves a tiny GGUF (nothing is fetched at run time). Skipped, with the
// reason in the test's name, where no docker daemon answers or no base image can be had.
//
// The base image: $DYNAMO_IMAGE_BASE, else debian:bookworm-slim if present or pullable, else
// dynamo-deno/base:bookworm as scripts/docker_base_image.sh makes it from Debian packages.
// The first build takes minutes (Rust, Deno, ~900 MB of npm packages); later ones reuse the
// layers and rebuild only the source layer.

import assert from "node:assert/strict";
import { tinyLlamaGguf } from "./_helpers/tiny_gguf.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const IMAGE = "dynamo-deno:test";
const OFFICIAL_BASE = "debian:bookworm-slim";
const LOCAL_BASE = "dynamo-deno/base:bookworm";
const BUILD_TIMEOUT_MS = 20 * 60_000;

interface DockerResult {
  code: number;
  stdout: string;
  stderr: string;
}

async function docker(
  args: string[],
  timeoutMs: number,
  env: Record<string, string> = {},
): Promise<DockerResult> {
  try {
    const out = await new Deno.Command("docker", {
      args,
      cwd: ROOT,
      env,
      stdin: "null",
      signal: AbortSignal.timeout(timeoutMs),
    }).output();
    const decode = (b: Uint8Array) => new TextDecoder().decode(b).trim();
    return { code: out.code, stdout: decode(out.stdout), stderr: decode(out.stderr) };
  } catch (err: unknown) {
    if (err instanceof Deno.errors.NotFound) {
      return { code: 127, stdout: "", stderr: "the docker command is not installed" };
    }
    throw err;
  }
}

/** The base image to build from, or why the image cannot be built here. */
async function findBase(): Promise<{ base: string } | { skip: string }> {
  const server = await docker(["version", "--format", "{{.Server.Version}}"], 30_000);
  if (server.code !== 0) {
    return { skip: `no docker daemon (${server.stderr.split("\n").at(-1)})` };
  }
  const wanted = Deno.env.get("DYNAMO_IMAGE_BASE");
  if (wanted) return { base: wanted };
  for (const base of [OFFICIAL_BASE, LOCAL_BASE]) {
    if ((await docker(["image", "inspect", base], 30_000)).code === 0) return { base };
  }
  const pull = await docker(["pull", "--quiet", OFFICIAL_BASE], 120_000);
  if (pull.code === 0) return { base: OFFICIAL_BASE };
  return {
    skip: `no base image: ${OFFICIAL_BASE} cannot be pulled (${
      pull.stderr.split("\n").at(-1)
    }) and ${LOCAL_BASE} does not exist (scripts/docker_base_image.sh makes it)`,
  };
}

const found = await findBase();
const skip = "skip" in found ? found.skip : undefined;
// deno-lint-ignore no-console
if (skip) console.warn(`tests/container_test.ts skipped: ${skip}`);

let built: Promise<{ healthcheck: string[] }> | undefined;

/** Builds the image once for this file's tests; checks its user, entrypoint, health check. */
function buildImage(base: string): Promise<{ healthcheck: string[] }> {
  built ??= (async () => {
    // Without the buildx plugin, the docker CLI builds only with the legacy builder.
    const buildx = (await docker(["buildx", "version"], 30_000)).code === 0;
    const build = await docker(
      ["build", "--quiet", "--build-arg", `BASE_IMAGE=${base}`, "-t", IMAGE, "."],
      BUILD_TIMEOUT_MS,
      buildx ? {} : { DOCKER_BUILDKIT: "0" },
    );
    assert.equal(build.code, 0, `docker build failed:\n${build.stdout}\n${build.stderr}`);
    const inspect = await docker(
      ["image", "inspect", "--format", "{{json .Config}}", IMAGE],
      30_000,
    );
    assert.equal(inspect.code, 0, inspect.stderr);
    const config = JSON.parse(inspect.stdout) as {
      User: string;
      Entrypoint: string[];
      Healthcheck?: { Test: string[] };
    };
    assert.equal(config.User, "dynamo");
    assert.deepEqual(config.Entrypoint, ["/app/dynamo"]);
    assert.equal(config.Healthcheck?.Test[0], "CMD", "the image has a health check");
    return { healthcheck: config.Healthcheck.Test.slice(1) };
  })();
  return built;
}

/** Polls `url` until it answers 2xx; throws with the last answer after `timeoutMs`. */
async function waitOk(url: string, timeoutMs: number, logs: () => Promise<string>) {
  const deadline = Date.now() + timeoutMs;
  let last = "no answer yet";
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      last = `${res.status} ${await res.text()}`;
      if (res.ok) return;
    } catch (err: unknown) {
      last = (err as Error).message;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(
    `${url} did not answer 2xx within ${timeoutMs} ms (last: ${last})\n${await logs()}`,
  );
}

Deno.test({
  name: skip
    ? `container image (skipped: ${skip})`
    : "the container image serves a chat answer from dynamo run as a non-root user",
  ignore: skip !== undefined,
  // The build and the container run in docker, not in this process.
  sanitizeResources: false,
  fn: async () => {
    const base = "base" in found ? found.base : OFFICIAL_BASE;
    const { healthcheck } = await buildImage(base);
    const name = `dynamo-test-${crypto.randomUUID().slice(0, 8)}`;
    const started = await docker(
      ["run", "-d", "--name", name, "-p", "127.0.0.1::8000", IMAGE],
      60_000,
    );
    assert.equal(started.code, 0, started.stderr);
    const logs = async () => {
      const l = await docker(["logs", name], 30_000);
      return `container logs:\n${l.stdout}\n${l.stderr}`;
    };
    try {
      const port = await docker(["port", name, "8000/tcp"], 30_000);
      assert.equal(port.code, 0, port.stderr);
      const hostPort = port.stdout.split("\n")[0]!.split(":").at(-1)!;
      const url = `http://127.0.0.1:${hostPort}`;
      await waitOk(`${url}/health`, 120_000, logs);

      const res = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "Qwen3-0.6B",
          messages: [{ role: "user", content: "hello from the container" }],
          max_tokens: 32,
        }),
        signal: AbortSignal.timeout(30_000),
      });
      const body = await res.json();
      assert.equal(res.status, 200, JSON.stringify(body));
      // The echo engine answers with the prompt (its chat template's role line, then the text).
      assert.equal(body.choices[0].message.content, "user\nhello from the container");

      const uid = await docker(["exec", name, "id", "-u"], 30_000);
      assert.equal(uid.stdout, "10001", `the server runs as uid ${uid.stdout}, not root`);
      // The image's own health check command passes against the running server.
      const check = await docker(["exec", name, ...healthcheck], 60_000);
      assert.equal(check.code, 0, `health check failed: ${check.stderr}`);

      // SIGTERM (docker stop) is a graceful stop: exit code 0, well within the grace time.
      const stop = await docker(["stop", "--time", "20", name], 60_000);
      assert.equal(stop.code, 0, stop.stderr);
      const exit = await docker(["inspect", "--format", "{{.State.ExitCode}}", name], 30_000);
      assert.equal(exit.stdout, "0", `exit code after SIGTERM\n${await logs()}`);
    } finally {
      await docker(["rm", "-f", name], 60_000);
    }
  },
});

Deno.test({
  name: skip
    ? `container image, llama.cpp offline (skipped: ${skip})`
    : "the container image serves a GGUF with llama.cpp with no network at all",
  ignore: skip !== undefined,
  sanitizeResources: false,
  fn: async () => {
    const base = "base" in found ? found.base : OFFICIAL_BASE;
    await buildImage(base);
    // A folder the container's user (uid 10001) can read.
    const dir = await Deno.makeTempDir({ prefix: "dynamo-container-" });
    const name = `dynamo-test-${crypto.randomUUID().slice(0, 8)}`;
    try {
      await Deno.chmod(dir, 0o755);
      const model = await tinyLlamaGguf({ dir });
      await Deno.chmod(model, 0o644);
      const file = model.slice(dir.length + 1);
      const started = await docker([
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "none",
        "-v",
        `${dir}:/models:ro`,
        IMAGE,
        "run",
        "in=http",
        "out=llamacpp",
        `/models/${file}`,
        "--http-port",
        "8000",
      ], 60_000);
      assert.equal(started.code, 0, started.stderr);
      // No published port without a network: ask from inside, with the image's own Deno.
      const inside = (script: string) =>
        docker(
          ["exec", name, "deno", "eval", `const url = "http://127.0.0.1:8000"; ${script}`],
          60_000,
        );
      const deadline = Date.now() + 120_000;
      let health = await inside("const r = await fetch(url + '/health'); Deno.exit(r.ok ? 0 : 1);");
      while (health.code !== 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 500));
        health = await inside("const r = await fetch(url + '/health'); Deno.exit(r.ok ? 0 : 1);");
      }
      const logs = await docker(["logs", name], 30_000);
      assert.equal(health.code, 0, `not healthy within 120 s:\n${logs.stdout}\n${logs.stderr}`);
      const answer = await inside(`
        const r = await fetch(url + "/v1/chat/completions", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            model: "${file.replace(/\.gguf$/, "")}",
            messages: [{ role: "user", content: "hi" }],
            max_tokens: 5,
          }),
        });
        console.log(JSON.stringify({ status: r.status, body: await r.json() }));`);
      assert.equal(answer.code, 0, answer.stderr);
      const { status, body } = JSON.parse(answer.stdout);
      assert.equal(status, 200, JSON.stringify(body));
      assert.equal(body.usage.completion_tokens, 5);
      assert.equal(body.choices[0].finish_reason, "length");
      assert.equal(typeof body.choices[0].message.content, "string");
    } finally {
      await docker(["rm", "-f", name], 60_000);
      await Deno.remove(dir, { recursive: true });
    }
  },
});
