// An async queue: producers push, one consumer iterates. Optional capacity gives
// backpressure through `push()`'s promise; `close(error?)` ends iteration.

/** Options of {@linkcode AsyncQueue}. */
export interface AsyncQueueOptions {
  /** Items held before `push()` waits (default: unbounded). */
  capacity?: number;
}

/** A single-consumer queue that is also an `AsyncIterable`. */
export class AsyncQueue<T> implements AsyncIterable<T> {
  #items: T[] = [];
  #head = 0;
  #capacity: number;
  #closed = false;
  #error: unknown = undefined;
  #taker: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void } | undefined;
  #space: Array<() => void> = [];

  constructor(options: AsyncQueueOptions = {}) {
    this.#capacity = options.capacity ?? Infinity;
  }

  /** Items waiting to be taken. */
  get size(): number {
    return this.#items.length - this.#head;
  }

  /** True once close() was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Adds an item; resolves once there is room for more. Pushing to a closed queue drops
   * the item and returns false.
   */
  push(item: T): Promise<boolean> | boolean {
    if (this.#closed) return false;
    const taker = this.#taker;
    if (taker) {
      this.#taker = undefined;
      taker.resolve({ value: item, done: false });
      return true;
    }
    this.#items.push(item);
    if (this.size < this.#capacity) return true;
    return new Promise<boolean>((resolve) => this.#space.push(() => resolve(!this.#closed)));
  }

  /** Ends the queue: the consumer drains what is left, then ends (or throws `error`). */
  close(error?: unknown): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#error = error;
    this.#releaseSpace();
    const taker = this.#taker;
    if (taker && this.size === 0) {
      this.#taker = undefined;
      if (error !== undefined) taker.reject(error);
      else taker.resolve({ value: undefined, done: true });
    }
  }

  /** Drops queued items and closes. */
  clear(error?: unknown): void {
    this.#items = [];
    this.#head = 0;
    this.close(error);
  }

  /** Takes the next item; `done` once closed and drained. */
  next(): Promise<IteratorResult<T>> {
    if (this.size > 0) return Promise.resolve({ value: this.#take(), done: false });
    if (this.#closed) {
      if (this.#error !== undefined) return Promise.reject(this.#error);
      return Promise.resolve({ value: undefined, done: true });
    }
    if (this.#taker) return Promise.reject(new Error("AsyncQueue has a single consumer"));
    return new Promise((resolve, reject) => (this.#taker = { resolve, reject }));
  }

  /**
   * Takes the next item without waiting: the item, `done` once closed and drained, or
   * undefined when nothing is queued yet. Throws the close error once drained.
   */
  poll(): IteratorResult<T> | undefined {
    if (this.size > 0) return { value: this.#take(), done: false };
    if (!this.#closed) return undefined;
    if (this.#error !== undefined) throw this.#error;
    return { value: undefined, done: true };
  }

  #take(): T {
    const value = this.#items[this.#head] as T;
    this.#items[this.#head] = undefined as T;
    this.#head++;
    if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    if (this.#space.length > 0 && this.size < this.#capacity) this.#space.shift()!();
    return value;
  }

  #releaseSpace(): void {
    for (const wake of this.#space.splice(0)) wake();
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => this.next(),
      return: () => {
        this.clear();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}
