#pragma once
//! \file core/log.hpp
//! What chorus tells about itself: the CHORUS_DEBUG log and the record of a
//! communicator's last call (docs/observability.md).
//!
//! CHORUS_DEBUG=WARN|INFO|TRACE (any case; VERSION prints the version line
//! only, NONE, unset or empty: off) turns on one line per event, written
//! whole to stderr or to CHORUS_DEBUG_FILE (`%h`: the host name, `%p`: the
//! process id, `%%`: a percent sign):
//!
//!     chorus INFO [rank 0/4 pid 4242] automatic: all_reduce 4 MiB, 4 ranks -> ring (...)
//!
//! WARN says what a user should know (a fallback, a model file that does
//! not fit), INFO adds communicator setup, the transport each peer is
//! reached by and `automatic`'s choice per call shape with the predicted
//! time of every candidate, TRACE adds a line per call. Any other value
//! prints one warning listing the valid ones and leaves the log off.
//! The variables are read once per process, on first use (log_config(), a
//! function-local static); what a call pays while the log is off is one
//! load and a compare of the cached level (log_enabled).

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#if defined(__unix__) || defined(__APPLE__)
#  include <unistd.h>
#endif

#include "collective.hpp"
#include "config.hpp"
#include "env.hpp"

#if defined(__GNUC__) || defined(__clang__)
#  define CHORUS_PRINTF_LIKE(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#  define CHORUS_PRINTF_LIKE(fmt, first)
#endif

namespace chorus {

//! What a communicator's last collective ran (communicator::last_call()).
struct call_info {
    std::uint64_t seq = 0;              //!< its sequence number on the communicator (1, 2, ...; 0: no call yet)
    collective coll = collective::barrier;
    //! The policy the caller named: "automatic", "deterministic" or an
    //! algorithm ("ring", ...); empty for a barrier.
    const char* policy = "";
    //! What ran: an algorithm's name ("ring", "direct", "tree", ...): the
    //! policy's, or automatic's pick, as the collective runs it (tree<>'s
    //! AllGather runs "ring"); "small" (the transport's small-message
    //! protocol) or "exchange" (all_to_all and the "v" collectives,
    //! whatever the policy).
    const char* algorithm = "";
    int channels = 0;
    //! The nccl-tests size of the call: AllReduce, Broadcast, Reduce: the
    //! buffer; AllGather, ReduceScatter, all_to_all: the whole n-block
    //! buffer; the "v" collectives: the sum of the counts.
    std::uint64_t bytes = 0;
};

namespace detail {

//! The log's levels, each including the ones before it.
enum class log_level : int { off = 0, version = 1, warn = 2, info = 3, trace = 4 };

inline constexpr const char* log_level_name(log_level l) {
    switch (l) {
    case log_level::off: return "NONE";
    case log_level::version: return "VERSION";
    case log_level::warn: return "WARN";
    case log_level::info: return "INFO";
    case log_level::trace: return "TRACE";
    }
    return "?";
}

//! The values CHORUS_DEBUG accepts, for the warning about one it does not.
inline constexpr const char* log_level_values = "WARN, INFO or TRACE (or VERSION, NONE; unset or empty: off)";

//! `value` (CHORUS_DEBUG) as a level: case-insensitive, blanks around it
//! allowed; null or empty is off. False for anything else (`out` is then off).
inline bool parse_log_level(const char* value, log_level& out) {
    out = log_level::off;
    if (value == nullptr) return true;
    std::string v(env_trim(value));
    for (char& c : v)
        if (c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
    if (v.empty() || v == "NONE") return true;
    for (log_level l : {log_level::version, log_level::warn, log_level::info, log_level::trace})
        if (v == log_level_name(l)) {
            out = l;
            return true;
        }
    return false;
}

//! `pattern` (CHORUS_DEBUG_FILE) with `%h` replaced by `host`, `%p` by
//! `pid` and `%%` by `%`; any other `%x` stays as it is.
inline std::string expand_log_path(std::string_view pattern, std::string_view host, long pid) {
    std::string s;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c != '%' || i + 1 == pattern.size()) {
            s += c;
            continue;
        }
        const char n = pattern[++i];
        if (n == 'h') s += host;
        else if (n == 'p') s += std::to_string(pid);
        else if (n == '%') s += '%';
        else {
            s += '%';
            s += n;
        }
    }
    return s;
}

inline long log_pid() {
#if defined(__unix__) || defined(__APPLE__)
    return static_cast<long>(::getpid());
#else
    return 0;
#endif
}

inline std::string log_host() {
#if defined(__unix__) || defined(__APPLE__)
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) == 0) return name;
#endif
    return "unknown";
}

//! The level in force, cached for log_enabled(): -1 until log_config()
//! has read the environment.
inline std::atomic<int> log_level_now{-1};

//! The log's process-wide state: made on first use from the environment.
class log_state {
public:
    log_state() {
        const char* v = std::getenv("CHORUS_DEBUG");
        log_level l = log_level::off;
        if (!parse_log_level(v, l)) {
            std::fprintf(stderr, "chorus WARN [pid %ld] CHORUS_DEBUG='%s' is not a level; use %s. Logging is off\n",
                         log_pid(), v, log_level_values);
            l = log_level::off;
        }
        if (l > log_level::off) open_file();
        log_level_now.store(int(l), std::memory_order_release);
    }
    // The file stays open until the process ends (every line is flushed):
    // a communicator destroyed during static destruction may still log.
    log_state(const log_state&) = delete;
    log_state& operator=(const log_state&) = delete;

