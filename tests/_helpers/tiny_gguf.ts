// A tiny random-weight llama-architecture GGUF, written from the format spec, for fast and
// deterministic llama.cpp tests: a byte-level BPE vocabulary both llama.cpp and our GGUF tokenizer
// loader accept, a ChatML template, and seeded weights (the same bytes for the same options).

import { createHash } from "node:crypto";
import { GgufType } from "../../llm/model/gguf.ts";

// --- the GGUF v3 writer -----------------------------------------------------------------------

/** A scalar metadata type (everything but strings and arrays). */
export type GgufScalarType = Exclude<GgufType, typeof GgufType.STRING | typeof GgufType.ARRAY>;

/** One metadata value with its GGUF type. */
export type GgufValue =
  | { type: typeof GgufType.STRING; value: string }
  | { type: typeof GgufType.BOOL; value: boolean }
  | { type: Exclude<GgufScalarType, typeof GgufType.BOOL>; value: number | bigint }
  | {
    type: typeof GgufType.ARRAY;
    itemType: Exclude<GgufType, typeof GgufType.ARRAY>;
    value: readonly (string | number | bigint | boolean)[];
  };

/** ggml tensor types this writer stores. */
export const GgmlType = { F32: 0, F16: 1 } as const;
/** One of the values of {@linkcode GgmlType}. */
export type GgmlType = typeof GgmlType[keyof typeof GgmlType];

/** A tensor to write. */
export interface GgufTensor {
  /** `token_embd.weight`, `blk.0.attn_q.weight`, ... */
  name: string;
  /** ggml's order: `dims[0]` varies fastest (a `[n_embd, n_vocab]` matrix has n_vocab rows). */
  dims: readonly number[];
  /** How the values are stored. */
  type: GgmlType;
  /** The values, row-major in ggml's order; `dims`' product of them. */
  data: Float32Array;
}

/** Options of {@linkcode encodeGguf}. */
export interface EncodeGgufOptions {
  /** Tensor data alignment (default 32, GGUF's default; written as `general.alignment`). */
  alignment?: number;
}

const SCALAR_SIZE: Record<GgufScalarType, number> = {
  [GgufType.UINT8]: 1,
  [GgufType.INT8]: 1,
  [GgufType.UINT16]: 2,
  [GgufType.INT16]: 2,
  [GgufType.UINT32]: 4,
  [GgufType.INT32]: 4,
  [GgufType.FLOAT32]: 4,
  [GgufType.BOOL]: 1,
  [GgufType.UINT64]: 8,
  [GgufType.INT64]: 8,
  [GgufType.FLOAT64]: 8,
};

/** A growable little-endian byte buffer. */
class ByteWriter {
  #buf = new Uint8Array(1 << 16);
  #view = new DataView(this.#buf.buffer);
  #len = 0;
  readonly #encoder = new TextEncoder();

  get length(): number {
    return this.#len;
  }

