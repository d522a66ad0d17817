// Downloads Hugging Face model repos (config and tokenizer files by default) into a cache
// laid out like huggingface_hub's, streaming each file to disk and renaming it into place.

import { dirname, join, resolve, sep } from "node:path";
import { homedir } from "node:os";
import process from "node:process";
// @ts-types="@types/cli-progress"
import cliProgress from "cli-progress";
import { CancelledError, DynamoError, InvalidArgumentError } from "../../runtime/errors.ts";

/** A download from the Hub failed. */
export class HuggingFaceError extends DynamoError {
  /** The repo, e.g. "Qwen/Qwen3-0.6B". */
  readonly repoId: string;
  /** HTTP status, when the Hub answered. */
  readonly status: number | undefined;
  /** Creates the error for a repo and, when the Hub answered, its HTTP status. */
  constructor(repoId: string, message: string, status?: number, options?: ErrorOptions) {
    super(message, options);
    this.repoId = repoId;
    this.status = status;
  }
}

/** 401/403: the repo is gated or private, or the token is wrong. */
export class HuggingFaceAccessDeniedError extends HuggingFaceError {}

/** 404: no such repo, revision or file. */
export class HuggingFaceNotFoundError extends HuggingFaceError {}

/** The Hub could not be reached (and the cache could not stand in). */
export class HuggingFaceUnreachableError extends HuggingFaceError {}

/** Progress of one file's download. */
export interface DownloadProgress {
  /** Path of the file in the repo. */
  file: string;
  /** Bytes written so far. */
  bytes: number;
  /** Size from Content-Length, when the server sent one. */
  total: number | undefined;
  /** True on the last report of the file. */
  done: boolean;
}

/** Options of {@linkcode downloadRepo}. */
export interface DownloadRepoOptions {
  /** Branch, tag or commit (default "main"). */
  revision?: string;
  /**
   * Cache folder (the `hub` folder of huggingface_hub). The library does not read the
   * environment: the CLI passes `$HF_HUB_CACHE`, `$HF_HOME/hub` or
   * `~/.cache/huggingface/hub` (see {@linkcode defaultHuggingFaceCacheDir}); without one,
   * `~/.cache/huggingface/hub`.
   */
  cacheDir?: string;
  /** Hub URL (default "https://huggingface.co"; the CLI passes `$HF_ENDPOINT`). */
  endpoint?: string;
  /** Access token for gated or private repos (sent as `Authorization: Bearer`). */
  token?: string;
  /**
   * Globs of repo files to fetch (`*` matches any characters, `/` included; `?` one).
   * Default: {@linkcode DEFAULT_ALLOW_PATTERNS}.
   */
  allowPatterns?: string[];
  /** Also fetch weights (`*.safetensors`, `*.bin`, `*.gguf`). Default false. */
  includeWeights?: boolean;
  /** Never touch the network: use the cache or fail (the CLI maps `HF_HUB_OFFLINE=1`). */
  offline?: boolean;
  /**
   * Deadline in ms for the API call and for each download to start and to make progress
   * (a stall longer than this aborts it). Default 30000.
   */
  timeoutMs?: number;
  /** Files downloaded at once (default 4). */
  concurrency?: number;
  /** Called as bytes arrive (for progress bars). */
  onProgress?: (progress: DownloadProgress) => void;
  /** Cancels the download. */
  signal?: AbortSignal;
  /** fetch to use (default globalThis.fetch), for tests and proxies. */
  fetch?: typeof fetch;
}

/** What the engine-independent parts of Dynamo need: configs, tokenizers, templates. */
export const DEFAULT_ALLOW_PATTERNS: readonly string[] = [
  "*.json",
  "*.txt",
  "*.model",
  "*.tiktoken",
  "*.jinja",
];

/** Added by `includeWeights`. */
export const WEIGHT_PATTERNS: readonly string[] = ["*.safetensors", "*.bin", "*.gguf"];

/** The public Hub. */
export const DEFAULT_HUGGINGFACE_ENDPOINT = "https://huggingface.co";

