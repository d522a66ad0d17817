/**
 * XXH3-64 (xxHash 0.8) in plain TypeScript, for block hashing on the routing path.
 *
 * Going through WASM costs about a microsecond per call in call overhead alone, more than
 * the hash itself for the short inputs block hashing uses (16 bytes for a chain step, 4
 * bytes per token for a block). This version works on 32-bit halves with doubles and
 * `Math.imul`, allocates nothing, and keeps BigInt out of the hot loop: results land in
 * an output word pair. It covers every input length; the test suite checks it against
 * hash-wasm's reference build.
 *
 * @module
 */

const INV32 = 1 / 4294967296;

// Results of the 64-bit helpers below (hi, lo as uint32), kept in module slots so the hot
// path allocates nothing.
let rH = 0;
let rL = 0;

// Primes, as hi/lo halves.
const P32_1 = 0x9e3779b1;
const P32_2 = 0x85ebca77;
const P32_3 = 0xc2b2ae3d;
const P64_1H = 0x9e3779b1, P64_1L = 0x85ebca87;
const P64_2H = 0xc2b2ae3d, P64_2L = 0x27d4eb4f;
const P64_3H = 0x165667b1, P64_3L = 0x9e3779f9;
const P64_4H = 0x85ebca77, P64_4L = 0xc2b2ae63;
const P64_5H = 0x27d4eb2f, P64_5L = 0x165667c5;
const MX1H = 0x16566791, MX1L = 0x9e3779f9;
const MX2H = 0x9fb21c65, MX2L = 0x1e98df25;

/** The default 192-byte secret of XXH3. */
const K_SECRET = new Uint8Array([
  0xb8,
  0xfe,
  0x6c,
  0x39,
  0x23,
  0xa4,
  0x4b,
  0xbe,
  0x7c,
  0x01,
  0x81,
  0x2c,
  0xf7,
  0x21,
  0xad,
  0x1c,
  0xde,
  0xd4,
  0x6d,
  0xe9,
  0x83,
  0x90,
  0x97,
  0xdb,
  0x72,
  0x40,
  0xa4,
  0xa4,
  0xb7,
  0xb3,
  0x67,
  0x1f,
  0xcb,
  0x79,
  0xe6,
  0x4e,
  0xcc,
  0xc0,
  0xe5,
  0x78,
  0x82,
  0x5a,
  0xd0,
  0x7d,
  0xcc,
  0xff,
  0x72,
  0x21,
  0xb8,
  0x08,
  0x46,
  0x74,
  0xf7,
  0x43,
  0x24,
  0x8e,
  0xe0,
  0x35,
  0x90,
  0xe6,
  0x81,
  0x3a,
  0x26,
  0x4c,
  0x3c,
  0x28,
  0x52,
  0xbb,
  0x91,
  0xc3,
  0x00,
  0xcb,
  0x88,
  0xd0,
  0x65,
  0x8b,
  0x1b,
  0x53,
  0x2e,
  0xa3,
  0x71,
  0x64,
  0x48,
  0x97,
  0xa2,
  0x0d,
  0xf9,
  0x4e,
  0x38,
  0x19,
  0xef,
  0x46,
  0xa9,
  0xde,
  0xac,
  0xd8,
  0xa8,
  0xfa,
  0x76,
  0x3f,
  0xe3,
  0x9c,
  0x34,
  0x3f,
  0xf9,
  0xdc,
  0xbb,
  0xc7,
  0xc7,
  0x0b,
  0x4f,
  0x1d,
  0x8a,
  0x51,
  0xe0,
  0x4b,
  0xcd,
  0xb4,
  0x59,
  0x31,
  0xc8,
  0x9f,
  0x7e,
  0xc9,
  0xd9,
  0x78,
  0x73,
  0x64,
  0xea,
  0xc5,
  0xac,
  0x83,
  0x34,
  0xd3,
  0xeb,
  0xc3,
  0xc5,
  0x81,
  0xa0,
  0xff,
  0xfa,
  0x13,
  0x63,
  0xeb,
  0x17,
  0x0d,
  0xdd,
  0x51,
  0xb7,
  0xf0,
  0xda,
  0x49,
  0xd3,
  0x16,
  0x55,
  0x26,
  0x29,
  0xd4,
  0x68,
  0x9e,
  0x2b,
  0x16,
  0xbe,
  0x58,
  0x7d,
  0x47,
  0xa1,
  0xfc,
  0x8f,
  0xf8,
  0xb8,
  0xd1,
  0x7a,
  0xd0,
  0x31,
  0xce,
  0x45,
  0xcb,
  0x3a,
  0x8f,
  0x95,
  0x16,
  0x04,
  0x28,
  0xaf,
  0xd7,
  0xfb,
  0xca,
  0xbb,
  0x4b,
  0x40,
  0x7e,
]);
const SECRET_SIZE = 192;

