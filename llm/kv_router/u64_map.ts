/**
 * {@linkcode U64Map}: a hash map keyed by unsigned 64-bit integers (block hashes), for the KV
 * router's hot maps.
 *
 * A `Map` keyed by bigint walks its bucket chain comparing keys through each key's heap
 * object: in a map of many blocks whose bigints were allocated over time (decoded from
 * workers' KV events), every lookup costs cache misses per entry of the chain. Profiled over a
 * stream of 20,000-token prompts, that walk was a tenth of the frontend's CPU. This map keeps
 * each key as two uint32 words in a typed array, found through an open-addressed slot table
 * (linear probing, deletion by backward shift: no tombstones), so a lookup reads a few words
 * and compares numbers. The bigint is turned into its words through a `DataView`, which
 * allocates nothing. Entries stay in insertion order, as in a `Map`.
 *
 * Keys are taken modulo 2^64, as `DataView.setBigUint64` takes them: callers keep to block
 * hashes, which are u64.
 *
 * @module
 */

/** Scratch for a key's words. */
const scratch = new DataView(new ArrayBuffer(8));
const MIN_ENTRIES = 4;

/**
 * A map from u64 (bigint) keys to values, iterated in insertion order (as a `Map`).
 *
 * @example
 * ```ts
 * const m = new U64Map<string>();
 * m.set(0xfedcba9876543210n, "a");
 * m.get(0xfedcba9876543210n); // "a"
 * m.delete(0xfedcba9876543210n); // true
 * ```
 */
export class U64Map<V> {
  /** Open-addressed slots: 0 when empty, else the entry's index + 1. Twice the entries. */
  #slots: Int32Array;
  /** Entry e's key words at 2e (high) and 2e + 1 (low). */
  #keys: Uint32Array;
  /**
   * Entry e's value, entries in insertion order; undefined once deleted (values are never
   * undefined). Dense and ordered so that the garbage collector, which moves the values in the
   * order it finds them, keeps what was stored together together (values in hash order left
   * the KV tree's nodes scattered, and walking it took twice as long).
   */
  #values: (V | undefined)[];
  /** Entries used, deleted ones included. */
  #used = 0;
  /**
   * No live entry before this one: iteration starts here (a map used as an LRU list deletes
   * from the front).
   */
  #head = 0;
  #size = 0;

  /**
   * An empty map.
   *
   * @param capacity entries to make room for at first
   */
  constructor(capacity = MIN_ENTRIES) {
    let n = MIN_ENTRIES;
    while (n < capacity) n *= 2;
    this.#slots = new Int32Array(2 * n);
    this.#keys = new Uint32Array(2 * n);
    this.#values = new Array<V | undefined>(n).fill(undefined);
  }

  /** Entries in the map. */
  get size(): number {
    return this.#size;
  }

  /**
   * The value under `key`, or undefined.
   *
   * @param key a u64
   * @returns the value, or undefined when the key is absent
   */
  get(key: bigint): V | undefined {
    scratch.setBigUint64(0, key);
    const i = this.#findSlot(scratch.getUint32(0), scratch.getUint32(4));
    return i < 0 ? undefined : this.#values[this.#slots[i]! - 1];
  }

  /**
   * Whether `key` is in the map.
   *
   * @param key a u64
   * @returns true when present
   */
  has(key: bigint): boolean {
    scratch.setBigUint64(0, key);
    return this.#findSlot(scratch.getUint32(0), scratch.getUint32(4)) >= 0;
  }

  /**
   * Sets the value under `key` (a new key goes last in the order; an existing one keeps its
   * place).
   *
   * @param key a u64
   * @param value any value but undefined
   * @returns this map
   * @throws {TypeError} an undefined value (it marks deleted entries)
   */
  set(key: bigint, value: V): this {
    if (value === undefined) throw new TypeError("U64Map values cannot be undefined");
    scratch.setBigUint64(0, key);
    const hi = scratch.getUint32(0);
    const lo = scratch.getUint32(4);
    const found = this.#findSlot(hi, lo);
    if (found >= 0) {
      this.#values[this.#slots[found]! - 1] = value;
      return this;
    }
    if (this.#used === this.#values.length) {
      // Full of entries: compact when half of them are deleted, else grow.
      this.#rebuild(this.#size * 2 <= this.#used ? this.#values.length : this.#values.length * 2);
    }
    const e = this.#used++;
    this.#keys[2 * e] = hi;
    this.#keys[2 * e + 1] = lo;
    this.#values[e] = value;
    this.#place(e, hi, lo);
    this.#size++;
    return this;
  }