/**
 * The cache folder huggingface_hub would use for this environment: `HF_HUB_CACHE`, else
 * `HF_HOME/hub`, else `XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`.
 * For the CLI and `dynamoWorker`, which read the environment.
 *
 * @param env environment variables (e.g. `Deno.env.toObject()`)
 */
export function defaultHuggingFaceCacheDir(env: Record<string, string | undefined> = {}): string {
  if (env.HF_HUB_CACHE) return env.HF_HUB_CACHE;
  if (env.HF_HOME) return join(env.HF_HOME, "hub");
  if (env.XDG_CACHE_HOME) return join(env.XDG_CACHE_HOME, "huggingface", "hub");
  return join(env.HOME ?? homedir(), ".cache", "huggingface", "hub");
}

/** A parsed `org/name[@revision]` or `hf://org/name[@revision]`. */
export interface RepoRef {
  repoId: string;
  revision: string | undefined;
}

const REPO_PART = /^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?$/;

/**
 * Parses a Hugging Face model reference. Without `hf://` the id must be `org/name`; with
 * it, a bare `name` (legacy repos such as `gpt2`) is accepted too.
 *
 * @returns the repo id and revision, or undefined when `ref` does not look like one
 */
export function parseRepoRef(ref: string): RepoRef | undefined {
  const prefixed = ref.startsWith("hf://");
  let rest = prefixed ? ref.slice(5) : ref;
  let revision: string | undefined;
  const at = rest.indexOf("@");
  if (at >= 0) {
    revision = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (revision === "" || /[\s@]/.test(revision) || revision.includes("..")) return undefined;
  }
  const parts = rest.split("/");
  if (parts.length > 2 || (parts.length === 1 && !prefixed)) return undefined;
  if (!parts.every((p) => REPO_PART.test(p) && !p.includes(".."))) return undefined;
  return { repoId: rest, revision };
}

/** A parsed `hf://org/name[@revision]/path/to/file.gguf`: one GGUF file of a Hub repo. */
export interface GgufRef extends RepoRef {
  /** The file's path in the repo. */
  file: string;
}

/**
 * Parses a reference to one GGUF file of a Hub repo: `hf://org/name/file.gguf`, with an
 * optional `@revision` after the repo name and folders before the file.
 *
 * @param ref what the user passed
 * @returns the repo, revision and file, or undefined when `ref` is not such a reference
 * @example
 * ```ts
 * parseGgufRef("hf://acme/tiny-GGUF@v1/q4/tiny.Q4_1.gguf");
 * // { repoId: "acme/tiny-GGUF", revision: "v1", file: "q4/tiny.Q4_1.gguf" }
 * ```
 */
export function parseGgufRef(ref: string): GgufRef | undefined {
  if (!ref.startsWith("hf://") || !ref.toLowerCase().endsWith(".gguf")) return undefined;
  const parts = ref.slice(5).split("/");
  if (parts.length < 3) return undefined;
  const repo = parseRepoRef(`hf://${parts[0]}/${parts[1]}`);
  const file = parts.slice(2).join("/");
  if (!repo || !repo.repoId.includes("/") || !isSafeRepoPath(file)) return undefined;
  return { ...repo, file };
}

/**
 * Downloads one GGUF file of a Hub repo into the cache (as {@linkcode downloadRepo} does, with
 * its progress reports, deadlines and cache) and returns its local path.
 *
 * @param ref `hf://org/name[@revision]/file.gguf`
 * @param options cache, endpoint, token, progress, deadline, signal (patterns are the file)
 * @returns the file's path in the cached snapshot
 * @throws {InvalidArgumentError} `ref` is not such a reference
 * @throws {HuggingFaceNotFoundError} the repo, revision or file does not exist
 * @throws {HuggingFaceError} as {@linkcode downloadRepo}
 * @example
 * ```ts ignore
 * const path = await downloadGguf("hf://acme/tiny-GGUF/tiny.Q4_1.gguf", { onProgress });
 * ```
 */