/** 64-bit words of a secret at every byte offset (unaligned reads become two loads). */
interface SecretWords {
  hi: Uint32Array;
  lo: Uint32Array;
}

function secretWords(bytes: Uint8Array): SecretWords {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const n = bytes.length - 7;
  const hi = new Uint32Array(n);
  const lo = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    lo[i] = view.getUint32(i, true);
    hi[i] = view.getUint32(i + 4, true);
  }
  return { hi, lo };
}

const K = secretWords(K_SECRET);
const KH = K.hi;
const KL = K.lo;

/** Low 64 bits of a 64x64 product into (rH, rL). */
function mul64(aH: number, aL: number, bH: number, bL: number): void {
  const lo = Math.imul(aL, bL) >>> 0;
  const carry = ((aL * bL - lo) * INV32 + 0.5) >>> 0;
  rH = (carry + Math.imul(aL, bH) + Math.imul(aH, bL)) >>> 0;
  rL = lo;
}

/** The 128-bit product of two u64, its halves xored together, into (rH, rL). */
function mul128fold64(aH: number, aL: number, bH: number, bL: number): void {
  const p0L = Math.imul(aL, bL) >>> 0;
  const p0H = ((aL * bL - p0L) * INV32 + 0.5) >>> 0;
  const p1L = Math.imul(aL, bH) >>> 0;
  const p1H = ((aL * bH - p1L) * INV32 + 0.5) >>> 0;
  const p2L = Math.imul(aH, bL) >>> 0;
  const p2H = ((aH * bL - p2L) * INV32 + 0.5) >>> 0;
  const p3L = Math.imul(aH, bH) >>> 0;
  const p3H = ((aH * bH - p3L) * INV32 + 0.5) >>> 0;
  const mid = p0H + p1L + p2L; // < 3 * 2^32: exact
  const s = p3L + p1H + p2H + ((mid * INV32) >>> 0);
  rH = ((mid >>> 0) ^ (p3H + ((s * INV32) >>> 0))) >>> 0;
  rL = (p0L ^ s) >>> 0;
}

function bswap32(x: number): number {
  return (((x & 0xff) << 24) | ((x & 0xff00) << 8) | ((x >>> 8) & 0xff00) | (x >>> 24)) >>> 0;
}

/** XXH3_avalanche of (h, l) into (rH, rL). */
function avalanche(h: number, l: number): void {
  l = (l ^ (h >>> 5)) >>> 0;
  mul64(h, l, MX1H, MX1L);
  rL = (rL ^ rH) >>> 0;
}

/** XXH64_avalanche of (h, l) into (rH, rL). */
function avalanche64(h: number, l: number): void {
  l = (l ^ (h >>> 1)) >>> 0;
  mul64(h, l, P64_2H, P64_2L);
  h = rH;
  l = (rL ^ ((rL >>> 29) | (rH << 3))) >>> 0;
  h = (h ^ (h >>> 29)) >>> 0;
  mul64(h, l, P64_3H, P64_3L);
  rL = (rL ^ rH) >>> 0;
}

/** XXH3_rrmxmx of (h, l) into (rH, rL). */
function rrmxmx(h: number, l: number, len: number): void {
  // h ^= rotl64(h, 49) ^ rotl64(h, 24)
  const r49H = (l << 17) | (h >>> 15);
  const r49L = (h << 17) | (l >>> 15);
  const r24H = (h << 24) | (l >>> 8);
  const r24L = (l << 24) | (h >>> 8);
  h = (h ^ r49H ^ r24H) >>> 0;
  l = (l ^ r49L ^ r24L) >>> 0;
  mul64(h, l, MX2H, MX2L);
  h = rH;
  l = (rL ^ ((rH >>> 3) + len)) >>> 0;
  mul64(h, l, MX2H, MX2L);
  rL = (rL ^ ((rL >>> 28) | (rH << 4))) >>> 0;
  rH = (rH ^ (rH >>> 28)) >>> 0;
}

/**
 * XXH3_mix16B: 16 input bytes at `off` against the secret at `so`, with the seed, into
 * (rH, rL).
 */
