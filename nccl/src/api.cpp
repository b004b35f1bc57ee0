//! \file nccl/src/api.cpp
//! The NCCL C API over chorus's threads backend (docs/nccl.md): unique ids
//! and the in-process rendezvous, communicators, groups, the operations'
//! argument checks, and the mapping of chorus errors to ncclResult_t.
//! Nothing throws through the C boundary: every entry point catches.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <unistd.h>

#include "internal.hpp"

using chorus_nccl::op_desc;
using chorus_nccl::op_kind;

namespace chorus_nccl {

// ---------------------------------------------------------------------------
// Errors: the last error's text, per thread and per communicator
// ---------------------------------------------------------------------------

thread_local std::string last_error_text; // what ncclGetLastError returns on this thread
thread_local std::string last_error_copy; // a stable copy of a communicator's text

//! NCCL_DEBUG=WARN (or INFO, TRACE): failures are also printed to stderr.
bool debug_warn() {
    static const bool on = [] {
        const char* v = std::getenv("NCCL_DEBUG");
        if (v == nullptr) return false;
        std::string s(v);
        for (char& ch : s) ch = char(ch >= 'a' && ch <= 'z' ? ch - 'a' + 'A' : ch);
        return s == "WARN" || s == "INFO" || s == "TRACE";
    }();
    return on;
}

//! Records a failure (never throws) and returns `code`.
ncclResult_t fail(ncclResult_t code, const char* text, ncclComm* comm = nullptr, bool async = false) noexcept {
    try {
        last_error_text = text;
        if (comm != nullptr) {
            std::lock_guard<std::mutex> lk(comm->m);
            comm->last_error = text;
            if (async) {
                int expect = ncclSuccess;
                comm->async_error.compare_exchange_strong(expect, int(code));
            }
        }
        if (debug_warn()) std::fprintf(stderr, "chorus-nccl WARN %s\n", text);
    } catch (...) { // no memory for the text: keep the code
    }
    return code;
}
ncclResult_t fail(ncclResult_t code, const std::string& text, ncclComm* comm = nullptr, bool async = false) noexcept {
    return fail(code, text.c_str(), comm, async);
}

ncclResult_t to_nccl(chorus::errc e) noexcept {
    switch (e) {
    case chorus::errc::invalid_argument: return ncclInvalidArgument;
    case chorus::errc::mismatch: return ncclInvalidUsage; // ranks called differently
    case chorus::errc::timeout:
    case chorus::errc::aborted:
    case chorus::errc::peer_failed: return ncclRemoteError; // another rank failed, left or stalled
    case chorus::errc::unavailable: return ncclSystemError; // thread or memory limit
    case chorus::errc::internal: return ncclInternalError;
    }
    return ncclInternalError;
}

//! A failure of an operation that follows from another's (this rank's
//! world was aborted): reported after a primary failure.
bool secondary(chorus::errc e) noexcept { return e == chorus::errc::aborted || e == chorus::errc::peer_failed; }

//! A failure found by this library's own checks (arguments, usage, the
//! rendezvous); the text starts with the NCCL function's name.
struct nccl_error : std::runtime_error {
    ncclResult_t code;
    nccl_error(ncclResult_t c, const std::string& what) : std::runtime_error(what), code(c) {}
};

//! `what`, prefixed with "fn: " unless it starts with it.
std::string with_fn(const char* fn, const char* what) {
    const std::size_t n = std::strlen(fn);
    if (std::strncmp(what, fn, n) == 0 && what[n] == ':') return what;
    return std::string(fn) + ": " + what;
}

//! Runs f() (returning ncclResult_t) with every exception mapped to a
//! result: the C boundary.
template <class F>
ncclResult_t guarded(const char* fn, ncclComm* comm, F&& f) noexcept {
    try {
        return f();
    } catch (const nccl_error& e) {
        return fail(e.code, with_fn(fn, e.what()), comm);
    } catch (const chorus::error& e) {
        // A failure other than a rejected argument leaves the communicator
        // broken: report it as the communicator's asynchronous error too.
        const bool broken = e.code() != chorus::errc::invalid_argument;
        return fail(to_nccl(e.code()), with_fn(fn, e.what()), comm, broken);
    } catch (const std::bad_alloc&) {
        return fail(ncclSystemError, std::string(fn) + ": out of memory", comm);
    } catch (const std::exception& e) {
        return fail(ncclInternalError, std::string(fn) + ": " + e.what(), comm);
    } catch (...) {
        return fail(ncclInternalError, "libchorus_nccl: an unknown exception", comm);
    }
}

//! ncclInvalidArgument / ncclInvalidUsage with the NCCL function's name.
[[noreturn]] void bad_arg(const char* fn, const std::string& what) {
    throw nccl_error(ncclInvalidArgument, std::string(fn) + ": " + what);
}
[[noreturn]] void bad_usage(const char* fn, const std::string& what) {
    throw nccl_error(ncclInvalidUsage, std::string(fn) + ": " + what);
}

// ---------------------------------------------------------------------------
// Unique ids and the in-process rendezvous
// ---------------------------------------------------------------------------

//! What ncclGetUniqueId writes into ncclUniqueId::internal.
struct id_layout {
    char magic[16];                //!< id_magic
    std::uint64_t pid;             //!< the process that made it
    std::uint64_t process_token;   //!< random, once per process (pids repeat across containers)
    std::uint64_t serial;          //!< ids made by this process so far
};
static_assert(sizeof(id_layout) <= NCCL_UNIQUE_ID_BYTES);
constexpr char id_magic[16] = "chorus-nccl-v1";

std::uint64_t process_token() {
    static const std::uint64_t token = [] {
        std::random_device rd;
        std::uint64_t t = (std::uint64_t(rd()) << 32) ^ rd();
        t ^= std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
        return t == 0 ? 1 : t;
    }();
    return token;
}

struct rendezvous {
    int nranks = 0;
    std::shared_ptr<chorus::detail::threads_world> world;
    std::vector<char> joined;
    int count = 0;
    bool failed = false;
    std::string why;
    std::condition_variable cv;
};

struct id_key {
    std::uint64_t token, serial;
    bool operator<(const id_key& o) const { return token != o.token ? token < o.token : serial < o.serial; }
};

std::mutex registry_m;
std::map<id_key, std::shared_ptr<rendezvous>>& registry() {
    static std::map<id_key, std::shared_ptr<rendezvous>> r; // ranks still waiting for their peers
    return r;
}

//! The id's key, or an error: not one of ours, or made in another process.
id_key parse_id(const ncclUniqueId& id, const char* fn) {
    id_layout l{};
    std::memcpy(&l, id.internal, sizeof l);
    if (std::memcmp(l.magic, id_magic, sizeof id_magic) != 0)
        bad_arg(fn, "`commId` was not made by this library's ncclGetUniqueId (or was not copied whole)");
    if (l.pid != std::uint64_t(getpid()) || l.process_token != process_token())
        bad_usage(fn, "`commId` was made by another process (pid " + std::to_string(l.pid) + ", this is pid " +
                          std::to_string(getpid()) +
                          "). libchorus_nccl's ranks are threads of one process: ranks in several processes need "
                          "chorus's per-process GPU transport, which does not exist yet (see docs/nccl.md)");
    return {l.process_token, l.serial};
}

//! Joins the rendezvous of `key` as `rank` of `nranks`; the caller then
//! waits for it (wait_rendezvous).
std::shared_ptr<rendezvous> join(id_key key, int nranks, int rank, const char* fn) {
    std::lock_guard<std::mutex> lk(registry_m);
    auto& reg = registry();
    auto it = reg.find(key);
    if (it == reg.end()) {
        auto rv = std::make_shared<rendezvous>();
        rv->nranks = nranks;
        rv->world = std::make_shared<chorus::detail::threads_world>(nranks);
        rv->joined.assign(std::size_t(nranks), 0);
        it = reg.emplace(key, std::move(rv)).first;
    }
    rendezvous& rv = *it->second;
    if (rv.nranks != nranks)
        bad_arg(fn, "`nranks` is " + std::to_string(nranks) + " but another rank joined this `commId` with " +
                        std::to_string(rv.nranks));
    if (rv.joined[std::size_t(rank)] != 0)
        bad_usage(fn, "rank " + std::to_string(rank) + " joined this `commId` twice");
    rv.joined[std::size_t(rank)] = 1;
    auto mine = it->second;
    if (++rv.count == rv.nranks) {
        reg.erase(it); // complete: the id is spent
        mine->cv.notify_all();
    }
    return mine;
}

//! Waits until every rank joined `rv`, or the deadline (CHORUS_TIMEOUT_MS,
//! the deadline of every chorus wait). A rendezvous that times out fails
//! for every rank that joined it.
void wait_rendezvous(const std::shared_ptr<rendezvous>& rv, const char* fn) {
    const std::chrono::milliseconds timeout = chorus::detail::default_timeout();
    std::unique_lock<std::mutex> lk(registry_m);
    const bool done = rv->cv.wait_for(lk, timeout, [&] { return rv->count == rv->nranks || rv->failed; });
    if (!done) {
        std::string missing;
        int shown = 0;
        for (int r = 0; r < rv->nranks; ++r)
            if (rv->joined[std::size_t(r)] == 0 && shown++ < 8) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        if (rv->nranks - rv->count > 8) missing += ", ...";
        rv->failed = true;
        rv->why = std::string(fn) + ": only " + std::to_string(rv->count) + " of " + std::to_string(rv->nranks) +
                  " ranks joined within " + std::to_string(timeout.count()) + " ms (CHORUS_TIMEOUT_MS); missing rank" +
                  (rv->nranks - rv->count == 1 ? " " : "s ") + missing +
                  ". libchorus_nccl's ranks are threads of this process: a rank in another process cannot join "
                  "(that needs chorus's per-process GPU transport, which does not exist yet; see docs/nccl.md)";
        auto& reg = registry();
        for (auto it = reg.begin(); it != reg.end(); ++it)
            if (it->second == rv) {
                reg.erase(it);
                break;
            }
        rv->cv.notify_all();
    }
    if (rv->failed) throw nccl_error(ncclInvalidUsage, rv->why);
}

// ---------------------------------------------------------------------------
// Communicators
// ---------------------------------------------------------------------------

ncclComm* make_comm(std::shared_ptr<chorus::detail::threads_world> world, int rank, int device) {
    auto c = std::make_unique<ncclComm>();
    c->world = std::move(world);
    c->rank = rank;
    c->nranks = c->world->size();
    c->device = device;
    c->comm = std::make_unique<chorus::communicator<chorus::threads>>(c->world, rank);
    return c.release();
}

//! Drains the communicator's queue, then tells its peers this rank is gone
//! (as run_threads does when a rank's function returns): peers still
//! waiting for it fail at once instead of at their deadline.
void free_comm(ncclComm* c) noexcept {
    c->magic = 0;
    try {
        c->comm.reset();
    } catch (...) {
    }
    if (c->world) c->world->mark_gone(c->rank);
    delete c;
}

void check_comm(const char* fn, const ncclComm* comm) {
    if (comm == nullptr) bad_arg(fn, "`comm` is NULL");
    if (comm->magic != ncclComm::live_magic)
        bad_arg(fn, "`comm` is not a live communicator (destroyed, or not from ncclCommInit*)");
    if (!comm->comm) bad_usage(fn, "`comm` has no communicator");
}

// ---------------------------------------------------------------------------
// Groups
// ---------------------------------------------------------------------------

struct group_state {
    int depth = 0;
    std::vector<op_desc> ops;            //!< in call order
    std::vector<ncclComm*> inits;        //!< grouped ncclCommInitRank calls to complete
    ncclResult_t error = ncclSuccess;    //!< the first call in the group that failed
    std::string error_text;
};
thread_local group_state group;

void group_failed(ncclResult_t code) {
    if (group.depth > 0 && group.error == ncclSuccess) {
        group.error = code;
        group.error_text = last_error_text;
    }
}

// ---------------------------------------------------------------------------
// Operations: checks, then run or queue
// ---------------------------------------------------------------------------

const char* type_name(int t) {
    switch (t) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "ncclUint8";
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
    case ncclFloat8e4m3: return "ncclFloat8e4m3";
    case ncclFloat8e5m2: return "ncclFloat8e5m2";
    default: return nullptr;
    }
}

