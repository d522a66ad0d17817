// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// `deno task bench:model-libs`: our GGUF reader and Hugging Face download against the
// libraries that do the same (@huggingface/gguf, @huggingface/hub), on the same inputs in
// the same run, to decide whether ours stays (issue 20 item 9).
//
// GGUF: metadata of the GGUF files given (default: the models in .dynamo/models), median of
// 21 reads each, plus a truncated copy (does the reader say so?). Download: a local hub on
// 127.0.0.1 that answers the API both clients use (revision, tree, paths-info, resolve with
// ranges) serves a repo of configs, a 7 MB tokenizer and 64 MB of weights; each client
// downloads into a fresh cache 5 times (median), counting requests.
//
// Flags: --gguf PATH (repeatable), --quick (fewer repetitions).

import { gguf } from "@huggingface/gguf";
import { downloadFileToCacheDir, listFiles, snapshotDownload } from "@huggingface/hub";
import { parseArgs } from "node:util";
import { readGgufMetadata } from "../llm/model/gguf.ts";
import { downloadRepo } from "../llm/model/huggingface.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: { gguf: { type: "string", multiple: true }, quick: { type: "boolean" } },
});
const reps = values.quick ? 5 : 21;
const downloads = values.quick ? 3 : 5;
// @huggingface/hub logs every download with console.debug.
console.debug = () => {};

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function timeMs(n: number, f: () => Promise<unknown>): Promise<number> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await f();
    out.push(performance.now() - t);
  }
  return median(out);
}

const describe = (e: unknown) => e instanceof Error ? `${e.name}: ${e.message}` : String(e);

// ---- GGUF

async function defaultGgufFiles(): Promise<string[]> {
  const dir = new URL("../.dynamo/models/", import.meta.url).pathname;
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) if (e.name.endsWith(".gguf")) out.push(dir + e.name);
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  }
  return out.sort();
}

const ggufFiles = values.gguf ?? await defaultGgufFiles();
if (ggufFiles.length === 0) console.log("GGUF: no files (pass --gguf PATH)");
for (const file of ggufFiles) {
  const ours = await readGgufMetadata(file);
  const theirs = await gguf(file, { allowLocalFile: true });
  const theirMetadata = theirs.metadata as Record<string, unknown>;
  const tokens = (m: Record<string, unknown>) =>
    (m["tokenizer.ggml.tokens"] as unknown[] | undefined)?.length ?? 0;
  const same = Object.entries(ours.metadata).every(([k, v]) =>
    JSON.stringify(v, (_, x) => typeof x === "bigint" ? Number(x) : x) ===
      JSON.stringify(theirMetadata[k], (_, x) => typeof x === "bigint" ? Number(x) : x)
  );
  const mb = (await Deno.stat(file)).size / 1e6;
  const tOurs = await timeMs(reps, () => readGgufMetadata(file));
  const tTheirs = await timeMs(reps, () => gguf(file, { allowLocalFile: true }));
  console.log(
    `GGUF ${file.split("/").pop()} (${mb.toFixed(1)} MB): ours ${tOurs.toFixed(1)} ms, ` +
      `@huggingface/gguf ${tTheirs.toFixed(1)} ms (median of ${reps}); ` +
      `${Object.keys(ours.metadata).length} keys, ${tokens(ours.metadata)} tokens; ` +
      `every key equal in both: ${same}`,
  );
}
if (ggufFiles[0]) {
  const bytes = (await Deno.readFile(ggufFiles[0])).subarray(0, 5000);
  const cut = await Deno.makeTempFile({ suffix: ".gguf" });
  try {
    await Deno.writeFile(cut, bytes);
    const ours = await readGgufMetadata(cut).then(
      (m) => `parsed, ${Object.keys(m.metadata).length} keys`,
      describe,
    );
    const theirs = await gguf(cut, { allowLocalFile: true }).then(
      (m) =>
        `parsed, ${Object.keys(m.metadata).length - 3} keys of ${m.metadata.kv_count} declared`,
      describe,
    );
    console.log(`GGUF cut at 5000 bytes: ours -> ${ours.slice(0, 120)}`);
    console.log(`  @huggingface/gguf -> ${theirs.slice(0, 120)}`);
  } finally {
    await Deno.remove(cut);
  }
}

// ---- Hugging Face download

