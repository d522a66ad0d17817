// Reading a request body with a size limit: 413 past it, 400 for malformed JSON.

import { RequestError } from "../openai/errors.ts";

/** Strict UTF-8 (a bad byte is an error, not U+FFFD); stateless between calls. */
const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Reads and parses a JSON body of at most `limit` bytes. */
export async function readJsonBody(request: Request, limit: number): Promise<unknown> {
  const declared = Number(request.headers.get("content-length") ?? NaN);
  if (declared > limit) throw tooLarge(limit);
  // A declared length within the limit: take the body in one operation (the common case),
  // without touching `request.body`: that getter makes a stream, and reading through it costs
  // several times the direct read. A client that sends more than it declared is cut off by
  // the HTTP server itself.
  let bytes: Uint8Array;
  try {
    if (declared >= 0) bytes = await request.bytes();
    else if (!request.body) throw empty();
    else bytes = await readLimited(request.body, limit);
  } catch (err) {
    if (err instanceof RequestError) throw err;
    // The connection ended before the body did (a client that stopped sending).
    throw new RequestError(
      400,
      "request body could not be read in full (the client stopped sending)",
      { code: "incomplete_body", cause: err },
    );
  }
  if (bytes.length > limit) throw tooLarge(limit);
  if (bytes.length === 0) throw empty();
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new RequestError(400, "request body is not valid UTF-8", { code: "invalid_json" });
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    if (text.trim() === "") throw empty(); // checked only here: no copy of every body
    throw new RequestError(400, `request body is not valid JSON: ${(err as Error).message}`, {
      code: "invalid_json",
    });
  }
}

/** Reads a body of unknown length (chunked), stopping past `limit`. */
async function readLimited(body: ReadableStream<Uint8Array>, limit: number): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.length;
      if (size > limit) {
        await reader.cancel().catch(() => {});
        throw tooLarge(limit);
      }
      chunks.push(value);
    }
  } finally {
    reader.releaseLock();
  }
  const bytes = new Uint8Array(size);
  let off = 0;
  for (const c of chunks) {
    bytes.set(c, off);
    off += c.length;
  }
  return bytes;
}

function empty(): RequestError {
  return new RequestError(400, "request body is empty; expected JSON", { code: "invalid_json" });
}

function tooLarge(limit: number): RequestError {
  return new RequestError(413, `request body is larger than the limit of ${limit} bytes`, {
    type: "invalid_request_error",
    code: "request_too_large",
  });
}
