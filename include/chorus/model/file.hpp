#pragma once
//! \file model/file.hpp
//! The cost model's topology as a small text file (what chorus_calibrate
//! writes and CHORUS_MODEL names), and model::current(): the process-wide
//! topology the `automatic` policy plans against. Host-only; reads files
//! with <cstdio> (no iostreams), numbers with <charconv> (locale-free).

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

#if defined(__unix__) || defined(__APPLE__)
#  include <sys/stat.h>
#endif

#include "../core/error.hpp"
#include "cost.hpp"

namespace chorus::model {

// --- the topology file ---------------------------------------------------------
//
//   # comment lines and trailing comments start with '#'
//   ranks_per_node = 0
//   intra.latency_s = 1e-06
//   ...
// Keys may come in any order and may be left out (the default stays);
// a key may appear once. Numbers are C floating-point literals.

namespace detail {

// Locale-independent number text: std::to_chars / from_chars (shortest
// round-trip digits).
template <class F>
inline std::string format_number(F v) {
    static_assert(std::is_floating_point_v<F>);
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}

//! The whole of `s` as a number; false if it is not one.
inline bool parse_number(std::string_view s, double& v) {
    if (s.empty()) return false;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc{} && end == s.data() + s.size();
}

inline std::string_view trim(std::string_view s) {
    const auto ws = [](char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f' || ch == '\v'; };
    while (!s.empty() && ws(s.front())) s.remove_prefix(1);
    while (!s.empty() && ws(s.back())) s.remove_suffix(1);
    return s;
}

[[noreturn]] inline void model_error(const std::string& source, int line, std::string_view key,
                                     const std::string& what) {
    std::string msg = "chorus: model file '" + source + "', line " + std::to_string(line);
    if (!key.empty()) msg += ", key '" + std::string(key) + "'";
    throw error(errc::invalid_argument, msg + ": " + what);
}

//! One "correction.<collective>.<algorithm>.n<ranks> = r0 r1 ..." line.
inline void parse_correction(topology& t, std::string_view key, std::string_view val, const std::string& source,
                             int line_no) {
    std::string_view rest = key.substr(std::string_view("correction.").size());
    const std::size_t d1 = rest.find('.');
    const std::size_t d2 = d1 == std::string_view::npos ? d1 : rest.find('.', d1 + 1);
    if (d2 == std::string_view::npos)
        model_error(source, line_no, key, "expected correction.<collective>.<algorithm>.n<ranks>");
    const std::string_view cname = rest.substr(0, d1), aname = rest.substr(d1 + 1, d2 - d1 - 1),
                           nname = rest.substr(d2 + 1);
    correction k{};
    bool found = false;
    for (collective c : {collective::all_reduce, collective::all_gather, collective::reduce_scatter,
                         collective::broadcast, collective::reduce, collective::all_to_all, collective::all_gatherv,
                         collective::reduce_scatterv, collective::all_to_allv})
        if (cname == collective_name(c)) {
            k.coll = c;
            found = true;
        }
    if (!found) model_error(source, line_no, key, "unknown collective '" + std::string(cname) + "'");
    if (!algorithm_from_name(aname, k.algo)) model_error(source, line_no, key, "unknown algorithm '" + std::string(aname) + "'");
    double nr = 0;
    if (nname.size() < 2 || nname[0] != 'n' || !parse_number(nname.substr(1), nr) || nr < 2 || nr > 1 << 24 ||
        nr != double(static_cast<long long>(nr)))
        model_error(source, line_no, key, "expected the rank count as n<ranks> (at least 2), got '" + std::string(nname) + "'");
    k.nranks = int(nr);
    for (int i = 0; i < t.correction_count; ++i)
        if (t.corrections[i].coll == k.coll && t.corrections[i].algo == k.algo && t.corrections[i].nranks == k.nranks)
            model_error(source, line_no, key, "given twice");
    if (t.correction_count >= max_corrections)
        model_error(source, line_no, key, "more than " + std::to_string(max_corrections) + " corrections");
    int got = 0;
    while (true) {
        val = trim(val);
        if (val.empty()) break;
        const std::size_t sp = val.find_first_of(" \t");
        const std::string_view tok = val.substr(0, sp);
        val = sp == std::string_view::npos ? std::string_view{} : val.substr(sp);
        double r = 0;
        if (!parse_number(tok, r) || !(r > 0) || r > 1e30)
            model_error(source, line_no, key, "expected ratios > 0, got '" + std::string(tok) + "'");
        if (got >= correction_points)
            model_error(source, line_no, key, "expected " + std::to_string(correction_points) + " ratios, got more");
        k.ratio[got++] = float(r);
    }
    if (got != correction_points)
        model_error(source, line_no, key,
                    "expected " + std::to_string(correction_points) + " ratios, got " + std::to_string(got));
    t.corrections[t.correction_count++] = k;
}

} // namespace detail

//! The topology as a small "key = value" file, one key per line, after a
//! comment header; parse() reads it back exactly (shortest round-trip digits).
inline std::string to_text(const topology& t) {
    using detail::format_number;
    // append() only: operator+ on a temporary, inlined at -O3, trips GCC 12's
    // -Wrestrict false positive (GCC bug 105651) in users' -Werror builds.
    std::string s;
    auto line = [&s](std::string_view key, const std::string& value) {
        s.append(key).append(" = ").append(value).append("\n");
    };
    s.append("# chorus cost model (chorus::model::topology): time = (steps * latency_s\n");
    s.append("#   + moved_bytes / bandwidth_Bps + local_bytes / local_Bps + reduced_bytes / reduce_Bps,\n");
    s.append("#   per level) * correction (docs/model.md)\n");
    line("ranks_per_node", std::to_string(t.ranks_per_node));
    line("intra.latency_s", format_number(t.intra.latency_s));
    line("intra.bandwidth_Bps", format_number(t.intra.bandwidth_Bps));
    line("inter.latency_s", format_number(t.inter.latency_s));
    line("inter.bandwidth_Bps", format_number(t.inter.bandwidth_Bps));
    line("reduce_Bps", format_number(t.reduce_Bps));
    line("channels", std::to_string(t.channels));
    line("chunk_bytes", format_number(t.chunk_bytes));
    line("local_Bps", format_number(t.local_Bps));
    line("flat_inter", t.flat_inter ? "1" : "0");
    line("one_shot_bytes", format_number(t.one_shot_bytes));
    line("small_bytes", format_number(t.small_bytes));
    if (t.correction_count > 0) {
        s.append("# corrections: measured / predicted at 8 B * 4^i, i = 0..")
            .append(std::to_string(correction_points - 1))
            .append(" (correction.<collective>.<algorithm>.n<ranks>)\n");
    }
    for (int i = 0; i < t.correction_count && i < max_corrections; ++i) {
        const correction& k = t.corrections[i];
        s.append("correction.").append(collective_name(k.coll)).append(".").append(algorithm_name(k.algo));
        s.append(".n").append(std::to_string(k.nranks)).append(" =");
        for (float r : k.ratio) s.append(" ").append(format_number(r));
        s.append("\n");
    }
    return s;
}

//! Reads what to_text() writes. Throws chorus::error(errc::invalid_argument)
//! naming `source`, the line and the key: unknown or repeated keys, a line
//! without '=', a value that is not a number or out of range.
inline topology parse(std::string_view text, const std::string& source) {
    topology t = default_topology();
    enum key_id { k_rpn, k_ilat, k_ibw, k_xlat, k_xbw, k_red, k_ch, k_chunk, k_local, k_flat, k_oneshot, k_small, k_count };
    static constexpr std::string_view names[k_count] = {
        "ranks_per_node", "intra.latency_s", "intra.bandwidth_Bps", "inter.latency_s",
        "inter.bandwidth_Bps", "reduce_Bps", "channels", "chunk_bytes", "local_Bps", "flat_inter", "one_shot_bytes",
        "small_bytes"};
    int seen_at[k_count] = {};
    int line_no = 0;
    while (!text.empty()) {
        ++line_no;
        const std::size_t nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
        line = detail::trim(line);
        if (line.empty()) continue;
        const std::size_t eq = line.find('=');
        if (eq == std::string_view::npos)
            detail::model_error(source, line_no, {}, "expected 'key = value', got '" + std::string(line) + "'");
        const std::string_view key = detail::trim(line.substr(0, eq));
        const std::string_view val = detail::trim(line.substr(eq + 1));
        if (key.starts_with("correction.")) {
            detail::parse_correction(t, key, val, source, line_no);
            continue;
        }
        int id = -1;
        for (int i = 0; i < k_count; ++i)
            if (key == names[i]) id = i;
        if (id < 0) {
            std::string known;
            for (std::string_view n : names) known += (known.empty() ? "" : ", ") + std::string(n);
            detail::model_error(source, line_no, key,
                                "unknown key (known: " + known + ", correction.<collective>.<algorithm>.n<ranks>)");
        }
        if (seen_at[id] != 0)
            detail::model_error(source, line_no, key,
                                "given twice (first on line " + std::to_string(seen_at[id]) + ")");
        seen_at[id] = line_no;
        double v = 0;
        if (!detail::parse_number(val, v))
            detail::model_error(source, line_no, key, "expected a number, got '" + std::string(val) + "'");
        const bool is_int = id == k_rpn || id == k_ch || id == k_flat;
        const bool latency = id == k_ilat || id == k_xlat;
        const bool zero_ok = latency || id == k_rpn || id == k_local || id == k_flat || id == k_oneshot || id == k_small;
        if (!(v == v) || v > 1e300 || v < 0 || (!zero_ok && v == 0))
            detail::model_error(source, line_no, key,
                                std::string(zero_ok ? "expected a number >= 0" : "expected a number > 0") +
                                    ", got '" + std::string(val) + "'");
        if (is_int && (v != double(static_cast<long long>(v)) || v > 1 << 24))
            detail::model_error(source, line_no, key,
                                "expected a whole number up to 2^24, got '" + std::string(val) + "'");
        switch (id) {
        case k_rpn: t.ranks_per_node = int(v); break;
        case k_ilat: t.intra.latency_s = v; break;
        case k_ibw: t.intra.bandwidth_Bps = v; break;
        case k_xlat: t.inter.latency_s = v; break;
        case k_xbw: t.inter.bandwidth_Bps = v; break;
        case k_red: t.reduce_Bps = v; break;
        case k_ch: t.channels = int(v); break;
        case k_chunk: t.chunk_bytes = v; break;
        case k_local: t.local_Bps = v; break;
        case k_oneshot: t.one_shot_bytes = v; break;
        case k_small: t.small_bytes = v; break;
        case k_flat:
            if (v > 1) detail::model_error(source, line_no, key, "expected 0 or 1, got '" + std::string(val) + "'");
            t.flat_inter = v == 1;
            break;
        default: break;
        }
    }
    return t;
}

//! The largest model file load_file() reads (what chorus_calibrate writes is
//! well under 1 KiB).
inline constexpr std::uint64_t max_file_bytes = std::uint64_t(1) << 20;

//! parse() of the file at `path`; throws chorus::error (errc::invalid_argument)
//! naming the path when it is not a regular file, is larger than
//! max_file_bytes (1 MiB) or cannot be read.
inline topology load_file(const std::string& path) {
    const auto fail = [&](const std::string& why) {
        throw error(errc::invalid_argument, "chorus: model file '" + path + "' " + why);
    };
#if defined(__unix__) || defined(__APPLE__)
    // Before opening: opening a FIFO would block, a directory or device
    // (/dev/zero) never reads as a model.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) fail("cannot be read (no such file, or no access)");
    if (!S_ISREG(st.st_mode)) fail("is not a regular file (a directory, device or pipe)");
    if (std::uint64_t(st.st_size) > max_file_bytes)
        fail("is larger than " + std::to_string(max_file_bytes) + " bytes (1 MiB)");
#endif
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) fail("cannot be read (no such file, or no access)");
    std::string text;
    char buf[4096];
    std::size_t got = 0;
    bool too_large = false;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) {
        text.append(buf, got);
        if (text.size() > max_file_bytes) {
            too_large = true;
            break;
        }
    }
    const bool bad = std::ferror(f) != 0;
    std::fclose(f);
    if (too_large) fail("is larger than " + std::to_string(max_file_bytes) + " bytes (1 MiB)");
    if (bad) fail("could not be read (an I/O error, or not a regular file)");
    return parse(text, path);
}

//! The process-wide topology: the file named by CHORUS_MODEL (read once,
//! on first use), else default_topology(). A file that cannot be read or
//! parsed throws chorus::error from this call (and from every later one).
inline const topology& current() {
    static const topology t = [] {
        const char* path = std::getenv("CHORUS_MODEL");
        if (path != nullptr && *path != '\0') return load_file(path);
        return default_topology();
    }();
    return t;
}

//! Whether CHORUS_MODEL names a file (then current() is that file's
//! topology); a backend with figures of its own uses them otherwise.
inline bool model_file_given() {
    static const bool given = [] {
        const char* path = std::getenv("CHORUS_MODEL");
        return path != nullptr && *path != '\0';
    }();
    return given;
}

} // namespace chorus::model