    log_level level() const noexcept { return log_level(log_level_now.load(std::memory_order_relaxed)); }
    std::FILE* out() const noexcept {
        std::FILE* f = out_.load(std::memory_order_acquire);
        return f != nullptr ? f : stderr;
    }
    //! Tests (scoped_log): another level and destination, returning the old ones.
    log_level exchange_level(log_level l) noexcept { return log_level(log_level_now.exchange(int(l))); }
    std::FILE* exchange_out(std::FILE* f) noexcept { return out_.exchange(f); }
    //! True once per process: the caller prints the version line.
    bool first_version_line() noexcept { return !version_said_.exchange(true); }

private:
    void open_file() {
        const char* p = std::getenv("CHORUS_DEBUG_FILE");
        if (p == nullptr || *p == '\0') return;
        const std::string path = expand_log_path(p, log_host(), log_pid());
        std::FILE* f = std::fopen(path.c_str(), "w");
        if (f == nullptr) {
            std::fprintf(stderr, "chorus WARN [pid %ld] CHORUS_DEBUG_FILE: cannot open '%s' for writing; logging to stderr\n",
                         log_pid(), path.c_str());
            return;
        }
        out_.store(f, std::memory_order_release);
    }

    std::atomic<std::FILE*> out_{nullptr}; //!< null: stderr
    std::atomic<bool> version_said_{false};
};

inline log_state& log_config() {
    static log_state s;
    return s;
}

//! The level, reading the environment first if nobody has yet.
[[gnu::cold]] CHORUS_NOINLINE inline int log_level_first() { return int(log_config().level()); }

//! Whether events of level `l` are logged: what a call pays while the log
//! is off (one load, two compares; the environment is read on first use).
inline bool log_enabled(log_level l) noexcept {
    int v = log_level_now.load(std::memory_order_relaxed);
    if (v < 0) [[unlikely]]
        v = log_level_first();
    return v >= int(l);
}

//! Writes one line: "chorus LEVEL [rank r/n pid p] text" (rank < 0: "[pid p]").
//! The line is formatted first and written with one call, so lines of
//! different threads do not interleave. Long lines are cut at 4 KiB.
[[gnu::cold]] inline void log_vline(log_level l, int rank, int size, const char* fmt, std::va_list ap) {
    char buf[4096];
    int head = 0;
    if (rank >= 0)
        head = std::snprintf(buf, sizeof buf, "chorus %s [rank %d/%d pid %ld] ", log_level_name(l), rank, size,
                             log_pid());
    else
        head = std::snprintf(buf, sizeof buf, "chorus %s [pid %ld] ", log_level_name(l), log_pid());
    if (head < 0) return;
    std::size_t used = static_cast<std::size_t>(head);
    const int body = std::vsnprintf(buf + used, sizeof buf - used, fmt, ap);
    if (body < 0) return;
    used += static_cast<std::size_t>(body);
    if (used > sizeof buf - 2) used = sizeof buf - 2;
    buf[used++] = '\n';
    buf[used] = '\0';
    std::FILE* f = log_config().out();
    std::fputs(buf, f);
    std::fflush(f);
}

//! log_vline when level `l` is on.
CHORUS_PRINTF_LIKE(4, 5) inline void log_line(log_level l, int rank, int size, const char* fmt, ...) {
    if (!log_enabled(l)) return;
    std::va_list ap;
    va_start(ap, fmt);
    log_vline(l, rank, size, fmt, ap);
    va_end(ap);
}

//! The version line, once per process, at VERSION and above (NCCL prints
//! its own the same way).
inline void log_version(int rank, int size) {
    if (log_enabled(log_level::version) && log_config().first_version_line()) {
        const log_level l = log_config().level();
        log_line(l >= log_level::info ? log_level::info : log_level::version, rank, size, "chorus version %d.%d.%d", CHORUS_VERSION_MAJOR,
                 CHORUS_VERSION_MINOR, CHORUS_VERSION_PATCH);
    }
}

//! A size in bytes as people read it ("8 B", "4 KiB", "1.5 MiB"), in a
//! buffer of its own: bytes_text(n).text.
struct bytes_text {
    char text[32];
    explicit bytes_text(std::uint64_t b) {
        const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        double v = double(b);
        int u = 0;
        while (v >= 1024 && u < 4) {
            v /= 1024;
            ++u;
        }
        if (u == 0) std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(b));
        else std::snprintf(text, sizeof text, "%.4g %s", v, units[u]);
    }
};

//! Ascending ranks as a short list: "1-3, 5, 7-8" ("none" for no rank).
inline std::string rank_list_text(const int* ranks, std::size_t n) {
    std::string s;
    for (std::size_t i = 0; i < n;) {
        std::size_t j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1) ++j;
        if (!s.empty()) s += ", ";
        s += std::to_string(ranks[i]);
        if (j > i) s += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
        i = j + 1;
    }
    return s.empty() ? std::string("none") : s;
}

//! Tests: the log at `l`, written to `f` (null: stderr), for a scope.
class scoped_log {
public:
    scoped_log(log_level l, std::FILE* f)
        : level_(log_config().exchange_level(l)), out_(log_config().exchange_out(f)) {}
    ~scoped_log() {
        log_config().exchange_level(level_);
        log_config().exchange_out(out_);
    }
    scoped_log(const scoped_log&) = delete;
    scoped_log& operator=(const scoped_log&) = delete;

private:
    log_level level_;
    std::FILE* out_;
};

} // namespace detail
} // namespace chorus