  /**
   * Removes `key`.
   *
   * @param key a u64
   * @returns true when it was there
   */
  delete(key: bigint): boolean {
    scratch.setBigUint64(0, key);
    const i = this.#findSlot(scratch.getUint32(0), scratch.getUint32(4));
    if (i < 0) return false;
    const slots = this.#slots;
    const keys = this.#keys;
    const mask = slots.length - 1;
    const deleted = slots[i]! - 1;
    this.#values[deleted] = undefined;
    if (deleted === this.#head) {
      while (this.#head < this.#used && this.#values[this.#head] === undefined) this.#head++;
    }
    // Backward shift: move later entries of the probe run into the hole when their home slot
    // does not lie cyclically in (hole, j], so every entry stays reachable from its home.
    let hole = i;
    for (let j = (i + 1) & mask;; j = (j + 1) & mask) {
      const s = slots[j]!;
      if (s === 0) break;
      const home = slotOf(keys[2 * s - 2]!, keys[2 * s - 1]!, mask);
      const reachable = hole <= j ? hole < home && home <= j : hole < home || home <= j;
      if (reachable) continue;
      slots[hole] = s;
      hole = j;
    }
    slots[hole] = 0;
    this.#size--;
    // Mostly empty: give the room back (a worker's block map after its cache emptied).
    const capacity = this.#values.length;
    if (this.#size * 8 < capacity && capacity > 8 * MIN_ENTRIES) this.#rebuild(capacity / 4);
    return true;
  }

  /** Removes every entry. */
  clear(): void {
    this.#slots.fill(0);
    this.#values.fill(undefined);
    this.#used = 0;
    this.#head = 0;
    this.#size = 0;
  }

  /**
   * The values, in insertion order.
   *
   * @returns an iterator over the values (do not change the map while it runs)
   */
  *values(): IterableIterator<V> {
    const values = this.#values;
    for (let e = this.#head; e < this.#used; e++) {
      const v = values[e];
      if (v !== undefined) yield v;
    }
  }

  /**
   * The entries, in insertion order.
   *
   * @returns an iterator over [key, value] (do not change the map while it runs)
   */
  *entries(): IterableIterator<[bigint, V]> {
    const values = this.#values;
    for (let e = this.#head; e < this.#used; e++) {
      const v = values[e];
      if (v === undefined) continue;
      scratch.setUint32(0, this.#keys[2 * e]!);
      scratch.setUint32(4, this.#keys[2 * e + 1]!);
      yield [scratch.getBigUint64(0), v];
    }
  }

  /** The slot of the entry holding (hi, lo), or -1. */
  #findSlot(hi: number, lo: number): number {
    const slots = this.#slots;
    const keys = this.#keys;
    const mask = slots.length - 1;
    for (let i = slotOf(hi, lo, mask);; i = (i + 1) & mask) {
      const s = slots[i]!;
      if (s === 0) return -1;
      if (keys[2 * s - 1] === lo && keys[2 * s - 2] === hi) return i;
    }
  }

  /** Puts entry e in the first free slot from its home. */
  #place(e: number, hi: number, lo: number): void {
    const slots = this.#slots;
    const mask = slots.length - 1;
    let i = slotOf(hi, lo, mask);
    while (slots[i] !== 0) i = (i + 1) & mask;
    slots[i] = e + 1;
  }

  /** Moves the live entries, in order, into arrays with room for `entries`. */
  #rebuild(entries: number): void {
    const keys = this.#keys;
    const values = this.#values;
    const used = this.#used;
    this.#slots = new Int32Array(2 * entries);
    this.#keys = new Uint32Array(2 * entries);
    this.#values = new Array<V | undefined>(entries).fill(undefined);
    this.#used = 0;
    this.#head = 0;
    for (let e = 0; e < used; e++) {
      const v = values[e];
      if (v === undefined) continue;
      const n = this.#used++;
      const hi = keys[2 * e]!;
      const lo = keys[2 * e + 1]!;
      this.#keys[2 * n] = hi;
      this.#keys[2 * n + 1] = lo;
      this.#values[n] = v;
      this.#place(n, hi, lo);
    }
  }
}

/**
 * A seed per process: keys come from workers' KV events, and a set of keys crowding one probe
 * run, worked out ahead, would work on every process without it (iteration follows insertion
 * order, so nothing observable depends on the seed).
 */
const [SEED_HI, SEED_LO] = crypto.getRandomValues(new Uint32Array(2));

/** The home slot of a key: both words mixed, so keys that differ only high spread too. */
function slotOf(hi: number, lo: number, mask: number): number {
  const x = Math.imul((lo ^ SEED_LO!) ^ Math.imul(hi ^ SEED_HI!, 0x85ebca6b), 0x9e3779b1);
  return (x ^ (x >>> 16)) & mask;
}