function mix16B(view: DataView, off: number, so: number, sH: number, sL: number): void {
  // (secret_lo + seed) and (secret_hi - seed)
  let t = KL[so]! + sL;
  const aL = (view.getUint32(off, true) ^ t) >>> 0;
  const aH = (view.getUint32(off + 4, true) ^ (KH[so]! + sH + (t > 0xffffffff ? 1 : 0))) >>> 0;
  t = KL[so + 8]! - sL;
  const bL = (view.getUint32(off + 8, true) ^ t) >>> 0;
  const bH = (view.getUint32(off + 12, true) ^ (KH[so + 8]! - sH - (t < 0 ? 1 : 0))) >>> 0;
  mul128fold64(aH, aL, bH, bL);
}

// Accumulator of the 17..240-byte paths.
let accH = 0;
let accL = 0;

function accAdd(h: number, l: number): void {
  const lo = accL + l;
  accL = lo >>> 0;
  accH = (accH + h + (lo > 0xffffffff ? 1 : 0)) >>> 0;
}

function lenTimesP64_1(len: number): void {
  mul64(0, len, P64_1H, P64_1L);
  accH = rH;
  accL = rL;
}

function len0to16(view: DataView, off: number, len: number, sH: number, sL: number): void {
  if (len > 8) {
    // bitflip1 = (s24 ^ s32) + seed; bitflip2 = (s40 ^ s48) - seed
    let t = ((KL[24]! ^ KL[32]!) >>> 0) + sL;
    const f1L = t >>> 0;
    const f1H = (((KH[24]! ^ KH[32]!) >>> 0) + sH + (t > 0xffffffff ? 1 : 0)) >>> 0;
    t = ((KL[40]! ^ KL[48]!) >>> 0) - sL;
    const f2L = t >>> 0;
    const f2H = (((KH[40]! ^ KH[48]!) >>> 0) - sH - (t < 0 ? 1 : 0)) >>> 0;
    const loL = (view.getUint32(off, true) ^ f1L) >>> 0;
    const loH = (view.getUint32(off + 4, true) ^ f1H) >>> 0;
    const hiL = (view.getUint32(off + len - 8, true) ^ f2L) >>> 0;
    const hiH = (view.getUint32(off + len - 4, true) ^ f2H) >>> 0;
    // acc = len + swap64(lo) + hi + mul128fold64(lo, hi)
    mul128fold64(loH, loL, hiH, hiL);
    let l = len + bswap32(loH) + hiL + rL;
    const h = bswap32(loL) + hiH + rH + Math.floor(l * INV32);
    l = l >>> 0;
    avalanche(h >>> 0, l);
    return;
  }
  if (len >= 4) {
    const seedH = (sH ^ bswap32(sL)) >>> 0;
    const in1 = view.getUint32(off, true);
    const in2 = view.getUint32(off + len - 4, true);
    // bitflip = (s8 ^ s16) - seed
    const t = ((KL[8]! ^ KL[16]!) >>> 0) - sL;
    const fL = t >>> 0;
    const fH = (((KH[8]! ^ KH[16]!) >>> 0) - seedH - (t < 0 ? 1 : 0)) >>> 0;
    rrmxmx((in1 ^ fH) >>> 0, (in2 ^ fL) >>> 0, len);
    return;
  }
  if (len > 0) {
    const c1 = view.getUint8(off);
    const c2 = view.getUint8(off + (len >>> 1));
    const c3 = view.getUint8(off + len - 1);
    const combined = ((c1 << 16) | (c2 << 24) | c3 | (len << 8)) >>> 0;
    // bitflip = (u64)(s0_32 ^ s4_32) + seed
    const t = ((KL[0]! ^ KL[4]!) >>> 0) + sL;
    const fH = (sH + (t > 0xffffffff ? 1 : 0)) >>> 0;
    avalanche64(fH, (combined ^ t) >>> 0);
    return;
  }
  avalanche64((sH ^ KH[56]! ^ KH[64]!) >>> 0, (sL ^ KL[56]! ^ KL[64]!) >>> 0);
}

