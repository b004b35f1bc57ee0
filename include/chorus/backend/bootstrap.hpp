#pragma once
//! \file backend/bootstrap.hpp
//! How ranks that are separate processes find each other without MPI, as
//! NCCL's ncclGetUniqueId / ncclCommInitRank: one rank makes a unique_id,
//! the program copies it to every rank by whatever channel it has (a file,
//! an environment variable, its launcher's key-value store), and each rank
//! passes it with its rank and the rank count. chorus runs no network
//! service: the id names a directory every rank can reach (on one machine
//! any directory; across machines a shared file system) and a random
//! token, and the ranks exchange small messages as files there
//! (file_bootstrap). Transports use it to trade what a rank must publish
//! once (process ids, host names, shared-memory or CUDA IPC handles).
//!
//! Nothing is left behind: a rank removes each file it wrote once every
//! rank has read it, and the last exchange, when the bootstrap is closed,
//! is a barrier whose files are removed by their readers.

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/error.hpp"
#include "host_wait.hpp"
#include "shm.hpp"

namespace chorus {

//! Where ranks of one job meet (see the file comment). 128 bytes, plain
//! data: copy it as bytes.
struct unique_id {
    char internal[128] = {};
};

namespace detail {

//! The directory a unique_id made without one names: CHORUS_BOOTSTRAP_DIR,
//! else TMPDIR, else /tmp.
inline std::string default_bootstrap_dir() {
    for (const char* v : {"CHORUS_BOOTSTRAP_DIR", "TMPDIR"})
        if (const char* d = std::getenv(v); d != nullptr && d[0] != '\0') return d;
    return "/tmp";
}

//! The parts of a unique_id: "chorus1:<16 hex digits>:<directory>".
struct parsed_id {
    std::string token, dir;
};
inline parsed_id parse_unique_id(const unique_id& id, const char* who) {
    const char* s = id.internal;
    const std::size_t len = strnlen(s, sizeof id.internal);
    auto bad = [&]() -> parsed_id {
        throw error(errc::invalid_argument,
                    std::string(who) + ": `id` is not a chorus::unique_id made by chorus::make_unique_id (or it was "
                                       "not copied whole)");
    };
    if (len == sizeof id.internal || len < 26 || std::strncmp(s, "chorus1:", 8) != 0 || s[24] != ':') return bad();
    for (int i = 8; i < 24; ++i)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return bad();
    return {std::string(s + 8, 16), std::string(s + 25, len - 25)};
}

} // namespace detail

//! A fresh unique_id whose rendezvous is directory `dir` (empty: the
//! default, detail::default_bootstrap_dir()). Every rank must be able to
//! create and read files there. Throws errc::invalid_argument when `dir`
//! is not a writable directory or its name is longer than 100 bytes.
inline unique_id make_unique_id(const std::string& dir = {}) {
    const std::string d = dir.empty() ? detail::default_bootstrap_dir() : dir;
    struct stat st{};
    if (stat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || access(d.c_str(), W_OK | X_OK) != 0)
        throw error(errc::invalid_argument, "chorus::make_unique_id: `dir` '" + d +
                                                "' is not a directory this process can write (the ranks meet there)");
    if (d.size() > 100)
        throw error(errc::invalid_argument, "chorus::make_unique_id: `dir` '" + d + "' has " +
                                                std::to_string(d.size()) + " bytes; at most 100 fit in the id");
    std::random_device rd;
    std::mt19937_64 gen((std::uint64_t(rd()) << 32) ^ rd() ^
                        std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                        (std::uint64_t(getpid()) << 40));
    unique_id id;
    std::snprintf(id.internal, sizeof id.internal, "chorus1:%016llx:%s", static_cast<unsigned long long>(gen()),
                  d.c_str());
    return id;
}

namespace detail {

//! The exchanges of one group of ranks through files in the id's
//! directory. Collective calls, made by every rank in the same order:
//! all_gather (every rank's bytes, in rank order) and close (a barrier,
//! then every file of this rank gone). Every wait has the deadline given at
//! construction per call, checks `abort` (when given) and, once the first
//! exchange told it their process ids, whether the awaited rank's process
//! still exists (ranks on this host). Errors: errc::timeout naming the rank
//! waited for, errc::peer_failed for a rank whose process is gone,
//! errc::mismatch for ranks that gave different sizes, errc::aborted.
class file_bootstrap {
public:
    file_bootstrap(const unique_id& id, int rank, int size, std::chrono::milliseconds timeout,
                   const std::atomic<bool>* abort = nullptr)
        : timeout_(timeout), abort_(abort) {
        const parsed_id p = parse_unique_id(id, "chorus::bootstrap");
        if (size < 1)
            throw error(errc::invalid_argument, "chorus::bootstrap: `size` must be >= 1, got " + std::to_string(size));
        if (rank < 0 || rank >= size)
            throw error(errc::invalid_argument, "chorus::bootstrap: `rank` is " + std::to_string(rank) +
                                                    " but `size` is " + std::to_string(size) + " (ranks 0.." +
                                                    std::to_string(size - 1) + ")");
        if (timeout.count() <= 0)
            throw error(errc::invalid_argument, "chorus::bootstrap: `timeout` must be positive");
        rank_ = rank;
        size_ = size;
        prefix_ = p.dir + "/chorus-" + p.token + "-";
        // The first exchange: who runs where, for the liveness checks.
        char host[64] = {};
        gethostname(host, sizeof host - 1);
        host_ = host;
        for (char& c : host_)
            if (c == ' ' || c == '\n') c = '_';
        if (host_.empty()) host_ = "-";
        sweep_markers(p.dir);
        struct hello {
            char host[64];
            std::int64_t pid;
        } mine{};
        std::memcpy(mine.host, host, sizeof mine.host);
        mine.pid = getpid();
        std::vector<std::byte> all;
        try {
            all = all_gather(&mine, sizeof mine);
        } catch (...) {
            remove_own(); // (fail() did, unless the error came from elsewhere)
            throw;
        }
        pids_.assign(static_cast<std::size_t>(size_), 0);
        for (int r = 0; r < size_; ++r) {
            hello h{};
            std::memcpy(&h, all.data() + sizeof h * std::size_t(r), sizeof h);
            if (std::memcmp(h.host, host, sizeof h.host) == 0) pids_[static_cast<std::size_t>(r)] = int(h.pid);
        }
    }
    file_bootstrap(const file_bootstrap&) = delete;
    file_bootstrap& operator=(const file_bootstrap&) = delete;
    ~file_bootstrap() {
        try {
            close();
        } catch (...) {
            remove_own(); // a failed close: take this rank's files away at least
        }
    }

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return size_; }