export async function downloadGguf(
  ref: string,
  options: Omit<DownloadRepoOptions, "allowPatterns" | "includeWeights"> = {},
): Promise<string> {
  const parsed = parseGgufRef(ref);
  if (!parsed) {
    throw new InvalidArgumentError(
      `not a Hugging Face GGUF reference (expected "hf://org/name/file.gguf"), got ${
        JSON.stringify(ref)
      }`,
    );
  }
  // The file's own name as the only pattern: glob characters in it would match others.
  if (/[*?]/.test(parsed.file)) {
    throw new InvalidArgumentError(`a GGUF file name cannot hold * or ?, got ${parsed.file}`);
  }
  const snapshot = await downloadRepo(parsed.repoId, {
    ...options,
    revision: options.revision ?? parsed.revision,
    allowPatterns: [parsed.file],
  });
  const path = join(snapshot, ...parsed.file.split("/"));
  if (!(await exists(path))) {
    throw new HuggingFaceNotFoundError(
      parsed.repoId,
      `${parsed.repoId} has no file ${parsed.file} at ${parsed.revision ?? "main"}`,
      404,
    );
  }
  return path;
}

/** `{cacheDir}/models--{org}--{name}`, as huggingface_hub names it. */
export function repoCacheDir(cacheDir: string, repoId: string): string {
  return join(cacheDir, `models--${repoId.split("/").join("--")}`);
}