std::size_t type_size(int t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
    }
}

bool reduces(op_kind k) { return k == op_kind::all_reduce || k == op_kind::reduce_scatter || k == op_kind::reduce; }
bool rooted(op_kind k) { return k == op_kind::broadcast || k == op_kind::reduce; }
bool p2p(op_kind k) { return k == op_kind::send || k == op_kind::recv; }

//! NCCL's argument checks, before anything is queued: every bad argument
//! is ncclInvalidArgument naming it, and nothing moved.
void validate(const char* fn, const op_desc& d) {
    check_comm(fn, d.comm);
    const ncclComm& c = *d.comm;
    if (c.comm->broken()) {
        const int e = c.async_error.load();
        throw nccl_error(e != ncclSuccess ? ncclResult_t(e) : ncclRemoteError,
                         std::string(fn) + ": the communicator is broken (" + c.comm->transport().reason() +
                             "); destroy it (ncclCommDestroy or ncclCommAbort) and create a new one");
    }
    const char* tn = type_name(d.type);
    if (tn == nullptr)
        bad_arg(fn, "`datatype` " + std::to_string(d.type) + " is not an NCCL data type (0.." +
                        std::to_string(int(ncclNumTypes) - 1) + ")");
    if (reduces(d.kind)) {
        if (d.red < 0 || d.red >= int(ncclNumOps))
            bad_arg(fn, "`op` " + std::to_string(d.red) +
                            " is not ncclSum, ncclProd, ncclMax, ncclMin or ncclAvg (operators from "
                            "ncclRedOpCreatePreMulSum are not supported)");
        if (type_size(d.type) < 4 && d.type != ncclInt8 && d.type != ncclUint8)
            bad_arg(fn, std::string("`datatype` ") + tn +
                            ": reductions on it are not supported on the host path (chorus's host executor has no "
                            "arithmetic for it); AllGather, Broadcast, Send and Recv move it");
    }
    if (rooted(d.kind) && (d.root < 0 || d.root >= c.nranks))
        bad_arg(fn, "`root` is " + std::to_string(d.root) + " but the communicator has ranks 0.." +
                        std::to_string(c.nranks - 1));
    if (p2p(d.kind) && (d.root < 0 || d.root >= c.nranks))
        bad_arg(fn, "`peer` is " + std::to_string(d.root) + " but the communicator has ranks 0.." +
                        std::to_string(c.nranks - 1));
    // The largest buffer the call touches, in elements: it must be addressable.
    const std::size_t n = std::size_t(c.nranks);
    const std::size_t limit = std::size_t(PTRDIFF_MAX) / type_size(d.type);
    const bool per_rank = d.kind == op_kind::all_gather || d.kind == op_kind::reduce_scatter;
    if (d.count > limit || (per_rank && d.count > limit / n))
        bad_arg(fn, "`" + std::string(per_rank && d.kind == op_kind::all_gather ? "sendcount"
                                      : per_rank                               ? "recvcount"
                                                                               : "count") +
                        "` " + std::to_string(d.count) + " elements of " + tn +
                        (per_rank ? ", times the " + std::to_string(n) + " ranks," : "") + " overflow the address space");
    if (d.count != 0) {
        const bool root = d.comm->rank == d.root;
        const bool needs_send = d.kind != op_kind::recv && !(d.kind == op_kind::broadcast && !root);
        const bool needs_recv = d.kind != op_kind::send && !(d.kind == op_kind::reduce && !root);
        if (needs_send && d.send == nullptr) bad_arg(fn, d.kind == op_kind::recv ? "`recvbuff` is NULL" : "`sendbuff` is NULL");
        if (needs_recv && d.recv == nullptr) bad_arg(fn, "`recvbuff` is NULL");
        // Device memory (a CUDA driver this process loaded knows it): the
        // host path cannot read it.
        try {
            if (needs_send) chorus::detail::check_host_pointer(fn, d.kind == op_kind::recv ? "recvbuff" : "sendbuff", d.send);
            if (needs_recv && d.kind != op_kind::send) chorus::detail::check_host_pointer(fn, "recvbuff", d.recv);
        } catch (const chorus::error& e) {
            // "chorus::<fn>: `sendbuff` points to GPU memory ...": without "chorus::".
            const std::string what = e.what();
            throw nccl_error(ncclInvalidArgument,
                             (what.starts_with("chorus::") ? what.substr(8) : what) +
                                 " (device buffers need chorus's GPU transport, which libchorus_nccl does not use "
                                 "yet; see docs/nccl.md)");
        }
    }
}