    //! Every rank's `bytes` bytes at `mine`, rank after rank. Every rank
    //! must give the same number of bytes.
    std::vector<std::byte> all_gather(const void* mine, std::size_t bytes) {
        if (failed_ || closed_)
            throw error(errc::aborted, "chorus::bootstrap: the bootstrap is " +
                                           std::string(closed_ ? "closed" : "broken by an earlier failure"));
        const std::uint64_t round = ++round_;
        std::vector<std::byte> out(bytes * std::size_t(size_));
        if (bytes != 0) std::memcpy(out.data() + bytes * std::size_t(rank_), mine, bytes);
        if (size_ == 1) return out;
        const header h{magic, round, bytes};
        write_file(data_name(rank_, round), h, mine, bytes);
        std::vector<char> done(static_cast<std::size_t>(size_), 0);
        done[static_cast<std::size_t>(rank_)] = 1;
        for (int r = 0; r < size_; ++r) {
            if (done[static_cast<std::size_t>(r)]) continue;
            wait_for(r, "its part of exchange " + std::to_string(round), [&] {
                return read_file(data_name(r, round), round, bytes, out.data() + bytes * std::size_t(r), r);
            });
            done[static_cast<std::size_t>(r)] = 1;
        }
        // Every rank wrote this round's file, so every rank has read the
        // round before: this rank's file of it can go.
        if (round > 1) ::unlink(data_name(rank_, round - 1).c_str());
        return out;
    }

    //! The last exchange: a barrier (dissemination: at step i this rank
    //! writes a file only rank + 2^i reads, and removes the one rank - 2^i
    //! wrote for it), after which every rank has read every file: this
    //! rank's last one goes. Idempotent; the destructor calls it.
    void close() {
        if (closed_) return;
        if (failed_ || size_ == 1) {
            closed_ = true;
            remove_own();
            return;
        }
        for (int k = 1, step = 0; k < size_; k <<= 1, ++step) {
            const int to = (rank_ + k) % size_, from = (rank_ - k + size_) % size_;
            const header h{magic, round_ + 1, 0};
            write_file(bye_name(step, rank_, to), h, nullptr, 0);
            ++byes_written_;
            wait_for(from, "it to close (step " + std::to_string(step) + ")", [&] {
                const std::string n = bye_name(step, from, rank_);
                if (::access(n.c_str(), F_OK) != 0) return false;
                ::unlink(n.c_str());
                return true;
            });
        }
        closed_ = true;
        if (round_ > 0) ::unlink(data_name(rank_, round_).c_str());
    }

private:
    static constexpr std::uint32_t magic = 0x63686231; // "chb1"
    struct header {
        std::uint32_t magic;
        std::uint64_t round;
        std::uint64_t bytes;
    };

