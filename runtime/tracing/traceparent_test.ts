import assert from "node:assert/strict";
import { formatTraceparent, parseTraceparent } from "./traceparent.ts";

const TRACE = "0af7651916cd43dd8448eb211c80319c";
const SPAN = "b7ad6b7169203331";

Deno.test("parseTraceparent reads a W3C traceparent and formatTraceparent writes it back", () => {
  const value = `00-${TRACE}-${SPAN}-01`;
  const p = parseTraceparent(value);
  assert.deepEqual(p, { traceId: TRACE, spanId: SPAN, flags: 1 });
  assert.equal(formatTraceparent(p!), value);
  assert.equal(parseTraceparent(`00-${TRACE}-${SPAN}-00`)?.flags, 0);
});

Deno.test("parseTraceparent treats a malformed value as no parent", () => {
  for (
    const bad of [
      undefined,
      null,
      "",
      "garbage",
      `00-${TRACE}-${SPAN}`, // no flags
      `00-${TRACE.toUpperCase()}-${SPAN}-01`, // upper case
      `00-${"0".repeat(32)}-${SPAN}-01`, // all-zero trace id
      `00-${TRACE}-${"0".repeat(16)}-01`, // all-zero span id
      `ff-${TRACE}-${SPAN}-01`, // forbidden version
      `00-${TRACE}-${SPAN}-01-extra`, // version 00 has four fields
      `00-${TRACE}x-${SPAN}-01`,
      `00-${TRACE}-${SPAN}-01`.padEnd(600, "-"),
    ]
  ) {
    assert.equal(parseTraceparent(bad), undefined, `accepted ${JSON.stringify(bad)}`);
  }
  // A later version may carry more fields: read what version 00 defines.
  assert.equal(parseTraceparent(`01-${TRACE}-${SPAN}-01-more`)?.traceId, TRACE);
});