//! One operation from an NCCL call: checked, then run now (outside a
//! group: it completes before the call returns) or queued for
//! ncclGroupEnd.
ncclResult_t submit(const char* fn, const op_desc& d) noexcept {
    const ncclResult_t r = guarded(fn, d.comm == nullptr || d.comm->magic != ncclComm::live_magic ? nullptr : d.comm,
                                   [&]() -> ncclResult_t {
        validate(fn, d);
        if (group.depth > 0) {
            if (group.error == ncclSuccess) group.ops.push_back(d);
            return ncclSuccess;
        }
        if (d.comm->pending) bad_usage(fn, "the communicator's grouped ncclCommInitRank has not completed");
        if (p2p(d.kind) && d.root == d.comm->rank)
            bad_usage(fn, std::string("`peer` is this rank: a ") + (d.kind == op_kind::send ? "send to" : "receive from") +
                              " itself needs its matching ncclSend/ncclRecv in the same ncclGroupStart/ncclGroupEnd");
        (void)issue(d, false);
        return ncclSuccess;
    });
    if (r != ncclSuccess) group_failed(r);
    return r;
}

//! p2p operations of one rank, in the order that keeps grouped sends and
//! receives of every rank free of deadlock on the host path: chorus's
//! send is a rendezvous (it returns once received) and each rank runs its
//! queue in order, so every rank orders its messages by the pair of ranks
//! they connect (lower rank, higher rank), and within a pair puts the
//! lower-to-higher messages first. A rank blocked on pair P then waits for
//! a peer busy with a pair ordered before P; following that chain ends at
//! two ranks on the same message, so some rank always progresses.
void order_p2p(std::vector<op_desc>& ops, int rank) {
    auto key = [rank](const op_desc& d) {
        const int peer = d.root;
        const int src = d.kind == op_kind::send ? rank : peer;
        const int dst = d.kind == op_kind::send ? peer : rank;
        return std::tuple(std::min(rank, peer), std::max(rank, peer), src < dst ? 0 : 1);
    };
    std::stable_sort(ops.begin(), ops.end(), [&](const op_desc& a, const op_desc& b) { return key(a) < key(b); });
}

