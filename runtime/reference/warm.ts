// The reference wire's per-request code run once on a synthetic request and answer, so that V8
// has compiled it before the first real request needs it (a cold process spent ~6 ms encoding
// its first long prompt where a warm one spends under 0.5: BENCHMARKS.md).

import { encodeTwoPart, TwoPartDecoder } from "../transport/reference_wire.ts";
import { msgpackDecode, msgpackEncode } from "./_msgpack.ts";
import { parseReferenceStreamItem } from "./request.ts";

const encoder = new TextEncoder();

/**
 * Sends `request` through the reference wire's encoders and one answer item back through its
 * decoders, in memory: no socket, no state kept. What it runs is what `ReferenceClient.generate`
 * runs per request and per item.
 *
 * @param request a request body as a reference worker takes it (msgpack-encoded)
 * @param outputTokens how many token ids the synthetic answer item carries
 * @returns the answer item as parsed (for a caller that checks the round trip)
 */
export function warmReferenceWire(request: unknown, outputTokens = 4): unknown {
  const header = encoder.encode(JSON.stringify({
    id: "warm-up",
    request_type: "single_in",
    response_type: "many_out",
    payload_codec: "msgpack",
  }));
  const sent = encodeTwoPart({ header, body: msgpackEncode(request) });
  const item = msgpackEncode({
    data: {
      data: {
        token_ids: Array.from({ length: outputTokens }, (_, i) => 1000 + i),
        finish_reason: null,
      },
    },
    complete_final: false,
  });
  const decoder = new TwoPartDecoder();
  let parsed: unknown;
  for (const msg of decoder.push(sent)) msgpackDecode(msg.body);
  for (const msg of decoder.push(encodeTwoPart({ header: new Uint8Array(0), body: item }))) {
    parsed = parseReferenceStreamItem(msgpackDecode(msg.body));
  }
  return parsed;
}
