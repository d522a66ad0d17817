// A stand-in for the Hugging Face Hub on 127.0.0.1: the revision API and file downloads
// from in-memory repos, with request counting, an optional token, and switchable failures.

/** One commit of a fake repo: file path to content. */
export type FakeFiles = Record<string, string | Uint8Array>;

/** A fake repo: commits by sha, and refs (branch or tag name to sha). */
export interface FakeRepo {
  commits: Record<string, FakeFiles>;
  /** Default `{ main: <first commit> }`. */
  refs?: Record<string, string>;
  /** Answer 401 without `Authorization: Bearer {token}` (the hub's token). */
  gated?: boolean;
}

/** Options of {@linkcode startFakeHuggingFace}. */
export interface FakeHubOptions {
  repos: Record<string, FakeRepo>;
  /** The token gated repos accept. */
  token?: string;
}

/** A request the fake hub answered. */
export interface FakeRequest {
  kind: "api" | "file" | "other";
  path: string;
  status: number;
  authorization: string | null;
}

/** A running fake hub. */
export interface FakeHuggingFace {
  /** Base URL, e.g. "http://127.0.0.1:40123" (pass as the hub endpoint). */
  readonly url: string;
  /** Every request, in order. */
  readonly requests: FakeRequest[];
  /** Requests of one kind so far. */
  count(kind?: "api" | "file"): number;
  /** Adds or replaces a repo. */
  setRepo(id: string, repo: FakeRepo): void;
  /** Makes every request fail with this status (undefined: back to normal). */
  failWith(status: number | undefined): void;
  close(): Promise<void>;
}

/** A 40-hex fake commit sha derived from a label. */
export function fakeSha(label: string): string {
  let h = 0x811c9dc5;
  let out = "";
  for (let round = 0; out.length < 40; round++) {
    for (const c of `${label}#${round}`) h = Math.imul(h ^ c.charCodeAt(0), 0x01000193) >>> 0;
    out += h.toString(16).padStart(8, "0");
  }
  return out.slice(0, 40);
}

/**
 * Starts a fake hub serving `GET /api/models/{repo}/revision/{rev}` (JSON `{id, sha,
 * siblings}`) and `GET /{repo}/resolve/{rev}/{file}`, where `rev` is a ref name or a sha.
 */
export function startFakeHuggingFace(options: FakeHubOptions): Promise<FakeHuggingFace> {
  const repos = new Map(Object.entries(options.repos));
  const requests: FakeRequest[] = [];
  let failure: number | undefined;
  const encoder = new TextEncoder();

  const resolveRev = (repo: FakeRepo, rev: string): string | undefined => {
    if (Object.hasOwn(repo.commits, rev)) return rev;
    const refs = repo.refs ?? { main: Object.keys(repo.commits)[0] ?? "" };
    return Object.hasOwn(refs, rev) ? refs[rev] : undefined;
  };

  const handle = (req: Request): Response => {
    const url = new URL(req.url);
    const path = decodeURIComponent(url.pathname);
    const api = path.match(/^\/api\/models\/(.+)\/revision\/(.+)$/);
    const file = api ? null : path.match(/^\/(.+?\/[^/]+)\/resolve\/([^/]+)\/(.+)$/);
    const kind = api ? "api" : file ? "file" : "other";
    const respond = (status: number, body: BodyInit | null, headers?: HeadersInit) => {
      requests.push({ kind, path, status, authorization: req.headers.get("authorization") });
      return new Response(body, { status, headers });
    };
    if (failure !== undefined) return respond(failure, `failing with ${failure}`);
    const match = api ?? file;
    if (!match) return respond(404, "not found");
    const repoId = match[1]!;
    const repo = repos.get(repoId);
    if (!repo) return respond(404, JSON.stringify({ error: "Repository not found" }));
    if (repo.gated && req.headers.get("authorization") !== `Bearer ${options.token}`) {
      return respond(401, JSON.stringify({ error: "Access to this repo is restricted" }));
    }
    const sha = resolveRev(repo, match[2]!);
    if (sha === undefined) return respond(404, JSON.stringify({ error: "Revision not found" }));
    const files = repo.commits[sha]!;
    if (api) {
      return respond(
        200,
        JSON.stringify({
          id: repoId,
          sha,
          siblings: Object.keys(files).map((rfilename) => ({ rfilename })),
        }),
        { "content-type": "application/json" },
      );
    }
    const name = match[3]!;
    if (!Object.hasOwn(files, name)) return respond(404, "Entry not found");
    const content = files[name]!;
    const bytes = typeof content === "string" ? encoder.encode(content) : content;
    return respond(200, bytes.slice(), {
      "content-type": "application/octet-stream",
      "content-length": String(bytes.length),
    });
  };

  const ready = Promise.withResolvers<Deno.NetAddr>();
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    onListen: (addr) => ready.resolve(addr as Deno.NetAddr),
  }, handle);
  return ready.promise.then((addr) => ({
    url: `http://127.0.0.1:${addr.port}`,
    requests,
    count: (kind) =>
      kind === undefined ? requests.length : requests.filter((r) => r.kind === kind).length,
    setRepo: (id, repo) => void repos.set(id, repo),
    failWith: (status) => void (failure = status),
    close: () => server.shutdown(),
  }));
}
