import assert from "node:assert/strict";
import { join } from "node:path";
import { CancelledError } from "../../runtime/errors.ts";
import { fakeSha, startFakeHuggingFace } from "../../tests/_helpers/fake_huggingface.ts";
import {
  defaultHuggingFaceCacheDir,
  type DownloadProgress,
  downloadRepo,
  HuggingFaceAccessDeniedError,
  HuggingFaceNotFoundError,
  HuggingFaceUnreachableError,
  parseRepoRef,
  repoCacheDir,
  terminalProgress,
} from "./huggingface.ts";
import { loadModelSource } from "./model_source.ts";

const SHA1 = fakeSha("v1");
const SHA2 = fakeSha("v2");

function modelFiles(ctx: number) {
  return {
    "config.json": JSON.stringify({ max_position_embeddings: ctx, eos_token_id: 2 }),
    "tokenizer.json": JSON.stringify({
      added_tokens: [{ id: 2, content: "</s>" }],
      model: { vocab: {} },
    }),
    "tokenizer_config.json": JSON.stringify({ eos_token: "</s>", chat_template: "{{ m }}" }),
    "generation_config.json": JSON.stringify({ eos_token_id: [2, 3] }),
    "README.md": "# tiny",
    "model.safetensors": new Uint8Array(1024).fill(7),
    "sub/extra.txt": "nested",
  };
}

async function setup(opts: { token?: string; gated?: boolean } = {}) {
  const hub = await startFakeHuggingFace({
    token: opts.token,
    repos: {
      "acme/tiny": {
        commits: { [SHA1]: modelFiles(1024), [SHA2]: modelFiles(2048) },
        refs: { main: SHA2, "v1.0": SHA1 },
        gated: opts.gated,
      },
    },
  });
  const cacheDir = await Deno.makeTempDir({ prefix: "dynamo-hub-test-" });
  return {
    hub,
    cacheDir,
    async [Symbol.asyncDispose]() {
      await hub.close();
      await Deno.remove(cacheDir, { recursive: true });
    },
  };
}

Deno.test("downloadRepo() fetches config and tokenizer files into a huggingface_hub-style cache", async () => {
  await using t = await setup();
  const progress: DownloadProgress[] = [];
  const dir = await downloadRepo("acme/tiny", {
    endpoint: t.hub.url,
    cacheDir: t.cacheDir,
    onProgress: (p) => progress.push(p),
  });
  const repoDir = join(t.cacheDir, "models--acme--tiny");
  assert.equal(dir, join(repoDir, "snapshots", SHA2));
  assert.equal(await Deno.readTextFile(join(repoDir, "refs", "main")), SHA2);
  const names = [...Deno.readDirSync(dir)].map((e) => e.name).sort();
  assert.deepEqual(names, [
    "config.json",
    "generation_config.json",
    "sub",
    "tokenizer.json",
    "tokenizer_config.json",
  ]);
  assert.equal(await Deno.readTextFile(join(dir, "sub", "extra.txt")), "nested");
  assert.equal(
    JSON.parse(await Deno.readTextFile(join(dir, "config.json"))).max_position_embeddings,
    2048,
  );
  assert.equal(t.hub.count("api"), 1);
  assert.equal(t.hub.count("file"), 5);
  const done = progress.filter((p) => p.done).map((p) => p.file).sort();
  assert.deepEqual(done, [
    "config.json",
    "generation_config.json",
    "sub/extra.txt",
    "tokenizer.json",
    "tokenizer_config.json",
  ]);
  for (const p of progress.filter((p) => p.done)) assert.equal(p.bytes, p.total);
});

Deno.test("downloadRepo() downloads nothing again when the files are cached", async () => {
  await using t = await setup();
  const opts = { endpoint: t.hub.url, cacheDir: t.cacheDir };
  const dir = await downloadRepo("acme/tiny", opts);
  const before = t.hub.count("file");
  assert.equal(await downloadRepo("acme/tiny", opts), dir);
  assert.equal(t.hub.count("file"), before, "no file was fetched the second time");
  assert.equal(t.hub.count("api"), 2, "the branch was resolved again");
  // A commit sha is immutable: a complete cached snapshot needs no request at all.
  const total = t.hub.count();
  assert.equal(await downloadRepo("acme/tiny", { ...opts, revision: SHA2 }), dir);
  assert.equal(t.hub.count(), total);
  // Offline mode and an unreachable hub both fall back to the cached ref.
  assert.equal(await downloadRepo("acme/tiny", { ...opts, offline: true }), dir);
  assert.equal(t.hub.count(), total);
  await t.hub.close();
  assert.equal(await downloadRepo("acme/tiny", { ...opts, timeoutMs: 2000 }), dir);
  await assert.rejects(
    downloadRepo("acme/tiny", { ...opts, revision: "v1.0", timeoutMs: 2000 }),
    (err: unknown) => {
      assert.ok(err instanceof HuggingFaceUnreachableError);
      assert.ok(
        err.message.includes(`cannot reach the Hugging Face Hub at ${t.hub.url}`),
        err.message,
      );
      return true;
    },
  );
});