    std::string data_name(int r, std::uint64_t round) const {
        return prefix_ + std::to_string(r) + "-" + std::to_string(round);
    }
    std::string bye_name(int step, int from, int to) const {
        return prefix_ + "bye-" + std::to_string(step) + "-" + std::to_string(from) + "-" + std::to_string(to);
    }

    //! Writes the file whole under a temporary name, then renames it: a
    //! reader sees all of it or nothing.
    void write_file(const std::string& name, const header& h, const void* data, std::size_t bytes) {
        if (const int e = write_atomically(name, &h, sizeof h, data, bytes))
            fail(errc::unavailable, "chorus::bootstrap: could not write " + name + ": " + std::strerror(e));
    }
    //! Writes `a` then `b` to `name` under a temporary name, then renames
    //! it. Returns 0, or the errno of the step that failed (nothing left).
    static int write_atomically(const std::string& name, const void* a, std::size_t na, const void* b,
                                std::size_t nb) {
        const std::string tmp = name + ".tmp";
        const int fd = ::open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, S_IRUSR | S_IWUSR);
        bool ok = fd >= 0 && write_all(fd, a, na) && (nb == 0 || write_all(fd, b, nb));
        int e = ok ? 0 : errno;
        if (fd >= 0 && ::close(fd) != 0 && ok) {
            ok = false;
            e = errno;
        }
        if (ok && ::rename(tmp.c_str(), name.c_str()) != 0) {
            ok = false;
            e = errno;
        }
        if (ok) return 0;
        ::unlink(tmp.c_str());
        return e != 0 ? e : EIO;
    }
    static bool write_all(int fd, const void* p, std::size_t n) {
        const char* c = static_cast<const char*>(p);
        while (n != 0) {
            const ssize_t w = ::write(fd, c, n);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return false;
            c += w;
            n -= static_cast<std::size_t>(w);
        }
        return true;
    }
    //! Reads rank r's file of `round` into `out` (false: not there yet).
    bool read_file(const std::string& name, std::uint64_t round, std::size_t bytes, std::byte* out, int r) {
        const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return false;
        header h{};
        const bool ok = read_all(fd, &h, sizeof h) && h.magic == magic && h.round == round &&
                        (h.bytes != bytes || bytes == 0 || read_all(fd, out, bytes));
        ::close(fd);
        if (!ok)
            fail(errc::internal, "chorus::bootstrap: " + name + " is not rank " + std::to_string(r) +
                                     "'s file of exchange " + std::to_string(round) + " (another job with the same id?)");
        if (h.bytes != bytes)
            fail(errc::mismatch, "chorus::bootstrap: rank " + std::to_string(r) + " gave " + std::to_string(h.bytes) +
                                     " bytes to exchange " + std::to_string(round) + ", this rank " +
                                     std::to_string(bytes) + " (the ranks made different calls)");
        return true;
    }
    static bool read_all(int fd, void* p, std::size_t n) {
        char* c = static_cast<char*>(p);
        while (n != 0) {
            const ssize_t g = ::read(fd, c, n);
            if (g < 0 && errno == EINTR) continue;
            if (g <= 0) return false;
            c += g;
            n -= static_cast<std::size_t>(g);
        }
        return true;
    }

