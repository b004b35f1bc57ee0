// Fuzz target for the planner (plan/partition.hpp) and the ring schedules
// (algo/ring.hpp). Built two ways from this one file (tests/fuzz/CMakeLists.txt):
// as the libFuzzer binary chorus_fuzz_plan (Clang, -fsanitize=fuzzer,...) and,
// with replay_main.cpp, as the corpus regression test any compiler builds.
//
// The input bytes are decoded by a small reader of our own rather than
// <fuzzer/FuzzedDataProvider.h>: that header is only on Clang's include path,
// and the kept corpus must mean the same thing to the g++-built replay test.
//
// Every violated invariant ends in fail(), which prints what went wrong and
// aborts: libFuzzer records the input as a crash, the replay test fails.

#include <chorus/algo/ring.hpp>
#include <chorus/algo/schedule.hpp>
#include <chorus/plan/partition.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

using chorus::alignment;
using chorus::collective;
using chorus::index_range;
using u64 = std::uint64_t;

[[noreturn]] void fail(const char* what, u64 a = 0, u64 b = 0, u64 c = 0) {
    std::fprintf(stderr, "chorus fuzz_plan: invariant violated: %s [%llu %llu %llu]\n", what,
                 static_cast<unsigned long long>(a), static_cast<unsigned long long>(b),
                 static_cast<unsigned long long>(c));
    std::abort();
}
#define CHORUS_FUZZ_CHECK(cond, ...)                                                   \
    do {                                                                               \
        if (!(cond)) fail(#cond __VA_OPT__(,) __VA_ARGS__);                                     \
    } while (0)

//! Reads the fuzzer's bytes front to back; past the end everything reads as 0.
struct reader {
    const std::uint8_t* p;
    std::size_t n;
    u64 raw(int bytes) {
        u64 v = 0;
        for (int i = 0; i < bytes && n > 0; ++i, ++p, --n) v = (v << 8) | *p;
        return v;
    }
    //! A value in [lo, hi], reading only as many bytes as the span needs.
    u64 in(u64 lo, u64 hi) {
        const u64 span = hi - lo;
        int bytes = 0;
        for (u64 s = span; s != 0; s >>= 8) ++bytes;
        const u64 v = raw(bytes);
        return span == ~u64(0) ? v : lo + v % (span + 1);
    }
    //! Mostly small values, sometimes anything up to hi (boundaries matter most).
    u64 sized(u64 hi) {
        switch (raw(1) % 4) {
        case 0: return in(0, hi < 64 ? hi : 64);
        case 1: return in(0, hi < 4096 ? hi : 4096);
        case 2: { // near a power of two
            const u64 e = in(0, 62);
            const u64 base = u64(1) << e;
            const u64 d = in(0, 8);
            const u64 v = raw(1) & 1 ? base + d : (base > d ? base - d : 0);
            return v > hi ? hi : v;
        }
        default: return in(0, hi);
        }
    }
};

constexpr u64 elem_sizes[] = {1, 2, 3, 4, 8, 12, 16, 24, 32};
constexpr collective colls[] = {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                                collective::broadcast, collective::reduce};

bool is_aligned(u64 i, u64 elem, u64 off) { return (off % 16 + (i % 16) * (elem % 16)) % 16 == 0; }

// --- alignment_of and split ---------------------------------------------------------
void check_alignment(const alignment& a, u64 elem, u64 off) {
    if (!a.aligned) {
        // i * elem mod 16 is periodic in i with period 16: no aligned index at all.
        for (u64 i = 0; i < 16; ++i) CHORUS_FUZZ_CHECK(!is_aligned(i, elem, off), i, elem, off);
        return;
    }
    CHORUS_FUZZ_CHECK(a.granule >= 1 && a.granule <= 16 && a.first < a.granule, a.granule, a.first);
    // The aligned indices are exactly first + m * granule (checked over two
    // periods of 16, which covers every residue).
    for (u64 i = 0; i < 32; ++i) {
        const bool expect = i >= a.first && (i - a.first) % a.granule == 0;
        CHORUS_FUZZ_CHECK(is_aligned(i, elem, off) == expect, i, elem, off);
    }
}

void check_split(index_range r, u64 parts, const alignment& a, u64 elem, u64 off) {
    const u64 bound = chorus::max_part_bound(r.size(), parts, a);
    u64 prev = r.begin;
    for (u64 k = 0; k < parts; ++k) {
        const index_range p = chorus::split(r, k, parts, a);
        CHORUS_FUZZ_CHECK(p.begin == prev, k, p.begin, prev);          // contiguous, in order
        CHORUS_FUZZ_CHECK(p.begin <= p.end && p.end <= r.end, k, p.begin, p.end);
        CHORUS_FUZZ_CHECK(p.size() <= bound, k, p.size(), bound);
        if (k > 0 && a.aligned && p.begin > r.begin && p.begin < r.end)
            CHORUS_FUZZ_CHECK(is_aligned(p.begin, elem, off), p.begin, elem, off); // interior boundary
        prev = p.end;
    }
    CHORUS_FUZZ_CHECK(prev == r.end, prev, r.end);                     // covers [begin, end) exactly
}

// --- ring plans -------------------------------------------------------------------
struct sizes {
    u64 in, out, scratch, total;
};

sizes buffer_sizes(const chorus::ring_plan& p) {
    // As in tests/unit/test_schedule.cpp: the full-size buffer holds n blocks
    // for AllGather / ReduceScatter; their in (resp. out) is one block.
    const u64 n = u64(p.nranks);
    const bool blocks = p.coll == collective::all_gather || p.coll == collective::reduce_scatter;
    const u64 big = blocks ? p.count * n : p.count;
    return {p.coll == collective::all_gather ? p.count : big, p.coll == collective::reduce_scatter ? p.count : big,
            p.scratch_elems(), big};
}

void check_chunk(const chorus::ring_plan& p, const index_range& ch, u64 total) {
    CHORUS_FUZZ_CHECK(ch.begin <= ch.end && ch.end <= total, ch.begin, ch.end, total);
    if ((p.coll == collective::reduce_scatter || p.coll == collective::reduce) && p.nranks > 1)
        CHORUS_FUZZ_CHECK(ch.size() <= p.slot_elems, ch.size(), p.slot_elems); // a scratch slot holds any chunk
}

void check_tiling(const chorus::ring_plan& p, const sizes& sz, reader& rd) {
    const int slices = (p.coll == collective::broadcast || p.coll == collective::reduce) ? 1 : p.nranks;
    const u64 pieces = u64(slices) * u64(p.channels) * p.chunks;
    // Slices tile [0, total) in order.
    u64 prev = 0;
    for (int s = 0; s < slices; ++s) {
        const index_range r = p.slice(s);
        CHORUS_FUZZ_CHECK(r.begin == prev && r.begin <= r.end, u64(s), r.begin, prev);
        prev = r.end;
    }
    CHORUS_FUZZ_CHECK(prev == sz.total, prev, sz.total);

    if (p.count <= 4096 && pieces <= 20000) {
        // Every (slice, channel, chunk), in that order, tiles [0, total) exactly.
        prev = 0;
        for (int s = 0; s < slices; ++s)
            for (int c = 0; c < p.channels; ++c)
                for (u64 k = 0; k < p.chunks; ++k) {
                    const index_range ch = p.chunk(s, c, k);
                    CHORUS_FUZZ_CHECK(ch.begin == prev, u64(s) << 32 | u64(c), k, ch.begin);
                    check_chunk(p, ch, sz.total);
                    prev = ch.end;
                }
        CHORUS_FUZZ_CHECK(prev == sz.total, prev, sz.total);
        return;
    }
    // Too many pieces to enumerate: each slice starts and ends with its first
    // and last chunk, and sampled neighbours meet.
    for (int s = 0; s < slices; ++s) {
        const index_range r = p.slice(s);
        CHORUS_FUZZ_CHECK(p.chunk(s, 0, 0).begin == r.begin, u64(s), r.begin);
        CHORUS_FUZZ_CHECK(p.chunk(s, p.channels - 1, p.chunks - 1).end == r.end, u64(s), r.end);
    }
    for (int i = 0; i < 16; ++i) {
        const int s = int(rd.in(0, u64(slices - 1)));
        const int c = int(rd.in(0, u64(p.channels - 1)));
        const u64 k = i % 2 ? rd.in(0, p.chunks - 1) : (i % 4 == 0 ? 0 : p.chunks - 1);
        const index_range ch = p.chunk(s, c, k);
        check_chunk(p, ch, sz.total);
        // The next piece in (slice, channel, chunk) order starts where this ends.
        index_range next{sz.total, sz.total};
        if (k + 1 < p.chunks) next = p.chunk(s, c, k + 1);
        else if (c + 1 < p.channels) next = p.chunk(s, c + 1, 0);
        else if (s + 1 < slices) next = p.chunk(s + 1, 0, 0);
        CHORUS_FUZZ_CHECK(next.begin == ch.end, u64(s) << 32 | u64(c), k, ch.end);
    }
}

void check_operand(const chorus::operand& o, u64 count, const sizes& sz, const chorus::ring_plan& p) {
    if (o.loc == chorus::where::none || count == 0) return;
    CHORUS_FUZZ_CHECK(o.rank >= 0 && o.rank < p.nranks, u64(o.rank));
    u64 size = 0;
    switch (o.loc) {
    case chorus::where::in: size = sz.in; break;
    case chorus::where::out: size = sz.out; break;
    case chorus::where::scratch:
        size = sz.scratch;
        CHORUS_FUZZ_CHECK(count <= p.slot_elems && o.offset % p.slot_elems == 0, count, o.offset, p.slot_elems);
        break;
    case chorus::where::none: break;
    }
    CHORUS_FUZZ_CHECK(o.offset <= size && count <= size - o.offset, o.offset, count, size);
}

//! The rank at the end of a Broadcast / Reduce chain (the last to finish).
int chain_end(const chorus::ring_schedule& sch) {
    const int n = sch.n(), root = sch.plan.root;
    return sch.plan.coll == chorus::collective::broadcast ? (root + n - 1) % n : root;
}

//! Steps wait only for ring neighbours; a chain's final wait may also name
//! the end of the chain.
void check_wait(const chorus::wait_spec& w, const chorus::ring_schedule& sch, bool final_wait = false) {
    if (w.peer < 0) return;
    CHORUS_FUZZ_CHECK(w.peer < sch.n() && w.peer != sch.r(), u64(w.peer), u64(sch.r()));
    const bool chain = sch.plan.coll == chorus::collective::broadcast || sch.plan.coll == chorus::collective::reduce;
    CHORUS_FUZZ_CHECK(w.peer == sch.pred() || w.peer == sch.succ() || (final_wait && chain && w.peer == chain_end(sch)),
                      u64(w.peer), u64(sch.pred() + 1), u64(sch.succ() + 1));
    CHORUS_FUZZ_CHECK(w.units <= sch.plan.units(), w.units, sch.plan.units()); // more would never come
}

void check_schedule(const chorus::ring_plan& p, const sizes& sz) {
    const chorus::ring_schedule sch{p};
    const int pr = sch.pred();
    const int su = sch.succ();
    CHORUS_FUZZ_CHECK(pr >= -1 && pr < p.nranks && su >= -1 && su < p.nranks, u64(pr + 1), u64(su + 1));
    for (int c = 0; c < p.channels; ++c)
        for (u64 k = 0; k < p.chunks; ++k)
            for (std::uint32_t t = 0; t < p.steps; ++t) {
                const chorus::step s = sch.at(c, k, t);
                if (s.count != 0) {
                    CHORUS_FUZZ_CHECK(s.dst.loc != chorus::where::none && s.dst.rank == p.rank,
                                      u64(s.dst.rank));
                    CHORUS_FUZZ_CHECK(s.src0.loc != chorus::where::none, k, t);
                    CHORUS_FUZZ_CHECK(s.src0.rank == p.rank || s.src0.rank == pr, u64(s.src0.rank));
                    if (s.src1.loc != chorus::where::none) CHORUS_FUZZ_CHECK(s.src1.rank == p.rank, u64(s.src1.rank));
                    if (s.dst2.loc != chorus::where::none) CHORUS_FUZZ_CHECK(s.dst2.rank == su, u64(s.dst2.rank));
                }
                check_operand(s.dst, s.count, sz, p);
                check_operand(s.dst2, s.count, sz, p);
                check_operand(s.src0, s.count, sz, p);
                check_operand(s.src1, s.count, sz, p);
                check_wait(s.waits[0], sch);
                check_wait(s.waits[1], sch);
            }
    check_wait(sch.final_wait(), sch, true);
}

void check_plan(reader& rd, u64 elem, u64 off) {
    const collective coll = colls[rd.in(0, 4)];
    const int n = int(rd.in(1, 64));
    const int rank = int(rd.in(0, u64(n - 1)));
    const int root = int(rd.in(0, u64(n - 1)));
    const u64 count = rd.sized(u64(1) << 40);
    const int channels = int(rd.in(1, 32));
    const u64 chunk_bytes = rd.in(0, 1) ? rd.in(16, 4096) : rd.in(16, u64(1) << 26);

    const chorus::ring_plan p = chorus::make_ring_plan(coll, rank, n, root, count, elem, off, channels, chunk_bytes);
    CHORUS_FUZZ_CHECK(p.chunks >= 1 && p.steps >= 1, p.chunks, p.steps);
    // Units are posted in the low 32 bits of a progress flag: make_ring_plan
    // caps them at 2^31 (the header's contract, reached exactly for e.g. a
    // one-step collective of 2^40 elements).
    CHORUS_FUZZ_CHECK(p.units() <= (u64(1) << 31) && p.units() / p.steps == p.chunks, p.units(), p.chunks);
    const alignment a = chorus::alignment_of(elem, off);
    CHORUS_FUZZ_CHECK(p.align.aligned == a.aligned && p.align.granule == a.granule && p.align.first == a.first);

    const sizes sz = buffer_sizes(p);
    check_tiling(p, sz, rd);
    if (u64(p.channels) * p.units() <= 20000) check_schedule(p, sz);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    reader rd{data, size};
    const u64 elem = elem_sizes[rd.in(0, 8)];
    const u64 off = rd.in(0, 15);
    const alignment a = chorus::alignment_of(elem, off);
    check_alignment(a, elem, off);

    const u64 limit = u64(1) << 62;
    const u64 begin = rd.sized(limit);
    const u64 len = rd.sized(limit - begin);
    const u64 parts = rd.in(0, 3) ? rd.in(1, 64) : rd.in(1, u64(1) << 16);
    check_split({begin, begin + len}, parts, a, elem, off);

    check_plan(rd, elem, off);
    return 0;
}