Deno.test("downloadRepo() resolves revisions to their commits and records refs", async () => {
  await using t = await setup();
  const opts = { endpoint: t.hub.url, cacheDir: t.cacheDir };
  const v1 = await downloadRepo("acme/tiny", { ...opts, revision: "v1.0" });
  assert.ok(v1.endsWith(join("snapshots", SHA1)));
  const repoDir = repoCacheDir(t.cacheDir, "acme/tiny");
  assert.equal(await Deno.readTextFile(join(repoDir, "refs", "v1.0")), SHA1);
  assert.equal(
    JSON.parse(await Deno.readTextFile(join(v1, "config.json"))).max_position_embeddings,
    1024,
  );
  const bySuffix = await downloadRepo("hf://acme/tiny@v1.0", opts);
  assert.equal(bySuffix, v1);
  await assert.rejects(
    downloadRepo("acme/tiny", { ...opts, revision: "nope" }),
    (err: unknown) =>
      err instanceof HuggingFaceNotFoundError && /repo or revision not found/.test(err.message),
  );
});

Deno.test("downloadRepo() sends the token and says access denied without it", async () => {
  await using t = await setup({ token: "hf_secret", gated: true });
  const opts = { endpoint: t.hub.url, cacheDir: t.cacheDir };
  await assert.rejects(downloadRepo("acme/tiny", opts), (err: unknown) => {
    assert.ok(err instanceof HuggingFaceAccessDeniedError);
    assert.equal(err.status, 401);
    assert.match(err.message, /access denied \(gated or private repo\? pass a token\)/);
    return true;
  });
  await assert.rejects(
    downloadRepo("acme/tiny", { ...opts, token: "wrong" }),
    HuggingFaceAccessDeniedError,
  );
  const dir = await downloadRepo("acme/tiny", { ...opts, token: "hf_secret" });
  assert.ok(await Deno.stat(join(dir, "tokenizer.json")));
  assert.ok(
    t.hub.requests.filter((r) => r.status === 200).every((r) =>
      r.authorization === "Bearer hf_secret"
    ),
  );
});

Deno.test("downloadRepo() says 'repo or revision not found' for an unknown repo", async () => {
  await using t = await setup();
  await assert.rejects(
    downloadRepo("acme/missing", { endpoint: t.hub.url, cacheDir: t.cacheDir }),
    (err: unknown) => {
      assert.ok(err instanceof HuggingFaceNotFoundError);
      assert.equal(err.repoId, "acme/missing");
      assert.match(err.message, /repo or revision not found/);
      return true;
    },
  );
});

Deno.test("downloadRepo() fetches weights only when asked, and honours patterns", async () => {
  await using t = await setup();
  const opts = { endpoint: t.hub.url, cacheDir: t.cacheDir };
  const dir = await downloadRepo("acme/tiny", { ...opts, includeWeights: true });
  assert.equal((await Deno.readFile(join(dir, "model.safetensors"))).length, 1024);
  const other = await Deno.makeTempDir();
  try {
    const only = await downloadRepo("acme/tiny", {
      ...opts,
      cacheDir: other,
      allowPatterns: ["*.md"],
    });
    assert.deepEqual([...Deno.readDirSync(only)].map((e) => e.name), ["README.md"]);
  } finally {
    await Deno.remove(other, { recursive: true });
  }
});

Deno.test("downloadRepo() leaves no partial file when a download fails, and honours its signal", async () => {
  await using t = await setup();
  t.hub.failWith(500);
  await assert.rejects(
    downloadRepo("acme/tiny", { endpoint: t.hub.url, cacheDir: t.cacheDir }),
    /HTTP 500/,
  );
  t.hub.failWith(undefined);
  const ac = new AbortController();
  ac.abort();
  await assert.rejects(
    downloadRepo("acme/tiny", { endpoint: t.hub.url, cacheDir: t.cacheDir, signal: ac.signal }),
  );
  const ac2 = new AbortController();
  const p = downloadRepo("acme/tiny", {
    endpoint: t.hub.url,
    cacheDir: t.cacheDir,
    signal: ac2.signal,
    onProgress: () => ac2.abort(),
  });
  await assert.rejects(p, CancelledError);
  const snap = join(repoCacheDir(t.cacheDir, "acme/tiny"), "snapshots", SHA2);
  const leftovers: string[] = [];
  try {
    for (const e of Deno.readDirSync(snap)) {
      if (e.name.includes(".incomplete")) leftovers.push(e.name);
    }
  } catch {
    // no snapshot folder at all is fine too
  }
  assert.deepEqual(leftovers, []);
});