    //! Polls `ready` (a file system look-up: no spinning) until it holds,
    //! within the deadline, the abort flag, rank r's liveness and rank r's
    //! failure marker.
    template <class Ready>
    void wait_for(int r, const std::string& what, Ready&& ready) {
        const auto deadline = std::chrono::steady_clock::now() + timeout_;
        const backoff_policy slow{std::chrono::microseconds(0), std::chrono::microseconds(100),
                                  std::chrono::milliseconds(1)};
        const int pid = pids_.empty() ? 0 : pids_[static_cast<std::size_t>(r)];
        std::string reason;
        const status st = poll_until(std::forward<Ready>(ready),
                                     [&] {
                                         if (abort_ != nullptr && abort_->load(std::memory_order_acquire))
                                             return status::aborted;
                                         if (read_marker(r, reason)) return status::mismatch; // r failed
                                         return pid != 0 && !process_alive(pid) ? status::peer_exited : status::ok;
                                     },
                                     deadline, slow);
        if (st == status::ok) return;
        const std::string rank = "rank " + std::to_string(r);
        if (st == status::aborted) fail(errc::aborted, "chorus::bootstrap: aborted while waiting for " + rank);
        if (st == status::mismatch) fail(errc::peer_failed, "chorus::bootstrap: " + rank + " failed: " + reason);
        if (st == status::peer_exited) {
            remove_data(r); // a dead rank removes nothing itself
            fail(errc::peer_failed, "chorus::bootstrap: " + rank + " (process " + std::to_string(pid) +
                                        ") died before " + what);
        }
        fail(errc::timeout, "chorus::bootstrap: " + timed_out_waiting(timeout_.count(), rank) + " (" + what + ", in " +
                                prefix_ + "*)");
    }

    //! Fails this rank: its files go, and a marker "<prefix>failed-<rank>"
    //! holding "<host> <pid>" and `why` tells the ranks waiting for it (a
    //! later bootstrap in the directory removes it once this process is
    //! gone: sweep_markers). Then throws error(code, why).
    [[noreturn]] void fail(errc code, const std::string& why) {
        if (!failed_) {
            failed_ = true;
            remove_own();
            const std::string text = host_ + " " + std::to_string(getpid()) + "\n" + why;
            (void)write_atomically(marker_name(rank_), text.data(), text.size(), nullptr, 0); // best effort
        }
        throw error(code, why);
    }
    std::string marker_name(int r) const { return prefix_ + "failed-" + std::to_string(r); }
    //! True when rank r left a failure marker; `why` gets its reason.
    bool read_marker(int r, std::string& why) const {
        const int fd = ::open(marker_name(r).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return false;
        char buf[1024];
        const ssize_t n = ::read(fd, buf, sizeof buf - 1);
        ::close(fd);
        const std::string text(buf, n > 0 ? std::size_t(n) : 0);
        const std::size_t nl = text.find('\n');
        why = nl == std::string::npos ? std::string("(no reason given)") : text.substr(nl + 1);
        return true;
    }
    //! Removes the failure markers in `dir` that processes of this host
    //! left and that no longer exist.
    void sweep_markers(const std::string& dir) const {
        DIR* d = opendir(dir.c_str());
        if (d == nullptr) return;
        while (const dirent* e = readdir(d)) {
            const std::string n = e->d_name;
            if (n.rfind("chorus-", 0) != 0 || n.find("-failed-") == std::string::npos ||
                n.size() < 4 || n.compare(n.size() - 4, 4, ".tmp") == 0)
                continue;
            const std::string path = dir + "/" + n;
            std::FILE* f = std::fopen(path.c_str(), "r");
            if (f == nullptr) continue;
            char host[256] = {};
            int pid = 0;
            const bool parsed = std::fscanf(f, "%255s %d", host, &pid) == 2;
            std::fclose(f);
            if (parsed && host_ == host && pid > 0 && !process_alive(pid)) ::unlink(path.c_str());
        }
        closedir(d);
    }

    //! Rank r's files of this exchange and the one before (all it can
    //! still have), written or half written.
    void remove_data(int r) const noexcept {
        for (std::uint64_t k = round_ > 1 ? round_ - 1 : 1; k <= round_; ++k) {
            ::unlink(data_name(r, k).c_str());
            ::unlink((data_name(r, k) + ".tmp").c_str());
        }
    }
    //! Every file this rank wrote that no reader removed, and those written
    //! for it that it did not get to read (after a failure).
    void remove_own() noexcept {
        remove_data(rank_);
        for (int k = 1, step = 0; k < size_; k <<= 1, ++step) {
            if (step < byes_written_) ::unlink(bye_name(step, rank_, (rank_ + k) % size_).c_str());
            if (failed_) ::unlink(bye_name(step, (rank_ - k + size_) % size_, rank_).c_str());
        }
    }

    std::chrono::milliseconds timeout_;
    const std::atomic<bool>* abort_;
    int rank_ = 0, size_ = 1;
    std::string prefix_;
    std::string host_; //!< this host's name, as markers carry it
    std::vector<int> pids_; //!< per rank: its process id when it runs on this host, else 0
    std::uint64_t round_ = 0;
    int byes_written_ = 0;
    bool failed_ = false, closed_ = false;
};

} // namespace detail
} // namespace chorus
