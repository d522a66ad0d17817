// The parse stage: an HTTP request's body, read within its size limit and validated as an
// OpenAI chat or completion request (the one door for untrusted request bodies).

import { readJsonBody } from "../http/body.ts";
import type { ChatCompletionRequest, CompletionRequest } from "../openai/types.ts";
import { validateChatRequest, validateCompletionRequest } from "../openai/validate.ts";

/** Which OpenAI API a request is for. */
export type EndpointKind = "chat" | "completion";

/** A validated OpenAI request. */
export type OpenAIRequest = ChatCompletionRequest | CompletionRequest;

/**
 * Reads and validates a generation request.
 *
 * @param request the HTTP request
 * @param kind the API it was sent to
 * @param maxBodyBytes the largest body accepted
 * @returns the validated request
 * @throws {RequestError} 413 past the size limit, 400 for malformed JSON or invalid fields
 * @example
 * ```ts ignore
 * const req = await parseRequest(request, "chat", 32 * 1024 * 1024);
 * ```
 */
export async function parseRequest(
  request: Request,
  kind: EndpointKind,
  maxBodyBytes: number,
): Promise<OpenAIRequest> {
  const body = await readJsonBody(request, maxBodyBytes);
  return kind === "chat" ? validateChatRequest(body) : validateCompletionRequest(body);
}