Deno.test("parseRepoRef() accepts org/name, hf:// and @revision, and refuses paths", () => {
  assert.deepEqual(parseRepoRef("Qwen/Qwen3-0.6B"), {
    repoId: "Qwen/Qwen3-0.6B",
    revision: undefined,
  });
  assert.deepEqual(parseRepoRef("hf://Qwen/Qwen3-0.6B@main"), {
    repoId: "Qwen/Qwen3-0.6B",
    revision: "main",
  });
  assert.deepEqual(parseRepoRef("hf://gpt2"), { repoId: "gpt2", revision: undefined });
  for (
    const bad of ["gpt2", "./a/b", "/data/models/x", "a/b/c", "a/../b", "a/b@", "../x/y", "a b/c"]
  ) {
    assert.equal(parseRepoRef(bad), undefined, bad);
  }
});

Deno.test("defaultHuggingFaceCacheDir() follows huggingface_hub's environment variables", () => {
  assert.equal(defaultHuggingFaceCacheDir({ HF_HUB_CACHE: "/c" }), "/c");
  assert.equal(defaultHuggingFaceCacheDir({ HF_HOME: "/h" }), "/h/hub");
  assert.equal(defaultHuggingFaceCacheDir({ XDG_CACHE_HOME: "/x" }), "/x/huggingface/hub");
  assert.equal(defaultHuggingFaceCacheDir({ HOME: "/home/u" }), "/home/u/.cache/huggingface/hub");
});

Deno.test("loadModelSource() loads hf://org/name@revision through the hub, named by the repo id", async () => {
  await using t = await setup();
  const hub = { endpoint: t.hub.url, cacheDir: t.cacheDir };
  const { card, localPath } = await loadModelSource("hf://acme/tiny@v1.0", { huggingFace: hub });
  assert.equal(card.display_name, "acme/tiny");
  assert.equal(card.source_path, "acme/tiny@v1.0");
  assert.equal(card.context_length, 1024);
  assert.deepEqual(card.eos_token_ids, [2, 3]);
  assert.ok(localPath.endsWith(SHA1));
  const plain = await loadModelSource("acme/tiny", { huggingFace: hub });
  assert.equal(plain.card.context_length, 2048);
  await assert.rejects(
    loadModelSource("acme/nothing", { huggingFace: hub }),
    /acme\/nothing is neither a local file or folder nor a Hugging Face repo/,
  );
});

Deno.test("loadModelSource() prefers an existing local folder over a repo id of the same shape", async () => {
  await using t = await setup();
  // A relative "org/name" folder under the working directory (no chdir: tests run in parallel).
  const org = `dynamo-hub-test-${crypto.randomUUID().slice(0, 8)}`;
  try {
    await Deno.mkdir(join(org, "tiny"), { recursive: true });
    for (const [name, content] of Object.entries(modelFiles(333))) {
      if (typeof content === "string" && name.endsWith(".json")) {
        await Deno.writeTextFile(join(org, "tiny", name), content);
      }
    }
    const hub = { endpoint: t.hub.url, cacheDir: t.cacheDir };
    const { card } = await loadModelSource(`${org}/tiny`, { huggingFace: hub });
    assert.equal(card.context_length, 333);
    assert.equal(card.display_name, "tiny");
    assert.equal(t.hub.count(), 0);
  } finally {
    await Deno.remove(org, { recursive: true });
  }
});

Deno.test("terminalProgress() takes a download's reports and stops cleanly", async () => {
  await using t = await setup();
  const bars = terminalProgress();
  try {
    await downloadRepo("acme/tiny", {
      endpoint: t.hub.url,
      cacheDir: t.cacheDir,
      onProgress: bars.onProgress,
    });
    bars.onProgress({ file: "no-length.bin", bytes: 10, total: undefined, done: false });
    bars.onProgress({ file: "no-length.bin", bytes: 20, total: undefined, done: true });
  } finally {
    bars.stop();
  }
});
