// The reference's own bytes (captured by scripts/capture_reference.ts from ai-dynamo 1.6.1's
// frontend and mocker on loopback) decode, and encode back to the same bytes.

import assert from "node:assert/strict";
import fc from "fast-check";
import { decode as msgpack } from "@msgpack/msgpack";
import golden from "../../tests/golden/reference_1.6.1/wire.json" with { type: "json" };
import discovery from "../../tests/golden/reference_1.6.1/discovery.json" with { type: "json" };
import {
  encodeTcpRequest,
  encodeTwoPart,
  ReferenceWireError,
  TcpRequestDecoder,
  TwoPartDecoder,
} from "./reference_wire.ts";

const hex = (s: string) => Uint8Array.from(s.match(/../g) ?? [], (h) => parseInt(h, 16));
const json = (b: Uint8Array) => JSON.parse(new TextDecoder().decode(b));
const concat = (parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) out.set(p, at), at += p.length;
  return out;
};
const flows = golden.flows.map((f) => ({ ...f, bytes: hex(f.hex) }));
const requestFlow = flows.find((f) => f.to_is?.includes("v1/instances generate"))!;
const responseFlows = flows.filter((f) => f.from_is === null && f.to_is === null);

Deno.test("the reference frontend's TCP requests decode: path, headers, control header, msgpack body", () => {
  const requests = new TcpRequestDecoder().push(requestFlow.bytes);
  assert.equal(requests.length, 2);
  const record = Object.entries(discovery.etcd).find(([k]) =>
    k.startsWith("v1/instances/") && k.includes("/generate/")
  )![1] as { transport: { tcp: string } };
  const advertised = record.transport.tcp.slice(record.transport.tcp.indexOf("/") + 1);
  for (const req of requests) {
    assert.equal(req.endpointPath, advertised);
    assert.equal(req.headers["x-endpoint-path"], advertised);
    const [control] = new TwoPartDecoder().push(req.payload);
    const header = json(control!.header);
    assert.equal(header.id, req.headers["request-id"]);
    assert.equal(header.request_type, "single_in");
    assert.equal(header.response_type, "many_out");
    assert.equal(header.payload_codec, "msgpack");
    assert.equal(header.connection_info.transport, "tcp_server");
    const info = JSON.parse(header.connection_info.info);
    assert.equal(info.stream_type, "response");
    const body = msgpack(control!.body) as Record<string, unknown>;
    assert.equal(body.model, "Qwen3-0.6B");
    assert.ok(Array.isArray(body.token_ids) && body.token_ids.length > 0);
    assert.ok(typeof body.stop_conditions === "object");
  }
  // And back: byte for byte.
  assert.deepEqual(concat(requests.map(encodeTcpRequest)), requestFlow.bytes);
});

Deno.test("the reference mocker's response streams decode: handshake, prologue, items, the final one, the sentinel", () => {
  assert.equal(responseFlows.length, 2);
  for (const flow of responseFlows) {
    const frames = new TwoPartDecoder().push(flow.bytes);
    assert.equal(json(frames[0]!.header).stream_type, "response");
    assert.deepEqual(json(frames[1]!.header), { error: null });
    // Then items (empty header, msgpack body), the last saying complete_final, and a header-only
    // "sentinel" frame that ends the stream.
    assert.equal(json(frames.at(-1)!.header), "sentinel");
    assert.equal(frames.at(-1)!.body.length, 0);
    const items = frames.slice(2, -1).map((f) => {
      assert.equal(f.header.length, 0);
      return msgpack(f.body) as Record<string, unknown>;
    });
    assert.ok(items.length >= 3);
    for (const item of items.slice(0, -1)) {
      const data = (item.data as { data: { token_ids: number[] } }).data;
      assert.ok(Array.isArray(data.token_ids));
      assert.equal(item.complete_final, false);
    }
    assert.deepEqual(items.at(-1), { complete_final: true });
    assert.deepEqual(concat(frames.map(encodeTwoPart)), flow.bytes);
  }
});

Deno.test("the decoders give the same messages however the bytes are split", () => {
  const stream = responseFlows[0]!.bytes;
  const whole = new TwoPartDecoder().push(stream);
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: 1, max: stream.length - 1 }), { maxLength: 12 }),
      (cuts) => {
        const at = [0, ...new Set(cuts)].sort((a, b) => a - b);
        const d = new TwoPartDecoder();
        const got = at.flatMap((start, i) =>
          d.push(stream.subarray(start, at[i + 1] ?? stream.length))
        );
        assert.deepEqual(got, whole);
        assert.equal(d.pending, 0);
      },
    ),
  );
});

Deno.test("lengths past the limits and malformed headers are refused at the door", () => {
  const huge = new Uint8Array(24);
  new DataView(huge.buffer).setBigUint64(0, 1n << 40n);
  assert.throws(() => new TwoPartDecoder().push(huge), ReferenceWireError);
  const checksum = new Uint8Array(24);
  checksum[23] = 1;
  assert.throws(() => new TwoPartDecoder().push(checksum), /checksum/);
  const req = encodeTcpRequest({
    endpointPath: "a/b/c/d",
    headers: {},
    payload: new Uint8Array(10),
  });
  assert.throws(() => new TcpRequestDecoder(4).push(req), /exceeds 4/);
  const badHeaders = encodeTcpRequest({
    endpointPath: "a",
    headers: {},
    payload: new Uint8Array(0),
  });
  badHeaders.set(new TextEncoder().encode("[]"), 5);
  assert.throws(() => new TcpRequestDecoder().push(badHeaders), /not a JSON object/);
});

Deno.test("messages whole before a malformed one are delivered; the error comes next", () => {
  const good = encodeTwoPart({
    header: new TextEncoder().encode('"sentinel"'),
    body: new Uint8Array(0),
  });
  const bad = new Uint8Array(24);
  bad[23] = 1;
  const d = new TwoPartDecoder();
  assert.equal(d.push(concat([good, bad])).length, 1);
  assert.ok(d.failure instanceof ReferenceWireError);
  assert.throws(() => d.push(new Uint8Array(0)), /checksum/);
});