function len17to128(view: DataView, off: number, len: number, sH: number, sL: number): void {
  // acc = len * P64_1 + sum of mix16B over pairs of 16-byte lanes from both ends. Inlined
  // with locals: this is the path of every block hash at block sizes 5..32.
  let accL = Math.imul(len, P64_1L) >>> 0;
  let accH = ((((len * P64_1L - accL) * INV32 + 0.5) >>> 0) + Math.imul(len, P64_1H)) >>> 0;
  const rounds = len > 96 ? 4 : len > 64 ? 3 : len > 32 ? 2 : 1;
  for (let i = 0; i < 2 * rounds; i++) {
    const io = (i & 1) === 0 ? off + 8 * i : off + len - 8 * (i + 1);
    const so = 16 * i;
    let t = KL[so]! + sL;
    const aL = (view.getUint32(io, true) ^ t) >>> 0;
    const aH = (view.getUint32(io + 4, true) ^ (KH[so]! + sH + (t > 0xffffffff ? 1 : 0))) >>> 0;
    t = KL[so + 8]! - sL;
    const bL = (view.getUint32(io + 8, true) ^ t) >>> 0;
    const bH = (view.getUint32(io + 12, true) ^ (KH[so + 8]! - sH - (t < 0 ? 1 : 0))) >>> 0;
    // mul128fold64(a, b), see there
    const p0L = Math.imul(aL, bL) >>> 0;
    const p0H = ((aL * bL - p0L) * INV32 + 0.5) >>> 0;
    const p1L = Math.imul(aL, bH) >>> 0;
    const p1H = ((aL * bH - p1L) * INV32 + 0.5) >>> 0;
    const p2L = Math.imul(aH, bL) >>> 0;
    const p2H = ((aH * bL - p2L) * INV32 + 0.5) >>> 0;
    const p3L = Math.imul(aH, bH) >>> 0;
    const p3H = ((aH * bH - p3L) * INV32 + 0.5) >>> 0;
    const mid = p0H + p1L + p2L;
    const m = p3L + p1H + p2H + ((mid * INV32) >>> 0);
    const lo = accL + ((p0L ^ m) >>> 0);
    accL = lo >>> 0;
    accH = (accH + (((mid >>> 0) ^ (p3H + ((m * INV32) >>> 0))) >>> 0) +
      (lo > 0xffffffff ? 1 : 0)) >>> 0;
  }
  avalanche(accH, accL);
}

function len129to240(view: DataView, off: number, len: number, sH: number, sL: number): void {
  lenTimesP64_1(len);
  for (let i = 0; i < 8; i++) {
    mix16B(view, off + 16 * i, 16 * i, sH, sL);
    accAdd(rH, rL);
  }
  avalanche(accH, accL);
  const aH = rH;
  const aL = rL;
  // acc_end = last 16 bytes + rounds 8.. against the secret shifted by 3
  mix16B(view, off + len - 16, 136 - 17, sH, sL);
  accH = rH;
  accL = rL;
  const rounds = len >>> 4;
  for (let i = 8; i < rounds; i++) {
    mix16B(view, off + 16 * i, 16 * (i - 8) + 3, sH, sL);
    accAdd(rH, rL);
  }
  accAdd(aH, aL);
  avalanche(accH, accL);
}

// The long path keeps eight 64-bit accumulators.
const ACC = new Uint32Array(16); // [h0, l0, h1, l1, ...]
// deno-fmt-ignore
const ACC_INIT = [
  0, P32_3, P64_1H, P64_1L, P64_2H, P64_2L, P64_3H, P64_3L,
  P64_4H, P64_4L, 0, P32_2, P64_5H, P64_5L, 0, P32_1,
];

/** Secrets derived from non-zero seeds for the long path, by seed. */
const derived = new Map<string, SecretWords>();
// The last seed's secret: a prompt's blocks all hash with one seed, so most calls skip the map
// (and the key string it needs).
let lastSeedH = 0;
let lastSeedL = 0;
let lastSecret: SecretWords | undefined;

function derivedSecret(sH: number, sL: number): SecretWords {
  if (lastSecret !== undefined && sH === lastSeedH && sL === lastSeedL) return lastSecret;
  lastSecret = derivedSecretOf(sH, sL);
  lastSeedH = sH;
  lastSeedL = sL;
  return lastSecret;
}

function derivedSecretOf(sH: number, sL: number): SecretWords {
  const key = `${sH}:${sL}`;
  let s = derived.get(key);
  if (!s) {
    const bytes = new Uint8Array(SECRET_SIZE);
    const out = new DataView(bytes.buffer);
    for (let i = 0; i < SECRET_SIZE; i += 16) {
      let t = KL[i]! + sL;
      out.setUint32(i, t >>> 0, true);
      out.setUint32(i + 4, (KH[i]! + sH + (t > 0xffffffff ? 1 : 0)) >>> 0, true);
      t = KL[i + 8]! - sL;
      out.setUint32(i + 8, t >>> 0, true);
      out.setUint32(i + 12, (KH[i + 8]! - sH - (t < 0 ? 1 : 0)) >>> 0, true);
    }
    s = secretWords(bytes);
    if (derived.size > 256) derived.clear();
    derived.set(key, s);
  }
  return s;
}