  #room(n: number): number {
    if (this.#len + n > this.#buf.length) {
      const next = new Uint8Array(Math.max(this.#buf.length * 2, this.#len + n));
      next.set(this.#buf.subarray(0, this.#len));
      this.#buf = next;
      this.#view = new DataView(next.buffer);
    }
    const at = this.#len;
    this.#len += n;
    return at;
  }

  bytes(b: Uint8Array): void {
    const at = this.#room(b.length); // first: it may replace the buffer
    this.#buf.set(b, at);
  }

  zeros(n: number): void {
    const at = this.#room(n);
    this.#buf.fill(0, at, this.#len);
  }

  u32(v: number): void {
    this.scalar(GgufType.UINT32, v);
  }

  u64(v: number | bigint): void {
    this.scalar(GgufType.UINT64, v);
  }

  string(s: string): void {
    const b = this.#encoder.encode(s);
    this.u64(b.length);
    this.bytes(b);
  }

  scalar(type: GgufScalarType, v: number | bigint | boolean): void {
    const at = this.#room(SCALAR_SIZE[type]);
    const d = this.#view;
    const n = Number(v);
    switch (type) {
      case GgufType.UINT8:
        return d.setUint8(at, n);
      case GgufType.INT8:
        return d.setInt8(at, n);
      case GgufType.UINT16:
        return d.setUint16(at, n, true);
      case GgufType.INT16:
        return d.setInt16(at, n, true);
      case GgufType.UINT32:
        return d.setUint32(at, n, true);
      case GgufType.INT32:
        return d.setInt32(at, n, true);
      case GgufType.FLOAT32:
        return d.setFloat32(at, n, true);
      case GgufType.BOOL:
        return d.setUint8(at, v ? 1 : 0);
      case GgufType.UINT64:
        return d.setBigUint64(at, BigInt(v), true);
      case GgufType.INT64:
        return d.setBigInt64(at, BigInt(v), true);
      case GgufType.FLOAT64:
        return d.setFloat64(at, n, true);
    }
  }

  value(v: GgufValue): void {
    if (v.type === GgufType.STRING) return this.string(v.value);
    if (v.type === GgufType.ARRAY) {
      this.u32(v.itemType);
      this.u64(v.value.length);
      for (const item of v.value) {
        if ((v.itemType === GgufType.STRING) !== (typeof item === "string")) {
          throw new TypeError(`array of type ${v.itemType} holds ${JSON.stringify(item)}`);
        }
        if (typeof item === "string") this.string(item);
        else this.scalar(v.itemType as GgufScalarType, item);
      }
      return;
    }
    this.scalar(v.type, v.value);
  }

  done(): Uint8Array {
    return this.#buf.slice(0, this.#len);
  }
}

/**
 * Encodes a GGUF v3 file: header, metadata key-values, tensor infos, then the tensor data, each
 * tensor starting at a multiple of the alignment.
 *
 * @param metadata key-values in file order (`general.alignment` is added when not 32)
 * @param tensors the tensors, in file order
 * @param options the data alignment
 * @returns the file's bytes
 * @throws {RangeError} a tensor whose data does not match its dims
 *
 * @example
 * ```ts ignore
 * const bytes = encodeGguf({ "general.architecture": { type: GgufType.STRING, value: "llama" } }, []);
 * ```
 */
export function encodeGguf(
  metadata: Readonly<Record<string, GgufValue>>,
  tensors: readonly GgufTensor[],
  options: EncodeGgufOptions = {},
): Uint8Array {
  // Typed arrays hold the host's byte order, GGUF is little-endian (as every host here is).
  if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) {
    throw new Error("encodeGguf writes tensors from typed arrays: big-endian hosts unsupported");
  }
  const alignment = options.alignment ?? 32;
  const kvs = Object.entries(metadata);
  if (alignment !== 32 && metadata["general.alignment"] === undefined) {
    kvs.push(["general.alignment", { type: GgufType.UINT32, value: alignment }]);
  }
  const w = new ByteWriter();
  w.bytes(new TextEncoder().encode("GGUF"));
  w.u32(3);
  w.u64(tensors.length);
  w.u64(kvs.length);
  for (const [key, value] of kvs) {
    w.string(key);
    w.u32(value.type);
    w.value(value);
  }
  const stored = tensors.map((t) => {
    const n = t.dims.reduce((a, b) => a * b, 1);
    if (n !== t.data.length) {
      throw new RangeError(
        `tensor ${t.name}: dims ${t.dims.join("x")} but ${t.data.length} values`,
      );
    }
    const bytes = t.type === GgmlType.F32
      ? new Uint8Array(new Float32Array(t.data).buffer)
      : new Uint8Array(new Float16Array(t.data).buffer);
    return { tensor: t, bytes };
  });
  let offset = 0;
  for (const { tensor, bytes } of stored) {
    w.string(tensor.name);
    w.u32(tensor.dims.length);
    for (const d of tensor.dims) w.u64(d);
    w.u32(tensor.type);
    w.u64(offset);
    offset = alignUp(offset + bytes.length, alignment);
  }
  w.zeros(alignUp(w.length, alignment) - w.length);
  for (const { bytes } of stored) {
    w.bytes(bytes);
    w.zeros(alignUp(bytes.length, alignment) - bytes.length);
  }
  return w.done();
}

function alignUp(n: number, alignment: number): number {
  return Math.ceil(n / alignment) * alignment;
}

// --- the tiny llama model ---------------------------------------------------------------------

/** Options of {@linkcode tinyLlamaGguf}. */
export interface TinyLlamaOptions {
  /** Seed of the weights (default 1). */
  seed?: number;
  /** Transformer blocks (default 2). */
  layers?: number;
  /** Tokens in the vocabulary, special and byte tokens included (default 512; 259 to 1,040, what the corpus can fill). */
  vocab?: number;
  /** Embedding width (default 64). */
  embd?: number;
  /** Attention heads (default 4). */
  heads?: number;
  /** Key-value heads, fewer than `heads` for grouped-query attention (default 2). */
  kvHeads?: number;
  /** Feed-forward width (default 128). */
  ff?: number;
  /** `llama.context_length` (default 2048). */
  contextLength?: number;
  /** How the weights are stored (default F32). */
  tensorType?: GgmlType;
  /** Folder of the cached file (default `.dynamo/models/` in the repository). */
  dir?: string;
}

/** Ids of the special tokens (the first three of the vocabulary, as in SmolLM2). */
export const TINY_LLAMA_TOKENS = {
  /** `<|endoftext|>`: bos and padding (not added to prompts). */
  endOfText: 0,
  /** `<|im_start|>`. */
  imStart: 1,
  /** `<|im_end|>`: the eos token, the end of a chat turn. */
  imEnd: 2,
} as const;

/** The model's ChatML template. */
export const TINY_LLAMA_CHAT_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + " +
  "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** The chat template rendered by hand for one user message (for tests that check rendering). */
export function tinyLlamaChat(user: string): string {
  return `<|im_start|>user\n${user}<|im_end|>\n<|im_start|>assistant\n`;
}

const SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
const TOKEN_TYPE_NORMAL = 1;
const TOKEN_TYPE_CONTROL = 3;
const CACHE = new URL("../../.dynamo/models/", import.meta.url).pathname;

/**
 * Writes (once per distinct content) the tiny llama GGUF and returns its path. The bytes depend
 * only on the options, so a file already there is reused; it is named by its hash, so a changed
 * generator never reads a stale file.
 *
 * @param options seed, shape, context length, tensor type, folder
 * @returns the `.gguf` file's path
 *
 * @example
 * ```ts ignore
 * const engine = await LlamaCppEngine.load(await tinyLlamaGguf(), { maxNumSeqs: 2 });
 * ```
 */
export async function tinyLlamaGguf(options: TinyLlamaOptions = {}): Promise<string> {
  const bytes = tinyLlamaGgufBytes(options);
  const dir = options.dir ?? CACHE;
  const hash = createHash("sha256").update(bytes).digest("hex").slice(0, 16);
  const path = `${dir.replace(/\/$/, "")}/tiny-llama-${hash}.gguf`;
  try {
    if ((await Deno.stat(path)).size === bytes.length) return path;
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  await Deno.mkdir(dir, { recursive: true });
  // Test files run in parallel processes: write aside, then rename into place.
  const temp = await Deno.makeTempFile({ dir, prefix: "tiny-llama-", suffix: ".part" });
  try {
    await Deno.writeFile(temp, bytes);
    await Deno.rename(temp, path);
  } catch (err) {
    await Deno.remove(temp).catch(() => {});
    throw err;
  }
  return path;
}

/**
 * The tiny llama GGUF's bytes (what {@linkcode tinyLlamaGguf} writes).
 *
 * @param options seed, shape, context length, tensor type
 * @returns the file's bytes
 * @throws {RangeError} a shape llama.cpp cannot load, or a vocabulary the corpus cannot fill
 */
export function tinyLlamaGgufBytes(options: TinyLlamaOptions = {}): Uint8Array {
  const seed = options.seed ?? 1;
  const layers = options.layers ?? 2;
  const vocabSize = options.vocab ?? 512;
  const embd = options.embd ?? 64;
  const heads = options.heads ?? 4;
  const kvHeads = options.kvHeads ?? 2;
  const ff = options.ff ?? 128;
  const contextLength = options.contextLength ?? 2048;
  const type = options.tensorType ?? GgmlType.F32;
  for (const [name, v] of Object.entries({ layers, embd, heads, kvHeads, ff, contextLength })) {
    if (!Number.isInteger(v) || v < 1) {
      throw new RangeError(`${name} must be a whole number >= 1, got ${v}`);
    }
  }
  if (embd % heads !== 0 || heads % kvHeads !== 0) {
    throw new RangeError(
      `embd (${embd}) must divide by heads (${heads}), heads by kvHeads (${kvHeads})`,
    );
  }
  const headDim = embd / heads;
  if (headDim % 2 !== 0) throw new RangeError(`embd / heads must be even (rope), got ${headDim}`);

  const { tokens, merges } = trainByteLevelBpe(vocabSize - SPECIAL_TOKENS.length);
  const vocab = [...SPECIAL_TOKENS, ...tokens];
  const types = vocab.map((_, id) =>
    id < SPECIAL_TOKENS.length ? TOKEN_TYPE_CONTROL : TOKEN_TYPE_NORMAL
  );

  const u32 = (value: number): GgufValue => ({ type: GgufType.UINT32, value });
  const f32 = (value: number): GgufValue => ({ type: GgufType.FLOAT32, value });
  const str = (value: string): GgufValue => ({ type: GgufType.STRING, value });
  const metadata: Record<string, GgufValue> = {
    "general.architecture": str("llama"),
    "general.name": str("tiny-llama"),
    // 0: all F32, 1: mostly F16 (llama_ftype).
    "general.file_type": u32(type === GgmlType.F32 ? 0 : 1),
    "general.alignment": u32(32),
    "llama.vocab_size": u32(vocab.length),
    "llama.context_length": u32(contextLength),
    "llama.embedding_length": u32(embd),
    "llama.block_count": u32(layers),
    "llama.feed_forward_length": u32(ff),
    "llama.attention.head_count": u32(heads),
    "llama.attention.head_count_kv": u32(kvHeads),
    "llama.attention.layer_norm_rms_epsilon": f32(1e-5),
    "llama.rope.dimension_count": u32(headDim),
    "llama.rope.freq_base": f32(10000),
    "tokenizer.ggml.model": str("gpt2"),
    // Qwen2's split: llama.cpp keeps spaces as they are when detokenizing ("gpt-2" would drop
    // the one before "." or ","), as our loader does, and our loader knows its regex.
    "tokenizer.ggml.pre": str("qwen2"),
    "tokenizer.ggml.tokens": { type: GgufType.ARRAY, itemType: GgufType.STRING, value: vocab },
    "tokenizer.ggml.token_type": { type: GgufType.ARRAY, itemType: GgufType.INT32, value: types },
    "tokenizer.ggml.merges": { type: GgufType.ARRAY, itemType: GgufType.STRING, value: merges },
    "tokenizer.ggml.bos_token_id": u32(TINY_LLAMA_TOKENS.endOfText),
    "tokenizer.ggml.eos_token_id": u32(TINY_LLAMA_TOKENS.imEnd),
    "tokenizer.ggml.padding_token_id": u32(TINY_LLAMA_TOKENS.endOfText),
    "tokenizer.ggml.add_bos_token": { type: GgufType.BOOL, value: false },
    "tokenizer.chat_template": str(TINY_LLAMA_CHAT_TEMPLATE),
  };

  const random = mulberry32(seed);
  // Uniform in [-a, a] with a = scale * sqrt(3 / fanIn): outputs of unit variance times `scale`,
  // so no layer drowns the others and greedy decoding does not settle on one token.
  const tensor = (name: string, dims: number[], scale: number): GgufTensor => {
    const n = dims.reduce((a, b) => a * b, 1);
    const a = scale * Math.sqrt(3 / dims[0]!);
    const data = new Float32Array(n);
    for (let i = 0; i < n; i++) data[i] = (random() * 2 - 1) * a;
    return { name, dims, type, data };
  };
  const ones = (name: string, n: number): GgufTensor => ({
    name,
    dims: [n],
    // llama.cpp wants norm weights in F32 whatever the rest is.
    type: GgmlType.F32,
    data: new Float32Array(n).fill(1),
  });
  const kvDim = headDim * kvHeads;
  const tensors: GgufTensor[] = [
    // Embeddings of unit size per component (fan-in 1).
    tensor("token_embd.weight", [embd, vocab.length], Math.sqrt(1 / 3) * Math.sqrt(embd)),
  ];
  for (let l = 0; l < layers; l++) {
    const blk = `blk.${l}`;
    tensors.push(
      ones(`${blk}.attn_norm.weight`, embd),
      tensor(`${blk}.attn_q.weight`, [embd, embd], 1),
      tensor(`${blk}.attn_k.weight`, [embd, kvDim], 1),
      tensor(`${blk}.attn_v.weight`, [embd, kvDim], 1),
      tensor(`${blk}.attn_output.weight`, [embd, embd], 1),
      ones(`${blk}.ffn_norm.weight`, embd),
      tensor(`${blk}.ffn_gate.weight`, [embd, ff], 1),
      tensor(`${blk}.ffn_up.weight`, [embd, ff], 1),
      tensor(`${blk}.ffn_down.weight`, [ff, embd], 1),
    );
  }
  tensors.push(
    ones("output_norm.weight", embd),
    // Logits of spread ~3: clear winners for greedy decoding, yet sampling has choices.
    tensor("output.weight", [embd, vocab.length], 3),
  );
  return encodeGguf(metadata, tensors);
}

/** A small seeded PRNG (mulberry32): the same numbers on every machine. */
function mulberry32(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// --- the byte-level BPE vocabulary ------------------------------------------------------------

/** Text the merges are learned from: common English words, digits, chat roles. */
const CORPUS = `The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox
runs into the forest. Once upon a time there was a little cat who lived in a small house near
the river. Every morning the cat walked to the market to buy fresh fish and bread. The people in
the town said hello to the cat, and the cat said hello back. What is the capital of France? The
capital of France is Paris. Tell me a joke about a dog. Why did the dog sit in the shade? Because
it did not want to be a hot dog! The three primary colors are red, yellow and blue. There are
seven days in a week and twelve months in a year. One, two, three, four, five, six, seven, eight,
nine, ten. In 2024 we counted 1234 apples and 567 oranges. She said: "I'm sure you're right, it's
what they'd have wanted." We'll see what we can do; they've been here before.
system user assistant: You are a helpful assistant. Please answer the question in a short and
clear way. Hello, how are you today? I am fine, thank you! Can you help me with my homework?
Of course, I would be happy to help you with your homework. Let us start with the first question.
The story of the sailor and the sea: the ship sailed on and on, the wind was strong, the waves
were high, and the sailor sang a song about home.
Water boils at 100 degrees and freezes at zero. Plants need light, water and air to grow; their
green leaves turn sunlight into sugar. The moon goes around the earth, and the earth goes around
the sun once every year. Mountains, rivers, deserts, islands, oceans, valleys and forests cover the
planet. Children learn reading, writing, numbers, music, history and science at school, where their
teachers explain things slowly and kindly. Yesterday my brother cooked dinner: soup with carrots,
onions, potatoes, garlic and pepper, followed by cheese, grapes and chocolate cake.
Computers store information as bytes; a program reads input, computes something useful and writes
output. Errors happen when a file is missing, a network is slow or memory runs out, so careful
engineers check every result, measure performance and write tests before they ship new features.
Quietly, the old librarian unlocked the wooden door, lit a candle and climbed the narrow stairs to
the attic, where forgotten journals, maps, photographs and letters waited under thick blankets of
dust. Outside, thunder rumbled; lightning flashed over the harbour, and fishermen hurried their
boats toward shelter. Meanwhile, in the village bakery, warm bread, cinnamon buns and blueberry
muffins filled the shelves, and customers chatted about weather, politics, football and gossip.`;

/** llama.cpp's and Hugging Face's Qwen2 pre-tokenizer split. */
const QWEN2_SPLIT =
  /(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;

/** GPT-2's bytes_to_unicode: the printable character each byte is written as. */
const BYTE_CHARS: readonly string[] = (() => {
  const chars = new Array<string>(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    chars[b] = String.fromCharCode(printable ? b : 256 + extra++);
  }
  return chars;
})();

/**
 * Learns BPE merges on the corpus until the vocabulary holds `size` tokens: the 256 byte tokens
 * first, then one token per merge. Ties go to the lexically first pair, so it is deterministic.
 */
function trainByteLevelBpe(size: number): { tokens: string[]; merges: string[] } {
  if (size < 256) {
    throw new RangeError(`vocab of ${size + 3} tokens leaves no room for the 256 bytes`);
  }
  const encoder = new TextEncoder();
  const counts = new Map<string, number>();
  for (const piece of CORPUS.normalize("NFC").match(QWEN2_SPLIT) ?? []) {
    const word = Array.from(encoder.encode(piece), (b) => BYTE_CHARS[b]!).join("\u0000");
    counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  const words = [...counts].map(([w, n]) => ({ symbols: w.split("\u0000"), n }));
  const tokens = [...BYTE_CHARS];
  const known = new Set(tokens);
  const merges: string[] = [];
  while (tokens.length < size) {
    const pairs = new Map<string, number>();
    for (const { symbols, n } of words) {
      for (let i = 0; i + 1 < symbols.length; i++) {
        const key = `${symbols[i]} ${symbols[i + 1]}`;
        pairs.set(key, (pairs.get(key) ?? 0) + n);
      }
    }
    let best: string | undefined;
    let bestCount = 0;
    for (const [key, n] of pairs) {
      if (n > bestCount || (n === bestCount && best !== undefined && key < best)) {
        [best, bestCount] = [key, n];
      }
    }
    if (best === undefined) {
      throw new RangeError(`vocab of ${size + 3} tokens is more than the corpus can fill`);
    }
    const [left, right] = best.split(" ") as [string, string];
    const merged = left + right;
    merges.push(best);
    if (!known.has(merged)) {
      known.add(merged);
      tokens.push(merged);
    }
    for (const word of words) {
      const s = word.symbols;
      const out: string[] = [];
      for (let i = 0; i < s.length; i++) {
        if (i + 1 < s.length && s[i] === left && s[i + 1] === right) {
          out.push(merged);
          i++;
        } else out.push(s[i]!);
      }
      word.symbols = out;
    }
  }
  return { tokens, merges };
}
