#pragma once
//! \file cli.hpp
//! The command line of the benchmark and tool programs (chorus_bench,
//! chorus_bench_mpi, chorus_bench_v, chorus_bench_gpu, chorus_calibrate,
//! chorus_sim), written once so that they read and report it alike:
//!  - an option table each program declares, the parser that reads argv
//!    against it, and the --help text printed from the same table (an option
//!    cannot be accepted yet missing from --help, or the reverse);
//!  - the value parsers: byte sizes with K/M/G/T suffixes, integers in a
//!    range, non-negative numbers, comma lists of names with "all", fixed
//!    choices; every error names the option as it was typed;
//!  - the collectives the programs measure, by name, with nccl-tests' bus
//!    bandwidth factors;
//!  - nccl-tests' command line and size semantics (nccl_rows, nccl_options,
//!    nccl_count, nccl_size_bytes, nccl_algbw/busbw, nccl_sizes), which the
//!    four benchmark programs read (the tools keep their own options).
//! Policies by name are the library's (chorus::policy_names,
//! chorus::policy_from_name): parse_policies only reads them.
//!
//! Hand-rolled rather than getopt_long: it keeps no global state, prints no
//! messages of its own (the programs decide where errors go, e.g. rank 0
//! only under MPI) and never reorders argv.

#include <chorus/algo/policy.hpp>
#include <chorus/core/collective.hpp>

#include <algorithm>
#include <charconv>
#include <ctime>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace chorus_cli {

//! Concatenates strings without operator+ (whose inlined form trips GCC 12's
//! -Wrestrict false positive at -O3, GCC bug 105651).
template <class... Parts>
std::string cat(const Parts&... parts) {
    std::string s;
    (s.append(std::string_view(parts)), ...);
    return s;
}

//! A bad command line: the program prints `what` and exits 2.
struct usage_error {
    std::string what;
};

// ---------------------------------------------------------------------------
// The option table, the parser and --help
// ---------------------------------------------------------------------------

//! One row of a program's option table.
struct option {
    //! The long name without "--", and the name the program dispatches on;
    //! empty: the row is a heading line of --help (its `help`), not an option.
    std::string_view name;
    char short_name = 0; //!< 0: no short form
    //! The value's placeholder in --help ("SIZE", "LIST"); empty: a switch,
    //! which takes no value.
    std::string_view arg = {};
    //! The --help text; '\n' starts a continuation line. Empty: left out of
    //! --help (an old spelling kept so that old command lines still run).
    std::string_view help = {};
};

//! An option as given on the command line.
struct given_option {
    const option* opt = nullptr;
    std::string flag;       //!< as typed, "-b" or "--minbytes": what an error message names
    std::string_view value; //!< into argv; empty for a switch
    bool is(std::string_view name) const { return opt->name == name; }
};

struct parsed_line {
    std::vector<given_option> given; //!< in command-line order
    bool help = false;               //!< the option named "help" was given: the rest was not read
};

//! Reads argv[1..] against `table`: `--name value`, `--name=value`,
//! `-x value` and `-xvalue` for options that take a value, `--name` and
//! `-x` for switches. Throws usage_error on an unknown option (or any
//! other argument: no program takes operands), a missing value, or a value
//! given to a switch.
inline parsed_line parse(int argc, char* const* argv, std::span<const option> table) {
    parsed_line out;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        const option* spec = nullptr;
        std::string flag;
        std::string_view value;
        bool has_value = false;
        if (arg.size() > 2 && arg.starts_with("--")) {
            std::string_view name = arg.substr(2);
            if (const std::size_t eq = name.find('='); eq != std::string_view::npos) {
                value = name.substr(eq + 1);
                name = name.substr(0, eq);
                has_value = true;
            }
            for (const option& o : table)
                if (!o.name.empty() && o.name == name) {
                    spec = &o;
                    break;
                }
            flag = cat("--", name);
        } else if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
            for (const option& o : table)
                if (!o.name.empty() && o.short_name == arg[1]) {
                    spec = &o;
                    break;
                }
            flag = arg.substr(0, 2);
            if (arg.size() > 2) {
                value = arg.substr(2);
                has_value = true;
            }
        }
        if (spec == nullptr) throw usage_error{cat("unknown option '", arg, "' (see --help)")};
        if (!spec->arg.empty() && !has_value) {
            if (i + 1 >= argc) throw usage_error{cat(flag, " needs a value")};
            value = argv[++i];
        } else if (spec->arg.empty() && has_value) {
            throw usage_error{cat(flag, " takes no value")};
        }
        if (spec->name == "help") {
            out.help = true;
            return out;
        }
        out.given.push_back({spec, std::move(flag), value});
    }
    return out;
}

//! For the end of a program's dispatch on given_option::is: a table row it
//! forgot to handle is a bug in the program, not a bad command line.
[[noreturn]] inline void unhandled(const given_option& g) {
    throw std::logic_error(cat("option ", g.flag, " is in the option table but not handled"));
}