function accumulate512(view: DataView, off: number, sec: SecretWords, so: number): void {
  const secH = sec.hi;
  const secL = sec.lo;
  for (let i = 0; i < 8; i++) {
    const dL = view.getUint32(off + 8 * i, true);
    const dH = view.getUint32(off + 8 * i + 4, true);
    // acc[i ^ 1] += data
    const j = (i ^ 1) * 2;
    let lo = ACC[j + 1]! + dL;
    ACC[j + 1] = lo;
    ACC[j] = ACC[j]! + dH + (lo > 0xffffffff ? 1 : 0);
    // acc[i] += lo32(key) * hi32(key), the full 64-bit product: the double product is off by
    // at most 2^11, and the exact low word (Math.imul) pins the high word. In locals: through
    // the module's result slots this loop took 1.5x as long, and block hashes at 64 tokens
    // per block spend most of their time here.
    const kL = (dL ^ secL[so + 8 * i]!) >>> 0;
    const kH = (dH ^ secH[so + 8 * i]!) >>> 0;
    const pL = Math.imul(kL, kH) >>> 0;
    const pH = ((kL * kH - pL) * INV32 + 0.5) >>> 0;
    lo = ACC[2 * i + 1]! + pL;
    ACC[2 * i + 1] = lo;
    ACC[2 * i] = ACC[2 * i]! + pH + (lo > 0xffffffff ? 1 : 0);
  }
}

function scramble(sec: SecretWords, so: number): void {
  for (let i = 0; i < 8; i++) {
    let h = ACC[2 * i]!;
    let l = ACC[2 * i + 1]!;
    l = (l ^ (h >>> 15)) >>> 0; // acc ^= acc >> 47
    h = (h ^ sec.hi[so + 8 * i]!) >>> 0;
    l = (l ^ sec.lo[so + 8 * i]!) >>> 0;
    mul64(h, l, 0, P32_1);
    ACC[2 * i] = rH;
    ACC[2 * i + 1] = rL;
  }
}

function hashLong(view: DataView, off: number, len: number, sH: number, sL: number): void {
  const sec = sH === 0 && sL === 0 ? K : derivedSecret(sH, sL);
  ACC.set(ACC_INIT);
  const stripesPerBlock = (SECRET_SIZE - 64) / 8;
  const blockLen = 64 * stripesPerBlock;
  const blocks = Math.floor((len - 1) / blockLen);
  for (let n = 0; n < blocks; n++) {
    for (let s = 0; s < stripesPerBlock; s++) {
      accumulate512(view, off + n * blockLen + s * 64, sec, s * 8);
    }
    scramble(sec, SECRET_SIZE - 64);
  }
  const stripes = Math.floor((len - 1 - blockLen * blocks) / 64);
  for (let s = 0; s < stripes; s++) {
    accumulate512(view, off + blocks * blockLen + s * 64, sec, s * 8);
  }
  accumulate512(view, off + len - 64, sec, SECRET_SIZE - 64 - 7);
  // merge: len * P64_1 plus mul128fold64 of each accumulator pair with the secret, inlined
  // with locals as in len17to128 (every block hash at 64 tokens per block ends here)
  let accL = Math.imul(len, P64_1L) >>> 0;
  let accH = ((((len * P64_1L - accL) * INV32 + 0.5) >>> 0) + Math.imul(len, P64_1H)) >>> 0;
  const secH = sec.hi;
  const secL = sec.lo;
  for (let i = 0; i < 4; i++) {
    const so = 11 + 16 * i;
    const aH = (ACC[4 * i]! ^ secH[so]!) >>> 0;
    const aL = (ACC[4 * i + 1]! ^ secL[so]!) >>> 0;
    const bH = (ACC[4 * i + 2]! ^ secH[so + 8]!) >>> 0;
    const bL = (ACC[4 * i + 3]! ^ secL[so + 8]!) >>> 0;
    const p0L = Math.imul(aL, bL) >>> 0;
    const p0H = ((aL * bL - p0L) * INV32 + 0.5) >>> 0;
    const p1L = Math.imul(aL, bH) >>> 0;
    const p1H = ((aL * bH - p1L) * INV32 + 0.5) >>> 0;
    const p2L = Math.imul(aH, bL) >>> 0;
    const p2H = ((aH * bL - p2L) * INV32 + 0.5) >>> 0;
    const p3L = Math.imul(aH, bH) >>> 0;
    const p3H = ((aH * bH - p3L) * INV32 + 0.5) >>> 0;
    const mid = p0H + p1L + p2L;
    const m = p3L + p1H + p2H + ((mid * INV32) >>> 0);
    const lo = accL + ((p0L ^ m) >>> 0);
    accL = lo >>> 0;
    accH = (accH + (((mid >>> 0) ^ (p3H + ((m * INV32) >>> 0))) >>> 0) +
      (lo > 0xffffffff ? 1 : 0)) >>> 0;
  }
  avalanche(accH, accL);
}