const SHA = "a".repeat(40);
function randomBytes(n: number): Uint8Array<ArrayBuffer> {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i += 65536) crypto.getRandomValues(b.subarray(i, Math.min(n, i + 65536)));
  return b;
}
const text = (s: string) => new Uint8Array(new TextEncoder().encode(s));
const files: Record<string, Uint8Array<ArrayBuffer>> = {
  "config.json": text(JSON.stringify({ architectures: ["LlamaForCausalLM"], hidden_size: 64 })),
  "generation_config.json": text("{}"),
  "tokenizer_config.json": text(JSON.stringify({ chat_template: "x".repeat(4000) })),
  "tokenizer.json": randomBytes(7_000_000),
  "model.safetensors": randomBytes(64_000_000),
};
const oid = (name: string) => name.replace(/\W/g, "").padEnd(40, "0").slice(0, 40);
let requests = 0;
const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
  requests++;
  const path = decodeURIComponent(new URL(req.url).pathname);
  let m;
  if ((m = path.match(/^\/api\/models\/(.+?\/[^/]+)\/revision\/[^/]+$/))) {
    return Response.json({
      id: m[1],
      sha: SHA,
      siblings: Object.keys(files).map((rfilename) => ({ rfilename })),
    });
  }
  if (path.match(/^\/api\/models\/.+?\/[^/]+\/tree\//)) {
    return Response.json(
      Object.entries(files).map(([p, b]) => ({
        type: "file",
        path: p,
        size: b.length,
        oid: oid(p),
      })),
    );
  }
  if (path.match(/^\/api\/models\/.+?\/[^/]+\/paths-info\//)) {
    const { paths } = await req.json() as { paths: string[] };
    return Response.json(
      paths.filter((p) => files[p]).map((p) => ({
        type: "file",
        path: p,
        size: files[p]!.length,
        oid: oid(p),
        lastCommit: { id: SHA },
      })),
    );
  }
  if ((m = path.match(/^\/.+?\/[^/]+\/resolve\/[^/]+\/(.+)$/))) {
    const b = files[m[1]!];
    if (!b) return new Response("no such file", { status: 404 });
    const headers = { etag: `"${oid(m[1]!)}"`, "x-repo-commit": SHA };
    const range = req.headers.get("range")?.match(/bytes=(\d+)-(\d*)/);
    if (range) {
      const start = Number(range[1]);
      const end = range[2] ? Number(range[2]) : b.length - 1;
      return new Response(b.slice(start, end + 1), {
        status: 206,
        headers: { ...headers, "content-range": `bytes ${start}-${end}/${b.length}` },
      });
    }
    return new Response(b, { headers: { ...headers, "content-length": String(b.length) } });
  }
  return new Response("not found", { status: 404 });
});

const hubUrl = `http://127.0.0.1:${server.addr.port}`;
const repo = "org/tiny";
const configs = /\.(json|txt|model|tiktoken|jinja)$/;

async function measure(label: string, f: (cacheDir: string) => Promise<unknown>): Promise<void> {
  const dirs: string[] = [];
  requests = 0;
  try {
    const t = await timeMs(downloads, async () => {
      const dir = await Deno.makeTempDir({ prefix: "dynamo-model-libs-" });
      dirs.push(dir);
      await f(dir);
    });
    console.log(
      `${label}: ${t.toFixed(0)} ms (median of ${downloads} into empty caches), ` +
        `${requests / downloads} requests each`,
    );
  } catch (e) {
    console.log(`${label}: failed: ${describe(e)}`);
  } finally {
    for (const d of dirs) await Deno.remove(d, { recursive: true });
  }
}

try {
  await measure(
    "download configs + tokenizer: ours (downloadRepo, default patterns)",
    (cacheDir) => downloadRepo(repo, { cacheDir, endpoint: hubUrl }),
  );
  await measure(
    "download configs + tokenizer: @huggingface/hub (listFiles + downloadFileToCacheDir)",
    async (cacheDir) => {
      for await (const f of listFiles({ repo, hubUrl, revision: SHA, recursive: true })) {
        if (f.type !== "file" || !configs.test(f.path)) continue;
        await downloadFileToCacheDir({ repo, path: f.path, hubUrl, cacheDir, revision: SHA });
      }
    },
  );
  await measure(
    "download whole repo: ours (downloadRepo, includeWeights)",
    (cacheDir) => downloadRepo(repo, { cacheDir, endpoint: hubUrl, includeWeights: true }),
  );
  await measure(
    "download whole repo: @huggingface/hub (snapshotDownload)",
    (cacheDir) => snapshotDownload({ repo, cacheDir, hubUrl }),
  );
} finally {
  await server.shutdown();
}
