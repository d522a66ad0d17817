// Headless Chromium for tests: finds it (installing Debian's `chromium` with apt-get when it
// is missing), opens a page through the DevTools protocol, and returns its screenshot with
// every console error, uncaught exception and failed load the page produced.

import { findBinary } from "./servers.ts";
import { eachLine } from "./process.ts";

const NAMES = ["chromium", "chromium-browser", "google-chrome"];

/**
 * The Chromium binary, installed with apt-get (`chromium`) when none is on PATH.
 *
 * @returns its path, or why there is none (the caller skips with that message)
 */
export async function ensureChromium(): Promise<{ path?: string; why?: string }> {
  const found = NAMES.map((n) => findBinary(n)).find((p) => p !== undefined);
  if (found) return { path: found };
  const sudo = Deno.uid() === 0 ? [] : ["sudo"];
  const apt = async (args: string[]) => {
    const cmd = [...sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", ...args];
    const out = await new Deno.Command(cmd[0]!, {
      args: cmd.slice(1),
      stdout: "null",
      stderr: "piped",
      signal: AbortSignal.timeout(600_000),
    }).output().catch((e: unknown) => ({
      success: false,
      stderr: new TextEncoder().encode(String(e)),
    }));
    return { ok: out.success, err: new TextDecoder().decode(out.stderr).trim().slice(-300) };
  };
  const update = await apt(["update"]);
  const install = update.ok ? await apt(["install", "-y", "chromium"]) : update;
  const path = NAMES.map((n) => findBinary(n)).find((p) => p !== undefined);
  if (path) return { path };
  return { why: `chromium is not installed and apt-get could not install it: ${install.err}` };
}

/** What one page load produced. */
export interface PageCapture {
  /** PNG of the whole page. */
  png: Uint8Array;
  /** Console errors, uncaught exceptions and failed loads, as text. */
  errors: string[];
  /** The value of `evaluate`, when given. */
  value: unknown;
}

/** Options of {@linkcode capturePage}. */
export interface CapturePageOptions {
  /** Viewport width in CSS pixels (default 1000). */
  width?: number;
  /** An expression evaluated in the page after load (its JSON-able value is returned). */
  evaluate?: string;
  /** Deadline for the whole capture in ms (default 60000). */
  timeoutMs?: number;
}

/**
 * Loads `url` in a fresh headless Chromium and captures it.
 *
 * @throws {Error} Chromium did not start, the page did not load, or the deadline passed
 */
export async function capturePage(
  chromium: string,
  url: string,
  options: CapturePageOptions = {},
): Promise<PageCapture> {
  const deadline = AbortSignal.timeout(options.timeoutMs ?? 60_000);
  const profile = await Deno.makeTempDir({ prefix: "dynamo-chromium-" });
  const child = new Deno.Command(chromium, {
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-dev-shm-usage",
      "--no-first-run",
      "--hide-scrollbars",
      `--user-data-dir=${profile}`,
      "--remote-debugging-port=0",
      `--window-size=${options.width ?? 1000},800`,
      "about:blank",
    ],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let ws: WebSocket | undefined;
  try {
    const stderr: string[] = [];
    const endpoint = new Promise<string>((resolve, reject) => {
      eachLine(child.stderr, (line) => {
        stderr.push(line);
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(line);
        if (m) resolve(m[1]!);
      }).then(
        () => reject(new Error(`chromium exited before DevTools listened:\n${stderr.join("\n")}`)),
        reject,
      );
    });
    const browserWs = await race(endpoint, deadline, "chromium's DevTools endpoint");
    const { host } = new URL(browserWs);
    const list = await race(
      fetch(`http://${host}/json/list`, { signal: deadline }).then((r) => r.json()),
      deadline,
      "the DevTools page list",
    ) as { type: string; webSocketDebuggerUrl: string }[];
    const page = list.find((t) => t.type === "page");
    if (!page) throw new Error("chromium has no page target");
    ws = new WebSocket(page.webSocketDebuggerUrl);
    const cdp = await race(connect(ws), deadline, "the DevTools connection");
    const errors: string[] = [];
    let loaded!: () => void;
    const load = new Promise<void>((r) => loaded = r);
    cdp.on = (method, params) => {
      if (method === "Runtime.consoleAPICalled" && params.type === "error") {
        const args = params.args as { value?: unknown; description?: string }[];
        errors.push(`console.error: ${args.map((a) => a.description ?? a.value).join(" ")}`);
      } else if (method === "Runtime.exceptionThrown") {
        const d = params.exceptionDetails as { text: string; exception?: { description?: string } };
        errors.push(`exception: ${d.exception?.description ?? d.text}`);
      } else if (method === "Log.entryAdded") {
        const e = params.entry as { level: string; text: string; url?: string };
        if (e.level === "error") errors.push(`log: ${e.text} ${e.url ?? ""}`.trim());
      } else if (method === "Page.loadEventFired") loaded();
    };
    await cdp.send("Page.enable");
    await cdp.send("Runtime.enable");
    await cdp.send("Log.enable");
    const nav = await cdp.send("Page.navigate", { url }) as { errorText?: string };
    if (nav.errorText) throw new Error(`cannot load ${url}: ${nav.errorText}`);
    await race(load, deadline, `the load event of ${url}`);
    let value: unknown = undefined;
    if (options.evaluate) {
      const r = await cdp.send("Runtime.evaluate", {
        expression: options.evaluate,
        returnByValue: true,
      }) as { result: { value?: unknown }; exceptionDetails?: { text: string } };
      if (r.exceptionDetails) errors.push(`evaluate: ${r.exceptionDetails.text}`);
      value = r.result.value;
    }
    const shot = await race(
      cdp.send("Page.captureScreenshot", { format: "png", captureBeyondViewport: true }),
      deadline,
      "the screenshot",
    ) as { data: string };
    const png = Uint8Array.from(atob(shot.data), (c) => c.charCodeAt(0));
    return { png, errors, value };
  } finally {
    ws?.close();
    try {
      child.kill("SIGKILL");
    } catch {
      // already exited
    }
    await child.status;
    await Deno.remove(profile, { recursive: true }).catch(() => {});
  }
}

interface Cdp {
  send(method: string, params?: Record<string, unknown>): Promise<unknown>;
  on: (method: string, params: Record<string, unknown>) => void;
}

function connect(ws: WebSocket): Promise<Cdp> {
  return new Promise((resolve, reject) => {
    let next = 1;
    const pending = new Map<number, { ok: (v: unknown) => void; fail: (e: Error) => void }>();
    const cdp: Cdp = {
      send: (method, params = {}) =>
        new Promise((ok, fail) => {
          const id = next++;
          pending.set(id, { ok, fail });
          ws.send(JSON.stringify({ id, method, params }));
        }),
      on: () => {},
    };
    ws.onmessage = (ev) => {
      const msg = JSON.parse(String(ev.data));
      if (msg.id !== undefined) {
        const p = pending.get(msg.id);
        pending.delete(msg.id);
        if (msg.error) p?.fail(new Error(`${msg.error.message} (${msg.error.code})`));
        else p?.ok(msg.result);
      } else cdp.on(msg.method, msg.params ?? {});
    };
    ws.onopen = () => resolve(cdp);
    ws.onerror = () => reject(new Error("DevTools WebSocket error"));
    ws.onclose = () => {
      for (const p of pending.values()) p.fail(new Error("DevTools WebSocket closed"));
      pending.clear();
    };
  });
}

function race<T>(p: Promise<T>, signal: AbortSignal, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new Error(`timed out waiting for ${what}`));
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