/**
 * XXH3-64 of `len` bytes of `view` at `offset`, seeded with the 64-bit seed
 * `seedHi * 2^32 + seedLo`; writes the hash's high and low 32-bit words to
 * `out[at]` and `out[at + 1]`.
 *
 * @param view the input
 * @param offset where the input starts in `view`
 * @param len how many bytes to hash
 * @param seedHi high 32 bits of the seed
 * @param seedLo low 32 bits of the seed
 * @param out receives the hash as [hi, lo]
 * @param at index of the hi word in `out`
 */
export function xxh3Into(
  view: DataView,
  offset: number,
  len: number,
  seedHi: number,
  seedLo: number,
  out: Uint32Array,
  at: number,
): void {
  const sH = seedHi >>> 0;
  const sL = seedLo >>> 0;
  if (len <= 16) len0to16(view, offset, len, sH, sL);
  else if (len <= 128) len17to128(view, offset, len, sH, sL);
  else if (len <= 240) len129to240(view, offset, len, sH, sL);
  else hashLong(view, offset, len, sH, sL);
  out[at] = rH;
  out[at + 1] = rL;
}

/**
 * XXH3-64 of the 16 bytes `a || b`, each a u64 written little-endian (a chain step of
 * sequence hashes), without going through memory; writes [hi, lo] to `out[at]`.
 *
 * @param aH high word of the first u64
 * @param aL low word of the first u64
 * @param bH high word of the second u64
 * @param bL low word of the second u64
 * @param seedHi high 32 bits of the seed
 * @param seedLo low 32 bits of the seed
 * @param out receives the hash as [hi, lo]
 * @param at index of the hi word in `out`
 */
export function xxh3Pair(
  aH: number,
  aL: number,
  bH: number,
  bL: number,
  seedHi: number,
  seedLo: number,
  out: Uint32Array,
  at: number,
): void {
  const sH = seedHi >>> 0;
  const sL = seedLo >>> 0;
  // The 9..16-byte path at len 16: lo = first u64, hi = last u64.
  let t = ((KL[24]! ^ KL[32]!) >>> 0) + sL;
  const loL = (aL ^ t) >>> 0;
  const loH = (aH ^ (((KH[24]! ^ KH[32]!) >>> 0) + sH + (t > 0xffffffff ? 1 : 0))) >>> 0;
  t = ((KL[40]! ^ KL[48]!) >>> 0) - sL;
  const hiL = (bL ^ t) >>> 0;
  const hiH = (bH ^ (((KH[40]! ^ KH[48]!) >>> 0) - sH - (t < 0 ? 1 : 0))) >>> 0;
  mul128fold64(loH, loL, hiH, hiL);
  const l = 16 + bswap32(loH) + hiL + rL;
  avalanche((bswap32(loL) + hiH + rH + Math.floor(l * INV32)) >>> 0, l >>> 0);
  out[at] = rH;
  out[at + 1] = rL;
}

const scratch = new Uint32Array(2);

/**
 * XXH3-64 of `bytes` with a 64-bit seed.
 *
 * @param bytes the input
 * @param seed a seed in [0, 2^64) (default 0)
 * @returns the hash
 * @example
 * ```ts
 * xxh3_64(new TextEncoder().encode("abc"), 1337n);
 * ```
 */
export function xxh3_64(bytes: Uint8Array, seed: bigint = 0n): bigint {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const s = BigInt.asUintN(64, seed);
  xxh3Into(view, 0, bytes.length, Number(s >> 32n), Number(s & 0xffffffffn), scratch, 0);
  return (BigInt(scratch[0]!) << 32n) | BigInt(scratch[1]!);
}