//! One failure of a grouped operation, for the group's result.
struct group_result {
    ncclResult_t code = ncclSuccess;
    std::string text;
    bool primary = false;
    void note(ncclResult_t c, const std::string& t, bool is_primary) {
        if (code == ncclSuccess || (is_primary && !primary)) {
            code = c;
            text = t;
            primary = is_primary;
        }
    }
};

//! Runs a group: completes grouped ncclCommInitRank calls, then queues
//! every operation on its communicator's host stream (all of them before
//! waiting for any, so one thread can drive every rank), waits for all,
//! and reports the first failure.
ncclResult_t run_group(std::vector<op_desc> ops, std::vector<ncclComm*> inits) {
    group_result res;
    for (ncclComm* c : inits) {
        try {
            wait_rendezvous(c->pending, "ncclCommInitRank");
            c->pending.reset();
        } catch (const nccl_error& e) {
            fail(e.code, e.what(), c, true);
            res.note(e.code, e.what(), true);
        } catch (const std::exception& e) {
            const std::string t = std::string("ncclCommInitRank (grouped): ") + e.what();
            fail(ncclInvalidUsage, t, c, true);
            res.note(ncclInvalidUsage, t, true);
        }
    }
    // Per communicator, in the order of first use: its collectives in call
    // order, then its point-to-point operations (order_p2p); a send to and
    // a receive from itself pair up locally after the rest.
    std::vector<ncclComm*> comms;
    for (const op_desc& d : ops)
        if (std::find(comms.begin(), comms.end(), d.comm) == comms.end()) comms.push_back(d.comm);
    struct queued {
        ncclComm* comm;
        std::vector<op_desc> list, self_sends, self_recvs;
        std::vector<std::pair<op_desc, chorus::future>> futures;
        bool failed = false;
    };
    std::vector<queued> q(comms.size());
    for (std::size_t i = 0; i < comms.size(); ++i) {
        queued& x = q[i];
        x.comm = comms[i];
        std::vector<op_desc> p;
        for (const op_desc& d : ops) {
            if (d.comm != x.comm) continue;
            if (!p2p(d.kind)) x.list.push_back(d);
            else if (d.root == x.comm->rank) (d.kind == op_kind::send ? x.self_sends : x.self_recvs).push_back(d);
            else p.push_back(d);
        }
        order_p2p(p, x.comm->rank);
        x.list.insert(x.list.end(), p.begin(), p.end());
    }
    static const char* names[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast",
                                  "ncclReduce",    "ncclSend",      "ncclRecv"};
    auto name_of = [](const op_desc& d) { return names[int(d.kind)]; };
    for (queued& x : q) {
        if (x.comm->pending) { // its rendezvous failed
            x.failed = true;
            continue;
        }
        for (const op_desc& d : x.list) {
            try {
                x.futures.emplace_back(d, issue(d, true));
            } catch (const chorus::error& e) {
                // This rank cannot take part in the rest of the group: release
                // its peers (they would otherwise wait for it until their
                // deadline), as run_threads does for a rank that throws.
                const std::string t = std::string(name_of(d)) + " (grouped): " + e.what();
                x.comm->world->abort(chorus::errc::peer_failed,
                                     "rank " + std::to_string(x.comm->rank) + " could not queue its " + name_of(d) +
                                         ": " + e.what());
                fail(to_nccl(e.code()), t, x.comm, true);
                res.note(to_nccl(e.code()), t, !secondary(e.code()));
                x.failed = true;
                break;
            } catch (const std::exception& e) {
                const std::string t = std::string(name_of(d)) + " (grouped): " + e.what();
                x.comm->world->abort(chorus::errc::peer_failed, "rank " + std::to_string(x.comm->rank) + ": " + t);
                fail(ncclSystemError, t, x.comm, true);
                res.note(ncclSystemError, t, true);
                x.failed = true;
                break;
            }
        }
    }
    for (queued& x : q)
        for (auto& [d, f] : x.futures) {
            try {
                f.wait();
            } catch (const chorus::error& e) {
                const std::string t = std::string(name_of(d)) + " (grouped): " + e.what();
                fail(to_nccl(e.code()), t, x.comm, true);
                res.note(to_nccl(e.code()), t, !secondary(e.code()));
                x.failed = true;
            } catch (const std::exception& e) {
                const std::string t = std::string(name_of(d)) + " (grouped): " + e.what();
                fail(ncclInternalError, t, x.comm, true);
                res.note(ncclInternalError, t, true);
                x.failed = true;
            }
        }
    // Sends to and receives from the rank itself: the k-th send with the
    // k-th receive, a local copy.
    for (queued& x : q) {
        if (x.failed) continue;
        if (x.self_sends.size() != x.self_recvs.size()) {
            const std::string t = "ncclGroupEnd: rank " + std::to_string(x.comm->rank) + " made " +
                                  std::to_string(x.self_sends.size()) + " ncclSend and " +
                                  std::to_string(x.self_recvs.size()) +
                                  " ncclRecv to and from itself in the group; they must pair up";
            fail(ncclInvalidUsage, t, x.comm, false);
            res.note(ncclInvalidUsage, t, true);
            continue;
        }
        for (std::size_t k = 0; k < x.self_sends.size(); ++k) {
            const op_desc& s = x.self_sends[k];
            const op_desc& r = x.self_recvs[k];
            const std::size_t sb = s.count * type_size(s.type), rb = r.count * type_size(r.type);
            if (sb != rb) {
                const std::string t = "ncclGroupEnd: rank " + std::to_string(x.comm->rank) + " sends " +
                                      std::to_string(sb) + " bytes to itself but receives " + std::to_string(rb);
                fail(ncclInvalidUsage, t, x.comm, false);
                res.note(ncclInvalidUsage, t, true);
                break;
            }
            if (sb != 0 && s.send != r.recv) std::memmove(r.recv, s.send, sb);
        }
    }
    if (res.code != ncclSuccess) fail(res.code, res.text);
    return res.code;
}

} // namespace chorus_nccl