//! The --help text: `usage`, then one line per listed option (the left
//! column "-x, --name ARG", the help aligned after it, lines longer than
//! `columns` broken) and heading rows as they are, then `epilog`.
inline void print_help(std::FILE* to, std::string_view usage, std::span<const option> table,
                       std::string_view epilog = {}, std::size_t columns = 110) {
    auto left = [](const option& o) {
        std::string s = o.short_name != 0 ? cat("  -", std::string_view(&o.short_name, 1), ", ") : "      ";
        s.append(cat("--", o.name));
        if (!o.arg.empty()) s.append(cat(" ", o.arg));
        return s;
    };
    std::size_t width = 0;
    for (const option& o : table)
        if (!o.name.empty() && !o.help.empty()) width = std::max(width, left(o).size() + 2);
    std::string text = cat(usage, "\n");
    for (const option& o : table) {
        if (o.help.empty()) continue;
        if (o.name.empty()) {
            text.append(cat(o.help, "\n"));
            continue;
        }
        std::string line = left(o);
        std::string_view help = o.help;
        while (!help.empty()) {
            line.resize(width, ' ');
            // Up to the next '\n'; a longer line (a generated list of names) breaks after its last
            // ',' or ' ' that keeps it within `columns`.
            std::size_t end = std::min(help.find('\n'), help.size());
            if (width + end > columns) {
                const std::size_t at = help.substr(0, columns - std::min(width, columns - 20)).find_last_of(", ");
                if (at != std::string_view::npos) end = at + 1;
            }
            std::string_view piece = help.substr(0, end);
            if (piece.ends_with(' ')) piece.remove_suffix(1);
            text.append(cat(line, piece, "\n"));
            help.remove_prefix(end);
            if (help.starts_with('\n') || help.starts_with(' ')) help.remove_prefix(1);
            line.clear();
        }
    }
    text.append(epilog);
    std::fputs(text.c_str(), to);
}

//! `a` quoted for a POSIX shell when it needs it, so that a printed command
//! line can be run again.
inline std::string quote_arg(std::string_view a) {
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                        "0123456789-_.,/=:+@%") == std::string_view::npos;
    if (plain) return std::string(a);
    std::string q = "'";
    for (char ch : a) {
        if (ch == '\'') q.append("'\\''");
        else q += ch;
    }
    q += '\'';
    return q;
}

//! The arguments joined by spaces (each quoted with quote_arg if `quote`):
//! the command line the programs echo in their output.
inline std::string join_args(std::span<char* const> args, bool quote = false) {
    std::string s;
    for (const char* a : args) {
        if (!s.empty()) s += ' ';
        s.append(quote ? quote_arg(a) : std::string(a));
    }
    return s;
}

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

//! A byte count: digits, then optionally K, M, G or T (powers of 1024, any
//! case, optionally followed by B, iB or b), or B alone.
inline std::uint64_t parse_bytes(std::string_view s, std::string_view flag) {
    const auto bad = [&] {
        return usage_error{cat(flag, ": expected a size such as 4096, 64K, 1M or 1G, got '", s, "'")};
    };
    if (s.empty()) throw bad();
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) throw usage_error{cat(flag, ": size too large: ", s)};
    if (ec != std::errc{}) throw bad();
    std::string_view suffix = s.substr(std::size_t(end - s.data()));
    int shift = 0;
    if (!suffix.empty()) {
        constexpr std::string_view units = "KMGT";
        const char u = suffix[0] >= 'a' && suffix[0] <= 'z' ? char(suffix[0] - 'a' + 'A') : suffix[0];
        if (const std::size_t k = units.find(u); k != std::string_view::npos) {
            shift = 10 * int(k + 1);
            suffix.remove_prefix(1);
        }
        if (!(suffix.empty() || suffix == "B" || suffix == "b" || (shift != 0 && suffix == "iB"))) throw bad();
    }
    if (v > (UINT64_MAX >> shift)) throw usage_error{cat(flag, ": size too large: ", s)};
    return v << shift;
}

//! A decimal integer in [lo, hi].
inline long long parse_int(std::string_view s, std::string_view flag, long long lo, long long hi) {
    long long v = 0;
    const auto [end, ec] = s.empty() ? std::from_chars_result{nullptr, std::errc::invalid_argument}
                                     : std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || v < lo || v > hi)
        throw usage_error{cat(flag, ": expected a whole number in [", std::to_string(lo), ", ", std::to_string(hi),
                              "], got '", s, "'")};
    return v;
}

//! A finite decimal number >= 0 (as from_chars reads it: 2, 0.5, 1e3).
inline double parse_number(std::string_view s, std::string_view flag) {
    double v = 0;
    const auto [end, ec] = s.empty() ? std::from_chars_result{nullptr, std::errc::invalid_argument}
                                     : std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || !(v >= 0) || v > 1e300)
        throw usage_error{cat(flag, ": expected a number >= 0, got '", s, "'")};
    return v;
}

//! The items of s between `sep`s, empty ones kept.
inline std::vector<std::string_view> split_list(std::string_view s, char sep = ',') {
    std::vector<std::string_view> out;
    while (true) {
        const std::size_t at = s.find(sep);
        out.push_back(s.substr(0, at));
        if (at == std::string_view::npos) break;
        s.remove_prefix(at + 1);
    }
    return out;
}

