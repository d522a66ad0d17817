// CPU check of the copy kernel's per-thread logic (copy_blocks.cuh), run by
// native/kernel_test.ts: simulates launches of every shape over random descriptor lists
// (unaligned offsets, lengths 0 to a few KiB, every src/dst alignment pair) and compares
// the destination, including the bytes around each copy, with memcpy. Exits 1 with the
// failing case on stderr. Host code only: nvcc compiles it with the host compiler.
//
// Usage: copy_blocks_test [seed]

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "copy_blocks.cuh"

namespace {

const size_t ARENA = 1 << 18;

unsigned long long rng_state = 1;
unsigned long long next() {  // xorshift64
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }

// 16-byte aligned arenas, so that offsets alone set each address's alignment.
alignas(16) unsigned char src_arena[ARENA];
alignas(16) unsigned char dst_arena[ARENA];
alignas(16) unsigned char expected[ARENA];

struct Span {
  size_t src, dst, len;
};

// Runs every (block, thread) of a grid x nthreads launch in turn; order does not matter
// since destinations are disjoint and sources are in another arena.
void simulate(const std::vector<DynCopyDesc>& descs, unsigned grid, unsigned nthreads) {
  for (unsigned b = 0; b < grid; b++) {
    for (unsigned t = 0; t < nthreads; t++) {
      dyn_copy_blocks_thread(descs.data(), descs.size(), b, grid, t, nthreads);
    }
  }
}

// Copies `spans` (offsets into the arenas) with a simulated launch and compares the
// destination window they cover, plus MARGIN bytes either side, with memcpy's result.
const size_t MARGIN = 64;

bool check(const std::vector<Span>& spans, unsigned grid, unsigned nthreads, const char* what) {
  size_t lo = ARENA, hi = 0;
  for (const Span& s : spans) {
    lo = s.dst < lo ? s.dst : lo;
    hi = s.dst + s.len > hi ? s.dst + s.len : hi;
  }
  if (spans.empty()) lo = hi = MARGIN;
  lo = lo < MARGIN ? 0 : lo - MARGIN;
  hi = hi + MARGIN > ARENA ? ARENA : hi + MARGIN;
  for (size_t i = lo; i < hi; i++) dst_arena[i] = static_cast<unsigned char>(next());
  std::memcpy(expected + lo, dst_arena + lo, hi - lo);
  std::vector<DynCopyDesc> descs;
  for (const Span& s : spans) {
    std::memcpy(expected + s.dst, src_arena + s.src, s.len);
    descs.push_back({reinterpret_cast<unsigned long long>(src_arena + s.src),
                     reinterpret_cast<unsigned long long>(dst_arena + s.dst), s.len});
  }
  simulate(descs, grid, nthreads);
  for (size_t i = lo; i < hi; i++) {
    if (dst_arena[i] == expected[i]) continue;
    std::fprintf(stderr, "%s: grid %u x %u threads, %zu descriptors: byte %zu is %u, want %u\n",
                 what, grid, nthreads, spans.size(), i, dst_arena[i], expected[i]);
    for (const Span& s : spans) {
      if (i + 32 >= s.dst && i < s.dst + s.len + 32) {
        std::fprintf(stderr, "  near descriptor src+%zu -> dst+%zu, %zu bytes\n", s.src, s.dst,
                     s.len);
      }
    }
    return false;
  }
  return true;
}

// Every source and destination misalignment (0..31) with lengths 0..80 and a few thread
// counts: covers each head/body/tail split for every word width.
bool exhaustive_small() {
  const unsigned threads[] = {1, 3, 32};
  for (size_t sa = 0; sa < 32; sa++) {
    for (size_t da = 0; da < 32; da++) {
      for (size_t len = 0; len <= 80; len++) {
        for (unsigned nt : threads) {
          std::vector<Span> one = {{1024 + sa, 2048 + da, len}};
          if (!check(one, 1, nt, "alignment sweep")) return false;
        }
      }
    }
  }
  return true;
}

// Random lists: up to 48 descriptors with disjoint destinations (random gaps between them),
// sources anywhere, lengths biased to the interesting sizes, launched in several shapes.
bool random_lists(int rounds) {
  const unsigned grids[] = {1, 2, 5, 64};
  const unsigned threads[] = {1, 2, 7, 32, 256};
  for (int r = 0; r < rounds; r++) {
    std::vector<Span> spans;
    size_t n = below(49);
    size_t at = below(64);
    for (size_t i = 0; i < n; i++) {
      size_t len;
      switch (below(4)) {
        case 0: len = below(40); break;                  // tiny: all head/tail
        case 1: len = 16 * below(256); break;            // whole 16-byte words
        case 2: len = 16 * below(256) + 1 + below(15);   // words plus a tail
          break;
        default: len = below(4097);
      }
      size_t dst = at + (below(3) == 0 ? 0 : below(40));
      if (dst + len + 64 > ARENA) break;
      size_t src;
      switch (below(3)) {
        case 0: src = (below(ARENA - len - 64) & ~size_t(15)) + (dst & 15); break;  // congruent
        case 1: src = below(ARENA - len - 64) & ~size_t(15);                       // aligned
          break;
        default: src = below(ARENA - len);
      }
      spans.push_back({src, dst, len});
      at = dst + len;
    }
    unsigned grid = grids[below(4)];
    if (below(4) == 0) grid = static_cast<unsigned>(n + 1);
    if (!check(spans, grid, threads[below(5)], "random list")) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned long long seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1;
  rng_state = seed * 0x9E3779B97F4A7C15ull | 1;
  for (size_t i = 0; i < ARENA; i++) src_arena[i] = static_cast<unsigned char>(next());
  if (!exhaustive_small() || !random_lists(3000)) {
    std::fprintf(stderr, "copy_blocks_test: FAILED (seed %llu)\n", seed);
    return 1;
  }
  std::printf("copy_blocks_test: ok (seed %llu)\n", seed);
  return 0;
}