using namespace chorus_nccl;

// ---------------------------------------------------------------------------
// The C API
// ---------------------------------------------------------------------------

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
    if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: `version` is NULL");
    *version = NCCL_VERSION_CODE; // the nccl.h this library was built against (docs/nccl.md)
    return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
    switch (raw(result)) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=WARN for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=WARN for details)";
    case ncclInternalError: return "internal error - please report this issue to the chorus developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char* ncclGetLastError(ncclComm_t comm) {
    if (!last_error_text.empty() || comm == nullptr || comm->magic != ncclComm::live_magic)
        return last_error_text.c_str();
    try {
        std::lock_guard<std::mutex> lk(comm->m);
        last_error_copy = comm->last_error;
    } catch (...) {
        return "";
    }
    return last_error_copy.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
    if (uniqueId == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: `uniqueId` is NULL");
    static std::atomic<std::uint64_t> serial{0};
    id_layout l{};
    std::memcpy(l.magic, id_magic, sizeof id_magic);
    l.pid = std::uint64_t(getpid());
    l.process_token = process_token();
    l.serial = ++serial;
    std::memset(uniqueId->internal, 0, sizeof uniqueId->internal);
    std::memcpy(uniqueId->internal, &l, sizeof l);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
    const char* fn = "ncclCommInitRank";
    const ncclResult_t r = guarded(fn, nullptr, [&]() -> ncclResult_t {
        if (comm == nullptr) bad_arg(fn, "`comm` is NULL");
        *comm = nullptr;
        if (nranks < 1) bad_arg(fn, "`nranks` must be >= 1, got " + std::to_string(nranks));
        if (rank < 0 || rank >= nranks)
            bad_arg(fn, "`rank` is " + std::to_string(rank) + " but `nranks` is " + std::to_string(nranks) +
                            " (ranks 0.." + std::to_string(nranks - 1) + ")");
        const id_key key = parse_id(commId, fn);
        std::shared_ptr<rendezvous> rv = join(key, nranks, rank, fn);
        ncclComm* c = nullptr;
        try {
            c = make_comm(rv->world, rank, rank);
        } catch (...) {
            // This rank joined but has no communicator: fail the rendezvous.
            std::lock_guard<std::mutex> lk(registry_m);
            rv->failed = true;
            rv->why = std::string(fn) + ": rank " + std::to_string(rank) + " could not create its communicator";
            rv->cv.notify_all();
            throw;
        }
        if (group.depth > 0) { // completed by ncclGroupEnd, so one thread may initialise several ranks
            c->pending = rv;
            group.inits.push_back(c);
            *comm = c;
            return ncclSuccess;
        }
        try {
            wait_rendezvous(rv, fn);
        } catch (...) {
            free_comm(c);
            throw;
        }
        *comm = c;
        return ncclSuccess;
    });
    if (r != ncclSuccess) group_failed(r);
    return r;
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
    const char* fn = "ncclCommInitAll";
    return guarded(fn, nullptr, [&]() -> ncclResult_t {
        if (comms == nullptr) bad_arg(fn, "`comms` is NULL");
        if (ndev < 1) bad_arg(fn, "`ndev` must be >= 1, got " + std::to_string(ndev));
        auto world = std::make_shared<chorus::detail::threads_world>(ndev);
        std::vector<ncclComm*> made;
        try {
            for (int i = 0; i < ndev; ++i) made.push_back(make_comm(world, i, devlist != nullptr ? devlist[i] : i));
        } catch (...) {
            for (ncclComm* c : made) free_comm(c);
            throw;
        }
        for (int i = 0; i < ndev; ++i) comms[i] = made[std::size_t(i)];
        return ncclSuccess;
    });
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (comm == nullptr) return ncclSuccess; // as NCCL: destroying NULL does nothing
    return guarded("ncclCommDestroy", nullptr, [&]() -> ncclResult_t {
        check_comm("ncclCommDestroy", comm);
        // Drop what this thread's open group still holds of it.
        std::erase_if(group.ops, [&](const op_desc& d) { return d.comm == comm; });
        std::erase(group.inits, comm);
        if (comm->pending) {
            std::lock_guard<std::mutex> lk(registry_m);
            comm->pending->failed = true;
            comm->pending->why = "ncclCommInitRank: rank " + std::to_string(comm->rank) +
                                 " was destroyed before its group ended";
            comm->pending->cv.notify_all();
        }
        free_comm(comm);
        return ncclSuccess;
    });
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (comm == nullptr) return ncclSuccess;
    return guarded("ncclCommAbort", nullptr, [&]() -> ncclResult_t {
        check_comm("ncclCommAbort", comm);
        // Release every waiter of every rank first, so draining the queue
        // below cannot wait for a peer.
        comm->world->abort(chorus::errc::aborted, "rank " + std::to_string(comm->rank) + " called ncclCommAbort");
        return ncclCommDestroy(comm);
    });
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    return guarded("ncclCommFinalize", comm, [&]() -> ncclResult_t {
        check_comm("ncclCommFinalize", comm);
        comm->comm->synchronize(); // nothing of it is queued outside a group: a no-op kept for NCCL's sequence
        return ncclSuccess;
    });
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
    const char* fn = "ncclCommGetAsyncError";
    return guarded(fn, nullptr, [&]() -> ncclResult_t {
        check_comm(fn, comm);
        if (asyncError == nullptr) bad_arg(fn, "`asyncError` is NULL");
        int e = comm->async_error.load();
        if (e == ncclSuccess && comm->comm->broken()) {
            // Broken by a peer (its failure, ncclCommAbort or destroy): record why.
            fail(ncclRemoteError, std::string(fn) + ": " + comm->comm->transport().reason(), comm, true);
            e = comm->async_error.load();
        }
        *asyncError = ncclResult_t(e);
        return ncclSuccess;
    });
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    return guarded("ncclCommCount", nullptr, [&]() -> ncclResult_t {
        check_comm("ncclCommCount", comm);
        if (count == nullptr) bad_arg("ncclCommCount", "`count` is NULL");
        *count = comm->nranks;
        return ncclSuccess;
    });
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
    return guarded("ncclCommCuDevice", nullptr, [&]() -> ncclResult_t {
        check_comm("ncclCommCuDevice", comm);
        if (device == nullptr) bad_arg("ncclCommCuDevice", "`device` is NULL");
        *device = comm->device;
        return ncclSuccess;
    });
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    return guarded("ncclCommUserRank", nullptr, [&]() -> ncclResult_t {
        check_comm("ncclCommUserRank", comm);
        if (rank == nullptr) bad_arg("ncclCommUserRank", "`rank` is NULL");
        *rank = comm->rank;
        return ncclSuccess;
    });
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t /*stream: host path*/) {
    return submit("ncclAllReduce", op_desc{op_kind::all_reduce, sendbuff, recvbuff, count, raw(datatype), raw(op), 0, comm});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t) {
    return submit("ncclAllGather",
                  op_desc{op_kind::all_gather, sendbuff, recvbuff, sendcount, raw(datatype), ncclSum, 0, comm});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
    return submit("ncclReduceScatter",
                  op_desc{op_kind::reduce_scatter, sendbuff, recvbuff, recvcount, raw(datatype), raw(op), 0, comm});
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t) {
    return submit("ncclBroadcast",
                  op_desc{op_kind::broadcast, sendbuff, recvbuff, count, raw(datatype), ncclSum, root, comm});
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t) {
    return submit("ncclBcast", op_desc{op_kind::broadcast, buff, buff, count, raw(datatype), ncclSum, root, comm});
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t) {
    return submit("ncclReduce", op_desc{op_kind::reduce, sendbuff, recvbuff, count, raw(datatype), raw(op), root, comm});
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t) {
    return submit("ncclSend", op_desc{op_kind::send, sendbuff, nullptr, count, raw(datatype), ncclSum, peer, comm});
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t) {
    return submit("ncclRecv", op_desc{op_kind::recv, nullptr, recvbuff, count, raw(datatype), ncclSum, peer, comm});
}

ncclResult_t ncclGroupStart() {
    ++group.depth;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
    if (group.depth == 0)
        return fail(ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart to end (groups nest; calls must pair)");
    if (--group.depth > 0) return ncclSuccess;
    std::vector<op_desc> ops = std::move(group.ops);
    std::vector<ncclComm*> inits = std::move(group.inits);
    const ncclResult_t err = group.error;
    std::string err_text = std::move(group.error_text);
    group.ops.clear();
    group.inits.clear();
    group.error = ncclSuccess;
    group.error_text.clear();
    if (err != ncclSuccess) {
        // A call of the group failed: as NCCL, run none of its operations
        // (grouped ncclCommInitRank calls still complete).
        ops.clear();
    }
    const ncclResult_t r = guarded("ncclGroupEnd", nullptr, [&] { return run_group(std::move(ops), std::move(inits)); });
    if (err != ncclSuccess)
        return fail(err, "ncclGroupEnd: an operation of the group failed when called, so none ran: " + err_text);
    return r;
}

} // extern "C"