//! "a, b or c".
inline std::string one_of(std::span<const std::string_view> names) {
    std::string s;
    for (std::size_t i = 0; i < names.size(); ++i)
        s.append(cat(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ", names[i]));
    return s;
}

//! Which of `choices` s is, as an index.
inline std::size_t parse_choice(std::string_view s, std::string_view flag,
                                std::initializer_list<std::string_view> choices) {
    for (std::size_t i = 0; i < choices.size(); ++i)
        if (s == choices.begin()[i]) return i;
    throw usage_error{cat(flag, ": expected ", one_of({choices.begin(), choices.size()}), ", got '", s, "'")};
}

template <class List>
using item_of = std::remove_cvref_t<decltype(*std::begin(std::declval<const List&>()))>;

//! A comma list of the values in `all`, each spelt name(k) or as one of
//! `aliases`; the item "all" stands for every value of `all`, in that order.
//! Empty items are skipped; a list of none is an error. `what` names a
//! value in the error ("collective").
template <class List, class Name>
std::vector<item_of<List>> parse_names(std::string_view s, std::string_view flag, std::string_view what,
                                       const List& all, Name name,
                                       std::initializer_list<std::pair<std::string_view, item_of<List>>> aliases = {}) {
    std::vector<item_of<List>> out;
    for (const std::string_view item : split_list(s)) {
        if (item.empty()) continue;
        if (item == "all") {
            out.insert(out.end(), std::begin(all), std::end(all));
            continue;
        }
        bool found = false;
        for (const auto& k : all)
            if (!found && item == std::string_view(name(k))) {
                out.push_back(k);
                found = true;
            }
        for (const auto& [alias, k] : aliases)
            if (!found && item == alias) {
                out.push_back(k);
                found = true;
            }
        if (!found) {
            std::vector<std::string_view> names;
            for (const auto& k : all) names.emplace_back(name(k));
            names.emplace_back("all");
            throw usage_error{cat(flag, ": unknown ", what, " '", item, "' (expected ", one_of(names), ")")};
        }
    }
    if (out.empty()) throw usage_error{cat(flag, ": an empty list")};
    return out;
}

//! The names of `list` (name(k) for each k), comma-separated: the value
//! lists --help shows, taken from the vocabulary the parser accepts.
template <class List, class Name>
std::string names_of(const List& list, Name name) {
    std::string s;
    for (const auto& k : list) s.append(cat(s.empty() ? "" : ",", name(k)));
    return s;
}
//! The same for a list of names (chorus::policy_names).
template <class List>
std::string names_of(const List& list) {
    return names_of(list, [](std::string_view n) { return n; });
}

//! The names of chorus::policy_names that `keep` accepts (all without it),
//! in that order: what a program's --algo takes.
inline std::vector<std::string_view> known_policies(bool (*keep)(std::string_view) = nullptr) {
    std::vector<std::string_view> known;
    for (const char* p : chorus::policy_names)
        if (keep == nullptr || keep(p)) known.emplace_back(p);
    return known;
}

//! The --help of an --algo option: known_policies(keep), its default,
//! then `note` (what the program does with them).
inline std::string policies_help(bool (*keep)(std::string_view), std::string_view dflt, std::string_view note) {
    return cat(names_of(known_policies(keep)), " or all (default ", dflt, "); ", note);
}

//! A comma list of known_policies(keep); "all" stands for all of them.
inline std::vector<std::string> parse_policies(std::string_view s, std::string_view flag,
                                               bool (*keep)(std::string_view) = nullptr) {
    std::vector<std::string> out;
    for (const std::string_view p :
         parse_names(s, flag, "algorithm", known_policies(keep), [](std::string_view n) { return n; }))
        out.emplace_back(p);
    return out;
}

// ---------------------------------------------------------------------------
// The collectives the programs measure
// ---------------------------------------------------------------------------

//! The collectives with a fixed count per call (the "v" and all_to_all
//! forms are measured by chorus_bench_v and chorus_sim alone).
enum class coll_kind { all_reduce, all_gather, reduce_scatter, broadcast, reduce };
//! In the order "all" lists them.
inline constexpr coll_kind all_colls[] = {coll_kind::all_reduce, coll_kind::all_gather, coll_kind::reduce_scatter,
                                          coll_kind::broadcast, coll_kind::reduce};

constexpr chorus::collective to_collective(coll_kind c) {
    switch (c) {
    case coll_kind::all_reduce: return chorus::collective::all_reduce;
    case coll_kind::all_gather: return chorus::collective::all_gather;
    case coll_kind::reduce_scatter: return chorus::collective::reduce_scatter;
    case coll_kind::broadcast: return chorus::collective::broadcast;
    case coll_kind::reduce: return chorus::collective::reduce;
    }
    return chorus::collective::all_reduce;
}

//! The library's name of the collective ("all_reduce").
constexpr const char* coll_name(coll_kind c) { return chorus::collective_name(to_collective(c)); }

//! A row's per-call count is per rank for these (nccl-tests' convention):
//! all_gather's input and reduce_scatter's output.
constexpr bool coll_count_per_rank(coll_kind c) {
    return c == coll_kind::all_gather || c == coll_kind::reduce_scatter;
}

//! The calibration tools' float calls: the per-call count of a call of
//! nccl-tests size `bytes` on n ranks (the block for AllGather and
//! ReduceScatter, the buffer otherwise; 0: too small), and the size that
//! count really has (a whole number of floats per block).
inline std::size_t call_count(coll_kind k, double bytes, int n) {
    const std::size_t elems = std::size_t(bytes) / sizeof(float);
    return coll_count_per_rank(k) ? elems / std::size_t(n) : elems;
}
inline double call_bytes(coll_kind k, std::size_t count, int n) {
    return double(count) * sizeof(float) * (coll_count_per_rank(k) ? double(n) : 1.0);
}

//! nccl-tests doc/PERFORMANCE.md: busbw = algbw * factor on n ranks.
inline double bus_factor(coll_kind c, int n) {
    switch (c) {
    case coll_kind::all_reduce: return 2.0 * (n - 1) / n;
    case coll_kind::all_gather:
    case coll_kind::reduce_scatter: return double(n - 1) / n;
    case coll_kind::broadcast:
    case coll_kind::reduce: return 1.0;
    }
    return 1.0;
}

//! A --collectives list of `allowed` (every one by default), by coll_name.
inline std::vector<coll_kind> parse_collectives(std::string_view s, std::string_view flag,
                                                std::span<const coll_kind> allowed = all_colls) {
    return parse_names(s, flag, "collective", allowed, coll_name);
}

// ---------------------------------------------------------------------------
// What the benchmarks sweep
// ---------------------------------------------------------------------------

//! A sweep, read the nccl-tests way (-b -e -f -n -w, --reps) with
//! --collectives; a program's defaults are these initialisers or what its
//! options' constructor sets. The benchmarks read it through nccl_rows
//! (nccl_options adds nccl-tests' other options); sweep_rows reads it alone.
struct sweep_options {
    std::vector<coll_kind> colls{std::begin(all_colls), std::end(all_colls)};
    std::size_t min_bytes = 8;
    std::size_t max_bytes = std::size_t(64) << 20;
    std::size_t step_factor = 2;
    int iters = 20;
    int warmup = 5;
    int reps = 1;            //!< timed loops per measurement; the fastest counts
    bool reps_given = false; //!< --reps was given (the interleaved comparisons default to 3)
};

//! Sweep sizes: min, min*f, ... up to max (nccl_sizes: with -i too).
inline std::vector<std::size_t> sweep_sizes(const sweep_options& o) {
    std::vector<std::size_t> sizes;
    for (std::size_t s = o.min_bytes; s <= o.max_bytes; s *= o.step_factor) {
        sizes.push_back(s);
        if (s > o.max_bytes / o.step_factor) break;
    }
    return sizes;
}

//! "64M": a byte count as parse_bytes reads it, in the largest unit that divides it.
inline std::string size_text(std::uint64_t b) {
    constexpr std::string_view units = "KMGT";
    std::size_t k = 0;
    while (k < units.size() && b != 0 && b % 1024 == 0) {
        b /= 1024;
        ++k;
    }
    return k == 0 ? std::to_string(b) : cat(std::to_string(b), units.substr(k - 1, 1));
}

//! The sweep's rows of a program's option table, their --help naming the
//! program's defaults `d`, and the reading of them. `with_reps`: --reps
//! too; `colls`: what --collectives takes. It holds the help texts, so the
//! program keeps it (a static) for as long as its table.
class sweep_rows {
public:
    sweep_rows(const sweep_options& d, bool with_reps, std::span<const coll_kind> colls = all_colls)
        : help_{cat("smallest message, bytes; suffixes K M G (default ", size_text(d.min_bytes), ")"),
                cat("largest message (default ", size_text(d.max_bytes), ")"),
                cat("multiply the size by N (>= 2) each row (default ", std::to_string(d.step_factor), ")"),
                cat("timed calls per size (default ", std::to_string(d.iters), ")"),
                cat("untimed calls before timing (default ", std::to_string(d.warmup), ")"),
                cat("time R loops of -n calls, keep the fastest (default ", std::to_string(d.reps),
                    "; 3 in the interleaved automatic comparison)"),
                cat(names_of(colls, coll_name), " or all (default ", default_colls(colls, d.colls), ")")},
          with_reps_(with_reps), colls_(colls) {}
    sweep_rows(const sweep_rows&) = delete;
    sweep_rows& operator=(const sweep_rows&) = delete;

    //! A whole table: these rows, then `rest`.
    std::vector<option> then(std::initializer_list<option> rest) const {
        std::vector<option> table = {
            {"minbytes", 'b', "SIZE", help_[0]},
            {"maxbytes", 'e', "SIZE", help_[1]},
            {"stepfactor", 'f', "N", help_[2]},
            {"iters", 'n', "N", help_[3]},
            {"warmup", 'w', "N", help_[4]},
            {"warmup_iters", 0, "N"}, // nccl-tests' spelling of --warmup
        };
        if (with_reps_) table.push_back({"reps", 0, "R", help_[5]});
        table.push_back({"collectives", 0, "LIST", help_[6]});
        table.insert(table.end(), rest.begin(), rest.end());
        return table;
    }

    //! Reads `g` into `o` if it is one of these options; false if not.
    bool read(const given_option& g, sweep_options& o) const {
        if (g.is("minbytes")) o.min_bytes = parse_bytes(g.value, g.flag);
        else if (g.is("maxbytes")) o.max_bytes = parse_bytes(g.value, g.flag);
        else if (g.is("stepfactor")) o.step_factor = std::size_t(parse_int(g.value, g.flag, 2, 1 << 20));
        else if (g.is("iters")) o.iters = int(parse_int(g.value, g.flag, 1, 1 << 30));
        else if (g.is("warmup") || g.is("warmup_iters")) o.warmup = int(parse_int(g.value, g.flag, 0, 1 << 30));
        else if (g.is("reps")) {
            o.reps = int(parse_int(g.value, g.flag, 1, 1000));
            o.reps_given = true;
        } else if (g.is("collectives")) {
            o.colls = parse_collectives(g.value, g.flag, colls_);
        } else {
            return false;
        }
        return true;
    }

private:
    //! "all" when the default is every collective the program takes.
    static std::string default_colls(std::span<const coll_kind> colls, const std::vector<coll_kind>& d) {
        return std::equal(colls.begin(), colls.end(), d.begin(), d.end()) ? "all" : names_of(d, coll_name);
    }

    std::string help_[7];
    bool with_reps_;
    std::span<const coll_kind> colls_;
};

// ---------------------------------------------------------------------------
// nccl-tests' command line and size semantics
// ---------------------------------------------------------------------------
//
// What nccl-tests' src/common.cu reads (its getopt table) and what its
// per-collective files define (the counts behind the size column, algbw and
// busbw), so that chorus's benchmarks take the same command lines and print
// figures that compare with nccl-tests' own. chorus-only options are long
// options only; every nccl-tests short option means what it means there, or
// is accepted with an effect the program states in its header (flag_note).

//! nccl-tests' per-rank count for a row of nominal size `bytes` (the -b/-e
//! sweep value) of elements of `elem` bytes on `n` ranks: AllReduce,
//! Broadcast and Reduce: bytes / elem; AllGather and ReduceScatter (and
//! AlltoAll): bytes / elem / n, rounded down to whole 16-byte groups
//! (`& ~(16/elem - 1)`), as its *GetCollByteCount functions round it. 0: the
//! row moves nothing (nccl-tests still prints it; chorus skips it).
inline std::size_t nccl_count(coll_kind c, std::size_t bytes, std::size_t elem, int n) {
    const std::size_t count = bytes / elem;
    if (!coll_count_per_rank(c)) return count;
    const std::size_t group = elem < 16 ? 16 / elem : 1;
    return count / std::size_t(n) / group * group;
}

//! nccl-tests' size column for a per-rank count: the larger of the send
//! and receive buffers, i.e. the whole buffer (AllGather: the receive
//! buffer, n * count elements; ReduceScatter: the send buffer, n * count;
//! the others: count).
inline std::size_t nccl_size_bytes(coll_kind c, std::size_t count, std::size_t elem, int n) {
    return (coll_count_per_rank(c) ? count * std::size_t(n) : count) * elem;
}

//! nccl-tests' algbw, GB/s (1e9 B/s): the size column over the time.
inline double nccl_algbw(coll_kind c, std::size_t count, std::size_t elem, int n, double seconds) {
    return seconds > 0 ? double(nccl_size_bytes(c, count, elem, n)) / seconds / 1e9 : 0.0;
}

//! nccl-tests' busbw: algbw * bus_factor (AllReduce 2(n-1)/n, AllGather and
//! ReduceScatter (n-1)/n, Broadcast and Reduce 1).
inline double nccl_busbw(coll_kind c, std::size_t count, std::size_t elem, int n, double seconds) {
    return nccl_algbw(c, count, elem, n, seconds) * bus_factor(c, n);
}

//! The values of nccl-tests' options (its names; its defaults unless a
//! program sets others), on top of the sweep.
struct nccl_options : sweep_options {
    int nthreads = 1;                      //!< -t: threads per process
    int ngpus = 1;                         //!< -g: GPUs per thread
    bool nthreads_given = false, ngpus_given = false;
    std::size_t step_bytes = std::size_t(1) << 20; //!< -i: added per row when the factor is 1
    bool step_bytes_given = false, step_factor_given = false;
    int agg_iters = 1;         //!< -m: calls per timed iteration
    int run_cycles = 1;        //!< -N: times the whole sweep runs (0: until interrupted)
    int parallel_init = 0;     //!< -p
    int check = 1;             //!< -c: checked calls per row (0: none)
    int blocking = 0;          //!< -z: 0..3
    int stream_null = 0;       //!< -y
    int timeout_s = 0;         //!< -T: seconds (0: chorus's default deadline)
    int cudagraph = 0;         //!< -G: graph launches (0: eager)
    int report_cputime = 0;    //!< -C
    int report_timestamps = 0; //!< -S
    std::string output_file;   //!< -J
    int average = 1;           //!< -a: 0 rank 0, 1 mean, 2 min, 3 max over ranks
    int local_register = 0;    //!< -R
    int cta_policy = -1;       //!< -x
    int device_impl = 0;       //!< -D
    int device_cta_count = 16; //!< -V
    int memory_report = 0;     //!< -M
    int unalign = 0;           //!< -u: elements
    int per_iter_timing = 0;   //!< -I
    int per_iter_skip = 0;     //!< -K
    //! "-G 1: ignored: no CUDA graph on the threads backend": one line per
    //! given option the program has a note for, for its header.
    std::vector<std::string> notes;

    //! The calls one timed loop makes: -n iterations of -m calls.
    long long timed_calls() const { return (long long)iters * agg_iters; }
    //! Rows step by multiplying (nccl-tests: a factor > 1), else by adding -i.
    bool multiply() const { return step_factor > 1 && (step_factor_given || !step_bytes_given); }
};

//! The sizes of the sweep the nccl-tests way: min, then size * f while f > 1
//! (-f), else size + stepbytes (-i; also when -i is given without -f), up to
//! max. Throws usage_error past a million rows.
inline std::vector<std::size_t> nccl_sizes(const nccl_options& o) {
    std::vector<std::size_t> sizes;
    const bool mul = o.multiply();
    for (std::size_t s = o.min_bytes; s <= o.max_bytes;) {
        sizes.push_back(s);
        if (sizes.size() > 1000000) throw usage_error{"-b/-e/-i/-f: more than a million sizes"};
        if (mul ? s > o.max_bytes / o.step_factor : s > o.max_bytes - o.step_bytes) break;
        s = mul ? s * o.step_factor : s + o.step_bytes;
    }
    return sizes;
}

//! nccl-tests' configuration line, "# nThread 1 nGpus 1 minBytes 8 maxBytes
//! 134217728 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1
//! validation: 1 graph: 0", which scripts read.
inline std::string nccl_config_line(const nccl_options& o) {
    return cat("# nThread ", std::to_string(o.nthreads), " nGpus ", std::to_string(o.ngpus), " minBytes ",
               std::to_string(o.min_bytes), " maxBytes ", std::to_string(o.max_bytes), " step: ",
               std::to_string(o.multiply() ? o.step_factor : o.step_bytes), o.multiply() ? "(factor)" : "(bytes)",
               " warmup iters: ", std::to_string(o.warmup), " iters: ", std::to_string(o.iters), " agg iters: ",
               std::to_string(o.agg_iters), " validation: ", std::to_string(o.check), " graph: ",
               std::to_string(o.cudagraph));
}

//! What -a's value does to per-rank times (seconds): rank 0's (0), the
//! mean (1), the least (2) or the greatest (3), as nccl-tests combines them.
inline double nccl_combine(std::span<const double> per_rank, int average) {
    if (per_rank.empty()) return 0;
    switch (average) {
    case 0: return per_rank[0];
    case 2: return *std::min_element(per_rank.begin(), per_rank.end());
    case 3: return *std::max_element(per_rank.begin(), per_rank.end());
    default: {
        double s = 0;
        for (const double x : per_rank) s += x;
        return s / double(per_rank.size());
    }
    }
}

//! -a's value in words, for headers: "the mean over ranks".
inline const char* nccl_average_name(int average) {
    switch (average) {
    case 0: return "rank 0's";
    case 2: return "the least over ranks";
    case 3: return "the greatest over ranks";
    default: return "the mean over ranks";
    }
}

//! A "YYYY-MM-DD HH:MM:SS" stamp of now (local time): -S's column.
inline std::string timestamp_now() {
    char buf[32] = "";
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    if (localtime_r(&t, &tm) != nullptr) std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
    return buf;
}

//! Writes `text` to the file `path`, or to stdout when `path` is empty or
//! "-"; `flag` names the option in the errors (usage_error). Returns
//! whether a file was written.
inline bool write_output(const std::string& path, const std::string& text, const char* flag = "-o") {
    if (path.empty() || path == "-") {
        std::fputs(text.c_str(), stdout);
        return false;
    }
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) throw usage_error{cat(flag, ": cannot write ", path)};
    std::fputs(text.c_str(), f);
    if (std::fclose(f) != 0) throw usage_error{cat(flag, ": error writing ", path)};
    return true;
}

//! A "YYYY-MM-DD HH:MM:SS UTC" stamp of now: the model files' header.
inline std::string utc_now() {
    char buf[32] = "";
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    if (gmtime_r(&t, &tm) != nullptr) std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return buf;
}

//! What a program does with one nccl-tests option where that differs from
//! nccl-tests' meaning ("ignored: no CUDA graph on the threads backend"):
//! appended to its --help and, when the option is given, printed in the
//! header (nccl_options::notes).
struct flag_note {
    std::string_view name; //!< the option's long name
    std::string_view note;
};

//! The rows of nccl-tests' options (-t -g -b -e -i -f -n -m -w -N -p -c -z
//! -y -T -G -C -S -J -a -R -x -D -V -M -u -I -K, with its long names), then
//! chorus's --reps and --collectives, with a program's defaults `d` and
//! notes. -o, -d, -r and -h are the program's own rows (their values
//! differ per backend). Like sweep_rows, it holds the help texts: keep it
//! (a static) for as long as the table.
class nccl_rows {
public:
    nccl_rows(const nccl_options& d, std::span<const coll_kind> colls, std::initializer_list<flag_note> notes,
              bool with_reps = true)
        : notes_(notes), with_reps_(with_reps), colls_(colls) {
        const auto dflt = [](long long v) { return cat(" (default ", std::to_string(v), ")"); };
        for (const row& r : rows()) {
            std::string h;
            const std::string_view n = r.name;
            if (n == "nthreads") h = cat("threads per process", dflt(d.nthreads));
            else if (n == "ngpus") h = cat("GPUs per thread", dflt(d.ngpus));
            else if (n == "minbytes")
                h = cat("smallest size, bytes; suffixes K M G (default ", size_text(d.min_bytes),
                        "); the size is nccl-tests' (AllGather: the whole receive buffer, ReduceScatter: the "
                        "whole send buffer, others: the buffer)");
            else if (n == "maxbytes") h = cat("largest size (default ", size_text(d.max_bytes), ")");
            else if (n == "stepbytes")
                h = cat("add this to the size each row when the factor is 1, or when -i is given without -f "
                        "(default ", size_text(d.step_bytes), ")");
            else if (n == "stepfactor")
                h = cat("multiply the size by N each row; 1: add -i instead", dflt(long(d.step_factor)));
            else if (n == "iters") h = cat("timed iterations per size", dflt(d.iters));
            else if (n == "agg_iters") h = cat("calls per timed iteration; time = loop / (iters x agg_iters)",
                                               dflt(d.agg_iters));
            else if (n == "warmup_iters") h = cat("untimed calls before each size's timing", dflt(d.warmup));
            else if (n == "run_cycles") h = cat("run the whole sweep N times, printing each (0: until interrupted)",
                                                dflt(d.run_cycles));
            else if (n == "parallel_init") h = cat("set up the ranks' communicators in parallel", dflt(d.parallel_init));
            else if (n == "check") h = cat("checked calls per row, counted in #wrong (0: none)", dflt(d.check));
            else if (n == "blocking")
                h = cat("1 wait and barrier after each call, 2 wait after each call, 3 wait and barrier after "
                        "each iteration (-n), barrier not timed", dflt(d.blocking));
            else if (n == "stream_null") h = cat("issue on the null stream", dflt(d.stream_null));
            else if (n == "timeout") h = cat("seconds a rank may wait before the run fails (0: chorus's default deadline)",
                                             dflt(d.timeout_s));
            else if (n == "cudagraph") h = cat("capture the -n iterations in a CUDA graph and time N launches of it "
                                               "(0: eager calls)", dflt(d.cudagraph));
            else if (n == "report_cputime") h = cat("report the host's time to issue the calls", dflt(d.report_cputime));
            else if (n == "report_timestamps") h = cat("a timestamp column at the end of each row",
                                                       dflt(d.report_timestamps));
            else if (n == "output_file") h = "also write the results as JSON to FILE (chorus's layout, not nccl-tests')";
            else if (n == "average")
                h = cat("the time reported is rank 0's (0), the mean (1), the least (2) or the greatest (3) "
                        "over ranks", dflt(d.average));
            else if (n == "local_register") h = cat("register the buffers (1 local, 2 symmetric)", dflt(d.local_register));
            else if (n == "cta_policy") h = "NCCL's CTA policy";
            else if (n == "device_implementation") h = cat("NCCL's device-API implementation", dflt(d.device_impl));
            else if (n == "device_cta_count") h = cat("CTAs of the device-API implementation", dflt(d.device_cta_count));
            else if (n == "memory") h = cat("report memory use", dflt(d.memory_report));
            else if (n == "unalign") h = cat("start the buffers this many elements past their alignment",
                                             dflt(d.unalign));
            else if (n == "per_iter_timing") h = cat("per-iteration timing columns", dflt(d.per_iter_timing));
            else if (n == "per_iter_skip") h = cat("leading iterations -I leaves out", dflt(d.per_iter_skip));
            else if (n == "reps")
                h = cat("chorus: time R loops of -n iterations, keep the fastest (default ", std::to_string(d.reps),
                        "; 3 in the interleaved automatic comparison)");
            else if (n == "collectives")
                h = cat("chorus: ", names_of(colls, coll_name), " or all (default ",
                        std::equal(colls.begin(), colls.end(), d.colls.begin(), d.colls.end())
                            ? std::string("all")
                            : names_of(d.colls, coll_name),
                        ")");
            if (!h.empty())
                if (const std::string_view why = note(n); !why.empty()) h.append(cat("\nhere: ", why));
            help_.push_back(std::move(h));
        }
    }
    nccl_rows(const nccl_rows&) = delete;
    nccl_rows& operator=(const nccl_rows&) = delete;

    //! A whole table: these rows, then `rest`.
    std::vector<option> then(std::initializer_list<option> rest) const {
        std::vector<option> table;
        std::size_t k = 0;
        for (const row& r : rows()) {
            const std::string& h = help_[k++];
            if (r.name == "reps" && !with_reps_) continue;
            table.push_back({r.name, r.short_name, r.arg, h});
        }
        table.insert(table.end(), rest.begin(), rest.end());
        return table;
    }

    //! Reads `g` into `o` if it is one of these options; false if not.
    bool read(const given_option& g, nccl_options& o) const {
        const std::string_view v = g.value;
        const std::string& f = g.flag;
        const auto flag01 = [&] { return int(parse_int(v, f, 0, 1)); };
        constexpr long long most = 1LL << 30;
        if (g.is("nthreads")) {
            o.nthreads = int(parse_int(v, f, 1, 4096));
            o.nthreads_given = true;
        } else if (g.is("ngpus")) {
            o.ngpus = int(parse_int(v, f, 1, 4096));
            o.ngpus_given = true;
        } else if (g.is("minbytes")) o.min_bytes = parse_bytes(v, f);
        else if (g.is("maxbytes")) o.max_bytes = parse_bytes(v, f);
        else if (g.is("stepbytes")) {
            o.step_bytes = parse_bytes(v, f);
            if (o.step_bytes == 0) throw usage_error{cat(f, ": the step must be at least 1 byte")};
            o.step_bytes_given = true;
        } else if (g.is("stepfactor")) {
            o.step_factor = std::size_t(parse_int(v, f, 1, 1 << 20));
            o.step_factor_given = true;
        } else if (g.is("iters")) o.iters = int(parse_int(v, f, 1, most));
        else if (g.is("agg_iters")) o.agg_iters = int(parse_int(v, f, 1, 1 << 20));
        else if (g.is("warmup_iters") || g.is("warmup")) o.warmup = int(parse_int(v, f, 0, most));
        else if (g.is("run_cycles")) o.run_cycles = int(parse_int(v, f, 0, most));
        else if (g.is("parallel_init")) o.parallel_init = flag01();
        else if (g.is("check")) o.check = int(parse_int(v, f, 0, 1 << 20));
        else if (g.is("blocking")) o.blocking = int(parse_int(v, f, 0, 3));
        else if (g.is("stream_null")) o.stream_null = flag01();
        else if (g.is("timeout")) o.timeout_s = int(parse_int(v, f, 0, 1 << 24));
        else if (g.is("cudagraph")) o.cudagraph = int(parse_int(v, f, 0, 1 << 20));
        else if (g.is("report_cputime")) o.report_cputime = flag01();
        else if (g.is("report_timestamps")) o.report_timestamps = flag01();
        else if (g.is("output_file")) {
            if (v.empty()) throw usage_error{cat(f, ": an empty file name")};
            o.output_file = std::string(v);
        } else if (g.is("average")) {
            if (v.empty() || v.find_first_not_of("0123456789") != std::string_view::npos)
                throw usage_error{cat(f, ": expected 0, 1, 2 or 3 (rank 0, mean, least, greatest over ranks), got '",
                                      v, "'; the algorithm is --algo")};
            o.average = int(parse_int(v, f, 0, 3));
        } else if (g.is("local_register")) o.local_register = int(parse_int(v, f, 0, 2));
        else if (g.is("cta_policy")) o.cta_policy = int(parse_int(v, f, 0, 2));
        else if (g.is("device_implementation")) o.device_impl = int(parse_int(v, f, 0, 1 << 20));
        else if (g.is("device_cta_count")) o.device_cta_count = int(parse_int(v, f, 1, 127));
        else if (g.is("memory")) o.memory_report = flag01();
        else if (g.is("unalign")) o.unalign = int(parse_int(v, f, 0, 4096));
        else if (g.is("per_iter_timing")) o.per_iter_timing = flag01();
        else if (g.is("per_iter_skip")) o.per_iter_skip = int(parse_int(v, f, 0, most));
        else if (g.is("reps")) {
            o.reps = int(parse_int(v, f, 1, 1000));
            o.reps_given = true;
        } else if (g.is("collectives")) {
            o.colls = parse_collectives(v, f, colls_);
        } else {
            return false;
        }
        if (const std::string_view why = note(g.opt->name); !why.empty())
            o.notes.push_back(cat(g.flag, g.value.empty() ? "" : " ", g.value, ": ", why));
        return true;
    }

    //! Checks what no program can run: -b > -e, a zero size stepped by a factor.
    static void check_sweep(const nccl_options& o) {
        if (o.min_bytes > o.max_bytes)
            throw usage_error{cat("-b/--minbytes ", std::to_string(o.min_bytes), " is larger than -e/--maxbytes ",
                                  std::to_string(o.max_bytes))};
        if (o.min_bytes == 0 && o.multiply())
            throw usage_error{"-b/--minbytes 0 with a step factor: the size would never grow (use -b 1 or -i)"};
    }

private:
    struct row {
        std::string_view name;
        char short_name;
        std::string_view arg;
    };
    //! nccl-tests' options in its --help order; "warmup" is chorus's older
    //! spelling of --warmup_iters (left out of --help).
    static std::span<const row> rows() {
        static constexpr row r[] = {
            {"nthreads", 't', "N"},
            {"ngpus", 'g', "N"},
            {"minbytes", 'b', "SIZE"},
            {"maxbytes", 'e', "SIZE"},
            {"stepbytes", 'i', "SIZE"},
            {"stepfactor", 'f', "N"},
            {"iters", 'n', "N"},
            {"agg_iters", 'm', "N"},
            {"warmup_iters", 'w', "N"},
            {"warmup", 0, "N"},
            {"run_cycles", 'N', "N"},
            {"parallel_init", 'p', "0|1"},
            {"check", 'c', "N"},
            {"blocking", 'z', "0..3"},
            {"stream_null", 'y', "0|1"},
            {"timeout", 'T', "SEC"},
            {"cudagraph", 'G', "N"},
            {"report_cputime", 'C', "0|1"},
            {"report_timestamps", 'S', "0|1"},
            {"output_file", 'J', "FILE"},
            {"average", 'a', "0..3"},
            {"local_register", 'R', "0..2"},
            {"cta_policy", 'x', "0..2"},
            {"device_implementation", 'D', "N"},
            {"device_cta_count", 'V', "N"},
            {"memory", 'M', "0|1"},
            {"unalign", 'u', "N"},
            {"per_iter_timing", 'I', "0|1"},
            {"per_iter_skip", 'K', "N"},
            {"reps", 0, "R"},
            {"collectives", 0, "LIST"},
        };
        return r;
    }
    std::string_view note(std::string_view name) const {
        for (const flag_note& n : notes_)
            if (n.name == name) return n.note;
        return {};
    }

    std::vector<flag_note> notes_;
    std::vector<std::string> help_; //!< per rows() entry; empty: left out of --help
    bool with_reps_;
    std::span<const coll_kind> colls_;
};

} // namespace chorus_cli