function globToRegExp(glob: string): RegExp {
  let re = "";
  for (const c of glob) {
    if (c === "*") re += ".*";
    else if (c === "?") re += ".";
    else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${re}$`);
}

function isSafeRepoPath(file: string): boolean {
  if (file === "" || file.startsWith("/") || file.includes("\\") || file.includes("\0")) {
    return false;
  }
  return file.split("/").every((seg) => seg !== "" && seg !== "." && seg !== "..");
}

interface Manifest {
  sha: string;
  files: string[];
}

async function readText(path: string): Promise<string | undefined> {
  try {
    return await Deno.readTextFile(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}

/** Writes `data` to `path` through a temp file in the same folder and a rename. */
async function writeAtomic(path: string, data: string | Uint8Array): Promise<void> {
  await Deno.mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.${crypto.randomUUID()}.tmp`;
  try {
    if (typeof data === "string") await Deno.writeTextFile(tmp, data);
    else await Deno.writeFile(tmp, data);
    await Deno.rename(tmp, path);
  } catch (err) {
    await Deno.remove(tmp).catch(() => {});
    throw err;
  }
}

const COMMIT = /^[0-9a-f]{40}$/;

/**
 * Downloads the files of a Hub model repo that match the allow patterns into the cache
 * (`{cacheDir}/models--{org}--{name}/snapshots/{sha}/{file}`, with `refs/{revision}`
 * holding the commit), and returns the snapshot folder. Files already in the snapshot
 * are not fetched again; a commit-sha revision already complete in the cache makes no
 * request at all; when the Hub cannot be reached, a cached snapshot of the revision is
 * used. Files stream to a temp file and are renamed into place, so a crash never leaves
 * half a file under its real name. Unlike huggingface_hub, files are stored in the
 * snapshot folder itself (no `blobs/` and symlinks).
 *
 * @param repoId `org/name` (a `hf://` prefix and `@revision` suffix are accepted)
 * @param options revision, cache, endpoint, token, patterns, progress, deadline, signal
 * @returns the local snapshot folder
 * @throws {HuggingFaceAccessDeniedError} 401/403 (gated or private repo)
 * @throws {HuggingFaceNotFoundError} 404 (no such repo or revision)
 * @throws {HuggingFaceUnreachableError} network failure or deadline, and no usable cache
 * @throws {CancelledError} `signal` aborted
 *
 * @example
 * ```ts
 * const dir = await downloadRepo("Qwen/Qwen3-0.6B", { cacheDir: "/tmp/hub" });
 * const config = JSON.parse(await Deno.readTextFile(`${dir}/config.json`));
 * ```
 */
export async function downloadRepo(
  repoId: string,
  options: DownloadRepoOptions = {},
): Promise<string> {
  options.signal?.throwIfAborted();
  const ref = parseRepoRef(repoId.startsWith("hf://") ? repoId : `hf://${repoId}`);
  if (!ref) {
    throw new InvalidArgumentError(
      `not a Hugging Face repo id (expected "org/name"), got ${JSON.stringify(repoId)}`,
    );
  }
  const repo = ref.repoId;
  const revision = options.revision ?? ref.revision ?? "main";
  if (!isSafeRepoPath(revision) || /\s/.test(revision)) {
    throw new InvalidArgumentError(
      `revision must be a branch, tag or commit, got ${JSON.stringify(revision)}`,
    );
  }
  const endpoint = (options.endpoint ?? DEFAULT_HUGGINGFACE_ENDPOINT).replace(/\/+$/, "");
  const cacheDir = resolve(options.cacheDir ?? defaultHuggingFaceCacheDir({}));
  const timeoutMs = options.timeoutMs ?? 30_000;
  const concurrency = options.concurrency ?? 4;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    throw new InvalidArgumentError(`timeoutMs must be a positive number, got ${timeoutMs}`);
  }
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new InvalidArgumentError(`concurrency must be a whole number >= 1, got ${concurrency}`);
  }
  const patterns = [
    ...(options.allowPatterns ?? DEFAULT_ALLOW_PATTERNS),
    ...(options.includeWeights ? WEIGHT_PATTERNS : []),
  ].map(globToRegExp);
  const wanted = (files: string[]) =>
    files.filter((f) => isSafeRepoPath(f) && patterns.some((p) => p.test(f)));
  const repoDir = repoCacheDir(cacheDir, repo);
  const refPath = join(repoDir, "refs", ...revision.split("/"));

  /** The cached snapshot of `sha`, when every wanted file is there. */
  const cached = async (sha: string): Promise<string | undefined> => {
    const snapshot = join(repoDir, "snapshots", sha);
    const text = await readText(join(repoDir, "dynamo_manifests", `${sha}.json`));
    if (text !== undefined) {
      let manifest: Manifest;
      try {
        manifest = JSON.parse(text) as Manifest;
      } catch {
        return undefined; // a damaged manifest: download again
      }
      if (!Array.isArray(manifest.files)) return undefined;
      for (const f of wanted(manifest.files)) {
        if (!(await exists(join(snapshot, f)))) return undefined;
      }
      return snapshot;
    }
    return undefined;
  };

  const knownSha = COMMIT.test(revision) ? revision : (await readText(refPath))?.trim();
  if (options.offline || (COMMIT.test(revision) && knownSha)) {
    const hit = knownSha ? await cached(knownSha) : undefined;
    if (hit) return hit;
    if (options.offline) {
      throw new HuggingFaceUnreachableError(
        repo,
        `${repo}@${revision} is not in the cache at ${cacheDir} and offline mode is on`,
      );
    }
  }

  const doFetch = options.fetch ?? globalThis.fetch;
  const headers: Record<string, string> = { "user-agent": "dynamo-deno" };
  if (options.token) headers.authorization = `Bearer ${options.token}`;

  const classify = (status: number, what: string): HuggingFaceError => {
    if (status === 401 || status === 403) {
      return new HuggingFaceAccessDeniedError(
        repo,
        `${what}: access denied (gated or private repo? pass a token) (HTTP ${status} from ${endpoint})`,
        status,
      );
    }
    if (status === 404) {
      return new HuggingFaceNotFoundError(
        repo,
        `${what}: repo or revision not found (HTTP 404 from ${endpoint})`,
        status,
      );
    }
    return new HuggingFaceError(repo, `${what}: HTTP ${status} from ${endpoint}`, status);
  };

  const networkError = (err: unknown, what: string): Error => {
    if (options.signal?.aborted) {
      return new CancelledError(`download of ${repo} cancelled`, { cause: err });
    }
    if (err instanceof DynamoError) return err;
    const reason = err instanceof DOMException && err.name === "TimeoutError"
      ? `no answer within ${timeoutMs} ms`
      : (err as Error).message;
    return new HuggingFaceUnreachableError(
      repo,
      `${what}: cannot reach the Hugging Face Hub at ${endpoint}: ${reason}`,
      undefined,
      { cause: err },
    );
  };

  // 1. Resolve the revision to a commit and list the repo's files.
  const apiUrl = `${endpoint}/api/models/${repo}/revision/${encodeURIComponent(revision)}`;
  let info: { sha?: unknown; siblings?: unknown } | null;
  try {
    const signals = [AbortSignal.timeout(timeoutMs)];
    if (options.signal) signals.push(options.signal);
    const res = await doFetch(apiUrl, { headers, signal: AbortSignal.any(signals) });
    if (!res.ok) {
      await res.body?.cancel();
      throw classify(res.status, `${repo}@${revision}`);
    }
    const text = await res.text();
    try {
      info = JSON.parse(text);
    } catch {
      throw new HuggingFaceError(repo, `unexpected answer from ${apiUrl}: not JSON`, res.status);
    }
  } catch (err) {
    const e = networkError(err, `${repo}@${revision}`);
    if (e instanceof HuggingFaceUnreachableError && knownSha) {
      const hit = await cached(knownSha);
      if (hit) return hit;
    }
    throw e;
  }
  const sha = info?.sha;
  if (typeof sha !== "string" || !/^[0-9a-zA-Z]+$/.test(sha) || !Array.isArray(info?.siblings)) {
    throw new HuggingFaceError(repo, `unexpected answer from ${apiUrl}: no sha or siblings`);
  }
  const all = (info!.siblings as { rfilename?: unknown }[])
    .map((s) => s?.rfilename)
    .filter((f): f is string => typeof f === "string");
  const files = wanted(all);
  const snapshot = join(repoDir, "snapshots", sha);

  // 2. Fetch what is missing, a few at a time.
  const missing: string[] = [];
  for (const f of files) if (!(await exists(join(snapshot, f)))) missing.push(f);
  const queue = [...missing];
  const worker = async () => {
    for (let f = queue.shift(); f !== undefined; f = queue.shift()) {
      try {
        await downloadFile(f);
      } catch (err) {
        queue.length = 0; // one failure ends the download: start no more files
        throw err;
      }
    }
  };

  const downloadFile = async (file: string) => {
    const target = join(snapshot, ...file.split("/"));
    if (!target.startsWith(snapshot + sep)) {
      throw new HuggingFaceError(repo, `refusing repo file outside the snapshot: ${file}`);
    }
    const url = `${endpoint}/${repo}/resolve/${sha}/${
      file.split("/").map(encodeURIComponent).join("/")
    }`;
    // The deadline restarts on every chunk: a large file may take long, a stall may not.
    const stall = new AbortController();
    let timer = setTimeout(
      () => stall.abort(new DOMException("stalled", "TimeoutError")),
      timeoutMs,
    );
    const bump = () => {
      clearTimeout(timer);
      timer = setTimeout(() => stall.abort(new DOMException("stalled", "TimeoutError")), timeoutMs);
    };
    const signals = [stall.signal];
    if (options.signal) signals.push(options.signal);
    const signal = AbortSignal.any(signals);
    await Deno.mkdir(dirname(target), { recursive: true });
    const tmp = `${target}.${crypto.randomUUID()}.incomplete`;
    let out: Deno.FsFile | undefined;
    try {
      const res = await doFetch(url, { headers, signal });
      if (!res.ok || !res.body) {
        await res.body?.cancel();
        throw classify(res.status, `${repo}/${file}`);
      }
      const length = res.headers.get("content-length");
      const total = length !== null && /^\d+$/.test(length) ? Number(length) : undefined;
      out = await Deno.open(tmp, { write: true, createNew: true });
      let bytes = 0;
      options.onProgress?.({ file, bytes, total, done: false });
      const reader = res.body.getReader();
      try {
        while (true) {
          const { done, value } = await reader.read();
          if (done) break;
          bump();
          let off = 0;
          while (off < value.length) off += await out.write(value.subarray(off));
          bytes += value.length;
          options.onProgress?.({ file, bytes, total, done: false });
        }
      } finally {
        reader.releaseLock();
      }
      if (total !== undefined && bytes !== total) {
        throw new HuggingFaceUnreachableError(
          repo,
          `${repo}/${file}: connection to ${endpoint} ended after ${bytes} of ${total} bytes`,
        );
      }
      out.close();
      out = undefined;
      await Deno.rename(tmp, target);
      options.onProgress?.({ file, bytes, total, done: true });
    } catch (err) {
      out?.close();
      await Deno.remove(tmp).catch(() => {});
      throw networkError(err, `${repo}/${file}`);
    } finally {
      clearTimeout(timer);
    }
  };

  if (missing.length > 0) {
    await Deno.mkdir(snapshot, { recursive: true });
    const results = await Promise.allSettled(
      Array.from({ length: Math.min(concurrency, missing.length) }, worker),
    );
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed) throw failed.reason;
  } else {
    await Deno.mkdir(snapshot, { recursive: true });
  }

  // 3. Record the revision and what the commit holds, for later offline use.
  const manifest: Manifest = { sha, files: all };
  await writeAtomic(join(repoDir, "dynamo_manifests", `${sha}.json`), JSON.stringify(manifest));
  if (!COMMIT.test(revision) || revision !== sha) await writeAtomic(refPath, sha);
  return snapshot;
}

/**
 * A progress renderer: call it with each report (it is an `onProgress` callback itself);
 * `stop()` ends the drawing early (on errors). The bars also stop by themselves once every
 * file has finished, so no timer outlives the download.
 */
export interface TerminalProgress {
  (progress: DownloadProgress): void;
  /** The same callback, for `{ onProgress: bars.onProgress }`. */
  onProgress: (progress: DownloadProgress) => void;
  /** Stops drawing and gives the terminal back (cursor included). */
  stop(): void;
}

/**
 * Progress bars on standard error (one per file being fetched), drawn with cli-progress.
 * For the CLI; nothing is drawn when stderr is not a terminal.
 *
 * @example
 * ```ts
 * const bars = terminalProgress();
 * try {
 *   await downloadRepo("Qwen/Qwen3-0.6B", { onProgress: bars });
 * } finally {
 *   bars.stop();
 * }
 * ```
 */
export function terminalProgress(): TerminalProgress {
  let multi: cliProgress.MultiBar | undefined;
  const bars = new Map<string, { bar: cliProgress.SingleBar; done: boolean }>();
  const mib = (n: number) => `${(n / (1024 * 1024)).toFixed(1)} MiB`;
  const stop = () => {
    multi?.stop();
    multi = undefined;
    bars.clear();
  };
  const onProgress = ({ file, bytes, total, done }: DownloadProgress) => {
    const size = total === undefined ? mib(bytes) : `${mib(bytes)} / ${mib(total)}`;
    multi ??= new cliProgress.MultiBar(
      {
        stream: process.stderr,
        format: " {bar} {percentage}% | {file} | {size}",
        hideCursor: true,
        clearOnComplete: false,
        fps: 10,
      },
      cliProgress.Presets.shades_classic,
    );
    let entry = bars.get(file);
    if (!entry) {
      entry = {
        bar: multi.create(total ?? Math.max(bytes, 1), bytes, { file, size }),
        done: false,
      };
      bars.set(file, entry);
    }
    if (total === undefined) entry.bar.setTotal(Math.max(bytes, 1));
    entry.bar.update(bytes, { file, size });
    if (done && !entry.done) {
      entry.done = true;
      entry.bar.stop();
      if ([...bars.values()].every((b) => b.done)) stop();
    }
  };
  return Object.assign(onProgress, { onProgress, stop });
}
